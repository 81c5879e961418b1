"""audit_cluster_spark(url): a live cluster audited with Spark, each executor fetching its own offset ranges.

The driver asks the cluster for its partitions and their offsets (Metadata, ListOffsets: where each range starts
and stops, :func:`~idemcore.audit.wire.plan_ranges`), cuts a partition with more than ``range_offsets`` offsets to
read into pieces of that many (:func:`split_ranges`), and packs the pieces into fetch tasks by their offsets
(:func:`plan_tasks`), as Spark's Kafka source hands offset ranges to its executors. Two stages:

1. Each fetch task connects to the cluster itself (the client properties travel as text: TLS contexts and SASL
   logins are rebuilt there), fetches its pieces from their leaders and runs the header scan over each answer:
   one row per piece with its batches' header columns (about 60 bytes a batch, never the records), its problems
   and what it fetched.
2. The pieces are shuffled by (topic, partition) and sorted by piece, so each replay task sees every piece of its
   partitions in offset order (a partition's replay needs the producer state of every batch before it) and
   replays them with :class:`~idemcore.audit.wire.WireAuditor`, the in-process audit's. It sends back one row:
   its findings, per-partition summaries, open transactions and problems (Arrow IPC streams), the ranges it read,
   and an ``error`` column.

The driver merges the rows with :func:`~idemcore.audit.wire.merge_wire_tasks`, as the in-process audit merges its
one task, and asks the coordinators about the open transactions: the same :class:`~idemcore.audit.wire.WireReport`.
A piece after the first holds the batches starting in its range; the batch across a boundary is the earlier
piece's.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from idemcore.audit.logdir import LogTaskResult
from idemcore.audit.replayer import _from_ipc, _ipc
from idemcore.audit.report import DEFAULT_HANGING_AFTER_MS
from idemcore.audit.spark.session import check_master, get_session
from idemcore.audit.spark.task_rows import WORKER_ERRORS, collect_task_rows, result_batch
from idemcore.audit.wire import WireProblem, WireReport, merge_wire_tasks, plan_ranges, ranges_table
from idemcore.audit.wire_fetch import FETCH_BYTES, ClusterReader, PartitionRange, Position, parse_bootstrap
from idemcore.errors import one_line
from idemcore.kernels import Backend

#: One row per replay task: its result, the ranges it read (Arrow IPC), or the error that stopped it.
RESULT_SCHEMA = f"{LogTaskResult.SPARK_SCHEMA}, ranges binary, error string"
#: One row per piece fetched: its header columns (Arrow IPC of the scan), problems (JSON), what was read.
PIECE_SCHEMA = ("topic string, partition int, piece int, columns binary, problems string, leader int, "
                "fetches long, bytes long, start long, end long, log_start long, log_end long, next_offset long, "
                "error string")
_PIECE_ARROW = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("piece", pa.int32()),
                          ("columns", pa.binary()), ("problems", pa.string()), ("leader", pa.int32()),
                          ("fetches", pa.int64()), ("bytes", pa.int64()), ("start", pa.int64()), ("end", pa.int64()),
                          ("log_start", pa.int64()), ("log_end", pa.int64()), ("next_offset", pa.int64()),
                          ("error", pa.string())])
#: Offsets of a partition one fetch task reads at most (a larger partition is cut into pieces).
RANGE_OFFSETS = 4_000_000


def split_ranges(ranges: Sequence[PartitionRange], range_offsets: int = RANGE_OFFSETS
                 ) -> list[tuple[int, PartitionRange]]:
    """``(piece number, range)``: each range cut into pieces of at most ``range_offsets`` offsets; a piece after
    the first reads from its start (``from_batch_start``), only the last reads on to the log end."""
    if range_offsets < 1:
        raise ValueError(f"range_offsets must be at least 1, got {range_offsets}")
    pieces = []
    for part in ranges:
        bounds = list(range(part.start, part.end, range_offsets)) or [part.start]
        for number, first in enumerate(bounds):
            last = number == len(bounds) - 1
            pieces.append((number, dataclasses.replace(
                part, start=first, end=part.end if last else first + range_offsets,
                to_log_end=part.to_log_end and last, from_batch_start=number > 0)))
    return pieces


def plan_tasks(ranges: Sequence[PartitionRange], tasks: int) -> list[list[int]]:
    """Up to ``tasks`` tasks, as indexes into ``ranges``: the largest range (offsets to read) first onto the
    lightest task (ties: fewer ranges, then the lower task number); each task's in the given order."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    sizes = [max(0, r.end - r.start) for r in ranges]
    bins: list[tuple[int, int, int, list[int]]] = [(0, 0, k, []) for k in range(min(tasks, len(ranges)))]
    heapq.heapify(bins)
    for index in sorted(range(len(ranges)), key=lambda k: (-sizes[k], k)):
        load, count, task, members = heapq.heappop(bins)
        members.append(index)
        heapq.heappush(bins, (load + sizes[index], count + 1, task, members))
    return [sorted(members) for _, _, _, members in sorted(bins, key=lambda b: b[2])]


