"""A :class:`~idemcore.record.batch.RecordBatch` as RecordBatch v2 bytes, and back: how a producer writes a batch
and the broker stores it.

``encode_record_batch`` writes uncompressed, CREATE_TIME batches: with ``timestamps`` the base timestamp is the
first record's and each record's delta counts from it (Kafka's MemoryRecordsBuilder), without them the base
timestamp and every record's is ``max_timestamp`` (deltas 0); offset deltas ``0..n-1``, each record's key, value
and headers. Byte for byte what ``codec.encode_batch`` writes for the same records; faster, because the records
section is written by :func:`idemcore.kernels.get_record_encoder` (compiled when the extension is built) straight
into the buffer that then receives the header and the CRC-32C (``crc32c``). ``with_producer_state`` rewrites a
built batch's producer id, epoch, base sequence and transactional flag, its records untouched (Kafka's
``reopenAndRewriteProducerState``).

``record_batch_from`` is the inverse over a decoded batch (``codec.decode_batch``): keys None when every key is,
headers None when no record has any, timestamps None when every record's is the batch's max timestamp. What a
RecordBatch has no field for (per-record offsets, the partition leader epoch) is not kept: the caller checks
what it requires of them.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

from idemcore.kernels import get_record_encoder, get_record_scanner
from idemcore.record.batch import RecordBatch
from idemcore.record.crc import crc32c
from idemcore.record.stored import StoredBatch
from idemcore.record.v2.codec import (
    _CRC,
    _HEADER,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Record,
    _check_int,
    compute_crc,
    decode_batch,
    iter_batches,
    read_header,
)
from idemcore.record.v2.compression import Compression, decompress
from idemcore.record.v2.control import parse_end_txn_marker
from idemcore.record.v2.errors import CorruptRecordError
from idemcore.record.v2.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

#: The records encoder and scanner chosen on first use ($IDEMCORE_BACKEND then, else the fastest), kept: one lookup
#: per process (every produced batch is scanned: a lookup cost a microsecond).
_default_encoder = functools.cache(get_record_encoder)
_default_scanner = functools.cache(get_record_scanner)


def encode_record_batch(batch: RecordBatch, base_offset: int, partition_leader_epoch: int = 0, *,
                        backend: str | None = None) -> bytearray:
    """The v2 bytes of ``batch`` at ``base_offset`` (module docstring): the encoder's own buffer, not a copy (a
    copy of a 1 MB batch costs more than encoding it). With ``batch.timestamps``, ``batch.max_timestamp`` is
    written as the header's max timestamp: the caller's (their largest, as a producer has it).

    ``backend`` picks the records encoder (``"cython"``, ``"python"``; default: as ``$IDEMCORE_BACKEND`` says
    when first used, else the fastest); every one writes the same bytes. Raises TypeError for a value, key or
    header of the wrong type, ValueError for keys or headers not one per value and for a field outside its
    width, each naming the value.
    """
    encode = _default_encoder() if backend is None else get_record_encoder(backend)
    count = len(batch.values)
    timestamps = batch.timestamps
    max_timestamp = batch.max_timestamp
    if timestamps is None:
        out = encode(batch.values, batch.keys, batch.headers, BATCH_HEADER_SIZE)
        base_timestamp = max_timestamp
    else:
        out = encode(batch.values, batch.keys, batch.headers, BATCH_HEADER_SIZE, timestamps)
        base_timestamp = timestamps[0] if count else max_timestamp
    try:
        _HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0,
                          TRANSACTIONAL_MASK if batch.is_transactional else 0, count - 1 if count else 0,
                          base_timestamp, max_timestamp, batch.producer_id, batch.producer_epoch,
                          batch.base_sequence, count)
    except struct.error:
        _explain_header(batch, base_offset, partition_leader_epoch, len(out) - LOG_OVERHEAD)
        raise
    with memoryview(out) as view:
        _CRC.pack_into(out, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:]))
    return out


def _explain_header(batch: RecordBatch, base_offset: int, partition_leader_epoch: int, batch_length: int) -> None:
    """Raise ValueError naming the header field that ``struct`` refused (its own message does not say which)."""
    _check_int("base_offset", base_offset, INT64_MIN, INT64_MAX)
    _check_int("partition_leader_epoch", partition_leader_epoch, INT32_MIN, INT32_MAX)
    _check_int("max_timestamp", batch.max_timestamp, INT64_MIN, INT64_MAX)
    _check_int("producer_id", batch.producer_id, INT64_MIN, INT64_MAX)
    _check_int("producer_epoch", batch.producer_epoch, -(1 << 15), (1 << 15) - 1)
    _check_int("base_sequence", batch.base_sequence, INT32_MIN, INT32_MAX)
    _check_int("batch length", batch_length, 0, INT32_MAX)


def record_batch_from(topic: str, partition: int, header: BatchHeader, records: Sequence[Record]) -> RecordBatch:
    """The RecordBatch of a decoded v2 batch (``codec.decode_batch``): producer metadata, ``max_timestamp`` and
    the transactional flag from ``header``; keys, values, headers and timestamps from ``records``.

    ``timestamps``: under CREATE_TIME each record's base timestamp + delta, as Kafka's consumer reads them; None
    when that is ``max_timestamp`` for every record (nothing built) and under LOG_APPEND_TIME (the max
    timestamp is every record's). Built in one pass in C from the deltas the transpose below gives anyway.

    Raises ValueError for what a RecordBatch cannot hold: a control batch (transaction markers are not data),
    naming the batch's offset. Null values (tombstones) are kept as None; offset deltas are the caller's.
    """
    if header.is_control:
        raise ValueError(f"the batch at offset {header.base_offset} is a control batch (transaction markers), "
                         "not data a RecordBatch holds")
    if not records:
        return RecordBatch(topic, partition, (), None, header.producer_id, header.producer_epoch,
                           header.base_sequence, header.max_timestamp, header.is_transactional)
    # One transpose in C rather than a loop per field: Record is a tuple.
    _, deltas, keys, values, headers, _ = zip(*records, strict=True)
    base = header.base_timestamp
    timestamps = None
    if not header.attributes & TIMESTAMP_TYPE_MASK and (base != header.max_timestamp
                                                          or deltas.count(0) != len(deltas)):
        timestamps = tuple(map(base.__add__, deltas))
    return RecordBatch(topic, partition, values, None if keys.count(None) == len(keys) else keys,
                       header.producer_id, header.producer_epoch, header.base_sequence, header.max_timestamp,
                       header.is_transactional, headers if any(headers) else None, timestamps=timestamps)


class WireRecords:
    """The records of a batch from the wire, decoded on first use (:class:`RecordColumn`): a broker storing the
    batch as sent checks them with the records scanner and never needs them as Python objects."""

    __slots__ = ("_columns", "count", "data")

    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self.count = count
        self._columns: tuple[tuple, tuple, tuple] | None = None

    def columns(self) -> tuple[tuple, tuple, tuple]:
        """``(values, keys, headers)``, one entry per record."""
        if self._columns is None:
            _, records = decode_batch(self.data, 0, check_crc=False)
            if records:
                _, _, keys, values, headers, _ = zip(*records, strict=True)
                self._columns = (values, keys, headers)
            else:
                self._columns = ((), (), ())
        return self._columns


class RecordColumn(Sequence):
    """One field of a wire batch's records (values, keys or headers), decoded when first read."""

    __slots__ = ("_field", "_records")

    def __init__(self, records: WireRecords, field: int) -> None:
        self._records = records
        self._field = field

    def __len__(self) -> int:
        return self._records.count

    def __getitem__(self, index):  # Sequence's int and slice forms
        return self._records.columns()[self._field][index]

    def __iter__(self):
        return iter(self._records.columns()[self._field])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str | bytes) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordColumn({self._records.columns()[self._field]!r:.200})"


