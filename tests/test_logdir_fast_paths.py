"""The log-directory audit's fast paths against the general ones: ``read_sound_indexes`` (many index files checked
in one pass) against the one-file readers, the fast index cross-check against ``_check_indexes``, and whole audits
through ``feed_segment`` and the read-ahead against the same audits through ``feed_packed`` and ``_check_indexes``."""

from __future__ import annotations

import dataclasses
import itertools
import random
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from idemcore.audit import logdir
from idemcore.record.kafka_files import read_offset_index, read_sound_indexes, read_time_index, scan_segment
from idemcore.record.kafka_files.indexes import OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from idemcore.record.kafka_files.names import SegmentFiles, offset_file_name
from idemcore.record.v2.codec import Record, encode_batch
from idemcore.synth.dataset import generate

from .test_logdir import build_log_dir

T0 = 1_700_000_000_000


def offset_entries(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">ii", r, p) for r, p in pairs)


def time_entries(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">qi", t, r) for t, r in pairs)


OFFSET_FILES = {
    "empty": b"",
    "one": offset_entries((0, 0)),
    "zero first": offset_entries((0, 0), (5, 4100), (9, 8200)),
    "rising": offset_entries((3, 0), (7, 4096), (12, 9000)),
    "preallocated tail": offset_entries((3, 0), (7, 4096)) + bytes(16),
    "all zero": bytes(32),
    "garbage after zeros": offset_entries((3, 0)) + bytes(8) + offset_entries((9, 900)),
    "partial": offset_entries((3, 0)) + b"\x00\x01\x02",
    "offset not rising": offset_entries((3, 0), (3, 500)),
    "position not rising": offset_entries((3, 500), (4, 100)),
    "negative offset": offset_entries((-3, 0)),
    "negative position": offset_entries((3, -8)),
    "zero inside": offset_entries((3, 0), (0, 0), (7, 900)),
}
TIME_FILES = {
    "empty": b"",
    "one": time_entries((T0, 0)),
    "rising": time_entries((T0, 1), (T0 + 5, 1), (T0 + 9, 4)),
    "preallocated tail": time_entries((T0, 1)) + bytes(24),
    "all zero": bytes(36),
    "partial": time_entries((T0, 1)) + b"\x01",
    "timestamps fall": time_entries((T0, 1), (T0 - 1, 2)),
    "timestamps repeat": time_entries((T0, 1), (T0, 2)),
    "offsets fall": time_entries((T0, 5), (T0 + 1, 4)),
    "zero first": time_entries((0, 0), (T0, 3)),
}


def reader_says(path: Path, time_index: bool):
    read = read_time_index(path, 100) if time_index else read_offset_index(path, 100)
    first, second = ("timestamp", "offset") if time_index else ("offset", "position")
    return read.columns[first], read.columns[second], read.problems, read.notes


@pytest.mark.parametrize("time_index", [False, True], ids=["index", "timeindex"])
def test_sound_files_read_as_the_reader_reads_them_and_every_other_file_is_left_to_it(tmp_path, time_index):
    files = TIME_FILES if time_index else OFFSET_FILES
    names = list(files)
    rng = random.Random(7)
    orders = [names, names[::-1], *(rng.sample(names, len(names)) for _ in range(4))]
    for order in orders:  # one pass over many files: neighbours must not change any file's answer
        got = read_sound_indexes([(files[name], 100) for name in order], time_index)
        for name, columns in zip(order, got, strict=True):
            path = tmp_path / f"00000000000000000100.{'timeindex' if time_index else 'index'}"
            path.write_bytes(files[name])
            first, second, problems, notes = reader_says(path, time_index)
            if columns is None:
                assert problems or notes, name  # left to the reader only when it has something to say
            else:
                assert not problems and not notes, name
                assert columns[0].dtype == columns[1].dtype == np.int64
                np.testing.assert_array_equal(columns[0], first, err_msg=name)
                np.testing.assert_array_equal(columns[1], second, err_msg=name)
    sound = {name for name, columns in zip(names, read_sound_indexes([(files[n], 100) for n in names], time_index),
                                            strict=True) if columns is not None}
    assert sound == {"empty", "one", "zero first", "rising"}


