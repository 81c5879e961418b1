"""The ``__consumer_offsets`` offset-commit record: key and value bytes as Kafka writes them
(``OffsetCommitKey.json``, ``OffsetCommitValue.json``; ``GroupCoordinatorRecordHelpers.newOffsetCommitRecord``).

Hand-written like :mod:`idemcore.record.kafka_files.transaction_log`: a few fixed fields, and the loader must
tell a record it may skip (another record type) from one that is damaged. Big-endian; a string is an int16
length + UTF-8 (the fields are read and written by :mod:`idemcore.record.schema`).

Key, versions 0 and 1 (Kafka writes 1)::

    int16 version | string group | string topic | int32 partition

Key version 2 is a classic group's metadata record (its value: :mod:`idemcore.broker.group.group_metadata_log`):
:func:`decode_key` answers a :class:`GroupMetadataKey` for it. Versions 3 and up are other record types (the
consumer-group records of KIP-848); :func:`decode_key` answers None for them and the loader skips them, as
Kafka's does.

Value version 3 (what Kafka writes today when no expire timestamp is given, and what this module writes)::

    int16 version=3 | int64 offset | int32 leader_epoch | string metadata | int64 commit_timestamp

Versions 0 and 2 lack the leader epoch, 1 lacks it and adds ``int64 expire_timestamp`` after the commit
timestamp; 4 is flexible (metadata a compact string, a tagged-field section at the end). All are read. A null
value is a tombstone: the group's offset for the partition is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.errors import IdemcoreError
from idemcore.record.schema import I16, I32, I64, SchemaReader, pack, pack_string

#: The key version this module writes (Kafka's current one), and the versions that are offset commits.
KEY_VERSION = 1
OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
#: The key version of a group-metadata record.
GROUP_METADATA_KEY_VERSION = 2
#: The value version this module writes, and those it reads.
VALUE_VERSION = 3
READABLE_VALUE_VERSIONS = (0, 1, 2, 3, 4)
#: Kafka's ``RecordBatch.NO_PARTITION_LEADER_EPOCH``: the leader epoch is unknown.
NO_LEADER_EPOCH = -1


class OffsetLogFormatError(IdemcoreError, ValueError):
    """Bytes that are not a ``__consumer_offsets`` offset-commit record this reader understands."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Whose offset a record holds: a group's, for one topic partition."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """The key of a classic group's metadata record: the group id."""

    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset as stored (Kafka's ``OffsetCommitValue``)."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH
    #: Version 1 only; -1 elsewhere.
    expire_timestamp: int = -1
    version: int = VALUE_VERSION


# ------------------------------------------------------------------ encoding


def encode_key(group: str, topic: str, partition: int) -> bytes:
    """The record key (version 1). ValueError for a field the record cannot hold."""
    return (I16.pack(KEY_VERSION) + pack_string(group, "group id") + pack_string(topic, "topic")
            + pack(I32, "partition", partition))


def encode_value(value: OffsetCommitValue) -> bytes:
    """The record value, version 3. ValueError for a field it cannot hold (an expire timestamp needs version 1)."""
    if value.version != VALUE_VERSION:
        raise ValueError(f"only value version {VALUE_VERSION} is written, got version {value.version}")
    if value.expire_timestamp != -1:
        raise ValueError(f"version {VALUE_VERSION} cannot hold expire timestamp {value.expire_timestamp}")
    return b"".join((I16.pack(VALUE_VERSION), pack(I64, "offset", value.offset),
                     pack(I32, "leader epoch", value.leader_epoch), pack_string(value.metadata, "metadata"),
                     pack(I64, "commit timestamp", value.commit_timestamp)))


# ------------------------------------------------------------------ decoding


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of an offset-commit record (versions 0 and 1) or of a group-metadata record (version 2); None for
    another record type."""
    reader = SchemaReader(data, OffsetLogFormatError)
    version = reader.fixed(I16, "key version")
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(reader.string("group id"))
    if version not in OFFSET_COMMIT_KEY_VERSIONS:
        return None
    group = reader.string("group id")
    topic = reader.string("topic")
    return OffsetCommitKey(group, topic, reader.fixed(I32, "partition"))


def decode_value(data: bytes | None) -> OffsetCommitValue | None:
    """The stored offset, or None for a tombstone. Bytes after the last field are ignored, as Kafka's reader
    ignores them."""
    if data is None:
        return None
    reader = SchemaReader(data, OffsetLogFormatError)
    version = reader.fixed(I16, "value version")
    if version not in READABLE_VALUE_VERSIONS:
        raise OffsetLogFormatError(f"offset commit value version {version} is not one of {READABLE_VALUE_VERSIONS}")
    offset = reader.fixed(I64, "offset")
    leader_epoch = reader.fixed(I32, "leader epoch") if version >= 3 else NO_LEADER_EPOCH
    if version >= 4:
        metadata = reader.compact_string("metadata")
    else:
        metadata = reader.string("metadata")
    commit_timestamp = reader.fixed(I64, "commit timestamp")
    expire_timestamp = reader.fixed(I64, "expire timestamp") if version == 1 else -1
    if version >= 4:
        reader.tagged_fields("value")  # no tags are defined yet; unknown ones are skipped, as Kafka does
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp, version)
