"""DescribeProducers v0, DescribeTransactions v0 and ListTransactions v0–1 on the wire: every served version
through kio and back, and the bytes cross-checked against kafka-python 3's independent codec (``kafka.protocol``,
generated from the same Kafka JSON schemas), as docs/research/kio-evaluation.md describes; then a real broker
answering kafka-python's requests through the translations (a server without its socket). DeleteRecords' served
versions are checked here, its translations in tests/test_delete_records.py."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kafka.protocol.admin import topics as kp_topics
from kafka.protocol.admin import transactions as kp
from kio.index import load_request_schema, load_response_schema

from idemcore import Broker, Producer
from idemcore.net.admin import (
    DescribedTransaction,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
    PartitionProducers,
    ProducerState,
)
from idemcore.net.wire.admin import (
    ADMIN_APIS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    wire_time,
)
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.frames import make, nested, read_request, read_response, request_frame, response_frame
from idemcore.protocol.codes import ErrorCode

CTX = WireContext(node_id=0, host="127.0.0.1", port=9092, cluster_id="idemcore", topics=lambda: {"t": 2})
START = 1_700_000_000_123

#: The kafka-python classes of each API, as a client builds and reads them.
KP = {61: (kp.DescribeProducersRequest, kp.DescribeProducersResponse),
      65: (kp.DescribeTransactionsRequest, kp.DescribeTransactionsResponse),
      66: (kp.ListTransactionsRequest, kp.ListTransactionsResponse),
      21: (kp_topics.DeleteRecordsRequest, kp_topics.DeleteRecordsResponse)}
SERVED = [(api, version) for api in ADMIN_APIS for version in range(api.min_version, api.max_version + 1)]


def client_frame(api: WireApi, version: int, correlation_id: int, **fields: Any) -> bytes:
    """A request frame as kafka-python sends it (with its size)."""
    request_cls = KP[api.key][0]
    if "topics" in fields:  # kafka-python's nested entities are its own classes
        fields["topics"] = [request_cls.TopicRequest(**topic) for topic in fields["topics"]]
    request = request_cls(**fields, version=version)
    request.with_header(correlation_id=correlation_id, client_id="admin-test")
    return bytes(request.encode(header=True, framed=True))


def answer_frame(api: WireApi, version: int, body: Any, response: Any, carry: Any, correlation_id: int) -> bytes:
    """What a server sends back: ``response`` translated by ``api`` and framed by kio (with its size)."""
    entity = api.to_wire(CTX, version, body, response, carry)
    assert (entity.__api_key__, entity.__version__) == (api.key, version)
    return b"".join(response_frame(correlation_id, entity))


def client_reads(api: WireApi, version: int, frame: bytes, correlation_id: int) -> dict[str, Any]:
    """kafka-python's reading of a response frame; its own re-encoding must give the same bytes."""
    decoded = KP[api.key][1].decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == correlation_id
    assert decoded.encode(header=True, framed=True) == frame
    return decoded.to_dict()


def test_served_versions_are_what_kio_and_kafka_python_both_have():
    assert [(a.key, a.name, a.min_version, a.max_version) for a in ADMIN_APIS] == [
        (61, "DescribeProducers", 0, 0), (65, "DescribeTransactions", 0, 0), (66, "ListTransactions", 0, 1),
        (21, "DeleteRecords", 0, 2)]
    for api, version in SERVED:
        load_request_schema(api.key, version)
        load_response_schema(api.key, version)
        request_cls, response_cls = KP[api.key]
        assert request_cls.min_version <= version <= request_cls.max_version
        assert response_cls.min_version <= version <= response_cls.max_version
    # ListTransactions v2 (KIP-1152, an id regex) exists in both codecs but is not served (module docstring).
    load_request_schema(66, 2)
    assert LIST_TRANSACTIONS.max_version == 1


# ---------------------------------------------------------------- requests: client bytes -> message


