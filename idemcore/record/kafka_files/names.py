"""Kafka's log directory on disk: which file is what, and the listing of a log directory.

A log directory (one of a broker's ``log.dirs``) holds one directory per partition, named
``<topic>-<partition>``: the partition is what follows the last ``-`` (topic names may themselves hold ``-`` and
``.``). A partition directory holds its segments, each named by its base offset in 20 digits
(``00000000000000000000.log`` with ``.index``, ``.timeindex`` and, once a transaction aborted, ``.txnindex``),
producer-state snapshots ``<offset>.snapshot``, ``leader-epoch-checkpoint`` and ``partition.metadata``
(Kafka's ``LogFileUtils``, ``UnifiedLog``, ``LogLoader``).

What Kafka itself would not read as part of the log is listed as ignored, with the reason: files marked
``.deleted`` (asynchronous deletion), ``.cleaned`` and ``.swap`` (an interrupted compaction, which Kafka drops or
completes on start), index files without their segment, the bookkeeping files of the log directory's root, and
partition directories renamed ``<topic>-<partition>.<id>-delete`` / ``-future`` / ``-stray``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
#: Digits of an offset in a file name (Kafka's ``LogFileUtils.filenamePrefixFromOffset``).
OFFSET_DIGITS = 20

_OFFSET_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex|\.snapshot)")
# Kafka's legal topic characters (Topic.LEGAL_CHARS); the partition is what follows the last '-'.
_PARTITION_DIR = re.compile(r"([A-Za-z0-9._-]+)-(\d+)")
_MARKED_DIR = re.compile(r"([A-Za-z0-9._-]+)-(\d+)\.([0-9a-f]{32})-(delete|future|stray)")
_MARKED_DIR_REASONS = {
    "delete": "a deleted partition's directory, renamed until Kafka removes it",
    "future": "a replica being moved between log directories (not yet the live one)",
    "stray": "a replica this broker no longer hosts (a stray log, kept until removed)",
}
#: Suffixes Kafka appends to a file it is about to drop or swap in, and what each means.
MARKED_FILE_SUFFIXES = {
    ".deleted": "marked for deletion (Kafka removes it after file.delete.delay.ms)",
    ".cleaned": "compaction output not yet swapped in (Kafka deletes it on start)",
    ".swap": "compaction output being swapped in (Kafka completes the swap on start)",
}
#: Files of a log directory's root: the broker's bookkeeping, not partition data.
ROOT_FILES = {
    "meta.properties": "the log directory's identity (not read)",
    "recovery-point-offset-checkpoint": "the broker's recovery points (not read)",
    "replication-offset-checkpoint": "the broker's high watermarks (not read)",
    "log-start-offset-checkpoint": "the broker's log start offsets (not read)",
    "cleaner-offset-checkpoint": "the log cleaner's progress (not read)",
    ".lock": "the broker's lock file (not read)",
    ".kafka_cleanshutdown": "the broker's clean-shutdown marker (not read)",
}
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
#: KRaft's metadata log: Raft records and control batches of its own (no producer ids), not producer data. Left out
#: of a log directory's listing; named directly, it is read like any partition.
METADATA_TOPIC = "__cluster_metadata"


def offset_file_name(offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for ``(42, ".log")``."""
    if offset < 0:
        raise ValueError(f"offset {offset} is negative")
    return f"{offset:0{OFFSET_DIGITS}d}{suffix}"


