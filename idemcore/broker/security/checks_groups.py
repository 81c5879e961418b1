"""The checks of the consumer-group APIs (KafkaApis' OffsetCommit, TxnOffsetCommit, OffsetFetch, the classic
membership requests, the group admin requests and KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe)."""

from __future__ import annotations

import dataclasses
from typing import Any

from idemcore.broker.security.request_context import (
    GROUP,
    GROUP_DENIED,
    TOPIC,
    TOPIC_DENIED,
    TXN,
    TXN_DENIED,
    Handle,
    Op,
    RequestContext,
    check,
    pick,
    split,
    then,
    tp,
)
from idemcore.net.consumer_group import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
)
from idemcore.net.group_admin import DeleteGroupsResponse, DescribedGroup, DescribeGroupsResponse, OffsetDeleteResponse
from idemcore.net.membership import HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse
from idemcore.net.messages import (
    FetchedOffset,
    OffsetCommitResponse,
    OffsetFetchResponse,
    PartitionResult,
    TxnOffsetCommitResponse,
)
from idemcore.protocol.codes import ErrorCode


def _offsets_split(c: RequestContext, handle: Handle, r: Any, empty: Any) -> Any:
    """OffsetCommit's and TxnOffsetCommit's per-topic READ, the others sent on."""
    offsets = tuple(r.offsets)
    denied = c.denied(Op.READ, TOPIC, (entry.topic for entry in offsets))
    refusals = [PartitionResult(e.topic, e.partition, TOPIC_DENIED) if e.topic in denied else None for e in offsets]
    return split(handle, r, offsets, refusals, lambda kept: dataclasses.replace(r, offsets=pick(offsets, kept)),
                  "results", empty, tp, tp)


