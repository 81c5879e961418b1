"""Consumer groups over the wire, in one run: how long a group of $IDEMCORE_BENCH_GROUP_MEMBERS consumers (default
10) takes from subscribing to all of them owning their share, and how long the rest take to own every partition again
after one leaves. Against a child ``idemcore serve`` and tansu (a Kafka-compatible broker in Rust, in memory), each
started once for the module on a free port, with their default group settings (idemcore's are Kafka's:
``group.initial.rebalance.delay.ms`` 3000 for the classic protocol).

Groups:

- *classic, librdkafka*: confluent-kafka consumers with ``group.protocol=classic`` and librdkafka's default
  assignors (range, roundrobin: eager), on idemcore and on tansu;
- *consumer (KIP-848), librdkafka*: ``group.protocol=consumer``, assignment by the coordinator (its ``uniform``
  assignor), on idemcore (tansu does not serve ConsumerGroupHeartbeat);
- *classic, idemcore*: idemcore's own :class:`~idemcore.client.Consumer` (``range`` then ``cooperative-sticky``
  offered: range is chosen, eager), each over its own TcpTransport, on idemcore.

Each round makes a fresh topic of $IDEMCORE_BENCH_GROUP_PARTITIONS partitions (default 20) with 20 records in each
and a fresh group; every consumer runs in its own thread and polls. *join*: from the first subscribe to the moment
the members share the partitions (from their assignment callbacks: every partition owned by exactly one member,
every member owning some) and records flow; *leave*: the first member closes (LeaveGroup, or a leaving heartbeat
for KIP-848), and the time from its close to the moment the others share every partition again. (Not "every
member has read a record": under KIP-848 the first members read whole partitions before the assignment spreads,
and the later owners of those have nothing left to read.) $IDEMCORE_BENCH_GROUP_ROUNDS rounds (default 3); the
medians are reported (``extra_info`` and a table at the end). Nothing asserts on a timing; every wait is bounded
(120 s) and a round that misses it fails.

Run: scripts/dev bench -k groups
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import wire_workloads as work
from server_stats import Peer
from started_peers import IDEMCORE, TANSU, started_peers

MEMBERS = int(os.environ.get("IDEMCORE_BENCH_GROUP_MEMBERS", "10"))
PARTITIONS = int(os.environ.get("IDEMCORE_BENCH_GROUP_PARTITIONS", "20"))
ROUNDS = int(os.environ.get("IDEMCORE_BENCH_GROUP_ROUNDS", "3"))
PER_PARTITION = 20
WAIT_S = 120.0

#: (group kind, broker) -> {"join": [s...], "leave": [s...]}
_times: dict[tuple[str, str], dict[str, list[float]]] = {}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory, request) -> Iterator[dict[str, Peer]]:
    pytest.importorskip("confluent_kafka")
    request.config.pluginmanager.register(_Summary(), "bench-groups-summary")
    with started_peers(tmp_path_factory.mktemp("groups") / "data") as peers:
        yield peers


def _filled_topic(bootstrap: str) -> str:
    topic = work.fresh_topic(bootstrap, "group", PARTITIONS)
    producer, errors = work._producer(bootstrap, topic)
    for partition in range(PARTITIONS):
        for n in range(PER_PARTITION):
            work._produce(producer, topic, b"v%d" % n, partition)
    producer.flush(30)
    work._check(errors, topic)
    return topic


class _Member:
    """One consumer's thread: what it owns (from its callbacks) and whether it has read a record."""

    def __init__(self) -> None:
        self.owned: set[tuple[str, int]] = set()
        self.got_record = threading.Event()
        self.stop = threading.Event()
        self.closed = threading.Event()
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def assigned(self, partitions: Any) -> None:
        with self.lock:
            self.owned |= set(partitions)

    def revoked(self, partitions: Any) -> None:
        with self.lock:
            self.owned -= set(partitions)


def _confluent_member(bootstrap: str, topic: str, group: str, protocol: str) -> Callable[[_Member], None]:
    from confluent_kafka import Consumer

    def run(member: _Member) -> None:
        settings = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                    "group.protocol": protocol}
        if protocol == "classic":
            settings.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 500})
        consumer = Consumer(settings)

        def on_assign(_: Any, partitions: Any) -> None:
            member.assigned((p.topic, p.partition) for p in partitions)

        def on_revoke(_: Any, partitions: Any) -> None:
            member.revoked((p.topic, p.partition) for p in partitions)
        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        try:
            while not member.stop.is_set():
                message = consumer.poll(0.05)
                if message is not None and message.error() is None:
                    member.got_record.set()
        finally:
            consumer.close()
            member.closed.set()
    return run


