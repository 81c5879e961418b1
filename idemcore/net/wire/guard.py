"""Every length in a request (or response) frame checked against the bytes left, before kio's native reader sees
the frame.

kio 0.6.5's reader reserves an array's declared length up front: a frame of 24 bytes declaring 2^32 elements
makes the allocation fail, and Rust aborts the whole process. This walk follows the same schema (kio's classes
and their ``kafka_type`` metadata) without building anything: each array, string and bytes length must fit in
what is left of the frame. Tagged fields the schema does not know are
cut out before kio reads the frame (Kafka skips them, KIP-482; kio 0.6 raises KeyError on them)."""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from typing import NamedTuple

from kio.serial._introspect import classify_field, get_field_tag, is_optional

from idemcore.net.wire.errors import MalformedFrameError
from idemcore.record.v2.varint import put_unsigned

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "error_code": 2, "uint16": 2, "int32": 4, "uint32": 4, "timedelta_i32": 4,
          "int64": 8, "timedelta_i64": 8, "float64": 8, "datetime_i64": 8, "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Field(NamedTuple):
    name: str
    kafka_type: str | None  # None: a nested entity
    array: bool
    optional: bool
    entity: type | None


class _Plan(NamedTuple):
    flexible: bool
    fields: tuple[_Field, ...]
    tags: frozenset[int]


@cache
def _plan(cls: type) -> _Plan:
    fields, tags = [], set()
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tags.add(int(tag))
            continue  # in the tagged section, which is walked by size
        kind = classify_field(field)
        entity = kind.type_ if dataclasses.is_dataclass(kind.type_) else None
        fields.append(_Field(field.name, field.metadata.get("kafka_type"), kind.is_array, is_optional(field),
                             entity))
    return _Plan(bool(getattr(cls, "__flexible__", False)), tuple(fields), frozenset(tags))


#: What to change in a frame: ``(start, end, replacement)`` byte ranges (a tagged-field count, an unknown field).
Edits = list[tuple[int, int, bytes]]


class _Reader:
    __slots__ = ("data", "edits", "end", "pos")

    def __init__(self, data: bytes | memoryview, pos: int, edits: Edits) -> None:
        self.data, self.pos, self.end, self.edits = data, pos, len(data), edits

    def take(self, size: int, what: str) -> None:
        if size < 0 or size > self.end - self.pos:
            raise MalformedFrameError(f"{what}: {size} bytes where {self.end - self.pos} are left")
        self.pos += size

    def int16(self) -> int:
        value = _I16.unpack_from(self.data, self.pos)[0] if self.end - self.pos >= 2 else None
        self.take(2, "an int16")
        return value  # type: ignore[return-value]

    def int32(self) -> int:
        value = _I32.unpack_from(self.data, self.pos)[0] if self.end - self.pos >= 4 else None
        self.take(4, "an int32")
        return value  # type: ignore[return-value]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= self.end:
                raise MalformedFrameError("a varint cut off by the end of the frame")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MalformedFrameError("an unsigned varint longer than 5 bytes")

    def length(self, flexible: bool, wide: bool, what: str) -> int:
        """A length as the schema writes it (compact: N+1; else int16 for strings, int32 for the rest); -1 for
        null (whether the field may be null is kio's to check)."""
        if flexible:
            size = self.uvarint() - 1
        else:
            size = self.int32() if wide else self.int16()
        if size < -1:
            raise MalformedFrameError(f"{what} of length {size}")
        return size


def check_lengths(cls: type, frame: bytes | memoryview, position: int, edits: Edits) -> None:
    """Walk the body of ``cls`` (a kio request or response class) in ``frame`` from ``position``; MalformedFrameError
    for a length beyond the frame. Tagged fields the schema does not know go into
    ``edits`` to be cut (:func:`without`): Kafka skips them (KIP-482), and kio 0.6 raises on them."""
    reader = _Reader(frame, position, edits)
    _walk(cls, reader)  # bytes after the body are left alone, as Kafka's parser leaves them (see frames._read)


def header_end(frame: bytes | memoryview, flexible_header: bool, edits: Edits) -> int:
    """Where a request header ends: api key, version, correlation id, the client id (always a nullable int16
    string), and in header v2 its tagged fields (unknown ones into ``edits``)."""
    reader = _Reader(frame, 8, edits)
    size = reader.int16()
    if size < -1:
        raise MalformedFrameError(f"client id of length {size}")
    reader.take(max(size, 0), "the client id")
    if flexible_header:
        _tagged(reader, frozenset())
    return reader.pos


def response_header_end(frame: bytes | memoryview, flexible_header: bool, edits: Edits) -> int:
    """Where a response header ends: the correlation id, and in header v1 its tagged fields."""
    reader = _Reader(frame, 0, edits)
    reader.take(4, "the correlation id")
    if flexible_header:
        _tagged(reader, frozenset())
    return reader.pos


def _walk(cls: type, reader: _Reader) -> None:
    plan = _plan(cls)
    flexible = plan.flexible
    for field in plan.fields:
        if field.array:
            count = reader.length(flexible, True, field.name)
            if count == -1:
                continue
            # Every element takes a byte at least: a count beyond the bytes left is a lie kio must not act on.
            if count > reader.end - reader.pos:
                raise MalformedFrameError(f"{field.name}: {count} elements where {reader.end - reader.pos} bytes "
                                          "are left")
            for _ in range(count):
                _value(field, reader, flexible, element=True)
        else:
            _value(field, reader, flexible, element=False)
    if flexible:
        _tagged(reader, plan.tags)


def _value(field: _Field, reader: _Reader, flexible: bool, element: bool) -> None:
    if field.entity is not None:
        if field.optional and not element:  # a nullable struct: an int8 first, negative for null
            marker = reader.data[reader.pos] if reader.pos < reader.end else 0
            reader.take(1, f"{field.name}'s presence")
            if marker >= 0x80:
                return
        _walk(field.entity, reader)
        return
    kind = field.kafka_type or ""
    fixed = _FIXED.get(kind)
    if fixed is not None:
        reader.take(fixed, field.name)
    elif kind == "string":
        size = reader.length(flexible, False, field.name)
        reader.take(max(size, 0), field.name)
    elif kind in ("bytes", "records"):
        size = reader.length(flexible, True, field.name)
        reader.take(max(size, 0), field.name)
    else:
        raise MalformedFrameError(f"{field.name}: no length rule for kafka type {kind!r}")


def _tagged(reader: _Reader, known: frozenset[int]) -> None:
    start = reader.pos
    count = reader.uvarint()
    count_end = reader.pos
    if count > reader.end - reader.pos:
        raise MalformedFrameError(f"{count} tagged fields where {reader.end - reader.pos} bytes are left")
    unknown: Edits = []
    for _ in range(count):
        field_start = reader.pos
        tag = reader.uvarint()
        size = reader.uvarint()
        reader.take(size, f"tagged field {tag}")
        if tag not in known:
            unknown.append((field_start, reader.pos, b""))
    if unknown:
        reader.edits.append((start, count_end, _uvarint(count - len(unknown))))
        reader.edits.extend(unknown)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    put_unsigned(out, value)
    return bytes(out)


def without(frame: bytes | memoryview, edits: Edits) -> bytes | memoryview:
    """``frame`` with ``edits`` applied (the unknown tagged fields cut, their counts lowered)."""
    if not edits:
        return frame
    parts: list[bytes | memoryview] = []
    position = 0
    for start, end, replacement in sorted(edits):
        parts += (frame[position:start], replacement)
        position = end
    parts.append(frame[position:])
    return b"".join(parts)
