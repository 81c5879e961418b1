"""Classic groups across coordinator restarts (Kafka's GroupMetadata records): what is written and when (the
leader's SyncGroup before any member is answered, a group becoming Empty), a failed write answered with the
coordinator error, a coordinator reloaded from what it wrote agreeing on generation, leader, members and
assignments and accepting the members' heartbeats, sessions restarted at load, and a Broker over a log
directory reopened mid-group. Also the group settings read from Kafka's names."""

from __future__ import annotations

from pathlib import Path

from idemcore.broker import Broker
from idemcore.broker.config import BrokerConfig
from idemcore.broker.group import GroupCoordinator
from idemcore.broker.group.group_metadata_log import GroupMetadataValue, MemberMetadata, decode_group_value
from idemcore.broker.group.membership import GroupState
from idemcore.broker.group.offsets_log import GroupMetadataKey, decode_key
from idemcore.net.membership import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import Pending
from idemcore.protocol.codes import ErrorCode

from .test_group_admin_coordinator import FailingLog, make
from .test_group_membership import PARTITIONS, RANGE, REBALANCE, SESSION, Clock, G, answer, beat, leave, stable_group
from .test_group_membership import sync as sync_as

E = ErrorCode


def group_records(log: FailingLog, gc: GroupCoordinator) -> list[GroupMetadataValue | None]:
    """The group's metadata records in the log, in order (None: a tombstone)."""
    found: list[GroupMetadataValue | None] = []
    for stored in log.batches[gc.partition_for(G)]:
        for key, value in zip(stored.batch.keys or (), stored.batch.values, strict=True):
            if decode_key(key) == GroupMetadataKey(G):
                found.append(decode_group_value(value))
    return found


def reloaded(clock: Clock, log: FailingLog) -> GroupCoordinator:
    again, _ = make(clock, log)
    return again


def test_the_leaders_sync_stores_the_group_before_anyone_gets_an_assignment():
    clock = Clock()
    gc, log = make(clock)
    ids, generation = stable_group(gc, clock, 2)
    (value,) = group_records(log, gc)
    assert value == GroupMetadataValue("consumer", generation, "range", ids[0], clock.now, (
        MemberMetadata(ids[0], "client", "", SESSION, b"subscription", ids[0].encode(), REBALANCE),
        MemberMetadata(ids[1], "client", "", SESSION, b"subscription", ids[1].encode(), REBALANCE)), 3)


def test_a_failed_store_answers_every_waiting_member_the_coordinator_error_and_rebalances():
    clock = Clock()
    gc, log = make(clock)
    (a, b), generation = stable_group(gc, clock, 2)
    # The next generation: both rejoin, the follower syncs first and waits, then the store fails.
    pa = gc.join_group(JoinGroupRequest(G, SESSION, REBALANCE, "consumer", RANGE, a, client_id="client"))
    pb = gc.join_group(JoinGroupRequest(G, SESSION, REBALANCE, "consumer", RANGE, b, client_id="client"))
    assert answer(pa).generation_id == generation + 1
    follower = sync_as(gc, b, generation + 1)
    assert isinstance(follower, Pending) and not follower.done
    log.fail = int(E.NOT_LEADER_OR_FOLLOWER)
    mine = answer(sync_as(gc, a, generation + 1, [(a, b"new-a"), (b, b"new-b")]))
    assert mine.error_code == answer(follower).error_code == E.NOT_COORDINATOR
    assert answer(pb).generation_id == generation + 1
    assert gc.classic_groups.groups[G].state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in gc.classic_groups.groups[G].members.values())
    log.fail = None
    assert [v.generation for v in group_records(log, gc) if v] == [generation]  # nothing of the failed one


def test_a_group_becoming_empty_is_stored_empty():
    clock = Clock()
    gc, log = make(clock)
    ids, generation = stable_group(gc, clock, 2)
    leave(gc, *ids)
    last = group_records(log, gc)[-1]
    assert last == GroupMetadataValue("consumer", generation + 1, None, None, clock.now, (), 3)
    again = reloaded(clock, log)
    group = again.classic_groups.groups[G]
    assert (group.state, group.generation_id, group.members, group.state_timestamp) == \
        (GroupState.EMPTY, generation + 1, {}, clock.now)


