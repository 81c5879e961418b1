"""JoinGroup v0–9, SyncGroup v0–5, Heartbeat v0–4 and LeaveGroup v0–5 on the wire: every served version built by
kafka-python 3 as a client sends it (and byte-identical from kio), translated into a message, answered by a real
group coordinator (late answers included), translated back, framed by kio, and read by kafka-python's independent
codec (``kafka.protocol``, generated from the same Kafka JSON schemas), whose re-encoding must give the same bytes
(docs/research/kio-evaluation.md)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from kafka.protocol.consumer import group as kp
from kio.index import load_request_schema, load_response_schema

from idemcore.broker.group import GroupCoordinator
from idemcore.broker.group import membership_requests as mr
from idemcore.net.membership import (
    MEMBER_ID_REQUIRED,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import Pending
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.frames import make, nested, read_request, read_response, request_frame, response_frame
from idemcore.net.wire.membership import HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, MEMBERSHIP_APIS, SYNC_GROUP
from idemcore.record.batch import RecordBatch
from idemcore.record.stored import StoredBatch

CTX = WireContext(node_id=0, host="127.0.0.1", port=9092, cluster_id="idemcore", topics=lambda: {"t": 4})
T0 = 1_700_000_000_000
DELAY = 3_000
KP = {11: (kp.JoinGroupRequest, kp.JoinGroupResponse), 14: (kp.SyncGroupRequest, kp.SyncGroupResponse),
      12: (kp.HeartbeatRequest, kp.HeartbeatResponse), 13: (kp.LeaveGroupRequest, kp.LeaveGroupResponse)}
SERVED = [(api, version) for api in MEMBERSHIP_APIS for version in range(api.min_version, api.max_version + 1)]
HANDLERS = {JoinGroupRequest: mr.join_group, SyncGroupRequest: mr.sync_group, HeartbeatRequest: mr.heartbeat,
            LeaveGroupRequest: mr.leave_group}


class FakeLog:
    def __init__(self) -> None:
        self.batches: dict[int, list[StoredBatch]] = defaultdict(list)

    def append(self, partition, records, producer_id, producer_epoch, transactional):
        stored = self.batches[partition]
        base = stored[-1].next_offset if stored else 0
        stored.append(StoredBatch(base, RecordBatch("__consumer_offsets", partition, tuple(v for _, v in records),
                                                    tuple(k for k, _ in records), producer_id, producer_epoch, -1,
                                                    T0, transactional)))
        return 0, base


class Server:
    """A group coordinator behind the four translations, as a server without its socket calls them."""

    def __init__(self) -> None:
        self.now = T0
        self.gc = GroupCoordinator(FakeLog(), lambda: self.now, offsets_partitions=1,
                                   initial_rebalance_delay_ms=DELAY)
        self.gc.load(0, [])

    def send(self, api: WireApi, version: int, correlation_id: int, **fields: Any) -> tuple[Any, Any, Any, Any]:
        """kafka-python's request frame read and translated: ``(body, message, carry, answer or Pending)``."""
        frame = client_frame(api, version, correlation_id, **fields)
        header, body = read_request(frame[4:])
        assert header.correlation_id == correlation_id
        message, carry = api.to_message(CTX, version, header.correlation_id, body)
        return body, message, carry, HANDLERS[type(message)](self.gc, message)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.gc.expire(self.now)


def client_frame(api: WireApi, version: int, correlation_id: int, **fields: Any) -> bytes:
    request = KP[api.key][0](**fields, version=version)
    request.with_header(correlation_id=correlation_id, client_id="wire-test")
    return bytes(request.encode(header=True, framed=True))


