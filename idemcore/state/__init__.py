"""Producer state: the table the kernels read and write, validate (check + commit), and the per-partition
``ProducerStateManager``."""

from idemcore.state.manager import (
    AppendResult,
    BatchRecord,
    CompletedTxn,
    MarkerResult,
    PreparedAppend,
    ProducerEntry,
    ProducerStateManager,
)
from idemcore.state.table import ProducerStateTable
from idemcore.state.validate import CompletedTxns, Verdicts, check, commit, validate

__all__ = [
    "AppendResult",
    "BatchRecord",
    "CompletedTxn",
    "CompletedTxns",
    "MarkerResult",
    "PreparedAppend",
    "ProducerEntry",
    "ProducerStateManager",
    "ProducerStateTable",
    "Verdicts",
    "check",
    "commit",
    "validate",
]
