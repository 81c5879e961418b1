"""Building blocks for users' own Spark plans: the kernel as a grouped pandas function, as the ``mapInArrow``
function :func:`~idemcore.audit.spark.validate` runs, and as a streaming state function.

Every form returns the input's rows (all its columns) plus :data:`~idemcore.audit.spark.OUTPUT_COLUMNS`:
``status``, ``error_code``, ``assigned_base_offset``, ``assigned_last_offset`` and ``finding`` (its name in
docs/rules.md §5, null for a batch simply appended), so :func:`validated_schema` is the output schema of each::

    schema = validated_schema(df)                          # checks the columns before any job runs
    df.groupBy("topic", "partition").applyInPandas(validate_group, schema=schema)
    clustered(df, "seq_no").mapInArrow(validate_arrow(order_by="seq_no"), schema)
    stream.groupBy("topic", "partition").applyInPandasWithState(
        validate_stream, schema, STREAM_STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)

Each stream is ordered by ``seq_no`` when the input has it, else by ``base_offset`` (or ``order_by=``):
``seq_no`` is arrival order, the order the broker saw the produce attempts, and the only one that orders them
all (a rejected attempt or one never written has no offset, ``base_offset`` -1); ``base_offset`` is log
order, right for batches read back from a log, where every batch has one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib import import_module
from typing import Any

import numpy as np

from idemcore.audit.columns import TOPIC, order_column, required_columns
from idemcore.audit.spark.frame import OUTPUT_COLUMNS, _validate_batches, clustered, validated_schema
from idemcore.engine.persist import load_state, save_state
from idemcore.engine.table import ProducerStateTable
from idemcore.protocol.codes import Origin

__all__ = [
    "STREAM_STATE_SCHEMA",
    "clustered",
    "load_state",
    "order_of",
    "save_state",
    "validate_arrow",
    "validate_group",
    "validate_group_with",
    "validate_stream",
    "validate_stream_with",
    "validated_schema",
]

#: The state :func:`validate_stream` keeps per group (``stateStructType`` of ``applyInPandasWithState``):
#: the stream's producer state (:func:`save_state`) and the largest ordering value replayed so far.
STREAM_STATE_SCHEMA = "producer_state binary, last_order long"


# ---------------------------------------------------------------- the Arrow form (what validate() runs)

def validate_arrow(origin: str | Origin = "client", order_by: str = "seq_no",
                   backend: str | None = None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function :func:`~idemcore.audit.spark.validate` gives ``mapInArrow``: Arrow record batches in, the
    same rows plus :data:`OUTPUT_COLUMNS` out (schema: :func:`validated_schema`). The kernel's state is
    carried across the batches of a task, so each (topic, partition) stream must be whole in one Spark
    partition and in ``order_by`` order there: :func:`clustered` ``(df, order_by)`` does that (one shuffle and
    a local sort)."""
    return _validate_batches(Origin.parse(origin), order_by, backend)


# ---------------------------------------------------------------- the grouped pandas form

def _verdict_frame(pdf: Any, order: str, origin: Origin, backend: str | None,
                   state: ProducerStateTable | None = None) -> Any:
    """``pdf`` in stream order plus the verdict columns; ``state`` (one stream's) carried when given, else
    the rows may hold any whole streams, each replayed from empty state."""
    import pyarrow as pa

    from idemcore.audit.replayer import StreamReplayer, finding_names, status_names
    from idemcore.engine.validate import validate

    rows = pdf.sort_values(order, kind="stable", ignore_index=True)  # stable: equal values keep their order
    if state is None:
        table = pa.Table.from_pandas(rows, preserve_index=False)
        verdicts = StreamReplayer(origin, order, backend, collect=False).feed(table)
    else:
        verdicts = validate(rows, state, origin, backend)  # BatchColumns.coerce: checks and converts the columns
    added = {"status": status_names(verdicts.status).to_numpy(zero_copy_only=False),
             "error_code": verdicts.error_code.astype(np.int16, copy=False),
             "assigned_base_offset": verdicts.base_offset.astype(np.int64, copy=False),
             "assigned_last_offset": verdicts.last_offset.astype(np.int64, copy=False),
             "finding": finding_names(verdicts.finding).to_numpy(zero_copy_only=False)}
    return rows.assign(**{name: added[name] for name in OUTPUT_COLUMNS})