def test_describe_producers_request():
    frame = client_frame(DESCRIBE_PRODUCERS, 0, 11, topics=[
        {"name": "t", "partition_indexes": [1, 0]}, {"name": "u", "partition_indexes": []},
        {"name": "t", "partition_indexes": [1]}])
    cls = load_request_schema(61, 0)
    kio_frame = request_frame(61, 0, 11, "admin-test", make(cls, topics=(
        make(nested(cls, "TopicRequest"), name="t", partition_indexes=(1, 0)),
        make(nested(cls, "TopicRequest"), name="u", partition_indexes=()),
        make(nested(cls, "TopicRequest"), name="t", partition_indexes=(1,)))))
    assert kio_frame == frame
    header, body = read_request(frame[4:])
    message, _ = DESCRIBE_PRODUCERS.to_message(CTX, 0, header.correlation_id, body)
    assert message == DescribeProducersRequest((("t", 1), ("t", 0), ("t", 1)), request_id=11)


@pytest.mark.parametrize("ids", [["tx", "", "other"], []])
def test_describe_transactions_request(ids):
    frame = client_frame(DESCRIBE_TRANSACTIONS, 0, 12, transactional_ids=ids)
    cls = load_request_schema(65, 0)
    assert request_frame(65, 0, 12, "admin-test", make(cls, transactional_ids=tuple(ids))) == frame
    header, body = read_request(frame[4:])
    message, _ = DESCRIBE_TRANSACTIONS.to_message(CTX, 0, header.correlation_id, body)
    assert message == DescribeTransactionsRequest(tuple(ids), request_id=12)


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("duration", [-1, 0, 60_000])
def test_list_transactions_request(version, duration):
    fields: dict[str, Any] = {"state_filters": ["Ongoing", "PrepareCommit"], "producer_id_filters": [7, 2**40]}
    if version >= 1:
        fields["duration_filter"] = duration
    frame = client_frame(LIST_TRANSACTIONS, version, 13, **fields)
    cls = load_request_schema(66, version)
    assert request_frame(66, version, 13, "admin-test", make(cls, state_filters=("Ongoing", "PrepareCommit"),
                                                             producer_id_filters=(7, 2**40),
                                                             duration_filter=duration)) == frame
    header, body = read_request(frame[4:])
    message, _ = LIST_TRANSACTIONS.to_message(CTX, version, header.correlation_id, body)
    assert message == ListTransactionsRequest(("Ongoing", "PrepareCommit"), (7, 2**40),
                                              duration if version >= 1 else -1, request_id=13)


# ---------------------------------------------------------------- responses: message -> bytes a client reads


def test_describe_producers_response_round_trip():
    frame = client_frame(DESCRIBE_PRODUCERS, 0, 21, topics=[
        {"name": "t", "partition_indexes": [0, 1]}, {"name": "missing", "partition_indexes": [3]}])
    _, body = read_request(frame[4:])
    _, carry = DESCRIBE_PRODUCERS.to_message(CTX, 0, 21, body)
    response = DescribeProducersResponse((
        PartitionProducers("t", 0, ErrorCode.NONE, (
            ProducerState(5, 0, 41, START, -1, -1),
            ProducerState(2**40, 32_767, 2**31 - 1, START + 1, 3, 1_234_567_890_123))),
        PartitionProducers("t", 1),
        PartitionProducers("missing", 3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message="no topic missing-3"),
    ), request_id=21)
    out = answer_frame(DESCRIBE_PRODUCERS, 0, body, response, carry, 21)
    correlation_id, again = read_response(61, 0, out[4:])
    assert correlation_id == 21
    assert again == DESCRIBE_PRODUCERS.to_wire(CTX, 0, body, response, carry)  # kio reads what kio wrote
    assert client_reads(DESCRIBE_PRODUCERS, 0, out, 21) == {"throttle_time_ms": 0, "topics": [
        {"name": "t", "partitions": [
            {"partition_index": 0, "error_code": 0, "error_message": None, "active_producers": [
                {"producer_id": 5, "producer_epoch": 0, "last_sequence": 41, "last_timestamp": START,
                 "coordinator_epoch": -1, "current_txn_start_offset": -1},
                {"producer_id": 2**40, "producer_epoch": 32_767, "last_sequence": 2**31 - 1,
                 "last_timestamp": START + 1, "coordinator_epoch": 3, "current_txn_start_offset": 1_234_567_890_123}]},
            {"partition_index": 1, "error_code": 0, "error_message": None, "active_producers": []}]},
        {"name": "missing", "partitions": [
            {"partition_index": 3, "error_code": 3, "error_message": "no topic missing-3", "active_producers": []}]}]}


