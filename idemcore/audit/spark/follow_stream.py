"""The continuous audit with Spark Structured Streaming: ``idemcore audit --follow SOURCE --engine spark``.

:func:`follow_stream` starts a streaming query over a Parquet directory that gains files (produce attempts, the
``idemcore generate`` format): Spark's file source lists the new files at each trigger, one micro-batch reads
them, ``groupBy("topic", "partition").applyInPandasWithState`` replays each stream's new rows through the kernel
from the producer state its earlier micro-batches left (Spark's state store, :data:`STREAM_STATE_SCHEMA`: the
stream's :class:`~idemcore.engine.table.ProducerStateTable` by :func:`save_state` and the last ordering value
replayed), and returns only the batches with a finding, in the columns of the one-shot audit's findings
(:func:`~idemcore.audit.replayer.findings_schema`). A Kafka log directory is followed in process only
(:mod:`idemcore.audit.follow`).

Order
-----
Within a micro-batch each stream's rows are sorted by the ordering column (``seq_no``, else ``base_offset``) as
:func:`~idemcore.audit.spark.validate_group` sorts them; across micro-batches the state carries the stream's
ring of recent batches, so the verdicts equal one replay of all the data *if each file holds, per stream, only
rows after those of the files before it* (writers append in order; a file whose rows go back in a stream fails
the query naming the stream, it is never judged wrongly). Files are taken whole (write them under a hidden
name, ``.x`` or ``_x``, and rename: Spark ignores hidden names), directly in the directory (Spark's file source
does not look in subdirectories other than ``key=value`` partitions), each once, in modification-time order;
the files listed at a trigger form one micro-batch.

Exactly once, across restarts
-----------------------------
Each micro-batch's findings go to ``OUT/findings-<batch id>.parquet`` (``foreachBatch`` on the driver, written
under a hidden name and renamed; no finding: no file, and any file of that id removed) before Spark writes the
batch's commit to the checkpoint. A query restarted on the checkpoint re-runs a batch whose commit never landed
with the same files (Spark's offset log) from the same state version, so it writes the same findings under the
same name: none twice, none missed. :func:`~idemcore.audit.follow.read_findings` reads them back, as it reads
the in-process follower's. Console lines are printed in the same ``foreachBatch``: a re-run batch prints them
again (at least once; the Parquet files are the record).

Hanging transactions
--------------------
A hanging transaction is not a batch's verdict but a judgement of time passing with no marker; the one-shot
audit makes it at the data's end (against its newest timestamp) and the in-process follower at each round.
Spark calls a stream's state function only when the stream has new rows, so a stream gone quiet would never be
judged; the Spark form reports per-batch findings only (its findings equal the one-shot audit's ``findings``
table). For hanging transactions run the one-shot ``idemcore audit`` of the directory, or ``--engine local``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from idemcore.audit.columns import TOPIC, required_columns
from idemcore.audit.follow import FINDINGS_PREFIX, _lock, _write_atomically, findings_files
from idemcore.audit.replayer import findings_schema
from idemcore.audit.spark.session import java_causes
from idemcore.audit.spark.udfs import STREAM_STATE_SCHEMA
from idemcore.protocol.codes import Origin
from idemcore.record.parquet_files import write_parquet

__all__ = ["DEFAULT_TRIGGER_MS", "attempts_schema", "findings_state_function", "follow_stream",
           "stream_findings_schema"]

DEFAULT_TRIGGER_MS = 1000
#: Spark's file source forgets (and skips) files older than this before the newest: ten years, i.e. never.
MAX_FILE_AGE = "3650d"

_SPARK_TYPES = {pa.string(): "string", pa.int8(): "byte", pa.int16(): "short", pa.int32(): "int",
                pa.int64(): "long", pa.bool_(): "boolean"}


def stream_findings_schema(order_by: str) -> str:
    """The findings columns (:func:`findings_schema`) as a Spark DDL string: the output of the state function."""
    return ", ".join(f"`{field.name}` {_SPARK_TYPES[field.type]}" for field in findings_schema(order_by))


def findings_state_function(order_by: str, origin: str | Origin = "client",
                            backend: str | None = None) -> Callable[[Any, Iterator[Any], Any], Iterator[Any]]:
    """The function for ``groupBy("topic", "partition").applyInPandasWithState(f, stream_findings_schema(order),
    STREAM_STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)``: as
    :func:`~idemcore.audit.spark.validate_stream` (same state), but it returns only the batches with a finding,
    in the one-shot audit's findings columns (``expected`` included): what comes back from the Python workers
    is what is reported."""
    origin = Origin.parse(origin)
    schema = findings_schema(order_by)

    def follow_findings(key: Any, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        from idemcore.audit.replayer import finding_names
        from idemcore.engine.persist import load_state, save_state
        from idemcore.engine.table import ProducerStateTable
        from idemcore.engine.validate import validate
        from idemcore.kernels.columns import BatchColumns

        pd = import_module("pandas")
        frames = [frame for frame in pdfs if len(frame)]
        if not frames:
            return
        pdf = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        rows = pdf.sort_values(order_by, kind="stable", ignore_index=True)
        first = int(rows[order_by].iloc[0])
        if state.exists:
            saved, last = state.get
            if first < last:
                raise ValueError(f"stream {tuple(key)}: a micro-batch holds {order_by} {first}, before {last} "
                                 "already replayed; each file must hold only later rows of a stream than the "
                                 "files before it")
            table = load_state(saved, backend)
        else:
            table = ProducerStateTable(row_capacity=64, stream_capacity=1)
        packed = BatchColumns.coerce(rows)
        verdicts = validate(packed, table, origin, backend)
        state.update((save_state(table), int(rows[order_by].iloc[-1])))
        found = np.flatnonzero(verdicts.finding)
        if not len(found):
            return
        columns: dict[str, Any] = packed.take(found).to_dict()
        columns["partition"] = columns.pop("stream")  # the group's Kafka partition, packed as its stream
        columns[TOPIC] = rows[TOPIC].to_numpy()[found].astype(object)
        columns[order_by] = rows[order_by].to_numpy()[found].astype(np.int64)
        columns.update({
            "finding": finding_names(verdicts.finding[found]).to_numpy(zero_copy_only=False),
            "error_code": verdicts.error_code[found].astype(np.int16),
            "expected": verdicts.expected[found].astype(np.int64),
            "assigned_base_offset": verdicts.base_offset[found].astype(np.int64),
            "assigned_last_offset": verdicts.last_offset[found].astype(np.int64)})
        yield pd.DataFrame({field.name: columns[field.name] for field in schema})

    return follow_findings


def _source_dir(source: str | os.PathLike[str]) -> Path:
    from idemcore.audit.follow import LOG_DIR, source_kind

    path = Path(source)
    if not path.is_dir():
        raise FileNotFoundError(f"{source}: no such directory (the Spark follow watches a directory of Parquet "
                                "files)")
    if source_kind(path) == LOG_DIR:
        raise ValueError(f"{source} is a Kafka log directory: it is followed in process only "
                         "(`--engine local`, the default); the Spark engine follows a Parquet directory")
    if (path / "data").is_dir():
        path = path / "data"  # a dataset written by `idemcore generate`
    return path


def attempts_schema() -> str:
    """The columns of ``idemcore generate``'s produce attempts (Spark DDL): what a follow of a directory with
    no file yet expects."""
    from idemcore.kernels.columns import INPUT_COLUMNS

    types = [f"`{name}` {_SPARK_TYPES[pa.from_numpy_dtype(dtype)]}" for name, dtype in INPUT_COLUMNS.items()
             if name != "base_offset"]
    return ", ".join([f"`{TOPIC}` string", *types, "`seq_no` long"])


def _input_schema(spark: Any, source: Path, order_by: str | None, schema: Any) -> tuple[Any, list[str], str]:
    """The source's Spark schema (``schema``, else its first file's, else :func:`attempts_schema`), the
    columns to read and the ordering column."""
    from pyspark.sql.types import StructType

    if schema is None:
        files = sorted(p for p in source.glob("*.parquet") if not p.name.startswith((".", "_")))
        try:
            schema = spark.read.parquet(str(files[0])).schema if files else attempts_schema()
        except Exception as exc:  # py4j's error with a Java stack trace: a file half written in place, or corrupt
            raise ValueError(f"cannot read {files[0]}: {java_causes(exc)} (a writer should write under a "
                             "hidden name, then rename)") from None
    if not isinstance(schema, StructType):
        schema = StructType.fromDDL(schema)
    names, order = required_columns(schema.fieldNames(), order_by)
    return schema, names, order


def _last_commit(checkpoint: Path) -> int | None:
    commits = [int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
    return max(commits) if commits else None


#: The query started on each findings directory by this process, and the lock fd held on it.
_QUERIES: dict[Path, Any] = {}
_LOCKS: dict[Path, int | None] = {}


def lock_out(out: Path) -> None:
    """Refuse ``out`` if a query of this process is still writing there, or another process follows it; else
    hold its lock (``.follow-lock``, the in-process follower's) for this process's life."""
    out.mkdir(parents=True, exist_ok=True)
    key = out.resolve()
    running = _QUERIES.get(key)
    if running is not None and running.isActive:
        raise ValueError(f"{out} is written by a running query of this process ({running.id}); stop it first")
    if key not in _LOCKS:
        _LOCKS[key] = _lock(out)


def follow_stream(spark: Any, source: str | os.PathLike[str], out: str | os.PathLike[str],
                  checkpoint: str | os.PathLike[str] | None = None, *, trigger: dict[str, Any] | None = None,
                  order_by: str | None = None, origin: str | Origin = "client", backend: str | None = None,
                  on_batch: Callable[[int, pa.Table], None] | None = None, fsync: bool = True,
                  query_name: str | None = None, schema: Any = None) -> Any:
    """Start the continuous audit of the Parquet directory ``source`` on ``spark`` and return the
    ``StreamingQuery`` (see the module docstring). Findings go to ``out/findings-<batch id>.parquet``
    (a local directory; :func:`~idemcore.audit.follow.read_findings` reads them), Spark's checkpoint to
    ``checkpoint`` (default ``out/_checkpoint``): a query started again on it resumes where the last one
    committed. ``trigger``: the keyword of ``DataStreamWriter.trigger`` (default ``{"processingTime": "1
    second"}``; ``{"availableNow": True}`` reads what is there and stops). ``on_batch(batch_id, findings)``
    is called on the driver after each micro-batch's findings are written (the CLI prints them). ``schema``:
    the input's columns (a ``StructType`` or DDL string; default: those of the first file there, else
    :func:`attempts_schema`, the ``idemcore generate`` format).

    One query per ``out`` directory: another process's is refused by the in-process follower's lock (held
    for this process's life), one of this process still active by a ValueError."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    directory = _source_dir(source)
    out = Path(out)
    checkpoint = Path(checkpoint) if checkpoint is not None else out / "_checkpoint"
    for name, where in (("out", out), ("checkpoint", checkpoint)):
        if directory.resolve() == where.resolve() or directory.resolve() in where.resolve().parents:
            raise ValueError(f"{name} {where} is inside the followed {directory}: it would be read as input")
    schema, names, order = _input_schema(spark, directory, order_by, schema)
    lock_out(out)
    last = _last_commit(checkpoint)
    written = findings_files(out)
    if written and last is None:
        raise FileExistsError(f"{out} holds findings of an earlier follow but {checkpoint} holds no committed "
                              "micro-batch; give its checkpoint directory, or another out")
    for batch_id, path in written:  # of a batch whose commit never landed: it runs again, same name
        if last is not None and batch_id > last:
            path.unlink()
    for partial in out.glob(f".{FINDINGS_PREFIX}*.partial"):
        partial.unlink()
    # maxFileAge: Spark's file source may ignore a file whose modification time is older than the newest seen by
    # more than this (default a week: a copy keeping old times); every file is to be read, as in process.
    stream = spark.readStream.schema(schema).option("maxFileAge", MAX_FILE_AGE).parquet(str(directory)).select(*names)
    findings = stream.groupBy(TOPIC, "partition").applyInPandasWithState(
        findings_state_function(order, origin, backend), stream_findings_schema(order), STREAM_STATE_SCHEMA,
        "append", GroupStateTimeout.NoTimeout)
    arrow_schema = findings_schema(order)

    def write_batch(df: Any, batch_id: int) -> None:
        table = df.toArrow()
        table = table.cast(arrow_schema) if table.num_rows else arrow_schema.empty_table()
        path = out / f"{FINDINGS_PREFIX}{batch_id:08d}.parquet"
        if table.num_rows:
            _write_atomically(path, lambda partial: write_parquet(table, partial), fsync)
        elif path.exists():
            path.unlink()
        if on_batch is not None:
            on_batch(batch_id, table)

    writer = findings.writeStream.outputMode("append").option("checkpointLocation", str(checkpoint))
    if query_name:
        writer = writer.queryName(query_name)
    query = writer.foreachBatch(write_batch).trigger(
        **(trigger or {"processingTime": f"{DEFAULT_TRIGGER_MS} milliseconds"})).start()
    _QUERIES[out.resolve()] = query
    return query
