"""The inter-broker APIs and the replication fields on the wire: each message goes through the client codec
(``wire.broker_client`` / ``wire.client``) into kio bytes (checked against kio's own writer), is read by the
server translation (``wire.interbroker``, ``wire.fetch``, ``wire.metadata``) back into the same message, and its
answer goes the other way; at every version served. LeaderAndIsr v5 is also checked against a frame built by
hand from Kafka's JSON layout."""

from __future__ import annotations

import io
import struct
import uuid
from typing import Any

import pytest
from kio.serial import entity_writer

from idemcore.net.messages import (
    AbortedTransaction,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListedOffset,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    PartitionResponse,
    TopicMetadata,
    TxnMarker,
    TxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.net.replication import (
    BrokerEndpoint,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EpochEndOffset,
    EpochQuery,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataPartition,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from idemcore.net.wire import broker_client, client, interbroker
from idemcore.net.wire.api import WireApi, WireContext, topic_id_of
from idemcore.net.wire.apis import APIS
from idemcore.net.wire.client import ClientApi, WireProtocolError
from idemcore.net.wire.encoder import entity_encoder
from idemcore.net.wire.fetch import FETCH, LIST_OFFSETS
from idemcore.net.wire.frames import Chunks, read_request, read_response, request_frame, response_frame
from idemcore.net.wire.metadata import METADATA
from idemcore.protocol.codes import ErrorCode

CTX = WireContext(7, "broker.example", 9092, "cluster", lambda: {"t": 3, "u": 2})
CORRELATION = 4242
#: Kafka's error codes the replication answers use (Errors.java).
STALE_CONTROLLER_EPOCH = 11
KAFKA_STORAGE_ERROR = 56
STALE_BROKER_EPOCH = 77
FENCED_LEADER_EPOCH = 74
ELECTION_NOT_NEEDED = 84
LEADER_NOT_AVAILABLE = 5
NOT_CONTROLLER = 41
NOT_LEADER_OR_FOLLOWER = 6


def _kio_bytes(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _ours(entity: Any) -> bytes:
    out = Chunks()
    entity_encoder(type(entity))(out, entity)
    return b"".join(out)


def through(client_api: ClientApi, server_api: WireApi, version: int, request: Any, answer: Any) -> tuple[Any, Any]:
    """``request`` as the server reads it, and ``answer`` as the client reads it back, at ``version``."""
    body = client_api.encode(request, version)
    assert _ours(body) == _kio_bytes(body)  # idemcore's encoder writes what kio's writer writes
    frame = request_frame(client_api.key, version, CORRELATION, "replica-1", body)
    header, read_body = read_request(frame[4:])
    assert (header.request_api_key, header.request_api_version) == (client_api.key, version)
    message, carry = server_api.to_message(CTX, version, CORRELATION, read_body)
    wire = server_api.to_wire(CTX, version, read_body, answer, carry)
    assert _ours(wire) == _kio_bytes(wire)
    out = b"".join(response_frame(CORRELATION, wire))
    correlation_id, back_body = read_response(client_api.key, version, out[4:])
    assert correlation_id == CORRELATION
    return message, client_api.decode(request, version, back_body)


def served(key: int) -> range:
    api = APIS[key]
    return range(api.min_version, api.max_version + 1)


def test_the_inter_broker_apis_are_served_at_the_versions_the_plan_names():
    assert {key: (APIS[key].min_version, APIS[key].max_version) for key in (4, 5, 6, 23, 27, 43)} == {
        4: (5, 5), 5: (3, 3), 6: (7, 7), 23: (2, 4), 27: (1, 2), 43: (0, 2)}
    by_key = {api.key: api for api in broker_client.BROKER_APIS.values()}
    for api in interbroker.INTER_BROKER_APIS:  # the client side speaks what the server side serves
        assert (by_key[api.key].min_version, by_key[api.key].max_version) == (api.min_version, api.max_version)


# ---------------------------------------------------------------- controller requests

LEADER_AND_ISR = LeaderAndIsrRequest(
    controller_id=3, controller_epoch=11, broker_epoch=1 << 40,
    # Grouped by topic, as the wire carries them (a request's order within a topic is kept).
    partitions=(LeaderAndIsrPartition("t", 0, 11, 1, 5, (1, 2), 17, (1, 2, 3), is_new=True),
                LeaderAndIsrPartition("t", 2, 11, -1, 6, (), 4, (3, 1, 2)),
                LeaderAndIsrPartition("u", 1, 10, 2, 0, (2,), 0, (2, 3))),
    live_leaders=(BrokerEndpoint(1, "b1.example", 9093), BrokerEndpoint(2, "b2", 19092)),
    request_id=CORRELATION)


@pytest.mark.parametrize("version", served(4))
def test_leader_and_isr_round_trips(version):
    answer = LeaderAndIsrResponse(ErrorCode.NONE, (("t", 0, ErrorCode.NONE), ("t", 2, KAFKA_STORAGE_ERROR),
                                                   ("u", 1, STALE_CONTROLLER_EPOCH)), CORRELATION)
    message, back = through(broker_client.LEADER_AND_ISR, interbroker.LEADER_AND_ISR, version, LEADER_AND_ISR, answer)
    assert message == LEADER_AND_ISR
    assert back == answer


def test_leader_and_isr_v5_matches_a_frame_built_from_kafkas_json_layout():
    """LeaderAndIsrRequest.json v5 (flexible): header v2 (client id an int16-length string, then tagged fields),
    ControllerId int32, ControllerEpoch int32, BrokerEpoch int64, Type int8, TopicStates compact array of
    {TopicName compact string, TopicId uuid, PartitionStates compact array of {PartitionIndex, ControllerEpoch,
    Leader, LeaderEpoch int32, Isr compact int32 array, ZkVersion int32, Replicas, AddingReplicas,
    RemovingReplicas compact int32 arrays, IsNew bool, tags}, tags}, LiveLeaders compact array of {BrokerId int32,
    HostName compact string, Port int32, tags}, tags. A compact length is N+1 as an unsigned varint."""
    request = LeaderAndIsrRequest(3, 11, 258, (LeaderAndIsrPartition("t", 0, 11, 1, 5, (1, 2), 17, (1, 2),
                                                                     is_new=True),),
                                  (BrokerEndpoint(1, "h", 9093),))
    i32, i64 = (lambda v: struct.pack(">i", v)), (lambda v: struct.pack(">q", v))
    header = struct.pack(">hhi", 4, 5, 9) + struct.pack(">h", 2) + b"c1" + b"\x00"
    partition = (i32(0) + i32(11) + i32(1) + i32(5) + b"\x03" + i32(1) + i32(2) + i32(17)
                 + b"\x03" + i32(1) + i32(2) + b"\x01" + b"\x01" + b"\x01" + b"\x00")
    topic = b"\x02t" + topic_id_of("t").bytes + b"\x02" + partition + b"\x00"
    leader = i32(1) + b"\x02h" + i32(9093) + b"\x00"
    body = i32(3) + i32(11) + i64(258) + b"\x00" + b"\x02" + topic + b"\x02" + leader + b"\x00"
    golden = i32(len(header) + len(body)) + header + body
    assert request_frame(4, 5, 9, "c1", broker_client.LEADER_AND_ISR.encode(request, 5)) == golden
    _, read = read_request(golden[4:])
    assert interbroker.LEADER_AND_ISR.to_message(CTX, 5, 9, read)[0] == LeaderAndIsrRequest(
        3, 11, 258, request.partitions, request.live_leaders, 9)


def test_leader_and_isr_answer_for_a_topic_not_asked_about_is_refused():
    answer = LeaderAndIsrResponse(ErrorCode.NONE, (("zzz", 0, ErrorCode.NONE),), CORRELATION)
    with pytest.raises(WireProtocolError, match="topic id"):
        through(broker_client.LEADER_AND_ISR, interbroker.LEADER_AND_ISR, 5, LEADER_AND_ISR, answer)


@pytest.mark.parametrize("version", served(6))
def test_update_metadata_round_trips(version):
    request = UpdateMetadataRequest(
        3, 11, 77,
        (UpdateMetadataPartition("t", 0, 11, 1, 5, (1, 2), 17, (1, 2, 3), offline_replicas=(3,)),
         UpdateMetadataPartition("u", 0, 9, -1, 2, (), 1, (2,))),
        (BrokerEndpoint(1, "b1", 9093, rack="r1"), BrokerEndpoint(2, "b2", 9094)), CORRELATION)
    answer = UpdateMetadataResponse(STALE_BROKER_EPOCH, CORRELATION)
    message, back = through(broker_client.UPDATE_METADATA, interbroker.UPDATE_METADATA, version, request, answer)
    assert message == request and back == answer


@pytest.mark.parametrize("version", served(5))
def test_stop_replica_round_trips(version):
    request = StopReplicaRequest(3, 11, 77, (StopReplicaPartition("t", 0, 5, True),
                                             StopReplicaPartition("t", 1, -2, False),
                                             StopReplicaPartition("u", 0, -1, True)), CORRELATION)
    answer = StopReplicaResponse(ErrorCode.NONE, (("t", 0, ErrorCode.NONE), ("u", 0, FENCED_LEADER_EPOCH)),
                                 CORRELATION)
    message, back = through(broker_client.STOP_REPLICA, interbroker.STOP_REPLICA, version, request, answer)
    assert message == request and back == answer


# ---------------------------------------------------------------- follower and coordinator requests


@pytest.mark.parametrize("version", served(23))
def test_offset_for_leader_epoch_round_trips(version):
    request = OffsetForLeaderEpochRequest(2, (EpochQuery("t", 0, 5, 3), EpochQuery("t", 1, -1, 0),
                                              EpochQuery("u", 0, 7, 7)), CORRELATION)
    answer = OffsetForLeaderEpochResponse((EpochEndOffset("t", 0, ErrorCode.NONE, 3, 1 << 35),
                                           EpochEndOffset("t", 1, ErrorCode.NONE, -1, -1),
                                           EpochEndOffset("u", 0, FENCED_LEADER_EPOCH)), CORRELATION)
    message, back = through(broker_client.OFFSET_FOR_LEADER_EPOCH, interbroker.OFFSET_FOR_LEADER_EPOCH, version,
                            request, answer)
    # v2 carries no replica id: Kafka's default (-2) is read.
    assert message == (request if version >= 3 else OffsetForLeaderEpochRequest(-2, request.partitions, CORRELATION))
    assert back == answer


@pytest.mark.parametrize("version", served(27))
def test_write_txn_markers_round_trips(version):
    request = WriteTxnMarkersRequest((TxnMarker(1000, 3, True, 9, (("t", 0), ("t", 2), ("u", 1))),
                                      TxnMarker(1001, 0, False, 9, (("u", 0),))), CORRELATION)
    answer = WriteTxnMarkersResponse(CORRELATION, (
        TxnMarkerResult(1000, (PartitionResponse("t", 0), PartitionResponse("t", 2),
                               PartitionResponse("u", 1, NOT_LEADER_OR_FOLLOWER))),
        TxnMarkerResult(1001, (PartitionResponse("u", 0),))))
    message, back = through(broker_client.WRITE_TXN_MARKERS, interbroker.WRITE_TXN_MARKERS, version, request, answer)
    assert message == request and back == answer


@pytest.mark.parametrize("version", served(43))
@pytest.mark.parametrize("partitions", [None, (("t", 0), ("t", 2), ("u", 1))])
def test_elect_leaders_round_trips(version, partitions):
    request = ElectLeadersRequest(0, partitions, 5000, CORRELATION)
    answer = ElectLeadersResponse(ErrorCode.NONE, (("t", 0, ErrorCode.NONE, None),
                                                   ("u", 1, ELECTION_NOT_NEEDED, "leader is preferred")),
                                  CORRELATION)
    message, back = through(broker_client.ELECT_LEADERS, interbroker.ELECT_LEADERS, version, request, answer)
    assert message == request and back == answer


def test_elect_leaders_v0_answers_a_top_level_error_in_each_partition_and_speaks_preferred_only():
    request = ElectLeadersRequest(0, (("t", 0), ("u", 1)), 5000, CORRELATION)
    answer = ElectLeadersResponse(NOT_CONTROLLER, (), CORRELATION)
    _, back = through(broker_client.ELECT_LEADERS, interbroker.ELECT_LEADERS, 0, request, answer)
    assert back == ElectLeadersResponse(ErrorCode.NONE, (("t", 0, NOT_CONTROLLER, None),
                                                         ("u", 1, NOT_CONTROLLER, None)), CORRELATION)
    _, back = through(broker_client.ELECT_LEADERS, interbroker.ELECT_LEADERS, 1, request, answer)
    assert back == answer
    with pytest.raises(WireProtocolError, match="v0 elects preferred"):
        broker_client.ELECT_LEADERS.encode(ElectLeadersRequest(1, None, 5000), 0)


# ---------------------------------------------------------------- replication fields of Fetch, ListOffsets, Metadata


@pytest.mark.parametrize("version", range(client.FETCH.min_version, client.FETCH.max_version + 1))
def test_a_replica_fetch_carries_its_id_and_epochs_and_keeps_the_records_bytes(version):
    request = FetchRequest((FetchPartition("t", 0, 100, 65536, current_leader_epoch=5, last_fetched_epoch=4,
                                           log_start_offset=10),
                            FetchPartition("u", 1, 0, 1024)), max_wait_ms=250, replica_id=2,
                           request_id=CORRELATION)
    records = bytes(range(256)) * 3  # not batches: a follower's fetch never decodes them
    answer = FetchResponse((FetchedPartition("t", 0, ErrorCode.NONE, 150, 140, 10, (AbortedTransaction(7, 120),),
                                             records, diverging_epoch=(4, 90)),
                            FetchedPartition("u", 1, ErrorCode.NONE, 0, 0, 0, None, b"")), request_id=CORRELATION)
    message, back = through(client.FETCH, FETCH, version, request, answer)
    expected = request.partitions
    if version < 12:  # last fetched epoch is v12+, current leader epoch v9+, log start offset v5+
        expected = tuple(FetchPartition(p.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                        p.current_leader_epoch if version >= 9 else -1, -1,
                                        p.log_start_offset if version >= 5 else -1) for p in expected)
    assert message == FetchRequest(expected, max_wait_ms=250, replica_id=2, request_id=CORRELATION)
    assert back.partitions[0].records == records
    assert back.partitions[0].diverging_epoch == ((4, 90) if version >= 12 else None)
    assert back.partitions[1].diverging_epoch is None
    assert back.partitions[0].log_start_offset == (10 if version >= 5 else -1)


@pytest.mark.parametrize("version", [15, 16])
def test_fetch_v15_plus_reads_the_replica_id_from_replica_state(version):
    from idemcore.net.wire.frames import make, nested
    from idemcore.net.wire.schema import load_request_schema
    cls = load_request_schema(1, version)
    body = make(cls, replica_state=make(nested(cls, "ReplicaState"), replica_id=3, replica_epoch=12),
                max_wait=0, min_bytes=1, topics=(), forgotten_topics_data=())
    _, read = read_request(request_frame(1, version, 1, "r", body)[4:])
    assert FETCH.to_message(CTX, version, 1, read)[0].replica_id == 3


@pytest.mark.parametrize("version", range(client.LIST_OFFSETS.min_version, client.LIST_OFFSETS.max_version + 1))
def test_list_offsets_carries_current_leader_epochs_in_and_leader_epochs_out(version):
    request = ListOffsetsRequest((("t", 0, -1), ("u", 1, -2)), request_id=CORRELATION, current_leader_epochs=(5, 2))
    answer = ListOffsetsResponse((ListedOffset("t", 0, ErrorCode.NONE, 120, -1, 5),
                                  ListedOffset("u", 1, ErrorCode.NONE, 0, -1, 2)), CORRELATION)
    message, back = through(client.LIST_OFFSETS, LIST_OFFSETS, version, request, answer)
    assert message.current_leader_epochs == ((5, 2) if version >= 4 else None)
    assert [r.leader_epoch for r in back.results] == ([5, 2] if version >= 4 else [-1, -1])
    # No epochs given: none asked (-1 each), read back as None, as before KIP-320.
    plain = ListOffsetsRequest((("t", 0, -1),), request_id=CORRELATION)
    message, _ = through(client.LIST_OFFSETS, LIST_OFFSETS, version, plain, answer)
    assert message == plain


@pytest.mark.parametrize("version", range(broker_client.FULL_METADATA.min_version,
                                          broker_client.FULL_METADATA.max_version + 1))
def test_metadata_answers_partition_states_brokers_and_controller(version):
    states = (PartitionMetadata(0, ErrorCode.NONE, 2, 7, (2, 1, 3), (2, 1), ()),
              PartitionMetadata(1, LEADER_NOT_AVAILABLE, -1, 3, (3, 1), (), (3,)))
    answer = MetadataResponse((TopicMetadata("t", ErrorCode.NONE, 2, False, states),), CORRELATION,
                              (BrokerEndpoint(1, "b1", 9093, "r1"), BrokerEndpoint(2, "b2", 9094)), 2)
    _, back = through(broker_client.FULL_METADATA, METADATA, version, MetadataRequest(("t",), False, CORRELATION),
                      answer)
    expected_states = states if version >= 7 else tuple(  # leader epoch is v7+; offline replicas v5+
        PartitionMetadata(p.partition, p.error_code, p.leader, -1, p.replicas, p.isr,
                          p.offline_replicas if version >= 5 else ()) for p in states)
    racks = version >= 1
    assert back == MetadataResponse(
        (TopicMetadata("t", ErrorCode.NONE, 2, False, expected_states),), CORRELATION,
        (BrokerEndpoint(1, "b1", 9093, "r1" if racks else None), BrokerEndpoint(2, "b2", 9094)), 2)


def test_metadata_without_partition_states_is_todays_single_broker_answer():
    answer = MetadataResponse((TopicMetadata("t", ErrorCode.NONE, 2),), CORRELATION)
    _, back = through(broker_client.FULL_METADATA, METADATA, 12, MetadataRequest(("t",), False, CORRELATION), answer)
    me = (CTX.node_id,)
    assert back == MetadataResponse(
        (TopicMetadata("t", ErrorCode.NONE, 2, False, tuple(PartitionMetadata(p, ErrorCode.NONE, 7, 0, me, me, ())
                                                            for p in range(2))),),
        CORRELATION, (BrokerEndpoint(7, "broker.example", 9092),), 7)


def test_a_request_no_broker_sends_is_refused_by_name():
    with pytest.raises(WireProtocolError, match="UpdateMetadataResponse is not a request"):
        broker_client.broker_api_of(UpdateMetadataResponse(0))  # type: ignore[arg-type]


def test_topic_ids_are_the_names_derived_ones():
    assert isinstance(topic_id_of("t"), uuid.UUID) and topic_id_of("t") != topic_id_of("u")
