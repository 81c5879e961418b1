"""Producer state: the table the kernels read and write, validate (check + commit), the per-stream
``ProducerStateManager``, and Kafka's producer-state snapshots of a stream (``snapshot``)."""

from idemcore.engine.manager import (
    AppendResult,
    BatchRecord,
    CompletedTxn,
    MarkerResult,
    PreparedAppend,
    ProducerEntry,
    ProducerStateManager,
)
from idemcore.engine.persist import load_state, save_state
from idemcore.engine.snapshot import load_snapshot, load_snapshot_file, snapshot_entries
from idemcore.engine.table import ProducerStateTable
from idemcore.engine.validate import check, commit, validate
from idemcore.engine.verdicts import CompletedTxns, Verdicts

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
    "load_snapshot",
    "load_snapshot_file",
    "load_state",
    "save_state",
    "snapshot_entries",
    "validate",
]
