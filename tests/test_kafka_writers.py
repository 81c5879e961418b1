"""The writers of record.kafka_files (.snapshot, .txnindex, leader-epoch-checkpoint) against the readers, and
write_file_atomically."""

from __future__ import annotations

import inspect
import os
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.broker.log.segment import LogSegment
from idemcore.broker.log.store import MemoryStore
from idemcore.record.kafka_files import (
    AbortedTxn,
    EpochEntry,
    ProducerSnapshotEntry,
    encode_leader_epoch_checkpoint,
    encode_snapshot,
    encode_txn_index,
    encode_txn_index_entry,
    read_leader_epoch_checkpoint,
    read_snapshot,
    read_txn_index,
    write_file_atomically,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
SETTINGS = settings(max_examples=200, deadline=None)

snapshot_entries = st.builds(ProducerSnapshotEntry, INT64, st.integers(-(2**15), 2**15 - 1), INT32, INT64, INT32,
                             INT64, INT32, INT64)


@SETTINGS
@given(entries=st.lists(snapshot_entries, max_size=20))
def test_a_snapshot_reads_back_as_written(tmp_path_factory, entries):
    path = tmp_path_factory.mktemp("snap") / "00000000000000000042.snapshot"
    data = encode_snapshot(entries)
    assert len(data) == 10 + 46 * len(entries)
    write_file_atomically(path, data)
    read = read_snapshot(path)
    assert read.problems == [] and read.notes == []
    assert read.entries == entries


def test_a_snapshot_is_laid_out_as_kafka_writes_it():
    entry = ProducerSnapshotEntry(0x0102030405060708, -2, 0x7FFFFFFF, -1, 3, 1_700_000_000_000, 9, 123)
    data = encode_snapshot([entry])
    body = bytes.fromhex("00000001"  # count
                         "0102030405060708" "fffe" "7fffffff" "ffffffffffffffff" "00000003"
                         "0000018bcfe56800" "00000009" "000000000000007b")
    assert data == struct.pack(">hI", 1, crc32c(body)) + body
    assert encode_snapshot([]) == bytes.fromhex("0001") + struct.pack(">I", crc32c(bytes(4))) + bytes(4)


@pytest.mark.parametrize("entry", [
    (1, 2**15, 0, 0, 0, 0, 0, -1),  # epoch past int16
    (1, 0, 2**31, 0, 0, 0, 0, -1),  # last sequence past int32
    (2**63, 0, 0, 0, 0, 0, 0, -1),  # producer id past int64
    (1, 0, 0, 0, 0, 0, 0),  # a field missing
])
def test_a_snapshot_entry_that_does_not_fit_is_named(entry):
    with pytest.raises(ValueError, match=r"snapshot entry \(.*\) does not fit the format"):
        encode_snapshot([entry])  # type: ignore[list-item]


aborted_txns = st.tuples(st.integers(-1, 2**63 - 1), st.integers(0, 2**62), st.integers(0, 2**62),
                         st.integers(0, 2**62)).map(
    lambda t: (t[0], min(t[1], t[2]), max(t[1], t[2]), min(t[3], max(t[1], t[2]) + 1)))


@SETTINGS
@given(txns=st.lists(aborted_txns, max_size=20))
def test_txn_index_entries_read_back_as_written(tmp_path_factory, txns):
    path = tmp_path_factory.mktemp("txn") / "00000000000000000000.txnindex"
    one_by_one = b"".join(encode_txn_index_entry(*txn) for txn in txns)
    columns = [[txn[k] for txn in txns] for k in range(4)]
    assert encode_txn_index(*columns) == one_by_one  # the array form writes the same bytes
    path.write_bytes(one_by_one)
    read = read_txn_index(path)
    assert read.problems == []
    assert [(e.version, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset, e.at)
            for e in read.entries] == [(0, *txn, 34 * k) for k, txn in enumerate(txns)]
    assert b"".join(encode_txn_index_entry(*e[:4]) for e in read.entries) == one_by_one  # the broker writes so
    assert _segment_with_txn_index(one_by_one).aborted() == read.entries  # the broker's log reads the same entries


def _segment_with_txn_index(data: bytes) -> LogSegment:
    stores = [MemoryStore() for _ in range(4)]
    stores[3].append(data)
    return LogSegment(0, *stores, index_interval_bytes=4096)


def test_an_aborted_txn_starts_with_the_writers_fields():
    assert AbortedTxn._fields[:4] == tuple(inspect.signature(encode_txn_index_entry).parameters)
    assert AbortedTxn(5, 10, 20, 11) == (5, 10, 20, 11, 0, -1)  # version 0, read from no file


def test_a_txn_index_entry_is_laid_out_as_kafkas_aborted_txn():
    assert encode_txn_index_entry(5, 10, 20, 11) == bytes.fromhex(
        "0000" "0000000000000005" "000000000000000a" "0000000000000014" "000000000000000b")


def test_txn_index_encoders_name_what_does_not_fit():
    with pytest.raises(ValueError, match=r"last offset 9223372036854775808"):
        encode_txn_index_entry(1, 0, 2**63, 1)
    with pytest.raises(ValueError, match=r"one value per entry, got lengths \[1, 1, 2, 1\]"):
        encode_txn_index([1], [0], [3, 4], [4])
    with pytest.raises(ValueError, match=r"first_offset value 9223372036854775808 does not fit int64"):
        encode_txn_index([1], [2**63], [3], [4])
    with pytest.raises(ValueError, match=r"producer_id must hold integers, got dtype float64"):
        encode_txn_index([1.5], [0], [3], [4])
    assert encode_txn_index([], [], [], []) == b""


epoch_lists = st.lists(st.tuples(st.integers(0, 100), st.integers(0, 10**6)), max_size=10).map(
    lambda raw: [(epoch, offset) for epoch, offset in zip(
        sorted({e for e, _ in raw}), sorted(o for _, o in raw), strict=False)])


@SETTINGS
@given(entries=epoch_lists)
def test_a_leader_epoch_checkpoint_reads_back_as_written(tmp_path_factory, entries):
    path = tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint"
    write_file_atomically(path, encode_leader_epoch_checkpoint(entries))
    read = read_leader_epoch_checkpoint(path)
    assert read.problems == []
    assert read.entries == [EpochEntry(*entry) for entry in entries]


def test_a_leader_epoch_checkpoint_is_kafkas_text():
    assert encode_leader_epoch_checkpoint([]) == b"0\n0\n"
    assert encode_leader_epoch_checkpoint([(0, 0), (3, 120)]) == b"0\n2\n0 0\n3 120\n"
    assert encode_leader_epoch_checkpoint([EpochEntry(1, 5)]) == b"0\n1\n1 5\n"
    with pytest.raises(ValueError, match=r"epoch 2147483648 is not an integer"):
        encode_leader_epoch_checkpoint([(2**31, 0)])
    with pytest.raises(ValueError, match=r"start offset '7' is not an integer"):
        encode_leader_epoch_checkpoint([(1, "7")])  # type: ignore[list-item]


def test_write_file_atomically_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "00000000000000000007.snapshot"
    write_file_atomically(path, b"old")
    write_file_atomically(path, b"new contents", fsync=False)
    assert path.read_bytes() == b"new contents"
    write_file_atomically(str(path), memoryview(b"x" * 100_000))
    assert path.read_bytes() == b"x" * 100_000
    assert sorted(os.listdir(tmp_path)) == [path.name]


def test_write_file_atomically_removes_its_temporary_when_the_rename_fails(tmp_path):
    target = tmp_path / "a-directory"
    (target / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        write_file_atomically(target, b"data")  # a non-empty directory cannot be replaced by a file
    assert sorted(os.listdir(tmp_path)) == ["a-directory"]
    with pytest.raises(FileNotFoundError):
        write_file_atomically(tmp_path / "missing" / "file", b"data")
