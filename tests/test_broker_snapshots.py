"""The broker's producer-state snapshots: taken at each roll and at a clean close, loaded at start (the newest
valid one), the log replayed only after it, as Kafka's ProducerStateManager / LogLoader do."""

from __future__ import annotations

import logging
import random
import shutil

import pytest

from idemcore.broker import Broker, LogCorruptionError
from idemcore.clock import wall_clock_ms
from idemcore.engine.snapshot import snapshot_entries
from idemcore.net.messages import ProduceRequest
from idemcore.protocol.constants import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import read_leader_epoch_checkpoint, read_snapshot

NOW = wall_clock_ms()
SMALL = {"segment_bytes": 400, "index_interval_bytes": 0}


def _send(broker: Broker, partition: int, pid: int, seq: int, count: int = 2, *, timestamp: int = NOW,
          epoch: int = 0, transactional: bool = False) -> tuple[int, int]:
    values = [b"v%d-%d-%d" % (pid, seq, i) for i in range(count)]
    answer = broker.handle(ProduceRequest((RecordBatch("t", partition, values, None, pid, epoch, seq, timestamp,
                                                       transactional),))).responses[0]
    return answer.error_code, answer.base_offset


def _fill(broker: Broker, rng: random.Random, batches: int) -> None:
    """Idempotent writes of a few producers over both partitions, in sequence."""
    sequences: dict[tuple[int, int], int] = {}
    for _ in range(batches):
        partition, pid = rng.randrange(2), rng.randrange(1, 6)
        seq = sequences.get((partition, pid), 0)
        count = rng.randint(1, 4)
        assert _send(broker, partition, pid, seq, count)[0] == 0
        sequences[(partition, pid)] = seq + count


def _entries(broker: Broker) -> list[list]:
    return [snapshot_entries(broker.state, number) for number in range(2)]


def test_a_roll_snapshots_the_state_before_the_new_segment(tmp_path):
    with Broker({"t": 2}, data_dir=tmp_path, **SMALL) as broker:
        _fill(broker, random.Random(1), 40)
        log = broker.log("t", 0)
        rolled = log.snapshot_offsets()
        assert len(log.segment_bases) > 3 and rolled == log.segment_bases[-2:]  # the newest two are kept
        entries = read_snapshot(log.snapshot_path(rolled[0])).entries
    # The same batches up to that offset, replayed by a fresh broker in memory: the same entries.
    with Broker({"t": 2}) as fresh:
        for base_offset, batch, *_ in log.batches:
            if base_offset < rolled[0]:
                assert fresh.handle(ProduceRequest((batch,))).responses[0].base_offset == base_offset
        assert entries == snapshot_entries(fresh.state, 0)
        assert entries  # producers wrote before the roll


def test_a_clean_close_snapshots_at_the_log_end_and_the_restart_replays_nothing(tmp_path, caplog):
    with Broker({"t": 2}, data_dir=tmp_path, **SMALL) as broker:
        _fill(broker, random.Random(2), 30)
        before = _entries(broker)
        ends = [broker.log("t", p).log_end_offset for p in range(2)]
    for partition in range(2):
        assert (tmp_path / f"t-{partition}" / f"{ends[partition]:020d}.snapshot").exists()
    with caplog.at_level(logging.INFO, logger="idemcore.broker.broker"), Broker({"t": 2}, data_dir=tmp_path) as again:
        assert _entries(again) == before
        assert _send(again, 0, 99, 0)[1] == ends[0]  # the next offset follows the log
    assert any("0 batches replayed" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("seed", range(6))
def test_recovery_from_snapshots_equals_recovery_from_the_whole_log(tmp_path, seed):
    """Killed at a random point: the state from the newest snapshot plus the batches after it is the state
    the whole log replays to (each producer's newest batch, epoch, offsets), and both answer the same."""
    rng = random.Random(seed)
    broker = Broker({"t": 2}, data_dir=tmp_path / "a", **SMALL)
    _fill(broker, rng, rng.randint(10, 60))
    broker.kill()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for snapshot in (tmp_path / "b").rglob("*.snapshot"):
        snapshot.unlink()
    with Broker({"t": 2}, data_dir=tmp_path / "a") as from_snapshots, \
            Broker({"t": 2}, data_dir=tmp_path / "b") as from_log:
        assert any((tmp_path / "a").rglob("*.snapshot"))
        assert _entries(from_snapshots) == _entries(from_log)
        for pid in range(1, 7):  # the last batch of every producer retried, and a next one
            for partition in range(2):
                entries = [e for e in snapshot_entries(from_log.state, partition) if e.producer_id == pid]
                seq = entries[0].first_sequence if entries else 0
                count = entries[0].offset_delta + 1 if entries else 1
                assert _send(from_snapshots, partition, pid, seq, count) == _send(from_log, partition, pid, seq, count)


def test_a_corrupt_snapshot_is_skipped_for_an_older_one_and_deleted_after_the_start(tmp_path, caplog):
    with Broker({"t": 2}, data_dir=tmp_path, **SMALL) as broker:
        _fill(broker, random.Random(3), 40)
        before = _entries(broker)
    log_dir = tmp_path / "t-0"
    newest = sorted(log_dir.glob("*.snapshot"))[-1]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING), Broker({"t": 2}, data_dir=tmp_path) as again:
        assert _entries(again) == before
        assert not newest.exists()
    assert any("is corrupt" in record.getMessage() and newest.name in record.getMessage()
               for record in caplog.records)


