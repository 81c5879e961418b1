"""Zig-zag varints as Kafka writes them (``ByteUtils.writeVarint`` / ``writeVarlong``, protobuf's encoding).

A varint is an int32 in at most 5 bytes, a varlong an int64 in at most 10. Decoding is stricter than
Kafka's Java on bytes no writer produces: Kafka drops the bits of a 5th (10th) byte that do not fit the
width, idemcore refuses them as an overflow. Every canonical encoding reads the same in both.
"""

from __future__ import annotations

from idemcore.record.v2.errors import VarintError

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def put_unsigned(out: bytearray, value: int) -> None:
    """Append ``value`` (>= 0) as an unsigned base-128 varint."""
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def put_varint(out: bytearray, value: int) -> None:
    """Append the int32 ``value`` zig-zag encoded (1 to 5 bytes)."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} is outside the int32 range")
    put_unsigned(out, (value << 1) ^ (value >> 31))


def put_varlong(out: bytearray, value: int) -> None:
    """Append the int64 ``value`` zig-zag encoded (1 to 10 bytes)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} is outside the int64 range")
    put_unsigned(out, (value << 1) ^ (value >> 63))


def encode_varint(value: int) -> bytes:
    out = bytearray()
    put_varint(out, value)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    out = bytearray()
    put_varlong(out, value)
    return bytes(out)


def size_of_varint(value: int) -> int:
    """Bytes ``value`` takes as a zig-zag varint (or varlong: the encoding is the same for int32 values)."""
    raw = (value << 1) ^ (value >> 63)
    size = 1
    while raw > 0x7F:
        raw >>= 7
        size += 1
    return size


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode the zig-zag varint at ``data[pos]``: ``(value, position after it)``.

    Raises VarintError when it is longer than 5 bytes, overflows 32 bits or is cut off by the end of ``data``.
    """
    return _read_zigzag(data, pos, "varint", 5, 32)


def read_varlong(data: bytes, pos: int) -> tuple[int, int]:
    """Decode the zig-zag varlong at ``data[pos]``: ``(value, position after it)``.

    Raises VarintError when it is longer than 10 bytes, overflows 64 bits or is cut off by the end of ``data``.
    """
    return _read_zigzag(data, pos, "varlong", 10, 64)


def _read_zigzag(data: bytes, pos: int, kind: str, max_bytes: int, bits: int) -> tuple[int, int]:
    """``read_varint`` and ``read_varlong``: a zig-zag value of at most ``max_bytes`` bytes and ``bits`` bits."""
    end = len(data)
    start = pos
    raw = 0
    shift = 0
    while True:
        if pos >= end:
            raise VarintError(f"{kind} cut off by the end of the data", start)
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * max_bytes:
            raise VarintError(f"{kind} longer than {max_bytes} bytes", start)
    if raw >> bits:
        raise VarintError(f"{kind} overflows {bits} bits (raw value {raw:#x})", start)
    return (raw >> 1) ^ -(raw & 1), pos
