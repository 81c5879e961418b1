"""DeleteRecords (API 21) and the log start offset, as Kafka's ``ReplicaManager.deleteRecords``,
``Partition.deleteRecordsOnLeader`` and ``UnifiedLog.maybeIncrementLogStartOffset`` /
``deleteLogStartOffsetBreachedSegments`` have them: -1 is the high watermark (the log end on one broker), an offset
past it is OFFSET_OUT_OF_RANGE, one at or below the start changes nothing, the answer's low watermark is the new
start. The start may fall inside a segment or a batch; reads below it answer OFFSET_OUT_OF_RANGE; the segments whose
successor starts at or below it go, after the start is in log-start-offset-checkpoint; it survives clean and
killed restarts. Then the request on the wire (kafka-python's codec) and from confluent-kafka's and kafka-python's
admin clients against ``idemcore serve``."""

from __future__ import annotations

import gc
import os
import random
import time
from pathlib import Path
from typing import Any

import kafka.protocol.admin.topics as kp_topics
import pytest

from idemcore.broker import Broker
from idemcore.broker.log import PartitionLog
from idemcore.net.admin import DeletedRecords, DeleteRecordsRequest, DeleteRecordsResponse
from idemcore.net.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchPartition,
    FetchRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from idemcore.net.wire.admin import DELETE_RECORDS
from idemcore.net.wire.api import WireContext
from idemcore.net.wire.frames import read_request, response_frame
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import CONSUMER_OFFSETS_TOPIC
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import read_leader_epoch_checkpoint, read_offset_checkpoint
from idemcore.record.v2 import decode_stored_batches

TOPIC = "t"
SMALL = {"segment_bytes": 300, "index_interval_bytes": 0}
OOR, NONE = ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.NONE


def open_broker(data_dir: Path | None, **settings: Any) -> Broker:
    return Broker({TOPIC: 1}, data_dir=data_dir, clock=lambda: 1_000, **{**SMALL, **settings})


def send(broker: Broker, pid: int, seq: int, count: int, partition: int = 0) -> tuple[int, int]:
    """A batch of ``count`` records ``v<seq>``, ``v<seq+1>``, ... from idempotent producer ``pid``."""
    batch = RecordBatch(TOPIC, partition, [b"v%d" % (seq + k) for k in range(count)], None, pid, 0, seq, 1_000)
    answer = broker.handle(ProduceRequest((batch,))).responses[0]
    return answer.error_code, answer.base_offset


def delete(broker: Broker, *triples: tuple[str, int, int]) -> tuple[DeletedRecords, ...]:
    response = broker.handle(DeleteRecordsRequest(tuple(triples), request_id=5))
    assert isinstance(response, DeleteRecordsResponse) and response.request_id == 5
    assert response.error_code == NONE
    return response.partitions


def delete_one(broker: Broker, offset: int) -> tuple[int, int]:
    (answer,) = delete(broker, (TOPIC, 0, offset))
    assert (answer.topic, answer.partition) == (TOPIC, 0)
    return answer.error_code, answer.low_watermark


def fetch(broker: Broker, offset: int) -> tuple[int, list[int], int]:
    """The fetch's error code, the offsets of the records it returned, and the log start it reported."""
    (answer,) = broker.handle(FetchRequest((FetchPartition(TOPIC, 0, offset),))).partitions
    offsets = [o for stored in decode_stored_batches(TOPIC, 0, answer.records) for o in stored.offsets()]
    return answer.error_code, offsets, answer.log_start_offset


def listed(broker: Broker, timestamp: int) -> int:
    (result,) = broker.handle(ListOffsetsRequest(((TOPIC, 0, timestamp),))).results
    assert result.error_code == NONE
    return result.offset


def files(directory: Path, suffix: str) -> list[int]:
    return sorted(int(path.stem) for path in directory.glob(f"*{suffix}"))


# ---------------------------------------------------------------- the rules against a model