def _idemcore_member(bootstrap: str, topic: str, group: str) -> Callable[[_Member], None]:
    from idemcore.client import Consumer
    from idemcore.net.tcp import TcpTransport

    def run(member: _Member) -> None:
        class Listener:
            def on_partitions_assigned(self, partitions: Any) -> None:
                member.assigned(partitions)

            def on_partitions_revoked(self, partitions: Any) -> None:
                member.revoked(partitions)

            on_partitions_lost = on_partitions_revoked
        transport = TcpTransport(bootstrap, client_id=f"bench-{uuid.uuid4().hex[:6]}")
        consumer = Consumer(transport, group, session_timeout_ms=10_000, heartbeat_interval_ms=500)
        consumer.subscribe([topic], Listener())
        try:
            while not member.stop.is_set():
                if consumer.poll(timeout_ms=50):
                    member.got_record.set()
        finally:
            consumer.close()
            transport.close()
            member.closed.set()
    return run


def _wait(done: Callable[[], bool], what: str, threads: list[tuple[_Member, threading.Thread]]) -> float:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        failed = [m.error for m, _ in threads if m.error is not None]
        if failed:
            raise RuntimeError(f"a member failed while waiting for {what}: {failed[0]!r}")
        if done():
            return time.monotonic()
        time.sleep(0.005)
    raise RuntimeError(f"no {what} within {WAIT_S} s")


def _one_round(bootstrap: str, make: Callable[[str, str], Callable[[_Member], None]]) -> tuple[float, float]:
    topic = _filled_topic(bootstrap)
    group = f"bench-{uuid.uuid4().hex[:8]}"
    run = make(topic, group)
    threads: list[tuple[_Member, threading.Thread]] = []

    def guarded(member: _Member) -> None:
        try:
            run(member)
        except BaseException as error:  # reported by _wait
            member.error = error

    start = time.monotonic()
    for _ in range(MEMBERS):
        member = _Member()
        thread = threading.Thread(target=guarded, args=(member,), daemon=True)
        thread.start()
        threads.append((member, thread))
    try:
        everything = {(topic, p) for p in range(PARTITIONS)}

        def shared(members: list[_Member]) -> bool:
            """Every partition owned by exactly one member, and every member owning some."""
            owned: list[set[tuple[str, int]]] = []
            for m in members:
                with m.lock:
                    owned.append(set(m.owned))
            return all(owned) and sum(map(len, owned)) == len(everything) and set().union(*owned) == everything
        joined = _wait(lambda: shared([m for m, _ in threads]) and any(m.got_record.is_set() for m, _ in threads),
                       "every member owning its share", threads)
        leaving, _ = threads[0]
        left_at = time.monotonic()
        leaving.stop.set()
        rest = [m for m, _ in threads[1:]]
        rebalanced = _wait(lambda: leaving.closed.is_set() and shared(rest), "the others sharing every partition",
                           threads)
        return joined - start, rebalanced - left_at
    finally:
        for member, _ in threads:
            member.stop.set()
        for _, thread in threads:
            thread.join(30)


def _rounds(benchmark, kind: str, broker: str, peer: Peer, make: Callable[[str, str], Callable[[_Member], None]],
            ) -> None:
    times = _times.setdefault((kind, broker), {"join": [], "leave": []})

    def one() -> None:
        join, leave = _one_round(peer.bootstrap, make)
        times["join"].append(join)
        times["leave"].append(leave)
    benchmark.pedantic(one, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["join s"] = [round(t, 3) for t in times["join"]]
    benchmark.extra_info["leave s"] = [round(t, 3) for t in times["leave"]]


@pytest.mark.parametrize("broker", [IDEMCORE, TANSU])
def bench_group_classic_librdkafka(benchmark, brokers, broker):
    if broker not in brokers:
        pytest.skip("tansu is not installed")
    peer = brokers[broker]
    _rounds(benchmark, "classic, librdkafka", broker, peer,
            lambda topic, group: _confluent_member(peer.bootstrap, topic, group, "classic"))


def bench_group_consumer_protocol_librdkafka(benchmark, brokers):
    peer = brokers[IDEMCORE]
    _rounds(benchmark, "consumer (KIP-848), librdkafka", IDEMCORE, peer,
            lambda topic, group: _confluent_member(peer.bootstrap, topic, group, "consumer"))


def bench_group_classic_idemcore_consumer(benchmark, brokers):
    peer = brokers[IDEMCORE]
    _rounds(benchmark, "classic, idemcore Consumer", IDEMCORE, peer,
            lambda topic, group: _idemcore_member(peer.bootstrap, topic, group))


class _Summary:
    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not _times:
            return
        write = terminalreporter.write_line
        write("")
        write(f"consumer groups: {MEMBERS} members, {PARTITIONS} partitions; median seconds over the rounds "
              "(join: subscribe to every member owning its share; leave: one closes to the rest sharing every "
              "partition)")
        for (kind, broker), times in sorted(_times.items()):
            if times["join"]:
                write(f"  {kind:<32} {broker:<9} join {statistics.median(times['join']):7.2f}  "
                      f"leave {statistics.median(times['leave']):7.2f}  ({len(times['join'])} rounds)")
