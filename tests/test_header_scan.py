"""The header scan (issue 11, item 2): every backend against batches built here (a small builder of its own),
against batches kafka-python and aiokafka build and kafka-python reads, and against each other on random
segments, damaged ones included (truncated tails, flipped bytes, bad magics, bad lengths)."""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import idemcore
from idemcore.kernels import abi, header_scan_reference, load_backend
from idemcore.kernels.abi import HEADER_SCAN_DTYPES, HeaderScanColumns
from idemcore.kernels.columns import COLUMNS
from idemcore.protocol.sequences import last_sequences

from .conftest import EXPECTED

#: kafka-python loads its protocol schemas with importlib.resources calls Python deprecates.
pytestmark = pytest.mark.filterwarnings(r"ignore:.* is deprecated\. Use files\(\) instead:DeprecationWarning")
ref = header_scan_reference
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NAMES = [name.removeprefix("out_") for name in HeaderScanColumns._fields]
PACKAGE_PARENT = Path(__file__).resolve().parent.parent


# --- A builder of v2 batches, written apart from every scan (struct, and varints written, never read) ---------------

def varint(value: int) -> bytes:
    """Kafka's zig-zag varint/varlong."""
    raw = ((value << 1) ^ (value >> 63)) & (2**64 - 1)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def record(key: bytes | None, value: bytes | None, offset_delta: int = 0, timestamp_delta: int = 0) -> bytes:
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta)
    for part in (key, value):
        body += varint(-1) if part is None else varint(len(part)) + part
    body += varint(0)  # no headers
    return varint(len(body)) + body


def marker(kind: int, coordinator_epoch: int, key_version: int = 0, value_version: int = 0) -> bytes:
    """A control record: key (version, type), value (version, coordinator epoch)."""
    return record(struct.pack(">hh", key_version, kind), struct.pack(">hi", value_version, coordinator_epoch))


@dataclass
class Batch:
    """One v2 batch as fields; ``encode`` writes it, ``expected`` says what a scan must decode from it."""

    base_offset: int = 0
    leader_epoch: int = 0
    attributes: int = 0
    last_offset_delta: int | None = None
    base_timestamp: int = 0
    max_timestamp: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    record_count: int = 1
    records: bytes = field(default_factory=lambda: record(b"k", b"v"))
    marker: tuple[int, int] | None = None  # (control type, coordinator epoch) the records hold, when well-formed
    garbage: bool = False  # random records: what a control batch's marker decodes to is left to the scans

    @property
    def delta(self) -> int:
        """The last offset delta: record count - 1 unless given (within int32)."""
        return max(self.record_count - 1, -(2**31)) if self.last_offset_delta is None else self.last_offset_delta

    def encode(self) -> bytes:
        delta = self.delta
        body = struct.pack(">hiqqqhii", self.attributes, delta, self.base_timestamp, self.max_timestamp,
                           self.producer_id, self.producer_epoch, self.base_sequence, self.record_count)
        body += self.records
        return struct.pack(">qiibI", self.base_offset, 4 + 1 + 4 + len(body), self.leader_epoch, 2,
                           crc32c(body)) + body

    def expected(self, position: int, partition: int = 0) -> dict[str, int]:
        delta = self.delta
        is_control = bool(self.attributes & 0x20)
        control_type, coordinator_epoch = -1, 0
        if is_control:
            control_type, coordinator_epoch = -1, -1
            if self.marker is not None and self.attributes & 7 == 0 and self.record_count >= 1:
                control_type = self.marker[0]
                coordinator_epoch = self.marker[1] if control_type in (0, 1) else -1
        return {
            "stream": partition, "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "base_sequence": self.base_sequence,
            "last_sequence": int(last_sequences(np.array([self.base_sequence], np.int32),
                                                np.array([self.record_count], np.int32))[0]),
            "base_offset": self.base_offset, "record_count": self.record_count, "max_timestamp": self.max_timestamp,
            "is_transactional": int(bool(self.attributes & 0x10)), "is_control": int(is_control),
            "control_type": control_type, "coordinator_epoch": coordinator_epoch, "position": position,
            "batch_length": len(self.encode()) - 12,
            "last_offset": (self.base_offset + delta + 2**63) % 2**64 - 2**63,  # Java's long wraps
            "leader_epoch": self.leader_epoch, "compression": self.attributes & 7, "crc_ok": 1,
        }


