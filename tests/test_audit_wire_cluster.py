"""`audit kafka://` of a three-broker cluster (ZooKeeper and three `idemcore serve`, LocalCluster): each partition
is fetched from its own leader, and a leader SIGKILLed before the audit means new metadata and the new leader."""

from __future__ import annotations

from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from idemcore.audit.wire import audit_cluster
from idemcore.audit.wire_fetch import ClusterReader, parse_bootstrap

from .cluster_harness import cluster_fixture

cluster = cluster_fixture(3)


def test_each_partition_is_read_from_its_leader_and_a_dead_leader_is_replaced(cluster):
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic("spread", 6, 3)]).values():
        future.result(30)
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                              "linger.ms": 2, "batch.size": 1500, "log_level": 0})
    for i in range(3000):
        producer.produce("spread", value=b"v" * 80, partition=i % 6)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    with ClusterReader(parse_bootstrap("kafka://" + bootstrap)) as reader:
        reader.partitions(["spread"])
        leaders = {p: reader.leaders[("spread", p)] for p in range(6)}
    assert len(set(leaders.values())) > 1  # a broker that does not lead a partition answers NOT_LEADER for it
    before = audit_cluster("kafka://" + bootstrap, topics=["spread"])
    assert before.finding_counts() == {} and sum(before.partitions.column("records").to_pylist()) == 3000
    victim = cluster.broker_ids.index(leaders[0])  # the leader of partition 0, by its place in the cluster
    cluster.kill(victim)
    try:
        survivors = ",".join(f"127.0.0.1:{cluster.broker(n).port}" for n in range(3) if n != victim)
        after = audit_cluster("kafka://" + survivors, topics=["spread"])
    finally:
        cluster.start(victim)
    assert after.finding_counts() == {}
    assert after.partitions.equals(before.partitions)
    assert after.batches == before.batches
