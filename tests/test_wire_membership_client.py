"""The classic group protocol in the client direction (``idemcore.net.wire.client``): JoinGroup, SyncGroup,
Heartbeat and LeaveGroup written as the server reads them and read back as the server wrote them, at every
version both sides speak; TcpTransport routes them to the group coordinator and may be shared with a second
thread (a consumer's heartbeats)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from idemcore.net.membership import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import OffsetCommitRequest, OffsetEntry, TxnOffsetCommitRequest
from idemcore.net.tcp import TcpTransport
from idemcore.net.wire import client as wire_client
from idemcore.net.wire.api import WireContext
from idemcore.net.wire.apis import APIS
from idemcore.net.wire.frames import read_request, read_response, request_frame, response_frame
from idemcore.protocol.codes import ErrorCode

CTX = WireContext(7, "broker.example", 9092, "cluster", lambda: {"t": 3})
STATIC = "instance-1"


def _cases(version: int, key: int) -> tuple[Any, Any]:
    """A request and its answer as the version can carry them (instance ids only where it has them)."""
    static = STATIC if (key == 11 and version >= 5) or (key in (12, 14) and version >= 3) else None
    if key == 11:
        return (JoinGroupRequest("g", 10_000, 30_000 if version >= 1 else 10_000, "consumer",
                                 (("range", b"\x00\x01sub"), ("roundrobin", b"rr")), member_id="m-1",
                                 group_instance_id=static, reason="joining" if version >= 8 else None),
                JoinGroupResponse(0, 4, "consumer" if version >= 7 else None, "range", "m-1", "m-1",
                                  (("m-1", STATIC if version >= 5 else None, b"\x00\x01sub"), ("m-2", None, b"x"))))
    if key == 14:
        typed = version >= 5
        return (SyncGroupRequest("g", 4, "m-1", (("m-1", b"a1"), ("m-2", b"a2")), static,
                                 "consumer" if typed else None, "range" if typed else None),
                SyncGroupResponse(0, b"a1", "consumer" if typed else None, "range" if typed else None))
    if key == 12:
        return HeartbeatRequest("g", 4, "m-1", static), HeartbeatResponse(int(ErrorCode.REBALANCE_IN_PROGRESS))
    if version < 3:
        return (LeaveGroupRequest("g", (LeavingMember("m-1"),)),
                LeaveGroupResponse(0, (LeftMember("m-1", None, 0),)))
    reason = "bye" if version >= 5 else None
    return (LeaveGroupRequest("g", (LeavingMember("m-1", None, reason), LeavingMember("", STATIC, reason))),
            LeaveGroupResponse(0, (LeftMember("m-1", None, 0), LeftMember("", STATIC, 25))))


def _versions() -> list[tuple[int, int]]:
    out = []
    for key in (11, 12, 13, 14):
        api, server = wire_client.BY_KEY[key], APIS[key]
        out += [(key, v) for v in range(max(api.min_version, server.min_version),
                                         min(api.max_version, server.max_version) + 1)]
    return out


def _without_request_fields(message: Any) -> Any:
    """The fields the server's message has but the client's request does not set (client id, derived flags)."""
    if isinstance(message, JoinGroupRequest):
        return replace(message, client_id="", member_id_required=True, request_id=0)
    return replace(message, request_id=0)


@pytest.mark.parametrize(("key", "version"), _versions())
def test_membership_round_trip(key: int, version: int) -> None:
    api, server = wire_client.BY_KEY[key], APIS[key]
    request, response = _cases(version, key)
    frame = request_frame(key, version, 31, "test-client", api.encode(replace(request, request_id=31), version))
    _, body = read_request(memoryview(frame)[4:])
    read, carry = server.to_message(CTX, version, 31, body)
    assert _without_request_fields(read) == _without_request_fields(request)
    chunks = response_frame(31, server.to_wire(CTX, version, body, replace(response, request_id=31), carry))
    _, kio_body = read_response(key, version, b"".join(chunks)[4:])
    decoded = api.decode(replace(request, request_id=31), version, kio_body)
    assert decoded == replace(response, request_id=31)


@pytest.mark.parametrize(("key", "version", "message"), [
    (11, 4, JoinGroupRequest("g", 10_000, 30_000, "consumer", (("range", b""),), group_instance_id=STATIC)),
    (14, 2, SyncGroupRequest("g", 1, "m", group_instance_id=STATIC)),
    (12, 2, HeartbeatRequest("g", 1, "m", STATIC)),
    (13, 2, LeaveGroupRequest("g", (LeavingMember("", STATIC),))),
])
def test_a_static_member_is_refused_a_version_without_instance_ids(key: int, version: int, message: Any) -> None:
    with pytest.raises(wire_client.WireProtocolError, match=r"v2|v4|instance"):
        wire_client.BY_KEY[key].encode(message, version)


def test_offset_commits_carry_the_instance_id() -> None:
    """OffsetCommit v7+ and TxnOffsetCommit v3+ carry a static member's instance id to the coordinator."""
    for key, request, version in (
            (8, OffsetCommitRequest("g", (OffsetEntry("t", 0, 5),), 3, "m", group_instance_id=STATIC), 8),
            (28, TxnOffsetCommitRequest("tx", "g", 9, 1, (OffsetEntry("t", 0, 5),), 3, "m",
                                        group_instance_id=STATIC), 3)):
        frame = request_frame(key, version, 5, "c", wire_client.BY_KEY[key].encode(request, version))
        _, body = read_request(memoryview(frame)[4:])
        read, _ = APIS[key].to_message(CTX, version, 5, body)
        assert (read.group_instance_id, read.member_id, read.generation_id) == (STATIC, "m", 3)


