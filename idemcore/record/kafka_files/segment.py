"""Scanning a segment file: its batch headers as columns, through the backend's native header scan.

:func:`scan_segment` maps the ``.log`` file (mmap, no copy), calls ``scan_headers`` (see
:mod:`idemcore.kernels.header_scan_reference`) in chunks of rows, and returns a :class:`SegmentScan`: the packed
batch metadata columns (those of :mod:`idemcore.kernels.columns`, so :meth:`SegmentScan.metadata` is a
:class:`~idemcore.kernels.columns.BatchColumns` without a copy of the data) plus each batch's file position,
batch length, last offset, partition leader epoch, compression and CRC validity; and where and why the scan
stopped:

- ``end``: every byte was a whole batch;
- ``torn tail``: the file ends inside a batch (a write cut short; Kafka's recovery truncates it);
- ``zero padding``: from there on the file holds only zero bytes (a preallocated segment, ``file.preallocate``,
  after an unclean stop: where the log really ends; not a problem);
- ``bad magic``: not a v2 batch (a v0/v1 message set, or garbage);
- ``bad length``: a batch length smaller than a v2 header.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from idemcore.kernels import Backend, get_backend
from idemcore.kernels import header_scan_reference as scan_codes
from idemcore.kernels.abi import HEADER_SCAN_DTYPES, HeaderScanColumns
from idemcore.kernels.columns import COLUMNS, BatchColumns
from idemcore.record.kafka_files.indexes import FileProblem, base_offset_of

STOP_END = "end"
STOP_TORN_TAIL = "torn tail"
STOP_ZERO_PADDING = "zero padding"
STOP_BAD_MAGIC = "bad magic"
STOP_BAD_LENGTH = "bad length"
_REASONS = {scan_codes.SCAN_END: STOP_END, scan_codes.SCAN_TRUNCATED: STOP_TORN_TAIL,
            scan_codes.SCAN_BAD_MAGIC: STOP_BAD_MAGIC, scan_codes.SCAN_BAD_LENGTH: STOP_BAD_LENGTH}
#: Column names of a scan: ``HeaderScanColumns`` without the ``out_`` prefix.
SCAN_COLUMNS: dict[str, np.dtype] = {name.removeprefix("out_"): dtype for name, dtype in HEADER_SCAN_DTYPES.items()}
#: Rows of the kernel's first call; the rest of the segment goes into arrays sized from what that call saw.
CHUNK_ROWS = 1 << 16
_MIN_BATCH = scan_codes.RECORDS_AT  # 61 bytes: the smallest v2 batch


class ScanFacts(NamedTuple):
    """What the header scan learnt of a segment's batches on the way (its cursor's ``FACT_*`` slots, see
    :mod:`idemcore.kernels.header_scan_reference`), so nobody passes over the columns again for them."""

    crc_bad: int  # batches whose CRC does not match
    first_not_rising: int  # the first row whose base offset is not above the previous row's last offset; -1: none
    span_differs: int  # batches whose offset span is not their record count
    records: int  # record counts added up
    log_end: int  # the largest base offset + record count of a batch from offset >= 0 ending above it; 0: none
    transactional: int
    control: int
    abort_markers: int
    min_timestamp: int  # of the max timestamps (INT64_MAX without batches)
    max_timestamp: int  # (INT64_MIN without batches)
    timestamp_falls: int  # batches whose max timestamp is below the previous one's

    @classmethod
    def of_cursor(cls, cursor: np.ndarray) -> ScanFacts:
        c = cursor.tolist()
        return cls(c[scan_codes.FACT_CRC_BAD], c[scan_codes.FACT_FIRST_NOT_RISING], c[scan_codes.FACT_SPAN_DIFFERS],
                   c[scan_codes.FACT_RECORDS], c[scan_codes.FACT_LOG_END], c[scan_codes.FACT_TRANSACTIONAL],
                   c[scan_codes.FACT_CONTROL], c[scan_codes.FACT_ABORT_MARKERS], c[scan_codes.FACT_MIN_TIMESTAMP],
                   c[scan_codes.FACT_MAX_TIMESTAMP], c[scan_codes.FACT_TIMESTAMP_FALLS])


@dataclass(frozen=True)
class SegmentScan:
    """The batches of one segment file, as columns (:data:`SCAN_COLUMNS`, one row per batch, in file order).

    ``base_offset``: from the file name (None if it carries none). ``stop``: why the scan stopped (module
    docstring), at byte ``stop_position``; ``stop_detail``: one line saying what is there.
    """

    path: Path
    base_offset: int | None
    size: int
    columns: dict[str, np.ndarray]
    stop: str
    stop_position: int
    stop_detail: str
    backend: str
    verified_crc: bool
    facts: ScanFacts | None = None  # (None: scanned without them)

    def __len__(self) -> int:
        return len(self.columns["position"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    @property
    def clean(self) -> bool:
        """Every byte was read as a whole batch (or the rest is a preallocated zero tail)."""
        return self.stop in (STOP_END, STOP_ZERO_PADDING)

    def metadata(self) -> BatchColumns:
        """The batch metadata columns (:data:`idemcore.kernels.columns.COLUMNS`; the flags as zero-copy bool
        views, the ``stream`` column as the scan was given it)."""
        return BatchColumns({name: self.columns[name].view(np.bool_) if dtype == np.bool_ else self.columns[name]
                              for name, dtype in COLUMNS.items()})

    def crc_failures(self) -> np.ndarray:
        """Rows whose CRC does not match (empty if CRCs were not verified)."""
        return np.flatnonzero(self.columns["crc_ok"] == scan_codes.CRC_BAD)

    def problems(self) -> list[FileProblem]:
        """What is wrong, one line each: where the scan stopped early, each CRC mismatch, a first batch below
        the segment's base offset (from the file name), offsets that do not rise from batch to batch."""
        out = []
        facts = self.facts
        if self.stop in (STOP_TORN_TAIL, STOP_BAD_MAGIC, STOP_BAD_LENGTH):
            out.append(FileProblem(self.path, self.stop_position, self.stop.replace(" ", "_"), self.stop_detail))
        for row in self.crc_failures().tolist() if facts is None or facts.crc_bad else ():
            out.append(FileProblem(self.path, int(self.columns["position"][row]), "crc_mismatch",
                                   f"CRC mismatch in the batch at offsets {int(self.columns['base_offset'][row])}.."
                                   f"{int(self.columns['last_offset'][row])} (the batch is corrupt; an audit "
                                   "does not replay it)"))
        base = self.columns["base_offset"]
        if len(base) and self.base_offset is not None and int(base[0]) < self.base_offset:
            out.append(FileProblem(self.path, 0, "offsets",
                                   f"first batch at offset {int(base[0])}, below the segment's base offset "
                                   f"{self.base_offset} (from the file name)"))
        if len(base) > 1 and (facts is None or facts.first_not_rising >= 0):
            last = self.columns["last_offset"]
            bad = np.flatnonzero(base[1:] <= last[:-1])
            if len(bad):
                k = int(bad[0]) + 1
                out.append(FileProblem(self.path, int(self.columns["position"][k]), "offsets",
                                       f"batch at offset {int(base[k])} does not follow the previous batch's last "
                                       f"offset {int(last[k - 1])}"))
        return out


