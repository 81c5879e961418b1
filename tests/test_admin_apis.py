"""DescribeProducers, DescribeTransactions and ListTransactions (KIP-664) in process: each answer read from the
broker's real producer state and transaction coordinator after real producers wrote."""

from __future__ import annotations

from typing import Any

import pytest

from idemcore import Broker, Producer
from idemcore.broker.admin_requests import admin_handlers
from idemcore.net.admin import (
    DeleteRecordsRequest,
    DescribedTransaction,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
    ProducerState,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import TRANSACTION_STATE_TOPIC

TOPIC = "t"
START = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        return self.now


def admin_broker(*args: Any, **settings: Any) -> Broker:
    """A broker (it answers the three admin requests)."""
    return Broker(*args, **settings)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker(clock: Clock) -> Broker:
    return admin_broker({TOPIC: 2, "other": 1}, clock=clock, transaction_state_partitions=3)


def txn_producer(broker: Broker, transactional_id: str = "tx", **config: Any) -> Producer:
    return Producer(broker, transactional_id=transactional_id, linger_ms=1_000, **config)


def producers(broker: Broker, *pairs: tuple[str, int]) -> DescribeProducersResponse:
    response = broker.handle(DescribeProducersRequest(tuple(pairs), request_id=7))
    assert isinstance(response, DescribeProducersResponse)
    assert response.request_id == 7 and response.error_code == ErrorCode.NONE
    return response


def only_partition(broker: Broker, partition: int) -> tuple[ProducerState, ...]:
    (answer,) = producers(broker, (TOPIC, partition)).partitions
    assert (answer.topic, answer.partition, answer.error_code) == (TOPIC, partition, ErrorCode.NONE)
    return answer.active_producers


def describe(broker: Broker, *ids: str) -> tuple[DescribedTransaction, ...]:
    response = broker.handle(DescribeTransactionsRequest(ids, request_id=8))
    assert isinstance(response, DescribeTransactionsResponse)
    assert response.request_id == 8 and response.error_code == ErrorCode.NONE
    return response.transactions


def listed(broker: Broker, **filters: Any) -> ListTransactionsResponse:
    response = broker.handle(ListTransactionsRequest(**filters, request_id=9))
    assert isinstance(response, ListTransactionsResponse)
    assert response.request_id == 9
    return response


# ---------------------------------------------------------------- DescribeProducers


def test_an_idempotent_producers_entry_after_its_produces(broker, clock):
    producer = Producer(broker)
    for i in range(3):
        clock.now = START + i
        producer.send(TOPIC, b"v%d" % i, partition=0, timestamp=START + 100 + i).result()
    (state,) = only_partition(broker, 0)
    pid = state.producer_id
    assert pid >= 0
    # lastSeq of the newest batch, its max timestamp, no marker yet (-1), no transaction (-1)
    assert state == ProducerState(pid, 0, 2, START + 102, -1, -1)
    assert only_partition(broker, 1) == ()  # the other partition has no producer


def test_an_open_transaction_shows_its_first_offset_and_after_commit_none(broker, clock):
    idempotent = Producer(broker)
    for i in range(2):
        idempotent.send(TOPIC, b"before%d" % i, partition=0).result()
    producer = txn_producer(broker)
    producer.init_transactions()
    pid, epoch = producer.transactions.producer_id_and_epoch
    producer.begin_transaction()
    for i in range(3):
        producer.send(TOPIC, b"t%d" % i, partition=i % 2)
    producer.flush()
    on_0 = {s.producer_id: s for s in only_partition(broker, 0)}
    (other,) = set(on_0) - {pid}
    assert on_0[other] == ProducerState(other, 0, 1, on_0[other].last_timestamp, -1, -1)
    # Partition 0: two idempotent records at 0 and 1, the transaction's batch from offset 2 on.
    assert on_0[pid] == ProducerState(pid, epoch, 1, on_0[pid].last_timestamp, -1, 2)
    (on_1,) = only_partition(broker, 1)
    assert (on_1.producer_id, on_1.current_txn_start_offset, on_1.last_sequence) == (pid, 0, 0)
    # A second batch in the same transaction does not move its first offset.
    producer.send(TOPIC, b"more", partition=0)
    producer.flush()
    assert {s.producer_id: s for s in only_partition(broker, 0)}[pid].current_txn_start_offset == 2

    producer.commit_transaction()
    for partition in range(2):
        state = {s.producer_id: s for s in only_partition(broker, partition)}[pid]
        assert state.current_txn_start_offset == -1  # closed by the COMMIT marker
        assert state.coordinator_epoch == 0  # the marker's coordinator epoch
    assert {s.producer_id: s for s in only_partition(broker, 0)}[pid].last_sequence == 2  # markers keep lastSeq


def test_an_aborted_transaction_closes_too_and_the_next_one_opens_at_its_first_offset(broker):
    producer = txn_producer(broker)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"a", partition=0)
    producer.flush()
    assert only_partition(broker, 0)[0].current_txn_start_offset == 0
    producer.abort_transaction()
    assert only_partition(broker, 0)[0].current_txn_start_offset == -1
    producer.begin_transaction()
    producer.send(TOPIC, b"b", partition=0)
    producer.flush()
    assert only_partition(broker, 0)[0].current_txn_start_offset == 2  # after the data at 0 and the marker at 1


