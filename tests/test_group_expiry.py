"""Offset and group expiry (Kafka's ``cleanupGroupMetadata`` / ``OffsetMetadataManager.cleanupExpiredOffsets``,
KIP-211): a simple group's offsets by commit time, an Empty group's from when it became Empty, a Stable consumer
group's offsets of topics no member subscribes to, nothing of a rebalancing group or of an offset an open
transaction wrote; tombstones written and agreed by a reload; the Empty group left without offsets deleted; the
cleanup run by ``expire`` at the check interval only."""

from __future__ import annotations

from idemcore.broker.group import GroupCoordinator
from idemcore.broker.group.membership import GroupState
from idemcore.net.consumer_protocol import Subscription, encode_subscription
from idemcore.net.messages import OffsetEntry
from idemcore.protocol.codes import ErrorCode

from .test_group_admin_coordinator import FailingLog, make, stable
from .test_group_membership import T0, Clock, G, join, leave

E = ErrorCode
SIMPLE = "simple"
RETENTION = 60_000
INTERVAL = 1_000


def coordinator(clock: Clock, log: FailingLog | None = None) -> tuple[GroupCoordinator, FailingLog]:
    return make(clock, log, offsets_retention_ms=RETENTION, offsets_retention_check_interval_ms=INTERVAL)


def offsets(gc: GroupCoordinator, group: str) -> set[tuple[str, int]]:
    return set(gc.offset_fetch(group)[1])


def test_a_simple_groups_offsets_expire_by_commit_time_and_then_the_group_goes():
    clock = Clock()
    gc, log = coordinator(clock)
    gc.offset_commit(SIMPLE, [OffsetEntry("t", 0, 1)])
    clock.now += 10
    gc.offset_commit(SIMPLE, [OffsetEntry("t", 1, 1)])
    assert gc.cleanup_group_metadata(T0 + RETENTION - 1) == 0
    assert gc.cleanup_group_metadata(T0 + RETENTION) == 1
    assert offsets(gc, SIMPLE) == {("t", 1)}
    assert gc.cleanup_group_metadata(T0 + RETENTION + 10) == 1
    assert offsets(gc, SIMPLE) == set() and gc.list_groups() == ()
    again, _ = coordinator(clock, log)
    assert offsets(again, SIMPLE) == set() and again.list_groups() == ()


def test_an_empty_groups_offsets_expire_from_when_it_became_empty():
    clock = Clock()
    gc, log = coordinator(clock)
    ids, generation = stable(gc, clock)
    gc.offset_commit(G, [OffsetEntry("t", 0, 1)], generation, ids[0])
    committed_at = clock.now
    clock.now += RETENTION // 2
    leave(gc, *ids)
    emptied_at = clock.now
    assert gc.classic_groups.groups[G].state is GroupState.EMPTY
    assert gc.cleanup_group_metadata(committed_at + RETENTION) == 0  # old enough by commit, not by emptiness
    assert offsets(gc, G) == {("t", 0)}
    assert gc.cleanup_group_metadata(emptied_at + RETENTION) == 1
    assert offsets(gc, G) == set() and G not in gc.classic_groups.groups
    # The reload agrees: the group's tombstone came after its Empty record.
    again, _ = coordinator(clock, log)
    assert G not in again.classic_groups.groups and offsets(again, G) == set()


def test_a_stable_consumer_groups_offsets_of_topics_nobody_subscribes_to_expire():
    clock = Clock()
    gc, _ = coordinator(clock)
    ids, generation = stable(gc, clock, protocols=(("range", encode_subscription(Subscription(("t",)))),))
    gc.offset_commit(G, [OffsetEntry("t", 0, 1), OffsetEntry("u", 0, 1)], generation, ids[0])
    assert gc.cleanup_group_metadata(clock.now + RETENTION) == 1
    assert offsets(gc, G) == {("t", 0)}
    assert gc.classic_groups.groups[G].state is GroupState.STABLE


def test_nothing_expires_in_a_rebalancing_group_or_under_an_open_transaction():
    clock = Clock()
    gc, _ = coordinator(clock)
    ids, generation = stable(gc, clock)
    gc.offset_commit(G, [OffsetEntry("u", 0, 1)], generation, ids[0])
    join(gc, ids[0])  # the leader rejoins: PreparingRebalance
    assert gc.classic_groups.groups[G].state is GroupState.PREPARING_REBALANCE
    assert gc.cleanup_group_metadata(clock.now + 10 * RETENTION) == 0
    gc.offset_commit(SIMPLE, [OffsetEntry("t", 0, 1)])
    gc.txn_offset_commit("tx", SIMPLE, 7, 0, [OffsetEntry("t", 0, 2)])
    assert gc.cleanup_group_metadata(clock.now + 10 * RETENTION) == 0
    assert offsets(gc, SIMPLE) == {("t", 0)}
    gc.complete_transaction(gc.partition_for(SIMPLE), 7, committed=False)
    assert gc.cleanup_group_metadata(clock.now + 10 * RETENTION) == 1


def test_a_failed_append_expires_nothing():
    clock = Clock()
    gc, log = coordinator(clock)
    gc.offset_commit(SIMPLE, [OffsetEntry("t", 0, 1)])
    log.fail = int(E.NOT_LEADER_OR_FOLLOWER)
    assert gc.cleanup_group_metadata(T0 + RETENTION) == 0
    assert offsets(gc, SIMPLE) == {("t", 0)}


def test_expire_runs_the_cleanup_at_the_check_interval_only():
    clock = Clock()
    gc, _ = coordinator(clock)
    gc.offset_commit(SIMPLE, [OffsetEntry("t", 0, 1)])
    gc.expire(T0)  # the first call starts the interval
    gc.expire(T0 + RETENTION - 1)  # a cleanup: not old enough yet; the next one is an interval later
    gc.expire(T0 + RETENTION + INTERVAL - 2)  # old enough, but no cleanup is due
    assert offsets(gc, SIMPLE) == {("t", 0)}
    gc.expire(T0 + RETENTION + INTERVAL - 1)
    assert offsets(gc, SIMPLE) == set()
