"""The client direction of Kafka's wire protocol: each request idemcore's clients send, as a kio request at a
negotiated version, and the kio response back as an :mod:`idemcore.net.messages` response.

The server direction (``produce.py``, ``fetch.py``, ...) reads kio requests into messages and writes messages as
kio responses; this module is its mirror, for :class:`idemcore.net.tcp.TcpTransport`. Each API has a
:class:`ClientApi`: the versions this side can write and read (``min_version``..``max_version``), ``encode``
(message -> kio body) and ``decode`` (the message request, and the kio response body -> message response, its
``request_id`` the request's).

Versions stop where Kafka names topics by id instead of by name (Produce v13, Fetch v13, OffsetCommit and
OffsetFetch v10) and before transaction version 2 (InitProducerId v6, EndTxn v5, TxnOffsetCommit v5,
AddPartitionsToTxn v4+), which idemcore's clients do not speak.

Produce sends each :class:`~idemcore.record.batch.RecordBatch` as RecordBatch v2 bytes at base offset 0
(``encode_record_batch``; a batch that kept the bytes it came with, ``wire``, is sent as they are). Fetch answers
are read back into :class:`~idemcore.record.stored.StoredBatch` values as a partition log holds them: data
batches, and transaction markers (``control``), each keeping its bytes (``raw``). A last batch the broker cut
short (Kafka does, at ``partition_max_bytes``) is dropped: the next fetch starts at it."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode as WireError

from idemcore.errors import IdemcoreError
from idemcore.net.membership import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import (
    GROUP_KEY,
    AbortedTransaction,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    CreatedTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchedOffset,
    FetchedPartition,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedOffset,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetEntry,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResponse,
    PartitionResult,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicMetadata,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.net.wire.acls_client import ACL_CLIENT_APIS
from idemcore.net.wire.admin_client import ADMIN_CLIENT_APIS
from idemcore.net.wire.frames import MalformedFrameError, group_by_topic, make, nested, optional_str, read_response
from idemcore.net.wire.group_admin_client import GROUP_ADMIN_CLIENT_APIS
from idemcore.net.wire.schema import load_request_schema
from idemcore.net.wire.scram_credentials import SCRAM_CREDENTIAL_CLIENT_APIS
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_OFFSET, READ_UNCOMMITTED
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import (
    encode_record_batch,
)

API_VERSIONS_KEY = 18
#: ApiVersions v0–3 (v3+: flexible, naming this client's software).
API_VERSIONS_RANGE = (0, 3)
CLIENT_SOFTWARE_NAME = "idemcore"
CLIENT_SOFTWARE_VERSION = "0"

#: A consumer's replica id in Fetch and ListOffsets.
CONSUMER_REPLICA_ID = -1
#: Fetch without a session (KIP-227): id 0, epoch -1 (FINAL_EPOCH): every answer is a full one.
NO_SESSION_ID, NO_SESSION_EPOCH = 0, -1
#: Kafka's "no leader epoch" in requests that may carry one.
NO_LEADER_EPOCH = -1


class WireProtocolError(IdemcoreError, ValueError):
    """A response this side cannot read or that contradicts its request."""


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _request_class(key: int, version: int) -> type:
    return load_request_schema(key, version)


Encode = Callable[[Any, int], Any]
Decode = Callable[[Any, int, Any], Response]


class ClientApi(NamedTuple):
    key: int
    name: str
    min_version: int
    max_version: int
    encode: Encode
    decode: Decode


# ---------------------------------------------------------------- Produce (key 0)


def batch_bytes(batch: RecordBatch) -> bytes | bytearray:
    """The v2 bytes a produce request carries for ``batch``: its ``wire`` bytes as they are (idemcore's Producer
    builds them once per batch, every record with its own timestamp), else an encoding of its fields, base
    offset 0 (the broker assigns offsets)."""
    if batch.wire is not None:
        return batch.wire
    return encode_record_batch(batch, 0)


def encode_produce(request: ProduceRequest, version: int, transactional_id: str | None = None) -> Any:
    """``transactional_id``: the producer's, for a request with transactional batches (the message has no field
    for it; the transport knows it from the producer's InitProducerId)."""
    cls = _request_class(0, version)
    topic_cls, partition_cls = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    by_topic: dict[str, list[Any]] = {}
    for batch in request.batches:
        by_topic.setdefault(batch.topic, []).append(make(partition_cls, index=batch.partition,
                                                         records=bytes(batch_bytes(batch))))
    return make(cls, transactional_id=transactional_id, acks=request.acks, timeout=_ms(request.timeout_ms),
                topic_data=tuple(make(topic_cls, name=name, partition_data=tuple(partitions))
                                 for name, partitions in by_topic.items()))


