"""Truncating a log (PartitionLog.truncate_to, truncate_fully_and_start_at): what is kept reads back exactly,
with indexes the same as a log that never held the rest, and so it stays after a clean restart and after the
process that truncated was killed (at the end of the truncation or in the middle of it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from idemcore.broker.log import PartitionLog
from idemcore.broker.log_manager import LogManager
from idemcore.broker.topic_config import TopicConfig
from idemcore.protocol.codes import ControlType
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import encode_snapshot

SETTINGS = {"segment_bytes": 700, "index_interval_bytes": 150}
CONFIG = TopicConfig(segment_bytes=700, index_interval_bytes=150)


def batch(values: list[bytes], pid: int, sequence: int, *, transactional: bool = False) -> RecordBatch:
    return RecordBatch("t", 0, values, None, producer_id=pid, producer_epoch=0, base_sequence=sequence,
                       max_timestamp=1_000 + sequence * 7 % 50, is_transactional=transactional)


#: A valid snapshot of no producers (Kafka's format: a loader reading one of these finds it whole).
EMPTY_SNAPSHOT = encode_snapshot(())


def fill(log: PartitionLog) -> None:
    """About 45 offsets over several segments and leader epochs, with aborted and committed transactions."""
    sequences = {1: 0, 2: 0, 3: 0}
    for k in range(30):
        log.leader_epoch = k // 8
        pid = 1 + k % 3
        values = [b"x" * (10 + k % 4 * 20)] * (1 + k % 3)
        log.append(log.log_end_offset, batch(values, pid, sequences[pid], transactional=pid != 1))
        sequences[pid] += len(values)
        if k % 6 == 5:
            for marker_pid, kind in ((2, ControlType.ABORT), (3, ControlType.COMMIT)):
                log.append_marker(log.log_end_offset, marker_pid, 0, kind, 1, 2_000 + k)
        if log.directory is not None:
            log.write_snapshot(log.log_end_offset, EMPTY_SNAPSHOT)  # which snapshots stay is what is checked


def stored(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    """Each batch: its base offset, next offset and bytes as stored."""
    out = []
    offset = log.segments[0].base_offset
    while offset < log.log_end_offset:
        data, after = log.read(offset, log.log_end_offset, 1, True)
        out.append((offset, after, data))
        offset = after
    return out


def reference(directory: Path, batches: list[tuple[int, int, bytes]]) -> PartitionLog:
    """A log that only ever held ``batches`` (appended as a follower appends the leader's bytes)."""
    log = PartitionLog("t", 0, directory, **SETTINGS)
    for _, _, data in batches:  # one batch a call: a roll comes first in its call
        assert len(log.append_replicated(data, 0)) == 1
    return log


def check_reads(log: PartitionLog, kept: list[tuple[int, int, bytes]], original: PartitionLog | None = None) -> None:
    """Reads by offset give the kept batches; by time, what a log of only those gives; no read past the end."""
    assert stored(log) == kept
    for base, after, data in kept:
        for offset in range(base, after):
            assert log.read(offset, log.log_end_offset, 1, True)[0] == data
    assert log.read(log.log_end_offset, log.log_end_offset + 10, 1 << 20, True) == (b"", log.log_end_offset)
    if original is not None:
        for stamp in range(990, 1_060, 3):
            assert log.offset_for_timestamp(stamp) == original.offset_for_timestamp(stamp), stamp


def files(directory: Path) -> dict[str, bytes]:
    """The segment files and epochs; not an empty last segment (a truncation to a segment's base keeps it, as
    Kafka's does, where a log that never went past it has none)."""
    empty = {p.stem for p in directory.glob("*.log") if p.stat().st_size == 0}
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.stem not in empty
            and (p.suffix in (".log", ".index", ".timeindex", ".txnindex") or p.name == "leader-epoch-checkpoint")}


