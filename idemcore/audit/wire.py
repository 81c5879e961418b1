"""Auditing a live cluster over the wire: ``idemcore audit kafka://HOST:PORT``.

The same audit as a log directory's (:mod:`idemcore.audit.logdir`), with batches fetched instead of read from
files: a Fetch answer's ``records`` are the leader's stored batches back to back, exactly a segment's bytes, so each
answer goes through the same native header scan into the same columns, and each partition's batches, in offset
order, through the same :class:`~idemcore.audit.logdir.LogReplayer` (CLIENT verdicts, a batch after a sequence
gap committed all the same: the module docstring of :mod:`idemcore.audit.logdir` says why). Records are never
decompressed or decoded: only the 61-byte batch headers are read.

What differs from a log directory:

- findings are located by topic, partition and offset (``WireReport.located_findings``), not file and position;
- the problems are those of the answers (``WireReport.problems``: a CRC mismatch, bytes that are not a batch,
  offsets that do not rise, offsets deleted before they were read), each by topic, partition and offset; there
  are no index files to cross-check;
- hanging transactions are judged as for a log directory (open more than ``hanging_after_ms`` before the newest
  batch) and confirmed by asking the cluster's transaction coordinators (ListTransactions, DescribeTransactions:
  :mod:`idemcore.audit.wire_coordinator`) instead of reading ``__transaction_state``, where the principal may.

:class:`WireAuditor` replays fetched answers (whole partitions, in offset order) into a
:class:`~idemcore.audit.logdir.LogTaskResult` whose places are offsets, :func:`audit_ranges` runs it over
partitions in-process, and :func:`merge_wire_tasks` makes the report, so the Spark audit
(:func:`idemcore.audit.spark.audit_cluster_spark`) spreads fetching and replaying over tasks and merges the same
way.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from idemcore.audit.columns import TOPIC
from idemcore.audit.find_hanging import LOG_IGNORED
from idemcore.audit.logdir import LOCATED_SCHEMA, LogReplayer, LogTaskResult, _offset_spans
from idemcore.audit.replayer import StreamReplayer
from idemcore.audit.report import DEFAULT_HANGING_AFTER_MS, SUMMARY_ROWS, AuditReport, ProblemsListed
from idemcore.audit.wire_fetch import (
    FETCH_BYTES,
    ClusterReader,
    FetchedBatches,
    PartitionRange,
    Position,
    fetch_batches,
    parse_bootstrap,
)
from idemcore.findings import Finding
from idemcore.kernels import Backend
from idemcore.kernels.columns import COLUMNS
from idemcore.net.client_security import ClientSecurity
from idemcore.net.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from idemcore.record.kafka_files import SegmentScan

#: The columns of ``WireReport.located_findings``: a log directory's without file and position, and the broker
#: that served the batch.
WIRE_LOCATED_SCHEMA = pa.schema([field for field in LOCATED_SCHEMA if field.name not in ("file", "position")]
                                + [pa.field("leader", pa.int32())])
#: ``LogTaskResult.problems`` of a wire task: (topic, partition, offset, kind, message).
WIRE_PROBLEMS_SCHEMA = pa.schema([(TOPIC, pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                                  ("kind", pa.string()), ("message", pa.string())])
#: ``LogTaskResult.open_txn_places`` of a wire task: where each open transaction's first batch came from.
WIRE_PLACE_SCHEMA = pa.schema([(TOPIC, pa.string()), ("partition", pa.int32()), ("producer_id", pa.int64()),
                               ("first_offset", pa.int64()), ("leader", pa.int32())])
#: Per partition audited: the offsets planned and read (``WireReport.ranges``).
RANGES_SCHEMA = pa.schema([(TOPIC, pa.string()), ("partition", pa.int32()), ("start", pa.int64()),
                           ("end", pa.int64()), ("log_start", pa.int64()), ("log_end", pa.int64()),
                           ("next_offset", pa.int64()), ("fetches", pa.int64()), ("bytes", pa.int64())])


@dataclass(frozen=True)
class WireProblem:
    """Something wrong in what a leader served: ``topic``-``partition`` at ``offset``, its ``kind`` and a line."""

    topic: str
    partition: int
    offset: int
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}: offset {self.offset}: {self.kind}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class WireReport(ProblemsListed, AuditReport):
    """An :class:`AuditReport` of a cluster read over the wire, with what its tables have no column for.

    ``located_findings``: one row per batch with a finding (:data:`WIRE_LOCATED_SCHEMA`: topic, partition, offsets,
    producer, sequences, finding, expected, the leader that served it), sorted like ``findings``.
    ``located_open_txns``: ``open_txns`` with the leader that served each transaction's first batch. ``problems``:
    what was wrong in the answers (:class:`WireProblem`). ``ranges``: per partition, the offsets planned, the next
    offset after the last batch read, the fetches and bytes (:data:`RANGES_SCHEMA`). ``bootstrap``: the cluster.
    """

    located_findings: Any = None
    located_open_txns: Any = None
    problems: tuple[WireProblem, ...] = ()
    ranges: Any = None
    bootstrap: str = ""
    fetched_bytes: int = 0

    @property
    def megabytes_per_s(self) -> float:
        return self.fetched_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The Parquet report's summary, plus the bytes fetched, the problems of the answers (counts by kind and
        the first :data:`SUMMARY_ROWS`) and the first located findings."""
        summary = super().summary()
        summary["bootstrap"] = self.bootstrap
        summary["fetched_bytes"] = self.fetched_bytes
        summary["fetch_problems"] = {"counts": self.problem_counts(),
                                     "first": [p.to_dict() for p in self.problems[:SUMMARY_ROWS]]}
        if self.located_findings is not None:
            summary["located_findings"] = self.located_findings.slice(0, SUMMARY_ROWS).to_pylist()
        return summary


