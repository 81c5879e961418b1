"""validate(df): every batch of a DataFrame with its verdict and finding, computed by Spark workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from idemcore.audit.columns import TOPIC
from idemcore.audit.spark.schema import check_input
from idemcore.protocol.codes import Origin

#: Columns validate() adds, with their Spark types.
OUTPUT_COLUMNS = {
    "status": "string",
    "error_code": "short",
    "assigned_base_offset": "long",
    "assigned_last_offset": "long",
    "finding": "string",
}


def clustered(df: Any, order_by: str, num_partitions: int | None = None) -> Any:
    """Each (topic, partition) stream whole in one Spark partition, in order: one shuffle and a local sort."""
    keys = [TOPIC, "partition"]
    shuffled = df.repartition(num_partitions, *keys) if num_partitions else df.repartition(*keys)
    return shuffled.sortWithinPartitions(*keys, order_by)


def _validate_batches(origin: Origin, order_by: str, backend: str | None):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        # Runs in a Python worker: idemcore comes from the installed package, imported (and compiled) once.
        import pyarrow as pa

        from idemcore.audit import StreamReplayer
        from idemcore.audit.replayer import finding_names, status_names

        replayer = StreamReplayer(origin, order_by, backend, collect=False)
        for batch in batches:
            verdicts = replayer.feed(batch)
            added = [status_names(verdicts.status), pa.array(verdicts.error_code), pa.array(verdicts.base_offset),
                     pa.array(verdicts.last_offset), finding_names(verdicts.finding)]
            yield pa.RecordBatch.from_arrays([*batch.columns, *added], names=[*batch.schema.names, *OUTPUT_COLUMNS])
    return run


def validate(df: Any, origin: str | Origin = "client", *, order_by: str | None = None,
             num_partitions: int | None = None, backend: str | None = None) -> Any:
    """The rows of ``df`` plus ``status``, ``error_code``, ``assigned_base_offset``, ``assigned_last_offset``
    and ``finding`` (its name in docs/rules.md §5, null when the batch was simply appended).

    ``df`` has the batch-metadata columns (:data:`idemcore.COLUMNS`; ``topic``, ``partition``,
    ``producer_id``, ``producer_epoch``, ``base_sequence`` and ``last_sequence`` or ``record_count``
    required) and an ordering column: ``order_by``, else ``seq_no`` (arrival order), else
    ``base_offset`` (log order). Streams are clustered by (topic, partition) into ``num_partitions``
    (default ``spark.sql.shuffle.partitions``) and sorted; each task replays its streams with state
    carried across Arrow batches, so the answer does not depend on how rows are batched. Lazy: nothing
    runs until an action. Rows never travel to the driver.
    """
    order = check_input(df.schema, order_by)
    out_schema = validated_schema(df, order_by)
    origin = Origin.parse(origin)  # the enum travels to the workers
    return clustered(df, order, num_partitions).mapInArrow(_validate_batches(origin, order, backend), out_schema)


def validated_schema(df_or_schema: Any, order_by: str | None = None) -> Any:
    """The output schema of every form here: the columns of ``df_or_schema`` (a DataFrame or its
    ``StructType``) plus :data:`OUTPUT_COLUMNS`. Raises ValueError naming a missing or mistyped column
    (the checks :func:`~idemcore.audit.spark.validate` makes) before any job runs."""
    from pyspark.sql.types import LongType, ShortType, StringType, StructField, StructType

    schema = getattr(df_or_schema, "schema", df_or_schema)
    check_input(schema, order_by)
    types = {"string": StringType(), "short": ShortType(), "long": LongType()}
    clash = [name for name in OUTPUT_COLUMNS if name in schema.fieldNames()]
    if clash:
        raise ValueError(f"the input already has column(s) {', '.join(clash)}, which the verdicts add")
    added = [StructField(name, types[kind], True) for name, kind in OUTPUT_COLUMNS.items()]
    return StructType([*schema.fields, *added])

