"""What the consumer-group tests over TCP share: a broker served on a free loopback port with its timers running
every 100 ms (sessions, rebalances), and the clients a test opened, closed before the server stops (librdkafka
otherwise keeps reconnecting to a closed port)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from idemcore import Broker
from idemcore.broker.server import Server


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
