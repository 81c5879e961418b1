"""Record headers end to end, and a RecordBatch as the broker stores it (record.v2.batches).

- Producer.send(headers=...) -> in-process Broker -> the partition log's RecordBatch: same headers, records
  without headers beside records with them, retries and split batches resending the same headers, sizes
  counting them, bad headers refused with a message naming the value.
- encode_record_batch / record_batch_from: round trip (hypothesis), the Python and the compiled records encoder
  byte for byte (hypothesis and edge cases), and both against codec.encode_batch (the broker's path before).
- kafka-python's independent codec: its batches with headers give the same RecordBatch; ours read back there
  with the same offsets, keys, values and headers, and a valid CRC.
"""

from __future__ import annotations

import enum
import inspect
import re
import sys
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from idemcore.broker import Broker
from idemcore.client import Producer, RecordTooLargeError
from idemcore.errors import BackendUnavailableError
from idemcore.kernels import get_record_encoder, record_encode_reference
from idemcore.protocol.codes import ControlType, ErrorCode
from idemcore.record.batch import BATCH_OVERHEAD, HEADER_OVERHEAD, RECORD_OVERHEAD, RecordBatch, records_size
from idemcore.record.v2 import (
    BATCH_HEADER_SIZE,
    Record,
    decode_batch,
    encode_batch,
    encode_end_txn_marker,
    encode_record_batch,
    read_header,
    record_batch_from,
    verify_crc,
)

from .conftest import ENCODERS, EXPECTED
from .scripted import ScriptedTransport


def test_the_compiled_encoder_loads_when_the_cython_backend_is_expected():
    """Fails, never skips, when the extension was expected and is missing (a stale build): the suite's rule."""
    assert get_record_encoder("python") is record_encode_reference.encode_records
    if "cython" not in EXPECTED:
        return
    compiled = get_record_encoder("cython")
    assert compiled.__module__ == "idemcore.kernels.cython_record_encode"
    assert get_record_encoder("auto") is get_record_encoder("numba") is compiled


@pytest.mark.skipif("cython" not in EXPECTED, reason="the compiled encoder is not expected")
def test_the_compiled_encoder_takes_its_python_twins_parameters():
    from idemcore.kernels import cython_record_encode

    assert list(inspect.signature(cython_record_encode.encode_records).parameters) == \
        list(inspect.signature(record_encode_reference.encode_records).parameters)


def test_without_the_extension_auto_falls_back_to_the_python_encoder_with_one_warning(monkeypatch):
    import idemcore.kernels as kernels

    monkeypatch.setitem(sys.modules, "idemcore.kernels.cython_record_encode", None)  # import raises ImportError
    kernels._load_twin.cache_clear()
    kernels._auto_twin.cache_clear()
    try:
        with pytest.raises(BackendUnavailableError, match=r"^backend 'cython' has no record encoder: "):
            get_record_encoder("cython")
        with pytest.warns(RuntimeWarning, match=r"^idemcore encodes records in Python \(backend 'cython'"):
            assert get_record_encoder("auto") is record_encode_reference.encode_records
        batch = RecordBatch("t", 0, (b"v",), None, 1, 0, 0, 0, False, ((("k", b"h"),),))
        assert encode_record_batch(batch, 0, backend="auto") == old_broker_encoding(batch, 0)
    finally:
        kernels._load_twin.cache_clear()
        kernels._auto_twin.cache_clear()


# --- producer -> broker -> log -------------------------------------------------------------------------------

class _Name(enum.StrEnum):
    TRACE = "trace"


def stored(broker: Broker, topic: str = "t", partition: int = 0) -> list[tuple[bytes, tuple]]:
    """(value, headers) of every record the broker's log holds, in offset order."""
    out = []
    for entry in broker.log(topic, partition).batches:
        batch = entry.batch
        headers = batch.headers if batch.headers is not None else [()] * batch.record_count
        out += [(value, tuple(h)) for value, h in zip(batch.values, headers, strict=True)]
    return out


