"""Replication through real processes and real clients: a ZooKeeper and three ``idemcore serve`` brokers
(LocalCluster with its recommended settings: replication factor 3, min.insync.replicas 2, a 6 s ZooKeeper
session), brokers SIGKILLed and restarted under confluent-kafka, kafka-python and aiokafka, and the replicas'
segment files compared batch by batch once they have caught up. One cluster for the module; each test starts
with every broker running and every replica in sync."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from .cluster_harness import cluster_fixture, needs_zookeeper
from .replication_checks import (
    QUIET,
    admin,
    assert_replicas_equal,
    create_topic,
    high_watermark,
    partition_state,
    read_partition,
    wait_in_sync,
    wait_leader,
)

pytestmark = needs_zookeeper

cluster = cluster_fixture(3)


@pytest.fixture
def client(cluster):
    """An AdminClient of a cluster whose brokers all run and whose replicas are all in sync (a test before may
    have left one down)."""
    for n in cluster.broker_ids:
        if cluster.broker(n).pid is None:
            cluster.start(n)
    admin_client = admin(cluster)
    wait_in_sync(admin_client)
    return admin_client


def test_idempotent_producer_across_a_sigkill_of_the_leader_writes_each_acked_record_once_where_acked(
        cluster, client):
    create_topic(client, "failover", 1, 3)
    leader = partition_state(client, "failover").leader
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60_000, **QUIET})
    acked: dict[bytes, int] = {}
    failed: list[str] = []

    def delivered(err, msg):
        if err is not None:
            failed.append(f"{msg.value()!r}: {err}")
        else:
            acked[msg.value()] = msg.offset()

    total, killed_after, unacked_at_kill = 9000, None, 0
    started = time.monotonic()
    for i in range(total):
        producer.produce("failover", value=str(i).encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        if i % 50 == 0:  # paced at 3000 records/s: the kill lands while records are queued and in flight
            time.sleep(max(0.0, started + i / 3000 - time.monotonic()))
        if killed_after is None and len(acked) >= total // 3:
            killed_after, unacked_at_kill = len(acked), len(producer)
            cluster.kill(leader, signal.SIGKILL)  # in-flight batches are retried to the new leader
    assert producer.flush(90) == 0, "records still unacknowledged after 90 s"
    assert killed_after is not None and unacked_at_kill > 0, (killed_after, unacked_at_kill)
    assert failed == []
    new_leader = wait_leader(client, "failover", not_on=[leader]).leader

    end = high_watermark(cluster.bootstrap_servers, "failover")
    records = read_partition(cluster.bootstrap_servers, "failover", 0, end)
    values = [value for _, value in records]
    duplicates = [value for value, count in Counter(values).items() if count > 1]
    assert duplicates == [] and end == total
    assert records == [(offset, value) for value, offset in sorted(acked.items(), key=lambda item: item[1])]
    assert values == [str(i).encode() for i in range(total)]  # in the order produced

    cluster.start(leader)
    wait_in_sync(client, ["failover"])
    batches = assert_replicas_equal(cluster, "failover", 0, cluster.broker_ids, high_watermark(
        cluster.bootstrap_servers, "failover"))
    epochs = sorted({batch.leader_epoch for batch in batches})
    assert len(epochs) >= 2, epochs  # batches of the first leader and of its successor
    assert new_leader != leader
