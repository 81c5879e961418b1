"""Compaction (cleanup.policy=compact): the newest record of each key kept below the active segment, old
tombstones dropped, batch offsets and producer state kept; checked against a dict model, across restarts and
by kafka-python's reader."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from idemcore.broker import Broker, LogCorruptionError
from idemcore.engine.snapshot import snapshot_entries
from idemcore.net.messages import ProduceRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import iter_batches
from tests.helpers import forget_recovery_points

DAY = 86_400_000
NOW = 100 * DAY
COMPACT = {"c": {"cleanup.policy": "compact", "segment.bytes": 400, "delete.retention.ms": DAY}}


def _produce(broker: Broker, pid: int, seq: int, records: list[tuple[bytes, bytes | None]], timestamp: int
             ) -> tuple[int, int]:
    batch = RecordBatch("c", 0, [v for _, v in records], [k for k, _ in records], pid, 0, seq, timestamp)
    answer = broker.handle(ProduceRequest((batch,))).responses[0]
    return answer.error_code, answer.base_offset


writes = st.lists(st.tuples(st.integers(1, 3),  # producer
                            st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                                               st.one_of(st.none(), st.binary(min_size=1, max_size=40))),
                                     min_size=1, max_size=4),
                            st.booleans()),  # an old batch (its tombstones past delete.retention.ms)
                  min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=writes)
def test_compaction_keeps_the_newest_record_per_key_below_the_active_segment(tmp_path_factory, writes):
    data_dir = tmp_path_factory.mktemp("compact")
    written: list[tuple[int, bytes, bytes | None, int]] = []  # offset, key, value, batch timestamp
    sequences: dict[int, int] = {}
    with Broker({"c": 1}, data_dir=data_dir, topic_configs=COMPACT, clock=lambda: NOW) as broker:
        for pid, records, old in writes:
            timestamp = NOW - 2 * DAY if old else NOW
            code, base = _produce(broker, pid, sequences.get(pid, 0), records, timestamp)
            assert code == 0
            sequences[pid] = sequences.get(pid, 0) + len(records)
            written += [(base + i, k, v, timestamp) for i, (k, v) in enumerate(records)]
        log = broker.log("c", 0)
        stop = log.cleanable_offset()
        end, bases_before = log.log_end_offset, {s.base_offset: s.next_offset for s in log.batches}
        state_before = snapshot_entries(broker.state, 0)
        broker.clean_logs()
        # The model: below stop, the newest record of each key, without tombstones older than a day; above, all.
        newest = {k: o for o, k, _, _ in written if stop is not None and o < stop}
        expected = [(o, k, v) for o, k, v, ts in written
                    if stop is None or o >= stop or (newest[k] == o and not (v is None and ts < NOW - DAY))]
        assert [(o, k, v) for o, k, v, _ in log.records()] == expected
        assert log.log_end_offset == end
        assert all(bases_before[s.base_offset] == s.next_offset for s in log.batches)  # batch spans kept
        assert snapshot_entries(broker.state, 0) == state_before
    for snapshot in data_dir.rglob("*.snapshot"):  # recovery replays the compacted log itself
        snapshot.unlink()
    with Broker({"c": 1}, data_dir=data_dir, topic_configs=COMPACT, clock=lambda: NOW) as again:
        assert [(o, k, v) for o, k, v, _ in again.log("c", 0).records()] == expected
        assert snapshot_entries(again.state, 0) == state_before
    for segment in sorted((data_dir / "c-0").glob("*.log")):  # kafka-python reads what compaction wrote
        data = segment.read_bytes()
        for position, header in iter_batches(data):
            theirs = DefaultRecordBatch(bytearray(data[position:position + header.size_in_bytes]))
            assert theirs.validate_crc() and theirs.last_offset == header.last_offset


def test_a_producers_last_batch_stays_even_when_compaction_empties_it(tmp_path):
    """Its sequence range is the producer's state: after a full replay a retry is still a duplicate."""
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT, clock=lambda: NOW) as broker:
        assert _produce(broker, 1, 0, [(b"k", b"first")], NOW) == (0, 0)
        for seq in range(8):  # producer 2 overwrites k many times: producer 1's only batch empties
            _produce(broker, 2, seq, [(b"k", b"x" * 30)], NOW)
        broker.clean_logs()
        first = broker.log("c", 0).batches[0]
        assert first.base_offset == 0 and first.batch.values == () and first.next_offset == 1
    for snapshot in tmp_path.rglob("*.snapshot"):
        snapshot.unlink()
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT, clock=lambda: NOW) as again:
        assert _produce(again, 1, 0, [(b"k", b"first")], NOW) == (0, 0)  # a duplicate, original offset


