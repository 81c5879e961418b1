"""The header scan: walk a segment's length-prefixed RecordBatch v2 batches and decode each 61-byte header into
the packed batch metadata columns, with the batch's file position and whether its CRC holds.

``scan_headers(data, file_position, stream, verify_crc, cursor, *HeaderScanColumns) -> int``
    ``data`` is a segment or a piece of one that starts at a batch, as a ``uint8`` array (``np.frombuffer`` of
    an mmap or of bytes: no copy); ``file_position`` is the file position of ``data[0]``; ``stream`` fills
    the stream column. ``cursor[0]`` is where in ``data`` to start and, on return, where the scan stopped
    (the first batch not decoded: the resume point); ``cursor[1]`` is why (``SCAN_*``). Rows ``0..count-1`` of
    the ``out_*`` arrays (:class:`idemcore.kernels.abi.HeaderScanColumns`, all as long as the shortest one: the
    capacity) receive the batches; ``count`` is returned. Nothing in ``data`` makes it raise: a truncated tail,
    a bad magic or an impossible length stops the scan where it is, a bad CRC is a column. It raises only for
    arguments a caller got wrong (a cursor outside ``data``) and when ``verify_crc`` is asked for without a
    CRC-32C package. A cursor of :data:`SCAN_CURSOR_SLOTS` slots (:func:`new_cursor`) also receives, in its
    ``FACT_*`` slots, facts of the batches scanned (CRC failures, the first offset that does not rise, record
    counts, transactional and control batches, the timestamp span...), added up over the calls that share it.

Kafka's v2 header (big-endian; DefaultRecordBatch): base offset i64 @0, batch length i32 @8 (the bytes after
it), partition leader epoch i32 @12, magic i8 @16, CRC-32C u32 @17 (of attributes..end), attributes i16 @21,
last offset delta i32 @23, base timestamp i64 @27, max timestamp i64 @35, producer id i64 @43, producer epoch
i16 @51, base sequence i32 @53, record count i32 @57, records @61. The magic sits at byte 16 in every message
format, so v0/v1 message sets stop the scan as ``SCAN_BAD_MAGIC``.

An uncompressed control batch also yields its marker: the first record's key (version i16, type i16) and, for
ABORT and COMMIT, its value (version i16, coordinator epoch i32). Data batches get control type -1 and
coordinator epoch 0 (``kernels.columns.DEFAULTS``); a control batch whose record cannot be read (compressed,
empty, cut short, negative versions) gets -1 in what could not be read.

This is the reference twin: the numba backend compiles this very source (``numba_rules``), the Cython one
(``cython_header_scan.pyx``) is written apart; the tests compare all three on every column. The loop is written
in the subset of Python Numba compiles: shifts instead of ``int.from_bytes``, arithmetic that never leaves
int64. CRC-32C comes from maintained packages, never written here: ``crc32c`` (or ``google-crc32c``) in Python,
and for the compiled twins Google's C function ``crc32c_extend`` from the ``google-crc32c`` wheel, called per
batch without the GIL (:func:`crc32c_extend_address`).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

from idemcore.protocol.sequences import SEQUENCE_SPACE, seq_add

# Offsets in a v2 batch (Kafka's DefaultRecordBatch).
BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
BASE_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
PRODUCER_ID_AT = 43
PRODUCER_EPOCH_AT = 51
BASE_SEQUENCE_AT = 53
RECORD_COUNT_AT = 57
RECORDS_AT = 61
LOG_OVERHEAD = 12  # base offset and batch length: the bytes the length does not count
HEADER_UP_TO_MAGIC = 17  # what must be there to tell a batch's format
MIN_BATCH_LENGTH = RECORDS_AT - LOG_OVERHEAD  # 49: a v2 batch is at least its header
MAGIC_V2 = 2
COMPRESSION_MASK = 0x07
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

# Why a scan stopped (cursor[1]).
SCAN_END = 0  # every byte of data was a whole batch
SCAN_FULL = 1  # the output arrays are full: call again from cursor[0]
SCAN_TRUNCATED = 2  # the tail is shorter than a header or than its batch length says (torn write, or read more)
SCAN_BAD_MAGIC = 3  # not a v2 batch (a v0/v1 message set, or garbage)
SCAN_BAD_LENGTH = 4  # a batch length below the 49 bytes a v2 header needs after it
# out_crc_ok
CRC_BAD = 0
CRC_OK = 1
CRC_UNCHECKED = 2
# Control records (Kafka's ControlRecordType; -1 is UNKNOWN).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_UNKNOWN = -1
NO_COORDINATOR_EPOCH = -1
INT64_MIN = -9223372036854775808
INT64_MAX = 9223372036854775807
# A cursor of SCAN_CURSOR_SLOTS slots (new_cursor) also receives facts of the batches scanned, added up over the
# calls that share it, so a caller need not pass over the columns again to learn them (a 2-slot cursor gets none).
FACT_ROWS = 2  # batches scanned with this cursor
FACT_CRC_BAD = 3  # batches whose CRC does not match
FACT_FIRST_NOT_RISING = 4  # the first batch (row) whose base offset is not above the previous one's last; -1: none
FACT_LAST_OFFSET = 5  # the last batch's last offset
FACT_SPAN_DIFFERS = 6  # batches whose offset span (last offset - base offset + 1) is not their record count
FACT_RECORDS = 7  # record counts added up
FACT_LOG_END = 8  # the largest base offset + record count of a batch with base offset >= 0 ending above it; 0: none
FACT_TRANSACTIONAL = 9  # transactional batches
FACT_CONTROL = 10  # control batches
FACT_ABORT_MARKERS = 11  # control batches whose marker is an ABORT
FACT_MIN_TIMESTAMP = 12  # the smallest max timestamp (INT64_MAX: no batch)
FACT_MAX_TIMESTAMP = 13  # the largest max timestamp (INT64_MIN: no batch)
FACT_TIMESTAMP_FALLS = 14  # batches whose max timestamp is below the previous batch's
FACT_LAST_TIMESTAMP = 15  # the last batch's max timestamp
SCAN_CURSOR_SLOTS = 16


def read_u8(data, p):
    return int(data[p])


def read_u32(data, p):
    """The big-endian uint32 at ``p``."""
    return (read_u8(data, p) << 24) | (read_u8(data, p + 1) << 16) | (read_u8(data, p + 2) << 8) | read_u8(data, p + 3)


def read_i32(data, p):
    v = read_u32(data, p)
    return v - 4294967296 if v >= 2147483648 else v


def read_i16(data, p):
    v = (read_u8(data, p) << 8) | read_u8(data, p + 1)
    return v - 65536 if v >= 32768 else v


def read_i64(data, p):
    # The signed high half times 2**32 plus the low half: exact in Python and within int64 in Numba.
    return read_i32(data, p) * 4294967296 + read_u32(data, p + 4)


def add_i64(a, b):
    """``a + b`` wrapping at the int64 bounds as Java's long does (``b`` is an int32); no intermediate value
    leaves int64, so Python and Numba agree."""
    if b > 0 and a > INT64_MAX - b:
        return (a + INT64_MIN) + (b + INT64_MIN)
    if b < 0 and a < INT64_MIN - b:
        return (a + INT64_MAX + 1) + (b + INT64_MAX + 1)
    return a + b


def batch_last_sequence(base_sequence, record_count):
    """``base_sequence + record_count - 1`` in the wrapping sequence space; a negative base sequence (-1: none)
    stays as it is. Equals ``protocol.sequences.last_sequences`` for every int32 pair, garbage included."""
    if base_sequence < 0:
        return base_sequence
    return seq_add(base_sequence, (record_count - 1) % SEQUENCE_SPACE)


def read_varint(data, p, end):
    """The zig-zag varint at ``p`` (Kafka's readVarint: at most 5 bytes, 32 bits kept): (value, position after
    it); the position is -1 when ``p`` is -1 or the varint runs past ``end`` or past 5 bytes."""
    raw = 0
    shift = 0
    while shift < 35:
        if p < 0 or p >= end:
            return 0, -1
        b = read_u8(data, p)
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), p
        shift += 7
    return 0, -1


def skip_varint(data, p, end, max_bytes):
    """The position after the varint at ``p`` of at most ``max_bytes`` bytes (5: varint, 10: varlong); -1 if
    ``p`` is -1 or it runs past ``end`` or ``max_bytes``."""
    for _ in range(max_bytes):
        if p < 0 or p >= end:
            return -1
        b = read_u8(data, p)
        p += 1
        if b < 0x80:
            return p
    return -1


def decode_control(data, p, end, compression, record_count):
    """(control type, coordinator epoch) of the control batch whose records start at ``p`` and end at ``end``.

    The first record: length, attributes i8, timestamp delta (varlong), offset delta, key length, key (version
    i16, type i16), value length, value (version i16, coordinator epoch i32, for ABORT and COMMIT)."""
    if compression != 0 or record_count < 1:
        return CONTROL_UNKNOWN, NO_COORDINATOR_EPOCH
    length, p = read_varint(data, p, end)
    if p < 0 or length < 0 or length > end - p:
        return CONTROL_UNKNOWN, NO_COORDINATOR_EPOCH
    end = p + length  # the record's end
    p = skip_varint(data, p + 1, end, 10)  # past attributes and timestamp delta
    p = skip_varint(data, p, end, 5)  # offset delta
    key_length, p = read_varint(data, p, end)
    if p < 0 or key_length < 4 or key_length > end - p:
        return CONTROL_UNKNOWN, NO_COORDINATOR_EPOCH
    version = read_i16(data, p)
    control_type = read_i16(data, p + 2)
    if version < 0 or control_type < 0 or control_type > 127:
        return CONTROL_UNKNOWN, NO_COORDINATOR_EPOCH
    if control_type != CONTROL_ABORT and control_type != CONTROL_COMMIT:
        return control_type, NO_COORDINATOR_EPOCH  # KRaft's records: no end-transaction marker value
    value_length, p = read_varint(data, p + key_length, end)
    if p < 0 or value_length < 6 or value_length > end - p or read_i16(data, p) < 0:
        return control_type, NO_COORDINATOR_EPOCH
    return control_type, read_i32(data, p + 2)


#: Without CRCs the scan reads only each batch's header, a miss the processor does not see coming (the next
#: position is known only from this batch's length): the compiled twins ask for the lines up to this many bytes
#: ahead, as a stream (:func:`read_ahead`).
READ_AHEAD = 4096
#: The bytes one prefetch asks for.
CACHE_LINE = 64


def read_ahead(data, ahead, until):
    """Ask for the cache lines of ``data[ahead:until]``; returns how far it has asked (``until``, or ``ahead`` if
    that is further). A hint, so nothing here; LLVM prefetches where Numba compiles this module (``numba_rules``),
    and the Cython twin's own."""
    return max(ahead, until)


