"""Mixed classic groups over TCP against :class:`~idemcore.broker.server.Server`: an idemcore Consumer (its
heartbeat thread on the thread-safe TcpTransport) in one group with a confluent-kafka (librdkafka), a kafka-python
or an aiokafka consumer, for each assignor both support (librdkafka has no eager "sticky"), with our consumer as
the group's leader and as a follower: the group assigns every partition exactly once, and every record produced
once the group is stable is read exactly once, by the member that holds its partition."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import pytest
from aiokafka.coordinator.assignors.range import RangePartitionAssignor as AioRange
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as AioRoundRobin
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor as AioSticky
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from idemcore.broker.server import Server
from idemcore.client.consumer import Consumer
from idemcore.net.tcp import TcpTransport
from tests.served_groups import served_broker

TOPIC = "t"
PARTITIONS = 6
GROUP = "mixed"
RECORDS = 60
TIMEOUT_S = 45
SESSION_MS = 6_000
HEARTBEAT_MS = 300


@pytest.fixture
def server() -> Iterator[Server]:
    with served_broker({TOPIC: PARTITIONS}) as served:
        yield served


class Member:
    """One consumer polled in its own thread: what it holds after each poll and the records it read."""

    def __init__(self, name: str, make: Callable[[], Any], poll: Callable[[Any], list[tuple[int, int]]],
                 held: Callable[[Any], set[int]], close: Callable[[Any], None]) -> None:
        self.name = name
        self.held: set[int] = set()
        self.records: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self.client: Any = None
        self._stop = threading.Event()
        self._ready = threading.Event()

        def run() -> None:
            try:
                self.client = make()
                self._ready.set()
                while not self._stop.is_set():
                    read = poll(self.client)
                    self.records.extend(read)
                    self.held = held(self.client)
            except BaseException as error:  # seen by the test, not lost in the thread
                self.error = error
            finally:
                self._ready.set()
                if self.client is not None:
                    close(self.client)

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(TIMEOUT_S)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


def ours(server: Server, strategy: str) -> Member:
    def make() -> Consumer:
        consumer = Consumer(TcpTransport(server.bootstrap, client_id="ours"), group_id=GROUP, client_id="ours",
                            partition_assignment_strategy=[strategy], session_timeout_ms=SESSION_MS,
                            heartbeat_interval_ms=HEARTBEAT_MS, auto_commit_interval_ms=500)
        consumer.subscribe([TOPIC])
        return consumer

    def close(consumer: Consumer) -> None:
        transport = consumer.transport
        consumer.close()
        transport.close()  # type: ignore[attr-defined]

    return Member("ours", make, lambda c: [(r.partition, r.offset) for r in c.poll(timeout_ms=50)],
                  lambda c: {p for _, p in c.assignment()}, close)


def librdkafka(server: Server, strategy: str) -> Member:
    def make() -> Any:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": server.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
            "auto.commit.interval.ms": 500, "partition.assignment.strategy": strategy,
            "topic.metadata.refresh.interval.ms": 1_000})
        consumer.subscribe([TOPIC])
        return consumer

    def poll(consumer: Any) -> list[tuple[int, int]]:
        message = consumer.poll(0.05)
        if message is None:
            return []
        assert message.error() is None, message.error()
        return [(message.partition(), message.offset())]

    return Member("librdkafka", make, poll, lambda c: {tp.partition for tp in c.assignment()}, lambda c: c.close())


_KAFKA_PYTHON = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}


def kafka_python(server: Server, strategy: str) -> Member:
    def make() -> Any:
        return kafka.KafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id=GROUP,
                                   session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                   auto_offset_reset="earliest", auto_commit_interval_ms=500,
                                   partition_assignment_strategy=[_KAFKA_PYTHON[strategy]])

    def poll(consumer: Any) -> list[tuple[int, int]]:
        batches = consumer.poll(timeout_ms=50)
        return [(r.partition, r.offset) for records in batches.values() for r in records]

    return Member("kafka-python", make, poll, lambda c: {tp.partition for tp in c.assignment()},
                  lambda c: c.close())


_AIOKAFKA = {"range": AioRange, "roundrobin": AioRoundRobin, "sticky": AioSticky}


def aiokafka_member(server: Server, strategy: str) -> Member:
    """aiokafka on its own event loop in the member's thread."""
    loop = asyncio.new_event_loop()

    def make() -> Any:
        async def start() -> Any:
            consumer = aiokafka.AIOKafkaConsumer(
                TOPIC, bootstrap_servers=server.bootstrap, group_id=GROUP, session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS, auto_offset_reset="earliest", auto_commit_interval_ms=500,
                partition_assignment_strategy=[_AIOKAFKA[strategy]])
            await consumer.start()
            return consumer
        return loop.run_until_complete(start())

    def poll(consumer: Any) -> list[tuple[int, int]]:
        batches = loop.run_until_complete(consumer.getmany(timeout_ms=50))
        return [(r.partition, r.offset) for records in batches.values() for r in records]

    def close(consumer: Any) -> None:
        loop.run_until_complete(consumer.stop())
        loop.close()

    return Member("aiokafka", make, poll, lambda c: {tp.partition for tp in c.assignment()}, close)