def _encode_produce(request: ProduceRequest, version: int) -> Any:
    return encode_produce(request, version)


def _decode_produce(request: ProduceRequest, version: int, body: Any) -> ProduceResponse:
    answers: dict[tuple[str, int], PartitionResponse] = {}
    for topic in body.responses:
        for p in topic.partition_responses:
            code = int(p.error_code)
            message = getattr(p, "error_message", None)
            answers[(str(topic.name), int(p.index))] = PartitionResponse(
                str(topic.name), int(p.index), code, int(p.base_offset), -1, int(getattr(p, "log_start_offset", -1)),
                None if message is None and code == ErrorCode.NONE else
                (message or f"{topic.name}-{p.index}: error {_error_name(code)} from the broker"))
    # One answer per batch, in the request's order (the producer pairs them by position).
    return ProduceResponse(request.request_id, tuple(
        answers.get((b.topic, b.partition)) or PartitionResponse(
            b.topic, b.partition, ErrorCode.UNKNOWN_SERVER_ERROR,
            error_message=f"the broker did not answer for {b.topic}-{b.partition}")
        for b in request.batches))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        try:
            return WireError(code).name.upper()
        except ValueError:
            return str(code)


# ---------------------------------------------------------------- Fetch (key 1)


def _encode_fetch(request: FetchRequest, version: int) -> Any:
    cls = _request_class(1, version)
    topic_cls, partition_cls = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    by_topic: dict[str, list[Any]] = {}
    for p in request.partitions:
        by_topic.setdefault(p.topic, []).append(make(
            partition_cls, partition=p.partition, current_leader_epoch=p.current_leader_epoch,
            fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch, log_start_offset=p.log_start_offset,
            partition_max_bytes=p.partition_max_bytes))
    # A follower names itself (its broker id); a consumer is CONSUMER_REPLICA_ID.
    return make(cls, replica_id=request.replica_id, max_wait=_ms(max(0, request.max_wait_ms)),
                min_bytes=request.min_bytes, max_bytes=request.max_bytes, isolation_level=request.isolation_level,
                session_id=NO_SESSION_ID, session_epoch=NO_SESSION_EPOCH,
                topics=tuple(make(topic_cls, topic=name, partitions=tuple(partitions))
                             for name, partitions in by_topic.items()),
                forgotten_topics_data=(), rack_id="", cluster_id=None)


def _decode_fetch(request: FetchRequest, version: int, body: Any) -> FetchResponse:
    partitions: list[FetchedPartition] = []
    for topic in body.responses:
        name = str(topic.topic)
        for p in topic.partitions:
            index = int(p.partition_index)
            code = int(p.error_code)
            aborted = getattr(p, "aborted_transactions", None)
            diverging = getattr(p, "diverging_epoch", None)  # v12+: epoch -1 means none
            partitions.append(FetchedPartition(
                name, index, code, int(p.high_watermark), int(getattr(p, "last_stable_offset", -1)),
                int(getattr(p, "log_start_offset", -1)),
                None if aborted is None else tuple(AbortedTransaction(int(a.producer_id), int(a.first_offset))
                                                   for a in aborted),
                bytes(p.records or b""),
                diverging_epoch=None if diverging is None or int(diverging.epoch) < 0
                else (int(diverging.epoch), int(diverging.end_offset))))
    return FetchResponse(tuple(partitions), int(getattr(body, "error_code", 0)), request.request_id)


# ---------------------------------------------------------------- ListOffsets (key 2)


def _encode_list_offsets(request: ListOffsetsRequest, version: int) -> Any:
    if version < 2 and request.isolation_level != READ_UNCOMMITTED:
        # v0–1 have no isolation level: the broker would answer the high watermark, not the last stable offset.
        raise WireProtocolError(f"ListOffsets v{version} cannot ask for read_committed offsets (v2+ can)")
    cls = _request_class(2, version)
    topic_cls, partition_cls = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
    by_topic: dict[str, list[Any]] = {}
    epochs = request.current_leader_epochs or (NO_LEADER_EPOCH,) * len(request.partitions)
    if len(epochs) != len(request.partitions):
        raise WireProtocolError(f"ListOffsets: {len(epochs)} current leader epochs for "
                                f"{len(request.partitions)} partitions")
    for (topic, partition, timestamp), epoch in zip(request.partitions, epochs, strict=True):
        by_topic.setdefault(topic, []).append(make(partition_cls, partition_index=partition,
                                                   current_leader_epoch=epoch, timestamp=timestamp))
    return make(cls, replica_id=CONSUMER_REPLICA_ID, isolation_level=request.isolation_level,
                topics=tuple(make(topic_cls, name=name, partitions=tuple(partitions))
                             for name, partitions in by_topic.items()),
                timeout=_ms(30_000))


