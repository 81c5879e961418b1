"""Exactly-once under injected faults, and the checker failing without idempotence (docs/rules.md §2-3)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from idemcore.sim import Faults, simulate
from idemcore.sim.checker import SentRecord, check

MIXES = {
    "losses": Faults(drop_request=0.05, drop_response=0.08),
    "reorder-duplicate": Faults(reorder=0.1, duplicate=0.05, retriable_error=0.03),
    "crashes": Faults(drop_response=0.05, crash_every=1500),
    "everything": Faults(drop_request=0.02, drop_response=0.05, reorder=0.05, duplicate=0.02,
                         retriable_error=0.02, crash_every=2500),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_idempotent_producers_deliver_exactly_once(mix, seed):
    report = simulate(producers=4, partitions=6, records=6000, faults=MIXES[mix], seed=seed)
    check_ = report.check
    assert check_.exactly_once, report.to_dict()
    assert check_.sent == 6000 and check_.acked > 5000
    assert check_.written >= check_.acked


def test_without_idempotence_the_same_faults_show_duplicates_and_reordering():
    report = simulate(producers=4, partitions=6, records=6000, faults=MIXES["everything"], seed=1,
                      idempotence=False)
    assert report.check.duplicates > 0
    assert report.check.out_of_order > 0


def test_runs_are_deterministic_per_seed():
    first = simulate(producers=2, partitions=3, records=2000, faults=MIXES["everything"], seed=5).to_dict()
    second = simulate(producers=2, partitions=3, records=2000, faults=MIXES["everything"], seed=5).to_dict()
    for volatile in ("seconds", "records_per_s"):
        first.pop(volatile), second.pop(volatile)
    assert first == second


def test_checker_sees_loss_duplication_and_reordering():
    class FakeLog:
        topic, partition = "t", 0

        def __init__(self, values):
            self.values = values

        def records(self):
            return ((offset, None, value, None) for offset, value in enumerate(self.values))

    sent = {0: [SentRecord("t-0", 0), SentRecord("t-0", 1), SentRecord("t-0", 2)]}
    report = check(sent, [FakeLog([b"0:0:", b"0:2:", b"0:1:", b"0:2:"])])
    assert (report.duplicates, report.out_of_order, report.lost_acked, report.wrong_offsets) == (1, 1, 0, 2)
    report = check(sent, [FakeLog([b"0:0:"])])
    assert report.lost_acked == 2


def test_simulate_cli_json():
    result = subprocess.run(
        [sys.executable, "-m", "idemcore.cli", "simulate", "--producers", "2", "--partitions", "4", "--records",
         "3000", "--crash-every", "1000", "--seed", "3", "--json"], capture_output=True, text=True, check=True)
    report = json.loads(result.stdout)
    for key in ("sent", "acked", "written", "duplicates", "lost_acked", "out_of_order", "retries", "epoch_bumps",
                "records_per_s"):
        assert key in report
    assert report["sent"] == 3000 and report["duplicates"] == 0 and report["lost_acked"] == 0
    assert report["out_of_order"] == 0 and report["crashes"] >= 1


def test_simulate_cli_without_idempotence_reports_duplicates():
    result = subprocess.run(
        [sys.executable, "-m", "idemcore.cli", "simulate", "--producers", "2", "--partitions", "4", "--records",
         "3000", "--crash-every", "1000", "--drop-response", "0.2", "--no-idempotence", "--json"],
        capture_output=True, text=True, check=True)
    assert json.loads(result.stdout)["duplicates"] > 0


def test_simulate_cli_rejects_bad_probability():
    result = subprocess.run([sys.executable, "-m", "idemcore.cli", "simulate", "--drop-request", "1.5"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "probability" in result.stderr
