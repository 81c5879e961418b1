"""The classic consumer-group protocol's requests and responses (Kafka's JoinGroup, SyncGroup, Heartbeat and
LeaveGroup), with the fields idemcore's group coordinator uses. Like :mod:`idemcore.net.messages`, every response
carries its request's ``request_id``; a request refused for a malformed field is answered INVALID_REQUEST with an
``error_message`` naming it.

JoinGroup and SyncGroup may be answered late: ``Broker.handle`` then returns a
:class:`idemcore.net.messages.Pending` that completes with the response."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.protocol.codes import ErrorCode

#: The member id of a member that has none yet (Kafka's ``JoinGroupRequest.UNKNOWN_MEMBER_ID``).
UNKNOWN_MEMBER_ID = ""
#: The generation of a group that has none (Kafka's ``JoinGroupRequest.UNKNOWN_GENERATION_ID``).
NO_GENERATION = -1

#: The error codes proper to these APIs (names for ``ErrorCode``'s members).
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
INVALID_SESSION_TIMEOUT = ErrorCode.INVALID_SESSION_TIMEOUT
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED


@dataclass(slots=True, frozen=True)
class JoinGroupRequest:
    """Join (or rejoin) ``group_id``. ``protocols``: ``(name, metadata)`` in the member's order of preference
    (for consumers: assignor names and their subscription bytes). ``member_id_required``: a first join without
    a member id is answered MEMBER_ID_REQUIRED with the id to join with (Kafka's JoinGroup v4+; False for v0-3,
    which are taken into the group at once). ``client_id`` (the request header's) starts the member id the
    coordinator makes; ``client_host`` is where the request came from (DescribeGroups shows both).
    ``group_instance_id`` makes the member static (KIP-345, JoinGroup v5+)."""

    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    client_id: str = ""
    member_id_required: bool = True
    client_host: str = ""
    reason: str | None = None
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class JoinGroupResponse:
    """``members`` (``(member_id, group_instance_id, metadata)`` of the selected protocol) only to the leader."""

    error_code: int
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = UNKNOWN_MEMBER_ID
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class SyncGroupRequest:
    """The leader sends every member's assignment (``(member_id, bytes)``), followers none; each gets its own."""

    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class SyncGroupResponse:
    error_code: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class HeartbeatResponse:
    error_code: int
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class LeavingMember:
    """One member leaving (LeaveGroup v3+ takes several; v0-2 one ``member_id``)."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(slots=True, frozen=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeavingMember, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class LeftMember:
    """One member's answer to a LeaveGroup."""

    member_id: str
    group_instance_id: str | None = None
    error_code: int = ErrorCode.NONE


@dataclass(slots=True, frozen=True)
class LeaveGroupResponse:
    """A group-wide ``error_code`` (NOT_COORDINATOR, INVALID_GROUP_ID...) or one answer per leaving member."""

    error_code: int
    members: tuple[LeftMember, ...] = ()
    request_id: int = 0
    error_message: str | None = None

    @property
    def error(self) -> int:
        """The one code a LeaveGroup v0-2 carries: the group-wide error, else the first member's that is not NONE
        (Kafka's ``LeaveGroupResponse.getError``)."""
        if self.error_code != ErrorCode.NONE:
            return self.error_code
        return next((m.error_code for m in self.members if m.error_code != ErrorCode.NONE), int(ErrorCode.NONE))


MembershipRequest = JoinGroupRequest | SyncGroupRequest | HeartbeatRequest | LeaveGroupRequest
MembershipResponse = JoinGroupResponse | SyncGroupResponse | HeartbeatResponse | LeaveGroupResponse

