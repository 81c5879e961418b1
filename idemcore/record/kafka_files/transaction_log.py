"""The ``__transaction_state`` record (Kafka's ``TransactionLog``, TransactionLogKey.json,
TransactionLogValue.json: ``keyToBytes``, ``valueToBytes``, ``readTxnRecordKey``, ``readTxnRecordValue``) and the
states its status byte names (Kafka's coordinator-side ``TransactionState``). The broker's transaction coordinator
writes and loads the records; the audit reads them from a log directory to judge hanging transactions.

Key, version 0 only: ``int16 version=0 | string transactional_id`` (a string is an int16 length + UTF-8).

Value version 0 (what Kafka writes at ``transaction.version`` 0, and what this module writes)::

    int16 version=0 | int64 producer_id | int16 producer_epoch | int32 transaction_timeout_ms | int8 state
    | int32 topic count (-1 = null), per topic: string topic, int32 n, n x int32 partition
    | int64 last_update_timestamp_ms | int64 start_timestamp_ms

Version 1 (flexible; Kafka writes it from ``transaction.version`` 1) is read too: compact strings and arrays
(unsigned varint length + 1, 0 = null), a tagged-field section after each topic entry and after the value,
with tags 0 previous producer id, 1 next producer id, 2 client transaction version. A null value is a
tombstone: the id was removed.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from idemcore.errors import IdemcoreError
from idemcore.protocol.constants import NO_PRODUCER_ID
from idemcore.record.schema import I8, I16, I32, I64, SchemaReader, pack, pack_string

KEY_VERSION = 0
#: The value version this module writes (Kafka's at transaction.version 0).
VALUE_VERSION = 0
#: The value versions this module reads (Kafka's reader accepts the same).
READABLE_VALUE_VERSIONS = (0, 1)

#: Partitions grouped by topic as the record holds them: ((topic, (partition, ...)), ...).
TopicPartitionGroups = tuple[tuple[str, tuple[int, ...]], ...]

_V0_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_TIMESTAMPS = struct.Struct(">qq")  # last update, start


class TransactionLogFormatError(IdemcoreError, ValueError):
    """Bytes that are not a ``__transaction_state`` record this reader understands."""


class TransactionState(enum.IntEnum):
    """A transactional id's state as the coordinator keeps it (Kafka's ``TransactionState``); the value is the
    status byte of its ``__transaction_state`` record."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    #: Only ever pending: the id's tombstone is being written (it is then removed, never stored as Dead).
    DEAD = 6
    #: Only ever pending: an ongoing transaction is about to be aborted with a bumped epoch.
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """Kafka's name: ``"Empty"``, ``"Ongoing"``, ``"PrepareCommit"``, ..."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state Kafka calls ``name`` (as in ListTransactions' state filters), or None."""
        return _BY_NAME.get(name)

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        """The states a transition to this one may start from."""
        return _VALID_PREVIOUS[self]

    @property
    def expiration_allowed(self) -> bool:
        """True if an id idle in this state may expire (no transaction is open or half-finished)."""
        return self in _EXPIRABLE


S = TransactionState
_NAMES = {S.EMPTY: "Empty", S.ONGOING: "Ongoing", S.PREPARE_COMMIT: "PrepareCommit", S.PREPARE_ABORT: "PrepareAbort",
          S.COMPLETE_COMMIT: "CompleteCommit", S.COMPLETE_ABORT: "CompleteAbort", S.DEAD: "Dead",
          S.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_IDLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: _IDLE,
    S.ONGOING: _IDLE | {S.ONGOING},
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: _IDLE,
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
_EXPIRABLE = _IDLE
del S


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One transactional id's state as stored (Kafka's ``TransactionLogValue``)."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    #: None when the record holds null (always so for Empty); topics and partitions sorted when written here.
    partitions: TopicPartitionGroups | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    #: Version 1 only (tagged fields); version 0 records read back as the defaults.
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    version: int = VALUE_VERSION

    def topic_partitions(self) -> frozenset[tuple[str, int]]:
        """The partitions as (topic, partition) pairs."""
        return frozenset((topic, p) for topic, ids in self.partitions or () for p in ids)


