"""What the consumer-group tests over TCP share: a broker served on a free loopback port with its timers running
every 100 ms (sessions, rebalances); the clients a test opened, closed before the server stops (librdkafka
otherwise keeps reconnecting to a closed port); bounded polling loops for idemcore's Consumers and for real
clients' consumers (confluent-kafka's API: ``poll(seconds)``, ``assignment()``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from idemcore import Broker
from idemcore.broker.server import Server
from idemcore.client.consumer import Consumer
from idemcore.protocol.constants import TopicPartition


@contextmanager
def served_broker(topics: dict[str, int], *, heartbeat_interval_ms: int | None = None) -> Iterator[Server]:
    """An in-memory broker with ``topics`` (3 ``__consumer_offsets`` partitions) behind a started Server;
    ``heartbeat_interval_ms``: what its KIP-848 groups tell members."""
    broker = Broker(topics, offsets_topic_partitions=3)
    if heartbeat_interval_ms is not None:
        broker.consumer_groups.heartbeat_interval_ms = heartbeat_interval_ms
    try:
        with Server(broker, housekeeping_ms=100) as served:
            yield served
    finally:
        broker.close()


def closing(clients: list[Any]) -> None:
    """Close ``clients``, newest first; one the test closed already is passed over."""
    for client in reversed(clients):
        try:
            client.close()
        except RuntimeError:  # confluent-kafka: already closed
            pass


# ---------------------------------------------------------------- idemcore's Consumer


def close_consumers(consumers: list[Consumer]) -> None:
    """Close idemcore Consumers, each over a TcpTransport of its own, and then their transports."""
    for consumer in consumers:
        transport = consumer.transport
        consumer.close()
        transport.close()  # type: ignore[attr-defined]


def poll_consumers_until(consumers: list[Consumer], done: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Poll ``consumers`` in turn until ``done()``; the test fails after ``timeout_s``, naming their assignments."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s: " \
                                            f"{[sorted(c.assignment()) for c in consumers]}"
        for consumer in consumers:
            consumer.poll(timeout_ms=20)


def share_exactly(consumers: list[Consumer], every: set[TopicPartition]) -> bool:
    """Whether every consumer owns some of ``every`` and each partition of it is owned exactly once."""
    held = [c.assignment() for c in consumers]
    return all(held) and sum(map(len, held)) == len(every) and set().union(*held) == every


# ---------------------------------------------------------------- real clients' consumers


def partitions(member: Any) -> set[int]:
    """The partition numbers a real client's consumer is assigned (one topic)."""
    return {tp.partition for tp in member.assignment()}


def poll_members_until(members: list[Any], done: Callable[[], bool], timeout_s: float,
                       received: list[bytes] | None = None, *, errors_fail: bool = True) -> None:
    """Poll real clients' consumers in turn until ``done()``, each record's value added to ``received``; the test
    fails after ``timeout_s`` (naming their assignments), and at a message that is an error unless not
    ``errors_fail`` (a coordinator the test restarts: such a message is passed over)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not done in {timeout_s} s: assignments " \
            f"{[sorted(partitions(m)) for m in members]}" + ("" if received is None else f", {len(received)} received")
        for member in members:
            message = member.poll(0.05)
            if message is None:
                continue
            if message.error() is not None:
                assert not errors_fail, message.error()
                continue
            if received is not None:
                received.append(message.value())