def segment(batches: list[Batch], start: int = 0) -> tuple[bytes, list[dict[str, int]]]:
    """The batches one after the other, and what a scan of them must find (file positions from ``start``)."""
    data, rows = b"", []
    for batch in batches:
        rows.append(batch.expected(start + len(data)))
        data += batch.encode()
    return data, rows


# --- Running a scan ---------------------------------------------------------------------------------------------------

@dataclass
class Scan:
    rows: list[dict[str, int]]
    position: int  # cursor[0] afterwards
    reason: int  # cursor[1] afterwards
    facts: list[int] = field(default_factory=list)  # cursor[2:] afterwards (FACT_*)


def scan(backend: str, data: bytes | np.ndarray, *, verify_crc: bool = True, partition: int = 0,
         file_position: int = 0, capacity: int = 64, start: int = 0, cursor: np.ndarray | None = None) -> Scan:
    """One call of the backend's scan_headers (with a cursor of facts: ``cursor``, or a new one from ``start``)."""
    array = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data
    out = HeaderScanColumns.empty(capacity)
    cursor = ref.new_cursor(start) if cursor is None else cursor
    cursor[1] = -1
    count = load_backend(backend).scan_headers(array, file_position, partition, verify_crc, cursor, *out)
    rows = [{name: int(column[i]) for name, column in zip(NAMES, out, strict=True)} for i in range(count)]
    return Scan(rows, int(cursor[0]), int(cursor[1]), cursor[2:].tolist())


def scan_in_chunks(backend: str, data: bytes, capacity: int, **options) -> Scan:
    """Scans of at most ``capacity`` batches, each resuming where the last stopped (one cursor: facts add up)."""
    rows: list[dict[str, int]] = []
    cursor = ref.new_cursor()
    while True:
        part = scan(backend, data, capacity=capacity, cursor=cursor, **options)
        rows += part.rows
        if part.reason != ref.SCAN_FULL:
            return Scan(rows, part.position, part.reason, part.facts)
        assert len(part.rows) == capacity


def facts_of(rows: list[dict[str, int]]) -> list[int]:
    """What the cursor's facts slots should hold after a scan of ``rows``, from the columns with NumPy."""
    def column(name: str) -> np.ndarray:
        return np.array([row[name] for row in rows], np.int64)

    base, last, count, stamp = column("base_offset"), column("last_offset"), column("record_count"), \
        column("max_timestamp")
    with np.errstate(over="ignore"):
        span = last - base + 1  # int64, wrapping
        ends = base + count
    not_rising = np.flatnonzero(base[1:] <= last[:-1])
    fine = ends[(base >= 0) & (ends > base)]
    control = column("is_control") != 0
    facts = {
        ref.FACT_ROWS: len(rows), ref.FACT_CRC_BAD: int(np.count_nonzero(column("crc_ok") == ref.CRC_BAD)),
        ref.FACT_FIRST_NOT_RISING: int(not_rising[0]) + 1 if len(not_rising) else -1,
        ref.FACT_LAST_OFFSET: int(last[-1]) if rows else 0,
        ref.FACT_SPAN_DIFFERS: int(np.count_nonzero(span != count)), ref.FACT_RECORDS: int(count.sum()),
        ref.FACT_LOG_END: int(fine.max()) if len(fine) else 0,
        ref.FACT_TRANSACTIONAL: int(np.count_nonzero(column("is_transactional"))),
        ref.FACT_CONTROL: int(np.count_nonzero(control)),
        ref.FACT_ABORT_MARKERS: int(np.count_nonzero(control & (column("control_type") == ref.CONTROL_ABORT))),
        ref.FACT_MIN_TIMESTAMP: int(stamp.min()) if rows else ref.INT64_MAX,
        ref.FACT_MAX_TIMESTAMP: int(stamp.max()) if rows else ref.INT64_MIN,
        ref.FACT_TIMESTAMP_FALLS: int(np.count_nonzero(stamp[1:] < stamp[:-1])),
        ref.FACT_LAST_TIMESTAMP: int(stamp[-1]) if rows else 0,
    }
    assert sorted(facts) == list(range(2, ref.SCAN_CURSOR_SLOTS))
    return [facts[slot] for slot in range(2, ref.SCAN_CURSOR_SLOTS)]


