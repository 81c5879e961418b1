"""The consumer-group admin APIs on the wire, server side: DescribeGroups, ListGroups, DeleteGroups and
OffsetDelete (messages in :mod:`idemcore.net.group_admin`).

Every version kio has is served: DescribeGroups v0–6 (v3+: ``include_authorized_operations``, answered "not
provided" since idemcore has no authorizer; v4+: members' instance ids; v6, KIP-1043: a group the coordinator does
not have is GROUP_ID_NOT_FOUND with a message, before v6 ``Dead`` with no error as Kafka answers older clients),
ListGroups v0–5 (v4+: the states filter and each group's state, KIP-518; v5+: the types filter and each group's
type, KIP-848), DeleteGroups v0–2, OffsetDelete v0 (its only version)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.group_admin import (
    DEAD,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from idemcore.net.messages import Response
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.frames import make, nested, response_class
from idemcore.net.wire.transactions import NO_THROTTLE, answer_of
from idemcore.protocol.codes import ErrorCode

#: Kafka's "authorized operations not asked for / not known" (INT32_MIN).
_NO_OPERATIONS = -(1 << 31)
#: The first DescribeGroups version answering GROUP_ID_NOT_FOUND for an unknown group (KIP-1043).
GROUP_NOT_FOUND_SINCE = 6


# ---------------------------------------------------------------- DescribeGroups (key 15)


def _describe_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return DescribeGroupsRequest(tuple(str(group) for group in body.groups),
                                 bool(getattr(body, "include_authorized_operations", False)), correlation_id), None


def _described_error(group: DescribedGroup, version: int) -> tuple[int, str | None]:
    """A group's error code and message at ``version``: an unknown group (``Dead``, no members) is
    GROUP_ID_NOT_FOUND from v6 on and no error before, whichever way the coordinator put it."""
    unknown = group.state == DEAD and not group.members and group.error_code in (
        ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND)
    if unknown:
        if version >= GROUP_NOT_FOUND_SINCE:
            return int(ErrorCode.GROUP_ID_NOT_FOUND), f"Group {group.group_id} not found."
        return int(ErrorCode.NONE), None
    return int(group.error_code), None


def _describe_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, DescribeGroupsResponse)
    cls = response_class(body)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    groups = []
    for group in response.groups:
        code, message = _described_error(group, version)
        if code not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
            message = response.error_message
        groups.append(make(
            group_cls, error_code=WireError(code), error_message=message, group_id=group.group_id,
            group_state=group.state, protocol_type=group.protocol_type, protocol_data=group.protocol_name,
            authorized_operations=_NO_OPERATIONS, members=tuple(
                make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                     client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                     member_assignment=m.assignment) for m in group.members)))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


DESCRIBE_GROUPS = WireApi(15, "DescribeGroups", 0, 6, _describe_to_message, _describe_to_wire)


# ---------------------------------------------------------------- ListGroups (key 16)


def _list_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return ListGroupsRequest(tuple(str(s) for s in getattr(body, "states_filter", ())),
                             tuple(str(t) for t in getattr(body, "types_filter", ())), correlation_id), None


def _list_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, ListGroupsResponse)
    cls = response_class(body)
    group_cls = nested(cls, "ListedGroup")
    return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(response.error_code), groups=tuple(
        make(group_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
             group_type=g.group_type) for g in response.groups))


LIST_GROUPS = WireApi(16, "ListGroups", 0, 5, _list_to_message, _list_to_wire)


# ---------------------------------------------------------------- DeleteGroups (key 42)


def _delete_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return DeleteGroupsRequest(tuple(str(group) for group in body.groups_names), correlation_id), None


def _delete_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, DeleteGroupsResponse)
    cls = response_class(body)
    result_cls = nested(cls, "DeletableGroupResult")
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(
        make(result_cls, group_id=group_id, error_code=WireError(code)) for group_id, code in response.results))


DELETE_GROUPS = WireApi(42, "DeleteGroups", 0, 2, _delete_to_message, _delete_to_wire)


# ---------------------------------------------------------------- OffsetDelete (key 47)


def _offset_delete_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    partitions = tuple((str(topic.name), int(p.partition_index))
                       for topic in body.topics for p in topic.partitions)
    return OffsetDeleteRequest(str(body.group_id), partitions, correlation_id), None


def _offset_delete_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, OffsetDeleteResponse)
    cls = response_class(body)
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    partition_cls = nested(cls, "OffsetDeleteResponsePartition")
    by_topic: dict[str, list[Any]] = {}  # the topics in the order the results name them first
    for topic, partition, code in response.results:
        by_topic.setdefault(topic, []).append(make(partition_cls, partition_index=partition,
                                                   error_code=WireError(code)))
    return make(cls, error_code=WireError(response.error_code), throttle_time=NO_THROTTLE, topics=tuple(
        make(topic_cls, name=topic, partitions=tuple(partitions)) for topic, partitions in by_topic.items()))


OFFSET_DELETE = WireApi(47, "OffsetDelete", 0, 0, _offset_delete_to_message, _offset_delete_to_wire)

GROUP_ADMIN_APIS = (DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE)
