"""audit_log_dir_spark(path): Kafka log directories audited with Spark, in path mode over segments.

The driver lists the partitions (:func:`~idemcore.record.kafka_files.list_log_dir`: names and sizes of files,
never their contents) and packs whole partitions into tasks by their segments' bytes (:func:`plan_partitions`).
The plans travel in the task function's closure, one Spark partition (one row: the task number) per task. Each
Python worker scans and replays its own partitions with :func:`~idemcore.audit.logdir.audit_partitions`, the
function the in-process audit runs over every partition, and sends back one row: its
:class:`~idemcore.audit.logdir.LogTaskResult` (Arrow IPC streams) and an ``error`` column. The driver merges the
rows with :func:`~idemcore.audit.logdir.merge_log_tasks`, as the in-process audit merges its one task: the same
:class:`~idemcore.audit.logdir.LogDirReport`, hanging transactions judged after the merge against the newest
batch of the whole directory.

Every worker must be able to read the paths the driver lists (one machine, or storage mounted at the same path
everywhere). Relative paths are made absolute against the driver's working directory for the workers, and the
report names files as they were given.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idemcore.audit.logdir import LogDirReport, LogTaskResult, merge_log_tasks, source_label
from idemcore.audit.report import DEFAULT_HANGING_AFTER_MS
from idemcore.audit.spark.session import check_master, get_session
from idemcore.audit.spark.task_rows import collect_task_rows, error_batch, result_batch
from idemcore.kernels import Backend
from idemcore.record.kafka_files import PartitionFiles, list_log_dir

#: One row per task: its result, or the data error that stopped it (with an empty result).
RESULT_SCHEMA = f"{LogTaskResult.SPARK_SCHEMA}, error string"
#: The errors a worker sends back, by name, the most specific first (raised again as such on the driver).


@dataclass(frozen=True)
class LogTaskPlan:
    """What one task audits: whole partitions (in listing order) and their segments' bytes."""

    partitions: tuple[PartitionFiles, ...]
    bytes: int


def partition_bytes(files: PartitionFiles) -> int:
    """The bytes of a partition's segments (``.log`` files), from the file system's metadata only."""
    return sum(os.stat(segment.log).st_size for segment in files.segments)


def plan_partitions(partitions: Sequence[PartitionFiles], tasks: int,
                    size: Callable[[PartitionFiles], int] = partition_bytes) -> list[LogTaskPlan]:
    """Up to ``tasks`` tasks, each owning whole partitions: the largest partition first onto the lightest task
    (by segment bytes; ties go to the task with fewer partitions, then the lower task number). Every task gets a
    partition, so there are ``min(tasks, len(partitions))`` of them; each lists its partitions in listing order.
    ``size``: a partition's bytes (default: :func:`partition_bytes`)."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    sizes = [int(size(files)) for files in partitions]
    bins: list[tuple[int, int, int, list[int]]] = [(0, 0, k, []) for k in range(min(tasks, len(partitions)))]
    heapq.heapify(bins)
    for index in sorted(range(len(partitions)), key=lambda k: (-sizes[k], k)):
        load, count, task, members = heapq.heappop(bins)  # the lightest task takes the next biggest partition
        members.append(index)
        heapq.heappush(bins, (load + sizes[index], count + 1, task, members))
    return [LogTaskPlan(tuple(partitions[k] for k in sorted(members)), load)
            for load, _, _, members in sorted(bins, key=lambda b: b[2])]


# --- In the workers -------------------------------------------------------------------------------------------------

def _absolute(files: PartitionFiles, cwd: Path) -> PartitionFiles:
    """``files`` with every path made absolute against the driver's working directory ``cwd``."""
    if files.path.is_absolute():
        return files

    def at(path: Path | None) -> Path | None:
        return None if path is None else cwd / path

    segments = tuple(dataclasses.replace(s, log=cwd / s.log, index=at(s.index), time_index=at(s.time_index),
                                         txn_index=at(s.txn_index)) for s in files.segments)
    return dataclasses.replace(files, path=cwd / files.path, segments=segments)


