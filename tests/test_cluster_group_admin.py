"""The group admin calls in a cluster (a ZooKeeper and three ``idemcore serve`` brokers, LocalCluster's recommended
settings): each broker answers for the groups of the ``__consumer_offsets`` partitions it leads, so confluent-kafka's
AdminClient lists the groups of every coordinator (it asks each broker), describes and deletes each at its own
coordinator (and so does ``idemcore groups``), and a delete it was told succeeded stays done after that coordinator
is SIGKILLed (DeleteGroups' tombstones are answered once replicated, as offset commits are)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

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

    # idemcore's own `groups` command finds the same: every broker's groups, each described at its coordinator.
    cli = [sys.executable, "-m", "idemcore.cli", "groups"]
    bootstrap = ["--bootstrap", cluster.bootstrap_servers, "--json"]
    shown = subprocess.run([*cli, "list", *bootstrap], capture_output=True, text=True, timeout=TIMEOUT_S * 2)
    assert shown.returncode == 0, shown.stderr
    assert {g["group_id"]: g["coordinator"] for g in json.loads(shown.stdout)} == coordinators
    shown = subprocess.run([*cli, "describe", *GROUPS, *bootstrap], capture_output=True, text=True,
                           timeout=TIMEOUT_S * 2)
    assert shown.returncode == 0, shown.stderr
    assert [(g["group_id"], g["state"], [(o["partition"], o["offset"]) for o in g["offsets"]])
            for g in json.loads(shown.stdout)] == [(g, "Empty", [(0, n + 1), (1, n + 2)]) for n, g in enumerate(GROUPS)]

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
