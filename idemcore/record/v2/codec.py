"""RecordBatch v2, bytes-exact: Kafka's on-disk and wire batch format (``DefaultRecordBatch``, ``DefaultRecord``).

Layout (big-endian; byte offset: field)::

    0 base_offset i64 | 8 batch_length i32 (bytes after this field) | 12 partition_leader_epoch i32 |
    16 magic i8 = 2 | 17 crc u32 (CRC-32C of bytes 21..end) | 21 attributes i16 | 23 last_offset_delta i32 |
    27 base_timestamp i64 | 35 max_timestamp i64 | 43 producer_id i64 | 51 producer_epoch i16 |
    53 base_sequence i32 | 57 record_count i32 | 61 records (compressed as a whole when bits 0-2 say so)

    record: length varint | attributes i8 | timestamp_delta varlong | offset_delta varint |
            key_length varint (-1 = null) + key | value_length varint (-1 = null) + value |
            header_count varint | per header: key_length varint + UTF-8 key, value_length varint (-1 = null) + value

base_offset and partition_leader_epoch are outside the CRC, so a broker rewrites them without recomputing it.

``BatchHeader`` and ``Record`` are named tuples: immutable, typed, and built straight from ``struct`` output
(a frozen dataclass costs ten times more per header, which a header scan pays per batch).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

from idemcore.protocol.constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from idemcore.protocol.sequences import seq_add
from idemcore.record.crc import crc32c
from idemcore.record.v2.compression import Compression, compress, decompress
from idemcore.record.v2.errors import CorruptRecordError, IncompleteBatchError, VarintError
from idemcore.record.v2.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    put_unsigned,
    read_varint,
    read_varlong,
)

if TYPE_CHECKING:
    import mmap

#: What the readers take: any bytes-like object of single bytes (an mmap too).
Buffer: TypeAlias = "bytes | bytearray | memoryview | mmap.mmap"

MAGIC = 2
#: Bytes before the part of a batch that ``batch_length`` counts (base offset i64 + length i32): Kafka's LOG_OVERHEAD.
LOG_OVERHEAD = 12
#: The v2 header: Kafka's RECORD_BATCH_OVERHEAD.
BATCH_HEADER_SIZE = 61
#: The smallest ``batch_length`` a v2 batch can declare (a header and no records).
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAGIC_OFFSET = 16
PARTITION_LEADER_EPOCH_OFFSET = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_CRC = struct.Struct(">I")
assert _HEADER.size == BATCH_HEADER_SIZE


class TimestampType(enum.IntEnum):
    """Bit 3 of the attributes (Kafka's ``TimestampType``)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


Header: TypeAlias = tuple[str, bytes | None]


class Record(NamedTuple):
    """One record of a batch, as stored: deltas from the batch's base offset and base timestamp.

    Header keys are ``str``; bytes that are not UTF-8 decode with ``surrogateescape`` so they encode back
    to the same bytes. ``attributes`` is the record's own attribute byte (signed; Kafka writes 0).
    """

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 batch, every field as stored."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_in_bytes(self) -> int:
        """The whole batch, header included: ``batch_length`` + 12."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        codec = self.attributes & COMPRESSION_MASK
        try:
            return Compression(codec)
        except ValueError:
            raise CorruptRecordError(f"unknown compression codec {codec} in attributes {self.attributes:#06x}",
                                     None) from None

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the delete-horizon bit is set, ``base_timestamp`` holds it (KIP-534)."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """The last record's sequence, wrapping past 2147483647 (-1 without sequences), as Kafka computes it."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return int(seq_add(self.base_sequence, self.last_offset_delta))

    def offset_of(self, record: Record) -> int:
        return self.base_offset + record.offset_delta

    def timestamp_of(self, record: Record) -> int:
        """The record's timestamp: base + delta, or the batch's max timestamp under LOG_APPEND_TIME."""
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return self.max_timestamp
        return self.base_timestamp + record.timestamp_delta


_new_header = tuple.__new__
_new_record = tuple.__new__


# --- reading ------------------------------------------------------------------------------------------------

def read_header(buffer: Buffer, position: int = 0) -> BatchHeader:
    """The header of the batch at ``position``, without decoding its records or checking its CRC.

    Checks, in Kafka's order (``ByteBufferLogInputStream.nextBatch``): the length is at least a header's,
    the magic is 2, and the whole batch is in the buffer. Raises CorruptRecordError for a bad length or
    magic, IncompleteBatchError (a subclass) when the buffer ends first.
    """
    available = len(buffer) - position
    if position < 0 or available < 0:
        raise ValueError(f"position {position} is outside the buffer of {len(buffer)} bytes")
    if available >= BATCH_HEADER_SIZE:
        fields = _HEADER.unpack_from(buffer, position)
        batch_length = fields[1]
        if batch_length < MIN_BATCH_LENGTH:
            raise _short_length(batch_length, position)
        if fields[3] != MAGIC:
            raise _bad_magic(fields[3], position)
        if batch_length > available - LOG_OVERHEAD:
            raise _incomplete(position, batch_length + LOG_OVERHEAD, available)
        return _new_header(BatchHeader, fields)
    # Fewer bytes than a header: say what the bytes that are there allow.
    if available < LOG_OVERHEAD:
        raise _incomplete(position, LOG_OVERHEAD, available)
    (batch_length,) = _INT32.unpack_from(buffer, position + 8)
    if batch_length < MIN_BATCH_LENGTH:
        raise _short_length(batch_length, position)
    if available > MAGIC_OFFSET:
        magic = buffer[position + MAGIC_OFFSET]
        magic = magic - 256 if magic > 127 else magic
        if magic != MAGIC:
            raise _bad_magic(magic, position)
    raise _incomplete(position, batch_length + LOG_OVERHEAD, available)


def _short_length(batch_length: int, position: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"batch length {batch_length} at position {position + 8} is below the v2 minimum {MIN_BATCH_LENGTH}",
        position + 8)


def _bad_magic(magic: int, position: int) -> CorruptRecordError:
    return CorruptRecordError(f"magic {magic} at position {position + MAGIC_OFFSET}, expected {MAGIC} "
                              "(only RecordBatch v2 is read)", position + MAGIC_OFFSET)


def _incomplete(position: int, needed: int, available: int) -> IncompleteBatchError:
    return IncompleteBatchError(
        f"batch at position {position} needs {needed} bytes but the buffer ends after {available}",
        position, needed, available)


def compute_crc(buffer: Buffer, position: int = 0, header: BatchHeader | None = None) -> int:
    """CRC-32C of the batch at ``position`` from its attributes to its end (what the crc field must hold)."""
    if header is None:
        header = read_header(buffer, position)
    with memoryview(buffer) as view:
        return int(crc32c(view[position + ATTRIBUTES_OFFSET:position + header.batch_length + LOG_OVERHEAD]))


def verify_crc(buffer: Buffer, position: int = 0) -> bool:
    """True when the stored CRC of the batch at ``position`` matches its bytes (Kafka's ``isValid``).

    A batch too short or with a bad magic raises CorruptRecordError, as ``read_header``.
    """
    header = read_header(buffer, position)
    return compute_crc(buffer, position, header) == header.crc


def iter_batches(buffer: Buffer, position: int = 0, *, check_crc: bool = False,
                 allow_partial_tail: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """Walk the batches laid back to back from ``position``: yield ``(position, header)`` for each.

    Stops at the end of the buffer. A batch cut off by the end raises IncompleteBatchError, or ends the walk
    quietly with ``allow_partial_tail`` (a log reader's torn tail: the caller sees where the last whole batch
    ended). A bad length or magic raises CorruptRecordError; so does a CRC mismatch with ``check_crc``.
    """
    end = len(buffer)
    while position < end:
        try:
            header = read_header(buffer, position)
        except IncompleteBatchError:
            if allow_partial_tail:
                return
            raise
        if check_crc:
            crc = compute_crc(buffer, position, header)
            if crc != header.crc:
                raise _crc_mismatch(header, crc, position)
        yield position, header
        position += header.batch_length + LOG_OVERHEAD


def _crc_mismatch(header: BatchHeader, crc: int, position: int) -> CorruptRecordError:
    return CorruptRecordError(f"CRC mismatch in the batch at position {position}: stored {header.crc:#010x}, "
                              f"computed {crc:#010x}", position)


def decode_batch(buffer: Buffer, position: int = 0, *, check_crc: bool = True) -> tuple[BatchHeader, list[Record]]:
    """Decode the whole batch at ``position``: its header and its records (decompressed).

    Raises CorruptRecordError (one line, naming the value and its position) for a bad length or magic, a
    CRC mismatch (unless ``check_crc`` is False), an unknown codec, data that does not decompress, a
    malformed record or varint, or a record count that does not match the records; IncompleteBatchError
    when the buffer ends before the batch. A batch declaring 0 records has none, whatever follows its header
    (as Kafka reads it: compaction can leave such batches).
    """
    header = read_header(buffer, position)
    size = header.batch_length + LOG_OVERHEAD
    if check_crc:
        crc = compute_crc(buffer, position, header)
        if crc != header.crc:
            raise _crc_mismatch(header, crc, position)
    count = header.record_count
    if count < 0:
        raise CorruptRecordError(f"record count {count} at position {position + 57} is negative", position + 57)
    if count == 0:
        return header, []
    codec = header.attributes & COMPRESSION_MASK
    start = position + BATCH_HEADER_SIZE
    section = memoryview(buffer)[start:position + size]
    if codec == Compression.NONE:
        data = bytes(section)
        origin = _Origin(start, None, position)
    else:
        try:
            data = decompress(codec, section)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{exc} (records of the batch at position {position}, attributes "
                                     f"{header.attributes:#06x})", start) from None
        origin = _Origin(0, Compression(codec).name.lower(), position)
    del section  # an mmap can close once no view of it is left
    return header, _decode_records(data, count, origin)


class _Origin:
    """Where the records' bytes sit, for error messages only."""

    __slots__ = ("base", "codec", "position")

    def __init__(self, base: int, codec: str | None, position: int):
        self.base = base
        self.codec = codec
        self.position = position

    def at(self, pos: int) -> str:
        if self.codec is None:
            return f"position {self.base + pos}"
        return f"byte {pos} of the {self.codec}-decompressed records of the batch at position {self.position}"

    def error(self, message: str, pos: int) -> CorruptRecordError:
        return CorruptRecordError(f"{message} at {self.at(pos)}", self.base + pos if self.codec is None else None)


#: The value of each one-byte zig-zag varint, by its byte (0x00-0x7F).
_ZIGZAG_BYTE = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))


