"""A secured cluster on one machine: three brokers that reach each other over a SASL_SSL listener and
authenticate to each other as a super user (``inter.broker.listener.name``, ``sasl.mechanism.inter.broker.protocol``),
SCRAM credentials and ACLs kept in ZooKeeper (made through one broker, honoured by all), and a SCRAM user's
idempotent producer and consumer across a SIGKILL of the partition's leader. The PLAINTEXT listener the cluster
keeps for its readiness probe serves ANONYMOUS, who may do nothing."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from idemcore.cluster import LocalCluster
from tests.replication_checks import create_topic, partition_state, wait_for, wait_in_sync, wait_leader
from tests.tls_certs import TestCA

QUIET = {"log_level": 0}
BROKER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
               'password="broker-secret" user_broker="broker-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, TestCA]]:
    directory = tmp_path_factory.mktemp("secured-cluster")
    ca = TestCA(directory)
    cert = ca.issue("brokers", server=True, O="idemcore tests", CN="localhost")
    overrides = {
        "inter.broker.listener.name": "SECURE", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.secure.plain.sasl.jaas.config": BROKER_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.path),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:admin"}
    with LocalCluster(3, directory, overrides=overrides, listeners={"SECURE": "SASL_SSL"}) as cluster:
        yield cluster, ca


def _secure(cluster: LocalCluster, ca: TestCA, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_of("SECURE"), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca.path), "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password, **QUIET}


def test_a_scram_user_produces_and_consumes_through_a_leader_kill(secured):
    cluster, ca = secured
    admin = AdminClient(_secure(cluster, ca, "PLAIN", "admin", "admin-secret"))
    # the credential and the ACLs go to ZooKeeper through whichever broker answers: every broker honours them
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          b"carol-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        assert future.result(30) is None
    topic, group = "secured", "carol-group"
    grants = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*", operation,
                         AclPermissionType.ALLOW)
              for operation in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
    grants.append(AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:carol", "*",
                             AclOperation.READ, AclPermissionType.ALLOW))
    grants.append(AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:carol", "*",
                             AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW))
    for future in admin.create_acls(grants).values():
        assert future.result(30) is None
    create_topic(admin, topic, 1, 3)  # its replicas follow their leader over the SASL_SSL listener, as User:broker
    leader = partition_state(admin, topic).leader

    carol = _secure(cluster, ca, "SCRAM-SHA-512", "carol", "carol-secret")
    acked: list[bytes] = []
    failed: list[str] = []
    producer = Producer({**carol, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60_000})

    def delivered(error: Any, message: Any) -> None:
        (failed.append(str(error)) if error is not None else acked.append(message.value()))

    total, killed = 3000, False
    for i in range(total):
        producer.produce(topic, str(i).encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        if i % 100 == 0:
            time.sleep(0.02)
        if not killed and len(acked) >= total // 10:
            cluster.kill(leader, signal.SIGKILL)  # in-flight batches are retried to the new leader
            killed = True
    if not killed:  # a loaded machine acknowledged too slowly to kill within the loop: kill with records queued
        wait_for("the first acknowledgements", lambda: producer.poll(0.1) is not None and len(acked) > 0)
        cluster.kill(leader, signal.SIGKILL)
        killed = True
    assert producer.flush(90) == 0 and failed == []
    assert wait_leader(admin, topic, not_on=[leader]).leader != leader
    # The group's __consumer_offsets is made at its first FindCoordinator with 3 replicas: all brokers up again.
    cluster.start(leader)
    wait_in_sync(admin, [topic])

    consumer = Consumer({**carol, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < total and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value())
    wait_for("carol's offset committed (READ on the group)", lambda: _committed(consumer))
    consumer.close()
    assert [value for value, count in Counter(values).items() if count > 1] == []
    assert values == [str(i).encode() for i in range(total)]


def _committed(consumer: Consumer) -> bool:
    try:
        consumer.commit(asynchronous=False)
        return True
    except KafkaException as error:
        if error.args[0].retriable() or error.args[0].code() == KafkaError._WAIT_COORD:
            return False
        raise


def test_anonymous_on_the_plaintext_listener_may_do_nothing(secured):
    cluster, _ = secured
    anonymous = {"bootstrap.servers": cluster.bootstrap_servers, **QUIET}
    metadata = AdminClient(anonymous).list_topics(timeout=20)
    assert metadata.brokers and not metadata.topics  # no DESCRIBE on any topic: none listed
    errors: list[KafkaError] = []
    producer = Producer({**anonymous, "message.timeout.ms": 5000})
    producer.produce("secured", b"x", on_delivery=lambda error, _: errors.append(error))
    producer.flush(15)
    assert errors and errors[0] is not None
    assert errors[0].code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._MSG_TIMED_OUT,
                                KafkaError.UNKNOWN_TOPIC_OR_PART)



def test_a_transaction_commits_with_markers_sent_between_brokers_as_the_super_user(secured):
    """The transaction coordinator writes its markers to the partitions' leaders over the SASL_SSL listener as
    User:broker (WriteTxnMarkers needs CLUSTER_ACTION); carol needs WRITE on her transactional id."""
    cluster, ca = secured
    admin = AdminClient(_secure(cluster, ca, "PLAIN", "admin", "admin-secret"))
    topic, txn = "secured-txn", "carol-txn"
    grants = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*", operation,
                         AclPermissionType.ALLOW) for operation in (AclOperation.WRITE, AclOperation.READ)]
    grants.append(AclBinding(ResourceType.TRANSACTIONAL_ID, txn, ResourcePatternType.LITERAL, "User:carol", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW))
    for future in admin.create_acls(grants).values():
        assert future.result(30) is None
    create_topic(admin, topic, 3, 3)
    carol = _secure(cluster, ca, "SCRAM-SHA-512", "carol", "carol-secret")
    producer = Producer({**carol, "transactional.id": txn, "transaction.timeout.ms": 30_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, str(i).encode(), partition=i % 3)
    producer.commit_transaction(60)
    consumer = Consumer({**carol, "group.id": "unused", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < 30 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert sorted(values, key=int) == [str(i).encode() for i in range(30)]  # committed: markers reached all three

    stranger = Producer({**carol, "transactional.id": "not-carols", "log_level": 0})
    with pytest.raises(KafkaException) as refused:
        stranger.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
