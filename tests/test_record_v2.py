"""RecordBatch v2 (idemcore.record.v2), checked against codecs nobody here wrote.

- kafka-python and aiokafka (its Cython reader/builder and its pure-Python twin) build batches that
  idemcore decodes field for field; idemcore's batches read back identically in all three.
- Golden bytes: sarama's fixed RecordBatch test vectors (IBM/sarama record_test.go, CRCs included), a
  batch whose bytes are kafka-python's exact output, and the varint vectors of Kafka's ByteUtilsTest.
- Properties: decode(encode(x)) == x for random batches and codecs; every byte flip inside the CRC's
  range is caught; every truncation and random garbage gives a one-line CorruptRecordError, never an
  IndexError or struct.error.
"""

from __future__ import annotations

import gzip
import mmap
import struct

import cramjam
import kafka.codec as kafka_codec
import pytest
from aiokafka.record import default_records as aio_default

# aiokafka's Cython extension ships in its wheels and kafka-python's snappy/lz4/zstd libraries come with the
# test extra (pyproject): both are required, so a missing one fails here instead of skipping its cases.
from aiokafka.record._crecords import default_records as aio_c
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER
from aiokafka.record.control_record import ControlRecord as AioControlRecord
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import ControlRecord as KafkaPythonControlRecord
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords

from idemcore.errors import IdemcoreError
from idemcore.protocol.codes import ControlType
from idemcore.record.v2 import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    CorruptRecordError,
    EndTxnMarker,
    IncompleteBatchError,
    Record,
    TimestampType,
    VarintError,
    compute_crc,
    control_type_id,
    decode_batch,
    encode_batch,
    encode_end_txn_marker,
    end_txn_marker_record,
    iter_batches,
    parse_end_txn_marker,
    read_header,
    set_base_offset,
    set_partition_leader_epoch,
    verify_crc,
)
from idemcore.record.v2.compression import XERIAL_HEADER, XERIAL_MAGIC, compress, decompress
from idemcore.record.v2.varint import encode_varint, encode_varlong, read_varint, read_varlong, size_of_varint

# --- the third parties -----------------------------------------------------------------------------------

READERS = {
    "kafka-python": KafkaPythonBatch,
    "aiokafka-py": aio_default._DefaultRecordBatchPy,
}
BUILDERS = {
    "kafka-python": KafkaPythonBuilder,
    "aiokafka-py": aio_default._DefaultRecordBatchBuilderPy,
}
READERS["aiokafka-c"] = aio_c.DefaultRecordBatch
BUILDERS["aiokafka-c"] = aio_c.DefaultRecordBatchBuilder


def library_codecs():
    """(library, codec) pairs: every library reads and writes all five (aiokafka through cramjam, kafka-python
    through python-snappy, lz4 and zstandard from the test extra)."""
    return [pytest.param(name, codec, id=f"{name}-{codec.name.lower()}") for name in READERS for codec in Compression]


def test_kafka_python_has_every_codec_library():
    """The cross-checks need them; a missing one is an install problem, reported, not a silent skip."""
    assert (kafka_codec.has_gzip(), kafka_codec.has_snappy(), kafka_codec.has_lz4(), kafka_codec.has_zstd()) == \
        (True, True, True, True)


T0 = 1_700_000_000_000
# (offset delta, timestamp, key, value, headers): None keys and values, empty ones, headers with None
# values and a non-ASCII key, multi-byte varints, values that compress (so the libraries do compress).
SAMPLE = [
    (0, T0, b"user-1", b"a" * 300, [("trace-id", b"abc"), ("null-value", None)]),
    (1, T0 + 5, None, b"b" * 300, []),
    (2, T0 - 3, b"", None, [("\u00fc-key", b"")]),
    (3, T0 + 100_000, b"k" * 200, b"c" * 2000, [("h", b"v")]),
]


def build_with(library, codec, *, transactional=False, producer_id=4321, producer_epoch=3, base_sequence=17,
               records=SAMPLE, builder=None):
    builder_class = builder or BUILDERS[library]
    builder = builder_class(2, int(codec), int(transactional), producer_id, producer_epoch, base_sequence, 1 << 20)
    for offset, timestamp, key, value, headers in records:
        assert builder.append(offset, timestamp, key, value, headers) is not None
    return bytes(builder.build())


def their_view(raw, library):
    """Every header field the library exposes, and its records, named as idemcore names them."""
    batch = READERS[library](raw)
    crc_ok = batch.validate_crc()
    fields = {
        "base_offset": batch.base_offset, "magic": batch.magic, "crc": batch.crc, "attributes": batch.attributes,
        "last_offset_delta": batch.last_offset_delta, "base_timestamp": batch.first_timestamp,
        "max_timestamp": batch.max_timestamp, "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch, "base_sequence": batch.base_sequence,
        "compression": batch.compression_type, "is_transactional": batch.is_transactional,
        "is_control": batch.is_control_batch, "timestamp_type": batch.timestamp_type,
    }
    if library == "kafka-python":  # only kafka-python exposes these three
        fields.update(partition_leader_epoch=batch.leader_epoch, size_in_bytes=batch.size_in_bytes,
                      record_count=batch.records_count)
    records = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return crc_ok, fields, records, batch


def our_view(raw, library):
    header, records = decode_batch(raw)
    fields = {
        "base_offset": header.base_offset, "magic": header.magic, "crc": header.crc,
        "attributes": header.attributes, "last_offset_delta": header.last_offset_delta,
        "base_timestamp": header.base_timestamp, "max_timestamp": header.max_timestamp,
        "producer_id": header.producer_id, "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence, "compression": int(header.compression),
        "is_transactional": header.is_transactional, "is_control": header.is_control,
        "timestamp_type": int(header.timestamp_type),
    }
    if library == "kafka-python":
        fields.update(partition_leader_epoch=header.partition_leader_epoch, size_in_bytes=header.size_in_bytes,
                      record_count=header.record_count)
    ours = [(header.offset_of(r), header.timestamp_of(r), r.key, r.value, list(r.headers)) for r in records]
    return verify_crc(raw), fields, ours, header, records


# --- their batches, decoded by idemcore ------------------------------------------------------------------

