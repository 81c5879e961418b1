"""PartitionLog: a partition as Kafka segments and indexes, its recovery rules, and its files read by others."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from idemcore.broker.log import LogCorruptionError, PartitionLog
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import parse_offset_file, read_offset_index, read_time_index
from idemcore.record.v2 import read_header


def _batch(sequence: int, count: int = 3, keyed: bool = False, size: int = 20) -> RecordBatch:
    values = [f"{sequence + i:0{size}d}".encode() for i in range(count)]
    keys = [None if i % 2 else f"k{i}".encode() for i in range(count)] if keyed else None
    return RecordBatch("t", 0, values, keys, producer_id=7, producer_epoch=0, base_sequence=sequence,
                       max_timestamp=1_000 + sequence)


def _fill(log, batches: int, count: int = 3, **kwargs) -> list[int]:
    """Append ``batches`` batches of an idempotent stream; each one's base offset."""
    bases = []
    for _ in range(batches):
        base = log.log_end_offset
        log.append(base, _batch(base, count, keyed=len(bases) % 2 == 1, **kwargs))
        bases.append(base)
    return bases


def _stored(log) -> list[tuple]:
    """The batches as plain tuples."""
    return [(base, tuple(b.values), None if b.keys is None else tuple(b.keys), b.producer_id, b.producer_epoch,
             b.base_sequence, b.max_timestamp, b.is_transactional) for base, b, *_ in log.batches]


def _records(log) -> list[tuple[int, bytes | None, bytes]]:
    return [(offset, key, value) for offset, key, value, _ in log.records()]


# --- interface and recovery ------------------------------------------------------------------------------------

def test_append_and_read_back_after_restart(tmp_path):
    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=False)
    _fill(log, 5)
    before = _stored(log)
    records = _records(log)
    log.close()
    again = PartitionLog("t", 0, tmp_path / "t-0", fsync=False, recovery_point=15)
    assert again.log_end_offset == 15
    assert _stored(again) == before
    assert _records(again) == records
    assert records[1] == (1, None, b"%020d" % 1)
    assert tuple(again.batches[1].batch.keys) == (b"k0", None, b"k2")
    assert again.truncated_bytes == 0
    _fill(again, 1)
    again.close()
    third = PartitionLog("t", 0, tmp_path / "t-0", fsync=False, recovery_point=18)
    assert [b.base_offset for b in third.batches] == [0, 3, 6, 9, 12, 15]
    third.close()


@pytest.mark.parametrize("damage", ["cut", "flip"])
def test_torn_tail_beyond_the_recovery_point_is_cut(tmp_path, damage):
    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=False)
    _fill(log, 3)
    path, position = log.path, log.last_append_position
    log.close()
    size = path.stat().st_size
    with open(path, "r+b") as file:
        if damage == "cut":
            file.truncate(position + 5)
        else:
            file.seek(size - 1)
            last = file.read(1)[0]
            file.seek(size - 1)
            file.write(bytes([last ^ 0xFF]))
    again = PartitionLog("t", 0, tmp_path / "t-0", fsync=False, recovery_point=6)
    assert again.log_end_offset == 6
    assert again.truncated_bytes == (5 if damage == "cut" else size - position)
    assert path.stat().st_size == position
    _fill(again, 1)
    again.close()
    assert PartitionLog("t", 0, tmp_path / "t-0", recovery_point=9).log_end_offset == 9


def test_damage_below_the_recovery_point_is_refused(tmp_path):
    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=False)
    _fill(log, 3)
    path = log.path
    log.close()
    with open(path, "r+b") as file:
        file.seek(40)
        byte = file.read(1)[0]
        file.seek(40)
        file.write(bytes([byte ^ 0x01]))
    with pytest.raises(LogCorruptionError, match=rf"{path.name} is corrupt at byte 0"):
        PartitionLog("t", 0, tmp_path / "t-0", recovery_point=9)


def test_a_log_ending_below_the_recovery_point_is_refused(tmp_path):
    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=False)
    _fill(log, 3)
    path, position = log.path, log.last_append_position
    log.close()
    os.truncate(path, position)
    with pytest.raises(LogCorruptionError, match="ends at offset 6, but held 9"):
        PartitionLog("t", 0, tmp_path / "t-0", recovery_point=9)