def test_a_coordinator_reloaded_mid_group_keeps_the_generation_and_the_members_heartbeats():
    clock = Clock()
    gc, log = make(clock)
    ids, generation = stable_group(gc, clock, 3)
    before = gc.classic_groups.groups[G]
    clock.now += SESSION // 2
    again = reloaded(clock, log)
    group = again.classic_groups.groups[G]
    assert (group.state, group.generation_id, group.leader, group.protocol_type, group.protocol_name) == \
        (GroupState.STABLE, generation, ids[0], "consumer", "range")
    assert [(m.member_id, m.assignment, m.session_timeout_ms, m.rebalance_timeout_ms)
            for m in group.members.values()] == \
        [(m.member_id, m.assignment, m.session_timeout_ms, m.rebalance_timeout_ms) for m in before.members.values()]
    # Sessions restarted at load: a member that keeps heartbeating stays, one that stopped is gone after a session.
    clock.now += SESSION - 1
    again.expire(clock.now)
    assert beat(again, ids[0], generation) == beat(again, ids[1], generation) == E.NONE
    clock.now += 2
    again.expire(clock.now)
    assert beat(again, ids[0], generation) == E.REBALANCE_IN_PROGRESS  # ids[2] lapsed: a rebalance
    assert ids[2] not in again.classic_groups.groups[G].members
    # A follower that syncs again after the move gets its assignment back.
    other = reloaded(clock, log)
    assert answer(sync_as(other, ids[1], generation)) == SyncGroupResponse(0, ids[1].encode(), "consumer", "range")


def test_a_follower_rejoining_a_reloaded_group_with_the_same_metadata_gets_its_generation():
    clock = Clock()
    gc, log = make(clock)
    ids, generation = stable_group(gc, clock, 2)
    again = reloaded(clock, log)
    rejoined = again.join_group(JoinGroupRequest(G, SESSION, REBALANCE, "consumer", RANGE, ids[1]))
    assert isinstance(rejoined, JoinGroupResponse)
    assert (rejoined.error_code, rejoined.generation_id, rejoined.leader) == (0, generation, ids[0])


def test_a_tombstone_deletes_the_group_on_load():
    clock = Clock()
    gc, log = make(clock)
    ids, _ = stable_group(gc, clock, 1)
    leave(gc, *ids)
    assert gc.delete_groups([G]) == {G: E.NONE}
    assert group_records(log, gc)[-1] is None
    assert G not in reloaded(clock, log).classic_groups.groups


# ---------------------------------------------------------------- a Broker over its log directory


def broker_at(data_dir: Path, clock: Clock) -> Broker:
    return Broker({"t": 2}, data_dir=data_dir, offsets_topic_partitions=PARTITIONS, clock=clock)


def test_a_broker_reopened_mid_group_answers_the_members_as_before(tmp_path):
    clock = Clock()
    broker = broker_at(tmp_path, clock)
    broker.group_coordinator.classic_groups.initial_rebalance_delay_ms = 0
    first = broker.handle(JoinGroupRequest(G, SESSION, REBALANCE, "consumer", RANGE, client_id="app"))
    assert isinstance(first, JoinGroupResponse) and first.member_id.startswith("app-")
    joined = broker.handle(JoinGroupRequest(G, SESSION, REBALANCE, "consumer", RANGE, first.member_id,
                                            client_id="app"))
    broker.run_housekeeping()
    response = answer(joined)
    assert response.error_code == 0
    member, generation = response.member_id, response.generation_id
    synced = answer(broker.handle(SyncGroupRequest(G, generation, member, ((member, b"mine"),))))
    assert synced.assignment == b"mine"
    broker.close()

    clock.now += 1_000
    broker = broker_at(tmp_path, clock)
    try:
        assert broker.handle(HeartbeatRequest(G, generation, member)) == HeartbeatResponse(0)
        again = answer(broker.handle(SyncGroupRequest(G, generation, member)))
        assert (again.error_code, again.assignment) == (0, b"mine")
        assert broker.group_coordinator.classic_groups.groups[G].generation_id == generation
    finally:
        broker.close()


def test_the_group_settings_come_from_kafkas_names():
    config = BrokerConfig.from_properties({
        "offsets.retention.minutes": "5", "offsets.retention.check.interval.ms": "1000",
        "group.min.session.timeout.ms": "100", "group.max.session.timeout.ms": "200",
        "group.initial.rebalance.delay.ms": "7", "offset.metadata.max.bytes": "9"}, {})
    broker = Broker({"t": 1}, settings=config)
    try:
        gc = broker.group_coordinator
        assert (gc.offsets_retention_ms, gc.offsets_retention_check_interval_ms, gc.min_session_timeout_ms,
                gc.max_session_timeout_ms, gc.classic_groups.initial_rebalance_delay_ms,
                gc.offset_metadata_max_bytes) == (300_000, 1000, 100, 200, 7, 9)
    finally:
        broker.close()
