"""Encoding one batch as the broker appends it, side by side: ``encode_record_batch`` with the Python records
encoder and with the compiled one, ``codec.encode_batch`` over Record tuples (how the broker encoded batches before
``encode_record_batch``), and idemcore's earlier frame format (``encode_frame``, little-endian fixed-width fields
and CRC-32: what the Kafka format is measured against). Two shapes: 1 KB records x 10 per batch and 100-byte
records x 100 per batch; no keys, no headers (the broker's common case), and the 1 KB shape with two headers per
record for the two encoders that write headers.

Run: scripts/dev bench -k record_encode, or
.venv/bin/python -m pytest bench/bench_record_encode.py --benchmark-only -o python_files='bench_*.py' \
    -o python_functions='bench_*' --benchmark-columns=min,mean,rounds -s -p no:cacheprovider
"""

from __future__ import annotations

import struct
import zlib

import pytest

from idemcore.kernels import get_record_encoder
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import Record, encode_batch, encode_record_batch

try:
    from idemcore.broker.log import encode_frame  # type: ignore[attr-defined]
except ImportError:  # the frame format left the broker; this is its encoder as it was (commit 7cceb91)
    _FRAME_PREFIX = struct.Struct("<II")
    _FRAME_HEADER = struct.Struct("<qqhiiqB")
    _FRAME_LENGTH = struct.Struct("<i")

    def encode_frame(base_offset: int, batch: RecordBatch) -> bytes:
        parts = [_FRAME_HEADER.pack(base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                    batch.record_count, batch.max_timestamp, 1 if batch.is_transactional else 0)]
        keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
        for key, value in zip(keys, batch.values, strict=True):
            if key is None:
                parts.append(_FRAME_LENGTH.pack(-1))
            else:
                parts += (_FRAME_LENGTH.pack(len(key)), key)
            parts += (_FRAME_LENGTH.pack(len(value)), value)
        body = b"".join(parts)
        return _FRAME_PREFIX.pack(len(body), zlib.crc32(body)) + body


def _batch(size: int, count: int, headers: bool = False) -> RecordBatch:
    values = tuple(bytes([65 + i % 26]) * size for i in range(count))
    record_headers = tuple((("trace-id", b"%016d" % i), ("source", b"bench")) for i in range(count)) \
        if headers else None
    return RecordBatch("bench", 0, values, None, 4242, 3, 1000, 1_700_000_000_000, False, record_headers)


SHAPES = {"1KBx10": _batch(1024, 10), "100Bx100": _batch(100, 100), "1KBx10+hdrs": _batch(1024, 10, True)}


def _old_codec(base_offset: int, batch: RecordBatch) -> bytes:
    headers = batch.headers if batch.headers is not None else ((),) * batch.record_count
    records = [Record(i, 0, None, value, h) for i, (value, h) in enumerate(zip(batch.values, headers, strict=True))]
    return encode_batch(records, base_offset=base_offset, base_timestamp=batch.max_timestamp,
                        max_timestamp=batch.max_timestamp, producer_id=batch.producer_id,
                        producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                        is_transactional=batch.is_transactional, partition_leader_epoch=0)


ENCODERS = {
    "v2 cython": lambda offset, batch: encode_record_batch(batch, offset, backend="cython"),
    "v2 python": lambda offset, batch: encode_record_batch(batch, offset, backend="python"),
    "v2 encode_batch": _old_codec,
    "frame": encode_frame,
}
_times: dict[tuple[str, str], float] = {}  # (shape, encoder) -> best seconds per batch


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    if not _times:
        return
    print("\nEncoding one batch (us per batch, best round; x: time / frame format's)")
    for shape in SHAPES:
        frame = _times.get((shape, "frame"))
        cells = []
        for name in ENCODERS:
            seconds = _times.get((shape, name))
            if seconds is not None:
                ratio = f" ({seconds / frame:.2f}x)" if frame else ""
                cells.append(f"{name} {seconds * 1e6:.1f}{ratio}")
        print(f"  {shape:<15} " + ", ".join(cells))


@pytest.mark.parametrize("encoder", list(ENCODERS))
@pytest.mark.parametrize("shape", list(SHAPES))
def bench_record_encode(benchmark, record, shape, encoder):
    if encoder == "v2 cython":
        get_record_encoder("cython")  # raises when the extension is not built: a bench, not a silent fallback
    if encoder == "frame" and shape.endswith("+hdrs"):
        pytest.skip("the frame format has no headers")
    batch = SHAPES[shape]
    encode = ENCODERS[encoder]
    if encoder != "frame":
        assert encode(7, batch) == _old_codec(7, batch)  # every v2 encoder writes the same bytes
    benchmark.pedantic(encode, args=(7, batch), rounds=200, iterations=20, warmup_rounds=5)
    _times[shape, encoder] = benchmark.stats.stats.min
    record(f"encode {encoder} {shape}", benchmark, batch.record_count)