def _multibyte_varint(data: bytes, pos: int, slow: Callable[[bytes, int], tuple[int, int]] = read_varint,
                      ) -> tuple[int, int]:
    """The zig-zag varint at ``data[pos]``, whose first byte has the continuation bit, and the position after it.

    Two bytes are read here (an IndexError when the second is missing), longer varints by ``slow``
    (``read_varint`` or ``read_varlong``).
    """
    if (c := data[pos + 1]) < 0x80:
        raw = (data[pos] & 0x7F) | (c << 7)
        return (raw >> 1) ^ -(raw & 1), pos + 2
    return slow(data, pos)


def _null(size: int, what: str, index: int, field: int, origin: _Origin) -> bytes | None:
    """The value of nullable bytes (key, value, header value) whose length is negative: None for -1; any other
    is corrupt. (Typed as the field it stands for; it never returns bytes.)"""
    if size != -1:
        raise origin.error(f"{what} length {size} (record {index})", field)
    return None


def _decode_records(data: bytes, count: int, origin: _Origin) -> list[Record]:
    # The hot loop of a decode: no call on the common path. A varint of one byte is read inline, as
    #     value, pos = (zigzag[b], pos + 1) if (b := data[pos]) < 0x80 else _multibyte_varint(data, pos)
    # a longer one by _multibyte_varint (two bytes there, more through read_varint or read_varlong). The header
    # fields go from one byte straight to read_varint, so a header varint cut off after its first byte is a
    # VarintError where a field before the headers raises IndexError (two messages, kept as they were).
    # Nullable bytes are sliced inline, _null reading a negative length. An IndexError means the bytes ran out;
    # the record's declared length is checked at its end.
    records: list[Record] = []
    append = records.append
    new = _new_record
    zigzag = _ZIGZAG_BYTE
    end = len(data)
    pos = 0
    index = 0
    start = 0
    try:
        while index < count:
            if pos >= end:
                raise origin.error(f"record count mismatch: the header declares {count} records, the records "
                                   f"end after {index}", pos)
            start = pos
            length, pos = (zigzag[b], pos + 1) if (b := data[pos]) < 0x80 else _multibyte_varint(data, pos)
            if length < 0 or length > end - pos:
                raise origin.error(f"record length {length} (record {index} of {count}) runs past the "
                                   f"{end - pos} bytes left", start)
            record_end = pos + length
            attributes = data[pos]
            pos += 1
            timestamp_delta, pos = ((zigzag[b], pos + 1) if (b := data[pos]) < 0x80
                                    else _multibyte_varint(data, pos, read_varlong))
            offset_delta, pos = (zigzag[b], pos + 1) if (b := data[pos]) < 0x80 else _multibyte_varint(data, pos)
            field = pos
            size, pos = (zigzag[b], pos + 1) if (b := data[pos]) < 0x80 else _multibyte_varint(data, pos)
            key = data[pos:pos + size] if size >= 0 else _null(size, "key", index, field, origin)
            pos += size if size > 0 else 0
            field = pos
            size, pos = (zigzag[b], pos + 1) if (b := data[pos]) < 0x80 else _multibyte_varint(data, pos)
            value = data[pos:pos + size] if size >= 0 else _null(size, "value", index, field, origin)
            pos += size if size > 0 else 0
            if (b := data[pos]) == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                field = pos
                size, pos = (zigzag[b], pos + 1) if b < 0x80 else read_varint(data, pos)
                if size < 0 or size > record_end - pos:
                    raise origin.error(f"header count {size} (record {index}) does not fit the "
                                       f"{record_end - pos} bytes left in the record", field)
                header_list: list[Header] = []
                for _ in range(size):
                    field = pos
                    size, pos = (zigzag[b], pos + 1) if (b := data[pos]) < 0x80 else read_varint(data, pos)
                    if size < 0:
                        raise origin.error(f"header key length {size} (record {index})", field)
                    name = data[pos:pos + size].decode("utf-8", "surrogateescape")
                    pos += size
                    field = pos
                    size, pos = (zigzag[b], pos + 1) if (b := data[pos]) < 0x80 else read_varint(data, pos)
                    header_list.append((name, data[pos:pos + size] if size >= 0
                                        else _null(size, "header value", index, field, origin)))
                    pos += size if size > 0 else 0
                headers = tuple(header_list)
            if pos != record_end:
                raise origin.error(f"record {index} declares a length of {length} bytes but its fields take "
                                   f"{pos - (record_end - length)}", start)
            append(new(Record, (offset_delta, timestamp_delta, key, value, headers,
                                attributes - 256 if attributes > 127 else attributes)))
            index += 1
    except VarintError as exc:
        raise origin.error(f"{exc.reason} (record {index})", exc.position or 0) from None
    except IndexError:
        raise origin.error(f"record {index} of {count} (starting at {origin.at(start)}) is cut off by the end of "
                           "the records", end) from None
    if pos != end:
        raise origin.error(f"record count mismatch: the header declares {count} records but {end - pos} bytes "
                           "remain after them", pos)
    return records