def validate_group_with(origin: str | Origin = "client", order_by: str | None = None,
                        backend: str | None = None) -> Callable[[Any], Any]:
    """A :func:`validate_group` with another origin, ordering column or kernel backend."""
    origin = Origin.parse(origin)

    def validate_group(pdf: Any) -> Any:
        """For ``groupBy(...).applyInPandas(validate_group, schema=validated_schema(df))``: the group's rows
        sorted by the ordering column, each whole stream in it replayed from empty state, plus the verdicts."""
        _, order = required_columns([str(name) for name in pdf.columns], order_by)  # ValueError: one line
        return _verdict_frame(pdf, order, origin, backend)
    return validate_group


#: ``df.groupBy("topic", "partition").applyInPandas(validate_group, schema=validated_schema(df))``: each group's
#: rows sorted by ``seq_no`` (else ``base_offset``) and replayed through the kernel from empty state, returned
#: with the verdict columns. A group may hold several whole streams (``groupBy("topic")`` works too); a stream
#: split over groups is judged wrongly (each part from empty state). Client origin, default backend.
validate_group = validate_group_with()


# ---------------------------------------------------------------- the streaming state form



def validate_stream_with(origin: str | Origin = "client", order_by: str | None = None,
                         backend: str | None = None) -> Callable[[Any, Iterator[Any], Any], Iterator[Any]]:
    """A :func:`validate_stream` with another origin, ordering column or kernel backend."""
    origin = Origin.parse(origin)

    def validate_stream(key: Any, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        """For ``groupBy("topic", "partition").applyInPandasWithState(validate_stream, validated_schema(df),
        STREAM_STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)``: this micro-batch's rows of the stream,
        sorted, replayed from the state its earlier micro-batches left, plus the verdicts; the state updated."""
        frames = [frame for frame in pdfs if len(frame)]  # Spark may pass a group's rows in several frames
        if not frames or state.hasTimedOut:
            return
        pdf = import_module("pandas").concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        _, order = required_columns([str(name) for name in pdf.columns], order_by)
        streams = pdf[[TOPIC, "partition"]].drop_duplicates()
        if len(streams) != 1:
            raise ValueError(f"validate_stream needs one (topic, partition) stream per group "
                             f"(groupBy('topic', 'partition')); group {tuple(key)} holds {len(streams)}")
        first = int(pdf[order].min())
        if state.exists:
            saved, last = state.get
            table = load_state(saved, backend)
            if first < last:
                raise ValueError(f"stream {tuple(key)}: a micro-batch holds {order} {first}, before {last} "
                                 "already replayed; each stream's batches must arrive in order")
        else:
            table = ProducerStateTable(row_capacity=64, stream_capacity=1)
        out = _verdict_frame(pdf, order, origin, backend, table)
        state.update((save_state(table), int(out[order].iloc[-1])))
        yield out
    return validate_stream


#: ``stream.groupBy("topic", "partition").applyInPandasWithState(validate_stream, validated_schema(stream),
#: STREAM_STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)``: each micro-batch's rows of a stream sorted by
#: ``seq_no`` (else ``base_offset``) and replayed through the kernel from the state the stream's earlier
#: micro-batches left (kept in Spark's state store, :data:`STREAM_STATE_SCHEMA`), so the verdicts equal a
#: one-shot validation of all the data. A stream's rows must arrive in order across micro-batches (a row older
#: than one already replayed raises ValueError). Client origin, default backend.
validate_stream = validate_stream_with()


def order_of(df_or_schema: Any, order_by: str | None = None) -> str:
    """The ordering column the forms here use for ``df_or_schema``: ``order_by``, else ``seq_no``, else
    ``base_offset``."""
    schema = getattr(df_or_schema, "schema", df_or_schema)
    return order_column(schema.fieldNames(), order_by)
