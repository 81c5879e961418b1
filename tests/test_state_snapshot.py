"""Producer-state snapshots (engine.snapshot): what Kafka writes for a partition and what it loads back.

The property: a table A built from a random stream, snapshotted (snapshot_entries -> encode_snapshot -> file ->
read_snapshot) and loaded into a table B, answers the next batch as A does; the one known difference is a retry
of a batch older than the newest, which only A still recognises (Kafka keeps one batch per producer in a snapshot).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from idemcore import ProducerStateTable
from idemcore.engine import ProducerStateManager, check, validate
from idemcore.engine.snapshot import load_snapshot, load_snapshot_file, snapshot_entries
from idemcore.findings import Finding
from idemcore.protocol.codes import ErrorCode, Status
from idemcore.record.kafka_files import (
    ProducerSnapshotEntry,
    encode_snapshot,
    offset_file_name,
    read_snapshot,
    write_file_atomically,
)

from .helpers import batches, data, marker
from .test_properties import PIDS, streams

INT32_MAX = 2**31 - 1
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PARTITIONS = (0, 1, 2, 3)  # the partitions streams() writes to
VERDICT_COLUMNS = ("status", "error_code", "base_offset", "last_offset", "finding", "expected")


def snapshot_file(directory: Path, table: ProducerStateTable, partition: int) -> Path:
    """Write ``partition``'s snapshot as the broker will: named by the log end, written atomically."""
    path = directory / f"p{partition}" / offset_file_name(table.next_offset(partition), ".snapshot")
    path.parent.mkdir(exist_ok=True)
    write_file_atomically(path, encode_snapshot(snapshot_entries(table, partition)))
    return path


def assert_index_consistent(table: ProducerStateTable) -> None:
    """Every row is found through the producer index, every stream through the stream index."""
    n = table.n_producers
    for row in range(n):
        assert table.row_of(int(table.row_stream[row]), int(table.row_producer_id[row])) == row
        index = int(table.row_stream_index[row])
        assert table.stream_id[index] == table.row_stream[row]
    for index in range(table.n_streams):
        partition = int(table.stream_id[index])
        assert table.next_offset(partition) == table.stream_next_offset[index]


def newest_batch_only(entry):
    """A ProducerStateManager entry as Kafka rebuilds it from a snapshot: the newest batch only, with the
    entry's timestamp (readSnapshot's ``new BatchColumns(seq, offset, offsetDelta, timestamp)``)."""
    if entry is None:
        return None
    kept = tuple(dataclasses.replace(b, timestamp=entry.last_timestamp) for b in entry.batches[-1:])
    return dataclasses.replace(entry, batches=kept)


def verdict(v, k: int = 0) -> tuple:
    return tuple(int(getattr(v, name)[k]) for name in VERDICT_COLUMNS)


def txns(v) -> list[tuple]:
    t = v.completed_txns
    return list(zip(t.stream.tolist(), t.producer_id.tolist(), t.first_offset.tolist(), t.last_offset.tolist(),
                    t.aborted.tolist(), strict=True))


@st.composite
def next_batches(draw, table: ProducerStateTable) -> dict:
    """A batch to send after the stream: in sequence, a retry of a retained batch (the newest or an older
    one), a gap, an overlap, an old (fenced) or new epoch, a marker, an unknown producer, or anything."""
    n = table.n_producers
    if n and draw(st.integers(0, 4)):  # mostly a producer A knows
        row = draw(st.integers(0, n - 1))
        partition, pid = int(table.row_stream[row]), int(table.row_producer_id[row])
    else:
        partition = draw(st.sampled_from(PARTITIONS))
        pid = draw(st.sampled_from([*PIDS, 999]))
    row = table.row_of(partition, pid)
    epoch = int(table.row_epoch[row]) if row is not None else 0
    ring = list(table.ring(row)) if row is not None else []
    last_seq = ring[-1][0] if ring else -1
    after = (last_seq + 1) % (INT32_MAX + 1)
    count = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["next", *["retry"] * 4, "gap", "overlap", "old_epoch", "new_epoch", "marker",
                                 "anything"]))
    extra = {"partition": partition, "max_timestamp": 10_000, "is_transactional": draw(st.booleans())}
    if kind == "retry" and ring:
        stored_last, delta, _, _ = ring[draw(st.integers(0, len(ring) - 1))]
        return data(pid, epoch, (stored_last - delta) % (INT32_MAX + 1), stored_last, **extra)
    if kind == "gap":
        after = (after + draw(st.integers(1, 5))) % (INT32_MAX + 1)
    elif kind == "overlap" and ring:
        after = (ring[-1][0] - ring[-1][1]) % (INT32_MAX + 1)  # the newest batch's first sequence, longer range
        count = ring[-1][1] + 2
    elif kind == "old_epoch":
        epoch -= 1
    elif kind == "new_epoch":
        epoch += 1
        after = draw(st.sampled_from([0, after]))
    elif kind == "marker":
        return marker(pid, epoch + draw(st.integers(-1, 1)), commit=draw(st.booleans()),
                      coordinator_epoch=draw(st.integers(0, 3)), partition=partition, max_timestamp=10_000)
    elif kind == "anything":
        epoch = draw(st.integers(-1, 3))
        after = draw(st.integers(0, 8))
    if epoch < -1:
        epoch = 0
    return data(pid, epoch, after, (after + count - 1) % (INT32_MAX + 1), **extra)


