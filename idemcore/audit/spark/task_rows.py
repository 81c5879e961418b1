"""The row a Python worker sends back for its task, shared by every path-mode job: the task's result columns
plus an ``error`` column, so a data error comes back as one line instead of a failed task (Spark would retry
it in vain and log the worker's traceback with a Java stack trace)."""

from __future__ import annotations

from typing import Any

from idemcore.audit.spark.progress import spark_progress
from idemcore.audit.spark.schema import InputError, worker_error

#: The errors a worker sends back by name, most specific first (the first a raised error is an instance of).
WORKER_ERRORS: dict[str, type[Exception]] = {
    "InputError": InputError, "FileNotFoundError": FileNotFoundError, "PermissionError": PermissionError,
    "IsADirectoryError": IsADirectoryError, "NotADirectoryError": NotADirectoryError, "OSError": OSError,
    "ValueError": ValueError,
}


def result_batch(row: dict[str, Any], error: str | None = None) -> Any:
    """One task's result row (``to_row()`` of its result) and its error, as an Arrow batch."""
    import pyarrow as pa

    batch = pa.RecordBatch.from_pylist([row])
    return pa.RecordBatch.from_arrays([*batch.columns, pa.array([error], pa.string())],
                                      names=[*batch.schema.names, "error"])


def error_batch(exc: Exception, empty_row: dict[str, Any], known: list[str], shown: list[str], where: str) -> Any:
    """``exc`` as a task row: its first line, its kind, and ``where`` with ``shown`` when none of ``known``
    (the files or directories the task read) is named in it."""
    message = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    if shown and not any(name in message for name in known):
        message += f" ({where} {', '.join(shown[:3])}{f' and {len(shown) - 3} more' if len(shown) > 3 else ''})"
    kind = next(name for name, kind in WORKER_ERRORS.items() if isinstance(exc, kind))
    return result_batch(empty_row, f"{kind}: {message}")


def collect_task_rows(session: Any, results: Any, progress: bool) -> list[Any]:
    """Run the job (with its progress bar) and return its rows; a worker's data error is raised here as the
    worker raised it (its kind, its one line)."""
    try:
        with spark_progress(session, "auditing", enabled=progress):
            rows = results.collect()
    except Exception as exc:
        error = worker_error(exc)
        if error is not None:
            raise error from exc
        raise
    raise_task_errors(rows)
    return rows


def raise_task_errors(rows: list[Any]) -> None:
    """Raise the first task's error as the worker raised it (its kind, its one line)."""
    for row in rows:
        if row["error"]:
            kind, _, message = row["error"].partition(": ")
            raise WORKER_ERRORS.get(kind, ValueError)(message)