# --- The seams -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", EXPECTED)
def test_every_backend_takes_the_abi_arguments_in_order(name):
    import inspect

    assert list(inspect.signature(load_backend(name).scan_headers).parameters) == list(abi.HEADER_SCAN_SIGNATURE)


def test_the_output_columns_are_the_batch_columns_then_the_scan_s_own():
    assert list(HEADER_SCAN_DTYPES) == list(HeaderScanColumns._fields)
    assert NAMES[:12] == list(abi.BATCH_FIELDS) == list(COLUMNS)
    assert [HEADER_SCAN_DTYPES[f"out_{name}"] for name in COLUMNS] == [
        np.dtype(np.uint8) if dtype == np.bool_ else dtype for dtype in COLUMNS.values()]
    assert [a.dtype for a in HeaderScanColumns.empty(3)] == list(HEADER_SCAN_DTYPES.values())


def test_the_cython_constants_equal_the_reference():
    from idemcore.kernels import cython_header_scan

    constants = {name: value for name, value in vars(ref).items() if name.isupper() and isinstance(value, int)}
    not_needed = {"BASE_TIMESTAMP_AT", "CONTROL_ABORT", "CONTROL_COMMIT", "INT64_MIN", "INT64_MAX", "SEQUENCE_SPACE"}
    assert cython_header_scan.SCAN_CODES == {name: constants[name] for name in set(constants) - not_needed}


# --- Batches of known content -------------------------------------------------------------------------------------

def test_a_segment_of_data_batches_decodes_every_field(backend):
    batches = [
        Batch(base_offset=0, leader_epoch=3, producer_id=7, producer_epoch=1, base_sequence=0, record_count=3,
              records=b"".join(record(b"k%d" % i, b"v" * i, i, i) for i in range(3)), base_timestamp=10,
              max_timestamp=1_700_000_000_000),
        Batch(base_offset=3, leader_epoch=3, attributes=0x10 | 4, producer_id=2**62 + 11, producer_epoch=32767,
              base_sequence=2**31 - 2, record_count=5, records=os.urandom(40), max_timestamp=-1),  # zstd, wraps
        Batch(base_offset=8, leader_epoch=-1, attributes=0x08 | 1, record_count=2, records=os.urandom(7)),  # gzip
        Batch(base_offset=INT64_MAX - 1, attributes=3, last_offset_delta=4, record_count=2, base_sequence=5,
              producer_id=0, producer_epoch=0),  # lz4; compacted: delta beyond the count; last offset wraps
    ]
    data, expected = segment(batches, start=4096)
    result = scan(backend, data, partition=9, file_position=4096)
    assert result.rows == [{**row, "stream": 9} for row in expected]
    assert result.rows[1]["last_sequence"] == 2 and result.rows[3]["last_offset"] == INT64_MIN + 2
    assert (result.position, result.reason) == (len(data), ref.SCAN_END)


def test_markers_decode_their_type_and_coordinator_epoch(backend):
    batches = [
        Batch(attributes=0x30, producer_id=5, producer_epoch=2, records=marker(0, 17), marker=(0, 17)),
        Batch(attributes=0x30, producer_id=5, producer_epoch=2, records=marker(1, -3, 0, 1), marker=(1, -3)),
        Batch(attributes=0x20, records=marker(2, 99), marker=(2, 99)),  # KRaft's LEADER_CHANGE: no epoch
        Batch(attributes=0x20 | 2, records=marker(1, 4), marker=(1, 4)),  # compressed: not read
        Batch(attributes=0x20, record_count=0, records=marker(1, 4), marker=(1, 4)),  # no record: not read
        Batch(attributes=0x20, records=record(b"\x00\x00", b"x"), marker=None),  # key too short
        Batch(attributes=0x20, records=marker(1, 8, key_version=-1), marker=None),  # negative version
        Batch(attributes=0x20, records=marker(1, 8)[:-3], marker=None),  # the record is longer than the batch
    ]
    data, expected = segment(batches)
    rows = scan(backend, data).rows
    assert rows == expected
    assert [(r["control_type"], r["coordinator_epoch"]) for r in rows] == [
        (0, 17), (1, -3), (2, -1), (-1, -1), (-1, -1), (-1, -1), (-1, -1), (-1, -1)]


