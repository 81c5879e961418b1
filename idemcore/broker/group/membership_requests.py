"""The membership requests as the broker answers them: each asks the group coordinator and returns its answer,
or a :class:`Pending` that completes later (JoinGroup, SyncGroup). A field of the wrong type or range is answered
INVALID_REQUEST with a message naming it, never raised out of ``Broker.handle``: a client's bad request must not
stop the broker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idemcore.broker.group.coordinator import GroupCoordinator
from idemcore.broker.input_checks import checked
from idemcore.net.membership import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import Pending
from idemcore.protocol.codes import ErrorCode

_INVALID = int(ErrorCode.INVALID_REQUEST)


def _member_id(request: object) -> str:
    member_id = getattr(request, "member_id", "")
    return member_id if type(member_id) is str else ""


def join_group(coordinator: GroupCoordinator, request: JoinGroupRequest) -> JoinGroupResponse | Pending:
    answer = checked(request, lambda: coordinator.join_group(request))
    if isinstance(answer, str):
        return JoinGroupResponse(_INVALID, member_id=_member_id(request), request_id=request.request_id,
                                 error_message=answer)
    return answer


def sync_group(coordinator: GroupCoordinator, request: SyncGroupRequest) -> SyncGroupResponse | Pending:
    answer = checked(request, lambda: coordinator.sync_group(request))
    if isinstance(answer, str):
        return SyncGroupResponse(_INVALID, request_id=request.request_id, error_message=answer)
    return answer


def heartbeat(coordinator: GroupCoordinator, request: HeartbeatRequest) -> HeartbeatResponse:
    answer = checked(request, lambda: coordinator.heartbeat(request))
    if isinstance(answer, str):
        return HeartbeatResponse(_INVALID, request.request_id, answer)
    return answer


def leave_group(coordinator: GroupCoordinator, request: LeaveGroupRequest) -> LeaveGroupResponse:
    answer = checked(request, lambda: coordinator.leave_group(request))
    if isinstance(answer, str):
        return LeaveGroupResponse(_INVALID, request_id=request.request_id, error_message=answer)
    return answer


def membership_handlers(coordinator: Callable[[], GroupCoordinator]) -> dict[type, Callable[[Any], Any]]:
    """The four requests' handlers over the coordinator ``coordinator()`` gives (the broker makes its group
    coordinator at first use), to merge into ``Broker.handle``'s dispatch table."""
    return {
        JoinGroupRequest: lambda request: join_group(coordinator(), request),
        SyncGroupRequest: lambda request: sync_group(coordinator(), request),
        HeartbeatRequest: lambda request: heartbeat(coordinator(), request),
        LeaveGroupRequest: lambda request: leave_group(coordinator(), request),
    }
