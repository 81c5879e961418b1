"""The refusals go over the wire: each request encoded as a client sends it, decoded by the server's translation,
checked by Broker.handle_from, and its answer encoded and decoded again, at the lowest and highest version both
sides speak; the error codes a client reads are Kafka's authorization codes."""

from __future__ import annotations

import dataclasses

import pytest

from idemcore.broker import Broker
from idemcore.net.group_admin import DescribeGroupsRequest, ListGroupsRequest
from idemcore.net.membership import HeartbeatRequest, JoinGroupRequest
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    EndTxnRequest,
    FetchPartition,
    FetchRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    MetadataRequest,
    NewTopic,
    OffsetCommitRequest,
    OffsetEntry,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from idemcore.net.wire.api import WireContext
from idemcore.net.wire.apis import APIS
from idemcore.net.wire.client import CLIENT_APIS, WireProtocolError
from idemcore.protocol.acls import AclOperation as Op
from idemcore.protocol.acls import AclResourceType as Kind
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from tests.authz_model import ALICE, AllowSet

T, G, C, X = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
              ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

#: Each request, and the error codes its answer carries (every ``error_code`` in it, depth first) when alice may
#: WRITE, READ and DESCRIBE topic "a" only.
CASES = [
    (ProduceRequest((RecordBatch("a", 0, [b"v"]), RecordBatch("b", 0, [b"v"]))), [0, T]),
    (FetchRequest((FetchPartition("b", 0, 0), FetchPartition("a", 0, 0))), [0, T, 0]),
    (ListOffsetsRequest((("b", 0, -1), ("a", 0, -1))), [T, 0]),
    (MetadataRequest(("b", "a")), [T, 0]),
    (CreateTopicsRequest((NewTopic("n", 1),)), [T]),
    (FindCoordinatorRequest("g", GROUP_KEY), [G]),
    (FindCoordinatorRequest("tx", TRANSACTION_KEY), [X]),
    (InitProducerIdRequest(transactional_id="tx"), [X]),
    (AddPartitionsToTxnRequest("tx", 1, 0, (("a", 0),)), [X]),
    (EndTxnRequest("tx", 1, 0, True), [X]),
    (TxnOffsetCommitRequest("tx", "g", 1, 0, (OffsetEntry("a", 0, 1),)), [X]),
    (OffsetCommitRequest("g", (OffsetEntry("a", 0, 1),)), [G]),
    (OffsetFetchRequest("g", (("a", 0),)), [G]),
    (JoinGroupRequest("g", 10_000, 10_000, "consumer", (("range", b""),)), [G]),
    (HeartbeatRequest("g", 1, "m"), [G]),
    (DescribeGroupsRequest(("g",)), [G]),
    (ListGroupsRequest(), [0]),
]


def _codes(value) -> list[int]:
    if dataclasses.is_dataclass(value):
        found = [int(value.error_code)] if hasattr(value, "error_code") else []
        for field in dataclasses.fields(value):
            if field.name != "error_code":
                found += _codes(getattr(value, field.name))
        return found
    if isinstance(value, tuple):
        return [code for item in value for code in _codes(item)]
    return []


@pytest.mark.parametrize("request_, expected", CASES, ids=lambda case: type(case).__name__
                         if not isinstance(case, list) else "")
def test_a_refusal_reaches_the_client_at_every_version(request_, expected):
    client = CLIENT_APIS[type(request_)]
    server = APIS[client.key]
    low, high = max(client.min_version, server.min_version), min(client.max_version, server.max_version)
    for version in sorted({low, high}):
        with Broker({"a": 1, "b": 1}, offsets_topic_partitions=1, transaction_state_partitions=1) as broker:
            broker.authorizer = AllowSet().allow(Op.WRITE, Kind.TOPIC, "a").allow(Op.READ, Kind.TOPIC, "a") \
                .allow(Op.DESCRIBE, Kind.TOPIC, "a")
            ctx = WireContext(0, "127.0.0.1", 9092, "idemcore", lambda broker=broker: broker.topics)
            try:
                body = client.encode(request_, version)
            except WireProtocolError:  # a version that cannot carry this request (FindCoordinator v0: groups only)
                continue
            message, carry = server.to_message(ctx, version, 1, body)
            answer = broker.handle_from(ALICE, message)
            decoded = client.decode(request_, version, server.to_wire(ctx, version, body, answer, carry))
            codes = _codes(decoded)
            if isinstance(request_, MetadataRequest | ListGroupsRequest):
                codes = codes[-len(expected):] if expected else codes
            if isinstance(request_, OffsetFetchRequest) and version < 2:  # no group-wide code: on each partition
                codes = [code for code in codes if code]
            assert codes == expected, (version, decoded)
