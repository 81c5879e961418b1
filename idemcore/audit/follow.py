"""The continuous audit, in-process: follow a growing source round after round, report each finding once.

:func:`follow` (and ``idemcore audit --follow SOURCE``) polls SOURCE every ``interval_ms``; each *round* reads
what is new, feeds it to one :class:`~idemcore.audit.replayer.StreamReplayer` kept across rounds (a
:class:`~idemcore.audit.logdir.LogReplayer` for a log directory: the same kernels and rules as the one-shot
audits), writes the round's new findings, and checkpoints. No Spark.

What is new
-----------
- **A Parquet directory** (``*.parquet`` under it, recursively; names or directories starting with ``.`` or
  ``_`` are ignored, as Spark and Hadoop ignore them): a file is read once, whole, in name order among the files
  not read yet, when its footer reads. Parquet writes its footer last, so a file still being written in place
  does not read yet and is waited for; writers should still write under a hidden name and rename (atomic), so a
  file appears whole. A file that does not read stops the round there (files after it in name order wait too,
  so each stream keeps its order) and is named in ``RoundResult.waiting``. Within a file each stream is replayed
  in its ordering column (``seq_no``, else ``base_offset``); across files, in file order.
- **A Kafka log directory**: per partition, the segment being read and the byte position after its last whole
  batch. Each round reads the bytes after that position (and the segments rolled since), whole batches only. A
  torn tail of the newest segment is a write in progress: waited for, not reported. A torn tail of a segment
  followed by a newer one (it rolled) is reported as the one-shot audit reports it, once. CRC failures are
  reported and not replayed, as in :func:`~idemcore.audit.logdir.audit_log_dir`. A segment retention deletes
  between a round's listing and its read is passed over; when retention removed offsets before a round read them
  (a segment read from its start begins past what was replayed), they are named and the partition's producers
  are met again midway: their next batch is accepted whatever its sequence, and a transaction open across the
  offsets removed is counted from its producer's next batch on (a marker met before any such batch is not
  replayed); in a log whose start retention deleted, a marker met before any batch of its producer is not
  replayed, as in the one-shot audit. Not done here: the index
  cross-checks and the ``__transaction_state`` confirmation of hanging transactions (judged by idle time only).

Exactly once, across restarts
-----------------------------
A round writes its findings to ``OUT/findings-<round>.parquet`` (under a hidden name, then renamed), then
replaces the checkpoint (``CHECKPOINT/follow.ckpt``, written whole then renamed: what was read, file names or
per-partition positions, and the whole replay state). A restart loads the checkpoint, deletes the findings files
of rounds after it (written by a round whose checkpoint never landed: SIGKILL between the two steps) and re-reads
from the checkpointed positions, so each finding is in exactly one findings file. The console line of a finding
is printed after the checkpoint: at most once.

The checkpoint is data only (:mod:`idemcore.audit.checkpoint`: a JSON manifest of what was read, counters and
a version, plus NumPy arrays and byte blobs, under a SHA-256), never pickle: loading it runs no code. It holds
the whole replay state (:meth:`StreamReplayer.to_checkpoint`: every producer table with every retained batch
by :func:`idemcore.engine.persist.save_state`, streams, counters, open transactions' record counts). Kafka's
producer snapshot (:mod:`idemcore.engine.snapshot`) is not used: it keeps only each producer's newest batch, so
after a restart a retry of one of the four older batches would be ``duplicate_beyond_window`` instead of
``duplicate``: a different finding. A checkpoint of another version, or damaged, or truncated, is refused
whole with one line naming it (:class:`~idemcore.audit.checkpoint.CheckpointError`).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from idemcore.audit import checkpoint as ckpt
from idemcore.audit.columns import TOPIC, required_columns
from idemcore.audit.logdir import (
    LOCATED_SCHEMA,
    LogReplayer,
    LogState,
    _located,
    _offset_spans,
    _without_markers_of_unknown_producers,
    with_places,
)
from idemcore.audit.replayer import StreamReplayer, TaskResult, feed_in_order
from idemcore.audit.report import DEFAULT_HANGING_AFTER_MS, AuditReport
from idemcore.errors import one_line
from idemcore.kernels import Backend, get_backend
from idemcore.kernels import header_scan_reference as scan_codes
from idemcore.kernels.abi import HeaderScanColumns
from idemcore.kernels.columns import COLUMNS
from idemcore.record.kafka_files import FileProblem, PartitionFiles, SegmentFiles, list_log_dir
from idemcore.record.kafka_files.names import is_log_path
from idemcore.record.kafka_files.segment import (
    SCAN_COLUMNS,
    STOP_TORN_TAIL,
    STOP_ZERO_PADDING,
    SegmentScan,
    _stop,
)
from idemcore.record.parquet_files import (
    READ_ERRORS,
    checked,
    footer_written,
    open_parquet,
    read_parquet,
    unreadable,
    write_parquet,
)

#: In the findings (else checkpoint) directory: the file a follower holds locked.
LOCK_FILE = ".follow-lock"
#: The checkpoint file in the checkpoint directory.
CHECKPOINT_FILE = "follow.ckpt"
#: Version of the checkpoint's contents (1: a pickle, no longer read).
CHECKPOINT_VERSION = 2
#: Findings files in ``out``: ``findings-<round, 8 digits>.parquet``.
FINDINGS_PREFIX = "findings-"
PARQUET = "parquet"
LOG_DIR = "logdir"
DEFAULT_INTERVAL_MS = 1000


@dataclass
class RoundResult:
    """One round: what was read, the new findings, and the state after it.

    ``findings``: the batches with a finding read this round (the report's findings columns; a log directory's
    also ``file``, ``segment`` and ``position``, as in its one-shot audit's ``findings.parquet``). ``report``: an
    :class:`AuditReport` of the state after the round (partitions, open and hanging transactions, counts) whose
    ``findings`` are this round's only.
    ``read``: Parquet files read, or ``topic-partition`` names that advanced. ``waiting``: what is incomplete
    (a file whose footer does not read, a torn tail being written). ``problems``: file problems found this round.
    """

    round: int
    batches: int
    total_batches: int
    findings: pa.Table
    report: AuditReport
    read: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    problems: list[Any] = field(default_factory=list)  # FileProblem (a log directory), WireProblem (a cluster)
    findings_file: Path | None = None
    seconds: float = 0.0


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomically(path: Path, write: Callable[[Path], object], fsync: bool = True) -> None:
    """``write`` a hidden file beside ``path``, fsync it, rename it to ``path``, fsync the directory (``fsync``
    False: the rename alone, atomic for the process; a crash of the machine may lose the last round)."""
    partial = path.with_name(f".{path.name}.partial")
    write(partial)
    if fsync:
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
    os.replace(partial, path)
    if fsync:
        _fsync_dir(path.parent)


def findings_files(out: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """The findings files a follow wrote in ``out``, by round."""
    found = []
    for path in Path(out).glob(f"{FINDINGS_PREFIX}*.parquet"):
        digits = path.name[len(FINDINGS_PREFIX):-len(".parquet")]
        if digits.isdigit():
            found.append((int(digits), path))
    return sorted(found)


def read_findings(out: str | os.PathLike[str]) -> pa.Table:
    """Every finding a follow wrote in ``out``, sorted like a report's (topic, partition, ordering column)."""
    files = findings_files(out)
    if not files:
        raise FileNotFoundError(f"{out}: no {FINDINGS_PREFIX}*.parquet")
    table = pa.concat_tables([read_parquet(path) for _, path in files], promote_options="default")
    order = "seq_no" if "seq_no" in table.column_names else "base_offset"
    return table.sort_by([(TOPIC, "ascending"), ("partition", "ascending"), (order, "ascending")])


def source_kind(source: str | os.PathLike[str]) -> str:
    """``logdir`` for a Kafka log directory (or partition directory), else ``parquet``."""
    return LOG_DIR if is_log_path(source) else PARQUET


def _lock(directory: Path | None) -> int | None:
    """An exclusive lock, for this follower's life, on ``.follow-lock`` in ``directory``: a second follower
    process there would delete the first's partial findings files and write every finding twice. A POSIX record
    lock (``lockf``): per process, so followers one after another in one process (a restart in a test) take it
    again; released when the process dies."""
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        raise ValueError(f"{directory} is in use by another `idemcore audit --follow` process; one follower "
                         "per directory") from None
    return descriptor


def drop_later_rounds(out: Path | None, round_: int, resumed: bool, checkpoint_file: Path | None) -> None:
    """After a follower loaded its checkpoint (``resumed``: there was one, at round ``round_``): the findings files
    in ``out`` of later rounds are deleted (written by a round whose checkpoint never landed: that round runs
    again), unless no checkpoint was resumed, when they are an earlier follow's and refused; the checkpoint's
    directory is made."""
    if out is not None:
        later = [p for k, p in findings_files(out) if k > round_]
        if later and checkpoint_file is None:
            raise FileExistsError(f"{out} holds findings of an earlier follow; give its checkpoint directory, or "
                                  "another --out")
        if later and not resumed:
            raise FileExistsError(f"{out} holds findings of an earlier follow but {checkpoint_file} does not exist; "
                                  "give its checkpoint directory, or another --out")
        for stale in later:
            stale.unlink()
    if checkpoint_file is not None:
        checkpoint_file.parent.mkdir(parents=True, exist_ok=True)


class _Rounds(Protocol):
    """What :func:`end_round` needs of a follower (a log directory's or Parquet's, or a cluster's)."""

    round: int
    out: Path | None
    fsync: bool
    hanging_after_ms: int
    _failed: bool

    def _save(self) -> None: ...


def end_round(follower: _Rounds, result: TaskResult, findings: pa.Table, *, started: float, order_by: str,
              source: str, batches_before: int, batches: int, read: list[str], waiting: list[str],
              problems: list[Any]) -> RoundResult:
    """The end every follower's round shares: the round counted, its findings written (atomically, none: no file),
    the checkpoint saved, the round's report."""
    follower.round += 1
    findings_file = None
    if follower.out is not None and findings.num_rows:
        findings_file = follower.out / f"{FINDINGS_PREFIX}{follower.round:08d}.parquet"
        _write_atomically(findings_file, lambda partial: write_parquet(findings, partial), follower.fsync)
    follower._save()
    follower._failed = False
    seconds = time.perf_counter() - started
    report = AuditReport.from_results([result], order_by=order_by, seconds=seconds,
                                      hanging_after_ms=follower.hanging_after_ms, source=source)
    return RoundResult(follower.round, batches - batches_before, batches, findings, report, read, waiting, problems,
                       findings_file, seconds)


class Follower:
    """The continuous audit's engine: :meth:`poll` runs one round. Resumes from ``checkpoint`` if it holds one.

    ``out``: where findings files go (None: nowhere; the round results still carry them). ``checkpoint``: a
    directory (None: no restart). ``order_by``/``origin``: as the Parquet audit's (a log directory is always
    ``base_offset`` and the CLIENT rules with its gap rule, as :func:`audit_log_dir`). ``fsync``: make each
    round's findings and checkpoint durable against a machine crash too (a killed process needs only the renames).
    """

    def __init__(self, source: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
                 checkpoint: str | os.PathLike[str] | None = None, *, order_by: str | None = None,
                 origin: str = "client", backend: str | Backend | None = None,
                 hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS, verify_crc: bool = True, fsync: bool = True):
        self.source = Path(source)
        self.fsync = fsync
        if not self.source.exists():
            raise FileNotFoundError(f"{source}: no such file or directory")
        if self.source.is_dir() and (self.source / "data").is_dir() and not is_log_path(self.source):
            self.source = self.source / "data"  # a dataset written by `idemcore generate`
        self.out = Path(out) if out is not None else None
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.backend = get_backend(backend)
        self.hanging_after_ms = hanging_after_ms
        self.verify_crc = verify_crc
        self.kind = source_kind(self.source)
        self.order_by = order_by
        self.origin = origin
        self.round = 0
        self.read_files: set[str] = set()
        self.positions: dict[str, tuple[int, int]] = {}  # log dir: "topic-partition" -> (segment base, byte)
        self.reported: set[tuple[str, int | None, str]] = set()  # file problems already reported
        self.replayer: StreamReplayer | None = None
        self.resumed = False
        self._failed = False
        for name, where in (("out", self.out), ("checkpoint", self.checkpoint)):
            if where is not None and where.exists() and not where.is_dir():
                raise ValueError(f"{name} {where} is a file, not a directory: give a directory (new or its own)")
            if where is not None and self.source.is_dir() and (
                    self.source.resolve() == where.resolve() or self.source.resolve() in where.resolve().parents):
                raise ValueError(f"{name} {where} is inside the followed {self.source}: it would be read as input")
        # Both directories: two followers sharing a checkpoint would overwrite each other's rounds.
        self._locks: list[int | None] = []
        try:
            for where in dict.fromkeys((self.out, self.checkpoint)):
                self._locks.append(_lock(where))
        except BaseException:
            self.close()
            raise
        if self.out is not None:
            for partial in self.out.glob(f".{FINDINGS_PREFIX}*.partial"):
                partial.unlink()
        self._load()

    def close(self) -> None:
        """Let another follower take the directory (a dead process releases it too)."""
        for descriptor in self._locks:
            if descriptor is not None:
                os.close(descriptor)
        self._locks = []

    # ------------------------------------------------------------ checkpoint

    def _checkpoint_path(self) -> Path | None:
        return self.checkpoint / CHECKPOINT_FILE if self.checkpoint is not None else None

    def _load(self) -> None:
        path = self._checkpoint_path()
        if path is not None and path.exists():
            saved, arrays = ckpt.decode(path.read_bytes(), CHECKPOINT_VERSION, path)
            if saved.get("source") != str(self.source.resolve()) or saved.get("kind") != self.kind:
                raise ValueError(f"{path} is the checkpoint of following {saved.get('source')} ({saved.get('kind')}), "
                                 f"not {self.source.resolve()} ({self.kind})")
            if self.out is not None and "out" in saved and saved["out"] != self._out_name():
                # (findings files of rounds after the checkpoint's are removed below: only its own out's)
                raise ValueError(f"{path} is the checkpoint of a follow writing its findings to {saved['out']}, not "
                                 f"{self._out_name()}: give that --out, or another checkpoint directory")
            ckpt.restore(path, lambda: self._restore(saved, arrays))
            self.resumed = True
        drop_later_rounds(self.out, self.round, self.resumed, path)

    def _out_name(self) -> str | None:
        return str(self.out.resolve()) if self.out is not None else None

    def _save(self) -> None:
        path = self._checkpoint_path()
        if path is None:
            return
        values: dict[str, Any] = {
            "source": str(self.source.resolve()), "kind": self.kind, "out": self._out_name(), "round": self.round,
            "read_files": sorted(self.read_files), "positions": {k: list(v) for k, v in self.positions.items()},
            "reported": sorted([list(mark) for mark in self.reported], key=str), "order_by": self.order_by,
            "origin": self.origin, "replayer": None}
        arrays: dict[str, np.ndarray | bytes] = {}
        if self.replayer is not None:
            replay, replay_arrays = self.replayer.to_checkpoint()
            if isinstance(self.replayer.state, LogState):
                replay["committed_gaps"] = int(self.replayer.state.committed_gaps)
                replay_arrays["log_end"] = self.replayer.state._log_end
            values["replayer"] = replay
            arrays.update({f"replayer.{name}": value for name, value in replay_arrays.items()})
        data = ckpt.encode(values, arrays, CHECKPOINT_VERSION)

        _write_atomically(path, lambda partial: partial.write_bytes(data), self.fsync)

    def _restore(self, saved: dict[str, Any], arrays: dict[str, Any]) -> None:
        """The state of a decoded checkpoint (all of it, or an exception and nothing changed)."""
        round_ = int(saved["round"])
        read_files = {str(name) for name in saved["read_files"]}
        positions = {str(k): (int(v[0]), int(v[1])) for k, v in saved["positions"].items()}
        reported = {(str(p), None if at is None else int(at), str(kind)) for p, at, kind in saved["reported"]}
        replayer: StreamReplayer | None = None
        if saved["replayer"] is not None:
            replay = saved["replayer"]
            prefix = "replayer."
            mine = {name[len(prefix):]: value for name, value in arrays.items() if name.startswith(prefix)}
            if self.kind == LOG_DIR:
                replayer = LogReplayer(self.backend)
                state = replayer.state
                assert isinstance(state, LogState)
                state.committed_gaps, state._log_end = int(replay["committed_gaps"]), mine["log_end"].astype(np.int64)
            else:
                replayer = StreamReplayer(replay["origin"], replay["order_by"], self.backend)
            replayer.restore_checkpoint(replay, mine)
        self.round, self.read_files, self.positions, self.reported = round_, read_files, positions, reported
        self.order_by, self.origin, self.replayer = saved["order_by"], saved["origin"], replayer

    # ------------------------------------------------------------ a round

    def poll(self) -> RoundResult:
        """Read what is new, replay it, write its findings, checkpoint; return the round's result."""
        if self._failed:
            raise RuntimeError("an earlier round of this Follower failed half-way: its replay state is not the "
                               "checkpoint's; make a new Follower (it resumes from the checkpoint)")
        self._failed = True  # until the round ends: an exception leaves the state ahead of the checkpoint
        started = time.perf_counter()
        read: list[str] = []
        waiting: list[str] = []
        problems: list[FileProblem] = []
        if self.replayer is not None:
            self.replayer._findings.clear()
        before = self.replayer.batches if self.replayer is not None else 0
        if self.kind == PARQUET:
            extra = self._poll_parquet(read, waiting)
        else:
            extra = self._poll_log_dir(read, waiting, problems)
        replayer = self._replayer()
        result = replayer.finish()
        findings = result.findings
        if self.kind == LOG_DIR:  # (feed order, as the findings)
            findings = with_places(findings, pa.concat_tables(extra) if extra else LOCATED_SCHEMA.empty_table())
        return end_round(self, result, findings, started=started, order_by=replayer.order_by,
                         source=str(self.source), batches_before=before, batches=replayer.batches, read=read,
                         waiting=waiting, problems=list(problems))

    def _replayer(self) -> StreamReplayer:
        if self.replayer is None:
            if self.kind == LOG_DIR:
                self.replayer = LogReplayer(self.backend)
            else:
                self.replayer = StreamReplayer(self.origin, self.order_by or "seq_no", self.backend)
        return self.replayer

    # ------------------------------------------------------------ Parquet

    def _new_parquet_files(self) -> list[tuple[str, Path]]:
        if self.source.is_file():
            files = [self.source]
        else:
            files = [p for p in self.source.rglob("*.parquet")
                     if not any(part.startswith((".", "_")) for part in p.relative_to(self.source).parts)]
        named = sorted((str(p.relative_to(self.source)) if p != self.source else p.name, p) for p in files)
        return [(name, path) for name, path in named if name not in self.read_files]

    def _poll_parquet(self, read: list[str], waiting: list[str]) -> list[pa.Table]:
        for name, path in self._new_parquet_files():
            try:
                parquet = open_parquet(path)
            except READ_ERRORS as exc:
                if footer_written(path):  # whole, so corrupt: it will not get better
                    raise unreadable(path, exc) from None
                waiting.append(f"{path}: {one_line(exc)}")  # incomplete: no footer yet
                break
            try:
                table = checked(parquet.read())
            except READ_ERRORS as exc:  # its footer is written, so the file is whole: corrupt
                raise unreadable(path, exc) from None
            if self.replayer is None:
                _, self.order_by = required_columns(table.schema.names, self.order_by)
            try:
                names, _ = required_columns(table.schema.names, self.order_by)
                feed_in_order(table.select(names), self._replayer())
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from exc
            self.read_files.add(name)
            read.append(name)
        return []


    # ------------------------------------------------------------ Kafka log directory

    def _poll_log_dir(self, read: list[str], waiting: list[str], problems: list[FileProblem]) -> list[pa.Table]:
        replayer = self._replayer()
        located: list[pa.Table] = []
        for part in list_log_dir(self.source).partitions:
            key = part.name
            # (listed: in the report even before a batch of it is read)
            stream = int(replayer.keys.encode(pa.array([part.topic]), np.array([part.partition]))[0])
            segment_base, position = self.positions.get(key, (-1, 0))
            segments = [s for s in part.segments if s.base_offset >= segment_base]
            # Offsets may have gone unread only where retention deleted a segment this follow was to read: the one
            # it was in (retention deletes the oldest first), or one deleted between the listing and its read.
            skipped = segment_base >= 0 and all(s.base_offset != segment_base for s in part.segments)
            advanced = False
            for index, segment in enumerate(segments):
                newest = index == len(segments) - 1
                start = position if segment.base_offset == segment_base else 0
                try:
                    scan = _scan_from(segment, start, part.partition, self.backend, self.verify_crc)
                except FileNotFoundError:  # deleted since the listing (retention): nothing of it to read
                    skipped = True
                    continue
                waits = newest and scan.stop in (STOP_TORN_TAIL, STOP_ZERO_PADDING)
                for problem in scan.problems():
                    if waits and problem.kind == STOP_TORN_TAIL.replace(" ", "_"):
                        continue
                    mark = (str(problem.path), problem.position, problem.kind)
                    if mark not in self.reported:
                        self.reported.add(mark)
                        problems.append(problem)
                if waits and scan.stop == STOP_TORN_TAIL:
                    waiting.append(f"{segment.log}: {scan.stop_detail}")
                if len(scan):
                    advanced = True
                    if skipped:
                        problems += _met_midway(part, segment, scan, replayer, stream)
                        skipped = False
                    self._feed_segment(part, segment, scan, replayer, located, stream)
                self.positions[key] = (segment.base_offset, scan.stop_position)
            if advanced:
                read.append(key)
        return located

    def _feed_segment(self, part: PartitionFiles, segment: SegmentFiles, scan: SegmentScan,
                      replayer: StreamReplayer, located: list[pa.Table], stream: int) -> None:
        good = scan["crc_ok"] != scan_codes.CRC_BAD
        rows = np.flatnonzero(good) if not good.all() else None
        columns = {name: scan[name] if rows is None else scan[name][rows]
                   for name in (*COLUMNS, "position", "last_offset")}
        if part.segments[0].base_offset > 0 and isinstance(replayer.state, LogState):  # as audit_log_dir does
            kept = _without_markers_of_unknown_producers(replayer.state, stream, columns, None, 0)
            if kept is not None:
                columns = {name: column[kept] for name, column in columns.items()}
        if not len(columns["position"]):
            return
        columns.update(_offset_spans(columns))
        table = pa.table({name: columns[name].view(np.bool_) if COLUMNS[name] == np.bool_ else columns[name]
                          for name in COLUMNS if name != "stream"})
        verdicts = replayer.feed(table, np.full(table.num_rows, stream, np.int32))
        found = np.flatnonzero(verdicts.finding)
        if len(found):
            located.append(_located(part, segment, columns, verdicts, found))


def _met_midway(part: PartitionFiles, segment: SegmentFiles, scan: SegmentScan,
                replayer: StreamReplayer, stream: int) -> list[FileProblem]:
    """A segment read from its start after retention deleted one this follow was to read: when its first offset is
    past every offset replayed on its partition, the offsets between went unread. The partition's producers are
    met again midway, as in a log whose start retention deleted (else each one's next batch would be a gap), a
    transaction open across the gap counted from its producer's next batch on; the offsets are named."""
    state = replayer.state
    if not isinstance(state, LogState):
        return []
    end, first = state.log_end(stream), int(scan["base_offset"][0])
    if end <= 0 or first <= end:
        return []
    dropped, in_txn = state.meet_producers_again(stream)
    replayer.forget_open_transactions(stream, in_txn)
    return [FileProblem(segment.log, 0, "unread_offsets",
                        f"offsets {end}..{first - 1} of {part.name} were removed (retention) before the follow read "
                        f"them: {dropped} producer(s) met again midway, {len(in_txn)} of them in a transaction "
                        "(counted from their next batch on)")]


def _scan_from(segment: SegmentFiles, start: int, partition: int, backend: Backend,
               verify_crc: bool) -> SegmentScan:
    """The whole batches of ``segment`` from byte ``start`` on (positions are the file's)."""
    path = segment.log
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size <= start:
            empty = {name: np.empty(0, dtype) for name, dtype in SCAN_COLUMNS.items()}
            return SegmentScan(path, segment.base_offset, size, empty, "end", start, "nothing new", backend.name,
                               verify_crc)
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            data = np.frombuffer(mapped, np.uint8)
            try:
                part = data[start:]
                cursor = np.zeros(2, np.int64)
                capacity = max(16, len(part) // scan_codes.RECORDS_AT + 1)
                capacity = min(capacity, 1 << 16)
                out = HeaderScanColumns.empty(capacity)
                count = 0
                while True:
                    count += backend.scan_headers(part, start, partition, verify_crc, cursor,
                                                  *(column[count:] for column in out))
                    if int(cursor[1]) != scan_codes.SCAN_FULL:
                        break
                    grown = HeaderScanColumns.empty(2 * len(out[0]))
                    for old, new in zip(out, grown, strict=True):
                        new[:count] = old[:count]
                    out = grown
                columns = {name: column[:count].copy() for name, column in zip(SCAN_COLUMNS, out, strict=True)}
                stop_at = start + int(cursor[0])
                stop, detail = _stop(data, stop_at, int(cursor[1]))
                del part
            finally:
                del data
    return SegmentScan(path, segment.base_offset, size, columns, stop, stop_at, detail, backend.name, verify_crc)


def follow(source: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
           checkpoint: str | os.PathLike[str] | None = None, *, interval_ms: int = DEFAULT_INTERVAL_MS,
           rounds: int | None = None, stop: Callable[[], bool] | None = None,
           on_round: Callable[[RoundResult], None] | None = None, keep: bool = True,
           order_by: str | None = None, origin: str = "client", backend: str | Backend | None = None,
           hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS, verify_crc: bool = True,
           fsync: bool = True) -> list[RoundResult]:
    """Follow ``source`` (see the module docstring): a round every ``interval_ms`` until ``rounds`` rounds ran
    (None: no bound) or ``stop()`` is true (asked after each round and while waiting); ``on_round`` is called
    with each result. Returns the rounds' results (``keep=False``: none kept, for a long run). A round
    never sleeps before it, so ``follow(..., rounds=1)`` is one immediate round."""
    follower = Follower(source, out, checkpoint, order_by=order_by, origin=origin, backend=backend,
                        hanging_after_ms=hanging_after_ms, verify_crc=verify_crc, fsync=fsync)
    return run_rounds(follower, interval_ms=interval_ms, rounds=rounds, stop=stop, on_round=on_round, keep=keep)


def run_rounds(follower: Any, *, interval_ms: int = DEFAULT_INTERVAL_MS, rounds: int | None = None,
               stop: Callable[[], bool] | None = None, on_round: Callable[[RoundResult], None] | None = None,
               keep: bool = True) -> list[RoundResult]:
    """:func:`follow`'s loop over any follower (``poll()`` a round, ``close()`` at the end): a cluster's too."""
    results: list[RoundResult] = []
    done = 0
    try:
        while True:
            result = follower.poll()
            done += 1
            if keep:
                results.append(result)
            if on_round is not None:
                on_round(result)
            if (rounds is not None and done >= rounds) or (stop is not None and stop()):
                return results
            deadline = time.monotonic() + interval_ms / 1000
            while (left := deadline - time.monotonic()) > 0:
                if stop is not None and stop():
                    return results
                time.sleep(min(left, 0.05))
    finally:
        follower.close()


def round_summary(result: RoundResult) -> dict[str, Any]:
    """A round as JSON-ready values: ``findings`` counts this round's new per-batch findings by name; hanging
    transactions are a state (``hanging_transactions``: how many now), not counted as new findings."""
    counts: dict[str, int] = {}
    for name in result.findings.column("finding").to_pylist():
        counts[name] = counts.get(name, 0) + 1
    return {"round": result.round, "batches": result.batches, "total_batches": result.total_batches,
            "findings": counts, "read": len(result.read), "waiting": result.waiting,
            "problems": [str(p) for p in result.problems],
            "open_transactions": result.report.open_txns.num_rows,
            "hanging_transactions": result.report.hanging_transactions().num_rows,
            "findings_file": str(result.findings_file) if result.findings_file else None,
            "seconds": round(result.seconds, 3)}


__all__ = ["CHECKPOINT_FILE", "Follower", "RoundResult", "findings_files", "follow", "read_findings",
           "round_summary", "source_kind"]
