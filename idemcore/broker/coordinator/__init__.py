"""The transaction coordinator (Kafka's ``TransactionCoordinator``), which keeps its state in the compacted
``__transaction_state`` topic (record format: :mod:`idemcore.record.kafka_files.transaction_log`); the group
coordinator, which keeps its in ``__consumer_offsets``, is :mod:`idemcore.broker.group`. Both pick the partition
that owns a key with :func:`coordinator_partition`.

The transaction coordinator is independent of the broker: it writes its log through a
:class:`TransactionLogWriter`, markers through a :class:`MarkerWriter` (:mod:`.collaborators`), and takes producer
ids and the time from callables, so the broker plugs in its own (:mod:`.request_path_writers`) and tests plug in
fakes.
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