def test_a_bad_marker_value_keeps_the_type(backend):
    value_too_short = record(struct.pack(">hh", 0, 1), struct.pack(">h", 0))
    negative_value_version = marker(0, 6, value_version=-2)
    rows = scan(backend, segment([Batch(attributes=0x20, records=value_too_short),
                                  Batch(attributes=0x20, records=negative_value_version)])[0]).rows
    assert [(r["control_type"], r["coordinator_epoch"]) for r in rows] == [(1, -1), (0, -1)]


def test_data_batches_take_the_column_defaults(backend):
    row = scan(backend, Batch(records=marker(1, 5)).encode()).rows[0]
    assert (row["control_type"], row["coordinator_epoch"], row["is_control"]) == (-1, 0, 0)


@pytest.mark.parametrize(("base", "count", "last"), [
    (0, 1, 0), (5, 3, 7), (2**31 - 1, 1, 2**31 - 1), (2**31 - 1, 2, 0), (2**31 - 3, 10, 6), (-1, 4, -1),
    (-7, 2, -7), (4, 0, 3), (0, 0, 2**31 - 1), (9, -5, 3), (2**31 - 1, 2**31 - 1, 2**31 - 3),
])
def test_last_sequence_wraps_like_kafka(backend, base, count, last):
    row = scan(backend, Batch(base_sequence=base, record_count=count).encode()).rows[0]
    assert row["last_sequence"] == last


@pytest.mark.parametrize(("base_offset", "delta"), [(INT64_MAX, 1), (INT64_MAX - 5, 2**31 - 1), (INT64_MIN, -1),
                                                    (INT64_MIN + 3, -(2**31)), (-1, 0), (10, -20)])
def test_last_offset_is_java_s_long_addition(backend, base_offset, delta):
    row = scan(backend, Batch(base_offset=base_offset, last_offset_delta=delta).encode()).rows[0]
    assert row["last_offset"] == (base_offset + delta + 2**63) % 2**64 - 2**63


# --- CRC -------------------------------------------------------------------------------------------------------------

def test_a_corrupt_batch_is_reported_and_the_scan_goes_on(backend):
    data, _ = segment([Batch(base_sequence=i, producer_id=1, producer_epoch=0) for i in range(4)])
    damaged = bytearray(data)
    size = len(data) // 4
    damaged[size + 65] ^= 0x01  # in batch 1's record: covered by the CRC
    damaged[2 * size + 22] ^= 0x08  # batch 2's attributes (timestamp type): covered by the CRC
    damaged[3 * size + 3] ^= 0x01  # batch 3's base offset: not covered (Kafka rewrites it on append)
    result = scan(backend, bytes(damaged))
    assert [row["crc_ok"] for row in result.rows] == [1, 0, 0, 1]
    assert [row["base_offset"] for row in result.rows] == [0, 0, 0, 2**32]
    assert result.reason == ref.SCAN_END
    assert [row["crc_ok"] for row in scan(backend, bytes(damaged), verify_crc=False).rows] == [2, 2, 2, 2]


def test_a_stored_crc_that_does_not_match_is_bad(backend):
    data = bytearray(Batch().encode())
    data[17:21] = b"\x00\x00\x00\x00"
    assert scan(backend, bytes(data)).rows[0]["crc_ok"] == 0


