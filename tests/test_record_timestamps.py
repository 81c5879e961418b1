"""Every record keeps its own timestamp, and a batch travels as the bytes its producer built.

- The records encoder (the Python and the compiled twin) writes each record's timestamp delta from the first's:
  byte for byte what kafka-python's own builder writes for the same records; errors name the record.
- idemcore's Producer builds each batch's v2 bytes once: a log written in process holds every record's own
  timestamp (kafka-python reads its segments), and so does one written over TCP (kafka-python's KafkaConsumer and
  idemcore's Consumer read them); the log keeps the bytes as sent.
- A retry after a lost answer sends the same bytes; an epoch bump rewrites only the header (Kafka's
  reopenAndRewriteProducerState), the records byte for byte as they were.
- The consumer gives each record its own timestamp (LOG_APPEND_TIME: the batch's max timestamp).
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder
from kafka.record.memory_records import MemoryRecords

from idemcore.broker import Broker
from idemcore.client import Producer
from idemcore.client.consumer import Consumer, ConsumerRecord, fetched_steps
from idemcore.kernels import get_record_encoder
from idemcore.net.messages import FetchedPartition, ProduceRequest
from idemcore.net.tcp import TcpTransport, routing
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import (
    BATCH_HEADER_SIZE,
    Record,
    TimestampType,
    decode_batch,
    decode_stored_batches,
    encode_batch,
    encode_record_batch,
    read_header,
    record_batch_from,
    verify_crc,
    with_producer_state,
)
from idemcore.sim.network import Faults, SimulatedNetwork

from .conftest import ENCODERS, EXPECTED
from .real_client_helpers import bounded
from .scripted import ScriptedTransport

T0 = 1_700_000_000_000


def own_timestamp(i: int) -> int | None:
    """Record ``i``'s timestamp as the test sends it: explicit and out of order for most, the time of send (None)
    for every third."""
    return None if i % 3 == 0 else T0 + (i * 7919) % 100_000


def segment_timestamps(directory: Path) -> tuple[dict[tuple[int, int], int], list[tuple[int, int, list[int]]]]:
    """kafka-python's reading of every segment under ``directory``: each ``(partition, offset)``'s timestamp, and
    per batch ``(timestamp type, max timestamp, its records' timestamps)``."""
    stamps: dict[tuple[int, int], int] = {}
    batches = []
    for segment in sorted(directory.glob("t-*/*.log")):
        partition = int(segment.parent.name.rsplit("-", 1)[1])
        records = MemoryRecords(segment.read_bytes())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            inside = [(record.offset, record.timestamp) for record in batch]
            stamps.update(((partition, offset), stamp) for offset, stamp in inside)
            batches.append((batch.timestamp_type, batch.max_timestamp, [stamp for _, stamp in inside]))
    return stamps, batches


# ---------------------------------------------------------------- the records encoder


def kafka_python_bytes(batch: RecordBatch) -> bytes:
    """kafka-python's DefaultRecordBatchBuilder's bytes for ``batch`` (its own codec, independent of ours)."""
    builder = KafkaPythonBuilder(magic=2, compression_type=0, is_transactional=batch.is_transactional,
                                 producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                                 base_sequence=batch.base_sequence, batch_size=1 << 30)
    keys = batch.keys or (None,) * batch.record_count
    headers = batch.headers or ((),) * batch.record_count
    stamps = batch.timestamps or (batch.max_timestamp,) * batch.record_count
    for offset, (key, value, pairs, stamp) in enumerate(zip(keys, batch.values, headers, stamps, strict=True)):
        builder.append(offset, timestamp=stamp, key=key, value=value, headers=list(pairs))
    return bytes(builder.build())


@st.composite
def stamped_batches(draw) -> RecordBatch:
    count = draw(st.integers(1, 25))
    values = tuple(draw(st.lists(st.binary(max_size=200), min_size=count, max_size=count)))
    keys = draw(st.none() | st.lists(st.none() | st.binary(max_size=20), min_size=count, max_size=count).map(tuple))
    # Kafka's range (0 or more), clustered so that deltas take 1 to 9 bytes, and in any order (deltas go negative).
    first = draw(st.integers(0, (1 << 63) - 1))
    spread = draw(st.sampled_from([0, 63, 8191, 1 << 20, 1 << 40, 1 << 62]))
    stamps = tuple(min((1 << 63) - 1, max(0, first + draw(st.integers(-spread, spread)))) for _ in range(count))
    headers = draw(st.none() | st.lists(st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=9)),
                                                 max_size=2).map(tuple), min_size=count, max_size=count).map(tuple))
    return RecordBatch("t", 0, values, keys, draw(st.integers(0, 1 << 40)), draw(st.integers(0, 32767)),
                       draw(st.integers(0, (1 << 31) - 1)), max(stamps), draw(st.booleans()), headers,
                       timestamps=stamps)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=stamped_batches())