def batch_crc(data, start, stop):
    """CRC-32C of ``data[start:stop]`` (the numba twin calls Google's C function instead)."""
    compute = python_crc32c()
    assert compute is not None  # prepare_crc32c raised before the scan otherwise
    return compute(data[start:stop], 0)


def scan_batches(data, file_position, stream, verify_crc, cursor, capacity,
                 out_stream, out_producer_id, out_producer_epoch, out_base_sequence, out_last_sequence,
                 out_base_offset, out_record_count, out_max_timestamp, out_is_transactional, out_is_control,
                 out_control_type, out_coordinator_epoch, out_position, out_batch_length, out_last_offset,
                 out_leader_epoch, out_compression, out_crc_ok):
    """The loop of :func:`scan_headers` (checked arguments, ``capacity`` rows)."""
    size = len(data)
    p = int(cursor[0])
    count = 0
    reason = SCAN_END
    facts = len(cursor) >= SCAN_CURSOR_SLOTS
    ahead = p  # (without CRCs) the first byte not yet asked for
    rows = crc_bad = first_not_rising = previous_last = span_differs = records = log_end = 0
    transactional = control = aborts = min_stamp = max_stamp = falls = previous_stamp = 0
    if facts:
        rows, crc_bad, first_not_rising = cursor[FACT_ROWS], cursor[FACT_CRC_BAD], cursor[FACT_FIRST_NOT_RISING]
        previous_last, span_differs, records = cursor[FACT_LAST_OFFSET], cursor[FACT_SPAN_DIFFERS], cursor[FACT_RECORDS]
        log_end, transactional, control = cursor[FACT_LOG_END], cursor[FACT_TRANSACTIONAL], cursor[FACT_CONTROL]
        aborts, min_stamp = cursor[FACT_ABORT_MARKERS], cursor[FACT_MIN_TIMESTAMP]
        max_stamp = cursor[FACT_MAX_TIMESTAMP]
        falls, previous_stamp = cursor[FACT_TIMESTAMP_FALLS], cursor[FACT_LAST_TIMESTAMP]
    while True:
        remaining = size - p
        if remaining <= 0:
            reason = SCAN_END
            break
        if count >= capacity:
            reason = SCAN_FULL
            break
        if remaining < HEADER_UP_TO_MAGIC:
            reason = SCAN_TRUNCATED
            break
        if not verify_crc:  # (a CRC reads every byte in order, which the processor sees coming)
            ahead = read_ahead(data, ahead, min(p + READ_AHEAD, size))
        if read_u8(data, p + MAGIC_AT) != MAGIC_V2:
            reason = SCAN_BAD_MAGIC
            break
        batch_length = read_i32(data, p + LENGTH_AT)
        if batch_length < MIN_BATCH_LENGTH:
            reason = SCAN_BAD_LENGTH
            break
        if batch_length > remaining - LOG_OVERHEAD:
            reason = SCAN_TRUNCATED
            break
        end = p + LOG_OVERHEAD + batch_length
        attributes = read_i16(data, p + ATTRIBUTES_AT)
        base_offset = read_i64(data, p + BASE_OFFSET_AT)
        base_sequence = read_i32(data, p + BASE_SEQUENCE_AT)
        record_count = read_i32(data, p + RECORD_COUNT_AT)
        compression = attributes & COMPRESSION_MASK
        control_type = CONTROL_UNKNOWN
        coordinator_epoch = 0
        if attributes & CONTROL_FLAG:
            control_type, coordinator_epoch = decode_control(data, p + RECORDS_AT, end, compression, record_count)
        crc_ok = CRC_UNCHECKED
        if verify_crc:
            crc_ok = CRC_OK if batch_crc(data, p + ATTRIBUTES_AT, end) == read_u32(data, p + CRC_AT) else CRC_BAD
        out_stream[count] = stream
        out_producer_id[count] = read_i64(data, p + PRODUCER_ID_AT)
        out_producer_epoch[count] = read_i16(data, p + PRODUCER_EPOCH_AT)
        out_base_sequence[count] = base_sequence
        out_last_sequence[count] = batch_last_sequence(base_sequence, record_count)
        out_base_offset[count] = base_offset
        out_record_count[count] = record_count
        out_max_timestamp[count] = read_i64(data, p + MAX_TIMESTAMP_AT)
        out_is_transactional[count] = 1 if attributes & TRANSACTIONAL_FLAG else 0
        out_is_control[count] = 1 if attributes & CONTROL_FLAG else 0
        out_control_type[count] = control_type
        out_coordinator_epoch[count] = coordinator_epoch
        out_position[count] = file_position + p
        out_batch_length[count] = batch_length
        out_last_offset[count] = add_i64(base_offset, read_i32(data, p + LAST_OFFSET_DELTA_AT))
        out_leader_epoch[count] = read_i32(data, p + LEADER_EPOCH_AT)
        out_compression[count] = compression
        out_crc_ok[count] = crc_ok
        if facts:
            last_offset = out_last_offset[count]
            max_timestamp = out_max_timestamp[count]
            crc_bad += 1 if crc_ok == CRC_BAD else 0
            if rows > 0 and first_not_rising < 0 and base_offset <= previous_last:
                first_not_rising = rows
            previous_last = last_offset
            # last - base + 1 != count, as int64 arithmetic wraps: last != base + (count - 1)
            span_differs += 1 if last_offset != add_i64(base_offset, record_count - 1) else 0
            records += record_count
            batch_end = add_i64(base_offset, record_count)
            if base_offset >= 0 and batch_end > base_offset and batch_end > log_end:
                log_end = batch_end
            transactional += 1 if attributes & TRANSACTIONAL_FLAG else 0
            control += 1 if attributes & CONTROL_FLAG else 0
            aborts += 1 if (attributes & CONTROL_FLAG) != 0 and control_type == CONTROL_ABORT else 0
            min_stamp = min(min_stamp, max_timestamp)
            max_stamp = max(max_stamp, max_timestamp)
            falls += 1 if rows > 0 and max_timestamp < previous_stamp else 0
            previous_stamp = max_timestamp
            rows += 1
        count += 1
        p = end
    cursor[0] = p
    cursor[1] = reason
    if facts:
        cursor[FACT_ROWS], cursor[FACT_CRC_BAD], cursor[FACT_FIRST_NOT_RISING] = rows, crc_bad, first_not_rising
        cursor[FACT_LAST_OFFSET], cursor[FACT_SPAN_DIFFERS], cursor[FACT_RECORDS] = previous_last, span_differs, records
        cursor[FACT_LOG_END], cursor[FACT_TRANSACTIONAL], cursor[FACT_CONTROL] = log_end, transactional, control
        cursor[FACT_ABORT_MARKERS], cursor[FACT_MIN_TIMESTAMP] = aborts, min_stamp
        cursor[FACT_MAX_TIMESTAMP] = max_stamp
        cursor[FACT_TIMESTAMP_FALLS], cursor[FACT_LAST_TIMESTAMP] = falls, previous_stamp
    return count


