"""Producer state: the table the kernels read and write, validate (check + commit), the per-partition
``ProducerStateManager``, and Kafka's producer-state snapshots of a partition (``snapshot``)."""

from idemcore.state.manager import (
    AppendResult,
    BatchRecord,
    CompletedTxn,
    MarkerResult,
    PreparedAppend,
    ProducerEntry,
    ProducerStateManager,
)
from idemcore.state.persist import load_state, save_state
from idemcore.state.snapshot import load_snapshot, load_snapshot_file, snapshot_entries
from idemcore.state.table import ProducerStateTable
from idemcore.state.validate import check, commit, validate
from idemcore.state.verdicts import CompletedTxns, Verdicts

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