def decode_wire_batch(topic: str, partition: int, data: bytes, *, backend: str | None = None) -> RecordBatch:
    """The RecordBatch of the one v2 batch a produce request carries for a partition (Produce v3+), keeping
    ``data`` as its ``wire`` bytes; its records are checked by the records scanner (``backend``: as
    :func:`idemcore.kernels.get_record_scanner` chooses; default: as ``$IDEMCORE_BACKEND`` says when first used,
    else the fastest) and decoded only when read (:class:`RecordColumn`).
    CorruptRecordError when its first batch is cut short, fails its CRC, or its records do not decode or have
    offset deltas other than 0..n-1; ValueError for more than one batch or a control batch (clients may not write
    markers)."""
    header = read_header(data, 0)
    if header.size_in_bytes > len(data):
        raise CorruptRecordError(f"{topic}-{partition}: a batch of {header.size_in_bytes} bytes cut short at "
                                 f"{len(data)}")
    if header.size_in_bytes != len(data):  # Kafka's INVALID_RECORD for v3+, not a corrupt batch
        raise ValueError(f"a produce request carries {len(data)} bytes for {topic}-{partition}, but "
                         f"its first batch is {header.size_in_bytes} bytes: exactly one batch is allowed")
    crc = compute_crc(data, 0, header)
    if crc != header.crc:
        raise CorruptRecordError(f"{topic}-{partition}: CRC-32C {crc:#010x} of the batch does not match its "
                                 f"header's {header.crc:#010x}")
    if header.is_control:
        raise ValueError(f"{topic}-{partition}: clients may not write control batches (transaction markers)")
    count = header.record_count
    if count < 0 or header.last_offset_delta != count - 1:
        raise CorruptRecordError(f"{topic}-{partition}: {count} records with last offset delta "
                                 f"{header.last_offset_delta}")
    codec = header.attributes & COMPRESSION_MASK
    section: bytes | memoryview = memoryview(data)[BATCH_HEADER_SIZE:]
    if codec != Compression.NONE:
        try:
            section = decompress(codec, section)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{topic}-{partition}: {exc}") from None
    scan = _default_scanner() if backend is None else get_record_scanner(backend)
    status, position, index, null_keys, with_headers, max_delta = scan(section, count)
    if status != 0:
        _, decoded = decode_batch(data, 0, check_crc=False)  # the decoder's own message for what is wrong
        deltas = [record.offset_delta for record in decoded]
        raise CorruptRecordError(f"{topic}-{partition}: record {index} has offset delta {deltas[index]}"
                                 if deltas != list(range(count)) else
                                 f"{topic}-{partition}: the records do not scan at byte {position} (record {index})")
    max_timestamp = header.base_timestamp + max_delta if count else header.max_timestamp
    if max_timestamp != header.max_timestamp or header.attributes & TIMESTAMP_TYPE_MASK:
        # Kafka's LogValidator sets a CREATE_TIME batch's max timestamp to its records' largest (and its type to
        # CREATE_TIME), whatever the client wrote there: the log's time index and retention go by it.
        data = _with_max_timestamp(data, max_timestamp, header.attributes & ~TIMESTAMP_TYPE_MASK)
    records = WireRecords(bytes(data), count)
    # As record_batch_from: keys None when no record has one, headers None when no record has any.
    return RecordBatch(topic, partition, RecordColumn(records, 0),
                       None if null_keys == count else RecordColumn(records, 1), header.producer_id,
                       header.producer_epoch, header.base_sequence, max_timestamp, header.is_transactional,
                       RecordColumn(records, 2) if with_headers else None, records.data)