@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "transactional"])
@pytest.mark.parametrize(("library", "codec"), library_codecs())
def test_batches_built_by_kafka_python_and_aiokafka_decode_identically(library, codec, transactional):
    raw = build_with(library, codec, transactional=transactional)
    crc_ok, fields, records, _ = their_view(raw, library)
    our_crc_ok, our_fields, our_records, header, decoded = our_view(raw, library)
    assert header.compression == codec  # the library did compress: the codec path was exercised
    assert crc_ok and our_crc_ok
    assert our_fields == fields
    assert our_records == records
    # And against the input itself, not only the library's reading of it.
    assert [(o, t, k, v, h) for o, t, k, v, h in our_records] == [
        (o, t, k, v, h) for o, t, k, v, h in SAMPLE]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4321, 3, 17)
    assert header.is_transactional is transactional
    assert header.record_count == len(SAMPLE) and header.last_offset_delta == 3 and header.last_sequence == 20
    assert header.size_in_bytes == len(raw)
    assert read_header(raw) == header
    # kafka-python writes partition leader epoch 0, aiokafka -1 (Kafka's producer: -1); idemcore reads what is there.
    assert header.partition_leader_epoch == (0 if library == "kafka-python" else -1)
    assert all(record.attributes == 0 for record in decoded)


def _with_control_bit(builder_class):
    """A subclass of a library's builder that marks its batches as control batches (they build data batches
    only: control batches are the broker's): the library still lays out the records and computes the CRC."""

    class ControlBuilder(builder_class):
        def _get_attributes(self, include_compression_type=True):
            return super()._get_attributes(include_compression_type) | 0x20

    return ControlBuilder


@pytest.mark.parametrize("control_type", [ControlType.ABORT, ControlType.COMMIT], ids=["abort", "commit"])
@pytest.mark.parametrize("library", ["kafka-python", "aiokafka-py"])
def test_control_batches_built_by_others_decode_as_markers(library, control_type):
    key = struct.pack(">hh", 0, int(control_type))
    value = struct.pack(">hi", 0, 27)
    raw = build_with(library, Compression.NONE, transactional=True, base_sequence=-1,
                     builder=_with_control_bit(BUILDERS[library]), records=[(0, T0, key, value, [])])
    header, records = decode_batch(raw)
    assert header.is_control and header.is_transactional and header.attributes == 0x30
    assert len(records) == 1
    assert parse_end_txn_marker(records[0]) == EndTxnMarker(control_type, 27)
    assert control_type_id(records[0].key) == control_type
    # The library reads its own batch as a control batch too.
    their = READERS[library](raw)
    assert their.is_control_batch and their.validate_crc()
    (record,) = list(their)
    if library == "kafka-python":
        assert isinstance(record, KafkaPythonControlRecord) and record.type == control_type
    else:
        assert AioControlRecord.parse(record.key) == (COMMIT_MARKER if control_type else ABORT_MARKER)
    # And idemcore writes the very same bytes for that marker (kafka-python writes leader epoch 0).
    assert encode_end_txn_marker(control_type, 27, producer_id=4321, producer_epoch=3, timestamp=T0,
                                 partition_leader_epoch=header.partition_leader_epoch) == raw


@settings(max_examples=300, deadline=None)
@given(control_type=st.sampled_from([ControlType.ABORT, ControlType.COMMIT]),
       coordinator_epoch=st.integers(0, 2**31 - 1), producer_id=st.integers(0, 2**63 - 1),
       producer_epoch=st.integers(0, 2**15 - 1), timestamp=st.integers(-1, 2**63 - 1),
       base_offset=st.integers(0, 2**63 - 1), leader_epoch=st.integers(-1, 2**31 - 1))
def test_a_marker_is_the_batch_encode_batch_writes_for_its_record(control_type, coordinator_epoch, producer_id,
                                                                  producer_epoch, timestamp, base_offset,
                                                                  leader_epoch):
    """encode_end_txn_marker packs a cached records section under the header: the same bytes as the general
    encoder, and the same error naming a field out of range."""
    assert encode_end_txn_marker(control_type, coordinator_epoch, producer_id=producer_id,
                                 producer_epoch=producer_epoch, timestamp=timestamp, base_offset=base_offset,
                                 partition_leader_epoch=leader_epoch) == \
        encode_batch([end_txn_marker_record(control_type, coordinator_epoch)], base_offset=base_offset,
                     base_timestamp=timestamp, max_timestamp=timestamp, producer_id=producer_id,
                     producer_epoch=producer_epoch, is_transactional=True, is_control=True,
                     partition_leader_epoch=leader_epoch)


def test_a_marker_field_out_of_range_is_named():
    with pytest.raises(ValueError, match="producer_epoch 32768 is outside"):
        encode_end_txn_marker(ControlType.COMMIT, 0, producer_id=1, producer_epoch=2**15, timestamp=T0)


# --- idemcore's batches, read by kafka-python and aiokafka ------------------------------------------------

OUR_RECORDS = [
    Record(0, 0, b"user-1", b"a" * 300, (("trace-id", b"abc"), ("null-value", None))),
    Record(1, 5, None, b"b" * 300),
    Record(2, -3, b"", None, (("\u00fc-key", b""),)),
    Record(4, 100_000, b"k" * 200, b"c" * 2000, (("h", b"v"),)),  # offset 3 compacted away
]


@pytest.mark.parametrize("variant", ["idempotent", "transactional", "log-append-time", "offsets-and-epoch",
                                     "sequence-wraps"])
