"""TcpTransport: idemcore's Producer and Consumer over Kafka's protocol, against `idemcore serve` (the in-process
``kafka_server``) and against tansu (a Kafka-compatible broker in Rust), cross-checked with confluent-kafka.

Three layers:

- the client-direction codec (``idemcore.net.wire.client``) against the server-direction one, with no network:
  each message written by one side at every version both speak is read back by the other, equal;
- the transport's own behaviour: version negotiation, routing split over several leaders, lost connections,
  bounded waits;
- end to end: idempotent produce and read_committed consume, transactions (commit, abort, offsets), and
  interoperation with librdkafka.

tansu is held only to what it implements. The departures from Kafka met here are marked xfail (strict, so a
tansu that fixes one makes the test pass and the mark must go):

- aborted records are returned to read_committed consumers (``test_transactional_abort_hidden``).
Others measured but not exercised by these tests: DUPLICATE_SEQUENCE_NUMBER for a retried batch (the producer
counts it as written, offset unknown), abandoned transactions never time out, InitProducerId v0-v2 refused
(TcpTransport negotiates v5).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from idemcore.client import Producer
from idemcore.client.consumer import Consumer, ConsumerRecord
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AbortedTransaction,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    CreatedTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchedOffset,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedOffset,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    NewTopic,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetEntry,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResponse,
    PartitionResult,
    ProduceRequest,
    ProduceResponse,
    TopicMetadata,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.net.tcp import TcpTransport, TransportTimeoutError
from idemcore.net.transport import UnknownTopicError
from idemcore.net.wire import client as wire_client
from idemcore.net.wire.api import WireContext
from idemcore.net.wire.apis import APIS
from idemcore.net.wire.frames import read_request, read_response, request_frame, response_frame
from idemcore.protocol.constants import READ_COMMITTED
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import decode_stored_batches, encode_end_txn_marker, encode_record_batch
from tests.peers import TansuProcess, free_port

# ---------------------------------------------------------------- the codec, both directions, no network


CTX = WireContext(7, "broker.example", 9092, "cluster", lambda: {"t": 3, "u": 3})
BATCH_T = RecordBatch("t", 0, (b"a", b"bb"), (b"k", None), 5, 1, 3, 1_000, False)
BATCH_U = RecordBatch("u", 2, (b"x",), None, 5, 1, 0, 2_000, True, ((("h", b"v"),),))

#: Per client API: a request, and a response to it (request ids are filled in per exchange).
CASES: dict[int, tuple[Any, Any]] = {
    0: (ProduceRequest((BATCH_T, BATCH_U), -1, 1_234),
        ProduceResponse(0, (PartitionResponse("t", 0, 0, 10, log_start_offset=0),
                            PartitionResponse("u", 2, 47, -1, error_message="epoch 1 is old")))),
    1: (FetchRequest((FetchPartition("t", 0, 4, 1000), FetchPartition("u", 2, 0, 2000)), READ_COMMITTED, 50_000, 1,
                     250),
        FetchResponse((FetchedPartition("t", 0, 0, 12, 11, 0, (AbortedTransaction(5, 3),),
                                        bytes(encode_record_batch(BATCH_T, 4))),
                       FetchedPartition("u", 2, 1, -1, -1, -1, None, b"")))),
    2: (ListOffsetsRequest((("t", 0, -2), ("u", 1, -1)), READ_COMMITTED),
        ListOffsetsResponse((ListedOffset("t", 0, 0, 3, -1), ListedOffset("u", 1, 0, 9, -1)))),
    3: (MetadataRequest(("t", "u"), True), MetadataResponse((TopicMetadata("t", 0, 3), TopicMetadata("u", 0, 2)))),
    8: (OffsetCommitRequest("g", (OffsetEntry("t", 0, 5, "m"), OffsetEntry("u", 1, 7))),
        OffsetCommitResponse((PartitionResult("t", 0, 0), PartitionResult("u", 1, 25)))),
    9: (OffsetFetchRequest("g", (("t", 0), ("u", 1))),
        OffsetFetchResponse((FetchedOffset("t", 0, 5, "m"), FetchedOffset("u", 1, -1, "")))),
    10: (FindCoordinatorRequest("g", GROUP_KEY), FindCoordinatorResponse(0, 7, "broker.example", 9092)),
    19: (CreateTopicsRequest((NewTopic("t", 3, (("cleanup.policy", "compact"),), 1),)),
         CreateTopicsResponse((CreatedTopic("t", 0, None, 3),))),
    22: (InitProducerIdRequest(0, "tx", 60_000), InitProducerIdResponse(0, 42, 3)),
    24: (AddPartitionsToTxnRequest("tx", 42, 3, (("t", 0), ("u", 1))),
         AddPartitionsToTxnResponse((PartitionResult("t", 0, 0), PartitionResult("u", 1, 0)))),
    25: (AddOffsetsToTxnRequest("tx", 42, 3, "g"), AddOffsetsToTxnResponse(0)),
    26: (EndTxnRequest("tx", 42, 3, True), EndTxnResponse(0)),
    28: (TxnOffsetCommitRequest("tx", "g", 42, 3, (OffsetEntry("t", 0, 5, "m"),)),
         TxnOffsetCommitResponse((PartitionResult("t", 0, 0),))),
}


def _versions() -> Iterator[tuple[int, int]]:
    servers = APIS
    for key in sorted(CASES):
        api, server = wire_client.BY_KEY[key], servers[key]
        for version in range(max(api.min_version, server.min_version), min(api.max_version, server.max_version) + 1):
            yield key, version


def _with_id(message: Any, request_id: int) -> Any:
    from dataclasses import replace

    return replace(message, request_id=request_id)


def _comparable(message: Any) -> Any:
    """What must survive the wire: fetched records byte for byte, produce errors by code (a message exists only
    from v8)."""
    if isinstance(message, FetchResponse):
        return [(p.topic, p.partition, p.error_code, p.high_watermark, p.last_stable_offset, p.aborted_transactions,
                 p.records) for p in message.partitions]
    if isinstance(message, ProduceResponse):
        return [(r.topic, r.partition, r.error_code, r.base_offset) for r in message.responses]
    if isinstance(message, ProduceRequest):
        return (message.acks, message.timeout_ms, message.batches)
    return message


@pytest.mark.parametrize(("key", "version"), list(_versions()))
def test_codec_round_trip(key: int, version: int) -> None:
    """The client writes each request as the server reads it, and reads each response as the server wrote it."""
    api, server = wire_client.BY_KEY[key], APIS[key]
    request, response = CASES[key]
    if key == 10 and version == 0:
        assert request.key_type == GROUP_KEY  # v0 finds group coordinators only
    if key == 3 and version < 4:
        request = MetadataRequest(request.topics, True)  # auto-creation is implied before v4
    correlation_id = 77
    request = _with_id(request, correlation_id)
    if key == 2 and version < 2:  # no isolation level before v2: refused rather than answered wrongly
        with pytest.raises(wire_client.WireProtocolError, match="read_committed"):
            api.encode(request, version)
        request = ListOffsetsRequest(request.partitions, 0, correlation_id)
    frame = request_frame(key, version, correlation_id, "test-client", api.encode(request, version))
    header, body = read_request(memoryview(frame)[4:])
    assert header.correlation_id == correlation_id
    read, carry = server.to_message(CTX, version, correlation_id, body)
    if key == 8:  # generation -1 and member "" as the consumer sends them
        assert (read.group_id, read.offsets) == (request.group_id, request.offsets)
    elif key == 28 and version < 3:
        assert (read.transactional_id, read.group_id, read.offsets) == \
            (request.transactional_id, request.group_id, request.offsets)
    elif key == 9 and version < 7:  # require_stable arrives with v7
        assert (read.group_id, read.partitions) == (request.group_id, request.partitions)
    else:
        assert _comparable(read) == _comparable(request)
    answer = _with_id(response, correlation_id)
    chunks = response_frame(correlation_id, server.to_wire(CTX, version, body, answer, carry))
    got_id, kio_body = read_response(key, version, b"".join(chunks)[4:])
    assert got_id == correlation_id
    decoded: Any = api.decode(request, version, kio_body)
    if key == 9 and version < 2:  # no partition without an offset before v2: Kafka answers -1 for it
        assert decoded.offsets[0] == answer.offsets[0]
    elif key == 19:
        assert [(r.name, r.error_code) for r in decoded.results] == [("t", 0)]
    else:
        assert _comparable(decoded) == _comparable(answer)
    assert decoded.request_id == correlation_id


def test_fetched_batches_keep_markers_and_drop_a_cut_tail() -> None:
    data = bytes(encode_record_batch(BATCH_T, 0)) + encode_end_txn_marker(1, 4, producer_id=5, producer_epoch=1,
                                                                          timestamp=9, base_offset=2)
    tail = bytes(encode_record_batch(BATCH_T, 3))
    stored = decode_stored_batches("t", 0, data + tail[: len(tail) // 2])
    assert [(s.base_offset, s.control) for s in stored] == [(0, None), (2, (1, 4))]
    assert stored[0].batch == RecordBatch("t", 0, (b"a", b"bb"), (b"k", None), 5, 1, 3, 1_000, False)
    assert stored[0].raw == data[: len(stored[0].raw or b"")]
    assert stored[1].batch.is_transactional and stored[1].next_offset == 3
    assert decode_stored_batches("t", 0, None) == ()


def test_pick_version() -> None:
    produce = wire_client.PRODUCE
    assert wire_client.pick_version(produce, (0, 9)) == 9
    assert wire_client.pick_version(produce, (3, 20)) == produce.max_version
    assert wire_client.pick_version(produce, (0, 2)) is None
    assert wire_client.pick_version(produce, None) is None


# ---------------------------------------------------------------- brokers


@pytest.fixture(params=["serve", "tansu"])
def cluster(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, str]]:
    """``(name, bootstrap)`` of `idemcore serve` (in process) and of tansu."""
    if request.param == "serve":
        server = request.getfixturevalue("kafka_server")
        yield "serve", server.bootstrap
        return
    with TansuProcess() as tansu:
        yield "tansu", tansu.bootstrap


@pytest.fixture
def transport(cluster: tuple[str, str]) -> Iterator[TcpTransport]:
    with TcpTransport(cluster[1], request_timeout_ms=10_000, metadata_timeout_ms=10_000) as tcp:
        yield tcp


def _topic(transport: TcpTransport, partitions: int = 3) -> str:
    name = f"topic-{uuid.uuid4().hex[:8]}"
    codes = transport.create_topics({name: partitions})
    assert codes == {name: 0}
    assert transport.partition_count(name) == partitions
    return name


def _read(consumer: Consumer, count: int, timeout_s: float = 30.0) -> list[ConsumerRecord]:
    """Poll until ``count`` records came (bounded), then once more to see nothing extra arrives."""
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(timeout_ms=200)
    records += consumer.poll(timeout_ms=300)
    return records


def _by_partition(records: list[ConsumerRecord]) -> dict[int, list[ConsumerRecord]]:
    out: dict[int, list[ConsumerRecord]] = {}
    for record in records:
        out.setdefault(record.partition, []).append(record)
    return out


def test_versions_negotiated(cluster: tuple[str, str], transport: TcpTransport) -> None:
    """Each API is spoken at min(broker max, client max), within what both speak."""
    transport.partition_count(_topic(transport))
    ranges = next(iter(transport.versions.values()))  # one broker: every connection has the same ranges
    chosen = transport.negotiated()
    for api in wire_client.BY_KEY.values():
        server = ranges.get(api.key)
        if server is None or server[1] < api.min_version:
            assert api.name not in chosen
        else:
            assert chosen[api.name] == min(server[1], api.max_version)
    assert {"Produce", "Fetch", "ListOffsets", "Metadata", "InitProducerId", "FindCoordinator"} <= set(chosen)


def test_idempotent_produce_then_read_committed(cluster: tuple[str, str], transport: TcpTransport) -> None:
    """N keyed records to 3 partitions: each read once, in the order of its partition, at the offset the producer
    was told."""
    topic = _topic(transport)
    n = 3_000
    producer = Producer(transport, linger_ms=2, batch_size=4_096)
    futures = [producer.send(topic, b"value-%d" % i, key=b"key-%d" % (i % 17)) for i in range(n)]
    started = time.perf_counter()
    producer.flush()
    produce_s = time.perf_counter() - started
    sent = {(m.partition, m.offset): b"value-%d" % i for i, m in enumerate(f.result() for f in futures)}
    assert len(sent) == n and producer.metrics["failed_batches"] == 0
    consumer = Consumer(transport, isolation_level="read_committed")
    consumer.assign([(topic, p) for p in range(3)])
    started = time.perf_counter()
    records = _read(consumer, n)
    consume_s = time.perf_counter() - started
    assert len(records) == n
    assert {(r.partition, r.offset): r.value for r in records} == sent
    for partition, part in _by_partition(records).items():
        assert [r.offset for r in part] == sorted(r.offset for r in part), partition
        values = [int(r.value.removeprefix(b"value-")) for r in part if r.value is not None]
        assert values == sorted(values)  # the send order, kept per partition
    print(f"{cluster[0]}: produced {n / produce_s:,.0f} records/s, consumed {n / consume_s:,.0f} records/s")
    producer.close()
    consumer.close()


def test_transactional_commit_visible(cluster: tuple[str, str], transport: TcpTransport) -> None:
    topic = _topic(transport)
    producer = Producer(transport, transactional_id=f"txn-{uuid.uuid4().hex[:6]}", linger_ms=1)
    producer.init_transactions()
    for round_ in range(3):
        producer.begin_transaction()
        for i in range(30):
            producer.send(topic, b"c%d-%d" % (round_, i), partition=i % 3)
        producer.commit_transaction()
    consumer = Consumer(transport, isolation_level="read_committed")
    consumer.assign([(topic, p) for p in range(3)])
    records = _read(consumer, 90)
    assert sorted(r.value for r in records if r.value) == sorted(b"c%d-%d" % (r, i) for r in range(3)
                                                                 for i in range(30))
    producer.close()
    consumer.close()


def test_transactional_abort_hidden(cluster: tuple[str, str], transport: TcpTransport,
                                    request: pytest.FixtureRequest) -> None:
    """read_committed sees committed records only; read_uncommitted sees the aborted ones too."""
    if cluster[0] == "tansu":
        request.applymarker(pytest.mark.xfail(strict=True, raises=AssertionError,
                                              reason="tansu returns aborted records to read_committed consumers"))
    topic = _topic(transport)
    producer = Producer(transport, transactional_id=f"txn-{uuid.uuid4().hex[:6]}", linger_ms=1)
    producer.init_transactions()
    expected = []
    for round_ in range(4):
        producer.begin_transaction()
        values = [b"r%d-%d" % (round_, i) for i in range(12)]
        for i, value in enumerate(values):
            producer.send(topic, value, partition=i % 3)
        if round_ % 2 == 0:
            producer.commit_transaction()
            expected += values
        else:
            producer.flush()  # the records reach the log before the abort
            producer.abort_transaction()
    committed = Consumer(transport, isolation_level="read_committed")
    committed.assign([(topic, p) for p in range(3)])
    uncommitted = Consumer(transport, isolation_level="read_uncommitted")
    uncommitted.assign([(topic, p) for p in range(3)])
    assert len(_read(uncommitted, 48)) == 48
    seen = sorted(r.value for r in _read(committed, len(expected)) if r.value)
    assert seen == sorted(expected)
    producer.close()


def test_send_offsets_to_transaction(kafka_server: Any) -> None:
    """Offsets committed in a transaction are seen by OffsetFetch once it commits, not after an abort."""
    with TcpTransport(kafka_server.bootstrap, request_timeout_ms=10_000) as transport:
        topic = _topic(transport)
        producer = Producer(transport, transactional_id="offsets-txn", linger_ms=1, max_block_ms=15_000)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"x", partition=0)
        producer.send_offsets_to_transaction({(topic, 0): 5, (topic, 1): 8}, "group-a")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"y", partition=0)
        producer.send_offsets_to_transaction({(topic, 0): 99}, "group-a")
        producer.abort_transaction()
        consumer = Consumer(transport, group_id="group-a")
        assert consumer.committed([(topic, 0), (topic, 1), (topic, 2)]) == {(topic, 0): 5, (topic, 1): 8,
                                                                              (topic, 2): None}
        consumer.commit({(topic, 2): 3})  # and a plain OffsetCommit
        assert consumer.committed([(topic, 2)]) == {(topic, 2): 3}


# ---------------------------------------------------------------- interoperation with librdkafka


def test_confluent_reads_what_idemcore_wrote(cluster: tuple[str, str], transport: TcpTransport) -> None:
    import confluent_kafka
    topic = _topic(transport)
    n = 500
    producer = Producer(transport, linger_ms=2)
    for i in range(n):
        producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 5), headers=[("n", b"%d" % i)])
    producer.flush()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster[1], "group.id": "interop",
                                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(3)])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message)
    finally:
        consumer.close()
    assert sorted(int(m.value()[1:]) for m in got) == list(range(n))
    for m in got:
        assert m.key() == b"k%d" % (int(m.value()[1:]) % 5)
        assert m.headers() == [("n", m.value()[1:])]


def test_idemcore_reads_what_confluent_wrote(cluster: tuple[str, str], transport: TcpTransport) -> None:
    import confluent_kafka
    topic = _topic(transport)
    n = 500
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster[1], "enable.idempotence": True,
                                         "linger.ms": 5, "compression.type": "lz4"})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % (i % 7), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer(transport, isolation_level="read_committed")
    consumer.assign([(topic, p) for p in range(3)])
    records = _read(consumer, n)
    assert sorted(int(r.value[1:]) for r in records if r.value) == list(range(n))
    for partition, part in _by_partition(records).items():
        assert all(int(r.value[1:]) % 3 == partition for r in part if r.value)
        assert [r.offset for r in part] == list(range(len(part)))


# ---------------------------------------------------------------- the transport's own behaviour


def test_unknown_topic_without_auto_create(kafka_server: Any) -> None:
    with TcpTransport(kafka_server.bootstrap, auto_create_topics=False, metadata_timeout_ms=5_000) as transport, \
            pytest.raises(UnknownTopicError):
        transport.partition_count("no-such-topic")


def test_unreachable_bootstrap_is_bounded() -> None:
    port = free_port()  # nothing listens there
    with TcpTransport(f"127.0.0.1:{port}", connect_timeout_ms=200, metadata_timeout_ms=800) as transport:
        started = time.monotonic()
        with pytest.raises(TransportTimeoutError, match="no metadata"):
            transport.partition_count("t")
        assert time.monotonic() - started < 5


def test_disconnect_loses_what_is_in_flight(kafka_server: Any) -> None:
    with TcpTransport(kafka_server.bootstrap) as transport:
        topic = _topic(transport)
        slow = FetchRequest((FetchPartition(topic, 0, 0),), max_wait_ms=400, request_id=1)
        transport.send("c", slow)
        transport.tick()
        transport.disconnect("c")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert transport.poll("c") == []
            transport.tick()
        fast = ListOffsetsRequest(((topic, 0, -1),), request_id=2)
        transport.send("c", fast)  # a new connection
        answers: list[Any] = []
        deadline = time.monotonic() + 5
        while not answers and time.monotonic() < deadline:
            answers = transport.poll("c")
            transport.tick()
        assert [(request, response.results[0].offset) for request, response in answers] == [(fast, 0)]


def test_requests_split_over_leaders_are_joined(kafka_server: Any) -> None:
    """A produce and a fetch over partitions of two leaders go out as one request per leader and come back as one
    response in the request's order. The second "leader" is the same server under another node id."""
    with TcpTransport(kafka_server.bootstrap) as transport:
        topic = _topic(transport)
        host, port = kafka_server.address
        other = 1000
        deadline = time.monotonic() + 5
        while (transport._metadata.inflight or transport._metadata.wanted) and time.monotonic() < deadline:
            transport.tick()  # no metadata answer may come after the made-up one and replace it
        transport._metadata.brokers[other] = (host, port)
        known = transport._metadata.topics[topic]
        transport._metadata.topics[topic] = type(known)(known.name, known.error_code, (known.leaders[0], other, other))
        transport.metadata_max_age_ms = 1 << 40  # keep the made-up leader
        producer = Producer(transport, linger_ms=50)
        futures = [producer.send(topic, b"v%d" % i, partition=i % 3) for i in range(30)]
        producer.flush()
        assert sorted((f.result().partition, f.result().offset) for f in futures) == \
            sorted((p, o) for p in range(3) for o in range(10))
        nodes = {node for (client, node, _) in transport._connections if client == producer.client_id}
        assert other in nodes and len(nodes) == 2
        fetch = FetchRequest(tuple(FetchPartition(topic, p, 0) for p in (2, 0, 1)), request_id=5)
        transport.send("reader", fetch)
        answers: list[Any] = []
        deadline = time.monotonic() + 10
        while not answers and time.monotonic() < deadline:
            answers = transport.poll("reader")
            transport.tick()
        assert len(answers) == 1 and answers[0][0] is fetch
        response = answers[0][1]
        assert sorted(p.partition for p in response.partitions) == [0, 1, 2]
        assert response.request_id == 5
        assert sorted(v for p in response.partitions for b in decode_stored_batches(p.topic, p.partition, p.records)
                      for v in b.batch.values) == \
            sorted(b"v%d" % i for i in range(30))
        assert {node for (client, node, _) in transport._connections if client == "reader"} == {0, other}


