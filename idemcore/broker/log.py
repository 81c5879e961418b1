"""A partition's log, stored as Kafka stores it: segments of RecordBatch v2 batches with their indexes.

``PartitionLog`` keeps a partition's batches in offset order (in memory, and with ``directory`` on disk).
``directory`` (the broker's ``<data_dir>/<topic>-<partition>/``) holds, per segment:

- ``<base offset, 20 digits>.log``: the batches, RecordBatch v2 (``record.v2.encode_record_batch``):
  uncompressed, partition leader epoch 0, CREATE_TIME, every record's timestamp the batch's max timestamp (the
  in-process ``RecordBatch`` carries only that one), keys, values and headers;
- ``.index``: sparse, 8-byte big-endian entries (offset relative to the segment's base i32, file position i32),
  one when more than ``index_interval_bytes`` were appended since the last entry, at the batch's last offset and
  start position, as Kafka's ``LogSegment.append`` writes them;
- ``.timeindex``: 12-byte entries (largest timestamp so far i64, relative offset of its batch's last record i32),
  beside each ``.index`` entry when the timestamp grew, and one last entry when the segment rolls.

Beside the segments: ``<offset>.snapshot``, the producer state at that offset (written by the broker, which
owns the state, through :meth:`PartitionLog.write_snapshot` when a segment rolls (``on_roll``) and at a clean
close; the newest two are kept), and ``leader-epoch-checkpoint`` (epoch 0 from the log's first offset: one
broker, no leader changes; rewritten at start when missing or different).

Segments roll by size (``segment.bytes``: a batch that would take the active segment past it starts a new one)
and by time (``segment.ms``: a batch whose timestamp is more than that after the segment's first batch's, or,
without timestamps, when the segment is that old by the clock; Kafka's ``LogSegment.shouldRoll`` without jitter).

**Differences from Kafka**: the indexes are appended as batches are, not preallocated (``segment.index.bytes``)
and trimmed at roll: readers (``record.kafka_files``) accept both. The index entries are a function of the
segment's batches alone, so recovery compares each index with the one the segment implies and rewrites it when
it is missing or differs (Kafka rebuilds indexes it finds corrupt too); that is a log line, not an error.

Recovery (rules.md §2): the segments are read in offset order, each batch's CRC checked and its records
decoded. A segment rolls only after it was fsync'd (index files too), so anything wrong in a segment that is
not the last is damage from outside, refused whatever the recovery point. In the last segment, a batch cut
short or failing its CRC beyond ``recovery_point`` is a torn tail: cut (``truncated_bytes``). Below it, a log
ending below it, a missing segment, a segment whose name disagrees with its first batch, or offsets that skip or
repeat raise :class:`LogCorruptionError` naming the file and the byte position. A data directory in idemcore's
earlier frame format (a file named ``log``) is refused with a message saying so.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple

from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.protocol.codes import ControlType
from idemcore.protocol.constants import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_MS,
    INT32_MAX,
)
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files.names import (
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_file_name,
    parse_offset_file,
)
from idemcore.record.kafka_files.writers import (
    TEMPORARY_SUFFIX,
    encode_leader_epoch_checkpoint,
    encode_txn_index_entry,
    write_file_atomically,
)
from idemcore.record.stored import StoredBatch
from idemcore.record.v2 import (
    BatchHeader,
    CorruptRecordError,
    Record,
    decode_batch,
    encode_batch,
    encode_end_txn_marker,
    encode_record_batch,
    parse_end_txn_marker,
    record_batch_from,
    set_base_offset,
    set_partition_leader_epoch,
)

log = logging.getLogger(__name__)

#: Where the broker keeps the recovery points (named in messages; see ``broker.LOG_END_CHECKPOINT``).
CHECKPOINT_HINT = "<data_dir>/log-end-offsets.json and <data_dir>/written-log-ends"
#: The partition leader epoch written into every batch (one broker, no leader changes).
LEADER_EPOCH = 0
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class LogCorruptionError(IdemcoreError):
    """A log file holds something that is neither a valid batch nor a torn tail."""


#: What _IndexState.save returns: enough to take an append back.
_Saved = tuple[int, int, int, int, int | None, int, int, int]


class AbortedTxn(NamedTuple):
    """One aborted transaction, as its ``.txnindex`` entry records it: its first offset, its ABORT marker's
    offset, its producer, and the last stable offset right after the marker."""

    first_offset: int
    last_offset: int
    producer_id: int
    last_stable_offset: int

    def encoded(self) -> bytes:
        return encode_txn_index_entry(self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def _complete_txn(open_txns: dict[int, int], producer_id: int, base_offset: int, is_transactional: bool,
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
    return AbortedTxn(first, base_offset, producer_id, min(open_txns.values(), default=base_offset + 1))


class _IndexState:
    """What the next index entries depend on: Kafka's ``bytesSinceLastIndexEntry``, ``maxTimestampSoFar`` and
    its offset, and the last ``.timeindex`` timestamp. ``offset``/``time``: the index bytes so far."""

    __slots__ = ("base", "bytes_since", "interval", "last_time_ts", "max_ts", "max_ts_offset", "offset", "time", "txn")

    def __init__(self, base: int, interval: int) -> None:
        self.base = base
        self.interval = interval
        self.bytes_since = 0
        self.max_ts = -1
        self.max_ts_offset = base
        self.last_time_ts: int | None = None
        self.offset = bytearray()
        self.time = bytearray()
        self.txn = bytearray()  # .txnindex entries (aborted transactions completed in this segment)

    def add(self, position: int, size: int, last_offset: int, max_timestamp: int) -> tuple[bytes, bytes]:
        """Account for the batch of ``size`` bytes at ``position``; the index bytes it adds (often none)."""
        if max_timestamp > self.max_ts:
            self.max_ts, self.max_ts_offset = max_timestamp, last_offset
        offset_entry = time_entry = b""
        if self.bytes_since > self.interval:
            offset_entry = _OFFSET_ENTRY.pack(last_offset - self.base, position)
            time_entry = self._time_entry()
            self.bytes_since = 0
        self.bytes_since += size
        self.offset += offset_entry
        self.time += time_entry
        return offset_entry, time_entry

    def final(self) -> bytes:
        """The ``.timeindex`` entry Kafka adds when the segment stops being the active one (may be none)."""
        entry = self._time_entry()
        self.time += entry
        return entry

    def _time_entry(self) -> bytes:
        if self.last_time_ts is not None and self.max_ts <= self.last_time_ts:
            return b""
        if self.last_time_ts is None and self.max_ts < 0:
            return b""
        self.last_time_ts = self.max_ts
        return _TIME_ENTRY.pack(self.max_ts, self.max_ts_offset - self.base)

    def save(self) -> _Saved:
        return (self.base, self.bytes_since, self.max_ts, self.max_ts_offset, self.last_time_ts, len(self.offset),
                len(self.time), len(self.txn))

    def restore(self, saved: _Saved) -> None:
        (self.base, self.bytes_since, self.max_ts, self.max_ts_offset, self.last_time_ts, offset_len,
         time_len, txn_len) = saved
        del self.offset[offset_len:]
        del self.time[time_len:]
        del self.txn[txn_len:]


class PartitionLog:
    """Batches of one topic-partition, in offset order; with ``directory``, also written there as Kafka
    segments (module docstring). ``recovery_point``: the log end when the broker last started or closed
    cleanly (its checkpoint), or when it last wrote the log in this boot (its written ends: a killed
    process's writes stay in the OS). A log ending below it was damaged outside the broker and is refused; a
    bad batch beyond it is the torn tail of a crash and is cut (Kafka's recovery point plays the same part).

    ``segment_bytes``, ``segment_ms`` and ``index_interval_bytes`` are Kafka's ``segment.bytes``,
    ``segment.ms`` and ``index.interval.bytes``; ``clock`` gives the time in ms (for ``segment.ms`` of
    batches without timestamps).
    """

    def __init__(self, topic: str, partition: int, directory: Path | None = None, fsync: bool = True,
                 recovery_point: int = 0, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 segment_ms: int = DEFAULT_SEGMENT_MS, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 clock: Callable[[], int] | None = None, log_start_offset: int = 0, cleaned_offset: int = 0,
                 cut_torn_tail: bool = True) -> None:
        for name, value, low, high in (("segment_bytes", segment_bytes, 1, INT32_MAX),
                                       ("segment_ms", segment_ms, 1, 2**63 - 1),
                                       ("index_interval_bytes", index_interval_bytes, 0, INT32_MAX)):
            if type(value) is not int or not low <= value <= high:
                raise ValueError(f"{name} must be an integer of at least {low} and at most {high}, got {value!r}")
        self.topic = topic
        self.partition = partition
        self.batches: list[StoredBatch] = []
        #: The first offset the log holds (or will hold): raised by retention, recorded by the broker in
        #: log-start-offset-checkpoint before the segments below it are deleted.
        self.log_start_offset = log_start_offset
        #: Where the last compaction stopped (the active segment's base then): below it, records and whole
        #: batches may be missing, as compaction leaves them; recorded by the broker in cleaner-offset-checkpoint.
        self.cleaned_offset = cleaned_offset
        self.truncated_bytes = 0
        #: Bytes of the active segment known to be on disk (fsync'd); every older segment is, whole.
        self.synced_bytes = 0
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.index_interval_bytes = index_interval_bytes
        self._clock = clock if clock is not None else wall_clock_ms
        self._directory = directory
        self._fsync = fsync
        self._closed = False
        self._dirty = False
        self._last_position = 0
        # Enough to take the last append back: where it started, the index state, its producer's open txn.
        self._undo: tuple[int, _Saved, int, int | None] | None = None
        #: Base offsets of the segments, oldest first; the last is the active one.
        self.segment_bases: list[int] = []
        #: Bytes of each segment, as segment_bases (the last one: the active segment's, kept in _size too).
        self._segment_sizes: list[int] = []
        self._log: BinaryIO | None = None
        self._index: BinaryIO | None = None
        self._time_index: BinaryIO | None = None
        self._state = _IndexState(0, index_interval_bytes)
        self._size = 0  # bytes of the active segment
        # What segment.ms measures from: the active segment's first batch's timestamp (-1: none), or its
        # creation by the clock (Kafka's rollingBasedTimestamp and created).
        self._segment_first_timestamp = -1
        self._segment_created = self._clock()
        #: Called with the log and the new segment's base offset when a segment rolls, before the new segment
        #: exists (the broker writes the producer-state snapshot at that offset).
        self.on_roll: Callable[[PartitionLog, int], None] | None = None
        self._epochs_written = False
        #: Producer id -> first offset of its open transaction here (Kafka's ongoing transactions).
        self._open_txns: dict[int, int] = {}
        #: The aborted transactions the log holds, ordered by ABORT marker offset (what its ``.txnindex`` files
        #: hold, in memory): a read_committed fetch finds those overlapping its range by bisection.
        self._aborted: list[AbortedTxn] = []
        self._txn_index: BinaryIO | None = None  # the active segment's .txnindex, opened at its first entry
        #: False when nothing says this broker wrote the directory (a first start on files from elsewhere): a bad
        #: tail is then refused, never cut, since it may be data another writer left.
        self._cut_torn_tail = cut_torn_tail
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._recover(directory, recovery_point)

    @property
    def log_end_offset(self) -> int:
        if not self.batches:
            return self.log_start_offset
        end = self.batches[-1].next_offset
        # Never below the active segment's base: the segment's name is where the log was when it rolled.
        return max(end, self.segment_bases[-1]) if self.segment_bases else end

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def last_append_position(self) -> int:
        """The byte (of the active segment) at which the last appended batch starts: a crash mid-write tears
        from there."""
        return self._last_position

    def records(self) -> Iterator[tuple[int, bytes | None, bytes | None, RecordBatch]]:
        """Every record as ``(offset, key, value, batch)``, in offset order."""
        for stored in self.batches:
            batch = stored.batch
            keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
            for offset, key, value in zip(stored.offsets(), keys, batch.values, strict=True):
                yield offset, key, value, batch

    # --- recovery -------------------------------------------------------------------------------------------

    def _recover(self, directory: Path, recovery_point: int) -> None:
        if (directory / "log").exists():
            raise LogCorruptionError(f"{self.name}: {directory / 'log'} is in idemcore's earlier frame format, "
                                     "which this broker no longer reads (it stores Kafka segments): start from an "
                                     "empty data_dir, or read this one with an earlier idemcore")
        names = os.listdir(directory)
        for name in names:
            if name.endswith(TEMPORARY_SUFFIX):  # written, not yet renamed into place: never in use
                log.info("%s: removing %s, left by a write cut short", self.name, directory / name)
                os.unlink(directory / name)
        bases = sorted(parsed[0] for parsed in map(parse_offset_file, names)
                       if parsed is not None and parsed[1] == LOG_SUFFIX)
        start = self.log_start_offset
        while len(bases) > 1 and bases[1] <= start:  # below the log start: a retention cut short, finished here
            self._delete_segment_files(bases.pop(0), "below the log start offset")
        if not bases:
            if recovery_point > start:
                raise LogCorruptionError(
                    f"{self.name}: {directory / offset_file_name(start, LOG_SUFFIX)} is missing (the directory holds "
                    f"no segment), but held offsets up to {recovery_point - 1} when the broker last started, closed "
                    f"or wrote it. Restore it, or remove {CHECKPOINT_HINT} to accept the loss")
            bases = [start]
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                (directory / offset_file_name(start, suffix)).touch()
        expected = start
        valid = 0
        for number, base in enumerate(bases):
            path = directory / offset_file_name(base, LOG_SUFFIX)
            last = number == len(bases) - 1
            if base != expected:  # compaction keeps each segment's last batch: its boundaries stay exact
                what = (f"{directory / offset_file_name(expected, LOG_SUFFIX)} is missing" if base > expected
                        else "segments overlap")
                raise LogCorruptionError(
                    f"{self.name}: {path} starts at offset {base} where offset {expected} belongs: {what} (deleted "
                    f"or copied outside the broker). Restore it, or remove {CHECKPOINT_HINT} and the partition to "
                    "start over")
            data = path.read_bytes()
            state = _IndexState(base, self.index_interval_bytes)
            position, expected, bad = self._read_segment(path, data, expected, state)
            if bad is not None and (not last or expected < recovery_point):
                if not last:
                    why = "a rolled segment (fsync'd before the next one started) is damaged"
                else:
                    why = (f"the log ends at offset {expected}, but held {recovery_point} when the broker last "
                           "started, closed or wrote it (damaged outside the broker)")
                raise LogCorruptionError(f"{self.name}: {path} is corrupt at byte {position}: {bad}; {why}. "
                                         f"Restore it, or remove {CHECKPOINT_HINT} to accept the loss")
            if not last and expected < bases[number + 1]:
                # The segment ends early, or the one after it is gone: name both files it could be.
                raise LogCorruptionError(
                    f"{self.name}: {path} ends at offset {expected}, but the next segment starts at offset "
                    f"{bases[number + 1]}: {directory / offset_file_name(expected, LOG_SUFFIX)} is missing or "
                    f"{path} is shorter (deleted or cut outside the broker). Restore it, or remove "
                    f"{CHECKPOINT_HINT} and the partition to start over")
            if last and expected < recovery_point:
                raise LogCorruptionError(
                    f"{self.name}: {path} is shorter, or {directory / offset_file_name(expected, LOG_SUFFIX)} is "
                    f"missing: the log ends at offset {expected}, but held {recovery_point} when the broker last "
                    "started, closed or wrote it (deleted, cut or damaged outside the broker). "
                    f"Restore it, or remove {CHECKPOINT_HINT} to accept the loss")
            if not last:
                state.final()
            valid = position
            self._check_index(path.with_suffix(INDEX_SUFFIX), bytes(state.offset), "offset index")
            self._check_index(path.with_suffix(TIME_INDEX_SUFFIX), bytes(state.time), "time index")
            self._check_index(path.with_suffix(TXN_INDEX_SUFFIX), bytes(state.txn), "transaction index",
                              optional=True)
            self._state = state
            self.segment_bases.append(base)
            self._segment_sizes.append(position)
        active = directory / offset_file_name(self.segment_bases[-1], LOG_SUFFIX)
        # Unbuffered: every append reaches the OS (page cache) before the broker answers, whatever the acks.
        self._log = open(active, "ab", buffering=0)
        if self._log.tell() != valid and not self._cut_torn_tail:
            size = self._log.tell()
            self._log.close()
            self._log = None
            raise LogCorruptionError(
                f"{self.name}: {active} holds {size - valid} bytes after byte {valid} that are not a valid batch, and "
                f"nothing says this broker wrote them (no {CHECKPOINT_HINT}): not cut. Move the file aside, or "
                f"truncate it to {valid} bytes to drop them")
        if self._log.tell() != valid:
            self.truncated_bytes = self._log.tell() - valid
            log.warning("%s: dropping a torn tail of %d bytes of %s after offset %d (a write cut short by a crash)",
                        self.name, self.truncated_bytes, active, self.log_end_offset - 1)
            self._log.truncate(valid)
            self._log.seek(valid)
        self._size = valid
        self._segment_first_timestamp = next((stored.batch.max_timestamp for stored in self.batches
                                              if stored.base_offset >= self.segment_bases[-1]), -1)
        self._index = open(active.with_suffix(INDEX_SUFFIX), "ab", buffering=0)
        self._time_index = open(active.with_suffix(TIME_INDEX_SUFFIX), "ab", buffering=0)
        self._check_epochs(directory)

    def _read_segment(self, path: Path, data: bytes, expected: int, state: _IndexState
                      ) -> tuple[int, int, str | None]:
        """Decode the batches of one segment into ``self.batches``: ``(where the valid bytes end, the next
        offset, what is wrong at that position or None)``. Offsets that skip or repeat raise."""
        position = 0
        while position < len(data):
            try:
                header, records = decode_batch(data, position, check_crc=True)
            except CorruptRecordError as exc:
                return position, expected, str(exc)
            if header.partition_leader_epoch != LEADER_EPOCH:  # outside the CRC: this broker only writes its own
                return position, expected, (f"partition leader epoch {header.partition_leader_epoch}, but this "
                                            f"broker writes {LEADER_EPOCH}")
            if header.base_offset != expected and not expected < header.base_offset <= self.cleaned_offset:
                # Never a torn write (that fails its length or CRC): batches lost or repeated, or a damaged base
                # offset (outside the CRC). Below the cleaned offset, compaction removes whole batches.
                raise LogCorruptionError(f"{self.name}: {path} is corrupt at byte {position}: it holds offset "
                                         f"{header.base_offset} where offset {expected} belongs (batches missing or "
                                         "repeated, or a damaged base offset)")
            stored = self._decoded(path, position, header, records,
                                   data[position:position + header.size_in_bytes])
            self.batches.append(stored)
            control_type = None if stored.control is None else stored.control[0]
            aborted = _complete_txn(self._open_txns, header.producer_id, header.base_offset,
                                    header.is_transactional, control_type)
            if aborted is not None:
                state.txn += aborted.encoded()
                self._aborted.append(aborted)
            state.add(position, header.size_in_bytes, header.last_offset, header.max_timestamp)
            expected = header.next_offset
            position += header.size_in_bytes
        return position, expected, None

    def _decoded(self, path: Path, position: int, header: BatchHeader, records: Sequence[Record],
                 raw: bytes) -> StoredBatch:
        """A decoded batch as the log keeps it (``raw``: its bytes): data (its offset deltas when compaction
        left gaps), or a transaction marker; anything else in a control batch is refused, naming where it is."""
        if not header.is_control:
            return _stored(self.topic, self.partition, header, records, raw)
        try:
            marker = parse_end_txn_marker(records[0]) if len(records) == 1 else None
        except CorruptRecordError:
            marker = None
        if marker is None:
            raise LogCorruptionError(f"{self.name}: {path} holds a control batch at byte {position} (offset "
                                     f"{header.base_offset}) that is not one transaction marker")
        return StoredBatch(header.base_offset, _marker_batch(self.topic, self.partition, header), None, None,
                           (int(marker.control_type), marker.coordinator_epoch), raw)

    def _check_index(self, path: Path, wanted: bytes, what: str, optional: bool = False) -> None:
        """Rewrite the index at ``path`` when it is missing or is not the one its segment implies.
        ``optional``: a file written only once it has an entry (Kafka's .txnindex): absent when it has none."""
        try:
            found: bytes | None = path.read_bytes()
        except FileNotFoundError:
            found = None
        if found == wanted or (optional and not wanted and not found):
            return
        if optional and not wanted:
            log.warning("%s: removing the %s %s: its segment aborts no transaction", self.name, what, path)
            path.unlink()
            return
        log.warning("%s: rebuilding the %s %s from its segment (%s)", self.name, what, path,
                    "missing" if found is None else f"{len(found)} bytes, {len(wanted)} expected")
        write_file_atomically(path, wanted, self._fsync)

    def _epochs(self) -> bytes:
        """The leader-epoch-checkpoint this log implies: epoch 0 from its start offset, once it holds a batch
        (compaction may have emptied the first batches; retention moves the start)."""
        return encode_leader_epoch_checkpoint([(LEADER_EPOCH, self.log_start_offset)] if self.batches else [])

    def _check_epochs(self, directory: Path) -> None:
        """Rewrite ``leader-epoch-checkpoint`` when it is missing or not what the log implies (derived data,
        as the indexes are)."""
        path = directory / LEADER_EPOCH_CHECKPOINT
        wanted = self._epochs()
        try:
            found: bytes | None = path.read_bytes()
        except FileNotFoundError:
            found = None
        if found != wanted:
            if found is not None:
                log.warning("%s: rewriting %s (%r, expected %r)", self.name, path, found[:40], wanted)
            write_file_atomically(path, wanted, self._fsync)
        self._epochs_written = bool(self.batches)

    # --- retention ------------------------------------------------------------------------------------------

    def retention_start(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int | None:
        """The log start offset retention moves to (Kafka's ``deleteRetentionMsBreachedSegments`` and
        ``deleteRetentionSizeBreachedSegments``), or None when no segment is due. Whole segments go, oldest
        first: those whose newest batch is older than ``retention_ms`` (-1: no limit), and those the log can
        lose while staying at least ``retention_bytes`` large (-1: no limit). When every segment is due, the
        log rolls first so that the active segment is a new, empty one (as Kafka rolls)."""
        if self._directory is None or not self.batches:
            return None
        sizes = list(self._segment_sizes)
        due = 0
        excess = sum(sizes) - retention_bytes if retention_bytes >= 0 else -1
        newest = self._newest_timestamps()
        # Any segment may go, an empty one too (compaction can empty one), but not an empty active segment.
        while due < len(sizes) and not (due == len(sizes) - 1 and sizes[due] == 0):
            expired = retention_ms >= 0 and now_ms - newest[due] > retention_ms
            too_big = excess >= sizes[due]
            if not (expired or too_big):
                break
            excess -= sizes[due]
            due += 1
        if due == 0:
            return None
        if due == len(sizes):
            self._roll(self.log_end_offset)
        return self.segment_bases[due]

    def _newest_timestamps(self) -> list[int]:
        """The largest batch timestamp of each segment; where batches carry none (negative), or there are no
        batches, the segment file's modification time (Kafka's ``LogSegment.largestTimestamp``)."""
        newest = [-1] * len(self.segment_bases)
        segment = 0
        for stored in self.batches:
            while segment + 1 < len(self.segment_bases) and stored.base_offset >= self.segment_bases[segment + 1]:
                segment += 1
            newest[segment] = max(newest[segment], stored.batch.max_timestamp)
        return [stamp if stamp >= 0 else self._modified_ms(base) for stamp, base in zip(newest, self.segment_bases,
                                                                                       strict=True)]

    def _modified_ms(self, base: int) -> int:
        assert self._directory is not None
        return os.stat(self._directory / offset_file_name(base, LOG_SUFFIX)).st_mtime_ns // 1_000_000

    def delete_segments_below(self, start: int) -> None:
        """Move the log start to ``start`` (a segment's base offset) and delete the segments below it, with
        their indexes and the snapshots below it. The broker records the new log start durably first."""
        if start not in self.segment_bases:
            raise ValueError(f"{self.name}: {start} is not the base offset of a segment ({self.segment_bases})")
        while self.segment_bases[0] < start:
            self._delete_segment_files(self.segment_bases.pop(0), "retention")
            self._segment_sizes.pop(0)
        keep = next((k for k, stored in enumerate(self.batches) if stored.base_offset >= start), len(self.batches))
        del self.batches[:keep]
        # Aborted transactions whose marker went with the segments (those ending later stay, as in the .txnindex
        # of the segment holding their marker, even when their first offset is now below the log start).
        del self._aborted[:bisect.bisect_left(self._aborted, start, key=lambda txn: txn.last_offset)]
        self.log_start_offset = start
        for offset in self.snapshot_offsets():
            if offset < start:
                self.delete_snapshot(offset, "below the log start offset")
        assert self._directory is not None
        write_file_atomically(self._directory / LEADER_EPOCH_CHECKPOINT, self._epochs(), self._fsync)
        self._epochs_written = bool(self.batches)

    def _delete_segment_files(self, base: int, why: str) -> None:
        assert self._directory is not None
        log.info("%s: deleting the segment %s (%s)", self.name, self._directory / offset_file_name(base, LOG_SUFFIX),
                 why)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            (self._directory / offset_file_name(base, suffix)).unlink(missing_ok=True)

    # --- compaction -----------------------------------------------------------------------------------------

    def cleanable_offset(self) -> int | None:
        """Where a compaction would stop: the base of the segment holding the first offset it must not touch,
        the active segment or an open transaction (Kafka's first uncleanable offset); the offset the broker
        records before cleaning. None when no whole segment lies below it (or the log is in memory)."""
        if self._directory is None:
            return None
        limit = min(self.segment_bases[-1], self.last_stable_offset)
        stop = max(base for base in self.segment_bases if base <= limit)
        return None if stop <= self.segment_bases[0] else stop

    def clean(self, now_ms: int, delete_retention_ms: int) -> int:
        """Compact the segments before the active one (Kafka's log cleaner): keep the newest record of each key
        among them, drop tombstones (null values) in batches older than ``delete_retention_ms``; returns the
        bytes removed. Records without a key go (Kafka counts them invalid and drops them). Batch base offsets,
        last offset deltas and producer metadata stay (a batch keeps its producer's sequence range); a batch
        left empty is dropped unless it is its producer's last in the log or its segment's last (Kafka keeps the
        last batch of a cleaning round; keeping each segment's keeps segment boundaries exact, so recovery still
        refuses a segment cut or lost). Transactional and control batches are kept as they are, and nothing at or
        after an open transaction is cleaned. Each segment is rewritten whole beside itself, fsync'd and renamed
        over the old one (``write_file_atomically``); its indexes are derived again. The broker records
        :meth:`cleanable_offset` first (cleaner-offset-checkpoint).

        **Differences from Kafka**: the key map covers every segment below the stop (Kafka's covers a dirty
        section chosen by ``min.cleanable.dirty.ratio``); segments are not merged; a tombstone's age is its
        batch's timestamp, or its segment file's time when it has none (Kafka 3.x writes a delete horizon into
        the batch at the first cleaning); aborted transactional data is not removed."""
        stop = self.cleanable_offset()
        if stop is None:
            return 0
        assert self._directory is not None
        latest: dict[bytes, int] = {}  # key -> offset of its newest record below stop
        last_of_producer: dict[int, int] = {}  # producer id -> base offset of its last batch in the log
        for stored in self.batches:
            batch = stored.batch
            if batch.producer_id >= 0:
                last_of_producer[batch.producer_id] = stored.base_offset
            if stored.base_offset < stop and batch.keys is not None and not batch.is_transactional:
                for offset, key in zip(stored.offsets(), batch.keys, strict=True):
                    if key is not None:
                        latest[key] = offset
        horizon = now_ms - delete_retention_ms
        removed = 0
        for number, base in enumerate(self.segment_bases[:self.segment_bases.index(stop)]):
            removed += self._clean_segment(number, base, latest, last_of_producer, horizon)
        self.cleaned_offset = stop
        return removed

    def _clean_segment(self, number: int, base: int, latest: dict[bytes, int], last_of_producer: dict[int, int],
                       horizon: int) -> int:
        assert self._directory is not None
        path = self._directory / offset_file_name(base, LOG_SUFFIX)
        data = path.read_bytes()
        segment_time = self._modified_ms(base)  # the age of batches without a timestamp
        out = bytearray()
        kept: list[StoredBatch] = []
        state = _IndexState(base, self.index_interval_bytes)
        position = 0
        while position < len(data):
            header, records = decode_batch(data, position, check_crc=True)
            raw = memoryview(data)[position:position + header.size_in_bytes]
            position += header.size_in_bytes
            retained = records
            if not (header.is_control or header.is_transactional):
                age = header.max_timestamp if header.max_timestamp >= 0 else segment_time
                retained = [r for r in records if r.key is not None
                            and latest.get(r.key) == header.base_offset + r.offset_delta
                            and not (r.value is None and age < horizon)]
            if len(retained) != len(records):
                needed = position == len(data) or (
                    header.producer_id >= 0 and last_of_producer.get(header.producer_id) == header.base_offset)
                if not retained and not needed:
                    continue  # nothing left, and neither its producer's state nor its segment's end needs it
                raw = memoryview(encode_batch(
                    retained, base_offset=header.base_offset, base_timestamp=header.base_timestamp,
                    max_timestamp=header.max_timestamp, producer_id=header.producer_id,
                    producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
                    is_transactional=header.is_transactional, timestamp_type=header.timestamp_type,
                    partition_leader_epoch=header.partition_leader_epoch,
                    last_offset_delta=header.last_offset_delta))
            state.add(len(out), len(raw), header.last_offset, header.max_timestamp)
            out += raw
            kept.append(self._decoded(path, position, header, retained, bytes(raw)))
        if len(out) == len(data):
            return 0
        state.final()
        write_file_atomically(path, out)  # the whole cleaned segment or the old one: never half of each
        write_file_atomically(path.with_suffix(INDEX_SUFFIX), bytes(state.offset))
        write_file_atomically(path.with_suffix(TIME_INDEX_SUFFIX), bytes(state.time))
        end = self.segment_bases[number + 1]
        first = next(k for k, stored in enumerate(self.batches) if stored.base_offset >= base)
        stop = next((k for k, stored in enumerate(self.batches) if stored.base_offset >= end), len(self.batches))
        self.batches[first:stop] = kept
        self._segment_sizes[number] = len(out)
        log.info("%s: compacted %s from %d to %d bytes", self.name, path, len(data), len(out))
        return len(data) - len(out)

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

    # --- the interface of PartitionLog ----------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        """The active segment's ``.log`` file, or None for a log kept in memory."""
        return None if self._log is None else Path(self._log.name)

    def abandon(self) -> None:
        """Close the files as a dying process does: no flush; what reached the OS stays, nothing more."""
        self._closed = True
        for file in (self._log, self._index, self._time_index, self._txn_index):
            if file is not None:
                file.close()
        self._log = self._index = self._time_index = self._txn_index = None

    def append(self, base_offset: int, batch: RecordBatch) -> None:
        """Add a batch the producer-state check accepted at ``base_offset``. All or nothing: when a write
        raises, the segment and its indexes are cut back to where they were and the batch is not added (a
        segment the append rolled to stays, empty, as Kafka's would)."""
        if self._closed:
            raise IdemcoreError(f"{self.name}: the log is closed")
        if base_offset < self.log_end_offset:
            raise IdemcoreError(f"{self.name}: append at offset {base_offset} below the log end "
                                f"offset {self.log_end_offset}")
        if self._log is not None and base_offset != self.log_end_offset:  # recovery would refuse the gap
            raise IdemcoreError(f"{self.name}: append at offset {base_offset}, but the log ends at "
                                f"{self.log_end_offset}: a stored log's offsets are contiguous")
        wire = batch.wire
        if wire is None:
            self._add(StoredBatch(base_offset, _frozen(batch)), base_offset + batch.record_count - 1,
                      lambda: encode_record_batch(batch, base_offset, LEADER_EPOCH))
            return
        raw = bytearray(wire)  # stored as sent: only the fields outside the CRC change
        set_base_offset(raw, 0, base_offset)
        set_partition_leader_epoch(raw, 0, LEADER_EPOCH)
        stored = bytes(raw)
        self._add(StoredBatch(base_offset, _frozen(batch), raw=stored), base_offset + batch.record_count - 1,
                  lambda: stored)

    def append_marker(self, base_offset: int, producer_id: int, producer_epoch: int, control_type: int,
                      coordinator_epoch: int, timestamp: int) -> None:
        """Add the transaction marker the producer-state check accepted at ``base_offset`` (COORDINATOR
        origin), ending ``producer_id``'s transaction here; an ABORT adds its ``.txnindex`` entry. All or
        nothing, as :meth:`append`."""
        if self._closed:
            raise IdemcoreError(f"{self.name}: the log is closed")
        if base_offset != self.log_end_offset:
            raise IdemcoreError(f"{self.name}: marker at offset {base_offset}, but the log ends at "
                                f"{self.log_end_offset}")
        batch = RecordBatch(self.topic, self.partition, (), None, producer_id, producer_epoch, -1, timestamp, True)
        control = (int(control_type), coordinator_epoch)  # as _marker_batch reads it back
        raw = bytes(encode_end_txn_marker(control_type, coordinator_epoch, producer_id=producer_id,
                                          producer_epoch=producer_epoch, timestamp=timestamp,
                                          base_offset=base_offset, partition_leader_epoch=LEADER_EPOCH))
        # Kept (a marker is 78 bytes): every fetch over it serves these instead of encoding it again.
        self._add(StoredBatch(base_offset, batch, None, None, control, raw), base_offset, lambda: raw)

    def _add(self, stored: StoredBatch, last_offset: int, encode: Callable[[], bytes | bytearray]) -> None:
        """Add a data batch or a marker: its transaction bookkeeping, and with a directory its bytes written
        (``encode``), all taken back when a write raises."""
        batch = stored.batch
        before = self._open_txns.get(batch.producer_id)
        aborted = _complete_txn(self._open_txns, batch.producer_id, stored.base_offset, batch.is_transactional,
                                None if stored.control is None else stored.control[0])
        if self._log is not None:
            try:
                saved = self._write_batch(encode(), stored.base_offset, last_offset, batch,
                                          b"" if aborted is None else aborted.encoded())
            except BaseException:
                self._restore_txn(batch.producer_id, before)
                raise
            self._undo = (self._last_position, saved, batch.producer_id, before)
        self.batches.append(stored)
        if aborted is not None:  # only once written: a failed write leaves no entry behind
            self._aborted.append(aborted)

    def _write_batch(self, data: bytes | bytearray, base_offset: int, last_offset: int, batch: RecordBatch,
                     txn_entry: bytes) -> _Saved:
        """Write one batch's bytes at the log end (rolling first when due), its index entries and its
        ``.txnindex`` entry (if any); all cut back when a write raises. Returns the index state before it."""
        assert self._log is not None
        if self._size > 0 and (self._size + len(data) > self.segment_bytes
                               or last_offset - self.segment_bases[-1] > INT32_MAX
                               or self._waited_for_roll(batch.max_timestamp) > self.segment_ms):
            self._roll(base_offset)
        if self._size == 0:
            self._segment_first_timestamp = batch.max_timestamp
        position = self._size
        saved = self._state.save()
        try:
            offset_entry, time_entry = self._state.add(position, len(data), last_offset, batch.max_timestamp)
            _write(self._log, data)
            if offset_entry:
                _write(self._index, offset_entry)  # type: ignore[arg-type]  # open with the log
            if time_entry:
                _write(self._time_index, time_entry)  # type: ignore[arg-type]
            if txn_entry:
                if self._txn_index is None:
                    self._txn_index = open(Path(self._log.name).with_suffix(TXN_INDEX_SUFFIX), "ab", buffering=0)
                _write(self._txn_index, txn_entry)
                self._state.txn += txn_entry
            if not self._epochs_written:  # the first batch starts epoch 0 (Kafka's LeaderEpochFileCache.assign)
                assert self._directory is not None
                write_file_atomically(self._directory / LEADER_EPOCH_CHECKPOINT,
                                      encode_leader_epoch_checkpoint([(LEADER_EPOCH, base_offset)]), self._fsync)
                self._epochs_written = True
        except BaseException:
            self._cut(position, saved)
            raise
        self._size = self._segment_sizes[-1] = position + len(data)
        self._last_position = position
        self._dirty = True
        return saved

    def _restore_txn(self, producer_id: int, first_offset: int | None) -> None:
        if first_offset is None:
            self._open_txns.pop(producer_id, None)
        else:
            self._open_txns[producer_id] = first_offset

    def note_open_transaction(self, producer_id: int, first_offset: int) -> None:
        """At recovery: ``producer_id`` has a transaction open here since ``first_offset``, as the producer state
        says, even if no batch of it is left in the log (retention deleted them)."""
        self._open_txns.setdefault(producer_id, first_offset)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction here, else the log end (Kafka's LSO on a single
        broker, where the high watermark is the log end)."""
        # Never below the log start: retention may have deleted an open transaction's first batches (Kafka's
        # maybeIncrementFirstUnstableOffset).
        return max(min(self._open_txns.values(), default=self.log_end_offset), self.log_start_offset)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(producer id, first offset)`` of every transaction aborted here that overlaps ``[start, end)``: its
        first offset below ``end``, its ABORT marker at or after ``start`` (what a read_committed fetch of that
        range must drop, Kafka's ``collectAbortedTransactions``), in the order of their markers.

        The entries are ordered by marker offset, so bisection finds the first marker at or after ``start``. First
        offsets are not ordered, so the scan goes on past ``end`` until an entry's last stable offset reaches
        ``end``: every transaction aborted after it began at or after that offset (it was open then, or started
        later), so none further can overlap (Kafka's ``TxnIndexSearchResult.isComplete``)."""
        aborted = self._aborted
        found = []
        for k in range(bisect.bisect_left(aborted, start, key=lambda txn: txn.last_offset), len(aborted)):
            txn = aborted[k]
            if txn.first_offset < end:
                found.append((txn.producer_id, txn.first_offset))
            if txn.last_stable_offset >= end:
                break
        return found

    def _waited_for_roll(self, timestamp: int) -> int:
        """How long the active segment has been rolling, as segment.ms counts it: from its first batch's
        timestamp to this batch's, or since it was created when batches carry no timestamps."""
        if self._segment_first_timestamp >= 0:
            return timestamp - self._segment_first_timestamp
        return self._clock() - self._segment_created

    def _roll(self, base_offset: int) -> None:
        """Make a new active segment at ``base_offset``, after the old one's last time index entry and an
        fsync of its files (so recovery can refuse any damage in a rolled segment)."""
        assert self._log is not None and self._index is not None and self._time_index is not None
        _write(self._time_index, self._state.final())
        for file in (self._log, self._index, self._time_index, self._txn_index):
            if file is not None:
                os.fsync(file.fileno())
                file.close()
        self._txn_index = None
        if self.on_roll is not None:
            self.on_roll(self, base_offset)
        assert self._directory is not None
        path = self._directory / offset_file_name(base_offset, LOG_SUFFIX)
        self._log = open(path, "ab", buffering=0)
        self._index = open(path.with_suffix(INDEX_SUFFIX), "ab", buffering=0)
        self._time_index = open(path.with_suffix(TIME_INDEX_SUFFIX), "ab", buffering=0)
        self.segment_bases.append(base_offset)
        self._segment_sizes.append(0)
        self._state = _IndexState(base_offset, self.index_interval_bytes)
        self._size = 0
        self.synced_bytes = 0
        self._undo = None
        self._last_position = 0  # in the new active segment, which path names now
        self._segment_created = self._clock()
        self._segment_first_timestamp = -1

    def _cut(self, position: int, saved: _Saved) -> None:
        self._state.restore(saved)
        for file, size in ((self._log, position), (self._index, saved[5]), (self._time_index, saved[6]),
                           (self._txn_index, saved[7])):
            if file is None:
                continue
            try:
                file.seek(size)
                file.truncate(size)
            except OSError:
                log.exception("%s: could not cut %s back to byte %d", self.name, file.name, size)
        self._size = self._segment_sizes[-1] = position

    def rollback_last(self) -> None:
        """Take back the batch appended last (its sync failed): the log is as it was before that append."""
        stored = self.batches.pop()
        if self._aborted and self._aborted[-1].last_offset == stored.base_offset:  # it was an ABORT marker
            self._aborted.pop()
        if self._log is not None and self._undo is not None:
            position, saved, producer_id, txn_before = self._undo
            self._cut(position, saved)
            self._restore_txn(producer_id, txn_before)
            self._undo = None

    def sync(self) -> None:
        """Make the batches appended since the last sync durable (acks=all): fsync, unless the log was opened
        with fsync=False (the appends are in the OS already)."""
        if self._dirty and self._fsync:
            self.flush()
        self._dirty = False

    def flush(self) -> None:
        """fsync the active segment whatever the fsync setting (rolled segments were fsync'd when they rolled).
        Its indexes are not: they are derived from the segment and rebuilt at start when short or wrong, so one
        fsync per acks=all request is all durability needs."""
        if self._log is not None:
            os.fsync(self._log.fileno())
            self.synced_bytes = self._size
            self._dirty = False

    def close(self) -> None:
        self._closed = True
        if self._log is not None:
            self.flush()
        self.abandon()



def _stored(topic: str, partition: int, header: BatchHeader, records: Sequence[Record], raw: bytes) -> StoredBatch:
    """A decoded data batch as the log keeps it: its offset deltas only when compaction left gaps."""
    batch = record_batch_from(topic, partition, header, records)
    deltas = tuple(record.offset_delta for record in records)
    if header.last_offset_delta == len(records) - 1 and deltas == tuple(range(len(records))):
        return StoredBatch(header.base_offset, batch, raw=raw)
    return StoredBatch(header.base_offset, batch, deltas, header.last_offset_delta, raw=raw)


def _marker_batch(topic: str, partition: int, header: BatchHeader) -> RecordBatch:
    """How the log holds a marker's producer metadata: a transactional batch with no records."""
    return RecordBatch(topic, partition, (), None, header.producer_id, header.producer_epoch, -1,
                       header.max_timestamp, True)


def _frozen(batch: RecordBatch) -> RecordBatch:
    """``batch`` with tuples for its records (the log keeps its own copy: a caller changing its lists later
    changes nothing here) and without its wire bytes (the log keeps them with their offset set); the batch
    itself when that changes nothing."""
    headers = batch.headers
    if batch.wire is not None:  # its record columns are read-only views of the bytes: only the bytes go
        return RecordBatch(batch.topic, batch.partition, batch.values, batch.keys, batch.producer_id,
                           batch.producer_epoch, batch.base_sequence, batch.max_timestamp, batch.is_transactional,
                           headers)
    if type(batch.values) is tuple and (batch.keys is None or type(batch.keys) is tuple) and (
            headers is None or type(headers) is tuple):
        return batch
    if headers is not None:
        headers = tuple(tuple((key, value) for key, value in record) for record in headers)
    return RecordBatch(batch.topic, batch.partition, tuple(batch.values),
                       None if batch.keys is None else tuple(batch.keys), batch.producer_id, batch.producer_epoch,
                       batch.base_sequence, batch.max_timestamp, batch.is_transactional, headers)


def _write(file: BinaryIO, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[file.write(view):]  # a raw write may take only part of the bytes
