"""The messages producers and brokers exchange (Kafka's InitProducerId and Produce, reduced to what matters here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..constants import NO_OFFSET, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, ErrorCode


@dataclass(slots=True, frozen=True)
class RecordBatch:
    """One partition's records in a produce request, with the producer's metadata.

    A producer builds a fresh one for every attempt, so what a broker stored
    never changes when the producer later re-stamps a retried batch.
    """

    topic: str
    partition: int
    values: Sequence[bytes]
    keys: Sequence[bytes | None] | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    max_timestamp: int = 0
    is_transactional: bool = False

    @property
    def record_count(self) -> int:
        return len(self.values)


@dataclass(slots=True, frozen=True)
class ProduceRequest:
    """At most one batch per partition (as in Produce v3+). ``acks``: 0, 1 or -1 (all)."""

    batches: tuple[RecordBatch, ...]
    acks: int = -1
    timeout_ms: int = 30_000
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class PartitionResponse:
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