def test_every_encoder_writes_kafka_pythons_bytes_for_per_record_timestamps(batch):
    raw = encode_record_batch(batch, 0, 0, backend="python")
    if "cython" in EXPECTED:
        assert encode_record_batch(batch, 0, 0, backend="cython") == raw
    assert raw == kafka_python_bytes(batch)
    header, records = decode_batch(raw)
    assert (header.base_timestamp, header.max_timestamp) == (batch.timestamps[0], max(batch.timestamps))
    assert [header.timestamp_of(record) for record in records] == list(batch.timestamps)
    back = record_batch_from("t", 0, header, records)
    # One tuple of timestamps only when they differ: a batch of one timestamp reads back as one (None).
    assert back.timestamps == (None if len(set(batch.timestamps)) == 1 else batch.timestamps)
    assert [back.max_timestamp if back.timestamps is None else back.timestamps[i]
            for i in range(batch.record_count)] == list(batch.timestamps)


@pytest.mark.parametrize("backend", ENCODERS)
@pytest.mark.parametrize(("timestamps", "error", "message"), [
    ((T0, "x"), TypeError, r"^record 1: timestamp must be an int, not str \('x'\)$"),
    ((T0, True), TypeError, r"^record 1: timestamp must be an int, not bool \(True\)$"),
    ((T0, 1 << 63), ValueError, r"^record 1: timestamp 9223372036854775808 is outside the int64 range$"),
    ((-(1 << 63), (1 << 63) - 1), ValueError,
     r"^record 1: timestamp 9223372036854775807 is 18446744073709551615 ms from the first record's "
     r"-9223372036854775808, outside the int64 range of a timestamp delta$"),
    ((T0,), ValueError, r"^1 timestamps for 2 values$"),
])
def test_a_bad_timestamp_is_refused_naming_its_record(backend, timestamps, error, message):
    with pytest.raises(error, match=message):
        get_record_encoder(backend)((b"a", b"b"), None, None, 0, timestamps)


@pytest.mark.parametrize("backend", ENCODERS)
def test_the_widest_deltas_encode_as_the_codec_does(backend):
    stamps = (0, (1 << 63) - 1, 0, 1 << 62, 63, 64, 8191, 8192)
    batch = RecordBatch("t", 0, (b"v",) * len(stamps), None, 1, 0, 0, max(stamps), timestamps=stamps)
    expected = encode_batch([Record(i, stamp, None, b"v") for i, stamp in enumerate(stamps)], base_timestamp=0,
                            producer_id=1, producer_epoch=0, base_sequence=0, partition_leader_epoch=0)
    assert bytes(encode_record_batch(batch, 0, 0, backend=backend)) == expected


