"""A hostile pass over the broker's group coordinator through ``Broker.handle``: any value the wire can carry in
the group APIs (DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat,
ConsumerGroupDescribe, JoinGroup / SyncGroup / Heartbeat / LeaveGroup with instance ids) is answered, never raised,
and the broker goes on serving; DeleteGroups racing a JoinGroup."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.broker import Broker
from idemcore.net.consumer_group import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from idemcore.net.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription
from idemcore.net.group_admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetDeleteRequest,
)
from idemcore.net.membership import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import (
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetEntry,
    OffsetFetchRequest,
    Pending,
)
from idemcore.protocol.codes import ErrorCode

TOPIC = "t"
INT32 = st.sampled_from([-(2**31), -2, -1, 0, 1, 2, 6_000, 45_000, 2**31 - 1])
NAMES = st.sampled_from(["", "g", "h", "t", "__consumer_offsets", "ü" * 3, "x" * 300, " ", "g\x00"])
NULLABLE = st.none() | NAMES
REGEX = st.none() | st.sampled_from(["", ".*", "t|__consumer_offsets", "(", "[", "a{99999999999}", "(?P<x>", "\\"])
PARTITIONS = st.lists(st.tuples(NAMES, INT32), max_size=4).map(tuple)
METADATA = st.sampled_from([b"", b"\x00", b"\xff" * 7, b"\x00\x03\x00\x00\x00\x01\x00\x01t"])
PROTOCOLS = st.lists(st.tuples(NAMES, METADATA), max_size=3).map(tuple)

REQUESTS = st.one_of(
    st.builds(DescribeGroupsRequest, st.lists(NAMES, max_size=3).map(tuple)),
    st.builds(ListGroupsRequest,
              st.lists(NAMES | st.sampled_from(["Stable", "Empty", "stable"]), max_size=2).map(tuple),
              st.lists(NAMES | st.sampled_from(["classic", "consumer", "CONSUMER"]), max_size=2).map(tuple)),
    st.builds(DeleteGroupsRequest, st.lists(NAMES, max_size=3).map(tuple)),
    st.builds(OffsetDeleteRequest, NAMES, PARTITIONS),
    st.builds(ConsumerGroupHeartbeatRequest, NAMES, NAMES, INT32, instance_id=NULLABLE, rack_id=NULLABLE,
              rebalance_timeout_ms=INT32, subscribed_topic_names=st.none() | st.lists(NAMES, max_size=3).map(tuple),
              subscribed_topic_regex=REGEX, server_assignor=st.none() | st.sampled_from(["uniform", "range", "", "x"]),
              owned_partitions=st.none() | PARTITIONS),
    st.builds(ConsumerGroupDescribeRequest, st.lists(NAMES, max_size=3).map(tuple)),
    st.builds(JoinGroupRequest, NAMES, INT32, INT32, st.sampled_from(["consumer", "", "connect"]), PROTOCOLS,
              member_id=NAMES, group_instance_id=NULLABLE, member_id_required=st.booleans(), reason=NULLABLE),
    st.builds(SyncGroupRequest, NAMES, INT32, NAMES, st.lists(st.tuples(NAMES, st.sampled_from([b"", b"\x01"])),
                                                               max_size=3).map(tuple),
              group_instance_id=NULLABLE, protocol_type=NULLABLE, protocol_name=NULLABLE),
    st.builds(HeartbeatRequest, NAMES, INT32, NAMES, group_instance_id=NULLABLE),
    st.builds(LeaveGroupRequest, NAMES, st.lists(st.builds(LeavingMember, NAMES, NULLABLE, NULLABLE),
                                                 max_size=3).map(tuple)),
    st.builds(OffsetCommitRequest, NAMES, st.lists(st.builds(OffsetEntry, NAMES, INT32, INT32), max_size=3).map(tuple),
              INT32, NAMES, st.just(0), NULLABLE),
)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    made = Broker({TOPIC: 3}, offsets_topic_partitions=3)
    try:
        yield made
    finally:
        made.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(REQUESTS, min_size=1, max_size=12))
def test_any_group_request_is_answered_and_the_broker_goes_on_serving(broker, requests):
    for request in requests:
        answer = broker.handle(request)
        assert answer is not None
        broker.run_housekeeping()
    served = broker.handle(MetadataRequest((TOPIC,), False))
    assert isinstance(served, MetadataResponse) and served.topics[0].error_code == ErrorCode.NONE


def test_delete_groups_racing_a_join_leaves_one_consistent_answer():
    made = Broker({TOPIC: 3}, offsets_topic_partitions=3)
    try:
        protocols = (("range", b"\x00\x03\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff"
                               b"\xff\xff"),)
        first = made.handle(JoinGroupRequest("g", 10_000, 10_000, "consumer", protocols, member_id_required=True))
        assert isinstance(first, JoinGroupResponse) and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        pending = made.handle(JoinGroupRequest("g", 10_000, 10_000, "consumer", protocols, member_id=first.member_id))
        deleted = made.handle(DeleteGroupsRequest(("g",)))
        assert isinstance(deleted, DeleteGroupsResponse)
        assert dict(deleted.results) == {"g": ErrorCode.NON_EMPTY_GROUP}, (pending, deleted)
    finally:
        made.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def settled(broker: Broker, clock: Clock, pending: object) -> object:
    for _ in range(200):  # past the initial rebalance delay
        if not isinstance(pending, Pending) or pending.done:
            break
        clock.now += 100
        broker.run_housekeeping()
    return pending.response if isinstance(pending, Pending) else pending


def test_delete_groups_between_join_sync_leave_and_rejoin_and_a_restart_after(tmp_path):
    clock = Clock()
    broker = Broker({TOPIC: 2}, data_dir=tmp_path, fsync=False, clock=clock, offsets_topic_partitions=1)
    subscription = encode_subscription(Subscription((TOPIC,)))
    protocols = (("range", subscription),)

    def join(member_id: str) -> object:
        return settled(broker, clock, broker.handle(JoinGroupRequest("g", 10_000, 10_000, "consumer", protocols,
                                                                      member_id=member_id)))

    def delete() -> int:
        answer = broker.handle(DeleteGroupsRequest(("g",)))
        assert isinstance(answer, DeleteGroupsResponse)
        return dict(answer.results)["g"]

    try:
        first = join("")
        assert isinstance(first, JoinGroupResponse) and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        member_id = first.member_id
        joined = join(member_id)
        assert isinstance(joined, JoinGroupResponse) and joined.error_code == ErrorCode.NONE, joined
        assert delete() == ErrorCode.NON_EMPTY_GROUP  # CompletingRebalance: the sync is still to come
        assignment = encode_assignment(Assignment(((TOPIC, 0), (TOPIC, 1))))
        synced = settled(broker, clock, broker.handle(
            SyncGroupRequest("g", joined.generation_id, member_id, ((member_id, assignment),))))
        assert isinstance(synced, SyncGroupResponse) and synced.error_code == ErrorCode.NONE, synced
        committed = broker.handle(OffsetCommitRequest("g", (OffsetEntry(TOPIC, 0, 5),), joined.generation_id,
                                                      member_id, 0, None))
        assert committed.results[0].error_code == ErrorCode.NONE  # type: ignore[union-attr]
        assert delete() == ErrorCode.NON_EMPTY_GROUP
        broker.handle(LeaveGroupRequest("g", (LeavingMember(member_id),)))
        assert delete() == ErrorCode.NONE
        assert delete() == ErrorCode.GROUP_ID_NOT_FOUND
        stale = join(member_id)  # the deleted group's member comes back with its old id
        assert isinstance(stale, JoinGroupResponse) and stale.error_code == ErrorCode.UNKNOWN_MEMBER_ID, stale
        again = join(join("").member_id)  # type: ignore[attr-defined]
        assert isinstance(again, JoinGroupResponse) and again.error_code == ErrorCode.NONE
        assert again.generation_id == 1, "a new group, not the deleted one's generation"
        mine = ((again.member_id, assignment),)
        settled(broker, clock, broker.handle(SyncGroupRequest("g", 1, again.member_id, mine)))
        broker.close()
        broker = Broker({TOPIC: 2}, data_dir=tmp_path, fsync=False, clock=clock, offsets_topic_partitions=1)
        described = broker.handle(DescribeGroupsRequest(("g",)))
        group = described.groups[0]  # type: ignore[union-attr]
        assert group.state == "Stable" and [m.member_id for m in group.members] == [again.member_id], group
        fetched = broker.handle(OffsetFetchRequest("g", ((TOPIC, 0),), False))
        assert fetched.offsets[0].offset == -1, "the deleted group's offsets stay deleted"  # type: ignore[union-attr]
    finally:
        broker.close()