# --- In the workers -------------------------------------------------------------------------------------------------

def _fetch_pieces(pieces: list[tuple[int, PartitionRange]], plans: list[list[int]], url: str,
                  properties: dict[str, str], backend: str | None, max_bytes: int):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        # Stage 1, in a Python worker: fetch and scan this task's pieces; only header columns go on.
        import numpy as np

        from idemcore.audit.wire_fetch import fetch_batches
        from idemcore.errors import IdemcoreError
        from idemcore.net.client_security import ClientSecurity
        from idemcore.record.kafka_files.segment import SCAN_COLUMNS

        for batch in batches:
            for number in batch.column("id").to_pylist():
                mine = [pieces[k] for k in plans[number]]
                rows = []
                try:
                    security = ClientSecurity.from_properties(properties) if properties else None
                    with ClusterReader(parse_bootstrap(url), security=security) as reader:
                        reader.refresh(sorted({part.topic for _, part in mine}))
                        for piece, part in mine:
                            fetches, fetched = reader.fetches, reader.fetched_bytes
                            scans, problems, leader = [], [], -1
                            for answer in fetch_batches(reader, part, backend=backend, max_bytes=max_bytes):
                                leader = reader.leaders.get((part.topic, part.partition), -1)
                                scans.append(answer.scan.columns)
                                if answer.problem is not None:
                                    problems.append(list(answer.problem))
                            columns = {name: np.concatenate([c[name] for c in scans]) if scans
                                       else np.empty(0, dtype) for name, dtype in SCAN_COLUMNS.items()}
                            next_offset = int(columns["last_offset"].max()) + 1 if len(columns["last_offset"]) \
                                else part.start
                            rows.append({"topic": part.topic, "partition": part.partition, "piece": piece,
                                         "columns": _ipc(pa.table(columns)), "problems": json.dumps(problems),
                                         "leader": leader, "fetches": reader.fetches - fetches,
                                         "bytes": reader.fetched_bytes - fetched, "start": part.start,
                                         "end": part.end, "log_start": part.log_start, "log_end": part.log_end,
                                         "next_offset": next_offset, "error": None})
                except (IdemcoreError, ValueError, OSError) as exc:
                    where = ", ".join(f"{part.topic}-{part.partition}" for _, part in mine[:3])
                    rows = [{"topic": "", "partition": -1, "piece": 0, "columns": b"", "problems": "[]",
                             "leader": -1, "fetches": 0, "bytes": 0, "start": 0, "end": 0, "log_start": 0,
                             "log_end": 0, "next_offset": 0,
                             "error": f"{type(exc).__name__}: {one_line(exc)} (fetching {where})"}]
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=_PIECE_ARROW)
    return run