@pytest.mark.parametrize(("library", "codec"), library_codecs())
def test_idemcore_batches_read_back_identically(library, codec, variant):
    kwargs = dict(base_timestamp=T0, producer_id=99, producer_epoch=5, base_sequence=40, compression=codec)
    if variant == "transactional":
        kwargs.update(is_transactional=True)
    elif variant == "log-append-time":
        kwargs.update(timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=T0 + 777_777)
    elif variant == "offsets-and-epoch":
        kwargs.update(base_offset=1_000_000_007, partition_leader_epoch=12)
    elif variant == "sequence-wraps":
        kwargs.update(base_sequence=2147483646)
    raw = encode_batch(OUR_RECORDS, **kwargs)
    crc_ok, fields, records, _ = their_view(raw, library)
    assert crc_ok
    base_offset = kwargs.get("base_offset", 0)
    log_append = variant == "log-append-time"
    expected_max = T0 + 777_777 if log_append else T0 + 100_000
    expected_fields = {
        "base_offset": base_offset, "magic": 2, "crc": compute_crc(raw), "attributes": fields["attributes"],
        "last_offset_delta": 4, "base_timestamp": T0, "max_timestamp": expected_max, "producer_id": 99,
        "producer_epoch": 5, "base_sequence": kwargs["base_sequence"], "compression": int(codec),
        "is_transactional": variant == "transactional", "is_control": False, "timestamp_type": int(log_append),
    }
    if library == "kafka-python":
        expected_fields.update(partition_leader_epoch=kwargs.get("partition_leader_epoch", -1),
                               size_in_bytes=len(raw), record_count=4)
    assert fields == expected_fields
    flags = (0x10 if variant == "transactional" else 0) | (0x08 if log_append else 0)
    assert fields["attributes"] == int(codec) | flags
    assert records == [
        (base_offset + r.offset_delta, expected_max if log_append else T0 + r.timestamp_delta, r.key, r.value,
         list(r.headers)) for r in OUR_RECORDS]
    if variant == "sequence-wraps":
        assert read_header(raw).last_sequence == 2  # 2147483646 + 4 wraps past 2147483647 to 0
        if library == "kafka-python":
            assert READERS[library](raw).last_sequence == 2


@pytest.mark.parametrize("control_type", [ControlType.ABORT, ControlType.COMMIT], ids=["abort", "commit"])
@pytest.mark.parametrize("library", list(READERS))
def test_idemcore_markers_read_back_as_control_records(library, control_type):
    raw = encode_end_txn_marker(control_type, 9, producer_id=77, producer_epoch=2, timestamp=T0,
                                base_offset=500, partition_leader_epoch=4)
    # Kafka's size for a marker batch: the header plus DefaultRecord.sizeInBytes(0, 0, 4 key, 6 value, no headers).
    assert len(raw) == BATCH_HEADER_SIZE + 17
    batch = READERS[library](raw)
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 2, -1)
    (record,) = list(batch)
    assert record.offset == 500 and record.timestamp == T0
    if library == "kafka-python":
        assert isinstance(record, KafkaPythonControlRecord) and record.type == control_type
    else:
        assert AioControlRecord.parse(record.key) == (COMMIT_MARKER if control_type else ABORT_MARKER)
    assert struct.unpack(">hi", record.value) == (0, 9)
    header, (ours,) = decode_batch(raw)
    assert header.attributes == 0x30 and parse_end_txn_marker(ours) == (control_type, 9)


def _mixed_segment():
    """Several batches back to back, as a log segment holds them: codecs, flags and a marker mixed."""
    batches = [
        encode_batch(OUR_RECORDS, base_offset=0, base_timestamp=T0, producer_id=1, producer_epoch=0,
                     base_sequence=0, compression=Compression.GZIP),
        encode_batch(OUR_RECORDS[:2], base_offset=5, base_timestamp=T0 + 1, producer_id=2, producer_epoch=0,
                     base_sequence=0, is_transactional=True, compression=Compression.ZSTD),
        encode_end_txn_marker(ControlType.COMMIT, 0, producer_id=2, producer_epoch=0, timestamp=T0 + 2,
                              base_offset=7),
        encode_batch([], base_offset=8, last_offset_delta=2, producer_id=1, producer_epoch=0, base_sequence=4),
        encode_batch(OUR_RECORDS[1:], base_offset=11, base_timestamp=T0 + 3, compression=Compression.LZ4),
    ]
    return batches, b"".join(batches)


@pytest.mark.parametrize("reader", ["kafka-python", "aiokafka"])
def test_iter_batches_walks_a_segment_as_the_libraries_do(reader):
    batches, segment = _mixed_segment()
    ours = list(iter_batches(segment, check_crc=True))
    assert [position for position, _ in ours] == [sum(map(len, batches[:i])) for i in range(len(batches))]
    memory = KafkaPythonMemoryRecords(segment) if reader == "kafka-python" else AioMemoryRecords(segment)
    theirs = []
    while (batch := memory.next_batch()) is not None:
        theirs.append((batch.base_offset, batch.crc, batch.attributes, batch.producer_id, batch.base_sequence,
                       batch.last_offset_delta, batch.validate_crc()))
    assert theirs == [(h.base_offset, h.crc, h.attributes, h.producer_id, h.base_sequence, h.last_offset_delta,
                       True) for _, h in ours]


def test_rewriting_base_offset_and_leader_epoch_keeps_the_crc():
    raw = bytearray(encode_batch(OUR_RECORDS, base_timestamp=T0, compression=Compression.SNAPPY))
    crc = read_header(raw).crc
    set_base_offset(raw, 0, 123_456)
    set_partition_leader_epoch(raw, 0, 8)
    header = read_header(raw)
    assert (header.base_offset, header.partition_leader_epoch, header.crc) == (123_456, 8, crc)
    assert verify_crc(raw)
    batch = KafkaPythonBatch(bytes(raw))
    assert batch.validate_crc() and batch.leader_epoch == 8
    assert [r.offset for r in aio_default._DefaultRecordBatchPy(bytes(raw))] == [123_456, 123_457, 123_458, 123_460]


def test_readers_take_bytes_bytearray_memoryview_and_mmap(tmp_path):
    _, segment = _mixed_segment()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"\x00" * 3 + segment)
    expected = [(p + 3, h) for p, h in iter_batches(segment)]
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        for buffer in (b"\x00" * 3 + segment, bytearray(b"\x00" * 3 + segment), memoryview(b"\x00" * 3 + segment),
                       mapped):
            assert list(iter_batches(buffer, 3, check_crc=True)) == expected
            assert decode_batch(buffer, expected[0][0]) == decode_batch(segment)


# --- golden bytes ------------------------------------------------------------------------------------------

