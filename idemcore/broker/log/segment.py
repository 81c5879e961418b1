"""One segment of a partition's log: its ``.log`` bytes and its indexes (Kafka's ``LogSegment``).

A segment keeps in memory only a few numbers (its size, where it ends, the index bookkeeping below); the batches
stay in the files. A read finds its position through the offset index (Kafka's ``OffsetIndex.lookup``, by
bisection over the file) and walks batch headers from there (``translateOffset``): at most about
``index.interval.bytes`` of headers, then one ``pread`` of the answer's bytes, never decoded.

Index entries follow Kafka's ``LogSegment.append``: an offset index entry (offset relative to the base i32, file
position i32) at a batch's last offset and start position once more than ``index.interval.bytes`` were appended
since the last entry, a time index entry (largest timestamp so far i64, its relative offset i32) beside it when
that timestamp grew, and one last time index entry when the segment stops being the active one (roll, close).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from typing import NamedTuple

from idemcore.broker.log.store import ByteStore
from idemcore.record.kafka_files.indexes import TXN_INDEX_ENTRY, AbortedTxn

log = logging.getLogger(__name__)

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
_PREFIX = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")  # at byte 23
_MAX_TIMESTAMP = struct.Struct(">q")  # at byte 35
HEADER_BYTES = 61
_LENGTH_AT = 12  # bytes before the batch length counts
_CHUNK = 1 << 16  # bytes read at once while walking headers


class HeaderPosition(NamedTuple):
    """Where a batch lies and the header fields reads need (nothing of its records)."""

    position: int
    base_offset: int
    size: int
    last_offset: int
    max_timestamp: int


class IndexState(NamedTuple):
    """What the next index entries depend on (Kafka's ``bytesSinceLastIndexEntry``, ``maxTimestampSoFar`` and
    its offset, and the last time index timestamp), with the index files' sizes: enough to take an append back."""

    bytes_since: int
    max_timestamp: int
    max_timestamp_offset: int
    last_time_timestamp: int | None
    index_size: int
    time_size: int
    txn_size: int