def test_a_snapshot_beyond_the_log_end_is_not_used(tmp_path):
    with Broker({"t": 2}, data_dir=tmp_path, **SMALL) as broker:
        _fill(broker, random.Random(4), 20)
        before = _entries(broker)
        end = broker.log("t", 0).log_end_offset
    stray = tmp_path / "t-0" / f"{end + 50:020d}.snapshot"
    shutil.copy(sorted((tmp_path / "t-0").glob("*.snapshot"))[-1], stray)
    with Broker({"t": 2}, data_dir=tmp_path) as again:
        assert _entries(again) == before
    assert not stray.exists()


def test_a_first_start_never_cuts_what_another_writer_left(tmp_path):
    (tmp_path / "t-0").mkdir()
    foreign = tmp_path / "t-0" / "00000000000000000000.log"
    foreign.write_bytes(b"not a record batch, but somebody's data" * 4)
    with pytest.raises(LogCorruptionError, match=r"nothing says this broker wrote them .* not cut"):
        Broker({"t": 1}, data_dir=tmp_path)
    assert foreign.read_bytes() == b"not a record batch, but somebody's data" * 4


def test_a_restart_from_a_snapshot_forgets_producers_idle_past_the_expiration(tmp_path):
    """Kafka's loadFromSnapshot skips expired producers: idle for producer.id.expiration.ms and no open
    transaction. A producer with an open transaction is kept, however old."""
    old = NOW - DEFAULT_PRODUCER_ID_EXPIRATION_MS - 1
    with Broker({"t": 2}, data_dir=tmp_path) as broker:
        assert _send(broker, 0, 1, 0, timestamp=old)[0] == 0
        assert _send(broker, 0, 2, 0, timestamp=old, transactional=True)[0] == 0
        assert _send(broker, 0, 3, 0)[0] == 0
    with Broker({"t": 2}, data_dir=tmp_path) as again:
        assert [e.producer_id for e in snapshot_entries(again.state, 0)] == [2, 3]


def test_the_leader_epoch_checkpoint_starts_epoch_0_at_the_first_offset(tmp_path):
    with Broker({"t": 2}, data_dir=tmp_path) as broker:
        assert read_leader_epoch_checkpoint(tmp_path / "t-0" / "leader-epoch-checkpoint").entries == []
        _send(broker, 0, 1, 0)
        assert [tuple(e) for e in read_leader_epoch_checkpoint(tmp_path / "t-0" / "leader-epoch-checkpoint").entries] \
            == [(0, 0)]
    path = tmp_path / "t-0" / "leader-epoch-checkpoint"
    path.write_text("0\n1\n7 3\n")  # wrong: rewritten from the log at start
    with Broker({"t": 2}, data_dir=tmp_path):
        assert [tuple(e) for e in read_leader_epoch_checkpoint(path).entries] == [(0, 0)]


def test_a_snapshot_with_a_valid_crc_but_impossible_values_is_skipped(tmp_path):
    from idemcore.record.kafka_files import ProducerSnapshotEntry, encode_snapshot

    with Broker({"t": 2}, data_dir=tmp_path) as broker:
        _send(broker, 0, 5, 0)
        before = _entries(broker)
    newest = sorted((tmp_path / "t-0").glob("*.snapshot"))[-1]
    newest.write_bytes(encode_snapshot([ProducerSnapshotEntry(-7, 0, 0, 0, 0, NOW, -1, -1)]))
    with Broker({"t": 2}, data_dir=tmp_path) as again:  # rebuilt from the log, the snapshot deleted
        assert _entries(again) == before