# kafka-python 3.0's DefaultRecordBatchBuilder output for GOLDEN_INPUT, fixed here (aiokafka writes the same
# bytes but for the partition leader epoch, -1 where kafka-python writes 0: outside the CRC). Fields:
GOLDEN_HEX = (
    "0000000000000000"  # base offset 0
    "000000af"  # batch length 175
    "00000000"  # partition leader epoch 0
    "02"  # magic 2
    "9a6c8989"  # CRC-32C of the rest
    "0010"  # attributes: transactional
    "00000002"  # last offset delta 2
    "0000018bcfe56800"  # base timestamp 1700000000000
    "0000018bcfe568c8"  # max timestamp 1700000000200
    "0000011f71fb04cb"  # producer id 1234567890123
    "0007"  # producer epoch 7
    "7ffffffe"  # base sequence 2147483646 (the last, 0, wraps)
    "00000003"  # 3 records
    # length 34, attrs 0, ts delta 0, offset delta 0, key "key-0", value "value-0", 2 headers (trace=0001, empty=null)
    "44000000" "0a6b65792d30" "0e76616c75652d30" "04" "0a7472616365" "040001" "0a656d707479" "01"
    # length 78, attrs 0, ts delta 200 (2 bytes), offset delta 1, key null, value 70 x "x" (2-byte length), 0 headers
    "9c0100" "9003" "02" "01" "8c01" + "78" * 70 + "00"
    # length 10, attrs 0, ts delta -10, offset delta 2, key "" , value null, 1 header ("\u00fc" = c3bc, value "")
    "140013040001" "02" "04c3bc" "00"
)
GOLDEN_INPUT = [
    (0, 1_700_000_000_000, b"key-0", b"value-0", [("trace", b"\x00\x01"), ("empty", None)]),
    (1, 1_700_000_000_200, None, b"x" * 70, []),
    (2, 1_699_999_999_990, b"", None, [("\u00fc", b"")]),
]
GOLDEN_RECORDS = [Record(o, t - 1_700_000_000_000, k, v, tuple(h)) for o, t, k, v, h in GOLDEN_INPUT]
GOLDEN_FIELDS = dict(base_timestamp=1_700_000_000_000, producer_id=1234567890123, producer_epoch=7,
                     base_sequence=2147483646, is_transactional=True)


def test_golden_batch_is_byte_for_byte_kafka_pythons():
    golden = bytes.fromhex(GOLDEN_HEX)
    assert len(golden) == 187
    assert encode_batch(GOLDEN_RECORDS, partition_leader_epoch=0, **GOLDEN_FIELDS) == golden
    header, records = decode_batch(golden)
    assert records == GOLDEN_RECORDS
    assert header == BatchHeader(0, 175, 0, 2, 0x9A6C8989, 0x10, 2, 1_700_000_000_000, 1_700_000_000_200,
                                 1234567890123, 7, 2147483646, 3)
    assert header.last_sequence == 0
    # The libraries still write exactly this.
    for library in BUILDERS:
        theirs = build_with(library, Compression.NONE, transactional=True, producer_id=1234567890123,
                            producer_epoch=7, base_sequence=2147483646, records=GOLDEN_INPUT)
        epoch = b"\x00\x00\x00\x00" if library == "kafka-python" else b"\xff\xff\xff\xff"
        assert theirs == golden[:12] + epoch + golden[16:], library
    assert encode_batch(GOLDEN_RECORDS, **GOLDEN_FIELDS) == golden[:12] + b"\xff" * 4 + golden[16:]


def _sarama(*parts):
    return bytes(b for part in parts for b in part)


_SARAMA_HEADER_TAIL = [0] * 8 + [0] * 8 + [0, 0] + [0] * 4  # max timestamp, producer id, epoch, sequence
_SARAMA_TS = [0, 0, 1, 88, 141, 205, 89, 56]  # 1479847795000
_SARAMA_RECORD = [40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12]
# IBM/sarama record_test.go, recordBatchTestCases: (name, bytes, compressed)
SARAMA = {
    "empty": _sarama([0] * 8, [0, 0, 0, 49], [0, 0, 0, 0], [2], [89, 95, 183, 221], [0, 0], [0, 0, 0, 0], [0] * 8,
                     _SARAMA_HEADER_TAIL, [0, 0, 0, 0]),
    "control": _sarama([0] * 8, [0, 0, 0, 49], [0, 0, 0, 0], [2], [81, 46, 67, 217], [0, 32], [0, 0, 0, 0],
                       [0] * 8, _SARAMA_HEADER_TAIL, [0, 0, 0, 0]),
    "uncompressed": _sarama([0] * 8, [0, 0, 0, 70], [0, 0, 0, 0], [2], [84, 121, 97, 253], [0, 0], [0, 0, 0, 0],
                            _SARAMA_TS, _SARAMA_HEADER_TAIL, [0, 0, 0, 1], _SARAMA_RECORD),
    "gzip": _sarama([0] * 8, [0, 0, 0, 95], [0, 0, 0, 0], [2], [231, 74, 206, 165], [0, 1], [0, 0, 0, 0],
                    _SARAMA_TS, _SARAMA_HEADER_TAIL, [0, 0, 0, 1],
                    [31, 139, 8, 0, 0, 9, 110, 136, 0, 255, 0, 21, 0, 234, 255, 40, 0, 10, 0, 8, 1, 2,
                     3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12, 3, 0, 173, 201, 88, 103, 21, 0, 0, 0]),
    # raw snappy, no xerial framing: what sarama writes and Kafka's SnappyInputStream reads
    "snappy": _sarama([0] * 8, [0, 0, 0, 72], [0, 0, 0, 0], [2], [21, 0, 159, 97], [0, 2], [0, 0, 0, 0],
                      _SARAMA_TS, _SARAMA_HEADER_TAIL, [0, 0, 0, 1],
                      [21, 80, 40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12]),
    # an lz4 frame with a content checksum and 4 MiB blocks (Kafka writes neither; it reads both)
    "lz4": _sarama([0] * 8, [0, 0, 0, 89], [0, 0, 0, 0], [2], [169, 74, 119, 197], [0, 3], [0, 0, 0, 0],
                   _SARAMA_TS, _SARAMA_HEADER_TAIL, [0, 0, 0, 1],
                   [4, 34, 77, 24, 100, 112, 185, 21, 0, 0, 128, 40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2,
                    6, 8, 9, 10, 4, 11, 12, 0, 0, 0, 0, 12, 59, 239, 146]),
}
SARAMA_RECORD = Record(0, 5, b"\x01\x02\x03\x04", b"\x05\x06\x07", (("\x08\t\n", b"\x0b\x0c"),))


