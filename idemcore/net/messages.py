"""The requests and responses clients and brokers exchange: Kafka's InitProducerId, Produce and WriteTxnMarkers,
with the fields idemcore's broker, producer and coordinator use. ``Broker.handle`` takes any :data:`Request`."""

from __future__ import annotations

from dataclasses import dataclass, field

from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_OFFSET, NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from idemcore.record.batch import RecordBatch


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
    request_id: int = 0


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


Request = ProduceRequest | InitProducerIdRequest | WriteTxnMarkersRequest
Response = ProduceResponse | InitProducerIdResponse | WriteTxnMarkersResponse