# --- Planning -----------------------------------------------------------------------------------------------------

def plan_ranges(reader: ClusterReader, topics: Sequence[str] | None, start: Position, end: Position
                ) -> list[PartitionRange]:
    """Every partition of ``topics`` (None: every topic but internal ones) with the offsets ``start``/``end``
    resolve to by ListOffsets (module :mod:`idemcore.audit.wire_fetch`, :class:`Position`), clamped to the log."""
    pairs = reader.partitions(topics)
    if not pairs:
        return []
    first = reader.list_offsets(pairs, EARLIEST_TIMESTAMP)
    last = reader.list_offsets(pairs, LATEST_TIMESTAMP)

    def resolve(position: Position) -> dict[tuple[str, int], int]:
        if position.kind == "earliest":
            return dict(first)
        if position.kind == "latest":
            return {pair: max(first[pair], last[pair] - position.value) for pair in pairs}
        if position.kind == "offset":
            return {pair: position.value for pair in pairs}
        found = reader.list_offsets(pairs, position.value)
        return {pair: last[pair] if found.get(pair, -1) < 0 else found[pair] for pair in pairs}

    starts, ends = resolve(start), resolve(end)
    return [PartitionRange(topic, partition, min(max(starts[(topic, partition)], first[(topic, partition)]),
                                                 last[(topic, partition)]),
                           min(max(ends[(topic, partition)], first[(topic, partition)]), last[(topic, partition)]),
                           first[(topic, partition)], last[(topic, partition)], end.kind == "latest" and not end.value)
            for topic, partition in pairs]


# --- One task -----------------------------------------------------------------------------------------------------

@dataclass
class PartitionProgress:
    """Where one partition's audit stands: the next offset to fetch, and what was read."""

    next_offset: int
    fetches: int = 0
    bytes: int = 0
    batches: int = 0