def parse_offset_file(name: str) -> tuple[int, str] | None:
    """``(base offset, suffix)`` of a segment, index or snapshot file name; None for any other name."""
    match = _OFFSET_FILE.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` of a partition directory's name (``my.topic-with-dashes-12`` -> ``("my.topic-with-
    dashes", 12)``); None for any other name."""
    match = _PARTITION_DIR.fullmatch(name)
    if match is None or len(match.group(1)) > 249 or match.group(1) in (".", ".."):
        return None
    return match.group(1), int(match.group(2))


@dataclass(frozen=True)
class IgnoredFile:
    """A file or directory the listing does not read, and why."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: ignored: {self.reason}"


@dataclass(frozen=True)
class SegmentFiles:
    """One segment: its ``.log`` and the index files beside it (None where absent)."""

    base_offset: int
    log: Path
    index: Path | None = None
    time_index: Path | None = None
    txn_index: Path | None = None


@dataclass(frozen=True)
class PartitionFiles:
    """A partition directory: its segments in base-offset order, its producer snapshots in offset order, its
    leader-epoch checkpoint, and what was ignored."""

    topic: str
    partition: int
    path: Path
    segments: tuple[SegmentFiles, ...] = ()
    snapshots: tuple[tuple[int, Path], ...] = ()
    leader_epoch_checkpoint: Path | None = None
    ignored: tuple[IgnoredFile, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class LogDirListing:
    """Partitions found (sorted by topic, then partition) and what was ignored outside them."""

    partitions: tuple[PartitionFiles, ...] = ()
    ignored: tuple[IgnoredFile, ...] = field(default=())

    def all_ignored(self) -> list[IgnoredFile]:
        """Every ignored file: the roots' and each partition's."""
        return [*self.ignored, *(item for p in self.partitions for item in p.ignored)]

    def lines(self) -> list[str]:
        """A readable listing: one line per partition and per segment, then every ignored file and why."""
        out = []
        for p in self.partitions:
            out.append(f"{p.path}: topic {p.topic!r} partition {p.partition}: {len(p.segments)} segment(s), "
                       f"{len(p.snapshots)} snapshot(s)"
                       + (", leader-epoch-checkpoint" if p.leader_epoch_checkpoint else ""))
            for s in p.segments:
                present = [name for name, path in (("index", s.index), ("timeindex", s.time_index),
                                                   ("txnindex", s.txn_index)) if path is not None]
                out.append(f"  {s.log.name} (base offset {s.base_offset})"
                           + (f" + {', '.join(present)}" if present else ""))
        out += [str(item) for item in self.all_ignored()]
        return out


def list_partition_dir(path: str | os.PathLike[str], only: Iterable[int] | None = None) -> PartitionFiles:
    """The files of one partition directory. ``only``: base offsets of the segments to keep (the others are
    left out without a word: the caller named the segments it wants)."""
    path = Path(path)
    parsed = parse_partition_dir(path.name)
    if parsed is None:
        raise ValueError(f"{path}: not a partition directory (expected <topic>-<partition>, the partition after "
                         "the last '-')")
    if not path.is_dir():
        raise NotADirectoryError(f"{path}: not a directory")
    wanted = None if only is None else set(only)
    logs: dict[int, Path] = {}
    indexes: dict[str, dict[int, Path]] = {INDEX_SUFFIX: {}, TIME_INDEX_SUFFIX: {}, TXN_INDEX_SUFFIX: {}}
    snapshots: list[tuple[int, Path]] = []
    checkpoint = None
    ignored: list[IgnoredFile] = []
    with os.scandir(path) as listing:  # (its entries know which are directories: no stat per file)
        entries = sorted((entry.name, entry.is_dir()) for entry in listing)
    for name, is_dir in entries:
        child = path / name
        if is_dir:
            ignored.append(IgnoredFile(child, "a directory inside a partition directory"))
            continue
        marked = next((suffix for suffix in MARKED_FILE_SUFFIXES if name.endswith(suffix)), None)
        if marked is not None:
            ignored.append(IgnoredFile(child, MARKED_FILE_SUFFIXES[marked]))
            continue
        if name == LEADER_EPOCH_CHECKPOINT:
            checkpoint = child
            continue
        if name == PARTITION_METADATA:
            ignored.append(IgnoredFile(child, "the partition's topic id (not read)"))
            continue
        offset_file = parse_offset_file(name)
        if offset_file is None:
            ignored.append(IgnoredFile(child, "not a file of Kafka's log"))
            continue
        offset, suffix = offset_file
        if suffix == SNAPSHOT_SUFFIX:
            snapshots.append((offset, child))
        elif wanted is not None and offset not in wanted:
            continue
        elif suffix == LOG_SUFFIX:
            logs[offset] = child
        else:
            indexes[suffix][offset] = child
    segments = tuple(SegmentFiles(offset, logs[offset], indexes[INDEX_SUFFIX].get(offset),
                                  indexes[TIME_INDEX_SUFFIX].get(offset), indexes[TXN_INDEX_SUFFIX].get(offset))
                     for offset in sorted(logs))
    for files in indexes.values():
        for offset, orphan in sorted(files.items()):
            if offset not in logs:
                ignored.append(IgnoredFile(orphan, "an index without its segment (Kafka deletes it on start)"))
    if wanted is not None:
        missing = sorted(wanted - set(logs))
        if missing:
            raise FileNotFoundError(f"{path / offset_file_name(missing[0], LOG_SUFFIX)}: no such segment")
    return PartitionFiles(parsed[0], parsed[1], path, segments, tuple(sorted(snapshots)), checkpoint,
                          tuple(sorted(ignored, key=lambda item: item.path)))


def _is_partition_dir(path: Path) -> bool:
    """A directory named ``<topic>-<partition>`` that holds segment files, or no partition directories."""
    if parse_partition_dir(path.name) is None:
        return False
    children = list(path.iterdir())
    if any(parse_offset_file(child.name) is not None for child in children):
        return True
    return not any(child.is_dir() and parse_partition_dir(child.name) is not None for child in children)


def is_log_path(path: str | os.PathLike[str]) -> bool:
    """Does ``path`` look like Kafka's: a segment file ``<20 digits>.log``, a partition directory holding
    segments, or a log directory with such partition directories?"""
    path = Path(path)
    if path.is_file():
        parsed = parse_offset_file(path.name)
        return parsed is not None and parsed[1] == LOG_SUFFIX
    if not path.is_dir():
        return False
    def holds_segments(directory: Path) -> bool:
        return parse_partition_dir(directory.name) is not None and any(
            (parsed := parse_offset_file(child.name)) is not None and parsed[1] == LOG_SUFFIX
            for child in directory.iterdir())
    return holds_segments(path) or any(child.is_dir() and holds_segments(child) for child in path.iterdir())


def list_log_dir(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> LogDirListing:
    """List what to read: each path is a log directory (its partition directories are listed), a partition
    directory, or a segment file ``<offset>.log`` (its partition with only the segments named).

    A partition found twice (two replicas, or a directory and one of its segments) is refused: an audit replays
    each partition once, from one copy. A path that does not exist raises FileNotFoundError.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    partitions: dict[Path, set[int] | None] = {}  # partition directory -> segments wanted (None: all)
    ignored: list[IgnoredFile] = []
    for given in map(Path, paths):
        if not given.exists():
            raise FileNotFoundError(f"{given}: no such file or directory")
        if given.is_file():
            parsed = parse_offset_file(given.name)
            if parsed is None or parsed[1] != LOG_SUFFIX:
                raise ValueError(f"{given}: not a segment file (expected <20-digit base offset>.log), a partition "
                                 "directory or a log directory")
            current = partitions.setdefault(given.parent, set())
            if current is None:
                raise ValueError(f"{given}: its partition directory {given.parent} is listed whole already")
            current.add(parsed[0])
        elif _is_partition_dir(given):
            _add_whole(partitions, given)
        else:
            with os.scandir(given) as listing:  # (its entries know which are directories: no stat per child)
                children = sorted((entry.name, entry.is_dir()) for entry in listing)
            for name, is_dir in children:
                child = given / name
                parsed_dir = parse_partition_dir(name) if is_dir else None
                if parsed_dir is not None and parsed_dir[0] == METADATA_TOPIC:
                    ignored.append(IgnoredFile(child, "KRaft's metadata log (Raft records, not producer data; name "
                                                      "it to read it anyway)"))
                elif parsed_dir is not None:
                    _add_whole(partitions, child)
                elif is_dir:
                    marked = _MARKED_DIR.fullmatch(name)
                    ignored.append(IgnoredFile(child, _MARKED_DIR_REASONS[marked.group(4)] if marked
                                               else "not a partition directory (<topic>-<partition>)"))
                else:
                    ignored.append(IgnoredFile(child, ROOT_FILES.get(name, "not a partition directory")))
    listed = [list_partition_dir(path, only) for path, only in partitions.items()]
    seen: dict[tuple[str, int], Path] = {}
    for p in listed:
        other = seen.setdefault((p.topic, p.partition), p.path)
        if other != p.path:
            raise ValueError(f"partition {p.name} is in both {other} and {p.path}: audit one replica at a time")
    listed.sort(key=lambda p: (p.topic, p.partition))
    return LogDirListing(tuple(listed), tuple(ignored))


def _add_whole(partitions: dict[Path, set[int] | None], path: Path) -> None:
    if partitions.get(path, None) is not None:
        raise ValueError(f"{path}: listed whole and by segment; give one or the other")
    partitions[path] = None