def test_a_tombstone_stays_until_delete_retention_ms_has_passed(tmp_path):
    clock = [NOW]
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT, clock=lambda: clock[0]) as broker:
        _produce(broker, 1, 0, [(b"k", b"v")], NOW)
        _produce(broker, 1, 1, [(b"k", None)], NOW)
        for seq in range(2, 10):
            _produce(broker, 1, seq, [(b"other", b"y" * 30)], NOW)
        broker.clean_logs()
        assert (1, b"k", None) in [(o, k, v) for o, k, v, _ in broker.log("c", 0).records()]
        clock[0] = NOW + DAY + 1
        broker.clean_logs()
        assert b"k" not in [k for _, k, _, _ in broker.log("c", 0).records()]


def test_a_compacted_topic_refuses_records_without_a_key(tmp_path):
    with Broker({"c": 1, "d": 1}, data_dir=tmp_path, topic_configs=COMPACT) as broker:
        batch = RecordBatch("c", 0, [b"v"], None, 1, 0, 0, NOW)
        answer = broker.handle(ProduceRequest((batch,))).responses[0]
        assert answer.error_code == ErrorCode.INVALID_RECORD
        assert answer.error_message == "Compacted topic cannot accept message without key in topic partition c-0"
        plain = RecordBatch("d", 0, [b"v"], None, 1, 0, 0, NOW)
        assert broker.handle(ProduceRequest((plain,))).responses[0].error_code == 0


def _compacted(tmp_path):
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT, clock=lambda: NOW) as broker:
        for seq in range(12):
            _produce(broker, 1, seq, [(b"k%d" % (seq % 2), b"z" * 30)], NOW)
        assert broker.clean_logs() > 0
        return [(o, v) for o, _, v, _ in broker.log("c", 0).records()]


def test_gaps_are_accepted_below_the_cleaned_offset_only(tmp_path):
    held = _compacted(tmp_path)
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT) as again:
        assert [(o, v) for o, _, v, _ in again.log("c", 0).records()] == held
    (tmp_path / "cleaner-offset-checkpoint").unlink()  # now the gaps look like batches deleted from outside
    forget_recovery_points(tmp_path)  # so that the start reads every segment
    with pytest.raises(LogCorruptionError, match=r"is corrupt at byte 0: it holds offset|ends at offset 0, but the "
                                                 r"next segment starts"):
        Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT)


def test_a_compaction_cut_short_leaves_the_old_segment_and_its_leftover_is_removed(tmp_path):
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT, clock=lambda: NOW) as broker:
        for seq in range(12):
            _produce(broker, 1, seq, [(b"k", b"z" * 30)], NOW)
        held = [(o, v) for o, _, v, _ in broker.log("c", 0).records()]
    segment = sorted((tmp_path / "c-0").glob("*.log"))[0]
    shutil.copy(segment, segment.with_name(segment.name + ".tmp"))  # killed before the rename
    (tmp_path / "cleaner-offset-checkpoint").write_text("0\n1\nc 0 8\n")  # written before any segment changes
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT) as again:
        assert [(o, v) for o, _, v, _ in again.log("c", 0).records()] == held
    assert not list((tmp_path / "c-0").glob("*.tmp"))


def test_a_damaged_cleaner_checkpoint_is_named(tmp_path):
    _compacted(tmp_path)
    (tmp_path / "cleaner-offset-checkpoint").write_text("0\n2\nc 0 8\n")
    with pytest.raises(LogCorruptionError, match=r"cleaner-offset-checkpoint is damaged .*how far each compacted"):
        Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT)


@pytest.mark.parametrize("configs, says", [
    ({"nope": {"cleanup.policy": "compact"}}, r"topic_configs names \['nope'\]"),
    ({"c": {"cleanup.policy": "shred"}}, r"topic 'c': Invalid value shred for configuration cleanup.policy: String "
                                        r"must be one of: compact, delete"),
    ({"c": {"retention.hours": 5}}, r"topic 'c': Unknown topic config name: retention.hours"),
    ({"c": {"segment.bytes": 0}}, r"topic 'c': Invalid value 0 for configuration segment.bytes: Value must be at "
                                  r"least 14"),
    ({"c": {"segment.bytes": 2**31}}, r"Invalid value 2147483648 for configuration segment.bytes: Not a number of "
                                      r"type INT"),
    ({"c": {"min.cleanable.dirty.ratio": "1.5"}}, r"Invalid value 1.5 for configuration min.cleanable.dirty.ratio: "
                                                  r"Value must be no more than 1"),
    ({"c": {"preallocate": "yes"}}, r"Invalid value yes for configuration preallocate: Expected value to be either "
                                    r"true or false"),
    ({"c": {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5}}, r"conflict topic config setting "
                                                                        r"min.compaction.lag.ms \(10\) > "
                                                                        r"max.compaction.lag.ms \(5\)"),
])
def test_bad_topic_configs_are_named(tmp_path, configs, says):
    with pytest.raises(ValueError, match=says):
        Broker({"c": 1}, data_dir=tmp_path, topic_configs=configs)
    assert not (tmp_path / "c-0").exists()