_MAX_TIMESTAMP = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
#: A v2 header's producer id, epoch and base sequence, side by side from byte 43.
_PRODUCER_STATE = struct.Struct(">qhi")
_PRODUCER_STATE_AT = 43
#: Where a v2 header keeps them (after base offset, length, leader epoch, magic, CRC; attributes, last offset
#: delta, base timestamp).
_ATTRIBUTES_AT, _MAX_TIMESTAMP_AT = ATTRIBUTES_OFFSET, ATTRIBUTES_OFFSET + 14


def _with_max_timestamp(data: bytes, max_timestamp: int, attributes: int) -> bytes:
    """``data`` with the header's max timestamp and attributes replaced, and its CRC-32C computed again."""
    out = bytearray(data)
    _ATTRIBUTES.pack_into(out, _ATTRIBUTES_AT, attributes)
    _MAX_TIMESTAMP.pack_into(out, _MAX_TIMESTAMP_AT, max_timestamp)
    with memoryview(out) as view:
        _CRC.pack_into(out, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def with_producer_state(data: bytes, producer_id: int, producer_epoch: int, base_sequence: int,
                        is_transactional: bool) -> bytes:
    """The one v2 batch ``data`` with its producer id, epoch, base sequence and transactional flag replaced and
    its CRC-32C computed again; its records, timestamps and length as they were (Kafka's
    ``MemoryRecordsBuilder.reopenAndRewriteProducerState``: a batch resent under a bumped epoch or moved
    sequences). ValueError naming a field outside its width."""
    header = read_header(data, 0)
    attributes = header.attributes & ~TRANSACTIONAL_MASK | (TRANSACTIONAL_MASK if is_transactional else 0)
    out = bytearray(data)
    try:
        _PRODUCER_STATE.pack_into(out, _PRODUCER_STATE_AT, producer_id, producer_epoch, base_sequence)
    except struct.error:
        _check_int("producer_id", producer_id, INT64_MIN, INT64_MAX)
        _check_int("producer_epoch", producer_epoch, -(1 << 15), (1 << 15) - 1)
        _check_int("base_sequence", base_sequence, INT32_MIN, INT32_MAX)
        raise
    _ATTRIBUTES.pack_into(out, _ATTRIBUTES_AT, attributes)
    with memoryview(out) as view:
        _CRC.pack_into(out, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:header.size_in_bytes]))
    return bytes(out)


