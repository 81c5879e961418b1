"""A DataFrame that only reads Parquet files, seen through: its rows are those files' rows, so a job can read
the files in Python workers (path mode) instead of pushing every row from the JVM through Arrow to Python.

The JVM-to-Python hop costs more than everything else an audit does (DESIGN.md, Spark): for a DataFrame that
is a plain scan, ``spark.read.parquet(...)`` (optionally with some columns selected), path mode gives the
same findings at path mode's speed. Anything else in the plan (a filter, a join, a computed or renamed
column, a cache, partition directories, another format, Spark Connect) means the rows are not simply the
files': the caller takes the DataFrame route.
"""

from __future__ import annotations

import urllib.parse
import warnings
from typing import Any

import pyarrow as pa

from idemcore.audit.columns import TOPIC
from idemcore.audit.spark.plan import WATCHED, Footer, read_footers
from idemcore.audit.spark.schema import check_arrow_schemas
from idemcore.kernels.columns import INPUT_COLUMNS

#: The Spark type Spark's Parquet reader gives each Arrow type of a file (types path mode reads as they are).
_SPARK_TYPE_OF = {pa.int8(): "ByteType", pa.int16(): "ShortType", pa.int32(): "IntegerType", pa.int64(): "LongType",
                  pa.bool_(): "BooleanType", pa.string(): "StringType", pa.large_string(): "StringType"}


def _simple_name(java_object: Any) -> str:
    return str(java_object.getClass().getSimpleName())


def _scala_list(seq: Any) -> list[Any]:
    return [seq.apply(i) for i in range(seq.size())]


def scanned_files(df: Any) -> list[str] | None:
    """The Parquet files ``df`` reads when its optimized plan is a plain scan of them (a ``LogicalRelation``
    over Parquet files without partition directories, under at most a projection of its own columns, none
    renamed); else None."""
    try:
        node = df._jdf.queryExecution().optimizedPlan()
        if _simple_name(node) == "Project":
            if any(_simple_name(e) != "AttributeReference" for e in _scala_list(node.projectList())):
                return None
            node = node.child()
        if _simple_name(node) != "LogicalRelation" or node.isStreaming():
            return None
        relation = node.relation()
        if _simple_name(relation) != "HadoopFsRelation" or _simple_name(relation.fileFormat()) != "ParquetFileFormat":
            return None
        if not relation.partitionSchema().isEmpty():
            return None  # hive-style partition directories: some columns are not in the files
        listed = [str(status.getPath().toString()) for status in _scala_list(relation.location().allFiles())]
        if len(listed) != len(set(listed)):
            return None  # a file named twice (a path given twice, or a file and its directory): Spark reads it twice
        files = [_local(str(path)) for path in df.inputFiles()]
    except Exception:  # not a classic DataFrame (Spark Connect), or Spark's internals differ: no shortcut
        return None
    return files or None


def _local(uri: str) -> str:
    # Spark names files by URI; a local one by its path (what path mode's messages and checks show).
    parsed = urllib.parse.urlparse(uri)
    return urllib.parse.unquote(parsed.path) if parsed.scheme == "file" and parsed.netloc in ("", "localhost") else uri


def _arrow_value_type(data_type: pa.DataType) -> pa.DataType:
    return data_type.value_type if pa.types.is_dictionary(data_type) else data_type


def scanned_parquet(df: Any, order: str) -> tuple[list[Footer], pa.Schema] | None:
    """When ``df`` is a plain scan of Parquet files (:func:`scanned_files`) whose every file has, under the same
    types Spark reads them as, exactly the columns of ``df`` the replay reads (ordering column ``order``):
    the files' footers and the target schema path mode gives their rows (as
    :func:`~idemcore.audit.spark.schema.check_arrow_schemas` returns it). Else None.

    Path mode would otherwise read what the DataFrame does not show (a column dropped by a ``select``, read
    from the files) or fill in what it shows as null (a column some files lack): the answers could differ.
    """
    files = scanned_files(df)
    if files is None:
        return None
    spark_types = {field.name: type(field.dataType).__name__ for field in df.schema.fields}
    read = {name for name in spark_types if name in (TOPIC, *INPUT_COLUMNS, order)}
    watched = WATCHED if order in WATCHED else (*WATCHED, order)
    try:
        footers = read_footers(files, watched)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a column some files lack: not this route, no warning for it
            target, _ = check_arrow_schemas(((f.path, f.schema) for f in footers), order)
    except (OSError, ValueError):
        return None  # the DataFrame route reports it as it always has
    if set(target.names) != read:
        return None
    for footer in footers:
        for name in target.names:
            if name not in footer.schema.names:
                return None
            if _SPARK_TYPE_OF.get(_arrow_value_type(footer.schema.field(name).type)) != spark_types[name]:
                return None
    return footers, target
