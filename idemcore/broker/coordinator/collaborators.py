"""What the transaction coordinator needs from the broker, as small protocols: the broker plugs in its own log and
request path, tests plug in fakes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from idemcore.protocol.constants import TopicPartition as TopicPartition  # re-exported for the coordinator

#: Hands out a fresh producer id; raises (IdemcoreError or OSError) when none can be had.
ProducerIdAllocator = Callable[[], int]


class TransactionLogWriter(Protocol):
    """Appends one record to a ``__transaction_state`` partition."""

    def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Write ``key``/``value`` (None: a tombstone) to ``partition`` and return NONE only once it is durable;
        otherwise the broker's error code (e.g. NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR), which the coordinator
        turns into a coordinator error as Kafka does."""
        ...


class MarkerWriter(Protocol):
    """Writes transaction markers through the broker's request path (WriteTxnMarkers, COORDINATOR origin)."""

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]:
        """Write a COMMIT (``committed``) or ABORT marker to each partition; one error code per partition.
        UNKNOWN_TOPIC_OR_PARTITION (a broker started without that topic) is retried, as Kafka retries it."""
        ...


class LogReplication(Protocol):
    """How far the coordinator's ``__transaction_state`` partitions are replicated (a broker in a cluster)."""

    def log_end(self, partition: int) -> int:
        """The partition's log end offset now."""
        ...

    def high_watermark(self, partition: int) -> int:
        """The partition's high watermark now: every record below it is on every replica in sync (-1 when this
        broker does not lead the partition: nothing it wrote there counts as replicated)."""
        ...
