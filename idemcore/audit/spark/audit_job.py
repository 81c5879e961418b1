"""audit(source): findings and summaries of every stream, from Parquet paths (fast) or a DataFrame."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from idemcore.audit import DEFAULT_HANGING_AFTER_MS, AuditReport, TaskResult
from idemcore.audit.columns import TOPIC
from idemcore.audit.report import REPORT_FILES
from idemcore.audit.spark.frame import clustered
from idemcore.audit.spark.plan import WATCHED, Footer, TaskPlan, plan_row_groups, read_footers
from idemcore.audit.spark.scan import scanned_parquet
from idemcore.audit.spark.schema import (
    check_arrow_schemas,
    check_footer_values,
    check_input,
)
from idemcore.audit.spark.session import check_master, get_session, verify_page_crcs
from idemcore.audit.spark.task_rows import collect_task_rows, error_batch, result_batch
from idemcore.kernels.columns import INPUT_COLUMNS
from idemcore.protocol.codes import Origin

#: One row per task: its result, or the data error that stopped it (with an empty result).
RESULT_SCHEMA = f"{TaskResult.SPARK_SCHEMA}, error string"
#: The data errors a worker sends back, by name (the most specific first).


def _error_batch(exc: Exception, order: str, files: Sequence[str] = ()) -> Any:
    return error_batch(exc, TaskResult.empty(order).to_row(), list(files), list(files), "in the rows of")


def task_threads() -> int:
    """The cores Spark gave this task (``spark.task.cpus``, default 1): the replayer's threads, so a job run
    with ``--conf spark.task.cpus=2`` validates each task's streams on two cores. 1 outside a task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return max(1, int(context.cpus())) if context is not None else 1


def _audit_paths(plans: list[TaskPlan], origin: Origin, target: Any, order: str, backend: str | None):
    # Names and types were checked on the driver: a worker reads its files and gives them the target schema.
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        # In a Python worker: read this task's row groups directly; only the findings go back.
        from idemcore.audit.replayer import StreamReplayer, feed_in_order
        from idemcore.audit.spark.plan import read_pieces

        for batch in batches:
            for task in batch.column("id").to_pylist():
                plan = plans[task]
                try:
                    replayer = StreamReplayer(origin, order, backend, threads=task_threads())
                    for piece in read_pieces(plan, target):  # no stream in two pieces: each replayed in turn
                        feed_in_order(piece, replayer)
                    result = replayer.finish()
                except (ValueError, OSError) as exc:
                    yield _error_batch(exc, order, [path for path, _ in plan.groups])
                else:
                    yield result_batch(result.to_row())
    return run


def _audit_rows(origin: Origin, order_by: str, backend: str | None):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        # In a Python worker: this task's streams arrive sorted, in Arrow batches; state is carried across them.
        from idemcore.audit import StreamReplayer

        replayer = StreamReplayer(origin, order_by, backend)
        try:
            for batch in batches:
                replayer.feed(batch, reuse=True)  # (the verdicts are not kept)
        except ValueError as exc:
            yield _error_batch(exc, order_by)
        else:
            yield result_batch(replayer.finish().to_row())
    return run


def _path_job(session: Any, footers: list[Footer], target: Any, order: str, origin: Origin, backend: str | None,
              tasks: int | None) -> Any:
    """The path-mode job over the row groups of ``footers``: one Spark partition per task plan, whose Python
    worker reads its row groups itself; one result row per task."""
    count = tasks or 2 * session.sparkContext.defaultParallelism
    plans = plan_row_groups([group for footer in footers for group in footer.groups], count)
    # One row (the task number) per Spark partition; the plans travel with the function.
    tasks_frame = session.range(0, len(plans), numPartitions=len(plans))
    return tasks_frame.mapInArrow(_audit_paths(plans, origin, target, order, backend), RESULT_SCHEMA)


def _session(master: str | None, spark: Any, started: float, progress: bool) -> tuple[Any, float]:
    # The session, and the audit's start moved later by the time Spark took to start: not the audit's time.
    before = time.perf_counter()
    session = get_session(master, spark, progress=progress)
    return session, started + time.perf_counter() - before