def test_describe_transactions_response_round_trip():
    frame = client_frame(DESCRIBE_TRANSACTIONS, 0, 22, transactional_ids=["tx", "gone"])
    _, body = read_request(frame[4:])
    _, carry = DESCRIBE_TRANSACTIONS.to_message(CTX, 0, 22, body)
    response = DescribeTransactionsResponse((
        DescribedTransaction("tx", ErrorCode.NONE, "Ongoing", 9, 3, 60_000, START,
                             (("a", 2), ("t", 0), ("t", 1))),
        DescribedTransaction("gone", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)), request_id=22)
    out = answer_frame(DESCRIBE_TRANSACTIONS, 0, body, response, carry, 22)
    entity = DESCRIBE_TRANSACTIONS.to_wire(CTX, 0, body, response, carry)
    assert entity.transaction_states[0].transaction_timeout == datetime.timedelta(minutes=1)
    assert entity.transaction_states[0].transaction_start_time == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123_000, tzinfo=datetime.UTC)
    assert read_response(65, 0, out[4:]) == (22, entity)
    # An error carries only the id and the code: the rest are the defaults of Kafka's message (0, "").
    assert client_reads(DESCRIBE_TRANSACTIONS, 0, out, 22) == {"throttle_time_ms": 0, "transaction_states": [
        {"error_code": 0, "transactional_id": "tx", "transaction_state": "Ongoing", "transaction_timeout_ms": 60_000,
         "transaction_start_time_ms": START, "producer_id": 9, "producer_epoch": 3,
         "topics": [{"topic": "a", "partitions": [2]}, {"topic": "t", "partitions": [0, 1]}]},
        {"error_code": 105, "transactional_id": "gone", "transaction_state": "", "transaction_timeout_ms": 0,
         "transaction_start_time_ms": 0, "producer_id": 0, "producer_epoch": 0, "topics": []}]}


