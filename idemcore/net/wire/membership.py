"""The classic consumer-group APIs on the wire: JoinGroup, SyncGroup, Heartbeat and LeaveGroup (messages in
:mod:`idemcore.net.membership`).

Every version kio has is served: JoinGroup v0–9 (v4+: a first join without a member id is answered
MEMBER_ID_REQUIRED; v0 has no rebalance timeout, the session timeout stands for it), SyncGroup v0–5, Heartbeat
v0–4, LeaveGroup v0–5 (v0–2: one member and one error code, Kafka's ``LeaveGroupResponse.getError``).
``group_instance_id`` is read (static membership, KIP-345: :mod:`idemcore.broker.group.membership`); the
request header's client id reaches a JoinGroup through :func:`with_client`. JoinGroup v9's ``skip_assignment`` is
always false (Kafka sets it for a returning static leader, KIP-814; here that leader is answered as before v9:
named a follower, it syncs for its assignment).
JoinGroup and SyncGroup answers may come late (a ``Pending``): the server translates them once complete."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.consumer_group import ConsumerGroupHeartbeatRequest
from idemcore.net.membership import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import Response
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.frames import make, millis, nested, optional_str, response_class
from idemcore.net.wire.transactions import NO_THROTTLE, answer_of

#: The first JoinGroup version whose clients expect MEMBER_ID_REQUIRED (Kafka's requiresKnownMemberId).
MEMBER_ID_REQUIRED_SINCE = 4


# ---------------------------------------------------------------- JoinGroup (key 11)


def with_client(message: Any, client_id: str | None, peer: Any) -> Any:
    """``message`` with what the request header and the connection say of the client, for the requests that keep
    it (a JoinGroup: its member id starts with the client id, DescribeGroups shows both; a ConsumerGroupHeartbeat:
    ConsumerGroupDescribe shows both; Kafka's ``RequestContext.clientId`` and ``clientAddress``, shown as
    ``/<host>``). Other messages are returned as they are. The server calls this after the translation, which sees
    only the body."""
    if not isinstance(message, JoinGroupRequest | ConsumerGroupHeartbeatRequest):
        return message
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    return dataclasses.replace(message, client_id=client_id or "", client_host=f"/{host}" if host else "")



def _join_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    session = millis(body.session_timeout)
    request = JoinGroupRequest(
        str(body.group_id), session,
        millis(body.rebalance_timeout) if version >= 1 else session,
        str(body.protocol_type), tuple((str(p.name), bytes(p.metadata)) for p in body.protocols),
        member_id=str(body.member_id), group_instance_id=optional_str(getattr(body, "group_instance_id", None)),
        member_id_required=version >= MEMBER_ID_REQUIRED_SINCE, reason=optional_str(getattr(body, "reason", None)),
        request_id=correlation_id)
    return request, None


def _join_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, JoinGroupResponse)
    cls = response_class(body)
    member_cls = nested(cls, "JoinGroupResponseMember")
    members = tuple(make(member_cls, member_id=member_id, group_instance_id=instance, metadata=metadata)
                    for member_id, instance, metadata in response.members)
    # Before v7 the protocol name is not nullable: Kafka sends "" for none.
    name = response.protocol_name if version >= 7 else (response.protocol_name or "")
    return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(response.error_code),
                generation_id=response.generation_id, protocol_type=response.protocol_type, protocol_name=name,
                leader=response.leader, skip_assignment=False, member_id=response.member_id, members=members)


JOIN_GROUP = WireApi(11, "JoinGroup", 0, 9, _join_to_message, _join_to_wire)


# ---------------------------------------------------------------- SyncGroup (key 14)


def _sync_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    request = SyncGroupRequest(
        str(body.group_id), int(body.generation_id), str(body.member_id),
        tuple((str(a.member_id), bytes(a.assignment)) for a in body.assignments),
        group_instance_id=optional_str(getattr(body, "group_instance_id", None)),
        protocol_type=optional_str(getattr(body, "protocol_type", None)),
        protocol_name=optional_str(getattr(body, "protocol_name", None)), request_id=correlation_id)
    return request, None


def _sync_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, SyncGroupResponse)
    return make(response_class(body), throttle_time=NO_THROTTLE, error_code=WireError(response.error_code),
                protocol_type=response.protocol_type, protocol_name=response.protocol_name,
                assignment=response.assignment)


SYNC_GROUP = WireApi(14, "SyncGroup", 0, 5, _sync_to_message, _sync_to_wire)


# ---------------------------------------------------------------- Heartbeat (key 12)


def _heartbeat_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return HeartbeatRequest(str(body.group_id), int(body.generation_id), str(body.member_id),
                            optional_str(getattr(body, "group_instance_id", None)), correlation_id), None


def _heartbeat_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, HeartbeatResponse)
    return make(response_class(body), throttle_time=NO_THROTTLE, error_code=WireError(response.error_code))


HEARTBEAT = WireApi(12, "Heartbeat", 0, 4, _heartbeat_to_message, _heartbeat_to_wire)


# ---------------------------------------------------------------- LeaveGroup (key 13)


def _leave_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    if version < 3:
        members: tuple[LeavingMember, ...] = (LeavingMember(str(body.member_id)),)
    else:
        members = tuple(LeavingMember(str(m.member_id), optional_str(m.group_instance_id),
                                      optional_str(getattr(m, "reason", None))) for m in body.members)
    return LeaveGroupRequest(str(body.group_id), members, correlation_id), None


def _leave_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, LeaveGroupResponse)
    cls = response_class(body)
    if version < 3:
        return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(response.error))
    member_cls = nested(cls, "MemberResponse")
    return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(response.error_code), members=tuple(
        make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
             error_code=WireError(m.error_code)) for m in response.members))


LEAVE_GROUP = WireApi(13, "LeaveGroup", 0, 5, _leave_to_message, _leave_to_wire)

MEMBERSHIP_APIS = (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP)