@SETTINGS
@given(rows=streams(), other=streams(), reuse=st.booleans(), origin=st.sampled_from(["client", "coordinator",
                                                                                      "replication"]),
       draw=st.data())
def test_a_table_loaded_from_a_snapshot_answers_the_next_batch_as_the_original(backend, rows, other, reuse, origin,
                                                                               draw):
    a = ProducerStateTable(row_capacity=1, stream_capacity=1)
    validate(batches(rows), a, backend=backend)
    b = ProducerStateTable(row_capacity=1, stream_capacity=1)
    if reuse:  # loading replaces whatever B held for the partition
        validate(batches(other), b, backend=backend)
    with tempfile.TemporaryDirectory() as directory:
        for partition in PARTITIONS:
            read = load_snapshot_file(b, partition, snapshot_file(Path(directory), a, partition), backend)
            assert read.problems == []
    assert_index_consistent(b)
    for partition in PARTITIONS:
        assert snapshot_entries(b, partition) == snapshot_entries(a, partition)
        assert b.next_offset(partition) == a.next_offset(partition)
        before, after = ProducerStateManager(partition, table=a), ProducerStateManager(partition, table=b)
        assert after.active_producers() == before.active_producers()
        for pid in before.active_producers():
            assert after.last_entry(pid) == newest_batch_only(before.last_entry(pid))

    row = draw.draw(next_batches(a))
    va = check(batches([row]), a, origin=origin, backend=backend)
    vb = check(batches([row]), b, origin=origin, backend=backend)
    a_row = a.row_of(row["partition"], row["producer_id"])
    newest = list(a.ring(a_row))[-1] if a_row is not None and a.ring_len[a_row] else None
    if va.status[0] == Status.DUPLICATE and newest is not None and va.last_offset[0] != newest[2]:
        # The known difference. A retry of a batch older than the producer's newest: A still holds it among its
        # five, B (like Kafka after loading a snapshot, whose entries keep only the last batch) does not, so B
        # judges it by sequence alone: at or before the newest last sequence, it is out of order (Kafka's
        # ProducerStateEntry.findDuplicateBatch finds nothing, checkSequence throws OutOfOrderSequenceException).
        event("retry of an older batch: only A recognises it")
        assert origin == "client"  # only CLIENT appends are deduplicated
        assert vb.status[0] != Status.DUPLICATE
        if a.row_epoch[a_row] >= 0:  # (a producer at epoch -1 is unknown: any sequence is accepted)
            assert verdict(vb) == (Status.REJECTED, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, -1,
                                   Finding.DUPLICATE_BEYOND_WINDOW, (newest[0] + 1) % (INT32_MAX + 1))
    else:
        event(f"same verdict: {Status(int(va.status[0])).name} {Finding(int(va.finding[0])).name}")
        assert verdict(vb) == verdict(va)
        assert txns(vb) == txns(va)