def test_producer_survives_a_server_restart(tmp_path: Any) -> None:
    """The server goes away with requests in flight and comes back on the same port: the producer's retries
    (after its request timeout) deliver every record once."""
    from idemcore.broker import Broker
    from idemcore.broker.server import Server

    broker = Broker({}, data_dir=tmp_path / "kafka-logs", fsync=False)
    port = free_port()
    server = Server(broker, port=port).start()
    try:
        with TcpTransport(server.bootstrap, request_timeout_ms=5_000) as transport:
            topic = _topic(transport)
            producer = Producer(transport, linger_ms=0, request_timeout_ms=1_000, delivery_timeout_ms=30_000,
                                retry_backoff_ms=50)
            first = [producer.send(topic, b"a%d" % i, partition=i % 3) for i in range(300)]
            producer.flush()
            server.stop()
            later = [producer.send(topic, b"b%d" % i, partition=i % 3) for i in range(300)]
            producer.poll()  # requests go out to a server that is gone
            _wait_port_free(port)
            server = Server(broker, port=port).start()
            producer.flush()
            assert all(f.result().offset >= 0 or f.result().offset == -1 for f in first + later)
            consumer = Consumer(transport)
            consumer.assign([(topic, p) for p in range(3)])
            values = [r.value for r in _read(consumer, 600)]
            assert sorted(v for v in values if v) == sorted([b"a%d" % i for i in range(300)]
                                                            + [b"b%d" % i for i in range(300)])
    finally:
        server.stop()
        broker.close()


