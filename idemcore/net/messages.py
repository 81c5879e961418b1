"""The requests and responses clients and brokers exchange, with the fields of Kafka's messages that idemcore's
broker, clients and coordinators use. ``Broker.handle`` takes any :data:`Request`.

Produce, InitProducerId and WriteTxnMarkers carry idempotent and transactional writes; FindCoordinator,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit drive a transaction; OffsetCommit and
OffsetFetch keep a group's offsets; ListOffsets and Fetch serve consumers. Every response carries its
request's ``request_id``, so a client can match answers that arrive out of order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from idemcore.checks import int_arg
from idemcore.errors import IdemcoreError
from idemcore.net.admin import AdminRequest, AdminResponse
from idemcore.net.configs import ConfigsRequest, ConfigsResponse, DescribedConfig
from idemcore.net.replication import (
    BrokerEndpoint,
    ElectLeadersRequest,
    ElectLeadersResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ListenerAddress,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    NO_OFFSET,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    READ_UNCOMMITTED,
    TopicPartition,
)
from idemcore.record.batch import RecordBatch

#: A Produce request's acks: none, the leader's, every in-sync replica's (-1, "all").
PRODUCE_ACKS = (0, 1, -1)


@dataclass(slots=True, frozen=True)
class ProduceRequest:
    """At most one batch per partition (as in Produce v3+). ``acks``: 0, 1 or -1 (all)."""

    batches: tuple[RecordBatch, ...]
    acks: int = -1
    timeout_ms: int = 30_000
    request_id: int = 0
    #: Written by this broker's own coordinator (Kafka's AppendOrigin.COORDINATOR): only such requests may append
    #: to internal topics.
    internal: bool = False
    #: The producer's transactional id (the request's, for transactional batches): what their WRITE is checked on.
    transactional_id: str | None = None

    def __post_init__(self) -> None:
        # Checked once where the request is made (a client, the wire decoder, a coordinator's own append), so the
        # broker's produce path and its delayed answer take the fields as they are.
        if type(self.acks) is not int or self.acks not in PRODUCE_ACKS:
            raise ValueError(f"acks must be one of {PRODUCE_ACKS}, got {self.acks!r}")
        if not isinstance(self.batches, tuple | list) or not all(type(b) is RecordBatch for b in self.batches):
            raise TypeError(f"ProduceRequest.batches must be a tuple of RecordBatch, got {self.batches!r:.80}")
        int_arg("ProduceRequest.timeout_ms", self.timeout_ms)


@dataclass(slots=True, frozen=True)
class PartitionResponse:
    """One partition's answer; ``error_message`` names every value involved when ``error_code`` is not NONE."""

    topic: str
    partition: int
    error_code: int = ErrorCode.NONE
    base_offset: int = NO_OFFSET
    log_append_time: int = -1  # -1: the log keeps the producer's CreateTime
    log_start_offset: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class ProduceResponse:
    request_id: int
    responses: tuple[PartitionResponse, ...] = field(default_factory=tuple)


@dataclass(slots=True, frozen=True)
class InitProducerIdRequest:
    """A producer id and epoch. Without ``transactional_id``: an idempotent producer's fresh id. With it: the
    transaction coordinator's answer for that id (an epoch bump that fences older instances);
    ``producer_id``/``producer_epoch``: the caller's current ones after an abortable error (KIP-360), or -1."""

    request_id: int = 0
    transactional_id: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(slots=True, frozen=True)