def check_out(out: Path, source: Any) -> None:
    """``out`` must be a directory (or not exist yet) outside every audited path: the findings written
    there would otherwise be read as input by the next audit."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"out={out} exists and is not a directory")
    if out.is_dir():
        _check_previous_report(out)
    sources = source if isinstance(source, list | tuple) else [source]
    for path in sources:
        if not isinstance(path, str | os.PathLike):
            continue
        text = str(path)
        if text.startswith("file://"):
            text = urllib.parse.urlparse(text).path
        elif "://" in text:
            continue  # another file system: out (a local path) cannot be inside it
        audited = Path(text).resolve()
        if audited.is_file():
            audited = audited.parent  # a report beside the file would be read when its directory is audited
        if out.resolve() == audited or audited in out.resolve().parents:
            raise ValueError(f"out={out} is inside the audited path {path}: the next audit would read its "
                             "findings as input; write the report elsewhere")


def _check_previous_report(out: Path) -> None:
    """The report's files may replace only an earlier report's: its summary.json (JSON with the report's
    totals) marks the Parquet files beside it as idemcore's too."""
    names = [name for name in REPORT_FILES.values() if (out / name).exists() or (out / name).is_symlink()]
    if not names:
        return
    summary = out / REPORT_FILES["summary"]
    try:
        previous = json.loads(summary.read_text()) if summary.is_file() and not summary.is_symlink() else None
    except (OSError, ValueError):
        previous = None
    if not (isinstance(previous, dict) and {"batches", "findings"} <= previous.keys()):
        raise FileExistsError(f"out={out} holds {', '.join(names)} that an audit did not write; refusing to "
                              "replace them (choose another directory)")


def audit(
    source: Any, *, spark: Any = None, master: str | None = None, origin: str | Origin = "client",
    order_by: str | None = None, tasks: int | None = None, hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS,
    now_ms: int | None = None, out: str | os.PathLike | None = None, backend: str | None = None,
    progress: bool = False,
) -> AuditReport:
    """Audit every (topic, partition) stream of ``source`` with Spark; return an :class:`AuditReport`.

    ``source``: a Parquet file or directory (or a list of them) — *path mode*: Spark distributes row
    groups, Python workers read them with pyarrow, only findings and summaries come back — or a Spark
    DataFrame (whose session then checks Parquet page CRCs:
    :func:`~idemcore.audit.spark.session.verify_page_crcs`). A DataFrame that is a plain scan of Parquet
    files (``spark.read.parquet(...)``, maybe with columns selected; see
    :func:`~idemcore.audit.spark.scan.scanned_parquet`) is audited in path mode on its files; any other is
    clustered by (topic, partition) and sorted first, and its rows (the columns the
    replay reads) go to Python through Arrow. Files may differ in their columns' types
    and in the optional columns they have (see :func:`~idemcore.audit.spark.schema.check_arrow_schemas`);
    a null or a value out of range raises ValueError naming the file, column, value and row, before
    Spark starts where the files' statistics show it. ``tasks``: in path mode, how many
    tasks (default twice Spark's default parallelism); for another DataFrame, the partitions of its shuffle
    (default ``spark.sql.shuffle.partitions``). ``hanging_after_ms`` / ``now_ms``: see
    :meth:`AuditReport.from_results`. ``out``: also write ``findings.parquet`` and ``summary.json``
    there. ``spark``/``master``: the session to use, or the master of a new one (``local[*]``).
    """
    origin = Origin.parse(origin)  # the enum travels to the workers
    if spark is None and master is not None:
        check_master(master)  # before reading any footer
    if out is not None:
        check_out(Path(out), source)  # before the job, not after it
    started = time.perf_counter()
    if isinstance(source, str | os.PathLike | list | tuple):
        # On the driver, before any job: each footer read once; names, types and statistics checked.
        watched = WATCHED if order_by is None or order_by in WATCHED else (*WATCHED, order_by)
        footers = read_footers(source, watched)
        target, order = check_arrow_schemas(((f.path, f.schema) for f in footers), order_by)
        check_footer_values(footers, target)
        session, started = _session(master, spark, started, progress)
        results = _path_job(session, footers, target, order, origin, backend, tasks)
        label = str(source) if not isinstance(source, list | tuple) else f"{len(footers)} files"
    else:
        session, started = _session(master, spark, started, progress)
        verify_page_crcs(source.sparkSession)
        order = check_input(source.schema, order_by)
        scan = scanned_parquet(source, order)
        if scan is not None:
            # A plain scan of Parquet files: path mode on its files, the rows never leave the JVM as rows.
            footers, target = scan
            check_footer_values(footers, target)
            results = _path_job(session, footers, target, order, origin, backend, tasks)
        else:
            # Only the columns the replay reads cross the shuffle and the hop to Python.
            read = [name for name in source.columns if name in (TOPIC, *INPUT_COLUMNS, order)]
            results = clustered(source.select(*read), order, tasks).mapInArrow(_audit_rows(origin, order, backend),
                                                                               RESULT_SCHEMA)
        label = "DataFrame"
    rows = collect_task_rows(session, results, progress)
    report = AuditReport.from_results((TaskResult.from_row(row) for row in rows), order_by=order,
                                      seconds=time.perf_counter() - started, hanging_after_ms=hanging_after_ms,
                                      now_ms=now_ms, source=label)
    if out is not None:
        report.write(Path(out))
    return report
