"""Kafka's log directory as files: listing it, scanning its segments, reading its indexes and snapshots.

- ``names``: ``<topic>-<partition>/`` and ``<20-digit offset>.<suffix>`` names; :func:`list_log_dir` (a log
  directory, partition directories or segment files -> partitions, segments in order, what is ignored and why);
- ``segment``: :func:`scan_segment`, a segment's batch headers as columns through the native header scan, with
  where and why the scan stopped;
- ``indexes``: readers of ``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot`` and
  ``leader-epoch-checkpoint``, each returning its entries and a :class:`FileProblem` per thing wrong;
- ``writers``: writers of ``.snapshot``, ``.txnindex`` and ``leader-epoch-checkpoint``: :func:`encode_snapshot`,
  :func:`encode_txn_index_entry` (:func:`encode_txn_index` for many), :func:`encode_leader_epoch_checkpoint`, and
  :func:`write_file_atomically` to put a file in place;
- ``transaction_log``: the ``__transaction_state`` record's key and value (Kafka's ``TransactionLog``) and the
  coordinator's ``TransactionState`` its status byte names; imported from the module itself.

Authority: Kafka's ``storage/src/main/java/org/apache/kafka/storage/internals/log/`` (OffsetIndex, TimeIndex,
TransactionIndex, AbortedTxn, ProducerStateManager, LeaderEpochCheckpointFile, LogFileUtils), and the
transaction coordinator's ``TransactionLog`` with TransactionLogKey.json and TransactionLogValue.json.
"""

from idemcore.record.kafka_files.indexes import (
    AbortedTxn,
    EpochEntry,
    FileProblem,
    FileRead,
    OffsetCheckpointEntry,
    OffsetIndexEntry,
    ProducerSnapshotEntry,
    TimeIndexEntry,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_offset_index,
    read_snapshot,
    read_sound_indexes,
    read_time_index,
    read_txn_index,
)
from idemcore.record.kafka_files.names import (
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    IgnoredFile,
    LogDirListing,
    PartitionFiles,
    SegmentFiles,
    list_log_dir,
    list_partition_dir,
    offset_file_name,
    parse_offset_file,
    parse_partition_dir,
)
from idemcore.record.kafka_files.segment import (
    SCAN_COLUMNS,
    STOP_BAD_LENGTH,
    STOP_BAD_MAGIC,
    STOP_END,
    STOP_TORN_TAIL,
    STOP_ZERO_PADDING,
    ScanBuffer,
    ScanFacts,
    SegmentScan,
    scan_segment,
)
from idemcore.record.kafka_files.writers import (
    TEMPORARY_SUFFIX,
    TXN_INDEX_DTYPE,
    encode_leader_epoch_checkpoint,
    encode_offset_checkpoint,
    encode_snapshot,
    encode_txn_index,
    encode_txn_index_entry,
    write_file_atomically,
)

__all__ = [
    "INDEX_SUFFIX",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_SUFFIX",
    "SCAN_COLUMNS",
    "SNAPSHOT_SUFFIX",
    "STOP_BAD_LENGTH",
    "STOP_BAD_MAGIC",
    "STOP_END",
    "STOP_TORN_TAIL",
    "STOP_ZERO_PADDING",
    "TEMPORARY_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_DTYPE",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "EpochEntry",
    "FileProblem",
    "FileRead",
    "IgnoredFile",
    "LogDirListing",
    "OffsetCheckpointEntry",
    "OffsetIndexEntry",
    "PartitionFiles",
    "ProducerSnapshotEntry",
    "ScanBuffer",
    "ScanFacts",
    "SegmentFiles",
    "SegmentScan",
    "TimeIndexEntry",
    "encode_leader_epoch_checkpoint",
    "encode_offset_checkpoint",
    "encode_snapshot",
    "encode_txn_index",
    "encode_txn_index_entry",
    "list_log_dir",
    "list_partition_dir",
    "offset_file_name",
    "parse_offset_file",
    "parse_partition_dir",
    "read_leader_epoch_checkpoint",
    "read_offset_checkpoint",
    "read_offset_index",
    "read_snapshot",
    "read_sound_indexes",
    "read_time_index",
    "read_txn_index",
    "scan_segment",
    "write_file_atomically",
]