def test_the_ctypes_callback_computes_the_crc_the_package_does():
    import ctypes

    function = ref.CRC32C_EXTEND(ref.callback_address(lambda data, crc: crc32c(data, crc)))
    payload = os.urandom(1000)
    buffer = ctypes.create_string_buffer(payload, len(payload))
    assert function(0, buffer, len(payload)) == crc32c(payload)
    assert function(crc32c(payload[:10]), ctypes.byref(buffer, 10), 990) == crc32c(payload)


def test_the_compiled_backends_use_google_s_c_function():
    address, source = ref.crc32c_extend_address()
    assert address and source.startswith("google-crc32c")


# --- Where a scan stops --------------------------------------------------------------------------------------------

def _three() -> tuple[bytes, list[dict[str, int]], list[int]]:
    data, expected = segment([Batch(base_offset=i, records=record(b"k", b"v" * (10 * i))) for i in range(3)])
    starts = [row["position"] for row in expected]
    return data, expected, starts


@pytest.mark.parametrize("cut", ["inside-header", "before-magic", "inside-records", "one-byte-short", "boundary"])
def test_a_truncated_tail_stops_the_scan_at_the_last_whole_batch(backend, cut):
    data, expected, starts = _three()
    end = {"inside-header": starts[2] + 40, "before-magic": starts[2] + 16, "inside-records": starts[2] + 62,
           "one-byte-short": len(data) - 1, "boundary": starts[2]}[cut]
    result = scan(backend, data[:end])
    assert result.rows == expected[:2]
    assert result.position == starts[2]
    assert result.reason == (ref.SCAN_END if cut == "boundary" else ref.SCAN_TRUNCATED)


@pytest.mark.parametrize("magic", [0, 1, 3, 0xFF])
def test_a_bad_magic_stops_the_scan_where_it_is(backend, magic):
    data, expected, starts = _three()
    damaged = bytearray(data)
    damaged[starts[1] + 16] = magic
    result = scan(backend, bytes(damaged), file_position=100)
    assert (result.rows, result.position, result.reason) == (
        [{**expected[0], "position": 100}], starts[1], ref.SCAN_BAD_MAGIC)


@pytest.mark.parametrize("length", [-(2**31), -1, 0, 48])
def test_an_impossible_length_stops_the_scan(backend, length):
    data, expected, starts = _three()
    damaged = bytearray(data)
    damaged[starts[2] + 8:starts[2] + 12] = struct.pack(">i", length)
    result = scan(backend, bytes(damaged))
    assert (result.rows, result.position, result.reason) == (expected[:2], starts[2], ref.SCAN_BAD_LENGTH)


def test_a_length_past_the_end_is_a_truncated_tail(backend):
    data, _, starts = _three()
    damaged = bytearray(data)
    damaged[starts[1] + 8:starts[1] + 12] = struct.pack(">i", 2**31 - 1)
    assert scan(backend, bytes(damaged)).reason == ref.SCAN_TRUNCATED


def test_empty_data_and_a_scan_from_the_end(backend):
    assert (scan(backend, b"").rows, scan(backend, b"").reason) == ([], ref.SCAN_END)
    data, _, _ = _three()
    result = scan(backend, data, start=len(data))
    assert (result.rows, result.position, result.reason) == ([], len(data), ref.SCAN_END)


def test_full_output_arrays_stop_the_scan_and_it_resumes(backend):
    data, expected, starts = _three()
    first = scan(backend, data, capacity=2)
    assert (first.rows, first.position, first.reason) == (expected[:2], starts[2], ref.SCAN_FULL)
    rest = scan(backend, data, capacity=2, start=first.position)
    assert (rest.rows, rest.position, rest.reason) == (expected[2:], len(data), ref.SCAN_END)
    assert scan(backend, data, capacity=3).reason == ref.SCAN_END  # nothing left: the end, not full
    assert scan(backend, data, capacity=0).reason == ref.SCAN_FULL


def test_the_capacity_is_the_shortest_output(backend):
    data, _, _ = _three()
    out = HeaderScanColumns.empty(3)._replace(out_crc_ok=np.empty(1, np.uint8))
    cursor = np.zeros(2, np.int64)
    assert load_backend(backend).scan_headers(np.frombuffer(data, np.uint8), 0, 0, True, cursor, *out) == 1


