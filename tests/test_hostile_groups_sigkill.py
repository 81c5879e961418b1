"""A hostile pass over the durable group coordinator of ``idemcore serve`` (a child process): SIGKILL right after
a group's SyncGroup, then a restart on the same port and data directory: the group is there, Stable, with its
members, generation, protocol and assignments; its members go on in their generation without a rebalance."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from idemcore.client.consumer import Consumer
from idemcore.client.group_admin import GroupAdmin
from idemcore.net.consumer_protocol import decode_assignment
from idemcore.net.tcp import TcpTransport
from tests.peers import ServeProcess
from tests.served_groups import close_consumers

TOPIC = "t"
PARTITIONS = 4
GROUP = "killed"
TIMEOUT_S = 60
EVERY = {(TOPIC, p) for p in range(PARTITIONS)}


@pytest.fixture
def made() -> Iterator[list[Consumer]]:
    consumers: list[Consumer] = []
    yield consumers
    close_consumers(consumers)


def test_sigkill_right_after_sync_group_keeps_the_group_and_its_generation(tmp_path, made):
    serve = ServeProcess(tmp_path / "data", "--topics", f"{TOPIC}:{PARTITIONS}", "--quiet")
    serve.start()
    try:
        for name in ("a", "b"):
            made.append(Consumer(TcpTransport(serve.bootstrap, client_id=name), group_id=GROUP, client_id=name,
                                 heartbeat_interval_ms=200, session_timeout_ms=30_000, request_timeout_ms=3_000,
                                 retry_backoff_ms=100, default_api_timeout_ms=10_000))
            made[-1].subscribe([TOPIC])
        deadline = time.monotonic() + TIMEOUT_S
        while not (all(c.assignment() for c in made)
                   and set().union(*(c.assignment() for c in made)) == EVERY):
            assert time.monotonic() < deadline, [sorted(c.assignment()) for c in made]
            for consumer in made:
                consumer.poll(timeout_ms=20)
        before = [(c.consumer_group_metadata(), c.assignment()) for c in made]
        serve.kill()  # right after the SyncGroup that gave the last assignment
        serve.start()
        with GroupAdmin(serve.bootstrap) as admin:
            described, = admin.describe_groups([GROUP])
        assert described.state == "Stable" and described.protocol_name == "range", described
        generation = before[0][0].generation_id
        assert {m.member_id for m in described.members} == {meta.member_id for meta, _ in before}
        stored = {m.member_id: set(decode_assignment(m.assignment).partitions) for m in described.members}
        assert stored == {meta.member_id: owned for meta, owned in before}
        end = time.monotonic() + 3  # heartbeats to the restarted coordinator: still generation `generation`
        while time.monotonic() < end:
            for consumer in made:
                consumer.poll(timeout_ms=50)
        assert [(c.consumer_group_metadata(), c.assignment()) for c in made] == before
        assert all(meta.generation_id == generation for meta, _ in before)
        while made:  # while the broker serves: their commits and LeaveGroups are answered
            consumer = made.pop()
            consumer.close()
            consumer.transport.close()  # type: ignore[attr-defined]
    finally:
        serve.kill()