class Model:
    """The log start and end as Kafka's rules move them."""

    def __init__(self) -> None:
        self.start = self.end = 0

    def delete(self, offset: int) -> tuple[int, int]:
        target = self.end if offset == -1 else offset
        if target < 0 or target > self.end:
            return OOR, -1
        self.start = max(self.start, target)
        return NONE, self.start

    def fetch(self, offset: int) -> int:
        return NONE if self.start <= offset <= self.end else OOR


def check_against(broker: Broker, model: Model, directory: Path) -> None:
    log = broker.log(TOPIC, 0)
    assert (log.log_start_offset, log.log_end_offset) == (model.start, model.end)
    assert (listed(broker, EARLIEST_TIMESTAMP), listed(broker, LATEST_TIMESTAMP)) == (model.start, model.end)
    assert [offset for offset, *_ in log.records()] == list(range(model.start, model.end))
    assert log.batches == [] or log.batches[0].base_offset <= model.start < log.batches[0].next_offset
    bases = files(directory, ".log")
    assert bases == log.segment_bases
    # Kafka's deleteLogStartOffsetBreachedSegments: no segment whose successor starts at or below the start.
    assert bases[0] <= model.start and all(base > model.start for base in bases[1:])
    assert all(offset >= model.start for offset in files(directory, ".snapshot"))
    epochs = read_leader_epoch_checkpoint(directory / "leader-epoch-checkpoint").entries
    if model.start < model.end:
        assert epochs == [(0, model.start)]
    else:  # an entry at the log end: loading drops it (Kafka's LogLoader, truncateFromEnd of the log end)
        assert epochs in ([], [(0, model.start)])


@pytest.mark.parametrize("seed", range(8))
def test_deletes_fetches_and_restarts_follow_the_model(tmp_path, seed):
    rng = random.Random(seed)
    model = Model()
    broker = open_broker(tmp_path)
    directory = tmp_path / f"{TOPIC}-0"
    seq = 0
    try:
        for _ in range(80):
            step = rng.choices(["produce", "delete", "fetch", "close", "kill"], [6, 3, 3, 1, 1])[0]
            if step == "produce":
                count = rng.randint(1, 4)
                assert send(broker, 7, seq, count) == (NONE, model.end)
                seq += count
                model.end += count
                # A roll at or below the start leaves a segment below it until the next retention check, as in
                # Kafka (DeleteRecords and a start delete such segments at once).
                broker.delete_old_segments()
            elif step == "delete":
                offset = rng.choice([-1, -2, model.start - 1, model.start, model.end, model.end + 1,
                                     rng.randint(model.start, model.end), rng.randint(model.start, model.end)])
                assert delete_one(broker, offset) == model.delete(offset), offset
            elif step == "fetch":
                offset = rng.randint(max(0, model.start - 3), model.end + 2)
                code, offsets, start = fetch(broker, offset)
                assert (code, start) == (model.fetch(offset), model.start), offset
                if code == NONE and offset < model.end:  # from the batch holding the offset
                    assert offsets[0] <= offset <= offsets[-1]
            else:
                broker.close() if step == "close" else broker.kill()
                broker = open_broker(tmp_path)
            check_against(broker, model, directory)
        if model.start:
            entries = read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint").entries
            assert entries == [(TOPIC, 0, model.start)]
    finally:
        broker.close()


# ---------------------------------------------------------------- the answers


@pytest.fixture
def ten(tmp_path) -> Broker:
    """Offsets 0-9 in batches of 2 from producer 1, two batches a segment."""
    broker = open_broker(tmp_path, segment_bytes=200)
    for seq in range(0, 10, 2):
        send(broker, 1, seq, 2)
    assert broker.log(TOPIC, 0).segment_bases == [0, 4, 8]
    yield broker
    broker.close()