def _replay_pieces(backend: str | None):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        # Stage 2, in a Python worker: every piece of this task's partitions, in offset order, replayed.
        from idemcore.audit.wire import PartitionProgress, WireAuditor
        from idemcore.audit.wire_fetch import FetchedBatches
        from idemcore.record.kafka_files import SegmentScan

        auditor = WireAuditor(backend)
        read: dict[tuple[str, int], tuple[PartitionRange, PartitionProgress]] = {}
        error = None
        for batch in batches:
            for row in batch.to_pylist():
                if row["error"]:
                    error = error or row["error"]
                    continue
                key = (row["topic"], row["partition"])
                table = _from_ipc(row["columns"])
                columns = {name: table.column(name).to_numpy() for name in table.column_names}
                scan = SegmentScan(Path(), None, 0, columns, "end", 0, "", str(backend), True)
                problems = json.loads(row["problems"])
                for kind, offset, message in problems[:-1] if problems else ():
                    auditor.problems.append(WireProblem(row["topic"], row["partition"], offset, kind, message))
                last = problems[-1] if problems else None
                auditor.feed(row["topic"], row["partition"], FetchedBatches(
                    scan, -1, -1, None if last is None else (last[0], last[1], last[2])), row["leader"])
                part, progress = read.get(key, (None, None))
                if part is None or progress is None:
                    part = PartitionRange(row["topic"], row["partition"], row["start"], row["end"], row["log_start"],
                                          row["log_end"])
                    progress = PartitionProgress(row["start"])
                part = dataclasses.replace(part, end=max(part.end, row["end"]))
                progress.next_offset = max(progress.next_offset, row["next_offset"])
                progress.fetches += row["fetches"]
                progress.bytes += row["bytes"]
                read[key] = (part, progress)
        if error is not None:
            kind, _, message = error.partition(": ")
            empty = {**WireAuditor().task_result().to_row(), "ranges": _ipc(ranges_table([]))}
            yield result_batch(empty, f"{kind if kind in WORKER_ERRORS else 'ValueError'}: {message}")
            return
        yield result_batch({**auditor.task_result().to_row(), "ranges": _ipc(ranges_table(read.values()))})
    return run


# --- On the driver --------------------------------------------------------------------------------------------------

def audit_cluster_spark(url: str, *, topics: Sequence[str] | None = None, start: str | Position = "earliest",
                        end: str | Position = "latest", client_properties: str | Mapping[str, str] | None = None,
                        spark: Any = None, master: str | None = None, tasks: int | None = None,
                        backend: str | Backend | None = None, hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS,
                        now_ms: int | None = None, confirm_hanging: bool = True, max_bytes: int = FETCH_BYTES,
                        range_offsets: int = RANGE_OFFSETS, progress: bool = False) -> WireReport:
    """Audit the cluster at ``url`` with Spark: the same :class:`WireReport` as
    :func:`~idemcore.audit.wire.audit_cluster` (module docstring). ``client_properties``: a client properties
    file or its settings (security), read by the driver and by every worker; ``tasks``: at most this many fetch
    tasks and replay tasks (default twice Spark's default parallelism); ``range_offsets``: the largest piece of a
    partition one fetch task reads; ``spark``/``master``: the session, or the master of a new one. A worker's error
    comes back to the driver as one line."""
    from idemcore.audit.wire_coordinator import ask_coordinators
    from idemcore.net.client_security import ClientSecurity
    from idemcore.net.properties import read_properties

    if spark is None and master is not None:
        check_master(master)
    if tasks is not None and tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    properties = dict(read_properties(client_properties) if isinstance(client_properties, str)
                      else client_properties or {})
    security = ClientSecurity.from_properties(properties) if properties else None
    backend_name = backend.name if isinstance(backend, Backend) else backend
    begin = start if isinstance(start, Position) else Position.parse(start)
    stop = end if isinstance(end, Position) else Position.parse(end)
    begin.check_before(stop)
    started = time.perf_counter()
    with ClusterReader(parse_bootstrap(url), security=security) as reader:
        ranges = plan_ranges(reader, topics, begin, stop)
        rows: list[Any] = []
        if ranges:
            before = time.perf_counter()
            session = get_session(master, spark, progress=progress)
            started += time.perf_counter() - before  # Spark's start is not the audit's time
            count = tasks or 2 * session.sparkContext.defaultParallelism
            pieces = split_ranges(ranges, range_offsets)
            plans = plan_tasks([part for _, part in pieces], count)
            frame = session.range(0, len(plans), numPartitions=len(plans))
            fetched = frame.mapInArrow(_fetch_pieces(pieces, plans, url, properties, backend_name, max_bytes),
                                       PIECE_SCHEMA)
            ordered = fetched.repartition(min(count, len(ranges)), "topic", "partition").sortWithinPartitions(
                "topic", "partition", "piece")
            results = ordered.mapInArrow(_replay_pieces(backend_name), RESULT_SCHEMA)
            rows = collect_task_rows(session, results, progress)
        tables = [_from_ipc(row["ranges"]) for row in rows]
        read = pa.concat_tables(tables) if tables else ranges_table([])
        confirm = (lambda txns: ask_coordinators(reader, txns)) if confirm_hanging else None
        return merge_wire_tasks((LogTaskResult.from_row(row) for row in rows), read, source=reader.describe(),
                                started=started, hanging_after_ms=hanging_after_ms, now_ms=now_ms, confirm=confirm)