@pytest.mark.parametrize("name", list(SARAMA))
def test_sarama_golden_vectors_decode_and_reencode(name):
    raw = SARAMA[name]
    assert verify_crc(raw)
    header, records = decode_batch(raw)
    assert header.size_in_bytes == len(raw)
    assert (header.base_offset, header.partition_leader_epoch, header.producer_id, header.producer_epoch,
            header.base_sequence, header.max_timestamp, header.last_offset_delta) == (0, 0, 0, 0, 0, 0, 0)
    if name in ("empty", "control"):
        assert records == [] and header.record_count == 0 and header.base_timestamp == 0
        assert header.is_control is (name == "control")
        again = encode_batch([], base_timestamp=0, max_timestamp=0, producer_id=0, producer_epoch=0, base_sequence=0,
                             partition_leader_epoch=0, is_control=name == "control")
        assert again == raw
        return
    assert header.compression == {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3}[name]
    assert header.base_timestamp == 1479847795000 and header.record_count == 1
    assert records == [SARAMA_RECORD]
    again = encode_batch(records, base_timestamp=1479847795000, max_timestamp=0, producer_id=0, producer_epoch=0,
                         base_sequence=0, partition_leader_epoch=0, compression=header.compression)
    if name == "uncompressed":
        assert again == raw
    else:  # compressors differ byte-wise; the header up to the CRC and the records agree
        assert again[:8] == raw[:8] and again[12:17] == raw[12:17] and again[21:61] == raw[21:61]
        assert decode_batch(again)[1] == records


# Kafka's ByteUtilsTest (testVarintSerde, testVarlongSerde): value -> zig-zag bytes.
KAFKA_VARINTS = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"), (8191, "fe7f"),
    (-8192, "ff7f"), (8192, "808001"), (-8193, "818001"), (1048575, "feff7f"), (-1048576, "ffff7f"),
    (1048576, "80808001"), (-1048577, "81808001"), (134217727, "feffff7f"), (-134217728, "ffffff7f"),
    (134217728, "8080808001"), (-134217729, "8180808001"), (2147483647, "feffffff0f"), (-2147483648, "ffffffff0f"),
]
KAFKA_VARLONGS = [
    *KAFKA_VARINTS,
    (17179869183, "feffffff7f"), (-17179869184, "ffffffff7f"), (17179869184, "808080808001"),
    (-17179869185, "818080808001"), (2199023255551, "feffffffff7f"), (-2199023255552, "ffffffffff7f"),
    (2199023255552, "80808080808001"), (-2199023255553, "81808080808001"), (281474976710655, "feffffffffff7f"),
    (-281474976710656, "ffffffffffff7f"), (281474976710656, "8080808080808001"),
    (-281474976710657, "8180808080808001"), (36028797018963967, "feffffffffffff7f"),
    (-36028797018963968, "ffffffffffffff7f"), (36028797018963968, "808080808080808001"),
    (-36028797018963969, "818080808080808001"), (4611686018427387903, "feffffffffffffff7f"),
    (-4611686018427387904, "ffffffffffffffff7f"), (4611686018427387904, "80808080808080808001"),
    (-4611686018427387905, "81808080808080808001"), (9223372036854775807, "feffffffffffffffff01"),
    (-9223372036854775808, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "hexed"), KAFKA_VARINTS)
def test_varints_match_kafkas_byteutils_vectors(value, hexed):
    assert encode_varint(value).hex() == hexed
    assert read_varint(bytes.fromhex(hexed), 0) == (value, len(hexed) // 2)
    assert size_of_varint(value) == len(hexed) // 2


@pytest.mark.parametrize(("value", "hexed"), KAFKA_VARLONGS)
def test_varlongs_match_kafkas_byteutils_vectors(value, hexed):
    assert encode_varlong(value).hex() == hexed
    assert read_varlong(bytes.fromhex(hexed), 0) == (value, len(hexed) // 2)
    assert size_of_varint(value) == len(hexed) // 2


@pytest.mark.parametrize(("reader", "hexed", "message"), [
    (read_varint, "ffffffffff01", "varint longer than 5 bytes at position 0"),  # Kafka's testInvalidVarint
    (read_varlong, "ffffffffffffffffffff01", "varlong longer than 10 bytes at position 0"),  # testInvalidVarlong
    (read_varint, "ffffffff7f", "varint overflows 32 bits"),  # Kafka drops these bits; idemcore refuses them
    (read_varlong, "ffffffffffffffffff7f", "varlong overflows 64 bits"),
    (read_varint, "8080", "varint cut off by the end of the data at position 0"),
    (read_varlong, "", "varlong cut off by the end of the data at position 0"),
])
def test_bad_varints_are_refused(reader, hexed, message):
    with pytest.raises(VarintError, match=message) as info:
        reader(bytes.fromhex(hexed), 0)
    assert isinstance(info.value, CorruptRecordError) and isinstance(info.value, IdemcoreError)
    with pytest.raises(ValueError, match="outside the int32 range"):
        encode_varint(1 << 31)
    with pytest.raises(ValueError, match="outside the int64 range"):
        encode_varlong(-(1 << 63) - 1)


# --- compression framing ---------------------------------------------------------------------------------

def test_snappy_is_xerial_framed_in_32_kib_blocks_as_kafka_writes_it():
    payload = bytes(range(256)) * 400  # 102400 bytes: 4 blocks
    framed = compress(Compression.SNAPPY, payload)
    assert framed[:16] == XERIAL_HEADER == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2
    pos, blocks = 16, []
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4:pos + 4 + length])))
        pos += 4 + length
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 4096]
    assert b"".join(blocks) == payload
    assert decompress(Compression.SNAPPY, framed) == payload
    # Raw snappy (sarama's) and xerial streams whose version fields are little-endian (some writers') read too,
    # as snappy-java's SnappyInputStream reads them.
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(payload))) == payload
    little_endian = XERIAL_MAGIC + struct.pack("<ii", 1, 1) + framed[16:]
    assert decompress(Compression.SNAPPY, little_endian) == payload
    assert kafka_codec.snappy_decode(framed) == payload


