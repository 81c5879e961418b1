"""Over the wire, in one run and with the same client: confluent-kafka (librdkafka) against a child
``idemcore serve`` (page cache, its default), against tansu (a Kafka-compatible broker in Rust, in memory) and,
for information, against ``idemcore serve --fsync``. Each broker is started once for the module, on a free port.

1. idempotent producer: 200,000 records of 100 bytes into a fresh topic of 1 partition, records/s;
2. transactional producer: 500 transactions of 10 records, each committed before the next begins,
   transactions/s and records/s;
3. read_committed consumer: 30,000 records already produced by the transactional workload (10 to a
   transaction, so a COMMIT marker after every 10), read from the beginning, records/s.

The producer settings are :data:`wire_workloads.PRODUCER_SETTINGS` for every broker (acks=all,
enable.idempotence, linger.ms 5, batch.size 1,000,000, no compression, 5 in flight). The clock runs from the
first produce to flush (or the last commit) returning, and from assign to the last record received; the
topic, the connection and the producer id are set up before it starts.

Each round runs every broker's workload back to back, so a noisy neighbour slows them alike; the best round
of each is reported (``extra_info``, and a table with the ratios idemcore/tansu at the end of the run), with
the broker process's CPU time per record (the mean of the rounds, from /proc, on Linux): the client runs in
this process and the brokers in theirs, so on a small machine they share its cores, and the CPU time says
what the broker itself costs where the wall clock also counts the client and the neighbours.

Run: scripts/dev bench -k wire
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import wire_workloads as work
from server_stats import Peer
from started_peers import IDEMCORE, TANSU, started_peers

RECORDS = 200_000
TRANSACTIONS = 500
PER_TRANSACTION = 10
CONSUME_RECORDS = 30_000
VALUES = work.values(RECORDS)

FSYNC = "idemcore --fsync"


@dataclass
class Result:
    """A workload on one broker: its best round's seconds, the mean of its rounds' broker CPU."""

    seconds: float
    records: int
    #: The broker process's CPU seconds (user + system) per round, the mean of the rounds (the clock ticks at
    #: 10 ms: a sum over rounds reads finer than any one round); None without /proc.
    server_cpu: float | None


#: (workload, broker name) -> its best round
_best: dict[tuple[str, str], Result] = {}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory, request) -> Iterator[dict[str, Peer]]:
    """name -> every broker, started for this module (and warmed up)."""
    pytest.importorskip("confluent_kafka")
    request.config.pluginmanager.register(_Summary(), "bench-wire-summary")
    root = tmp_path_factory.mktemp("wire")
    with started_peers(root / "data", without_tansu="idemcore only, no ratios",
                       more={FSYNC: (root / "data-fsync", ("--fsync",))}) as peers:
        for peer in peers.values():  # warm up: connections, the first topics, both coordinators' topics
            work.produce_idempotent(peer.bootstrap, work.fresh_topic(peer.bootstrap, "warm"), VALUES[:20_000])
            topic = work.fresh_topic(peer.bootstrap, "warm-txn")
            work.produce_transactional(peer.bootstrap, topic, VALUES[:500], PER_TRANSACTION)
            work.consume_read_committed(peer.bootstrap, topic, 500)
        yield peers


def _rounds(benchmark, brokers: dict[str, Peer], names: list[str], prepare: Callable[[str], str],
            run: Callable[[str, str], float], rounds: int, workload: str, records: int) -> None:
    """``rounds`` rounds, each running ``run(bootstrap, prepare(bootstrap))`` on every broker of ``names`` in turn
    (``run`` returns the seconds it timed); keep the best of each, and the broker's mean CPU seconds during
    ``run``."""
    peers = {name: brokers[name] for name in names if name in brokers}
    seconds: dict[str, list[float]] = {name: [] for name in peers}
    cpu: dict[str, list[float]] = {name: [] for name in peers}

    def one_round() -> None:
        for name, peer in peers.items():
            topic = prepare(peer.bootstrap)
            before = peer.cpu_seconds()
            seconds[name].append(run(peer.bootstrap, topic))
            after = peer.cpu_seconds()
            if before is not None and after is not None:
                cpu[name].append(after - before)
    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    for name, times in seconds.items():
        result = _best[(workload, name)] = Result(min(times), records, sum(cpu[name]) / len(cpu[name]) if cpu[name]
                                                   else None)
        benchmark.extra_info[f"{name} records/s"] = round(records / result.seconds)
        benchmark.extra_info[f"{name} rounds s"] = [round(t, 3) for t in times]
        if result.server_cpu is not None:
            benchmark.extra_info[f"{name} server CPU us/record"] = round(result.server_cpu / records * 1e6, 2)
    if IDEMCORE in seconds and TANSU in seconds:
        benchmark.extra_info["idemcore/tansu"] = round(_best[(workload, TANSU)].seconds
                                                       / _best[(workload, IDEMCORE)].seconds, 3)


def bench_wire_produce_idempotent(benchmark, brokers):
    _rounds(benchmark, brokers, [IDEMCORE, TANSU, FSYNC], lambda bootstrap: work.fresh_topic(bootstrap, "idempotent"),
            lambda bootstrap, topic: work.produce_idempotent(bootstrap, topic, VALUES), 5, "idempotent produce",
            RECORDS)


def bench_wire_produce_transactional(benchmark, brokers):
    values = VALUES[:TRANSACTIONS * PER_TRANSACTION]
    _rounds(benchmark, brokers, [IDEMCORE, TANSU], lambda bootstrap: work.fresh_topic(bootstrap, "transactional"),
            lambda bootstrap, topic: work.produce_transactional(bootstrap, topic, values, PER_TRANSACTION), 5,
            "transactional produce", len(values))


@pytest.fixture(scope="module")
def committed(brokers) -> dict[str, str]:
    """bootstrap -> a topic holding CONSUME_RECORDS records in committed transactions of 10."""
    topics = {}
    for name in (IDEMCORE, TANSU):
        if name in brokers:
            bootstrap = brokers[name].bootstrap
            topics[bootstrap] = work.fresh_topic(bootstrap, "committed")
            work.produce_transactional(bootstrap, topics[bootstrap], VALUES[:CONSUME_RECORDS], PER_TRANSACTION)
    return topics


def bench_wire_consume_read_committed(benchmark, brokers, committed):
    _rounds(benchmark, brokers, [IDEMCORE, TANSU], committed.__getitem__,
            lambda bootstrap, topic: work.consume_read_committed(bootstrap, topic, CONSUME_RECORDS), 7,
            "read_committed consume", CONSUME_RECORDS)


class _Summary:
    """Prints the table at the end of the run (a plugin registered by the ``brokers`` fixture: bench/conftest.py's
    summary knows no ratios between brokers)."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not _best:
            return
        write = terminalreporter.write_line
        write("")
        write(f"Over the wire, confluent-kafka {work.client_version()}; records/s of the best round, the broker's CPU "
              f"per record the mean of the rounds; the client and the brokers share {os.cpu_count()} cores:")
        write(f"  {'':<32}{'idemcore':>12}{'tansu':>12}{'idemcore/tansu':>16}{'idemcore --fsync':>18}")
        for workload in ("idempotent produce", "transactional produce", "read_committed consume"):
            results = {name: result for (w, name), result in _best.items() if w == workload}
            if not results:
                continue
            rates = {name: result.records / result.seconds for name, result in results.items()}
            both = IDEMCORE in rates and TANSU in rates
            rows = [(f"{workload} records/s", {name: f"{rate:,.0f}" for name, rate in rates.items()},
                     f"{rates[IDEMCORE] / rates[TANSU]:.2f}" if both else "-")]
            if workload == "transactional produce":
                rows.append(("  transactions/s", {name: f"{rate / PER_TRANSACTION:,.0f}"
                                                  for name, rate in rates.items()}, rows[0][2]))
            cpu = {name: result.server_cpu / result.records * 1e6 for name, result in results.items()
                   if result.server_cpu is not None}
            if cpu:
                rows.append(("  server CPU us/record", {name: f"{us:.2f}" for name, us in cpu.items()},
                             f"{cpu[IDEMCORE] / cpu[TANSU]:.1f}x CPU" if IDEMCORE in cpu and TANSU in cpu and cpu[TANSU]
                             else "-"))
            for label, cells, ratio in rows:
                write(f"  {label:<32}{cells.get(IDEMCORE, '-'):>12}{cells.get(TANSU, '-'):>12}{ratio:>16}"
                      f"{cells.get(FSYNC, '-'):>18}")
        write(f"  producer: {', '.join(f'{k}={v}' for k, v in work.PRODUCER_SETTINGS.items())}; "
              f"{work.RECORD_BYTES}-byte records")