def scan_headers(data, file_position, stream, verify_crc, cursor,
                 out_stream, out_producer_id, out_producer_epoch, out_base_sequence, out_last_sequence,
                 out_base_offset, out_record_count, out_max_timestamp, out_is_transactional, out_is_control,
                 out_control_type, out_coordinator_epoch, out_position, out_batch_length, out_last_offset,
                 out_leader_epoch, out_compression, out_crc_ok):
    """Decode the batch headers of ``data`` from ``cursor[0]`` on; see the module's docstring."""
    capacity = scan_capacity(data, cursor, (
        out_stream, out_producer_id, out_producer_epoch, out_base_sequence, out_last_sequence, out_base_offset,
        out_record_count, out_max_timestamp, out_is_transactional, out_is_control, out_control_type,
        out_coordinator_epoch, out_position, out_batch_length, out_last_offset, out_leader_epoch, out_compression,
        out_crc_ok))
    prepare_crc32c(verify_crc)
    return scan_batches(data, file_position, stream, verify_crc, cursor, capacity,
                        out_stream, out_producer_id, out_producer_epoch, out_base_sequence, out_last_sequence,
                        out_base_offset, out_record_count, out_max_timestamp, out_is_transactional, out_is_control,
                        out_control_type, out_coordinator_epoch, out_position, out_batch_length, out_last_offset,
                        out_leader_epoch, out_compression, out_crc_ok)


