"""idemcore: Kafka's exactly-once machinery outside the JVM, with a native hot path."""

from ._kernels import available_backends, get_backend
from .batches import COLUMNS, BatchMetadata
from .constants import ControlType, ErrorCode, Finding, Origin, Status
from .errors import BackendUnavailableError, IdemcoreError
from .state import ProducerStateTable
from .state_manager import AppendResult, CompletedTxn, MarkerResult, ProducerEntry, ProducerStateManager
from .validate import CompletedTxns, Verdicts, validate

__version__ = "0.1.0"

__all__ = [
    "COLUMNS",
    "AppendResult",
    "BackendUnavailableError",
    "BatchMetadata",
    "CompletedTxn",
    "CompletedTxns",
    "ControlType",
    "ErrorCode",
    "Finding",
    "IdemcoreError",
    "MarkerResult",
    "Origin",
    "ProducerEntry",
    "ProducerStateManager",
    "ProducerStateTable",
    "Status",
    "Verdicts",
    "__version__",
    "available_backends",
    "get_backend",
    "validate",
]