def test_headers_reach_the_broker_log_with_their_records():
    broker = Broker({"t": 1})
    producer = Producer(broker, linger_ms=60_000)
    sent = [
        (b"plain", None),  # before any record with headers: its batch backfills ()
        (b"one", [("trace", b"\x00\x01")]),
        (b"null and unicode", [("z\u00fc\u0441\u4e2d\U0001f600", None), ("", b"")]),
        (b"repeated keys keep their order", [("k", b"1"), ("k", b"2"), ("k", None)]),
        (b"empty list", []),
        (b"bytearray and memoryview values", [("a", bytearray(b"x")), ("b", memoryview(b"yz"))]),
        (b"a StrEnum key, list pairs", [(_Name.TRACE, b"t"), ["list", b"pair"]]),
    ]
    futures = [producer.send("t", value, headers=headers, partition=0) for value, headers in sent]
    producer.flush()
    assert [f.result().offset for f in futures] == list(range(len(sent)))
    want = [(value, tuple((k, None if v is None else bytes(v)) for k, v in headers or ())) for value, headers in sent]
    assert stored(broker) == want
    assert all(type(k) is str and type(v) in (bytes, type(None)) and type(pair) is tuple
               for _, headers in stored(broker) for pair in headers for k, v in [pair])
    batch = broker.log("t", 0).batches[0].batch
    assert batch.headers is not None and batch.headers[0] == () and batch.headers[1] == (("trace", b"\x00\x01"),)
    assert all(type(h) is tuple for h in batch.headers)  # immutable: the stored batch never changes


def test_batches_without_headers_keep_none():
    broker = Broker({"t": 1})
    producer = Producer(broker, linger_ms=60_000)
    producer.send("t", b"a", partition=0)
    producer.send("t", b"b", headers=[], partition=0)
    producer.send("t", b"c", headers=(), partition=0)
    producer.flush()
    (entry,) = broker.log("t", 0).batches
    assert entry.batch.headers is None and entry.batch.values == (b"a", b"b", b"c")


def test_a_retry_resends_the_same_headers_whatever_the_caller_changes():
    transport = ScriptedTransport()
    producer = Producer(transport, batch_size=1, linger_ms=0, retry_backoff_ms=0)
    headers = [("trace", b"abc"), ("null", None)]
    future = producer.send("t", b"v", headers=headers)
    headers.append(("later", b"not sent"))  # the caller's list, changed after send
    for _ in range(5):
        producer.poll()
    transport.reply(transport.produce_requests[0], ErrorCode.NOT_LEADER_OR_FOLLOWER)
    for _ in range(5):
        producer.poll()
    assert len(transport.produce_requests) == 2
    first, retry = (request.batches[0] for request in transport.produce_requests)
    assert first.headers == retry.headers == ((("trace", b"abc"), ("null", None)),)
    assert first.base_sequence == retry.base_sequence
    transport.reply(transport.produce_requests[1], base_offset=0)
    for _ in range(3):
        producer.poll()
    assert future.result().offset == 0


def test_a_split_batch_keeps_each_records_headers():
    # 3 records of 60 bytes fit message_max_bytes=300 without their headers, not with them: the broker refuses
    # the batch (MESSAGE_TOO_LARGE), the producer halves it, and every record keeps its own headers.
    broker = Broker({"t": 1}, message_max_bytes=300)
    producer = Producer(broker, linger_ms=60_000)
    sent = [(letter * 60, ((f"h-{letter.decode()}", letter * 40),)) for letter in (b"A", b"B", b"C")]
    assert RecordBatch("t", 0, [v for v, _ in sent]).size_in_bytes() <= 300
    assert RecordBatch("t", 0, [v for v, _ in sent], headers=[h for _, h in sent]).size_in_bytes() > 300
    futures = [producer.send("t", value, headers=headers, partition=0) for value, headers in sent]
    producer.flush()
    assert [f.result().offset for f in futures] == [0, 1, 2]
    assert producer.metrics["split_batches"] >= 1
    assert stored(broker) == sent


def test_sizes_count_headers():
    values, keys = [b"v" * 10, b"w"], [b"k", None]
    headers = [(("\u00fc", b"123"), ("n", None)), ()]
    header_bytes = (2 + 3 + HEADER_OVERHEAD) + (1 + HEADER_OVERHEAD)  # "ü" is 2 bytes of UTF-8
    assert records_size(values, keys, headers) == records_size(values, keys) + header_bytes
    assert records_size(values, keys) == 11 + 1 + 2 * RECORD_OVERHEAD
    batch = RecordBatch("t", 0, values, keys, 1, 0, 0, 0, False, headers)
    assert batch.size_in_bytes() == BATCH_OVERHEAD + records_size(values, keys) + header_bytes
    # What the producer counts for a batch is the same sum.
    producer = Producer(ScriptedTransport(), linger_ms=60_000)
    for value, key, record_headers in zip(values, keys, headers, strict=True):
        producer.send("t", value, key, headers=list(record_headers))
    (queued,) = producer.accumulator.queues[0]
    assert queued.size == records_size(values, keys, headers)
    # A record too large only because of its headers is refused at send, with its size.
    small = Producer(ScriptedTransport(), max_request_size=100)
    small.send("t", b"x" * 50)
    with pytest.raises(RecordTooLargeError, match=r"a record of 162 bytes is larger than max_request_size=100"):
        small.send("t", b"x" * 50, headers=[("h", b"y" * 99)])