class WireAuditor:
    """Feeds fetched batches into a :class:`LogReplayer`, keeping what the report adds: located findings, the
    problems of the answers, and where each partition stands. One per task (or per follow)."""

    def __init__(self, backend: str | Backend | None = None, replayer: StreamReplayer | None = None):
        self.replayer = replayer if replayer is not None else LogReplayer(backend)
        self.located: list[pa.Table] = []
        self.problems: list[WireProblem] = []
        self.last_offsets: dict[tuple[str, int], int] = {}  # the last offset replayed, per partition
        self.leaders: dict[tuple[str, int], int] = {}  # the broker that served each partition's last answer

    def feed(self, topic: str, partition: int, fetched: FetchedBatches, leader: int) -> int:
        """Replay one answer's batches; the batches replayed (batches failing their CRC are not: a problem)."""
        self.leaders[(topic, partition)] = leader
        if fetched.problem is not None:
            kind, offset, message = fetched.problem
            self.problems.append(WireProblem(topic, partition, offset, kind, message))
        scan = fetched.scan
        if not len(scan):
            return 0
        self._check_offsets(topic, partition, scan)
        good = scan["crc_ok"] != 0  # CRC_BAD: corrupt, not replayed (as a log directory's)
        for row in np.flatnonzero(~good).tolist():
            self.problems.append(WireProblem(topic, partition, int(scan["base_offset"][row]), "crc_mismatch",
                                             f"CRC mismatch in the batch at offsets {int(scan['base_offset'][row])}.."
                                             f"{int(scan['last_offset'][row])} as served (not replayed)"))
        rows = None if good.all() else np.flatnonzero(good)
        columns = {name: scan[name] if rows is None else scan[name][rows] for name in (*COLUMNS, "last_offset")}
        if not len(columns["last_offset"]):
            return 0
        columns.update(_offset_spans(columns))
        table = pa.table({name: columns[name].view(np.bool_) if COLUMNS[name] == np.bool_ else columns[name]
                          for name in COLUMNS if name != "stream"})
        stream = int(self.replayer.keys.encode(pa.array([topic]), np.array([partition]))[0])
        verdicts = self.replayer.feed(table, np.full(table.num_rows, stream, np.int32))
        found = np.flatnonzero(verdicts.finding)
        if len(found):
            n = len(found)
            values: dict[str, Any] = {name: columns[name][found] for name in WIRE_LOCATED_SCHEMA.names
                                      if name in columns}
            values.update({
                TOPIC: [topic] * n, "partition": np.full(n, partition, np.int32),
                "is_transactional": values["is_transactional"].view(np.bool_),
                "is_control": values["is_control"].view(np.bool_),
                "finding": [Finding(code).label for code in verdicts.finding[found].tolist()],
                "expected": verdicts.expected[found], "leader": np.full(n, leader, np.int32),
            })
            self.located.append(pa.table({name: values[name] for name in WIRE_LOCATED_SCHEMA.names},
                                         schema=WIRE_LOCATED_SCHEMA))
        return table.num_rows

    def _check_offsets(self, topic: str, partition: int, scan: SegmentScan) -> None:
        base, last = scan["base_offset"], scan["last_offset"]
        previous = self.last_offsets.get((topic, partition))
        if previous is not None and int(base[0]) <= previous:
            self.problems.append(WireProblem(topic, partition, int(base[0]), "offsets",
                                             f"batch at offset {int(base[0])} does not follow the last offset "
                                             f"{previous} read before it"))
        if len(base) > 1:
            bad = np.flatnonzero(base[1:] <= last[:-1])
            if len(bad):
                k = int(bad[0]) + 1
                self.problems.append(WireProblem(topic, partition, int(base[k]), "offsets",
                                                 f"batch at offset {int(base[k])} does not follow the previous "
                                                 f"batch's last offset {int(last[k - 1])}"))
        self.last_offsets[(topic, partition)] = max(previous if previous is not None else -1, int(last.max()))

    def audit_range(self, reader: ClusterReader, part: PartitionRange, progress: PartitionProgress, *,
                    backend: str | Backend | None, max_bytes: int = FETCH_BYTES, follow_end: bool = False,
                    on_fetch: Callable[[int, int], None] | None = None) -> None:
        """Fetch and replay ``part`` from ``progress.next_offset``, moving it on as answers come."""
        if progress.next_offset >= part.end and not (follow_end or part.to_log_end):
            return
        fetches, fetched_bytes = reader.fetches, reader.fetched_bytes
        walk = dataclasses.replace(part, start=progress.next_offset)
        for fetched in fetch_batches(reader, walk, backend=backend, max_bytes=max_bytes, follow_end=follow_end):
            leader = reader.leaders.get((part.topic, part.partition), -1)
            batches = self.feed(part.topic, part.partition, fetched, leader)
            progress.batches += batches
            if len(fetched.scan):
                progress.next_offset = max(progress.next_offset, int(fetched.scan["last_offset"].max()) + 1)
            elif fetched.problem is not None and fetched.problem[0] == "deleted":
                progress.next_offset = max(progress.next_offset, fetched.log_start_offset)
            elif fetched.problem is not None and fetched.problem[0] == "truncated" and follow_end \
                    and fetched.high_watermark >= 0:
                # A follow reads on from the log's new end (said once, not every round); offsets below it that
                # the log holds now are not read again.
                progress.next_offset = fetched.high_watermark
            if on_fetch is not None:
                on_fetch(batches, reader.fetched_bytes - fetched_bytes)
            progress.fetches += reader.fetches - fetches
            progress.bytes += reader.fetched_bytes - fetched_bytes
            fetches, fetched_bytes = reader.fetches, reader.fetched_bytes

    def task_result(self) -> LogTaskResult:
        """What was replayed, as one task's :class:`LogTaskResult` (places: the leader of each open
        transaction's partition; problems: :data:`WIRE_PROBLEMS_SCHEMA`)."""
        result = self.replayer.finish()
        located = pa.concat_tables(self.located) if self.located else WIRE_LOCATED_SCHEMA.empty_table()
        open_txns = result.open_txns
        places = pa.table({TOPIC: open_txns.column(TOPIC), "partition": open_txns.column("partition"),
                           "producer_id": open_txns.column("producer_id"),
                           "first_offset": open_txns.column("first_offset"),
                           "leader": pa.array([self.leaders.get(key, -1) for key in zip(
                               open_txns.column(TOPIC).to_pylist(), open_txns.column("partition").to_pylist(),
                               strict=True)], pa.int32())}, schema=WIRE_PLACE_SCHEMA)
        problems = pa.table({TOPIC: [p.topic for p in self.problems],
                             "partition": [p.partition for p in self.problems],
                             "offset": [p.offset for p in self.problems], "kind": [p.kind for p in self.problems],
                             "message": [p.message for p in self.problems]}, schema=WIRE_PROBLEMS_SCHEMA)
        return LogTaskResult(result, located, places, problems)


