"""idemcore: Kafka's exactly-once machinery outside the JVM, with a native hot path."""

from ._kernels import available_backends, get_backend
from .batches import COLUMNS, BatchMetadata
from .constants import ControlType, ErrorCode, Origin, Status
from .errors import BackendUnavailableError, IdemcoreError
from .state import ProducerStateTable
from .validate import CompletedTxns, Verdicts, validate

__version__ = "0.1.0"

__all__ = [
    "COLUMNS",
    "BackendUnavailableError",
    "BatchMetadata",
    "CompletedTxns",
    "ControlType",
    "ErrorCode",
    "IdemcoreError",
    "Origin",
    "ProducerStateTable",
    "Status",
    "Verdicts",
    "__version__",
    "available_backends",
    "get_backend",
    "validate",
]