def client_reads(api: WireApi, version: int, body: Any, response: Any, carry: Any,
                 correlation_id: int) -> dict[str, Any]:
    """The answer translated, framed by kio, read back by kio and by kafka-python (whose re-encoding must be the
    same bytes); kafka-python's reading."""
    if isinstance(response, Pending):
        assert response.done, "the answer is still pending"
        response = response.response
    entity = api.to_wire(CTX, version, body, response, carry)
    assert (entity.__api_key__, entity.__version__) == (api.key, version)
    frame = b"".join(response_frame(correlation_id, entity))
    assert read_response(api.key, version, frame[4:]) == (correlation_id, entity)
    decoded = KP[api.key][1].decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == correlation_id
    assert decoded.encode(header=True, framed=True) == frame
    return decoded.to_dict(json=False)


def protocols(*pairs: tuple[str, bytes]) -> list[Any]:
    return [kp.JoinGroupRequest.JoinGroupRequestProtocol(name=name, metadata=data) for name, data in pairs]


def test_served_versions_are_what_kio_and_kafka_python_both_have():
    assert [(a.key, a.name, a.min_version, a.max_version) for a in MEMBERSHIP_APIS] == [
        (11, "JoinGroup", 0, 9), (14, "SyncGroup", 0, 5), (12, "Heartbeat", 0, 4), (13, "LeaveGroup", 0, 5)]
    for api, version in SERVED:
        load_request_schema(api.key, version)
        load_response_schema(api.key, version)
        request_cls, response_cls = KP[api.key]
        assert request_cls.min_version <= version <= request_cls.max_version
        assert response_cls.min_version <= version <= response_cls.max_version
    with pytest.raises(Exception):  # noqa: B017 - kio has no JoinGroup v10: nothing beyond is advertised
        load_request_schema(11, 10)


# ---------------------------------------------------------------- requests: client bytes -> message


@pytest.mark.parametrize("version", range(10))
def test_join_group_request(version):
    fields = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 45_000, "member_id": "m-1",
              "group_instance_id": "static" if version >= 5 else None, "protocol_type": "consumer",
              "protocols": protocols(("range", b"\x00\x01sub"), ("roundrobin", b"")), "reason": "because"}
    frame = client_frame(JOIN_GROUP, version, 5, **fields)
    cls = load_request_schema(11, version)
    proto = nested(cls, "JoinGroupRequestProtocol")
    kio_body = make(cls, group_id="g", session_timeout=10_000, rebalance_timeout=45_000, member_id="m-1",
                    group_instance_id=fields["group_instance_id"], protocol_type="consumer",
                    protocols=(make(proto, name="range", metadata=b"\x00\x01sub"),
                               make(proto, name="roundrobin", metadata=b"")), reason="because")
    assert request_frame(11, version, 5, "wire-test", kio_body) == frame
    header, body = read_request(frame[4:])
    message, _ = JOIN_GROUP.to_message(CTX, version, header.correlation_id, body)
    assert message == JoinGroupRequest(
        "g", 10_000, 45_000 if version >= 1 else 10_000,  # v0 has no rebalance timeout: the session's stands
        "consumer", (("range", b"\x00\x01sub"), ("roundrobin", b"")), "m-1",
        "static" if version >= 5 else None, member_id_required=version >= 4,
        reason="because" if version >= 8 else None, request_id=5)


@pytest.mark.parametrize("version", range(6))
def test_sync_group_request(version):
    fields = {"group_id": "g", "generation_id": 7, "member_id": "m-1", "group_instance_id": None,
              "protocol_type": "consumer", "protocol_name": "range",
              "assignments": [kp.SyncGroupRequest.SyncGroupRequestAssignment(member_id="m-1", assignment=b"a1"),
                              kp.SyncGroupRequest.SyncGroupRequestAssignment(member_id="m-2", assignment=b"")]}
    frame = client_frame(SYNC_GROUP, version, 6, **fields)
    header, body = read_request(frame[4:])
    message, _ = SYNC_GROUP.to_message(CTX, version, header.correlation_id, body)
    assert message == SyncGroupRequest("g", 7, "m-1", (("m-1", b"a1"), ("m-2", b"")), None,
                                       "consumer" if version >= 5 else None, "range" if version >= 5 else None, 6)