def audit_ranges(reader: ClusterReader, ranges: Sequence[PartitionRange], *, backend: str | Backend | None = None,
                 max_bytes: int = FETCH_BYTES, on_fetch: Callable[[int, int, int], None] | None = None
                 ) -> tuple[LogTaskResult, pa.Table]:
    """Fetch and replay whole partitions, each from its leader in offset order (the in-process audit gives it every
    partition; Spark's replay tasks feed a :class:`WireAuditor` the pieces its fetch tasks scanned). The task's
    result and its :data:`RANGES_SCHEMA` rows.
    ``on_fetch(batches, bytes, offsets)``: after each answer, what it added."""
    auditor = WireAuditor(backend)
    rows = []
    # A range planned empty is read only if its leader's high watermark says it grew (one Fetch per leader asks).
    ends = reader.high_watermarks({(part.topic, part.partition): part.start for part in ranges
                                   if part.to_log_end and part.start >= part.end})
    for part in ranges:
        progress = PartitionProgress(part.start)
        if ends.get((part.topic, part.partition), part.start + 1) <= part.start:
            rows.append((part, progress))
            continue
        done = [part.start]

        def moved(batches: int, fetched: int, part: PartitionRange = part, progress: PartitionProgress = progress,
                  done: list[int] = done) -> None:
            step = max(0, min(progress.next_offset, part.end) - done[0])
            done[0] += step
            if on_fetch is not None:
                on_fetch(batches, fetched, step)

        auditor.audit_range(reader, part, progress, backend=backend, max_bytes=max_bytes, on_fetch=moved)
        rows.append((part, progress))
    return auditor.task_result(), ranges_table(rows)


def ranges_table(rows: Iterable[tuple[PartitionRange, PartitionProgress]]) -> pa.Table:
    rows = list(rows)
    return pa.table({TOPIC: [p.topic for p, _ in rows], "partition": [p.partition for p, _ in rows],
                     "start": [p.start for p, _ in rows], "end": [p.end for p, _ in rows],
                     "log_start": [p.log_start for p, _ in rows], "log_end": [p.log_end for p, _ in rows],
                     "next_offset": [s.next_offset for _, s in rows], "fetches": [s.fetches for _, s in rows],
                     "bytes": [s.bytes for _, s in rows]}, schema=RANGES_SCHEMA)


# --- The report ---------------------------------------------------------------------------------------------------