def _decode_list_offsets(request: ListOffsetsRequest, version: int, body: Any) -> ListOffsetsResponse:
    return ListOffsetsResponse(tuple(
        ListedOffset(str(topic.name), int(p.partition_index), int(p.error_code), int(getattr(p, "offset", NO_OFFSET)),
                     int(getattr(p, "timestamp", -1)), int(getattr(p, "leader_epoch", -1)))
        for topic in body.topics for p in topic.partitions), request.request_id)


# ---------------------------------------------------------------- Metadata (key 3)


@dataclass(slots=True, frozen=True)
class TopicLeaders:
    """One topic of a Metadata answer: its error, and each partition's leader (-1: none), by partition number."""

    name: str
    error_code: int
    leaders: tuple[int, ...]
    is_internal: bool = False
    #: Each partition's leader epoch (KIP-320; -1: the broker does not say), by partition number.
    leader_epochs: tuple[int, ...] = ()

    def newer_of(self, known: TopicLeaders | None) -> TopicLeaders:
        """This answer, except that a partition whose leader epoch is older than ``known``'s keeps ``known``'s
        leader (KIP-320: a broker with stale metadata must not send a client back to a deposed leader)."""
        if known is None or len(known.leaders) != len(self.leaders) or not known.leader_epochs \
                or len(self.leader_epochs) != len(self.leaders):
            return self
        leaders, epochs = list(self.leaders), list(self.leader_epochs)
        for p, (old, new) in enumerate(zip(known.leader_epochs, self.leader_epochs, strict=True)):
            if 0 <= new < old:  # -1: this broker does not say, its answer stands
                leaders[p], epochs[p] = known.leaders[p], old
        return TopicLeaders(self.name, self.error_code, tuple(leaders), self.is_internal, tuple(epochs))


@dataclass(slots=True, frozen=True)
class ClusterMetadata:
    """What the transport keeps of a Metadata answer: the brokers' addresses, the controller, the topics."""

    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, TopicLeaders] = field(default_factory=dict)


def _encode_metadata(request: MetadataRequest, version: int) -> Any:
    cls = _request_class(3, version)
    topic_cls = nested(cls, "MetadataRequestTopic")
    topics = None if request.topics is None else tuple(make(topic_cls, name=name, topic_id=None)
                                                       for name in request.topics)
    return make(cls, topics=topics, allow_auto_topic_creation=request.allow_auto_topic_creation,
                include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def cluster_metadata(body: Any) -> ClusterMetadata:
    """A kio MetadataResponse as :class:`ClusterMetadata`."""
    brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in body.brokers}
    topics: dict[str, TopicLeaders] = {}
    for t in body.topics:
        if t.name is None:
            continue
        leaders = [-1] * len(t.partitions)
        epochs = [-1] * len(t.partitions)
        for p in t.partitions:
            index = int(p.partition_index)
            if 0 <= index < len(leaders):
                leaders[index] = int(p.leader_id)
                epochs[index] = int(getattr(p, "leader_epoch", -1))
        topics[str(t.name)] = TopicLeaders(str(t.name), int(t.error_code), tuple(leaders),
                                           bool(getattr(t, "is_internal", False)), tuple(epochs))
    return ClusterMetadata(brokers, int(getattr(body, "controller_id", -1)), topics)


def _decode_metadata(request: MetadataRequest, version: int, body: Any) -> MetadataResponse:
    cluster = cluster_metadata(body)
    return MetadataResponse(tuple(TopicMetadata(t.name, t.error_code, len(t.leaders), t.is_internal)
                                  for t in cluster.topics.values()), request.request_id)


# ---------------------------------------------------------------- CreateTopics (key 19)