# --- found by a hostile review -----------------------------------------------------------------------------------


def test_compaction_never_moves_the_log_end_back_when_the_active_segment_is_empty(tmp_path, monkeypatch):
    import errno

    from idemcore.broker.log.store import FileStore

    configs = {"c": {"cleanup.policy": "compact", "segment.bytes": 300, "delete.retention.ms": DAY}}
    old = NOW - 2 * DAY
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=configs, clock=lambda: NOW) as broker:
        for key, value in ((b"a", b"v" * 40), (b"b", b"v" * 40), (b"c", None)):  # ends in an old tombstone
            batch = RecordBatch("c", 0, [value], [key], -1, -1, -1, old)
            assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == 0
        append = FileStore.append

        def full_disk(store, data):
            if store.name.endswith(".log"):
                raise OSError(errno.ENOSPC, "No space left on device")
            append(store, data)

        monkeypatch.setattr(FileStore, "append", full_disk)  # the next append rolls, then fails: empty active
        big = RecordBatch("c", 0, [b"v" * 200], [b"d"], -1, -1, -1, NOW)
        assert broker.handle(ProduceRequest((big,))).responses[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        monkeypatch.undo()
        broker.clean_logs()
        assert broker.log("c", 0).log_end_offset == 3
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=configs, clock=lambda: NOW) as again:  # back online
        assert again.log("c", 0).log_end_offset == 3
        again.clean_logs()
        assert again.handle(ProduceRequest((big,))).responses[0].base_offset == 3
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=configs, clock=lambda: NOW) as again:
        assert again.log("c", 0).log_end_offset == 4


@pytest.mark.parametrize("damage", ["emptied", "cut at a batch boundary", "deleted"])
def test_a_damaged_compacted_segment_is_still_refused(tmp_path, damage):
    _compacted(tmp_path)
    segments = sorted((tmp_path / "c-0").glob("*.log"))
    victim = segments[1]
    data = victim.read_bytes()
    if damage == "emptied":
        victim.write_bytes(b"")
    elif damage == "cut at a batch boundary":
        first = next(iter_batches(data))[1]
        assert first.size_in_bytes < len(data)
        victim.write_bytes(data[:first.size_in_bytes])
    else:
        victim.unlink()
    # After a clean shutdown a flushed segment is trusted, as Kafka trusts it; a start that reads them refuses it.
    forget_recovery_points(tmp_path)
    with pytest.raises(LogCorruptionError):
        Broker({"c": 1}, data_dir=tmp_path, topic_configs=COMPACT)


def test_keyless_records_go_and_an_open_transaction_stops_the_cleaning(tmp_path):
    configs = {"c": {"cleanup.policy": "compact", "segment.bytes": 150}}
    with Broker({"c": 1}, data_dir=tmp_path, segment_bytes=150) as before:  # written before it was compacted
        keyless = RecordBatch("c", 0, [b"no key"], None, -1, -1, -1, NOW)
        assert before.handle(ProduceRequest((keyless,))).responses[0].base_offset == 0
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=configs, clock=lambda: NOW) as broker:
        log = broker.log("c", 0)
        for seq, (key, value) in enumerate([(b"K", b"old"), (b"F", b"f0")]):
            _produce(broker, 1, seq, [(key, value)], NOW)
        txn = RecordBatch("c", 0, [b"in-txn"], [b"K"], 2, 0, 0, NOW, True)
        open_at = broker.handle(ProduceRequest((txn,))).responses[0].base_offset
        for seq in range(2, 8):
            _produce(broker, 1, seq, [(b"F", b"f%d" % seq)], NOW)
        assert log.cleanable_offset() <= open_at
        broker.clean_logs()
        held = [(o, k) for o, k, _, _ in log.records()]
        assert (0, None) not in held  # Kafka drops records without a key
        assert [o for o, k in held if k == b"F" and o > open_at] == list(range(open_at + 1, open_at + 7))
