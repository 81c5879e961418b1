"""The consumer-group admin calls (ListGroups, DescribeGroups, DeleteGroups, OffsetDelete) against
:class:`~idemcore.broker.server.Server` on a free loopback port, driven by real admin clients over a live group of
two confluent-kafka (librdkafka) consumers: confluent-kafka's ``AdminClient`` lists groups by state and type,
describes the members and their assignments, is refused NON_EMPTY_GROUP while the consumers are in the group and
deletes it (offsets and all) once they have left; kafka-python 3's ``KafkaAdminClient`` (whose calls are named
``list_groups``, ``describe_groups``, ``delete_groups`` and ``delete_group_offsets`` in 3.0) does the same and
deletes a group's offsets of a topic its members do not subscribe to (OffsetDelete), refused for one they do;
aiokafka's admin lists and describes the group."""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from idemcore.broker.server import Server
from tests.served_groups import closing, served_broker


def _required(module: str, package: str) -> Any:
    """The module, or a failure naming the package to install (these tests never skip)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} is missing ({exc}): pip install '{package}' (a test dependency in pyproject.toml)")


confluent_kafka = _required("confluent_kafka", "confluent-kafka>=2.3")
kafka = _required("kafka", "kafka-python>=3.0")
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402

TOPIC, OTHER = "t", "u"
PARTITIONS = 4
GROUP = "admins"
TIMEOUT_S = 40


@pytest.fixture
def server() -> Iterator[Server]:
    with served_broker({TOPIC: PARTITIONS, OTHER: 1}) as served:
        yield served


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    closing(clients)


def until(done: Callable[[], Any], what: str, members: list[Any] = ()) -> Any:  # type: ignore[assignment]
    """Poll ``members`` (their group calls run in poll) until ``done()`` gives a truthy value, for at most
    TIMEOUT_S; the value."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        value = done()
        if value:
            return value
        assert time.monotonic() < deadline, f"not {what} in {TIMEOUT_S} s"
        for member in members:
            member.poll(0.05)
        if not members:
            time.sleep(0.05)


def live_group(server: Server, opened: list[Any]) -> tuple[list[Any], set[tuple[str, int]]]:
    """Two librdkafka consumers of GROUP sharing TOPIC's partitions, each having committed an offset of its first
    partition (the partitions committed, with OTHER's partition 0 committed by the first)."""
    members = []
    for n in range(2):
        member = confluent_kafka.Consumer({
            "bootstrap.servers": server.bootstrap, "group.id": GROUP, "client.id": f"member-{n}",
            "session.timeout.ms": 6_000, "heartbeat.interval.ms": 300, "enable.auto.commit": False})
        opened.append(member)
        member.subscribe([TOPIC])
        members.append(member)

    def shared() -> bool:
        mine, theirs = ({tp.partition for tp in m.assignment()} for m in members)
        return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == set(range(PARTITIONS))

    until(shared, "sharing the partitions", members)
    firsts = set()
    for member in members:  # members commit as members (with their generation)
        first = member.assignment()[0]
        member.commit(offsets=[confluent_kafka.TopicPartition(TOPIC, first.partition, 5)], asynchronous=False)
        firsts.add((TOPIC, first.partition))
    members[0].commit(offsets=[confluent_kafka.TopicPartition(OTHER, 0, 3)], asynchronous=False)
    return members, firsts | {(OTHER, 0)}


def leave(members: list[Any], opened: list[Any]) -> None:
    for member in members:
        member.close()  # LeaveGroup
        opened.remove(member)


def result(future: Any) -> Any:
    return future.result(TIMEOUT_S)


def listed(admin: Any, **filters: Any) -> dict[str, Any]:
    return {g.group_id: g for g in result(admin.list_consumer_groups(request_timeout=TIMEOUT_S, **filters)).valid}


