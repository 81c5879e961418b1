"""A partition's log: its segments in offset order, the transactions open in it, and where it starts and ends
(Kafka's ``UnifiedLog`` over its ``LocalLog``).

Memory does not grow with the log: per segment a few numbers (:mod:`.segment`), per producer with an open
transaction one entry; the batches are in the files (or, without a directory, in one ``bytearray`` per log).
Appends write the bytes the producer sent with only the base offset and partition leader epoch set (fields
outside the CRC), reads return the file's bytes (:meth:`PartitionLog.read`), and the aborted transactions a
read_committed fetch needs come from the ``.txnindex`` files (Kafka's ``collectAbortedTransactions``).

``directory`` (the broker's ``<data_dir>/<topic>-<partition>/``) holds Kafka's files: per segment
``<base offset, 20 digits>.log``, ``.index``, ``.timeindex`` and (once it holds an entry) ``.txnindex``;
beside them ``<offset>.snapshot`` (the producer state at that offset, written by the broker, which owns the
state, through :meth:`write_snapshot` when a segment rolls (``on_roll``) and at a clean close; the newest two
are kept) and ``leader-epoch-checkpoint`` (:mod:`.leader_epochs`: where each leader epoch began; appends stamp
:attr:`PartitionLog.leader_epoch`, a follower's keep the leader's).

Segments roll by size (``segment.bytes``: a batch that would take the active segment past it starts a new one)
and by time (``segment.ms``: a batch whose timestamp is more than that after the segment's first batch's, or,
without timestamps, when the segment is that old by the clock; Kafka's ``LogSegment.shouldRoll`` without
jitter). Loading: :mod:`.loader`. Compaction: :mod:`.cleaner`.

**Differences from Kafka**: the indexes are appended as batches are, not preallocated (``segment.index.bytes``)
and trimmed at roll: readers (``record.kafka_files``) accept both. A log without a directory keeps one segment
in memory and never rolls.
"""

from __future__ import annotations

import bisect
import collections
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from idemcore.broker.log.leader_epochs import LeaderEpochCache, LeaderEpochCheckpointError
from idemcore.broker.log.loader import (
    LoadedLog,
    delete_segment_files,
    epoch_starts,
    load_segments,
    rebuild_indexes,
    segment_files,
    trim_txn_index,
)
from idemcore.broker.log.segment import HEADER_BYTES, OFFSET_ENTRY, TIME_ENTRY, LogSegment
from idemcore.broker.log.store import MemoryStore
from idemcore.checks import int_setting
from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.kernels.columns import BatchColumns, concatenate
from idemcore.protocol.codes import ControlType
from idemcore.protocol.constants import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_INDEX_BYTES,
    DEFAULT_SEGMENT_MS,
    INT32_MAX,
)
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files.indexes import AbortedTxn
from idemcore.record.kafka_files.names import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    offset_file_name,
    parse_offset_file,
)
from idemcore.record.kafka_files.segment import STOP_BAD_LENGTH, STOP_BAD_MAGIC, SegmentScan, scan_buffer, scan_segment
from idemcore.record.kafka_files.writers import encode_txn_index_entry, write_file_atomically
from idemcore.record.stored import StoredBatch
from idemcore.record.v2 import (
    CorruptRecordError,
    decode_batch,
    decode_stored_batches,
    encode_end_txn_marker,
    encode_record_batch,
    set_base_offset,
    set_partition_leader_epoch,
)

log = logging.getLogger(__name__)

#: Rolled segments whose files stay open after a read (the most recently read): the others are closed, so the
#: descriptors a partition holds do not grow with its log (Kafka keeps every segment open; ulimits vary).
OPEN_ROLLED_SEGMENTS = 4


class FlushTarget(NamedTuple):
    """An fsync to run off the event loop (:meth:`PartitionLog.flush_target`): once ``descriptors`` are fsync'd in
    order, the log is durable below ``end_offset``; the active segment (at ``segment_base``) was ``size`` bytes."""

    end_offset: int
    segment_base: int
    size: int
    descriptors: tuple[int, ...]
    #: The log's counts of new files (segments, a first .txnindex) and of ABORT markers when the target was taken.
    dir_changes: int = 0
    aborts: int = 0
    #: The log's truncation count when the target was taken: a target taken before a truncation no longer
    #: describes the log's bytes (the flusher then counts nothing from it).
    truncations: int = 0


def _fsync_closed(descriptor: int) -> None:
    """fsync ``descriptor``, then close it."""
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replay_metadata(scan: SegmentScan, rows: np.ndarray) -> BatchColumns:
    """The batch metadata columns of a scan's ``rows``, as the producer state replays stored batches: a batch
    spans its offset range whatever compaction removed from it (its producer's sequence range too)."""
    part = scan.metadata().take(rows)
    span = np.where(part["is_control"], 1, scan["last_offset"][rows] - scan["base_offset"][rows] + 1)
    part["record_count"][:] = span
    base = part["base_sequence"].astype(np.int64)
    part["last_sequence"][:] = np.where(base >= 0, (base + span - 1) % (INT32_MAX + 1), -1)
    return part


def complete_txn(open_txns: dict[int, int], producer_id: int, base_offset: int, is_transactional: bool,
                 control_type: int | None) -> AbortedTxn | None:
    """Kafka's ongoing-transaction bookkeeping for one batch (``open_txns``: producer id -> its transaction's
    first offset), and the aborted transaction an ABORT marker completes (the transaction's first offset, the
    marker's, and the last stable offset after it: the first offset of another producer's open transaction, else
    the marker's + 1, as ``ProducerStateManager.lastStableOffset``; none for a marker that ends no transaction
    here)."""
    if not is_transactional:
        return None
    if control_type is None:
        open_txns.setdefault(producer_id, base_offset)
        return None
    if producer_id not in open_txns:  # ends no transaction here (Kafka's appendEndTxnMarker: no CompletedTxn)
        return None
    first = open_txns.pop(producer_id)
    if control_type != ControlType.ABORT:
        return None
    return AbortedTxn(producer_id, first, base_offset, min(open_txns.values(), default=base_offset + 1))


class UnexpectedAppendOffsetError(IdemcoreError):
    """Replicated batches that do not follow on from the log end (Kafka's ``UnexpectedAppendOffsetException``)."""