def test_partitions_the_broker_lacks_and_illegal_names_are_answered_in_request_order(broker):
    Producer(broker).send(TOPIC, b"x", partition=1).result()
    asked = ((TOPIC, 5), ("missing", 0), (TOPIC, 1), ("bad name", 0), (TOPIC, -1), (TOPIC, 1), ("", 0))
    answers = producers(broker, *asked).partitions
    assert [(a.topic, a.partition) for a in answers] == list(asked)
    assert [a.error_code for a in answers] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NONE,
        ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NONE,
        ErrorCode.INVALID_TOPIC_EXCEPTION]
    assert answers[0].error_message == "broker 0 has no partition t-5"
    assert answers[1].error_message == "broker 0 has no topic missing-0"
    assert "'bad name' is not legal" in answers[3].error_message
    assert len(answers[2].active_producers) == 1 and answers[2] == answers[5]
    assert producers(broker).partitions == ()


def test_producer_state_survives_a_restart(tmp_path):
    broker = admin_broker({TOPIC: 1}, data_dir=tmp_path, transaction_state_partitions=3)
    producer = txn_producer(broker)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"open", partition=0)
    producer.flush()
    before = only_partition(broker, 0)
    broker.close()
    again = admin_broker({TOPIC: 1}, data_dir=tmp_path, transaction_state_partitions=3)
    try:
        after = only_partition(again, 0)
        assert after == before and after[0].current_txn_start_offset == 0
        (described,) = describe(again, "tx")
        assert described.state == "Ongoing" and described.topic_partitions == ((TOPIC, 0),)
    finally:
        again.close()


# ---------------------------------------------------------------- DescribeTransactions


