"""Fields of Kafka's generated record schemas (``*.json`` under Kafka's ``resources/common/message``), as the
internal logs (``__transaction_state``, ``__consumer_offsets``) store them: big-endian fixed-width integers,
strings as an int16 length + UTF-8, and in flexible versions compact strings (unsigned varint length + 1,
0 = null) and tagged-field sections.

One writer and one reader for every log that stores such records; each log passes the exception class its
readers expect, so a damaged record is that log's format error.
"""

from __future__ import annotations

import struct

I8, I16, I32, I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
#: The longest string (in UTF-8 bytes) an int16 length can hold.
STRING_MAX = 0x7FFF


# ------------------------------------------------------------------ encoding


def pack(layout: struct.Struct, what: str, *values: int) -> bytes:
    """``layout.pack(*values)``; ValueError naming ``what`` when a value does not fit."""
    try:
        return layout.pack(*values)
    except struct.error:
        shown = values[0] if len(values) == 1 else values
        raise ValueError(f"{what} {shown!r} out of range for {layout.format!r}") from None


def pack_string(text: str, what: str) -> bytes:
    """A (non-null) string: int16 length + UTF-8. ValueError when it is too long or not encodable."""
    data = text.encode("utf-8")  # UnicodeEncodeError (a ValueError) for lone surrogates
    if len(data) > STRING_MAX:
        raise ValueError(f"{what} of {len(data)} UTF-8 bytes is longer than the {STRING_MAX} a string may hold")
    return I16.pack(len(data)) + data


# ------------------------------------------------------------------ decoding


class SchemaReader:
    """Reads fields from ``data`` in order; running out of bytes, or a field the schema does not allow, raises
    ``error`` (the caller's format error) with a message naming the field."""

    def __init__(self, data: bytes, error: type[Exception]) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.error = error

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise self.error(f"record ends inside its {what} (at byte {self.pos} of {len(self.data)})")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def fixed(self, layout: struct.Struct, what: str) -> int:
        return int(layout.unpack(self.take(layout.size, what))[0])

    def uvarint(self, what: str) -> int:
        result = shift = 0
        while True:
            byte = self.take(1, what)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise self.error(f"{what} is a varint longer than 5 bytes")

    def text(self, n: int, what: str) -> str:
        """``n`` bytes of UTF-8; a negative ``n`` is a null, which no field read here allows."""
        if n < 0:
            raise self.error(f"{what} is null, which the schema does not allow")
        try:
            return str(self.take(n, what), "utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{what} is not UTF-8 ({exc.reason})") from None

    def string(self, what: str) -> str:
        return self.text(self.fixed(I16, f"{what} length"), what)

    def compact_string(self, what: str) -> str:
        return self.text(self.uvarint(f"{what} length") - 1, what)

    def tagged_fields(self, where: str) -> dict[int, bytes]:
        """A tagged-field section: each tag's bytes by tag (callers skip the tags they do not know, as Kafka
        does)."""
        tags: dict[int, bytes] = {}
        for _ in range(self.uvarint(f"tagged field count of {where}")):
            tag = self.uvarint(f"tag in {where}")
            size = self.uvarint(f"size of tag {tag} in {where}")
            tags[tag] = bytes(self.take(size, f"tag {tag} in {where}"))
        return tags
