"""StreamReplayer: the kernel over the batches of one task, state carried from batch to batch.

A task owns whole (topic, partition) streams and sees each stream's batches in
order; that is what makes the answer independent of how the rows were cut
into Arrow batches. The replayer returns each batch's verdicts (for
``spark.validate``) and keeps what an audit needs: the batches with findings,
counts per partition, and the transactions still open at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from idemcore.audit.aborted import AbortedRecords
from idemcore.audit.columns import TOPIC, required_columns
from idemcore.audit.keys import StreamKeys
from idemcore.audit.shards import ShardedState
from idemcore.findings import Finding
from idemcore.kernels import Backend, get_backend
from idemcore.protocol.codes import ControlType, Origin, Status
from idemcore.record.columns import COLUMNS, BatchMetadata
from idemcore.state.validate import Verdicts

_FINDING_NAMES = pa.array([f.label or None for f in Finding], pa.string())
_STATUS_NAMES = pa.array([s.name.lower() for s in Status], pa.string())


def finding_names(codes: np.ndarray) -> pa.Array:
    """Report names of finding codes (docs/rules.md §5) (null for a batch simply appended)."""
    return _FINDING_NAMES.take(pa.array(codes))


def status_names(codes: np.ndarray) -> pa.Array:
    """``appended``, ``duplicate`` or ``rejected`` for status codes."""
    return _STATUS_NAMES.take(pa.array(codes))
#: Per (topic, partition) counters an audit keeps.
PARTITION_COUNTERS = ("batches", "appended", "duplicates", "rejected", "records", "committed_txns", "aborted_txns")
#: Rows fed to the kernel at a time (bounds the verdict arrays of a big task).
FEED_ROWS = 1 << 20


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


@dataclass(frozen=True)
class TaskResult:
    """What one task found: findings, per-partition counts, open transactions, and the time span seen."""

    findings: pa.Table
    partitions: pa.Table
    open_txns: pa.Table
    batches: int
    min_timestamp: int
    max_timestamp: int

    #: The Spark schema of :meth:`to_row` (a DDL string).
    SPARK_SCHEMA = ("findings binary, partitions binary, open_txns binary, batches long, "
                    "min_timestamp long, max_timestamp long")

    def to_row(self) -> dict[str, Any]:
        """One row for the JVM: the three tables as Arrow IPC streams plus the scalars."""
        return {"findings": _ipc(self.findings), "partitions": _ipc(self.partitions),
                "open_txns": _ipc(self.open_txns), "batches": self.batches,
                "min_timestamp": self.min_timestamp, "max_timestamp": self.max_timestamp}

    @classmethod
    def empty(cls, order_by: str) -> TaskResult:
        """The result of a task that saw no batches."""
        return StreamReplayer(order_by=order_by).finish()

    @classmethod
    def from_row(cls, row: Any) -> TaskResult:
        return cls(_from_ipc(row["findings"]), _from_ipc(row["partitions"]), _from_ipc(row["open_txns"]),
                   int(row["batches"]), int(row["min_timestamp"]), int(row["max_timestamp"]))


class StreamReplayer:
    """Feed a task's batches in stream order; read verdicts per feed and a :class:`TaskResult` at the end."""

    def __init__(self, origin: str | Origin = "client", order_by: str = "seq_no",
                 backend: str | Backend | None = None, collect: bool = True):
        self.origin = Origin.parse(origin)
        self.order_by = order_by
        self.backend = get_backend(backend)
        self.collect = collect
        self.keys = StreamKeys()
        self.state = ShardedState(self.origin, self.backend)
        self.batches = 0
        self.min_timestamp = np.iinfo(np.int64).max
        self.max_timestamp = np.iinfo(np.int64).min
        self._counters = {name: np.zeros(0, dtype=np.int64) for name in PARTITION_COUNTERS}
        self._findings: list[pa.Table] = []
        self._aborted = AbortedRecords()

    def feed(self, table: pa.Table | pa.RecordBatch, ids: np.ndarray | None = None) -> Verdicts:
        """Validate the next rows of this task (each stream's rows in order); ``ids`` if already encoded."""
        names = table.schema.names
        if self.order_by in names and table.column(self.order_by).null_count:
            raise ValueError(f"column {self.order_by!r} contains {table.column(self.order_by).null_count} "
                             "null value(s)")
        if ids is None:
            ids = self.keys.encode(table.column(TOPIC), _numpy(table.column("partition"), "partition"))
        columns = {name: table.column(name) for name in COLUMNS if name in names and name != "partition"}
        columns["partition"] = ids
        packed = BatchMetadata.coerce(columns)  # checked and converted once; the counts below reuse it
        verdicts = self.state.validate(packed)
        self.batches += len(verdicts)
        if self.collect and len(verdicts):
            self._count(packed, verdicts, timestamps="max_timestamp" in names)
            self._keep_findings(packed, verdicts, None if self.order_by in COLUMNS else table.column(self.order_by))
        return verdicts

    def _count(self, packed: BatchMetadata, verdicts: Verdicts, timestamps: bool) -> None:
        ids = packed["partition"]  # stream ids
        size = len(self.keys)
        for name, array in self._counters.items():
            if len(array) < size:
                self._counters[name] = np.concatenate([array, np.zeros(size - len(array), np.int64)])
        counters = self._counters
        # Every batch, then the few that were not appended (duplicates and rejections), by stream.
        batches = np.bincount(ids, minlength=size)
        not_appended = np.flatnonzero(verdicts.status)
        by_status = np.bincount(ids[not_appended].astype(np.int64) * 3 + verdicts.status[not_appended],
                                minlength=3 * size).reshape(size, 3)
        counters["batches"] += batches
        counters["duplicates"] += by_status[:, Status.DUPLICATE]
        counters["rejected"] += by_status[:, Status.REJECTED]
        counters["appended"] += batches - by_status[:, Status.DUPLICATE] - by_status[:, Status.REJECTED]
        # Records appended: all records, less those of the batches not appended.
        count = packed["record_count"]
        records = np.bincount(ids, weights=count, minlength=size) \
            - np.bincount(ids[not_appended], weights=count[not_appended], minlength=size)
        counters["records"] += records.astype(np.int64)
        txns = verdicts.completed_txns
        counters["aborted_txns"] += np.bincount(txns.partition[txns.aborted], minlength=size)
        counters["committed_txns"] += np.bincount(txns.partition[~txns.aborted], minlength=size)
        appended = verdicts.status == Status.APPENDED
        marker = appended & packed["is_control"]
        self._aborted.add(ids, packed["producer_id"], count, appended & packed["is_transactional"] & ~marker,
                          marker, packed["control_type"] == ControlType.ABORT, size)
        if timestamps:
            self.min_timestamp = min(self.min_timestamp, int(packed["max_timestamp"].min()))
            self.max_timestamp = max(self.max_timestamp, int(packed["max_timestamp"].max()))

    def _keep_findings(self, packed: BatchMetadata, verdicts: Verdicts, order: pa.Array | None) -> None:
        rows = np.flatnonzero(verdicts.finding)
        if not len(rows):
            return
        found = packed.take(rows).to_dict()
        topics, found["partition"] = self.keys.decode(found["partition"])  # stream ids back to the source's
        if order is not None:
            found[self.order_by] = order.take(pa.array(rows)).cast(pa.int64())
        found.update({
            TOPIC: topics, "finding": finding_names(verdicts.finding[rows]), "error_code": verdicts.error_code[rows],
            "expected": verdicts.expected[rows], "assigned_base_offset": verdicts.base_offset[rows],
            "assigned_last_offset": verdicts.last_offset[rows],
        })
        schema = findings_schema(self.order_by)
        self._findings.append(pa.table({field.name: found[field.name] for field in schema}, schema=schema))

    def to_checkpoint(self) -> tuple[dict[str, Any], dict[str, np.ndarray | bytes]]:
        """The replay state as data: JSON-ready values and arrays/bytes (each producer table by
        :func:`~idemcore.state.persist.save_state`); :meth:`restore_checkpoint` reads them back. The findings
        kept since the last :meth:`finish` are not part of it (a follow round clears them first)."""
        from idemcore.state.persist import save_state

        pending = self._aborted._pending
        values = {"origin": self.origin.name.lower(), "order_by": self.order_by, "collect": self.collect,
                  "batches": int(self.batches), "min_timestamp": int(self.min_timestamp),
                  "max_timestamp": int(self.max_timestamp), "topics": list(self.keys.topics),
                  "tables": len(self.state.tables)}
        arrays: dict[str, np.ndarray | bytes] = {
            "topic_code": np.asarray(self.keys.topic_code, np.int64), "partition": np.asarray(self.keys.partition,
                                                                                              np.int64),
            "table_of": self.state._table_of, "aborted": self._aborted.per_stream,
            "pending": np.array([[s, p, n] for (s, p), n in pending.items()], np.int64).reshape(-1, 3),
            **{f"counter.{name}": array for name, array in self._counters.items()},
            **{f"table.{i}": save_state(table) for i, table in enumerate(self.state.tables)}}
        return values, arrays

    def restore_checkpoint(self, values: dict[str, Any], arrays: dict[str, Any]) -> None:
        """Take the state :meth:`to_checkpoint` gave (this replayer: new, of the same kind, origin, order)."""
        from idemcore.audit.keys import _PARTITION_BITS
        from idemcore.state.persist import load_state

        if Origin.parse(values["origin"]) != self.origin or values["order_by"] != self.order_by:
            raise ValueError(f"replay state of origin {values['origin']}, order {values['order_by']}; this replayer "
                             f"is {self.origin.name.lower()}, {self.order_by}")
        self.collect, self.batches = bool(values["collect"]), int(values["batches"])
        self.min_timestamp, self.max_timestamp = int(values["min_timestamp"]), int(values["max_timestamp"])
        keys = StreamKeys()
        for name in values["topics"]:
            keys._topic_code(str(name))
        for code, partition in zip(arrays["topic_code"].tolist(), arrays["partition"].tolist(), strict=True):
            keys._id_of((int(code) << _PARTITION_BITS) | int(partition))
        self.keys = keys
        self.state.tables = [load_state(arrays[f"table.{i}"], self.backend.name) for i in range(values["tables"])]
        self.state._table_of = arrays["table_of"].astype(np.int32)
        self._counters = {name: arrays[f"counter.{name}"].astype(np.int64) for name in PARTITION_COUNTERS}
        self._aborted = AbortedRecords()
        self._aborted.per_stream = arrays["aborted"].astype(np.int64)
        self._aborted._pending = {(s, p): n for s, p, n in arrays["pending"].tolist()}
        self._findings = []

    def finish(self) -> TaskResult:
        """Everything the task found. Open transactions are those without a marker when the stream ends."""
        log_end = self.state.log_end_offsets(len(self.keys))
        ids = np.arange(len(self.keys))
        topics, partitions = self.keys.decode(ids)
        counters = {name: np.pad(array, (0, len(ids) - len(array))) for name, array in self._counters.items()}
        aborted = np.pad(self._aborted.per_stream, (0, len(ids) - len(self._aborted.per_stream)))
        partition_table = pa.table({TOPIC: topics, "partition": partitions, **counters, "aborted_records": aborted,
                                    "log_end_offset": log_end})

        txns = self.state.open_transactions()
        open_topics, open_partitions = self.keys.decode(txns.pop("stream"))
        open_txns = pa.table({TOPIC: open_topics, "partition": open_partitions, **txns})
        findings = pa.concat_tables(self._findings) if self._findings else empty_findings(self.order_by)
        empty = self.batches == 0 or self.min_timestamp > self.max_timestamp
        return TaskResult(findings, partition_table, open_txns, self.batches,
                          0 if empty else self.min_timestamp, 0 if empty else self.max_timestamp)