def golden_table(backend) -> ProducerStateTable:
    """Partition 3 as in the golden case below (offsets from 0); a producer on partition 1 besides."""
    table = ProducerStateTable(row_capacity=2, stream_capacity=1)
    verdicts = validate(batches([
        data(7, 2, 0, 4, partition=3, max_timestamp=1000),  # offsets 0-4
        data(7, 2, 5, 6, partition=3, max_timestamp=1010),  # offsets 5-6: pid 7's newest batch
        data(3, 0, 10, 12, partition=3, max_timestamp=1020, is_transactional=True),  # 7-9, opens a transaction
        marker(9, 1, commit=True, coordinator_epoch=4, partition=3, max_timestamp=1030),  # 10: markers only
        data(5, 0, 0, 0, partition=3, max_timestamp=1040, is_transactional=True),  # 11
        marker(5, 0, commit=False, coordinator_epoch=2, partition=3, max_timestamp=1050),  # 12: aborts it
        data(6, 0, 0, 0, partition=3, max_timestamp=1060),  # 13
        marker(6, 1, commit=True, coordinator_epoch=0, partition=3, max_timestamp=1070),  # 14: new epoch, no batch
        data(7, 0, 0, 0, partition=1, max_timestamp=5),
    ]), table, backend=backend)
    assert verdicts.status.tolist() == [Status.APPENDED] * 9
    return table


#: The golden case's entries, by hand from Kafka's ProducerStateEntry: lastSeq/lastDataOffset/lastOffsetDelta of
#: the newest batch (-1/-1/0 without one), lastTimestamp (a marker's too), coordinatorEpoch (-1 until a marker),
#: currentTxnFirstOffset (-1: none).
GOLDEN_ENTRIES = [
    ProducerSnapshotEntry(3, 0, 12, 9, 2, 1020, -1, 7),
    ProducerSnapshotEntry(5, 0, 0, 11, 0, 1050, 2, -1),
    ProducerSnapshotEntry(6, 1, -1, -1, 0, 1070, 0, -1),
    ProducerSnapshotEntry(7, 2, 6, 6, 1, 1010, -1, -1),
    ProducerSnapshotEntry(9, 1, -1, -1, 0, 1030, 4, -1),
]
#: The same, as the file's bytes: count, then per entry producer id i64, epoch i16, last sequence i32, last offset
#: i64, offset delta i32, timestamp i64, coordinator epoch i32, current txn first offset i64.
GOLDEN_BODY = bytes.fromhex(
    "00000005"
    "0000000000000003" "0000" "0000000c" "0000000000000009" "00000002" "00000000000003fc" "ffffffff" "0000000000000007"
    "0000000000000005" "0000" "00000000" "000000000000000b" "00000000" "000000000000041a" "00000002" "ffffffffffffffff"
    "0000000000000006" "0001" "ffffffff" "ffffffffffffffff" "00000000" "000000000000042e" "00000000" "ffffffffffffffff"
    "0000000000000007" "0002" "00000006" "0000000000000006" "00000001" "00000000000003f2" "ffffffff" "ffffffffffffffff"
    "0000000000000009" "0001" "ffffffff" "ffffffffffffffff" "00000000" "0000000000000406" "00000004" "ffffffffffffffff"
)