def test_random_entries_agree_with_the_reader(tmp_path):
    rng = np.random.default_rng(3)
    for time_index, size in ((False, OFFSET_INDEX_ENTRY), (True, TIME_INDEX_ENTRY)):
        contents = []
        for _ in range(60):
            n = int(rng.integers(0, 6))
            if time_index:
                data = time_entries(*zip(np.cumsum(rng.integers(-1, 3, n)).tolist(),
                                         np.cumsum(rng.integers(-1, 3, n)).tolist(), strict=True))
            else:
                data = offset_entries(*zip(np.cumsum(rng.integers(-1, 3, n)).tolist(),
                                           np.cumsum(rng.integers(-1, 3, n)).tolist(), strict=True))
            contents.append((data + bytes(int(rng.integers(0, 2)) * size), int(rng.integers(0, 50))))
        got = read_sound_indexes(contents, time_index)
        for k, ((data, base), columns) in enumerate(zip(contents, got, strict=True)):
            path = tmp_path / f"{k:020d}.{'timeindex' if time_index else 'index'}"
            path.write_bytes(data)
            read = read_time_index(path, base) if time_index else read_offset_index(path, base)
            clean = not read.problems and not read.notes
            assert (columns is not None) == clean
            if columns is not None:
                names = ("timestamp", "offset") if time_index else ("offset", "position")
                for got_column, name in zip(columns, names, strict=True):
                    np.testing.assert_array_equal(got_column, read.columns[name])


# --- The audit's cross-check: the fast answer is _check_indexes' answer ----------------------------------------------

def write_segment(directory: Path, base: int, batches: int) -> tuple[SegmentFiles, list[tuple[int, int, int]]]:
    """A segment of ``batches`` one-record batches from offset ``base`` (timestamps rising), and its batches as
    (offset, position, max timestamp)."""
    log = directory / offset_file_name(base, ".log")
    data = bytearray()
    batches_at = []
    for k in range(batches):
        stamp = T0 + 10 * k
        batches_at.append((base + k, len(data), stamp))
        data += encode_batch([Record(0, 0, None, b"x")], base_offset=base + k, base_timestamp=stamp,
                             producer_id=1, producer_epoch=0, base_sequence=k)
    log.write_bytes(bytes(data))
    return SegmentFiles(base, log, log.with_suffix(".index"), log.with_suffix(".timeindex")), batches_at


@pytest.fixture
def segment(tmp_path):
    return write_segment(tmp_path, 40, 12)


def variants(batches):
    """(name, .index bytes, .timeindex bytes) for the segment whose batches are ``batches``."""
    base = batches[0][0]
    good_index = offset_entries(*((off - base, pos) for off, pos, _ in batches[::3]))
    good_time = time_entries(*((stamp, off - base) for off, _, stamp in batches[1::4]))
    off, pos, stamp = batches[4]
    yield "agree", good_index, good_time
    yield "empty", b"", b""
    yield "offset in the batch's middle", offset_entries((off - base, pos + 1)), good_time
    yield "offset past the end", good_index + offset_entries((batches[-1][0] + 5 - base, batches[-1][1] + 4000)), \
        good_time
    yield "offset below its batch", offset_entries((off - 1 - base, pos)), good_time
    yield "position past the end", offset_entries((off - base, 10 ** 7)), good_time
    yield "timestamp differs", good_index, time_entries((stamp + 1, off - base))
    yield "time offset past the end", good_index, time_entries((stamp, batches[-1][0] + 3 - base))
    yield "preallocated", good_index + bytes(80), good_time + bytes(120)
    yield "not rising", offset_entries((off - base, pos), (off - base, pos)), good_time