def findings_schema(order_by: str) -> pa.Schema:
    """The columns of a findings table: the batch, its finding and what it contradicted."""
    fields = [pa.field(TOPIC, pa.string())]
    fields += [pa.field(name, pa.from_numpy_dtype(dtype)) for name, dtype in COLUMNS.items()]
    if order_by not in COLUMNS:
        fields.append(pa.field(order_by, pa.int64()))
    fields += [pa.field("finding", pa.string()), pa.field("error_code", pa.int16()), pa.field("expected", pa.int64()),
               pa.field("assigned_base_offset", pa.int64()), pa.field("assigned_last_offset", pa.int64())]
    return pa.schema(fields)


def empty_findings(order_by: str) -> pa.Table:
    return findings_schema(order_by).empty_table()


def _numpy(values: Any, name: str) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        raise ValueError(f"column {name!r} contains {values.null_count} null value(s)")
    return values.to_numpy(zero_copy_only=False)


def in_stream_order(ids: np.ndarray, order: np.ndarray) -> np.ndarray | None:
    """None when every stream's rows are already in order, else the stable permutation that orders them."""
    if len(order) < 2:
        return None
    rising = order[1:] >= order[:-1]
    if rising.all():
        return None  # globally ordered (arrival order over all streams)
    new_stream = ids[1:] != ids[:-1]
    if (ids[1:] >= ids[:-1]).all() and (rising | new_stream).all():
        return None  # clustered by stream (ids are given in order of first sight), each in order
    return np.lexsort((order, ids))


