"""The heartbeat thread of idemcore's Consumer over TCP (TcpTransport is thread-safe) against
:class:`~idemcore.broker.server.Server`: a member that does not poll for longer than its session timeout stays in the
group (the thread heartbeats for it); a member that does not poll within ``max_poll_interval_ms`` leaves the group
(the thread sends LeaveGroup), its partitions go to the others, and at its next poll it finds them lost and joins
again; a static member's close leaves no LeaveGroup (its partitions wait for it)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import pytest

from idemcore.broker.server import Server
from idemcore.client.consumer import Consumer
from idemcore.net.tcp import TcpTransport
from idemcore.protocol.constants import TopicPartition
from tests.served_groups import close_consumers, poll_consumers_until, served_broker, share_exactly

TOPIC = "t"
PARTITIONS = 4
GROUP = "threaded"
TIMEOUT_S = 40
EVERY = {(TOPIC, p) for p in range(PARTITIONS)}


@pytest.fixture
def server() -> Iterator[Server]:
    with served_broker({TOPIC: PARTITIONS}) as served:
        yield served


@pytest.fixture
def made() -> Iterator[list[Consumer]]:
    consumers: list[Consumer] = []
    yield consumers
    close_consumers(consumers)


class Lost:
    def __init__(self) -> None:
        self.lost: list[set[TopicPartition]] = []

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.lost.append(partitions)


def member(server: Server, made: list[Consumer], name: str, **settings: object) -> Consumer:
    consumer = Consumer(TcpTransport(server.bootstrap, client_id=name), group_id=GROUP, client_id=name,
                        heartbeat_interval_ms=200, **settings)  # type: ignore[arg-type]
    made.append(consumer)
    return consumer


poll_until = functools.partial(poll_consumers_until, timeout_s=TIMEOUT_S)


def shared(consumers: list[Consumer]) -> bool:
    return share_exactly(consumers, EVERY)


def test_the_heartbeat_thread_keeps_a_member_that_does_not_poll_for_longer_than_its_session(server, made):
    a = member(server, made, "a", session_timeout_ms=6_000)  # the broker's smallest (Kafka's default minimum)
    b = member(server, made, "b", session_timeout_ms=6_000)
    for consumer in (a, b):
        consumer.subscribe([TOPIC])
    poll_until([a, b], lambda: shared([a, b]), "sharing")
    generation, held = a.consumer_group_metadata(), b.assignment()
    end = time.monotonic() + 8  # more than a's session without a poll from a
    while time.monotonic() < end:
        b.poll(timeout_ms=50)
    assert b.assignment() == held
    a.poll(timeout_ms=0)
    assert a.consumer_group_metadata() == generation


def test_a_member_that_does_not_poll_in_time_leaves_and_finds_its_partitions_lost_at_its_next_poll(server, made):
    listener = Lost()
    # A session far longer than the test's wait: only the poll timeout can make a leave the group in time.
    a = member(server, made, "a", session_timeout_ms=60_000, max_poll_interval_ms=1_500)
    b = member(server, made, "b", session_timeout_ms=60_000, max_poll_interval_ms=60_000)
    a.subscribe([TOPIC], listener)
    b.subscribe([TOPIC])
    poll_until([a, b], lambda: shared([a, b]), "sharing")
    held = a.assignment()
    poll_until([b], lambda: b.assignment() == EVERY, "b taking every partition after a's poll timeout")
    assert listener.lost == []  # told in a's own poll, not from the heartbeat thread
    poll_until([a, b], lambda: shared([a, b]), "a back in the group")
    assert listener.lost == [held]


def test_a_static_member_closes_without_leaving_the_group(server, made):
    a = member(server, made, "a", session_timeout_ms=6_000, group_instance_id="a-1")
    b = member(server, made, "b", session_timeout_ms=6_000)
    for consumer in (a, b):
        consumer.subscribe([TOPIC])
    poll_until([a, b], lambda: shared([a, b]), "sharing")
    held = b.assignment()
    made.remove(a)
    transport = a.transport
    a.close()
    transport.close()  # type: ignore[attr-defined]
    end = time.monotonic() + 2  # well within a's session: no rebalance, b keeps its share
    while time.monotonic() < end:
        b.poll(timeout_ms=50)
    assert b.assignment() == held
    generation = b.consumer_group_metadata().generation_id
    again = member(server, made, "a2", session_timeout_ms=6_000, group_instance_id="a-1")
    again.subscribe([TOPIC])
    poll_until([again, b], lambda: again.assignment() == EVERY - held, "the static member back with its share")
    assert again.consumer_group_metadata().generation_id == generation == b.consumer_group_metadata().generation_id
    assert b.assignment() == held


def test_a_pattern_subscription_over_tcp_matches_the_clusters_topics(server, made):
    a = member(server, made, "a", session_timeout_ms=6_000)
    a.subscribe(r"[st]")  # a string is a pattern, matched whole: "t", not "__consumer_offsets"
    poll_until([a], lambda: a.assignment() == EVERY, "a taking every partition of t")
    assert a.subscription() == {TOPIC}


class SlowAssigned:
    """A listener whose first on_partitions_assigned with partitions takes ``seconds``; it notes the member's
    generation then, and every revocation or loss after."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.consumer: Consumer | None = None
        self.generation: int | None = None
        self.taken: list[set[TopicPartition]] = []

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        if self.generation is not None:
            self.taken.append(partitions)

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.on_partitions_revoked(partitions)

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        if partitions and self.generation is None:
            assert self.consumer is not None
            self.generation = self.consumer.consumer_group_metadata().generation_id
            time.sleep(self.seconds)


def test_the_heartbeat_thread_heartbeats_while_a_listener_runs_longer_than_the_session(server, made):
    a = member(server, made, "a", session_timeout_ms=6_000)
    b = member(server, made, "b", session_timeout_ms=6_000)
    b.subscribe([TOPIC])
    poll_until([b], lambda: b.assignment() == EVERY, "b alone")
    listener = SlowAssigned(8)  # more than a's session without a poll
    listener.consumer = a
    a.subscribe([TOPIC], listener)
    poll_until([a, b], lambda: listener.generation is not None and shared([a, b]), "sharing, after a's listener")
    end = time.monotonic() + 3
    while time.monotonic() < end:  # the coordinator kept a through its listener: no rebalance follows
        for consumer in (a, b):
            consumer.poll(timeout_ms=50)
    assert listener.taken == []
    assert a.consumer_group_metadata().generation_id == listener.generation
    assert shared([a, b])
