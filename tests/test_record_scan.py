"""The records scanner (``scan_records``, Cython and Python twins) against the v2 decoder: it accepts exactly the
records sections the decoder decodes with offset deltas 0..n-1, on valid sections and on mutated ones; and a
batch from the wire keeps its records undecoded until they are read, then reads them as the decoder does."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.broker import Broker
from idemcore.kernels import get_record_scanner
from idemcore.net.messages import FetchPartition, FetchRequest, ProduceRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.record.v2 import CorruptRecordError, decode_batch, decode_stored_batches, decode_wire_batch, encode_batch
from idemcore.record.v2.codec import BATCH_HEADER_SIZE, Record, _decode_records, _Origin
from idemcore.record.v2.compression import Compression
from idemcore.record.v2.varint import encode_varint

SCANNERS = ("cython", "python")

_bytes = st.one_of(st.none(), st.binary(max_size=40))
_headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3)
_records = st.lists(st.tuples(st.integers(-(2**40), 2**40), _bytes, _bytes, _headers), min_size=1, max_size=12)


def section_of(records: list[tuple]) -> bytes:
    batch = encode_batch([Record(k, ts, key, value, tuple(h)) for k, (ts, key, value, h) in enumerate(records)],
                         base_offset=0, base_timestamp=0, max_timestamp=0)
    return bytes(batch[BATCH_HEADER_SIZE:])


def decoder_verdict(section: bytes, count: int) -> tuple[bool, int, int, int]:
    """(accepted, null keys, records with headers, largest timestamp delta) as the decoder sees ``section``."""
    try:
        records = _decode_records(section, count, _Origin(0, None, 0))
    except CorruptRecordError:
        return False, 0, 0, 0
    if [r.offset_delta for r in records] != list(range(count)):
        return False, 0, 0, 0
    return (True, sum(r.key is None for r in records), sum(bool(r.headers) for r in records),
            max((r.timestamp_delta for r in records), default=0))


def scanner_verdict(name: str, section: bytes, count: int) -> tuple[bool, int, int, int]:
    status, _, _, nulls, headed, max_delta = get_record_scanner(name)(section, count)
    return (True, nulls, headed, max_delta) if status == 0 else (False, 0, 0, 0)


@pytest.mark.parametrize("name", SCANNERS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_records)
def test_a_valid_section_is_accepted_with_its_counts(name, records):
    section = section_of(records)
    assert scanner_verdict(name, section, len(records)) == decoder_verdict(section, len(records))
    assert scanner_verdict(name, section, len(records))[0]
    # A count that disagrees with the records is refused either way.
    assert not scanner_verdict(name, section, len(records) + 1)[0]
    assert scanner_verdict(name, section, len(records) - 1)[0] is False


@pytest.mark.parametrize("name", SCANNERS)
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_records, data=st.data())
def test_a_mutated_section_gets_the_decoders_verdict(name, records, data):
    section = bytearray(section_of(records))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(("flip", "cut", "extend", "varint")))
        where = data.draw(st.integers(0, max(0, len(section) - 1)))
        if kind == "flip" and section:
            section[where] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del section[where:]
        elif kind == "extend":
            section[where:where] = data.draw(st.binary(min_size=1, max_size=6))
        else:  # an over-long or overflowing varint where a length sits
            section[where:where] = data.draw(st.sampled_from((b"\xff" * 6, b"\xff\xff\xff\xff\x7f",
                                                              encode_varint(-2), b"\x80" * 11)))
    count = len(records)
    assert scanner_verdict(name, bytes(section), count) == decoder_verdict(bytes(section), count)


@pytest.mark.parametrize("name", SCANNERS)
def test_offset_deltas_other_than_their_index_are_status_2(name):
    batch = encode_batch([Record(0, 0, b"k", b"a"), Record(2, 0, b"k", b"b")], base_offset=0, base_timestamp=0,
                         max_timestamp=0)
    status, _, index, _, _, _ = get_record_scanner(name)(bytes(batch[BATCH_HEADER_SIZE:]), 2)
    assert (status, index) == (2, 1)


def test_a_wire_batch_is_read_only_when_its_records_are():
    records = [Record(k, 5 * k, None if k % 2 else b"k%d" % k, b"v%d" % k, (("h", b"x"),) if k == 1 else ())
               for k in range(6)]
    data = bytes(encode_batch(records, base_offset=0, base_timestamp=100, max_timestamp=125,
                              compression=Compression.ZSTD, producer_id=7, producer_epoch=0, base_sequence=0))
    batch = decode_wire_batch("t", 0, data)
    assert batch.values._records._columns is None  # nothing decoded yet
    assert len(batch.values) == 6 and batch.values._records._columns is None
    _, decoded = decode_batch(data)
    assert list(batch.values) == [r.value for r in decoded]
    assert list(batch.keys) == [r.key for r in decoded]
    assert list(batch.headers) == [r.headers for r in decoded]
    assert (batch.producer_id, batch.base_sequence, batch.max_timestamp) == (7, 0, 125)
    plain = decode_wire_batch("t", 0, bytes(encode_batch([Record(0, 0, None, b"v")], base_offset=0,
                                                         base_timestamp=0, max_timestamp=0)))
    assert plain.keys is None and plain.headers is None  # as record_batch_from has them


def test_the_broker_stores_a_wire_batch_and_serves_its_records(tmp_path):
    data = bytes(encode_batch([Record(k, 0, b"k", b"v%d" % k) for k in range(3)], base_offset=0, base_timestamp=9,
                              max_timestamp=9, producer_id=-1, producer_epoch=-1, base_sequence=-1))
    broker = Broker({"t": 1, "c": 1}, data_dir=tmp_path, fsync=False, topic_configs={"c": {"cleanup.policy":
                                                                                             "compact"}})
    try:
        answer = broker.handle(ProduceRequest((decode_wire_batch("t", 0, data),)))
        assert [r.error_code for r in answer.responses] == [ErrorCode.NONE]
        fetched = broker.handle(FetchRequest((FetchPartition("t", 0, 0),)))
        [stored] = decode_stored_batches("t", 0, fetched.partitions[0].records)
        assert list(stored.batch.values) == [b"v0", b"v1", b"v2"] and stored.raw[8:12] == data[8:12]
        keyless = bytes(encode_batch([Record(0, 0, None, b"v")], base_offset=0, base_timestamp=0, max_timestamp=0))
        refused = broker.handle(ProduceRequest((decode_wire_batch("c", 0, keyless),)))
        assert refused.responses[0].error_code == ErrorCode.INVALID_RECORD  # a compacted topic needs keys
    finally:
        broker.close()


def test_a_wire_batch_gets_its_records_largest_timestamp_as_kafka_sets_it():
    """Kafka's LogValidator: the max timestamp (and CREATE_TIME) come from the records, whatever the header says;
    the CRC is computed again and only those header fields change."""
    from idemcore.record.v2 import read_header, verify_crc
    from idemcore.record.v2.codec import TimestampType

    records = [Record(k, delta, b"k", b"v") for k, delta in enumerate((0, 700, 300))]
    for claimed, kind in ((500, TimestampType.CREATE_TIME), (900, TimestampType.LOG_APPEND_TIME)):
        data = bytes(encode_batch(records, base_offset=0, base_timestamp=1_000, max_timestamp=claimed,
                                  timestamp_type=kind))
        batch = decode_wire_batch("t", 0, data)
        header = read_header(batch.wire)
        assert (batch.max_timestamp, header.max_timestamp, header.timestamp_type) == \
            (1_700, 1_700, TimestampType.CREATE_TIME)
        assert verify_crc(batch.wire) and batch.wire[61:] == data[61:]
    honest = bytes(encode_batch(records, base_offset=0, base_timestamp=1_000, max_timestamp=1_700))
    assert decode_wire_batch("t", 0, honest).wire == honest  # as sent when the header is right
