"""What one ``Consumer.poll(timeout_ms=0)`` costs with nothing to read, over TCP to an in-process
:class:`~idemcore.broker.server.Server`: a member of a stable group (its membership runs in every poll; heartbeats go
from its thread) beside a consumer given its partitions with ``assign``. The difference is the group's share of the
poll loop.

Run: scripts/dev bench -k consumer_poll
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from idemcore.broker.server import Server
from idemcore.client.consumer import Consumer
from idemcore.net.tcp import TcpTransport
from tests.served_groups import close_consumers, served_broker

TOPIC, PARTITIONS = "t", 4
POLLS = 10_000
WAIT_S = 30


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with served_broker({TOPIC: PARTITIONS}) as served:
        yield served


def _subscribed(server: Server) -> Consumer:
    consumer = Consumer(TcpTransport(server.bootstrap, client_id="member"), group_id="bench", client_id="member",
                        heartbeat_interval_ms=1_000)
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + WAIT_S
    while len(consumer.assignment()) != PARTITIONS:
        assert time.monotonic() < deadline, f"the member has {sorted(consumer.assignment())} after {WAIT_S} s"
        consumer.poll(timeout_ms=20)
    return consumer


def _assigned(server: Server) -> Consumer:
    consumer = Consumer(TcpTransport(server.bootstrap, client_id="assigned"), client_id="assigned")
    consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
    return consumer


@pytest.mark.parametrize("name, make", [("subscribed", _subscribed), ("assigned", _assigned)])
def bench_consumer_poll(benchmark, server, name, make):
    consumer = make(server)
    try:
        def polls() -> None:
            for _ in range(POLLS):
                consumer.poll()

        polls()  # warm up: positions, the first fetches
        benchmark.pedantic(polls, rounds=3, iterations=1)
        benchmark.extra_info["us_per_poll"] = round(benchmark.stats.stats.min / POLLS * 1e6, 2)
    finally:
        close_consumers([consumer])
