"""Kafka log directories (issue 11, item 6): listing, the readers of segments, indexes, snapshots and checkpoints,
``idemcore dump-log``, and ``audit_log_dir``.

The log directories are built here by a small writer of its own: batches from idemcore's encoder and from
kafka-python's builder (a codec nobody here wrote), laid out as a broker lays them out (segments rolled,
``.index`` / ``.timeindex`` entries every ``index.interval.bytes``, the active segment's indexes preallocated,
``.txnindex`` entries for aborted transactions, producer snapshots at each roll, ``leader-epoch-checkpoint``),
every index and snapshot written with ``struct`` from Kafka's formats, never by the readers under test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from idemcore.audit.logdir import LOCATED_SCHEMA, audit_log_dir
from idemcore.record.kafka_files import (
    list_log_dir,
    parse_partition_dir,
    read_leader_epoch_checkpoint,
    read_offset_index,
    read_snapshot,
    read_time_index,
    read_txn_index,
    scan_segment,
)
from idemcore.record.v2 import Record, encode_batch, encode_end_txn_marker

from .conftest import EXPECTED

pytestmark = pytest.mark.filterwarnings(r"ignore:.* is deprecated\. Use files\(\) instead:DeprecationWarning")
PACKAGE_PARENT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000_000
HOUR = 3_600_000


# --- A writer of Kafka's log directory, independent of the readers ------------------------------------------------

@dataclass
class Written:
    """One batch as the writer put it on disk."""

    file: Path
    position: int
    base_offset: int
    last_offset: int
    raw: bytes
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    transactional: bool
    control: int | None  # marker type: 0 ABORT, 1 COMMIT
    coordinator_epoch: int
    max_timestamp: int


@dataclass
class Segment:
    base_offset: int
    data: bytearray = field(default_factory=bytearray)
    index: list[tuple[int, int]] = field(default_factory=list)  # (relative offset, position)
    time_index: list[tuple[int, int]] = field(default_factory=list)  # (timestamp, relative offset)
    aborted: list[tuple[int, int, int, int]] = field(default_factory=list)  # (pid, first, last, lso)
    since_index: int = 0
    max_timestamp: int = -1
    max_timestamp_offset: int = -1


class PartitionWriter:
    """Appends batches to ``<root>/<topic>-<partition>`` as a leader would store them (base offset and leader epoch
    set, CRC untouched), rolls segments, and writes the index, snapshot and checkpoint files on :meth:`close`."""

    def __init__(self, root: Path, topic: str, partition: int, *, index_interval: int = 150, leader_epoch: int = 0):
        self.path = root / f"{topic}-{partition}"
        self.path.mkdir(parents=True)
        self.topic, self.partition = topic, partition
        self.index_interval = index_interval
        self.leader_epoch = leader_epoch
        self.next_offset = 0
        self.segments = [Segment(0)]
        self.written: list[Written] = []
        self.open_txns: dict[int, int] = {}  # pid -> first offset
        self.producers: dict[int, list[int]] = {}  # pid -> snapshot entry fields (Kafka's order)
        self.snapshots: dict[int, bytes] = {}
        self.epochs = [(leader_epoch, 0)]

    def file(self, base_offset: int, suffix: str) -> Path:
        return self.path / f"{base_offset:020d}{suffix}"

    def roll(self) -> None:
        self._roll_time_index(self.segments[-1])
        self.snapshots[self.next_offset] = self._snapshot()
        self.segments.append(Segment(self.next_offset))

    def set_leader_epoch(self, epoch: int) -> None:
        self.leader_epoch = epoch
        self.epochs.append((epoch, self.next_offset))

    def data(self, pid: int, epoch: int, base_sequence: int, count: int = 1, *, transactional: bool = False,
             timestamp: int = T0, builder: str = "idemcore", compression: int = 0) -> Written:
        if builder == "idemcore":
            records = [Record(k, k, b"key-%d" % k, b"value-%d" % (base_sequence + k), (("h", b"v"),))
                       for k in range(count)]
            raw = encode_batch(records, base_timestamp=timestamp, producer_id=pid, producer_epoch=epoch,
                               base_sequence=base_sequence, is_transactional=transactional, compression=compression)
        else:
            build = KafkaPythonBuilder(2, compression, transactional, pid, epoch, base_sequence, 1 << 20)
            for k in range(count):
                build.append(k, timestamp=timestamp + k, key=b"k%d" % k, value=os.urandom(10 + k), headers=[])
            raw = bytes(build.build())
        return self.append(raw)

    def marker(self, pid: int, epoch: int, kind: int, coordinator_epoch: int, timestamp: int = T0) -> Written:
        return self.append(encode_end_txn_marker(kind, coordinator_epoch, producer_id=pid, producer_epoch=epoch,
                                                 timestamp=timestamp))

    def append(self, raw: bytes) -> Written:
        """Store ``raw`` at the next offset (only the base offset and leader epoch rewritten, outside the CRC)."""
        batch = bytearray(raw)
        struct.pack_into(">q", batch, 0, self.next_offset)
        struct.pack_into(">i", batch, 12, self.leader_epoch)
        (attributes, delta, _, max_timestamp, pid, epoch, base_sequence, count) = struct.unpack_from(
            ">hiqqqhii", batch, 21)
        segment = self.segments[-1]
        first, last = self.next_offset, self.next_offset + delta
        if segment.since_index > self.index_interval:  # Kafka's LogSegment.append: before the batch is added
            segment.index.append((last - segment.base_offset, len(segment.data)))
        if max_timestamp > segment.max_timestamp:
            segment.max_timestamp, segment.max_timestamp_offset = max_timestamp, last
        if segment.since_index > self.index_interval:
            self._time_entry(segment)
            segment.since_index = 0
        segment.since_index += len(batch)
        written = Written(self.file(segment.base_offset, ".log"), len(segment.data), first, last, bytes(batch), pid,
                          epoch, base_sequence, count, bool(attributes & 0x10), None, -1, max_timestamp)
        if attributes & 0x20:
            # The control record: length, attributes, timestamp delta, offset delta, key length 4 (one byte each
            # here), key (version, type), value length, value (version, coordinator epoch).
            written.control = struct.unpack_from(">h", batch, 61 + 7)[0]
            written.coordinator_epoch = struct.unpack_from(">i", batch, 61 + 7 + 2 + 1 + 2)[0]
        segment.data += batch
        self.written.append(written)
        self.next_offset = last + 1
        self._track(written)
        return written

    def _track(self, w: Written) -> None:
        """Producer state for the snapshots, and the aborted-transaction index (Kafka's ProducerStateManager)."""
        entry = self.producers.setdefault(w.producer_id, [w.producer_id, -1, -1, -1, 0, -1, -1, -1])
        entry[1] = w.producer_epoch
        entry[5] = w.max_timestamp
        if w.control is None:
            entry[2], entry[3], entry[4] = (w.base_sequence + w.count - 1) % 2**31, w.last_offset, w.count - 1
            if w.transactional and w.producer_id not in self.open_txns:
                self.open_txns[w.producer_id] = w.base_offset
            entry[7] = self.open_txns.get(w.producer_id, -1)
            return
        entry[6] = w.coordinator_epoch
        entry[7] = -1
        first = self.open_txns.pop(w.producer_id, None)
        if first is not None and w.control == 0:
            others = sorted(f for p, f in self.open_txns.items() if p != w.producer_id)
            lso = others[0] if others else w.last_offset + 1
            self.segments[-1].aborted.append((w.producer_id, first, w.last_offset, lso))

    def _time_entry(self, segment: Segment) -> None:
        if not segment.time_index or segment.max_timestamp > segment.time_index[-1][0]:
            segment.time_index.append((segment.max_timestamp, segment.max_timestamp_offset - segment.base_offset))

    def _roll_time_index(self, segment: Segment) -> None:
        if segment.max_timestamp >= 0:
            self._time_entry(segment)

    def _snapshot(self) -> bytes:
        body = struct.pack(">i", len(self.producers)) + b"".join(
            struct.pack(">qhiqiqiq", *entry) for _, entry in sorted(self.producers.items()))
        return struct.pack(">hI", 1, crc32c(body)) + body

    def close(self, preallocate_entries: int = 6) -> None:
        for k, segment in enumerate(self.segments):
            active = k == len(self.segments) - 1
            self.file(segment.base_offset, ".log").write_bytes(bytes(segment.data))
            index = b"".join(struct.pack(">ii", *entry) for entry in segment.index)
            times = b"".join(struct.pack(">qi", *entry) for entry in segment.time_index)
            if active:  # the active segment's indexes are preallocated, zeros after their entries
                index += bytes(8 * preallocate_entries)
                times += bytes(12 * preallocate_entries)
            self.file(segment.base_offset, ".index").write_bytes(index)
            self.file(segment.base_offset, ".timeindex").write_bytes(times)
            if segment.aborted:
                self.file(segment.base_offset, ".txnindex").write_bytes(
                    b"".join(struct.pack(">hqqqq", 0, *entry) for entry in segment.aborted))
        for offset, snapshot in self.snapshots.items():
            self.file(offset, ".snapshot").write_bytes(snapshot)
        lines = [str(len(self.epochs)), *(f"{epoch} {offset}" for epoch, offset in self.epochs)]
        (self.path / "leader-epoch-checkpoint").write_text("0\n" + "\n".join(lines) + "\n")
        (self.path / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")


@dataclass
class LogDir:
    root: Path
    partitions: dict[str, PartitionWriter]
    planted: dict[str, Written]  # what each anomaly wrote


def build_log_dir(root: Path) -> LogDir:
    """Three partitions of two topics (one with '-' and '.' in its name), several segments each, idempotent and
    transactional producers, COMMIT and ABORT markers, and four planted anomalies: a sequence gap, a retry written
    twice, a zombie epoch and a transaction left open."""
    root.mkdir(parents=True, exist_ok=True)
    planted: dict[str, Written] = {}

    # orders.eu-west-1, partition 0: idempotent producers; the anomalies.
    p0 = PartitionWriter(root, "orders.eu-west-1", 0)
    p0.data(1000, 0, 0, 3)
    p0.data(2000, 0, 0, 2, builder="kafka-python")
    p0.data(1000, 0, 3, 3)
    retry = p0.data(2000, 0, 2, 2, builder="kafka-python")
    p0.data(3000, 0, 0)
    p0.roll()
    planted["duplicate"] = p0.append(retry.raw)  # the same batch again: the log took a retry twice
    p0.data(1000, 0, 6, 3, compression=1)
    p0.data(2000, 0, 4, 2, builder="kafka-python", compression=1)
    p0.data(3000, 0, 1)
    planted["sequence_gap"] = p0.data(1000, 0, 12, 3)  # sequences 9..11 lost
    p0.set_leader_epoch(3)
    p0.roll()
    p0.data(1000, 0, 15, 3)  # goes on from the gap's batch: no finding
    p0.data(3000, 1, 0)  # the producer bumped its epoch
    planted["epoch_regression"] = p0.data(3000, 0, 2)  # a zombie of epoch 0
    p0.data(3000, 1, 1)  # the live producer goes on: no finding
    p0.data(1000, 0, 18, 3, timestamp=T0 + HOUR)
    p0.close()

    # orders.eu-west-1, partition 1: transactions.
    p1 = PartitionWriter(root, "orders.eu-west-1", 1)
    p1.data(5000, 0, 0, 2, transactional=True)
    p1.data(5000, 0, 2, 1, transactional=True, builder="kafka-python")
    p1.marker(5000, 0, 1, 3)  # COMMIT
    planted["open_txn"] = p1.data(6000, 0, 0, 2, transactional=True)  # never ended: hanging
    p1.roll()
    p1.data(5000, 0, 3, 2, transactional=True, timestamp=T0 + 1000)
    p1.data(7000, 0, 0, 4, timestamp=T0 + 2000)
    p1.data(5000, 0, 5, 2, transactional=True, timestamp=T0 + 3000)
    planted["abort"] = p1.marker(5000, 0, 0, 3, timestamp=T0 + 4000)  # ABORT: 4 records aborted
    p1.roll()
    p1.data(7000, 0, 4, 4, timestamp=T0 + 2 * HOUR)
    p1.close()

    # payments, partition 0: clean, kafka-python batches, gzip, three segments.
    p2 = PartitionWriter(root, "payments", 0)
    for k in range(9):
        if k and k % 3 == 0:
            p2.roll()
        p2.data(9000 + k % 2, 2, 5 * (k // 2), 5, builder="kafka-python", compression=k % 2,
                timestamp=T0 + 60_000 * k)
    p2.close()
    return LogDir(root, {"orders0": p0, "orders1": p1, "payments": p2}, planted)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> LogDir:
    built = build_log_dir(tmp_path_factory.mktemp("kafka-logs") / "logs")
    (built.root / "meta.properties").write_text("version=1\n")
    (built.root / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    (built.root / "orders.eu-west-1-9.0123456789abcdef0123456789abcdef-delete").mkdir()
    return built


def fresh_copy(logdir: LogDir, tmp_path: Path) -> Path:
    target = tmp_path / "logs"
    shutil.copytree(logdir.root, target)
    return target


def moved(path: Path, old_root: Path, new_root: Path) -> Path:
    return new_root / path.relative_to(old_root)


# --- Names and listing --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "parsed"), [
    ("orders-0", ("orders", 0)), ("orders.eu-west-1-12", ("orders.eu-west-1", 12)),
    ("__consumer_offsets-49", ("__consumer_offsets", 49)), ("a-b-c-7", ("a-b-c", 7)),
    ("orders", None), ("orders-", None), ("orders-x", None), ("-3", None), ("bad name-1", None),
    ("orders-0.0123456789abcdef0123456789abcdef-delete", None),
])
def test_partition_directory_names(name, parsed):
    assert parse_partition_dir(name) == parsed


def test_the_listing_finds_partitions_segments_and_says_what_it_ignores(logdir, tmp_path):
    root = fresh_copy(logdir, tmp_path)
    p0 = root / "orders.eu-west-1-0"
    (p0 / "00000000000000000000.log.deleted").write_bytes(b"x")
    (p0 / "00000000000000000005.log.cleaned").write_bytes(b"x")
    (p0 / "00000000000000000005.index.swap").write_bytes(b"x")
    (p0 / "00000000000000099999.timeindex").write_bytes(b"")
    (root / "__cluster_metadata-0").mkdir()
    listing = list_log_dir(root)
    assert [(p.topic, p.partition) for p in listing.partitions] == [
        ("orders.eu-west-1", 0), ("orders.eu-west-1", 1), ("payments", 0)]
    orders = listing.partitions[0]
    bases = [w.base_offset for w in logdir.partitions["orders0"].written]
    assert [s.base_offset for s in orders.segments] == [s.base_offset for s in logdir.partitions["orders0"].segments]
    assert orders.segments[1].base_offset == bases[5]  # rolled after five batches
    assert all(s.index and s.time_index for s in orders.segments) and not any(s.txn_index for s in orders.segments)
    assert [s.txn_index is not None for s in listing.partitions[1].segments] == [False, True, False]
    assert [offset for offset, _ in orders.snapshots] == [s.base_offset for s in orders.segments[1:]]
    assert orders.leader_epoch_checkpoint == p0 / "leader-epoch-checkpoint"
    reasons = {item.path.name: item.reason for item in listing.all_ignored()}
    assert reasons["00000000000000000000.log.deleted"].startswith("marked for deletion")
    assert reasons["00000000000000000005.log.cleaned"].startswith("compaction output not yet swapped in")
    assert reasons["00000000000000000005.index.swap"].startswith("compaction output being swapped in")
    assert reasons["00000000000000099999.timeindex"].startswith("an index without its segment")
    assert reasons["partition.metadata"] == "the partition's topic id (not read)"
    assert reasons["meta.properties"] == "the log directory's identity (not read)"
    assert reasons["orders.eu-west-1-9.0123456789abcdef0123456789abcdef-delete"].startswith("a deleted partition")
    assert reasons["__cluster_metadata-0"].startswith("KRaft's metadata log")
    lines = listing.lines()
    assert any(line.endswith("00000000000000000000.log.deleted: ignored: marked for deletion (Kafka removes it "
                             "after file.delete.delay.ms)") for line in lines)


def test_partition_directories_and_segment_files_can_be_named(logdir):
    p0 = logdir.partitions["orders0"]
    one = list_log_dir(p0.path)
    assert [(p.topic, len(p.segments)) for p in one.partitions] == [("orders.eu-west-1", 3)]
    second = p0.file(p0.segments[1].base_offset, ".log")
    picked = list_log_dir([second, logdir.partitions["payments"].path])
    assert [[s.log for s in p.segments] for p in picked.partitions] == [
        [second], [s.log for s in list_log_dir(logdir.partitions["payments"].path).partitions[0].segments]]
    with pytest.raises(ValueError, match="listed whole"):
        list_log_dir([p0.path, second])
    with pytest.raises(FileNotFoundError, match="no such file"):
        list_log_dir(logdir.root / "nothing-here-0")
    with pytest.raises(ValueError, match="not a segment file"):
        list_log_dir(p0.path / "leader-epoch-checkpoint")


def test_two_replicas_of_a_partition_are_refused(logdir, tmp_path):
    for broker in ("a", "b"):
        shutil.copytree(logdir.partitions["payments"].path, tmp_path / broker / "payments-0")
    with pytest.raises(ValueError, match=r"partition payments-0 is in both .*/a/payments-0 and .*/b/payments-0"):
        list_log_dir([tmp_path / "a", tmp_path / "b"])


# --- The readers ----------------------------------------------------------------------------------------------------

def test_a_segment_scan_reads_what_kafka_python_reads(logdir, backend):
    for writer in logdir.partitions.values():
        for segment in writer.segments:
            path = writer.file(segment.base_offset, ".log")
            scan = scan_segment(path, stream=writer.partition, backend=backend)
            data = path.read_bytes()
            assert (scan.stop, scan.stop_position, scan.problems()) == ("end", len(data), [])
            expected = [w for w in writer.written if w.file == path]
            assert scan["position"].tolist() == [w.position for w in expected]
            for row, w in enumerate(expected):
                batch = KafkaPythonBatch(data[w.position:w.position + len(w.raw)])
                assert batch.validate_crc() and scan["crc_ok"][row] == 1
                assert (int(scan["base_offset"][row]), int(scan["last_offset"][row])) == (batch.base_offset,
                                                                                           batch.last_offset)
                assert int(scan["producer_id"][row]) == batch.producer_id == w.producer_id
                assert int(scan["producer_epoch"][row]) == batch.producer_epoch
                assert int(scan["base_sequence"][row]) == batch.base_sequence
                assert int(scan["record_count"][row]) == batch.records_count
                assert int(scan["max_timestamp"][row]) == batch.max_timestamp
                assert int(scan["compression"][row]) == batch.compression_type
                assert int(scan["leader_epoch"][row]) == batch.leader_epoch
                assert bool(scan["is_transactional"][row]) == batch.is_transactional
                assert bool(scan["is_control"][row]) == batch.is_control_batch
                assert int(scan["control_type"][row]) == (-1 if w.control is None else w.control)
                assert int(scan["batch_length"][row]) == len(w.raw) - 12
                assert int(scan["stream"][row]) == writer.partition
            metadata = scan.metadata()
            assert len(metadata) == len(expected) and metadata["is_control"].dtype == np.bool_


def test_a_scan_in_small_chunks_equals_one_scan(logdir):
    path = logdir.partitions["orders0"].file(0, ".log")
    whole, chunked = scan_segment(path), scan_segment(path, chunk_rows=2)
    assert all(np.array_equal(whole[name], chunked[name]) for name in whole.columns)
    assert (chunked.stop, chunked.stop_position) == (whole.stop, whole.stop_position)


@pytest.mark.parametrize("damage", ["torn", "zeros", "magic", "crc", "empty"])
def test_where_a_segment_scan_stops(logdir, tmp_path, damage, backend):
    writer = logdir.partitions["payments"]
    source = writer.file(0, ".log")
    data = bytearray(source.read_bytes())
    last = [w for w in writer.written if w.file == source][-1]
    path = tmp_path / source.name
    if damage == "torn":
        data = data[:last.position + 40]
    elif damage == "zeros":
        data += bytes(4096)
    elif damage == "magic":
        data[last.position + 16] = 1
    elif damage == "crc":
        data[last.position + 70] ^= 0x40
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    scan = scan_segment(path, backend=backend)
    problems = [(p.position, p.kind) for p in scan.problems()]
    if damage == "torn":
        assert (scan.stop, scan.stop_position, len(scan)) == ("torn tail", last.position, 2)
        assert problems == [(last.position, "torn_tail")]
        assert "declares" in scan.stop_detail and "ends after 40" in scan.stop_detail
    elif damage == "zeros":
        assert (scan.stop, scan.stop_position, len(scan), problems) == ("zero padding", len(data) - 4096, 3, [])
        assert scan.clean
    elif damage == "magic":
        assert (scan.stop, scan.stop_position, problems) == ("bad magic", last.position,
                                                             [(last.position, "bad_magic")])
        assert scan.stop_detail.startswith(f"bad magic 1 at position {last.position + 16}")
    elif damage == "crc":
        assert (scan.stop, len(scan), scan["crc_ok"].tolist()) == ("end", 3, [1, 1, 0])
        assert problems == [(last.position, "crc_mismatch")]
    else:
        assert (scan.stop, len(scan), problems) == ("end", 0, [])


def test_the_offset_and_time_indexes_read_back_and_stop_at_the_preallocated_zeros(logdir):
    writer = logdir.partitions["orders0"]
    for k, segment in enumerate(writer.segments):
        offsets = read_offset_index(writer.file(segment.base_offset, ".index"))
        assert offsets.entries == [(segment.base_offset + r, p) for r, p in segment.index]
        assert offsets.problems == []
        times = read_time_index(writer.file(segment.base_offset, ".timeindex"))
        assert times.entries == [(t, segment.base_offset + r) for t, r in segment.time_index]
        assert times.problems == []
        # The columns an audit checks hold the same entries, also when the entries are not built.
        columns = read_offset_index(writer.file(segment.base_offset, ".index"), entries=False).columns
        assert list(zip(columns["offset"].tolist(), columns["position"].tolist(), strict=True)) == offsets.entries
        columns = read_time_index(writer.file(segment.base_offset, ".timeindex"), entries=False).columns
        assert list(zip(columns["timestamp"].tolist(), columns["offset"].tolist(), strict=True)) == times.entries
        active = k == len(writer.segments) - 1
        assert bool(offsets.notes) == active and bool(times.notes) == active
    assert sum(len(s.index) for s in writer.segments) >= 3  # the writer did write entries


def test_an_offset_index_whose_first_entry_is_zero(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 5, 4100) + bytes(16))
    read = read_offset_index(path)
    assert read.entries == [(100, 0), (105, 4100)]
    assert read.notes == ["preallocated: 2 zero entries after the 2 used"] and read.problems == []


@pytest.mark.parametrize(("payload", "kind", "position"), [
    (struct.pack(">ii", 3, 0) + bytes(8) + struct.pack(">ii", 9, 900), "index_garbage", 16),
    (struct.pack(">ii", 3, 0) + b"\x00\x01\x02", "index_partial_entry", 8),
    (struct.pack(">ii", 3, 0) + struct.pack(">ii", 3, 500), "index_order", 8),
    (struct.pack(">ii", 3, 500) + struct.pack(">ii", 4, 100), "index_order", 8),
    (struct.pack(">ii", -3, 0), "index_negative", 0),
])
def test_a_damaged_offset_index_is_reported_at_its_position(tmp_path, payload, kind, position):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(payload)
    assert [(p.kind, p.position) for p in read_offset_index(path).problems] == [(kind, position)]


def test_a_time_index_whose_timestamps_fall_is_reported(tmp_path):
    path = tmp_path / "00000000000000000010.timeindex"
    path.write_bytes(struct.pack(">qi", T0, 1) + struct.pack(">qi", T0 - 1, 2))
    read = read_time_index(path)
    assert read.entries == [(T0, 11), (T0 - 1, 12)]
    assert [(p.kind, p.position) for p in read.problems] == [("index_order", 12)]
    assert "timestamp 1699999999999 is not above the previous entry's 1700000000000" in read.problems[0].message


def test_the_txn_index_reads_back(logdir, tmp_path):
    writer = logdir.partitions["orders1"]
    segment = writer.segments[1]
    read = read_txn_index(writer.file(segment.base_offset, ".txnindex"))
    abort = logdir.planted["abort"]
    first = [w for w in writer.written if w.producer_id == 5000 and w.control is None][2].base_offset
    assert [(e.version, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset, e.at)
            for e in read.entries] == [(0, 5000, first, abort.base_offset, logdir.planted["open_txn"].base_offset, 0)]
    assert read.problems == []
    bad = tmp_path / f"{segment.base_offset:020d}.txnindex"
    bad.write_bytes(struct.pack(">hqqqq", 1, 1, 5, 9, 10) + struct.pack(">hqqqq", 0, 1, 9, 5, 10) + b"\x00" * 5)
    assert [(p.kind, p.position) for p in read_txn_index(bad).problems] == [
        ("index_partial_entry", 68), ("txnindex_version", 0),
        ("txnindex_offsets", 34)]


def test_a_snapshot_reads_back_and_its_crc_is_checked(logdir, tmp_path):
    writer = logdir.partitions["orders1"]
    offset, raw = sorted(writer.snapshots.items())[-1]
    read = read_snapshot(writer.file(offset, ".snapshot"))
    assert read.problems == [] and read.notes == []
    assert [tuple(e) for e in read.entries] == [tuple(struct.unpack_from(">qhiqiqiq", raw, 10 + 46 * k))
                                                for k in range(len(read.entries))]
    by_pid = {e.producer_id: e for e in read.entries}
    assert by_pid[6000].current_txn_first_offset == logdir.planted["open_txn"].base_offset  # still open
    assert by_pid[5000].current_txn_first_offset == -1 and by_pid[5000].coordinator_epoch == 3
    assert by_pid[7000].first_sequence == 0 and by_pid[7000].last_sequence == 3
    damaged = bytearray(raw)
    damaged[20] ^= 0x01
    path = tmp_path / "00000000000000000007.snapshot"
    path.write_bytes(bytes(damaged))
    problems = read_snapshot(path).problems
    assert [(p.kind, p.position) for p in problems] == [("crc_mismatch", 2)]
    assert f"stored {struct.unpack_from('>I', raw, 2)[0]:#010x}" in problems[0].message
    path.write_bytes(struct.pack(">hIi", 2, crc32c(struct.pack(">i", 5)), 5))
    assert [(p.kind, p.position) for p in read_snapshot(path).problems] == [("snapshot_version", 0),
                                                                            ("snapshot_short", 10)]


def test_the_leader_epoch_checkpoint_reads_back_and_a_bad_line_is_named(logdir, tmp_path):
    read = read_leader_epoch_checkpoint(logdir.partitions["orders0"].path / "leader-epoch-checkpoint")
    assert read.entries == [(0, 0), (3, logdir.planted["sequence_gap"].last_offset + 1)] and read.problems == []
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n4\n0 0\n2 x\n1 9\n")
    problems = read_leader_epoch_checkpoint(path).problems
    assert [(p.kind, p.position, p.message.split(":")[0]) for p in problems] == [
        ("checkpoint_malformed", 8, "line 4"), ("checkpoint_count", 2, "line 2")]
    path.write_text("1\n0\n")
    assert [p.kind for p in read_leader_epoch_checkpoint(path).problems] == ["checkpoint_version"]


def test_idemcore_audit_recognises_a_log_directory_and_audits_it_without_spark(logdir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_PARENT)}
    run = [sys.executable, "-m", "idemcore.cli", "audit", str(logdir.root)]
    result = subprocess.run([*run, "--json", "--out", str(tmp_path / "report")], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["findings"] == {"duplicate": 1, "sequence_gap": 1, "epoch_regression": 1,
                                   "hanging_transaction": 1}
    assert (tmp_path / "report" / "summary.json").exists()
    gap = logdir.planted["sequence_gap"]
    text = subprocess.run([*run, "-q"], capture_output=True, text=True, env=env, timeout=300)
    assert text.returncode == 0 and text.stderr == "", text.stderr  # no Spark started, no progress with -q
    row = next(line for line in text.stdout.splitlines() if "sequence_gap" in line and str(gap.file) in line)
    assert row.split()[-1] == str(gap.position)  # the finding located in its segment


# --- dump-log ---------------------------------------------------------------------------------------------------

def dump(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_PARENT)}
    return subprocess.run([sys.executable, "-m", "idemcore.cli", "dump-log", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=300)


def fields_of(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+): (\S+)", line))


def expected_batch(w: Written) -> dict[str, object]:
    """What kafka-dump-log prints of a batch, from the bytes as kafka-python reads them."""
    batch = KafkaPythonBatch(w.raw)
    return {"baseOffset": batch.base_offset, "lastOffset": batch.last_offset, "count": batch.records_count,
            "baseSequence": batch.base_sequence, "lastSequence": batch.last_sequence, "producerId": batch.producer_id,
            "producerEpoch": batch.producer_epoch, "partitionLeaderEpoch": batch.leader_epoch,
            "isTransactional": batch.is_transactional, "isControl": batch.is_control_batch,
            "position": w.position, "maxTimestamp": batch.max_timestamp, "size": len(w.raw), "magic": 2,
            "compresscodec": ["none", "gzip", "snappy", "lz4", "zstd"][batch.compression_type],
            "crc": batch.crc, "isvalid": batch.validate_crc()}


def test_dump_log_prints_every_batch_like_kafka_dump_log(logdir):
    writer = logdir.partitions["orders1"]
    paths = [writer.file(s.base_offset, ".log") for s in writer.segments]
    result = dump(*paths)
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Dumping {paths[0]}", "Log starting offset: 0"]
    batches = [fields_of(line) for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == len(writer.written)
    for w, printed in zip(writer.written, batches, strict=True):
        want = expected_batch(w)
        assert printed.pop("CreateTime") == str(want.pop("maxTimestamp"))
        assert printed.pop("deleteHorizonMs") == "none"
        if w.control is not None:
            assert (printed.pop("endTxnMarker"), printed.pop("coordinatorEpoch")) == (
                ["ABORT", "COMMIT"][w.control], str(w.coordinator_epoch))
        assert printed == {key: str(value).lower() if isinstance(value, bool) else str(value)
                           for key, value in want.items()}


def test_dump_log_json_and_records(logdir):
    writer = logdir.partitions["orders0"]
    path = writer.file(writer.segments[1].base_offset, ".log")
    result = dump(path, "--json", "--records")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {row["file"] for row in rows} == {str(path)}
    batches = [row for row in rows if row["type"] == "batch"]
    expected = [w for w in writer.written if w.file == path]
    for w, row in zip(expected, batches, strict=True):
        want = expected_batch(w)
        assert {key: row[key] for key in want} == want
        assert row["timestampType"] == "CreateTime" and row["deleteHorizonMs"] is None
    records = [row for row in rows if row["type"] == "record"]
    assert len(records) == sum(w.count for w in expected)
    reference = [r for w in expected for r in KafkaPythonBatch(w.raw)]
    for got, want_record, offset in zip(records, reference, [w.base_offset + k for w in expected
                                                             for k in range(w.count)], strict=True):
        assert (got["offset"], got["timestamp"], got["keySize"], got["valueSize"]) == (
            offset, want_record.timestamp, len(want_record.key), len(want_record.value))
        assert got["headers"] == len(want_record.headers) and got["headerKeys"] == [h[0] for h in want_record.headers]
    gap = logdir.planted["sequence_gap"]
    assert [r["sequence"] for r in records if gap.base_offset <= r["offset"] <= gap.last_offset] == [12, 13, 14]


def test_dump_log_prints_markers_and_their_records(logdir):
    abort = logdir.planted["abort"]
    result = dump(abort.file, "--records")
    lines = result.stdout.splitlines()
    at = next(k for k, line in enumerate(lines) if f"position: {abort.position} " in line)
    assert fields_of(lines[at])["endTxnMarker"] == "ABORT" and fields_of(lines[at])["coordinatorEpoch"] == "3"
    record = fields_of(lines[at + 1])
    assert lines[at + 1].startswith("| ") and record["offset"] == str(abort.base_offset)
    assert (record["controlType"], record["coordinatorEpoch"], record["keySize"], record["valueSize"]) == (
        "ABORT", "3", "4", "6")


def test_dump_log_reads_indexes_snapshots_and_the_checkpoint(logdir):
    writer = logdir.partitions["orders1"]
    segment = writer.segments[1]
    snapshot_offset = max(writer.snapshots)
    files = [writer.file(segment.base_offset, ".index"), writer.file(segment.base_offset, ".timeindex"),
             writer.file(segment.base_offset, ".txnindex"), writer.file(snapshot_offset, ".snapshot"),
             writer.path / "leader-epoch-checkpoint"]
    result = dump(*files, "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    by_type: dict[str, list[dict]] = {}
    for row in rows:
        by_type.setdefault(row.pop("type"), []).append(row)
    assert by_type["offset_index_entry"] == [{"file": str(files[0]), "offset": segment.base_offset + r,
                                              "position": p} for r, p in segment.index]
    assert by_type["time_index_entry"] == [{"file": str(files[1]), "timestamp": t,
                                            "offset": segment.base_offset + r} for t, r in segment.time_index]
    assert by_type["aborted_txn"] == [{"file": str(files[2]), "version": 0, "producerId": pid, "firstOffset": first,
                                       "lastOffset": last, "lastStableOffset": lso}
                                      for pid, first, last, lso in segment.aborted]
    raw = writer.snapshots[snapshot_offset]
    entries = [struct.unpack_from(">qhiqiqiq", raw, 10 + 46 * k) for k in range(struct.unpack_from(">i", raw, 6)[0])]
    assert by_type["producer_snapshot_entry"] == [
        {"file": str(files[3]), "producerId": pid, "producerEpoch": epoch, "coordinatorEpoch": coordinator,
         "currentTxnFirstOffset": txn, "lastTimestamp": stamp,
         "firstSequence": -1 if last_seq < 0 else (last_seq - delta) % 2**31, "lastSequence": last_seq,
         "lastOffset": last_offset, "offsetDelta": delta}
        for pid, epoch, last_seq, last_offset, delta, stamp, coordinator, txn in entries]
    assert by_type["leader_epoch_entry"] == [{"file": str(files[4]), "epoch": 0, "startOffset": 0}]
    text = dump(files[0]).stdout.splitlines()
    assert text == [f"Dumping {files[0]}", *(f"offset: {segment.base_offset + r} position: {p}"
                                             for r, p in segment.index)]


def test_dump_log_names_the_file_and_position_of_what_is_wrong(logdir, tmp_path):
    writer = logdir.partitions["payments"]
    last = writer.written[2]
    data = bytearray(last.file.read_bytes())
    data[writer.written[1].position + 80] ^= 0xFF  # a record byte of batch 1: its CRC fails
    torn = tmp_path / last.file.name
    torn.write_bytes(bytes(data[:last.position + 30]))
    missing = tmp_path / "00000000000000000042.log"
    result = dump(torn, missing, tmp_path / "notes.txt")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"idemcore: error: {torn}: position {last.position}: torn tail: the batch here declares {len(last.raw)} "
        f"bytes (batch length {len(last.raw) - 12}), the file ends after 30",
        f"idemcore: error: {torn}: position {writer.written[1].position}: CRC mismatch in the batch at offsets "
        f"{writer.written[1].base_offset}..{writer.written[1].last_offset} (the batch is corrupt; an audit does not "
        "replay it)",
        f"idemcore: error: {missing}: No such file or directory",
        f"idemcore: error: {tmp_path / 'notes.txt'}: not a Kafka log file (expected .log, .index, .timeindex, "
        ".txnindex, .snapshot or leader-epoch-checkpoint)",
    ]
    printed = [fields_of(line) for line in result.stdout.splitlines() if line.startswith("baseOffset")]
    assert [p["isvalid"] for p in printed] == ["true", "false"]
    as_json = [json.loads(line) for line in dump(torn, "--json").stdout.splitlines()]
    assert [(row["type"], row.get("position")) for row in as_json] == [
        ("batch", 0), ("batch", writer.written[1].position), ("error", last.position),
        ("error", writer.written[1].position)]


# --- audit_log_dir ---------------------------------------------------------------------------------------------------

def located(report) -> list[tuple]:
    table = report.located_findings
    return list(zip(*(table.column(name).to_pylist() for name in ("topic", "partition", "base_offset", "finding",
                                                                   "expected", "file", "position")), strict=True))


def test_the_audit_finds_each_planted_anomaly_at_its_offset_and_position(logdir):
    report = audit_log_dir(logdir.root)
    gap, dup, zombie = (logdir.planted[name] for name in ("sequence_gap", "duplicate", "epoch_regression"))
    assert located(report) == sorted([
        ("orders.eu-west-1", 0, dup.base_offset, "duplicate", -1, str(dup.file), dup.position),
        ("orders.eu-west-1", 0, gap.base_offset, "sequence_gap", 9, str(gap.file), gap.position),
        ("orders.eu-west-1", 0, zombie.base_offset, "epoch_regression", 1, str(zombie.file), zombie.position),
    ], key=lambda row: row[2])
    assert report.finding_counts() == {"duplicate": 1, "sequence_gap": 1, "epoch_regression": 1,
                                       "hanging_transaction": 1}
    assert report.findings.num_rows == 3
    assert report.findings.column("base_offset").to_pylist() == [row[2] for row in located(report)]
    assert report.located_findings.schema == LOCATED_SCHEMA
    # The open transaction: hanging (its producer last wrote two hours before the newest batch), where it starts.
    opened = logdir.planted["open_txn"]
    txns = report.located_open_txns.to_pylist()
    assert [(t["topic"], t["partition"], t["producer_id"], t["first_offset"], t["hanging"], t["file"], t["position"])
            for t in txns] == [("orders.eu-west-1", 1, 6000, opened.base_offset, True, str(opened.file),
                                opened.position)]
    newest = max(w.max_timestamp for p in logdir.partitions.values() for w in p.written)
    assert txns[0]["idle_ms"] == newest - opened.max_timestamp > report.hanging_after_ms
    assert report.problems == ()
    assert report.batches == sum(len(w.written) for w in logdir.partitions.values())
    assert report.order_by == "base_offset" and report.source == str(logdir.root)


def test_the_audit_counts_transactions_and_offsets(logdir):
    report = audit_log_dir(logdir.root)
    rows = {(r["topic"], r["partition"]): r for r in report.partitions.to_pylist()}
    p1 = rows[("orders.eu-west-1", 1)]
    assert (p1["committed_txns"], p1["aborted_txns"], p1["aborted_records"]) == (1, 1, 4)
    assert p1["log_end_offset"] == logdir.partitions["orders1"].next_offset
    assert p1["last_stable_offset"] == logdir.planted["open_txn"].base_offset  # held by the open transaction
    p0 = rows[("orders.eu-west-1", 0)]
    assert (p0["batches"], p0["duplicates"], p0["rejected"]) == (len(logdir.partitions["orders0"].written), 1, 2)
    payments = rows[("payments", 0)]
    assert (payments["batches"], payments["rejected"], payments["duplicates"]) == (9, 0, 0)
    assert payments["records"] == 45 and payments["log_end_offset"] == 45
    assert report.transactions() == {"committed": 1, "aborted": 1, "aborted_records": 4, "open": 1, "hanging": 1,
                                     "open_not_hanging": 0}
    assert report.summary()["file_problems"] == {"counts": {}, "first": []}


def test_a_gap_is_one_finding_the_producer_goes_on_from(tmp_path):
    """The choice of rules: a batch after lost sequences is kept in the state, so the producer's next batches are
    in sequence again (with CLIENT rules alone, every later batch would be a gap too); a zombie's batch is not
    kept, so the live producer's next batch is in sequence."""
    writer = PartitionWriter(tmp_path / "logs", "t", 0)
    writer.data(1, 0, 0, 2)
    gap = writer.data(1, 0, 5, 2)
    for k in range(6):
        writer.data(1, 0, 7 + 2 * k, 2)
    writer.data(2, 1, 0)
    zombie = writer.data(2, 0, 1)
    writer.data(2, 1, 1)
    writer.data(2, 1, 2)
    writer.close()
    report = audit_log_dir(writer.path)
    assert [(row[2], row[3], row[4]) for row in located(report)] == [
        (gap.base_offset, "sequence_gap", 2), (zombie.base_offset, "epoch_regression", 1)]


def test_a_torn_tail_and_a_flipped_byte_are_reported_with_file_and_position(logdir, tmp_path, backend):
    root = fresh_copy(logdir, tmp_path)
    writer = logdir.partitions["payments"]
    middle, last = writer.written[4], writer.written[-1]
    corrupt_file = moved(middle.file, logdir.root, root)
    data = bytearray(corrupt_file.read_bytes())
    data[middle.position + 75] ^= 0x01  # inside its records: covered by the CRC
    corrupt_file.write_bytes(bytes(data))
    torn_file = moved(last.file, logdir.root, root)
    torn_file.write_bytes(torn_file.read_bytes()[:last.position + 20])
    report = audit_log_dir(root, backend=backend)
    problems = [(p.path, p.position, p.kind) for p in report.problems]
    assert (corrupt_file, middle.position, "crc_mismatch") in problems
    assert (torn_file, last.position, "torn_tail") in problems
    assert {kind for _, _, kind in problems} <= {"crc_mismatch", "torn_tail", "index_mismatch", "timeindex_mismatch"}
    assert report.batches == sum(len(w.written) for w in logdir.partitions.values()) - 2  # neither is replayed
    # The corrupt batch's producer skips its sequences: the next batch of that producer is a gap, where it is.
    following = next(w for w in writer.written[5:] if w.producer_id == middle.producer_id)
    payments = [row for row in located(report) if row[0] == "payments"]
    assert payments == [("payments", 0, following.base_offset, "sequence_gap", middle.base_sequence,
                         str(moved(following.file, logdir.root, root)), following.position)]
    assert any(str(torn_file) in line and f"position {last.position}: torn tail" in line
               for line in report.problem_lines())


def test_the_txn_index_is_cross_checked_against_the_abort_markers(logdir, tmp_path):
    root = fresh_copy(logdir, tmp_path)
    writer = logdir.partitions["orders1"]
    abort = logdir.planted["abort"]
    txn_index = moved(writer.file(writer.segments[1].base_offset, ".txnindex"), logdir.root, root)
    first = read_txn_index(txn_index).entries[0].first_offset

    def problems() -> list[tuple[Path, int | None, str]]:
        return [(p.path, p.position, p.kind) for p in audit_log_dir(root).problems]

    txn_index.unlink()  # the index lost: a read_committed consumer would be served the aborted records
    assert problems() == [(moved(abort.file, logdir.root, root), abort.position, "txnindex_missing")]
    entry = struct.pack(">hqqqq", 0, 5000, first, abort.base_offset, abort.base_offset + 1)
    stray = struct.pack(">hqqqq", 0, 6000, 0, abort.base_offset - 1, 0)
    txn_index.write_bytes(entry + stray)  # an entry no marker backs
    assert problems() == [(txn_index, 34, "txnindex_unmatched")]
    txn_index.write_bytes(struct.pack(">hqqqq", 0, 5000, first - 1, abort.base_offset, abort.base_offset + 1))
    assert problems() == [(txn_index, 0, "txnindex_mismatch")]
    txn_index.unlink()
    misplaced = moved(writer.file(writer.segments[0].base_offset, ".txnindex"), logdir.root, root)
    misplaced.write_bytes(entry)  # in an earlier segment's index, not the marker's
    assert set(problems()) == {(misplaced, 0, "txnindex_misplaced")}


def test_an_index_that_disagrees_with_its_segment_is_reported(logdir, tmp_path):
    root = fresh_copy(logdir, tmp_path)
    writer = logdir.partitions["orders0"]
    segment = writer.segments[0]
    index = moved(writer.file(segment.base_offset, ".index"), logdir.root, root)
    relative, position = segment.index[0]
    index.write_bytes(struct.pack(">ii", relative, position + 1) + index.read_bytes()[8:])
    report = audit_log_dir(root)
    assert [(p.path, p.position, p.kind) for p in report.problems] == [(index, 0, "index_mismatch")]
    assert f"no batch starts at position {position + 1}" in report.problems[0].message


def test_segments_whose_offsets_overlap_are_reported(logdir, tmp_path):
    root = fresh_copy(logdir, tmp_path)
    writer = logdir.partitions["payments"]
    second = writer.segments[1]
    target = moved(writer.file(second.base_offset, ".log"), logdir.root, root)
    data = bytearray(target.read_bytes())
    struct.pack_into(">q", data, 0, second.base_offset - 1)  # base offsets are outside the CRC
    target.write_bytes(bytes(data))
    kinds = [(p.path, p.position, p.kind) for p in audit_log_dir(root).problems]
    assert (target, 0, "offsets") in kinds


def test_every_backend_audits_alike(logdir, tmp_path):
    root = fresh_copy(logdir, tmp_path)
    damaged = moved(logdir.partitions["orders0"].written[1].file, logdir.root, root)
    data = bytearray(damaged.read_bytes())
    data[logdir.partitions["orders0"].written[1].position + 70] ^= 0x20
    damaged.write_bytes(bytes(data) + b"\x00\x00\x00")
    reports = {name: audit_log_dir(root, backend=name) for name in EXPECTED}
    first = reports[EXPECTED[0]]
    assert first.problems and first.located_findings.num_rows
    for name, report in reports.items():
        assert report.located_findings.equals(first.located_findings), name
        assert report.located_open_txns.equals(first.located_open_txns), name
        assert report.partitions.equals(first.partitions), name
        assert report.problems == first.problems, name


def test_an_empty_log_directory_and_a_partition_without_segments(tmp_path):
    (tmp_path / "logs" / "quiet-0").mkdir(parents=True)
    report = audit_log_dir(tmp_path / "logs")
    assert report.batches == 0 and report.located_findings.num_rows == 0 and report.problems == ()
    assert report.partitions.select(["topic", "partition", "batches"]).to_pylist() == [
        {"topic": "quiet", "partition": 0, "batches": 0}]
    assert isinstance(report.located_open_txns, pa.Table) and report.located_open_txns.num_rows == 0


def test_the_log_end_offset_is_the_log_s_even_after_a_refused_batch(tmp_path):
    writer = PartitionWriter(tmp_path / "logs", "t", 0)
    writer.data(1, 0, 0, 3)
    retry = writer.data(1, 0, 3, 3)
    writer.append(retry.raw)  # the last batch is a retry the log took twice: not kept in the state
    writer.close()
    report = audit_log_dir(writer.path)
    assert [row[3] for row in located(report)] == ["duplicate"]
    assert report.partitions.column("log_end_offset").to_pylist() == [writer.next_offset] == [9]


def _oracle(batches: dict[str, np.ndarray]) -> list[tuple[int, int, int]]:
    """(status, finding, expected) per batch, one batch at a time: CLIENT verdicts, and a batch after a sequence
    gap committed at its own offsets (what LogState does in ranges, with copies and rollbacks)."""
    from idemcore.engine.table import ProducerStateTable
    from idemcore.engine.validate import commit, validate
    from idemcore.engine.verdicts import Verdicts

    state = ProducerStateTable()
    out = []
    for i in range(len(batches["producer_id"])):
        one = {name: column[i:i + 1] for name, column in batches.items()}
        verdict = validate(one, state, origin="client", backend="python")
        out.append((int(verdict.status[0]), int(verdict.finding[0]), int(verdict.expected[0])))
        if verdict.finding[0] == 3:  # sequence_gap: the log goes on from this batch
            first = int(one["base_offset"][0])
            kept = Verdicts(np.zeros(1, np.int8), verdict.error_code, np.array([first]),
                            np.array([first + int(one["record_count"][0]) - 1]), verdict.finding, verdict.expected,
                            verdict.completed_txns, verdict.backend)
            commit(one, kept, state, backend="python")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_log_state_s_ranges_and_rollbacks_equal_one_batch_at_a_time(seed, backend, monkeypatch):
    """Random idempotent and transactional streams with gaps, retries, zombies and epoch bumps, replayed in
    ranges as small as 2 batches (so rollbacks cross range ends), equal the one-batch-at-a-time oracle."""
    from idemcore.audit import logdir as module
    from idemcore.kernels import get_backend
    from idemcore.kernels.columns import BatchColumns

    monkeypatch.setattr(module, "FIRST_CHUNK", 2)
    rng = np.random.default_rng(seed)
    rows = []
    next_seq = {pid: 0 for pid in range(4)}
    epoch = dict.fromkeys(range(4), 0)
    offset = 0
    for _ in range(400):
        pid = int(rng.integers(0, 4))
        transactional = pid == 3
        move = rng.choice(["next", "next", "next", "gap", "retry", "zombie", "bump", "marker"])
        count = int(rng.integers(1, 4))
        seq, e = next_seq[pid], epoch[pid]
        if move == "gap":
            seq += int(rng.integers(1, 5))
        elif move == "retry" and rows:
            seq = max(0, seq - count)
        elif move == "zombie":
            e = max(0, e - 1)
        elif move == "bump":
            epoch[pid] += 1
            e, seq = epoch[pid], 0
        if move == "marker":
            rows.append(dict(producer_id=pid, producer_epoch=e, base_sequence=-1, record_count=1,
                             is_transactional=True, is_control=True, control_type=int(rng.integers(0, 2)),
                             base_offset=offset))
            offset += 1
            continue
        rows.append(dict(producer_id=pid, producer_epoch=e, base_sequence=seq, record_count=count,
                         is_transactional=transactional, is_control=False, control_type=-1, base_offset=offset))
        offset += count
        if move in ("next", "gap", "bump"):
            next_seq[pid] = seq + count
    batches = {name: np.array([row[name] for row in rows]) for name in rows[0]}
    batches["coordinator_epoch"] = np.zeros(len(rows), np.int32)
    batches["max_timestamp"] = np.arange(len(rows), dtype=np.int64)
    batches["partition"] = np.zeros(len(rows), np.int32)
    packed = BatchColumns.coerce(batches)
    state = module.LogState(get_backend(backend))
    verdicts = state.validate(packed.slice(0, 150))  # two feeds: the state carries over
    later = state.validate(packed.slice(150, len(packed)))
    got = [(int(s), int(f), int(x)) for v in (verdicts, later)
           for s, f, x in zip(v.status, v.finding, v.expected, strict=True)]
    assert got == _oracle(batches)
    findings = {f for _, f, _ in got}
    assert {1, 3, 5} <= findings and state.committed_gaps > 0  # duplicates, gaps and zombies were exercised


def test_the_report_writes_like_the_parquet_audit_s_with_the_file_problems_in_its_summary(logdir, tmp_path):
    root = fresh_copy(logdir, tmp_path)
    torn = moved(logdir.planted["epoch_regression"].file, logdir.root, root)
    torn.write_bytes(torn.read_bytes() + b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x3a\x00\x00\x00\x00\x02")
    report = audit_log_dir(root)
    paths = report.write(tmp_path / "report")
    summary = json.loads(paths["summary"].read_text())
    assert summary["file_problems"]["counts"] == {"torn_tail": 1}
    assert summary["file_problems"]["first"][0]["file"] == str(torn)
    assert summary["file_problems"]["first"][0]["position"] == torn.stat().st_size - 17
    assert [row["finding"] for row in summary["located_findings"]] == ["duplicate", "sequence_gap",
                                                                       "epoch_regression"]
    assert summary["findings"] == report.finding_counts()


def test_batches_compaction_emptied_keep_their_offset_and_sequence_span(tmp_path):
    """Compaction removes records but keeps each batch's last offset delta (and so its last sequence); a batch
    emptied of every record stays for its producer state. Kafka reads the span, not the records left."""
    writer = PartitionWriter(tmp_path / "logs", "compacted", 0)
    kept = [Record(1, 1, b"k1", b"v"), Record(4, 4, b"k4", b"v")]
    writer.append(encode_batch(kept, base_timestamp=T0, producer_id=1, producer_epoch=0, base_sequence=0,
                               last_offset_delta=4))  # offsets 0..4, sequences 0..4, two records left
    writer.append(encode_batch([], producer_id=1, producer_epoch=0, base_sequence=5, last_offset_delta=2,
                               base_timestamp=T0, max_timestamp=T0))  # offsets 5..7, every record removed
    after = writer.data(1, 0, 8, 2)
    writer.close()
    assert [(w.base_offset, w.last_offset, w.count) for w in writer.written] == [(0, 4, 2), (5, 7, 0), (8, 9, 2)]
    report = audit_log_dir(writer.path)
    assert located(report) == [] and report.problems == ()
    assert report.partitions.column("log_end_offset").to_pylist() == [after.last_offset + 1]


def test_audit_of_a_log_directory_never_writes_into_it_or_over_a_user_s_files(logdir, tmp_path, capsys):
    from idemcore.cli import main

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.json").write_text('{"mine": 1}')
    assert main(["audit", str(logdir.root), "--out", str(mine), "-q"]) == 2
    assert (mine / "summary.json").read_text() == '{"mine": 1}'
    assert main(["audit", str(logdir.root), "--out", str(logdir.root / "report"), "-q"]) == 2
    assert not (logdir.root / "report").exists()
    err = capsys.readouterr().err
    assert "that an audit did not write" in err and "is inside the audited path" in err