def test_lz4_frames_have_independent_64_kib_blocks_and_linked_ones_are_refused():
    payload = b"abcdefgh" * 20000
    frame = compress(Compression.LZ4, payload)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20, "block independence: Kafka reads no other"
    assert frame[4] & 0x04 == 0 and frame[5] == 0x40  # no content checksum; 64 KiB blocks, as Kafka writes
    assert decompress(Compression.LZ4, frame) == payload
    linked = bytes(cramjam.lz4.compress(payload))  # cramjam's one-shot frame links its blocks
    assert linked[4] & 0x20 == 0
    with pytest.raises(CorruptRecordError, match="link its blocks"):
        decompress(Compression.LZ4, linked)
    raw = encode_batch([Record(0, 0, None, payload)], base_timestamp=0)
    section = raw[BATCH_HEADER_SIZE:]
    with pytest.raises(CorruptRecordError, match=r"lz4 frame flags 0x.. link its blocks.*batch at position 0"):
        decode_batch(make_batch(bytes(cramjam.lz4.compress(section)), 1, attributes=3))


def test_gzip_and_zstd_read_concatenated_members_and_frames():
    a, b = b"first " * 100, b"second " * 100
    assert decompress(Compression.GZIP, gzip.compress(a) + gzip.compress(b)) == a + b
    assert decompress(Compression.ZSTD, bytes(cramjam.zstd.compress(a)) + bytes(cramjam.zstd.compress(b))) == a + b


@pytest.mark.parametrize("codec", [c for c in Compression if c])
def test_data_that_does_not_decompress_is_one_line(codec):
    raw = make_batch(b"\x00\x01garbage\xff" * 3, 1, attributes=int(codec))
    with pytest.raises(CorruptRecordError, match=f"{codec.name.lower()} .*batch at position 0") as info:
        decode_batch(raw)
    assert "\n" not in str(info.value)


# --- errors, one line each ----------------------------------------------------------------------------------

def make_batch(section, count, *, attributes=0, prefix=b"", base_sequence=-1):
    """A batch around ``section`` with a correct length and CRC, built here with struct and crc32c alone."""
    body = struct.pack(">hiqqqhii", attributes, max(count - 1, 0), T0, T0, -1, -1, base_sequence, count) + section
    head = struct.pack(">qiib", 0, len(body) + 9, -1, 2) + struct.pack(">I", crc32c(body))
    return prefix + head + body


def record_bytes(*fields):
    """A record from raw fields: bytes are copied, ints become varints."""
    body = b"".join(f if isinstance(f, bytes) else encode_varint(f) for f in fields)
    return encode_varint(len(body)) + body


GOOD = record_bytes(b"\x00", 0, 0, 1, b"k", 1, b"v", 0)


@pytest.mark.parametrize(("raw", "error", "message"), [
    (make_batch(b"", 0)[:16] + b"\x01" + make_batch(b"", 0)[17:], CorruptRecordError,
     r"^magic 1 at position 16, expected 2 \(only RecordBatch v2 is read\)$"),
    (make_batch(b"", 0)[:8] + struct.pack(">i", 48) + make_batch(b"", 0)[12:], CorruptRecordError,
     r"^batch length 48 at position 8 is below the v2 minimum 49$"),
    (make_batch(GOOD, 1)[:-1], IncompleteBatchError,
     r"^batch at position 0 needs 70 bytes but the buffer ends after 69$"),
    (make_batch(GOOD, 1)[:-1] + b"\x01", CorruptRecordError,
     r"^CRC mismatch in the batch at position 0: stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}$"),
    (make_batch(b"\xff\xff\xff\xff\xff\x01", 1), CorruptRecordError,
     r"^varint longer than 5 bytes \(record 0\) at position 61$"),
    (make_batch(record_bytes(b"\x00", 0, 0, b"\xff\xff\xff\xff\x7f"), 1), CorruptRecordError,
     r"^varint overflows 32 bits \(raw value 0x7ffffffff\) \(record 0\) at position 65$"),
    (make_batch(GOOD * 2, 3), CorruptRecordError,
     r"^record count mismatch: the header declares 3 records, the records end after 2 at position 79$"),
    (make_batch(GOOD * 2, 1), CorruptRecordError,
     r"^record count mismatch: the header declares 1 records but 9 bytes remain after them at position 70$"),
    (make_batch(GOOD, -1), CorruptRecordError, r"^record count -1 at position 57 is negative$"),
    (make_batch(GOOD, 1, attributes=5), CorruptRecordError, r"unknown compression codec 5"),
    (make_batch(record_bytes(b"\x00", 0, 0, -2, 1, b"v", 0), 1), CorruptRecordError,
     r"^key length -2 \(record 0\) at position 65$"),
    (make_batch(record_bytes(b"\x00", 0, 0, -1, -3, 0), 1), CorruptRecordError,
     r"^value length -3 \(record 0\) at position 66$"),
    (make_batch(record_bytes(b"\x00", 0, 0, -100, 0), 1), CorruptRecordError,
     r"^key length -100 \(record 0\) at position 65$"),  # a two-byte varint: its first byte is named
    (make_batch(record_bytes(b"\x00", 0, 0, -1, -1, 1, 1, b"a", -5000), 1), CorruptRecordError,
     r"^header value length -5000 \(record 0\) at position 70$"),
    (make_batch(record_bytes(b"\x00", 0, 0, -1, -1, -1), 1), CorruptRecordError,
     r"^header count -1 \(record 0\) does not fit"),
    (make_batch(record_bytes(b"\x00", 0, 0, -1, -1, 1, -1, b"", -1), 1), CorruptRecordError,
     r"^header key length -1 \(record 0\) at position 68$"),
    (make_batch(encode_varint(9) + GOOD[1:], 1), CorruptRecordError,
     r"^record length 9 \(record 0 of 1\) runs past the 8 bytes left at position 61$"),
    (make_batch(encode_varint(7) + GOOD[1:] + b"\x00", 1), CorruptRecordError,
     r"^record 0 declares a length of 7 bytes but its fields take 8 at position 61$"),
    (make_batch(b"", 1), CorruptRecordError,
     r"^record count mismatch: the header declares 1 records, the records end after 0 at position 61$"),
])
def test_bad_batches_raise_one_line_naming_value_and_position(raw, error, message):
    with pytest.raises(error, match=message) as info:
        decode_batch(raw)
    assert "\n" not in str(info.value)