def test_rollback_last(tmp_path):
    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=False)
    _fill(log, 2)
    size = log.path.stat().st_size
    log.append(6, _batch(6))
    assert log.path.stat().st_size > size
    log.rollback_last()
    assert log.log_end_offset == 6
    assert log.path.stat().st_size == size
    log.append(6, _batch(100))
    log.close()
    again = PartitionLog("t", 0, tmp_path / "t-0", recovery_point=9)
    assert again.batches[-1].batch.base_sequence == 100
    assert len(again.batches) == 3


# --- Kafka's files --------------------------------------------------------------------------------------------

def _segments(directory: Path, suffix: str = ".log") -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(suffix))


SMALL = {"segment_bytes": 1500, "index_interval_bytes": 200}


def _rolled(tmp_path: Path, batches: int = 40) -> tuple[Path, list[int]]:
    directory = tmp_path / "t-0"
    log = PartitionLog("t", 0, directory, fsync=False, **SMALL)
    bases = _fill(log, batches)
    log.close()
    return directory, bases


def test_segments_roll_at_segment_bytes_with_20_digit_names(tmp_path):
    directory, bases = _rolled(tmp_path)
    segments = _segments(directory)
    assert len(segments) > 3
    for number, path in enumerate(segments):
        parsed = parse_offset_file(path.name)
        assert parsed is not None and len(path.stem) == 20
        assert parsed[0] in bases  # each segment is named after its first batch's offset
        size = path.stat().st_size
        assert size <= 1500
        if number < len(segments) - 1:
            assert size + 146 > 1500  # it rolled because the next batch did not fit
        assert path.with_suffix(".index").exists() and path.with_suffix(".timeindex").exists()
    assert segments[0].name == "00000000000000000000.log"
    assert PartitionLog("t", 0, directory, recovery_point=bases[-1] + 3, **SMALL).log_end_offset == bases[-1] + 3


def test_kafka_python_reads_every_batch(tmp_path):
    from kafka.record.memory_records import MemoryRecords

    directory, bases = _rolled(tmp_path)
    seen = []
    for path in _segments(directory):
        records = MemoryRecords(path.read_bytes())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 0, batch.base_offset)
            records_read = list(batch)
            offsets = [record.offset for record in records_read]
            assert offsets == list(range(batch.base_offset, batch.base_offset + 3))
            assert [record.value for record in records_read] == [b"%020d" % o for o in offsets]
            seen.append(batch.base_offset)
    assert seen == bases