def test_record_batch_from_keeps_timestamps_only_where_they_say_something():
    def decoded(**fields: Any) -> RecordBatch:
        header, records = decode_batch(encode_batch([Record(0, 0, None, b"a"), Record(1, 5, None, b"b")], **fields))
        return record_batch_from("t", 0, header, records)

    assert decoded(base_timestamp=T0).timestamps == (T0, T0 + 5)
    # LOG_APPEND_TIME: the broker's time is every record's, whatever their deltas
    appended = decoded(base_timestamp=T0, max_timestamp=T0 + 99, timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert (appended.timestamps, appended.max_timestamp) == (None, T0 + 99)
    header, records = decode_batch(encode_batch([Record(0, 0, None, b"a"), Record(1, 0, None, b"b")],
                                                base_timestamp=T0))
    assert record_batch_from("t", 0, header, records).timestamps is None  # one timestamp: nothing to keep
    header, records = decode_batch(encode_batch([Record(0, 0, None, b"a")], base_timestamp=T0, max_timestamp=T0 + 1))
    assert record_batch_from("t", 0, header, records).timestamps == (T0,)  # its record's own, not the max


def test_with_producer_state_rewrites_the_header_and_nothing_else():
    batch = RecordBatch("t", 0, (b"a", b"bb"), (b"k", None), 7, 2, 40, T0 + 9, False, timestamps=(T0 + 9, T0))
    raw = bytes(encode_record_batch(batch, 0, -1))
    again = with_producer_state(raw, 8, 3, 0, True)
    header, before = read_header(again), read_header(raw)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.is_transactional) == \
        (8, 3, 0, True)
    assert header._replace(producer_id=7, producer_epoch=2, base_sequence=40, attributes=0, crc=before.crc) == before
    assert again[BATCH_HEADER_SIZE:] == raw[BATCH_HEADER_SIZE:] and verify_crc(again)
    assert with_producer_state(again, 7, 2, 40, False) == raw
    with pytest.raises(ValueError, match=r"^producer_epoch 32768 is outside \[-32768, 32767\]$"):
        with_producer_state(raw, 7, 32768, 0, False)


# ---------------------------------------------------------------- the producer's bytes, in process and over TCP