@pytest.mark.parametrize(("headers", "error", "message"), [
    ([(b"bytes-key", b"v")], TypeError, r"^header 0: key must be a str, not bytes \(b'bytes-key'\)$"),
    ([("ok", b""), (7, b"v")], TypeError, r"^header 1: key must be a str, not int \(7\)$"),
    ([("k", "text")], TypeError, r"^header 0 \('k'\): value must be bytes or None, not str \('text'\)$"),
    ([("k", 12)], TypeError, r"^header 0 \('k'\): value must be bytes or None, not int \(12\)$"),
    ([("k", b"v", b"extra")], TypeError, r"^header 0: expected a \(str, bytes \| None\) pair, got \('k', b'v', b'e"),
    (["kv"], TypeError, r"^header 0: expected a \(str, bytes \| None\) pair, got 'kv'$"),
    ([None], TypeError, r"^header 0: expected a \(str, bytes \| None\) pair, got None$"),
    ({"k": b"v"}, TypeError, r"^headers must be a sequence of \(str, bytes \| None\) pairs, not dict"),
    ("k", TypeError, r"^headers must be a sequence of \(str, bytes \| None\) pairs, not str \('k'\)$"),
    ([("\ud800", b"v")], ValueError, r"^header 0: key '\\ud800' cannot be encoded as UTF-8 \(a lone surrogate\)$"),
])
def test_bad_headers_are_refused_at_send_naming_the_value(headers, error, message):
    producer = Producer(ScriptedTransport())
    with pytest.raises(error, match=message):
        producer.send("t", b"v", headers=headers)
    assert not producer.accumulator.has_queued()


def test_a_header_key_read_from_bytes_that_are_not_utf8_is_sent_back_as_those_bytes():
    key = b"\xff\xfe-key".decode("utf-8", "surrogateescape")  # as record.v2 decodes such a key
    broker = Broker({"t": 1})
    producer = Producer(broker)
    producer.send("t", b"v", headers=[(key, b"x")], partition=0).result()
    batch = broker.log("t", 0).batches[0].batch
    assert batch.headers == (((key, b"x"),),)
    raw = encode_record_batch(batch, 0)
    assert b"\xff\xfe-key" in raw and decode_batch(raw)[1][0].headers == ((key, b"x"),)


# --- encode_record_batch / record_batch_from -------------------------------------------------------------------

def old_broker_encoding(batch: RecordBatch, base_offset: int, partition_leader_epoch: int = 0) -> bytes:
    """How the broker encoded a batch before encode_record_batch: through codec.encode_batch and Record tuples."""
    keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
    headers = batch.headers if batch.headers is not None else ((),) * batch.record_count
    records = [Record(i, 0, key, value, tuple(h)) for i, (key, value, h) in
               enumerate(zip(keys, batch.values, headers, strict=True))]
    return encode_batch(records, base_offset=base_offset, base_timestamp=batch.max_timestamp,
                        max_timestamp=batch.max_timestamp, producer_id=batch.producer_id,
                        producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                        is_transactional=batch.is_transactional, partition_leader_epoch=partition_leader_epoch)


int32s = st.integers(-(1 << 31), (1 << 31) - 1)
int64s = st.integers(-(1 << 63), (1 << 63) - 1)
# Header keys: any text, and strings decoded from arbitrary bytes with surrogateescape (as record.v2 reads them).
header_keys = st.text(max_size=12) | st.binary(max_size=8).map(lambda b: b.decode("utf-8", "surrogateescape"))
nullable = st.none() | st.binary(max_size=40)
record_headers = st.lists(st.tuples(header_keys, nullable), max_size=4).map(tuple)