@pytest.mark.parametrize("version", range(6))
def test_leave_group_request(version):
    if version < 3:
        fields: dict[str, Any] = {"group_id": "g", "member_id": "m-1"}
        expected: tuple[LeavingMember, ...] = (LeavingMember("m-1"),)
    else:
        identity = kp.LeaveGroupRequest.MemberIdentity
        fields = {"group_id": "g", "members": [identity(member_id="m-1", group_instance_id=None, reason="bye"),
                                               identity(member_id="", group_instance_id="static", reason=None)]}
        expected = (LeavingMember("m-1", None, "bye" if version >= 5 else None), LeavingMember("", "static"))
    frame = client_frame(LEAVE_GROUP, version, 7, **fields)
    header, body = read_request(frame[4:])
    message, _ = LEAVE_GROUP.to_message(CTX, version, header.correlation_id, body)
    assert message == LeaveGroupRequest("g", expected, 7)


# ---------------------------------------------------------------- a group over the wire, per version


@pytest.mark.parametrize("join_version", range(10))
def test_one_consumer_joins_syncs_heartbeats_and_leaves_over_the_wire(join_version):
    sync_version, beat_version, leave_version = min(join_version, 5), min(join_version, 4), min(join_version, 5)
    server = Server()
    join_fields = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 20_000,
                   "protocol_type": "consumer", "protocols": protocols(("range", b"subscription"))}
    body, _, carry, answer = server.send(JOIN_GROUP, join_version, 1, member_id="", **join_fields)
    if join_version >= 4:  # KIP-394: the coordinator hands out the id first
        read = client_reads(JOIN_GROUP, join_version, body, answer, carry, 1)
        assert read["error_code"] == MEMBER_ID_REQUIRED and read["generation_id"] == -1
        member_id = read["member_id"]
        assert member_id
        body, _, carry, answer = server.send(JOIN_GROUP, join_version, 2, member_id=member_id, **join_fields)
    assert isinstance(answer, Pending) and not answer.done
    server.advance(DELAY)
    read = client_reads(JOIN_GROUP, join_version, body, answer, carry, 2)
    member_id = read["member_id"]
    expected_members = [{"member_id": member_id, "metadata": b"subscription"}]
    if join_version >= 5:
        expected_members[0]["group_instance_id"] = None
    assert read["error_code"] == 0 and read["generation_id"] == 1 and read["leader"] == member_id
    assert read["protocol_name"] == "range" and read["members"] == expected_members
    if join_version >= 7:
        assert read["protocol_type"] == "consumer"
    if join_version >= 9:
        assert read["skip_assignment"] is False

    assignment = kp.SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=b"\x00\x03t-0")
    body, _, carry, answer = server.send(SYNC_GROUP, sync_version, 3, group_id="g", generation_id=1,
                                         member_id=member_id, group_instance_id=None, protocol_type="consumer",
                                         protocol_name="range", assignments=[assignment])
    read = client_reads(SYNC_GROUP, sync_version, body, answer, carry, 3)
    assert read["error_code"] == 0 and read["assignment"] == b"\x00\x03t-0"
    if sync_version >= 5:
        assert (read["protocol_type"], read["protocol_name"]) == ("consumer", "range")

    beat = {"group_id": "g", "member_id": member_id, "group_instance_id": None}
    body, _, carry, answer = server.send(HEARTBEAT, beat_version, 4, generation_id=1, **beat)
    assert client_reads(HEARTBEAT, beat_version, body, answer, carry, 4)["error_code"] == 0
    body, _, carry, answer = server.send(HEARTBEAT, beat_version, 5, generation_id=0, **beat)
    assert client_reads(HEARTBEAT, beat_version, body, answer, carry, 5)["error_code"] == 22  # ILLEGAL_GENERATION

    if leave_version < 3:
        leave_fields: dict[str, Any] = {"member_id": member_id}
    else:
        leave_fields = {"members": [kp.LeaveGroupRequest.MemberIdentity(member_id=member_id)]}
    body, _, carry, answer = server.send(LEAVE_GROUP, leave_version, 6, group_id="g", **leave_fields)
    read = client_reads(LEAVE_GROUP, leave_version, body, answer, carry, 6)
    assert read["error_code"] == 0
    if leave_version >= 3:
        assert [m["member_id"] for m in read["members"]] == [member_id]
        assert [m["error_code"] for m in read["members"]] == [0]
    body, _, carry, answer = server.send(HEARTBEAT, beat_version, 7, generation_id=1, **beat)
    assert client_reads(HEARTBEAT, beat_version, body, answer, carry, 7)["error_code"] == 25  # UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", range(6))
