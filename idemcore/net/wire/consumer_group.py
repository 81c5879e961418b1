"""The consumer group protocol of KIP-848 on the wire: ConsumerGroupHeartbeat (key 68) and ConsumerGroupDescribe
(key 69), every version kio has (v0-1 of each; messages in :mod:`idemcore.net.consumer_group`).

Partitions travel by topic id (KIP-516): a heartbeat's owned partitions are named by the broker's topic ids
(``api.topic_id_of``) and read back as names; an id the broker does not know is dropped (the member cannot own a
partition of a topic that is not there). ConsumerGroupHeartbeat v1 (KIP-1082) has the client make its member id;
at v0 an empty member id asks the coordinator for one."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.consumer_group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from idemcore.net.wire.api import WireApi, WireContext, topic_id_of
from idemcore.net.wire.frames import make, millis, nested, optional_str, response_class
from idemcore.net.wire.transactions import NO_THROTTLE, answer_of
from idemcore.protocol.constants import TopicPartition

#: The first ConsumerGroupHeartbeat version whose members make their own ids (KIP-1082).
CLIENT_MEMBER_ID_SINCE = 1
#: ConsumerGroupDescribe's ``member_type`` of a member of the consumer protocol (v1+).
CONSUMER_MEMBER_TYPE = 1


def _owned(ctx: WireContext, topics: Any) -> tuple[TopicPartition, ...] | None:
    if topics is None:
        return None
    owned: list[TopicPartition] = []
    for topic in topics:
        name = ctx.topic_name(topic.topic_id)
        if name is not None:
            owned.extend((name, int(p)) for p in topic.partitions)
    return tuple(owned)


def _by_topic(cls: type, partitions: tuple[TopicPartition, ...], named: bool = False) -> tuple[Any, ...]:
    topics: dict[str, list[int]] = {}
    for topic, p in partitions:
        topics.setdefault(topic, []).append(p)
    extra = (lambda name: {"topic_name": name}) if named else (lambda name: {})
    return tuple(make(cls, topic_id=topic_id_of(name), partitions=tuple(parts), **extra(name))
                 for name, parts in topics.items())


# ---------------------------------------------------------------- ConsumerGroupHeartbeat (key 68)


def _heartbeat_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    names = body.subscribed_topic_names
    request = ConsumerGroupHeartbeatRequest(
        str(body.group_id), str(body.member_id), int(body.member_epoch),
        instance_id=optional_str(body.instance_id), rack_id=optional_str(body.rack_id),
        rebalance_timeout_ms=millis(body.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(str(n) for n in names),
        subscribed_topic_regex=optional_str(getattr(body, "subscribed_topic_regex", None)),
        server_assignor=optional_str(body.server_assignor), owned_partitions=_owned(ctx, body.topic_partitions),
        member_id_from_client=version >= CLIENT_MEMBER_ID_SINCE, request_id=correlation_id)
    return request, None


def _heartbeat_to_wire(ctx: WireContext, version: int, body: Any, answer: Any, carry: None) -> Any:
    response = answer_of(answer, ConsumerGroupHeartbeatResponse)
    cls = response_class(body)
    assignment = None
    if response.assignment is not None:
        assignment = make(nested(cls, "Assignment"),
                          topic_partitions=_by_topic(nested(cls, "TopicPartitions"), response.assignment))
    return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(int(response.error_code)),
                error_message=response.error_message, member_id=response.member_id,
                member_epoch=response.member_epoch, heartbeat_interval=response.heartbeat_interval_ms,
                assignment=assignment)


CONSUMER_GROUP_HEARTBEAT = WireApi(68, "ConsumerGroupHeartbeat", 0, 1, _heartbeat_to_message, _heartbeat_to_wire)


# ---------------------------------------------------------------- ConsumerGroupDescribe (key 69)


def _describe_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return ConsumerGroupDescribeRequest(tuple(str(g) for g in body.group_ids),
                                        bool(body.include_authorized_operations), correlation_id), None


def _describe_to_wire(ctx: WireContext, version: int, body: Any, answer: Any, carry: None) -> Any:
    response = answer_of(answer, ConsumerGroupDescribeResponse)
    cls = response_class(body)
    group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "Member")
    assignment_cls, topic_cls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")

    def assignment(partitions: tuple[TopicPartition, ...]) -> Any:
        return make(assignment_cls, topic_partitions=_by_topic(topic_cls, partitions, named=True))

    groups = tuple(make(
        group_cls, error_code=WireError(int(g.error_code)), error_message=g.error_message, group_id=g.group_id,
        group_state=g.state, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
        assignor_name=g.assignor_name, members=tuple(make(
            member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names, subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=assignment(m.assignment), target_assignment=assignment(m.target_assignment),
            member_type=CONSUMER_MEMBER_TYPE) for m in g.members)) for g in response.groups)
    return make(cls, throttle_time=NO_THROTTLE, groups=groups)


CONSUMER_GROUP_DESCRIBE = WireApi(69, "ConsumerGroupDescribe", 0, 1, _describe_to_message, _describe_to_wire)

CONSUMER_GROUP_APIS = (CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE)