def _encode_create_topics(request: CreateTopicsRequest, version: int) -> Any:
    cls = _request_class(19, version)
    topic_cls, config_cls = nested(cls, "CreatableTopic"), nested(cls, "CreatableTopicConfig")
    # v4+: -1 takes the broker's default replication factor; before, 1 (a single-broker default).
    return make(cls, topics=tuple(make(
        topic_cls, name=t.name, num_partitions=t.partitions, assignments=(),
        replication_factor=t.replication_factor if version >= 4 or t.replication_factor != -1 else 1,
        configs=tuple(make(config_cls, name=k, value=v) for k, v in t.configs)) for t in request.topics),
        timeout=_ms(30_000), validate_only=request.validate_only)


def _decode_create_topics(request: CreateTopicsRequest, version: int, body: Any) -> CreateTopicsResponse:
    return CreateTopicsResponse(tuple(
        CreatedTopic(str(t.name), int(t.error_code), getattr(t, "error_message", None),
                     int(getattr(t, "num_partitions", -1)))
        for t in body.topics), request.request_id)


# ---------------------------------------------------------------- ApiVersions (key 18)


def api_versions_request(version: int) -> Any:
    return make(_request_class(API_VERSIONS_KEY, version), client_software_name=CLIENT_SOFTWARE_NAME,
                client_software_version=CLIENT_SOFTWARE_VERSION)


def read_api_versions(version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """``(correlation_id, body)`` of an ApiVersions answer to a request at ``version``. A broker that does not
    speak ``version`` answers UNSUPPORTED_VERSION at v0 (KIP-511): read at the asked version such an answer either
    does not parse or, at a flexible version, parses with a null ``api_keys``; either way it is read again at v0.
    MalformedFrameError when it reads at neither."""
    try:
        answered, body = read_response(API_VERSIONS_KEY, version, frame)
        if body.api_keys is not None:
            return answered, body
        if version == 0:
            raise MalformedFrameError("ApiVersions answer without api_keys")
    except MalformedFrameError:
        if version == 0:
            raise
    return read_response(API_VERSIONS_KEY, 0, frame)


def api_versions_ranges(body: Any) -> tuple[int, dict[int, tuple[int, int]]]:
    """``(error code, {api key: (min version, max version)})`` of a kio ApiVersionsResponse."""
    return int(body.error_code), {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in body.api_keys}


# ---------------------------------------------------------------- InitProducerId (key 22)


def _encode_init_producer_id(request: InitProducerIdRequest, version: int) -> Any:
    return make(_request_class(22, version), transactional_id=request.transactional_id,
                transaction_timeout=_ms(request.transaction_timeout_ms), producer_id=request.producer_id,
                producer_epoch=request.producer_epoch)


def _decode_init_producer_id(request: InitProducerIdRequest, version: int, body: Any) -> InitProducerIdResponse:
    return InitProducerIdResponse(int(body.error_code), int(body.producer_id), int(body.producer_epoch),
                                  request.request_id)


# ---------------------------------------------------------------- FindCoordinator (key 10)


def _encode_find_coordinator(request: FindCoordinatorRequest, version: int) -> Any:
    cls = _request_class(10, version)
    if version == 0 and request.key_type != GROUP_KEY:
        raise WireProtocolError(f"FindCoordinator v0 finds only group coordinators, not key type {request.key_type}")
    return make(cls, key=request.key, key_type=request.key_type, coordinator_keys=(request.key,))


def _decode_find_coordinator(request: FindCoordinatorRequest, version: int, body: Any) -> FindCoordinatorResponse:
    if version >= 4:
        found = next((c for c in body.coordinators if str(c.key) == request.key), None)
        if found is None:
            return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, request_id=request.request_id,
                                           error_message=f"no coordinator answered for key {request.key!r}")
        entry = found
    else:
        entry = body
    return FindCoordinatorResponse(int(entry.error_code), int(entry.node_id), str(entry.host), int(entry.port),
                                   request.request_id, getattr(entry, "error_message", None))


# ---------------------------------------------------------------- AddPartitionsToTxn (key 24)


def _encode_add_partitions(request: AddPartitionsToTxnRequest, version: int) -> Any:
    cls = _request_class(24, version)
    topic_cls = nested(cls, "AddPartitionsToTxnTopic")
    return make(cls, v3_and_below_transactional_id=request.transactional_id,
                v3_and_below_producer_id=request.producer_id, v3_and_below_producer_epoch=request.producer_epoch,
                v3_and_below_topics=tuple(make(topic_cls, name=name, partitions=tuple(partitions))
                                          for name, partitions in group_by_topic(request.partitions).items()))


