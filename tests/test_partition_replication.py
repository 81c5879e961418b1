"""The leader's bookkeeping of its followers (Kafka's Partition: ISR, high watermark, follower fetch state), checked
against Kafka's rules and, by hypothesis, against a small model that recomputes everything from scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.broker.log import PartitionLog
from idemcore.broker.partition import LeaderAndIsrState, Partition
from idemcore.record.batch import RecordBatch

LAG_MS = 1_000


def _append(log: PartitionLog, records: int) -> PartitionLog:
    for _ in range(records):
        offset = log.log_end_offset
        log.append(offset, RecordBatch("t", 0, (b"v",), None, max_timestamp=offset))
    return log


def _log_with(records: int) -> PartitionLog:
    return _append(PartitionLog("t", 0), records)


class _Zk:
    """Compare-and-set of the ISR, as ZooKeeper does it: refused when the version moved."""

    def __init__(self, refuse: bool = False) -> None:
        self.version = 0
        self.refuse = refuse
        self.writes: list[tuple[int, ...]] = []

    def __call__(self, partition: Partition, isr: tuple[int, ...]) -> int | None:
        if self.refuse or partition.zk_version != self.version:
            return None
        self.version += 1
        self.writes.append(isr)
        return self.version


def _leader(records: int, isr: tuple[int, ...] = (1, 2, 3), now: int = 0) -> Partition:
    """A leader elected on an empty log (its epoch starts at 0), then written to."""
    partition = Partition("t", 0, 0, PartitionLog("t", 0), local_id=1)
    partition.make_leader(LeaderAndIsrState(1, 1, isr, 0, (1, 2, 3)), now)
    _append(partition.log, records)
    return partition


def test_a_follower_behind_the_epoch_start_does_not_join_the_isr() -> None:
    """Kafka's isFollowerInSync: a follower must hold the new leader's history, from its epoch's start on."""
    partition = Partition("t", 0, 0, _log_with(10), local_id=1)
    partition.make_leader(LeaderAndIsrState(1, 2, (1, 3), 0, (1, 2, 3)), 0)
    assert partition.epoch_start_offset == 10
    assert partition.high_watermark == 0  # follower 3 has not fetched: the high watermark waits for it
    zk = _Zk()
    partition.update_follower(2, 9, 0, zk)  # at or past the high watermark, but before the epoch's start
    assert partition.isr == (1, 3)
    partition.update_follower(2, 10, 0, zk)
    assert partition.isr == (1, 2, 3)


def test_the_high_watermark_is_the_smallest_log_end_in_the_isr() -> None:
    partition = _leader(10)
    zk = _Zk()
    assert partition.high_watermark == 0  # no follower has fetched yet
    partition.update_follower(2, 7, 0, zk)
    assert partition.high_watermark == 0  # follower 3 is in the ISR and has not fetched
    partition.update_follower(3, 4, 0, zk)
    assert partition.high_watermark == 4
    partition.update_follower(3, 10, 0, zk)
    assert partition.high_watermark == 7
    partition.update_follower(2, 10, 0, zk)
    assert partition.high_watermark == 10


def test_the_high_watermark_never_moves_back() -> None:
    partition = _leader(10)
    zk = _Zk()
    partition.update_follower(2, 8, 0, zk)
    partition.update_follower(3, 8, 0, zk)
    assert partition.high_watermark == 8
    partition.update_follower(3, 5, 0, zk)  # a follower that truncated and fetches from lower down
    assert partition.high_watermark == 8


def test_a_lagging_follower_leaves_the_isr_after_the_lag_time_and_the_high_watermark_moves_on() -> None:
    partition = _leader(10, now=0)
    zk = _Zk()
    partition.update_follower(2, 10, 100, zk)
    assert partition.out_of_sync(LAG_MS, LAG_MS) == ()  # follower 3 counts as caught up at the election (t=0)
    assert partition.out_of_sync(LAG_MS + 1, LAG_MS) == (3,)  # follower 2 caught up at t=100
    assert partition.maybe_shrink_isr(LAG_MS + 1, LAG_MS, zk)
    assert partition.isr == (1, 2) and zk.writes == [(1, 2)]
    assert partition.high_watermark == 10


def test_a_follower_is_caught_up_when_it_reaches_the_leaders_end_at_its_previous_fetch() -> None:
    partition = _leader(10)
    zk = _Zk()
    partition.update_follower(2, 5, 1_000, zk)  # behind: the leader's end was 10
    assert partition.followers[2].last_caught_up_ms == 0
    partition.update_follower(2, 10, 2_000, zk)  # reached the end the leader had at its previous fetch
    assert partition.followers[2].last_caught_up_ms == 2_000


def test_a_follower_joins_the_isr_only_once_it_reaches_the_high_watermark_and_the_epoch_start() -> None:
    partition = _leader(10, isr=(1, 2))
    zk = _Zk()
    partition.update_follower(2, 10, 0, zk)
    assert partition.high_watermark == 10
    partition.update_follower(3, 9, 0, zk)
    assert partition.isr == (1, 2)
    partition.update_follower(3, 10, 0, zk)
    assert partition.isr == (1, 2, 3) and zk.writes == [(1, 2, 3)]


def test_a_refused_isr_change_leaves_the_isr_as_it_was() -> None:
    partition = _leader(10, isr=(1, 2))
    zk = _Zk(refuse=True)
    partition.update_follower(2, 10, 0, zk)
    partition.update_follower(3, 10, 0, zk)
    assert partition.isr == (1, 2)
    assert partition.followers[3].log_end_offset == 10  # still recorded (Kafka keeps the fetch state)


def test_a_follower_takes_the_leaders_high_watermark_capped_by_its_own_end() -> None:
    partition = Partition("t", 0, 0, _log_with(5), local_id=2)
    partition.make_follower(LeaderAndIsrState(1, 1, (1, 2), 0, (1, 2)))
    partition.follower_high_watermark(9)
    assert partition.high_watermark == 5
    partition.follower_high_watermark(3)
    assert partition.high_watermark == 3
    assert not partition.is_leader


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([2, 3]), st.integers(0, 20), st.integers(0, 50)), max_size=40))
def test_the_high_watermark_matches_a_model_recomputed_from_scratch(fetches: list[tuple[int, int, int]]) -> None:
    """Model: the high watermark is the largest value ever reached by min(leader end, ends of the ISR members),
    counted only once every ISR member has fetched; the ISR grows by a follower whose end reaches the high
    watermark (the epoch starts at 0 here)."""
    partition = _leader(20, isr=(1,))
    zk = _Zk()
    ends: dict[int, int] = {}
    isr = {1}
    model_hw = 0
    now = 0
    for replica, offset, step in fetches:
        now += step
        ends[replica] = offset
        if replica not in isr and offset >= model_hw:
            isr.add(replica)
        members = [ends.get(r, -1) for r in isr if r != 1]
        if all(e >= 0 for e in members):
            model_hw = max(model_hw, min([20, *members]))
        partition.update_follower(replica, offset, now, zk)
        assert set(partition.isr) == isr
        assert partition.high_watermark == model_hw
