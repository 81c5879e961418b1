"""Exactly-once under injected faults, and the checker failing without idempotence (docs/rules.md §2-3)."""

from __future__ import annotations

import json
import os
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


def test_crashes_kill_the_broker_mid_write_and_every_acknowledged_record_survives():
    report = simulate(producers=4, partitions=6, records=6000, faults=MIXES["crashes"], seed=4)
    network = report.network
    assert network.crashes >= 3 and network.torn_writes == network.crashes and network.bytes_lost > 0
    assert report.check.exactly_once and report.check.acked == 6000, report.to_dict()


def test_a_machine_crash_keeps_acks_all_records_only_when_they_were_fsynced():
    faults = Faults(drop_response=0.05, crash_every=1500, crash_kind="machine")
    durable = simulate(producers=4, partitions=6, records=6000, faults=faults, seed=1, fsync=True)
    assert durable.check.exactly_once and durable.check.acked == 6000, durable.to_dict()
    # Without fsync a power loss takes back acknowledged records (one broker has no replicas to keep them),
    # but never duplicates or reorders: the producers bump their epoch and go on.
    volatile = simulate(producers=4, partitions=6, records=6000, faults=faults, seed=1, fsync=False)
    check_ = volatile.check
    assert check_.lost_acked > 0 and volatile.network.bytes_lost > 0
    assert (check_.duplicates, check_.out_of_order, check_.wrong_offsets) == (0, 0, 0)
    assert check_.written == check_.acked - check_.lost_acked


def test_a_killed_broker_writes_no_checkpoint_and_its_torn_tail_is_cut_at_restart(tmp_path):
    from idemcore.broker import Broker
    from idemcore.broker.written_ends import rewind_written_end
    from idemcore.record.batch import RecordBatch

    def produce(broker, sequence):
        from idemcore.net.messages import ProduceRequest

        batch = RecordBatch("t", 0, [b"x%d" % sequence], producer_id=1, producer_epoch=0, base_sequence=sequence)
        return broker.handle(ProduceRequest((batch,))).responses[0].error_code

    broker = Broker({"t": 1}, data_dir=tmp_path, fsync=False)
    assert produce(broker, 0) == produce(broker, 1) == 0
    checkpoint = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    path, start = broker.log("t", 0).path, broker.log("t", 0).last_append_position
    broker.kill()
    # A clean close would record offset 2.
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == checkpoint
    os.truncate(path, start + 5)  # as if killed while writing the second batch: its end was never recorded
    rewind_written_end(tmp_path, "t-0", 1)
    with Broker({"t": 1}, data_dir=tmp_path) as again:
        assert again.log("t", 0).truncated_bytes == 5 and again.log("t", 0).log_end_offset == 1
        assert produce(again, 1) == 0  # the torn batch is appended again, once


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
         "3000", "--crash-every", "1000", "--seed", "3", "--crash-kind", "machine", "--fsync", "--json"],
        capture_output=True, text=True, check=True)
    report = json.loads(result.stdout)
    assert report["acks_durable"] and report["promise_kept"] and report["network"]["torn_writes"] >= 1
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