def _decode_add_partitions(request: AddPartitionsToTxnRequest, version: int,
                           body: Any) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(tuple(
        PartitionResult(str(topic.name), int(p.partition_index), int(p.partition_error_code))
        for topic in body.results_by_topic_v3_and_below for p in topic.results_by_partition), request.request_id)


# ---------------------------------------------------------------- AddOffsetsToTxn (key 25), EndTxn (key 26)


def _encode_add_offsets(request: AddOffsetsToTxnRequest, version: int) -> Any:
    return make(_request_class(25, version), transactional_id=request.transactional_id,
                producer_id=request.producer_id, producer_epoch=request.producer_epoch, group_id=request.group_id)


def _decode_add_offsets(request: AddOffsetsToTxnRequest, version: int, body: Any) -> AddOffsetsToTxnResponse:
    return AddOffsetsToTxnResponse(int(body.error_code), request.request_id)


def _encode_end_txn(request: EndTxnRequest, version: int) -> Any:
    return make(_request_class(26, version), transactional_id=request.transactional_id,
                producer_id=request.producer_id, producer_epoch=request.producer_epoch, committed=request.committed)


def _decode_end_txn(request: EndTxnRequest, version: int, body: Any) -> EndTxnResponse:
    return EndTxnResponse(int(body.error_code), request.request_id)


# ---------------------------------------------------------------- group offsets (keys 8, 9, 28)