def test_leave_group_errors_per_version(version):
    """v0–2 carry one code: the member's error (Kafka's LeaveGroupResponse.getError); v3+ one per member."""
    body, _, carry, answer = Server().send(LEAVE_GROUP, version, 8, group_id="g",
                                           **({"member_id": "gone"} if version < 3 else {"members": [
                                               kp.LeaveGroupRequest.MemberIdentity(member_id="gone")]}))
    assert answer == LeaveGroupResponse(0, (LeftMember("gone", None, 25),), 8)
    read = client_reads(LEAVE_GROUP, version, body, answer, carry, 8)
    if version < 3:
        assert read["error_code"] == 25
    else:
        assert read["error_code"] == 0 and [m["error_code"] for m in read["members"]] == [25]


@pytest.mark.parametrize("version", range(10))
def test_a_join_error_carries_no_protocol(version):
    """Before v7 the protocol name is not nullable: an error answer sends "" (as Kafka); v7+ sends null."""
    body, _, carry, answer = Server().send(
        JOIN_GROUP, version, 9, group_id="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        protocol_type="consumer", protocols=protocols(("range", b"")))
    assert isinstance(answer, JoinGroupResponse) and answer.error_code == 24  # INVALID_GROUP_ID
    read = client_reads(JOIN_GROUP, version, body, answer, carry, 9)
    assert read["error_code"] == 24 and read["members"] == []
    assert read["protocol_name"] == ("" if version < 7 else None)


def test_two_members_and_a_follower_waiting_for_its_assignment_over_the_wire():
    server = Server()
    fields = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 20_000,
              "protocol_type": "consumer", "protocols": protocols(("range", b"s"))}
    joins = []
    for correlation_id in (1, 2):
        _, _, _, first = server.send(JOIN_GROUP, 9, correlation_id, member_id="", **fields)
        joins.append(server.send(JOIN_GROUP, 9, correlation_id + 10, member_id=first.member_id, **fields))
    while not joins[0][3].done:
        server.advance(DELAY)
    reads = [client_reads(JOIN_GROUP, 9, body, answer, carry, 11 + k) for k, (body, _, carry, answer)
             in enumerate(joins)]
    leader, follower = reads[0]["member_id"], reads[1]["member_id"]
    assert reads[1]["leader"] == leader and reads[1]["members"] == []
    assert [m["member_id"] for m in reads[0]["members"]] == [leader, follower]
    generation = reads[0]["generation_id"]
    waiting = server.send(SYNC_GROUP, 5, 20, group_id="g", generation_id=generation, member_id=follower,
                          assignments=[])
    assert isinstance(waiting[3], Pending) and not waiting[3].done
    assign = kp.SyncGroupRequest.SyncGroupRequestAssignment
    body, _, carry, answer = server.send(SYNC_GROUP, 5, 21, group_id="g", generation_id=generation,
                                         member_id=leader, assignments=[assign(member_id=leader, assignment=b"L"),
                                                                        assign(member_id=follower, assignment=b"F")])
    assert client_reads(SYNC_GROUP, 5, body, answer, carry, 21)["assignment"] == b"L"
    assert client_reads(SYNC_GROUP, 5, waiting[0], waiting[3], waiting[2], 20)["assignment"] == b"F"
    assert isinstance(waiting[3].response, SyncGroupResponse) and waiting[3].response.request_id == 20