@pytest.mark.parametrize("start", [-1, 10**9])
def test_a_cursor_outside_the_data_is_refused(backend, start):
    data, _, _ = _three()
    with pytest.raises(ValueError, match=r"cursor\[0\] = .* is outside the data \(0\.\.\d+\)"):
        scan(backend, data, start=start)


def test_an_mmap_of_a_segment_file(backend, tmp_path):
    data, expected, _ = _three()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + data[:30])
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = np.frombuffer(mapped, np.uint8)
        result = scan(backend, view)
        del view  # the mmap cannot close while an array holds it
    assert (result.rows, result.position, result.reason) == (expected, len(data), ref.SCAN_TRUNCATED)


def test_cython_also_takes_bytes_and_mmaps_directly(tmp_path):
    data, expected, _ = _three()
    out = HeaderScanColumns.empty(8)
    cursor = np.zeros(2, np.int64)
    cython = load_backend("cython")
    assert cython.scan_headers(data, 0, 0, True, cursor, *out) == 3
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        cursor[:] = 0
        assert cython.scan_headers(mapped, 0, 0, True, cursor, *out) == 3
    assert out.out_position[:3].tolist() == [row["position"] for row in expected]


# --- Batches built and read by codecs nobody here wrote ------------------------------------------------------------

def _kafka_python_batches() -> list[bytes]:
    """Batches from kafka-python's and aiokafka's builders (every compression type aiokafka has), and control
    batches: kafka-python's builder with the control bit set afterwards (only brokers write them)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AiokafkaBuilder
    from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

    built = []
    cases = [(KafkaPythonBuilder, c) for c in (0, 1)] + [(AiokafkaBuilder, c) for c in (0, 1, 2, 3, 4)]
    for i, (builder_class, compression) in enumerate(cases):
        for transactional in (False, True):
            base_sequence = (2**31 - 4 + i) % 2**31
            builder = builder_class(2, compression, transactional, 1000 + i, i % 3, base_sequence, 1 << 20)
            for n in range(1 + i % 5):
                builder.append(n, timestamp=1_700_000_000_000 + 7 * n, key=b"key-%d" % n,
                               value=os.urandom(20 + n), headers=[("h", b"v")])
            batch = bytearray(builder.build())
            batch[0:8] = struct.pack(">q", 1000 * i + (500 if transactional else 0))  # as a broker assigns
            batch[12:16] = struct.pack(">i", i)
            built.append(bytes(batch))
    for kind, coordinator_epoch in ((0, 3), (1, 2**31 - 1)):
        builder = KafkaPythonBuilder(2, 0, True, 42, 7, -1, 1 << 20)
        builder.append(0, timestamp=5, key=struct.pack(">hh", 0, kind), value=struct.pack(">hi", 0, coordinator_epoch),
                       headers=[])
        batch = bytearray(builder.build())
        batch[22] |= 0x20  # attributes' low byte: the control bit
        batch[17:21] = struct.pack(">I", crc32c(bytes(batch[21:])))
        built.append(bytes(batch))
    return built


def test_batches_of_kafka_python_and_aiokafka_decode_as_kafka_python_reads_them(backend):
    from kafka.record.default_records import DefaultRecordBatch

    built = _kafka_python_batches()
    data = b"".join(built)
    rows = scan(backend, data, partition=3, file_position=10**12).rows
    assert len(rows) == len(built)
    position = 10**12
    for raw, row in zip(built, rows, strict=True):
        batch = DefaultRecordBatch(raw)
        crc_ok = int(batch.validate_crc())  # before reading records, as kafka-python wants
        control_type, coordinator_epoch = -1, 0
        if batch.is_control_batch:
            (control,) = list(batch)
            control_type = control.type
            coordinator_epoch = struct.unpack(">hi", control.value)[1]
        assert row == {
            "stream": 3, "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
            "base_sequence": batch.base_sequence, "last_sequence": batch.last_sequence,
            "base_offset": batch.base_offset, "record_count": batch.records_count,
            "max_timestamp": batch.max_timestamp, "is_transactional": int(batch.is_transactional),
            "is_control": int(batch.is_control_batch), "control_type": control_type,
            "coordinator_epoch": coordinator_epoch, "position": position, "batch_length": len(raw) - 12,
            "last_offset": batch.last_offset, "leader_epoch": batch.leader_epoch,
            "compression": batch.compression_type, "crc_ok": crc_ok,
        }
        position += len(raw)
    assert {row["compression"] for row in rows} == {0, 1, 2, 3, 4}
    assert [(r["control_type"], r["coordinator_epoch"]) for r in rows if r["is_control"]] == [(0, 3), (1, 2**31 - 1)]
    assert any(row["last_sequence"] < row["base_sequence"] for row in rows)  # a sequence wrapped
    assert all(row["crc_ok"] == 1 for row in rows)


def test_scanned_columns_feed_validate(backend):
    sends = [Batch(producer_id=7, producer_epoch=0, base_sequence=3 * i, record_count=3) for i in range(3)]
    data, _ = segment([*sends, sends[1]])  # the last: a retry the log took twice
    out = HeaderScanColumns.empty(8)
    cursor = np.zeros(2, np.int64)
    n = load_backend(backend).scan_headers(np.frombuffer(data, np.uint8), 0, 0, True, cursor, *out)
    columns = {name: column[:n] for name, column in zip(NAMES[:12], out, strict=False)}
    columns = {name: column.view(np.bool_) if COLUMNS[name] == np.bool_ else column
               for name, column in columns.items()}
    verdicts = idemcore.validate(columns, backend=backend)
    assert verdicts.status.tolist() == [0, 0, 0, 1]


# --- Random segments: the backends agree on every column --------------------------------------------------------------

@st.composite
def batches(draw) -> Batch:
    kind = draw(st.sampled_from(["data", "data", "marker", "control-garbage"]))
    attributes = draw(st.integers(0, 7)) | draw(st.sampled_from([0, 0x08, 0x10, 0x18, 0x40]))
    count = draw(st.one_of(st.integers(1, 20), st.integers(-(2**31), 2**31 - 1)))
    batch = Batch(
        base_offset=draw(st.one_of(st.integers(0, 10**6), st.integers(INT64_MIN, INT64_MAX))),
        leader_epoch=draw(st.integers(-(2**31), 2**31 - 1)),
        last_offset_delta=draw(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))),
        max_timestamp=draw(st.integers(INT64_MIN, INT64_MAX)),
        producer_id=draw(st.one_of(st.just(-1), st.integers(0, 2**63 - 1))),
        producer_epoch=draw(st.integers(-(2**15), 2**15 - 1)),
        base_sequence=draw(st.one_of(st.just(-1), st.integers(0, 2**31 - 1), st.integers(-(2**31), -2))),
        record_count=count, records=draw(st.binary(max_size=40)), attributes=attributes,
    )
    if kind == "marker":
        marker_type = draw(st.sampled_from([0, 1, 2, 5, 127]))
        epoch = draw(st.integers(-(2**31), 2**31 - 1))
        batch.records = marker(marker_type, epoch, draw(st.integers(0, 3)), draw(st.integers(0, 3)))
        batch.attributes = (batch.attributes & ~0x20) | 0x20
        batch.marker = (marker_type, epoch)
    elif kind == "control-garbage":
        batch.attributes |= 0x20
        batch.garbage = True
    return batch


@st.composite
def segments(draw) -> tuple[bytes, list[Batch], str]:
    chosen = draw(st.lists(batches(), min_size=0, max_size=8))
    data = b"".join(batch.encode() for batch in chosen)
    damage = draw(st.sampled_from(["none", "none", "truncate", "flip", "magic", "length", "tail"]))
    if not data and damage != "tail":
        damage = "none"
    if data and damage == "truncate":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif data and damage == "flip":
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
    elif data and damage in ("magic", "length"):
        starts = np.cumsum([0] + [len(batch.encode()) for batch in chosen])[:-1]
        at = int(starts[draw(st.integers(0, len(chosen) - 1))])
        if damage == "magic":
            offset, patch = 16, bytes([draw(st.integers(3, 255))])
        else:
            offset, patch = 8, struct.pack(">i", draw(st.integers(-9, 48)))
        data = data[:at + offset] + patch + data[at + offset + len(patch):]
    elif damage == "tail":
        data += draw(st.binary(min_size=1, max_size=80))
    return data, chosen, damage


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.integers(1, 4), st.booleans())
def test_every_backend_agrees_on_random_segments(segment_case, capacity, verify_crc):
    data, chosen, damage = segment_case
    reference = scan("python", data, verify_crc=verify_crc)
    assert reference.facts == facts_of(reference.rows)
    for name in EXPECTED:
        assert scan(name, data, verify_crc=verify_crc) == reference, name
        assert scan_in_chunks(name, data, capacity, verify_crc=verify_crc) == reference, name
    # What the builder wrote, up to the first batch the damage touched.
    position, intact = 0, []
    for batch in chosen:
        encoded = batch.encode()
        if data[position:position + len(encoded)] != encoded:
            break
        expected = {**batch.expected(position), "crc_ok": 1 if verify_crc else 2}
        if batch.garbage and len(reference.rows) > len(intact):
            scanned = reference.rows[len(intact)]
            expected.update(control_type=scanned["control_type"], coordinator_epoch=scanned["coordinator_epoch"])
        intact.append(expected)
        position += len(encoded)
    assert reference.rows[:len(intact)] == intact
    if damage == "none":
        assert (len(reference.rows), reference.position, reference.reason) == (len(chosen), len(data), ref.SCAN_END)
    elif damage in ("magic", "length"):
        assert reference.position == position and len(reference.rows) == len(intact)
        assert reference.reason == (ref.SCAN_BAD_MAGIC if damage == "magic" else ref.SCAN_BAD_LENGTH)
    elif damage == "truncate":
        assert reference.reason in (ref.SCAN_END, ref.SCAN_TRUNCATED) and reference.position == position


# --- Without google-crc32c, and without any CRC-32C package ------------------------------------------------------

HIDE = '''
import sys


class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Hide())
'''

PROBE = '''
import numpy as np
from idemcore.kernels import load_backend, header_scan_reference
from idemcore.kernels.abi import HeaderScanColumns
data = np.frombuffer(bytes.fromhex({data!r}), np.uint8)
print(header_scan_reference.crc32c_extend_address()[1])
for name in ("python", "numba", "cython"):
    out = HeaderScanColumns.empty(4)
    cursor = np.zeros(2, np.int64)
    n = load_backend(name).scan_headers(data, 0, 0, False, cursor, *out)
    try:
        load_backend(name).scan_headers(data, 0, 0, True, np.zeros(2, np.int64), *out)
        print(name, n, out.out_crc_ok[:n].tolist())
    except ImportError as exc:
        print(name, n, "ImportError:", exc)
'''


def _probe(tmp_path: Path, hidden: set[str], data: bytes) -> list[str]:
    (tmp_path / "sitecustomize.py").write_text(HIDE.format(hidden=sorted(hidden)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PACKAGE_PARENT)])}
    result = subprocess.run([sys.executable, "-c", PROBE.format(data=data.hex())], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_without_google_crc32c_the_compiled_scans_call_the_crc32c_package(tmp_path):
    data, _ = segment([Batch(), Batch(base_sequence=4)])
    damaged = bytearray(data)
    damaged[-1] ^= 0x10
    lines = _probe(tmp_path, {"google_crc32c"}, bytes(damaged))
    assert lines == ["a Python CRC-32C package through a ctypes callback (takes the GIL)",
                     "python 2 [1, 0]", "numba 2 [1, 0]", "cython 2 [1, 0]"]


def test_without_a_crc32c_package_verifying_is_refused_and_scanning_works(tmp_path):
    lines = _probe(tmp_path, {"google_crc32c", "crc32c"}, Batch().encode())
    message = "ImportError: verifying batch CRCs needs CRC-32C: pip install crc32c google-crc32c"
    assert lines == ["none", *(f"{name} 1 {message}" for name in ("python", "numba", "cython"))]