def stored_batch_bytes(stored: StoredBatch, partition_leader_epoch: int = 0) -> bytes | bytearray:
    """The v2 bytes of a stored batch: as the log holds them (``raw``: a batch from the wire or a segment, and
    every marker), else encoded from its fields (a data batch appended in process to a log kept in memory)."""
    if stored.raw is not None:
        return stored.raw
    batch = stored.batch
    if stored.control is not None or stored.offset_deltas is not None:  # the log keeps these bytes: never here
        raise ValueError(f"the batch at offset {stored.base_offset} of {batch.topic}-{batch.partition} has no "
                         "stored bytes to serve")
    return encode_record_batch(batch, stored.base_offset, partition_leader_epoch)


def decode_stored_batches(topic: str, partition: int, records: bytes | memoryview | None, *,
                          allow_partial_tail: bool = True) -> tuple[StoredBatch, ...]:
    """The batches of one partition's ``records`` (a fetch answer's, or a segment's bytes), as a log holds them
    (data and markers, each with its bytes as ``raw``). A last batch cut short is dropped, or raises
    IncompleteBatchError naming its position without ``allow_partial_tail`` (a segment recovery has already cut:
    a length running past its end is damage); a corrupt batch raises CorruptRecordError."""
    if not records:
        return ()
    data = bytes(records)
    out: list[StoredBatch] = []
    for position, header in iter_batches(data, 0, allow_partial_tail=allow_partial_tail):
        raw = data[position:position + header.size_in_bytes]
        header, decoded = decode_batch(data, position, check_crc=True)  # errors name the position in ``records``
        if header.is_control:
            marker = parse_end_txn_marker(decoded[0]) if len(decoded) == 1 else None
            if marker is None:
                raise CorruptRecordError(f"{topic}-{partition}: the control batch at offset {header.base_offset} "
                                         "is not one transaction marker", position)
            batch = RecordBatch(topic, partition, (), None, header.producer_id, header.producer_epoch, -1,
                                header.max_timestamp, True)
            out.append(StoredBatch(header.base_offset, batch, None, None,
                                   (int(marker.control_type), marker.coordinator_epoch), raw))
            continue
        batch = record_batch_from(topic, partition, header, decoded)
        deltas = tuple(record.offset_delta for record in decoded)
        if header.last_offset_delta == len(decoded) - 1 and deltas == tuple(range(len(decoded))):
            out.append(StoredBatch(header.base_offset, batch, raw=raw))
        else:  # compaction left gaps
            out.append(StoredBatch(header.base_offset, batch, deltas, header.last_offset_delta, raw=raw))
    return tuple(out)


__all__ = ["RecordColumn", "WireRecords", "decode_stored_batches", "decode_wire_batch", "encode_record_batch",
           "record_batch_from", "stored_batch_bytes", "with_producer_state"]