def committed(admin: Any, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as OffsetFetch answers (librdkafka lists -1001 for none)."""
    answer = result(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group])
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def test_confluent_admin_lists_describes_and_deletes_a_live_group(server, opened):
    members, commits = live_group(server, opened)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    # An offsets-only ("simple") group: committed by the admin, outside any membership.
    simple = ConsumerGroupTopicPartitions("simple", [confluent_kafka.TopicPartition(TOPIC, 0, 7)])
    assert result(admin.alter_consumer_group_offsets([simple])["simple"]).group_id == "simple"

    everything = listed(admin)
    assert set(everything) == {GROUP, "simple"}
    group = everything[GROUP]
    assert (group.state, group.type, group.is_simple_consumer_group) == (
        ConsumerGroupState.STABLE, ConsumerGroupType.CLASSIC, False)
    assert (everything["simple"].state, everything["simple"].is_simple_consumer_group) == (
        ConsumerGroupState.EMPTY, True)
    assert set(listed(admin, states={ConsumerGroupState.STABLE})) == {GROUP}  # ListGroups v4+ (KIP-518)
    assert set(listed(admin, states={ConsumerGroupState.EMPTY})) == {"simple"}
    assert set(listed(admin, types={ConsumerGroupType.CLASSIC})) == {GROUP, "simple"}  # v5+ (KIP-848)
    assert listed(admin, types={ConsumerGroupType.CONSUMER}) == {}

    described = admin.describe_consumer_groups([GROUP, "nobody"], request_timeout=TIMEOUT_S)
    description = result(described[GROUP])
    assert (description.state, description.partition_assignor, description.is_simple_consumer_group) == (
        ConsumerGroupState.STABLE, "range", False)
    by_member = {m.member_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
                 for m in description.members}
    owned = [{(tp.topic, tp.partition) for tp in member.assignment()} for member in members]
    assert sorted(by_member.values(), key=sorted) == sorted(owned, key=sorted)  # each member's own partitions
    # Kafka's member ids start with the client id; the host is the member's address as the broker saw it.
    assert sorted((m.client_id, m.member_id.split("-")[:2], m.host.lstrip("/")) for m in description.members) == [
        ("member-0", ["member", "0"], "127.0.0.1"), ("member-1", ["member", "1"], "127.0.0.1")]
    assert result(described["nobody"]).state == ConsumerGroupState.DEAD

    (refused,) = admin.delete_consumer_groups([GROUP], request_timeout=TIMEOUT_S).values()
    with pytest.raises(confluent_kafka.KafkaException) as error:
        result(refused)
    assert error.value.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP
    assert committed(admin, GROUP) == {tp: 5 if tp[0] == TOPIC else 3 for tp in commits}

    leave(members, opened)
    until(lambda: listed(admin, states={ConsumerGroupState.EMPTY}).keys() == {GROUP, "simple"}, "empty after leaving")
    deleted = admin.delete_consumer_groups([GROUP, "simple"], request_timeout=TIMEOUT_S)
    assert [result(f) for f in deleted.values()] == [None, None]
    assert committed(admin, GROUP) == {} and committed(admin, "simple") == {}
    assert listed(admin) == {}
    (gone,) = admin.delete_consumer_groups([GROUP], request_timeout=TIMEOUT_S).values()
    with pytest.raises(confluent_kafka.KafkaException) as error:
        result(gone)
    assert error.value.args[0].code() == confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND


def test_kafka_python_admin_lists_describes_deletes_offsets_and_the_group(server, opened):
    members, commits = live_group(server, opened)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
    opened.insert(0, admin)  # closed last: after the consumers

    assert admin.list_groups() == [{"group_id": GROUP, "protocol_type": "consumer", "group_state": "Stable",
                                    "group_type": "classic"}]
    assert admin.list_groups(states_filter=["Empty"]) == []
    (described,) = admin.describe_groups([GROUP]).values()
    assert (described["group_state"], described["protocol_type"], described["protocol_data"],
            described["error"]) == ("Stable", "consumer", "range", None)
    assigned = {m["member_id"]: {(a["topic"], p) for a in m["member_assignment"]["assigned_partitions"]
                                 for p in a["partitions"]} for m in described["members"]}
    owned = [{(tp.topic, tp.partition) for tp in member.assignment()} for member in members]
    assert sorted(assigned.values(), key=sorted) == sorted(owned, key=sorted)
    assert all(m["member_metadata"]["topics"] == [TOPIC] for m in described["members"])
    assert sorted((m["client_id"], m["client_host"].lstrip("/")) for m in described["members"]) == [
        ("member-0", "127.0.0.1"), ("member-1", "127.0.0.1")]

    # OffsetDelete: the topic the members subscribe to is refused, the other one's offset goes.
    answer = admin.delete_group_offsets(GROUP, [kafka.TopicPartition(TOPIC, 0), kafka.TopicPartition(OTHER, 0)])
    assert answer == {kafka.TopicPartition(TOPIC, 0): kafka.errors.GroupSubscribedToTopicError,
                      kafka.TopicPartition(OTHER, 0): kafka.errors.NoError}
    offsets = admin.list_group_offsets({GROUP: None})[GROUP]
    assert {(tp.topic, tp.partition) for tp in offsets} == commits - {(OTHER, 0)}

    assert admin.delete_groups([GROUP]) == {GROUP: "NonEmptyGroupError"}
    leave(members, opened)
    until(lambda: admin.list_groups(states_filter=["Empty"]), "empty after leaving")
    # The group is empty now: OffsetDelete takes the subscribed topic's offsets too.
    assert set(admin.delete_group_offsets(GROUP, [kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
               .values()) == {kafka.errors.NoError}
    assert admin.list_group_offsets({GROUP: None})[GROUP] == {}
    assert admin.delete_groups([GROUP]) == {GROUP: "OK"}
    assert admin.list_groups() == []
    assert admin.delete_groups([GROUP]) == {GROUP: "GroupIdNotFoundError"}


def test_aiokafka_admin_lists_and_describes_a_live_group(server, opened):
    """aiokafka 0.14's admin (ListGroups and DescribeGroups at its own, older versions; it has no DeleteGroups)."""
    aiokafka_admin = _required("aiokafka.admin", "aiokafka>=0.14")
    from idemcore.net.consumer_protocol import decode_assignment

    members, _ = live_group(server, opened)
    owned = sorted(sorted((tp.topic, tp.partition) for tp in member.assignment()) for member in members)

    async def ask() -> tuple[Any, Any]:
        admin = aiokafka_admin.AIOKafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            return await admin.list_consumer_groups(), await admin.describe_consumer_groups([GROUP])
        finally:
            await admin.close()

    groups, (described,) = asyncio.run(asyncio.wait_for(ask(), TIMEOUT_S))
    assert groups == [(GROUP, "consumer")]
    (group,) = described.groups
    error_code, group_id, state, protocol_type, protocol, group_members = group
    assert (error_code, group_id, state, protocol_type, protocol) == (0, GROUP, "Stable", "consumer", "range")
    assert sorted(sorted(decode_assignment(m[-1]).partitions) for m in group_members) == owned