def test_describe_an_ongoing_transaction_and_ids_it_does_not_know(broker, clock):
    producer = txn_producer(broker, transaction_timeout_ms=45_000)
    producer.init_transactions()
    pid, epoch = producer.transactions.producer_id_and_epoch
    (empty,) = describe(broker, "tx")
    assert empty == DescribedTransaction("tx", ErrorCode.NONE, "Empty", pid, epoch, 45_000, -1, ())
    clock.now = START + 500
    producer.begin_transaction()
    producer.send(TOPIC, b"a", partition=1)
    producer.send("other", b"b", partition=0)
    producer.send(TOPIC, b"c", partition=0)
    producer.flush()
    ongoing, unknown, blank = describe(broker, "tx", "never-seen", "")
    assert ongoing == DescribedTransaction("tx", ErrorCode.NONE, "Ongoing", pid, epoch, 45_000, START + 500,
                                           (("other", 0), (TOPIC, 0), (TOPIC, 1)))
    assert (unknown.transactional_id, unknown.error_code) == ("never-seen", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    assert unknown == DescribedTransaction("never-seen", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    assert blank.error_code == ErrorCode.INVALID_REQUEST
    producer.commit_transaction()
    (done,) = describe(broker, "tx")
    assert (done.state, done.topic_partitions, done.transaction_start_ms) == ("CompleteCommit", (), START + 500)


def test_before_the_coordinator_starts_ids_are_not_coordinated_here_and_nothing_is_created(broker):
    assert describe(broker, "tx", "") == (DescribedTransaction("tx", ErrorCode.NOT_COORDINATOR),
                                          DescribedTransaction("", ErrorCode.INVALID_REQUEST))
    response = listed(broker, state_filters=("Ongoing", "Nope"))
    assert (response.error_code, response.transactions, response.unknown_state_filters) == (
        ErrorCode.NONE, (), ("Nope",))
    assert TRANSACTION_STATE_TOPIC not in broker.topics  # a read made no internal topic


# ---------------------------------------------------------------- ListTransactions


def test_list_filters_by_state_producer_id_and_duration(broker, clock):
    ongoing = txn_producer(broker, "a-ongoing")
    ongoing.init_transactions()
    committed = txn_producer(broker, "b-committed")
    committed.init_transactions()
    idle = txn_producer(broker, "c-idle")
    idle.init_transactions()
    clock.now = START + 1_000
    committed.begin_transaction()
    committed.send(TOPIC, b"c", partition=0)
    committed.commit_transaction()
    clock.now = START + 2_000
    ongoing.begin_transaction()
    ongoing.send(TOPIC, b"o", partition=1)
    ongoing.flush()
    pids = {name: p.transactions.producer_id_and_epoch[0]
            for name, p in (("a-ongoing", ongoing), ("b-committed", committed), ("c-idle", idle))}

    every = listed(broker)
    assert every.error_code == ErrorCode.NONE and every.unknown_state_filters == ()
    assert every.transactions == (ListedTransaction("a-ongoing", pids["a-ongoing"], "Ongoing"),
                                  ListedTransaction("b-committed", pids["b-committed"], "CompleteCommit"),
                                  ListedTransaction("c-idle", pids["c-idle"], "Empty"))
    names = lambda response: [t.transactional_id for t in response.transactions]  # noqa: E731
    assert names(listed(broker, state_filters=("Ongoing",))) == ["a-ongoing"]
    assert names(listed(broker, state_filters=("Empty", "CompleteCommit"))) == ["b-committed", "c-idle"]
    assert names(listed(broker, state_filters=("PrepareCommit",))) == []
    assert names(listed(broker, producer_id_filters=(pids["c-idle"], pids["a-ongoing"]))) == ["a-ongoing", "c-idle"]
    assert names(listed(broker, producer_id_filters=(10**12,))) == []
    both = listed(broker, state_filters=("Ongoing", "ongoing", "Bogus", "Bogus"),
                  producer_id_filters=(pids["a-ongoing"], pids["b-committed"]))
    assert names(both) == ["a-ongoing"]
    assert both.unknown_state_filters == ("ongoing", "Bogus")  # names are case-sensitive; each echoed once

    # Duration (KIP-994): only transactions that started more than that long ago. An id that never started one
    # (start -1) counts as running since the epoch, as in Kafka.
    clock.now = START + 3_000
    assert names(listed(broker, duration_filter_ms=1_000)) == ["b-committed", "c-idle"]  # 1000 ms: not "more"
    assert names(listed(broker, duration_filter_ms=999)) == ["a-ongoing", "b-committed", "c-idle"]
    assert names(listed(broker, duration_filter_ms=2_000)) == ["c-idle"]
    assert names(listed(broker, duration_filter_ms=-5)) == ["a-ongoing", "b-committed", "c-idle"]
    assert names(listed(broker, state_filters=("Ongoing",), duration_filter_ms=500)) == ["a-ongoing"]


# ---------------------------------------------------------------- malformed requests


@pytest.mark.parametrize(("request_", "message"), [
    (DescribeProducersRequest(None), "partitions must be a tuple"),  # type: ignore[arg-type]
    (DescribeProducersRequest(((TOPIC, "0"),)),  # type: ignore[arg-type]
     "partition ('t', '0') is not a (topic name, partition number)"),
    (DescribeProducersRequest(((TOPIC, True),)), "partition ('t', True) is not"),
    (DescribeProducersRequest((TOPIC,)), "partition 't' is not"),  # type: ignore[arg-type]
    (DescribeTransactionsRequest("tx"), "transactional_ids must be a tuple of strings, got 'tx'"),  # type: ignore[arg-type]
    (DescribeTransactionsRequest(("tx", 3)), "transactional id 3 is not a string"),  # type: ignore[arg-type]
    (ListTransactionsRequest(state_filters="Ongoing"), "state_filters must be a tuple"),  # type: ignore[arg-type]
    (ListTransactionsRequest(producer_id_filters=(1, "2")),  # type: ignore[arg-type]
     "producer_id_filters must be a tuple of producer ids"),
    (ListTransactionsRequest(duration_filter_ms=1.5), "duration_filter_ms must be an int"),  # type: ignore[arg-type]
])
@pytest.mark.parametrize("started", [False, True])
def test_malformed_fields_are_answered_invalid_request(broker, request_, message, started):
    if started:
        broker.txn_coordinator  # noqa: B018
    response = broker.handle(request_)
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert message in response.error_message
    assert response.error_message.startswith(type(request_).__name__)


def test_the_handlers_are_the_four_request_types(broker):
    assert set(admin_handlers(broker.admin_sources)) == {DescribeProducersRequest, DescribeTransactionsRequest,
                                                         ListTransactionsRequest, DeleteRecordsRequest}