class LogSegment:
    """The batches from ``base_offset`` on, in ``log``, with ``index``, ``time_index`` and ``txn_index``
    (``.txnindex``, which may hold nothing). ``next_offset``: the offset after its last batch."""

    def __init__(self, base_offset: int, log: ByteStore, index: ByteStore, time_index: ByteStore,
                 txn_index: ByteStore, index_interval_bytes: int, next_offset: int | None = None) -> None:
        self.base_offset = base_offset
        self.log = log
        self.index = index
        self.time_index = time_index
        self.txn_index = txn_index
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = base_offset if next_offset is None else next_offset
        self.bytes_since = 0
        self.max_timestamp = -1
        self.max_timestamp_offset = base_offset
        self.last_time_timestamp: int | None = None
        #: The timestamp segment.ms counts from: the first batch's (-1: none; None: not read yet).
        self.first_timestamp: int | None = -1
        # The offset and position after the last read: a consumer reading on asks for exactly that next.
        self._hint = (base_offset, 0)
        #: An index entry was found naming no batch (damaged outside the broker): reads walk from the start.
        self.index_damaged = False

    @property
    def size(self) -> int:
        return self.log.size

    def load_index_state(self) -> None:
        """After a clean load: the largest timestamp from the time index's last entry (written at close), so the
        next entries continue it; ``bytes_since`` restarts at 0 as Kafka's does."""
        if self.time_index.size >= TIME_ENTRY.size:
            timestamp, relative = TIME_ENTRY.unpack(self.time_index.read(self.time_index.size - TIME_ENTRY.size,
                                                                         TIME_ENTRY.size))
            self.max_timestamp = self.last_time_timestamp = timestamp
            self.max_timestamp_offset = self.base_offset + relative
        self.first_timestamp = None if self.size else -1

    # --- appends --------------------------------------------------------------------------------------------

    def save(self) -> IndexState:
        return IndexState(self.bytes_since, self.max_timestamp, self.max_timestamp_offset, self.last_time_timestamp,
                          self.index.size, self.time_index.size, self.txn_index.size)

    def index_entries(self, position: int, size: int, last_offset: int, max_timestamp: int) -> tuple[bytes, bytes]:
        """Account for a batch of ``size`` bytes at ``position``: the offset and time index entries it adds
        (often none), by Kafka's rule (module docstring)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.max_timestamp_offset = max_timestamp, last_offset
        offset_entry = time_entry = b""
        if self.bytes_since > self.index_interval_bytes:
            offset_entry = OFFSET_ENTRY.pack(last_offset - self.base_offset, position)
            time_entry = self.final_time_entry()
            self.bytes_since = 0
        self.bytes_since += size
        return offset_entry, time_entry

    def final_time_entry_due(self) -> bool:
        return self.max_timestamp >= 0 and (self.last_time_timestamp is None
                                            or self.max_timestamp > self.last_time_timestamp)

    def peek_final_time_entry(self) -> bytes:
        return TIME_ENTRY.pack(self.max_timestamp, self.max_timestamp_offset - self.base_offset)

    def final_time_entry(self) -> bytes:
        """The time index entry for the largest timestamp so far, if it grew since the last entry (also the one
        written when the segment stops being the active one: roll, clean close)."""
        if not self.final_time_entry_due():
            return b""
        self.last_time_timestamp = self.max_timestamp
        return self.peek_final_time_entry()

    def append(self, data: bytes | bytearray | memoryview, last_offset: int, max_timestamp: int,
               txn_entry: bytes) -> None:
        """Write one batch at the end, with its index entries (and ``.txnindex`` entry, written first, when it is
        an ABORT marker ending a transaction). A failed write leaves the files longer: :meth:`restore` cuts them
        back."""
        position = self.log.size
        if self.first_timestamp == -1 and position == 0:
            self.first_timestamp = max_timestamp
        offset_entry, time_entry = self.index_entries(position, len(data), last_offset, max_timestamp)
        if txn_entry:  # before the marker: a crash between them leaves an entry past the log end, which loading cuts
            self.txn_index.append(txn_entry)
        self.log.append(data)
        if offset_entry:
            self.index.append(offset_entry)
        if time_entry:
            self.time_index.append(time_entry)
        self.next_offset = last_offset + 1

    def restore(self, saved: IndexState, position: int, next_offset: int) -> None:
        """Cut the files back to ``position`` and the index sizes in ``saved`` (an append taken back)."""
        (self.bytes_since, self.max_timestamp, self.max_timestamp_offset, self.last_time_timestamp, index_size,
         time_size, txn_size) = saved
        for store, size in ((self.log, position), (self.index, index_size), (self.time_index, time_size),
                            (self.txn_index, txn_size)):
            if store.size != size:
                store.truncate(size)
        self.next_offset = next_offset
        if position == 0:
            self.first_timestamp = -1
        self._hint = (self.base_offset, 0)

    def close_time_index(self) -> None:
        """Write the last time index entry (the segment stops being the active one: roll, clean close)."""
        entry = self.final_time_entry()
        if entry:
            self.time_index.append(entry)

    def rolling_timestamp(self) -> int:
        """The first batch's timestamp (-1: none), read from the file the first time it is needed after a load
        (Kafka's ``rollingBasedTimestamp``)."""
        if self.first_timestamp is None:
            head = self.log.read(0, HEADER_BYTES)
            self.first_timestamp = _MAX_TIMESTAMP.unpack_from(head, 35)[0] if len(head) == HEADER_BYTES else -1
        return self.first_timestamp

    # --- reads ----------------------------------------------------------------------------------------------

    def _index_floor(self, offset: int) -> tuple[int, int]:
        """The last offset index entry at or below ``offset``: (its offset, its position); (base, 0) if none."""
        count = self.index.size // OFFSET_ENTRY.size
        low, high = 0, count  # bisection over the file: the entries' offsets rise
        found = (self.base_offset, 0)
        while low < high:
            middle = (low + high) // 2
            relative, position = OFFSET_ENTRY.unpack(self.index.read(middle * OFFSET_ENTRY.size, OFFSET_ENTRY.size))
            if self.base_offset + relative <= offset:
                found = (self.base_offset + relative, position)
                low = middle + 1
            else:
                high = middle
        return found

    def headers(self, position: int = 0, end: int | None = None, chunk_bytes: int = _CHUNK) -> Iterator[HeaderPosition]:
        """The batch headers from ``position`` (a batch's start) to ``end`` (default: the segment's size), read in
        chunks of ``chunk_bytes`` (a batch larger than a chunk is skipped, not read). Stops at a batch that does
        not fit (a torn tail is never met here: loading cut it)."""
        end = self.log.size if end is None else end
        while position + HEADER_BYTES <= end:
            chunk = self.log.read(position, min(max(chunk_bytes, HEADER_BYTES), end - position))
            at = 0
            while at + HEADER_BYTES <= len(chunk):
                base, length = _PREFIX.unpack_from(chunk, at)
                size = length + _LENGTH_AT
                if position + at + size > end:
                    return
                yield HeaderPosition(position + at, base, size, base + _LAST_DELTA.unpack_from(chunk, at + 23)[0],
                                     _MAX_TIMESTAMP.unpack_from(chunk, at + 35)[0])
                at += size
            if at == 0:
                return
            position += at

    def position_of(self, offset: int) -> int:
        """The start of the batch holding ``offset`` or, if none does (compaction), of the first batch after it;
        the segment's size when there is none."""
        hint_offset, hint_position = self._hint
        if hint_offset == offset:
            return hint_position
        entry_offset, position = self._index_floor(offset)
        if position and not self._entry_holds(entry_offset, position):
            # A damaged index (Kafka's would be found by its sanity check, or not at all): walk from the start.
            if not self.index_damaged:
                log.warning("%s: its offset index entry (%d, %d) names no batch ending there: reading without it",
                            self.log.name, entry_offset, position)
            self.index_damaged = True
            position = 0
        # About index.interval.bytes lie between entries: read that much at a time, not the rest of the segment.
        for header in self.headers(position, chunk_bytes=min(self.index_interval_bytes + 2 * HEADER_BYTES, _CHUNK)):
            if header.last_offset >= offset:
                return header.position
        return self.log.size

    def _entry_holds(self, entry_offset: int, position: int) -> bool:
        """Whether a v2 batch starts at ``position`` and ends at ``entry_offset`` (what an index entry says)."""
        head = self.log.read(position, HEADER_BYTES)
        if len(head) < HEADER_BYTES or head[16] != 2:
            return False
        base = _PREFIX.unpack_from(head, 0)[0]
        return base + _LAST_DELTA.unpack_from(head, 23)[0] == entry_offset

    def read(self, offset: int, limit: int, max_bytes: int, min_one: bool) -> tuple[bytes, int]:
        """The whole batches from the one holding ``offset`` on whose base offset is below ``limit`` and that fit
        in ``max_bytes`` (``min_one``: the first whatever its size), as the file holds them, and the offset after
        the last one (``offset`` when none)."""
        position = self.position_of(offset)
        if position >= self.log.size:
            return b"", offset
        head = self.log.read(position, HEADER_BYTES)
        base, length = _PREFIX.unpack_from(head, 0)
        if base >= limit:
            return b"", offset
        first = length + _LENGTH_AT
        want = first if min_one and first > max_bytes else max_bytes
        data = self.log.read(position, min(want, self.log.size - position))
        at = 0
        next_offset = offset
        while at + HEADER_BYTES <= len(data):
            base, length = _PREFIX.unpack_from(data, at)
            size = length + _LENGTH_AT
            if base >= limit or at + size > len(data):
                break
            next_offset = base + _LAST_DELTA.unpack_from(data, at + 23)[0] + 1
            at += size
        if at:
            self._hint = (next_offset, position + at)
        return data[:at], next_offset

    def forget_positions(self) -> None:
        """The file was rewritten (compaction): positions remembered from earlier reads no longer hold."""
        self._hint = (self.base_offset, 0)

    def aborted(self) -> list[AbortedTxn]:
        """The ``.txnindex`` entries, in marker order."""
        data = self.txn_index.read(0, self.txn_index.size)
        whole = data[:len(data) - len(data) % TXN_INDEX_ENTRY]
        return [AbortedTxn(producer_id, first, last, stable, version, k * TXN_INDEX_ENTRY)
                for k, (version, producer_id, first, last, stable) in enumerate(_TXN_ENTRY.iter_unpack(whole))]

    def largest_timestamp(self) -> int:
        """The largest batch timestamp (Kafka's ``LogSegment.largestTimestamp``: the time index's last entry,
        or what appends have seen); -1 when its batches carry none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        if self.time_index.size >= TIME_ENTRY.size:
            return TIME_ENTRY.unpack(self.time_index.read(self.time_index.size - TIME_ENTRY.size,
                                                         TIME_ENTRY.size))[0]
        return -1

    # --- lifecycle ------------------------------------------------------------------------------------------

    def stores(self) -> tuple[ByteStore, ...]:
        return self.log, self.index, self.time_index, self.txn_index

    def sync(self) -> None:
        for store in self.stores():
            store.sync()

    def close(self) -> None:
        for store in self.stores():
            store.close()
