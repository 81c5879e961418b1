"""Control records: the transaction markers a coordinator writes (Kafka's ``ControlRecordType`` and
``EndTransactionMarker``).

A control batch has the control bit (0x20) set and holds exactly one control record. Its key is
``version i16 (0) + type i16``; the types are ABORT 0 and COMMIT 1 (2-6 are KRaft's own: leader change,
snapshot header and footer, kraft version, voters). An end-transaction marker's value is
``version i16 (0) + coordinator_epoch i32``. Reading follows Kafka: a key shorter than 4 bytes, a value
shorter than 6 or a negative version is corrupt; a newer version is read as version 0 (its first fields
are the same).
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import NamedTuple

from idemcore.protocol.codes import ControlType
from idemcore.protocol.constants import NO_SEQUENCE
from idemcore.record.crc import crc32c
from idemcore.record.v2.codec import (
    _HEADER,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    TRANSACTIONAL_MASK,
    Record,
    encode_batch,
    encode_records,
)
from idemcore.record.v2.errors import CorruptRecordError

CONTROL_KEY = struct.Struct(">hh")
END_TXN_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


class EndTxnMarker(NamedTuple):
    """What an end-transaction marker says: the transaction's outcome and the coordinator's epoch."""

    control_type: ControlType
    coordinator_epoch: int


def control_key(control_type: int) -> bytes:
    return CONTROL_KEY.pack(CONTROL_KEY_VERSION, control_type)


def end_txn_marker_record(control_type: ControlType | int, coordinator_epoch: int, *, offset_delta: int = 0,
                          timestamp_delta: int = 0) -> Record:
    """The control record of an ABORT or COMMIT marker."""
    control_type = _marker_type(control_type)
    return Record(offset_delta, timestamp_delta, control_key(control_type),
                  END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch))


def encode_end_txn_marker(control_type: ControlType | int, coordinator_epoch: int, *, producer_id: int,
                          producer_epoch: int, timestamp: int, base_offset: int = 0,
                          partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A whole marker batch as Kafka's ``MemoryRecords.withEndTransactionMarker`` writes it: transactional,
    control, uncompressed, no sequence, one record at offset delta 0 with ``timestamp`` as base and max.

    Every transaction writes one per partition: the record section is made once per (type, coordinator epoch)
    and the header packed straight after it (``encode_batch``'s bytes, which also names a field out of range)."""
    section = _marker_section(_marker_type(control_type), coordinator_epoch)
    out = bytearray(BATCH_HEADER_SIZE) + section
    try:
        _HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0,
                          _MARKER_ATTRIBUTES, 0, timestamp, timestamp, producer_id, producer_epoch, NO_SEQUENCE, 1)
    except struct.error:
        record = end_txn_marker_record(control_type, coordinator_epoch)
        return encode_batch([record], base_offset=base_offset, base_timestamp=timestamp, max_timestamp=timestamp,
                            producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True,
                            is_control=True, partition_leader_epoch=partition_leader_epoch)
    with memoryview(out) as view:
        _CRC.pack_into(out, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:]))
    return bytes(out)


_MARKER_ATTRIBUTES = TRANSACTIONAL_MASK | CONTROL_MASK
_CRC = struct.Struct(">I")


@lru_cache(maxsize=256)
def _marker_section(control_type: ControlType, coordinator_epoch: int) -> bytes:
    """The records section of a marker batch: its one control record."""
    section = bytearray()
    encode_records([end_txn_marker_record(control_type, coordinator_epoch)], section)
    return bytes(section)


def control_type_id(key: bytes | None) -> int:
    """The type id in a control record's key (Kafka's ``ControlRecordType.parseTypeId``)."""
    return _versioned_field(key, CONTROL_KEY, "control record key", "control record key", "version i16, type i16")


def parse_end_txn_marker(record: Record) -> EndTxnMarker:
    """Read an ABORT or COMMIT marker (Kafka's ``EndTransactionMarker.deserialize``)."""
    type_id = control_type_id(record.key)
    control_type = _marker_type(type_id)
    coordinator_epoch = _versioned_field(record.value, END_TXN_VALUE, "end transaction marker value",
                                         "end transaction marker", "version i16, coordinator epoch i32")
    return EndTxnMarker(control_type, coordinator_epoch)


def _versioned_field(data: bytes | None, layout: struct.Struct, what: str, version_of: str, fields: str) -> int:
    """The field after the version in ``data`` laid out as ``layout`` (version i16, then one field), read as
    Kafka does: ``data`` shorter than ``layout`` (or null) or a negative version is corrupt, a newer version reads
    as version 0. ``what`` names ``data`` in the message about its size, ``version_of`` in the one about its version."""
    if data is None or len(data) < layout.size:
        raise CorruptRecordError(f"{what} of {0 if data is None else len(data)} bytes; "
                                 f"at least {layout.size} are needed ({fields})")
    version, field = layout.unpack_from(data)
    if version < 0:
        raise CorruptRecordError(f"{version_of} version {version} is negative")
    return int(field)


def _marker_type(type_id: int) -> ControlType:
    if type_id == ControlType.ABORT:
        return ControlType.ABORT
    if type_id == ControlType.COMMIT:
        return ControlType.COMMIT
    raise CorruptRecordError(f"control type {type_id} is not a transaction marker (ABORT 0 or COMMIT 1)")