# Plain Python from here on: argument checks and the CRC-32C functions, never compiled.

def new_cursor(position: int = 0) -> Any:
    """A cursor of :data:`SCAN_CURSOR_SLOTS` slots at ``position``, its facts empty: scans that share it add up
    their batches' facts in it (``FACT_*``)."""
    import numpy as np

    cursor = np.zeros(SCAN_CURSOR_SLOTS, np.int64)
    cursor[0] = position
    cursor[FACT_FIRST_NOT_RISING] = -1
    cursor[FACT_MIN_TIMESTAMP] = INT64_MAX
    cursor[FACT_MAX_TIMESTAMP] = INT64_MIN
    return cursor


def scan_capacity(data, cursor, outputs) -> int:
    """The rows the scan may write (the shortest output); ValueError for a cursor that is not in ``data``."""
    if len(cursor) < 2:
        raise ValueError(f"cursor must have 2 slots (position, stop reason), not {len(cursor)}")
    if not 0 <= cursor[0] <= len(data):
        raise ValueError(f"cursor[0] = {cursor[0]} is outside the data (0..{len(data)})")
    return min(len(output) for output in outputs)


def prepare_crc32c(verify_crc) -> None:
    """Raise ImportError if ``verify_crc`` is asked for and no package computes CRC-32C."""
    if verify_crc and python_crc32c() is None:
        raise ImportError("verifying batch CRCs needs CRC-32C: pip install crc32c google-crc32c")


