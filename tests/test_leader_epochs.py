"""The leader epoch cache (Kafka's LeaderEpochFileCache): Kafka's own test cases (LeaderEpochFileCacheTest), a
property test against a plain list model, the checkpoint file it keeps, and the log that owns it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.broker.log import LeaderEpochCache, PartitionLog
from idemcore.broker.log.leader_epochs import UNDEFINED_EPOCH, LeaderEpochCheckpointError
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import read_leader_epoch_checkpoint, scan_segment

U = (UNDEFINED_EPOCH, -1)


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    made = LeaderEpochCache(None, fsync=False)
    for epoch, start in entries:
        made.assign(epoch, start)
    return made


# --- Kafka's LeaderEpochFileCacheTest, case by case ------------------------------------------------------------

def test_kafka_add_epoch_and_end_offset_is_the_log_end():
    c = cache((2, 10))
    assert c.latest_epoch == 2 and c.entries == [(2, 10)]
    assert c.end_offset_for(2, 11) == (2, 11)


def test_kafka_latest_epoch_requested_gives_the_log_end():
    c = cache((2, 11), (2, 12))
    assert c.end_offset_for(2, 14) == (2, 14)


def test_kafka_undefined_epoch_requested():
    assert cache((2, 11), (3, 12)).end_offset_for(UNDEFINED_EPOCH, 20) == U
    assert cache().end_offset_for(UNDEFINED_EPOCH, 73) == U


def test_kafka_an_epoch_once_assigned_keeps_its_start():
    assert cache((2, 9), (2, 10)).entries == [(2, 9)]
    assert cache((2, 6), (2, 10)).entries == [(2, 6)]
    assert cache((2, 6), (2, 7)).entries == [(2, 6)]


def test_kafka_start_offsets_rise_monotonically():
    assert cache((2, 9), (3, 9)).entries == [(3, 9)]
    assert cache((2, 6), (3, 5)).entries == [(3, 5)]


def test_kafka_no_epoch_recorded():
    assert cache().end_offset_for(0, 0) == U
    assert cache().end_offset_for(7, 0) == U
    assert cache().latest_epoch == UNDEFINED_EPOCH


def test_kafka_requested_epoch_below_the_first():
    assert cache((5, 11), (6, 12), (7, 13)).end_offset_for(4, 20) == (4, 11)


def test_kafka_matching_epoch_with_an_earlier_start_truncates():
    c = cache((5, 11), (6, 12), (7, 13), (7, 12))
    assert c.end_offset_for(5, 20) == (5, 12)
    assert c.end_offset_for(6, 20) == (5, 12)


def test_kafka_end_of_a_previous_epoch_is_the_next_ones_start():
    c = cache((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
    assert c.end_offset_for(2, 17) == (2, 15)


def test_kafka_next_available_epoch_when_there_is_no_exact_one():
    c = cache((0, 10), (2, 13), (4, 17))
    assert c.end_offset_for(1, 20) == (0, 13)
    assert c.end_offset_for(2, 20) == (2, 17)
    assert c.end_offset_for(3, 20) == (2, 17)


def test_kafka_epoch_past_the_latest_is_undefined():
    assert cache((2, 100)).end_offset_for(3, 100) == U


def test_kafka_epochs_need_not_start_from_zero():
    c = cache((2, 6))
    assert c.end_offset_for(2, 7) == (2, 7) and c.entries == [(2, 6)]


def test_kafka_monotonic_epochs_are_enforced():
    c = cache((1, 5), (2, 6), (1, 7))
    assert c.latest_epoch == 1
    assert c.end_offset_for(1, 8) == (1, 8)
    assert c.end_offset_for(2, 8) == U
    assert c.entries == [(1, 7)]


def test_kafka_epochs_as_leaders_change_many_times():
    c = cache((0, 0), (1, 0))
    assert c.latest_epoch == 1
    assert c.end_offset_for(1, 0) == (1, 0)
    assert c.end_offset_for(0, 0) == (0, 0)
    assert c.end_offset_for(1, 5) == (1, 5)
    assert c.end_offset_for(0, 5) == (0, 0)
    c.assign(2, 5)
    assert c.end_offset_for(2, 10) == (2, 10)
    assert c.end_offset_for(1, 10) == (1, 5)
    assert c.end_offset_for(0, 10) == (0, 0)


def test_kafka_follower_receiving_many_messages():
    c = cache()
    for offset in range(9):
        c.assign(offset // 3, offset)
        assert c.latest_epoch == offset // 3
        assert c.end_offset_for(offset // 3, offset + 1) == (offset // 3, offset + 1)
    assert c.end_offset_for(0, 9) == (0, 3)
    assert c.end_offset_for(1, 9) == (1, 6)


THREE = ((2, 6), (3, 8), (4, 11))


@pytest.mark.parametrize("end, kept", [(8, [(2, 6)]), (9, [(2, 6), (3, 8)]), (-1, list(THREE)),
                                       (7, [(2, 6)]), (12, list(THREE))])
def test_kafka_truncate_from_end(end, kept):
    c = cache(*THREE)
    c.truncate_from_end(end)
    assert c.entries == kept


@pytest.mark.parametrize("start, kept", [(8, [(3, 8), (4, 11)]), (9, [(3, 9), (4, 11)]), (1, list(THREE)),
                                         (6, list(THREE)), (11, [(4, 11)]), (15, [(4, 15)])])
def test_kafka_truncate_from_start(start, kept):
    c = cache(*THREE)
    c.truncate_from_start(start)
    assert c.entries == kept


def test_kafka_truncate_from_start_between_the_first_two():
    c = cache((0, 0), (1, 7), (2, 10))
    c.truncate_from_start(5)
    assert c.entries == [(0, 5), (1, 7), (2, 10)]


def test_kafka_clear_and_the_empty_cache():
    c = cache(*THREE)
    c.clear()
    assert c.entries == []
    c.truncate_from_start(7)
    c.truncate_from_end(7)
    assert c.entries == []


def test_kafka_epoch_for_offset():
    c = cache((0, 0), (1, 5), (3, 9))
    assert [c.epoch_for_offset(o) for o in (0, 4, 5, 8, 9, 100)] == [0, 0, 1, 1, 3, 3]
    assert cache((2, 5)).epoch_for_offset(4) is None
    assert c.start_offset_of(1) == 5 and c.start_offset_of(2) is None


def test_invalid_entries_are_refused():
    for epoch, start in ((-1, 0), (0, -1), (True, 0)):
        with pytest.raises(ValueError, match="invalid leader epoch entry"):
            cache().assign(epoch, start)


# --- a property test against a list model -----------------------------------------------------------------------

class Model:
    """Kafka's rules, written as plainly as possible over a list."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and self.entries[-1][0] == epoch and start >= self.entries[-1][1]:
            return
        while self.entries and (self.entries[-1][0] >= epoch or self.entries[-1][1] >= start):
            self.entries.pop()
        self.entries.append((epoch, start))

    def truncate_from_end(self, end: int) -> None:
        if end >= 0:
            self.entries = [e for e in self.entries if e[1] < end]

    def truncate_from_start(self, start: int) -> None:
        gone = [e for e in self.entries if e[1] <= start]
        if gone:
            self.entries = [(gone[-1][0], start)] + [e for e in self.entries if e[1] > start]

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return U
        if epoch == self.entries[-1][0]:
            return epoch, log_end
        higher = [e for e in self.entries if e[0] > epoch]
        lower = [e for e in self.entries if e[0] <= epoch]
        if not higher:
            return U
        return (lower[-1][0] if lower else epoch), higher[0][1]

    def epoch_for_offset(self, offset: int) -> int | None:
        found = None
        for epoch, start in self.entries:
            if start <= offset:
                found = epoch
        return found


