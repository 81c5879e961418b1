"""The over-the-wire audit beside a plain consumer, side by side in one run, reading the same topic from the same
`idemcore serve` (a child process on loopback):

- ``audit kafka://``: :func:`idemcore.audit.wire.audit_cluster` (Metadata, ListOffsets, Fetch read_uncommitted of
  each partition from its leader, the header scan and the replay; records never decoded);
- confluent-kafka's consumer (librdkafka, C): every partition assigned from the start, read_uncommitted, each
  message polled until every partition reports its end (``enable.partition.eof``).

The topic: a Kafka log directory written by ``idemcore generate --format kafka`` (1 topic x 8 partitions, 500
producers, no anomaly planted; $IDEMCORE_BENCH_WIRE_BATCHES produce attempts, default 300,000), served by
`idemcore serve --topics topic-000:8 --override log.retention.ms=-1`. Figures: batches/s and MB/s of segment
bytes, best round.

Run: .venv/bin/python -m pytest bench/bench_audit_wire.py --benchmark-only -o python_files='bench_*.py' \
    -o python_functions='bench_*' -q -p no:cacheprovider
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from idemcore.audit.wire import audit_cluster
from idemcore.synth.dataset import generate
from idemcore.synth.streams import parse_mix
from tests.peers import ServeProcess

BATCHES = int(os.environ.get("IDEMCORE_BENCH_WIRE_BATCHES", 300_000))
PARTITIONS = 8
TOPIC = "topic-000"
_rates: dict[str, tuple[float, float]] = {}  # label -> (M batches/s, MB/s), best round
_served: dict[str, Any] = {}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[str]:
    """The bootstrap address of `idemcore serve` over the generated topic (generated and started once)."""
    out = tmp_path_factory.mktemp("bench-wire") / "ds"
    truth = generate(out, topics=1, partitions=PARTITIONS, producers=500, batches=BATCHES, seed=1, format="kafka",
                     anomalies=parse_mix("none"), progress=False)
    size = sum(path.stat().st_size for path in (out / "logs").glob("*/*.log"))
    _served.update(batches=truth["batches"], bytes=size)
    # (retention off: the generated batches are older than a week, and housekeeping would delete them)
    with ServeProcess(out / "logs", "--topics", f"{TOPIC}:{PARTITIONS}", "--override", "log.retention.ms=-1") \
            as serve:
        yield serve.bootstrap


class _Summary:
    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not _rates:
            return
        write = terminalreporter.write_line
        write("")
        write(f"over the wire from `idemcore serve` on loopback ({_served['batches']:,} batches, "
              f"{_served['bytes'] / 1e6:,.1f} MB of segments, {PARTITIONS} partitions), best round:")
        consumer = _rates.get("confluent-kafka consumer")
        for label, (batches, megabytes) in _rates.items():
            ratio = "" if consumer is None or label == "confluent-kafka consumer" else \
                f"  {batches / consumer[0]:6.2f}x the consumer"
            write(f"  {label:<26} {batches:7.3f} M batches/s  {megabytes:8.1f} MB/s{ratio}")


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    if not request.config.pluginmanager.has_plugin("idemcore-wire-audit-summary"):
        request.config.pluginmanager.register(_Summary(), "idemcore-wire-audit-summary")
    yield


def _keep(label: str, benchmark) -> None:
    best = benchmark.stats.stats.min
    _rates[label] = (_served["batches"] / best / 1e6, _served["bytes"] / best / 1e6)
    benchmark.extra_info["M batches/s"] = round(_rates[label][0], 3)
    benchmark.extra_info["MB/s"] = round(_rates[label][1], 1)


def bench_audit_over_the_wire(benchmark, served):
    def run() -> None:
        report = audit_cluster("kafka://" + served, topics=[TOPIC], confirm_hanging=False)
        assert report.batches == _served["batches"]
        assert report.finding_counts() == {}

    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    _keep("audit kafka://", benchmark)


def bench_confluent_kafka_consumer(benchmark, served):
    def run() -> None:
        consumer = Consumer({"bootstrap.servers": served, "group.id": f"bench-{time.monotonic_ns()}",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "isolation.level": "read_uncommitted", "log_level": 0})
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        ended: set[int] = set()
        messages = 0
        deadline = time.monotonic() + 600
        try:
            while len(ended) < PARTITIONS and time.monotonic() < deadline:  # bounded
                for message in consumer.consume(10_000, 0.5):
                    error = message.error()
                    if error is None:
                        messages += 1
                    elif error.code() == KafkaError._PARTITION_EOF:
                        ended.add(message.partition())
                    else:
                        raise RuntimeError(str(error))
        finally:
            consumer.close()
        assert len(ended) == PARTITIONS and messages > 0

    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    _keep("confluent-kafka consumer", benchmark)

