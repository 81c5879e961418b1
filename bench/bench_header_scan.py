"""The header scan (issue 11 item 2) per backend, CRC checks off and on, over a segment of 1 KB batches, beside
a memory-streaming baseline (NumPy's sum over the same bytes) and a CRC-32C ceiling (Google's crc32c_extend over
the whole segment in one call), in one run. Aim: >= 1 GB/s of segment bytes per core.

Run: scripts/dev bench -k header_scan, or
.venv/bin/python -m pytest bench/bench_header_scan.py --benchmark-only -o python_files='bench_*.py' \
    -o python_functions='bench_*' -q -p no:cacheprovider
IDEMCORE_BENCH_SEGMENT_MB sets the segment's size (default 256).
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from crc32c import crc32c

from idemcore.kernels import header_scan_reference, load_backend
from idemcore.kernels.abi import HeaderScanColumns

BATCH_BYTES = 1024
SEGMENT_BYTES = int(os.environ.get("IDEMCORE_BENCH_SEGMENT_MB", "256")) << 20
PYTHON_SLICE = 2 << 20  # the interpreted reference is timed on the first 2 MiB
TEMPLATES = 512  # distinct batches (producers, sequences, payloads), repeated to fill the segment
RECORDS_PER_BATCH = 10
_rates: dict[str, float] = {}  # label -> GB/s (best round)


def _varint(value: int) -> bytes:
    raw = ((value << 1) ^ (value >> 63)) & (2**64 - 1)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    return bytes(out) + bytes([raw])


def _record(offset_delta: int, value: bytes) -> bytes:
    body = b"\x00" + _varint(offset_delta) + _varint(offset_delta) + _varint(-1) + _varint(len(value)) + value
    body += _varint(0)
    return _varint(len(body)) + body


def _batch(rng: np.random.Generator, producer_id: int, base_sequence: int) -> bytes:
    """A 1 KB uncompressed idempotent batch of ten records (the last record's value pads it to the size)."""
    records = [_record(i, rng.bytes(80)) for i in range(RECORDS_PER_BATCH - 1)]
    fixed = 61 + sum(map(len, records))
    for size in range(BATCH_BYTES - fixed, 0, -1):
        last = _record(RECORDS_PER_BATCH - 1, rng.bytes(size))
        if fixed + len(last) == BATCH_BYTES:
            break
    body = struct.pack(">hiqqqhii", 0, RECORDS_PER_BATCH - 1, 1_700_000_000_000, 1_700_000_000_009, producer_id, 0,
                       base_sequence, RECORDS_PER_BATCH) + b"".join(records) + last
    return struct.pack(">qiibI", 0, len(body) + 9, 0, 2, crc32c(body)) + body


@pytest.fixture(scope="module")
def segment() -> np.ndarray:
    """SEGMENT_BYTES of 1 KB batches: TEMPLATES distinct ones repeated, each with its own base offset."""
    rng = np.random.default_rng(11)
    templates = b"".join(_batch(rng, 1000 + i % 64, RECORDS_PER_BATCH * (i // 64)) for i in range(TEMPLATES))
    count = SEGMENT_BYTES // BATCH_BYTES
    rows = np.tile(np.frombuffer(templates, np.uint8).reshape(TEMPLATES, BATCH_BYTES), (count // TEMPLATES, 1))
    rows[:, 0:8] = (np.arange(len(rows), dtype=">i8") * RECORDS_PER_BATCH).view(np.uint8).reshape(-1, 8)
    return rows.reshape(-1)


@pytest.fixture(scope="module")
def out(segment) -> HeaderScanColumns:
    return HeaderScanColumns.empty(len(segment) // BATCH_BYTES)


class _Summary:
    """Prints the GB/s table after pytest-benchmark's (a plugin: output during tests is captured)."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not _rates:
            return
        write = terminalreporter.write_line
        baseline = _rates.get("baseline numpy-sum")
        source = header_scan_reference.crc32c_extend_address()[1]
        write("")
        write(f"header scan, GB/s of segment bytes (best round; {SEGMENT_BYTES >> 20} MiB of {BATCH_BYTES}-byte "
              f"batches; CRC-32C: {source}):")
        for label, rate in _rates.items():
            ratio = "" if baseline is None or label.startswith("baseline") else f"  {rate / baseline:6.2f}x baseline"
            write(f"  {label:<34} {rate:8.3f} GB/s{ratio}")


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    plugin = _Summary()
    if not request.config.pluginmanager.has_plugin("idemcore-header-scan-summary"):
        request.config.pluginmanager.register(plugin, "idemcore-header-scan-summary")
    yield


def _scan(backend: str, data: np.ndarray, verify_crc: bool, out: HeaderScanColumns) -> int:
    cursor = np.zeros(2, np.int64)
    count = load_backend(backend).scan_headers(data, 0, 0, verify_crc, cursor, *out)
    assert cursor[0] == len(data) and cursor[1] == header_scan_reference.SCAN_END
    return count


def _keep(label: str, benchmark, nbytes: int) -> None:
    _rates[label] = nbytes / benchmark.stats.stats.min / 1e9
    benchmark.extra_info["GB/s"] = round(_rates[label], 3)


def bench_memory_baseline(benchmark, segment):
    words = segment.view(np.uint64)  # every byte of the segment read once, summed as uint64
    benchmark.pedantic(words.sum, rounds=5, iterations=1, warmup_rounds=1)
    _keep("baseline numpy-sum", benchmark, segment.nbytes)


def bench_crc32c_ceiling(benchmark, segment):
    address, _source = header_scan_reference.crc32c_extend_address()
    extend = header_scan_reference.CRC32C_EXTEND(address)
    pointer = segment.ctypes.data
    benchmark.pedantic(extend, args=(0, pointer, segment.nbytes), rounds=5, iterations=1, warmup_rounds=1)
    _keep("ceiling crc32c (one call)", benchmark, segment.nbytes)


@pytest.mark.parametrize("verify_crc", [False, True], ids=["crc-off", "crc-on"])
@pytest.mark.parametrize("backend", ["cython", "numba"])
def bench_scan(benchmark, segment, out, backend, verify_crc):
    _scan(backend, segment[: 64 * BATCH_BYTES], verify_crc, out)  # compile / load caches outside the timing
    count = benchmark.pedantic(_scan, args=(backend, segment, verify_crc, out), rounds=5, iterations=1,
                               warmup_rounds=1)
    assert count == len(segment) // BATCH_BYTES
    assert (out.out_crc_ok[:count] == (1 if verify_crc else 2)).all()
    _keep(f"scan {backend} {'crc-on' if verify_crc else 'crc-off'}", benchmark, segment.nbytes)


@pytest.mark.parametrize("verify_crc", [False, True], ids=["crc-off", "crc-on"])
def bench_scan_python_reference(benchmark, segment, out, verify_crc):
    piece = segment[:PYTHON_SLICE]
    benchmark.pedantic(_scan, args=("python", piece, verify_crc, out), rounds=1, iterations=1)
    _keep(f"scan python(2 MiB) {'crc-on' if verify_crc else 'crc-off'}", benchmark, piece.nbytes)
