"""DescribeGroups v0–6, ListGroups v0–5, DeleteGroups v0–2 and OffsetDelete v0 on the wire: every served version
from a client's request bytes (kafka-python 3's independent codec, generated from the same Kafka JSON schemas)
through the translation into idemcore's messages, and idemcore's answers back through kio's framing, read by both
kio and kafka-python (whose own re-encoding must give the same bytes)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin import groups as kp
from kafka.protocol.consumer.group import OffsetDeleteRequest as KpOffsetDeleteRequest
from kafka.protocol.consumer.group import OffsetDeleteResponse as KpOffsetDeleteResponse
from kio.index import load_request_schema, load_response_schema

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
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.apis import APIS, advertised
from idemcore.net.wire.client import BY_KEY, CLIENT_APIS
from idemcore.net.wire.frames import read_request, read_response, request_frame, response_frame
from idemcore.net.wire.group_admin import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    GROUP_ADMIN_APIS,
    LIST_GROUPS,
    OFFSET_DELETE,
)
from idemcore.protocol.codes import ErrorCode

CTX = WireContext(node_id=0, host="127.0.0.1", port=9092, cluster_id="idemcore", topics=lambda: {"t": 2})
KP = {15: (kp.DescribeGroupsRequest, kp.DescribeGroupsResponse), 16: (kp.ListGroupsRequest, kp.ListGroupsResponse),
      42: (kp.DeleteGroupsRequest, kp.DeleteGroupsResponse), 47: (KpOffsetDeleteRequest, KpOffsetDeleteResponse)}
SERVED = [(api, version) for api in GROUP_ADMIN_APIS for version in range(api.min_version, api.max_version + 1)]


def client_request(api: WireApi, version: int, correlation_id: int, **fields: Any) -> tuple[Any, Any]:
    """kafka-python's request frame, read by the server and translated: ``(kio body, idemcore message)``."""
    request = KP[api.key][0](**fields, version=version)
    request.with_header(correlation_id=correlation_id, client_id="group-admin-test")
    frame = bytes(request.encode(header=True, framed=True))
    header, body = read_request(memoryview(frame)[4:])
    assert (header.request_api_key, header.request_api_version) == (api.key, version)
    message, carry = api.to_message(CTX, version, correlation_id, body)
    assert carry is None and message.request_id == correlation_id
    return body, message


def answered(api: WireApi, version: int, body: Any, response: Any, correlation_id: int = 7) -> tuple[Any, dict]:
    """``response`` translated and framed; ``(kio's reading, kafka-python's reading)``."""
    entity = api.to_wire(CTX, version, body, response, None)
    assert (entity.__api_key__, entity.__version__) == (api.key, version)
    frame = b"".join(response_frame(correlation_id, entity))
    read_id, kio_body = read_response(api.key, version, memoryview(frame)[4:])
    assert read_id == correlation_id
    decoded = KP[api.key][1].decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == correlation_id
    assert decoded.encode(header=True, framed=True) == frame
    return kio_body, decoded.to_dict()


def test_served_versions_are_every_version_kio_has():
    assert [(a.key, a.name, a.min_version, a.max_version) for a in GROUP_ADMIN_APIS] == [
        (15, "DescribeGroups", 0, 6), (16, "ListGroups", 0, 5), (42, "DeleteGroups", 0, 2), (47, "OffsetDelete", 0, 0)]
    for api in GROUP_ADMIN_APIS:
        assert APIS[api.key] is api
        assert (api.key, api.min_version, api.max_version) in advertised()
        for version in range(api.min_version, api.max_version + 1):
            load_request_schema(api.key, version)
            load_response_schema(api.key, version)
        with pytest.raises(Exception):  # noqa: B017  # kio's own UnknownEntity: nothing newer to serve
            load_request_schema(api.key, api.max_version + 1)


MEMBERS = (DescribedMember("m-1", "static-1", "c1", "/10.0.0.1", b"\x00\x03sub", b"\x00\x03asg"),
           DescribedMember("m-2", None, "c2", "/10.0.0.2", b"", b""))