def test_minus_one_is_the_high_watermark_and_an_offset_past_it_is_out_of_range(ten):
    answers = delete(ten, (TOPIC, 0, 11))
    assert answers == (DeletedRecords(TOPIC, 0, OOR, -1, "Cannot increment the log start offset to 11 of partition "
                                      "t-0 since it is larger than the high watermark 10"),)
    assert delete_one(ten, -2) == (OOR, -1)
    assert ten.log(TOPIC, 0).log_start_offset == 0
    assert delete_one(ten, -1) == (NONE, 10)
    assert fetch(ten, 10) == (NONE, [], 10) and fetch(ten, 9)[0] == OOR
    assert ten.log(TOPIC, 0).batches == []


def test_an_offset_at_or_below_the_start_changes_nothing(ten):
    assert delete_one(ten, 5) == (NONE, 5)
    checkpoint = (ten.data_dir / "log-start-offset-checkpoint").stat().st_mtime_ns
    assert delete_one(ten, 3) == (NONE, 5)
    assert delete_one(ten, 5) == (NONE, 5)
    assert ten.log(TOPIC, 0).log_start_offset == 5
    assert (ten.data_dir / "log-start-offset-checkpoint").stat().st_mtime_ns == checkpoint  # not written again


def test_the_start_inside_a_batch_reads_from_that_batch_and_refuses_below(ten):
    assert delete_one(ten, 5) == (NONE, 5)  # inside the batch of offsets 4-5
    log = ten.log(TOPIC, 0)
    assert fetch(ten, 5) == (NONE, list(range(4, 10)), 5)  # the batch holding 5, whole, as Kafka serves it
    assert fetch(ten, 4)[0] == OOR and fetch(ten, 0)[0] == OOR
    assert [stored.base_offset for stored in log.batches] == [4, 6, 8]
    assert [offset for offset, *_ in log.records()] == [5, 6, 7, 8, 9]
    assert log.segment_bases[0] <= 4 and all(base > 5 for base in log.segment_bases[1:])
    assert log.offset_for_timestamp(0) == (5, 1_000)  # the timestamp search starts at the log start
    assert listed(ten, EARLIEST_TIMESTAMP) == 5


