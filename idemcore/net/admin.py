"""The admin requests: those that find hanging transactions (KIP-664), DescribeProducers (the producer state of
partitions, as each partition's leader holds it), DescribeTransactions and ListTransactions (the transaction
coordinator's state of transactional ids); and DeleteRecords (KIP-107: move partitions' log start offsets up).
``Broker.handle`` takes each request and answers its response; every response carries its request's
``request_id``.

Only :mod:`idemcore.protocol` is imported here, so :mod:`idemcore.net.messages` may list these classes in its
``Request`` / ``Response`` unions without an import cycle."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition

# ---------------------------------------------------------------- DescribeProducers


@dataclass(slots=True, frozen=True)
class DescribeProducersRequest:
    """The active producers of each of ``partitions``, ``(topic, partition)`` pairs, answered in this order (a
    pair asked twice is answered twice, as Kafka does)."""

    partitions: tuple[TopicPartition, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ProducerState:
    """One producer's entry in a partition's producer state (Kafka's ``DescribeProducersResponse.ProducerState``).

    ``last_sequence``: of its newest retained batch (-1 when none is retained, e.g. it has written only markers);
    ``last_timestamp``: of its last write, -1 when none; ``coordinator_epoch``: of its last transaction marker, -1
    when none; ``current_txn_start_offset``: the first offset of its open transaction, -1 when none is open."""

    producer_id: int
    producer_epoch: int
    last_sequence: int = -1
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


@dataclass(slots=True, frozen=True)
class PartitionProducers:
    """One partition's answer: an error code, or its active producers sorted by producer id."""

    topic: str
    partition: int
    error_code: int = ErrorCode.NONE
    active_producers: tuple[ProducerState, ...] = ()
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class DescribeProducersResponse:
    """One answer per requested pair, in the request's order. ``error_code`` INVALID_REQUEST (no partitions):
    the request itself is malformed (``error_message`` names the bad value; Kafka's message has no such field,
    a wire request can never be malformed this way)."""

    partitions: tuple[PartitionProducers, ...] = ()
    request_id: int = 0
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


# ---------------------------------------------------------------- DescribeTransactions


@dataclass(slots=True, frozen=True)
class DescribeTransactionsRequest:
    """The coordinator's state of each of ``transactional_ids``, answered in this order."""

    transactional_ids: tuple[str, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class DescribedTransaction:
    """One transactional id's state; the fields after ``error_code`` hold these defaults unless it is NONE
    (TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not know).

    ``state``: Kafka's name (``"Empty"``, ``"Ongoing"``, ``"PrepareCommit"``, ...); ``transaction_start_ms``: when
    the current or last transaction started, -1 when none did; ``topic_partitions``: the partitions of the
    transaction, sorted."""

    transactional_id: str
    error_code: int = ErrorCode.NONE
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_ms: int = -1
    topic_partitions: tuple[TopicPartition, ...] = ()


@dataclass(slots=True, frozen=True)
class DescribeTransactionsResponse:
    """One answer per requested id, in the request's order; ``error_code``/``error_message`` as in
    :class:`DescribeProducersResponse` (a malformed request, in process only)."""

    transactions: tuple[DescribedTransaction, ...] = ()
    request_id: int = 0
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


# ---------------------------------------------------------------- ListTransactions


@dataclass(slots=True, frozen=True)
class ListTransactionsRequest:
    """Every transactional id the coordinator knows, filtered: ``state_filters`` by Kafka's state names
    (``"Ongoing"``, ``"PrepareCommit"``, ...), ``producer_id_filters`` by producer id (each empty: no filter), and
    ``duration_filter_ms`` (ListTransactions v1, KIP-994; negative: no filter) to those whose transaction started
    more than that many ms ago."""

    state_filters: tuple[str, ...] = ()
    producer_id_filters: tuple[int, ...] = ()
    duration_filter_ms: int = -1
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(slots=True, frozen=True)
class ListTransactionsResponse:
    """``transactions`` sorted by transactional id; ``unknown_state_filters``: the state filters that name no
    state, echoed back as Kafka does (the others still filter)."""

    error_code: int = ErrorCode.NONE
    transactions: tuple[ListedTransaction, ...] = ()
    unknown_state_filters: tuple[str, ...] = ()
    request_id: int = 0
    error_message: str | None = None


# ---------------------------------------------------------------- DeleteRecords

#: DeleteRecords' offset meaning "up to the high watermark" (Kafka's ``DeleteRecordsRequest.HIGH_WATERMARK``).
HIGH_WATERMARK = -1


@dataclass(slots=True, frozen=True)
class DeleteRecordsRequest:
    """Delete the records below an offset of each of ``partitions``, ``(topic, partition, offset)`` triples
    answered in this order: the partition's log start offset moves up to ``offset`` (:data:`HIGH_WATERMARK`: the
    high watermark, the log end on one broker). ``timeout_ms``: how long Kafka waits for followers (one broker
    never waits)."""

    partitions: tuple[tuple[str, int, int], ...]
    timeout_ms: int = 30_000
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class DeletedRecords:
    """One partition's answer (Kafka's ``DeleteRecordsPartitionResult``): ``low_watermark`` is its log start offset
    after the request, -1 with an error."""

    topic: str
    partition: int
    error_code: int = ErrorCode.NONE
    low_watermark: int = -1
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class DeleteRecordsResponse:
    """One answer per requested triple, in the request's order; ``error_code``/``error_message`` as in
    :class:`DescribeProducersResponse` (a malformed request, in process only)."""

    partitions: tuple[DeletedRecords, ...] = ()
    request_id: int = 0
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


AdminRequest = DescribeProducersRequest | DescribeTransactionsRequest | ListTransactionsRequest | DeleteRecordsRequest
AdminResponse = (DescribeProducersResponse | DescribeTransactionsResponse | ListTransactionsResponse
                 | DeleteRecordsResponse)