class PartitionLog:
    """Batches of one topic-partition, in offset order, in segment files under ``directory`` or in memory
    (module docstring). ``recovery_point``: the log end when the broker last started or closed cleanly (its
    checkpoint); with ``clean_shutdown`` it is the log end and no segment is read whole, else the segments from
    the one holding it on are scanned (:mod:`.loader`). ``written_end``: the end the broker last wrote in this
    boot (a killed process's writes stay in the OS): the log must reach it, or it was damaged from outside.

    ``segment_bytes``, ``segment_ms``, ``segment_index_bytes`` and ``index_interval_bytes`` are Kafka's
    ``segment.bytes``, ``segment.ms``, ``segment.index.bytes`` (a segment whose offset or time index is full
    rolls) and ``index.interval.bytes``; a change of these attributes holds from the next append (the last one
    from the next segment, as Kafka's LogSegment keeps its own). ``clock`` gives the time in ms (for
    ``segment.ms`` of batches without timestamps).
    """

    def __init__(self, topic: str, partition: int, directory: Path | None = None, fsync: bool = True,
                 recovery_point: int = 0, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 segment_ms: int = DEFAULT_SEGMENT_MS, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES,
                 clock: Callable[[], int] | None = None, log_start_offset: int = 0, cleaned_offset: int = 0,
                 cut_torn_tail: bool = True, clean_shutdown: bool = False, written_end: int = 0) -> None:
        int_setting("segment_bytes", segment_bytes, 1, INT32_MAX)
        int_setting("segment_ms", segment_ms, 1, 2**63 - 1)
        int_setting("segment_index_bytes", segment_index_bytes, 4, INT32_MAX)
        int_setting("index_interval_bytes", index_interval_bytes, 0, INT32_MAX)
        self.topic = topic
        self.partition = partition
        self._name = f"{topic}-{partition}"  # asked at every append (the written ends are kept by name)
        #: The first offset readers may read (Kafka's log start offset): raised by retention (to a segment's base)
        #: and DeleteRecords (anywhere up to the log end, inside a segment or a batch too), recorded by the broker
        #: in log-start-offset-checkpoint before the segments below it are deleted.
        self.log_start_offset = log_start_offset
        # The log start whose snapshots and epoch checkpoint delete_start_breached_segments last brought in line.
        self._tidied_start = log_start_offset
        #: Where the last compaction stopped (the active segment's base then): below it, records and whole
        #: batches may be missing, as compaction leaves them; recorded by the broker in cleaner-offset-checkpoint.
        self.cleaned_offset = cleaned_offset
        self.truncated_bytes = 0
        #: Bytes of segment files read while loading (none after a clean shutdown).
        self.scanned_bytes = 0
        #: Bytes of the active segment known to be on disk (fsync'd); every older segment is, whole.
        self.synced_bytes = 0
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.segment_index_bytes = segment_index_bytes
        self.index_interval_bytes = index_interval_bytes
        self._clock = clock if clock is not None else wall_clock_ms
        self._directory = directory
        self._fsync = fsync
        self._closed = False
        self._dirty = False
        # Counts of what needs an fsync, each beside how far it was fsync'd: new names in the directory (the
        # log's own, a rolled-in segment's files, a segment's first .txnindex: not durable until the directory is
        # fsync'd, Kafka's LocalLog.flush calls Utils.flushDir), and ABORT entries in the active segment's .txnindex.
        self._dir_changes = int(directory is not None)
        self._dir_synced = 0
        self._aborts = 0
        self._aborts_synced = 0
        self._last_position = 0
        # Enough to take the last append back: the segment state before it, its producer's open transaction.
        self._undo: tuple[object, int, int, int, int | None] | None = None
        self._segment_created = self._clock()
        #: Called with the log and the new segment's base offset when a segment rolls, before the new segment
        #: exists (the broker writes the producer-state snapshot at that offset).
        self.on_roll: Callable[[PartitionLog, int], None] | None = None
        #: Called after every append that reached the log (data or marker): the broker's delayed operations
        #: watch the partition (Kafka's ``tryCompleteDelayedRequests`` after an append).
        self.on_append: Callable[[PartitionLog], None] | None = None
        #: When set, a roll hands the old segment to it (with the new segment's base offset) instead of fsyncing
        #: it in place: the broker's flusher fsyncs it off the event loop (Kafka's roll schedules
        #: ``flushUptoOffsetExclusive`` of the old segment). It takes the descriptors it needs before they close.
        self.flush_rolled: Callable[[PartitionLog, LogSegment, int], None] | None = None
        #: Producer id -> first offset of its open transaction here (Kafka's ongoing transactions).
        self._open_txns: dict[int, int] = {}
        self._recently_read: collections.deque[LogSegment] = collections.deque()
        #: Called before a truncation cuts anything, with the log, the offset it holds at least at every step of
        #: the truncation (a crash midway included), and its log start after it: the broker lowers its recovery
        #: point and written end to that first, so the next start takes the shorter log for a truncation, not for
        #: damage (Kafka's LogManager.truncateTo checkpoints the recovery points after truncating).
        self.on_truncate: list[Callable[[PartitionLog, int, int], None]] = []
        #: How many truncations this log went through (a flush taken before one covers other bytes).
        self.truncations = 0
        self.segments: list[LogSegment]
        #: The leader epochs of this log (``leader-epoch-checkpoint``).
        self.epochs: LeaderEpochCache
        if directory is None:
            self.segments = [LogSegment(log_start_offset, MemoryStore(), MemoryStore(), MemoryStore(), MemoryStore(),
                                        index_interval_bytes)]
            self.epochs = LeaderEpochCache(None, fsync)
            #: The partition leader epoch stamped on this broker's own appends (as leader): the partition's
            #: leader epoch, set by the broker when it becomes leader.
            self.leader_epoch = 0
            return
        #: Whether this log made its directory (only such a one is removed by :meth:`discard`).
        self._made_directory = not os.path.lexists(directory)
        directory.mkdir(parents=True, exist_ok=True)
        try:
            epochs_path = directory / LEADER_EPOCH_CHECKPOINT
            try:
                self.epochs = LeaderEpochCache(epochs_path, fsync)
                rebuild_epochs = not epochs_path.exists()
            except LeaderEpochCheckpointError as exc:
                log.warning("%s: %s; rebuilding it from the batches' leader epochs", self.name, exc)
                self.epochs = LeaderEpochCache(epochs_path, fsync, entries=())
                rebuild_epochs = True
            loaded: LoadedLog = load_segments(
                self.name, directory, recovery_point=recovery_point, floor=max(recovery_point, written_end),
                log_start_offset=log_start_offset,
                cleaned_offset=cleaned_offset, index_interval_bytes=index_interval_bytes, fsync=fsync,
                clean=clean_shutdown, cut_torn_tail=cut_torn_tail, epochs=None if rebuild_epochs else self.epochs)
            self.segments = loaded.segments
            self.truncated_bytes = loaded.truncated_bytes
            self.scanned_bytes = loaded.scanned_bytes
            self.synced_bytes = self.segments[-1].size
            self._check_epochs(rebuild_epochs)
            self.leader_epoch = max(self.epochs.latest_epoch, 0)
        except BaseException:
            if self._made_directory:  # a new partition that could not be made leaves nothing behind
                for segment in getattr(self, "segments", ()):
                    segment.close()
                shutil.rmtree(directory, ignore_errors=True)
            raise

    # --- where the log is -----------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def name(self) -> str:
        return self._name

    @property
    def segment_bases(self) -> list[int]:
        """Base offsets of the segments, oldest first; the last is the active one."""
        return [segment.base_offset for segment in self.segments]

    @property
    def path(self) -> Path | None:
        """The active segment's ``.log`` file, or None for a log kept in memory."""
        return None if self._directory is None else Path(self.segments[-1].log.name)

    @property
    def last_append_position(self) -> int:
        """The byte (of the active segment) at which the last appended batch starts: a crash mid-write tears
        from there."""
        return self._last_position

    def _has_batches(self) -> bool:
        return self.log_end_offset > self.segments[0].base_offset or any(s.size for s in self.segments)

    # --- reads ----------------------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        """The segment holding ``offset`` (the first one for an offset below the log)."""
        return max(bisect.bisect_right(self.segments, offset, key=lambda segment: segment.base_offset) - 1, 0)

    def _used(self, segment: LogSegment) -> LogSegment:
        """Note a read of ``segment``; close the files of the rolled segments read longest ago beyond
        :data:`OPEN_ROLLED_SEGMENTS` (they open again when next read)."""
        if segment is self.segments[-1] or self._directory is None:
            return segment
        recent = self._recently_read
        if segment in recent:
            recent.remove(segment)
        recent.append(segment)
        while len(recent) > OPEN_ROLLED_SEGMENTS:
            oldest = recent.popleft()
            if oldest is not self.segments[-1]:
                oldest.close()
        return segment

    def read(self, offset: int, limit: int, max_bytes: int, min_one: bool) -> tuple[bytes, int]:
        """The whole stored batches from the one holding ``offset`` on (the first after it if compaction emptied
        that one), those starting below ``limit`` that fit in ``max_bytes`` (``min_one``: the first whatever its
        size), and the offset after the last one (``offset`` when none). The bytes are the files', never decoded;
        unlike Kafka's ``LocalLog.read`` an answer may span segments, so a small segment never caps a fetch."""
        parts: list[bytes] = []
        position = offset
        for segment in self.segments[self._segment_index(offset):]:
            if segment.base_offset >= limit or (max_bytes <= 0 and not min_one):
                break
            data, after = self._used(segment).read(position, limit, max_bytes, min_one)
            if data:
                parts.append(data)
                max_bytes -= len(data)
                min_one = False
                position = after
            if after < segment.next_offset and (data or segment.next_offset > position):
                break  # stopped inside this segment: by the limit or the bytes
        if not parts:
            return b"", offset
        return (parts[0] if len(parts) == 1 else b"".join(parts)), position

    @property
    def batches(self) -> list[StoredBatch]:
        """Every batch a reader can get, read back from the files and decoded, in offset order: those ending at or
        after the log start (the one holding it whole, as a fetch from the start returns it). For tests and tools
        (loading an internal topic), never on the produce or fetch path."""
        return list(self._readable_batches())

    def _readable_batches(self) -> Iterator[StoredBatch]:
        for segment in self.segments:  # decoded a segment at a time
            data = self._used(segment).log.read(0, segment.size)
            try:
                # No torn tail here (recovery cut it): a length running past the end is damage, named at its position.
                decoded = decode_stored_batches(self.topic, self.partition, data, allow_partial_tail=False)
            except CorruptRecordError as exc:  # say which file: a start loading an internal topic stops on it
                where = getattr(segment.log, "path", None) or f"the segment at offset {segment.base_offset}"
                raise CorruptRecordError(
                    f"{self.name}: {where} is corrupt: {exc}. Restore it, or accept losing that batch and what "
                    f"follows: truncate it to {exc.position} bytes and remove <data_dir>/recovery-point-offset-"
                    "checkpoint and <data_dir>/written-log-ends", exc.position) from None
            for stored in decoded:
                if stored.next_offset > self.log_start_offset:
                    yield stored

    def records(self) -> Iterator[tuple[int, bytes | None, bytes | None, RecordBatch]]:
        """Every record from the log start on as ``(offset, key, value, batch)``, in offset order (read from the
        files)."""
        for stored in self._readable_batches():
            batch = stored.batch
            keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
            for offset, key, value in zip(stored.offsets(), keys, batch.values, strict=True):
                if offset >= self.log_start_offset:
                    yield offset, key, value, batch

    def scan_from(self, offset: int, stream: int) -> BatchColumns | None:
        """The batch metadata columns (``stream`` in their stream column) of the batches ending at or after
        ``offset`` (the one holding it too: a log start inside a batch, as Kafka's replay reads from
        ``translateOffset``), read by the native header scan (recovery replays them into the producer state); None
        when there are none."""
        parts: list[BatchColumns] = []
        for segment in self.segments[self._segment_index(offset):]:
            if not segment.size:
                continue
            if self._directory is None:
                raise IdemcoreError(f"{self.name}: a log kept in memory is never recovered")
            scan = scan_segment(Path(segment.log.name), stream=stream)
            keep = np.flatnonzero(scan["last_offset"] >= offset)
            if len(keep):
                parts.append(replay_metadata(scan, keep))
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else concatenate(parts)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(producer id, first offset)`` of every transaction aborted here that overlaps ``[start, end)``: its
        first offset below ``end``, its ABORT marker at or after ``start`` (what a read_committed fetch of that
        range must drop, Kafka's ``collectAbortedTransactions``), in the order of their markers.

        Read from the ``.txnindex`` of the segment holding ``start`` and those after it. First offsets are not
        ordered, so the walk goes on past ``end`` until an entry's last stable offset reaches ``end``: every
        transaction aborted after it began at or after that offset, so none further can overlap (Kafka's
        ``TxnIndexSearchResult.isComplete``)."""
        found = []
        for segment in self.segments[self._segment_index(start):]:
            for txn in self._used(segment).aborted():
                if txn.last_offset < start:
                    continue
                if txn.first_offset < end:
                    found.append((txn.producer_id, txn.first_offset))
                if txn.last_stable_offset >= end:
                    return found
        return found

    def offset_for_timestamp(self, timestamp: int, max_timestamp: bool = False) -> tuple[int, int] | None:
        """Kafka's ``UnifiedLog.fetchOffsetByTimestamp``: ``(offset, timestamp)`` of the first record whose
        timestamp is at least ``timestamp`` (in the first batch whose max timestamp is), at or after the log start
        (Kafka's ``findOffsetByTimestamp(timestamp, logStartOffset)``), or with ``max_timestamp`` the first record
        with the largest timestamp (wherever it is, as Kafka's); None when there is none. The time index says which
        segment; headers are walked from there and one batch decoded."""
        if max_timestamp:
            newest = max(self.segments, key=lambda segment: segment.largest_timestamp())
            top = newest.largest_timestamp()
            if top < 0:
                return None
            return self._first_record_at(newest, top, exact=True)
        for segment in self.segments:
            if segment.largest_timestamp() >= timestamp:
                found = self._first_record_at(segment, timestamp, exact=False)
                if found is not None:
                    return found
        return None

    def _first_record_at(self, segment: LogSegment, timestamp: int, exact: bool) -> tuple[int, int] | None:
        floor = -1 if exact else self.log_start_offset
        for header in self._used(segment).headers(self._time_index_floor(segment, timestamp)):
            if header.max_timestamp < timestamp or header.last_offset < floor:
                continue
            batch_header, records = decode_batch(segment.log.read(header.position, header.size), check_crc=False)
            for record in records:
                at = batch_header.timestamp_of(record)
                if (at == timestamp or (not exact and at > timestamp)) and batch_header.offset_of(record) >= floor:
                    return batch_header.offset_of(record), at
            if batch_header.is_control and (not exact or header.max_timestamp == timestamp):
                return header.base_offset, header.max_timestamp  # a marker counts, as in Kafka's segment scan
        return None

    def _time_index_floor(self, segment: LogSegment, timestamp: int) -> int:
        """The position to walk from: after the last time index entry whose timestamp is below ``timestamp``
        (every batch up to its offset is older), else the segment's start."""
        index = segment.time_index
        count = index.size // TIME_ENTRY.size
        low, high, offset = 0, count, None
        while low < high:
            middle = (low + high) // 2
            stamp, relative = TIME_ENTRY.unpack(index.read(middle * TIME_ENTRY.size, TIME_ENTRY.size))
            if stamp < timestamp:
                offset = segment.base_offset + relative
                low = middle + 1
            else:
                high = middle
        return 0 if offset is None else segment.position_of(offset)

    # --- appends --------------------------------------------------------------------------------------------

    def append(self, base_offset: int, batch: RecordBatch) -> None:
        """Add a batch the producer-state check accepted at ``base_offset``: the bytes it came in (or encoded
        once from its fields) with the base offset and leader epoch set. All or nothing: when a write raises, the
        segment and its indexes are cut back to where they were (a segment the append rolled to stays, empty, as
        Kafka's would)."""
        self._check_append(base_offset)
        wire = batch.wire
        if wire is None:
            data: bytes | bytearray = encode_record_batch(batch, base_offset, self.leader_epoch)
        else:
            data = bytearray(wire)  # stored as sent: only the fields outside the CRC change
            set_base_offset(data, 0, base_offset)
            set_partition_leader_epoch(data, 0, self.leader_epoch)
        self._add(data, base_offset, base_offset + batch.record_count - 1, batch.max_timestamp, batch.producer_id,
                  batch.is_transactional, None, self.leader_epoch)

    def append_marker(self, base_offset: int, producer_id: int, producer_epoch: int, control_type: int,
                      coordinator_epoch: int, timestamp: int) -> None:
        """Add the transaction marker the producer-state check accepted at ``base_offset`` (COORDINATOR
        origin), ending ``producer_id``'s transaction here; an ABORT adds its ``.txnindex`` entry. All or
        nothing, as :meth:`append`."""
        self._check_append(base_offset)
        data = encode_end_txn_marker(control_type, coordinator_epoch, producer_id=producer_id,
                                     producer_epoch=producer_epoch, timestamp=timestamp, base_offset=base_offset,
                                     partition_leader_epoch=self.leader_epoch)
        self._add(data, base_offset, base_offset, timestamp, producer_id, True, int(control_type), self.leader_epoch)

    def _check_append(self, base_offset: int) -> None:
        if self._closed:
            raise IdemcoreError(f"{self.name}: the log is closed")
        if self._directory is None and base_offset > self.log_end_offset:
            # In memory nothing is recovered, so offsets may jump (tests near the int64 limit): a new segment
            # keeps every index entry's relative offset within int32.
            self.segments.append(LogSegment(base_offset, MemoryStore(), MemoryStore(), MemoryStore(), MemoryStore(),
                                            self.index_interval_bytes))
        if base_offset != self.log_end_offset:  # recovery would refuse the gap
            raise IdemcoreError(f"{self.name}: append at offset {base_offset}, but the log ends at "
                                f"{self.log_end_offset}: a stored log's offsets are contiguous")

    def _add(self, data: bytes | bytearray | memoryview, base_offset: int, last_offset: int, max_timestamp: int,
             producer_id: int, is_transactional: bool, control_type: int | None, epoch: int,
             notify: bool = True) -> None:
        before = self._open_txns.get(producer_id)
        aborted = complete_txn(self._open_txns, producer_id, base_offset, is_transactional, control_type)
        try:
            self._maybe_roll(base_offset, last_offset, len(data), max_timestamp)
        except BaseException:
            self._restore_txn(producer_id, before)
            raise
        segment = self.segments[-1]
        position = segment.size
        saved = segment.save()
        end = segment.next_offset
        # An ABORT's entry may make the segment's .txnindex: a new name in the directory.
        new_file = aborted is not None and self._directory is not None and segment.txn_index.size == 0
        try:
            txn_entry = b"" if aborted is None else encode_txn_index_entry(*aborted[:4])
            segment.append(data, last_offset, max_timestamp, txn_entry)
            self.epochs.assign(epoch, base_offset)  # a new epoch's first batch (Kafka's UnifiedLog.append)
        except BaseException:
            self._cut(segment, saved, position, end)
            self._restore_txn(producer_id, before)
            raise
        self._undo = (saved, position, end, producer_id, before)
        self._last_position = position
        self._dirty = True
        self._aborts += aborted is not None
        self._dir_changes += new_file
        if notify and self.on_append is not None:
            self.on_append(self)

    def _cut(self, segment: LogSegment, saved: object, position: int, end: int) -> None:
        try:
            segment.restore(saved, position, end)  # type: ignore[arg-type]
        except OSError:
            log.exception("%s: could not cut %s back to byte %d", self.name, segment.log.name, position)

    def _maybe_roll(self, base_offset: int, last_offset: int, size: int, max_timestamp: int) -> None:
        if self._roll_due(last_offset, size, max_timestamp):
            self._roll(base_offset)

    def _roll_due(self, last_offset: int, size: int, max_timestamp: int) -> bool:
        """Whether a batch of ``size`` bytes ending at ``last_offset`` starts a new segment (module docstring)."""
        segment = self.segments[-1]
        if self._directory is None or segment.size == 0:
            return False
        return (segment.size + size > self.segment_bytes or last_offset - segment.base_offset > INT32_MAX
                or self._waited_for_roll(segment, max_timestamp) > self.segment_ms or self._index_full(segment))

    def _index_full(self, segment: LogSegment) -> bool:
        """Whether the offset or time index holds as many entries as ``segment_index_bytes`` allows (Kafka's
        ``AbstractIndex.isFull``: its entries, 8 or 12 bytes, fit in the size rounded down)."""
        return (segment.index.size >= self.segment_index_bytes // OFFSET_ENTRY.size * OFFSET_ENTRY.size
                or segment.time_index.size >= self.segment_index_bytes // TIME_ENTRY.size * TIME_ENTRY.size)

    def _restore_txn(self, producer_id: int, first_offset: int | None) -> None:
        if first_offset is None:
            self._open_txns.pop(producer_id, None)
        else:
            self._open_txns[producer_id] = first_offset

    def rollback_last(self) -> None:
        """Take back the batch appended last (its sync failed): the log is as it was before that append."""
        if self._undo is None:
            raise IdemcoreError(f"{self.name}: no append to take back")
        saved, position, end, producer_id, txn_before = self._undo
        self._cut(self.segments[-1], saved, position, end)
        self._restore_txn(producer_id, txn_before)
        self._undo = None

    # --- a follower's appends and truncations ------------------------------------------------------------------

    def append_replicated(self, data: bytes | bytearray | memoryview, stream: int) -> BatchColumns:
        """Append batches fetched from the leader exactly as it stored them (offsets and leader epochs kept; Kafka's
        ``UnifiedLog.appendAsFollower``), and return their metadata columns (``stream`` in their stream column)
        for the producer state (REPLICATION origin), one row per batch appended.

        Nothing is appended unless every whole batch in ``data`` is valid: its CRC (CorruptRecordError naming the
        offset), offsets that follow on from the log end (an error naming both), leader epochs that never fall,
        control batches that are single markers. A torn last batch (a fetch cut at its byte limit) is left out.
        Appends stop before a batch that would roll the segment unless it is the first one: the roll's snapshot
        must see the producer state of every batch below it, so the caller feeds each answer to the state before
        appending the rest (it fetches again from the new log end). Rolls, indexes, ``.txnindex`` entries of
        ABORT markers, open transactions and leader epochs (a new epoch's first batch assigns it) are as for the
        leader's appends, so a follower's segments are the leader's, byte for byte."""
        if self._closed:
            raise IdemcoreError(f"{self.name}: the log is closed")
        scan = scan_buffer(data, stream=stream)
        where = f"{self.name}: replicated data"
        if scan.stop in (STOP_BAD_MAGIC, STOP_BAD_LENGTH):
            raise CorruptRecordError(f"{where} is corrupt at byte {scan.stop_position}: {scan.stop_detail}",
                                     scan.stop_position)
        count = len(scan)
        bases, lasts, epochs = scan["base_offset"], scan["last_offset"], scan["leader_epoch"]
        for row in scan.crc_failures()[:1].tolist():
            at = int(scan["position"][row])
            raise CorruptRecordError(f"{where}: the batch at offset {int(bases[row])} (byte {at}) fails its CRC "
                                     "check (corrupt in transit or at the leader)", at)
        if not count:
            return scan.metadata()
        expected = np.empty(count, np.int64)
        expected[0] = self.log_end_offset
        expected[1:] = lasts[:-1] + 1
        wrong = np.flatnonzero((bases != expected) | (lasts < bases))
        if len(wrong):
            row = int(wrong[0])
            raise UnexpectedAppendOffsetError(
                f"{where}: the batch at byte {int(scan['position'][row])} holds offsets {int(bases[row])}.."
                f"{int(lasts[row])}, but the log needs offset {int(expected[row])} next")
        before = self.epochs.epoch_for_offset(self.log_end_offset - 1) if self._has_batches() else None
        floor = np.maximum.accumulate(np.concatenate(([max(before or 0, 0)], epochs)))[:-1]
        fallen = np.flatnonzero(epochs < floor)
        if len(fallen):
            row = int(fallen[0])
            raise CorruptRecordError(f"{where}: the batch at offset {int(bases[row])} has partition leader epoch "
                                     f"{int(epochs[row])}, below {int(floor[row])} before it (epochs never fall)",
                                     int(scan["position"][row]))
        controls = np.flatnonzero(scan["is_control"] & ~np.isin(scan["control_type"], (0, 1)))
        if len(controls):
            row = int(controls[0])
            raise CorruptRecordError(f"{where}: the control batch at offset {int(bases[row])} is not one "
                                     "transaction marker", int(scan["position"][row]))
        view = memoryview(data).cast("B")
        positions, lengths = scan["position"].tolist(), scan["batch_length"].tolist()
        stamps, producers = scan["max_timestamp"].tolist(), scan["producer_id"].tolist()
        txns, control, types = (scan["is_transactional"].tolist(), scan["is_control"].tolist(),
                                scan["control_type"].tolist())
        appended = 0
        try:
            for row in range(count):
                size = lengths[row] + 12
                last = int(lasts[row])
                if row and self._roll_due(last, size, stamps[row]):
                    break  # the roll's snapshot comes at the next call (docstring)
                self._add(view[positions[row]:positions[row] + size], int(bases[row]), last, stamps[row],
                          producers[row], bool(txns[row]), int(types[row]) if control[row] else None,
                          int(epochs[row]), notify=False)
                appended += 1
        finally:
            if appended and self.on_append is not None:
                self.on_append(self)
        return replay_metadata(scan, np.arange(appended))

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at and past ``offset`` (Kafka's ``UnifiedLog.truncateTo``; a batch holding it goes
        whole): the segments after it, the bytes and index entries of the one holding it, ``.txnindex`` entries of
        markers at or past it, producer-state snapshots past it, leader epochs starting at or past it, and the
        open transactions that began at or past it (the caller reloads the producer state:
        :func:`idemcore.broker.recovery.reload_partition_state`). Below the first segment the log is truncated
        whole (:meth:`truncate_fully_and_start_at`). Durable before it returns (when the log fsyncs). False when
        ``offset`` is at or past the log end: only leader epochs starting at the log end go."""
        if type(offset) is not int or offset < 0:
            raise ValueError(f"{self.name}: cannot truncate to offset {offset!r}")
        if self._closed:
            raise IdemcoreError(f"{self.name}: the log is closed")
        if offset >= self.log_end_offset:
            # As Kafka's truncateTo: a leader epoch this broker began at the log end as leader, before another was
            # elected and without appending, goes anyway (else the follower's last fetched epoch keeps naming it and
            # the leader keeps answering the same divergence).
            self.epochs.truncate_from_end(self.log_end_offset)
            return False
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        k = self._segment_index(offset)
        segment = self.segments[k]
        position = segment.position_of(offset)
        cut = next(segment.headers(position, chunk_bytes=HEADER_BYTES), None)
        end = offset if cut is None else min(offset, cut.base_offset)
        start = min(self.log_start_offset, end)
        log.info("%s: truncating to offset %d (the log ended at %d)", self.name, end, self.log_end_offset)
        for listener in self.on_truncate:
            listener(self, end, start)
        self.truncations += 1
        self._undo = None
        # Epochs and snapshots first: after a crash here the loader gets entries back from the batches it scans
        # (from the lowered recovery point on), and ignores snapshots past the log end.
        self.epochs.truncate_from_end(end)
        for snapshot in self.snapshot_offsets():
            if snapshot > end:
                self.delete_snapshot(snapshot, f"past offset {end}, where the log was truncated")
        deleted = self._delete_segments(self.segments[k + 1:], f"past offset {end}, where the log was truncated")
        del self.segments[k + 1:]
        was_active = deleted == 0
        segment.log.truncate(position)
        txn_size = segment.txn_index.size
        self._reindex(segment, end)
        self.log_start_offset = start
        self._tidied_start = min(self._tidied_start, start)
        for producer_id, first in list(self._open_txns.items()):
            if first >= end:
                del self._open_txns[producer_id]
        self._last_position = 0
        if not was_active:
            self._segment_created = self._clock()
            self._recently_read = collections.deque(s for s in self._recently_read if s is not segment)
        self._truncated(deleted, position if was_active else 0, segment.txn_index.size != txn_size)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Remove every segment, snapshot and leader epoch and start the log empty at ``offset`` (Kafka's
        ``UnifiedLog.truncateFullyAndStartAt``: a follower far behind its leader's log start); durable before it
        returns (when the log fsyncs)."""
        if type(offset) is not int or offset < 0:
            raise ValueError(f"{self.name}: cannot start the log at offset {offset!r}")
        if self._closed:
            raise IdemcoreError(f"{self.name}: the log is closed")
        log.info("%s: truncating fully and starting at offset %d (the log was %d..%d)", self.name, offset,
                 self.segments[0].base_offset, self.log_end_offset)
        for listener in self.on_truncate:
            listener(self, min(offset, self.segments[0].base_offset, self.log_start_offset), offset)
        self.truncations += 1
        self._undo = None
        self.epochs.clear()
        for snapshot in self.snapshot_offsets():
            self.delete_snapshot(snapshot, f"the log was truncated fully to start at {offset}")
        deleted = self._delete_segments(self.segments, f"the log was truncated fully to start at {offset}")
        if self._directory is None:
            segment = LogSegment(offset, MemoryStore(), MemoryStore(), MemoryStore(), MemoryStore(),
                                 self.index_interval_bytes)
        else:
            segment = segment_files(self._directory, offset, self.index_interval_bytes, create=True)
            deleted += 1  # a new name in the directory
        self.segments = [segment]
        self.log_start_offset = self._tidied_start = offset
        self.cleaned_offset = min(self.cleaned_offset, offset)
        self._open_txns.clear()
        self._recently_read.clear()
        self._last_position = 0
        self._segment_created = self._clock()
        self._truncated(deleted, 0)

    def _delete_segments(self, segments: list[LogSegment], why: str) -> int:
        """Close ``segments`` and delete their files, newest first (a crash midway leaves a shorter log whose
        offsets still follow on); how many."""
        for segment in reversed(segments):
            segment.close()
            if self._directory is not None:
                delete_segment_files(self.name, self._directory, segment.base_offset, why)
        return len(segments)

    def _reindex(self, segment: LogSegment, end: int) -> None:
        """The segment was cut to its batches below ``end``: its indexes, ``.txnindex`` and append bookkeeping
        as they are for those batches (rebuilt as the loader rebuilds an active segment's)."""
        if self._directory is None:
            found = list(segment.headers())
            scan: SegmentScan | dict[str, np.ndarray] = {
                "position": np.array([h.position for h in found], np.int64),
                "batch_length": np.array([h.size - 12 for h in found], np.int64),
                "last_offset": np.array([h.last_offset for h in found], np.int64),
                "max_timestamp": np.array([h.max_timestamp for h in found], np.int64)}
        else:
            scan = scan_segment(Path(segment.log.name), verify_crc=False)
        rows = np.arange(len(scan["position"]))
        rebuild_indexes(self.name, segment, scan, rows, closed=False, fsync=self._fsync, warn=False)
        trim_txn_index(self.name, segment, end, self._fsync, warn=False)
        segment.next_offset = end
        segment.first_timestamp = int(scan["max_timestamp"][0]) if len(rows) else -1
        segment.forget_positions()
        segment.index_damaged = False

    def _truncated(self, new_files: int, synced: int, txn_cut: bool = False) -> None:
        """After a truncation: make it durable when the log fsyncs (the cut files, then the directory when files
        went or came), else count what the next flush must cover."""
        active = self.segments[-1]
        self._dir_changes += new_files
        self._aborts += txn_cut  # the next flush syncs the cut .txnindex
        if self._fsync and self._directory is not None:
            active.sync()
            self._aborts_synced = self._aborts
            if self._dir_dirty:
                _fsync_closed(self.directory_descriptor())
                self._dir_synced = self._dir_changes
            self.synced_bytes = active.size
            self._dirty = False
        else:
            self.synced_bytes = min(self.synced_bytes, synced)
            self._dirty = self._directory is not None

    def note_open_transaction(self, producer_id: int, first_offset: int) -> None:
        """At recovery: ``producer_id`` has a transaction open here since ``first_offset``, as the producer state
        says (the log's own bookkeeping starts from the state, as Kafka's loads ongoing transactions from it)."""
        self._open_txns.setdefault(producer_id, first_offset)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction here, else the log end (Kafka's LSO on a single
        broker, where the high watermark is the log end)."""
        # Never below the log start: retention may have deleted an open transaction's first batches (Kafka's
        # maybeIncrementFirstUnstableOffset).
        return max(min(self._open_txns.values(), default=self.log_end_offset), self.log_start_offset)

    def _waited_for_roll(self, segment: LogSegment, timestamp: int) -> int:
        """How long the active segment has been rolling, as segment.ms counts it: from its first batch's
        timestamp to this batch's, or since it was created when batches carry no timestamps."""
        first = segment.rolling_timestamp()
        if first >= 0:
            return timestamp - first
        return self._clock() - self._segment_created

    def _roll(self, base_offset: int) -> None:
        """Make a new active segment at ``base_offset``, after the old one's last time index entry and an
        fsync of its files (so recovery can refuse any damage in a rolled segment)."""
        assert self._directory is not None
        old = self.segments[-1]
        old.close_time_index()
        if self.flush_rolled is not None:
            self.flush_rolled(self, old, base_offset)
        else:
            old.sync()
            _fsync_closed(self.directory_descriptor())  # the old segment's own entry, if no flush made it durable
        old.close()
        if self.on_roll is not None:
            self.on_roll(self, base_offset)
        segment = segment_files(self._directory, base_offset, self.index_interval_bytes, create=True)
        segment.next_offset = base_offset
        self.segments.append(segment)
        self.synced_bytes = 0
        self._undo = None
        self._last_position = 0
        self._segment_created = self._clock()
        self._aborts_synced = self._aborts  # the old segment's entries went with its roll fsync
        self._dir_changes += 1

    @property
    def _dir_dirty(self) -> bool:
        return self._dir_changes != self._dir_synced

    @property
    def _txn_dirty(self) -> bool:
        return self._aborts != self._aborts_synced

    def directory_descriptor(self) -> int:
        """A new descriptor of the log's directory, to fsync so the names of its files are durable (Kafka's
        ``Utils.flushDir``)."""
        assert self._directory is not None
        return os.open(self._directory, os.O_RDONLY | os.O_DIRECTORY)

    def sync(self) -> None:
        """Make the batches appended since the last sync durable (acks=all): fsync, unless the log was opened
        with fsync=False (the appends are in the OS already)."""
        if self._dirty and self._fsync:
            self.flush()
        self._dirty = False

    def flush(self) -> None:
        """fsync the active segment whatever the fsync setting (a rolled segment is fsync'd at its roll: in place,
        or by a job queued on the flusher that may not have run yet), and before it its ``.txnindex`` when an ABORT
        wrote to it (a marker's entry is at least as durable as the marker; loading cuts entries past the log end),
        and after it the directory when it holds new files. The offset and time indexes are not: loading after a
        crash derives them again from the batches."""
        if self._directory is None:
            return
        active = self.segments[-1]
        if self._txn_dirty:  # first: a durable ABORT marker always has its durable entry
            active.txn_index.sync()
            self._aborts_synced = self._aborts
        active.log.sync()
        if self._dir_dirty:
            _fsync_closed(self.directory_descriptor())
            self._dir_synced = self._dir_changes
        self.synced_bytes = active.size
        self._dirty = False

    def flush_target(self) -> FlushTarget:
        """What an fsync off the event loop needs to make this log durable up to its end now: descriptors of
        their own (``os.dup``) on the active segment's ``.log`` and, when an ABORT wrote to it since the last flush,
        its ``.txnindex`` first (as :meth:`flush` orders them); older segments were handed over when they rolled
        (:attr:`flush_rolled`), and the directory last when a new segment's files were made since. The caller
        closes the descriptors."""
        active = self.segments[-1]
        descriptors: list[int | None] = []
        if self._directory is not None:
            try:
                if self._txn_dirty:
                    descriptors.append(active.txn_index.duplicate())
                descriptors.append(active.log.duplicate())
                if self._dir_dirty:
                    descriptors.append(self.directory_descriptor())
            except BaseException:  # none of those taken is left open
                for fd in descriptors:
                    if fd is not None:
                        os.close(fd)
                raise
        return FlushTarget(self.log_end_offset, active.base_offset, active.size,
                           tuple(fd for fd in descriptors if fd is not None), self._dir_changes, self._aborts,
                           self.truncations)

    def note_flushed(self, target: FlushTarget) -> None:
        """``target`` was fsync'd (off the loop): its bytes count as synced while its segment is the active one,
        and what it covered needs no in-place fsync again (nothing appended, rolled or aborted since)."""
        if self.segments[-1].base_offset != target.segment_base:
            return
        self.synced_bytes = max(self.synced_bytes, min(target.size, self.segments[-1].size))
        self._dir_synced = max(self._dir_synced, target.dir_changes)
        self._aborts_synced = max(self._aborts_synced, target.aborts)
        if target.end_offset == self.log_end_offset:  # (an ABORT or a new file since came with an append)
            self._dirty = False

    def position(self, offset: int) -> tuple[int, int]:
        """Where ``offset`` lies: the base offset of its segment and the byte of the batch holding it there (the
        segment's size at the log end); Kafka's ``LogOffsetMetadata``, which a delayed fetch compares."""
        segment = self.segments[self._segment_index(offset)]
        return segment.base_offset, (segment.size if offset >= segment.next_offset else segment.position_of(offset))

    def close(self) -> None:
        """A clean close: the active segment's last time index entry, everything fsync'd, the files closed."""
        if not self._closed and self._directory is not None:
            active = self.segments[-1]
            active.close_time_index()
            active.sync()
            self.synced_bytes = active.size
        self.abandon()

    def abandon(self) -> None:
        """Close the files as a dying process does: no flush; what reached the OS stays, nothing more."""
        self._closed = True
        for segment in self.segments:
            segment.close()

    def discard(self) -> None:
        """A log made for a topic whose creation failed, never to be served: closed, and its directory removed so
        that making the topic again is not refused over it (only a directory this log made and holding no batch;
        any other is only closed)."""
        self.abandon()
        if self._directory is not None and self._made_directory and not self._has_batches():
            shutil.rmtree(self._directory, ignore_errors=True)

    # --- leader epochs --------------------------------------------------------------------------------------

    def _check_epochs(self, rebuild: bool) -> None:
        """Bring the leader epochs in line with the log, as Kafka's LogLoader does: entries at or past the log end
        go, the first moves up to the log start. A checkpoint that was missing or damaged, or that leaves the log's
        first batch without an epoch, is rebuilt from the batches' leader epochs (each batch carries its own),
        reading every segment's headers."""
        self.epochs.truncate_from_end(self.log_end_offset)
        first = self._first_batch_offset()
        # The first offset a reader gets (None: none; a log emptied by DeleteRecords needs no epoch entry).
        readable = None if first is None or self.log_start_offset >= self.log_end_offset else max(
            first, self.log_start_offset)
        if not rebuild and readable is not None and (not self.epochs.entries or self.epochs.entries[0][1] > readable):
            log.warning("%s: %s gives no leader epoch to offset %d (%s): rebuilding it from the batches", self.name,
                        self.epochs.path, readable, self.epochs.entries)
            rebuild = True
        if rebuild and first is not None:
            self.epochs = LeaderEpochCache(self.epochs.path, self.epochs.fsync, entries=())
            found: list[tuple[int, int]] = []
            latest = -1
            for segment in self.segments:
                if segment.size:
                    scan = scan_segment(Path(segment.log.name), verify_crc=False)
                    starts = epoch_starts(scan["leader_epoch"], scan["base_offset"], latest)
                    if starts:
                        latest = starts[-1][0]
                    found += starts
            self.epochs.assign_all(found)
            log.warning("%s: rebuilt %s from the batches: %s", self.name, self.epochs.path, self.epochs.entries)
        self.epochs.truncate_from_start(self.log_start_offset)
        if self.epochs.path is not None and not self.epochs.path.exists():
            self.epochs.write()

    def _first_batch_offset(self) -> int | None:
        """The base offset of the log's first batch (None: it holds none)."""
        for segment in self.segments:
            header = next(segment.headers(0, chunk_bytes=HEADER_BYTES), None) if segment.size else None
            if header is not None:
                return header.base_offset
        return None

    # --- retention ------------------------------------------------------------------------------------------

    def retention_start(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int | None:
        """The log start offset retention moves to (Kafka's ``deleteRetentionMsBreachedSegments`` and
        ``deleteRetentionSizeBreachedSegments``), or None when no segment is due. Whole segments go, oldest
        first: those whose newest batch (their time index's largest timestamp) is older than ``retention_ms``
        (-1: no limit), and those the log can lose while staying at least ``retention_bytes`` large (-1: no
        limit). When every segment is due, the log rolls first so that the active segment is a new, empty one."""
        if self._directory is None or not self._has_batches():
            return None
        sizes = [segment.size for segment in self.segments]
        due = 0
        excess = sum(sizes) - retention_bytes if retention_bytes >= 0 else -1
        # Any segment may go, an empty one too (compaction can empty one), but not an empty active segment.
        while due < len(sizes) and not (due == len(sizes) - 1 and sizes[due] == 0):
            expired = retention_ms >= 0 and now_ms - self._newest_timestamp(self.segments[due]) > retention_ms
            too_big = excess >= sizes[due]
            if not (expired or too_big):
                break
            excess -= sizes[due]
            due += 1
        if due == 0:
            return None
        if due == len(sizes):
            self._roll(self.log_end_offset)
        return self.segments[due].base_offset

    def _newest_timestamp(self, segment: LogSegment) -> int:
        """The largest batch timestamp of a segment; where batches carry none, its file's modification time
        (Kafka's ``LogSegment.largestTimestamp``)."""
        stamp = segment.largest_timestamp()
        return stamp if stamp >= 0 else self.modified_ms(segment.base_offset)

    def modified_ms(self, base: int) -> int:
        assert self._directory is not None
        return os.stat(self._directory / offset_file_name(base, LOG_SUFFIX)).st_mtime_ns // 1_000_000

    def moves_log_start_to(self, offset: object) -> bool:
        """Whether raising the log start offset to ``offset`` moves it (False: at or below the start); ValueError
        for an offset that is not an int or lies past the log end. Nothing changes: a caller moving several logs
        asks each first (:meth:`LogManager.increment_log_start_offsets`)."""
        if type(offset) is not int or offset > self.log_end_offset:
            raise ValueError(f"{self.name}: the log start offset cannot move to {offset!r}, past the log end "
                             f"{self.log_end_offset}")
        return offset > self.log_start_offset

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset to ``offset`` (Kafka's ``UnifiedLog.maybeIncrementLogStartOffset``): never
        lower (an offset at or below the start changes nothing: False), never past the log end (ValueError: the
        high watermark on one broker). The start may fall inside a segment, even inside a batch: reads below it are
        refused, the records below it are gone to every reader. Only memory changes: the broker records the start
        in log-start-offset-checkpoint, then :meth:`delete_start_breached_segments` deletes files."""
        if not self.moves_log_start_to(offset):
            return False
        log.info("%s: the log start offset moves from %d to %d", self.name, self.log_start_offset, offset)
        self.log_start_offset = offset
        return True

    def delete_start_breached_segments(self) -> int:
        """Delete the segments whose successor starts at or below the log start offset, with their indexes
        (Kafka's ``deleteLogStartOffsetBreachedSegments``: the active segment always stays), the snapshots below
        the start, and move ``leader-epoch-checkpoint``'s first entry to the start (Kafka's
        ``LeaderEpochFileCache.truncateFromStart``). Returns how many segments went. Cheap when there is nothing to
        do: the broker's retention check calls it for every log, as Kafka's does (a segment rolled at or below the
        start after it moved goes then)."""
        breached = len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset
        if not breached and self._tidied_start == self.log_start_offset:
            return 0
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            segment = self.segments.pop(0)
            segment.close()
            deleted += 1
            if self._directory is not None:
                delete_segment_files(self.name, self._directory, segment.base_offset, "below the log start offset")
        for offset in self.snapshot_offsets():
            if offset < self.log_start_offset:
                self.delete_snapshot(offset, "below the log start offset")
        self.epochs.truncate_from_start(self.log_start_offset)
        self._tidied_start = self.log_start_offset
        return deleted

    # --- compaction (the cleaner rewrites segments through these) ---------------------------------------------

    @property
    def directory(self) -> Path | None:
        return self._directory

    def cleanable_offset(self) -> int | None:
        """Where a compaction would stop: the base of the segment holding the first offset it must not touch,
        the active segment or an open transaction (Kafka's first uncleanable offset); the offset the broker
        records before cleaning. None when no whole segment lies below it (or the log is in memory)."""
        if self._directory is None:
            return None
        bases = self.segment_bases
        limit = min(bases[-1], self.last_stable_offset)
        stop = max(base for base in bases if base <= limit)
        return None if stop <= bases[0] else stop

    # --- producer-state snapshots ---------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """The offsets of the ``.snapshot`` files beside the segments, oldest first."""
        if self._directory is None:
            return []
        return sorted(parsed[0] for parsed in map(parse_offset_file, os.listdir(self._directory))
                      if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX)

    def snapshot_path(self, offset: int) -> Path:
        assert self._directory is not None, "a log kept in memory has no snapshots"
        return self._directory / offset_file_name(offset, SNAPSHOT_SUFFIX)

    def write_snapshot(self, offset: int, data: bytes) -> None:
        """Put the snapshot ``data`` (the producer state at ``offset``) beside the segments, durably, and keep
        only the newest two (Kafka keeps those of the recent segments: recovery replays from the newest valid
        one)."""
        write_file_atomically(self.snapshot_path(offset), data)
        for old in self.snapshot_offsets()[:-2]:
            self.delete_snapshot(old, "older than the newest two")

    def delete_snapshot(self, offset: int, why: str) -> None:
        log.info("%s: deleting the snapshot %s (%s)", self.name, self.snapshot_path(offset), why)
        self.snapshot_path(offset).unlink(missing_ok=True)