def cut_points(log: PartitionLog) -> dict[str, int]:
    batches = stored(log)
    bases = log.segment_bases
    inside = next(b for b, after, _ in batches if after - b > 1)
    return {"in the active segment": batches[-2][0], "at a segment base": bases[-2],
            "inside a rolled segment": batches[len(batches) // 3][0], "inside a batch": inside + 1,
            "at the first offset": 0}


@pytest.mark.parametrize("where", ["in the active segment", "at a segment base", "inside a rolled segment",
                                   "inside a batch", "at the first offset"])
def test_truncation_keeps_exactly_the_batches_below_and_the_indexes_of_a_log_that_held_only_them(tmp_path, where):
    log = PartitionLog("t", 0, tmp_path / "t-0", **SETTINGS)
    fill(log)
    whole = stored(log)
    target = cut_points(log)[where]
    kept = [b for b in whole if b[1] <= target]
    end = kept[-1][1] if kept else 0
    aborted_before = [t for t in log.aborted_transactions(0, log.log_end_offset)]
    epochs_before = log.epochs.entries
    assert log.truncate_to(target) is True
    assert log.log_end_offset == end
    assert log.truncate_to(end) is False and log.truncate_to(end + 5) is False
    assert log.epochs.entries == [e for e in epochs_before if e[1] < end]
    assert all(offset <= end for offset in log.snapshot_offsets())
    assert all(first < end for first in log._open_txns.values())
    ref = reference(tmp_path / "ref" / "t-0", kept)
    check_reads(log, kept, ref)
    assert log.aborted_transactions(0, end) == ref.aborted_transactions(0, end)
    assert len(log.aborted_transactions(0, end)) <= len(aborted_before)
    log.close()
    ref.close()
    assert files(tmp_path / "t-0") == files(tmp_path / "ref" / "t-0")
    again = PartitionLog("t", 0, tmp_path / "t-0", clean_shutdown=True, recovery_point=end, **SETTINGS)
    check_reads(again, kept)
    # Appends go on from the new end, rolling as before.
    again.leader_epoch = 9
    again.append(end, batch([b"new"], 1, 500))
    assert again.epochs.entries[-1] == (9, end) and stored(again)[-1][0] == end
    again.close()


def test_truncation_of_a_memory_log(tmp_path):
    log = PartitionLog("t", 0, None)
    fill(log)
    whole = stored(log)
    target = whole[len(whole) // 2][0]
    assert log.truncate_to(target)
    check_reads(log, [b for b in whole if b[1] <= target])
    log.truncate_fully_and_start_at(100)
    assert (log.segment_bases, log.log_end_offset, log.log_start_offset) == ([100], 100, 100)
    log.append(100, batch([b"a"], 1, 0))
    assert stored(log)[0][:2] == (100, 101)


@pytest.mark.parametrize("offset", [3, 500])
def test_truncate_fully_and_start_at(tmp_path, offset):
    log = PartitionLog("t", 0, tmp_path / "t-0", **SETTINGS)
    fill(log)
    log.truncate_fully_and_start_at(offset)
    assert (log.segment_bases, log.log_end_offset, log.log_start_offset) == ([offset], offset, offset)
    assert log.epochs.entries == [] and log.snapshot_offsets() == [] and log.last_stable_offset == offset
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    assert names == sorted([f"{offset:020d}.log", f"{offset:020d}.index", f"{offset:020d}.timeindex",
                            "leader-epoch-checkpoint"])
    log.close()


# --- restarts through the log manager: a clean one, and after a kill -------------------------------------------

CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from idemcore.broker.log_manager import LogManager
    from idemcore.broker.log import partition_log
    from idemcore.broker.topic_config import TopicConfig

    data_dir, target, when = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    manager = LogManager(data_dir, True, lambda: 0)
    log = manager.open_log("t", 0, TopicConfig(segment_bytes=700, index_interval_bytes=150))
    manager.started()
    die = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
    if when == "before the cut":
        partition_log.PartitionLog._delete_segments = die
    elif when == "before the reindex":
        partition_log.PartitionLog._reindex = die
    full = target < 0
    if full:
        log.truncate_fully_and_start_at(-target)
    else:
        log.truncate_to(target)
    die()
""")


def open_dir(data_dir: Path) -> tuple[LogManager, PartitionLog]:
    manager = LogManager(data_dir, True, lambda: 0)
    log = manager.open_log("t", 0, CONFIG)
    manager.started()
    return manager, log


@pytest.mark.parametrize("when", ["after", "before the cut", "before the reindex"])
@pytest.mark.parametrize("where", ["inside a rolled segment", "in the active segment", "fully"])
def test_a_process_killed_while_truncating_restarts_with_a_whole_log(tmp_path, where, when):
    manager, log = open_dir(tmp_path)
    fill(log)
    whole = stored(log)
    target = 300 if where == "fully" else cut_points(log)[where]
    manager.close(lambda partition_log, offset: None)
    manager.release()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(-target if where == "fully" else target),
                            when], env=env, capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    manager, log = open_dir(tmp_path)
    try:
        if where == "fully":
            if when == "after":
                assert (log.segment_bases, log.log_end_offset) == ([300], 300)
            else:  # killed before anything was cut: the old log, or (its start recorded first) the new one
                assert stored(log) == whole or (log.segment_bases, log.log_end_offset) == ([300], 300)
        elif when == "after":
            kept = [b for b in whole if b[1] <= target]
            check_reads(log, kept)
            assert log.epochs.entries == [e for e in log.epochs.entries if e[1] < log.log_end_offset]
        else:  # killed midway: the log holds at least what the truncation keeps, its batches whole and in order
            held = stored(log)
            assert held == whole[:len(held)] and held[-1][1] >= target
        assert all(offset <= log.log_end_offset for offset in log.snapshot_offsets()) or when != "after"
        log.leader_epoch = 20
        log.append(log.log_end_offset, batch([b"after"], 1, 900))
    finally:
        manager.close(lambda partition_log, offset: None)
        manager.release()
    manager, log = open_dir(tmp_path)
    assert stored(log)[-1][1] == log.log_end_offset and log.epochs.latest_epoch == 20
    manager.close(lambda partition_log, offset: None)
    manager.release()


def test_high_watermarks_round_trip(tmp_path):
    manager = LogManager(tmp_path, True, lambda: 0)
    assert manager.high_watermarks() == {}
    manager.write_high_watermarks({("t", 0): 12, ("u", 3): 0})
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n2\nt 0 12\nu 3 0\n"
    assert manager.high_watermarks() == {("t", 0): 12, ("u", 3): 0}
    manager.release()
    assert LogManager(None, True, lambda: 0).high_watermarks() == {}


# --- the producer state after a truncation ----------------------------------------------------------------------

def test_reload_partition_state_after_a_truncation(tmp_path):
    from idemcore.broker import Broker
    from idemcore.broker.recovery import reload_partition_state
    from idemcore.clock import wall_clock_ms
    from idemcore.engine.snapshot import snapshot_entries
    from idemcore.net.messages import ProduceRequest
    from idemcore.protocol.codes import ErrorCode
    from idemcore.protocol.constants import DEFAULT_PRODUCER_ID_EXPIRATION_MS

    now = wall_clock_ms()

    def send(broker: Broker, partition: int, pid: int, seq: int) -> tuple[int, int]:
        answer = broker.handle(ProduceRequest((RecordBatch("t", partition, [b"v%d" % seq], None, pid, 0, seq,
                                                           now),))).responses[0]
        return answer.error_code, answer.base_offset

    with Broker({"t": 2}, data_dir=tmp_path, segment_bytes=300) as broker:
        for seq in range(12):
            assert send(broker, 0, 1, seq) == (0, seq)
            assert send(broker, 1, 2, seq)[0] == 0
        other = snapshot_entries(broker.state, 1)
        partition = broker.replicas.find_partition("t", 0)
        assert partition is not None and len(partition.log.segments) > 2
        assert partition.log.truncate_to(5)
        assert all(offset <= 5 for offset in partition.log.snapshot_offsets())
        replayed = reload_partition_state(partition, broker.state, broker.backend, now_ms=now,
                                          expiration_ms=DEFAULT_PRODUCER_ID_EXPIRATION_MS)
        assert 0 < replayed <= 5
        assert snapshot_entries(broker.state, 1) == other  # the other partition's producers untouched
        assert broker.state.next_offset(0) == 5
        # Producer 1's sequence is where the kept log leaves it: 5 follows on, 12 is out of order.
        assert send(broker, 0, 1, 12)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(broker, 0, 1, 5) == (0, 5)