@check("TxnOffsetCommitRequest")
def _txn_offset_commit(c: RequestContext, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id, READ on the group (each refusal answers every partition), READ on each
    topic."""
    for allowed, code in ((lambda: c.allowed(Op.WRITE, TXN, r.transactional_id), TXN_DENIED),
                          (lambda: c.allowed(Op.READ, GROUP, r.group_id), GROUP_DENIED)):
        if not allowed():
            return TxnOffsetCommitResponse(tuple(PartitionResult(e.topic, e.partition, code) for e in r.offsets),
                                           r.request_id)
    return _offsets_split(c, handle, r, TxnOffsetCommitResponse((), r.request_id))


@check("OffsetCommitRequest")
def _offset_commit(c: RequestContext, handle: Handle, r: Any) -> Any:
    """READ on the group (every partition GROUP_AUTHORIZATION_FAILED otherwise), READ on each topic."""
    if not c.allowed(Op.READ, GROUP, r.group_id):
        return OffsetCommitResponse(tuple(PartitionResult(e.topic, e.partition, GROUP_DENIED) for e in r.offsets),
                                    r.request_id)
    return _offsets_split(c, handle, r, OffsetCommitResponse((), r.request_id))


@check("OffsetFetchRequest")
def _offset_fetch(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED for the request); of all the group's offsets only those
    of topics the principal may DESCRIBE; a named partition of another topic TOPIC_AUTHORIZATION_FAILED."""
    if not c.allowed(Op.DESCRIBE, GROUP, r.group_id):
        return OffsetFetchResponse((), GROUP_DENIED, r.request_id)
    if r.partitions is None:
        return then(handle(r), lambda response: dataclasses.replace(response, offsets=tuple(
            entry for entry in response.offsets if c.allowed(Op.DESCRIBE, TOPIC, entry.topic))))
    parts = tuple(r.partitions)
    denied = c.denied(Op.DESCRIBE, TOPIC, (t for t, _ in parts))
    if not denied:
        return handle(r)

    def merge(response: Any) -> Any:
        if response.error_code != ErrorCode.NONE:  # a group-wide error answers alone, as the broker gives it
            return response
        answers = iter(response.offsets)
        return dataclasses.replace(response, offsets=tuple(
            FetchedOffset(t, p, error_code=TOPIC_DENIED) if t in denied else next(answers) for t, p in parts))
    # Asked even with no partition left: a group-wide error (NOT_COORDINATOR...) is still the broker's to give.
    return then(handle(dataclasses.replace(r, partitions=tuple(tp for tp in parts if tp[0] not in denied))), merge)




@check("JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest", "LeaveGroupRequest",
        "ConsumerGroupHeartbeatRequest")
def _group_member(c: RequestContext, handle: Handle, r: Any) -> Any:
    """READ on the group (the classic protocol's four requests and KIP-848's heartbeat); a KIP-848 heartbeat's
    subscribed topic names also DESCRIBE each (TOPIC_AUTHORIZATION_FAILED otherwise, as Kafka 4.0 checks them)."""
    if c.allowed(Op.READ, GROUP, r.group_id):
        subscribed = getattr(r, "subscribed_topic_names", None) or ()
        denied = c.denied(Op.DESCRIBE, TOPIC, subscribed)
        if denied:
            return ConsumerGroupHeartbeatResponse(TOPIC_DENIED, request_id=r.request_id, error_message=(
                f"The member is not authorized to describe topics {sorted(denied)}"))
        return handle(r)
    refusal = {"JoinGroupRequest": JoinGroupResponse, "SyncGroupRequest": SyncGroupResponse,
               "HeartbeatRequest": HeartbeatResponse, "LeaveGroupRequest": LeaveGroupResponse,
               "ConsumerGroupHeartbeatRequest": ConsumerGroupHeartbeatResponse}[type(r).__name__]
    return refusal(GROUP_DENIED, request_id=r.request_id)


@check("DescribeGroupsRequest", "ConsumerGroupDescribeRequest")
def _describe_groups(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DESCRIBE on each group; a KIP-848 group whose members name a topic the principal may not DESCRIBE is
    answered TOPIC_AUTHORIZATION_FAILED without its members (as Kafka 4.0 answers it)."""
    ids = tuple(r.group_ids)
    denied = c.denied(Op.DESCRIBE, GROUP, ids)
    classic = type(r).__name__ == "DescribeGroupsRequest"
    refusals = [None if i not in denied else DescribedGroup(i, GROUP_DENIED, state="") if classic
                else DescribedConsumerGroup(i, GROUP_DENIED) for i in ids]
    empty = DescribeGroupsResponse((), r.request_id) if classic else ConsumerGroupDescribeResponse((), r.request_id)
    key = lambda item: getattr(item, "group_id", item)  # noqa: E731
    answer = split(handle, r, ids, refusals, lambda kept: dataclasses.replace(r, group_ids=pick(ids, kept)),
                    "groups", empty, key, key)
    return answer if classic else then(answer, lambda response: _hide_undescribed_topics(c, response))


def _hide_undescribed_topics(c: RequestContext, response: Any) -> Any:
    groups = []
    for group in response.groups:
        topics = {name for member in group.members for name in member.subscribed_topic_names}
        topics |= {tp[0] for member in group.members for tp in (*member.assignment, *member.target_assignment)}
        if c.denied(Op.DESCRIBE, TOPIC, sorted(topics)):
            group = DescribedConsumerGroup(group.group_id, TOPIC_DENIED, "The group has described topic(s) that the "
                                           "client is not authorized to describe.")
        groups.append(group)
    return dataclasses.replace(response, groups=tuple(groups))


@check("ListGroupsRequest")
def _list_groups(c: RequestContext, handle: Handle, r: Any) -> Any:
    """Every group with DESCRIBE on the cluster, else those the principal may DESCRIBE."""
    if c.cluster(Op.DESCRIBE):
        return handle(r)
    return then(handle(r), lambda response: dataclasses.replace(response, groups=tuple(
        group for group in response.groups if c.allowed(Op.DESCRIBE, GROUP, group.group_id))))


@check("DeleteGroupsRequest")
def _delete_groups(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DELETE on each group."""
    ids = tuple(r.group_ids)
    denied = c.denied(Op.DELETE, GROUP, ids)
    refusals = [(i, GROUP_DENIED) if i in denied else None for i in ids]
    key = lambda item: item if isinstance(item, str) else item[0]  # noqa: E731
    return split(handle, r, ids, refusals, lambda kept: dataclasses.replace(r, group_ids=pick(ids, kept)),
                  "results", DeleteGroupsResponse((), r.request_id), key, key)


@check("OffsetDeleteRequest")
def _offset_delete(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DELETE on the group, READ on each topic; a group-wide error from the broker answers alone."""
    if not c.allowed(Op.DELETE, GROUP, r.group_id):
        return OffsetDeleteResponse(GROUP_DENIED, request_id=r.request_id)
    parts = tuple(r.partitions)
    denied = c.denied(Op.READ, TOPIC, (t for t, _ in parts))
    if not denied:
        return handle(r)

    def merge(response: Any) -> Any:
        if response.error_code != ErrorCode.NONE:
            return response
        answers = {(t, p): code for t, p, code in response.results}
        return dataclasses.replace(response, results=tuple(
            (t, p, TOPIC_DENIED if t in denied else answers.get((t, p), ErrorCode.NONE)) for t, p in parts))
    return then(handle(dataclasses.replace(r, partitions=tuple(tp for tp in parts if tp[0] not in denied))), merge)
