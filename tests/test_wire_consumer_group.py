"""ConsumerGroupHeartbeat v0-1 and ConsumerGroupDescribe v0-1 on the wire: every version kio has, built as a client
sends it (partitions by topic id), framed, translated into a message, answered by the broker's handlers over a real
group coordinator and ``ConsumerGroups``, translated back, framed and read back by kio. Also the handlers' part:
NOT_COORDINATOR, a classic group's id, a classic JoinGroup for a consumer group, offset commits with member epochs."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.index import load_request_schema

from idemcore.broker.group import GroupCoordinator
from idemcore.broker.group import consumer_group_requests as cgr
from idemcore.broker.group import requests as group_requests
from idemcore.broker.group.consumer_group import ConsumerGroups
from idemcore.broker.group.membership_requests import join_group
from idemcore.net.consumer_group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from idemcore.net.membership import JoinGroupRequest, JoinGroupResponse
from idemcore.net.messages import OffsetCommitRequest, OffsetEntry, TxnOffsetCommitRequest
from idemcore.net.wire.api import WireApi, WireContext, topic_id_of
from idemcore.net.wire.apis import APIS
from idemcore.net.wire.consumer_group import CONSUMER_GROUP_APIS, CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT
from idemcore.net.wire.frames import make, nested, read_request, read_response, request_frame, response_frame
from idemcore.protocol.codes import ErrorCode as E
from tests.test_wire_membership import T0, FakeLog

TOPICS = {"t": 4, "u": 2}
CTX = WireContext(node_id=0, host="127.0.0.1", port=9092, cluster_id="idemcore", topics=lambda: TOPICS)
G = "g"


class Coordinator:
    def __init__(self, partitions: int = 1) -> None:
        self.now = T0
        self.gc = GroupCoordinator(FakeLog(), lambda: self.now, offsets_partitions=partitions)
        self.gc.load(0, [])
        self.groups = ConsumerGroups(lambda: self.now, TOPICS.get)
        self.gc.consumer_groups = self.groups  # as the broker links them

    def send(self, api: WireApi, version: int, body: Any, correlation_id: int = 5) -> tuple[Any, Any]:
        """The request framed and read as the server reads it: ``(message, kio response read back)``."""
        frame = request_frame(api.key, version, correlation_id, "wire-test", body)
        header, read = read_request(frame[4:])
        assert read == body and header.correlation_id == correlation_id
        message, carry = api.to_message(CTX, version, correlation_id, read)
        handler = cgr.heartbeat if api is CONSUMER_GROUP_HEARTBEAT else cgr.describe
        answer = handler(self.gc, self.groups, message)
        entity = api.to_wire(CTX, version, read, answer, carry)
        assert (entity.__api_key__, entity.__version__) == (api.key, version)
        out = b"".join(response_frame(correlation_id, entity))
        assert read_response(api.key, version, out[4:]) == (correlation_id, entity)
        return message, entity


def heartbeat_body(version: int, member_id: str, epoch: int, owned: dict[uuid.UUID, tuple[int, ...]] | None,
                   **fields: Any) -> Any:
    cls = load_request_schema(68, version)
    topics = None if owned is None else tuple(make(nested(cls, "TopicPartitions"), topic_id=topic_id,
                                                   partitions=parts) for topic_id, parts in owned.items())
    return make(cls, group_id=G, member_id=member_id, member_epoch=epoch, topic_partitions=topics, **fields)


def test_served_versions_are_every_version_kio_has():
    assert [(a.key, a.name, a.min_version, a.max_version) for a in CONSUMER_GROUP_APIS] == [
        (68, "ConsumerGroupHeartbeat", 0, 1), (69, "ConsumerGroupDescribe", 0, 1)]
    assert APIS[68] is CONSUMER_GROUP_HEARTBEAT and APIS[69] is CONSUMER_GROUP_DESCRIBE
    for key in (68, 69):
        with pytest.raises(Exception):  # noqa: B017  # kio has no v2: the range is all it has
            load_request_schema(key, 2)


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_round_trips_at_each_version(version):
    server = Coordinator()
    member_id = "" if version == 0 else "client-made-id"
    message, joined = server.send(CONSUMER_GROUP_HEARTBEAT, version, heartbeat_body(
        version, member_id, 0, {}, rebalance_timeout=30_000, subscribed_topic_names=("t",),
        server_assignor="range"))
    assert isinstance(message, ConsumerGroupHeartbeatRequest)
    assert message.member_id_from_client is (version >= 1) and message.rebalance_timeout_ms == 30_000
    assert message.owned_partitions == () and message.subscribed_topic_names == ("t",)
    assert joined.error_code == 0 and joined.member_epoch == 1 and joined.heartbeat_interval.total_seconds() == 5
    member_id = joined.member_id
    assert member_id and (version == 0 or member_id == "client-made-id")
    (topic,) = joined.assignment.topic_partitions
    assert topic.topic_id == topic_id_of("t") and sorted(topic.partitions) == [0, 1, 2, 3]
    # Owned partitions by topic id are read back as names; an id the broker lacks is dropped.
    message, again = server.send(CONSUMER_GROUP_HEARTBEAT, version, heartbeat_body(
        version, member_id, 1, {topic_id_of("t"): (0, 1, 2, 3), uuid.uuid4(): (0,)}))
    assert message.owned_partitions == tuple(("t", p) for p in range(4))
    assert message.rebalance_timeout_ms == -1 and message.subscribed_topic_names is None
    assert again.error_code == 0 and again.member_epoch == 1 and again.assignment is None
    # An error travels with its message.
    _, fenced = server.send(CONSUMER_GROUP_HEARTBEAT, version, heartbeat_body(version, member_id, 7, {}))
    assert fenced.error_code == E.FENCED_MEMBER_EPOCH and "greater member epoch (7)" in fenced.error_message
    _, left = server.send(CONSUMER_GROUP_HEARTBEAT, version, heartbeat_body(version, member_id, -1, None))
    assert left.error_code == 0 and left.member_epoch == -1


@pytest.mark.parametrize("version", [0, 1])
def test_describe_round_trips_at_each_version(version):
    server = Coordinator()
    server.send(CONSUMER_GROUP_HEARTBEAT, 1, heartbeat_body(1, "m", 0, {}, rebalance_timeout=1_000,
                                                            subscribed_topic_names=("t", "u")))
    body = make(load_request_schema(69, version), group_ids=(G, "nobody"), include_authorized_operations=False)
    message, entity = server.send(CONSUMER_GROUP_DESCRIBE, version, body)
    assert message == ConsumerGroupDescribeRequest((G, "nobody"), False, 5)
    described, missing = entity.groups
    assert described.error_code == 0 and described.group_state == "Stable" and described.group_epoch == 1
    assert described.assignment_epoch == 1 and described.assignor_name == "uniform"
    (member,) = described.members
    assert member.member_id == "m" and member.member_epoch == 1 and member.subscribed_topic_names == ("t", "u")
    names = {(tp.topic_name, tp.topic_id): sorted(tp.partitions) for tp in member.assignment.topic_partitions}
    assert names == {("t", topic_id_of("t")): [0, 1, 2, 3], ("u", topic_id_of("u")): [0, 1]}
    assert member.target_assignment == member.assignment
    if version >= 1:
        assert member.member_type == 1
    assert missing.error_code == E.GROUP_ID_NOT_FOUND and missing.error_message == "Group nobody not found."


def join_message(member_id: str = "m", group_id: str = G) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(group_id, member_id, 0, rebalance_timeout_ms=1_000,
                                         subscribed_topic_names=("t",), owned_partitions=())


def classic_join(group_id: str = G) -> JoinGroupRequest:
    return JoinGroupRequest(group_id, 10_000, 10_000, "consumer", (("range", b""),), member_id_required=False)


def test_a_group_this_coordinator_does_not_load_is_not_coordinator():
    server = Coordinator(partitions=2)  # only partition 0 is loaded
    other = next(g for g in (f"g{k}" for k in range(50)) if server.gc.partition_for(g) == 1)
    answer = cgr.heartbeat(server.gc, server.groups, join_message(group_id=other))
    assert answer.error_code == E.NOT_COORDINATOR and not server.groups.groups
    (described,) = cgr.describe(server.gc, server.groups, ConsumerGroupDescribeRequest((other,))).groups
    assert described.error_code == E.NOT_COORDINATOR


def test_a_classic_group_id_is_refused_and_an_empty_one_converted():
    server = Coordinator()
    join_group(server.gc, classic_join())  # answered when the join phase ends
    assert server.gc.classic_groups.groups[G].members  # a classic group with a member
    answer = cgr.heartbeat(server.gc, server.groups, join_message())
    assert answer.error_code == E.GROUP_ID_NOT_FOUND and "online upgrade is disabled" in answer.error_message
    beat = cgr.heartbeat(server.gc, server.groups, ConsumerGroupHeartbeatRequest(G, "m", 3, owned_partitions=()))
    assert beat.error_code == E.GROUP_ID_NOT_FOUND and beat.error_message == f"Group {G} is not a consumer group."
    (described,) = cgr.describe(server.gc, server.groups, ConsumerGroupDescribeRequest((G,))).groups
    assert described.error_code == E.GROUP_ID_NOT_FOUND
    # Once the classic group is empty, a consumer-protocol member takes the id over.
    server.gc.classic_groups.groups[G].members.clear()
    assert cgr.heartbeat(server.gc, server.groups, join_message()).error_code == E.NONE
    assert G not in server.gc.classic_groups.groups and G in server.groups.groups


def test_a_classic_join_to_a_consumer_group_is_inconsistent_group_protocol():
    server = Coordinator()
    assert cgr.heartbeat(server.gc, server.groups, join_message()).error_code == E.NONE
    refused = join_group(server.gc, classic_join())
    assert refused.error_code == E.INCONSISTENT_GROUP_PROTOCOL and G not in server.gc.classic_groups.groups
    # An empty consumer group gives its id to the classic group.
    server.groups.heartbeat(ConsumerGroupHeartbeatRequest(G, "m", -1))
    assert not isinstance(join_group(server.gc, classic_join()), JoinGroupResponse)  # waits to join
    assert server.gc.classic_groups.groups[G].members and G not in server.groups.groups


def test_offset_commits_of_members_carry_their_epoch():
    server = Coordinator()
    joined = cgr.heartbeat(server.gc, server.groups, join_message())
    assert isinstance(joined, ConsumerGroupHeartbeatResponse) and joined.member_epoch == 1
    offsets = (OffsetEntry("t", 0, 5), OffsetEntry("t", 1, 6))
    ok = group_requests.offset_commit(server.gc, OffsetCommitRequest(G, offsets, 1, "m", request_id=3))
    assert [r.error_code for r in ok.results] == [0, 0] and ok.request_id == 3
    stale = group_requests.offset_commit(server.gc, OffsetCommitRequest(G, offsets, 0, "m"))
    assert [r.error_code for r in stale.results] == [E.STALE_MEMBER_EPOCH] * 2
    unknown = group_requests.offset_commit(server.gc, OffsetCommitRequest(G, offsets, 1, "x"))
    assert [r.error_code for r in unknown.results] == [E.UNKNOWN_MEMBER_ID] * 2
    txn = group_requests.txn_offset_commit(server.gc, TxnOffsetCommitRequest("tx", G, 7, 0, offsets, 0, "m"))
    assert [r.error_code for r in txn.results] == [E.STALE_MEMBER_EPOCH] * 2
    _, fetched = server.gc.offset_fetch(G, [("t", 0), ("t", 1)])
    assert (fetched[("t", 0)].offset, fetched[("t", 1)].offset) == (5, 6)


def test_malformed_fields_are_answered_invalid_request_naming_them():
    server = Coordinator()
    bad = ConsumerGroupHeartbeatRequest(G, "m", "0", owned_partitions=())  # type: ignore[arg-type]
    answer = cgr.heartbeat(server.gc, server.groups, bad)
    assert answer.error_code == E.INVALID_REQUEST and "member_epoch" in answer.error_message
    bad = ConsumerGroupHeartbeatRequest(G, "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",),
                                        owned_partitions=(("t", "0"),))  # type: ignore[arg-type]
    answer = cgr.heartbeat(server.gc, server.groups, bad)
    assert answer.error_code == E.INVALID_REQUEST and "owned_partitions" in answer.error_message
    described = cgr.describe(server.gc, server.groups, ConsumerGroupDescribeRequest(G))  # type: ignore[arg-type]
    assert described.groups == () and "group_ids" in described.error_message


@pytest.mark.parametrize("request_", [
    ConsumerGroupHeartbeatRequest(None, "m", 0),  # type: ignore[arg-type]
    ConsumerGroupHeartbeatRequest(G, None, 0),  # type: ignore[arg-type]
    ConsumerGroupHeartbeatRequest(G, "m", None),  # type: ignore[arg-type]
    ConsumerGroupHeartbeatRequest(G, "m", 0, rebalance_timeout_ms=1, subscribed_topic_names="t",  # type: ignore
                                  owned_partitions=()),
    ConsumerGroupHeartbeatRequest(G, "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=(1,),  # type: ignore
                                  owned_partitions=()),
    ConsumerGroupHeartbeatRequest(G, "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",),
                                  owned_partitions=[("t",)]),  # type: ignore[list-item]
    ConsumerGroupHeartbeatRequest(G, "m", 0, rebalance_timeout_ms=True, subscribed_topic_names=("t",),
                                  owned_partitions=()),
    ConsumerGroupHeartbeatRequest(G, "m", 0, server_assignor=3, rebalance_timeout_ms=1,  # type: ignore[arg-type]
                                  subscribed_topic_names=("t",), owned_partitions=()),
    ConsumerGroupHeartbeatRequest(G, "m", 0, rebalance_timeout_ms=-7, subscribed_topic_names=("t",),
                                  owned_partitions=()),
    ConsumerGroupDescribeRequest(None),  # type: ignore[arg-type]
    ConsumerGroupDescribeRequest((G, 5)),  # type: ignore[arg-type]
    OffsetCommitRequest(G, (OffsetEntry("t", 0, 1),), "1", "m"),  # type: ignore[arg-type]
])
def test_a_malformed_request_through_the_broker_is_answered_and_the_broker_keeps_serving(request_):
    from idemcore.broker import Broker

    broker = Broker({"t": 2}, offsets_topic_partitions=1)
    try:
        answer = broker.handle(request_)
        assert answer is not None
        if hasattr(answer, "error_code"):
            assert answer.error_code == E.INVALID_REQUEST and answer.error_message
        elif type(request_) is ConsumerGroupDescribeRequest:
            assert answer.groups == () and answer.error_message
        joined = broker.handle(join_message())
        assert joined.error_code == E.NONE and joined.member_epoch == 1  # still serving
    finally:
        broker.close()


def test_consumer_groups_are_listed_deleted_and_unloaded_with_the_classic_ones():
    """ListGroups shows both kinds (the types filter picks one); DeleteGroups refuses a consumer group with members
    (NON_EMPTY_GROUP) and deletes it, offsets too, once its last member left; a partition that moves away takes
    its consumer groups with it."""
    from idemcore.broker import Broker
    from idemcore.net.group_admin import DeleteGroupsRequest, ListGroupsRequest

    broker = Broker({"t": 2}, offsets_topic_partitions=1)
    try:
        assert broker.handle(join_message(group_id="modern")).error_code == E.NONE
        commit = broker.handle(OffsetCommitRequest("modern", (OffsetEntry("t", 0, 4),), 1, "m"))
        assert [r.error_code for r in commit.results] == [E.NONE]
        assert [r.error_code for r in broker.handle(OffsetCommitRequest("simple", (OffsetEntry("t", 0, 1),))).results
                ] == [E.NONE]
        listed = {(g.group_id, g.group_type, g.protocol_type) for g in broker.handle(ListGroupsRequest()).groups}
        assert listed == {("modern", "consumer", "consumer"), ("simple", "classic", "")}
        only = broker.handle(ListGroupsRequest(types_filter=("Consumer",))).groups
        assert [g.group_id for g in only] == ["modern"]
        assert [g.group_id for g in broker.handle(ListGroupsRequest(states_filter=("empty",))).groups] == ["simple"]
        assert broker.handle(DeleteGroupsRequest(("modern",))).results == (("modern", E.NON_EMPTY_GROUP),)
        left = broker.handle(ConsumerGroupHeartbeatRequest("modern", "m", -1))
        assert left.error_code == E.NONE
        assert broker.handle(DeleteGroupsRequest(("modern",))).results == (("modern", E.NONE),)
        assert "modern" not in broker.consumer_groups.groups
        _, fetched = broker.group_coordinator.offset_fetch("modern", [("t", 0)])
        assert fetched[("t", 0)].offset == -1
        assert broker.handle(join_message(group_id="again")).error_code == E.NONE
        broker.group_coordinator.unload_partition(0)
        assert broker.consumer_groups.groups == {}
    finally:
        broker.close()
