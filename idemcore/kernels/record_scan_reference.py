"""The contract of ``cython_record_scan.scan_records``, in Python over the v2 decoder: ``(status, position,
record index, records without a key, records with headers)`` (the counts of a whole scan). Status 0 when the
records section decodes to exactly ``count`` records with offset deltas 0..count-1, 1 when it does not decode,
2 when an offset delta is not its record's index. Used where the extension is not built; the tests hold the two
to each other."""

from __future__ import annotations

from idemcore.record.v2.codec import _decode_records, _Origin
from idemcore.record.v2.errors import CorruptRecordError

SCAN_OK, SCAN_MALFORMED, SCAN_OFFSET_DELTA = 0, 1, 2


def scan_records(data: bytes | bytearray | memoryview, count: int) -> tuple[int, int, int, int, int]:
    try:
        records = _decode_records(bytes(data), count, _Origin(0, None, 0))
    except CorruptRecordError as error:
        return SCAN_MALFORMED, error.position or 0, 0, 0, 0
    for index, record in enumerate(records):
        if record.offset_delta != index:
            return SCAN_OFFSET_DELTA, 0, index, 0, 0
    return (SCAN_OK, len(data), len(records), sum(record.key is None for record in records),
            sum(bool(record.headers) for record in records))