@st.composite
def record_batches(draw, keys_text: bool = False) -> RecordBatch:
    count = draw(st.integers(1, 30))
    values = tuple(draw(st.lists(st.binary(max_size=300), min_size=count, max_size=count)))
    keys = draw(st.none() | st.lists(nullable, min_size=count, max_size=count).map(tuple))
    headers_of = st.lists(st.tuples(st.text(max_size=12), nullable), max_size=4).map(tuple) if keys_text \
        else record_headers
    headers = draw(st.none() | st.lists(headers_of, min_size=count, max_size=count).map(tuple))
    return RecordBatch("t", draw(st.integers(0, 100)), values, keys, draw(int64s),
                       draw(st.integers(-(1 << 15), (1 << 15) - 1)), draw(int32s), draw(int64s), draw(st.booleans()),
                       headers)


def normalized(batch: RecordBatch) -> RecordBatch:
    """``batch`` as record_batch_from gives it back: keys None when all are, headers None when none has any."""
    keys = batch.keys if batch.keys is not None and any(k is not None for k in batch.keys) else None
    headers = batch.headers if batch.headers is not None and any(batch.headers) else None
    return RecordBatch(batch.topic, batch.partition, tuple(batch.values), None if keys is None else tuple(keys),
                       batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.max_timestamp,
                       batch.is_transactional, None if headers is None else tuple(map(tuple, headers)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=record_batches(), base_offset=st.integers(0, (1 << 62)), leader_epoch=int32s)
def test_encode_then_decode_gives_the_batch_back_and_every_encoder_writes_the_same_bytes(batch, base_offset,
                                                                                          leader_epoch):
    raw = encode_record_batch(batch, base_offset, leader_epoch, backend="python")
    if "cython" in EXPECTED:
        assert encode_record_batch(batch, base_offset, leader_epoch, backend="cython") == raw
    assert encode_record_batch(batch, base_offset, leader_epoch) == raw
    assert old_broker_encoding(batch, base_offset, leader_epoch) == raw
    assert verify_crc(raw)
    header, records = decode_batch(raw)
    assert (header.base_offset, header.partition_leader_epoch, header.record_count, header.last_offset_delta,
            header.base_timestamp, header.max_timestamp) == (base_offset, leader_epoch, batch.record_count,
                                                              batch.record_count - 1, batch.max_timestamp,
                                                              batch.max_timestamp)
    assert [(r.offset_delta, r.timestamp_delta, r.attributes) for r in records] == \
        [(i, 0, 0) for i in range(batch.record_count)]
    assert record_batch_from(batch.topic, batch.partition, header, records) == normalized(batch)


def edge_batches() -> list[pytest.param]:
    big = b"\xab" * (16 * 1024 + 7)
    return [
        pytest.param(RecordBatch("t", 0, (b"",)), id="empty-value"),
        pytest.param(RecordBatch("t", 0, (b"v", b""), (None, b"")), id="none-and-empty-key"),
        pytest.param(RecordBatch("t", 0, (big, b"x" * 70_000), (big, None)), id="values-over-16KiB"),
        pytest.param(RecordBatch("t", 0, tuple(b"%d" % i for i in range(20_000))), id="20000-records"),
        pytest.param(RecordBatch("t", 0, (b"v",) * 300, None, 1, 0, 0, 0, False,
                                 ((("k", None),),) * 300), id="300-records-with-headers"),
        pytest.param(RecordBatch("t", 0, (b"v",), None, 1, 0, 0, 0, False,
                                 ((("\u00e9" * 100, big), ("", b""), ("\U0001f600", None)),)), id="big-headers"),
        pytest.param(RecordBatch("t", 0, (b"v", b"w"), None, 1, 0, 0, 0, False, [[("k", b"1")], []]),
                     id="lists-not-tuples"),
        pytest.param(RecordBatch("t", 0, [b"a", b"b"], [b"k", None], 1, 0, 0, -5, True), id="lists-negative-time"),
        pytest.param(RecordBatch("t", 0, ()), id="no-records"),
    ]


@pytest.mark.parametrize("batch", edge_batches())
@pytest.mark.parametrize("backend", ENCODERS)
def test_edge_cases_encode_as_the_codec_does(batch, backend):
    raw = encode_record_batch(batch, 12345, backend=backend)
    assert raw == old_broker_encoding(batch, 12345)
    assert raw == encode_record_batch(batch, 12345, backend="python")
    header, records = decode_batch(raw)
    assert record_batch_from("t", 0, header, records) == normalized(batch)


@pytest.mark.parametrize("backend", ENCODERS)
@pytest.mark.parametrize(("batch", "error", "message"), [
    (RecordBatch("t", 0, (b"v", "text")), TypeError, r"^record 1: value must be bytes or None, not str \('text'\)$"),
    (RecordBatch("t", 0, (b"v",), (7,)), TypeError, r"^record 0: key must be bytes or None, not int \(7\)$"),
    (RecordBatch("t", 0, (b"v", b"w"), (None,)), ValueError, r"^1 keys for 2 values$"),
    (RecordBatch("t", 0, (b"v",), None, 1, 0, 0, 0, False, ((), ())), ValueError, r"^2 header lists for 1 values$"),
    (RecordBatch("t", 0, (b"v",), None, 1, 0, 0, 0, False, (((b"k", b"v"),),)), TypeError,
     r"^record 0 header 0: key must be a str, not bytes \(b'k'\)$"),
    (RecordBatch("t", 0, (b"v",), None, 1, 0, 0, 0, False, ((("k", "v"),),)), TypeError,
     r"^record 0 header 0 \('k'\): value must be bytes or None, not str \('v'\)$"),
    (RecordBatch("t", 0, (b"v",), None, 1, 0, 0, 0, False, ((("k",),),)), TypeError,
     r"^record 0 header 0: expected a \(str, bytes \| None\) pair, got \('k',\)$"),
    (RecordBatch("t", 0, (b"v",), None, 1, 0, 0, 0, False, ((("\udfff", b""),),)), ValueError,
     r"^record 0 header 0: key '\\udfff' cannot be encoded as UTF-8 \(a lone surrogate\)$"),
    (RecordBatch("t", 0, (b"v",), None, 1, 1 << 15), ValueError, r"^producer_epoch 32768 is outside"),
    (RecordBatch("t", 0, (b"v",), None, 1 << 63), ValueError, r"^producer_id 9223372036854775808 is outside"),
    (RecordBatch("t", 0, (b"v",), None, 1, 0, 1 << 31), ValueError, r"^base_sequence 2147483648 is outside"),
])
def test_bad_batches_raise_the_same_message_from_every_encoder(batch, error, message, backend):
    with pytest.raises(error, match=message):
        encode_record_batch(batch, 0, backend=backend)


def test_a_base_offset_out_of_range_is_named():
    with pytest.raises(ValueError, match=r"^base_offset 9223372036854775808 is outside"):
        encode_record_batch(RecordBatch("t", 0, (b"v",)), 1 << 63)


class _Growing(Sequence):
    """Headers that grow each time they are read: the compiled encoder's two passes must not trust them."""

    def __init__(self) -> None:
        self.reads = 0

    def __len__(self) -> int:
        self.reads += 1
        return self.reads

    def __getitem__(self, index):
        if not 0 <= index < self.reads:
            raise IndexError(index)
        return ("k", b"x" * 100)


@pytest.mark.skipif("cython" not in EXPECTED, reason="the compiled encoder is not expected")
def test_the_compiled_encoder_refuses_headers_that_change_between_its_passes():
    batch = RecordBatch("t", 0, (b"v",), None, 1, 0, 0, 0, False, [_Growing()])
    with pytest.raises(RuntimeError, match="the records changed while they were being encoded"):
        encode_record_batch(batch, 0, backend="cython")


def test_record_batch_from_refuses_markers_and_keeps_tombstones():
    marker = encode_end_txn_marker(ControlType.COMMIT, 0, producer_id=5, producer_epoch=0, timestamp=0,
                                   base_offset=9)
    header, records = decode_batch(marker)
    with pytest.raises(ValueError, match=r"^the batch at offset 9 is a control batch"):
        record_batch_from("t", 0, header, records)
    tombstone = encode_batch([Record(0, 0, b"k", b"v"), Record(1, 0, b"k", None)], base_offset=40, base_timestamp=0)
    header, records = decode_batch(tombstone)
    batch = record_batch_from("t", 0, header, records)
    assert batch.values == (b"v", None) and batch.keys == (b"k", b"k")
    assert [r.value for r in decode_batch(encode_record_batch(batch, 40))[1]] == [b"v", None]


# --- kafka-python's codec --------------------------------------------------------------------------------------

kp_records = st.lists(st.tuples(nullable, st.binary(max_size=200),
                                st.lists(st.tuples(st.text(max_size=10), nullable), max_size=3)),
                      min_size=1, max_size=20)


@settings(max_examples=150, deadline=None)
@given(records=kp_records, producer_id=st.integers(0, (1 << 63) - 1), epoch=st.integers(0, (1 << 15) - 1),
       sequence=st.integers(0, (1 << 31) - 1), transactional=st.booleans(), timestamp=st.integers(0, 1 << 50))
def test_batches_kafka_python_builds_with_headers_give_the_same_record_batch(records, producer_id, epoch, sequence,
                                                                              transactional, timestamp):
    builder = KafkaPythonBuilder(2, 0, int(transactional), producer_id, epoch, sequence, 1 << 24)
    for offset, (key, value, headers) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, headers) is not None
    raw = bytes(builder.build())
    header, decoded = decode_batch(raw)
    batch = record_batch_from("t", 3, header, decoded)
    keys = [key for key, _, _ in records]
    assert batch.values == tuple(value for _, value, _ in records)
    assert batch.keys == (None if all(k is None for k in keys) else tuple(keys))
    want_headers = tuple(tuple(h) for _, _, h in records)
    assert batch.headers == (want_headers if any(want_headers) else None)
    assert (batch.topic, batch.partition, batch.producer_id, batch.producer_epoch, batch.base_sequence,
            batch.max_timestamp, batch.is_transactional) == ("t", 3, producer_id, epoch, sequence, timestamp,
                                                             transactional)
    # Every record has the batch's timestamp, so our encoding of that batch is kafka-python's, byte for byte
    # (kafka-python's builder writes partition leader epoch 0, as the broker does).
    assert encode_record_batch(batch, 0) == raw