# --- writing ------------------------------------------------------------------------------------------------

def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: Compression | int = Compression.NONE,
    timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    has_delete_horizon: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset_delta: int | None = None,
) -> bytes:
    """One v2 batch holding ``records``, with its length and CRC computed.

    Defaults are those of Kafka's producer: partition leader epoch -1, no producer id, epoch or sequence.
    ``base_timestamp`` is required when there are records (their deltas count from it); with none it
    defaults to -1 (NO_TIMESTAMP), as Kafka writes empty batches. ``max_timestamp`` defaults to the largest
    record timestamp under CREATE_TIME (-1 with no records) and must be given under LOG_APPEND_TIME.
    ``last_offset_delta`` defaults to the last record's offset delta (0 with none); give it to keep the
    offset (and sequence) span of a batch compaction emptied. ``compression`` compresses the records section
    as Kafka does, even when that does not make it smaller. Raises ValueError for a field out of its
    width or a record that cannot be written.
    """
    count = len(records)
    if base_timestamp is None:
        if count:
            raise ValueError("base_timestamp is required when the batch has records (their deltas count from it)")
        base_timestamp = NO_TIMESTAMP
    if max_timestamp is None:
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            raise ValueError("max_timestamp is required under LOG_APPEND_TIME (it is every record's timestamp)")
        max_timestamp = base_timestamp + max(r.timestamp_delta for r in records) if count else NO_TIMESTAMP
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if count else 0
    codec = Compression(compression) if compression in _CODECS else None
    if codec is None:
        raise ValueError(f"compression {compression!r} is not one of 0-4 (none, gzip, snappy, lz4, zstd)")
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type {timestamp_type!r} is not 0 (CREATE_TIME) or 1 (LOG_APPEND_TIME)")
    _check_int("base_offset", base_offset, INT64_MIN, INT64_MAX)
    _check_int("base_timestamp", base_timestamp, INT64_MIN, INT64_MAX)
    _check_int("max_timestamp", max_timestamp, INT64_MIN, INT64_MAX)
    _check_int("producer_id", producer_id, INT64_MIN, INT64_MAX)
    _check_int("producer_epoch", producer_epoch, -(1 << 15), (1 << 15) - 1)
    _check_int("base_sequence", base_sequence, INT32_MIN, INT32_MAX)
    _check_int("partition_leader_epoch", partition_leader_epoch, INT32_MIN, INT32_MAX)
    _check_int("last_offset_delta", last_offset_delta, INT32_MIN, INT32_MAX)
    _check_int("record count", count, 0, INT32_MAX)
    attributes = int(codec)
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_MASK

    if codec == Compression.NONE:
        out = bytearray(BATCH_HEADER_SIZE)
        encode_records(records, out)
    else:
        section = bytearray()
        encode_records(records, section)
        out = bytearray(BATCH_HEADER_SIZE)
        out += compress(codec, section)
    batch_length = len(out) - LOG_OVERHEAD
    _check_int("batch length", batch_length, MIN_BATCH_LENGTH, INT32_MAX)
    _HEADER.pack_into(out, 0, base_offset, batch_length, partition_leader_epoch, MAGIC, 0, attributes,
                      last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
                      count)
    with memoryview(out) as view:
        _CRC.pack_into(out, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:]))
    return bytes(out)


