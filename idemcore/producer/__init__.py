"""The idempotent producer: accumulator, drain kernel, sender, retries (SPEC §3)."""

from .batch import DeliveryError, RecordFuture, RecordMetadata
from .config import ConfigError, ProducerConfig
from .producer import BatchSendFuture, Producer, ProducerClosedError

__all__ = ["BatchSendFuture", "ConfigError", "DeliveryError", "Producer", "ProducerClosedError", "ProducerConfig",
           "RecordFuture", "RecordMetadata"]
