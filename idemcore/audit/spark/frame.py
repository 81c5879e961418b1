"""validate(df): every batch of a DataFrame with its verdict and finding, computed by Spark workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from idemcore.audit.columns import TOPIC
from idemcore.audit.spark.schema import check_input
from idemcore.audit.spark.session import verify_page_crcs
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


#: Hidden columns the scan route adds for its Python workers (dropped before the rows come back).
_FILE_KEY, _ROW_KEY = "__idemcore_file", "__idemcore_row"


def _spark_path_forms(uri: str) -> list[str]:
    """The ways Spark may write a file's URI (``df.inputFiles()`` says ``file:///x``, ``_metadata.file_path``
    ``file:/x``)."""
    forms = [uri]
    if uri.startswith("file:///"):
        forms.append("file:/" + uri[len("file:///"):])
    elif uri.startswith("/"):
        forms += ["file:" + uri, "file://" + uri]
    return forms


def _file_verdicts(path: str, target: Any, origin: Origin, order_by: str,
                   backend: str | None) -> tuple[Any, list[Any]]:
    """Every row of the Parquet file ``path`` (whole streams) replayed in stream order: its rows (``target``
    schema) and their verdict codes (status, error_code, base_offset, last_offset, finding), in the file's
    row order."""
    from idemcore.audit import StreamReplayer
    from idemcore.audit.replayer import feed_in_order
    from idemcore.audit.spark.plan import TaskPlan, read_task
    from idemcore.engine.verdicts import Verdicts

    rows = read_task(TaskPlan([(path, None)]), target)  # (every row group)
    out = Verdicts.allocate(rows.num_rows)  # in stream order, then back to the file's
    permutation = feed_in_order(rows, StreamReplayer(origin, order_by, backend, collect=False), out)
    codes = list(out[:5])  # status, error_code, base_offset, last_offset, finding
    return rows, codes if permutation is None else [_unpermuted(column, permutation) for column in codes]


def _unpermuted(values: Any, permutation: Any) -> Any:
    import numpy as np

    back = np.empty_like(values)
    back[permutation] = values
    return back


def _validate_files(files: dict[int, str], target: Any, origin: Origin, order_by: str, backend: str | None,
                    columns: list[tuple[str, Any]] | None):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        # In a Python worker: the rows of a plain Parquet scan as (file key, row index) and, unless ``columns``
        # (names and Arrow types) says to take them from the file too, their columns. The verdicts come from
        # replaying each file whole (its streams are all in it), read by pyarrow; one file's at a time, as
        # Spark reads a split's rows in order.
        import numpy as np
        import pyarrow as pa

        from idemcore.audit.replayer import finding_names, status_names

        current: int | None = None
        rows_of: Any = None
        verdicts: list[Any] = []
        for batch in batches:
            keys = batch.column(_FILE_KEY).to_numpy(zero_copy_only=False)
            rows = batch.column(_ROW_KEY).to_numpy(zero_copy_only=False)
            if not len(keys):
                continue
            firsts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            pieces, taken = [], []
            for start, stop in zip(firsts.tolist(), [*firsts[1:].tolist(), len(keys)], strict=True):
                key = int(keys[start])
                if key != current:
                    if key not in files:
                        raise ValueError(f"validate: a row of a file not planned (key {key}); files: "
                                         f"{', '.join(sorted(set(files.values())))}")
                    rows_of, verdicts = _file_verdicts(files[key], target, origin, order_by, backend)
                    current = key
                at = rows[start:stop]
                pieces.append([column[at] for column in verdicts])
                if columns is not None:
                    taken.append(rows_of.select([name for name, _ in columns]).take(pa.array(at)))
            status, error_code, base, last, finding = (np.concatenate(c) if len(c) > 1 else c[0]
                                                       for c in zip(*pieces, strict=True))
            added = [status_names(status), pa.array(error_code), pa.array(base), pa.array(last),
                     finding_names(finding)]
            if columns is None:
                kept, names = batch.columns[:-2], batch.schema.names[:-2]
            else:
                table = pa.concat_tables(taken) if len(taken) > 1 else taken[0]
                kept = [column.combine_chunks().cast(to)
                        for column, (_, to) in zip(table.columns, columns, strict=True)]
                names = [name for name, _ in columns]
            yield pa.RecordBatch.from_arrays([*kept, *added], names=[*names, *OUTPUT_COLUMNS])
    return run


def _validate_scan(df: Any, order: str, origin: Origin, backend: str | None, out_schema: Any) -> Any | None:
    """validate() of a plain Parquet scan whose files each hold whole streams: no shuffle, no sort; None when
    ``df`` is not one."""
    from pyspark.sql import functions as F

    from idemcore.audit.spark.plan import components
    from idemcore.audit.spark.scan import scanned_parquet

    scan = scanned_parquet(df, order)
    if scan is None:
        return None
    footers, target = scan
    groups = [group for footer in footers for group in footer.groups]
    if any(len({group.path for group in part}) > 1 for part in components([g for g in groups if g.rows])):
        return None  # a stream over several files: the shuffle brings its rows together
    spark = df.sparkSession
    uris = [str(uri) for uri in df.inputFiles()]
    local = [footer.path for footer in footers]
    forms = [(form, path) for uri, path in zip(uris, local, strict=True) for form in _spark_path_forms(uri)]
    hashed = spark.createDataFrame([(form,) for form, _ in forms], "f string").select(F.xxhash64("f")).collect()
    files = {int(row[0]): path for row, (_, path) in zip(hashed, forms, strict=True)}
    if len(set(files.values())) != len(local) or len(files) != len(forms):
        return None  # two forms of different files hash alike: the shuffle route
    file_key = F.xxhash64("_metadata.file_path").alias(_FILE_KEY)
    row_key = F.col("_metadata.row_index").alias(_ROW_KEY)
    try:
        if set(df.columns) <= set(target.names) and len(set(df.columns)) == len(df.columns):
            # Every column is one the replay reads, its type checked: the workers take the rows from the files
            # too, so only two numbers per row cross from the JVM to Python.
            from pyspark.sql.pandas.types import to_arrow_type

            keyed = df.select(file_key, row_key)
            columns = [(field.name, to_arrow_type(field.dataType)) for field in df.schema.fields]
        else:
            keyed, columns = df.select("*", file_key, row_key), None  # the other columns as Spark reads them
    except Exception:  # a Spark without _metadata.row_index (before 3.5): the shuffle route
        return None
    return keyed.mapInArrow(_validate_files(files, target, origin, order, backend, columns), out_schema)


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

    Without ``num_partitions``, a DataFrame that is a plain scan of Parquet files each holding whole streams
    (:func:`~idemcore.audit.spark.scan.scanned_parquet`; no stream's row groups in two files) skips the shuffle
    and the sort: each Python worker replays the files its rows come from, read by pyarrow, and gives each row
    the verdict of its row in its file (Spark's ``_metadata.row_index``); when every column of ``df`` is one
    the replay reads, the worker takes the rows from the file too (only the file's key and the row's index
    cross from the JVM). The rows keep the scan's partitioning and order. Its footers are read, and a small
    job names its files, when this is called. ``df``'s session checks Parquet page CRCs from then on
    (:func:`~idemcore.audit.spark.session.verify_page_crcs`).
    """
    order = check_input(df.schema, order_by)
    verify_page_crcs(df.sparkSession)
    out_schema = validated_schema(df, order_by)
    origin = Origin.parse(origin)  # the enum travels to the workers
    if num_partitions is None:
        scanned = _validate_scan(df, order, origin, backend, out_schema)
        if scanned is not None:
            return scanned
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