def test_the_entries_and_bytes_are_kafkas_on_a_golden_case(backend, tmp_path):
    table = golden_table(backend)
    assert snapshot_entries(table, 3) == GOLDEN_ENTRIES
    assert snapshot_entries(table, 1) == [ProducerSnapshotEntry(7, 0, 0, 0, 0, 5, -1, -1)]
    assert snapshot_entries(table, 8) == []
    data_ = encode_snapshot(GOLDEN_ENTRIES)
    assert data_ == bytes.fromhex("0001") + crc32c(GOLDEN_BODY).to_bytes(4, "big") + GOLDEN_BODY

    path = tmp_path / offset_file_name(table.next_offset(3), ".snapshot")
    assert path.name == "00000000000000000015.snapshot"
    write_file_atomically(path, data_)
    loaded = ProducerStateTable(row_capacity=1, stream_capacity=1)
    read = load_snapshot_file(loaded, 3, path, backend)
    assert read.problems == [] and read.entries == GOLDEN_ENTRIES
    assert loaded.next_offset(3) == 15 and loaded.n_streams == 1 and loaded.n_producers == 5
    assert_index_consistent(loaded)
    manager = ProducerStateManager(3, table=loaded, backend=backend)
    pid7 = manager.last_entry(7)
    assert (pid7.producer_epoch, pid7.current_txn_first_offset, pid7.coordinator_epoch) == (2, None, -1)
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp) for b in pid7.batches] == [
        (5, 6, 5, 6, 1010)]
    assert manager.last_entry(3).current_txn_first_offset == 7 and manager.first_unstable_offset() == 7
    assert manager.last_entry(9).batches == () and manager.last_entry(6).batches == ()

    # Kafka's verdicts after the restart, batch by batch (each against the loaded state).
    def answer(row):
        v = check(batches([row]), loaded, backend=backend)
        return verdict(v)

    assert answer(data(7, 2, 5, 6, partition=3)) == (Status.DUPLICATE, 0, 5, 6, Finding.DUPLICATE, -1)
    assert answer(data(7, 2, 0, 4, partition=3)) == (Status.REJECTED, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1,
                                                     -1, Finding.DUPLICATE_BEYOND_WINDOW, 7)
    assert answer(data(7, 2, 7, 7, partition=3)) == (Status.APPENDED, 0, 15, 15, Finding.NONE, -1)
    assert answer(data(7, 1, 7, 7, partition=3)) == (Status.REJECTED, ErrorCode.INVALID_PRODUCER_EPOCH, -1, -1,
                                                     Finding.EPOCH_REGRESSION, 2)
    assert answer(data(9, 1, 0, 0, partition=3)) == (Status.APPENDED, 0, 15, 15, Finding.NONE, -1)
    assert answer(data(9, 1, 3, 3, partition=3))[1] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert answer(data(3, 0, 13, 13, partition=3)) == (Status.REJECTED, ErrorCode.INVALID_TXN_STATE, -1, -1,
                                                       Finding.INVALID_TXN_STATE, 7)
    assert answer(marker(9, 1, coordinator_epoch=3, partition=3))[1] == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_expired_producers_are_not_loaded_and_an_open_transaction_never_expires(backend):
    loaded = ProducerStateTable()
    expiration = 1000
    count = load_snapshot(loaded, 3, GOLDEN_ENTRIES, backend, now_ms=1060 + expiration, expiration_ms=expiration)
    assert count == 2  # pid 3 (transaction open since 1020) and pid 6 (idle 990 ms); the others idle >= 1000 ms
    assert [e.producer_id for e in snapshot_entries(loaded, 3)] == [3, 6]
    assert load_snapshot(loaded, 3, GOLDEN_ENTRIES, backend) == 5  # now_ms None: all of them


def test_loading_replaces_only_that_partitions_rows_and_a_later_entry_wins(backend):
    table = golden_table(backend)
    generation = table.generation
    before_p1 = snapshot_entries(table, 1)
    entries = [ProducerSnapshotEntry(7, 4, 9, 100, 2, 50, 1, -1), ProducerSnapshotEntry(42, 0, 0, 101, 0, 60, -1, 101),
               ProducerSnapshotEntry(7, 5, 3, 102, 0, 70, 1, -1)]  # pid 7 twice: the later one is kept
    assert load_snapshot(table, 3, entries, backend, next_offset=103) == 2
    assert table.generation > generation
    assert snapshot_entries(table, 3) == [ProducerSnapshotEntry(7, 5, 3, 102, 0, 70, 1, -1), entries[1]]
    assert snapshot_entries(table, 1) == before_p1
    assert table.next_offset(3) == 103 and table.next_offset(1) == 1
    assert_index_consistent(table)
    assert load_snapshot(table, 3, [], backend) == 0  # an empty snapshot: no producer left there
    assert snapshot_entries(table, 3) == [] and table.next_offset(3) == 103
    assert_index_consistent(table)


def test_a_snapshot_entry_with_an_offset_but_no_sequence_keeps_its_batch(backend):
    # readSnapshot tests the last offset, not the sequence: a batch replicated without a sequence is kept.
    table = ProducerStateTable()
    load_snapshot(table, 0, [ProducerSnapshotEntry(1, 0, -1, 8, 0, 5, -1, -1)], backend)
    row = table.row_of(0, 1)
    assert list(table.ring(row)) == [(-1, 0, 8, 5)]
    assert snapshot_entries(table, 0) == [ProducerSnapshotEntry(1, 0, -1, 8, 0, 5, -1, -1)]


