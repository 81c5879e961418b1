"""The records section of a RecordBatch v2 as the broker stores a batch, in Python: the twin of
``cython_record_encode.pyx`` (same arguments, same bytes, same errors; tests/test_record_headers.py compares them).

``encode_records(values, keys, headers, reserve, timestamps=None) -> bytearray``
    ``reserve`` zero bytes (room for the batch header, filled in by the caller: one buffer, no copy of the
    records), then one record per value, Kafka's ``DefaultRecord``::

        length varint | attributes i8 = 0 | timestamp_delta varlong | offset_delta varint = index |
        key_length varint (-1 = null) + key | value_length varint (-1 = null) + value |
        header_count varint | per header: key_length varint + UTF-8 key, value_length varint (-1 = null) + value

    ``keys`` is None (no record has a key) or one ``bytes | None`` per value; ``headers`` is None or one sequence
    of ``(str, bytes | None)`` pairs per value. ``timestamps`` is None (every delta 0: the batch has one timestamp)
    or one ``int`` per value, each record's own: its delta counts from the first's, the batch's base timestamp
    (Kafka's MemoryRecordsBuilder). Header keys are encoded UTF-8 with ``surrogateescape``, as
    ``record.v2.codec`` decodes them, so a key read from bytes that are not UTF-8 writes back the same bytes.

Every varint here but the timestamp delta is a zig-zag varint of a value >= -1, so zig-zag is ``n << 1`` (``1``
for -1). Raises TypeError for a value, key, header or timestamp of the wrong type and ValueError for lengths that
do not match, a timestamp or delta outside int64, or a record too long for its varint length, each naming the
record (and header) it is about.

This is not a kernel over arrays (it reads Python objects), so it is not part of :class:`idemcore.kernels.Backend`;
:func:`idemcore.kernels.get_record_encoder` picks it or its compiled twin.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

INT32_MAX = (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_NULL = b"\x01"  # length -1, zig-zag encoded
_NO_HEADERS = b"\x00"
#: Unsigned values below this have their varint in the table: every one- and two-byte varint.
_TABLE_SIZE = 1 << 14


@functools.cache
def _varint_table() -> tuple[bytes, ...]:
    """The varint of every unsigned value below _TABLE_SIZE (built on first use: the compiled twin needs none).
    A tuple index costs a tenth of building the bytes, and a record has three or more varints."""
    return tuple(bytes((n,)) if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(_TABLE_SIZE))


def _varint(raw: int) -> bytes:
    """The unsigned base-128 varint of ``raw`` (>= 0; a zig-zag value already), past the table."""
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def encode_records(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                   headers: Sequence[Sequence[tuple[str, bytes | None]]] | None, reserve: int,
                   timestamps: Sequence[int] | None = None) -> bytearray:
    """``reserve`` zero bytes, then the records (module docstring)."""
    count = len(values)
    check_lengths(count, keys, headers, timestamps)
    if reserve < 0:
        raise ValueError(f"reserve {reserve} is negative")
    table = _varint_table()
    base = timestamp_of(0, timestamps[0]) if timestamps is not None and count else 0
    # Each record as three parts (its length and the fields before the value, the value, what follows it), all
    # joined once at the end: fewer and cheaper operations than growing a buffer field by field.
    parts: list[bytes] = [bytes(reserve)]
    append = parts.append
    for index in range(count):
        if timestamps is None:
            head = b"\x00\x00"  # attributes 0, timestamp delta 0
        else:
            raw = timestamp_delta(index, timestamp_of(index, timestamps[index]), base)
            head = b"\x00" + (table[raw] if raw < _TABLE_SIZE else _varint(raw))
        raw = index << 1
        head += table[raw] if raw < _TABLE_SIZE else _varint(raw)  # offset delta
        if keys is not None and (key := keys[index]) is not None:
            if not isinstance(key, bytes):
                raise bad_type(index, "key", key)
            raw = len(key) << 1
            head += (table[raw] if raw < _TABLE_SIZE else _varint(raw)) + key
        else:
            head += _NULL
        value = values[index]
        if value is None:
            head += _NULL
            value = b""
        elif isinstance(value, bytes):
            raw = len(value) << 1
            head += table[raw] if raw < _TABLE_SIZE else _varint(raw)
        else:
            raise bad_type(index, "value", value)
        tail = _NO_HEADERS if headers is None else _encode_headers(index, headers[index], table)
        body = len(head) + len(value) + len(tail)
        if body > INT32_MAX:
            raise too_long(index, body)
        raw = body << 1
        append((table[raw] if raw < _TABLE_SIZE else _varint(raw)) + head)
        append(value)
        append(tail)
    return bytearray(b"".join(parts))


def _encode_headers(index: int, record_headers: Sequence[tuple[str, bytes | None]],
                    table: tuple[bytes, ...]) -> bytes:
    """A record's header count and headers."""
    if not record_headers:
        return _NO_HEADERS
    raw = len(record_headers) << 1
    parts = [table[raw] if raw < _TABLE_SIZE else _varint(raw)]
    for number, pair in enumerate(record_headers):
        name, header_value = header_pair(index, number, pair)
        encoded = encode_header_key(index, number, name)
        raw = len(encoded) << 1
        parts += (table[raw] if raw < _TABLE_SIZE else _varint(raw), encoded)
        if header_value is None:
            parts.append(_NULL)
        elif isinstance(header_value, bytes):
            raw = len(header_value) << 1
            parts += (table[raw] if raw < _TABLE_SIZE else _varint(raw), header_value)
        else:
            raise bad_header_value(index, number, name, header_value)
    return b"".join(parts)


