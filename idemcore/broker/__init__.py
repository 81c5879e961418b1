"""The broker side: partition logs and produce handling over the producer-state kernel."""

from .broker import Broker
from .log import LogCorruptionError, PartitionLog
from .protocol import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    PartitionResponse,
    ProduceRequest,
    ProduceResponse,
    RecordBatch,
)

__all__ = ["Broker", "InitProducerIdRequest", "InitProducerIdResponse", "LogCorruptionError", "PartitionLog",
           "PartitionResponse", "ProduceRequest", "ProduceResponse", "RecordBatch"]
