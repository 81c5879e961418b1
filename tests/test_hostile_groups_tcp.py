"""A hostile pass over idemcore's Consumer in a classic group over TCP: the group coordinator dies in the middle of
a rebalance (a member's JoinGroup in flight) and comes back from its data directory on the same port: every member
finds it again and the group settles with each partition owned once; closing (also during a join, also while the
coordinator is down) stops every heartbeat thread."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from idemcore import Broker
from idemcore.broker.server import Server
from idemcore.client.consumer import Consumer
from idemcore.net.tcp import TcpTransport
from tests.peers import free_port
from tests.served_groups import close_consumers, poll_consumers_until, share_exactly

TOPIC = "t"
PARTITIONS = 6
GROUP = "hostile"
TIMEOUT_S = 60
EVERY = {(TOPIC, p) for p in range(PARTITIONS)}


def heartbeat_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.endswith("-heartbeat") and t.is_alive()]


class Coordinator:
    """A broker on a data directory served on a fixed port, which can die and come back."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir, self.port = data_dir, free_port()
        self.broker: Broker | None = None
        self.server: Server | None = None

    def start(self) -> None:
        self.broker = Broker({TOPIC: PARTITIONS}, data_dir=self.data_dir, fsync=False, offsets_topic_partitions=3)
        self.server = Server(self.broker, port=self.port, housekeeping_ms=100).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.broker is not None:
            self.broker.close()
        self.server = self.broker = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    made = Coordinator(tmp_path)
    made.start()
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def made() -> Iterator[list[Consumer]]:
    consumers: list[Consumer] = []
    yield consumers
    close_consumers(consumers)


def member(coordinator: Coordinator, made: list[Consumer], name: str) -> Consumer:
    consumer = Consumer(TcpTransport(coordinator.bootstrap, client_id=name), group_id=GROUP, client_id=name,
                        heartbeat_interval_ms=200, session_timeout_ms=10_000, request_timeout_ms=3_000,
                        retry_backoff_ms=100, default_api_timeout_ms=5_000)
    made.append(consumer)
    return consumer


poll_until = functools.partial(poll_consumers_until, timeout_s=TIMEOUT_S)


def shared(consumers: list[Consumer]) -> bool:
    return share_exactly(consumers, EVERY)


def test_the_coordinator_dying_mid_join_and_coming_back_leaves_each_partition_owned_once(coordinator, made):
    before = set(heartbeat_threads())
    a, b = member(coordinator, made, "a"), member(coordinator, made, "b")
    for consumer in (a, b):
        consumer.subscribe([TOPIC])
    poll_until([a, b], lambda: shared([a, b]), "a and b sharing")
    c = member(coordinator, made, "c")
    c.subscribe([TOPIC])
    poll_until([c], lambda: c._group is not None and c._group.joining and c._group.member_id != "", "c joining")
    coordinator.stop()  # in the middle of the rebalance c started
    for consumer in (a, b, c):
        consumer.poll(timeout_ms=300)
    coordinator.start()
    everyone = [a, b, c]
    poll_until(everyone, lambda: shared(everyone), "the three sharing after the coordinator came back")
    generations = {consumer.consumer_group_metadata().generation_id for consumer in everyone}
    assert len(generations) == 1, generations
    described = coordinator.broker.group_coordinator.describe_groups([GROUP])[0]  # type: ignore[union-attr]
    assert described.state == "Stable" and len(described.members) == 3, described
    for consumer in everyone:
        consumer.close()
    assert set(heartbeat_threads()) <= before, heartbeat_threads()


def test_closing_during_a_join_or_while_the_coordinator_is_down_stops_the_heartbeat_thread(coordinator, made):
    before = set(heartbeat_threads())
    a = member(coordinator, made, "a")
    a.subscribe([TOPIC])
    poll_until([a], lambda: a._group is not None and a._group.joining, "a joining")
    assert "a-heartbeat" in heartbeat_threads()
    a.close()  # its JoinGroup is parked in the coordinator's initial rebalance delay
    b = member(coordinator, made, "b")
    b.subscribe([TOPIC])
    poll_until([b], lambda: b.assignment() == EVERY, "b alone")
    coordinator.stop()
    b.close()  # the coordinator is gone: the commit and the LeaveGroup give up after their timeouts
    a.close()
    b.close()
    assert set(heartbeat_threads()) <= before, heartbeat_threads()


class RevokeFails:
    def on_partitions_revoked(self, partitions: set[tuple[str, int]]) -> None:
        raise RuntimeError(f"cannot revoke {sorted(partitions)}")

    def on_partitions_assigned(self, partitions: set[tuple[str, int]]) -> None:
        pass


def test_a_listener_raising_at_close_is_raised_after_the_member_left_and_its_thread_stopped(coordinator, made):
    before = set(heartbeat_threads())
    a, b = member(coordinator, made, "a"), member(coordinator, made, "b")
    a.subscribe([TOPIC], RevokeFails())
    b.subscribe([TOPIC])
    poll_until([a, b], lambda: shared([a, b]), "a and b sharing")
    with pytest.raises(RuntimeError, match="cannot revoke"):
        a.close()
    assert set(heartbeat_threads()) <= before | {"b-heartbeat"}, heartbeat_threads()
    poll_until([b], lambda: b.assignment() == EVERY, "b taking a's partitions after a's LeaveGroup")
