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
from typing import NamedTuple

from idemcore.protocol.codes import ControlType
from idemcore.record.v2.codec import NO_PARTITION_LEADER_EPOCH, Record, encode_batch
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
    control, uncompressed, no sequence, one record at offset delta 0 with ``timestamp`` as base and max."""
    record = end_txn_marker_record(control_type, coordinator_epoch)
    return encode_batch([record], base_offset=base_offset, base_timestamp=timestamp, max_timestamp=timestamp,
                        producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True,
                        is_control=True, partition_leader_epoch=partition_leader_epoch)


def control_type_id(key: bytes | None) -> int:
    """The type id in a control record's key (Kafka's ``ControlRecordType.parseTypeId``)."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} bytes; "
                                 f"at least {CONTROL_KEY.size} are needed (version i16, type i16)")
    version, type_id = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version} is negative")
    return int(type_id)


def parse_end_txn_marker(record: Record) -> EndTxnMarker:
    """Read an ABORT or COMMIT marker (Kafka's ``EndTransactionMarker.deserialize``)."""
    type_id = control_type_id(record.key)
    control_type = _marker_type(type_id)
    value = record.value
    if value is None or len(value) < END_TXN_VALUE.size:
        raise CorruptRecordError(f"end transaction marker value of {0 if value is None else len(value)} bytes; "
                                 f"at least {END_TXN_VALUE.size} are needed (version i16, coordinator epoch i32)")
    version, coordinator_epoch = END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"end transaction marker version {version} is negative")
    return EndTxnMarker(control_type, int(coordinator_epoch))


def _marker_type(type_id: int) -> ControlType:
    if type_id == ControlType.ABORT:
        return ControlType.ABORT
    if type_id == ControlType.COMMIT:
        return ControlType.COMMIT
    raise CorruptRecordError(f"control type {type_id} is not a transaction marker (ABORT 0 or COMMIT 1)")