def test_loading_refuses_values_that_do_not_fit_before_changing_anything(backend):
    table = golden_table(backend)
    state, generation = table.canonical(), table.generation
    for entries, message in [
        ([ProducerSnapshotEntry(1, 2**15, 0, 0, 0, 0, 0, -1)], "producer 1: producer_epoch 32768 does not fit int16"),
        ([ProducerSnapshotEntry(-4, 0, 0, 0, 0, 0, 0, -1)], "producer id -4 is negative"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_snapshot(table, 3, entries, backend)
    with pytest.raises(ValueError, match="next offset -1 for stream 3 is negative"):
        load_snapshot(table, 3, [], backend, next_offset=-1)
    with pytest.raises(ValueError, match="stream -1 is not in"):
        load_snapshot(table, -1, [], backend)
    with pytest.raises(ValueError, match=r"'00000000000000000015\.log' is not a snapshot file name"):
        load_snapshot_file(table, 3, Path("00000000000000000015.log"), backend)
    assert table.generation == generation
    for name, column in table.canonical().items():
        np.testing.assert_array_equal(column, state[name], err_msg=name)


def test_a_corrupt_snapshot_is_reported_and_not_loaded(backend, tmp_path):
    table = golden_table(backend)
    data_ = encode_snapshot(GOLDEN_ENTRIES)
    path = tmp_path / "00000000000000000015.snapshot"
    state, generation = table.canonical(), table.generation
    for position in range(len(data_)):  # any one flipped byte
        damaged = bytearray(data_)
        damaged[position] ^= 0x20
        path.write_bytes(bytes(damaged))
        read = load_snapshot_file(table, 3, path, backend)
        kinds = {p.kind for p in read.problems}
        assert kinds, position
        if position >= 2:  # everything after the version is under the CRC
            assert "crc_mismatch" in kinds
        else:
            assert kinds == {"snapshot_version"}
        assert table.generation == generation  # nothing loaded
    for name, column in table.canonical().items():
        np.testing.assert_array_equal(column, state[name], err_msg=name)
    # What the broker sees: read_snapshot's problem, one line naming the file and both CRCs.
    damaged = bytearray(data_)
    damaged[20] ^= 0x01
    path.write_bytes(bytes(damaged))
    problems = read_snapshot(path).problems
    assert [(p.kind, p.position) for p in problems] == [("crc_mismatch", 2)]
    assert f"stored {crc32c(GOLDEN_BODY):#010x}" in str(problems[0]) and str(path) in str(problems[0])


def test_set_next_offset_and_add_rows(backend):
    table = ProducerStateTable(row_capacity=1, stream_capacity=1)
    table.set_next_offset(5, 40, backend)
    table.set_next_offset(6, 7, backend)  # a second partition: the table grows
    assert (table.next_offset(5), table.next_offset(6), table.n_streams) == (40, 7, 2)
    rows = table.add_rows(6, [11, 10, 12], backend)
    assert rows.tolist() == [0, 1, 2] and table.n_producers == 3
    assert [table.row_of(6, pid) for pid in (11, 10, 12)] == [0, 1, 2]
    assert int(table.row_epoch[0]) == -1 and int(table.ring_len[0]) == 0 and int(table.row_txn_first_offset[0]) == -1
    assert_index_consistent(table)
    # The kernel takes the rows as its own: a first batch of pid 10 at epoch 0 may start anywhere.
    v = validate(batches([data(10, 0, 3, 3, partition=6)]), table, backend=backend)
    assert verdict(v) == (Status.APPENDED, 0, 7, 7, Finding.NONE, -1)
    for pids, message in [([10], "producer id 10 already has an entry on stream 6"),
                          ([1, 1], "producer id 1 is given twice"), ([-1], "producer id -1 is negative")]:
        with pytest.raises(ValueError, match=message):
            table.add_rows(6, pids, backend)
    with pytest.raises(ValueError, match="next offset -3 for stream 5"):
        table.set_next_offset(5, -3)
    with pytest.raises(ValueError, match="stream 2147483648 is not in"):
        table.set_next_offset(2**31, 0)