class InitProducerIdResponse:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class TxnMarker:
    """One producer's transaction outcome, to be written to each of ``partitions`` (Kafka's WritableTxnMarker):
    a COMMIT (``committed``) or ABORT control batch with the coordinator's epoch."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


@dataclass(slots=True, frozen=True)
class WriteTxnMarkersRequest:
    """The transaction coordinator's markers for the partition leaders (Kafka's WriteTxnMarkers)."""

    markers: tuple[TxnMarker, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class TxnMarkerResult:
    """Per marker: its producer and one answer per partition (error code, and the marker's offset)."""

    producer_id: int
    responses: tuple[PartitionResponse, ...]


@dataclass(slots=True, frozen=True)
class WriteTxnMarkersResponse:
    request_id: int
    markers: tuple[TxnMarkerResult, ...] = field(default_factory=tuple)


# ---------------------------------------------------------------- transactions

#: FindCoordinator's key types.
GROUP_KEY = 0
TRANSACTION_KEY = 1


@dataclass(slots=True, frozen=True)
class FindCoordinatorRequest:
    """Which broker coordinates ``key``: a group id (``key_type`` GROUP_KEY) or a transactional id
    (TRANSACTION_KEY). The broker makes the coordinator's internal topic at the first such request, as Kafka."""

    key: str
    key_type: int = GROUP_KEY
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class FindCoordinatorResponse:
    error_code: int
    node_id: int = -1
    host: str = ""
    port: int = -1
    request_id: int = 0
    error_message: str | None = None
    #: The coordinator's every listener (a cluster): a client is sent to the one it came in on.
    listeners: tuple[ListenerAddress, ...] = ()


@dataclass(slots=True, frozen=True)
class PartitionResult:
    """One partition's error code in an answer that has nothing else per partition."""

    topic: str
    partition: int
    error_code: int = ErrorCode.NONE


@dataclass(slots=True, frozen=True)
class AddPartitionsToTxnRequest:
    """Add partitions to the producer's transaction before its first batch to each (Kafka's v3 request)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class AddPartitionsToTxnResponse:
    results: tuple[PartitionResult, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class AddOffsetsToTxnRequest:
    """Add the group's ``__consumer_offsets`` partition to the transaction (before TxnOffsetCommit)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class AddOffsetsToTxnResponse:
    error_code: int
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class EndTxnRequest:
    """Commit (``committed``) or abort the producer's transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class EndTxnResponse:
    error_code: int
    request_id: int = 0


# ---------------------------------------------------------------- group offsets


@dataclass(slots=True, frozen=True)
class OffsetEntry:
    """One partition's offset to commit: the next record the group will read there, and its metadata."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""


@dataclass(slots=True, frozen=True)
class TxnOffsetCommitRequest:
    """Offsets committed inside a transaction: visible only once its COMMIT marker reaches the group's
    ``__consumer_offsets`` partition, never after an ABORT."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: tuple[OffsetEntry, ...]
    generation_id: int = -1
    member_id: str = ""
    request_id: int = 0
    #: A static member's instance id (KIP-345; OffsetCommit v7+, TxnOffsetCommit v3+).
    group_instance_id: str | None = None


@dataclass(slots=True, frozen=True)
class TxnOffsetCommitResponse:
    results: tuple[PartitionResult, ...]
    request_id: int = 0
    error_message: str | None = None  # why a request was answered INVALID_REQUEST


@dataclass(slots=True, frozen=True)
class OffsetCommitRequest:
    """Offsets committed outside any transaction (a consumer's commit)."""

    group_id: str
    offsets: tuple[OffsetEntry, ...]
    generation_id: int = -1
    member_id: str = ""
    request_id: int = 0
    #: A static member's instance id (KIP-345; OffsetCommit v7+, TxnOffsetCommit v3+).
    group_instance_id: str | None = None


@dataclass(slots=True, frozen=True)
class OffsetCommitResponse:
    results: tuple[PartitionResult, ...]
    request_id: int = 0
    error_message: str | None = None  # why a request was answered INVALID_REQUEST


@dataclass(slots=True, frozen=True)
class OffsetFetchRequest:
    """The group's committed offsets for ``partitions`` (None: every partition it has one for).
    ``require_stable``: answer UNSTABLE_OFFSET_COMMIT for a partition while a transaction's offset is pending."""

    group_id: str
    partitions: tuple[TopicPartition, ...] | None = None
    require_stable: bool = False
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class FetchedOffset:
    """A committed offset (NO_OFFSET when the group has none for the partition)."""

    topic: str
    partition: int
    offset: int = NO_OFFSET
    metadata: str = ""
    error_code: int = ErrorCode.NONE


@dataclass(slots=True, frozen=True)
class OffsetFetchResponse:
    offsets: tuple[FetchedOffset, ...]
    error_code: int = ErrorCode.NONE
    request_id: int = 0
    error_message: str | None = None


# ---------------------------------------------------------------- consuming

#: ListOffsets' special timestamps: the log start, and the log end (read_committed: the last stable offset).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
#: ListOffsets v7+ (KIP-734): the first record with the largest timestamp.
MAX_TIMESTAMP = -3


@dataclass(slots=True, frozen=True)
class ListOffsetsRequest:
    """Per ``(topic, partition, timestamp)``: the offset for EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or
    MAX_TIMESTAMP, or of the first record whose timestamp is at least a given one (>= 0).
    ``current_leader_epochs``: parallel to ``partitions``, the asker's view of each leader's epoch (v4+; -1 or
    None: no check)."""

    partitions: tuple[tuple[str, int, int], ...]
    isolation_level: int = READ_UNCOMMITTED
    request_id: int = 0
    current_leader_epochs: tuple[int, ...] | None = None


@dataclass(slots=True, frozen=True)
class ListedOffset:
    topic: str
    partition: int
    error_code: int = ErrorCode.NONE
    offset: int = NO_OFFSET
    timestamp: int = -1
    #: The epoch of the leader that wrote the record at ``offset`` (v4+; -1: unknown).
    leader_epoch: int = -1


@dataclass(slots=True, frozen=True)
class ListOffsetsResponse:
    results: tuple[ListedOffset, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class FetchPartition:
    """Where to read one partition from, and at most how many bytes (at least one batch is always returned)."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1_048_576
    #: The asker's view of the leader's epoch (v9+, KIP-320; -1: no check).
    current_leader_epoch: int = -1
    #: The epoch of the last batch the follower holds (v12+, KIP-595: the leader answers a diverging epoch).
    last_fetched_epoch: int = -1
    #: A follower's log start offset (v5+; -1 for a consumer).
    log_start_offset: int = -1


@dataclass(slots=True, frozen=True)
class AbortedTransaction:
    """A transaction aborted on the fetched partition: its producer and first offset (Kafka's Fetch field)."""

    producer_id: int
    first_offset: int


@dataclass(slots=True, frozen=True)
class FetchedPartition:
    """One partition's batches from ``fetch_offset`` on (the first may start before it). read_committed:
    none at or beyond ``last_stable_offset``, and ``aborted_transactions`` lists those overlapping the batches."""

    topic: str
    partition: int
    error_code: int = ErrorCode.NONE
    high_watermark: int = NO_OFFSET
    last_stable_offset: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None
    #: The batches as the log holds them, back to back (Kafka's ``Records``): a broker never decodes them; the
    #: consumer does (``record.v2.decode_stored_batches``). Over the wire a last batch may be cut short.
    records: bytes = b""
    error_message: str | None = None
    #: ``(epoch, end offset)`` where the follower's log leaves the leader's (v12+): truncate there, then fetch
    #: again; None: no divergence.
    diverging_epoch: tuple[int, int] | None = None


@dataclass(slots=True, frozen=True)
class FetchRequest:
    """Read ``partitions``; ``isolation_level`` READ_COMMITTED stops at each partition's last stable offset.
    ``max_wait_ms``/``min_bytes``: how long a broker may hold an answer with less data (in process: none)."""

    partitions: tuple[FetchPartition, ...]
    isolation_level: int = READ_UNCOMMITTED
    max_bytes: int = 52_428_800
    min_bytes: int = 1
    max_wait_ms: int = 500
    request_id: int = 0
    #: The fetching follower's broker id; -1: a consumer.
    replica_id: int = -1


@dataclass(slots=True, frozen=True)
class FetchResponse:
    partitions: tuple[FetchedPartition, ...]
    error_code: int = ErrorCode.NONE
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class MetadataRequest:
    """The topics named (None: every topic). ``allow_auto_topic_creation``: a missing topic is made when the
    broker's ``auto_create_topics`` allows it too (Kafka's ``auto.create.topics.enable``)."""

    topics: tuple[str, ...] | None = None
    allow_auto_topic_creation: bool = True
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class PartitionMetadata:
    """One partition as the cluster's metadata has it (leader -1: none)."""

    partition: int
    error_code: int = ErrorCode.NONE
    leader: int = -1
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()


@dataclass(slots=True, frozen=True)
class TopicMetadata:
    """``partition_states``: each partition's leader and replicas; None: this node leads every partition and is
    its only replica (a single broker)."""

    name: str
    error_code: int = ErrorCode.NONE
    partitions: int = 0
    is_internal: bool = False
    partition_states: tuple[PartitionMetadata, ...] | None = None


@dataclass(slots=True, frozen=True)
class MetadataResponse:
    """``brokers``: the live brokers (empty: this node alone); ``controller_id`` -1: this node."""

    topics: tuple[TopicMetadata, ...]
    request_id: int = 0
    brokers: tuple[BrokerEndpoint, ...] = ()
    controller_id: int = -1


@dataclass(slots=True, frozen=True)
class NewTopic:
    """A topic to make: ``partitions`` -1 takes the broker's default; ``configs`` are Kafka's topic configs as
    the wire carries them (strings); ``replication_factor`` -1 takes the broker's default (one broker: 1);
    ``assignments``: each partition's replicas by broker id, chosen by the client (then both counts are -1)."""

    name: str
    partitions: int = -1
    configs: tuple[tuple[str, str | None], ...] = ()
    replication_factor: int = -1
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()


@dataclass(slots=True, frozen=True)
class CreateTopicsRequest:
    topics: tuple[NewTopic, ...]
    validate_only: bool = False
    request_id: int = 0
    #: How long a cluster's broker waits for the new partitions' leaders before answering (0: not at all).
    timeout_ms: int = 30_000


@dataclass(slots=True, frozen=True)
class CreatedTopic:
    """One topic's answer; ``configs``: its settings once made (or checked), as DescribeConfigs gives them."""

    name: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    partitions: int = -1
    configs: tuple[DescribedConfig, ...] = ()


@dataclass(slots=True, frozen=True)
class CreateTopicsResponse:
    results: tuple[CreatedTopic, ...]
    request_id: int = 0


class Pending:
    """An answer ``Broker.handle`` gives later: a JoinGroup waits for the rest of its group, a SyncGroup for its
    leader's assignment. Whoever completes it (a later request, or the broker's housekeeping) does so on the
    thread that calls ``handle``; a transport then delivers :attr:`response` like any other."""

    __slots__ = ("_callbacks", "response")

    def __init__(self) -> None:
        self.response: Response | None = None
        self._callbacks: list[Callable[[Response], None]] = []

    @property
    def done(self) -> bool:
        return self.response is not None

    def complete(self, response: Response) -> None:
        if self.response is not None:
            raise IdemcoreError(f"a pending answer completed twice: {self.response!r:.80} then {response!r:.80}")
        self.response = response
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(response)

    def add_done_callback(self, callback: Callable[[Response], None]) -> None:
        """Call ``callback(response)`` when completed (at once if it is)."""
        if self.response is not None:
            callback(self.response)
        else:
            self._callbacks.append(callback)


Request = (ProduceRequest | InitProducerIdRequest | WriteTxnMarkersRequest | FindCoordinatorRequest
           | AddPartitionsToTxnRequest | AddOffsetsToTxnRequest | EndTxnRequest | TxnOffsetCommitRequest
           | OffsetCommitRequest | OffsetFetchRequest | ListOffsetsRequest | FetchRequest | MetadataRequest
           | CreateTopicsRequest | AdminRequest | ConfigsRequest | LeaderAndIsrRequest | UpdateMetadataRequest
           | StopReplicaRequest | OffsetForLeaderEpochRequest | ElectLeadersRequest)
Response = (ProduceResponse | InitProducerIdResponse | WriteTxnMarkersResponse | FindCoordinatorResponse
            | AddPartitionsToTxnResponse | AddOffsetsToTxnResponse | EndTxnResponse | TxnOffsetCommitResponse
            | OffsetCommitResponse | OffsetFetchResponse | ListOffsetsResponse | FetchResponse | MetadataResponse
            | CreateTopicsResponse | AdminResponse | ConfigsResponse | LeaderAndIsrResponse | UpdateMetadataResponse
            | StopReplicaResponse | OffsetForLeaderEpochResponse | ElectLeadersResponse)
