"""Coordinators that keep their state in compacted internal topics: the transaction coordinator
(``__transaction_state``) now, the group coordinator (``__consumer_offsets``) next.

The transaction coordinator is independent of the broker's plumbing: it writes its log through a
:class:`TransactionLogWriter`, markers through a :class:`MarkerWriter`, and takes producer ids and the time from
callables, so the broker plugs in its own and tests plug in fakes.
"""

from idemcore.broker.coordinator.collaborators import (
    LogReplication,
    MarkerWriter,
    ProducerIdAllocator,
    TransactionLogWriter,
)
from idemcore.broker.coordinator.metadata import IllegalTransitionError, TransactionMetadata, TxnTransitMetadata
from idemcore.broker.coordinator.partitioning import coordinator_partition, java_abs, java_string_hash, partition_for
from idemcore.broker.coordinator.results import (
    InitProducerIdResult,
    ListTransactionsResult,
    TransactionDescription,
    TransactionListing,
)
from idemcore.broker.coordinator.transaction import TransactionCoordinator, coordinator_error

__all__ = [
    "IllegalTransitionError", "InitProducerIdResult", "ListTransactionsResult", "LogReplication", "MarkerWriter",
    "ProducerIdAllocator",
    "TransactionCoordinator", "TransactionDescription", "TransactionListing", "TransactionLogWriter",
    "TransactionMetadata", "TxnTransitMetadata", "coordinator_error", "coordinator_partition", "java_abs",
    "java_string_hash", "partition_for",
]
