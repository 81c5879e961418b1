"""The clients: the idempotent and transactional producer (accumulator, drain kernel, sender, retries;
docs/rules.md §3) and the consumer (read_committed or read_uncommitted, offsets in a group, group membership)."""

from idemcore.client.batch import DeliveryError, RecordFuture, RecordMetadata
from idemcore.client.config import ConfigError, ProducerConfig
from idemcore.client.consumer import (
    CommitFailedError,
    Consumer,
    ConsumerClosedError,
    ConsumerError,
    ConsumerRecord,
    ConsumerTimeoutError,
    IllegalStateError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from idemcore.client.group_member import ConsumerRebalanceListener, FencedInstanceIdError, GroupMemberError
from idemcore.client.group_metadata import ConsumerGroupMetadata
from idemcore.client.producer import (
    BatchDeliveryError,
    BatchSendFuture,
    Producer,
    ProducerClosedError,
    RecordTooLargeError,
)
from idemcore.client.transactions import (
    ProducerFencedError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    TransactionManagerState,
    TransactionStateError,
    TransactionTimeoutError,
)
from idemcore.net.tcp import AuthenticationError

__all__ = ["AuthenticationError", "BatchDeliveryError", "BatchSendFuture", "CommitFailedError", "ConfigError",
           "Consumer",
           "ConsumerClosedError", "ConsumerError", "ConsumerGroupMetadata", "ConsumerRebalanceListener",
           "ConsumerRecord", "ConsumerTimeoutError", "DeliveryError", "FencedInstanceIdError", "GroupMemberError",
           "IllegalStateError", "NoOffsetForPartitionError", "OffsetOutOfRangeError", "Producer",
           "ProducerClosedError", "ProducerConfig", "ProducerFencedError", "RecordFuture", "RecordMetadata",
           "RecordTooLargeError", "TransactionAbortableError", "TransactionError", "TransactionFatalError",
           "TransactionManagerState", "TransactionStateError", "TransactionTimeoutError"]
