"""The log lives in files: a clean start reads no segment, a crash start scans only what lies past the recovery
point, appends keep no per-batch objects, reads go through the offset index, and the broker's checkpoint files
are Kafka's, byte for byte."""

from __future__ import annotations

import gc
import tracemalloc
from collections import Counter

import pytest

from idemcore.broker import Broker
from idemcore.broker.log import PartitionLog
from idemcore.broker.log.store import FileStore
from idemcore.net.messages import ProduceRequest
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import decode_stored_batches
from tests.helpers import set_recovery_point

SEGMENT = 4_096
INTERVAL = 512


def _batch(sequence: int, topic: str = "t", partition: int = 0, size: int = 100) -> RecordBatch:
    return RecordBatch(topic, partition, [b"v" * size], None, producer_id=3, producer_epoch=0,
                       base_sequence=sequence, max_timestamp=1_000 + sequence)


def _filled(directory, batches: int) -> PartitionLog:
    log = PartitionLog("t", 0, directory, fsync=False, segment_bytes=SEGMENT, index_interval_bytes=INTERVAL)
    for sequence in range(batches):
        log.append(log.log_end_offset, _batch(sequence))
    return log


@pytest.fixture
def log_reads(monkeypatch):
    """Bytes read from each kind of file (by suffix) through the stores."""
    counts: Counter[str] = Counter()
    read = FileStore.read

    def counted(store, position, length):
        data = read(store, position, length)
        counts[store.path.suffix] += len(data)
        return data

    monkeypatch.setattr(FileStore, "read", counted)
    return counts


def test_a_clean_start_reads_only_the_tail_of_each_segment_after_its_last_index_entry(tmp_path, log_reads):
    log = _filled(tmp_path / "t-0", 600)
    assert len(log.segment_bases) > 10
    end = log.log_end_offset
    log.close()
    log_reads.clear()
    again = PartitionLog("t", 0, tmp_path / "t-0", recovery_point=end, clean_shutdown=True,
                         segment_bytes=SEGMENT, index_interval_bytes=INTERVAL)
    assert again.log_end_offset == end and again.scanned_bytes == 0
    # Kafka's readNextOffset, for every segment: the batches after its last offset index entry (about
    # index.interval.bytes and one batch; with Kafka's 4 KB interval and 1 GB segments, 4 KB of each GB).
    batch_size = (tmp_path / "t-0" / f"{0:020d}.log").stat().st_size // (log.segment_bases[1])
    assert 0 < log_reads[".log"] <= len(log.segment_bases) * (INTERVAL + 2 * batch_size)
    again.append(end, _batch(600))  # and it goes on where it stopped
    assert again.log_end_offset == end + 1
    again.close()


def test_a_crash_start_scans_only_the_segments_from_the_recovery_point_on(tmp_path):
    log = _filled(tmp_path / "t-0", 600)
    point = log.segment_bases[-3] + 2  # inside the third segment from the end
    end = log.log_end_offset
    sizes = {base: (tmp_path / "t-0" / f"{base:020d}.log").stat().st_size for base in log.segment_bases}
    log.abandon()  # killed: no clean close
    again = PartitionLog("t", 0, tmp_path / "t-0", recovery_point=point, segment_bytes=SEGMENT,
                         index_interval_bytes=INTERVAL)
    assert again.log_end_offset == end
    assert again.scanned_bytes == sum(size for base, size in sizes.items() if base >= log.segment_bases[-3])
    assert again.scanned_bytes < sum(sizes.values()) / 4
    again.close()


def test_appends_keep_no_per_batch_objects(tmp_path):
    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=False, index_interval_bytes=INTERVAL)
    batches = [_batch(sequence) for sequence in range(6_000)]
    for batch in batches[:1_000]:  # warm up: every code path and cache touched once
        log.append(log.log_end_offset, batch)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for batch in batches[1_000:]:
        log.append(log.log_end_offset, batch)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename") if stat.size_diff > 0)
    # 5,000 batches of 100 bytes: any object kept per batch (even a 56-byte tuple) would be over 250 KB.
    assert grown < 50_000, f"{grown} bytes kept after 5,000 appends"
    assert log.log_end_offset == 6_000
    log.close()


def test_a_fetch_reads_through_the_offset_index_and_returns_the_files_bytes(tmp_path, log_reads):
    log = _filled(tmp_path / "t-0", 600)
    target = log.segment_bases[5] + 3
    log_reads.clear()
    data, after = log.read(target, log.log_end_offset, 250, min_one=True)
    (first, *_) = decode_stored_batches("t", 0, data)
    assert first.base_offset == target and after == target + len(decode_stored_batches("t", 0, data))
    # The index found the position: the segment's headers from its start were not walked.
    assert log_reads[".log"] <= 61 + INTERVAL + 250 + 200
    path = tmp_path / "t-0" / f"{log.segment_bases[5]:020d}.log"
    assert data in path.read_bytes()  # as the file holds them
    log.close()


def test_the_checkpoint_files_are_kafkas(tmp_path):
    with Broker({"t": 2}, data_dir=tmp_path) as broker:
        for sequence in range(5):
            broker.handle(ProduceRequest((_batch(sequence, size=10),)))
    assert (tmp_path / "recovery-point-offset-checkpoint").read_bytes() == b"0\n2\nt 0 5\nt 1 0\n"
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    with Broker({"t": 2}, data_dir=tmp_path) as broker:
        assert not (tmp_path / ".kafka_cleanshutdown").exists()  # removed once started: a crash must scan
        assert broker.log("t", 0).scanned_bytes == 0 and broker.log("t", 0).log_end_offset == 5


def test_an_old_data_dir_is_migrated_from_its_json_recovery_points(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        for sequence in range(3):
            broker.handle(ProduceRequest((_batch(sequence, size=10),)))
    (tmp_path / "recovery-point-offset-checkpoint").unlink()
    (tmp_path / ".kafka_cleanshutdown").unlink()
    (tmp_path / "log-end-offsets.json").write_text('{"t-0": 3}')  # as idemcore wrote it before
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert broker.log("t", 0).log_end_offset == 3
        assert not (tmp_path / "log-end-offsets.json").exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_bytes() == b"0\n1\nt 0 3\n"


def test_a_crash_start_after_a_clean_one_finds_what_was_written_since(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path, fsync=False) as broker:
        broker.handle(ProduceRequest((_batch(0, size=10),)))
    broker = Broker({"t": 1}, data_dir=tmp_path, fsync=False)
    for sequence in range(1, 4):
        broker.handle(ProduceRequest((_batch(sequence, size=10),)))
    broker.kill()
    set_recovery_point(tmp_path, "t", 0, 1)  # what the start before the crash recorded
    with Broker({"t": 1}, data_dir=tmp_path) as again:
        assert again.log("t", 0).log_end_offset == 4 and again.log("t", 0).scanned_bytes > 0
        assert [b.batch.base_sequence for b in again.log("t", 0).batches] == [0, 1, 2, 3]


def test_reading_a_long_log_keeps_few_files_open(tmp_path):
    import os

    log = _filled(tmp_path / "t-0", 600)
    assert len(log.segment_bases) > 20
    before = len(os.listdir("/proc/self/fd"))
    offset = 0
    while offset < log.log_end_offset:  # a consumer reading the whole log from the start
        data, offset = log.read(offset, log.log_end_offset, 1_000, min_one=True)
        assert data
    assert log.aborted_transactions(0, log.log_end_offset) == []
    # The active segment's files and those of the last few rolled segments read, not one per segment.
    assert len(os.listdir("/proc/self/fd")) - before <= 4 * 4
    log.close()
