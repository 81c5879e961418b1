"""Checks on the input's columns, before any job runs, with errors that name the file, column and value.

A DataFrame is checked through its Spark schema. Parquet files are checked through their footers: each
distinct Arrow schema once, reconciled to one target schema (:func:`check_arrow_schemas`), then the column
statistics of every row group (:func:`check_footer_values`). Workers give each file they read the target
schema (:func:`conform`) and check there what statistics could not tell.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from idemcore.audit.columns import TOPIC, order_column, required_columns
from idemcore.kernels.columns import DEFAULTS, INPUT_COLUMNS, derive_record_counts
from idemcore.protocol.constants import INT32_MAX
from idemcore.protocol.sequences import last_sequences

_INTEGER_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType")
_SPARK_TYPES = {"string": ("StringType",), "boolean": (*_INTEGER_TYPES, "BooleanType"), "integer": _INTEGER_TYPES}
_WANTED = {"string": "a string", "boolean": "a boolean (or 0/1 integer)", "integer": "an integer"}
#: Files whose topic columns differ (plain, large, dictionary) all become this: the stream keys take
#: a dictionary as it is, so the plain files are encoded once and the dictionary files not decoded.
TOPIC_TYPE = pa.dictionary(pa.int32(), pa.string())
#: The columns derived from each other when a file has only one of them.
_DERIVED = {"last_sequence": ("record_count", last_sequences),
            "record_count": ("last_sequence", derive_record_counts)}


class InputError(ValueError):
    """A bad value in the input, in a message that already names its file, column and value."""


def _kind_of(name: str, order: str) -> str | None:
    """What column ``name`` must hold ("string", "boolean" or "integer"); None for a column not read."""
    if name == TOPIC:
        return "string"
    if name in INPUT_COLUMNS and INPUT_COLUMNS[name].kind == "b":
        return "boolean"
    if name in INPUT_COLUMNS or name == order:
        return "integer"
    return None


def _read_kind(name: str, order: str) -> str:
    """The kind of a column the replay reads (every one has a kind)."""
    kind = _kind_of(name, order)
    if kind is None:
        raise ValueError(f"column {name!r} is not read by the replay")
    return kind


def _type_error(name: str, kind: str, got: str, where: str = "") -> ValueError:
    return ValueError(f"column {name!r} must be {_WANTED[kind]}; got {got}{where}")


def check_input(schema: Any, order_by: str | None = None) -> str:
    """Raise ValueError for a missing or mistyped column of a Spark schema; return the ordering column."""
    _, order = required_columns(schema.fieldNames(), order_by)
    for field in schema.fields:
        kind = _kind_of(field.name, order)
        if kind and type(field.dataType).__name__ not in _SPARK_TYPES[kind]:
            raise _type_error(field.name, kind, field.dataType.simpleString())
    return order


def _value_type(data_type: pa.DataType) -> pa.DataType:
    return data_type.value_type if pa.types.is_dictionary(data_type) else data_type


def _arrow_type_fits(kind: str, data_type: pa.DataType) -> bool:
    data_type = _value_type(data_type)
    if kind == "string":
        return pa.types.is_string(data_type) or pa.types.is_large_string(data_type)
    return pa.types.is_integer(data_type) or (kind == "boolean" and pa.types.is_boolean(data_type))


def value_range(name: str) -> tuple[int, int, str]:
    """The values column ``name`` may hold (the kernel's type; partitions are not negative), and what a
    value outside them is."""
    if name == "partition":
        return 0, INT32_MAX, f"is outside [0, {INT32_MAX}]"
    dtype = INPUT_COLUMNS.get(name, np.dtype(np.int64))  # the ordering column is read as int64
    if dtype.kind == "b":
        return 0, 1, "is not a boolean (0 or 1)"
    info = np.iinfo(dtype)
    return int(info.min), int(info.max), f"is outside {dtype} [{info.min}, {info.max}]"


def _target_type(name: str, kind: str, types: set[pa.DataType]) -> pa.DataType:
    # Columns the kernel reads get its type: a file's wider or other column is cast, values checked, once
    # (the replay's own narrowing then costs nothing). Topic and the ordering column keep a type every
    # file agrees on (no cast at all, the common case), else one that holds every file's.
    if name in INPUT_COLUMNS:
        return pa.from_numpy_dtype(INPUT_COLUMNS[name])
    if len(types) == 1 and (kind == "string" or pa.types.is_integer(next(iter(types)))):
        return next(iter(types))
    return TOPIC_TYPE if kind == "string" else pa.int64()


def _files(paths: list[str], total: int) -> str:
    return f"{len(paths)} of {total} files (first: {paths[0]})"


def check_arrow_schemas(schemas: Iterable[tuple[str, pa.Schema]],
                        order_by: str | None = None) -> tuple[pa.Schema, str]:
    """Check the (path, Arrow schema) of every file; return the one schema every task's table is given
    (the columns a replay reads) and the ordering column.

    Each distinct schema is checked once. Every file must have the required columns and the ordering
    column, of kinds that fit (string; integer; boolean or integer): ValueError names the column and a
    file. Types may differ between files (see :func:`conform`). An optional column some files lack is
    filled with its default there, and a warning says so; last_sequence and record_count derive from
    each other. The ordering column: ``order_by``, else ``seq_no`` if any file has it, else ``base_offset``.
    """
    by_schema: dict[pa.Schema, list[str]] = {}
    for path, schema in schemas:
        by_schema.setdefault(schema.remove_metadata(), []).append(path)  # pandas metadata differs per file
    if not by_schema:
        raise ValueError("no Parquet files to audit")
    order = order_column(dict.fromkeys(n for schema in by_schema for n in schema.names), order_by)
    every = [path for paths in by_schema.values() for path in paths]
    having: dict[str, list[str]] = {}
    types: dict[str, set[pa.DataType]] = {}
    for schema, paths in by_schema.items():
        where = f" (in {paths[0]})"
        if order not in schema.names:
            raise ValueError(f"ordering column {order!r} is missing from {_files(paths, len(every))}; "
                             "every file needs it")
        try:
            wanted, _ = required_columns(schema.names, order)
        except ValueError as exc:
            raise ValueError(f"{exc}{where}") from None
        for name in wanted:
            data_type = schema.field(name).type
            kind = _read_kind(name, order)
            if not _arrow_type_fits(kind, data_type):
                raise _type_error(name, kind, str(data_type), where)
            having.setdefault(name, []).extend(paths)
            types.setdefault(name, set()).add(data_type)
    names = [TOPIC, *(name for name in INPUT_COLUMNS if name in having),
             *([order] if order not in INPUT_COLUMNS else [])]
    for name in names:
        if len(having[name]) == len(every):
            continue
        present = set(having[name])
        lacking = [path for path in every if path not in present]
        derived = _DERIVED.get(name)
        how = f"derived from base_sequence and {derived[0]}" if derived else f"filled with {DEFAULTS[name]}"
        warnings.warn(f"column {name!r} is missing from {_files(lacking, len(every))}; {how}", UserWarning,
                      stacklevel=3)
    target = pa.schema([pa.field(name, _target_type(name, _read_kind(name, order), types[name])) for name in names])
    return target, order


def _first_null(column: pa.ChunkedArray | pa.Array) -> int:
    return int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])


def _first_outside(column: pa.ChunkedArray | pa.Array, low: int, high: int) -> int | None:
    values = column.cast(_value_type(column.type)).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero((values < low) | (values > high))
    return int(bad[0]) if len(bad) else None


def bad_value(path: str, name: str, column: pa.ChunkedArray | pa.Array,
              row: Callable[[int], int] = int) -> InputError | None:
    """The first null or out-of-range value of ``column`` (of file ``path``) as an error, or None.
    ``row``: a row of ``column`` to its row in the file."""
    if column.null_count:
        first = _first_null(column)
        return InputError(f"column {name!r} in {path}: null at row {row(first)} "
                          f"({column.null_count} null value(s)); every batch needs a value")
    if pa.types.is_string(_value_type(column.type)) or pa.types.is_large_string(_value_type(column.type)):
        return None
    low, high, wanted = value_range(name)
    outside = _first_outside(column, low, high)
    if outside is None:
        return None
    value = column[outside].as_py()
    return InputError(f"column {name!r} in {path}: {int(value)} at row {row(outside)} {wanted}")


def conform(table: pa.Table, target: pa.Schema, path: str, row: Callable[[int], int] = int) -> pa.Table:
    """One file's rows (``table``, read from ``path``) with the ``target`` schema.

    Columns of another type are cast, their values checked; the columns the file lacks are filled with
    their defaults, or derived (last_sequence, record_count). A null or a value out of range raises
    :class:`InputError` naming the file, the column, the value and its row (``row`` maps a row of
    ``table`` to the file's). A file that has the target schema is returned as it is.
    """
    for name in table.schema.names:
        error = bad_value(path, name, table.column(name), row) if table.column(name).null_count else None
        if error is not None:
            raise error
    if table.schema.equals(target):  # the common case: every file written alike, nothing to do
        return table
    columns: dict[str, Any] = {}
    for field in target:
        if field.name in table.schema.names:
            columns[field.name] = _cast(table.column(field.name), field.type, path, field.name, row)
    for field in target:
        if field.name in columns:
            continue
        derived = _DERIVED.get(field.name)
        if derived:
            other, derive = derived
            try:
                if field.name == "record_count":
                    control = table.column("is_control").to_numpy(zero_copy_only=False).astype(bool) \
                        if "is_control" in table.schema.names else None
                    values = derive_record_counts(columns["base_sequence"].to_numpy(), columns[other].to_numpy(),
                                                  control)
                else:
                    values = derive(columns["base_sequence"].to_numpy(), columns[other].to_numpy())
            except ValueError as exc:
                raise InputError(f"{path}: {exc}") from None
        else:
            values = np.full(table.num_rows, DEFAULTS[field.name], dtype=INPUT_COLUMNS[field.name])
        columns[field.name] = pa.array(values, field.type)
    return pa.table([columns[field.name] for field in target], schema=target)


def _cast(column: pa.ChunkedArray, to: pa.DataType, path: str, name: str,
          row: Callable[[int], int]) -> pa.ChunkedArray:
    if column.type == to:
        return column
    if pa.types.is_boolean(to) and not pa.types.is_boolean(column.type):
        error = bad_value(path, name, column, row)  # Arrow casts any integer to a boolean: check 0/1 first
        if error:
            raise error
    try:
        return column.cast(to)  # a safe cast: raises on a value that does not fit
    except pa.ArrowInvalid:
        error = bad_value(path, name, column, row)
        if error is None:
            raise
        raise error from None


def check_footer_values(footers: Iterable[Any], target: pa.Schema) -> None:
    """Before any job: a null or a value out of range that a file's column statistics show raises
    :class:`InputError` naming the file, column, first bad value and row (that column is read to find it)."""
    for footer in footers:
        for name in target.names:
            stats = footer.stats.get(name)
            if stats is None:
                continue
            nulls, low, high = stats
            lowest, highest, _ = value_range(name)
            if nulls or (name != TOPIC and low is not None and (low < lowest or high > highest)):
                raise _locate(footer.path, name)


def _locate(path: str, name: str) -> InputError:
    from idemcore.record.parquet_files import open_parquet

    error = bad_value(path, name, open_parquet(path).read(columns=[name], use_threads=False).column(name))
    return error or InputError(f"column {name!r} in {path}: its statistics show a null or a value that "
                               f"{value_range(name)[2]}, but its values do not")


def worker_error(exc: BaseException) -> ValueError | None:
    """The ValueError a Python worker raised (bad input), out of the Spark exception that carries it."""
    text = str(exc)
    marker = "ValueError: "
    if marker not in text:
        return None
    message = text[text.rindex(marker) + len(marker):].strip().splitlines()[0]
    return ValueError(message)
