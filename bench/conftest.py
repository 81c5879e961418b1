"""Benchmark fixtures: the streams are generated once per run; a summary prints M batches/s and ratios."""

from __future__ import annotations

import pytest

from idemcore.kernels.columns import BatchColumns
from idemcore.synth.streams import synthetic_stream

BATCHES = 20_000_000
_results: dict[str, tuple[float, int]] = {}


@pytest.fixture(scope="session")
def streams() -> dict[str, BatchColumns]:
    """(a) one partition and (b) 64 partitions: 20M batches, 10,000 random 64-bit producer ids, ~1% retried."""
    return {
        "a-1-partition": BatchColumns.coerce(synthetic_stream(BATCHES, n_producers=10_000, n_partitions=1, seed=1)),
        "b-64-partitions": BatchColumns.coerce(synthetic_stream(BATCHES, n_producers=10_000, n_partitions=64,
                                                                 seed=2)),
    }


@pytest.fixture
def record():
    """record(label, benchmark, batches): keep the best time of a benchmark for the summary."""
    def _record(label: str, benchmark, batches: int) -> None:
        _results[label] = (benchmark.stats.stats.min, batches)
    return _record


@pytest.fixture
def record_seconds():
    """record_seconds(label, seconds, items): keep a time measured inside a benchmark for the summary."""
    def _record(label: str, seconds: float, items: int) -> None:
        _results[label] = (seconds, items)
    return _record


def pytest_terminal_summary(terminalreporter):
    if not _results:
        return
    write = terminalreporter.write_line
    write("")
    write("idemcore throughput (best round; M items/s: batches for validate, records for producers; ratios below)")
    # (a CPU time may be 0: a presized call has no page to fault, so no system time)
    rates = {label: batches / seconds / 1e6 if seconds > 0 else float("inf")
             for label, (seconds, batches) in _results.items()}
    baselines = {label.split(" ")[-1]: rate for label, rate in rates.items() if label.startswith("baseline")}
    for label, rate in sorted(rates.items()):
        if label.startswith("produce requests") or "-user " in label or "-system " in label:
            continue  # (printed beside their pairs below)
        stream = label.split(" ")[-1]
        ratio = ""
        if not label.startswith("baseline") and stream in baselines:
            ratio = f"  {rate / baselines[stream] * 100:6.2f}% of baseline speed"
        write(f"  {label:<36} {rate:9.3f} M/s{ratio}")
    _public_call_summary(write, rates)
    _spark_summary(write, rates)
    _broker_summary(write)
    reference = rates.get("records confluent-kafka mock")
    if reference:
        for label in ("records idemcore send", "records idemcore send_batch"):
            if label in rates:
                write(f"  {label} / confluent-kafka: {rates[label] / reference:.2f}x")


def _public_call_summary(write, rates: dict[str, float]) -> None:
    """bench_validate's public call beside the presized kernel, measured alternating in one test."""
    pairs = [(label.removeprefix("public-call "), rate, rates.get(label.replace("public-call", "public-call-presized")))
             for label, rate in sorted(rates.items()) if label.startswith("public-call ")]
    if pairs:
        write("validate(columns) from fresh state beside the presized kernel (t: threads, alternating rounds; best "
              "round of each by wall time, and by user CPU time; system CPU time of the best round per batch):")
    for shape, public, presized in pairs:
        if presized:
            write(f"  {shape:<30} {public:7.2f} vs {presized:7.2f} M/s: the kernel is {presized / public:.2f}x "
                  "the public call (aim <= 1.25)")
            user, user_presized = (rates.get(f"{label}-user {shape}") for label in ("public-call",
                                                                                 "public-call-presized"))
            system, system_presized = (rates.get(f"{label}-system {shape}") for label in ("public-call",
                                                                                       "public-call-presized"))
            if user and user_presized and system and system_presized:
                write(f"  {'':<30} user CPU {1e3 / user:.1f} vs {1e3 / user_presized:.1f} ns per batch "
                      f"({user_presized / user:.2f}x); system CPU {1e3 / system:.1f} vs {1e3 / system_presized:.1f}")


def _spark_summary(write, rates: dict[str, float]) -> None:
    identity, validated = rates.get("spark (a) identity mapInArrow"), rates.get("spark (a) validate")
    path_mode = rates.get("spark (b) path-mode audit")
    if not (identity or validated or path_mode):
        return
    write("Spark, local[2] on 2 cores (M batches/s, best round):")
    if identity and validated:
        write(f"  (a) validate(df) {validated:.3f} vs identity mapInArrow {identity:.3f}: "
              f"ratio {validated / identity:.2f} (aim >= 0.8)")
        clustered = rates.get("spark (a) clustered identity")
        if clustered:
            write(f"      identity after validate's shuffle + sort: {clustered:.3f}, ratio {clustered / identity:.2f}; "
                  f"validate / that: {validated / clustered:.2f}")
    if path_mode:
        write(f"  (b) path-mode audit {path_mode:.2f} in all = {path_mode / 2:.2f} per core (aim >= 20 per core)")
    for label in ("spark (c) in-process kernel", "spark (c) in-process read+replay"):
        if label in rates:
            write(f"  {label.removeprefix('spark '):<34} {rates[label]:.2f} on one core")


def _broker_summary(write) -> None:
    times = {label.removeprefix("produce requests "): seconds for label, (seconds, _) in _results.items()
             if label.startswith("produce requests ")}
    if not times:
        return
    write("Broker produce path (us per request, best round):")
    for shape in sorted({label.split()[-1] for label in times}):
        now, before = times.get(f"now {shape}"), times.get(f"before {shape}")
        line = f"  {shape}: now {now * 1e6:.1f}" if now else f"  {shape}:"
        if before:
            line += f", before {before * 1e6:.1f}"
            if now:
                line += f", now/before {now / before:.2f}"
        write(line)
