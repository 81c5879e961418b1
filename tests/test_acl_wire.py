"""CreateAcls, DescribeAcls and DeleteAcls v1–3 on the wire: kafka-python 3's independent codec writes the
requests, the server's translation and a broker with an authorizer answer, and kafka-python reads the answer
(re-encoding it to the same bytes); idemcore's own client encodes what kio reads back; a code the broker does not
know (an operation 99) is read as UNKNOWN and refused INVALID_REQUEST for that ACL alone."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin import acl as kp

from idemcore.broker import Broker
from idemcore.broker.security.authorizer import AclAuthorizer
from idemcore.net.acls import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from idemcore.net.wire.acls import ACL_APIS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.apis import APIS
from idemcore.net.wire.client import CLIENT_APIS
from idemcore.net.wire.frames import read_request, read_response, request_frame, response_frame
from idemcore.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
)
from idemcore.protocol.codes import ErrorCode

CTX = WireContext(node_id=0, host="127.0.0.1", port=9092, cluster_id="idemcore", topics=dict)
KP = {30: (kp.CreateAclsRequest, kp.CreateAclsResponse), 29: (kp.DescribeAclsRequest, kp.DescribeAclsResponse),
      31: (kp.DeleteAclsRequest, kp.DeleteAclsResponse)}
VERSIONS = range(1, 4)
READ_T = AclBinding(ResourcePattern(AclResourceType.TOPIC, "t"),
                    AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
DENY_P = AclBinding(ResourcePattern(AclResourceType.GROUP, "g-", PatternType.PREFIXED),
                    AccessControlEntry("User:bob", "10.0.0.1", AclOperation.ALL, AclPermissionType.DENY))


@pytest.fixture
def broker(tmp_path):
    with Broker({}, tmp_path, authorizer=AclAuthorizer()) as made:
        yield made


def exchange(broker: Broker, api: WireApi, version: int, **fields: Any) -> tuple[Any, dict]:
    """kafka-python's request through the server's translation and the broker; the answer as kafka-python reads
    it, and the message the broker got."""
    request = KP[api.key][0](**fields, version=version)
    request.with_header(correlation_id=5, client_id="acl-wire-test")
    header, body = read_request(memoryview(bytes(request.encode(header=True, framed=True)))[4:])
    assert (header.request_api_key, header.request_api_version) == (api.key, version)
    message, carry = api.to_message(CTX, version, 5, body)
    entity = api.to_wire(CTX, version, body, broker.handle(message), carry)
    frame = b"".join(response_frame(5, entity))
    decoded = KP[api.key][1].decode(frame, version=version, header=True, framed=True)
    assert decoded.encode(header=True, framed=True) == frame
    return message, decoded.to_dict()


def creation(b: AclBinding, **override: int) -> Any:
    fields = {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
              "resource_pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
              "host": b.entry.host, "operation": int(b.entry.operation), "permission_type": int(b.entry.permission)}
    return kp.CreateAclsRequest.AclCreation(**{**fields, **override})


def test_served_versions():
    assert [(a.key, a.name, a.min_version, a.max_version) for a in ACL_APIS] == [
        (29, "DescribeAcls", 1, 3), (30, "CreateAcls", 1, 3), (31, "DeleteAcls", 1, 3)]
    assert all(APIS[a.key] is a for a in ACL_APIS)


@pytest.mark.parametrize("version", VERSIONS)
def test_create_describe_delete(broker, version):
    message, created = exchange(broker, CREATE_ACLS, version, creations=[
        creation(READ_T), creation(DENY_P), creation(READ_T, operation=99), creation(READ_T, resource_type=0)])
    assert message == CreateAclsRequest((READ_T, DENY_P, *message.creations[2:]), 5)
    assert message.creations[2].entry.operation == AclOperation.UNKNOWN
    codes = [r["error_code"] for r in created["results"]]
    assert codes == [0, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert "operation UNKNOWN" in created["results"][2]["error_message"]

    filter_fields = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                     "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    message, described = exchange(broker, DESCRIBE_ACLS, version, **filter_fields)
    assert message == DescribeAclsRequest(AclBindingFilter(), 5)
    assert described["error_code"] == 0
    resources = {(r["resource_type"], r["resource_name"], r["pattern_type"]):
                 [(a["principal"], a["host"], a["operation"], a["permission_type"]) for a in r["acls"]]
                 for r in described["resources"]}
    assert resources == {(2, "t", 3): [("User:alice", "*", 3, 3)], (3, "g-", 4): [("User:bob", "10.0.0.1", 2, 2)]}

    match = {**filter_fields, "resource_type_filter": 3, "resource_name_filter": "g-1", "pattern_type_filter": 2}
    _, unknown_filter = exchange(broker, DESCRIBE_ACLS, version, **{**filter_fields, "pattern_type_filter": 0})
    assert unknown_filter["error_code"] == ErrorCode.INVALID_REQUEST
    message, deleted = exchange(broker, DELETE_ACLS, version, filters=[
        kp.DeleteAclsRequest.DeleteAclsFilter(**match),
        kp.DeleteAclsRequest.DeleteAclsFilter(**{**filter_fields, "operation": 0})])
    assert message.filters[0] == AclBindingFilter(ResourcePatternFilter(AclResourceType.GROUP, "g-1",
                                                                        PatternType.MATCH))
    first, second = deleted["filter_results"]
    assert first["error_code"] == 0 and [(m["resource_name"], m["pattern_type"], m["principal"])
                                         for m in first["matching_acls"]] == [("g-", 4, "User:bob")]
    assert second["error_code"] == ErrorCode.INVALID_REQUEST and second["matching_acls"] == []
    assert broker.authorizer is not None and set(broker.authorizer.acls(AclBindingFilter())) == {READ_T}


@pytest.mark.parametrize("version", VERSIONS)
def test_idemcores_client_encodes_what_the_server_reads(broker, version):
    for request, api in ((CreateAclsRequest((READ_T, DENY_P), 9), CREATE_ACLS),
                         (DescribeAclsRequest(AclBindingFilter(ResourcePatternFilter(AclResourceType.TOPIC)), 9),
                          DESCRIBE_ACLS),
                         (DeleteAclsRequest((AclBindingFilter(),), 9), DELETE_ACLS)):
        client = CLIENT_APIS[type(request)]
        assert (client.key, client.min_version, client.max_version) == (api.key, api.min_version, api.max_version)
        frame = request_frame(api.key, version, 9, "idemcore", client.encode(request, version))
        _, body = read_request(memoryview(frame)[4:])
        message, carry = api.to_message(CTX, version, 9, body)
        assert message == request
        handled = broker.handle(message)
        entity = api.to_wire(CTX, version, body, handled, carry)
        _, read_back = read_response(api.key, version, memoryview(b"".join(response_frame(9, entity)))[4:])
        assert client.decode(request, version, read_back) == handled
    assert broker.authorizer is not None and set(broker.authorizer.acls(AclBindingFilter())) == set()