# --- checks and messages, shared with the compiled twin (which calls them only to raise) ---------------------

def check_lengths(count: int, keys: Sequence[object] | None, headers: Sequence[object] | None,
                  timestamps: Sequence[object] | None = None) -> None:
    """ValueError unless ``keys``, ``headers`` and ``timestamps`` (when given) have one entry per value."""
    if count > INT32_MAX:
        raise ValueError(f"{count} records is more than a batch can hold ({INT32_MAX})")
    if keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} keys for {count} values")
    if headers is not None and len(headers) != count:
        raise ValueError(f"{len(headers)} header lists for {count} values")
    if timestamps is not None and len(timestamps) != count:
        raise ValueError(f"{len(timestamps)} timestamps for {count} values")


def timestamp_of(index: int, timestamp: object) -> int:
    """Record ``index``'s timestamp, an int64 (``bool`` is not one), or TypeError/ValueError naming it."""
    if type(timestamp) is not int:
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise TypeError(f"record {index}: timestamp must be an int, not {type(timestamp).__name__} "
                            f"({_shown(timestamp)})")
        timestamp = int(timestamp)
    if not INT64_MIN <= timestamp <= INT64_MAX:
        raise ValueError(f"record {index}: timestamp {timestamp} is outside the int64 range")
    return timestamp


def timestamp_delta(index: int, timestamp: int, base: int) -> int:
    """The zig-zag value of record ``index``'s timestamp delta from ``base``, or ValueError when the delta is
    outside int64 (a varlong holds no more)."""
    delta = timestamp - base
    if not INT64_MIN <= delta <= INT64_MAX:
        raise delta_out_of_range(index, timestamp, base)
    return (delta << 1) ^ (delta >> 63)


def delta_out_of_range(index: int, timestamp: int, base: int) -> ValueError:
    return ValueError(f"record {index}: timestamp {timestamp} is {timestamp - base} ms from the first record's "
                      f"{base}, outside the int64 range of a timestamp delta")


def header_pair(index: int, number: int, pair: object) -> tuple[object, object]:
    """``pair`` as ``(key, value)``, or TypeError naming it."""
    if type(pair) is tuple and len(pair) == 2:
        return pair
    if isinstance(pair, Sequence) and not isinstance(pair, str | bytes) and len(pair) == 2:
        return pair[0], pair[1]
    raise TypeError(f"record {index} header {number}: expected a (str, bytes | None) pair, got {_shown(pair)}")


def encode_header_key(index: int, number: int, name: object) -> bytes:
    """The UTF-8 bytes of a header key (``surrogateescape``), or TypeError/ValueError naming it."""
    if not isinstance(name, str):
        raise TypeError(f"record {index} header {number}: key must be a str, not {type(name).__name__} "
                        f"({_shown(name)})")
    try:
        return str.encode(name, "utf-8", "surrogateescape")  # str's own: a subclass cannot return other than bytes
    except UnicodeEncodeError:
        raise ValueError(f"record {index} header {number}: key {_shown(name)} cannot be encoded as UTF-8 "
                         "(a lone surrogate)") from None


def bad_type(index: int, what: str, value: object) -> TypeError:
    return TypeError(f"record {index}: {what} must be bytes or None, not {type(value).__name__} ({_shown(value)})")


def bad_header_value(index: int, number: int, name: object, value: object) -> TypeError:
    return TypeError(f"record {index} header {number} ({name!r}): value must be bytes or None, not "
                     f"{type(value).__name__} ({_shown(value)})")


def too_long(index: int, length: int) -> ValueError:
    return ValueError(f"record {index} takes {length} bytes, more than a varint length can say ({INT32_MAX})")


def _shown(value: object) -> str:
    """``repr(value)``, cut to keep a message on one short line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