def _offset_topics(cls: type, prefix: str, offsets: Sequence[OffsetEntry]) -> tuple[Any, ...]:
    topic_cls, partition_cls = nested(cls, f"{prefix}Topic"), nested(cls, f"{prefix}Partition")
    by_topic: dict[str, list[Any]] = {}
    for entry in offsets:
        by_topic.setdefault(entry.topic, []).append(make(
            partition_cls, partition_index=entry.partition, committed_offset=entry.offset,
            committed_leader_epoch=NO_LEADER_EPOCH, committed_metadata=entry.metadata, commit_timestamp=-1))
    return tuple(make(topic_cls, name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items())


def _commit_results(body: Any) -> tuple[PartitionResult, ...]:
    return tuple(PartitionResult(str(topic.name), int(p.partition_index), int(p.error_code))
                 for topic in body.topics for p in topic.partitions)


def _encode_txn_offset_commit(request: TxnOffsetCommitRequest, version: int) -> Any:
    cls = _request_class(28, version)
    return make(cls, transactional_id=request.transactional_id, group_id=request.group_id,
                producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                generation_id=request.generation_id, member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                topics=_offset_topics(cls, "TxnOffsetCommitRequest", request.offsets))


def _decode_txn_offset_commit(request: TxnOffsetCommitRequest, version: int, body: Any) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(_commit_results(body), request.request_id)


def _encode_offset_commit(request: OffsetCommitRequest, version: int) -> Any:
    cls = _request_class(8, version)
    return make(cls, group_id=request.group_id, generation_id_or_member_epoch=request.generation_id,
                member_id=request.member_id, group_instance_id=request.group_instance_id, retention_time=-1,
                topics=_offset_topics(cls, "OffsetCommitRequest", request.offsets))


def _decode_offset_commit(request: OffsetCommitRequest, version: int, body: Any) -> OffsetCommitResponse:
    return OffsetCommitResponse(_commit_results(body), request.request_id)


def _encode_offset_fetch(request: OffsetFetchRequest, version: int) -> Any:
    cls = _request_class(9, version)
    topic_cls = nested(cls, "OffsetFetchRequestTopic")
    if request.partitions is None and version < 2:
        raise WireProtocolError("OffsetFetch v1 cannot ask for every partition of a group")
    topics = None if request.partitions is None else tuple(
        make(topic_cls, name=name, partition_indexes=tuple(partitions))
        for name, partitions in group_by_topic(request.partitions).items())
    return make(cls, group_id=request.group_id, topics=topics, require_stable=request.require_stable)


def _decode_offset_fetch(request: OffsetFetchRequest, version: int, body: Any) -> OffsetFetchResponse:
    offsets = tuple(FetchedOffset(str(topic.name), int(p.partition_index), int(p.committed_offset),
                                  "" if p.metadata is None else str(p.metadata), int(p.error_code))
                    for topic in body.topics for p in topic.partitions)
    return OffsetFetchResponse(offsets, int(getattr(body, "error_code", 0)), request.request_id)


# ---------------------------------------------------------------- JoinGroup, SyncGroup, Heartbeat, LeaveGroup


def _static_since(request: Any, version: int, since: int, what: str) -> None:
    """A static member (KIP-345) needs a version that carries its instance id."""
    if request.group_instance_id is not None and version < since:
        raise WireProtocolError(f"{what} v{version} cannot carry group_instance_id "
                                f"{request.group_instance_id!r} (static membership needs v{since}+)")


def _encode_join_group(request: JoinGroupRequest, version: int) -> Any:
    _static_since(request, version, 5, "JoinGroup")
    cls = _request_class(11, version)
    protocol_cls = nested(cls, "JoinGroupRequestProtocol")
    return make(cls, group_id=request.group_id, session_timeout=request.session_timeout_ms,
                rebalance_timeout=request.rebalance_timeout_ms, member_id=request.member_id,
                group_instance_id=request.group_instance_id, protocol_type=request.protocol_type,
                protocols=tuple(make(protocol_cls, name=name, metadata=metadata)
                                for name, metadata in request.protocols),
                reason=request.reason)


def _decode_join_group(request: JoinGroupRequest, version: int, body: Any) -> JoinGroupResponse:
    members = tuple((str(m.member_id), optional_str(getattr(m, "group_instance_id", None)), bytes(m.metadata))
                    for m in body.members)
    # Before v7 the protocol name is not nullable: "" stands for none.
    name = optional_str(body.protocol_name) or None
    return JoinGroupResponse(int(body.error_code), int(body.generation_id),
                             optional_str(getattr(body, "protocol_type", None)), name, str(body.leader),
                             str(body.member_id), members, request.request_id)


def _encode_sync_group(request: SyncGroupRequest, version: int) -> Any:
    _static_since(request, version, 3, "SyncGroup")
    cls = _request_class(14, version)
    assignment_cls = nested(cls, "SyncGroupRequestAssignment")
    return make(cls, group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id,
                group_instance_id=request.group_instance_id, protocol_type=request.protocol_type,
                protocol_name=request.protocol_name,
                assignments=tuple(make(assignment_cls, member_id=member_id, assignment=data)
                                  for member_id, data in request.assignments))


def _decode_sync_group(request: SyncGroupRequest, version: int, body: Any) -> SyncGroupResponse:
    return SyncGroupResponse(int(body.error_code), bytes(body.assignment),
                             optional_str(getattr(body, "protocol_type", None)),
                             optional_str(getattr(body, "protocol_name", None)), request.request_id)


def _encode_heartbeat(request: HeartbeatRequest, version: int) -> Any:
    _static_since(request, version, 3, "Heartbeat")
    return make(_request_class(12, version), group_id=request.group_id, generation_id=request.generation_id,
                member_id=request.member_id, group_instance_id=request.group_instance_id)


def _decode_heartbeat(request: HeartbeatRequest, version: int, body: Any) -> HeartbeatResponse:
    return HeartbeatResponse(int(body.error_code), request.request_id)


def _encode_leave_group(request: LeaveGroupRequest, version: int) -> Any:
    cls = _request_class(13, version)
    if version < 3:  # one member, by member id
        if len(request.members) != 1 or request.members[0].group_instance_id is not None:
            raise WireProtocolError(f"LeaveGroup v{version} takes one member without an instance id, got "
                                    f"{len(request.members)} members")
        return make(cls, group_id=request.group_id, member_id=request.members[0].member_id)
    member_cls = nested(cls, "MemberIdentity")
    return make(cls, group_id=request.group_id, members=tuple(
        make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, reason=m.reason)
        for m in request.members))


def _decode_leave_group(request: LeaveGroupRequest, version: int, body: Any) -> LeaveGroupResponse:
    if version < 3:
        code = int(body.error_code)
        return LeaveGroupResponse(code, tuple(LeftMember(m.member_id, m.group_instance_id, code)
                                              for m in request.members), request.request_id)
    return LeaveGroupResponse(int(body.error_code), tuple(
        LeftMember(str(m.member_id), optional_str(m.group_instance_id), int(m.error_code)) for m in body.members),
        request.request_id)


# ---------------------------------------------------------------- the table


def _api(key: int, name: str, low: int, high: int, encode: Callable[..., Any], decode: Callable[..., Any]) -> ClientApi:
    return ClientApi(key, name, low, high, encode, decode)


