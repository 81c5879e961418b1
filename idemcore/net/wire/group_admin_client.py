"""The client direction of the consumer-group admin APIs (messages in :mod:`idemcore.net.group_admin`): how
idemcore's clients write DescribeGroups v0–6, ListGroups v0–5, DeleteGroups v0–2 and OffsetDelete v0 and read the
answers. :mod:`idemcore.net.wire.client` registers these entries in its table (``GROUP_ADMIN_CLIENT_APIS``: request
class and ``ClientApi`` fields; plain tuples, so this module need not import that one).

ListGroups' filters exist from v4 (states) and v5 (types): asked of a broker that speaks an older version they are
refused (ValueError naming the filter), never silently dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idemcore.net.group_admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from idemcore.net.wire.frames import make, nested, optional_str
from idemcore.net.wire.schema import load_request_schema

#: The first ListGroups versions with the states filter (KIP-518) and the types filter (KIP-848).
STATES_FILTER_SINCE, TYPES_FILTER_SINCE = 4, 5


def _encode_describe(request: DescribeGroupsRequest, version: int) -> Any:
    return make(load_request_schema(15, version), groups=tuple(request.group_ids),
                include_authorized_operations=request.include_authorized_operations)


def _decode_describe(request: DescribeGroupsRequest, version: int, body: Any) -> DescribeGroupsResponse:
    groups = tuple(DescribedGroup(
        str(g.group_id), int(g.error_code), str(g.group_state), str(g.protocol_type), str(g.protocol_data),
        tuple(DescribedMember(str(m.member_id), optional_str(getattr(m, "group_instance_id", None)), str(m.client_id),
                              str(m.client_host), bytes(m.member_metadata), bytes(m.member_assignment))
              for m in g.members)) for g in body.groups)
    message = next((g.error_message for g in body.groups if getattr(g, "error_message", None)), None)
    return DescribeGroupsResponse(groups, request.request_id, optional_str(message))


def _encode_list(request: ListGroupsRequest, version: int) -> Any:
    if request.states_filter and version < STATES_FILTER_SINCE:
        raise ValueError(f"the broker's ListGroups v{version} has no states filter (v{STATES_FILTER_SINCE}+): "
                         f"cannot filter by {', '.join(request.states_filter)}")
    if request.types_filter and version < TYPES_FILTER_SINCE:
        raise ValueError(f"the broker's ListGroups v{version} has no types filter (v{TYPES_FILTER_SINCE}+): "
                         f"cannot filter by {', '.join(request.types_filter)}")
    return make(load_request_schema(16, version), states_filter=tuple(request.states_filter),
                types_filter=tuple(request.types_filter))


def _decode_list(request: ListGroupsRequest, version: int, body: Any) -> ListGroupsResponse:
    groups = tuple(ListedGroup(str(g.group_id), str(g.protocol_type), str(getattr(g, "group_state", "")),
                               str(getattr(g, "group_type", "classic"))) for g in body.groups)
    return ListGroupsResponse(int(body.error_code), groups, request.request_id)


def _encode_delete(request: DeleteGroupsRequest, version: int) -> Any:
    return make(load_request_schema(42, version), groups_names=tuple(request.group_ids))


def _decode_delete(request: DeleteGroupsRequest, version: int, body: Any) -> DeleteGroupsResponse:
    return DeleteGroupsResponse(tuple((str(r.group_id), int(r.error_code)) for r in body.results),
                                request.request_id)


def _encode_offset_delete(request: OffsetDeleteRequest, version: int) -> Any:
    cls = load_request_schema(47, version)
    topic_cls = nested(cls, "OffsetDeleteRequestTopic")
    partition_cls = nested(cls, "OffsetDeleteRequestPartition")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in request.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return make(cls, group_id=request.group_id, topics=tuple(
        make(topic_cls, name=topic, partitions=tuple(make(partition_cls, partition_index=p) for p in partitions))
        for topic, partitions in by_topic.items()))


def _decode_offset_delete(request: OffsetDeleteRequest, version: int, body: Any) -> OffsetDeleteResponse:
    results = tuple((str(t.name), int(p.partition_index), int(p.error_code)) for t in body.topics
                    for p in t.partitions)
    return OffsetDeleteResponse(int(body.error_code), results, request.request_id)


Encode = Callable[[Any, int], Any]
Decode = Callable[[Any, int, Any], Any]

#: ``(request class, key, name, min version, max version, encode, decode)`` of each API.
GROUP_ADMIN_CLIENT_APIS: tuple[tuple[type, int, str, int, int, Encode, Decode], ...] = (
    (DescribeGroupsRequest, 15, "DescribeGroups", 0, 6, _encode_describe, _decode_describe),
    (ListGroupsRequest, 16, "ListGroups", 0, 5, _encode_list, _decode_list),
    (DeleteGroupsRequest, 42, "DeleteGroups", 0, 2, _encode_delete, _decode_delete),
    (OffsetDeleteRequest, 47, "OffsetDelete", 0, 0, _encode_offset_delete, _decode_offset_delete),
)
