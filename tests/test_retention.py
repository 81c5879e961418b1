"""Retention (Kafka's retention.ms / retention.bytes): whole segments deleted oldest first, the log start offset
advanced and recorded before any file goes, producer state kept for producers whose batches are gone."""

from __future__ import annotations

import os

import pytest

from idemcore.broker import Broker, LogCorruptionError
from idemcore.broker.log import PartitionLog
from idemcore.clock import wall_clock_ms
from idemcore.net.messages import ProduceRequest
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import read_leader_epoch_checkpoint, read_offset_checkpoint

DAY = 86_400_000
SMALL = {"segment_bytes": 300, "index_interval_bytes": 0}


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _send(broker: Broker, pid: int, seq: int, timestamp: int, partition: int = 0) -> tuple[int, int]:
    batch = RecordBatch("t", partition, [b"v%d-%d" % (pid, seq)], None, pid, 0, seq, timestamp)
    answer = broker.handle(ProduceRequest((batch,))).responses[0]
    return answer.error_code, answer.base_offset


def _segments(broker: Broker) -> list[int]:
    return [int(path.stem) for path in sorted((broker.data_dir / "t-0").glob("*.log"))]


def test_retention_bytes_deletes_the_oldest_segments_and_keeps_the_producer_state(tmp_path):
    clock = Clock(10 * DAY)
    with Broker({"t": 1}, data_dir=tmp_path, clock=clock, retention_bytes=600, **SMALL) as broker:
        assert _send(broker, 1, 0, clock.now) == (0, 0)  # producer 1 writes once, at offset 0
        for seq in range(30):
            assert _send(broker, 2, seq, clock.now)[0] == 0
        log = broker.log("t", 0)
        before = list(log.segment_bases)
        assert len(before) > 4
        assert broker.delete_old_segments() == 1
        start = log.log_start_offset
        assert start in before and start > 0 and log.segment_bases == [b for b in before if b >= start]
        assert _segments(broker) == log.segment_bases
        sizes = [path.stat().st_size for path in sorted((tmp_path / "t-0").glob("*.log"))]
        assert sum(sizes) >= 600 > sum(sizes) - sizes[0]  # Kafka's rule: delete while the rest is still that big
        assert [offset for offset, *_ in log.records()] == list(range(start, 31))
        assert broker.delete_old_segments() == 0  # nothing more is due
        assert _send(broker, 1, 0, clock.now) == (0, 0)  # its batch is gone, its state is not: still a duplicate
        assert _send(broker, 2, 30, clock.now) == (0, 31)
    assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint").entries == [("t", 0, start)]
    with Broker({"t": 1}, data_dir=tmp_path, clock=clock, **SMALL) as again:
        assert again.log("t", 0).log_start_offset == start
        assert next(offset for offset, *_ in again.log("t", 0).records()) == start
        assert _send(again, 1, 0, clock.now) == (0, 0)  # from the snapshot: the producer is remembered
        assert read_leader_epoch_checkpoint(tmp_path / "t-0" / "leader-epoch-checkpoint").entries == [(0, start)]


def test_retention_ms_deletes_expired_segments_and_rolls_when_all_are(tmp_path):
    clock = Clock(10 * DAY)
    with Broker({"t": 1}, data_dir=tmp_path, clock=clock, retention_ms=DAY, **SMALL) as broker:
        for seq in range(10):
            _send(broker, 1, seq, clock.now - 2 * DAY)  # old data: segments 0-3, 4-7 and the start of 8-11
        for seq in range(10, 12):
            _send(broker, 1, seq, clock.now)  # fresh, in the segment from 8: it stays
        assert broker.log("t", 0).segment_bases == [0, 4, 8]
        assert broker.delete_old_segments() == 1
        log = broker.log("t", 0)
        assert log.log_start_offset == 8 and _segments(broker) == [8]
        clock.now += 3 * DAY  # now everything has expired: roll, then delete every segment but the new one
        assert broker.delete_old_segments() == 1
        assert log.batches == [] and log.log_start_offset == log.log_end_offset == 12
        assert _segments(broker) == [12]
        assert _send(broker, 1, 12, clock.now) == (0, 12)  # offsets continue
    with Broker({"t": 1}, data_dir=tmp_path, clock=clock, **SMALL) as again:
        assert again.log("t", 0).log_start_offset == 12 and again.log("t", 0).log_end_offset == 13
        assert _send(again, 1, 12, clock.now) == (0, 12)  # a duplicate


def test_a_retention_cut_short_after_the_checkpoint_is_finished_at_the_next_start(tmp_path, monkeypatch):
    clock = Clock(10 * DAY)
    broker = Broker({"t": 1}, data_dir=tmp_path, clock=clock, retention_bytes=300, **SMALL)
    for seq in range(20):
        _send(broker, 1, seq, clock.now)
    monkeypatch.setattr(PartitionLog, "delete_start_breached_segments", lambda self: 0)  # dies before deleting
    broker.delete_old_segments()
    monkeypatch.undo()
    start = read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint").entries[0].offset
    broker.kill()
    with Broker({"t": 1}, data_dir=tmp_path, clock=clock, **SMALL) as again:
        log = again.log("t", 0)
        assert log.log_start_offset == start and _segments(again)[0] == start
        assert [offset for offset, *_ in log.records()] == list(range(start, 20))
        assert _send(again, 1, 19, clock.now) == (0, 19)