@pytest.mark.parametrize("version", range(0, 7))
def test_describe_groups(version):
    body, message = client_request(DESCRIBE_GROUPS, version, 41, groups=["g1", "gone", "bad"],
                                    include_authorized_operations=True)
    assert message == DescribeGroupsRequest(("g1", "gone", "bad"), version >= 3, 41)
    response = DescribeGroupsResponse((
        DescribedGroup("g1", 0, "Stable", "consumer", "range", MEMBERS),
        DescribedGroup("gone", 0),  # a group the coordinator does not have: Dead
        DescribedGroup("bad", int(ErrorCode.NOT_COORDINATOR))), 41)
    kio_body, kp_body = answered(DESCRIBE_GROUPS, version, body, response)
    stable, gone, bad = kio_body.groups
    assert (stable.group_id, stable.group_state, stable.protocol_type, stable.protocol_data, stable.error_code) == (
        "g1", "Stable", "consumer", "range", 0)
    assert [(m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
            for m in stable.members] == [("m-1", "c1", "/10.0.0.1", b"\x00\x03sub", b"\x00\x03asg"),
                                         ("m-2", "c2", "/10.0.0.2", b"", b"")]
    instance_ids = [m.get("group_instance_id") for m in kp_body["groups"][0]["members"]]
    assert instance_ids == (["static-1", None] if version >= 4 else [None, None])
    assert gone.group_state == "Dead" and gone.members == ()
    if version >= 6:  # KIP-1043
        assert gone.error_code == ErrorCode.GROUP_ID_NOT_FOUND and gone.error_message == "Group gone not found."
    else:
        assert gone.error_code == 0
    assert bad.error_code == ErrorCode.NOT_COORDINATOR
    if version >= 3:
        assert stable.authorized_operations == -(1 << 31)  # no authorizer: "not provided"
    assert [g["group_id"] for g in kp_body["groups"]] == ["g1", "gone", "bad"]


def test_describe_groups_v6_names_a_refusal():
    body, _ = client_request(DESCRIBE_GROUPS, 6, 1, groups=["g"])
    refused = DescribeGroupsResponse((DescribedGroup("g", int(ErrorCode.INVALID_REQUEST)),), 1, "group_ids: bad")
    kio_body, _ = answered(DESCRIBE_GROUPS, 6, body, refused)
    assert (kio_body.groups[0].error_code, kio_body.groups[0].error_message) == (
        ErrorCode.INVALID_REQUEST, "group_ids: bad")


@pytest.mark.parametrize("version", range(0, 6))
def test_list_groups(version):
    fields = {}
    if version >= 4:
        fields["states_filter"] = ["Stable", "empty"]
    if version >= 5:
        fields["types_filter"] = ["classic"]
    body, message = client_request(LIST_GROUPS, version, 9, **fields)
    assert message == ListGroupsRequest(("Stable", "empty") if version >= 4 else (),
                                        ("classic",) if version >= 5 else (), 9)
    response = ListGroupsResponse(0, (ListedGroup("g1", "consumer", "Stable"),
                                      ListedGroup("g2", "", "Empty"),
                                      ListedGroup("g3", "consumer", "Stable", "consumer")), 9)
    kio_body, kp_body = answered(LIST_GROUPS, version, body, response)
    assert kio_body.error_code == 0
    assert [(g.group_id, g.protocol_type) for g in kio_body.groups] == [("g1", "consumer"), ("g2", ""),
                                                                         ("g3", "consumer")]
    if version >= 4:
        assert [g.group_state for g in kio_body.groups] == ["Stable", "Empty", "Stable"]
    if version >= 5:
        assert [g.group_type for g in kio_body.groups] == ["classic", "classic", "consumer"]
    assert [g["group_id"] for g in kp_body["groups"]] == ["g1", "g2", "g3"]
    error = ListGroupsResponse(int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), request_id=9)
    assert answered(LIST_GROUPS, version, body, error)[0].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_groups(version):
    body, message = client_request(DELETE_GROUPS, version, 5, groups_names=["live", "gone", "done"])
    assert message == DeleteGroupsRequest(("live", "gone", "done"), 5)
    response = DeleteGroupsResponse((("live", int(ErrorCode.NON_EMPTY_GROUP)),
                                     ("gone", int(ErrorCode.GROUP_ID_NOT_FOUND)), ("done", 0)), 5)
    kio_body, kp_body = answered(DELETE_GROUPS, version, body, response)
    assert [(r.group_id, r.error_code) for r in kio_body.results] == [
        ("live", ErrorCode.NON_EMPTY_GROUP), ("gone", ErrorCode.GROUP_ID_NOT_FOUND), ("done", 0)]
    assert [(r["group_id"], r["error_code"]) for r in kp_body["results"]] == [("live", 68), ("gone", 69), ("done", 0)]


def test_offset_delete():
    topic_cls = KpOffsetDeleteRequest.OffsetDeleteRequestTopic
    partition_cls = topic_cls.OffsetDeleteRequestPartition
    body, message = client_request(OFFSET_DELETE, 0, 3, group_id="g", topics=[
        topic_cls(name="a", partitions=[partition_cls(partition_index=0), partition_cls(partition_index=2)]),
        topic_cls(name="b", partitions=[partition_cls(partition_index=1)])])
    assert message == OffsetDeleteRequest("g", (("a", 0), ("a", 2), ("b", 1)), 3)
    response = OffsetDeleteResponse(0, (("a", 0, 0), ("a", 2, 0), ("b", 1, int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))),
                                    3)
    kio_body, kp_body = answered(OFFSET_DELETE, 0, body, response)
    assert kio_body.error_code == 0
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in kio_body.topics] == [
        ("a", [(0, 0), (2, 0)]), ("b", [(1, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)])]
    assert kp_body["topics"][1]["partitions"][0]["error_code"] == 86
    refused = answered(OFFSET_DELETE, 0, body, OffsetDeleteResponse(int(ErrorCode.NON_EMPTY_GROUP), request_id=3))[0]
    assert (refused.error_code, refused.topics) == (ErrorCode.NON_EMPTY_GROUP, ())