def test_errors_inside_compressed_records_name_the_decompressed_byte():
    section = compress(Compression.GZIP, GOOD * 2)
    with pytest.raises(CorruptRecordError, match=r"^record count mismatch: the header declares 1 records but 9 "
                                                 r"bytes remain after them at byte 9 of the gzip-decompressed "
                                                 r"records of the batch at position 0$"):
        decode_batch(make_batch(section, 1, attributes=1))


def test_incomplete_batches_say_how_many_bytes_they_need():
    raw = make_batch(GOOD, 1)
    junk_then_bad_magic = b"\x00" * 5 + raw[:16] + b"\x03" + raw[17:]
    with pytest.raises(CorruptRecordError, match=r"^magic 3 at position 21, expected 2") as info:
        decode_batch(junk_then_bad_magic, 5)
    assert info.value.position == 21
    with pytest.raises(CorruptRecordError, match=r"^magic 3 at position 21"):  # the magic is there: not incomplete
        read_header(junk_then_bad_magic[:30], 5)
    with pytest.raises(IncompleteBatchError) as info:
        read_header(raw[:40])
    assert (info.value.position, info.value.needed, info.value.available) == (0, len(raw), 40)
    with pytest.raises(IncompleteBatchError) as info:
        read_header(raw + raw[:5], len(raw))
    assert (info.value.position, info.value.needed, info.value.available) == (len(raw), 12, 5)
    assert list(iter_batches(raw + raw[:30], allow_partial_tail=True)) == [(0, read_header(raw))]
    with pytest.raises(IncompleteBatchError):
        list(iter_batches(raw + raw[:30]))
    with pytest.raises(ValueError, match="outside the buffer"):
        read_header(raw, len(raw) + 1)


def test_a_batch_declaring_no_records_has_none_whatever_follows_its_header():
    # As Kafka's DefaultRecordBatch.iterator(): count 0 means no records, even with bytes after the header.
    assert decode_batch(make_batch(GOOD, 0)) == (read_header(make_batch(GOOD, 0)), [])
    assert decode_batch(make_batch(b"not gzip", 0, attributes=1))[1] == []


def test_control_record_parsing_follows_kafka():
    assert control_type_id(struct.pack(">hh", 3, 1)) == 1  # a newer key version is read as version 0
    assert parse_end_txn_marker(Record(0, 0, struct.pack(">hh", 0, 0), struct.pack(">hih", 1, 5, 9))) == (
        ControlType.ABORT, 5)  # a longer, newer value too
    for key, value, message in [
        (b"\x00\x00\x00", struct.pack(">hi", 0, 1), "control record key of 3 bytes"),
        (None, struct.pack(">hi", 0, 1), "control record key of 0 bytes"),
        (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1), "control record key version -1 is negative"),
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1), "control type 2 is not a transaction marker"),
        (struct.pack(">hh", 0, 1), b"\x00\x00\x00", "end transaction marker value of 3 bytes"),
        (struct.pack(">hh", 0, 1), struct.pack(">hi", -2, 1), "end transaction marker version -2 is negative"),
    ]:
        with pytest.raises(CorruptRecordError, match=message):
            parse_end_txn_marker(Record(0, 0, key, value))
    assert end_txn_marker_record(ControlType.COMMIT, 3) == Record(0, 0, b"\0\0\0\x01", b"\0\0\0\0\0\x03")


def test_encode_refuses_fields_out_of_range_with_their_names():
    record = Record(0, 0, None, b"v")
    for kwargs, message in [
        (dict(producer_epoch=1 << 15), r"producer_epoch 32768 is outside \[-32768, 32767\]"),
        (dict(base_sequence=1 << 31), r"base_sequence 2147483648 is outside"),
        (dict(base_offset=1 << 63), r"base_offset 9223372036854775808 is outside"),
        (dict(compression=5), r"compression 5 is not one of 0-4"),
        (dict(timestamp_type=2), r"timestamp_type 2 is not 0"),
        (dict(timestamp_type=TimestampType.LOG_APPEND_TIME), r"max_timestamp is required under LOG_APPEND_TIME"),
    ]:
        with pytest.raises(ValueError, match=message):
            encode_batch([record], base_timestamp=0, **kwargs)
    with pytest.raises(ValueError, match="base_timestamp is required"):
        encode_batch([record])
    with pytest.raises(ValueError, match=r"record 1: offset_delta 2147483648 is outside the int32 range"):
        encode_batch([record, Record(1 << 31, 0, None, None)], base_timestamp=0, last_offset_delta=1)
    empty = decode_batch(encode_batch([]))[0]
    assert (empty.base_timestamp, empty.max_timestamp, empty.record_count, empty.last_offset_delta) == (-1, -1, 0, 0)


# --- properties ----------------------------------------------------------------------------------------------

int32s = st.integers(-(1 << 31), (1 << 31) - 1)
int64s = st.integers(-(1 << 63), (1 << 63) - 1)
blobs = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3).map(tuple)
records = st.builds(Record, offset_delta=int32s, timestamp_delta=st.integers(-(1 << 40), 1 << 40), key=blobs,
                    value=blobs, headers=headers, attributes=st.integers(-128, 127))
batch_fields = st.fixed_dictionaries({
    "base_offset": int64s, "partition_leader_epoch": int32s, "base_timestamp": st.integers(-(1 << 62), 1 << 62),
    "max_timestamp": int64s, "producer_id": int64s, "producer_epoch": st.integers(-(1 << 15), (1 << 15) - 1),
    "base_sequence": int32s, "is_transactional": st.booleans(), "is_control": st.booleans(),
    "timestamp_type": st.sampled_from(TimestampType), "has_delete_horizon": st.booleans(),
    "last_offset_delta": int32s,
})


