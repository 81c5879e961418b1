"""Auditing Kafka log directories in-process: every partition's segments, scanned and replayed.

:func:`audit_log_dir` lists a log directory (or partition directories, or segment files:
:func:`idemcore.record.kafka_files.list_log_dir`), scans each segment's batch headers with the native header
scan, and replays each partition's batches, segment after segment in log order, through the same kernel and
:class:`~idemcore.audit.replayer.StreamReplayer` as the Parquet audit, ordered by ``base_offset`` (a written
log). It returns the same :class:`~idemcore.audit.report.AuditReport`, as a :class:`LogDirReport` that also
carries what the Parquet report has no room for: every finding with its segment file and byte position, the
open transactions with the file and position of their first batch, and the problems of the files themselves
(torn tails, CRC mismatches, indexes that disagree with their segment, aborted-transaction indexes that
disagree with the ABORT markers, producer snapshots Kafka would delete as corrupt).

The work is cut in two: :func:`audit_partitions` is one task's (scan, replay, cross-check and locate whole
partitions, into a :class:`LogTaskResult`), :func:`merge_log_tasks` makes the report from the tasks' results. The
in-process audit runs one task over every partition; the Spark audit
(:func:`idemcore.audit.spark.audit_log_dir_spark`) runs one per Spark task and merges the same way.

Which rules, and why (docs/rules.md §2 "Who is checked how", §5)
------------------------------------------------------------------
A leader wrote these batches after checking them as CLIENT appends; Kafka rebuilds producer state from its own
log (recovery, followers) as REPLICATION appends, which check nothing but markers and commit every batch. An
audit that replayed with REPLICATION would report nothing: no duplicate, gap or zombie is ever refused there.
So each batch is *judged* by the CLIENT rules, the ones the leader applied, against the producer state the
batches before it built: a batch a leader would have refused is a finding at its offset.

The log holds every batch, though, whatever a leader would have said, so what the state *keeps* follows the
log where the log shows the producer going on from that batch, and only there:

- ``sequence_gap``: the sequences before the batch are missing (data lost: an unclean leader election, a
  truncated or damaged log). The producer's later batches continue from this one, so the batch is committed
  to the state, as REPLICATION commits it. Left out, every later batch of the producer would be a gap again.
- every other finding is a batch apart from its producer's stream: a retry written twice (``duplicate``,
  ``duplicate_beyond_window``), a range straddling the last one (``out_of_order``), a zombie writing with an
  old epoch (``epoch_regression``, ``fenced``), a non-transactional write in an open transaction
  (``invalid_txn_state``), impossible metadata (``invalid_record``). Committing a zombie's batch would set the
  producer's epoch back, and the live producer's next batch would become a finding too. These are not
  committed: the producer's next batch is judged against its own previous one, so each anomaly in the log is
  one finding, as in the synthetic ground truth.

This is the CLIENT origin of :class:`~idemcore.protocol.codes.Origin` with one change to what a refused batch
leaves behind; the verdicts themselves (status, error code, finding, expected) are exactly the CLIENT ones.

A batch is replayed with its offset span as its record count (``last_offset_delta + 1``, Kafka's last offset and
last sequence), which is its record count unless compaction removed records; the ``records`` counted per
partition are offsets spanned.

Batches whose CRC does not match are not replayed (a corrupt batch is never served; its header may be the
damaged part) and are reported; a segment's unreadable tail (torn, bad magic, bad length) is reported and the
next segment is read. Batches are fed in file order, which is offset order in a sound log; offsets that do not
rise are reported as a problem of the file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from idemcore.audit.columns import TOPIC
from idemcore.audit.find_hanging import read_transaction_log, transaction_state_partitions
from idemcore.audit.keys import _PARTITION_BITS
from idemcore.audit.replayer import StreamReplayer, TaskResult, _from_ipc, _ipc
from idemcore.audit.report import DEFAULT_HANGING_AFTER_MS, SUMMARY_ROWS, AuditReport, ProblemsListed
from idemcore.audit.shards import ShardedState
from idemcore.engine.table import ProducerStateTable
from idemcore.engine.validate import commit_into
from idemcore.engine.verdicts import CompletedTxns, Verdicts
from idemcore.findings import Finding
from idemcore.kernels import Backend
from idemcore.kernels import rules_reference as rules
from idemcore.kernels.abi import CommitVerdicts, VerdictColumns
from idemcore.kernels.columns import COLUMNS, BatchColumns
from idemcore.protocol.codes import ControlType, Origin, Status
from idemcore.record.kafka_files import (
    FileProblem,
    LogDirListing,
    PartitionFiles,
    ScanBuffer,
    ScanFacts,
    SegmentFiles,
    SegmentScan,
    list_log_dir,
    read_offset_index,
    read_snapshot,
    read_sound_indexes,
    read_time_index,
    read_txn_index,
    scan_segment,
)

log = logging.getLogger(__name__)

#: Batches validated between two copies of a partition's state (see :class:`LogState`); grows while no gap is
#: found, shrinks around gaps.
FIRST_CHUNK = 1 << 14
MAX_CHUNK = 1 << 20
#: Problems logged one by one before a summary line.
LOGGED_PROBLEMS = 20
#: A new stream's table is sized from the producers of its first rows, this many.
SAMPLE_ROWS = 1024
INT64_MAX = np.iinfo(np.int64).max
#: Index files read and checked together (:class:`_IndexReadAhead`): at most this many segments' or bytes.
INDEX_GROUP_FILES = 256
INDEX_GROUP_BYTES = 16 << 20


# --- Replaying a written log ------------------------------------------------------------------------------------

class LogState(ShardedState):
    """Producer state of written logs: CLIENT verdicts, and a batch found after a sequence gap committed all the
    same (the module docstring says why). One small table per stream (partition), so keeping a copy of a
    partition's state costs only its own producers.

    The kernel validates a range of batches in one call and cannot be told to commit a batch it refused, so a
    range is validated from a copy of the state; if it holds a gap, the state goes back to the copy, the
    batches before the gap are validated again, the gap's batch is committed, and the range goes on after it.
    A gap costs one copy of the partition's state and at most one pass over the batches before it; a range
    without gaps, one copy.
    """

    def __init__(self, backend: Backend):
        super().__init__(Origin.CLIENT, backend)
        self.committed_gaps = 0
        self._log_end = np.zeros(0, np.int64)  # per stream: past the last offset of every batch fed

    def _assign_log_tables(self, packed: BatchColumns, bounds: np.ndarray) -> None:
        ids = packed["stream"]
        starts = bounds[:-1]  # a feed is one segment: one run
        top = int(ids[starts].max())
        if len(self._table_of) <= top:  # (doubling: a stream at a time would copy it for each)
            more = max(top + 1, 2 * len(self._table_of)) - len(self._table_of)
            self._table_of = np.r_[self._table_of, np.full(more, -1, np.int32)]
        first: dict[int, int] = {}
        for start in starts.tolist():
            first.setdefault(int(ids[start]), start)
        for stream in sorted(first):
            if self._table_of[stream] < 0:
                self._table_of[stream] = len(self.tables)
                self.tables.append(ProducerStateTable(row_capacity=_first_capacity(packed["producer_id"],
                                                                                   first[stream]),
                                                      stream_capacity=2))  # (1: full at once, grown)

    def validate(self, packed: BatchColumns) -> Verdicts:
        n = len(packed)
        out = Verdicts.allocate(n)
        completed: list[CompletedTxns] = []
        if n:
            ids = packed["stream"]
            bounds = np.r_[0, np.flatnonzero(ids[1:] != ids[:-1]) + 1, n]
            self._assign_log_tables(packed, bounds)
            self._note_log_end(packed, ids, bounds)
            for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                views = VerdictColumns(*(column[start:stop] for column in out))
                for part in self._replay(packed.slice(start, stop), int(self._table_of[ids[start]]), views):
                    part.marker[:] += start  # (the index in this call's batches)
                    completed.append(part)
        return Verdicts(*out, completed_txns=CompletedTxns.concat(completed), backend=self.backend.name)

    def validate_run(self, packed: BatchColumns, stream: int, out: VerdictColumns, log_end: int | None = None
                     ) -> Verdicts:
        """:meth:`validate` of batches of one ``stream`` (a segment's: every row's stream is ``stream``), verdicts
        written into ``out`` (as long as ``packed``): no pass to find the streams' runs. ``log_end``: the largest
        end (base offset + record count) of these batches from offset 0 up ending above their base, 0 for none,
        if known (the scan's ``log_end`` fact)."""
        n = len(packed)
        if n:
            self._assign_log_tables(packed, np.array([0, n]))
            if len(self._log_end) < len(self._table_of):
                self._log_end = np.pad(self._log_end, (0, len(self._table_of) - len(self._log_end)))
            if log_end is None:
                base = packed["base_offset"]
                ends = base + packed["record_count"]  # wraps only for impossible batches, dropped here
                ok = ends[(base >= 0) & (ends > base)]
                log_end = int(ok.max()) if len(ok) else 0
            self._log_end[stream] = max(int(self._log_end[stream]), log_end)  # (ends are never below 0)
            completed = CompletedTxns.concat(self._replay(packed, int(self._table_of[stream]), out))
        else:
            completed = CompletedTxns.empty(0)
        return Verdicts(*out, completed_txns=completed, backend=self.backend.name)

    def _note_log_end(self, packed: BatchColumns, ids: np.ndarray, bounds: np.ndarray) -> None:
        if len(self._log_end) < len(self._table_of):
            self._log_end = np.pad(self._log_end, (0, len(self._table_of) - len(self._log_end)))
        base = packed["base_offset"]
        ends = base + packed["record_count"]  # wraps only for impossible batches, dropped below
        fine = (base >= 0) & (ends > base)
        for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            ok = ends[start:stop][fine[start:stop]]
            if len(ok):
                stream = int(ids[start])
                self._log_end[stream] = max(int(self._log_end[stream]), int(ok.max()))

    def log_end_offsets(self, streams: int) -> np.ndarray:
        """Per stream: the end of the log as written, past every batch replayed, refused ones included (the
        state's own end counts only the batches it kept)."""
        ends = super().log_end_offsets(streams)
        known = min(streams, len(self._log_end))
        ends[:known] = np.maximum(ends[:known], self._log_end[:known])
        return ends

    def _table_index(self, stream: int) -> int:
        """The index in ``tables`` of ``stream``'s table, -1 for a stream with none yet."""
        return int(self._table_of[stream]) if 0 <= stream < len(self._table_of) else -1

    def knows(self, stream: int, producer_id: int) -> bool:
        """Whether the state holds ``producer_id`` on ``stream`` (a batch of it was replayed there)."""
        table = self._table_index(stream)
        return table >= 0 and self.tables[table].row_of(stream, producer_id) is not None

    def log_end(self, stream: int) -> int:
        """Past the last offset replayed on ``stream`` (0 before any)."""
        return int(self._log_end[stream]) if 0 <= stream < len(self._log_end) else 0

    def meet_producers_again(self, stream: int) -> tuple[int, np.ndarray]:
        """Drop every producer of ``stream``, after offsets retention removed unread: each one's next batch is
        then accepted whatever its epoch and sequence, as of a producer whose records retention removed. Returns
        how many were dropped and the producer ids of those that were in a transaction (its first records are
        among the offsets removed: the caller forgets what it counted of it; a marker of such a producer met
        before any new batch of it is not replayed, as in a log whose start retention deleted)."""
        table_index = self._table_index(stream)
        if table_index < 0:
            return 0, np.zeros(0, np.int64)
        table = self.tables[table_index]
        n = table.n_producers
        mine = table.row_stream[:n] == stream
        in_txn = table.row_producer_id[:n][mine & (table.row_txn_first_offset[:n] >= 0)].copy()
        return (table.remove_rows(mine, self.backend) if mine.any() else 0), in_txn

    def _replay(self, packed: BatchColumns, table: int, out: VerdictColumns) -> list[CompletedTxns]:
        columns = packed
        control = packed["is_control"]
        n = len(packed)
        completed = []
        start = 0
        chunk = FIRST_CHUNK
        while start < n:
            state = self.tables[table]
            stop = min(n, start + max(chunk, 8 * state.n_producers))
            # Nothing to copy in an empty table (a partition's first range): a new one of its size is the same.
            saved = state.copy() if state.n_producers or state.n_streams else None
            txns = self._validate_range(columns, control, start, stop, state, out)
            gaps = np.flatnonzero(out.out_finding[start:stop] == Finding.SEQUENCE_GAP)
            if not len(gaps):
                completed.append(txns)
                start = stop
                chunk = min(2 * chunk, MAX_CHUNK)
                continue
            gap = start + int(gaps[0])
            self.tables[table] = state = saved if saved is not None else ProducerStateTable(
                row_capacity=len(state.row_producer_id), stream_capacity=len(state.stream_id))
            if gap > start:  # the same batches against the same state: the same verdicts, and the state rebuilt
                completed.append(self._validate_range(columns, control, start, gap, state, out))
            self._commit_logged(columns, packed, gap, state)  # its verdict (a gap, against this state) stands
            chunk = max(64, 2 * (gap + 1 - start))
            start = gap + 1
        return completed

    def _validate_range(self, columns: BatchColumns, control: np.ndarray, start: int, stop: int,
                        state: ProducerStateTable, out: VerdictColumns) -> CompletedTxns:
        """``validate_batches`` over rows ``start..stop-1`` (``validate_into`` over a range), growing the table
        as needed."""
        completed = CompletedTxns.empty(int(np.count_nonzero(control[start:stop])))
        txns = completed.kernel_columns()
        state.counters[rules.N_COMPLETED] = 0
        state.generation += 1
        while True:
            start = self.backend.validate_batches(*columns, int(self.origin), start, stop, *state.kernel_arrays(),
                                                  *out, *txns)
            if start >= stop:
                break
            state.grow(self.backend)
        return completed.head(int(state.counters[rules.N_COMPLETED]))

    def _commit_logged(self, columns: BatchColumns, packed: BatchColumns, row: int,
                       state: ProducerStateTable) -> None:
        """Commit batch ``row`` as the log holds it (at its own offsets), as REPLICATION would."""
        first = int(packed["base_offset"][row])
        count = int(packed["record_count"][row])
        if first < 0:
            first = state.next_offset(int(packed["stream"][row]))
        if count < 1 or first > INT64_MAX - count:
            return  # an impossible batch: nothing to commit
        status = np.empty(row + 1, np.int8)
        base = np.empty(row + 1, np.int64)
        last = np.empty(row + 1, np.int64)
        status[row], base[row], last[row] = Status.APPENDED, first, first + count - 1
        commit_into(self.backend, columns, row, row + 1, state, CommitVerdicts(status, base, last))
        self.committed_gaps += 1


def _first_capacity(producer_id: np.ndarray, start: int) -> int:
    """Rows for a stream's table, from the producers of its first rows: twice as many as the first
    :data:`SAMPLE_ROWS` name, at least 16 (the table doubles when short; each doubling copies its rows and
    rebuilds its index)."""
    sample = np.sort(producer_id[start:start + SAMPLE_ROWS])
    return max(16, 2 * (1 + int(np.count_nonzero(sample[1:] != sample[:-1]))))


class LogReplayer(StreamReplayer):
    """A :class:`StreamReplayer` over written logs: ordered by ``base_offset``, state kept by :class:`LogState`."""

    def __init__(self, backend: str | Backend | None = None):
        super().__init__(Origin.CLIENT, order_by="base_offset", backend=backend)
        self.state: LogState = LogState(self.backend)
        self._verdicts = Verdicts.allocate(0)  # reused by feed_segment

    def stream_of(self, topic: str, partition: int) -> int:
        """The stream of one (topic, partition), numbered as :meth:`StreamKeys.encode` numbers it."""
        keys = self.keys
        return keys._id_of((keys._topic_code(topic) << _PARTITION_BITS) | int(partition))

    def feed_packed(self, packed: BatchColumns) -> Verdicts:
        """:meth:`feed` of batches already packed and checked (a segment's scan: its ``stream`` column holds
        the streams), without making a table of them and converting it back."""
        verdicts = self.state.validate(packed)
        self.batches += len(verdicts)
        if self.collect and len(verdicts):
            self._count(packed, verdicts, timestamps=True)
            self._keep_findings(packed, verdicts, None)  # (base_offset is a packed column)
        return verdicts

    def feed_segment(self, packed: BatchColumns, stream: int, facts: ScanFacts | None = None) -> Verdicts:
        """:meth:`feed_packed` of one segment's batches, every row of ``stream``: validated by
        :meth:`LogState.validate_run` into verdict columns reused from feed to feed (the verdicts returned are
        valid until the next call), counted by :meth:`_count_run`. ``facts``: the scan's, if its rows are exactly
        these batches as fed (no row left out, no record count changed)."""
        n = len(packed)
        if len(self._verdicts.out_status) < n:
            self._verdicts = Verdicts.allocate(max(n, 2 * len(self._verdicts.out_status)))
        out = VerdictColumns(*(column[:n] for column in self._verdicts))
        state = self.state
        assert isinstance(state, LogState)  # (set in __init__; typed as the base's)
        verdicts = state.validate_run(packed, stream, out, None if facts is None else facts.log_end)
        self.batches += n
        if self.collect and n:
            self._count_run(packed, verdicts, stream, facts)
            self._keep_findings(packed, verdicts, None)
        return verdicts

    def _count_run(self, packed: BatchColumns, verdicts: Verdicts, stream: int, facts: ScanFacts | None) -> None:
        """:meth:`StreamReplayer._count` of a feed whose rows are all of ``stream`` (with timestamps): the same
        counters, with scalars for the per-stream sums, and sums the scan already made (``facts``) taken from it."""
        size = len(self.keys)
        counters = self._counters
        for name, array in counters.items():
            if len(array) < size:
                counters[name] = np.concatenate([array, np.zeros(size - len(array), np.int64)])
        n = len(packed)
        status = verdicts.status
        not_appended = np.flatnonzero(status != Status.APPENDED)
        count = packed["record_count"]
        records = int(count.sum(dtype=np.int64)) if facts is None else facts.records
        duplicates = rejected = 0
        if len(not_appended):
            refused = status[not_appended]
            duplicates = int(np.count_nonzero(refused == Status.DUPLICATE))
            rejected = int(np.count_nonzero(refused == Status.REJECTED))
            records -= int(count[not_appended].sum(dtype=np.int64))
        counters["batches"][stream] += n
        counters["duplicates"][stream] += duplicates
        counters["rejected"][stream] += rejected
        counters["appended"][stream] += n - duplicates - rejected
        counters["records"][stream] += records
        txns = verdicts.completed_txns
        if len(txns):
            counters["aborted_txns"] += np.bincount(txns.stream[txns.aborted], minlength=size)
            counters["committed_txns"] += np.bincount(txns.stream[~txns.aborted], minlength=size)
        ids = packed["stream"]
        is_txn, is_control = packed["is_transactional"], packed["is_control"]
        some = is_txn.any() or is_control.any() if facts is None else facts.transactional or facts.control
        txn = np.flatnonzero(is_txn | is_control) if some else None
        self._count_transactional(packed, verdicts, txn, size, timestamps=True)
        stamps = packed["max_timestamp"]
        smallest, largest = (int(stamps.min()), int(stamps.max())) if facts is None else \
            (facts.min_timestamp, facts.max_timestamp)
        self._timeline.add(ids, stamps, size, np.array([0, n]), (smallest, largest))
        self.min_timestamp = min(self.min_timestamp, smallest)
        self.max_timestamp = max(self.max_timestamp, largest)


# --- The report ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LogDirReport(ProblemsListed, AuditReport):
    """An :class:`AuditReport` of Kafka log directories, with what its tables have no column for.

    ``findings`` also has :data:`PLACE_FINDING_COLUMNS` (``file``, ``segment``, ``position``): :meth:`write` puts
    them in ``findings.parquet``, so each row names the batch ``idemcore dump-log`` prints at that position.
    ``located_findings``: one row per batch with a finding (topic, partition, offsets, producer, sequences,
    finding, expected) with its segment ``file`` and byte ``position``, sorted like ``findings``.
    ``located_open_txns``: ``open_txns`` with the ``file`` and ``position`` of each transaction's first batch.
    ``problems``: what is wrong in the files (:class:`FileProblem`: file, position, kind, message).
    ``listing``: what was read, and what was ignored and why.
    """

    located_findings: Any = None
    located_open_txns: Any = None
    problems: tuple[FileProblem, ...] = ()
    listing: LogDirListing | None = None

    def summary(self) -> dict[str, Any]:
        """The Parquet report's summary, plus the file problems (counts by kind and the first
        :data:`SUMMARY_ROWS`) and the first located findings."""
        summary = super().summary()
        summary["file_problems"] = {"counts": self.problem_counts(),
                                    "first": [p.to_dict() for p in self.problems[:SUMMARY_ROWS]]}
        if self.located_findings is not None:
            summary["located_findings"] = self.located_findings.slice(0, SUMMARY_ROWS).to_pylist()
        return summary


#: The columns of ``LogDirReport.located_findings``.
LOCATED_SCHEMA = pa.schema([
    (TOPIC, pa.string()), ("partition", pa.int32()), ("base_offset", pa.int64()), ("last_offset", pa.int64()),
    ("producer_id", pa.int64()), ("producer_epoch", pa.int16()), ("base_sequence", pa.int32()),
    ("last_sequence", pa.int32()), ("is_transactional", pa.bool_()), ("is_control", pa.bool_()),
    ("finding", pa.string()), ("expected", pa.int64()), ("file", pa.string()), ("position", pa.int64()),
])
#: The columns a log directory's findings have beyond a report's, in ``findings.parquet`` and in each round's file
#: of a follow: the segment ``file`` as read, the ``segment``'s path inside its log directory
#: (``<topic>-<partition>/<base offset>.log``: relative to the audited directory when a log directory is audited)
#: and the batch's byte ``position`` in it, where ``dump-log`` prints it.
PLACE_FINDING_COLUMNS = ("file", "segment", "position")


def with_places(findings: pa.Table, located: pa.Table) -> pa.Table:
    """``findings`` with :data:`PLACE_FINDING_COLUMNS` from ``located`` (:data:`LOCATED_SCHEMA` rows), row for row:
    both come from the same feeds in the same order (or were sorted alike, stably). Raises if they disagree."""
    keys = (TOPIC, "partition", "base_offset", "producer_id")
    if findings.num_rows != located.num_rows or not all(
            findings.column(name).equals(located.column(name)) for name in keys):
        raise RuntimeError(f"{findings.num_rows} findings and {located.num_rows} located findings do not match row "
                           "for row")
    files = located.column("file")
    # The last two parts of each path: every segment lies in its partition directory.
    segments = pc.replace_substring_regex(files, pattern=r"^(?:.*/)?([^/]+/[^/]+)$", replacement=r"\1")
    return findings.append_column("file", files).append_column("segment", segments).append_column(
        "position", located.column("position"))


# --- The audit ----------------------------------------------------------------------------------------------------

#: ``LogTaskResult.problems``: the file problems of a task's partitions, with what orders them in the report.
PROBLEMS_SCHEMA = pa.schema([
    (TOPIC, pa.string()), ("partition", pa.int32()),
    ("check", pa.int8()),  # FILES_CHECK or TXN_INDEX_CHECK
    ("file", pa.string()), ("position", pa.int64()), ("kind", pa.string()), ("message", pa.string()),
])
#: The two rounds of problems in a report: first every partition's files as read (scans, indexes), then every
#: partition's ``.txnindex`` cross-check; within each, partitions in listing order.
FILES_CHECK, TXN_INDEX_CHECK = 0, 1
#: The columns of ``LogTaskResult.open_txn_places``.
PLACE_COLUMNS = (TOPIC, "partition", "producer_id", "first_offset", "file", "position")


@dataclass
class _Partition:
    """What one partition's replay keeps for the cross-checks after it."""

    files: PartitionFiles
    abort_markers: dict[int, tuple[int, int, int]]  # marker offset -> (producer id, segment index, position)
    aborted: list[CompletedTxns]  # transactions the replay saw end with an ABORT (by stream)
    first_offset: int | None = None  # the first offset replayed
    last_offset: int | None = None


@dataclass(frozen=True)
class LogTaskResult:
    """What auditing some whole partitions found (:func:`audit_partitions`): the replay's :class:`TaskResult`, plus
    what only a log directory has. :func:`merge_log_tasks` merges these into a :class:`LogDirReport`; a Spark task
    sends its own as one row (:meth:`to_row`, Arrow IPC streams like :class:`TaskResult`'s).

    ``located_findings``: :data:`LOCATED_SCHEMA` rows, partition after partition. ``open_txn_places``: the file
    and position where each of ``result.open_txns`` starts (:data:`PLACE_COLUMNS`). ``problems``: the file
    problems (:data:`PROBLEMS_SCHEMA`), each partition's in the order found.
    """

    result: TaskResult
    located_findings: pa.Table
    open_txn_places: pa.Table
    problems: pa.Table

    #: The Spark schema of :meth:`to_row` (a DDL string).
    SPARK_SCHEMA = (f"{TaskResult.SPARK_SCHEMA}, located_findings binary, open_txn_places binary, "
                    "problems binary")

    def to_row(self) -> dict[str, Any]:
        return {**self.result.to_row(), "located_findings": _ipc(self.located_findings),
                "open_txn_places": _ipc(self.open_txn_places), "problems": _ipc(self.problems)}

    @classmethod
    def from_row(cls, row: Any) -> LogTaskResult:
        return cls(TaskResult.from_row(row), _from_ipc(row["located_findings"]), _from_ipc(row["open_txn_places"]),
                   _from_ipc(row["problems"]))

    @classmethod
    def empty(cls) -> LogTaskResult:
        """The result of a task with no partitions."""
        return audit_partitions(())


def audit_log_dir(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
                  backend: str | Backend | None = None, hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS,
                  now_ms: int | None = None, verify_crc: bool = True,
                  use_transaction_log: bool = True) -> LogDirReport:
    """Audit Kafka log directories in-process (see the module docstring for the rules applied).

    ``path``: a log directory, a partition directory, a segment file, or a list of them. ``hanging_after_ms``
    and ``now_ms``: when an open transaction is a hanging candidate (``now_ms`` defaults to the newest batch
    timestamp). ``use_transaction_log``: where ``__transaction_state`` partitions are among what is audited,
    confirm or clear each candidate as ``kafka-transactions.sh find-hanging`` does
    (:mod:`idemcore.audit.find_hanging`; a log the coordinator could not load raises
    :class:`~idemcore.audit.find_hanging.TransactionLogError`); False judges by idle time alone.
    ``verify_crc``: check every batch's CRC-32C (a batch failing it is reported and not replayed).
    """
    started = time.perf_counter()
    listing = list_log_dir(path)
    task = audit_partitions(listing.partitions, backend=backend, verify_crc=verify_crc)
    return merge_log_tasks([task], listing, source=source_label(path), started=started,
                           hanging_after_ms=hanging_after_ms, now_ms=now_ms,
                           use_transaction_log=use_transaction_log, backend=backend)


def source_label(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> str:
    """The report's ``source``: the path, or the paths joined by commas."""
    return os.fspath(path) if isinstance(path, (str, os.PathLike)) else ", ".join(os.fspath(p) for p in path)


def audit_partitions(partitions: Sequence[PartitionFiles], *, backend: str | Backend | None = None,
                     verify_crc: bool = True) -> LogTaskResult:
    """Scan and replay whole partitions, each segment after segment in log order, then cross-check each one's
    ``.txnindex`` and find where its open transactions start: one task's work (the in-process audit gives it
    every partition, a Spark task its own). Partitions are independent (each has its own producer state), so
    any split of a listing into tasks merges into the same report. Nothing is logged here."""
    replayer = LogReplayer(backend)
    located: list[pa.Table] = []
    problems: list[tuple[PartitionFiles, int, FileProblem]] = []
    buffer = ScanBuffer()
    indexes = _IndexReadAhead([segment for files in partitions for segment in files.segments])
    for files in partitions:  # every stream numbered first: the per-stream arrays are sized once, not per feed
        replayer.stream_of(files.topic, files.partition)
    for files in partitions:
        found: list[FileProblem] = []
        part = _replay_partition(files, replayer, verify_crc, found, located, buffer, indexes)
        found += _snapshot_problems(files)
        problems += [(files, FILES_CHECK, problem) for problem in found]
        problems += [(files, TXN_INDEX_CHECK, problem) for problem in _check_txn_index(part)]
    result = replayer.finish()
    places = _locate_open_txns(result.open_txns, {(p.topic, p.partition): p for p in partitions}, replayer.backend,
                               verify_crc)
    return LogTaskResult(result, pa.concat_tables(located) if located else LOCATED_SCHEMA.empty_table(),
                         places.select(list(PLACE_COLUMNS)), _problem_table(problems))


def merge_log_tasks(tasks: Iterable[LogTaskResult], listing: LogDirListing, *, source: str, started: float,
                    hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS, now_ms: int | None = None,
                    use_transaction_log: bool = True, backend: str | Backend | None = None) -> LogDirReport:
    """The report of tasks that together audited every partition of ``listing``, each partition in one task.

    :meth:`AuditReport.from_results` merges the replays: ``now_ms`` defaults to the newest batch timestamp over
    every task, so whether an open transaction hangs is decided here, after the merge, never per task. So is what
    the transaction coordinator says of each: the ``__transaction_state`` partitions of ``listing`` are read here
    (``use_transaction_log``; the compacted log is small, and one reader sees every id). Located
    findings are sorted like ``findings``; problems come back in the in-process order (each partition's files in
    listing order, then each partition's ``.txnindex`` cross-check). ``started``: ``time.perf_counter()`` when the
    audit started (``seconds`` runs to the end of the merge). Logs the problems.
    """
    tasks = list(tasks) or [LogTaskResult.empty()]
    coordinator_log = transaction_state_partitions(listing.partitions)
    transaction_log = read_transaction_log(coordinator_log, backend=backend) if use_transaction_log else None
    report = AuditReport.from_results([task.result for task in tasks], order_by="base_offset",
                                      seconds=time.perf_counter() - started, hanging_after_ms=hanging_after_ms,
                                      now_ms=now_ms, source=source, transaction_log=transaction_log,
                                      transaction_log_ignored=bool(coordinator_log) and not use_transaction_log)
    located_findings = pa.concat_tables([task.located_findings for task in tasks])
    located_findings = located_findings.sort_by([(TOPIC, "ascending"), ("partition", "ascending"),
                                                 ("base_offset", "ascending")])
    open_txns = _place_open_txns(report.open_txns, pa.concat_tables([task.open_txn_places for task in tasks]))
    problems = _ordered_problems(pa.concat_tables([task.problems for task in tasks]), listing)
    _log_problems(problems)
    fields = {field.name: getattr(report, field.name) for field in dataclasses.fields(AuditReport)}
    fields["findings"] = with_places(report.findings, located_findings)  # both sorted alike from the same feeds
    fields["seconds"] = time.perf_counter() - started
    return LogDirReport(**fields, located_findings=located_findings, located_open_txns=open_txns,
                        problems=tuple(problems), listing=listing)


def _problem_table(problems: list[tuple[PartitionFiles, int, FileProblem]]) -> pa.Table:
    rows = [(files.topic, files.partition, check, str(problem.path), problem.position, problem.kind, problem.message)
            for files, check, problem in problems]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(PROBLEMS_SCHEMA)
    arrays = [pa.array(list(values), field.type) for values, field in zip(columns, PROBLEMS_SCHEMA, strict=True)]
    return pa.table(arrays, schema=PROBLEMS_SCHEMA)


def _ordered_problems(table: pa.Table, listing: LogDirListing) -> list[FileProblem]:
    """The problems of every task in the report's order: by check, then partition in listing order, each
    partition's in the order found (a stable sort)."""
    rank = {(files.topic, files.partition): k for k, files in enumerate(listing.partitions)}
    ranks = np.array([rank.get(key, len(rank)) for key in zip(table.column(TOPIC).to_pylist(),
                                                              table.column("partition").to_pylist(), strict=True)],
                     np.int64)
    order = np.lexsort((ranks, table.column("check").to_numpy()))  # stable: ties keep the order found
    rows = table.take(pa.array(order, pa.int64())).select(["file", "position", "kind", "message"]).to_pylist()
    return [FileProblem(Path(row["file"]), row["position"], row["kind"], row["message"]) for row in rows]


def _place_open_txns(open_txns: pa.Table, places: pa.Table) -> pa.Table:
    """``open_txns`` with the ``file`` and ``position`` its task found for each (null where none was)."""
    keys = (TOPIC, "partition", "producer_id", "first_offset")
    where = {tuple(row[name] for name in keys): (row["file"], row["position"]) for row in places.to_pylist()}
    found = [where.get(key, (None, None))
             for key in zip(*(open_txns.column(name).to_pylist() for name in keys), strict=True)]
    return open_txns.append_column("file", pa.array([file for file, _ in found], pa.string())).append_column(
        "position", pa.array([position for _, position in found], pa.int64()))


def _replay_partition(files: PartitionFiles, replayer: LogReplayer, verify_crc: bool, problems: list[FileProblem],
                      located: list[pa.Table], buffer: ScanBuffer, indexes: _IndexReadAhead) -> _Partition:
    stream = replayer.stream_of(files.topic, files.partition)
    part = _Partition(files, {}, [])
    previous: tuple[SegmentFiles, int] | None = None  # the last segment with batches, and its last offset
    for index, segment in enumerate(files.segments):
        # Straight into the replay's columns: the scan writes the stream into its stream column, into one buffer
        # reused segment after segment (nothing of a segment's columns is kept past its replay).
        scan = scan_segment(segment.log, stream=stream, backend=replayer.backend, verify_crc=verify_crc,
                            buffer=buffer)
        problems += scan.problems()
        problems += _indexes_problems(segment, scan, indexes)
        if not len(scan):
            continue
        if previous is not None and int(scan["base_offset"][0]) <= previous[1]:
            problems.append(FileProblem(segment.log, 0, "offsets",
                                        f"first batch at offset {int(scan['base_offset'][0])}, not after the last "
                                        f"offset {previous[1]} of the previous segment {previous[0].log.name}"))
        previous = (segment, int(scan["last_offset"][-1]))
        facts = scan.facts  # (what the scan counted on the way: no pass over the columns for it here)
        rows = None
        if facts is None or facts.crc_bad:
            good = scan["crc_ok"] != 0  # CRC_BAD: corrupt, not replayed (CRC_UNCHECKED: taken as read)
            rows = np.flatnonzero(good) if not good.all() else None
        columns = {name: scan[name] if rows is None else scan[name][rows]
                   for name in (*COLUMNS, "position", "last_offset")}
        if files.segments[0].base_offset > 0:  # the log's start was deleted (retention): producers met midway
            kept = _without_markers_of_unknown_producers(replayer.state, stream, columns, part, index)
            if kept is not None:
                columns = {name: column[kept] for name, column in columns.items()}
                rows = kept  # (not the scan's facts any more)
        if not len(columns["position"]):
            continue
        spans = _offset_spans(columns) if facts is None or facts.span_differs else {}
        columns.update(spans)
        verdicts = replayer.feed_segment(BatchColumns({
            name: columns[name].view(np.bool_) if dtype == np.bool_ else columns[name]
            for name, dtype in COLUMNS.items()}), stream, facts if rows is None and not spans else None)
        if part.first_offset is None:
            part.first_offset = int(columns["base_offset"][0])
        part.last_offset = int(scan["last_offset"][-1])
        if facts is None or facts.abort_markers:
            aborts = np.flatnonzero(columns["is_control"].view(np.bool_)
                                    & (columns["control_type"] == ControlType.ABORT))
            for row in aborts.tolist():
                part.abort_markers[int(columns["base_offset"][row])] = (int(columns["producer_id"][row]), index,
                                                                        int(columns["position"][row]))
        txns = verdicts.completed_txns
        if len(txns) and txns.aborted.any():
            part.aborted.append(CompletedTxns(*(getattr(txns, name)[txns.aborted]
                                                for name in CompletedTxns.__dataclass_fields__)))
        found = np.flatnonzero(verdicts.finding != 0)  # (a bool mask: nonzero on int8 is far slower)
        if len(found):
            located.append(_located(files, segment, columns, verdicts, found))
    return part


def _without_markers_of_unknown_producers(state: LogState, stream: int, columns: dict[str, np.ndarray],
                                         part: _Partition | None, segment_index: int) -> np.ndarray | None:
    """The rows to replay without the COMMIT/ABORT markers of producers that no batch replayed so far (this
    segment's before them included) made known: in a log whose start retention deleted, such a marker ends a
    transaction whose records are gone. Replayed, it would make its producer known with no sequence, and the
    producer's next batch (any sequence is accepted of a producer the log meets midway, Kafka's rule for records
    removed by retention) would be judged a gap from sequence 0. Their ABORT markers are noted for the
    ``.txnindex`` check (``part``: None for none). None when every row is kept."""
    control = columns["is_control"].view(np.bool_)
    marker_rows = np.flatnonzero(control)
    if not len(marker_rows):
        return None
    producer_id = columns["producer_id"]
    skip = np.zeros(len(control), np.bool_)
    first_data: tuple[np.ndarray, np.ndarray] | None = None  # (producers with data, their first data row), sorted
    for pid in np.unique(producer_id[marker_rows]).tolist():
        if state.knows(stream, pid):
            continue
        if first_data is None:  # once per segment, not a pass over the rows per unknown producer
            data_rows = np.flatnonzero(~control)
            pids, first = np.unique(producer_id[data_rows], return_index=True)
            first_data = pids, data_rows[first]
        k = int(np.searchsorted(first_data[0], pid))
        found = k < len(first_data[0]) and int(first_data[0][k]) == pid
        before = marker_rows[producer_id[marker_rows] == pid]
        skip[before[before < first_data[1][k]] if found else before] = True
    if not skip.any():
        return None
    if part is not None:
        for row in np.flatnonzero(skip & (columns["control_type"] == ControlType.ABORT)).tolist():
            part.abort_markers[int(columns["base_offset"][row])] = (int(producer_id[row]), segment_index,
                                                                    int(columns["position"][row]))
    return np.flatnonzero(~skip)


def _offset_spans(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``record_count`` and ``last_sequence`` from each batch's offset span (``last_offset_delta + 1``), as Kafka
    reads a batch's last offset and last sequence. They differ from the record count only where compaction removed
    records (or all of them) and kept the batch for its producer state; replayed by its record count, such a batch
    would end early and its producer's next batch look like a gap."""
    span = columns["last_offset"] - columns["base_offset"] + 1
    differs = span != columns["record_count"]
    if not differs.any():
        return {}
    usable = differs & (span >= 1) & (span <= np.iinfo(np.int32).max) & (columns["base_offset"] >= 0)
    count = np.where(usable, span, columns["record_count"]).astype(np.int32)
    base = columns["base_sequence"].astype(np.int64)
    last = np.where(usable & (base >= 0), (base + count - 1) % (1 << 31), columns["last_sequence"]).astype(np.int32)
    return {"record_count": count, "last_sequence": last}


def _located(files: PartitionFiles, segment: SegmentFiles, columns: dict[str, np.ndarray], verdicts: Verdicts,
             rows: np.ndarray) -> pa.Table:
    n = len(rows)
    values: dict[str, Any] = {name: columns[name][rows] for name in LOCATED_SCHEMA.names if name in columns}
    values.update({
        TOPIC: [files.topic] * n, "partition": np.full(n, files.partition, np.int32),
        "is_transactional": values["is_transactional"].view(np.bool_),
        "is_control": values["is_control"].view(np.bool_),
        "finding": [Finding(code).label for code in verdicts.finding[rows].tolist()],
        "expected": verdicts.expected[rows], "file": [str(segment.log)] * n,
    })
    return pa.table({name: values[name] for name in LOCATED_SCHEMA.names}, schema=LOCATED_SCHEMA)


class _IndexReadAhead:
    """The ``.index`` and ``.timeindex`` files of the segments to audit, read ahead in groups (up to
    :data:`INDEX_GROUP_FILES` segments or :data:`INDEX_GROUP_BYTES` bytes) and checked a group at a time, in one
    pass over all of a group's entries (:func:`read_sound_indexes`), instead of a dozen NumPy calls per file."""

    def __init__(self, segments: Sequence[SegmentFiles]):
        self.segments = segments
        self.taken = 0  # segments taken so far (they are taken in order)
        self.next = 0  # the first segment not read yet
        self.found: dict[int, tuple[tuple[np.ndarray, np.ndarray] | None, tuple[np.ndarray, np.ndarray] | None]] = {}

    def take(self, segment: SegmentFiles) -> tuple[tuple[np.ndarray, np.ndarray] | None,
                                                   tuple[np.ndarray, np.ndarray] | None]:
        """The next segment's (``segment``) sound index columns (offset, position) and time index columns
        (timestamp, offset): None for a file absent, unreadable here, or not sound (:func:`_check_indexes` reads
        those)."""
        k = self.taken
        if k >= len(self.segments) or self.segments[k] is not segment:
            raise RuntimeError(f"segment {segment.log} taken out of order (expected number {k})")
        self.taken += 1
        if k >= self.next:
            self._read_group(k)
        return self.found.pop(k)

    def _read_group(self, first: int) -> None:
        offsets: list[tuple[int, bytes, int]] = []
        times: list[tuple[int, bytes, int]] = []
        size = 0
        k = first
        while k < len(self.segments) and k - first < INDEX_GROUP_FILES and size < INDEX_GROUP_BYTES:
            segment = self.segments[k]
            for path, into in ((segment.index, offsets), (segment.time_index, times)):
                if path is None:
                    continue
                try:
                    with open(path, "rb", buffering=0) as file:
                        data = file.read()
                except OSError:
                    continue  # read again by _check_indexes, which raises as before
                size += len(data)
                into.append((k, data, segment.base_offset))
            k += 1
        self.found.update((j, (None, None)) for j in range(first, k))
        for group, time_index in ((offsets, False), (times, True)):
            read = read_sound_indexes([(data, base) for _, data, base in group], time_index)
            for (j, _, _), columns in zip(group, read, strict=True):
                pair = self.found[j]
                self.found[j] = (pair[0], columns) if time_index else (columns, pair[1])
        self.next = k


def _indexes_problems(segment: SegmentFiles, scan: SegmentScan, indexes: _IndexReadAhead) -> list[FileProblem]:
    """:func:`_check_indexes`' answer, found without it when the segment's indexes are sound and agree with the
    scan (the usual case): a few NumPy calls per segment; anything else is left to it, for the exact problems."""
    offset_index, time_index = indexes.take(segment)
    if (segment.index is not None and (offset_index is None or not _offset_index_agrees(*offset_index, scan))) or \
            (segment.time_index is not None and (time_index is None or not _time_index_agrees(*time_index, scan))):
        return _check_indexes(segment, scan)
    return read_txn_index(segment.txn_index, segment.base_offset).problems if segment.txn_index is not None else []


def _offset_index_agrees(offset: np.ndarray, position: np.ndarray, scan: SegmentScan) -> bool:
    """Every entry (offsets and positions rising strictly: a sound index) at a batch's start, its offset from that
    batch's base offset to the segment's last offset."""
    if not len(offset):
        return True
    positions = scan["position"]
    if not len(positions):
        return False
    rows = np.searchsorted(positions, position)
    if int(rows[-1]) >= len(positions):  # (rows rise with the positions: the last is the largest)
        return False
    return bool(np.array_equal(positions[rows], position) and (scan["base_offset"][rows] <= offset).all()
                and int(offset[-1]) <= int(scan["last_offset"][-1]))


def _time_index_agrees(timestamp: np.ndarray, offset: np.ndarray, scan: SegmentScan) -> bool:
    """Every entry (offsets never falling: a sound index) inside a batch whose max timestamp is the entry's."""
    if not len(offset):
        return True
    last = scan["last_offset"]
    at = np.searchsorted(last, offset)
    if not len(last) or int(at[-1]) >= len(last):
        return False
    return bool((scan["base_offset"][at] <= offset).all() and np.array_equal(scan["max_timestamp"][at], timestamp))


def _check_indexes(segment: SegmentFiles, scan: SegmentScan) -> list[FileProblem]:
    """The segment's ``.index``, ``.timeindex`` and ``.txnindex`` read (their own problems), and the first
    entry of each index that disagrees with the batches scanned (Kafka rebuilds such indexes on recovery)."""
    problems: list[FileProblem] = []
    positions, base, last = scan["position"], scan["base_offset"], scan["last_offset"]
    # Every entry looked up at once (one searchsorted per index, not per entry); the first that disagrees is named.
    if segment.index is not None:
        read = read_offset_index(segment.index, segment.base_offset, entries=False)
        problems += read.problems
        entry_offset, entry_position = read.columns["offset"], read.columns["position"]
        rows = np.minimum(np.searchsorted(positions, entry_position), max(len(positions) - 1, 0))
        starts = (rows < len(positions)) & (positions[rows] == entry_position) if len(positions) else \
            np.zeros(len(rows), bool)
        inside = starts & (base[rows] <= entry_offset) & (entry_offset <= last[-1]) if len(positions) else starts
        bad = np.flatnonzero(~inside)
        if len(bad):
            k = int(bad[0])
            offset, position = int(entry_offset[k]), int(entry_position[k])
            what = (f"entry {k} (offset {offset}, position {position}): no batch starts at position {position} of "
                    f"{segment.log.name}") if not starts[k] else \
                (f"entry {k}: offset {offset} at position {position}, where {segment.log.name} holds a batch from "
                 f"offset {int(base[rows[k]])}")
            problems.append(FileProblem(segment.index, 8 * k, "index_mismatch", what))
    if segment.time_index is not None:
        time_read = read_time_index(segment.time_index, segment.base_offset, entries=False)
        problems += time_read.problems
        stamp_offset, stamp_time = time_read.columns["offset"], time_read.columns["timestamp"]
        at = np.searchsorted(last, stamp_offset)
        rows = np.minimum(at, max(len(last) - 1, 0))
        found = (at < len(last)) & (base[rows] <= stamp_offset) if len(last) else np.zeros(len(rows), bool)
        agrees = found & (scan["max_timestamp"][rows] == stamp_time) if len(last) else found
        bad = np.flatnonzero(~agrees)
        if len(bad):
            k = int(bad[0])
            offset, stamp = int(stamp_offset[k]), int(stamp_time[k])
            what = f"entry {k}: offset {offset} is in no batch of {segment.log.name}" if not found[k] else \
                (f"entry {k}: timestamp {stamp} at offset {offset}, whose batch's max timestamp is "
                 f"{int(scan['max_timestamp'][rows[k]])}")
            problems.append(FileProblem(segment.time_index, 12 * k, "timeindex_mismatch", what))
    if segment.txn_index is not None:
        problems += read_txn_index(segment.txn_index, segment.base_offset).problems
    return problems


def _snapshot_problems(files: PartitionFiles) -> list[FileProblem]:
    """The problems of the partition's producer snapshots: one Kafka's loader finds corrupt is deleted and the
    state rebuilt from the log (nothing lost, but damage). A snapshot gone since the listing was deleted by the
    broker writing the directory (it keeps the newest few): nothing to check."""
    problems: list[FileProblem] = []
    for _, snapshot in files.snapshots:
        try:
            problems += read_snapshot(snapshot).problems
        except FileNotFoundError:
            continue
    return problems


def _check_txn_index(part: _Partition) -> list[FileProblem]:
    """The ``.txnindex`` entries against the ABORT markers found and the aborted transactions replayed.

    Kafka writes one entry per transaction that an ABORT marker ended, in the ``.txnindex`` of the marker's
    segment: (producer id, first offset, marker's offset, last stable offset). Problems: an entry with no ABORT
    marker of its producer at its last offset (``txnindex_unmatched``), an entry in another segment's index than
    its marker's (``txnindex_misplaced``), a first offset other than the one the replay found
    (``txnindex_mismatch``), and an aborted transaction no entry records (``txnindex_missing``: a
    read_committed consumer would be served its records).
    """
    files = part.files
    problems: list[FileProblem] = []
    entries: dict[tuple[int, int], tuple[Path, int, int, int]] = {}  # (pid, last) -> (file, at, first, segment)
    for index, segment in enumerate(files.segments):
        if segment.txn_index is None:
            continue
        for entry in read_txn_index(segment.txn_index, segment.base_offset).entries:
            entries[(entry.producer_id, entry.last_offset)] = (segment.txn_index, entry.at, entry.first_offset,
                                                               index)
            marker = part.abort_markers.get(entry.last_offset)
            if marker is None or marker[0] != entry.producer_id:
                problems.append(FileProblem(segment.txn_index, entry.at, "txnindex_unmatched",
                                            f"aborted transaction of producer {entry.producer_id} (offsets "
                                            f"{entry.first_offset}..{entry.last_offset}): the log holds no ABORT "
                                            f"marker of that producer at offset {entry.last_offset}"))
            elif marker[1] != index:
                problems.append(FileProblem(segment.txn_index, entry.at, "txnindex_misplaced",
                                            f"aborted transaction of producer {entry.producer_id}: its ABORT marker "
                                            f"(offset {entry.last_offset}) is in "
                                            f"{files.segments[marker[1]].log.name}, whose .txnindex should hold it"))
    replayed = CompletedTxns.concat(part.aborted)
    seen = set()
    for pid, first, last in zip(replayed.producer_id.tolist(), replayed.first_offset.tolist(),
                                replayed.last_offset.tolist(), strict=True):
        seen.add((pid, last))
        _, segment_index, position = part.abort_markers.get(last, (pid, -1, -1))
        recorded = entries.get((pid, last))
        if recorded is None and segment_index >= 0:  # (every replayed abort comes from a marker found)
            marker_segment = files.segments[segment_index]
            index_file = marker_segment.txn_index or marker_segment.log.with_suffix(".txnindex")
            problems.append(FileProblem(marker_segment.log, position, "txnindex_missing",
                                        f"the ABORT marker at offset {last} ended the transaction of producer {pid} "
                                        f"from offset {first}, but {index_file.name} has no entry for it (a "
                                        "read_committed consumer would be served the aborted records)"))
        elif recorded is not None and recorded[2] != first:
            problems.append(FileProblem(recorded[0], recorded[1], "txnindex_mismatch",
                                        f"aborted transaction of producer {pid} ending at offset {last}: first "
                                        f"offset {recorded[2]}, but the log shows it opened at offset {first}"))
    for (pid, last), (index_file, at, first, _) in sorted(entries.items()):
        marker = part.abort_markers.get(last)
        if (pid, last) in seen or marker is None or marker[0] != pid:
            continue  # matched, or already reported as unmatched
        if part.first_offset is not None and first < part.first_offset:
            continue  # it opened before the first offset read (retention deleted its start): nothing to compare
        problems.append(FileProblem(index_file, at, "txnindex_mismatch",
                                    f"aborted transaction of producer {pid} from offset {first}: the ABORT marker at "
                                    f"offset {last} ended no transaction the log shows open"))
    return problems


def _locate_open_txns(open_txns: pa.Table, partitions: dict[tuple[str, int], PartitionFiles],
                      backend: str | Backend | None, verify_crc: bool) -> pa.Table:
    """``open_txns`` with the file and position of each transaction's first batch (its segment scanned again:
    open transactions are few, and this keeps no per-batch positions in memory during the replay)."""
    files: list[str | None] = []
    positions: list[int | None] = []
    scans: dict[Path, SegmentScan] = {}
    for topic, partition, first in zip(open_txns.column(TOPIC).to_pylist(), open_txns.column("partition").to_pylist(),
                                       open_txns.column("first_offset").to_pylist(), strict=True):
        part = partitions.get((topic, partition))
        segment = None
        if part is not None:
            bases = [s.base_offset for s in part.segments]
            k = int(np.searchsorted(bases, first, side="right")) - 1
            segment = part.segments[k] if k >= 0 else None
        if segment is None:
            files.append(None)
            positions.append(None)
            continue
        scan = scans.get(segment.log)
        if scan is None:
            scan = scans[segment.log] = scan_segment(segment.log, backend=backend, verify_crc=verify_crc)
        rows = np.flatnonzero(scan["base_offset"] == first)
        files.append(str(segment.log))
        positions.append(int(scan["position"][rows[0]]) if len(rows) else None)
    return open_txns.append_column("file", pa.array(files, pa.string())).append_column(
        "position", pa.array(positions, pa.int64()))


def _log_problems(problems: list[FileProblem]) -> None:
    for problem in problems[:LOGGED_PROBLEMS]:
        log.warning("%s", problem)
    if len(problems) > LOGGED_PROBLEMS:
        log.warning("... and %d more problems in the log files (LogDirReport.problems)",
                    len(problems) - LOGGED_PROBLEMS)
