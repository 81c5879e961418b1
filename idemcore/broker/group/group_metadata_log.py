"""The ``__consumer_offsets`` group-metadata record of a classic group: key and value bytes as Kafka writes them
(``GroupMetadataKey.json``, ``GroupMetadataValue.json``; ``GroupCoordinatorRecordHelpers.newGroupMetadataRecord``).

Hand-written like :mod:`idemcore.broker.group.offsets_log`, with the same field helpers
(:mod:`idemcore.record.schema`). Big-endian; a string is an int16 length + UTF-8 (-1: null), bytes an int32
length; version 4 is flexible (compact strings, bytes and arrays: an unsigned varint length + 1, 0 = null; a
tagged-field section after each member and after the value).

Key, version 2 (the record type: versions 0 and 1 are offset commits)::

    int16 version=2 | string group

Value, versions 0..4 read, version 3 written (what Kafka writes: its highest non-flexible version)::

    int16 version | string protocol_type | int32 generation | nullable string protocol | nullable string leader
    | int64 current_state_timestamp (v2+) | array of members:
        string member_id | nullable string group_instance_id (v3+) | string client_id | string client_host
        | int32 rebalance_timeout (v1+) | int32 session_timeout | bytes subscription | bytes assignment

A null value is a tombstone: the group is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.broker.group.offsets_log import GROUP_METADATA_KEY_VERSION, GroupMetadataKey, OffsetLogFormatError
from idemcore.record.schema import I16, I32, I64, STRING_MAX, SchemaReader, pack, pack_string

__all__ = ["GROUP_METADATA_KEY_VERSION", "READABLE_VALUE_VERSIONS", "VALUE_VERSION", "GroupMetadataKey",
           "GroupMetadataValue", "MemberMetadata", "decode_group_value", "encode_group_key", "encode_group_value"]

#: The value version written, and those read.
VALUE_VERSION = 3
READABLE_VALUE_VERSIONS = (0, 1, 2, 3, 4)
_NULL = I16.pack(-1)


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as stored (Kafka's ``GroupMetadataValue.MemberMetadata``): its subscription is its metadata
    for the group's selected protocol."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1  # version 0 lacks it: Kafka then takes the session timeout
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A classic group as stored: protocol type (``""`` for none), generation, selected protocol, leader, when
    it entered its current state (-1 when unknown), members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()
    version: int = VALUE_VERSION


# ------------------------------------------------------------------ encoding


def encode_group_key(group: str) -> bytes:
    """The key (version 2) of ``group``'s metadata record. ValueError for an id a record cannot hold."""
    return I16.pack(GROUP_METADATA_KEY_VERSION) + pack_string(group, "group id")


def _nullable(text: str | None, what: str) -> bytes:
    return _NULL if text is None else pack_string(text, what)


def _bytes(data: bytes, what: str) -> bytes:
    return pack(I32, f"{what} length", len(data)) + bytes(data)


def encode_group_value(value: GroupMetadataValue) -> bytes:
    """The value, version 3 (the one written). ValueError for a field it cannot hold."""
    if value.version != VALUE_VERSION:
        raise ValueError(f"only group metadata value version {VALUE_VERSION} is written, got {value.version}")
    parts = [I16.pack(VALUE_VERSION), pack_string(value.protocol_type, "protocol type"),
             pack(I32, "generation", value.generation), _nullable(value.protocol, "protocol"),
             _nullable(value.leader, "leader"), pack(I64, "current state timestamp", value.current_state_timestamp),
             pack(I32, "member count", len(value.members))]
    for member in value.members:
        parts += [pack_string(member.member_id, "member id"),
                  _nullable(member.group_instance_id, "group instance id"),
                  pack_string(member.client_id, "client id"), pack_string(member.client_host, "client host"),
                  pack(I32, "rebalance timeout", member.rebalance_timeout),
                  pack(I32, "session timeout", member.session_timeout),
                  _bytes(member.subscription, "subscription"), _bytes(member.assignment, "assignment")]
    return b"".join(parts)


# ------------------------------------------------------------------ decoding


class _Reader(SchemaReader):
    """The nullable and bytes fields of either encoding (``flexible``: version 4's compact forms)."""

    def __init__(self, data: bytes, flexible: bool) -> None:
        super().__init__(data, OffsetLogFormatError)
        self.flexible = flexible

    def _length(self, what: str, wide: bool) -> int:
        if self.flexible:
            return self.uvarint(f"{what} length") - 1
        return self.fixed(I32 if wide else I16, f"{what} length")

    def str_(self, what: str) -> str:
        return self.compact_string(what) if self.flexible else self.string(what)

    def nullable_str(self, what: str) -> str | None:
        n = self._length(what, wide=False)
        if n < 0:
            return None
        if n > STRING_MAX and not self.flexible:
            raise self.error(f"{what} length {n} is out of range")
        return self.text(n, what)

    def bytes_(self, what: str) -> bytes:
        n = self._length(what, wide=True)
        if n < 0:
            raise self.error(f"{what} is null, which the schema does not allow")
        return bytes(self.take(n, what))

    def count(self, what: str) -> int:
        n = self._length(what, wide=True)
        if n < 0:
            raise self.error(f"{what} is null, which the schema does not allow")
        return n


def decode_group_value(data: bytes | None) -> GroupMetadataValue | None:
    """The stored group, or None for a tombstone. Versions 0..4; bytes after the last field are ignored, and
    unknown tagged fields skipped, as Kafka's reader does."""
    if data is None:
        return None
    head = SchemaReader(data, OffsetLogFormatError)
    version = head.fixed(I16, "value version")
    if version not in READABLE_VALUE_VERSIONS:
        raise OffsetLogFormatError(f"group metadata value version {version} is not one of {READABLE_VALUE_VERSIONS}")
    reader = _Reader(bytes(data[2:]), flexible=version >= 4)
    protocol_type = reader.str_("protocol type")
    generation = reader.fixed(I32, "generation")
    protocol = reader.nullable_str("protocol")
    leader = reader.nullable_str("leader")
    timestamp = reader.fixed(I64, "current state timestamp") if version >= 2 else -1
    members = []
    for _ in range(reader.count("members")):
        member_id = reader.str_("member id")
        instance = reader.nullable_str("group instance id") if version >= 3 else None
        client_id = reader.str_("client id")
        client_host = reader.str_("client host")
        rebalance = reader.fixed(I32, "rebalance timeout") if version >= 1 else -1
        session = reader.fixed(I32, "session timeout")
        subscription = reader.bytes_("subscription")
        assignment = reader.bytes_("assignment")
        if reader.flexible:
            reader.tagged_fields("member")
        members.append(MemberMetadata(member_id, client_id, client_host, session, subscription, assignment,
                                      rebalance if version >= 1 else session, instance))
    if reader.flexible:
        reader.tagged_fields("value")
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(members), version)
