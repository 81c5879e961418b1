"""Replaying whole (topic, partition) streams through the kernel, and the audit report built from it.

This layer knows Arrow but not Spark: the Spark workers call it, and so do
the in-process audit, the tests and the benchmarks.
"""

from idemcore.audit.columns import TOPIC, order_column, required_columns
from idemcore.audit.keys import StreamKeys
from idemcore.audit.replayer import StreamReplayer, TaskResult, replay_table
from idemcore.audit.report import DEFAULT_HANGING_AFTER_MS, AuditReport

__all__ = [
    "DEFAULT_HANGING_AFTER_MS",
    "TOPIC",
    "AuditReport",
    "StreamKeys",
    "StreamReplayer",
    "TaskResult",
    "order_column",
    "replay_table",
    "required_columns",
]
