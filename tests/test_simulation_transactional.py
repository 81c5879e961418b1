"""simulate --transactional: a read-process-write application under network faults, broker crashes and instances
killed mid-transaction (their replacements fence them; they keep trying) keeps exactly-once; the same
application without transactions does not."""

from __future__ import annotations

import json

from idemcore.cli import main
from idemcore.sim import Faults
from idemcore.sim.transactional import simulate_transactional

FAULTS = Faults(drop_request=0.02, drop_response=0.05, reorder=0.05, duplicate=0.02, retriable_error=0.01,
                crash_every=150)
ZERO_KEYS = ("lost", "duplicates", "aborted_reads", "torn_transactions", "zombie_writes", "offset_mismatches")


def test_exactly_once_with_crashes_zombies_and_a_faulty_network():
    totals = {"crashes": 0, "instance_crashes": 0, "zombie_attempts": 0, "explicit_aborts": 0}
    for seed in range(6):
        report = simulate_transactional(apps=2, partitions=4, records=300, faults=FAULTS, seed=seed,
                                        instance_crash=0.1, abort_rate=0.1)
        result = report.to_dict()
        assert result["fatal_errors"] == 0, (seed, result)
        # Each killed instance's transaction is aborted by its replacement's fence; the others the application
        # aborted (and processed again: the rewind to the committed offsets is what keeps them from being lost).
        assert result["aborted_transactions"] == result["instance_crashes"] + result["explicit_aborts"]
        assert {key: result[key] for key in ZERO_KEYS} == dict.fromkeys(ZERO_KEYS, 0), (seed, result)
        assert result["output_records"] == 300, (seed, result)
        for key in totals:
            totals[key] += result[key]
    # The faults happened: broker crashes, killed instances, zombies, and aborts by the application.
    assert all(count >= 3 for count in totals.values()), totals


def test_without_transactions_the_same_faults_duplicate():
    report = simulate_transactional(apps=2, partitions=4, records=300, faults=FAULTS, seed=1, instance_crash=0.1,
                                    transactions=False)
    assert report.check.duplicates > 0 or report.check.lost > 0
    assert report.check.zombie_writes > 0  # nothing fences a dead instance's late writes
    assert not report.check.exactly_once


def test_the_cli_reports_the_checker_as_json(capsys):
    code = main(["simulate", "--transactional", "--records", "200", "--producers", "2", "--partitions", "2",
                 "--crash-every", "100", "--seed", "3", "--json", "--quiet"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert all(result[key] == 0 for key in ZERO_KEYS)
    assert result["input_records"] == result["output_records"] == 200


def test_no_transactions_without_transactional_is_refused(capsys):
    assert main(["simulate", "--no-transactions"]) == 2
    assert "--no-transactions goes with --transactional" in capsys.readouterr().err


def test_a_machine_crash_without_fsync_is_refused_for_transactions(capsys):
    assert main(["simulate", "--transactional", "--crash-kind", "machine", "--records", "10"]) == 2
    assert "add fsync (--fsync)" in capsys.readouterr().err
    assert main(["simulate", "--transactional", "--no-idempotence", "--records", "10"]) == 2


def test_machine_crashes_with_fsync_keep_exactly_once():
    faults = Faults(drop_response=0.05, crash_every=150, crash_kind="machine")
    report = simulate_transactional(apps=2, partitions=4, records=300, faults=faults, seed=4, fsync=True,
                                    instance_crash=0.05)
    assert report.check.exactly_once and report.network.crashes >= 1, report.to_dict()


def test_coordinators_refusing_requests_now_and_then_keep_exactly_once():
    """NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS on every kind of coordinator
    request (and COORDINATOR_NOT_AVAILABLE to FindCoordinator): the clients retry them, nothing is lost or
    doubled."""
    faults = Faults(retriable_error=0.2, drop_response=0.05, crash_every=200)
    report = simulate_transactional(apps=2, partitions=4, records=300, faults=faults, seed=2, instance_crash=0.05)
    result = report.to_dict()
    assert {key: result[key] for key in ZERO_KEYS} == dict.fromkeys(ZERO_KEYS, 0), result
    assert result["fatal_errors"] == 0 and result["output_records"] == 300
    assert report.network.coordinator_errors >= 20, report.network