def test_the_fast_cross_check_answers_as_check_indexes(segment):
    files, batches = segment
    scan = scan_segment(files.log)
    assert len(scan) == len(batches)
    seen = set()
    for name, index, time in variants(batches):
        files.index.write_bytes(index)
        files.time_index.write_bytes(time)
        want = logdir._check_indexes(files, scan)
        reader = logdir._IndexReadAhead([files])
        got = logdir._indexes_problems(files, scan, reader)
        assert [(p.path, p.position, p.kind, p.message) for p in got] == \
            [(p.path, p.position, p.kind, p.message) for p in want], name
        seen.add(bool(want))
    assert seen == {False, True}


def test_read_ahead_takes_segments_in_order_and_groups_them(tmp_path, monkeypatch):
    monkeypatch.setattr(logdir, "INDEX_GROUP_FILES", 2)
    segments = []
    for k in range(5):
        directory = tmp_path / f"t-{k}"
        directory.mkdir()
        files, batches = write_segment(directory, 10 * k, 4)
        files.index.write_bytes(offset_entries(*((off - files.base_offset, pos) for off, pos, _ in batches)))
        files.time_index.write_bytes(b"\x00" * 5)  # partial: left to the reader
        segments.append(files)
    reader = logdir._IndexReadAhead(segments)
    for files in segments:
        offset_index, time_index = reader.take(files)
        assert offset_index is not None and time_index is None
        assert len(reader.found) <= 2
    with pytest.raises(RuntimeError, match="out of order"):
        logdir._IndexReadAhead(segments).take(segments[1])
    for a, b in itertools.pairwise(segments):
        assert a.base_offset < b.base_offset


# --- The whole audit: the fast paths give the report of the general ones --------------------------------------------

def general_paths(monkeypatch) -> None:
    """Every segment fed through ``feed_packed`` (runs found, counted by ``StreamReplayer._count``, fresh verdict
    arrays) and its indexes checked by ``_check_indexes``: the audit as it was before the fast paths."""
    monkeypatch.setattr(logdir.LogReplayer, "feed_segment",
                        lambda self, packed, stream, facts=None: logdir.LogReplayer.feed_packed(self, packed))
    monkeypatch.setattr(logdir, "_indexes_problems",
                        lambda segment, scan, indexes: (indexes.take(segment), logdir._check_indexes(segment, scan))[1])


def same_report(got, want) -> None:
    for field in dataclasses.fields(got):
        if field.name == "seconds":
            continue
        mine, theirs = getattr(got, field.name), getattr(want, field.name)
        if isinstance(theirs, pa.Table):
            assert mine.equals(theirs), f"{field.name}:\n{mine.to_pylist()}\n!=\n{theirs.to_pylist()}"
        else:
            assert mine == theirs, field.name


def test_the_planted_log_directory_audits_the_same_through_the_fast_paths(tmp_path, monkeypatch):
    built = build_log_dir(tmp_path / "logs")
    damaged = next(iter(built.partitions.values()))
    index = damaged.file(damaged.segments[0].base_offset, ".index")
    index.write_bytes(index.read_bytes()[:8] + offset_entries((1, 3)))  # an entry at no batch's start
    fast = logdir.audit_log_dir(built.root)
    assert fast.findings.num_rows and fast.open_txns.num_rows and fast.problems
    with monkeypatch.context() as patch:
        general_paths(patch)
        same_report(fast, logdir.audit_log_dir(built.root))


def test_a_generated_log_directory_audits_the_same_through_the_fast_paths(tmp_path, monkeypatch):
    truth = generate(tmp_path / "ds", topics=2, partitions=3, producers=40, batches=6000, seed=5, format="kafka",
                     progress=False)
    root = tmp_path / "ds" / "logs"
    fast = logdir.audit_log_dir(root)
    assert fast.finding_counts() == truth["findings"] and fast.batches == truth["batches"]
    with monkeypatch.context() as patch:
        general_paths(patch)
        same_report(fast, logdir.audit_log_dir(root))