@functools.cache
def python_crc32c() -> Callable[[Any, int], int] | None:
    """``f(buffer, crc) -> crc`` extending a CRC-32C: the ``crc32c`` package's, else ``google-crc32c``'s; None
    without either."""
    try:
        from crc32c import crc32c

        return crc32c
    except ImportError:
        pass
    try:
        import google_crc32c
    except ImportError:
        return None
    return lambda data, crc: google_crc32c.extend(crc, bytes(data))


#: ``uint32_t f(uint32_t crc, const uint8_t *data, size_t size)``: the C type of ``crc32c_extend``.
CRC32C_EXTEND = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t)
_callbacks: list[object] = []  # ctypes callbacks handed out as addresses: they must outlive every call


@functools.cache
def crc32c_extend_address() -> tuple[int, str]:
    """(address, source) of a C function ``uint32_t f(uint32_t crc, const uint8_t *data, size_t size)``
    extending a CRC-32C, for the compiled scans; (0, "none") without a CRC-32C package.

    First choice: ``crc32c_extend``, the public C API of Google's crc32c library (hardware CRC instructions,
    no GIL), which the ``google-crc32c`` wheel links into its extension. Else a ctypes callback around
    :func:`python_crc32c` (correct, but it takes the GIL for every batch: a few times slower).
    """
    try:
        from google_crc32c import _crc32c  # the C extension: dlsym on it finds symbols of the libraries it links

        function = ctypes.CDLL(_crc32c.__file__).crc32c_extend
        address = ctypes.cast(function, ctypes.c_void_p).value
        if address:
            return address, "google-crc32c crc32c_extend (C, no GIL)"
    except (ImportError, OSError, AttributeError):
        pass
    compute = python_crc32c()
    if compute is None:
        return 0, "none"
    return callback_address(compute), "a Python CRC-32C package through a ctypes callback (takes the GIL)"


def callback_address(compute: Callable[[Any, int], int]) -> int:
    """Address of a C function ``uint32_t f(uint32_t crc, const uint8_t *data, size_t size)`` that calls
    ``compute(buffer, crc)``: a ctypes callback, kept alive for the life of the process."""

    def extend(crc: int, address: int, size: int) -> int:
        return compute(ctypes.string_at(address, size), crc)

    callback = CRC32C_EXTEND(extend)
    _callbacks.append(callback)
    return ctypes.cast(callback, ctypes.c_void_p).value or 0
