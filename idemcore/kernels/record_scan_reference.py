"""The records scanner in Python: the twin of ``cython_record_scan.scan_records`` (used where the extension is not
built). ``scan_records(data, count) -> (status, position, record index, records without a key, records with
headers, largest timestamp delta)``: status 0 when ``data`` holds exactly ``count`` well-formed v2 records with
offset deltas 0..count-1, 1 when it is malformed (where the scan stopped), 2 when an offset delta is not its
record's index; the counts and the largest delta (0 for no records) are of a whole scan. It accepts exactly
what the v2 decoder (``record.v2.codec.decode_batch``) decodes; the tests hold both twins to the decoder."""

from __future__ import annotations

SCAN_OK, SCAN_MALFORMED, SCAN_OFFSET_DELTA = 0, 1, 2


class _Malformed(Exception):
    pass


def _zigzag(data: bytes, pos: int, end: int, max_bytes: int, bits: int) -> tuple[int, int]:
    """The zig-zag varint at ``pos`` and the position after it (read_varint / read_varlong's limits)."""
    raw = shift = 0
    while True:
        if pos >= end:
            raise _Malformed
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * max_bytes:
            raise _Malformed
    if raw >> bits:
        raise _Malformed
    return (raw >> 1) ^ -(raw & 1), pos


def scan_records(data: bytes | bytearray | memoryview, count: int) -> tuple[int, int, int, int, int, int]:
    data = bytes(data)
    end = len(data)
    pos = index = nulls = headed = start = max_delta = 0
    try:
        while index < count:
            start = pos
            length, pos = _zigzag(data, pos, end, 5, 32)
            if length < 0 or length > end - pos or length == 0:
                raise _Malformed
            record_end = pos + length
            pos += 1  # attributes
            delta, pos = _zigzag(data, pos, end, 10, 64)  # timestamp delta
            max_delta = delta if index == 0 else max(max_delta, delta)
            offset_delta, pos = _zigzag(data, pos, end, 5, 32)
            if offset_delta != index:
                return SCAN_OFFSET_DELTA, start, index, 0, 0, 0
            size, pos = _zigzag(data, pos, end, 5, 32)  # key
            if size < -1 or size > record_end - pos:
                raise _Malformed
            nulls += size == -1
            pos += max(size, 0)
            size, pos = _zigzag(data, pos, end, 5, 32)  # value
            if size < -1 or size > record_end - pos:
                raise _Malformed
            pos += max(size, 0)
            headers, pos = _zigzag(data, pos, end, 5, 32)
            if headers < 0 or headers > record_end - pos:
                raise _Malformed
            headed += headers > 0
            for _ in range(headers):
                size, pos = _zigzag(data, pos, end, 5, 32)  # header key: never null
                if size < 0 or size > record_end - pos:
                    raise _Malformed
                pos += size
                size, pos = _zigzag(data, pos, end, 5, 32)  # header value
                if size < -1 or size > record_end - pos:
                    raise _Malformed
                pos += max(size, 0)
            if pos != record_end:
                raise _Malformed
            index += 1
    except _Malformed:
        return SCAN_MALFORMED, start, index, 0, 0, 0
    if pos != end:
        return SCAN_MALFORMED, pos, index, 0, 0, 0
    return SCAN_OK, pos, index, nulls, headed, max_delta