PEERS: dict[str, tuple[Callable[[Server, str], Member], tuple[str, ...]]] = {
    "librdkafka": (librdkafka, ("range", "roundrobin", "cooperative-sticky")),
    "kafka-python": (kafka_python, ("range", "roundrobin", "sticky", "cooperative-sticky")),
    "aiokafka": (aiokafka_member, ("range", "roundrobin", "sticky")),
}
CASES = [(peer, strategy, leader) for peer, (_, strategies) in PEERS.items() for strategy in strategies
         for leader in ("ours", "peer")]


def wait_for(members: list[Member], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        for member in members:
            assert member.error is None, f"{member.name}: {member.error!r}"
        assert time.monotonic() < deadline, f"{what} not within {TIMEOUT_S} s: " + ", ".join(
            f"{m.name} holds {sorted(m.held)}" for m in members)
        time.sleep(0.05)


def produce(server: Server, count: int, first: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap})
    for i in range(first, first + count):
        producer.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT_S) == 0


@pytest.mark.parametrize(("peer", "strategy", "leader"), CASES)
def test_a_mixed_group_assigns_each_partition_once_and_reads_each_record_once(server, peer, strategy, leader):
    make_peer = PEERS[peer][0]
    starters = [lambda: ours(server, strategy), lambda: make_peer(server, strategy)]
    if leader == "peer":
        starters.reverse()
    every = set(range(PARTITIONS))
    first = starters[0]()
    members = [first]
    try:
        wait_for(members, lambda: first.held == every, f"{first.name} alone holding every partition")
        second = starters[1]()
        members.append(second)
        wait_for(members, lambda: bool(first.held) and bool(second.held) and not first.held & second.held
                 and first.held | second.held == every, "the two sharing the partitions")
        our = next(m for m in members if m.name == "ours")
        assert our.client._group.leader == (leader == "ours")
        produce(server, RECORDS)
        wait_for(members, lambda: sum(len(m.records) for m in members) >= RECORDS, "every record read")
        # One last record a partition, read after every record before it in its partition: once each is read, a
        # duplicate of an earlier one would have been read too.
        produce(server, PARTITIONS, first=RECORDS)
        last = {(p, RECORDS // PARTITIONS) for p in range(PARTITIONS)}
        wait_for(members, lambda: last <= {r for m in members for r in list(m.records)}, "the last records read")
        read = sorted(r for m in members for r in m.records)
        assert len(read) == len(set(read)) == RECORDS + PARTITIONS, read
        for member in members:
            assert {p for p, _ in member.records} <= member.held, member.name
    finally:
        for member in reversed(members):
            member.stop()
