"""audit_cluster_spark(url): a live cluster audited with Spark, each executor fetching its own partitions.

The driver asks the cluster for its partitions and their offsets (Metadata, ListOffsets: where each range starts
and stops, :func:`~idemcore.audit.wire.plan_ranges`) and packs whole partitions into tasks by their offsets to
read (:func:`plan_tasks`). The plans travel in the task function's closure, one Spark partition (one row: the task
number) per task, as Spark's Kafka source hands offset ranges to its executors. Each Python worker connects to the
cluster itself (the client properties travel as text: TLS contexts and SASL logins are rebuilt there), fetches its
partitions from their leaders and replays them with :func:`~idemcore.audit.wire.audit_ranges`, the function the
in-process audit runs over every partition, and sends back one row: its task result (findings, per-partition
summaries, open transactions, problems; Arrow IPC streams), the ranges it read, and an ``error`` column. The
driver merges the rows with :func:`~idemcore.audit.wire.merge_wire_tasks`, as the in-process audit merges its one
task, and asks the coordinators about the open transactions: the same :class:`~idemcore.audit.wire.WireReport`.

A partition is never split between tasks: its replay needs the producer state of every batch before, from the
first offset read, so offset ranges of one partition read by different executors could not be judged apart.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from idemcore.audit.logdir import LogTaskResult
from idemcore.audit.replayer import _from_ipc, _ipc
from idemcore.audit.report import DEFAULT_HANGING_AFTER_MS
from idemcore.audit.spark.session import check_master, get_session
from idemcore.audit.spark.task_rows import collect_task_rows, error_batch, result_batch
from idemcore.audit.wire import WireReport, merge_wire_tasks, plan_ranges, ranges_table
from idemcore.audit.wire_fetch import FETCH_BYTES, ClusterReader, PartitionRange, Position, parse_bootstrap
from idemcore.kernels import Backend

#: One row per task: its result, the ranges it read (Arrow IPC), or the error that stopped it.
RESULT_SCHEMA = f"{LogTaskResult.SPARK_SCHEMA}, ranges binary, error string"


def plan_tasks(ranges: Sequence[PartitionRange], tasks: int) -> list[list[PartitionRange]]:
    """Up to ``tasks`` tasks of whole partitions: the largest range (offsets to read) first onto the lightest task
    (ties: fewer partitions, then the lower task number); each task lists its partitions in the given order."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    sizes = [max(0, r.end - r.start) for r in ranges]
    bins: list[tuple[int, int, int, list[int]]] = [(0, 0, k, []) for k in range(min(tasks, len(ranges)))]
    heapq.heapify(bins)
    for index in sorted(range(len(ranges)), key=lambda k: (-sizes[k], k)):
        load, count, task, members = heapq.heappop(bins)
        members.append(index)
        heapq.heappush(bins, (load + sizes[index], count + 1, task, members))
    return [[ranges[k] for k in sorted(members)] for _, _, _, members in sorted(bins, key=lambda b: b[2])]


def _task_row(task: LogTaskResult, ranges: Any) -> dict[str, Any]:
    return {**task.to_row(), "ranges": _ipc(ranges)}


def _audit_tasks(plans: list[list[PartitionRange]], url: str, properties: dict[str, str], backend: str | None,
                 max_bytes: int):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        # In a Python worker: connect, fetch and replay this task's partitions; only what the report needs goes back.
        from idemcore.audit.wire import WireAuditor, audit_ranges
        from idemcore.errors import IdemcoreError
        from idemcore.net.client_security import ClientSecurity

        for batch in batches:
            for number in batch.column("id").to_pylist():
                plan = plans[number]
                try:
                    security = ClientSecurity.from_properties(properties) if properties else None
                    with ClusterReader(parse_bootstrap(url), security=security) as reader:
                        reader.refresh(sorted({r.topic for r in plan}))
                        task, ranges = audit_ranges(reader, plan, backend=backend, max_bytes=max_bytes)
                except (IdemcoreError, ValueError, OSError) as exc:
                    empty = _task_row(WireAuditor().task_result(), ranges_table([]))
                    failed = exc if isinstance(exc, ValueError | OSError) else ValueError(str(exc))
                    yield error_batch(failed, empty, [url], [f"{r.topic}-{r.partition}" for r in plan],
                                      "fetching partition(s)")
                else:
                    yield result_batch(_task_row(task, ranges))
    return run


def audit_cluster_spark(url: str, *, topics: Sequence[str] | None = None, start: str | Position = "earliest",
                        end: str | Position = "latest", client_properties: str | Mapping[str, str] | None = None,
                        spark: Any = None, master: str | None = None, tasks: int | None = None,
                        backend: str | Backend | None = None, hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS,
                        now_ms: int | None = None, confirm_hanging: bool = True, max_bytes: int = FETCH_BYTES,
                        progress: bool = False) -> WireReport:
    """Audit the cluster at ``url`` with Spark: the same :class:`WireReport` as
    :func:`~idemcore.audit.wire.audit_cluster` (module docstring). ``client_properties``: a client properties
    file or its settings (security), read by the driver and by every worker; ``tasks``: at most this many tasks
    (default twice Spark's default parallelism), each of whole partitions; ``spark``/``master``: the session,
    or the master of a new one. A worker's error comes back to the driver as one line."""
    from idemcore.audit.wire_coordinator import ask_coordinators
    from idemcore.broker.config import read_properties
    from idemcore.net.client_security import ClientSecurity

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
    started = time.perf_counter()
    with ClusterReader(parse_bootstrap(url), security=security) as reader:
        ranges = plan_ranges(reader, topics, begin, stop)
        rows: list[Any] = []
        if ranges:
            before = time.perf_counter()
            session = get_session(master, spark, progress=progress)
            started += time.perf_counter() - before  # Spark's start is not the audit's time
            plans = plan_tasks(ranges, tasks or 2 * session.sparkContext.defaultParallelism)
            frame = session.range(0, len(plans), numPartitions=len(plans))
            results = frame.mapInArrow(_audit_tasks(plans, url, properties, backend_name, max_bytes), RESULT_SCHEMA)
            rows = collect_task_rows(session, results, progress)
        tables = [_from_ipc(row["ranges"]) for row in rows]
        read = pa.concat_tables(tables) if tables else ranges_table([])
        confirm = (lambda txns: ask_coordinators(reader, txns)) if confirm_hanging else None
        return merge_wire_tasks((LogTaskResult.from_row(row) for row in rows), read, source=reader.describe(),
                                started=started, hanging_after_ms=hanging_after_ms, now_ms=now_ms, confirm=confirm)
