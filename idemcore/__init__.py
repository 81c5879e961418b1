"""idemcore: Kafka's exactly-once machinery outside the JVM, with a native hot path.

The layout, bottom to top (imports point down): ``protocol`` (codes, constants,
sequence arithmetic), ``findings``, ``kernels`` (the three backends, their
ABI), ``record`` (batch metadata columns, the batch object), ``state`` (producer-state
table, validate = check + commit, ProducerStateManager), ``net`` (messages,
transports), ``client`` (Producer, Consumer), ``broker`` (Broker.handle, logs, producer
ids), ``audit`` (replay, report, Spark), ``synth``, ``sim``, ``cli``.
"""

from idemcore.client import (
    ConfigError,
    Consumer,
    ConsumerRecord,
    DeliveryError,
    Producer,
    ProducerFencedError,
    TransactionAbortableError,
)
from idemcore.engine import (
    AppendResult,
    CompletedTxn,
    CompletedTxns,
    MarkerResult,
    ProducerEntry,
    ProducerStateManager,
    ProducerStateTable,
    Verdicts,
    check,
    commit,
    validate,
)
from idemcore.errors import BackendUnavailableError, IdemcoreError
from idemcore.findings import FINDINGS, Finding
from idemcore.kernels import available_backends, get_backend
from idemcore.kernels.columns import COLUMNS, INPUT_COLUMNS, BatchColumns
from idemcore.protocol.codes import ControlType, ErrorCode, Origin, Status

__version__ = "0.1.0"


def __getattr__(name: str):
    # The broker is imported on first use, so `import idemcore` for a client or the kernels stays light.
    if name == "Broker":
        from idemcore.broker import Broker

        return Broker
    if name == "Server":
        from idemcore.broker.server import Server

        return Server
    raise AttributeError(f"module 'idemcore' has no attribute {name!r}")


__all__ = [
    "COLUMNS",
    "FINDINGS",
    "INPUT_COLUMNS",
    "AppendResult",
    "BackendUnavailableError",
    "BatchColumns",
    "Broker",
    "CompletedTxn",
    "CompletedTxns",
    "ConfigError",
    "Consumer",
    "ConsumerRecord",
    "ControlType",
    "DeliveryError",
    "ErrorCode",
    "Finding",
    "IdemcoreError",
    "MarkerResult",
    "Origin",
    "Producer",
    "ProducerEntry",
    "ProducerFencedError",
    "ProducerStateManager",
    "ProducerStateTable",
    "Server",
    "Status",
    "TransactionAbortableError",
    "Verdicts",
    "__version__",
    "available_backends",
    "check",
    "commit",
    "get_backend",
    "validate",
]
