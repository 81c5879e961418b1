"""Replication on a local cluster (:class:`idemcore.cluster.LocalCluster`: a ZooKeeper and 3 ``idemcore serve``
processes on loopback, with the cluster's recommended settings), measured with confluent-kafka, in one run:

1. **acks=all produce, replication factor 1 and 3**, side by side on the same cluster (two fresh one-partition
   topics a round; the RF 1 topic with ``min.insync.replicas=1``, the RF 3 one with the cluster's 2):
   a. *throughput*: one idempotent producer (:data:`wire_workloads.PRODUCER_SETTINGS`: acks=all, linger.ms 5,
      5 in flight) sends $IDEMCORE_BENCH_REPL_RECORDS records (default 500,000) of 100 bytes as fast as it can,
      its queue bounded at :data:`QUEUE_RECORDS` records: records/s (from the second record to the last
      acknowledgement) and p50/p99 of librdkafka's per-record latency (produce() to acknowledgement; under
      saturation this is mostly the wait in the producer's own queue: Little's law, queue / throughput);
   b. *latency at a fixed rate*: one idempotent producer at $IDEMCORE_BENCH_REPL_RATE records/s (default 2,000)
      for $IDEMCORE_BENCH_REPL_LOAD_S seconds (default 5) after a 1 s warm-up: p50/p99 of the same latency,
      now what one acknowledgement costs (:func:`storage_workloads.latency_load`, librdkafka's settings as given).
   $IDEMCORE_BENCH_REPL_LINGER_MS and $IDEMCORE_BENCH_REPL_BATCH_BYTES set the throughput producer's linger.ms and
   batch.size.
   $IDEMCORE_BENCH_REPL_ROUNDS rounds (default 3), RF 1 then RF 3 in each round; the table shows the medians and
   the RF 3 / RF 1 ratios (the aim: RF 3 at 0.5x or more of RF 1's records/s on a 2-core machine).
2. **failover**: one idempotent producer sends a record every millisecond to a fresh RF 3 topic; the partition's
   leader is SIGKILLed; the time from the kill to the first delivery report (acknowledged) of a record produced
   after the kill, i.e. on the new leader. ZooKeeper notices the death when the broker's session expires
   (``zookeeper.session.timeout.ms``, $IDEMCORE_BENCH_REPL_SESSION_MS, default 6000: the cluster's own), then the
   controller elects a new leader and librdkafka finds it. Each round is split by ZooKeeper watches into
   *detect* (the kill to ``/brokers/ids/N`` gone), *elect* (to the partition's state znode changed) and *client*
   (to the acknowledgement). ZooKeeper expires sessions in buckets of its tickTime, so a session ends between the
   timeout and the timeout + one tick after the last heartbeat: the cluster's ZooKeeper runs with ZooKeeper's
   default tickTime, 3000 ms; $IDEMCORE_BENCH_REPL_TICK_MS starts one with that tickTime instead.
   Between rounds the killed broker is started again and the round waits for the ISR to be full; the kill of a
   broker that was also the controller is marked (a controller election comes first). $IDEMCORE_BENCH_REPL_FAILOVERS
   rounds (default 10): median, min, max. Every record must be acknowledged (no delivery error), and the topic's
   high watermark must count them all at the end.

Nothing asserts on a timing: the figures go to each benchmark's ``extra_info`` and a table printed at the end.
The clients and the 3 brokers (and ZooKeeper, and whatever else runs) share the machine's cores.

Run: scripts/dev bench -k replication (a quick run: IDEMCORE_BENCH_REPL_RECORDS=20000 IDEMCORE_BENCH_REPL_ROUNDS=1
IDEMCORE_BENCH_REPL_FAILOVERS=3). To profile one broker, IDEMCORE_BENCH_REPL_PROFILE=DIR runs broker 0 under
cProfile, its stats written to DIR/broker-0.prof when the cluster stops (the benchmarks' figures are then not
comparable: use it for where the time goes, with ``python -m pstats``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import storage_workloads as load
import wire_workloads as work
from server_stats import Peer

from idemcore.cluster import LocalCluster
from idemcore.zookeeper_server import ZooKeeperServer

BROKERS = 3
RECORDS = int(os.environ.get("IDEMCORE_BENCH_REPL_RECORDS", "500000"))
ROUNDS = int(os.environ.get("IDEMCORE_BENCH_REPL_ROUNDS", "3"))
RATE = int(os.environ.get("IDEMCORE_BENCH_REPL_RATE", "2000"))
LOAD_S = float(os.environ.get("IDEMCORE_BENCH_REPL_LOAD_S", "5"))
FAILOVERS = int(os.environ.get("IDEMCORE_BENCH_REPL_FAILOVERS", "10"))
SESSION_TIMEOUT_MS = int(os.environ.get("IDEMCORE_BENCH_REPL_SESSION_MS", "6000"))
#: ZooKeeper's tickTime (ms) when set: the bench starts its own ZooKeeper with it (unset: the cluster's, 3000 ms).
TICK_MS = int(os.environ["IDEMCORE_BENCH_REPL_TICK_MS"]) if os.environ.get("IDEMCORE_BENCH_REPL_TICK_MS") else None
PROFILE_DIR = os.environ.get("IDEMCORE_BENCH_REPL_PROFILE")
#: The produce benchmarks' linger.ms and batch.size (default: PRODUCER_SETTINGS', librdkafka's 5 ms and 1,000,000 B;
#: 16384 B, the Java client's, makes more and smaller requests: more of the broker's per-request cost).
CLIENT = {**({"linger.ms": int(os.environ["IDEMCORE_BENCH_REPL_LINGER_MS"])}
             if os.environ.get("IDEMCORE_BENCH_REPL_LINGER_MS") else {}),
          **({"batch.size": int(os.environ["IDEMCORE_BENCH_REPL_BATCH_BYTES"])}
             if os.environ.get("IDEMCORE_BENCH_REPL_BATCH_BYTES") else {})}
#: The throughput producer's queue (queue.buffering.max.messages; librdkafka's default is 100,000, which would hold
#: a whole run and make every latency the run's length).
QUEUE_RECORDS = 10_000
#: A record every this many seconds while a failover is measured.
FAILOVER_PACE_S = 0.001
#: How long a failover, or the ISR's return to full after a restart, may take before the round fails.
FAILOVER_TIMEOUT_S = 120.0
FACTORS = (1, 3)


@dataclass
class ProduceRow:
    records_per_s: float
    #: Broker CPU seconds (user + system) during the throughput run: the partition's leader's, and all brokers'.
    leader_cpu_s: float
    cluster_cpu_s: float
    p50: float
    p99: float
    rate_p50: float
    rate_p99: float
    load_before: float


@dataclass
class FailoverRow:
    seconds: float
    #: The kill to the broker's registration gone, and to the partition's state changed (None: no watch fired).
    detect_s: float | None
    elect_s: float | None
    killed: int
    was_controller: bool
    isr_full_s: float


_produce: dict[int, list[ProduceRow]] = {}  # replication factor -> one row per round
_failovers: list[FailoverRow] = []


class _ProfiledCluster(LocalCluster):
    """Broker 0 under cProfile (its stats written to PROFILE_DIR/broker-0.prof when it exits cleanly)."""

    def _command(self, b: Any) -> list[str]:
        command = super()._command(b)
        if b.broker_id == 0 and PROFILE_DIR:
            assert command[1:3] == ["-m", "idemcore.cli"]
            out = Path(PROFILE_DIR).absolute() / "broker-0.prof"
            command[1:3] = ["-m", "cProfile", "-o", str(out), "-m", "idemcore.cli"]
        return command


@pytest.fixture(scope="module")
def cluster(request) -> Iterator[LocalCluster]:
    """A 3-broker local cluster over a temporary directory under /tmp, removed after the run."""
    pytest.importorskip("confluent_kafka")
    pytest.importorskip("kazoo")
    if not Path("/usr/share/java/zookeeper.jar").exists():
        pytest.skip("ZooKeeper is not installed (Debian's zookeeper package: scripts/dev test installs it)")
    if not request.config.pluginmanager.has_plugin("bench-replication-summary"):
        request.config.pluginmanager.register(_Summary(), "bench-replication-summary")
    if PROFILE_DIR:
        Path(PROFILE_DIR).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="idemcore-bench-repl-", dir="/tmp"))
    zookeeper = None
    try:
        if TICK_MS is not None:
            zookeeper = ZooKeeperServer(root / "zookeeper", tick_ms=TICK_MS)
        with _ProfiledCluster(BROKERS, root, session_timeout_ms=SESSION_TIMEOUT_MS,
                              zookeeper_hosts=zookeeper.hosts if zookeeper else None) as running:
            warm = _topic(running.bootstrap_servers, "warm", 3)  # connections, producer ids, the first topic
            work.produce_idempotent(running.bootstrap_servers, warm, work.values(20_000))
            yield running
    finally:
        if zookeeper is not None:
            zookeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _topic(bootstrap: str, prefix: str, factor: int) -> str:
    """A fresh one-partition topic of ``factor`` replicas (RF 1 with min.insync.replicas=1, else the cluster's),
    returned once it has a leader and a full ISR."""
    from confluent_kafka.admin import NewTopic

    name = f"{prefix}-rf{factor}-{uuid.uuid4().hex[:6]}"
    configs = {"min.insync.replicas": "1"} if factor == 1 else {}
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(name, 1, factor, config=configs)], operation_timeout=20)[name].result(work.TIMEOUT_S)
    _wait_isr(admin, name, factor, work.TIMEOUT_S)
    return name


def _partition(admin: Any, topic: str) -> Any:
    meta = admin.list_topics(topic, timeout=10)
    found = meta.topics.get(topic)
    return None if found is None or found.error is not None else found.partitions.get(0)


def _wait_isr(admin: Any, topic: str, size: int, timeout_s: float) -> float:
    """Seconds until partition 0 of ``topic`` has a leader and ``size`` replicas in sync."""
    start = time.monotonic()
    while True:
        partition = _partition(admin, topic)
        if partition is not None and partition.leader >= 0 and len(partition.isrs) == size:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"{topic}: ISR {partition.isrs if partition else None} not {size} replicas after "
                               f"{timeout_s:g} s")
        time.sleep(0.05)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


# ---------------------------------------------------------------- 1. acks=all, RF 1 and RF 3


def _throughput(bootstrap: str, topic: str, latencies: list[float]) -> float:
    """Seconds to produce RECORDS records (the first acknowledged before the clock starts, as
    :func:`wire_workloads.produce_idempotent`), each acknowledgement's latency appended to ``latencies``."""
    producer, errors = work._producer(bootstrap, topic, latencies,
                                      **{"queue.buffering.max.messages": QUEUE_RECORDS, **CLIENT})
    value = work.values(1)[0]
    work._produce(producer, topic, value)
    if producer.flush(work.TIMEOUT_S):
        raise RuntimeError(f"{topic}: the first record was not acknowledged after {work.TIMEOUT_S} s")
    latencies.clear()
    start = time.perf_counter()
    for _ in range(RECORDS - 1):
        work._produce(producer, topic, value)
    left = producer.flush(work.TIMEOUT_S)
    seconds = time.perf_counter() - start
    work._check(errors, topic)
    if left:
        raise RuntimeError(f"{topic}: {left} records not acknowledged after {work.TIMEOUT_S} s")
    return seconds


def _cpu(cluster: LocalCluster) -> dict[int, float]:
    """Each running broker's CPU seconds so far."""
    found = {}
    for n in cluster.broker_ids:
        pid = cluster.broker(n).pid
        seconds = Peer("", pid).cpu_seconds() if pid is not None else None
        if seconds is not None:
            found[n] = seconds
    return found


def _produce_round(cluster: LocalCluster, factor: int) -> ProduceRow:
    bootstrap = cluster.bootstrap_servers
    load_before = os.getloadavg()[0]
    latencies: list[float] = []
    topic = _topic(bootstrap, "repl-tput", factor)
    leader = _partition(_admin(bootstrap), topic).leader
    before = _cpu(cluster)
    seconds = _throughput(bootstrap, topic, latencies)
    used = {n: after - before[n] for n, after in _cpu(cluster).items() if n in before}
    paced = load.latency_load(bootstrap, _topic(bootstrap, "repl-rate", factor), LOAD_S, producers=1, rate=RATE,
                              partitions=1)
    return ProduceRow((RECORDS - 1) / seconds, used.get(leader, 0.0), sum(used.values()), _percentile(latencies, 50),
                      _percentile(latencies, 99), paced.percentile(50), paced.percentile(99), load_before)


def bench_replication_produce(benchmark, cluster):
    """RF 1 and RF 3 in turn, ROUNDS times (the turns interleaved so a change in the machine's load hits both)."""
    def run() -> None:
        for factor in FACTORS:
            _produce.setdefault(factor, []).append(_produce_round(cluster, factor))
    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    for factor, rows in _produce.items():
        benchmark.extra_info[f"rf{factor}"] = [{name: round(value, 4) for name, value in vars(row).items()}
                                               for row in rows]


# ---------------------------------------------------------------- 2. failover


class _Paced:
    """One idempotent producer sending a record every FAILOVER_PACE_S; remembers when each record's delivery
    report came (perf_counter) and every error."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.sent = 0
        self.acked: dict[int, float] = {}
        self.errors: list[Any] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, **work.PRODUCER_SETTINGS,
                                  "message.timeout.ms": int(FAILOVER_TIMEOUT_S * 1000),
                                  "log_level": 2,  # not each refused connection to the killed broker
                                  "error_cb": lambda error: error.fatal() and self.errors.append(error)})
        self.value = work.values(1)[0]

    def _delivered(self, index: int) -> Any:
        def report(error: Any, _message: Any) -> None:
            if error is not None:
                self.errors.append(error)
            else:
                self.acked[index] = time.perf_counter()
        return report

    def step(self) -> None:
        """Produce the next record, serve delivery reports, wait the pace."""
        self.producer.produce(self.topic, self.value, partition=0, on_delivery=self._delivered(self.sent))
        self.sent += 1
        self.producer.poll(FAILOVER_PACE_S)

    def run_for(self, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            self.step()

    def until_acked(self, index: int, timeout_s: float) -> float:
        """Produce on until record ``index`` or a later one is acknowledged; the time of the first such report."""
        deadline = time.perf_counter() + timeout_s
        while True:
            self.step()
            if self.errors:
                raise RuntimeError(f"{self.topic}: {len(self.errors)} errors, the first {self.errors[:3]}")
            done = [at for i, at in self.acked.items() if i >= index]
            if done:
                return min(done)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{self.topic}: no record produced after the kill acknowledged in {timeout_s:g} s")

    def check(self) -> None:
        left = self.producer.flush(work.TIMEOUT_S)
        if self.errors or left:
            raise RuntimeError(f"{self.topic}: {left} records not acknowledged, {len(self.errors)} errors, the first "
                               f"{self.errors[:3]}")
        if len(self.acked) != self.sent:
            raise RuntimeError(f"{self.topic}: {len(self.acked)} of {self.sent} records acknowledged")


def _failover_round(cluster: LocalCluster, zk: Any, admin: Any, producer: _Paced) -> FailoverRow:
    producer.run_for(0.5)  # the producer is sending to the current leader
    meta = admin.list_topics(producer.topic, timeout=10)
    leader = meta.topics[producer.topic].partitions[0].leader
    was_controller = json.loads(zk.get("/controller")[0]).get("brokerid") == leader
    seen: dict[str, float] = {}

    def watch(name: str) -> Any:
        return lambda _event: seen.setdefault(name, time.perf_counter())  # kazoo's thread: one-shot watches
    if zk.exists(f"/brokers/ids/{leader}", watch=watch("gone")) is None:
        raise RuntimeError(f"broker {leader} leads {producer.topic} but is not registered in ZooKeeper")
    zk.get(f"/brokers/topics/{producer.topic}/partitions/0/state", watch=watch("state"))
    killed_at = time.perf_counter()
    cluster.kill(leader)
    first_after = producer.sent
    seconds = producer.until_acked(first_after, FAILOVER_TIMEOUT_S) - killed_at
    producer.run_for(0.2)
    detect, elect = (seen[name] - killed_at if name in seen else None for name in ("gone", "state"))
    cluster.start(leader)
    isr_full_s = _wait_isr_while(producer, admin, BROKERS)
    return FailoverRow(seconds, detect, elect, leader, was_controller, isr_full_s)


def _wait_isr_while(producer: _Paced, admin: Any, size: int) -> float:
    """Seconds (after the restart) until the ISR is full again, the producer sending all the while."""
    start = time.monotonic()
    while True:
        producer.run_for(0.1)
        partition = _partition(admin, producer.topic)
        if partition is not None and partition.leader >= 0 and len(partition.isrs) == size:
            return time.monotonic() - start
        if time.monotonic() - start > FAILOVER_TIMEOUT_S:
            raise RuntimeError(f"{producer.topic}: ISR not full {FAILOVER_TIMEOUT_S:g} s after the restart")


def bench_replication_failover(benchmark, cluster):
    from confluent_kafka import Consumer, TopicPartition
    from kazoo.client import KazooClient

    bootstrap = cluster.bootstrap_servers
    admin = _admin(bootstrap)
    topic = _topic(bootstrap, "failover", BROKERS)
    producer = _Paced(bootstrap, topic)
    producer.until_acked(0, work.TIMEOUT_S)  # connected, producer id given

    zk = KazooClient(hosts=cluster.zookeeper_hosts)
    zk.start(timeout=15)

    def run() -> None:
        _failovers.append(_failover_round(cluster, zk, admin, producer))
    try:
        benchmark.pedantic(run, rounds=FAILOVERS, iterations=1)
    finally:
        zk.stop()
        zk.close()
    producer.check()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}"})
    try:
        high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()
    if high != producer.sent:
        raise RuntimeError(f"{topic}: high watermark {high}, {producer.sent} records acknowledged")
    benchmark.extra_info["session_timeout_ms"] = SESSION_TIMEOUT_MS
    benchmark.extra_info["rounds"] = [{name: round(value, 3) if isinstance(value, float) else value
                                       for name, value in vars(row).items()} for row in _failovers]


# ---------------------------------------------------------------- the table


class _Summary:
    """Prints the tables at the end of the run (output during a benchmark is captured)."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        write = terminalreporter.write_line
        if not (_produce or _failovers):
            return
        write("")
        write(f"Replication benchmarks: {BROKERS}-broker LocalCluster on loopback, confluent-kafka "
              f"{work.client_version()}, Python {sys.version.split()[0]}; {os.cpu_count()} cores shared by the "
              f"clients, the brokers, ZooKeeper and anything else running")
        if _produce:
            _write_produce(write)
        if _failovers:
            _write_failovers(write)


def _median(rows: list[Any], name: str) -> float:
    return statistics.median(getattr(row, name) for row in rows)


def _write_produce(write: Any) -> None:
    rounds = len(next(iter(_produce.values())))
    settings = {**work.PRODUCER_SETTINGS, **CLIENT}
    write(f"acks=all, idempotent, one partition, 100-byte records, linger.ms {settings['linger.ms']}, batch.size "
          f"{settings['batch.size']:,} B; medians of {rounds} round(s); latency ms:")
    write(f"  {'RF':>3}{'records/s':>11}{'p50':>8}{'p99':>8}{'CPU us/rec':>11}{'(leader)':>9}   at {RATE:,}/s:"
          f"{'p50':>7}{'p99':>8}{'load 1m':>9}")
    for factor, rows in sorted(_produce.items()):
        per_record = 1e6 / (RECORDS - 1)
        write(f"  {factor:>3}{_median(rows, 'records_per_s'):>11,.0f}{_median(rows, 'p50') * 1e3:>8.1f}"
              f"{_median(rows, 'p99') * 1e3:>8.1f}{_median(rows, 'cluster_cpu_s') * per_record:>11.2f}"
              f"{_median(rows, 'leader_cpu_s') * per_record:>9.2f}   {'':>{len(f'at {RATE:,}/s:')}}"
              f"{_median(rows, 'rate_p50') * 1e3:>7.1f}{_median(rows, 'rate_p99') * 1e3:>8.1f}"
              f"{_median(rows, 'load_before'):>9.2f}")
    one, three = _produce.get(1), _produce.get(3)
    if one and three:
        write(f"  RF 3 / RF 1 records/s: {_median(three, 'records_per_s') / _median(one, 'records_per_s'):.2f}x "
              f"(aim >= 0.5); p99 at {RATE:,}/s: {_median(three, 'rate_p99') / _median(one, 'rate_p99'):.2f}x")
    write(f"  records/s: {RECORDS:,} records as fast as the producer goes (queue {QUEUE_RECORDS:,} records: its "
          f"p50/p99 are mostly queueing); CPU us/rec: the brokers' CPU (all, and the leader's) per record in that "
          f"run; at {RATE:,}/s: {LOAD_S:g} s paced, after a 1 s warm-up")


def _write_failovers(write: Any) -> None:
    times = [row.seconds for row in _failovers]
    write(f"failover, SIGKILL of the leader to the first acknowledged record produced after it, "
          f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}, {len(times)} rounds: "
          f"median {statistics.median(times):.2f} s, min {min(times):.2f}, max {max(times):.2f}")
    write("  rounds (s, killed broker): " + ", ".join(
        f"{row.seconds:.2f} ({row.killed}{'*' if row.was_controller else ''})" for row in _failovers)
        + "   (*: the killed leader was also the controller)")
    parts = {"detect: the kill to the registration gone": [row.detect_s for row in _failovers],
             "elect: from there to the partition's state changed": [
                 row.elect_s - row.detect_s for row in _failovers
                 if row.elect_s is not None and row.detect_s is not None],
             "client: from there to the acknowledgement": [
                 row.seconds - row.elect_s for row in _failovers if row.elect_s is not None]}
    for label, values in parts.items():
        found = [value for value in values if value is not None]
        if found:
            write(f"  {label}: median {statistics.median(found):.3f} s, min {min(found):.3f}, "
                  f"max {max(found):.3f} ({len(found)} rounds)")
    write(f"  ZooKeeper tickTime {TICK_MS or 3000} ms; ISR full again after the restart: median "
          f"{_median(_failovers, 'isr_full_s'):.2f} s")
