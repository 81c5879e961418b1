"""Readers of the files beside a segment: ``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot`` and
``leader-epoch-checkpoint``, in Kafka's formats (storage/.../internals/log/: ``OffsetIndex``, ``TimeIndex``,
``TransactionIndex`` + ``AbortedTxn``, ``ProducerStateManager`` snapshots, ``LeaderEpochCheckpointFile``).

All big-endian:

- ``.index``: 8-byte entries, offset relative to the segment's base offset i32, file position i32. The active
  segment's index is preallocated (``segment.index.bytes``, 10 MiB) and filled with zeros past its entries; Kafka
  trims it when the segment rolls or the broker stops cleanly. The entries end at the first all-zero entry
  after the first (the first may be ``(0, 0)``: offset ``base`` at position 0).
- ``.timeindex``: 12-byte entries, timestamp i64 (the largest so far), relative offset i32; preallocated alike.
- ``.txnindex``: 34-byte entries (``AbortedTxn``), version i16 = 0, producer id i64, first offset i64, last
  offset i64 (the ABORT marker's), last stable offset i64. Appended, never preallocated.
- ``<offset>.snapshot``: version i16 = 1, CRC-32C u32 of every byte after it, then an array (count i32) of
  46-byte entries: producer id i64, epoch i16, last sequence i32, last offset i64, offset delta i32, timestamp
  i64, coordinator epoch i32, current transaction's first offset i64 (-1: none). A last offset of -1 means
  the producer has written only markers.
- ``leader-epoch-checkpoint``: text, a version line (0), a count line, then ``<epoch> <start offset>`` lines.

Nothing here raises for what a file holds: each reader returns the entries it could read and one
:class:`FileProblem` per thing wrong, naming the file and the byte position (Kafka rebuilds indexes it finds
corrupt and deletes corrupt snapshots; an audit says so and goes on). Only a file that cannot be opened raises
(OSError).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

import numpy as np

from idemcore.protocol.sequences import seq_sub
from idemcore.record.crc import crc32c
from idemcore.record.kafka_files.names import parse_offset_file

OFFSET_INDEX_ENTRY = 8
TIME_INDEX_ENTRY = 12
TXN_INDEX_ENTRY = 34
SNAPSHOT_ENTRY = 46
SNAPSHOT_HEADER = 10  # version i16, crc u32, count i32
SNAPSHOT_VERSION = 1
TXN_INDEX_VERSION = 0
CHECKPOINT_VERSION = 0

_TXN = struct.Struct(">hqqqq")
_SNAPSHOT_HEAD = struct.Struct(">hIi")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
assert _TXN.size == TXN_INDEX_ENTRY and _SNAPSHOT_ENTRY.size == SNAPSHOT_ENTRY

T = TypeVar("T")


@dataclass(frozen=True)
class FileProblem:
    """Something wrong in a file, at a byte position (None: the file as a whole). ``kind`` is a short name
    (``torn_tail``, ``crc_mismatch``, ``txnindex_missing``, ...); ``message`` one line without the file."""

    path: Path
    position: int | None
    kind: str
    message: str

    def __str__(self) -> str:
        where = "" if self.position is None else f"position {self.position}: "
        return f"{self.path}: {where}{self.message}"

    def to_dict(self) -> dict[str, object]:
        return {"file": str(self.path), "position": self.position, "kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class FileRead(Generic[T]):
    """What a reader found in ``path``: the entries, what is wrong, and notes that are not problems (a
    preallocated tail)."""

    path: Path
    entries: list[T]
    problems: list[FileProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The entries' fields as int64 arrays (``.index``: offset, position; ``.timeindex``: timestamp, offset),
    #: for checks over every entry at once.
    columns: dict[str, np.ndarray] = field(default_factory=dict)


class OffsetIndexEntry(NamedTuple):
    offset: int  # absolute: the segment's base offset + the stored relative offset
    position: int  # file position in the segment


class TimeIndexEntry(NamedTuple):
    timestamp: int
    offset: int  # absolute


class AbortedTxn(NamedTuple):
    """One aborted transaction as its ``.txnindex`` entry records it (Kafka's ``AbortedTxn``): its producer, its
    first offset, its ABORT marker's offset, and the partition's last stable offset right after the marker."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int
    version: int = TXN_INDEX_VERSION
    at: int = -1  # the entry's byte position in the .txnindex it was read from; -1: not read from a file


class ProducerSnapshotEntry(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int  # -1: only markers written
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no transaction open

    @property
    def first_sequence(self) -> int:
        """The last batch's first sequence (``last_sequence - offset_delta``, wrapping; -1 without one)."""
        if self.last_sequence < 0:
            return self.last_sequence
        return int(seq_sub(self.last_sequence, self.offset_delta))


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def base_offset_of(path: Path) -> int | None:
    """The base offset in an index's or snapshot's file name; None if the name carries none."""
    parsed = parse_offset_file(path.name)
    return None if parsed is None else parsed[0]


def _used_entries(raw: np.ndarray, path: Path, entry_size: int) -> tuple[int, list[FileProblem], list[str]]:
    """How many of ``raw``'s rows (one per entry, as bytes) are entries: up to the first all-zero row after
    the first (a preallocated tail). Problems: non-zero bytes after that row."""
    problems: list[FileProblem] = []
    notes: list[str] = []
    n = len(raw)
    zero = np.asarray(~raw.any(axis=1))
    if n > 1 and zero.all():  # a preallocated index with no entry yet
        notes.append(f"preallocated: {n:,} zero entries, none used")
        return 0, problems, notes
    zero[:1] = False  # the first entry may be all zeros (offset base at position 0)
    ends = np.flatnonzero(zero)
    if not len(ends):
        return n, problems, notes
    used = int(ends[0])
    rest = raw[used:]
    if rest.any():
        first = used + int(np.flatnonzero(rest.any(axis=1))[0])
        problems.append(FileProblem(path, first * entry_size, "index_garbage",
                                    f"non-zero entry after the zero entry at position {used * entry_size} that "
                                    "ends the entries (a preallocated index holds only zeros there)"))
    notes.append(f"preallocated: {n - used:,} zero entries after the {used:,} used")
    return used, problems, notes


def _read_entries(path: Path, entry_size: int, what: str) -> tuple[bytes, int, list[FileProblem]]:
    """The bytes of an index file of ``entry_size``-byte entries, how many whole entries they hold, and the
    problem of a partial trailing entry."""
    data = path.read_bytes()
    n, extra = divmod(len(data), entry_size)
    problems = []
    if extra:
        problems.append(FileProblem(path, n * entry_size, "index_partial_entry",
                                    f"{extra} trailing byte(s), not a whole {entry_size}-byte {what} entry "
                                    f"(the file is {len(data):,} bytes)"))
    return data, n, problems


def _read_index(path: Path, entry_size: int, what: str,
                columns: tuple[str, str]) -> tuple[np.ndarray, np.ndarray, list[FileProblem], list[str]]:
    """The used entries of a preallocated index (``.index``, ``.timeindex``) of two fields whose numpy dtypes are
    ``columns``: ``(first fields, second fields)`` as int64 arrays, problems and notes."""
    data, n, problems = _read_entries(path, entry_size, what)
    raw = np.frombuffer(data, np.uint8, count=n * entry_size).reshape(n, entry_size)
    used, more, notes = _used_entries(raw, path, entry_size)
    problems += more
    fields = np.frombuffer(data, np.dtype([("first", columns[0]), ("second", columns[1])]), count=used)
    return fields["first"].astype(np.int64), fields["second"].astype(np.int64), problems, notes


def read_offset_index(path: str | os.PathLike[str], base_offset: int | None = None,
                      entries: bool = True) -> FileRead[OffsetIndexEntry]:
    """The entries of a ``.index`` (``base_offset``: the segment's; by default from the file name). Problems:
    a partial trailing entry, non-zero bytes in the preallocated tail, a negative relative offset or position,
    entries whose offset or position does not rise (Kafka appends both strictly rising)."""
    path = Path(path)
    base = _base(path, base_offset)
    relative, position, problems, notes = _read_index(path, OFFSET_INDEX_ENTRY, "offset index", (">i4", ">i4"))
    problems += _not_rising(path, OFFSET_INDEX_ENTRY, base + relative, "offset", strictly=True)
    problems += _not_rising(path, OFFSET_INDEX_ENTRY, position, "position", strictly=True)
    for name, values in (("relative offset", relative), ("position", position)):
        bad = np.flatnonzero(values < 0)
        if len(bad):
            k = int(bad[0])
            problems.append(FileProblem(path, k * OFFSET_INDEX_ENTRY, "index_negative",
                                        f"entry {k}: {name} {int(values[k])} is negative"))
    rows = [OffsetIndexEntry(base + r, p) for r, p in zip(relative.tolist(), position.tolist(), strict=True)] \
        if entries else []  # entries=False: the columns only (an audit checks them all at once)
    return FileRead(path, rows, problems, notes, {"offset": base + relative, "position": position})


def read_sound_indexes(contents: Sequence[tuple[bytes, int]], time_index: bool
                       ) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """The bytes of many ``.index`` files (``time_index``: ``.timeindex``), each with its segment's base offset,
    checked in one pass over all their entries: per file, its columns as :func:`read_offset_index` (``offset``,
    ``position``) or :func:`read_time_index` (``timestamp``, ``offset``) gives them, when the file is sound: whole
    entries, none all-zero after the first (no preallocated tail), and nothing that reader would call a problem.
    None for any other file: reading it with that reader tells what is wrong (or notes its preallocated tail)."""
    entry_size = TIME_INDEX_ENTRY if time_index else OFFSET_INDEX_ENTRY
    datas = [data for data, _ in contents]
    whole = [len(data) % entry_size == 0 for data in datas]
    counts = np.array([len(data) // entry_size if ok else 0 for data, ok in zip(datas, whole, strict=True)],
                      np.int64)
    joined = b"".join(data for data, ok in zip(datas, whole, strict=True) if ok)
    fields = np.frombuffer(joined, [("timestamp", ">i8"), ("relative", ">i4")] if time_index else
                           [("relative", ">i4"), ("position", ">i4")])
    relative = fields["relative"].astype(np.int64)
    second = fields["timestamp"] if time_index else fields["position"]
    second = second.astype(np.int64)
    starts = np.cumsum(counts) - counts
    later = np.ones(len(relative), bool)  # entries after their file's first
    later[starts[counts > 0]] = False
    bad = later & (relative == 0) & (second == 0)  # an all-zero entry after the first: a preallocated tail
    step_relative, step_second = np.diff(relative, prepend=0), np.diff(second, prepend=0)
    if time_index:  # timestamps rise strictly, offsets never fall
        bad |= later & ((step_second <= 0) | (step_relative < 0))
    else:  # both rise strictly, neither is negative
        bad |= (later & ((step_relative <= 0) | (step_second <= 0))) | (relative < 0) | (second < 0)
    sound = np.array(whole, bool)
    sound[np.repeat(np.arange(len(contents)), counts)[bad]] = False
    offsets = relative
    offsets += np.repeat(np.array([base for _, base in contents], np.int64), counts)
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for k, (start, count) in enumerate(zip(starts.tolist(), counts.tolist(), strict=True)):
        if not sound[k]:
            out.append(None)
        elif time_index:
            out.append((second[start:start + count], offsets[start:start + count]))
        else:
            out.append((offsets[start:start + count], second[start:start + count]))
    return out


def read_time_index(path: str | os.PathLike[str], base_offset: int | None = None,
                    entries: bool = True) -> FileRead[TimeIndexEntry]:
    """The entries of a ``.timeindex``. Problems: a partial trailing entry, non-zero bytes in the preallocated
    tail, timestamps that do not rise strictly or offsets that fall (Kafka appends an entry only for a larger
    timestamp, at an offset no smaller than the last)."""
    path = Path(path)
    base = _base(path, base_offset)
    timestamp, relative, problems, notes = _read_index(path, TIME_INDEX_ENTRY, "time index", (">i8", ">i4"))
    problems += _not_rising(path, TIME_INDEX_ENTRY, timestamp, "timestamp", strictly=True)
    problems += _not_rising(path, TIME_INDEX_ENTRY, base + relative, "offset", strictly=False)
    rows = [TimeIndexEntry(t, base + r) for t, r in zip(timestamp.tolist(), relative.tolist(), strict=True)] \
        if entries else []
    return FileRead(path, rows, problems, notes, {"timestamp": timestamp, "offset": base + relative})


def read_txn_index(path: str | os.PathLike[str], base_offset: int | None = None) -> FileRead[AbortedTxn]:
    """The aborted transactions of a ``.txnindex``. Problems: a partial trailing entry (Kafka: "the last entry
    is incomplete"), a version other than 0, a last offset below the first or below the segment's base offset
    (Kafka's sanity check), a last stable offset past the marker."""
    path = Path(path)
    base = _base(path, base_offset)
    data, n, problems = _read_entries(path, TXN_INDEX_ENTRY, "transaction index")
    entries = []
    for k in range(n):
        at = k * TXN_INDEX_ENTRY
        version, producer_id, first, last, stable = _TXN.unpack_from(data, at)
        entry = AbortedTxn(producer_id, first, last, stable, version, at)
        entries.append(entry)
        if entry.version != TXN_INDEX_VERSION:
            problems.append(FileProblem(path, at, "txnindex_version",
                                        f"aborted transaction version {entry.version}, expected {TXN_INDEX_VERSION}"))
        elif entry.last_offset < entry.first_offset:
            problems.append(FileProblem(path, at, "txnindex_offsets",
                                        f"aborted transaction of producer {entry.producer_id}: last offset "
                                        f"{entry.last_offset} is below its first offset {entry.first_offset}"))
        elif entry.last_offset < base:
            problems.append(FileProblem(path, at, "txnindex_offsets",
                                        f"aborted transaction of producer {entry.producer_id}: last offset "
                                        f"{entry.last_offset} is below the segment's base offset {base}"))
        elif entry.last_stable_offset > entry.last_offset + 1:
            problems.append(FileProblem(path, at, "txnindex_offsets",
                                        f"aborted transaction of producer {entry.producer_id}: last stable offset "
                                        f"{entry.last_stable_offset} is past its marker's offset "
                                        f"{entry.last_offset} + 1"))
    return FileRead(path, entries, problems)


def read_snapshot(path: str | os.PathLike[str]) -> FileRead[ProducerSnapshotEntry]:
    """The producers of a ``.snapshot``. Problems: shorter than its header, a version other than 1, a CRC that
    does not match (Kafka deletes such a snapshot and loads the next older one), a negative count, entries
    running past the end; bytes after the last entry are noted (Kafka ignores them, the CRC covers them)."""
    path = Path(path)
    data = path.read_bytes()
    problems: list[FileProblem] = []
    notes: list[str] = []
    if len(data) < SNAPSHOT_HEADER:
        problems.append(FileProblem(path, 0, "snapshot_short",
                                    f"{len(data)} bytes, shorter than the {SNAPSHOT_HEADER}-byte header (version "
                                    "i16, crc u32, count i32)"))
        return FileRead(path, [], problems)
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        problems.append(FileProblem(path, 0, "snapshot_version",
                                    f"snapshot version {version}, expected {SNAPSHOT_VERSION}"))
    computed = crc32c(data[6:])
    if computed != crc:
        problems.append(FileProblem(path, 2, "crc_mismatch",
                                    f"snapshot CRC mismatch: stored {crc:#010x}, computed {computed:#010x} "
                                    "(Kafka deletes it and loads the next older snapshot)"))
    if count < 0:
        problems.append(FileProblem(path, 6, "snapshot_count", f"producer count {count} is negative"))
        return FileRead(path, [], problems, notes)
    room = (len(data) - SNAPSHOT_HEADER) // SNAPSHOT_ENTRY
    if count > room:
        problems.append(FileProblem(path, SNAPSHOT_HEADER + room * SNAPSHOT_ENTRY, "snapshot_short",
                                    f"{count} producers declared, the file holds {room} whole entries"))
    entries = [ProducerSnapshotEntry(*_SNAPSHOT_ENTRY.unpack_from(data, SNAPSHOT_HEADER + k * SNAPSHOT_ENTRY))
               for k in range(min(count, room))]
    end = SNAPSHOT_HEADER + min(count, room) * SNAPSHOT_ENTRY
    if count <= room and end < len(data):
        notes.append(f"{len(data) - end} byte(s) after the last entry (position {end}), not read")
    return FileRead(path, entries, problems, notes)


def _read_checkpoint(path: Path, line_form: str,
                     width: int) -> tuple[list[tuple[int, int, list[str]]], list[FileProblem]]:
    """The entry lines of a Kafka ``CheckpointFile`` (version line 0, count line, one entry per line), each as
    ``(line number, byte position, fields)``, and the problems of its frame (version, count, empty)."""
    data = path.read_bytes()
    problems: list[FileProblem] = []
    lines: list[tuple[int, str]] = []
    start = 0
    for raw in data.split(b"\n"):
        lines.append((start, raw.decode("utf-8", "replace").strip()))
        start += len(raw) + 1
    if lines and lines[-1][1] == "":
        lines.pop()

    def problem(line: int, kind: str, message: str) -> None:
        problems.append(FileProblem(path, lines[line][0] if line < len(lines) else len(data), kind,
                                    f"line {line + 1}: {message}"))

    if not lines:
        problem(0, "checkpoint_malformed", "empty file (expected a version line)")
        return [], problems
    if lines[0][1] != str(CHECKPOINT_VERSION):
        problem(0, "checkpoint_version", f"version {lines[0][1]!r}, expected {CHECKPOINT_VERSION}")
        return [], problems
    if len(lines) < 2 or not lines[1][1].isdigit():
        problem(1, "checkpoint_malformed", "expected the number of entries")
        return [], problems
    entries = []
    for k, (at, text) in enumerate(lines[2:], start=2):
        parts = text.split()
        if len(parts) != width or not all(p.lstrip("-").isdigit() for p in parts[-2:]):
            problems.append(FileProblem(path, at, "checkpoint_malformed", f"line {k + 1}: {text!r} is not "
                                                                          f"'{line_form}'"))
            continue
        entries.append((k, at, parts))
    if int(lines[1][1]) != len(lines) - 2:
        problem(1, "checkpoint_count", f"{lines[1][1]} entries declared, {len(lines) - 2} line(s) follow")
    return entries, problems


def read_leader_epoch_checkpoint(path: str | os.PathLike[str]) -> FileRead[EpochEntry]:
    """The ``(epoch, start offset)`` entries of a ``leader-epoch-checkpoint``. Problems (position: the byte
    where the line starts): a version other than 0, a count that is not a number or does not match the lines,
    a malformed line, epochs or start offsets that do not rise."""
    path = Path(path)
    lines, problems = _read_checkpoint(path, "<epoch> <start offset>", 2)
    entries: list[EpochEntry] = []
    for k, at, parts in lines:
        entry = EpochEntry(int(parts[0]), int(parts[1]))
        if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset < entries[-1].start_offset):
            problems.append(FileProblem(path, at, "checkpoint_order", f"line {k + 1}: epoch {entry.epoch} from "
                                        f"offset {entry.start_offset} does not follow epoch {entries[-1].epoch} from "
                                        f"offset {entries[-1].start_offset}"))
        entries.append(entry)
    return FileRead(path, entries, problems)


class OffsetCheckpointEntry(NamedTuple):
    topic: str
    partition: int
    offset: int


def read_offset_checkpoint(path: str | os.PathLike[str]) -> FileRead[OffsetCheckpointEntry]:
    """The ``topic partition offset`` entries of one of a log directory's offset checkpoints
    (``log-start-offset-checkpoint``, ``recovery-point-offset-checkpoint``...: Kafka's ``OffsetCheckpointFile``).
    Problems as for :func:`read_leader_epoch_checkpoint`, and a partition listed twice."""
    path = Path(path)
    lines, problems = _read_checkpoint(path, "<topic> <partition> <offset>", 3)
    entries: list[OffsetCheckpointEntry] = []
    seen: set[tuple[str, int]] = set()
    for k, at, parts in lines:
        entry = OffsetCheckpointEntry(parts[0], int(parts[1]), int(parts[2]))
        if (entry.topic, entry.partition) in seen:
            problems.append(FileProblem(path, at, "checkpoint_malformed",
                                        f"line {k + 1}: {entry.topic}-{entry.partition} is listed twice"))
        seen.add((entry.topic, entry.partition))
        entries.append(entry)
    return FileRead(path, entries, problems)


def _base(path: Path, base_offset: int | None) -> int:
    if base_offset is not None:
        return base_offset
    parsed = base_offset_of(path)
    return 0 if parsed is None else parsed


def _not_rising(path: Path, entry_size: int, values: np.ndarray, name: str, strictly: bool) -> list[FileProblem]:
    """The first entry whose ``name`` does not rise from the entry before it (strictly or not)."""
    if len(values) < 2:
        return []
    step = np.diff(values)
    bad = np.flatnonzero(step <= 0 if strictly else step < 0)
    if not len(bad):
        return []
    k = int(bad[0]) + 1
    rule = "above" if strictly else "at or above"
    return [FileProblem(path, k * entry_size, "index_order",
                        f"entry {k}: {name} {int(values[k])} is not {rule} the previous entry's {int(values[k - 1])}")]
