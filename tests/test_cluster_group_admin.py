"""The group admin calls in a cluster (a ZooKeeper and three ``idemcore serve`` brokers, LocalCluster's recommended
settings): each broker answers for the groups of the ``__consumer_offsets`` partitions it leads, so confluent-kafka's
AdminClient lists the groups of every coordinator (it asks each broker), describes and deletes each at its own
coordinator, and a delete it was told succeeded stays done after that coordinator is SIGKILLed (DeleteGroups'
tombstones are answered once replicated, as offset commits are)."""

from __future__ import annotations

import signal

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition

from .cluster_harness import cluster_fixture
from .replication_checks import admin, create_topic, wait_for, wait_in_sync

cluster = cluster_fixture(3)
TOPIC = "admin-groups"
GROUPS = [f"group-{n}" for n in range(12)]
TIMEOUT_S = 30


def committed(client, group: str) -> dict[int, int]:
    answer = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT_S)
    return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def listed(client) -> set[str]:
    """Every broker's groups together (a broker that does not answer within 10 s is left out: librdkafka gives the
    others' and an error for it, before the future's own deadline)."""
    return {g.group_id for g in client.list_consumer_groups(request_timeout=10).result(TIMEOUT_S).valid}


def test_groups_are_answered_by_their_own_coordinators_and_a_delete_survives_its_coordinator(cluster):
    client = admin(cluster)
    create_topic(client, TOPIC, partitions=2)
    for n, group in enumerate(GROUPS):  # offsets-only groups, each committed at its coordinator
        offsets = [TopicPartition(TOPIC, 0, n + 1), TopicPartition(TOPIC, 1, n + 2)]
        client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[group].result(TIMEOUT_S)
    wait_in_sync(client)

    assert listed(client) == set(GROUPS)  # ListGroups of every broker, together
    described = {g: f.result(TIMEOUT_S) for g, f in
                 client.describe_consumer_groups(GROUPS, request_timeout=TIMEOUT_S).items()}
    assert {d.state for d in described.values()} == {ConsumerGroupState.EMPTY}
    coordinators = {g: d.coordinator.id for g, d in described.items()}
    assert len(set(coordinators.values())) > 1, f"all groups on one coordinator: {coordinators}"

    doomed = GROUPS[::2]
    results = client.delete_consumer_groups(doomed, request_timeout=TIMEOUT_S)
    assert [f.result(TIMEOUT_S) for f in results.values()] == [None] * len(doomed)
    assert listed(client) == set(GROUPS) - set(doomed)

    # The coordinator of a deleted group dies at once: the group's new coordinator must not bring it back.
    victim = coordinators[doomed[0]]
    cluster.kill(victim, signal.SIGKILL)
    try:
        survivors = [g for g in GROUPS if g not in doomed]
        wait_for("every group answered by a live coordinator",
                 lambda: listed(client) == set(survivors) or None, timeout_s=60)
        for group in doomed:
            assert committed(client, group) == {}, group
        for group in survivors:
            n = GROUPS.index(group)
            assert committed(client, group) == {0: n + 1, 1: n + 2}, group
    finally:
        cluster.start(victim)
    wait_in_sync(client)