PRODUCE = _api(0, "Produce", 3, 11, _encode_produce, _decode_produce)
FETCH = _api(1, "Fetch", 4, 12, _encode_fetch, _decode_fetch)
LIST_OFFSETS = _api(2, "ListOffsets", 1, 8, _encode_list_offsets, _decode_list_offsets)
METADATA = _api(3, "Metadata", 1, 12, _encode_metadata, _decode_metadata)
OFFSET_COMMIT = _api(8, "OffsetCommit", 2, 9, _encode_offset_commit, _decode_offset_commit)
OFFSET_FETCH = _api(9, "OffsetFetch", 1, 7, _encode_offset_fetch, _decode_offset_fetch)
FIND_COORDINATOR = _api(10, "FindCoordinator", 0, 6, _encode_find_coordinator, _decode_find_coordinator)
CREATE_TOPICS = _api(19, "CreateTopics", 2, 7, _encode_create_topics, _decode_create_topics)
INIT_PRODUCER_ID = _api(22, "InitProducerId", 0, 5, _encode_init_producer_id, _decode_init_producer_id)
ADD_PARTITIONS_TO_TXN = _api(24, "AddPartitionsToTxn", 0, 3, _encode_add_partitions, _decode_add_partitions)
ADD_OFFSETS_TO_TXN = _api(25, "AddOffsetsToTxn", 0, 4, _encode_add_offsets, _decode_add_offsets)
END_TXN = _api(26, "EndTxn", 0, 4, _encode_end_txn, _decode_end_txn)
TXN_OFFSET_COMMIT = _api(28, "TxnOffsetCommit", 0, 4, _encode_txn_offset_commit, _decode_txn_offset_commit)
JOIN_GROUP = _api(11, "JoinGroup", 1, 9, _encode_join_group, _decode_join_group)
HEARTBEAT = _api(12, "Heartbeat", 0, 4, _encode_heartbeat, _decode_heartbeat)
LEAVE_GROUP = _api(13, "LeaveGroup", 0, 5, _encode_leave_group, _decode_leave_group)
SYNC_GROUP = _api(14, "SyncGroup", 0, 5, _encode_sync_group, _decode_sync_group)

#: Each message request class, and the API that carries it.
CLIENT_APIS: dict[type, ClientApi] = {
    ProduceRequest: PRODUCE, FetchRequest: FETCH, ListOffsetsRequest: LIST_OFFSETS, MetadataRequest: METADATA,
    OffsetCommitRequest: OFFSET_COMMIT, OffsetFetchRequest: OFFSET_FETCH, FindCoordinatorRequest: FIND_COORDINATOR,
    CreateTopicsRequest: CREATE_TOPICS, InitProducerIdRequest: INIT_PRODUCER_ID,
    AddPartitionsToTxnRequest: ADD_PARTITIONS_TO_TXN, AddOffsetsToTxnRequest: ADD_OFFSETS_TO_TXN,
    EndTxnRequest: END_TXN, TxnOffsetCommitRequest: TXN_OFFSET_COMMIT,
    JoinGroupRequest: JOIN_GROUP, SyncGroupRequest: SYNC_GROUP, HeartbeatRequest: HEARTBEAT,
    LeaveGroupRequest: LEAVE_GROUP,
}
CLIENT_APIS.update({kind: _api(key, name, low, high, encode, decode)
                    for kind, key, name, low, high, encode, decode in (*GROUP_ADMIN_CLIENT_APIS, *ACL_CLIENT_APIS,
                                                                      *SCRAM_CREDENTIAL_CLIENT_APIS,
                                                                      *ADMIN_CLIENT_APIS)})
#: The client APIs by key.
BY_KEY: dict[int, ClientApi] = {api.key: api for api in CLIENT_APIS.values()}


def api_of(request: Request) -> ClientApi:
    """The API that carries ``request``; WireProtocolError for one no client sends (WriteTxnMarkers)."""
    api = CLIENT_APIS.get(type(request))
    if api is None:
        raise WireProtocolError(f"a {type(request).__name__} is not a request a client sends over the wire")
    return api


def pick_version(api: ClientApi, server: tuple[int, int] | None) -> int | None:
    """The highest version both this side and the server (``(min, max)``, None: it lacks the API) speak."""
    if server is None:
        return None
    high = min(api.max_version, server[1])
    low = max(api.min_version, server[0])
    return high if high >= low else None
