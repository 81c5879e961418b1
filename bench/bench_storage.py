"""The broker's storage at scale, ``idemcore serve`` as a child process, side by side with tansu (a Kafka-compatible
broker in Rust, in memory) where both apply, in one run:

1. **log size** (idemcore only): one topic of 8 partitions grows through the sizes of $IDEMCORE_BENCH_STORAGE_GB
   (GiB of 1 KiB record values, default ``0.5,1,2,4``), written by one confluent-kafka idempotent producer (the
   i-th record to partition i % 8). At each size: produce MiB/s (the growth from the previous size); the server's
   RSS; a SIGKILL and the restart until it answers Metadata for the topic (the log written since the last clean
   stop is the tail a crash recovery must read); a clean stop (SIGTERM, timed until the process exits) and the
   restart until it answers Metadata; then fetch MiB/s, every record read back from the start by a read_committed
   consumer of the 8 partitions. After each restart the log end offsets must count every acknowledged record.
   The fetch is "cold" for the broker only: it was just restarted, so nothing is cached by it, but the OS page
   cache holds whatever it holds (the log was just written; dropping the cache needs root), so the disk is not
   what is measured. A size is skipped, and says so, when the server's memory growth so far projects it past
   80% of MemAvailable.
2. **produce latency**: 8 idempotent producers (:data:`wire_workloads.PRODUCER_SETTINGS`: acks=all, linger.ms 5),
   each producing 10,000 records of 100 bytes a second to its own partition of a fresh 8-partition topic for
   $IDEMCORE_BENCH_STORAGE_LOAD_S seconds (default 10) after a 1 s warm-up, without consumers and then with 2
   read_committed consumers (each in its own process) reading every partition; p50 and p99 of librdkafka's own
   latency (produce() to acknowledgement), on idemcore and tansu in turn; $IDEMCORE_BENCH_STORAGE_ROUNDS rounds
   (default 1; the table shows the medians, ``extra_info`` every round). These figures move with whatever else
   runs on the machine (the 1-minute load average before each load is shown): on 2 busy cores, a few rounds.
3. **small produce requests**: 4 connections, each an idempotent producer of its own partition sending 5,000
   Produce requests of one 100-byte record (acks=all, 5 in flight, built before the clock starts): requests per
   second of wall time, and per second of the broker's CPU time (user + system from /proc/PID/stat, all its
   threads): what one request costs the broker, whatever else the machine's cores are doing.

With $IDEMCORE_BENCH_STORAGE_PREFILL_GB (default 0) each broker of 2. and 3. first holds that many GiB in a topic of
its own (1 KiB records from one idempotent producer), so the loads run beside a log of a few GiB; the table shows
each broker's RSS after the filling and after the loads (tansu keeps its log in memory).

Nothing asserts on a timing: the figures go to each benchmark's ``extra_info`` and a table printed at the end.
The data directories live in one temporary directory under /tmp, removed after the run. The client, the brokers
and whatever else runs share the machine's cores.

Run: scripts/dev bench -k storage (a quick run: IDEMCORE_BENCH_STORAGE_GB=0.1,0.2 IDEMCORE_BENCH_STORAGE_LOAD_S=5;
more latency rounds: IDEMCORE_BENCH_STORAGE_ROUNDS=3; the loads beside a 3 GiB log:
IDEMCORE_BENCH_STORAGE_PREFILL_GB=3 scripts/dev bench -k "latency or small")
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import storage_workloads as load
import wire_workloads as work
from server_stats import Peer
from started_peers import IDEMCORE, TANSU, started_peers

from tests.peers import ServeProcess

GIB, MIB = 1 << 30, 1 << 20


def _sizes(text: str) -> list[float]:
    try:
        sizes = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"IDEMCORE_BENCH_STORAGE_GB={text!r}: expected GiB sizes such as 0.5,1,2,4") from None
    if not sizes or sizes != sorted(set(sizes)) or sizes[0] <= 0:
        raise ValueError(f"IDEMCORE_BENCH_STORAGE_GB={text!r}: expected positive sizes, increasing")
    return sizes


SIZES_GIB = _sizes(os.environ.get("IDEMCORE_BENCH_STORAGE_GB", "0.5,1,2,4"))
LOAD_S = float(os.environ.get("IDEMCORE_BENCH_STORAGE_LOAD_S", "10"))
#: Rounds of the latency loads (each round: every load on every broker in turn; the table shows the medians).
LOAD_ROUNDS = int(os.environ.get("IDEMCORE_BENCH_STORAGE_ROUNDS", "1"))
PREFILL_GIB = float(os.environ.get("IDEMCORE_BENCH_STORAGE_PREFILL_GB", "0"))
RECORD_BYTES = 1024
PARTITIONS = 8
CONSUMER_COUNTS = (0, 2)
SMALL_CONNECTIONS, SMALL_REQUESTS = 4, 5000


@dataclass
class SizeStep:
    """What was measured at one log size (bytes, seconds; None: not measured)."""

    gib: float
    records: int
    log_bytes: int
    produce_s: float | None = None
    produce_cpu_s: float | None = None
    rss_produced: int | None = None
    tail_bytes: int = 0
    crash_start_s: float | None = None
    rss_crash: int | None = None
    stop_s: float | None = None
    clean_start_s: float | None = None
    rss_clean: int | None = None
    fetch_s: float | None = None
    fetch_cpu_s: float | None = None
    rss_fetched: int | None = None
    peak_rss: int | None = None


@dataclass
class LatencyRow:
    p50: float
    p99: float
    records_per_s: float
    max_gap: float
    cpu_per_record: float | None
    consumed: list[int]
    #: The machine's 1-minute load average as the load started: what else wanted the cores.
    load_before: float


_steps: list[SizeStep] = []
_skipped: list[str] = []
_latency: dict[tuple[str, int], list[LatencyRow]] = {}  # (broker, consumers) -> one row per round
_small: dict[str, tuple[int, float, float | None]] = {}  # broker -> (requests, wall seconds, broker CPU seconds)
_prefill: dict[str, dict[str, float | None]] = {}  # broker -> {"produce_s", "rss_filled", "rss_after_loads"}


@pytest.fixture(scope="module")
def scratch(request) -> Iterator[Path]:
    """A temporary directory under /tmp for this module's data directories, removed after."""
    pytest.importorskip("confluent_kafka")
    if not request.config.pluginmanager.has_plugin("bench-storage-summary"):
        request.config.pluginmanager.register(_Summary(), "bench-storage-summary")
    root = Path(tempfile.mkdtemp(prefix="idemcore-bench-storage-", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- 1. log size


def _memory(serve: ServeProcess) -> dict[str, int]:
    assert serve.process is not None
    return Peer(serve.bootstrap, serve.process.pid).memory() or {}


def _cpu(serve: ServeProcess) -> float | None:
    assert serve.process is not None
    return Peer(serve.bootstrap, serve.process.pid).cpu_seconds()


def _restart(serve: ServeProcess, topic: str, timeout_s: float) -> float:
    """Seconds from starting the process to its first Metadata answer naming every partition of ``topic``."""
    started = time.perf_counter()
    serve.start(poll_s=0.005, timeout=timeout_s)
    load.answers_metadata(serve.port, topic, PARTITIONS, timeout_s)
    return time.perf_counter() - started


def _clean_stop(serve: ServeProcess) -> float:
    started = time.perf_counter()
    status = serve.stop()
    if status != 0:
        raise RuntimeError(f"idemcore serve exited with status {status} on SIGTERM: {serve.output()[-2000:]}")
    return time.perf_counter() - started


def _log_end(bootstrap: str, topic: str) -> int:
    """The sum of the partitions' high watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-log-end"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                   for p in range(PARTITIONS))
    finally:
        consumer.close()


def _check_records(serve: ServeProcess, topic: str, records: int, when: str) -> None:
    found = _log_end(serve.bootstrap, topic)
    if found != records:
        raise RuntimeError(f"{topic}: {found} records after {when}, {records} acknowledged")


def _log_bytes(data_dir: Path, topic: str) -> int:
    return sum(path.stat().st_size for path in data_dir.glob(f"{topic}-*/*.log"))


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _grow(serve: ServeProcess, topic: str, step: SizeStep, records_before: int, clean_bytes: int) -> None:
    """Everything measured at one size, the log grown to it first (the broker running, and left running)."""
    timeout = 60 + 60 * step.gib  # a restart reads the whole log today: ~6 s per GiB measured
    value = os.urandom(RECORD_BYTES)
    cpu = _cpu(serve)
    step.produce_s = work.produce_idempotent(serve.bootstrap, topic, itertools.repeat(value, step.records
                                             - records_before), PARTITIONS)
    after = _cpu(serve)
    step.produce_cpu_s = after - cpu if after is not None and cpu is not None else None
    step.rss_produced = _memory(serve).get("rss")
    step.log_bytes = _log_bytes(serve.data_dir, topic)
    step.tail_bytes = step.log_bytes - clean_bytes
    peak = _memory(serve).get("peak_rss", 0)

    serve.kill()
    step.crash_start_s = _restart(serve, topic, timeout)
    step.rss_crash = _memory(serve).get("rss")
    peak = max(peak, _memory(serve).get("peak_rss", 0))
    _check_records(serve, topic, step.records, "a SIGKILL and restart")

    step.stop_s = _clean_stop(serve)
    step.clean_start_s = _restart(serve, topic, timeout)
    step.rss_clean = _memory(serve).get("rss")
    _check_records(serve, topic, step.records, "a clean restart")

    cpu = _cpu(serve)
    step.fetch_s = work.consume_read_committed(serve.bootstrap, topic, step.records, PARTITIONS, timeout)
    after = _cpu(serve)
    step.fetch_cpu_s = after - cpu if after is not None and cpu is not None else None
    memory = _memory(serve)
    step.rss_fetched = memory.get("rss")
    step.peak_rss = max(peak, memory.get("peak_rss", 0)) or None


def _fits(previous: SizeStep | None, first_rss: int | None, gib: float) -> str | None:
    """Why growing the log to ``gib`` would endanger the machine (None: it would not)."""
    available = _mem_available()
    if previous is None or previous.peak_rss is None or first_rss is None or available is None:
        return None
    per_gib = max(0, previous.peak_rss - first_rss) / max(previous.gib, 1e-9)
    more = per_gib * (gib - previous.gib)
    if more > 0.8 * available:
        return (f"{gib} GiB skipped: the server grew {per_gib / MIB:,.0f} MiB per GiB of log, so ~{more / GIB:.1f} "
                f"GiB more; {available / GIB:.1f} GiB available")
    return None


def bench_storage_log_size(benchmark, scratch):
    need = max(SIZES_GIB) * GIB * 1.1 + GIB
    if shutil.disk_usage(scratch).free < need:
        pytest.skip(f"{scratch}: {shutil.disk_usage(scratch).free / GIB:.1f} GiB free, {need / GIB:.1f} needed")
    (scratch / "log").mkdir()
    serve = ServeProcess(scratch / "log" / "data")
    try:
        serve.start()
        topic = work.fresh_topic(serve.bootstrap, "storage", PARTITIONS)
        empty = SizeStep(0, 0, 0)  # the fixed cost of a start: an empty topic
        empty.rss_produced = _memory(serve).get("rss")
        empty.stop_s = _clean_stop(serve)
        empty.clean_start_s = _restart(serve, topic, 60)
        empty.rss_clean = empty.peak_rss = _memory(serve).get("rss")
        _steps.append(empty)

        def run() -> None:
            records, clean_bytes, previous = 0, 0, None
            for gib in SIZES_GIB:
                why = _fits(previous, empty.rss_clean, gib)
                if why:
                    _skipped.append(why)
                    print(f"\n{why}")
                    break
                step = SizeStep(gib, int(gib * GIB) // RECORD_BYTES, 0)
                _grow(serve, topic, step, records, clean_bytes)
                _steps.append(step)
                records, clean_bytes, previous = step.records, step.log_bytes, step
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        if serve.process is not None:
            serve.process.send_signal(signal.SIGKILL)  # no clean close of a large log to wait for
            serve.process.wait(30)
            serve.process = None
    for step in _steps:
        benchmark.extra_info[f"{step.gib:g} GiB"] = {
            name: round(value, 3) if isinstance(value, float) else value
            for name, value in vars(step).items() if value is not None}


# ---------------------------------------------------------------- 2. and 3.: beside tansu


@pytest.fixture(scope="module")
def peers(scratch) -> Iterator[dict[str, Peer]]:
    """name -> idemcore serve and tansu (when installed), started for this module and warmed up."""
    (scratch / "peers").mkdir()
    with started_peers(scratch / "peers" / "data", without_tansu="idemcore only, no ratios") as found:
        for peer in found.values():  # connections, the first topic's creation, producer ids
            topic = work.fresh_topic(peer.bootstrap, "warm", PARTITIONS)
            work.produce_idempotent(peer.bootstrap, topic, work.values(20_000), PARTITIONS)
        if PREFILL_GIB > 0:
            _fill(found)
        yield found
        for name, peer in found.items():
            if name in _prefill:
                _prefill[name]["rss_after_loads"] = (peer.memory() or {}).get("rss")


def _fill(peers: dict[str, Peer]) -> None:
    """PREFILL_GIB of 1 KiB records into a topic of its own on each broker, before the loads."""
    value = os.urandom(RECORD_BYTES)
    records = int(PREFILL_GIB * GIB) // RECORD_BYTES
    for name, peer in peers.items():
        topic = work.fresh_topic(peer.bootstrap, "prefill", PARTITIONS)
        seconds = work.produce_idempotent(peer.bootstrap, topic, itertools.repeat(value, records), PARTITIONS)
        _prefill[name] = {"produce_s": seconds, "rss_filled": (peer.memory() or {}).get("rss")}


def _cpu_delta(peer: Peer, before: float | None) -> float | None:
    after = peer.cpu_seconds()
    return after - before if after is not None and before is not None else None


def bench_storage_produce_latency(benchmark, peers):
    def run() -> None:
        for consumers, (name, peer) in itertools.product(CONSUMER_COUNTS, peers.items()):
            topic = work.fresh_topic(peer.bootstrap, f"latency-{consumers}", PARTITIONS)
            load_before = os.getloadavg()[0]
            cpu = peer.cpu_seconds()
            result = load.latency_load(peer.bootstrap, topic, LOAD_S, consumers)
            spent = _cpu_delta(peer, cpu)
            _latency.setdefault((name, consumers), []).append(LatencyRow(
                result.percentile(50), result.percentile(99), result.records / result.seconds, result.max_gap,
                spent / result.records if spent is not None and result.records else None, result.consumed,
                load_before))
    benchmark.pedantic(run, rounds=LOAD_ROUNDS, iterations=1)
    for (name, consumers), rows in _latency.items():
        benchmark.extra_info[f"{name} {consumers} consumers"] = [{
            "p50 ms": round(row.p50 * 1e3, 2), "p99 ms": round(row.p99 * 1e3, 2),
            "records/s": round(row.records_per_s), "pacing max gap ms": round(row.max_gap * 1e3, 1),
            "server CPU us/record": None if row.cpu_per_record is None else round(row.cpu_per_record * 1e6, 2),
            "consumed": row.consumed, "load average before": row.load_before} for row in rows]


def bench_storage_small_produce(benchmark, peers):
    def run() -> None:
        for name, peer in peers.items():
            topic = work.fresh_topic(peer.bootstrap, "small", SMALL_CONNECTIONS)
            cpu = peer.cpu_seconds()
            seconds = load.small_produce(peer.bootstrap, topic, SMALL_CONNECTIONS, SMALL_REQUESTS)
            _small[name] = (SMALL_CONNECTIONS * SMALL_REQUESTS, seconds, _cpu_delta(peer, cpu))
    benchmark.pedantic(run, rounds=1, iterations=1)
    for name, (requests, seconds, cpu) in _small.items():
        benchmark.extra_info[f"{name} requests/s"] = round(requests / seconds)
        if cpu:
            benchmark.extra_info[f"{name} requests per CPU second"] = round(requests / cpu)


# ---------------------------------------------------------------- the table


def _f(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value / scale:,.{digits}f}"


def _median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


class _Summary:
    """Prints the tables at the end of the run (output during a benchmark is captured)."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        write = terminalreporter.write_line
        if _steps or _latency or _small:
            write("")
            write(f"Storage benchmarks, confluent-kafka {work.client_version()}; {os.cpu_count()} cores shared by the "
                  f"clients, the brokers and anything else running; MiB/GiB = 2^20/2^30 bytes")
        if _steps:
            _write_sizes(write)
        if _latency:
            _write_latency(write)
        if _small:
            _write_small(write)
        if _prefill:
            _write_prefill(write)


def _write_sizes(write: Any) -> None:
    write(f"idemcore serve, one topic of {PARTITIONS} partitions grown by a confluent-kafka idempotent producer, "
          f"{RECORD_BYTES}-byte records; seconds, MiB:")
    write(f"  {'log GiB':>8}{'produce MiB/s':>14}{'CPU s/GiB':>10}{'RSS':>8}{'kill+start s':>13}{'(tail MiB)':>11}"
          f"{'RSS':>8}{'stop s':>8}{'start s':>8}{'RSS':>8}{'fetch MiB/s':>12}{'CPU s/GiB':>10}{'RSS':>8}"
          f"{'peak RSS':>9}")
    previous = 0
    for step in _steps:
        grown, size = (step.log_bytes - previous) / GIB, step.log_bytes / GIB
        previous = step.log_bytes
        cells = [
            f"{size:>8.3f}",
            f"{_f(_ratio(grown * GIB / MIB, step.produce_s), digits=1):>14}",
            f"{_f(_ratio(step.produce_cpu_s, grown), digits=1):>10}",
            f"{_f(step.rss_produced, MIB, 0):>8}",
            f"{_f(step.crash_start_s):>13}",
            f"{_f(step.tail_bytes, MIB, 0) if step.crash_start_s else '-':>11}",
            f"{_f(step.rss_crash, MIB, 0):>8}",
            f"{_f(step.stop_s):>8}",
            f"{_f(step.clean_start_s):>8}",
            f"{_f(step.rss_clean, MIB, 0):>8}",
            f"{_f(_ratio(size * GIB / MIB, step.fetch_s), digits=1):>12}",
            f"{_f(_ratio(step.fetch_cpu_s, size), digits=1):>10}",
            f"{_f(step.rss_fetched, MIB, 0):>8}",
            f"{_f(step.peak_rss, MIB, 0):>9}",
        ]
        write("  " + "".join(cells))
    write("  RSS: after producing; after the SIGKILL and restart (tail: log written since the last clean stop); "
          "after the clean stop and restart; after the fetch. start s: until Metadata is answered. The fetch reads "
          "every record from the start after the clean restart: nothing cached by the broker, the OS page cache "
          "not dropped (the log was just written).")
    grown = [step for step in _steps if step.gib]
    if len(grown) >= 2:
        first, last = grown[0], grown[-1]
        per_gib = (last.log_bytes - first.log_bytes) / GIB
        for label, a, b in (("after producing", first.rss_produced, last.rss_produced),
                            ("after a clean restart", first.rss_clean, last.rss_clean)):
            if a is not None and b is not None:
                write(f"  RSS growth {label}: {(b - a) / MIB / per_gib:,.0f} MiB per GiB of log "
                      f"({first.log_bytes / GIB:.2f} -> {last.log_bytes / GIB:.2f} GiB)")
    for why in _skipped:
        write(f"  {why}")


def _write_latency(write: Any) -> None:
    write(f"Produce latency: 8 idempotent producers x {load.RATE:,} records/s of {work.RECORD_BYTES} bytes, each to "
          f"its own partition (acks=all, linger.ms 5), {LOAD_S:g} s after a 1 s warm-up; librdkafka's latency; "
          f"the median of {LOAD_ROUNDS} round(s):")
    names = [name for name in (IDEMCORE, TANSU) if any(key[0] == name for key in _latency)]
    write(f"  {'':<40}" + "".join(f"{name:>12}" for name in names) + f"{'idemcore/tansu':>16}")
    for consumers in CONSUMER_COUNTS:
        rows = {name: _latency[(name, consumers)] for name in names if (name, consumers) in _latency}
        if not rows:
            continue
        for label, get, scale, digits in (("p50 ms", "p50", 1e-3, 1), ("p99 ms", "p99", 1e-3, 1),
                                          ("records/s achieved", "records_per_s", 1, 0),
                                          ("server CPU us/record", "cpu_per_record", 1e-6, 2),
                                          ("client's longest pause ms", "max_gap", 1e-3, 1),
                                          ("load average before", "load_before", 1, 2)):
            values = {name: _median([getattr(row, get) for row in runs]) for name, runs in rows.items()}
            ratio = (f"{values[IDEMCORE] / values[TANSU]:.1f}" if label[:3] in ("p50", "p99") and IDEMCORE in values
                     and TANSU in values and values[TANSU] else "")
            write(f"  {f'{consumers} consumers, {label}':<40}"
                  + "".join(f"{_f(values.get(name), scale, digits):>12}" for name in names) + f"{ratio:>16}")


def _write_small(write: Any) -> None:
    write(f"Small produce requests: {SMALL_CONNECTIONS} connections x {SMALL_REQUESTS:,} requests of one "
          f"{work.RECORD_BYTES}-byte record (idempotent, acks=all, {load.IN_FLIGHT} in flight each):")
    for name, (requests, seconds, cpu) in _small.items():
        write(f"  {name:<10} {requests / seconds:>9,.0f} requests/s of wall time, "
              f"{_f(requests / cpu if cpu else None, digits=0):>9} per second of the broker's CPU time "
              f"({_f(cpu)} s)")


def _write_prefill(write: Any) -> None:
    write(f"The loads above ran beside {PREFILL_GIB:g} GiB of {RECORD_BYTES}-byte records in another topic of each "
          f"broker; RSS MiB:")
    for name, row in _prefill.items():
        write(f"  {name:<10} filled at {_f(_ratio(PREFILL_GIB * GIB / MIB, row.get('produce_s')), digits=1)} MiB/s, "
              f"RSS {_f(row.get('rss_filled'), MIB, 0)} after filling, {_f(row.get('rss_after_loads'), MIB, 0)} "
              f"after the loads")