@pytest.mark.parametrize("damage", ["garbled", "deleted"])
def test_a_damaged_or_lost_log_start_checkpoint_is_refused(tmp_path, damage):
    clock = Clock(10 * DAY)
    with Broker({"t": 1}, data_dir=tmp_path, clock=clock, retention_bytes=300, **SMALL) as broker:
        for seq in range(20):
            _send(broker, 1, seq, clock.now)
        broker.delete_old_segments()
    path = tmp_path / "log-start-offset-checkpoint"
    if damage == "garbled":
        path.write_text("0\n1\nt zero 5\n")
        expected = "log-start-offset-checkpoint is damaged"
    else:  # the log now looks as if its first segments were deleted from outside
        path.unlink()
        expected = "00000000000000000000.log is missing"
    with pytest.raises(LogCorruptionError, match=expected):
        Broker({"t": 1}, data_dir=tmp_path, clock=clock, **SMALL)


@pytest.mark.parametrize("name, value, says", [
    ("retention_ms", -2, "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("retention_bytes", 1.5, "Invalid value 1.5 for configuration retention.bytes: Expected a value of type LONG")])
def test_bad_retention_settings_are_named(tmp_path, name, value, says):
    with pytest.raises(ValueError, match=says):
        Broker({"t": 1}, data_dir=tmp_path, **{name: value})
    assert not (tmp_path / "t-0").exists()


# --- found by a hostile review -----------------------------------------------------------------------------------


def test_segments_emptied_by_compaction_do_not_stop_retention(tmp_path):
    clock = Clock(100 * DAY)
    configs = {"t": {"cleanup.policy": "compact,delete", "segment.bytes": 300, "retention.ms": DAY}}
    with Broker({"t": 1}, data_dir=tmp_path, topic_configs=configs, clock=clock) as broker:
        for _ in range(20):  # one key overwritten: compaction empties every old segment but each one's last
            batch = RecordBatch("t", 0, [b"x" * 40], [b"a"], -1, -1, -1, clock.now)
            assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == 0
        broker.clean_logs()
        clock.now += 30 * DAY
        assert broker.delete_old_segments() == 1
        assert broker.log("t", 0).log_start_offset == 20 and _segments(broker) == [20]


def test_retention_ms_ages_batches_without_timestamps_by_their_segment_file(tmp_path):
    clock = Clock(100 * DAY)
    with Broker({"t": 1}, data_dir=tmp_path, clock=clock, retention_ms=DAY, **SMALL) as broker:
        for seq in range(6):
            _send(broker, 1, seq, -1)  # no timestamp: Kafka's largestTimestamp falls back to the file's time
        clock.now = wall_clock_ms()  # the files were written just now
        assert broker.delete_old_segments() == 0
        clock.now += 2 * DAY
        assert broker.delete_old_segments() == 1


def test_checkpoints_keep_the_partitions_a_smaller_broker_does_not_serve(tmp_path):
    clock = Clock(10 * DAY)
    for topics in ({"t": 1, "u": 1}, {"t": 1}):
        with Broker(topics, data_dir=tmp_path, clock=clock, retention_bytes=300, **SMALL) as broker:
            for seq in range(10):
                for topic in topics:
                    batch = RecordBatch(topic, 0, [b"v%d" % seq], None, 1, 0, seq + (10 if len(topics) == 1 else 0),
                                        clock.now)
                    assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == 0
            broker.delete_old_segments()
    entries = {(e.topic, e.partition) for e in read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint").entries}
    assert entries == {("t", 0), ("u", 0)}
    with Broker({"t": 1, "u": 1}, data_dir=tmp_path, clock=clock, **SMALL) as again:
        assert again.log("u", 0).log_start_offset > 0


@pytest.mark.parametrize("restart", ["none", "clean", "kill"])
@pytest.mark.parametrize("files_say", ["new", "old"])
def test_retention_ms_judges_a_segment_by_its_time_index_not_its_file_time(tmp_path, restart, files_say):
    """Kafka's ``LogSegment.largestTimestamp``: the largest timestamp of the segment's batches (its time index's
    last entry, or the appends seen in this run); the file's modification time only when its batches carry none.
    Segments 0 and 4 hold batches two days old (deleted whatever their files' times say), the active one a fresh
    batch (kept whatever its file's time says)."""
    now = wall_clock_ms()
    clock = Clock(now)
    broker = Broker({"t": 1}, data_dir=tmp_path, clock=clock, retention_ms=DAY, **SMALL)
    for seq in range(8):
        _send(broker, 1, seq, now - 2 * DAY)
    _send(broker, 1, 8, now)
    assert broker.log("t", 0).segment_bases == [0, 4, 8]
    if restart != "none":
        broker.close() if restart == "clean" else broker.kill()
        broker = Broker({"t": 1}, data_dir=tmp_path, clock=clock, retention_ms=DAY, **SMALL)
    stamp = (now - 10 * DAY if files_say == "old" else now + DAY) / 1000  # the opposite of what the batches say
    for path in (tmp_path / "t-0").glob("*.log"):
        os.utime(path, (stamp, stamp))
    with broker:
        assert broker.delete_old_segments() == 1
        log = broker.log("t", 0)
        assert log.log_start_offset == 8 and _segments(broker) == [8]
        assert [offset for offset, *_ in log.records()] == [8]