small = st.integers(0, 12)
operations = st.lists(st.one_of(st.tuples(st.just("assign"), small, small),
                                st.tuples(st.just("end"), st.integers(-1, 14)),
                                st.tuples(st.just("start"), small)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(operations, st.lists(st.tuples(st.integers(-1, 14), st.integers(0, 20)), min_size=1, max_size=5))
def test_the_cache_follows_the_list_model(ops, queries):
    model, real = Model(), LeaderEpochCache(None, fsync=False)
    for op in ops:
        if op[0] == "assign":
            model.assign(op[1], op[2])
            real.assign(op[1], op[2])
        elif op[0] == "end":
            model.truncate_from_end(op[1])
            real.truncate_from_end(op[1])
        else:
            model.truncate_from_start(op[1])
            real.truncate_from_start(op[1])
        assert real.entries == model.entries
        epochs = [e for e, _ in real.entries]
        starts = [s for _, s in real.entries]
        assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))
    for epoch, log_end in queries:
        assert real.end_offset_for(epoch, log_end) == model.end_offset_for(epoch, log_end)
        assert real.epoch_for_offset(log_end) == model.epoch_for_offset(log_end)
    assert real.latest_epoch == (model.entries[-1][0] if model.entries else -1)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_the_file_always_holds_the_entries(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint"
    real = LeaderEpochCache(path, fsync=False)
    for op in ops:
        if op[0] == "assign":
            real.assign(op[1], op[2])
        elif op[0] == "end":
            real.truncate_from_end(op[1])
        else:
            real.truncate_from_start(op[1])
        if path.exists():
            read = read_leader_epoch_checkpoint(path)
            assert not read.problems and [tuple(e) for e in read.entries] == real.entries
    assert LeaderEpochCache(path, fsync=False).entries == real.entries if path.exists() else real.entries == []


def test_the_checkpoint_persists_between_instances_and_a_damaged_one_is_named(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCache(path, fsync=True).assign(2, 6)
    assert path.read_text() == "0\n1\n2 6\n"
    assert LeaderEpochCache(path, fsync=True).entries == [(2, 6)]
    path.write_text("0\n2\n3 6\n2 9\n")
    with pytest.raises(LeaderEpochCheckpointError, match=r"leader-epoch-checkpoint is damaged: .*epoch 2"):
        LeaderEpochCache(path, fsync=True)


# --- the log's epochs ---------------------------------------------------------------------------------------------

def batch(values: list[bytes], sequence: int) -> RecordBatch:
    return RecordBatch("t", 0, values, None, producer_id=7, producer_epoch=0, base_sequence=sequence,
                       max_timestamp=1_000 + sequence, wire=None)


def test_appends_stamp_the_leader_epoch_and_the_checkpoint_follows(tmp_path):
    log = PartitionLog("t", 0, tmp_path / "t-0")
    assert log.leader_epoch == 0 and log.epochs.entries == []
    log.append(0, batch([b"a"], 0))
    log.leader_epoch = 3
    log.append(1, batch([b"b", b"c"], 1))
    log.append(3, batch([b"d"], 3))
    assert scan_segment(log.path)["leader_epoch"].tolist() == [0, 3, 3]
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 1\n"
    log.close()
    again = PartitionLog("t", 0, tmp_path / "t-0", clean_shutdown=True, recovery_point=4)
    assert again.epochs.entries == [(0, 0), (3, 1)] and again.leader_epoch == 3
    again.close()


@pytest.mark.parametrize("damage", ["delete", "garbage", "past the end"])
def test_a_missing_or_damaged_checkpoint_is_rebuilt_from_the_batches(tmp_path, damage):
    log = PartitionLog("t", 0, tmp_path / "t-0", segment_bytes=200)
    for k, epoch in enumerate((0, 0, 2, 2, 5, 5)):
        log.leader_epoch = epoch
        log.append(k, batch([b"v" * 40], k))
    assert len(log.segments) > 2
    log.close()
    path = tmp_path / "t-0" / "leader-epoch-checkpoint"
    if damage == "delete":
        path.unlink()
    elif damage == "garbage":
        path.write_text("0\nx\n")
    else:  # entries past the log end (a truncation a crash cut short): dropped, as Kafka's LogLoader does
        path.write_text("0\n4\n0 0\n2 2\n5 4\n7 6\n")
    again = PartitionLog("t", 0, tmp_path / "t-0", clean_shutdown=True, recovery_point=6)
    assert again.epochs.entries == [(0, 0), (2, 2), (5, 4)]
    assert read_leader_epoch_checkpoint(path).entries == [(0, 0), (2, 2), (5, 4)]
    again.close()


def test_a_crash_recovery_reassigns_epochs_the_checkpoint_lost(tmp_path):
    log = PartitionLog("t", 0, tmp_path / "t-0")
    log.append(0, batch([b"a"], 0))
    log.leader_epoch = 4
    log.append(1, batch([b"b"], 1))
    log.abandon()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")  # the epoch 4 entry lost
    again = PartitionLog("t", 0, tmp_path / "t-0", recovery_point=0)  # scanned: its batches say epoch 4
    assert again.epochs.entries == [(0, 0), (4, 1)]
    again.close()


def test_retention_moves_the_first_entry_up(tmp_path):
    log = PartitionLog("t", 0, tmp_path / "t-0", segment_bytes=100)
    for k in range(6):
        log.leader_epoch = k // 3
        log.append(k, batch([b"v" * 40], k))
    base = log.segment_bases[2]
    log.maybe_increment_log_start_offset(base)
    log.delete_start_breached_segments()
    assert log.epochs.entries[0] == (log.epochs.epoch_for_offset(base), base)
    log.close()