def test_a_transaction_never_started_goes_out_as_start_time_minus_one():
    """An Empty id's start time is -1 (Kafka's too). kio writes it, but its own reader refuses negative times, so
    this is checked with kafka-python alone: the decoder a client has."""
    assert wire_time(-1) == datetime.datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=datetime.UTC)
    frame = client_frame(DESCRIBE_TRANSACTIONS, 0, 23, transactional_ids=["tx"])
    _, body = read_request(frame[4:])
    response = DescribeTransactionsResponse((DescribedTransaction("tx", ErrorCode.NONE, "Empty", 9, 0, 60_000),))
    out = answer_frame(DESCRIBE_TRANSACTIONS, 0, body, response, None, 23)
    (state,) = client_reads(DESCRIBE_TRANSACTIONS, 0, out, 23)["transaction_states"]
    assert (state["transaction_state"], state["transaction_start_time_ms"], state["producer_epoch"]) == ("Empty", -1, 0)


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions_response_round_trip(version):
    fields: dict[str, Any] = {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": []}
    frame = client_frame(LIST_TRANSACTIONS, version, 24, **fields)
    _, body = read_request(frame[4:])
    _, carry = LIST_TRANSACTIONS.to_message(CTX, version, 24, body)
    response = ListTransactionsResponse(ErrorCode.NONE, (ListedTransaction("a", 1, "Ongoing"),
                                                         ListedTransaction("b", 2**40, "Ongoing")), ("Bogus",), 24)
    out = answer_frame(LIST_TRANSACTIONS, version, body, response, carry, 24)
    assert read_response(66, version, out[4:]) == (24, LIST_TRANSACTIONS.to_wire(CTX, version, body, response, carry))
    assert client_reads(LIST_TRANSACTIONS, version, out, 24) == {
        "throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": ["Bogus"], "transaction_states": [
            {"transactional_id": "a", "producer_id": 1, "transaction_state": "Ongoing"},
            {"transactional_id": "b", "producer_id": 2**40, "transaction_state": "Ongoing"}]}
    failed = ListTransactionsResponse(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, request_id=24)
    reading = client_reads(LIST_TRANSACTIONS, version, answer_frame(LIST_TRANSACTIONS, version, body, failed,
                                                                    carry, 24), 24)
    assert (reading["error_code"], reading["transaction_states"]) == (14, [])


def test_a_malformed_in_process_answer_still_translates():
    """Answers with a request-level error (only ever in process) give each asked entry that error."""
    frame = client_frame(DESCRIBE_PRODUCERS, 0, 25, topics=[{"name": "t", "partition_indexes": [0]}])
    _, body = read_request(frame[4:])
    bad = DescribeProducersResponse((), 25, ErrorCode.INVALID_REQUEST, "bad")
    (topic,) = client_reads(DESCRIBE_PRODUCERS, 0, answer_frame(DESCRIBE_PRODUCERS, 0, body, bad, None, 25),
                            25)["topics"]
    assert topic["partitions"][0]["error_code"] == ErrorCode.INVALID_REQUEST
    frame = client_frame(DESCRIBE_TRANSACTIONS, 0, 26, transactional_ids=["x"])
    _, body = read_request(frame[4:])
    bad_txn = DescribeTransactionsResponse((), 26, ErrorCode.INVALID_REQUEST, "bad")
    (state,) = client_reads(DESCRIBE_TRANSACTIONS, 0, answer_frame(DESCRIBE_TRANSACTIONS, 0, body, bad_txn, None,
                                                                   26), 26)["transaction_states"]
    assert (state["transactional_id"], state["error_code"]) == ("x", ErrorCode.INVALID_REQUEST)


# ---------------------------------------------------------------- a broker answering a client's bytes


def serve(broker: Broker, api: WireApi, version: int, correlation_id: int, **fields: Any) -> dict[str, Any]:
    """kafka-python's request through kio, the translation, ``Broker.handle`` and back, as the server does it."""
    header, body = read_request(client_frame(api, version, correlation_id, **fields)[4:])
    message, carry = api.to_message(CTX, version, header.correlation_id, body)
    response = broker.handle(message)
    assert response.request_id == correlation_id
    return client_reads(api, version, answer_frame(api, version, body, response, carry, correlation_id),
                        correlation_id)


def test_a_broker_answers_the_three_apis_through_the_wire():
    now = [START]
    broker = Broker({"t": 2}, clock=lambda: now[0], transaction_state_partitions=3)
    producer = Producer(broker, transactional_id="tx", linger_ms=1_000)
    producer.init_transactions()
    pid, epoch = producer.transactions.producer_id_and_epoch
    producer.begin_transaction()
    producer.send("t", b"a", partition=1, timestamp=START + 5)
    producer.flush()

    (topic,) = serve(broker, DESCRIBE_PRODUCERS, 0, 31, topics=[{"name": "t", "partition_indexes": [1, 0, 9]}])[
        "topics"]
    assert topic["partitions"] == [
        {"partition_index": 1, "error_code": 0, "error_message": None, "active_producers": [
            {"producer_id": pid, "producer_epoch": epoch, "last_sequence": 0, "last_timestamp": START + 5,
             "coordinator_epoch": -1, "current_txn_start_offset": 0}]},
        {"partition_index": 0, "error_code": 0, "error_message": None, "active_producers": []},
        {"partition_index": 9, "error_code": 3, "error_message": "broker 0 has no partition t-9",
         "active_producers": []}]

    states = serve(broker, DESCRIBE_TRANSACTIONS, 0, 32, transactional_ids=["tx", "nope"])["transaction_states"]
    assert states[0] == {"error_code": 0, "transactional_id": "tx", "transaction_state": "Ongoing",
                         "transaction_timeout_ms": 60_000, "transaction_start_time_ms": START, "producer_id": pid,
                         "producer_epoch": epoch, "topics": [{"topic": "t", "partitions": [1]}]}
    assert (states[1]["transactional_id"], states[1]["error_code"]) == ("nope", 105)

    now[0] = START + 10_000
    for version, fields, expected in [
        (0, {"state_filters": ["Ongoing"]}, ["tx"]),
        (0, {"state_filters": ["CompleteCommit"]}, []),
        (1, {"duration_filter": 9_999}, ["tx"]),
        (1, {"duration_filter": 10_000}, []),  # running exactly 10 s: not longer
        (1, {"producer_id_filters": [pid + 1]}, []),
    ]:
        listing = serve(broker, LIST_TRANSACTIONS, version, 33, **fields)
        assert listing["error_code"] == 0
        assert [t["transactional_id"] for t in listing["transaction_states"]] == expected, (version, fields)
    producer.commit_transaction()
    (state,) = serve(broker, DESCRIBE_PRODUCERS, 0, 34, topics=[{"name": "t", "partition_indexes": [1]}])[
        "topics"][0]["partitions"][0]["active_producers"]
    assert (state["current_txn_start_offset"], state["coordinator_epoch"]) == (-1, 0)

