"""Broker: every request through one ``handle``; produce requests checked, written, then committed.

A produce request follows Kafka's order (``UnifiedLog.append``): the kernel
checks every batch against the producer state as it stands (prepare), the
accepted batches are written to their partition logs, and only the batches
whose write succeeded are committed to the producer state. A failed write
leaves the state as it was, so the producer's retry is appended once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import numbers
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from idemcore.broker import topic_requests, txn_requests
from idemcore.broker.admin_requests import admin_handlers
from idemcore.broker.coordinator import TransactionCoordinator
from idemcore.broker.coordinator.plumbing import HandledMarkers, HandledTransactionLog
from idemcore.broker.delayed import DEFAULT_RECOVERY_POINT_CHECKPOINT_MS, DelayedOperations
from idemcore.broker.fetch import fetch, list_offsets
from idemcore.broker.group import GroupCoordinator, HandledOffsetLog
from idemcore.broker.group import requests as group_requests
from idemcore.broker.group.membership_requests import membership_handlers
from idemcore.broker.internal_topics import BackgroundTopics
from idemcore.broker.log import LogCorruptionError, PartitionLog
from idemcore.broker.producer_ids import (
    REACHABLE,
    SQLITE_STORE_NAME,
    BlockStoreError,
    IdFloorFile,
    ProducerIdManager,
    ProducerIdsExhaustedError,
    SqliteBlockStore,
)
from idemcore.broker.purgatory import EventLoop
from idemcore.broker.topic_config import NEVER_FLUSH, TopicConfig
from idemcore.broker.written_ends import WrittenEnds, WrittenEndsError, read_written_ends
from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.kernels import Backend, get_backend
from idemcore.kernels.abi import BatchColumns, CommitVerdicts, TxnColumns
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    EndTxnRequest,
    FetchRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    PartitionResponse,
    Pending,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TxnMarker,
    TxnMarkerResult,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.protocol.codes import ControlType, ErrorCode, Origin, Status
from idemcore.protocol.constants import (
    CONSUMER_OFFSETS_TOPIC,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_MESSAGE_MAX_BYTES,
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    DEFAULT_RETENTION_MS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_MS,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    DEFAULT_TRANSACTION_STATE_PARTITIONS,
    INT16_MAX,
    INT32_MAX,
    INTERNAL_TOPICS,
    MAX_PARTITIONS_PER_TOPIC,
    OFFSETS_TOPIC_SEGMENT_BYTES,
    TRANSACTION_STATE_SEGMENT_BYTES,
    TRANSACTION_STATE_TOPIC,
)
from idemcore.protocol.sequences import seq_add
from idemcore.record.batch import RecordBatch
from idemcore.record.columns import COLUMNS, BatchMetadata, concatenate
from idemcore.record.kafka_files import (
    encode_offset_checkpoint,
    encode_snapshot,
    parse_partition_dir,
    read_offset_checkpoint,
    write_file_atomically,
)
from idemcore.state.explain import rejection_message
from idemcore.state.snapshot import load_snapshot_file, snapshot_entries
from idemcore.state.table import ProducerStateTable
from idemcore.state.validate import Verdicts, check_into, commit_into, validate_into

log = logging.getLogger(__name__)


_ACKS = (0, 1, -1)
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
#: In data_dir: each partition's recovery point, the log end when the broker last started or closed cleanly
#: (Kafka's file and format); after a clean shutdown every log ends there and none is scanned.
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
#: In data_dir: written once every log is closed and checkpointed, removed at the next start (Kafka's marker).
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
#: In data_dir: the recovery points as idemcore wrote them before it wrote Kafka's checkpoint (read once, then
#: replaced by RECOVERY_POINT_CHECKPOINT).
OLD_LOG_END_CHECKPOINT = "log-end-offsets.json"
#: In data_dir: where each log starts once retention deleted its oldest segments (Kafka's file and format).
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
#: In data_dir: the topics create_topic made (idemcore's own; Kafka keeps topics in its metadata log).
TOPICS_FILE = "topics.json"
#: In data_dir: how far each compacted log was cleaned (Kafka's file and format): gaps below it are compaction's.
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# Plain ints for the per-request path: an enum member looked up on its class costs a Python call in 3.11.
_APPENDED = int(Status.APPENDED)
_REJECTED = int(Status.REJECTED)
_KEY_TYPES = frozenset((bytes, type(None)))
_CONTAINERS = frozenset((list, tuple))


def _metadata_types(batch: RecordBatch) -> tuple[ErrorCode, str] | None:
    """Metadata and containers of the wrong type (checked apart: the common, well-typed case is one test)."""
    for name in ("producer_id", "producer_epoch", "base_sequence", "max_timestamp"):
        value = getattr(batch, name)
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            return ErrorCode.INVALID_RECORD, f"{name} must be an integer, not {type(value).__name__}"
    if not isinstance(batch.is_transactional, bool | np.bool_):
        return ErrorCode.INVALID_RECORD, f"is_transactional must be a bool, not {type(batch.is_transactional).__name__}"
    for name in ("values", "keys"):
        value = getattr(batch, name)
        if (value is not None or name == "values") and \
                (not isinstance(value, Sequence | np.ndarray) or isinstance(value, str | bytes)):
            return ErrorCode.CORRUPT_MESSAGE, f"record {name} must be a sequence, not {type(value).__name__}"
    return None


def _malformed(batch: RecordBatch) -> tuple[ErrorCode, str] | None:
    """Why a batch cannot be appended at all, or None. Checked before the producer-state rules."""
    values = batch.values
    if batch.wire is not None:  # from the wire: its header fields fit their widths and its records scanned whole
        if len(values) == 0:
            return ErrorCode.INVALID_RECORD, "a batch must hold at least one record"
        if batch.producer_id < -1 or batch.producer_epoch < -1 or batch.base_sequence < -1:
            return ErrorCode.INVALID_RECORD, (f"producer id {batch.producer_id}, epoch {batch.producer_epoch} or "
                                              f"base sequence {batch.base_sequence} out of range")
        return None
    well_typed = (type(batch.producer_id) is int and type(batch.producer_epoch) is int
                  and type(batch.base_sequence) is int and type(batch.max_timestamp) is int
                  and type(batch.is_transactional) is bool and type(values) in _CONTAINERS
                  and (batch.keys is None or type(batch.keys) in _CONTAINERS))
    if not well_typed:
        problem = _metadata_types(batch)
        if problem is not None:
            return problem
    if not -2**63 <= batch.max_timestamp < 2**63:
        return ErrorCode.INVALID_RECORD, f"max_timestamp {batch.max_timestamp} is out of the int64 range"
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            return ErrorCode.CORRUPT_MESSAGE, f"record values must be one-dimensional, not of shape {values.shape}"
        if values.dtype.kind != "S" and not (values.dtype == object and all(type(v) is bytes for v in values)):
            return ErrorCode.CORRUPT_MESSAGE, f"record values of dtype {values.dtype} are not bytes"
    elif values and not set(map(type, values)) <= _KEY_TYPES:
        return ErrorCode.CORRUPT_MESSAGE, "every record value must be bytes or None"
    if batch.keys is not None:
        if len(batch.keys) != len(values):
            return ErrorCode.CORRUPT_MESSAGE, f"{len(batch.keys)} keys for {len(values)} records"
        if not set(map(type, batch.keys)) <= _KEY_TYPES:
            return ErrorCode.CORRUPT_MESSAGE, "every record key must be bytes or None"
    if batch.headers is not None:
        bad = _bad_headers(batch.headers, len(values))
        if bad is not None:
            return ErrorCode.CORRUPT_MESSAGE, bad
    if len(values) == 0 or len(values) > INT32_MAX:
        return ErrorCode.INVALID_RECORD, f"a batch must hold 1..{INT32_MAX} records, not {len(values)}"
    if not (-1 <= batch.producer_id < 2**63) or not (-1 <= batch.producer_epoch <= INT16_MAX) \
            or not (-1 <= batch.base_sequence <= INT32_MAX):
        return ErrorCode.INVALID_RECORD, (f"producer id {batch.producer_id}, epoch {batch.producer_epoch} or base "
                                          f"sequence {batch.base_sequence} out of range")
    return None


def _bad_headers(headers: object, count: int) -> str | None:
    """What is wrong with a batch's record headers (None, or per record a sequence of ``(str, bytes | None)``
    pairs whose keys UTF-8 encodes), or None."""
    if not isinstance(headers, Sequence) or isinstance(headers, str | bytes) or len(headers) != count:
        return f"headers must be one sequence of (key, value) pairs per record ({count}), got {headers!r:.60}"
    for index, record in enumerate(headers):
        if not isinstance(record, Sequence) or isinstance(record, str | bytes):
            return f"record {index}'s headers must be a sequence of (key, value) pairs, got {record!r:.60}"
        for pair in record:
            if not isinstance(pair, tuple | list) or len(pair) != 2 or type(pair[0]) is not str \
                    or type(pair[1]) not in _KEY_TYPES:
                return f"record {index} has header {pair!r:.60}: a header is a (str, bytes or None) pair"
            try:  # as record.v2 writes keys: bytes a key was decoded from (surrogateescape) go back as they were
                pair[0].encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                return f"record {index} has header key {pair[0]!r:.60}, which UTF-8 cannot encode"
    return None


def _well_formed_marker(marker: object) -> bool:
    """A TxnMarker whose partitions are (str, int) pairs (its other fields are checked where they are used)."""
    if type(marker) is not TxnMarker or not isinstance(marker.partitions, tuple | list):
        return False
    return all(type(tp) is tuple and len(tp) == 2 and type(tp[0]) is str and type(tp[1]) is int
               for tp in marker.partitions)


def _check_topic(name: object, count: object) -> None:
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"topic name {name!r} is not legal: 1 to 249 of a-z, A-Z, 0-9, '.', '_', '-' "
                         "(Kafka's rule; a topic names a directory)")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"topic {name!r} needs a positive partition count, got {count!r}")
    if count > MAX_PARTITIONS_PER_TOPIC:
        raise ValueError(f"topic {name!r}: {count:,} partitions is more than the {MAX_PARTITIONS_PER_TOPIC:,} a topic "
                         "may have here")


class TopicExistsError(IdemcoreError):
    """``create_topic`` for a topic the broker has (Kafka's TOPIC_ALREADY_EXISTS)."""


def _lock_data_dir(data_dir: Path) -> int:
    """Hold an exclusive lock on ``data_dir`` itself for this broker's lifetime (released when it closes or its
    process dies): two brokers on one directory would hand out the same offsets. Locking the directory, not a
    file in it, means no file can be deleted to get round it. ``.lock`` names the holder, for messages."""
    data_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise IdemcoreError(f"{data_dir} is in use by another broker (process {_lock_holder(data_dir)}); "
                            "one directory serves one broker at a time") from None
    named = data_dir / f".lock.{os.getpid()}"
    try:  # renamed over .lock: never written through a symlink, whatever mode the old one had
        holder = os.open(named, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        os.write(holder, str(os.getpid()).encode())
        os.close(holder)
        os.replace(named, data_dir / ".lock")
    except OSError:  # only a name for messages; a stale one would name a dead process
        with contextlib.suppress(OSError):
            os.unlink(named)
        with contextlib.suppress(OSError):
            os.unlink(data_dir / ".lock")
    return descriptor


def _lock_holder(data_dir: Path) -> str:
    try:
        descriptor = os.open(data_dir / ".lock", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return "unknown"
    try:
        return os.read(descriptor, 32).decode(errors="replace").strip() or "unknown"
    except OSError:  # a directory, say
        return "unknown"
    finally:
        os.close(descriptor)


class _RequestColumns:
    """Batch metadata, verdict and transaction columns for one produce request, allocated once per broker and
    filled in place: a request packs its metadata once, straight into the arrays the kernel reads."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.batch = BatchColumns(*(np.zeros(capacity, np.uint8 if dtype == np.bool_ else dtype)
                                    for dtype in COLUMNS.values()))
        self.batch.base_offset[:] = -1
        self.batch.control_type[:] = -1
        self.verdicts = Verdicts.allocate(capacity)
        self.txns = TxnColumns(np.zeros(capacity, np.int32), np.zeros(capacity, np.int64), np.zeros(capacity, np.int64),
                               np.zeros(capacity, np.int64), np.zeros(capacity, np.uint8),
                               np.zeros(capacity, np.int64))
        self.commit = CommitVerdicts(self.verdicts.out_status, self.verdicts.out_base_offset,
                                     self.verdicts.out_last_offset)

    def put(self, k: int, number: int, batch: RecordBatch, count: int | None = None,
            control: tuple[int, int] | None = None) -> None:
        """Row ``k``: the metadata of ``batch`` on the broker's partition ``number``; ``count``: the records it
        spans when compaction removed some (its sequences and offsets still cover them); ``control``: a
        marker's (control type, coordinator epoch)."""
        b = self.batch
        if count is None:
            count = len(batch.values)
        if control is None:
            b.is_control[k], b.control_type[k], b.coordinator_epoch[k] = 0, -1, 0
        else:
            b.is_control[k], (b.control_type[k], b.coordinator_epoch[k]) = 1, control
            count = 1
        b.partition[k] = number
        b.producer_id[k] = batch.producer_id
        b.producer_epoch[k] = batch.producer_epoch
        b.base_sequence[k] = batch.base_sequence
        b.last_sequence[k] = seq_add(batch.base_sequence, count - 1) if batch.base_sequence >= 0 else -1
        b.record_count[k] = count
        b.max_timestamp[k] = batch.max_timestamp
        b.is_transactional[k] = batch.is_transactional

    def packed(self, k: int) -> BatchMetadata:
        """Rows ``0..k-1`` as :class:`BatchMetadata` (views; the kernels' uint8 flags seen as booleans)."""
        return BatchMetadata({name: column[:k].view(np.bool_) if COLUMNS[name] == np.bool_ else column[:k]
                              for name, column in zip(COLUMNS, self.batch, strict=True)})


class Broker:
    """A single broker leading every partition of ``topics`` (``{"name": partition_count}``).

    Every request goes through :meth:`handle`. ``data_dir``: a Kafka log
    directory: each partition in ``<topic>-<partition>/`` as Kafka's segments
    and indexes (``broker.log``; fsync'd per produce request with acks=all,
    rolled at ``segment_bytes`` / ``segment_ms``, an offset-index entry every
    ``index_interval_bytes``); on start, producer state is rebuilt by
    replaying the logs with REPLICATION origin. ``producer_ids``: the id allocator; by default one over
    a SQLite store in ``data_dir`` (or in memory). ``fsync=False`` keeps the
    writes of acks=all requests in the OS page cache too: they survive a crash of
    this process, not of the machine (the logs are still fsync'd at start and
    close, before their recovery points are written). ``message_max_bytes``:
    the largest batch accepted (Kafka's ``message.max.bytes``); a larger one is
    answered MESSAGE_TOO_LARGE. ``retention_ms`` / ``retention_bytes``:
    Kafka's ``retention.ms`` (7 days) / ``retention.bytes`` (-1: none), applied
    by :meth:`delete_old_segments`. ``topic_configs``: per topic, Kafka's
    topic configs over those defaults (``cleanup.policy`` ``compact``:
    :meth:`clean_logs` compacts it, and records without a key are refused).
    ``clock``: the time in ms (wall clock by
    default; a simulation passes its virtual one). ``flush_messages`` / ``flush_ms``: Kafka's
    ``log.flush.interval.messages`` / ``.ms`` (topic defaults of ``flush.messages`` / ``flush.ms``),
    ``flush_scheduler_interval_ms`` and ``recovery_point_checkpoint_ms`` (``log.flush.scheduler.interval.ms``,
    ``log.flush.offset.checkpoint.interval.ms``): acted on while the broker runs on a loop
    (:meth:`start_background`, :mod:`.delayed`), where fetches and acks=all produces wait in its purgatories and a
    flusher thread fsyncs.
    """

    def __init__(
        self,
        topics: Mapping[str, int],
        data_dir: str | Path | None = None,
        broker_id: int = 0,
        *,
        producer_ids: ProducerIdManager | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        backend: str | Backend | None = None,
        fsync: bool = True,
        message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        segment_ms: int = DEFAULT_SEGMENT_MS,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        clock: Callable[[], int] | None = None,
        retention_ms: int = DEFAULT_RETENTION_MS,
        retention_bytes: int = -1,
        topic_configs: Mapping[str, Mapping[str, Any]] | None = None,
        transaction_state_partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS,
        transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
        offsets_topic_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS,
        auto_create_topics: bool = True,
        default_partitions: int = 1,
        flush_messages: int = NEVER_FLUSH,
        flush_ms: int = NEVER_FLUSH,
        flush_scheduler_interval_ms: int = NEVER_FLUSH,
        recovery_point_checkpoint_ms: int = DEFAULT_RECOVERY_POINT_CHECKPOINT_MS,
    ) -> None:
        if not isinstance(topics, Mapping):
            raise TypeError(f"topics must map each topic name to its partition count, got {topics!r:.80}")
        if type(auto_create_topics) is not bool:
            raise TypeError(f"auto_create_topics must be True or False, got {auto_create_topics!r}")
        if type(default_partitions) is not int or not 1 <= default_partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise ValueError(f"default_partitions must be an integer from 1 to {MAX_PARTITIONS_PER_TOPIC:,}, got "
                             f"{default_partitions!r}")
        #: Kafka's ``auto.create.topics.enable`` and ``num.partitions``: a Metadata request naming a topic the
        #: broker lacks makes it with ``default_partitions``; CreateTopics with -1 partitions too.
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        if topic_configs is not None and not isinstance(topic_configs, Mapping):
            raise TypeError(f"topic_configs must map topic names to their settings, got {topic_configs!r:.80}")
        if data_dir is not None and not str(data_dir):
            raise ValueError("data_dir is an empty path (it would mean the current directory); name a directory")
        for name, value in (("fsync", fsync),):
            if type(value) is not bool:
                raise TypeError(f"{name} must be True or False, got {value!r}")
        if type(producer_id_expiration_ms) is not int or producer_id_expiration_ms < 1:
            raise ValueError(f"producer_id_expiration_ms must be a positive integer, got {producer_id_expiration_ms!r}")
        for name, count in topics.items():
            _check_topic(name, count)
            if name in INTERNAL_TOPICS:
                raise ValueError(f"{name!r} is an internal topic: the broker makes it when its coordinator needs it")
        if type(message_max_bytes) is not int or message_max_bytes < 1:
            raise ValueError(f"message_max_bytes must be a positive integer, got {message_max_bytes!r}")
        self.message_max_bytes = message_max_bytes
        self.broker_id = broker_id
        self.topics = dict(topics)
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.backend = get_backend(backend)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.fsync = fsync
        self.clock: Callable[[], int] = clock if clock is not None else wall_clock_ms
        now = self.clock() if callable(self.clock) else None
        if type(now) is not int:  # e.g. time.time: seconds as a float, where every timeout counts milliseconds
            raise TypeError(f"clock must be a callable returning the time in ms as an int, got {clock!r:.80}"
                            + (f" returning {now!r:.40}" if callable(clock) else ""))
        # Bad settings are refused before the directory is touched.
        defaults = TopicConfig(retention_ms=retention_ms, retention_bytes=retention_bytes,
                               segment_bytes=segment_bytes, segment_ms=segment_ms,
                               index_interval_bytes=index_interval_bytes, flush_messages=flush_messages,
                               flush_ms=flush_ms)
        unknown = sorted(set(topic_configs or {}) - set(self.topics))
        if unknown:
            raise ValueError(f"topic_configs names {unknown}, which are not among the topics {sorted(self.topics)}")
        #: Each topic's settings (Kafka's topic configs over the broker's defaults).
        self.topic_configs = {name: defaults.overridden(name, (topic_configs or {}).get(name, {}))
                              for name in self.topics}
        self.topic_configs_default = defaults
        _check_topic(TRANSACTION_STATE_TOPIC, transaction_state_partitions)
        if type(transaction_max_timeout_ms) is not int or transaction_max_timeout_ms < 1:
            raise ValueError("transaction_max_timeout_ms must be a positive integer, got "
                             f"{transaction_max_timeout_ms!r}")
        self.transaction_state_partitions = transaction_state_partitions
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self._txn_coordinator: TransactionCoordinator | None = None
        _check_topic(CONSUMER_OFFSETS_TOPIC, offsets_topic_partitions)
        #: Kafka's ``offsets.topic.num.partitions``: used when ``__consumer_offsets`` is made (a data_dir that has
        #: it keeps the count it was made with).
        self.offsets_topic_partitions = offsets_topic_partitions
        self._group_coordinator: GroupCoordinator | None = None
        #: Fetches and acks=all produces that wait, and the flusher (only while running on a loop).
        self.delayed = DelayedOperations(
            self._partition_log, lambda r: fetch(self._partition_log, r), self.clock,
            checkpoint_path=None if self.data_dir is None else self.data_dir / RECOVERY_POINT_CHECKPOINT,
            checkpoint_entries=lambda: self._checkpoint, scheduler_interval_ms=flush_scheduler_interval_ms,
            checkpoint_interval_ms=recovery_point_checkpoint_ms)
        self._background_topics = BackgroundTopics(
            lambda name, partitions, configs: self.check_new_topic(name, partitions, configs),
            lambda name, partition, config: self._new_log(name, partition, config),
            lambda name, partitions, configs, logs: self._create_topic(name, partitions, configs, logs),
            self.delayed.in_background)
        self._lock_descriptor = None if self.data_dir is None else _lock_data_dir(self.data_dir)
        self._logs: list[PartitionLog] = []
        self._closed = False
        self._checkpoint: dict[tuple[str, int], int] = {}
        self._clean_shutdown = False
        self._log_starts: dict[tuple[str, int], int] = {}
        self._wrote_here = False
        self._created: dict[str, dict[str, Any]] = {}
        self._unserved_ends: dict[str, int] = {}
        self._cleaned: dict[tuple[str, int], int] = {}
        self._written_ends: WrittenEnds | None = None
        self._started = False  # until the first checkpoint is written: a failed start writes none
        try:
            if producer_ids is None:
                producer_ids = self._own_producer_ids(broker_id)
            self.producer_ids = producer_ids
            # Partitions of all topics share one state table under a broker-wide partition number.
            self._index: dict[tuple[str, int], int] = {}
            self._checkpoint = self._recovery_points()
            # Without a checkpoint this broker never started here: tails it finds are not its torn writes.
            self._wrote_here = self.data_dir is not None and (
                os.path.lexists(self.data_dir / RECOVERY_POINT_CHECKPOINT)
                or os.path.lexists(self.data_dir / OLD_LOG_END_CHECKPOINT))
            marker = None if self.data_dir is None else self.data_dir / CLEAN_SHUTDOWN_FILE
            self._clean_shutdown = marker is not None and os.path.lexists(marker)
            if marker is not None and self._clean_shutdown and not os.path.isfile(marker):
                raise LogCorruptionError(f"{marker} is not a file; the broker writes one at a clean shutdown. "
                                         "Remove it (the logs are then scanned as after a crash)")
            starts = self._log_starts = self._offsets_file(
                LOG_START_CHECKPOINT, "where each log starts since retention deleted its oldest segments: restore "
                "it, or write it again from the first segment of each partition")
            cleaned = self._cleaned = self._offsets_file(
                CLEANER_CHECKPOINT, "how far each compacted log was cleaned: restore it, or write it again with each "
                "partition's last segment base offset")
            written = self._ends_written_in_this_boot()
            self._created = self._created_topics(defaults)
            for name in sorted(self.topics):
                for partition in range(self.topics[name]):
                    point = self._checkpoint.get((name, partition), 0)
                    self._open_partition(name, partition, point, starts.get((name, partition), 0),
                                         cleaned.get((name, partition), 0), written.get(f"{name}-{partition}", 0))
            self.state = ProducerStateTable(partition_capacity=max(16, len(self._logs)))
            self._columns = _RequestColumns(max(8, min(len(self._logs), 1024)))
            self._handlers: dict[type, Callable] = {
                ProduceRequest: self._produce,
                InitProducerIdRequest: self._init_producer_id,
                WriteTxnMarkersRequest: self._write_txn_markers,
                FindCoordinatorRequest: self._find_coordinator,
                AddPartitionsToTxnRequest: lambda r: txn_requests.add_partitions_to_txn(self.txn_coordinator, r),
                AddOffsetsToTxnRequest: self._add_offsets_to_txn,
                EndTxnRequest: lambda r: txn_requests.end_txn(self.txn_coordinator, r),
                FetchRequest: self.delayed.fetch,
                ListOffsetsRequest: lambda r: list_offsets(self._partition_log, r),
                OffsetCommitRequest: lambda r: group_requests.offset_commit(self.group_coordinator, r),
                TxnOffsetCommitRequest: lambda r: group_requests.txn_offset_commit(self.group_coordinator, r),
                OffsetFetchRequest: lambda r: group_requests.offset_fetch(self.group_coordinator, r),
                MetadataRequest: lambda r: topic_requests.metadata(self, r),
                CreateTopicsRequest: lambda r: topic_requests.create_topics(self, r),
                **admin_handlers(self),
                **membership_handlers(lambda: self.group_coordinator),
            }
            self._recover()
            if self.data_dir is not None:
                self._write_log_end_checkpoint()  # the floor from now on: what recovery found
                # From the first append on the logs may end past their recovery points: a crash must scan.
                if os.path.lexists(self.data_dir / CLEAN_SHUTDOWN_FILE):
                    os.unlink(self.data_dir / CLEAN_SHUTDOWN_FILE)
                # Partitions this broker does not serve keep what an earlier broker wrote in this boot.
                self._unserved_ends = {name: end for name, end in written.items()
                                       if name not in {p.name for p in self._logs}}
                self._written_ends = WrittenEnds(self.data_dir, self._all_written_ends())
            self._started = True
            self._warn_unserved()
            if CONSUMER_OFFSETS_TOPIC in self.topics:  # before the coordinator below re-sends markers there
                self._start_group_coordinator()
            if TRANSACTION_STATE_TOPIC in self.topics:  # finish what the last run decided (Prepare* markers)
                self._start_txn_coordinator()
        except BaseException:
            self.close()  # release the logs and the directory's lock
            raise

    # ------------------------------------------------------------ the one request path

    def handle(self, request: Request) -> Response | Pending | None:
        """Answer one request (every transport calls this); None for a produce request with acks=0; a
        :class:`Pending` for an answer given later (JoinGroup, SyncGroup; while running on a loop also a Fetch
        waiting for data and an acks=all Produce waiting for its fsync)."""
        if self._closed:
            raise IdemcoreError(f"broker {self.broker_id} is closed")
        handler = self._handlers.get(type(request))
        if handler is None:
            raise TypeError(f"broker {self.broker_id} cannot handle a {type(request).__name__}")
        return handler(request)

    # ------------------------------------------------------------ recovery

    def _warn_unserved(self) -> None:
        """Say which partition directories with data this broker does not serve (a topic missing from its
        topics and from topics.json): their records are not lost, but no client can read them."""
        if self.data_dir is None:
            return
        unserved = sorted(entry.name for entry in self.data_dir.iterdir()
                          if (parsed := parse_partition_dir(entry.name)) is not None and parsed not in self._index
                          and entry.is_dir() and any(f.stat().st_size for f in entry.glob("*.log")))
        if unserved:
            log.warning("%s holds partitions this broker does not serve, with data: %s (give their topics to the "
                        "broker, e.g. idemcore serve --topics NAME:PARTITIONS, to serve them again)", self.data_dir,
                        ", ".join(unserved[:10]) + (f" and {len(unserved) - 10} more" if len(unserved) > 10 else ""))

    def _recovery_points(self) -> dict[tuple[str, int], int]:
        """Each partition's log end when the broker last started or closed cleanly (none: all 0), from Kafka's
        ``recovery-point-offset-checkpoint``, or once from the JSON file earlier versions of idemcore wrote."""
        if self.data_dir is None:
            return {}
        if os.path.lexists(self.data_dir / RECOVERY_POINT_CHECKPOINT) or not os.path.lexists(
                self.data_dir / OLD_LOG_END_CHECKPOINT):
            return self._offsets_file(RECOVERY_POINT_CHECKPOINT, "where each log ended when the broker last started "
                                      "or stopped: remove it to scan every log")
        path = self.data_dir / OLD_LOG_END_CHECKPOINT
        try:
            ends = json.loads(path.read_text())
            points = {}
            for name, end in ends.items():
                parsed = parse_partition_dir(str(name))
                if parsed is None:
                    raise ValueError(f"{name!r} is not a topic-partition name")
                points[parsed] = int(end)
            return points
        except OSError as exc:
            raise LogCorruptionError(f"{path} cannot be read ({exc.strerror}); remove it to start anyway") from None
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            raise LogCorruptionError(f"{path} is not a log-end checkpoint ({exc}); remove it to start anyway") \
                from None

    def _open_partition(self, name: str, partition: int, recovery_point: int, log_start: int, cleaned: int,
                        written_end: int = 0, made: PartitionLog | None = None) -> None:
        """Open (recover or create) one partition's log under the next broker-wide partition number (``made``:
        a new partition's log, made already by :meth:`_new_log`)."""
        partition_log = made if made is not None else self._new_log(
            name, partition, self.topic_configs[name], recovery_point, log_start, cleaned, written_end)
        self._index[(name, partition)] = len(self._logs)
        # At a roll the state holds exactly the batches before the new segment: a request has one batch per
        # partition, committed after the writes.
        partition_log.on_roll = self._write_snapshot
        partition_log.on_append = self.delayed.appended
        self.delayed.track(partition_log, self.topic_configs[name])
        self._logs.append(partition_log)

    def _new_log(self, name: str, partition: int, config: TopicConfig, recovery_point: int = 0, log_start: int = 0,
                 cleaned: int = 0, written_end: int = 0) -> PartitionLog:
        """One partition's log, recovered or created (no broker state touched: a new topic's logs may be made
        on the flusher thread)."""
        directory = None if self.data_dir is None else self.data_dir / f"{name}-{partition}"
        return PartitionLog(name, partition, directory, self.fsync, recovery_point, clock=self.clock,
                            log_start_offset=log_start, cleaned_offset=cleaned, cut_torn_tail=self._wrote_here,
                            clean_shutdown=self._clean_shutdown and (name, partition) in self._checkpoint,
                            written_end=written_end, **config.log_settings())

    def _all_written_ends(self) -> dict[str, int]:
        return {**self._unserved_ends, **{p.name: p.log_end_offset for p in self._logs}}

    def _created_topics(self, defaults: TopicConfig) -> dict[str, dict[str, Any]]:
        """The topics :meth:`create_topic` made in this data_dir (``topics.json``), added to those served."""
        if self.data_dir is None or not os.path.lexists(self.data_dir / TOPICS_FILE):
            return {}
        path = self.data_dir / TOPICS_FILE
        try:
            created = json.loads(path.read_text())["topics"]
            for name, entry in created.items():
                _check_topic(name, entry["partitions"])
                config = defaults.overridden(name, entry["configs"])
                if name in self.topics and self.topics[name] != entry["partitions"]:
                    raise ValueError(f"topic {name!r} was created with {entry['partitions']} partitions, the broker "
                                     f"is given {self.topics[name]}")
                self.topics[name] = entry["partitions"]
                self.topic_configs[name] = config
        except OSError as exc:
            raise LogCorruptionError(f"{path} cannot be read ({exc.strerror})") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LogCorruptionError(f"{path} is damaged or disagrees with the topics given ({exc}); it lists the "
                                     "topics create_topic made: restore it (removing it stops serving them; their "
                                     "partitions stay on disk)") from None
        return {name: dict(entry) for name, entry in created.items()}

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, Any] | None = None) -> None:
        """Add a topic of ``partitions`` partitions with Kafka's topic ``configs`` (as ``topic_configs``), served
        from now on and after a restart (recorded in ``topics.json`` before its partitions are created).
        TopicExistsError when the broker has it; ValueError for a bad name, count or setting."""
        if name in INTERNAL_TOPICS:
            raise ValueError(f"{name!r} is an internal topic: the broker makes it when its coordinator needs it")
        self._create_topic(name, partitions, configs)

    def check_new_topic(self, name: str, partitions: int, configs: Mapping[str, Any] | None = None) -> TopicConfig:
        """What :meth:`create_topic` would check, without making anything: the topic's settings, or the
        error it would raise."""
        if self._closed:
            raise IdemcoreError(f"broker {self.broker_id} is closed")
        _check_topic(name, partitions)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists with {self.topics[name]} partitions")
        config = self.topic_configs_default.overridden(name, configs or {})
        if self.data_dir is not None:
            for partition in range(partitions):
                directory = self.data_dir / f"{name}-{partition}"
                if os.path.lexists(directory):  # its data would not be recovered into the producer state
                    raise TopicExistsError(f"{directory} exists (a topic of that name was served here before): "
                                           "start the broker with it in its topics, or remove it")
        return config

    def _create_topic(self, name: str, partitions: int, configs: Mapping[str, Any] | None,
                      made: list[PartitionLog] | None = None) -> None:
        """Make and serve a topic; ``made``: its partitions' new logs, made already (on the flusher thread)."""
        try:
            config = self.check_new_topic(name, partitions, configs) if made is None else \
                self.topic_configs_default.overridden(name, configs or {})
            if name in self.topics:
                raise TopicExistsError(f"topic {name!r} already exists with {self.topics[name]} partitions")
        except BaseException:
            for partition_log in made or ():
                partition_log.abandon()
            raise
        first = len(self._logs)
        self.topic_configs[name] = config
        try:
            for partition in range(partitions):
                self._open_partition(name, partition, 0, 0, 0, made=None if made is None else made[partition])
            if self.data_dir is not None:  # recorded once every partition exists: a start serves all of them
                created = {**self._created, name: {"partitions": partitions, "configs": dict(configs or {})}}
                write_file_atomically(self.data_dir / TOPICS_FILE,
                                      json.dumps({"version": 1, "topics": created}, sort_keys=True).encode())
                self._created = created
        except BaseException:
            for partition_log in self._logs[first:]:
                partition_log.abandon()
                del self._index[(partition_log.topic, partition_log.partition)]
            for partition_log in made or ():
                partition_log.abandon()
            del self._logs[first:]
            del self.topic_configs[name]
            raise
        self.topics[name] = partitions
        if self._written_ends is not None:  # a slot for each new partition
            self._written_ends.close()
            self._written_ends = WrittenEnds(self.data_dir, self._all_written_ends())  # type: ignore[arg-type]

    def partition_number(self, topic: str, partition: int) -> int | None:
        """The broker-wide number of ``topic``-``partition`` in the producer-state table, None when the broker
        does not serve it."""
        return self._index.get((topic, partition))

    @property
    def started_txn_coordinator(self) -> TransactionCoordinator | None:
        """The transaction coordinator if it has started; unlike :attr:`txn_coordinator` a read that never makes
        ``__transaction_state``."""
        return self._txn_coordinator

    @property
    def txn_coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator (Kafka's handlers: ``init_producer_id``, ``add_partitions_to_txn``,
        ``end_txn``, ...), its state in the compacted ``__transaction_state`` topic, made at first use with
        ``transaction_state_partitions`` partitions (Kafka makes it at the first FindCoordinator)."""
        if self._closed:
            raise IdemcoreError(f"broker {self.broker_id} is closed")
        if self._txn_coordinator is None:
            self._internal_topic(TRANSACTION_STATE_TOPIC)
            self._start_txn_coordinator()
        assert self._txn_coordinator is not None
        return self._txn_coordinator

    def _internal_topic_settings(self, name: str) -> tuple[int, dict[str, Any]]:
        """The partition count and topic configs the internal topic ``name`` is made with."""
        if name == TRANSACTION_STATE_TOPIC:
            return self.transaction_state_partitions, {"cleanup.policy": "compact",
                                                       "segment.bytes": TRANSACTION_STATE_SEGMENT_BYTES}
        return self.offsets_topic_partitions, {"cleanup.policy": "compact",
                                               "segment.bytes": OFFSETS_TOPIC_SEGMENT_BYTES}

    def _internal_topic(self, name: str) -> None:
        """Make the internal topic ``name`` now unless the broker has it (one being made off the loop is waited
        for rather than made twice)."""
        self._background_topics.wait(name)
        if name not in self.topics:
            self._create_topic(name, *self._internal_topic_settings(name))

    def _start_txn_coordinator(self) -> None:
        """Make the coordinator over this broker's request path and load ``__transaction_state`` into it."""
        partitions = self.topics[TRANSACTION_STATE_TOPIC]
        coordinator = TransactionCoordinator(
            HandledTransactionLog(self.handle, self.clock), HandledMarkers(self.handle),
            self.producer_ids.generate_producer_id, self.clock,
            transaction_max_timeout_ms=self.transaction_max_timeout_ms, transaction_state_partitions=partitions,
            offsets_partitions=self.topics.get(CONSUMER_OFFSETS_TOPIC, self.offsets_topic_partitions),
            partition_exists=lambda topic, partition: (topic, partition) in self._index)
        records = [(partition, key, value) for partition in range(partitions)
                   for _, key, value, _ in self.log(TRANSACTION_STATE_TOPIC, partition).records()
                   if key is not None]
        self._txn_coordinator = coordinator
        # One broker leads every partition for its whole life: the coordinator epoch never needs to fence another.
        coordinator.load(records, coordinator_epoch=0)

    @property
    def group_coordinator(self) -> GroupCoordinator:
        """The group coordinator (``offset_commit``, ``txn_offset_commit``, ``offset_fetch``), its state in the
        compacted ``__consumer_offsets`` topic, made at first use with ``offsets_topic_partitions`` partitions
        (Kafka makes it at the first FindCoordinator for a group)."""
        if self._closed:
            raise IdemcoreError(f"broker {self.broker_id} is closed")
        if self._group_coordinator is None:
            self._internal_topic(CONSUMER_OFFSETS_TOPIC)
            self._start_group_coordinator()
        assert self._group_coordinator is not None
        return self._group_coordinator

    def _start_group_coordinator(self) -> None:
        """Make the group coordinator over this broker's request path and load every ``__consumer_offsets``
        partition into it (this broker leads them all)."""
        partitions = self.topics[CONSUMER_OFFSETS_TOPIC]
        coordinator = GroupCoordinator(HandledOffsetLog(self.handle, self.clock), self.clock,
                                       offsets_partitions=partitions,
                                       partition_exists=lambda topic, partition: (topic, partition) in self._index)
        for partition in range(partitions):
            coordinator.load(partition, self.log(CONSUMER_OFFSETS_TOPIC, partition).batches)
        self._group_coordinator = coordinator

    def run_housekeeping(self, now_ms: int | None = None) -> None:
        """What Kafka's brokers run on timers: abort timed-out transactions, expire idle transactional ids and
        retry unfinished markers (at the broker's clock), apply retention and compaction (at ``now_ms``, default
        the clock). The server calls it periodically; a program using the broker in process when it likes."""
        if self._txn_coordinator is not None:
            self._txn_coordinator.abort_timed_out_transactions()
            self._txn_coordinator.expire_transactional_ids()
            self._txn_coordinator.retry_pending_markers()
        if self._group_coordinator is not None:  # session and rebalance timeouts
            self._group_coordinator.expire(self.clock())
        self.delete_old_segments(now_ms)
        self.clean_logs(now_ms)

    def _offsets_file(self, name: str, what: str) -> dict[tuple[str, int], int]:
        """The ``topic partition offset`` entries of one of Kafka's offset checkpoints in data_dir ({} when
        there is none); ``what`` says what it records, for the message when it is damaged."""
        if self.data_dir is None or not os.path.lexists(self.data_dir / name):
            return {}
        path = self.data_dir / name
        try:
            read = read_offset_checkpoint(path)
        except OSError as exc:
            raise LogCorruptionError(f"{path} cannot be read ({exc.strerror})") from None
        if read.problems:
            raise LogCorruptionError(f"{path} is damaged ({read.problems[0]}); it says {what}")
        return {(entry.topic, entry.partition): entry.offset for entry in read.entries}

    def _write_offsets_file(self, name: str, offsets: Mapping[tuple[str, int], int]) -> None:
        assert self.data_dir is not None
        write_file_atomically(self.data_dir / name, encode_offset_checkpoint(
            (topic, partition, offset) for (topic, partition), offset in sorted(offsets.items())))

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention (``retention_ms``, ``retention_bytes``) at ``now_ms`` (default: the clock): delete the
        whole segments that are due in every partition and advance their log start offsets, recorded in
        ``log-start-offset-checkpoint`` before any file goes (Kafka's ``deleteOldSegments``). Producer state is
        kept (producers whose batches are gone still have their sequence until they expire). Returns how many
        partitions moved their start."""
        if self._closed:
            raise IdemcoreError(f"broker {self.broker_id} is closed")
        now = self.clock() if now_ms is None else now_ms
        moves = []
        for partition_log in self._logs:
            config = self.topic_configs[partition_log.topic]
            if config.deletes:
                start = partition_log.retention_start(now, config.retention_ms, config.retention_bytes)
                if start is not None:
                    moves.append((partition_log, start))
        if not moves:
            return 0
        # Partitions this broker does not serve keep their entries, as in the other checkpoints.
        self._log_starts.update({(p.topic, p.partition): start for p, start in moves})
        self._write_offsets_file(LOG_START_CHECKPOINT, self._log_starts)  # only logs with a directory have retention
        for partition_log, start in moves:
            partition_log.delete_segments_below(start)
        return len(moves)

    def clean_logs(self, now_ms: int | None = None) -> int:
        """Compact the partitions of topics whose ``cleanup.policy`` includes ``compact`` (Kafka's log cleaner;
        :meth:`PartitionLog.clean`) at ``now_ms`` (default: the clock), after recording in
        ``cleaner-offset-checkpoint`` how far each will be cleaned. Returns the bytes removed."""
        if self._closed:
            raise IdemcoreError(f"broker {self.broker_id} is closed")
        now = self.clock() if now_ms is None else now_ms
        due = [(partition_log, stop) for partition_log in self._logs
               if self.topic_configs[partition_log.topic].compacted
               and (stop := partition_log.cleanable_offset()) is not None]
        if not due:
            return 0
        self._cleaned.update({(p.topic, p.partition): stop for p, stop in due})
        self._write_offsets_file(CLEANER_CHECKPOINT, self._cleaned)  # before a segment changes: gaps allowed there
        return sum(partition_log.clean(now, self.topic_configs[partition_log.topic].delete_retention_ms)
                   for partition_log, _ in due)

    def _own_producer_ids(self, broker_id: int) -> ProducerIdManager:
        """The id allocator over this broker's SQLite store, with its floor file (in memory: neither)."""
        if self.data_dir is None:
            return ProducerIdManager(broker_id, SqliteBlockStore(":memory:"))
        floor_file = IdFloorFile(self.data_dir)
        floor = floor_file.read()
        store_path = self.data_dir / SQLITE_STORE_NAME
        used = any(os.path.lexists(self.data_dir / name)
                   for name in (RECOVERY_POINT_CHECKPOINT, OLD_LOG_END_CHECKPOINT))
        if floor is None and not os.path.lexists(store_path) and used:
            # Both records of the ids handed out are gone: a producer that got an id and has not written yet
            # would share it. Checked before opening the store creates it, so a second start is refused too.
            raise BlockStoreError(
                f"{store_path} and {floor_file.path} are both missing, but {self.data_dir} was used before: "
                "producer ids already handed out could be handed out again. Restore one of them")
        manager = ProducerIdManager(broker_id, SqliteBlockStore(store_path), on_claim=floor_file.record)
        if floor is not None:
            manager.skip_through(floor)
        return manager

    def _ends_written_in_this_boot(self) -> dict[str, int]:
        """What the last broker here had written to each log, if it ran in this boot (else {})."""
        if self.data_dir is None:
            return {}
        try:
            return read_written_ends(self.data_dir)
        except WrittenEndsError as exc:
            raise LogCorruptionError(str(exc)) from None

    def _write_log_end_checkpoint(self) -> None:
        """Record every log's end as its recovery point (``recovery-point-offset-checkpoint``), after making the
        logs durable (whatever ``fsync`` says, as Kafka flushes before moving a recovery point): the checkpoint
        never counts data a power loss could take back. Partitions this broker does not serve keep their
        entries. The JSON file of earlier versions goes once this one is written."""
        # Both callers run it only with a data_dir (close: a lock descriptor is held only with one).
        assert self.data_dir is not None
        for partition_log in self._logs:
            partition_log.flush()
        self._checkpoint.update({(p.topic, p.partition): p.log_end_offset for p in self._logs})
        self._write_offsets_file(RECOVERY_POINT_CHECKPOINT, self._checkpoint)
        if os.path.lexists(self.data_dir / OLD_LOG_END_CHECKPOINT):
            os.unlink(self.data_dir / OLD_LOG_END_CHECKPOINT)

    def _recover(self) -> None:
        """Producer state from each partition's newest valid snapshot, then the batches after it replayed (all of
        them where there is none), with REPLICATION origin; the logs' roll hook set to take snapshots."""
        scanned: list[BatchMetadata] = []
        unusable: list[tuple[PartitionLog, int, str]] = []  # deleted only once the whole start succeeded
        for number, partition_log in enumerate(self._logs):
            start = self._load_snapshot(number, partition_log, unusable)
            if start < partition_log.log_end_offset:
                found = partition_log.scan_from(start, number)
                if found is not None:
                    scanned.append(found)
        replayed = self._replay(scanned) if scanned else 0
        for number, partition_log in enumerate(self._logs):
            if partition_log.log_end_offset:
                self.state.set_next_offset(number, partition_log.log_end_offset, self.backend)
        rows = self.state.n_producers
        # A transaction whose first batches retention deleted is known only to the producer state (its snapshot):
        # the log must hold its LSO at the log start too (Kafka loads ongoing transactions from the snapshot).
        state = self.state
        for row in np.flatnonzero(state.row_txn_first_offset[:rows] >= 0).tolist():
            self._logs[int(state.row_partition[row])].note_open_transaction(int(state.row_producer_id[row]),
                                                                            int(state.row_txn_first_offset[row]))
        if rows:  # ids in the logs and snapshots are never handed out again, even if the id store was lost
            ids = self.state.row_producer_id[:rows]
            reachable = ids[ids < REACHABLE]
            if len(reachable):
                self.producer_ids.skip_through(int(reachable.max()))
        for partition_log, offset, why in unusable:
            partition_log.delete_snapshot(offset, why)
        log.info("broker %d recovered %s: %d batches replayed after the snapshots", self.broker_id, self.data_dir,
                 replayed)

    def _load_snapshot(self, number: int, partition_log: PartitionLog,
                       unusable: list[tuple[PartitionLog, int, str]]) -> int:
        """Load the newest usable snapshot of ``partition_log`` into the state; the offset replay starts at.
        A corrupt one (Kafka: CorruptSnapshotException) or one beyond the log end is skipped, to be deleted."""
        end = partition_log.log_end_offset
        offsets = partition_log.snapshot_offsets()
        for offset in offsets:  # damage from outside that no deletion should meet (Kafka lists regular files)
            path = partition_log.snapshot_path(offset)
            if not path.is_file() or path.is_symlink():
                raise LogCorruptionError(f"{partition_log.name}: {path} is not a file; a snapshot was there. "
                                         "Remove it (the state is rebuilt from an older snapshot or the log)")
        for offset in reversed(offsets):
            if offset > end:  # describes batches the log does not hold
                unusable.append((partition_log, offset, f"beyond the log end {end}"))
                continue
            if offset < partition_log.log_start_offset:  # replay from it would miss the batches retention took
                unusable.append((partition_log, offset, "below the log start offset"))
                continue
            path = partition_log.snapshot_path(offset)
            read = load_snapshot_file(self.state, number, path, self.backend, now_ms=self.clock(),
                                      expiration_ms=self.producer_id_expiration_ms)
            if not read.problems:
                return offset
            log.warning("%s: the snapshot %s is corrupt (%s); using an older one or the log", partition_log.name,
                        path, read.problems[0])
            unusable.append((partition_log, offset, "corrupt"))
        return partition_log.log_start_offset

    def _write_snapshot(self, partition_log: PartitionLog, offset: int) -> None:
        """The producer state of ``partition_log``'s partition, as its snapshot at ``offset`` (written on the
        flusher while running on a loop: a snapshot only shortens the replay at the next start)."""
        number = self._index[(partition_log.topic, partition_log.partition)]
        data = encode_snapshot(snapshot_entries(self.state, number))
        if not self.delayed.running:
            partition_log.write_snapshot(offset, data)
            return

        def written(_: object, error: BaseException | None) -> None:
            if error is not None:
                log.error("%s: writing the snapshot at offset %d failed: %s", partition_log.name, offset, error)
        self.delayed.in_background(lambda: partition_log.write_snapshot(offset, data), written)

    def _replay(self, scanned: list[BatchMetadata]) -> int:
        """Replay the scanned batches (each partition's from its snapshot on) into the state with REPLICATION
        origin; how many there were."""
        columns = scanned[0] if len(scanned) == 1 else concatenate(scanned)
        count = len(columns)
        verdicts = validate_into(columns, self.state, Origin.REPLICATION, self.backend, Verdicts.allocate(count))
        bad = np.flatnonzero(verdicts.status != Status.APPENDED)
        if len(bad):
            row = int(bad[0])
            number = int(columns["partition"][row])
            reason = ErrorCode(int(verdicts.error_code[row])).name
            raise LogCorruptionError(f"{self._logs[number].name}: the batch at offset "
                                     f"{int(columns['base_offset'][row])} does not replay ({reason})")
        return count

    # ------------------------------------------------------------ handlers

    def _init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        """A fresh producer id at epoch 0 for an idempotent producer; the transaction coordinator's answer for a
        transactional id, or for an idempotent producer's epoch bump (KIP-360: its current id and epoch)."""
        if request.transactional_id is not None or not (type(request.producer_id) is int and request.producer_id == -1):
            return txn_requests.init_producer_id(self.txn_coordinator, request)
        try:
            return InitProducerIdResponse(ErrorCode.NONE, self.producer_ids.generate_producer_id(), 0,
                                          request_id=request.request_id)
        except (ProducerIdsExhaustedError, BlockStoreError, OSError) as exc:  # OSError: the floor file's write
            log.error("no producer id: %s", exc)
            return InitProducerIdResponse(ErrorCode.UNKNOWN_SERVER_ERROR, request_id=request.request_id,
                                          error_message=str(exc))

    def _find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse | Pending:
        """This broker coordinates every group and transactional id; the coordinator's internal topic is made
        at the first request for it, as Kafka makes it."""
        if type(request.key) is not str or type(request.key_type) is not int \
                or request.key_type not in (GROUP_KEY, TRANSACTION_KEY):
            return FindCoordinatorResponse(ErrorCode.INVALID_REQUEST, request_id=request.request_id,
                                           error_message=f"key {request.key!r:.80} of key type {request.key_type!r}")
        topic = TRANSACTION_STATE_TOPIC if request.key_type == TRANSACTION_KEY else CONSUMER_OFFSETS_TOPIC
        if topic not in self.topics and self.delayed.running:  # made off the loop; answered once it is served
            return self._find_coordinator_later(request, topic)
        if request.key_type == TRANSACTION_KEY:
            self.txn_coordinator  # noqa: B018  # made and loaded now, not at the producer's first transaction
        else:
            self.group_coordinator  # noqa: B018  # likewise, at a consumer's or producer's first group request
        return FindCoordinatorResponse(ErrorCode.NONE, self.broker_id, request_id=request.request_id)

    def _find_coordinator_later(self, request: FindCoordinatorRequest, topic: str) -> Pending:
        """FindCoordinator while ``topic`` is made on the flusher thread: the answer once it is served (a failure
        is COORDINATOR_NOT_AVAILABLE, which clients retry)."""
        pending = Pending()

        def ready(error: BaseException | None) -> None:
            try:
                if error is not None:
                    raise error
                answer = self._find_coordinator(request)
                assert isinstance(answer, FindCoordinatorResponse)  # the topic is served now
            except Exception as exc:  # answered, never raised into the flusher's callbacks
                log.error("could not make %s: %s", topic, exc)
                answer = FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, request_id=request.request_id,
                                                 error_message=f"could not make {topic}: {exc}")
            pending.complete(answer)
        self._background_topics.make(topic, *self._internal_topic_settings(topic), ready)
        return pending

    def _add_offsets_to_txn(self, request: AddOffsetsToTxnRequest) -> Response:
        """AddOffsetsToTxn, with ``__consumer_offsets`` made first: the transaction's markers must find its
        partition (markers to a partition the broker lacks are retried forever)."""
        self.group_coordinator  # noqa: B018
        return txn_requests.add_offsets_to_txn(self.txn_coordinator, request)

    def _partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        number = self._index.get((topic, partition))
        return None if number is None else self._logs[number]

    def _produce(self, request: ProduceRequest) -> ProduceResponse | Pending | None:
        """Check every batch (one kernel call), write the accepted ones, commit those written."""
        if type(request.acks) is not int or request.acks not in _ACKS:
            raise ValueError(f"acks must be one of {_ACKS}, got {request.acks!r}")
        batches = request.batches
        if not isinstance(batches, tuple | list) or not all(type(b) is RecordBatch for b in batches):
            raise TypeError(f"ProduceRequest.batches must be a tuple of RecordBatch, got {batches!r:.80}")
        answers: list[PartitionResponse | None] = [None] * len(batches)
        if len(batches) > self._columns.capacity:
            self._columns = _RequestColumns(2 * len(batches))
        columns = self._columns
        numbers: list[int] = []
        positions: list[int] = []
        seen: set[int] = set()
        waits: list[tuple[int, PartitionLog, int]] = []
        for position, batch in enumerate(batches):
            partition = batch.partition
            known = isinstance(batch.topic, str) and isinstance(partition, int | np.integer) \
                and not isinstance(partition, bool | np.bool_)
            number = self._index.get((batch.topic, int(partition))) if known else None
            problem: tuple[ErrorCode, str] | None
            if number is None:
                problem = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {batch.topic}-{batch.partition}"
            elif batch.topic in INTERNAL_TOPICS and not request.internal:
                problem = ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {batch.topic}"
            elif number in seen:
                problem = ErrorCode.INVALID_REQUEST, f"a second batch for {batch.topic}-{batch.partition}"
            else:
                problem = _malformed(batch) or self._refused(batch)
                if problem is None:  # accepted for the state check (here, where number is known to be an int)
                    columns.put(len(numbers), number, batch)
                    seen.add(number)
                    numbers.append(number)
                    positions.append(position)
                    continue
            answers[position] = PartitionResponse(batch.topic, batch.partition, problem[0], error_message=problem[1])
        k = len(numbers)
        if k:
            verdicts = columns.verdicts
            # The coordinators' own appends are Kafka's AppendOrigin.COORDINATOR: the producer's epoch is checked,
            # not its sequence (a TxnOffsetCommit batch has none, and opens the transaction on the partition).
            origin = Origin.COORDINATOR if request.internal else Origin.CLIENT
            check_into(self.backend, columns.batch, origin, 0, k, self.state, verdicts, columns.txns)
            status = verdicts.out_status
            appended = np.flatnonzero(status[:k] == _APPENDED).tolist()
            written: list[int] = []
            # acks=all waits for the flusher on a loop (the coordinators' own writes are answered in place).
            delayed = request.acks == -1 and self.fsync and self.data_dir is not None and not request.internal \
                and self.delayed.waits_for_flush
            try:
                failed = self._write(appended, written, numbers, batches, positions, verdicts.out_base_offset,
                                     request.acks == -1 and not delayed)
            finally:  # whatever happened, the state records exactly the batches that are in the logs
                for j in set(appended).difference(written):
                    status[j] = _REJECTED  # not written: not committed, the retry will be appended
                commit_into(self.backend, columns.batch, 0, k, self.state, columns.commit)
            errors, offsets = verdicts.out_error_code[:k].tolist(), verdicts.out_base_offset[:k].tolist()
            for j, (position, error, offset) in enumerate(zip(positions, errors, offsets, strict=True)):
                batch = batches[position]
                log_start = self._logs[numbers[j]].log_start_offset
                if j in failed:
                    answers[position] = PartitionResponse(batch.topic, batch.partition, ErrorCode.KAFKA_STORAGE_ERROR,
                                                          log_start_offset=log_start, error_message=failed[j])
                elif error:
                    answers[position] = PartitionResponse(batch.topic, batch.partition, error, offset, -1, log_start,
                                                          self._explain(j, f"{batch.topic}-{batch.partition}"))
                else:
                    answers[position] = PartitionResponse(batch.topic, batch.partition, 0, offset, -1, log_start)
                    if delayed:  # a duplicate too: the batch it repeats may not be durable yet
                        partition_log = self._logs[numbers[j]]
                        waits.append((position, partition_log, partition_log.log_end_offset))
        if request.acks == 0:
            return None
        response = ProduceResponse(request.request_id, tuple(answers))  # type: ignore[arg-type]  # all answered
        return self.delayed.produce(response, waits, request.timeout_ms) if waits else response

    def _write_txn_markers(self, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        """Write each marker to its partitions (COORDINATOR origin: the kernel checks the producer's epoch and
        the coordinator's), one marker at a time, as Kafka's partition leaders append them; fsync'd before the
        answer (the coordinator completes the transaction only after every answer)."""
        results: list[TxnMarkerResult] = []
        if not isinstance(request.markers, tuple | list):
            return WriteTxnMarkersResponse(request.request_id, ())
        for marker in request.markers:
            if not _well_formed_marker(marker):  # answered with no partition written, never raised
                producer_id = getattr(marker, "producer_id", -1)
                results.append(TxnMarkerResult(producer_id if type(producer_id) is int else -1, ()))
                continue
            answers: dict[int, PartitionResponse] = {}
            numbers: list[int] = []
            positions: list[int] = []
            columns = self._columns
            if len(marker.partitions) > columns.capacity:
                columns = self._columns = _RequestColumns(2 * len(marker.partitions))
            control_type = int(ControlType.COMMIT if marker.committed else ControlType.ABORT)
            now = self.clock()
            fields_fit = (type(marker.producer_id) is int and 0 <= marker.producer_id < 2**63
                          and type(marker.producer_epoch) is int and 0 <= marker.producer_epoch <= INT16_MAX
                          and type(marker.coordinator_epoch) is int and 0 <= marker.coordinator_epoch <= INT32_MAX
                          and type(marker.committed) is bool)
            for position, (topic, partition) in enumerate(marker.partitions):
                number = self._index.get((topic, partition))
                if number is None or number in numbers or not fields_fit:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if number is None and fields_fit \
                        else ErrorCode.INVALID_REQUEST
                    answers[position] = PartitionResponse(topic, partition, code, error_message=(
                        None if fields_fit else f"marker fields out of range or of the wrong type: {marker!r:.200}"))
                    continue
                columns.put(len(numbers), number, RecordBatch(topic, partition, (), None, marker.producer_id,
                                                              marker.producer_epoch, -1, now, True),
                            control=(control_type, marker.coordinator_epoch))
                numbers.append(number)
                positions.append(position)
            k = len(numbers)
            if k:
                verdicts = columns.verdicts
                check_into(self.backend, columns.batch, Origin.COORDINATOR, 0, k, self.state, verdicts,
                           columns.txns)
                status = verdicts.out_status
                written: list[int] = []
                failed: dict[int, str] = {}
                try:
                    for j in np.flatnonzero(status[:k] == _APPENDED).tolist():
                        partition_log = self._logs[numbers[j]]
                        offset = int(verdicts.out_base_offset[j])
                        try:
                            partition_log.append_marker(offset, marker.producer_id, marker.producer_epoch,
                                                        control_type, marker.coordinator_epoch, now)
                            partition_log.sync()  # as acks=all: fsync'd unless the broker runs fsync=False
                        except (OSError, IdemcoreError) as exc:
                            failed[j] = f"writing a marker to {partition_log.name} at offset {offset} failed: {exc}"
                            log.error("%s", failed[j])
                            if partition_log.log_end_offset > offset:
                                partition_log.rollback_last()
                            continue
                        written.append(j)
                        if self._written_ends is not None:
                            self._written_ends.update(partition_log.name, partition_log.log_end_offset)
                        if partition_log.topic == CONSUMER_OFFSETS_TOPIC and self._group_coordinator is not None:
                            # Its pending offsets commit or go (not loaded yet: the load replays this marker).
                            self._group_coordinator.complete_transaction(partition_log.partition,
                                                                         marker.producer_id, marker.committed)
                finally:
                    for j in set(np.flatnonzero(status[:k] == _APPENDED).tolist()).difference(written):
                        status[j] = _REJECTED
                    commit_into(self.backend, columns.batch, 0, k, self.state, columns.commit)
                for j, position in enumerate(positions):
                    topic, partition = marker.partitions[position]
                    error = ErrorCode.KAFKA_STORAGE_ERROR if j in failed else int(verdicts.out_error_code[j])
                    answers[position] = PartitionResponse(
                        topic, partition, error, int(verdicts.out_base_offset[j]) if not error else -1,
                        error_message=failed.get(j) or (self._explain(j, f"{topic}-{partition}") if error else None))
            results.append(TxnMarkerResult(marker.producer_id,
                                           tuple(answers[p] for p in range(len(marker.partitions)))))
        return WriteTxnMarkersResponse(request.request_id, tuple(results))

    def _refused(self, batch: RecordBatch) -> tuple[ErrorCode, str] | None:
        """Why the topic's settings refuse a well-formed batch, in Kafka's order (LogValidator, then the segment
        size in UnifiedLog.append), or None."""
        config = self.topic_configs[batch.topic]
        if config.compacted and (batch.keys is None or None in batch.keys):  # Kafka's LogValidator.validateKey
            return ErrorCode.INVALID_RECORD, ("Compacted topic cannot accept message without key in topic partition "
                                              f"{batch.topic}-{batch.partition}")
        size = batch.size_in_bytes()
        if size > self.message_max_bytes:
            return ErrorCode.MESSAGE_TOO_LARGE, (f"a batch of {size} bytes is larger than "
                                                 f"message_max_bytes={self.message_max_bytes}")
        if size > config.segment_bytes:  # Kafka's RecordBatchTooLargeException
            return ErrorCode.RECORD_LIST_TOO_LARGE, (f"a batch of {size} bytes exceeds the maximum configured segment "
                                                     f"size of {config.segment_bytes}")
        return None

    def _write(self, appended: list[int], written: list[int], numbers: list[int], batches: tuple[RecordBatch, ...],
               positions: list[int], base_offset: np.ndarray, sync: bool) -> dict[int, str]:
        """Append the accepted batches to their logs (and sync them for acks=all), adding the rows now in a log
        to ``written``; returns the rows whose write failed, with why. A failed partition's log is left as it
        was before this request."""
        failed: dict[int, str] = {}
        for j in appended:
            partition_log = self._logs[numbers[j]]
            try:
                partition_log.append(int(base_offset[j]), batches[positions[j]])
            except (OSError, IdemcoreError) as exc:  # IdemcoreError: the log refused (never expected); answered
                failed[j] = f"writing {partition_log.name} at offset {int(base_offset[j])} failed: {exc}"
                log.error("%s", failed[j])
                continue
            written.append(j)
        if sync and self.data_dir is not None:
            for j in list(written):
                partition_log = self._logs[numbers[j]]
                try:
                    partition_log.sync()
                except OSError as exc:
                    partition_log.rollback_last()
                    written.remove(j)
                    failed[j] = f"syncing {partition_log.name} failed: {exc}"
                    log.error("%s", failed[j])
        if self._written_ends is not None:
            for j in written:  # after the appends: a kill in between leaves the log longer, never shorter
                partition_log = self._logs[numbers[j]]
                self._written_ends.update(partition_log.name, partition_log.log_end_offset)
        return failed

    def _explain(self, j: int, name: str) -> str:
        """Why row ``j`` of this request was rejected, for the partition ``name``."""
        b, v = self._columns.batch, self._columns.verdicts
        return rejection_message(name, int(b.producer_id[j]),
                                 int(b.producer_epoch[j]), int(b.base_sequence[j]), int(b.last_sequence[j]),
                                 int(b.record_count[j]), int(b.coordinator_epoch[j]), bool(b.is_control[j]),
                                 int(v.out_error_code[j]), int(v.out_finding[j]), int(v.out_expected[j]))

    # ------------------------------------------------------------ reading and housekeeping

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The log of one partition."""
        try:
            return self._logs[self._index[(topic, partition)]]
        except KeyError:
            raise IdemcoreError(f"broker {self.broker_id} has no partition {topic}-{partition}") from None

    def logs(self) -> list[PartitionLog]:
        return list(self._logs)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer_id_expiration_ms`` with no open transaction; return how many."""
        expired = self.state.expired_rows(now_ms, self.producer_id_expiration_ms)
        return self.state.remove_rows(expired, self.backend) if expired.any() else 0

    def start_background(self, loop: EventLoop) -> None:
        """Run on ``loop`` from now on (called on its thread; the TCP server calls it with its asyncio loop): fetches
        and acks=all produces wait in the broker's purgatories, a flusher thread fsyncs, rolls and writes the
        recovery points, internal topics are made off the loop (:mod:`.delayed`)."""
        if self._closed:
            raise IdemcoreError(f"broker {self.broker_id} is closed")
        self.delayed.start(loop, [(p, self.topic_configs[p.topic]) for p in self._logs], self._checkpoint)

    def stop_background(self) -> None:
        """Stop running on a loop (on its thread): what is queued is flushed and what waits is answered; requests
        are answered in place again."""
        self.delayed.stop()

    def close(self) -> None:
        """Sync and close the logs, write the clean-shutdown checkpoint, release the directory; then every
        request raises."""
        self._closed = True
        try:
            self.delayed.stop()
            for partition_log in self._logs:
                partition_log.close()
            if self._lock_descriptor is not None and self._started:
                for partition_log in self._logs:  # Kafka snapshots at shutdown: the next start replays nothing
                    if partition_log.log_end_offset not in partition_log.snapshot_offsets():
                        self._write_snapshot(partition_log, partition_log.log_end_offset)
                self._write_log_end_checkpoint()  # every log is synced and closed
                # Kafka 3.x's content (CleanShutdownFileHandler); only the file's presence is read back.
                write_file_atomically(self.data_dir / CLEAN_SHUTDOWN_FILE,  # type: ignore[operator]
                                      b'{"version":0,"brokerEpoch":-1}')
        finally:
            self._release()

    def _release(self) -> None:
        """Close the written-ends file and the id store, and release the directory's lock."""
        if self._written_ends is not None:
            self._written_ends.close()
            self._written_ends = None
        ids = getattr(self, "producer_ids", None)  # absent when the constructor failed before making it
        close_store = getattr(getattr(ids, "store", None), "close", None)
        try:
            if close_store is not None:
                close_store()
        finally:
            if self._lock_descriptor is not None:
                os.close(self._lock_descriptor)  # releases the lock
                self._lock_descriptor = None

    def kill(self) -> None:
        """Stop as a killed process does (for simulations and fault tests): the files are closed without a
        flush and without the shutdown checkpoint, and the directory's lock is released; nothing else."""
        self._closed = True
        self.delayed.abandon()
        for partition_log in self._logs:
            partition_log.abandon()
        self._release()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
