"""The consumer group protocol of KIP-848 against :class:`~idemcore.broker.server.Server` on a free loopback port,
with librdkafka (confluent-kafka) consumers of ``group.protocol=consumer``: two and three members share a
4-partition topic exactly (with the server assignors ``uniform`` and ``range``), read every record once, commit
their offsets with their member epochs, and when one closes the others take its partitions; a subscription change
brings a second topic; a regex subscription is resolved by the coordinator; a static member comes back to its
partitions; a member the coordinator forgot rejoins; AdminClient describes the group (ConsumerGroupDescribe), with each
member's client id and host."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from idemcore import Broker
from idemcore.broker.server import Server
from tests.served_groups import closing, partitions, poll_members_until, served_broker

TOPIC = "t"
PARTITIONS = 4
GROUP = "next-gen"
TIMEOUT_S = 40
RECORDS_PER_PARTITION = 5


def poll_until(members: list[Any], done: Callable[[], bool], received: list[bytes]) -> None:
    poll_members_until(members, done, TIMEOUT_S, received)


@pytest.fixture
def server() -> Iterator[Server]:
    with served_broker({TOPIC: PARTITIONS}, heartbeat_interval_ms=200) as served:
        yield served


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    closing(clients)


def consumer(server: Server, opened: list[Any], assignor: str) -> Any:
    made = confluent_kafka.Consumer({
        "bootstrap.servers": server.bootstrap, "client.id": f"{assignor}-{len(opened)}", "group.id": GROUP,
        "group.protocol": "consumer",
        "group.remote.assignor": assignor, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 300,
        "topic.metadata.refresh.interval.ms": 1_000})
    opened.append(made)
    made.subscribe([TOPIC])
    return made


def exactly_shared(members: list[Any]) -> bool:
    held = [partitions(m) for m in members]
    return all(held) and sum(len(h) for h in held) == PARTITIONS and set().union(*held) == set(range(PARTITIONS))


@pytest.mark.parametrize(("assignor", "count"), [("uniform", 2), ("range", 2), ("uniform", 3), ("range", 3)])
def test_consumers_share_the_partitions_commit_and_the_rest_take_over(server, opened, assignor, count):
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap})
    everything = set()
    for partition in range(PARTITIONS):
        for k in range(RECORDS_PER_PARTITION):
            value = f"record-{partition}-{k}".encode()
            everything.add(value)
            producer.produce(TOPIC, value, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0

    members = [consumer(server, opened, assignor) for _ in range(count)]
    received: list[bytes] = []
    poll_until(members, lambda: exactly_shared(members), received)
    group = server.broker.consumer_groups.groups[GROUP]
    assert len(group.members) == count and group.assignor_name == assignor
    # The coordinator's view agrees with the clients': every partition owned by exactly one member.
    owned = [(t, p) for m in group.members.values() for t, parts in m.assigned.items() for p in parts]
    assert sorted(owned) == [(TOPIC, p) for p in range(PARTITIONS)]

    poll_until(members, lambda: set(received) == everything, received)
    assert len(received) == len(everything)  # every record once: no partition was read by two members

    def committed() -> dict[int, int]:
        _, offsets = server.broker.group_coordinator.offset_fetch(GROUP, [(TOPIC, p) for p in range(PARTITIONS)])
        return {p: offsets[(TOPIC, p)].offset for p in range(PARTITIONS)}

    # The auto commits carry the member epochs and are accepted.
    poll_until(members, lambda: committed() == dict.fromkeys(range(PARTITIONS), RECORDS_PER_PARTITION), received)

    epoch = group.group_epoch
    members[-1].close()  # a leaving heartbeat (epoch -1): the others take its partitions at once
    rest = members[:-1]
    poll_until(rest, lambda: exactly_shared(rest), received)
    assert len(group.members) == count - 1 and group.group_epoch > epoch
    assert len(received) == len(everything)  # committed offsets: the partitions taken over are not read again


def test_admin_client_describes_the_consumer_group(server, opened):
    members = [consumer(server, opened, "uniform") for _ in range(2)]
    poll_until(members, lambda: exactly_shared(members), [])
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    described = admin.describe_consumer_groups([GROUP])[GROUP].result(TIMEOUT_S)
    assert described.group_id == GROUP
    assert str(described.state).upper().endswith("STABLE"), described.state
    assert len(described.members) == 2
    assigned = sorted(tp.partition for m in described.members for tp in m.assignment.topic_partitions)
    assert assigned == list(range(PARTITIONS))
    group = server.broker.consumer_groups.groups[GROUP]
    assert {m.member_id for m in described.members} == set(group.members)
    # From the request header and the connection (Kafka shows the address as /<host>).
    assert sorted(m.client_id for m in described.members) == ["uniform-0", "uniform-1"]
    assert {m.host for m in described.members} == {"/127.0.0.1"}


def test_a_regex_subscription_is_resolved_by_the_coordinator(server, opened):
    made = confluent_kafka.Consumer({
        "bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
        "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1_000})
    opened.append(made)
    made.subscribe(["^t.*"])
    poll_until([made], lambda: partitions(made) == set(range(PARTITIONS)), [])
    (member,) = server.broker.consumer_groups.groups[GROUP].members.values()
    # librdkafka sends its patterns as one expression (here "(^t.*)") and no names: the coordinator matched it.
    assert member.subscribed_topic_regex is not None and "^t.*" in member.subscribed_topic_regex
    assert member.subscribed_topic_names == ()


def test_a_static_member_closes_and_its_instance_comes_back_to_the_same_partitions(server, opened):
    def static(instance: str) -> Any:
        made = confluent_kafka.Consumer({
            "bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
            "group.instance.id": instance, "auto.offset.reset": "earliest"})
        opened.append(made)
        made.subscribe([TOPIC])
        return made

    first, other = static("box-1"), consumer(server, opened, "uniform")
    poll_until([first, other], lambda: exactly_shared([first, other]), [])
    held, epoch = partitions(first), server.broker.consumer_groups.groups[GROUP].group_epoch
    first.close()  # a static member's leave (epoch -2): it keeps its partitions for its session
    group = server.broker.consumer_groups.groups[GROUP]
    poll_until([other], lambda: len(group.members) == 2 and any(m.member_epoch == -2
                                                               for m in group.members.values()), [])
    again = static("box-1")
    poll_until([again, other], lambda: partitions(again) == held and exactly_shared([again, other]), [])
    assert group.group_epoch == epoch  # no rebalance: the instance took its partitions back
    assert len(group.members) == 2


def test_a_member_the_coordinator_forgot_rejoins(server, opened):
    """Membership is in memory: a restarted broker has no group. Its members are told they are unknown and rejoin
    (Kafka's GROUP_ID_NOT_FOUND there would be fatal to librdkafka)."""
    first = consumer(server, opened, "uniform")
    poll_until([first], lambda: partitions(first) == set(range(PARTITIONS)), [])
    groups = server.broker.consumer_groups.groups
    groups.clear()  # what a restart leaves
    poll_until([first], lambda: GROUP in groups and len(groups[GROUP].members) == 1, [])
    poll_until([first], lambda: partitions(first) == set(range(PARTITIONS))
               and groups[GROUP].state == "Stable", [])


def test_a_subscription_change_brings_a_second_topic_to_the_member_that_asks():
    broker = Broker({TOPIC: PARTITIONS, "u": 2}, offsets_topic_partitions=3)
    broker.consumer_groups.heartbeat_interval_ms = 200
    members: list[Any] = []
    try:
        with Server(broker, housekeeping_ms=100) as served:
            first, second = consumer(served, members, "uniform"), consumer(served, members, "uniform")
            poll_until([first, second], lambda: exactly_shared([first, second]), [])
            epoch = broker.consumer_groups.groups[GROUP].group_epoch
            second.subscribe([TOPIC, "u"])

            def held(member: Any) -> set[tuple[str, int]]:
                return {(tp.topic, tp.partition) for tp in member.assignment()}

            def settled() -> bool:
                mine, theirs = held(first), held(second)
                return not mine & theirs and {("u", 0), ("u", 1)} <= theirs and all(t == TOPIC for t, _ in mine) \
                    and mine | theirs == {(TOPIC, p) for p in range(PARTITIONS)} | {("u", 0), ("u", 1)}

            try:
                poll_until([first, second], settled, [])
                assert broker.consumer_groups.groups[GROUP].group_epoch > epoch
            finally:
                for member in members:
                    member.close()
    finally:
        broker.close()