class ScanBuffer:
    """Columns a scan writes into and the next scan writes over: :func:`scan_segment` with ``buffer`` returns views
    of them, valid until the buffer's next use. Scanning many segments, one after the other, into one buffer
    allocates (and page-faults) once, for the largest, instead of once per segment."""

    def __init__(self) -> None:
        self.columns = HeaderScanColumns.empty(0)

    def room(self, rows: int, keep: int = 0) -> HeaderScanColumns:
        """Columns with room for ``rows`` rows, their first ``keep`` rows kept."""
        if len(self.columns[0]) < rows:
            grown = HeaderScanColumns.empty(rows)
            for old, new in zip(self.columns, grown, strict=True):
                new[:keep] = old[:keep]
            self.columns = grown
        return self.columns


def scan_segment(path: str | os.PathLike[str], *, stream: int = 0, backend: str | Backend | None = None,
                 verify_crc: bool = True, chunk_rows: int = CHUNK_ROWS, buffer: ScanBuffer | None = None
                 ) -> SegmentScan:
    """Scan every batch header of the segment at ``path`` (see the module docstring); ``stream`` fills the
    ``stream`` column (the caller's stream for this partition). Nothing in the file makes it raise; a file that
    cannot be opened raises OSError.
    ``buffer``: write into it (the scan's columns are its views, until its next use) instead of new arrays."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
    path = Path(path)
    kernel = get_backend(backend)
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            empty = {name: np.empty(0, dtype) for name, dtype in SCAN_COLUMNS.items()}
            return SegmentScan(path, base_offset_of(path), 0, empty, STOP_END, 0, "empty file", kernel.name,
                               verify_crc)
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            data = np.frombuffer(mapped, np.uint8)
            try:
                columns, position, reason, facts = _scan(kernel, data, stream, verify_crc,
                                                         min(chunk_rows, size // _MIN_BATCH + 1), buffer)
                stop, detail = _stop(data, position, reason)
            finally:
                del data  # the mmap closes only once no array holds it
    return SegmentScan(path, base_offset_of(path), size, columns, stop, position, detail, kernel.name, verify_crc,
                       facts)


def scan_buffer(data: bytes | bytearray | memoryview, *, stream: int = 0, backend: str | Backend | None = None,
                verify_crc: bool = True) -> SegmentScan:
    """:func:`scan_segment` of bytes in memory (batches fetched from a leader, say): positions count from
    ``data[0]``; ``path`` is empty and ``base_offset`` None."""
    kernel = get_backend(backend)
    array = np.frombuffer(data, np.uint8)
    if not len(array):
        empty = {name: np.empty(0, dtype) for name, dtype in SCAN_COLUMNS.items()}
        return SegmentScan(Path(), None, 0, empty, STOP_END, 0, "no bytes", kernel.name, verify_crc)
    columns, position, reason, facts = _scan(kernel, array, stream, verify_crc, len(array) // _MIN_BATCH + 1)
    stop, detail = _stop(array, position, reason)
    return SegmentScan(Path(), None, len(array), columns, stop, position, detail, kernel.name, verify_crc, facts)


def _scan(kernel: Backend, data: np.ndarray, stream: int, verify_crc: bool, capacity: int,
          buffer: ScanBuffer | None = None) -> tuple[dict[str, np.ndarray], int, int, ScanFacts]:
    """The first ``capacity`` rows (or as many as ``buffer`` holds), then the rest straight into arrays sized from
    the batches seen so far (5% more; doubled if that was short), so a segment's columns are written once and not
    concatenated; and the facts the scan added up on the way."""
    cursor = scan_codes.new_cursor()
    buffer = buffer or ScanBuffer()
    out = buffer.room(capacity)
    count = 0
    while True:
        count += kernel.scan_headers(data, 0, stream, verify_crc, cursor, *(column[count:] for column in out))
        if int(cursor[1]) != scan_codes.SCAN_FULL:
            return {name: column[:count] for name, column in zip(SCAN_COLUMNS, out, strict=True)}, \
                int(cursor[0]), int(cursor[1]), ScanFacts.of_cursor(cursor)
        done = int(cursor[0])
        estimate = int((len(data) - done) / done * count * 1.05) + 16
        out = buffer.room(max(count + estimate, 2 * count), keep=count)


def _stop(data: np.ndarray, position: int, reason: int) -> tuple[str, str]:
    """The stop reason's name and one line on what lies at ``position``."""
    size = len(data)
    stop = _REASONS[reason]
    if stop == STOP_END:
        return stop, f"end of the file at position {size}"
    left = size - position
    if not data[position:].any():
        return STOP_ZERO_PADDING, (f"{left:,} zero bytes from position {position} to the end (a preallocated "
                                   "segment: the log ends there)")
    length = int(np.frombuffer(data[position + 8:position + 12].tobytes(), ">i4")[0]) if left >= 12 else None
    if stop == STOP_TORN_TAIL:
        if length is None or left < scan_codes.HEADER_UP_TO_MAGIC:
            return stop, (f"torn tail: {left} byte(s) at the end, fewer than a batch header's "
                          f"{scan_codes.HEADER_UP_TO_MAGIC} needed to read its length and magic")
        return stop, (f"torn tail: the batch here declares {length + 12:,} bytes (batch length {length:,}), the "
                      f"file ends after {left:,}")
    if stop == STOP_BAD_MAGIC:
        return stop, (f"bad magic {int(data[position + scan_codes.MAGIC_AT])} at position "
                      f"{position + scan_codes.MAGIC_AT} (expected 2: not a RecordBatch v2); {left:,} byte(s) "
                      "from here are not read")
    return stop, (f"bad batch length {length} (a v2 batch needs at least {scan_codes.MIN_BATCH_LENGTH}); "
                  f"{left:,} byte(s) from here are not read")