_CODECS = frozenset(int(c) for c in Compression)


def _check_int(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} {value!r} is outside [{low}, {high}]")


def encode_records(records: Sequence[Record], out: bytearray) -> None:
    """Append ``records`` to ``out`` in the v2 record format (uncompressed)."""
    for index, record in enumerate(records):
        offset_delta, timestamp_delta, key, value, headers, attributes = record
        body = bytearray()
        body.append(attributes & 0xFF)
        if not INT64_MIN <= timestamp_delta <= INT64_MAX:
            raise ValueError(f"record {index}: timestamp_delta {timestamp_delta} is outside the int64 range")
        put_unsigned(body, (timestamp_delta << 1) ^ (timestamp_delta >> 63))
        if not INT32_MIN <= offset_delta <= INT32_MAX:
            raise ValueError(f"record {index}: offset_delta {offset_delta} is outside the int32 range")
        put_unsigned(body, (offset_delta << 1) ^ (offset_delta >> 31))
        _put_bytes(body, key)
        _put_bytes(body, value)
        if not headers:
            body.append(0)
        else:
            put_unsigned(body, len(headers) << 1)
            for name, header_value in headers:
                _put_bytes(body, name.encode("utf-8", "surrogateescape"))
                _put_bytes(body, header_value)
        length = len(body)
        if length > INT32_MAX:
            raise ValueError(f"record {index} takes {length} bytes, more than a varint length can say")
        put_unsigned(out, length << 1)
        out += body


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    """Append ``data`` with its varint length in front, or the length -1 for None."""
    if data is None:
        out.append(1)
    else:
        put_unsigned(out, len(data) << 1)
        out += data


def set_base_offset(buffer: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite the base offset of the batch at ``position`` in place (outside the CRC: it stays valid)."""
    _BASE_OFFSET.pack_into(buffer, position, base_offset)


def set_partition_leader_epoch(buffer: bytearray | memoryview, position: int, epoch: int) -> None:
    """Rewrite the partition leader epoch of the batch at ``position`` in place (outside the CRC)."""
    _INT32.pack_into(buffer, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)
