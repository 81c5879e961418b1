"""A partition's log stored as Kafka stores it (Kafka's storage module, ``storage/.../internals/log/``):
:mod:`.store` (file or memory bytes), :mod:`.segment` (``LogSegment``: a ``.log`` with its indexes),
:mod:`.loader` (``LogLoader``: clean and crash loading), :mod:`.partition_log` (``UnifiedLog``: appends, reads,
rolls, retention, transactions, a follower's appends and truncations), :mod:`.leader_epochs`
(``LeaderEpochFileCache``), :mod:`.cleaner` (compaction)."""

from idemcore.broker.log.leader_epochs import LeaderEpochCache
from idemcore.broker.log.loader import CHECKPOINT_HINT, LEADER_EPOCH, LogCorruptionError
from idemcore.broker.log.partition_log import PartitionLog, UnexpectedAppendOffsetError
from idemcore.broker.log.segment import LogSegment

__all__ = ["CHECKPOINT_HINT", "LEADER_EPOCH", "LeaderEpochCache", "LogCorruptionError", "LogSegment",
           "PartitionLog", "UnexpectedAppendOffsetError"]