def replay_table(table: pa.Table, origin: str | Origin = "client", order_by: str | None = None,
                 backend: str | Backend | None = None, replayer: StreamReplayer | None = None) -> TaskResult:
    """Audit a table holding whole (topic, partition) streams: ordered per stream, fed in slices."""
    names, order = required_columns(table.schema.names, order_by)
    return replay_checked(table.select(names), replayer or StreamReplayer(origin, order, backend))


def replay_checked(table: pa.Table, replayer: StreamReplayer) -> TaskResult:
    """:func:`replay_table` of a table whose column names the caller checked (path mode: on the driver);
    ``replayer.order_by`` is the ordering column. Nulls and values out of range still raise ValueError."""
    feed_in_order(table, replayer)
    return replayer.finish()


def feed_in_order(table: pa.Table, replayer: StreamReplayer) -> None:
    """Feed ``table`` (columns checked by the caller) to ``replayer``, each stream's rows in
    ``replayer.order_by`` order, without finishing: more may follow (``idemcore audit --follow``)."""
    order = replayer.order_by
    ids = replayer.keys.encode(table.column(TOPIC), _numpy(table.column("partition"), "partition"))
    permutation = in_stream_order(ids, _numpy(table.column(order), order))
    if permutation is not None:
        table, ids = table.take(permutation), ids[permutation]
    start = 0
    for batch in table.to_batches(max_chunksize=FEED_ROWS):  # the table's own chunks: columns convert without copies
        replayer.feed(batch, ids[start:start + batch.num_rows])
        start += batch.num_rows