@pytest.mark.parametrize(("api", "version"), SERVED, ids=lambda v: getattr(v, "name", str(v)))
def test_every_version_answers_an_empty_request(api, version):
    """The smallest request of each version (no groups, no filters) translates and is answered."""
    fields = {15: {"groups": []}, 16: {}, 42: {"groups_names": []}, 47: {"group_id": "g", "topics": []}}[api.key]
    body, _ = client_request(api, version, 2, **fields)
    empty = {15: DescribeGroupsResponse((), 2), 16: ListGroupsResponse(0, (), 2), 42: DeleteGroupsResponse((), 2),
             47: OffsetDeleteResponse(0, (), 2)}[api.key]
    answered(api, version, body, empty)


# ---------------------------------------------------------------- idemcore's client side, against its server side

ROUND_TRIPS = [
    (DescribeGroupsRequest(("g1", "gone"), True, 11), DescribeGroupsResponse((
        DescribedGroup("g1", 0, "Stable", "consumer", "range", MEMBERS), DescribedGroup("gone", 0)), 11)),
    (ListGroupsRequest((), (), 12), ListGroupsResponse(0, (ListedGroup("g1", "consumer", "Stable"),), 12)),
    (ListGroupsRequest(("Stable",), ("classic",), 12), ListGroupsResponse(0, (ListedGroup("g1", "consumer", "Stable"),),
                                                                            12)),
    (DeleteGroupsRequest(("a", "b"), 13), DeleteGroupsResponse((("a", 0), ("b", int(ErrorCode.NON_EMPTY_GROUP))), 13)),
    (OffsetDeleteRequest("g", (("a", 0), ("b", 1), ("a", 2)), 14),
     OffsetDeleteResponse(0, (("a", 0, 0), ("a", 2, 0), ("b", 1, int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))), 14)),
]


@pytest.mark.parametrize(("request_", "response"), ROUND_TRIPS, ids=lambda v: type(v).__name__)
def test_idemcore_client_and_server_agree_at_every_version(request_, response):
    client = CLIENT_APIS[type(request_)]
    server = APIS[client.key]
    assert BY_KEY[client.key] is client
    assert (client.min_version, client.max_version) == (server.min_version, server.max_version)
    for version in range(client.min_version, client.max_version + 1):
        if request_ == ROUND_TRIPS[2][0] and version < 5:  # the filters need v4 / v5: refused, never dropped
            with pytest.raises(ValueError, match="filter"):
                client.encode(request_, version)
            continue
        frame = request_frame(client.key, version, request_.request_id, "idemcore", client.encode(request_, version))
        _, body = read_request(memoryview(frame)[4:])
        message, carry = server.to_message(CTX, version, request_.request_id, body)
        expected = request_
        if isinstance(request_, DescribeGroupsRequest) and version < 3:
            expected = DescribeGroupsRequest(request_.group_ids, False, request_.request_id)
        if isinstance(request_, OffsetDeleteRequest):  # grouped by topic on the wire
            expected = OffsetDeleteRequest("g", (("a", 0), ("a", 2), ("b", 1)), 14)
        assert message == expected, version
        answer = b"".join(response_frame(request_.request_id, server.to_wire(CTX, version, body, response, carry)))
        _, read_back = read_response(client.key, version, memoryview(answer)[4:])
        decoded = client.decode(request_, version, read_back)
        if isinstance(response, DescribeGroupsResponse):
            gone = decoded.groups[1]
            assert (gone.state, gone.error_code) == ("Dead", ErrorCode.GROUP_ID_NOT_FOUND if version >= 6 else 0)
            stable = decoded.groups[0]
            want = MEMBERS if version >= 4 else tuple(
                DescribedMember(m.member_id, None, m.client_id, m.client_host, m.metadata, m.assignment)
                for m in MEMBERS)
            assert stable == DescribedGroup("g1", 0, "Stable", "consumer", "range", want)
        elif isinstance(response, ListGroupsResponse) and version < 4:
            assert [(g.group_id, g.protocol_type) for g in decoded.groups] == [("g1", "consumer")]
        else:
            assert decoded == response, version
