"""The consumer group protocol's requests (KIP-848) as the broker answers them, over the broker's
:class:`ConsumerGroups` beside its :class:`GroupCoordinator` (which says which groups this broker coordinates and
holds the classic groups and the committed offsets).

- ConsumerGroupHeartbeat and ConsumerGroupDescribe: NOT_COORDINATOR for a group whose ``__consumer_offsets``
  partition is not loaded here; a group id a classic group has is refused as Kafka refuses it with its
  consumer-group migration disabled (GROUP_ID_NOT_FOUND; an *empty* classic group is replaced by the joining
  consumer group, as Kafka converts it).

The group coordinator itself consults these groups for the requests the two kinds share: a classic JoinGroup for a
consumer group with members is INCONSISTENT_GROUP_PROTOCOL, and OffsetCommit / TxnOffsetCommit of a consumer
group's member are checked against its member epoch (:meth:`GroupCoordinator.join_group`, ``_group_error``).

A field of the wrong type or range is answered INVALID_REQUEST naming it, never raised out of ``Broker.handle``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idemcore.broker.group.consumer_group import ConsumerGroups, check_heartbeat
from idemcore.broker.group.coordinator import GroupCoordinator
from idemcore.broker.input_checks import checked
from idemcore.net.consumer_group import (
    JOIN_EPOCH,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
)
from idemcore.protocol.codes import ErrorCode as E


def _coordinated(coordinator: GroupCoordinator, group_id: str) -> bool:
    try:
        return coordinator.owns(coordinator.partition_for(group_id))
    except UnicodeEncodeError:  # no group id the wire could carry: the group coordinator's checks refuse it
        return False


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
        error = coordinator.drop_empty_classic_group(group_id)  # an empty classic group becomes a consumer group
        if error != E.NONE:
            return ConsumerGroupHeartbeatResponse(error, request_id=rid)
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


def consumer_group_handlers(coordinator: Callable[[], GroupCoordinator],
                            groups: Callable[[], ConsumerGroups]) -> dict[type, Callable[[Any], Any]]:
    """The handlers to merge into ``Broker.handle``'s dispatch table."""
    return {
        ConsumerGroupHeartbeatRequest: lambda r: heartbeat(coordinator(), groups(), r),
        ConsumerGroupDescribeRequest: lambda r: describe(coordinator(), groups(), r),
    }
