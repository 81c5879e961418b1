"""A Kafka log directory written by ``idemcore generate --format kafka``, side by side in one run, one core each:

- a memory-streaming baseline: every segment mapped (``mmap``) and its bytes summed as uint64 (NumPy);
- the header scan alone: ``scan_segment`` over every segment, per backend, CRC-32C checked and not;
- the in-process audit: ``audit_log_dir`` (scan, replay through the kernel, index and .txnindex cross-checks).

Figures: GB/s of segment bytes and M batches/s, per core (each runs on one thread). The log directory
(generate's defaults: 4 topics x 64 partitions, 1,000 producers; $IDEMCORE_BENCH_LOGDIR_BATCHES produce attempts,
default 3,000,000: about 2.97 M batches written, ~1.25 GB of segments) is generated once per session into a
temporary directory and removed after; it is read from the page cache (it was just written), not from the disk.

Run: scripts/dev bench -k logdir, or
.venv/bin/python -m pytest bench/bench_logdir.py --benchmark-only -o python_files='bench_*.py' \
    -o python_functions='bench_*' -q -p no:cacheprovider
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import numpy as np
import pytest

from idemcore.audit.logdir import audit_log_dir
from idemcore.kernels import load_backend
from idemcore.record.kafka_files import scan_segment
from idemcore.synth.dataset import generate

BATCHES = int(os.environ.get("IDEMCORE_BENCH_LOGDIR_BATCHES", 3_000_000))
_rates: dict[str, tuple[float, float]] = {}  # label -> (GB/s, M batches/s), best round
_dataset: dict[str, object] = {}


@pytest.fixture(scope="session")
def logdir(tmp_path_factory) -> tuple[Path, list[Path], int, int]:
    """(log directory, its segments, batches written, segment bytes), generated once per session."""
    out = tmp_path_factory.mktemp("bench-logdir") / "ds"
    started = time.perf_counter()
    truth = generate(out, topics=4, partitions=64, producers=1000, batches=BATCHES, seed=1, format="kafka",
                     progress=False)
    seconds = time.perf_counter() - started
    segments = sorted((out / "logs").glob("*/*.log"))
    size = sum(path.stat().st_size for path in segments)
    _dataset.update(batches=truth["batches"], attempts=truth["produce_attempts"], bytes=size,
                    segments=len(segments), partitions=len(truth["files"]), seconds=seconds,
                    findings=truth["findings"])
    return out / "logs", segments, truth["batches"], size


class _Summary:
    """Prints the table after pytest-benchmark's (a plugin: output during tests is captured)."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not _rates:
            return
        write = terminalreporter.write_line
        baseline = _rates.get("baseline mmap + numpy-sum")
        write("")
        write(f"Kafka log directory ({_dataset['batches']:,} batches of {_dataset['attempts']:,} produce attempts, "
              f"{_dataset['bytes'] / 1e9:.2f} GB in {_dataset['segments']} segments of {_dataset['partitions']} "
              f"partitions; generated in {_dataset['seconds']:.1f} s), page cache, one core each, best round:")
        for label, (gbs, mbs) in _rates.items():
            ratio = "" if baseline is None or label.startswith("baseline") else f"  {gbs / baseline[0]:6.3f}x baseline"
            write(f"  {label:<34} {gbs:7.3f} GB/s  {mbs:7.2f} M batches/s{ratio}")


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    if not request.config.pluginmanager.has_plugin("idemcore-logdir-summary"):
        request.config.pluginmanager.register(_Summary(), "idemcore-logdir-summary")
    yield


def _keep(label: str, benchmark, nbytes: int, batches: int) -> None:
    best = benchmark.stats.stats.min
    _rates[label] = (nbytes / best / 1e9, batches / best / 1e6)
    benchmark.extra_info["GB/s"] = round(_rates[label][0], 3)
    benchmark.extra_info["M batches/s"] = round(_rates[label][1], 3)


def _stream(segments: list[Path]) -> int:
    """Every byte of every segment read once from its mapping: the memory-streaming baseline."""
    total = 0
    for path in segments:
        with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            words = np.frombuffer(mapped, np.uint64, count=len(mapped) // 8)
            total += int(words.sum())
            del words
    return total


def _scan(segments: list[Path], backend: str, verify_crc: bool) -> int:
    return sum(len(scan_segment(path, backend=backend, verify_crc=verify_crc)) for path in segments)


def bench_logdir_memory_baseline(benchmark, logdir):
    _, segments, batches, size = logdir
    benchmark.pedantic(_stream, args=(segments,), rounds=5, iterations=1, warmup_rounds=1)
    _keep("baseline mmap + numpy-sum", benchmark, size, batches)


@pytest.mark.parametrize("verify_crc", [False, True], ids=["crc-off", "crc-on"])
@pytest.mark.parametrize("backend", ["cython", "numba"])
def bench_logdir_header_scan(benchmark, logdir, backend, verify_crc):
    _, segments, batches, size = logdir
    load_backend(backend)
    _scan(segments[:1], backend, verify_crc)  # compile / load caches outside the timing
    count = benchmark.pedantic(_scan, args=(segments, backend, verify_crc), rounds=5, iterations=1,
                               warmup_rounds=1)
    assert count == batches
    _keep(f"header scan {backend} {'crc-on' if verify_crc else 'crc-off'}", benchmark, size, batches)


@pytest.mark.parametrize("backend", ["cython", "numba"])
def bench_logdir_audit(benchmark, logdir, backend):
    root, _, batches, size = logdir
    report = audit_log_dir(root, backend=backend)  # warm-up, and the answer checked once
    assert report.problems == () and report.finding_counts() == _dataset["findings"]
    report = benchmark.pedantic(audit_log_dir, args=(root,), kwargs={"backend": backend}, rounds=3, iterations=1)
    assert report.batches == batches
    _keep(f"audit_log_dir {backend} (crc-on)", benchmark, size, batches)