def group_by_topic(topic_partitions: Iterable[tuple[str, int]]) -> TopicPartitionGroups:
    """(topic, partition) pairs grouped by topic, topics and partitions sorted (Kafka groups them in hash order;
    sorting makes the bytes reproducible)."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in topic_partitions:
        grouped.setdefault(topic, []).append(partition)
    return tuple((topic, tuple(sorted(grouped[topic]))) for topic in sorted(grouped))


# ------------------------------------------------------------------ encoding


def encode_key(transactional_id: str) -> bytes:
    """The record key of ``transactional_id``."""
    return I16.pack(KEY_VERSION) + pack_string(transactional_id, "transactional id")


def encode_value(value: TransactionLogValue) -> bytes:
    """The record value, version 0. Empty is written with null partitions (Kafka refuses an Empty record that has
    any); version-1-only fields must hold their defaults, as version 0 has no room for them."""
    if value.version != VALUE_VERSION:
        raise ValueError(f"only value version {VALUE_VERSION} is written, got version {value.version}")
    if (value.previous_producer_id, value.next_producer_id, value.client_transaction_version) != (-1, -1, 0):
        raise ValueError(f"version 0 cannot hold previous producer id {value.previous_producer_id}, next producer id "
                         f"{value.next_producer_id} or client transaction version {value.client_transaction_version}")
    return encode_value_v0(value.producer_id, value.producer_epoch, value.transaction_timeout_ms, value.state,
                           value.partitions, value.last_update_timestamp_ms, value.start_timestamp_ms)


def encode_value_v0(producer_id: int, producer_epoch: int, transaction_timeout_ms: int, state: TransactionState,
                    partitions: TopicPartitionGroups | None, last_update_timestamp_ms: int,
                    start_timestamp_ms: int) -> bytes:
    """The version 0 value of these fields (:func:`encode_value` without a :class:`TransactionLogValue`: the
    coordinator writes one per transition)."""
    state = state if type(state) is TransactionState else TransactionState(state)
    out = [pack(_V0_HEAD, "producer id, epoch, timeout or state", VALUE_VERSION, producer_id, producer_epoch,
                transaction_timeout_ms, state)]
    if state is TransactionState.EMPTY:
        if partitions:
            raise ValueError(f"an Empty transaction has no partitions, got {partitions!r}")
        out.append(I32.pack(-1))
    else:
        groups = partitions or ()
        out.append(I32.pack(len(groups)))
        for topic, ids in groups:
            out.append(pack_string(topic, "topic"))
            out.append(I32.pack(len(ids)))
            out.extend(pack(I32, f"partition of {topic!r}", p) for p in ids)
    out.append(pack(_TIMESTAMPS, "timestamps", last_update_timestamp_ms, start_timestamp_ms))
    return b"".join(out)


# ------------------------------------------------------------------ decoding


def decode_key(data: bytes) -> str | None:
    """The transactional id of a record key; None for a key version this reader does not know (Kafka skips those
    records when it loads the log)."""
    reader = SchemaReader(data, TransactionLogFormatError)
    version = reader.fixed(I16, "key version")
    if version != KEY_VERSION:
        return None
    return reader.string("transactional id")


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    """The stored state, or None for a tombstone. Bytes after the last field are ignored, as Kafka's reader does."""
    if data is None:
        return None
    reader = SchemaReader(data, TransactionLogFormatError)
    version = reader.fixed(I16, "value version")
    if version == 0:
        return _decode_v0(reader)
    if version == 1:
        return _decode_v1(reader)
    raise TransactionLogFormatError(f"value version {version} is not one of {READABLE_VALUE_VERSIONS}")


def _state(byte: int) -> TransactionState:
    try:
        return TransactionState(byte)
    except ValueError:
        raise TransactionLogFormatError(f"state {byte} is not a transaction state id (0-7)") from None


def _decode_v0(reader: SchemaReader) -> TransactionLogValue:
    producer_id = reader.fixed(I64, "producer id")
    epoch = reader.fixed(I16, "producer epoch")
    timeout = reader.fixed(I32, "transaction timeout")
    state = _state(reader.fixed(I8, "state"))
    count = reader.fixed(I32, "topic count")
    groups: TopicPartitionGroups | None = None
    if count >= 0:
        groups = tuple(_topic_v0(reader) for _ in range(count))
    elif count != -1:
        raise TransactionLogFormatError(f"topic count {count} is negative")
    last_update = reader.fixed(I64, "last update timestamp")
    start = reader.fixed(I64, "start timestamp")
    return TransactionLogValue(producer_id, epoch, timeout, state, groups, last_update, start, version=0)


def _topic_v0(reader: SchemaReader) -> tuple[str, tuple[int, ...]]:
    topic = reader.string("topic")
    n = reader.fixed(I32, f"partition count of {topic!r}")
    if n < 0:
        raise TransactionLogFormatError(f"partition count {n} of {topic!r} is negative")
    return topic, tuple(reader.fixed(I32, f"partition of {topic!r}") for _ in range(n))


def _decode_v1(reader: SchemaReader) -> TransactionLogValue:
    producer_id = reader.fixed(I64, "producer id")
    epoch = reader.fixed(I16, "producer epoch")
    timeout = reader.fixed(I32, "transaction timeout")
    state = _state(reader.fixed(I8, "state"))
    count = reader.uvarint("topic count") - 1
    groups = None if count < 0 else tuple(_topic_v1(reader) for _ in range(count))
    last_update = reader.fixed(I64, "last update timestamp")
    start = reader.fixed(I64, "start timestamp")
    tags = reader.tagged_fields("value")
    return TransactionLogValue(
        producer_id, epoch, timeout, state, groups, last_update, start,
        previous_producer_id=_tag_int(tags, 0, I64, NO_PRODUCER_ID, "previous producer id"),
        next_producer_id=_tag_int(tags, 1, I64, NO_PRODUCER_ID, "next producer id"),
        client_transaction_version=_tag_int(tags, 2, I16, 0, "client transaction version"), version=1)


def _topic_v1(reader: SchemaReader) -> tuple[str, tuple[int, ...]]:
    topic = reader.compact_string("topic")
    n = reader.uvarint(f"partition count of {topic!r}") - 1
    if n < 0:
        raise TransactionLogFormatError(f"partitions of {topic!r} are null, which the schema does not allow")
    ids = tuple(reader.fixed(I32, f"partition of {topic!r}") for _ in range(n))
    reader.tagged_fields(f"topic {topic!r}")
    return topic, ids


def _tag_int(tags: dict[int, bytes], tag: int, layout: struct.Struct, default: int, what: str) -> int:
    if tag not in tags:
        return default
    if len(tags[tag]) != layout.size:
        raise TransactionLogFormatError(f"{what} (tag {tag}) has {len(tags[tag])} bytes, expected {layout.size}")
    return int(layout.unpack(tags[tag])[0])
