"""The consumer-group admin requests as the broker answers them (DescribeGroups, ListGroups, DeleteGroups,
OffsetDelete): each checks its fields, asks the group coordinator and packs the answer in the request's order.
A field of the wrong type or range is answered INVALID_REQUEST with a message naming it, never raised out of
``Broker.handle``: a client's bad request must not stop the broker.

A broker without a group coordinator yet (no ``__consumer_offsets`` topic) has no groups: it answers as its
coordinator would for groups it does not have, without making the topic (an admin's look must not create it).
In a cluster each broker's coordinator holds the groups of the ``__consumer_offsets`` partitions it leads: the
coordinator answers NOT_COORDINATOR for the others, and ListGroups lists what this broker leads (an admin client
asks every broker, as Kafka's do). There DeleteGroups and OffsetDelete are answered once their tombstones are
replicated, as offset commits are (:mod:`idemcore.broker.coordinator_leadership`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idemcore.broker.group.coordinator import GroupCoordinator
from idemcore.broker.input_checks import checked, strings, topic_partitions
from idemcore.checks import bool_arg
from idemcore.net.group_admin import (
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
from idemcore.protocol.codes import ErrorCode

_INVALID = int(ErrorCode.INVALID_REQUEST)
_NOT_FOUND = int(ErrorCode.GROUP_ID_NOT_FOUND)
_INVALID_GROUP = int(ErrorCode.INVALID_GROUP_ID)
_CONTAINERS = (tuple, list)


def _unknown(group_id: str) -> int:
    """What a broker without a coordinator answers for a group: no such group (an empty id is invalid)."""
    return _NOT_FOUND if group_id else _INVALID_GROUP


def _string_items(value: object) -> tuple[str, ...]:
    """The strings of a (possibly malformed) list, to name them in a refusal."""
    return tuple(item for item in value if type(item) is str) if type(value) in _CONTAINERS else ()  # type: ignore[attr-defined]


def describe_groups(coordinator: GroupCoordinator | None,
                    request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    def ask() -> tuple[DescribedGroup, ...]:
        group_ids = strings(request.group_ids, "group_ids")
        bool_arg("include_authorized_operations", request.include_authorized_operations)
        if coordinator is None:
            return tuple(DescribedGroup(group_id, _unknown(group_id)) for group_id in group_ids)
        return coordinator.describe_groups(group_ids)
    answer = checked(request, ask)
    if isinstance(answer, str):
        return DescribeGroupsResponse(tuple(DescribedGroup(group_id, _INVALID)
                                            for group_id in _string_items(request.group_ids)),
                                      request.request_id, answer)
    return DescribeGroupsResponse(answer, request.request_id)


def list_groups(coordinator: GroupCoordinator | None, request: ListGroupsRequest) -> ListGroupsResponse:
    def ask() -> tuple[Any, ...]:
        states = strings(request.states_filter, "states_filter")
        types = strings(request.types_filter, "types_filter")
        return () if coordinator is None else coordinator.list_groups(states, types)
    answer = checked(request, ask)
    if isinstance(answer, str):
        return ListGroupsResponse(_INVALID, request_id=request.request_id, error_message=answer)
    return ListGroupsResponse(int(ErrorCode.NONE), answer, request.request_id)


def delete_groups(coordinator: GroupCoordinator | None, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    def ask() -> tuple[tuple[str, int], ...]:
        group_ids = strings(request.group_ids, "group_ids")
        named = [group_id for group_id in group_ids if group_id]  # an empty id is invalid (Kafka's service checks)
        codes = {} if coordinator is None or not named else coordinator.delete_groups(named)
        return tuple((group_id, int(codes.get(group_id, _unknown(group_id)))) for group_id in group_ids)
    answer = checked(request, ask)
    if isinstance(answer, str):
        return DeleteGroupsResponse(tuple((group_id, _INVALID) for group_id in _string_items(request.group_ids)),
                                    request.request_id, answer)
    return DeleteGroupsResponse(answer, request.request_id)


def offset_delete(coordinator: GroupCoordinator | None, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    def ask() -> tuple[int, tuple[tuple[str, int, int], ...]]:
        if type(request.group_id) is not str:
            raise TypeError(f"group_id must be a string, not {type(request.group_id).__name__}")
        partitions = topic_partitions(request.partitions)
        if coordinator is None or not request.group_id:
            return _unknown(request.group_id), ()
        error, codes = coordinator.offset_delete(request.group_id, partitions)
        if error != ErrorCode.NONE:
            return int(error), ()
        return int(error), tuple((topic, partition, int(codes[(topic, partition)])) for topic, partition in partitions)
    answer = checked(request, ask)
    if isinstance(answer, str):
        return OffsetDeleteResponse(_INVALID, request_id=request.request_id, error_message=answer)
    error, results = answer
    return OffsetDeleteResponse(error, results, request.request_id)


def group_admin_handlers(coordinator: Callable[[], GroupCoordinator | None]) -> dict[type, Callable[[Any], Any]]:
    """The four requests' handlers over the coordinator ``coordinator()`` gives (None: the broker has none yet),
    to merge into ``Broker.handle``'s dispatch table."""
    return {
        DescribeGroupsRequest: lambda request: describe_groups(coordinator(), request),
        ListGroupsRequest: lambda request: list_groups(coordinator(), request),
        DeleteGroupsRequest: lambda request: delete_groups(coordinator(), request),
        OffsetDeleteRequest: lambda request: offset_delete(coordinator(), request),
    }