def _wait_port_free(port: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
                return
            except OSError:
                time.sleep(0.05)


def test_coordinator_forgotten_when_unreachable(kafka_server: Any) -> None:
    """A cached transaction coordinator that cannot be reached is forgotten with its connection: the producer's
    request is lost, and its retry goes to the coordinator FindCoordinator names again."""
    with TcpTransport(kafka_server.bootstrap, connect_timeout_ms=500) as transport:
        topic = _topic(transport)
        producer = Producer(transport, transactional_id="moving-coordinator", linger_ms=1, request_timeout_ms=1_000,
                            delivery_timeout_ms=10_000, max_block_ms=15_000)
        producer.init_transactions()
        key = (TRANSACTION_KEY, "moving-coordinator")
        good = transport._router.coordinators[key]
        transport._metadata.brokers[999] = ("127.0.0.1", free_port())  # nothing listens there
        transport._router.coordinators[key] = 999
        producer.begin_transaction()
        producer.send(topic, b"after-the-move", partition=1)
        producer.commit_transaction()
        assert transport._router.coordinators[key] == good
        consumer = Consumer(transport)
        consumer.assign([(topic, 1)])
        assert [r.value for r in _read(consumer, 1)] == [b"after-the-move"]


def test_a_killed_server_is_noticed_at_once_and_the_idempotent_producer_delivers_each_record_once(tmp_path: Any):
    """SIGKILL of `idemcore serve` with produce requests in flight, restarted on the same port and directory: the
    broken connection fails those requests at once (TcpTransport.lost; not after the 30 s request timeout), the
    producer retries them with the same sequences, and every record is in the log once, in send order."""
    from tests.peers import ServeProcess

    serve = ServeProcess(tmp_path / "data", "--topics", "killed:2").start()
    try:
        with TcpTransport(serve.bootstrap) as transport:  # request_timeout_ms: the default 30 s
            producer = Producer(transport, linger_ms=0, retry_backoff_ms=50, delivery_timeout_ms=60_000)
            futures = [producer.send("killed", b"a%d" % i, partition=i % 2) for i in range(400)]
            producer.poll()
            serve.kill()
            futures += [producer.send("killed", b"b%d" % i, partition=i % 2) for i in range(400)]
            producer.poll()  # sent to a server that is gone: the connection breaks
            started = time.monotonic()
            serve.start()
            producer.flush()
            assert time.monotonic() - started < 20, "the lost requests waited for request_timeout_ms"
            assert all(f.exception() is None for f in futures)
            consumer = Consumer(transport)
            consumer.assign([("killed", 0), ("killed", 1)])
            read = _by_partition(_read(consumer, 800))
            for partition in (0, 1):
                sent = [b"%s%d" % (prefix, i) for prefix in (b"a", b"b") for i in range(partition, 400, 2)]
                assert [r.value for r in read[partition]] == sent  # once each, in send order
    finally:
        serve.stop()


def test_a_read_committed_fetch_waiting_for_a_commit_is_woken_by_its_marker(tmp_path: Any) -> None:
    """The server answers EndTxn before it writes the markers (TXN_COMPLETION_DELAY_S later): the marker's write
    wakes a read_committed fetch that waits for it, instead of the fetch waiting out its max_wait (housekeeping,
    which wakes fetches too, is made rare here)."""
    from idemcore.broker import Broker
    from idemcore.broker.server import Server

    with Broker({}, data_dir=tmp_path, fsync=False) as broker, Server(broker, housekeeping_ms=600_000) as server, \
            TcpTransport(server.bootstrap) as transport:
        topic = _topic(transport, partitions=1)
        producer = Producer(transport, transactional_id=f"txn-{uuid.uuid4().hex[:6]}", linger_ms=1)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"held", partition=0)
        producer.flush()  # in the log, not stable yet
        waiting = FetchRequest((FetchPartition(topic, 0, 0),), READ_COMMITTED, max_wait_ms=20_000, request_id=7)
        transport.send("reader", waiting)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # the fetch reaches the server and waits there
            assert transport.poll("reader") == []
            transport.tick()
        committed = time.monotonic()
        producer.commit_transaction()
        answers: list[Any] = []
        while not answers and time.monotonic() < committed + 10:
            answers = transport.poll("reader")
            transport.tick()
        assert answers, "the fetch was not answered"
        assert time.monotonic() - committed < 3, "the fetch waited for its max_wait, not for the marker"
        ((_, response),) = answers
        (fetched,) = response.partitions
        assert fetched.last_stable_offset == 2  # the record and its COMMIT marker
        stored = decode_stored_batches(topic, 0, fetched.records)
        assert [list(b.batch.values) for b in stored if not b.control] == [[b"held"]]
        producer.close()
