"""A follower's appends (PartitionLog.append_replicated): the leader's bytes stored as they are, segment by
segment the same files, refused whole when anything in them is wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from idemcore.broker.log import PartitionLog, UnexpectedAppendOffsetError
from idemcore.protocol.codes import ControlType
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import CorruptRecordError

SETTINGS = {"segment_bytes": 700, "index_interval_bytes": 150}


def batch(values: list[bytes], pid: int, sequence: int, *, transactional: bool = False) -> RecordBatch:
    return RecordBatch("t", 0, values, None, producer_id=pid, producer_epoch=0, base_sequence=sequence,
                       max_timestamp=1_000 + sequence * 7 % 50, is_transactional=transactional)


def fill(log: PartitionLog) -> None:
    """Batches over a few leader epochs, with a transaction aborted and one committed."""
    sequences = {1: 0, 2: 0, 3: 0}
    for k in range(30):
        log.leader_epoch = k // 8
        pid = 1 + k % 3
        transactional = pid != 1
        values = [b"x" * (10 + k % 4 * 20)] * (1 + k % 3)
        log.append(log.log_end_offset, batch(values, pid, sequences[pid], transactional=transactional))
        sequences[pid] += len(values)
        if k % 6 == 5:
            for marker_pid, kind in ((2, ControlType.ABORT), (3, ControlType.COMMIT)):
                log.append_marker(log.log_end_offset, marker_pid, 0, kind, 1, 2_000 + k)


def replicate(leader: PartitionLog, follower: PartitionLog, chunk: int) -> int:
    """Fetch from the leader as a follower does (whole batches up to ``chunk`` bytes) until caught up; how many
    calls it took."""
    calls = 0
    while follower.log_end_offset < leader.log_end_offset:
        data, _ = leader.read(follower.log_end_offset, leader.log_end_offset, chunk, True)
        follower.append_replicated(data, 0)
        calls += 1
        assert calls < 1_000
    return calls


def files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.suffix != ".snapshot"}


@pytest.mark.parametrize("chunk", [1, 300, 1 << 20])
def test_a_follower_stores_the_leaders_segments_byte_for_byte(tmp_path, chunk):
    leader = PartitionLog("t", 0, tmp_path / "leader" / "t-0", **SETTINGS)
    fill(leader)
    follower = PartitionLog("t", 0, tmp_path / "follower" / "t-0", **SETTINGS)
    replicate(leader, follower, chunk)
    assert follower.segment_bases == leader.segment_bases and len(leader.segments) > 3
    assert follower.epochs.entries == leader.epochs.entries == [(0, 0), (1, leader.epochs.entries[1][1]),
                                                                (2, leader.epochs.entries[2][1]),
                                                                (3, leader.epochs.entries[3][1])]
    assert follower.last_stable_offset == leader.last_stable_offset
    assert follower.aborted_transactions(0, follower.log_end_offset) == leader.aborted_transactions(
        0, leader.log_end_offset) != []
    leader.close()
    follower.close()
    assert files(tmp_path / "follower" / "t-0") == files(tmp_path / "leader" / "t-0")
    again = PartitionLog("t", 0, tmp_path / "follower" / "t-0", recovery_point=0, **SETTINGS)  # scanned whole
    assert again.log_end_offset == leader.log_end_offset and again.epochs.entries == leader.epochs.entries
    again.close()


def test_the_metadata_is_what_recovery_replays_and_a_torn_tail_is_left_out(tmp_path):
    leader = PartitionLog("t", 0, tmp_path / "leader" / "t-0")
    fill(leader)
    follower = PartitionLog("t", 0, None)
    data, end = leader.read(0, leader.log_end_offset, 1 << 20, True)
    torn = data + leader.read(end, leader.log_end_offset, 1 << 20, True)[0][:30] if end < leader.log_end_offset \
        else data[:-30]
    meta = follower.append_replicated(torn, 5)
    whole = leader.scan_from(0, 5)
    assert whole is not None
    rows = len(meta)
    assert follower.log_end_offset == int(whole["base_offset"][rows - 1]) + int(whole["record_count"][rows - 1])
    for name in ("stream", "producer_id", "base_sequence", "last_sequence", "base_offset", "record_count",
                 "is_transactional", "is_control", "control_type", "max_timestamp"):
        assert np.array_equal(meta[name], whole[name][:rows]), name
    assert set(meta["stream"].tolist()) == {5}


def test_a_flipped_byte_is_refused_and_nothing_is_appended(tmp_path):
    leader = PartitionLog("t", 0, None)
    leader.append(0, batch([b"a", b"b"], 1, 0))
    leader.leader_epoch = 2
    leader.append(2, batch([b"c"], 1, 2))
    data, _ = leader.read(0, 3, 1 << 20, True)
    second = len(leader.read(0, 2, 1 << 20, True)[0])
    for at in range(len(data)):
        if at % second in (13, 14, 15):
            continue  # a leader epoch's low bytes: a higher epoch is a valid one (no CRC covers it, as in Kafka)
        damaged = bytearray(data)
        damaged[at] ^= 0x80
        follower = PartitionLog("t", 0, tmp_path / f"t-{at}")
        try:
            meta = follower.append_replicated(bytes(damaged), 0)
        except (CorruptRecordError, UnexpectedAppendOffsetError):
            meta = None
        if meta is None or at % second not in (8, 9, 10, 11):
            assert meta is None, at
            assert follower.log_end_offset == 0 and follower.segments[0].size == 0, at
            assert follower.epochs.entries == [], at
        else:  # a batch length made longer: that batch looks torn (a fetch cut short), only those before it go in
            assert len(meta) == at // second and follower.segments[0].size == at // second * second, at
        follower.close()
    follower = PartitionLog("t", 0, tmp_path / "t-whole")
    assert len(follower.append_replicated(data, 0)) == 2 and follower.epochs.entries == [(0, 0), (2, 2)]
    follower.close()


def test_offsets_must_follow_on_and_epochs_never_fall(tmp_path):
    leader = PartitionLog("t", 0, None)
    leader.leader_epoch = 3
    leader.append(0, batch([b"a"], 1, 0))
    leader.append(1, batch([b"b"], 1, 1))
    first, _ = leader.read(0, 1, 1 << 20, True)
    both, _ = leader.read(0, 2, 1 << 20, True)
    follower = PartitionLog("t", 0, tmp_path / "t-0")
    with pytest.raises(UnexpectedAppendOffsetError, match=r"t-0: .* holds offsets 1\.\.1, but the log needs offset 0"):
        follower.append_replicated(both[len(first):], 0)
    follower.append_replicated(first, 0)
    with pytest.raises(UnexpectedAppendOffsetError, match=r"holds offsets 0\.\.0, but the log needs offset 1"):
        follower.append_replicated(first, 0)
    lower = bytearray(both[len(first):])
    lower[12:16] = (1).to_bytes(4, "big")  # epoch 1 after epoch 3
    with pytest.raises(CorruptRecordError, match=r"offset 1 has partition leader epoch 1, below 3"):
        follower.append_replicated(bytes(lower), 0)
    assert follower.log_end_offset == 1
    follower.close()


def test_a_roll_is_appended_only_first_in_a_call(tmp_path):
    leader = PartitionLog("t", 0, tmp_path / "leader" / "t-0", **SETTINGS)
    fill(leader)
    follower = PartitionLog("t", 0, tmp_path / "follower" / "t-0", **SETTINGS)
    rolls: list[int] = []
    follower.on_roll = lambda log, base: rolls.append(base)
    calls = replicate(leader, follower, 1 << 20)
    assert rolls == leader.segment_bases[1:] and calls == len(leader.segments)
    leader.close()
    follower.close()