def test_dump_log_reads_the_segment_and_its_indexes(tmp_path):
    directory, bases = _rolled(tmp_path)
    first = _segments(directory)[0]
    files = [first, first.with_suffix(".index"), first.with_suffix(".timeindex")]
    done = subprocess.run([sys.executable, "-m", "idemcore.cli", "dump-log", "--json", *map(str, files)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [row.get("type") for row in rows]
    second = parse_offset_file(_segments(directory)[1].name)
    assert second is not None
    assert kinds.count("batch") == sum(1 for base in bases if base < second[0]) > 1
    assert kinds.count("offset_index_entry") == len(read_offset_index(files[1]).entries) > 0
    assert kinds.count("time_index_entry") == len(read_time_index(files[2]).entries) > 0


def test_audit_of_the_log_directory_finds_nothing_wrong(tmp_path):
    from idemcore.audit.logdir import audit_log_dir

    directory, bases = _rolled(tmp_path)
    report = audit_log_dir(directory.parent)
    assert report.problems == ()
    assert report.batches == len(bases)
    assert report.findings.num_rows == 0


def test_audit_sees_a_damaged_index(tmp_path):
    """The audit check above can fail: an index entry pointing into a batch is a problem."""
    from idemcore.audit.logdir import audit_log_dir

    directory, _ = _rolled(tmp_path)
    index = _segments(directory, ".index")[0]
    data = bytearray(index.read_bytes())
    data[7] += 1  # the first entry's position, one byte into a batch
    index.write_bytes(bytes(data))
    assert {p.kind for p in audit_log_dir(directory.parent).problems} == {"index_mismatch"}


def test_a_flipped_byte_in_an_old_segment_is_refused(tmp_path):
    directory, _ = _rolled(tmp_path)
    old = _segments(directory)[1]
    second = read_header(old.read_bytes()).size_in_bytes  # where the segment's second batch starts
    with open(old, "r+b") as file:
        file.seek(second + 80)  # inside its records
        byte = file.read(1)[0]
        file.seek(second + 80)
        file.write(bytes([byte ^ 0x10]))
    # Even with no recovery point: a rolled segment was fsync'd, so it cannot hold a torn tail.
    with pytest.raises(LogCorruptionError, match=rf"{old.name} is corrupt at byte {second}: CRC mismatch"):
        PartitionLog("t", 0, directory, recovery_point=0, **SMALL)


def test_a_missing_segment_is_refused(tmp_path):
    directory, _ = _rolled(tmp_path)
    missing = _segments(directory)[2]
    missing.unlink()
    with pytest.raises(LogCorruptionError, match=f"{missing} is missing"):
        PartitionLog("t", 0, directory, recovery_point=0, **SMALL)


def test_repeated_offsets_are_refused(tmp_path):
    directory, _ = _rolled(tmp_path)
    segment = _segments(directory)[0]
    data = segment.read_bytes()
    # The first batch again, at offset 0 after the segment's last.
    segment.write_bytes(data + data[:read_header(data).size_in_bytes])
    with pytest.raises(LogCorruptionError, match=rf"{segment.name} is corrupt at byte {len(data)}: it holds offset 0 "):
        PartitionLog("t", 0, directory, recovery_point=0, **SMALL)


@pytest.mark.parametrize("damage", ["delete", "garbage"])
def test_a_lost_index_is_rebuilt(tmp_path, caplog, damage):
    directory, bases = _rolled(tmp_path)
    index = _segments(directory, ".index")[1]
    time_index = index.with_suffix(".timeindex")
    original, original_time = index.read_bytes(), time_index.read_bytes()
    assert original and original_time
    if damage == "delete":
        index.unlink()
        time_index.unlink()
    else:
        index.write_bytes(b"\x01" * 13)
        time_index.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="idemcore.broker.log"):
        log = PartitionLog("t", 0, directory, recovery_point=bases[-1] + 3, **SMALL)
    assert log.log_end_offset == bases[-1] + 3
    assert index.read_bytes() == original and time_index.read_bytes() == original_time
    assert sum("rebuilding" in r.getMessage() for r in caplog.records) == 2
    log.close()


def test_indexes_are_kafkas_and_the_torn_tail_leaves_them_consistent(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog("t", 0, directory, fsync=False, index_interval_bytes=200)
    _fill(log, 11)
    path, position = log.path, log.last_append_position
    log.close()
    entries = read_offset_index(path.with_suffix(".index"))
    assert entries.problems == [] and len(entries.entries) == 5  # every other batch: > 200 bytes since the last
    assert entries.entries[0] == (8, 288)  # Kafka indexes a batch's last offset at its start position
    assert entries.entries[-1] == (32, position)  # the last batch has one
    times = read_time_index(path.with_suffix(".timeindex"))
    assert times.problems == [] and times.entries[0] == (1_006, 8) and len(times.entries) == 5
    os.truncate(path, position + 1)
    again = PartitionLog("t", 0, directory, recovery_point=30, index_interval_bytes=200)
    assert again.log_end_offset == 30
    again.close()
    assert read_offset_index(path.with_suffix(".index")).entries == entries.entries[:-1]
    kept = read_time_index(path.with_suffix(".timeindex")).entries
    # The entries of what is left, then the one a clean close adds for the largest timestamp (Kafka's close).
    assert kept[:-1] == times.entries[:-1] and kept[-1].offset == 29 and kept[-1].timestamp > kept[-2].timestamp


@pytest.mark.parametrize("failing", ["log", "index"])
def test_a_failed_append_leaves_segment_and_indexes_as_they_were(tmp_path, monkeypatch, failing):
    from idemcore.broker.log.store import FileStore

    directory = tmp_path / "t-0"
    log = PartitionLog("t", 0, directory, fsync=False, index_interval_bytes=200)
    _fill(log, 4)  # the next batch gets an index entry
    files = [log.path, log.path.with_suffix(".index"), log.path.with_suffix(".timeindex")]
    before = [path.read_bytes() for path in files]
    append = FileStore.append

    def failing_append(store, data):
        if store.name.endswith(".log" if failing == "log" else ".index"):
            append(store, bytes(data)[:len(data) // 2])  # half written, then the disk is full
            raise OSError("disk full")
        append(store, data)

    monkeypatch.setattr(FileStore, "append", failing_append)
    with pytest.raises(OSError, match="disk full"):
        log.append(12, _batch(12))
    assert [path.read_bytes() for path in files] == before
    assert log.log_end_offset == 12
    monkeypatch.setattr(FileStore, "append", append)
    log.append(12, _batch(12))
    log.close()
    again = PartitionLog("t", 0, directory, recovery_point=15, index_interval_bytes=200)
    assert len(read_offset_index(files[1]).entries) == 2 and again.log_end_offset == 15


def test_rollback_of_the_batch_that_rolled_keeps_an_empty_segment(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog("t", 0, directory, fsync=False, segment_bytes=300)
    _fill(log, 2)
    log.append(6, _batch(6))
    assert log.path.name == "00000000000000000006.log"
    log.rollback_last()
    assert log.path.stat().st_size == 0 and log.log_end_offset == 6
    log.close()
    again = PartitionLog("t", 0, directory, recovery_point=6, segment_bytes=300)
    again.append(6, _batch(60))
    again.close()
    third = PartitionLog("t", 0, directory, recovery_point=9, segment_bytes=300)
    assert [b.batch.base_sequence for b in third.batches] == [0, 3, 60]
    assert [p.name for p in _segments(directory)] == ["00000000000000000000.log", "00000000000000000006.log"]


def test_a_data_dir_in_the_old_frame_format_is_refused_untouched(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "log").write_bytes(b"\x00" * 40)
    with pytest.raises(LogCorruptionError, match=r"t-0/log is in idemcore's earlier frame format, which"):
        PartitionLog("t", 0, directory)
    assert sorted(os.listdir(directory)) == ["log"]


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """Every os.fsync from now on, as what it synced: a file's suffix, or "dir" for a directory."""
    calls: list[str] = []
    real = os.fsync

    def watching(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        calls.append("dir" if os.path.isdir(target) else Path(target).suffix)
        real(fd)
    monkeypatch.setattr(os, "fsync", watching)
    return calls


def test_the_directory_is_fsynced_when_its_files_are_new(tmp_path, synced):
    """Kafka's ``LocalLog.flush`` fsyncs the log's directory when there are new segments: a new log's first flush
    and the first flush after a roll fsync it (so the new files' names survive a power loss), later ones do not;
    an in-place roll fsyncs it with the old segment."""
    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=True, segment_bytes=400)
    _fill(log, 1)
    synced.clear()  # the first batch wrote the leader-epoch checkpoint (a file written whole: its own fsyncs)
    log.flush()
    assert synced == [".log", "dir"]
    synced.clear()
    _fill(log, 1)
    log.flush()
    assert synced == [".log"]
    synced.clear()
    while len(log.segments) == 1:
        _fill(log, 1)
    assert "dir" in synced  # the roll: the old segment's files and the directory
    synced.clear()
    log.flush()
    assert synced == [".log", "dir"]  # the new segment's names
    log.close()


def test_the_first_abort_of_a_segment_makes_its_txnindex_and_the_directory_is_fsynced(tmp_path, synced):
    """An ABORT marker's entry creates the segment's ``.txnindex``: a new name, so the next flush fsyncs it, then
    the log, then the directory (a lost .txnindex would show aborted records to read_committed consumers)."""
    from idemcore.protocol.codes import ControlType

    log = PartitionLog("t", 0, tmp_path / "t-0", fsync=True)
    log.append(0, RecordBatch("t", 0, [b"a", b"b"], None, 7, 0, 0, 1_000, True))
    log.flush()
    synced.clear()
    log.append_marker(2, 7, 0, ControlType.ABORT, 0, 1_000)
    log.flush()
    assert synced == [".txnindex", ".log", "dir"]
    log.close()
