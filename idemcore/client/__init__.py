"""The idempotent producer: accumulator, drain kernel, sender, retries (docs/rules.md §3)."""

from idemcore.client.batch import DeliveryError, RecordFuture, RecordMetadata
from idemcore.client.config import ConfigError, ProducerConfig
from idemcore.client.producer import (
    BatchDeliveryError,
    BatchSendFuture,
    Producer,
    ProducerClosedError,
    RecordTooLargeError,
)

__all__ = ["BatchDeliveryError", "BatchSendFuture", "ConfigError", "DeliveryError", "Producer", "ProducerClosedError",
           "ProducerConfig", "RecordFuture", "RecordMetadata", "RecordTooLargeError"]