def merge_wire_tasks(tasks: Iterable[LogTaskResult], ranges: pa.Table, *, source: str, started: float,
                     hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS, now_ms: int | None = None,
                     confirm: Callable[[pa.Table], tuple[Any, str | None]] | None = None) -> WireReport:
    """The report of tasks that together audited every partition of ``ranges``, each partition in one task.

    ``confirm``: given the open transactions, the coordinators' view of them and the status
    (:func:`idemcore.audit.wire_coordinator.ask_coordinators`); None: judged by idle time alone (``ignored``)."""
    tasks = list(tasks) or [WireAuditor().task_result()]
    results = [task.result for task in tasks]
    open_txns = pa.concat_tables([r.open_txns for r in results])
    transaction_log, status = confirm(open_txns) if confirm is not None else (None, LOG_IGNORED)
    report = AuditReport.from_results(results, order_by="base_offset", seconds=time.perf_counter() - started,
                                      hanging_after_ms=hanging_after_ms, now_ms=now_ms, source=source,
                                      transaction_log=transaction_log, transaction_log_status=status)
    located = pa.concat_tables([task.located_findings for task in tasks]).sort_by(
        [(TOPIC, "ascending"), ("partition", "ascending"), ("base_offset", "ascending")])
    places = pa.concat_tables([task.open_txn_places for task in tasks])
    problems = pa.concat_tables([task.problems for task in tasks]).to_pylist()
    problems.sort(key=lambda row: (row[TOPIC], row["partition"], row["offset"]))
    fields = {field.name: getattr(report, field.name) for field in dataclasses.fields(AuditReport)}
    fields["seconds"] = time.perf_counter() - started
    sorted_ranges = ranges.sort_by([(TOPIC, "ascending"), ("partition", "ascending")])
    return WireReport(**fields, located_findings=located, located_open_txns=_leaders(report.open_txns, places),
                      problems=tuple(WireProblem(row[TOPIC], row["partition"], row["offset"], row["kind"],
                                                 row["message"]) for row in problems),
                      ranges=sorted_ranges, bootstrap=source,
                      fetched_bytes=int(pc.sum(ranges.column("bytes")).as_py() or 0))


def _leaders(open_txns: pa.Table, places: pa.Table) -> pa.Table:
    keys = (TOPIC, "partition", "producer_id", "first_offset")
    where = {tuple(row[name] for name in keys): row["leader"] for row in places.to_pylist()}
    found = [where.get(key) for key in zip(*(open_txns.column(name).to_pylist() for name in keys), strict=True)]
    return open_txns.append_column("leader", pa.array(found, pa.int32()))


def audit_cluster(url: str, *, topics: Sequence[str] | None = None, start: str | Position = "earliest",
                  end: str | Position = "latest", security: ClientSecurity | None = None,
                  backend: str | Backend | None = None, hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS,
                  now_ms: int | None = None, confirm_hanging: bool = True, max_bytes: int = FETCH_BYTES,
                  progress: bool = False, request_timeout_ms: int = 30_000) -> WireReport:
    """Audit the partitions of ``topics`` (None: every topic but internal ones) of the cluster at ``url``
    (``kafka://HOST:PORT[,HOST:PORT...]``), from ``start`` to ``end`` (:class:`Position`: earliest, latest,
    latest-N, offset:N, a time), in-process (see the module docstring). ``security``: how to connect (TLS, SASL;
    :meth:`ClientSecurity.from_properties`). ``confirm_hanging``: ask the coordinators about each open
    transaction (ListTransactions, DescribeTransactions), as ``kafka-transactions.sh find-hanging`` does; where
    the cluster refuses, candidates stay ``hanging_unconfirmed``. ``progress``: a bar of batches and bytes."""
    from idemcore.audit.wire_coordinator import ask_coordinators
    from idemcore.progress import bar

    started = time.perf_counter()
    begin = start if isinstance(start, Position) else Position.parse(start)
    stop = end if isinstance(end, Position) else Position.parse(end)
    begin.check_before(stop)
    with ClusterReader(parse_bootstrap(url), security=security, request_timeout_ms=request_timeout_ms) as reader:
        ranges = plan_ranges(reader, topics, begin, stop)
        total = sum(max(0, r.end - r.start) for r in ranges)
        with bar(total or None, "fetching", "offsets", enabled=progress) as shown:
            counts = {"batches": 0, "bytes": 0}

            def on_fetch(batches: int, fetched: int, offsets: int) -> None:
                counts["batches"] += batches
                counts["bytes"] += fetched
                if hasattr(shown, "set_postfix_str"):  # (tqdm; the plain lines count offsets only)
                    shown.set_postfix_str(f"{counts['batches']:,} batches, {counts['bytes'] / 1e6:,.1f} MB",
                                          refresh=False)
                shown.update(offsets)

            task, table = audit_ranges(reader, ranges, backend=backend, max_bytes=max_bytes, on_fetch=on_fetch)
        confirm = (lambda txns: ask_coordinators(reader, txns)) if confirm_hanging else None
        return merge_wire_tasks([task], table, source=reader.describe(), started=started,
                                hanging_after_ms=hanging_after_ms, now_ms=now_ms, confirm=confirm)