def test_each_partition_is_answered_in_order_and_errors_as_kafka_orders_them(tmp_path):
    configs = {"c": {"cleanup.policy": "compact"}, "cd": {"cleanup.policy": "compact,delete"}}
    with Broker({TOPIC: 2, "c": 1, "cd": 1}, data_dir=tmp_path, topic_configs=configs) as broker:
        for topic in (TOPIC, "c", "cd"):
            batch = RecordBatch(topic, 0, [b"a", b"b", b"c"], [b"k1", b"k2", b"k3"], -1, -1, -1, 1_000)
            assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == NONE
        broker.group_coordinator  # noqa: B018 (makes __consumer_offsets)
        answers = delete(broker, (TOPIC, 0, 2), ("nope", 0, 1), (TOPIC, 7, 1), (CONSUMER_OFFSETS_TOPIC, 0, 0),
                         ("c", 0, 1), ("cd", 0, 1), (TOPIC, 1, 0), (TOPIC, 0, 1))
        assert [(a.topic, a.partition, a.error_code, a.low_watermark) for a in answers] == [
            (TOPIC, 0, NONE, 2), ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (TOPIC, 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (CONSUMER_OFFSETS_TOPIC, 0, ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
            ("c", 0, ErrorCode.POLICY_VIOLATION, -1), ("cd", 0, NONE, 1), (TOPIC, 1, NONE, 0), (TOPIC, 0, NONE, 2)]
        assert answers[3].error_message == f"Cannot delete records of internal topic {CONSUMER_OFFSETS_TOPIC}"
        assert broker.log("c", 0).log_start_offset == 0
        assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint").entries == [
            ("cd", 0, 1), (TOPIC, 0, 2)]


@pytest.mark.parametrize(("request_", "message"), [
    (DeleteRecordsRequest(None), "partitions must be a tuple"),  # type: ignore[arg-type]
    (DeleteRecordsRequest(((TOPIC, 0),)), "partition ('t', 0) is not a (topic name, partition number, offset)"),  # type: ignore[arg-type]
    (DeleteRecordsRequest(((TOPIC, 0, "1"),)), "partition ('t', 0, '1') is not"),  # type: ignore[arg-type]
    (DeleteRecordsRequest(((TOPIC, 0, True),)), "partition ('t', 0, True) is not"),
    (DeleteRecordsRequest(((TOPIC, 0, 1),), timeout_ms=None), "timeout_ms must be an int"),  # type: ignore[arg-type]
])
def test_a_malformed_request_is_answered_invalid_request(tmp_path, request_, message):
    with open_broker(tmp_path) as broker:
        send(broker, 1, 0, 3)
        response = broker.handle(request_)
        assert response.error_code == ErrorCode.INVALID_REQUEST and response.partitions == ()
        assert response.error_message.startswith("DeleteRecordsRequest: ") and message in response.error_message
        assert broker.log(TOPIC, 0).log_start_offset == 0


def test_a_broker_in_memory_moves_its_start_too():
    broker = open_broker(None)
    send(broker, 1, 0, 4)
    assert delete_one(broker, 3) == (NONE, 3)
    assert fetch(broker, 2)[0] == OOR and fetch(broker, 3) == (NONE, [0, 1, 2, 3], 3)
    assert [offset for offset, *_ in broker.log(TOPIC, 0).records()] == [3]


# ---------------------------------------------------------------- files, order and restarts


def test_the_start_is_durable_before_any_file_goes(ten, monkeypatch):
    directory = ten.data_dir / f"{TOPIC}-0"
    before = files(directory, ".log")
    monkeypatch.setattr(PartitionLog, "delete_start_breached_segments", lambda self: 0)  # dies before deleting
    assert delete_one(ten, 7) == (NONE, 7)
    monkeypatch.undo()
    assert files(directory, ".log") == before
    assert read_offset_checkpoint(ten.data_dir / "log-start-offset-checkpoint").entries == [(TOPIC, 0, 7)]
    ten.kill()
    with open_broker(ten.data_dir, segment_bytes=200) as again:  # the start finishes the deletion
        log = again.log(TOPIC, 0)
        assert log.log_start_offset == 7 and files(directory, ".log") == log.segment_bases
        assert all(base > 7 for base in log.segment_bases[1:]) and fetch(again, 6)[0] == OOR


def test_a_checkpoint_that_cannot_be_written_moves_nothing(ten, monkeypatch):
    directory = ten.data_dir / f"{TOPIC}-0"
    before = files(directory, ".log")

    def full_disk(name: str, offsets: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ten.log_manager, "_write_offsets_file", full_disk)
    (answer,) = delete(ten, (TOPIC, 0, 7))
    assert (answer.error_code, answer.low_watermark) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
    assert "No space left on device" in answer.error_message
    assert ten.log(TOPIC, 0).log_start_offset == 0 and files(directory, ".log") == before
    assert fetch(ten, 0)[0] == NONE


@pytest.mark.parametrize("stop", ["close", "kill"])
def test_the_start_survives_restarts_and_producers_keep_their_state(tmp_path, stop):
    broker = open_broker(tmp_path)
    assert send(broker, 1, 0, 1) == (NONE, 0)  # producer 1's only batch
    for seq in range(0, 12, 3):
        send(broker, 2, seq, 3)
    assert delete_one(broker, 8) == (NONE, 8)
    assert send(broker, 1, 0, 1) == (NONE, 0)  # its batch went, its state did not: still a duplicate
    directory = tmp_path / f"{TOPIC}-0"
    assert all(offset >= 8 for offset in files(directory, ".snapshot"))
    broker.close() if stop == "close" else broker.kill()
    with open_broker(tmp_path) as again:
        log = again.log(TOPIC, 0)
        assert (log.log_start_offset, log.log_end_offset) == (8, 13)
        assert fetch(again, 7)[0] == OOR and fetch(again, 8)[1][0] == 7  # the batch 7-9 holds the start
        assert read_leader_epoch_checkpoint(directory / "leader-epoch-checkpoint").entries == [(0, 8)]
        assert send(again, 2, 9, 3) == (NONE, 10)  # producer 2's last batch, at 10-12: a duplicate
        if stop == "close":  # the snapshot at the clean close holds producer 1, whose batches are gone
            assert send(again, 1, 0, 1) == (NONE, 0)
        assert send(again, 2, 12, 1) == (NONE, 13)


def test_retention_goes_on_from_a_start_inside_a_segment(tmp_path):
    day = 86_400_000
    now = 10 * day
    with Broker({TOPIC: 1}, data_dir=tmp_path, clock=lambda: now, retention_ms=day, segment_bytes=200,
                index_interval_bytes=0) as broker:
        for seq in range(0, 8, 2):  # two days old: segments 0 and 4
            batch = RecordBatch(TOPIC, 0, [b"a", b"b"], None, 1, 0, seq, now - 2 * day)
            assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == NONE
        batch = RecordBatch(TOPIC, 0, [b"c", b"d"], None, 1, 0, 8, now)  # fresh: segment 8
        assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == NONE
        assert delete_one(broker, 5) == (NONE, 5)
        log = broker.log(TOPIC, 0)
        assert log.segment_bases == [4, 8]
        assert broker.delete_old_segments() == 1  # segment 4, expired, holding the start
        assert (log.log_start_offset, log.segment_bases) == (8, [8])
        assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint").entries == [(TOPIC, 0, 8)]
        assert delete_one(broker, 6) == (NONE, 8)


def test_a_killed_broker_replays_the_batch_holding_the_start(tmp_path):
    broker = open_broker(tmp_path, segment_bytes=1 << 20)  # one segment: no snapshot until the clean close
    send(broker, 1, 0, 5)
    send(broker, 2, 0, 5)  # offsets 5-9
    assert delete_one(broker, 7) == (NONE, 7)  # inside producer 2's batch
    broker.kill()
    with open_broker(tmp_path, segment_bytes=1 << 20) as again:
        # Replayed from the start: producer 2's batch 5-9 is the one holding it, so it is known and a retry of it
        # is a duplicate (a replay from offset 7 on would not have seen it).
        assert send(again, 2, 0, 5) == (NONE, 5)
        assert send(again, 2, 5, 1) == (NONE, 10)


def test_a_log_that_ends_below_its_start_starts_over_there(tmp_path):
    broker = open_broker(tmp_path, segment_bytes=1 << 20)
    for seq in range(0, 10, 2):
        send(broker, 1, seq, 2)
    assert delete_one(broker, 9) == (NONE, 9)
    broker.close()
    # Damage from outside that no recovery point catches: the segment cut after its first batch, the floors gone.
    segment = tmp_path / f"{TOPIC}-0" / "00000000000000000000.log"
    first = decode_stored_batches(TOPIC, 0, segment.read_bytes())[0]
    os.truncate(segment, len(first.raw))
    for name in ("recovery-point-offset-checkpoint", ".kafka_cleanshutdown", "written-log-ends"):
        (tmp_path / name).unlink(missing_ok=True)
    with open_broker(tmp_path, segment_bytes=1 << 20) as again:
        log = again.log(TOPIC, 0)
        assert (log.log_start_offset, log.log_end_offset, log.segment_bases) == (9, 9, [9])
        assert files(tmp_path / f"{TOPIC}-0", ".log") == [9]
        assert send(again, 3, 0, 1) == (NONE, 9)


# ---------------------------------------------------------------- on the wire (kafka-python's codec)

CTX = WireContext(node_id=0, host="127.0.0.1", port=9092, cluster_id="idemcore", topics=lambda: {TOPIC: 2})


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_through_the_wire_at_every_version(tmp_path, version):
    request_cls = kp_topics.DeleteRecordsRequest
    topic_cls = request_cls.DeleteRecordsTopic
    partition_cls = topic_cls.DeleteRecordsPartition
    with Broker({TOPIC: 2}, data_dir=tmp_path, **SMALL) as broker:
        for seq in range(0, 10, 2):
            send(broker, 1, seq, 2)
        request = request_cls(topics=[
            topic_cls(name=TOPIC, partitions=[partition_cls(partition_index=0, offset=3),
                                              partition_cls(partition_index=1, offset=-1),  # empty: HW 0
                                              partition_cls(partition_index=0, offset=6)]),  # last one wins
            topic_cls(name="nope", partitions=[partition_cls(partition_index=0, offset=0)])],
            timeout_ms=1_500, version=version)
        request.with_header(correlation_id=41, client_id="admin-test")
        header, body = read_request(bytes(request.encode(header=True, framed=True))[4:])
        message, carry = DELETE_RECORDS.to_message(CTX, version, header.correlation_id, body)
        assert message == DeleteRecordsRequest(((TOPIC, 0, 6), (TOPIC, 1, -1), ("nope", 0, 0)), 1_500, 41)
        response = broker.handle(message)
        frame = b"".join(response_frame(41, DELETE_RECORDS.to_wire(CTX, version, body, response, carry)))
        decoded = kp_topics.DeleteRecordsResponse.decode(frame, version=version, header=True, framed=True)
        assert decoded.header.correlation_id == 41
        assert decoded.encode(header=True, framed=True) == frame  # kafka-python writes the same bytes
        assert [(t["name"], [(p["partition_index"], p["low_watermark"], p["error_code"]) for p in t["partitions"]])
                for t in decoded.to_dict()["topics"]] == [(TOPIC, [(0, 6, 0), (1, 0, 0)]), ("nope", [(0, -1, 3)])]
        assert broker.log(TOPIC, 0).log_start_offset == 6


def test_a_malformed_in_process_answer_still_translates():
    request_cls = kp_topics.DeleteRecordsRequest
    topic_cls = request_cls.DeleteRecordsTopic
    request = request_cls(topics=[topic_cls(name=TOPIC, partitions=[
        topic_cls.DeleteRecordsPartition(partition_index=0, offset=1)])], timeout_ms=0, version=2)
    request.with_header(correlation_id=1, client_id="admin-test")
    _, body = read_request(bytes(request.encode(header=True, framed=True))[4:])
    bad = DeleteRecordsResponse((), 1, ErrorCode.INVALID_REQUEST, "bad")
    frame = b"".join(response_frame(1, DELETE_RECORDS.to_wire(CTX, 2, body, bad, None)))
    (topic,) = kp_topics.DeleteRecordsResponse.decode(frame, version=2, header=True, framed=True).to_dict()["topics"]
    assert topic["partitions"] == [{"partition_index": 0, "low_watermark": -1,
                                    "error_code": ErrorCode.INVALID_REQUEST}]


# ---------------------------------------------------------------- real admin clients against `idemcore serve`

SERVE_TIMEOUT_S = 20


def _confluent_consumer(bootstrap: str, reset: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{reset}", "enable.auto.commit": False,
                     "auto.offset.reset": reset, "fetch.wait.max.ms": 50, "log.connection.close": False})