def encode_args(header: BatchHeader) -> dict:
    """encode_batch's keywords that give back ``header``."""
    return dict(base_offset=header.base_offset, partition_leader_epoch=header.partition_leader_epoch,
                base_timestamp=header.base_timestamp, max_timestamp=header.max_timestamp,
                producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence, is_transactional=header.is_transactional,
                is_control=header.is_control, timestamp_type=header.timestamp_type,
                has_delete_horizon=header.has_delete_horizon, last_offset_delta=header.last_offset_delta,
                compression=header.compression)


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(records, max_size=8), fields=batch_fields, codec=st.sampled_from(Compression))
def test_decode_of_encode_is_identity(batch, fields, codec):
    raw = encode_batch(batch, compression=codec, **fields)
    assert verify_crc(raw)
    header, decoded = decode_batch(raw)
    assert decoded == batch
    assert encode_args(header) == {**fields, "compression": codec}
    assert header.record_count == len(batch) and header.size_in_bytes == len(raw) and header.magic == 2
    assert header.delete_horizon_ms == (fields["base_timestamp"] if fields["has_delete_horizon"] else None)
    assert list(iter_batches(raw + raw, check_crc=True)) == [(0, header), (len(raw), header)]
    if codec == Compression.NONE:  # bytes-exact: what is decoded encodes back to the same bytes
        assert encode_batch(decoded, **encode_args(header)) == raw


def _sample_batches():
    return {
        codec.name.lower(): encode_batch(OUR_RECORDS[:3], base_offset=40, base_timestamp=T0, producer_id=5,
                                         producer_epoch=1, base_sequence=9, compression=codec)
        for codec in Compression
    } | {"golden": bytes.fromhex(GOLDEN_HEX), "marker": encode_end_txn_marker(0, 1, producer_id=5, producer_epoch=1,
                                                                              timestamp=T0)}


OUTSIDE_CRC = set(range(0, 8)) | set(range(12, 16))  # base offset and partition leader epoch


@pytest.mark.parametrize("name", list(_sample_batches()))
def test_every_byte_flip_inside_the_crc_range_is_caught(name):
    raw = _sample_batches()[name]
    expected = decode_batch(raw)[1]
    for index in range(len(raw)):
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(raw)
            flipped[index] ^= mask
            if index in OUTSIDE_CRC:  # rewritten by brokers without a new CRC: by design not covered
                assert verify_crc(flipped) and decode_batch(flipped)[1] == expected
                continue
            with pytest.raises(CorruptRecordError) as info:  # magic, length, CRC or the CRC'd bytes
                decode_batch(flipped)
            assert "\n" not in str(info.value)
            if index >= 17:
                assert "CRC mismatch" in str(info.value) or isinstance(info.value, IncompleteBatchError)
                if index >= 21:
                    assert not verify_crc(flipped)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(records, min_size=1, max_size=5), codec=st.sampled_from(Compression), data=st.data())
def test_a_random_flip_after_the_crc_field_is_a_crc_mismatch(batch, codec, data):
    raw = bytearray(encode_batch(batch, base_timestamp=0, compression=codec))
    index = data.draw(st.integers(21, len(raw) - 1))
    raw[index] ^= data.draw(st.integers(1, 255))
    assert not verify_crc(raw)
    with pytest.raises(CorruptRecordError, match=r"^CRC mismatch in the batch at position 0"):
        decode_batch(raw)


@pytest.mark.parametrize("name", list(_sample_batches()))
def test_every_truncation_is_incomplete_never_an_index_error(name):
    raw = _sample_batches()[name]
    for size in range(len(raw)):
        cut = raw[:size]
        with pytest.raises(IncompleteBatchError) as info:
            decode_batch(cut)
        assert info.value.needed == (len(raw) if size >= 12 else 12) and info.value.available == size
        assert "\n" not in str(info.value)
        assert list(iter_batches(raw + cut, allow_partial_tail=True)) == [(0, read_header(raw))]


@pytest.mark.parametrize("name", [n for n in _sample_batches() if n not in ("marker",)])
def test_records_cut_short_inside_a_consistent_batch_are_corrupt(name):
    """The length and CRC agree with the cut bytes: the records themselves end early."""
    raw = _sample_batches()[name]
    header = read_header(raw)
    section = raw[BATCH_HEADER_SIZE:]
    for size in range(len(section)):
        cut = make_batch(section[:size], header.record_count, attributes=header.attributes)
        with pytest.raises(CorruptRecordError) as info:
            decode_batch(cut)
        assert not isinstance(info.value, IncompleteBatchError)
        assert "\n" not in str(info.value)


@settings(max_examples=500, deadline=None)
@given(section=st.binary(max_size=120), count=st.integers(-2, 6), codec=st.integers(0, 7))
def test_garbage_records_raise_corrupt_record_error_and_nothing_else(section, count, codec):
    raw = make_batch(section, count, attributes=codec)
    try:
        header, decoded = decode_batch(raw)
    except CorruptRecordError as exc:
        assert "\n" not in str(exc)
    else:
        assert len(decoded) == max(count, 0)
        if codec == 0 and count > 0:  # what decodes re-encodes canonically and decodes the same
            assert decode_batch(encode_batch(decoded, **encode_args(header)))[1] == decoded


@settings(max_examples=300, deadline=None)
@given(section=st.lists(st.sampled_from([GOOD, b"\x00", b"\x01", b"\x80", b"\xff", b"\x7f", b"\x02"]), max_size=12)
       .map(b"".join), count=st.integers(0, 4))
def test_near_valid_records_raise_corrupt_record_error_and_nothing_else(section, count):
    try:
        decode_batch(make_batch(section, count))
    except CorruptRecordError as exc:
        assert "\n" not in str(exc)


def test_header_keys_that_are_not_utf8_come_back_as_the_same_bytes():
    raw = make_batch(record_bytes(b"\x00", 0, 0, -1, -1, 1, 2, b"\xff\xfe", -1), 1)
    header, (record,) = decode_batch(raw)
    assert record.headers == (("\udcff\udcfe", None),)
    assert encode_batch([record], **encode_args(header)) == raw
