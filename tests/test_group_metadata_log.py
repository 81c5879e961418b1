"""The GroupMetadata record codec against bytes built by hand from Kafka's schemas (``GroupMetadataKey.json``,
``GroupMetadataValue.json``): the key (version 2), the value as written (version 3), every version read (0..4,
4 flexible with tagged fields), tombstones, and damaged records refused with a one-line error."""

from __future__ import annotations

import struct

import pytest

from idemcore.broker.group.group_metadata_log import (
    GroupMetadataValue,
    MemberMetadata,
    decode_group_value,
    encode_group_key,
    encode_group_value,
)
from idemcore.broker.group.offsets_log import GroupMetadataKey, OffsetLogFormatError, decode_key


def s(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def cs(text: str | None) -> bytes:  # compact (nullable) string
    if text is None:
        return b"\x00"
    data = text.encode()
    return bytes([len(data) + 1]) + data


def cb(data: bytes) -> bytes:  # compact bytes
    return bytes([len(data) + 1]) + data


MEMBER = MemberMetadata("member-1", "client", "/10.0.0.1", 10_000, b"sub", b"assign", 60_000, "instance-1")
VALUE = GroupMetadataValue("consumer", 10, "range", "member-1", 1_700_000_000_000, (MEMBER,))

#: Version 3, field by field as the schema orders them.
V3 = (struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 10) + s("range") + s("member-1")
      + struct.pack(">q", 1_700_000_000_000) + struct.pack(">i", 1)
      + s("member-1") + s("instance-1") + s("client") + s("/10.0.0.1") + struct.pack(">ii", 60_000, 10_000)
      + b(b"sub") + b(b"assign"))


def test_the_key_is_version_2_and_the_group_id():
    assert encode_group_key("my-group") == b"\x00\x02\x00\x08my-group"
    assert decode_key(b"\x00\x02\x00\x08my-group") == GroupMetadataKey("my-group")


def test_the_value_is_written_as_version_3():
    assert encode_group_value(VALUE) == V3
    assert decode_group_value(V3) == VALUE


def test_an_empty_group_is_written_with_null_protocol_and_leader():
    empty = GroupMetadataValue("consumer", 11, None, None, 5, ())
    data = struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 11) + s(None) + s(None) + struct.pack(">qi", 5, 0)
    assert encode_group_value(empty) == data
    assert decode_group_value(data) == empty


@pytest.mark.parametrize(("data", "expected"), [
    # v0: no rebalance timeout (the session timeout stands for it), no state timestamp, no instance id.
    (struct.pack(">h", 0) + s("consumer") + struct.pack(">i", 3) + s("range") + s("m") + struct.pack(">i", 1)
     + s("m") + s("c") + s("h") + struct.pack(">i", 9000) + b(b"x") + b(b"y"),
     GroupMetadataValue("consumer", 3, "range", "m", -1, (MemberMetadata("m", "c", "h", 9000, b"x", b"y", 9000),),
                        0)),
    # v1: the rebalance timeout comes before the session timeout.
    (struct.pack(">h", 1) + s("consumer") + struct.pack(">i", 3) + s("range") + s("m") + struct.pack(">i", 1)
     + s("m") + s("c") + s("h") + struct.pack(">ii", 30_000, 9000) + b(b"x") + b(b""),
     GroupMetadataValue("consumer", 3, "range", "m", -1, (MemberMetadata("m", "c", "h", 9000, b"x", b"", 30_000),),
                        1)),
    # v2: the state timestamp.
    (struct.pack(">h", 2) + s("") + struct.pack(">i", 0) + s(None) + s(None) + struct.pack(">qi", 77, 0),
     GroupMetadataValue("", 0, None, None, 77, (), 2)),
    # v4: flexible; an unknown tag (7, two bytes) after the member and one after the value are skipped.
    (struct.pack(">h", 4) + cs("consumer") + struct.pack(">i", 10) + cs("range") + cs("member-1")
     + struct.pack(">q", 1_700_000_000_000) + b"\x02"
     + cs("member-1") + cs(None) + cs("client") + cs("/10.0.0.1") + struct.pack(">ii", 60_000, 10_000)
     + cb(b"sub") + cb(b"assign") + b"\x01\x07\x02zz" + b"\x01\x07\x02zz",
     GroupMetadataValue("consumer", 10, "range", "member-1", 1_700_000_000_000,
                        (MemberMetadata("member-1", "client", "/10.0.0.1", 10_000, b"sub", b"assign", 60_000),), 4)),
    (V3 + b"trailing", VALUE),  # ignored, as Kafka's reader ignores them
])
def test_every_value_version_is_read(data, expected):
    assert decode_group_value(data) == expected


def test_a_tombstone_is_none():
    assert decode_group_value(None) is None


@pytest.mark.parametrize(("data", "match"), [
    (b"\x00", "value version"),
    (struct.pack(">h", 5) + V3[2:], "version 5"),
    (V3[:-1], "assignment"),
    (V3[:20], "record ends"),
    (struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 1) + s(None) + s(None) + struct.pack(">qi", 0, -1),
     "members is null"),
])
def test_damaged_values_are_refused_with_one_line(data, match):
    with pytest.raises(OffsetLogFormatError, match=match) as raised:
        decode_group_value(data)
    assert "\n" not in str(raised.value)


def test_fields_a_record_cannot_hold_are_refused_when_written():
    with pytest.raises(ValueError, match="member id"):
        encode_group_value(GroupMetadataValue("consumer", 1, "r", "m", 0, (
            MemberMetadata("m" * 40_000, "c", "h", 1, b"", b""),)))
    with pytest.raises(ValueError, match="version 3"):
        encode_group_value(GroupMetadataValue("consumer", 1, "r", "m", version=4))
