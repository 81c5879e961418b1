"""The replicated cluster simulation (idemcore/sim/cluster.py): the safe configuration loses nothing clients were
told, the unsafe ones lose what Kafka documents, and a seed reproduces its run."""

from __future__ import annotations

import pytest

from idemcore.broker.log import PartitionLog
from idemcore.sim.cluster import ClusterFaults
from idemcore.sim.cluster_checker import check_cluster
from idemcore.sim.cluster_run import simulate_cluster

SAFE_SEEDS = (0, 1, 9, 15)  # 9 and 15 found real bugs (a stale leader epoch at the log end; a deposed leader's ack)


@pytest.mark.parametrize("seed", SAFE_SEEDS)
def test_acks_all_min_isr_2_clean_loses_nothing(seed: int) -> None:
    report = simulate_cluster(seed, ClusterFaults(), records=900)
    assert report.settled
    assert report.check.anomalies == 0, report.to_dict()
    assert report.check.acked == 900 and report.check.final_records == 900
    stats = report.stats
    assert stats.leader_crashes + stats.isolations + stats.follower_lags >= 2  # faults did happen


def test_acks_1_loses_acknowledged_records() -> None:
    losses = sum(simulate_cluster(seed, ClusterFaults(acks=1, min_insync_replicas=1), records=900).check.lost_acked
                 for seed in range(4))
    assert losses >= 1


def test_unclean_election_loses_acknowledged_records() -> None:
    reports = [simulate_cluster(seed, ClusterFaults(min_insync_replicas=1, unclean_leader_election=True,
                                                    max_concurrent=3), records=900) for seed in range(6)]
    assert sum(r.stats.unclean_elections for r in reports) >= 1
    assert sum(r.check.losses for r in reports) >= 1


def test_same_seed_same_run() -> None:
    faults = ClusterFaults(acks=1, min_insync_replicas=1)
    first, second = (simulate_cluster(3, faults, records=600).to_dict() for _ in range(2))
    for report in (first, second):
        del report["seconds"]
    assert first == second


def test_checker_sees_what_clients_saw() -> None:
    acked = {(0, 0): ("t-0", 0), (0, 1): ("t-0", 1), (1, 0): ("t-0", 2)}
    final = {"t-0": [(0, (0, 0)), (1, (1, 0)), (2, (0, 0))]}  # (0, 1) lost, (1, 0) moved, (0, 0) twice
    reads = [(("t-0", 3), (2, 0))]  # read, then gone
    check = check_cluster(3, acked, reads, final)
    assert (check.lost_acked, check.lost_reads, check.duplicates) == (1, 1, 1)
    assert check.divergent_offsets == 2  # offset 1: (0, 1) acked, (1, 0) read; offset 2: (1, 0) acked, (0, 0) read
    assert check.out_of_order == 0 and check.anomalies == 5


def test_truncating_at_the_log_end_drops_an_epoch_begun_there(tmp_path) -> None:
    """Kafka's UnifiedLog.truncateTo: a leader that began an epoch at its log end and lost leadership before
    appending keeps no entry for it, else its last fetched epoch keeps diverging from the new leader's history."""
    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=False)
    log.epochs.assign(3, log.log_end_offset)
    assert log.epochs.latest_epoch == 3
    assert log.truncate_to(log.log_end_offset) is False
    assert log.epochs.latest_epoch == -1
    log.close()
