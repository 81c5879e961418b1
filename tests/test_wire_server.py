"""The Kafka-protocol server's own APIs, every served version, over a real socket: requests built with kio, answers
decoded with kafka-python 3's independent codec (``kafka.protocol``). Batches are stored as the client sent them
(compression and record timestamps kept, across a restart), and ``idemcore serve`` as a command."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import sys
import uuid

import pytest
from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import ProduceResponse

from idemcore.broker import Broker
from idemcore.broker.server import Server
from idemcore.net.wire.api import topic_id_of
from idemcore.net.wire.apis import APIS, advertised
from idemcore.net.wire.frames import make, nested, read_request, request_frame
from idemcore.net.wire.schema import load_request_schema  # kio's, and the schemas kio lacks
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import decode_batch, encode_batch, encode_record_batch, read_header
from idemcore.record.v2.codec import Record
from idemcore.record.v2.compression import Compression
from tests.peers import ServeProcess, free_port

_SIZE = struct.Struct(">i")


def exchange(address: tuple[str, int], api_key: int, version: int, body: object, correlation_id: int = 7) -> bytes:
    """Send one request frame on a fresh connection; the response frame (without its size)."""
    with socket.create_connection(address, timeout=10) as conn:
        conn.sendall(request_frame(api_key, version, correlation_id, "wire-test", body))
        return _read_frame(conn)


def _read_frame(conn: socket.socket) -> bytes:
    head = _read_exactly(conn, 4)
    return _read_exactly(conn, _SIZE.unpack(head)[0])


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def request(api_key: int, version: int, **fields: object) -> object:
    return make(load_request_schema(api_key, version), **fields)


def produce_body(version: int, topic: str, partition: int, data: bytes, acks: int = -1) -> object:
    cls = load_request_schema(0, version)
    part = make(nested(cls, "PartitionProduceData"), index=partition, records=data)
    return make(cls, acks=acks, topic_data=(make(nested(cls, "TopicProduceData"), name=topic,
                                                   topic_id=topic_id_of(topic), partition_data=(part,)),))


@pytest.fixture
def server(tmp_path):
    broker = Broker({"t": 2}, data_dir=tmp_path / "logs", fsync=False)
    with Server(broker) as running:
        yield running
    broker.close()


def decoded(cls: type, version: int, frame: bytes) -> object:
    return cls.decode(frame, version=version, header=True)


def test_every_served_request_version_has_a_schema_and_round_trips_through_frames():
    for key, low, high in advertised():
        for version in range(low, high + 1):
            cls = load_request_schema(key, version)
            body = make(cls)
            frame = request_frame(key, version, 99, "x", body)
            header, back = read_request(frame[4:])
            assert header.correlation_id == 99 and back == body, (key, version)


@pytest.mark.parametrize("version", range(APIS[0].min_version, APIS[0].max_version + 1))
def test_produce_each_version_answers_offsets_kafka_python_decodes(server, version):
    first = encode_record_batch(RecordBatch("t", 1, [b"a", b"b"]), 0)
    answer = decoded(ProduceResponse, version, exchange(server.address, 0, version, produce_body(version, "t", 1,
                                                                                                  bytes(first))))
    second = encode_record_batch(RecordBatch("t", 1, [b"c"]), 0)
    again = decoded(ProduceResponse, version, exchange(server.address, 0, version, produce_body(version, "t", 1,
                                                                                                 bytes(second))))
    [topic], [later] = answer.responses, again.responses
    assert topic.name == "t" or version >= 13
    [part] = topic.partition_responses
    assert (part.index, part.error_code, part.base_offset) == (1, 0, 0)
    assert (later.partition_responses[0].error_code, later.partition_responses[0].base_offset) == (0, 2)


def test_produce_refuses_what_is_not_one_good_batch_and_keeps_the_rest(server):
    good = bytes(encode_record_batch(RecordBatch("t", 0, [b"ok"]), 0))
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF  # the CRC covers it
    cls = load_request_schema(0, 9)
    parts = tuple(make(nested(cls, "PartitionProduceData"), index=k, records=data)
                  for k, data in ((0, good), (1, bytes(flipped))))
    body = make(cls, acks=-1, topic_data=(make(nested(cls, "TopicProduceData"), name="t", partition_data=parts),
                                          make(nested(cls, "TopicProduceData"), name="t", partition_data=(
                                              make(nested(cls, "PartitionProduceData"), index=1,
                                                   records=good + good),))))
    answer = decoded(ProduceResponse, 9, exchange(server.address, 0, 9, body))
    codes = [(p.index, p.error_code) for t in answer.responses for p in t.partition_responses]
    assert codes == [(0, 0), (1, 2), (1, 87)]  # NONE, CORRUPT_MESSAGE, INVALID_RECORD (two batches)
    assert server.broker.log("t", 1).log_end_offset == 0 and server.broker.log("t", 0).log_end_offset == 1


@pytest.mark.parametrize("version", range(APIS[1].min_version, APIS[1].max_version + 1))
def test_fetch_each_version_returns_the_stored_bytes(server, version):
    sent = bytes(encode_record_batch(RecordBatch("t", 0, [b"x", b"y", b"z"], max_timestamp=1234), 0))
    exchange(server.address, 0, 9, produce_body(9, "t", 0, sent))
    cls = load_request_schema(1, version)
    part = make(nested(cls, "FetchPartition"), partition=0, fetch_offset=0, partition_max_bytes=1 << 20,
                log_start_offset=-1, current_leader_epoch=-1, last_fetched_epoch=-1)
    body = make(cls, replica_id=-1, max_bytes=1 << 20, min_bytes=1, isolation_level=1, session_epoch=-1,
                topics=(make(nested(cls, "FetchTopic"), topic="t", topic_id=topic_id_of("t"), partitions=(part,)),))
    answer = decoded(FetchResponse, version, exchange(server.address, 1, version, body))
    [topic] = answer.responses
    assert (topic.topic == "t") if version < 13 else (topic.topic_id == topic_id_of("t"))
    [partition] = topic.partitions
    assert (partition.error_code, partition.high_watermark, partition.last_stable_offset) == (0, 3, 3)
    assert bytes(partition.records) == sent  # base offset 0 and leader epoch 0 in both


def test_fetch_by_an_unknown_topic_id_is_answered_unknown_topic_id(server):
    cls = load_request_schema(1, 16)
    part = make(nested(cls, "FetchPartition"), partition=0, fetch_offset=0, partition_max_bytes=1024)
    topic = make(nested(cls, "FetchTopic"), topic_id=uuid.uuid4(), partitions=(part,))
    body = make(cls, max_bytes=1024, topics=(topic,))
    answer = decoded(FetchResponse, 16, exchange(server.address, 1, 16, body))
    assert answer.responses[0].partitions[0].error_code == 100


@pytest.mark.parametrize("version", range(APIS[3].min_version, APIS[3].max_version + 1))
def test_metadata_each_version_names_this_node_and_auto_creates(server, version):
    cls = load_request_schema(3, version)
    topics = tuple(make(nested(cls, "MetadataRequestTopic"), name=name) for name in ("t", f"new{version}"))
    body = make(cls, topics=topics, allow_auto_topic_creation=True)
    answer = decoded(MetadataResponse, version, exchange(server.address, 3, version, body))
    [node] = answer.brokers
    assert (node.host, node.port) == server.address
    found = {t.name: t for t in answer.topics}
    assert len(found["t"].partitions) == 2 and found["t"].error_code == 0
    assert len(found[f"new{version}"].partitions) == 1  # made with the default partition count
    assert {p.leader_id for p in found["t"].partitions} == {node.node_id}
    if version >= 10:
        assert found["t"].topic_id == topic_id_of("t")
    assert f"new{version}" in server.broker.topics


def test_metadata_without_auto_creation_answers_unknown_topic(tmp_path):
    broker = Broker({}, data_dir=tmp_path / "logs", fsync=False, auto_create_topics=False)
    with Server(broker) as running:
        body = request(3, 12, topics=(make(nested(load_request_schema(3, 12), "MetadataRequestTopic"), name="x"),),
                       allow_auto_topic_creation=True)
        answer = decoded(MetadataResponse, 12, exchange(running.address, 3, 12, body))
    broker.close()
    assert [(t.name, t.error_code) for t in answer.topics] == [("x", 3)]


@pytest.mark.parametrize("version", range(APIS[19].min_version, APIS[19].max_version + 1))
def test_create_topics_each_version(server, version):
    cls = load_request_schema(19, version)
    topic = nested(cls, "CreatableTopic")
    config = nested(cls, "CreatableTopicConfig")
    body = make(cls, timeout=30_000, topics=(
        make(topic, name="made", num_partitions=3, replication_factor=1, assignments=(),
             configs=(make(config, name="cleanup.policy", value="compact"),)),
        make(topic, name="t", num_partitions=1, replication_factor=1, assignments=(), configs=()),
        make(topic, name="bad", num_partitions=0, replication_factor=1, assignments=(), configs=())))
    answer = decoded(CreateTopicsResponse, version, exchange(server.address, 19, version, body))
    assert [(t.name, t.error_code) for t in answer.topics] == [("made", 0), ("t", 36), ("bad", 37)]
    assert server.broker.topics["made"] == 3 and server.broker.topic_configs["made"].compacted


def test_list_offsets_earliest_and_latest(server):
    exchange(server.address, 0, 9, produce_body(9, "t", 0, bytes(encode_record_batch(RecordBatch("t", 0, [b"a"] * 5),
                                                                                       0))))
    cls = load_request_schema(2, 7)
    parts = tuple(make(nested(cls, "ListOffsetsPartition"), partition_index=0, timestamp=ts) for ts in (-2, -1))
    body = make(cls, replica_id=-1, topics=(make(nested(cls, "ListOffsetsTopic"), name="t", partitions=parts),))
    answer = decoded(ListOffsetsResponse, 7, exchange(server.address, 2, 7, body))
    assert [(p.error_code, p.offset) for p in answer.topics[0].partitions] == [(0, 0), (0, 5)]


def test_api_versions_lists_the_served_ranges_and_answers_an_unknown_version_at_v0(server):
    answer = decoded(ApiVersionsResponse, 3, exchange(server.address, 18, 3, request(18, 3,
                                                                                    client_software_name="t",
                                                                                    client_software_version="1")))
    assert answer.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in answer.api_keys} == set(advertised())
    with socket.create_connection(server.address, timeout=10) as conn:
        conn.sendall(_SIZE.pack(12) + struct.pack(">hhi", 18, 99, 41) + b"\0\0\0\0")  # v99: no schema anywhere
        frame = _read_frame(conn)
    back = ApiVersionsResponse.decode(frame, version=0, header=True)
    assert back.header.correlation_id == 41 and back.error_code == 35 and len(back.api_keys) == len(advertised())


def test_a_compressed_batch_is_stored_as_sent_and_served_after_a_restart(tmp_path):
    records = [Record(delta, 10 * delta, b"k%d" % delta, b"v" * 50) for delta in range(20)]
    sent = bytes(encode_batch(records, base_offset=0, base_timestamp=1_000, max_timestamp=1_190,
                              compression=Compression.LZ4, producer_id=-1, producer_epoch=-1, base_sequence=-1))
    data_dir = tmp_path / "logs"
    broker = Broker({"t": 1}, data_dir=data_dir, fsync=False)
    with Server(broker) as running:
        exchange(running.address, 0, 9, produce_body(9, "t", 0, sent))
        exchange(running.address, 0, 9, produce_body(9, "t", 0, sent))  # stored at offset 20: only it changes
    broker.close()
    segment = (data_dir / "t-0" / "00000000000000000000.log").read_bytes()
    # As sent but for the two fields outside the CRC the broker sets: the base offset and the leader epoch.
    first, second = segment[:len(sent)], segment[len(sent):]
    assert first[:12] == sent[:12] and first[16:] == sent[16:] and read_header(first).partition_leader_epoch == 0
    assert read_header(second).base_offset == 20 and second[8:] == first[8:]
    broker = Broker({"t": 1}, data_dir=data_dir, fsync=False)
    try:
        stored = broker.log("t", 0).batches[1]
        assert stored.raw == second
        header, back = decode_batch(stored.raw)
        assert header.compression == Compression.LZ4
        assert [r.timestamp_delta for r in back] == [10 * k for k in range(20)]
    finally:
        broker.close()


def test_idemcore_serve_command_stops_on_sigterm_and_keeps_what_it_acknowledged(tmp_path):
    from confluent_kafka import Producer

    data_dir = tmp_path / "data"
    serve = ServeProcess(data_dir, "--topics", "orders:2").start()
    try:
        producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5})
        acked = []
        for k in range(500):
            producer.produce("orders", key=b"%d" % k, value=b"v%d" % k,
                             on_delivery=lambda error, message: error is None and acked.append(message.offset()))
        assert producer.flush(30) == 0
        assert len(acked) == 500
    finally:
        status = serve.stop()
    assert status == 0, serve.output()
    assert "listening on 127.0.0.1:" in serve.output() and "stopped" in serve.output()
    broker = Broker({}, data_dir=data_dir, fsync=False)
    try:
        assert broker.topics == {"orders": 2}
        assert sum(broker.log("orders", p).log_end_offset for p in range(2)) == 500
    finally:
        broker.close()


def test_idemcore_serve_refuses_bad_arguments_in_one_line(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", free_port()))
    busy.listen()
    try:
        for args, words in ((["--topics", "a:0"], "at least 1 partition"),
                            (["--port", "70000"], "0 to 65535"),
                            (["--port", str(busy.getsockname()[1])], "address already in use")):
            result = subprocess.run([sys.executable, "-m", "idemcore.cli", "serve", "--data-dir",
                                     str(tmp_path / "d"), *args], capture_output=True, text=True, timeout=60)
            assert result.returncode == 2, (args, result.stderr)
            assert words in result.stderr.lower(), (args, result.stderr)
            assert "Traceback" not in result.stderr
    finally:
        busy.close()


def test_a_partition_named_twice_gets_each_answer_in_turn(server):
    first = bytes(encode_record_batch(RecordBatch("t", 0, [b"first"]), 0))
    second = bytes(encode_record_batch(RecordBatch("t", 0, [b"second"]), 0))
    cls = load_request_schema(0, 9)
    parts = tuple(make(nested(cls, "PartitionProduceData"), index=0, records=data) for data in (first, second))
    body = make(cls, acks=-1, topic_data=(make(nested(cls, "TopicProduceData"), name="t", partition_data=parts),))
    answer = decoded(ProduceResponse, 9, exchange(server.address, 0, 9, body))
    got = [(p.error_code, p.base_offset) for t in answer.responses for p in t.partition_responses]
    assert got == [(0, 0), (42, -1)]  # written at 0; the second batch for the partition refused INVALID_REQUEST
    assert server.broker.log("t", 0).log_end_offset == 1


def test_a_compression_bomb_is_refused_without_taking_the_memory(server, monkeypatch):
    from idemcore.record.v2 import compression

    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 1 << 20)  # the bound, scaled down for the test
    bomb = bytes(encode_batch([Record(0, 0, None, b"\0" * (8 << 20))], base_offset=0, base_timestamp=0,
                              max_timestamp=0, compression=Compression.ZSTD))
    assert len(bomb) < 2_000
    answer = decoded(ProduceResponse, 9, exchange(server.address, 0, 9, produce_body(9, "t", 0, bomb)))
    [part] = answer.responses[0].partition_responses
    assert part.error_code == 2 and "a batch may decompress to" in part.error_message  # CORRUPT_MESSAGE


def test_a_broker_answer_declaring_a_huge_array_is_refused_not_allocated():
    """What the server does for requests, the client does for answers: a compact array count of 2**32 - 2 in an
    ApiVersions v3 answer would make kio reserve 34 GB and abort the process (checked in a child, so a regression
    fails this test instead of killing the run)."""
    script = (
        "from idemcore.net.wire.frames import read_response, MalformedFrameError\n"
        "frame = (7).to_bytes(4, 'big') + b'\\x00\\x00' + b'\\xfe\\xff\\xff\\xff\\x0f' + bytes(20)\n"
        "try:\n    read_response(18, 3, frame)\nexcept MalformedFrameError as error:\n    print('refused:', error)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "refused:" in result.stdout, (result.returncode, result.stderr[-300:])


def test_serve_topics_brings_back_a_topic_whose_topics_json_entry_was_lost(tmp_path, caplog):
    """topics.json lost: the partitions stay on disk, unserved, and the broker says so; `--topics NAME:N`, as that
    warning and CreateTopics' refusal advise, serves them again with every record."""
    from idemcore.net.messages import ProduceRequest

    data_dir = tmp_path / "data"
    broker = Broker({}, data_dir=data_dir, fsync=False)
    broker.create_topic("s", 2)
    broker.handle(ProduceRequest((RecordBatch("s", 1, [b"x"] * 5),)))
    broker.close()
    (data_dir / "topics.json").unlink()
    shutil.rmtree(data_dir / "s-0")  # (any partition on disk counts, not only the first)
    with caplog.at_level("WARNING", logger="idemcore.broker.broker"):
        Broker({}, data_dir=data_dir, fsync=False).close()
    assert "does not serve, with data: s-1" in caplog.text
    serve = ServeProcess(data_dir, "--topics", "s:2").start()
    assert serve.stop() == 0, serve.output()
    broker = Broker({"s": 2}, data_dir=data_dir, fsync=False)
    try:
        assert broker.log("s", 1).log_end_offset == 5
    finally:
        broker.close()


def test_serve_refuses_an_empty_data_dir():
    result = subprocess.run([sys.executable, "-m", "idemcore.cli", "serve", "--data-dir", ""], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "an empty path" in result.stderr and "Traceback" not in result.stderr
