"""KIP-664's admin APIs against :class:`~idemcore.broker.server.Server` on a free loopback port, with real
clients: confluent-kafka (librdkafka) opens a transaction and leaves it open, kafka-python 3's
``KafkaAdminClient`` lists and describes it and the producers of its partitions (confluent-kafka's AdminClient has
none of the three calls in 2.16), and finds it hanging."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin._transactions import TransactionState
from kafka.errors import TransactionalIdNotFoundError

from idemcore import Broker
from idemcore.broker.server import Server

TOPIC = "t"
TIMEOUT_S = 20


@pytest.fixture
def server() -> Iterator[Server]:
    """A served broker (in memory)."""
    broker = Broker({TOPIC: 2}, transaction_state_partitions=3, offsets_topic_partitions=3)
    try:
        with Server(broker) as served:
            yield served
    finally:
        broker.close()


@pytest.fixture
def opened(server: Server) -> Iterator[list[Any]]:
    """Clients to close before the server stops (librdkafka otherwise keeps reconnecting to a closed port)."""
    clients: list[Any] = []
    yield clients
    for client in reversed(clients):
        client.close()


def librdkafka_producer(server: Server, opened: list[Any], **config: Any) -> Any:
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5, **config})
    opened.append(producer)
    return producer


def delivered(producer: Any, topic: str, value: bytes, partition: int) -> None:
    errors: list[Any] = []
    producer.produce(topic, value, partition=partition, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == [None]


def test_an_open_transaction_is_listed_described_and_found_hanging(server, opened):
    idempotent = librdkafka_producer(server, opened, **{"enable.idempotence": True})
    delivered(idempotent, TOPIC, b"plain", 0)
    transactional = librdkafka_producer(server, opened, **{"transactional.id": "hanging-tx"})
    transactional.init_transactions(TIMEOUT_S)
    transactional.begin_transaction()
    delivered(transactional, TOPIC, b"open-1", 1)
    delivered(transactional, TOPIC, b"open-2", 0)  # partition 0: after the idempotent record at offset 0
    time.sleep(0.01)  # the transaction has run some ms: the duration filter below needs "longer than 1"

    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
    opened.append(client)
    ((node, listings),) = client.list_transactions().items()
    assert node == server.broker.broker_id
    (listing,) = listings
    assert (listing.transactional_id, listing.state) == ("hanging-tx", TransactionState.ONGOING)
    pid = listing.producer_id
    assert client.list_transactions(state_filters=["CompleteCommit"]) == {node: []}
    assert client.list_transactions(producer_id_filters=[pid + 1]) == {node: []}
    assert client.list_transactions(duration_filter_ms=1) == {node: [listing]}  # v1 (KIP-994)
    assert client.list_transactions(duration_filter_ms=3_600_000) == {node: []}

    described = client.describe_transactions(["hanging-tx"])["hanging-tx"]
    assert (described.state, described.producer_id) == (TransactionState.ONGOING, pid)
    assert described.topic_partitions == {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)}
    assert described.transaction_timeout_ms == 60_000  # librdkafka's transaction.timeout.ms default
    assert 0 < described.transaction_start_time_ms <= int(time.time() * 1000)
    with pytest.raises(TransactionalIdNotFoundError):
        client.describe_transactions(["never-used"])

    states = client.describe_producers([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    on_0 = {p.producer_id: p for p in states[TopicPartition(TOPIC, 0)].active_producers}
    (on_1,) = states[TopicPartition(TOPIC, 1)].active_producers
    assert (on_1.producer_id, on_1.producer_epoch, on_1.last_sequence, on_1.coordinator_epoch,
            on_1.current_transaction_start_offset) == (pid, described.producer_epoch, 0, -1, 0)
    assert on_0[pid].current_transaction_start_offset == 1
    (plain,) = set(on_0) - {pid}
    assert (on_0[plain].last_sequence, on_0[plain].current_transaction_start_offset) == (0, -1)

    # kafka-transactions.sh --find-hanging, with a threshold of 0 ms (timeout -5 min + its 5 min of slack).
    (hanging,) = client.find_hanging_transactions(max_transaction_timeout_ms=-300_000)
    assert (hanging["transactional_id"], hanging["state"]) == ("hanging-tx", "Ongoing")
    assert hanging["topic_partitions"] == [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
    assert client.find_hanging_transactions() == []  # not older than 15 + 5 minutes

    transactional.commit_transaction(TIMEOUT_S)
    (done,) = client.list_transactions()[node]
    assert done.state == TransactionState.COMPLETE_COMMIT
    (after,) = client.describe_producers([TopicPartition(TOPIC, 1)])[TopicPartition(TOPIC, 1)].active_producers
    assert (after.current_transaction_start_offset, after.coordinator_epoch) == (-1, 0)
    assert client.find_hanging_transactions(max_transaction_timeout_ms=-300_000) == []