@settings(max_examples=150, deadline=None)
@given(batch=record_batches(keys_text=True), base_offset=st.integers(0, 1 << 62))
def test_our_batches_read_back_in_kafka_python(batch, base_offset):
    raw = encode_record_batch(batch, base_offset)
    theirs = KafkaPythonBatch(raw)
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.producer_id, theirs.producer_epoch, theirs.base_sequence,
            theirs.is_transactional, theirs.max_timestamp, theirs.leader_epoch) == \
        (base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional,
         batch.max_timestamp, 0)
    keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
    headers = batch.headers if batch.headers is not None else ((),) * batch.record_count
    want = [(base_offset + i, batch.max_timestamp, key, value, list(h))
            for i, (key, value, h) in enumerate(zip(keys, batch.values, headers, strict=True))]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs] == want
    assert read_header(raw).size_in_bytes == len(raw) >= BATCH_HEADER_SIZE


# --- the broker's own checks and its log on disk ----------------------------------------------------------


@pytest.mark.parametrize("headers, says", [
    ([[("k", "text")]], r"record 0 has header \('k', 'text'\)"),
    ([[(1, b"v")]], r"record 0 has header \(1, b'v'\)"),
    ([[("k", b"v")], []], r"one sequence of \(key, value\) pairs per record \(1\)"),
    ([[("\ud800", b"v")]], "UTF-8 cannot encode"),
    ("kv", r"one sequence of \(key, value\) pairs per record"),
])
def test_the_broker_answers_bad_headers_corrupt_message_and_writes_nothing(tmp_path, headers, says):
    from idemcore.broker import Broker
    from idemcore.net.messages import ProduceRequest
    from idemcore.protocol.codes import ErrorCode

    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        batch = RecordBatch("t", 0, [b"v"], None, 1, 0, 0, 0, False, headers)
        answer = broker.handle(ProduceRequest((batch,))).responses[0]
        assert answer.error_code == ErrorCode.CORRUPT_MESSAGE
        assert re.search(says, answer.error_message)
        assert broker.log("t", 0).log_end_offset == 0


def test_headers_are_on_disk_and_come_back_after_a_restart_and_in_kafka_python(tmp_path):
    from idemcore.broker import Broker
    from idemcore.client import Producer

    sent = [[("trace", b"abc"), ("\u00e9t\u00e9", None)], [], [("x", b"")]]
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        producer = Producer(broker, linger_ms=10_000)
        futures = [producer.send("t", b"v%d" % i, partition=0, headers=h) for i, h in enumerate(sent)]
        producer.flush()
        assert [f.result().offset for f in futures] == [0, 1, 2]
    with Broker({"t": 1}, data_dir=tmp_path) as again:
        (stored,) = again.log("t", 0).batches
        assert [list(h) for h in stored.batch.headers] == [[tuple(p) for p in h] for h in sent]
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    batch = KafkaPythonBatch(bytearray(data))
    assert batch.validate_crc()
    assert [list(record.headers) for record in batch] == [[(k, v) for k, v in h] for h in sent]
