"""Every length in a request (or response) frame checked against the bytes left, before kio's native reader sees
the frame.

kio 0.6.5's reader reserves an array's declared length up front: a frame of 24 bytes declaring 2^32 elements
makes the allocation fail, and Rust aborts the whole process. This walk follows the same schema (kio's classes
and their ``kafka_type`` metadata) without building anything: each array, string and bytes length must fit in
what is left of the frame. Tagged fields the schema does not know are
cut out before kio reads the frame (Kafka skips them, KIP-482; kio 0.6 raises KeyError on them).

Every request passes here, so each class's walk is built once into closures (fields of fixed widths in a row are
bounded by one comparison, an array of fixed-width elements by one multiplication)."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache

from kio.serial._introspect import classify_field, get_field_tag, is_optional

from idemcore.net.wire.errors import MalformedFrameError
from idemcore.record.v2.varint import put_unsigned

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "error_code": 2, "uint16": 2, "int32": 4, "uint32": 4, "timedelta_i32": 4,
          "int64": 8, "timedelta_i64": 8, "float64": 8, "datetime_i64": 8, "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

#: What to change in a frame: ``(start, end, replacement)`` byte ranges (a tagged-field count, an unknown field).
Edits = list[tuple[int, int, bytes]]
#: One field's (or entity's) check: ``(frame, position, end of frame, edits) -> position after it``.
Check = Callable[[bytes | memoryview, int, int, Edits], int]
#: A length's reader: ``(frame, position, end) -> (length, position after it)``.
Length = Callable[[bytes | memoryview, int, int], tuple[int, int]]


def _left(what: str, size: int, left: int) -> MalformedFrameError:
    return MalformedFrameError(f"{what}: {size} bytes where {left} are left")


def _uvarint(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise MalformedFrameError("a varint cut off by the end of the frame")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedFrameError("an unsigned varint longer than 5 bytes")


def _compact_length(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    size, pos = _uvarint(data, pos, end)
    return size - 1, pos


def _int16_length(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    if end - pos < 2:
        raise _left("an int16", 2, end - pos)
    return _I16.unpack_from(data, pos)[0], pos + 2


def _int32_length(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    if end - pos < 4:
        raise _left("an int32", 4, end - pos)
    return _I32.unpack_from(data, pos)[0], pos + 4


def _length_reader(flexible: bool, wide: bool) -> Length:
    """A length as the schema writes it (compact: N+1; else int16 for strings, int32 for the rest); -1 for null
    (whether the field may be null is kio's to check)."""
    if flexible:
        return _compact_length
    return _int32_length if wide else _int16_length


def _fixed_run(names: list[str], size: int) -> Check:
    """Fields of fixed widths in a row: one bound for all of them."""
    what = names[0] if len(names) == 1 else ", ".join(names)

    def check(data: bytes | memoryview, pos: int, end: int, edits: Edits) -> int:
        if size > end - pos:
            raise _left(what, size, end - pos)
        return pos + size
    return check


def _sized(name: str, length: Length) -> Check:
    """A string or bytes: its length, then that many bytes."""
    def check(data: bytes | memoryview, pos: int, end: int, edits: Edits) -> int:
        size, pos = length(data, pos, end)
        if size < -1:
            raise MalformedFrameError(f"{name} of length {size}")
        if size > end - pos:
            raise _left(name, size, end - pos)
        return pos + size if size > 0 else pos
    return check


def _array(name: str, length: Length, element: Check | None, element_size: int) -> Check:
    """A count, then the elements (``element``, or ``element_size`` bytes each when their width is fixed)."""
    def check(data: bytes | memoryview, pos: int, end: int, edits: Edits) -> int:
        count, pos = length(data, pos, end)
        if count < -1:
            raise MalformedFrameError(f"{name} of length {count}")
        if count == -1:
            return pos
        # Every element takes a byte at least: a count beyond the bytes left is a lie kio must not act on.
        if count > end - pos:
            raise MalformedFrameError(f"{name}: {count} elements where {end - pos} bytes are left")
        if element is None:
            if count * element_size > end - pos:
                raise _left(name, count * element_size, end - pos)
            return pos + count * element_size
        for _ in range(count):
            pos = element(data, pos, end, edits)
        return pos
    return check


def _nullable(name: str, entity: Check) -> Check:
    """A nullable struct: an int8 first, negative for null."""
    def check(data: bytes | memoryview, pos: int, end: int, edits: Edits) -> int:
        if pos >= end:
            raise _left(f"{name}'s presence", 1, end - pos)
        if data[pos] >= 0x80:
            return pos + 1
        return entity(data, pos + 1, end, edits)
    return check


def _tagged(known: frozenset[int]) -> Check:
    """A tagged-field section: each field's size is checked, and the fields the schema does not know go into
    ``edits`` (with the count lowered)."""
    def check(data: bytes | memoryview, pos: int, end: int, edits: Edits) -> int:
        start = pos
        count, pos = _uvarint(data, pos, end)
        count_end = pos
        if count > end - pos:
            raise MalformedFrameError(f"{count} tagged fields where {end - pos} bytes are left")
        unknown: Edits = []
        for _ in range(count):
            field_start = pos
            tag, pos = _uvarint(data, pos, end)
            size, pos = _uvarint(data, pos, end)
            if size > end - pos:
                raise _left(f"tagged field {tag}", size, end - pos)
            pos += size
            if tag not in known:
                unknown.append((field_start, pos, b""))
        if unknown:
            edits.append((start, count_end, _uvarint_bytes(count - len(unknown))))
            edits.extend(unknown)
        return pos
    return check


_NO_TAGS = _tagged(frozenset())


@cache
def _checker(cls: type) -> Check:
    """The check of one ``cls`` entity: its fields in order (runs of fixed widths bounded at once), then, if
    flexible, its tagged fields."""
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list[Check] = []
    run: list[str] = []
    run_size = 0
    tags: set[int] = set()
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tags.add(int(tag))
            continue  # in the tagged section, which is walked by size
        kind = classify_field(field)
        kafka_type = field.metadata.get("kafka_type") or ""
        entity = kind.type_ if dataclasses.is_dataclass(kind.type_) else None
        fixed = None if entity is not None else _FIXED.get(kafka_type)
        if fixed is not None and not kind.is_array:
            run.append(field.name)
            run_size += fixed
            continue
        if run:
            steps.append(_fixed_run(run, run_size))
            run, run_size = [], 0
        element: Check | None
        if entity is not None:
            element = _checker(entity)
        elif fixed is not None:
            element = None
        elif kafka_type == "string":
            element = _sized(field.name, _length_reader(flexible, wide=False))
        elif kafka_type in ("bytes", "records"):
            element = _sized(field.name, _length_reader(flexible, wide=True))
        else:
            raise MalformedFrameError(f"{field.name}: no length rule for kafka type {kafka_type!r}")
        if kind.is_array:
            steps.append(_array(field.name, _length_reader(flexible, wide=True), element, fixed or 0))
        elif entity is not None and is_optional(field):
            steps.append(_nullable(field.name, element))  # type: ignore[arg-type]
        else:
            steps.append(element)  # type: ignore[arg-type]
    if run:
        steps.append(_fixed_run(run, run_size))
    if flexible:
        steps.append(_tagged(frozenset(tags)))
    all_steps = tuple(steps)

    def check(data: bytes | memoryview, pos: int, end: int, edits: Edits) -> int:
        for step in all_steps:
            pos = step(data, pos, end, edits)
        return pos
    return check


def check_lengths(cls: type, frame: bytes | memoryview, position: int, edits: Edits) -> None:
    """Walk the body of ``cls`` (a kio request or response class) in ``frame`` from ``position``; MalformedFrameError
    for a length beyond the frame. Tagged fields the schema does not know go into
    ``edits`` to be cut (:func:`without`): Kafka skips them (KIP-482), and kio 0.6 raises on them."""
    # Bytes after the body are left alone, as Kafka's parser leaves them (see frames._read).
    _checker(cls)(frame, position, len(frame), edits)


def header_end(frame: bytes | memoryview, flexible_header: bool, edits: Edits) -> int:
    """Where a request header ends: api key, version, correlation id, the client id (always a nullable int16
    string), and in header v2 its tagged fields (unknown ones into ``edits``)."""
    end = len(frame)
    size, pos = _int16_length(frame, 8, end)
    if size < -1:
        raise MalformedFrameError(f"client id of length {size}")
    if size > end - pos:
        raise _left("the client id", size, end - pos)
    pos += max(size, 0)
    return _NO_TAGS(frame, pos, end, edits) if flexible_header else pos


def response_header_end(frame: bytes | memoryview, flexible_header: bool, edits: Edits) -> int:
    """Where a response header ends: the correlation id, and in header v1 its tagged fields."""
    end = len(frame)
    if end < 4:
        raise _left("the correlation id", 4, end)
    return _NO_TAGS(frame, 4, end, edits) if flexible_header else 4


def _uvarint_bytes(value: int) -> bytes:
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
