"""Kafka's classic consumer-group protocol against :class:`~idemcore.broker.server.Server` on a free loopback port,
with real clients: two confluent-kafka (librdkafka) consumers in one group share a 4-partition topic, each gets
partitions, every partition exactly once, and read every record once; their auto commits (as members, with their
generation) are accepted; when one closes (LeaveGroup), the other rebalances onto all four. kafka-python 3 and
aiokafka consumers form the same group and rebalance the same way."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import pytest

from idemcore.broker.server import Server
from tests.real_client_helpers import wait_until
from tests.served_groups import closing, partitions, poll_members_until, served_broker

TOPIC = "t"
PARTITIONS = 4
GROUP = "consumers"
TIMEOUT_S = 40


def poll_until(members: list[Any], done: Callable[[], bool], received: list[bytes] | None = None) -> None:
    poll_members_until(members, done, TIMEOUT_S, received)


@pytest.fixture
def server() -> Iterator[Server]:
    with served_broker({TOPIC: PARTITIONS}) as served:
        yield served


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    closing(clients)


def consumer(server: Server, opened: list[Any]) -> Any:
    made = confluent_kafka.Consumer({
        "bootstrap.servers": server.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
        "session.timeout.ms": 6_000, "heartbeat.interval.ms": 300, "auto.commit.interval.ms": 500,
        "topic.metadata.refresh.interval.ms": 1_000})
    opened.append(made)
    made.subscribe([TOPIC])
    return made


def test_two_consumers_share_the_partitions_and_one_takes_all_when_the_other_leaves(server, opened):
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap})
    for partition in range(PARTITIONS):
        producer.produce(TOPIC, f"record-{partition}".encode(), partition=partition)
    assert producer.flush(TIMEOUT_S) == 0

    first, second = consumer(server, opened), consumer(server, opened)
    members = [first, second]

    def shared() -> bool:
        mine, theirs = partitions(first), partitions(second)
        return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == set(range(PARTITIONS))

    # Records read while the group forms count too: a member may read one before the rebalance that shares them.
    received: list[bytes] = []
    poll_until(members, shared, received)
    group = server.broker.group_coordinator.classic_groups.groups[GROUP]
    assert len(group.members) == 2 and group.protocol_type == "consumer"
    generation = group.generation_id

    # Every record is read (one read before the rebalance may be read again after it: auto commit is at least once),
    # and the members' auto commits (with their generation) are accepted.
    everything = {f"record-{p}".encode() for p in range(PARTITIONS)}
    poll_until(members, lambda: set(received) == everything, received)
    assert set(received) == everything

    def committed() -> dict[int, int]:
        _, offsets = server.broker.group_coordinator.offset_fetch(GROUP, [(TOPIC, p) for p in range(PARTITIONS)])
        return {p: offsets[(TOPIC, p)].offset for p in range(PARTITIONS)}

    poll_until(members, lambda: committed() == dict.fromkeys(range(PARTITIONS), 1))

    second.close()  # LeaveGroup: the group rebalances without waiting for its session to lapse
    left_at = time.monotonic()
    poll_until([first], lambda: partitions(first) == set(range(PARTITIONS)))
    assert time.monotonic() - left_at < 6.0  # sooner than the session timeout: the leave was heard
    assert len(group.members) == 1 and group.generation_id > generation


def test_kafka_python_consumers_share_the_partitions_and_rebalance_when_one_leaves(server):
    import kafka
    # One thread per consumer: kafka-python 3.0.12 drops a join that completes while its consumer is not inside
    # poll() (it starts a new JoinGroup instead), so consumers polled in turn from one thread rejoin forever.
    members = [kafka.KafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id=GROUP,
                                   session_timeout_ms=6_000, heartbeat_interval_ms=300, auto_offset_reset="earliest")
               for _ in range(2)]
    stop = [threading.Event(), threading.Event()]

    def run(k: int) -> None:
        while not stop[k].is_set():
            members[k].poll(timeout_ms=200)
        members[k].close()

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(2)]
    for thread in threads:
        thread.start()
    try:
        def held(k: int) -> set[int]:
            return {tp.partition for tp in members[k].assignment()}

        wait_until(lambda: bool(held(0) and held(1) and not held(0) & held(1)
                                and held(0) | held(1) == set(range(PARTITIONS))), TIMEOUT_S, "the two sharing")
        stop[1].set()
        threads[1].join(TIMEOUT_S)
        wait_until(lambda: held(0) == set(range(PARTITIONS)), TIMEOUT_S, "the first holding every partition")
    finally:
        for event in stop:
            event.set()
        for thread in threads:
            thread.join(TIMEOUT_S)


def test_aiokafka_consumers_share_the_partitions_and_rebalance_when_one_leaves(server):
    import aiokafka

    async def scenario() -> None:
        members = [aiokafka.AIOKafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id=GROUP,
                                             session_timeout_ms=6_000, heartbeat_interval_ms=300,
                                             auto_offset_reset="earliest") for _ in range(2)]
        for member in members:
            await member.start()
        try:
            def held(k: int) -> set[int]:
                return {tp.partition for tp in members[k].assignment()}

            deadline = time.monotonic() + TIMEOUT_S
            while not (held(0) and held(1) and held(0) | held(1) == set(range(PARTITIONS))
                       and not held(0) & held(1)):
                assert time.monotonic() < deadline, [held(0), held(1)]
                for member in members:
                    await member.getmany(timeout_ms=50)
            await members[1].stop()
            while held(0) != set(range(PARTITIONS)):
                assert time.monotonic() < deadline, held(0)
                await members[0].getmany(timeout_ms=50)
        finally:
            for member in members:
                await member.stop()

    asyncio.run(scenario())
