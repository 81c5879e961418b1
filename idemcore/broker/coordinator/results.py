"""What the transaction coordinator's handlers answer (the fields of Kafka's responses, as plain values)."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error_code: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One id of DescribeTransactions; the fields after ``error_code`` hold defaults unless it is NONE."""

    transactional_id: str
    error_code: ErrorCode
    #: Kafka's name of the state: "Empty", "Ongoing", "PrepareCommit", ...
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    #: -1 when no transaction has started.
    transaction_start_ms: int = -1
    #: Sorted (topic, partition) pairs of the transaction.
    topic_partitions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One entry of ListTransactions."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error_code: ErrorCode
    #: Sorted by transactional id.
    transaction_states: tuple[TransactionListing, ...] = ()
    #: State filters that name no state, echoed back as Kafka does.
    unknown_state_filters: tuple[str, ...] = ()