def _first_from(bootstrap: str, offset: int, reset: str = "earliest") -> tuple[int, bytes] | str:
    """What a confluent-kafka consumer assigned at ``offset`` gets first: ``(offset, value)``, or the name of the
    error librdkafka reports."""
    from confluent_kafka import TopicPartition

    consumer = _confluent_consumer(bootstrap, reset)
    try:
        consumer.assign([TopicPartition(TOPIC, 0, offset)])
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                return str(message.error().name())
            return message.offset(), message.value()
        raise AssertionError(f"nothing read from offset {offset} in {SERVE_TIMEOUT_S} s")
    finally:
        consumer.close()


def _watermarks(bootstrap: str) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    consumer = _confluent_consumer(bootstrap, "earliest")
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=SERVE_TIMEOUT_S)
        return low, high
    finally:
        consumer.close()


def test_confluent_kafka_and_kafka_python_delete_records_from_idemcore_serve(tmp_path):
    import confluent_kafka
    import kafka
    from confluent_kafka.admin import AdminClient
    from kafka.errors import OffsetOutOfRangeError

    from tests.peers import ServeProcess

    serve = ServeProcess(tmp_path / "data", "--topics", f"{TOPIC}:1", "--quiet",
                         "--override", "log.segment.bytes=512")
    serve.start()
    clients: list[Any] = []
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True,
                                             "linger.ms": 0, "log.connection.close": False})
        for i in range(30):  # a batch each: segments of about 7
            producer.produce(TOPIC, b"v%d" % i, partition=0)
            assert producer.flush(SERVE_TIMEOUT_S) == 0
        directory = tmp_path / "data" / f"{TOPIC}-0"
        assert len(files(directory, ".log")) > 3

        admin = AdminClient({"bootstrap.servers": serve.bootstrap, "log.connection.close": False})
        partition = confluent_kafka.TopicPartition(TOPIC, 0, 10)
        (future,) = admin.delete_records([partition], request_timeout=SERVE_TIMEOUT_S).values()
        assert future.result(SERVE_TIMEOUT_S).low_watermark == 10
        kafka_admin = kafka.KafkaAdminClient(bootstrap_servers=serve.bootstrap, request_timeout_ms=10_000)
        clients.append(kafka_admin)
        tp = kafka.TopicPartition(TOPIC, 0)
        assert kafka_admin.delete_records({tp: 13})[tp]["low_watermark"] == 13
        assert kafka_admin.delete_records({tp: 5})[tp]["low_watermark"] == 13  # below the start: no change
        with pytest.raises(OffsetOutOfRangeError):
            kafka_admin.delete_records({tp: 31})
        segments = files(directory, ".log")
        assert segments[0] <= 13 and all(base > 13 for base in segments[1:])
        assert (tmp_path / "data" / "log-start-offset-checkpoint").read_text().splitlines() == ["0", "1", "t 0 13"]

        assert _first_from(serve.bootstrap, confluent_kafka.OFFSET_BEGINNING) == (13, b"v13")
        assert _first_from(serve.bootstrap, 5) == (13, b"v13")  # OFFSET_OUT_OF_RANGE, reset to the earliest
        assert _first_from(serve.bootstrap, 5, reset="error") == "_AUTO_OFFSET_RESET"
        assert _watermarks(serve.bootstrap) == (13, 30)

        kafka_admin.close()
        clients.clear()
        del producer, admin  # librdkafka's clients close when collected: none keeps reconnecting meanwhile
        gc.collect()
        serve.kill()  # SIGKILL: the start is in its checkpoint already
        serve.start()
        assert _watermarks(serve.bootstrap) == (13, 30)
        assert _first_from(serve.bootstrap, 0) == (13, b"v13")
        serve.stop()  # a clean stop and start
        serve.start()
        assert _watermarks(serve.bootstrap) == (13, 30)

        admin = AdminClient({"bootstrap.servers": serve.bootstrap, "log.connection.close": False})
        everything = confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_END)  # -1: the high watermark
        (future,) = admin.delete_records([everything], request_timeout=SERVE_TIMEOUT_S).values()
        assert future.result(SERVE_TIMEOUT_S).low_watermark == 30
        assert _watermarks(serve.bootstrap) == (30, 30)
        del admin
        gc.collect()
    finally:
        for client in clients:
            client.close()
        serve.stop()
    assert "Traceback" not in serve.output()
