"""Static members (``group.instance.id``) of real clients across a coordinator restart: two confluent-kafka
(librdkafka) consumers share a 4-partition topic through :class:`~idemcore.broker.server.Server` over a log
directory; the server and its broker are stopped and started again on the same directory and port mid-group. The
reloaded coordinator has the group Stable at the same generation, the members heartbeat into it (three renewals
each) and keep the same partitions: no revoke or assign callback fires after the restart. Records produced before
and after the restart are each read once: the members keep their positions, which librdkafka validates with
OffsetForLeaderEpoch after reconnecting (KIP-320; a broker alone answers it too)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from idemcore import Broker
from idemcore.broker.group.membership import GroupState
from idemcore.broker.server import Server
from tests.served_groups import closing, partitions, poll_members_until

TOPIC = "t"
PARTITIONS = 4
GROUP = "static-consumers"
TIMEOUT_S = 60


def poll_until(members: list[Any], done: Callable[[], bool], received: list[bytes] | None = None) -> None:
    # A restarted coordinator makes librdkafka report transport errors: passed over.
    poll_members_until(members, done, TIMEOUT_S, received, errors_fail=False)


class Served:
    """A broker over ``data_dir`` behind a server on ``port`` (0: any), timers every 100 ms."""

    def __init__(self, data_dir: Path, port: int = 0) -> None:
        self.broker = Broker({TOPIC: PARTITIONS}, data_dir=data_dir, offsets_topic_partitions=3)
        self.server = Server(self.broker, port=port, housekeeping_ms=100).start()

    def stop(self) -> None:
        self.server.stop()
        self.broker.close()


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    closing(clients)


def consumer(bootstrap: str, instance: str, events: list[tuple[str, str, frozenset[int]]],
             opened: list[Any]) -> Any:
    made = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": GROUP, "group.instance.id": instance,
        "client.id": f"app-{instance}", "auto.offset.reset": "earliest", "session.timeout.ms": 30_000,
        "heartbeat.interval.ms": 300, "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1_000,
        "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
    opened.append(made)

    def assigned(_: Any, partitions: list[Any]) -> None:
        events.append(("assign", instance, frozenset(tp.partition for tp in partitions)))

    def revoked(_: Any, partitions: list[Any]) -> None:
        events.append(("revoke", instance, frozenset(tp.partition for tp in partitions)))

    made.subscribe([TOPIC], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    return made


def produce(bootstrap: str, prefix: str, count: int = 20) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in range(count):
        producer.produce(TOPIC, b"%s-%d" % (prefix.encode(), n), partition=n % PARTITIONS)
    assert producer.flush(30) == 0


def test_static_members_keep_their_assignment_across_a_coordinator_restart(tmp_path, opened):
    served = Served(tmp_path)
    port = served.server.address[1]
    bootstrap = served.server.bootstrap
    try:
        events: list[tuple[str, str, frozenset[int]]] = []
        first, second = consumer(bootstrap, "a", events, opened), consumer(bootstrap, "b", events, opened)
        members = [first, second]
        received: list[bytes] = []

        def shared() -> bool:
            mine, theirs = partitions(first), partitions(second)
            return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == set(range(PARTITIONS))

        poll_until(members, shared, received)
        produce(bootstrap, "before")
        poll_until(members, lambda: len(received) >= 20, received)
        group = served.broker.group_coordinator.classic_groups.groups[GROUP]
        generation = group.generation_id
        instances = {m.group_instance_id: m.member_id for m in group.members.values()}
        assert set(instances) == {"a", "b"}
        assert all(member_id.startswith(f"{instance}-") for instance, member_id in instances.items())
        # The request header's client id and the connection's host reach the members (DescribeGroups shows them).
        assert {(m.client_id, m.client_host) for m in group.members.values()} == \
            {("app-a", "/127.0.0.1"), ("app-b", "/127.0.0.1")}
        assignment = (partitions(first), partitions(second))
    finally:
        served.stop()
    events_before = list(events)

    served = Served(tmp_path, port)  # the same directory and port: the clients reconnect to it
    try:
        coordinator = served.broker.group_coordinator
        group = coordinator.classic_groups.groups[GROUP]
        assert (group.state, group.generation_id) == (GroupState.STABLE, generation)
        assert group.static_members == instances
        renewals = {member_id: [m.heartbeat.deadline] for member_id, m in group.members.items()
                    if m.heartbeat is not None}

        def heartbeats_heard() -> bool:  # each member's session renewed three times by heartbeats after the load
            now = coordinator.classic_groups.groups[GROUP].members
            for member_id, seen in renewals.items():
                timer = now[member_id].heartbeat if member_id in now else None
                if timer is not None and timer.deadline > seen[-1]:
                    seen.append(timer.deadline)
            return set(now) == set(renewals) and all(len(seen) > 3 for seen in renewals.values())

        produce(served.server.bootstrap, "after")
        poll_until(members, lambda: heartbeats_heard() and len(received) >= 40, received)
        assert sorted(received) == sorted([b"before-%d" % n for n in range(20)] + [b"after-%d" % n for n in range(20)])
        described = coordinator.describe_groups([GROUP])[0]
        assert (described.state, {m.group_instance_id for m in described.members}) == ("Stable", {"a", "b"})
        assert coordinator.classic_groups.groups[GROUP].generation_id == generation
        assert (partitions(first), partitions(second)) == assignment
        assert events == events_before  # no revoke, no assign after the restart
    finally:
        for member in members:
            member.close()
        served.stop()
