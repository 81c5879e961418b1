"""The consumer group protocol's requests (KIP-848) as the broker answers them, over the broker's
:class:`ConsumerGroups` beside its :class:`GroupCoordinator` (which says which groups this broker coordinates and
holds the classic groups and the committed offsets).

- ConsumerGroupHeartbeat and ConsumerGroupDescribe: NOT_COORDINATOR for a group whose ``__consumer_offsets``
  partition is not loaded here; a group id a classic group has is refused as Kafka refuses it with its
  consumer-group migration disabled (GROUP_ID_NOT_FOUND; an *empty* classic group is replaced by the joining
  consumer group, as Kafka converts it).
- A classic JoinGroup for a consumer group with members is INCONSISTENT_GROUP_PROTOCOL (idemcore has no mixed
  groups: Kafka 4 would take the classic member into the consumer group); an empty consumer group is replaced by
  the classic one, as Kafka converts it.
- OffsetCommit and TxnOffsetCommit of a consumer group's member carry its member epoch as the generation: checked
  here (Kafka's ``ConsumerGroup.validateOffsetCommit``: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), then written by the
  group coordinator as a commit outside any generation.

A field of the wrong type or range is answered INVALID_REQUEST naming it, never raised out of ``Broker.handle``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from idemcore.broker.group import requests as group_requests
from idemcore.broker.group.consumer_group import ConsumerGroups, check_heartbeat
from idemcore.broker.group.coordinator import GroupCoordinator
from idemcore.broker.group.membership_requests import join_group
from idemcore.broker.input_checks import checked
from idemcore.net.consumer_group import (
    JOIN_EPOCH,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
)
from idemcore.net.membership import JoinGroupRequest, JoinGroupResponse
from idemcore.net.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetEntry,
    PartitionResult,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.protocol.codes import ErrorCode as E

log = logging.getLogger(__name__)

_Commit = TypeVar("_Commit", OffsetCommitRequest, TxnOffsetCommitRequest)


def _coordinated(coordinator: GroupCoordinator, group_id: str) -> bool:
    return coordinator.owns(coordinator.partition_for(group_id))


def heartbeat(coordinator: GroupCoordinator, groups: ConsumerGroups,
              request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    rid = request.request_id if type(request.request_id) is int else 0
    malformed = checked(request, lambda: check_heartbeat(request))
    if isinstance(malformed, str):
        return ConsumerGroupHeartbeatResponse(E.INVALID_REQUEST, request_id=rid, error_message=malformed)
    group_id = request.group_id
    if group_id and not _coordinated(coordinator, group_id):
        return ConsumerGroupHeartbeatResponse(E.NOT_COORDINATOR, request_id=rid)
    classic = coordinator.classic_groups.groups.get(group_id)
    if classic is not None and groups.groups.get(group_id) is None:
        if request.member_epoch != JOIN_EPOCH:
            return ConsumerGroupHeartbeatResponse(E.GROUP_ID_NOT_FOUND, request_id=rid,
                                                  error_message=f"Group {group_id} is not a consumer group.")
        if classic.members:
            return ConsumerGroupHeartbeatResponse(
                E.GROUP_ID_NOT_FOUND, request_id=rid,
                error_message=f"Cannot upgrade classic group {group_id} to consumer group because online upgrade "
                              "is disabled.")
        del coordinator.classic_groups.groups[group_id]  # an empty classic group becomes a consumer group
        log.info("converted the empty classic group %s to a consumer group", group_id)
    answer = checked(request, lambda: groups.heartbeat(request))
    if isinstance(answer, str):
        return ConsumerGroupHeartbeatResponse(E.INVALID_REQUEST, request_id=rid, error_message=answer)
    return answer


def describe(coordinator: GroupCoordinator, groups: ConsumerGroups,
             request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    rid = request.request_id if type(request.request_id) is int else 0
    ids = request.group_ids
    if not isinstance(ids, tuple | list) or not all(type(g) is str for g in ids):
        return ConsumerGroupDescribeResponse((), rid, f"group_ids must be a sequence of str, got {ids!r:.80}")
    described = []
    for group_id in ids:
        if not _coordinated(coordinator, group_id):
            described.append(DescribedConsumerGroup(group_id, E.NOT_COORDINATOR))
        elif group_id in coordinator.classic_groups.groups and group_id not in groups.groups:
            described.append(DescribedConsumerGroup(group_id, E.GROUP_ID_NOT_FOUND,
                                                    f"Group {group_id} is not a consumer group."))
        else:
            described.extend(groups.describe((group_id,)))
    return ConsumerGroupDescribeResponse(tuple(described), rid)


def classic_join_refusal(groups: ConsumerGroups, request: JoinGroupRequest) -> JoinGroupResponse | None:
    """The answer to a classic JoinGroup for a consumer group with members (None: the classic coordinator
    answers it; an empty consumer group of that id is dropped first)."""
    group_id = request.group_id
    group = groups.groups.get(group_id) if type(group_id) is str else None
    if group is None:
        return None
    if not group.members:
        del groups.groups[group_id]  # Kafka converts an empty consumer group into a classic one
        return None
    member_id = request.member_id if type(request.member_id) is str else ""
    return JoinGroupResponse(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id,
                             request_id=request.request_id if type(request.request_id) is int else 0,
                             error_message=f"Member {member_id}'s protocols are not supported: group {group_id} "
                                           "uses the consumer protocol.")


def _member_commit(coordinator: GroupCoordinator, groups: ConsumerGroups,
                   request: _Commit) -> tuple[_Commit, int | None]:
    """The request to hand to the group coordinator (a consumer group member's as a plain commit), or the error
    that refuses all its offsets."""
    group_id, epoch, member_id = request.group_id, request.generation_id, request.member_id
    if type(group_id) is not str or type(epoch) is not int or type(member_id) is not str \
            or not group_id or not _coordinated(coordinator, group_id):
        return request, None  # the group coordinator answers these
    error = groups.offset_commit_error(group_id, epoch, member_id)
    if error is None:
        return request, None
    if error != E.NONE:
        return request, error
    return dataclasses.replace(request, generation_id=-1, member_id=""), None


def _refused(offsets: object, error: int) -> tuple[PartitionResult, ...]:
    entries = offsets if isinstance(offsets, tuple | list) else ()
    return tuple(PartitionResult(e.topic, e.partition, error) for e in entries if type(e) is OffsetEntry)


def offset_commit(coordinator: GroupCoordinator, groups: ConsumerGroups,
                  request: OffsetCommitRequest) -> OffsetCommitResponse:
    passed, error = _member_commit(coordinator, groups, request)
    if error is not None:
        return OffsetCommitResponse(_refused(request.offsets, error), request.request_id)
    return group_requests.offset_commit(coordinator, passed)


def txn_offset_commit(coordinator: GroupCoordinator, groups: ConsumerGroups,
                      request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    passed, error = _member_commit(coordinator, groups, request)
    if error is not None:
        return TxnOffsetCommitResponse(_refused(request.offsets, error), request.request_id)
    return group_requests.txn_offset_commit(coordinator, passed)


def consumer_group_handlers(coordinator: Callable[[], GroupCoordinator],
                            groups: Callable[[], ConsumerGroups]) -> dict[type, Callable[[Any], Any]]:
    """The handlers to merge into ``Broker.handle``'s dispatch table (after the group-offset ones: these wrap
    OffsetCommit, TxnOffsetCommit and JoinGroup)."""
    return {
        ConsumerGroupHeartbeatRequest: lambda r: heartbeat(coordinator(), groups(), r),
        ConsumerGroupDescribeRequest: lambda r: describe(coordinator(), groups(), r),
        OffsetCommitRequest: lambda r: offset_commit(coordinator(), groups(), r),
        TxnOffsetCommitRequest: lambda r: txn_offset_commit(coordinator(), groups(), r),
        JoinGroupRequest: lambda r: classic_join_refusal(groups(), r) or join_group(coordinator(), r),
    }