def _call(transport: TcpTransport, client: str, request: Any, timeout_s: float = 20.0) -> Any:
    import time

    transport.send(client, request)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for sent, answer in transport.poll(client):
            if sent is request:
                return answer
        transport.tick()
    raise AssertionError(f"no answer to {request!r:.80}")


def test_a_group_over_tcp_with_heartbeats_from_a_second_thread(kafka_server: Any) -> None:
    """JoinGroup (MEMBER_ID_REQUIRED, then joined as leader), SyncGroup, heartbeats sent by a second thread
    sharing the transport while the first keeps polling its own client, and LeaveGroup: each reaches the group
    coordinator over TCP and comes back to the client that sent it."""
    with TcpTransport(kafka_server.bootstrap, client_id="member-client") as transport:
        join = JoinGroupRequest("tcp-group", 10_000, 10_000, "consumer", (("range", b"sub"),), request_id=1)
        first = _call(transport, "member", join)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        joined = _call(transport, "member", replace(join, member_id=first.member_id, request_id=2), 30.0)
        assert joined.error_code == ErrorCode.NONE and joined.leader == first.member_id
        assert joined.members == ((first.member_id, None, b"sub"),)
        synced = _call(transport, "member", SyncGroupRequest("tcp-group", joined.generation_id, first.member_id,
                                                             ((first.member_id, b"mine"),), request_id=3))
        assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, b"mine")
        beats: list[int] = []

        def heartbeats() -> None:
            for n in range(20):
                beat = HeartbeatRequest("tcp-group", joined.generation_id, first.member_id, request_id=100 + n)
                beats.append(_call(transport, "heartbeat", beat).error_code)

        thread = threading.Thread(target=heartbeats, daemon=True)
        thread.start()
        for _ in range(200):  # the first thread keeps using the transport meanwhile
            assert transport.poll("member") == []
            transport.tick()
        thread.join(30)
        assert not thread.is_alive() and beats == [ErrorCode.NONE] * 20
        left = _call(transport, "member", LeaveGroupRequest("tcp-group", (LeavingMember(first.member_id),),
                                                            request_id=4))
        assert left.error_code == ErrorCode.NONE and [m.error_code for m in left.members] == [ErrorCode.NONE]
        stale = _call(transport, "member", HeartbeatRequest("tcp-group", joined.generation_id, first.member_id,
                                                            request_id=5))
        assert stale.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION)