def _renamed(task: LogTaskResult, directories: dict[str, str]) -> LogTaskResult:
    """``task`` with the files it names as the driver listed them: every file is ``<partition directory>/<name>``,
    and ``directories`` maps each partition directory as read (absolute) to as listed."""
    if not directories:
        return task
    import pyarrow as pa

    def name(file: str | None) -> str | None:
        if file is None:
            return None
        path = Path(file)
        listed = directories.get(str(path.parent))
        return file if listed is None else str(Path(listed) / path.name)

    def rename(table: pa.Table) -> pa.Table:
        index = table.schema.get_field_index("file")
        return table.set_column(index, "file", pa.array([name(f) for f in table.column(index).to_pylist()],
                                                        pa.string()))

    return LogTaskResult(task.result, rename(task.located_findings), rename(task.open_txn_places),
                         rename(task.problems))


def _error_batch(exc: Exception, plan: LogTaskPlan) -> Any:
    return error_batch(exc, LogTaskResult.empty().to_row(), [str(files.path) for files in plan.partitions],
                       [files.name for files in plan.partitions], "auditing partition(s)")


def _audit_tasks(plans: list[LogTaskPlan], cwd: str, backend: str | None, verify_crc: bool):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        # In a Python worker: scan and replay this task's partitions; only what the report needs goes back.
        from idemcore.audit.logdir import audit_partitions

        for batch in batches:
            for number in batch.column("id").to_pylist():
                plan = plans[number]
                try:
                    read = [_absolute(files, Path(cwd)) for files in plan.partitions]
                    task = audit_partitions(read, backend=backend, verify_crc=verify_crc)
                    directories = {str(absolute.path): str(files.path)
                                   for files, absolute in zip(plan.partitions, read, strict=True)
                                   if absolute.path != files.path}
                except (ValueError, OSError) as exc:
                    yield _error_batch(exc, plan)
                else:
                    yield result_batch(_renamed(task, directories).to_row())
    return run


# --- On the driver --------------------------------------------------------------------------------------------------

def audit_log_dir_spark(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, spark: Any = None, master: str | None = None,
    tasks: int | None = None, backend: str | Backend | None = None,
    hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS, now_ms: int | None = None, verify_crc: bool = True,
    progress: bool = False, use_transaction_log: bool = True,
) -> LogDirReport:
    """Audit Kafka log directories with Spark: the same :class:`LogDirReport` as
    :func:`~idemcore.audit.logdir.audit_log_dir` (findings, located findings, open transactions and where they
    start, file problems, counts), with the partitions spread over Spark tasks.

    ``path``: a log directory, a partition directory, a segment file, or a list of them; every worker must read
    it at the same path. ``tasks``: how many tasks at most (default twice Spark's default parallelism); a task
    owns whole partitions, packed by segment bytes. ``spark``/``master``: the session to use, or the master of a
    new one (``local[*]``). ``backend``, ``hanging_after_ms``, ``now_ms``, ``verify_crc``, ``use_transaction_log``:
    as for the in-process audit (``now_ms`` defaults to the newest batch timestamp of the whole directory; the
    ``__transaction_state`` partitions are read on the driver, after the merge). A worker's
    error (a file that cannot be read) is raised on the driver as the worker raised it, in one line.
    """
    if spark is None and master is not None:
        check_master(master)
    if tasks is not None and tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    if hanging_after_ms < 0:
        raise ValueError(f"hanging_after_ms must be >= 0, got {hanging_after_ms}")
    backend_name = backend.name if isinstance(backend, Backend) else backend  # a name travels to the workers
    started = time.perf_counter()
    listing = list_log_dir(path)
    rows: list[Any] = []
    if listing.partitions:  # else nothing to read: no session started
        before = time.perf_counter()
        session = get_session(master, spark, progress=progress)
        started += time.perf_counter() - before  # Spark's start is not the audit's time
        plans = plan_partitions(listing.partitions, tasks or 2 * session.sparkContext.defaultParallelism)
        # One row (the task number) per Spark partition; the plans travel with the function.
        frame = session.range(0, len(plans), numPartitions=len(plans))
        results = frame.mapInArrow(_audit_tasks(plans, os.getcwd(), backend_name, verify_crc), RESULT_SCHEMA)
        rows = collect_task_rows(session, results, progress)
    return merge_log_tasks((LogTaskResult.from_row(row) for row in rows), listing, source=source_label(path),
                           started=started, hanging_after_ms=hanging_after_ms, now_ms=now_ms,
                           use_transaction_log=use_transaction_log, backend=backend)