def test_kafka_python_reads_every_records_own_timestamp_from_a_log_written_in_process(tmp_path):
    broker = Broker({"t": 2}, data_dir=tmp_path, fsync=False)
    producer = Producer(broker, batch_size=500, linger_ms=60_000)  # many batches a partition
    futures = [producer.send("t", b"value-%d" % i, partition=i % 2, timestamp=own_timestamp(i)) for i in range(400)]
    producer.flush()
    sent = {(m.partition, m.offset): m.timestamp for m in (f.result() for f in futures)}
    assert [sent[(i % 2, i // 2)] for i in range(400) if own_timestamp(i) is not None] == \
        [own_timestamp(i) for i in range(400) if own_timestamp(i) is not None]
    broker.close()

    stamps, batches = segment_timestamps(tmp_path)
    assert stamps == sent  # all 400, each its own (the broker's re-encoding gave 390 of them the batch's max)
    assert len(batches) > 10 and len({stamp for _, _, inside in batches for stamp in inside}) > 250
    assert all(kind == 0 and top == max(inside) for kind, top, inside in batches)  # CREATE_TIME, max in the header

    # idemcore's Consumer, in process, over the log read back from those segments
    again = Broker({"t": 2}, data_dir=tmp_path, fsync=False)
    try:
        consumer = Consumer(again, isolation_level="read_uncommitted")
        consumer.assign([("t", 0), ("t", 1)])
        records = poll_all(consumer, 400)
    finally:
        again.close()
    assert {(r.partition, r.offset): r.timestamp for r in records} == sent


def poll_all(consumer: Consumer, count: int, seconds: float = 30) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + seconds
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(timeout_ms=200)
    assert len(records) == count, f"{len(records)} of {count} records read"
    return records


def test_over_tcp_the_log_keeps_the_producers_bytes_and_every_reader_sees_each_records_timestamp(kafka_server,
                                                                                               tmp_path, monkeypatch):
    from kafka import KafkaConsumer, TopicPartition

    sent_wire: list[bytes] = []
    encode_produce = routing.encode_produce

    def recording(request: ProduceRequest, version: int, transactional_id: str | None = None) -> Any:
        body = encode_produce(request, version, transactional_id)
        framed = [p.records for t in body.topic_data for p in t.partition_data]
        for batch in request.batches:  # the producer's own bytes object goes into the frame: nothing re-encoded
            assert batch.wire is not None and any(records is batch.wire for records in framed)
            sent_wire.append(batch.wire)
        return body

    monkeypatch.setattr(routing, "encode_produce", recording)  # what TcpTransport frames a produce request with
    with TcpTransport(kafka_server.bootstrap, request_timeout_ms=10_000) as transport:
        assert transport.create_topics({"t": 2}) == {"t": 0}
        producer = Producer(transport, batch_size=2_000, linger_ms=20)
        futures = [producer.send("t", b"value-%d" % i, partition=i % 2, timestamp=own_timestamp(i))
                   for i in range(400)]
        producer.flush()
        sent = {(m.partition, m.offset): m.timestamp for m in (f.result() for f in futures)}
        consumer = Consumer(transport, isolation_level="read_committed")
        consumer.assign([("t", 0), ("t", 1)])
        records = poll_all(consumer, 400)
        producer.close()
        consumer.close()
    assert sent_wire and {(r.partition, r.offset): r.timestamp for r in records} == sent

    def read_with_kafka_python() -> dict[tuple[int, int], int]:
        reader = KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, auto_offset_reset="earliest",
                               enable_auto_commit=False, consumer_timeout_ms=3_000)
        try:
            reader.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
            return {(m.partition, m.offset): m.timestamp for m in reader}
        finally:
            reader.close()

    assert bounded(60, read_with_kafka_python) == sent

    # The segments hold the producer's bytes (the kafka_server fixture's log directory is tmp_path/kafka-logs).
    stored = segment_batches(tmp_path / "kafka-logs")
    assert len(stored) == len(sent_wire)
    assert sorted(map(as_sent, stored)) == sorted(map(as_sent, sent_wire))


def as_sent(raw: bytes) -> bytes:
    """A batch's bytes but those a broker writes: the base offset (bytes 0-7) and partition leader epoch (12-15)."""
    return raw[8:12] + raw[16:]


def segment_batches(directory: Path) -> list[bytes]:
    out = []
    for segment in sorted(directory.glob("t-*/*.log")):
        data = segment.read_bytes()
        position = 0
        while position < len(data):
            size = read_header(data, position).size_in_bytes
            out.append(data[position:position + size])
            position += size
    return out


# ---------------------------------------------------------------- retries and epoch bumps


def test_a_retry_after_a_lost_answer_sends_the_same_bytes():
    transport = ScriptedTransport()
    producer = Producer(transport, linger_ms=0, retry_backoff_ms=0, request_timeout_ms=1_000,
                        delivery_timeout_ms=60_000)
    futures = [producer.send("t", b"v%d" % i, timestamp=T0 + 10 - i) for i in range(3)]
    producer.poll()
    producer.poll()
    first = transport.produce_requests[-1].batches[0]
    transport.now += 1_000  # no answer within request_timeout_ms: the connection is dropped, the batch retried
    producer.poll()
    producer.poll()
    retry = transport.produce_requests[-1].batches[0]
    assert len(transport.produce_requests) == 2 and transport.disconnects == 1
    assert retry is first and retry.wire == first.wire  # the same object: byte for byte what was sent first
    transport.reply(transport.produce_requests[-1], base_offset=0)
    producer.poll()
    assert [f.result().timestamp for f in futures] == [T0 + 10, T0 + 9, T0 + 8]
    header, records = decode_batch(retry.wire)
    assert [header.timestamp_of(r) for r in records] == [T0 + 10, T0 + 9, T0 + 8]
    assert header.partition_leader_epoch == -1  # Kafka's producer leaves it to the broker


def test_under_lost_and_duplicated_requests_every_attempt_of_a_batch_is_the_same_bytes_and_so_is_the_log():
    network = SimulatedNetwork(lambda: Broker({"t": 2}), Faults(drop_response=0.3, drop_request=0.1, duplicate=0.2,
                                                              reorder=0.2), seed=26)
    attempts: dict[tuple[int, int, int, int], set[bytes]] = defaultdict(set)
    send = network.send

    def recording(client: str, request: Any) -> None:
        if isinstance(request, ProduceRequest):
            for batch in request.batches:
                attempts[(batch.partition, batch.producer_id, batch.producer_epoch, batch.base_sequence)].add(
                    batch.wire)
        send(client, request)

    network.send = recording  # type: ignore[method-assign]
    producer = Producer(network, batch_size=300, linger_ms=2, request_timeout_ms=200, retry_backoff_ms=5)
    futures = [producer.send("t", b"r%03d" % i, partition=i % 2, timestamp=T0 + (i * 31) % 500) for i in range(300)]
    producer.flush()
    assert producer.metrics["retries"] > 0 and producer.metrics["failed_batches"] == 0
    assert all(len(wires) == 1 for wires in attempts.values())
    delivered = {f.result().offset for f in futures if f.result().partition == 0} - {-1}
    assert network.broker is not None
    stored = [s.raw for s in network.broker.log("t", 0).batches]
    assert len(delivered) > 100 and all(raw is not None for raw in stored)
    sent = {as_sent(wire) for key, wires in attempts.items() if key[0] == 0 for wire in wires}
    assert {as_sent(raw) for raw in stored if raw is not None} <= sent


def test_an_epoch_bump_rewrites_only_the_header_of_a_batch_in_flight():
    transport = ScriptedTransport()
    producer = Producer(transport, batch_size=1, linger_ms=0, retry_backoff_ms=0)
    started = producer.send("t", b"start")
    producer.poll()
    transport.reply(transport.produce_requests[-1], base_offset=0)
    producer.poll()
    assert started.result().offset == 0
    futures = [producer.send("t", b"r%d" % i, timestamp=T0 + 100 * i) for i in range(3)]
    producer.poll()
    in_flight = [request.batches[0] for request in transport.produce_requests[1:]]
    assert [(b.producer_epoch, b.base_sequence) for b in in_flight] == [(0, 1), (0, 2), (0, 3)]
    for request in transport.produce_requests[1:]:
        transport.reply(request, ErrorCode.UNKNOWN_PRODUCER_ID)  # the broker lost the producer: bump, restart at 0
    resent: list[RecordBatch] = []
    for offset in range(1, 4):
        for _ in range(3):
            producer.poll()
        request = transport.produce_requests[-1]
        resent.append(request.batches[0])
        transport.reply(request, base_offset=offset)
    producer.poll()
    assert [f.result().offset for f in futures] == [1, 2, 3]
    assert [(b.producer_epoch, b.base_sequence) for b in resent] == [(1, 0), (1, 1), (1, 2)]
    for before, after in zip(in_flight, resent, strict=True):
        assert before.wire is not None and after.wire is not None
        head = read_header(after.wire)
        assert (head.producer_id, head.producer_epoch, head.base_sequence) == (7, 1, after.base_sequence)
        assert after.wire[BATCH_HEADER_SIZE:] == before.wire[BATCH_HEADER_SIZE:]  # the records as built
        assert after.wire[:17] == before.wire[:17] and verify_crc(after.wire)
    assert [read_header(b.wire).base_timestamp for b in resent if b.wire is not None] == [T0, T0 + 100, T0 + 200]


def test_a_negative_timestamp_is_refused_at_send_as_kafka_does():
    producer = Producer(Broker({"t": 1}), linger_ms=1000)
    good = producer.send("t", b"good", partition=0, timestamp=0)
    with pytest.raises(ValueError, match=r"^timestamp -1 is negative: a record's timestamp is 0 or more"):
        producer.send("t", b"bad", partition=0, timestamp=-1)
    assert (good.result().offset, good.result().timestamp) == (0, 0)


# ---------------------------------------------------------------- the consumer


def test_the_consumer_gives_each_record_its_own_timestamp_from_fetched_bytes():
    stamped = bytes(encode_record_batch(RecordBatch("t", 0, (b"a", b"b", b"c"), None, 1, 0, 0, T0 + 50,
                                                    timestamps=(T0 + 50, T0, T0 + 7)), 10))
    appended = encode_batch([Record(0, 0, None, b"d"), Record(1, 3, None, b"e")], base_offset=13,
                            base_timestamp=T0, max_timestamp=T0 + 999, timestamp_type=TimestampType.LOG_APPEND_TIME)
    answer = FetchedPartition("t", 0, high_watermark=15, last_stable_offset=15, records=stamped + appended)
    steps = fetched_steps(answer, decode_stored_batches("t", 0, answer.records), 11, read_committed=False)
    assert [(r.offset, r.timestamp) for _, r in steps if r is not None] == \
        [(11, T0), (12, T0 + 7), (13, T0 + 999), (14, T0 + 999)]

