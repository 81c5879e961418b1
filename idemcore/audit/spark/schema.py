"""Checks on the input's columns on the driver, before any job runs, with errors that name the column.

A DataFrame is checked through its Spark schema; Parquet paths through the Arrow schemas of their
footers (each distinct schema once). Workers then trust the names and types and check only what a
schema cannot tell: null values and values out of range.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from idemcore.audit.columns import TOPIC, required_columns
from idemcore.record.columns import COLUMNS

_INTEGER_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType")
_SPARK_TYPES = {"string": ("StringType",), "boolean": (*_INTEGER_TYPES, "BooleanType"), "integer": _INTEGER_TYPES}
_WANTED = {"string": "a string", "boolean": "a boolean (or 0/1 integer)", "integer": "an integer"}


def _kind_of(name: str, order: str) -> str | None:
    """What column ``name`` must hold ("string", "boolean" or "integer"); None for a column not read."""
    if name == TOPIC:
        return "string"
    if name in COLUMNS and COLUMNS[name].kind == "b":
        return "boolean"
    if name in COLUMNS or name == order:
        return "integer"
    return None


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


def _arrow_type_fits(kind: str, data_type: pa.DataType) -> bool:
    if kind == "string":
        if pa.types.is_dictionary(data_type):
            data_type = data_type.value_type
        return pa.types.is_string(data_type) or pa.types.is_large_string(data_type)
    return pa.types.is_integer(data_type) or (kind == "boolean" and pa.types.is_boolean(data_type))


def check_arrow_schemas(schemas: Iterable[tuple[str, pa.Schema]], order_by: str | None = None) -> tuple[list[str], str]:
    """Check the (path, Arrow schema) of every file; return the columns to read and the ordering column.

    Each distinct schema is checked once. Every file must have the columns a replay reads, with the
    same types (a task may read several files into one table): ValueError names the column and file.
    """
    first: tuple[str, pa.Schema] | None = None
    columns: list[str] = []
    order = ""
    checked: set[pa.Schema] = set()
    for path, schema in schemas:
        if schema in checked:
            continue
        checked.add(schema)
        where = f" (in {path})"
        try:
            wanted, file_order = required_columns(schema.names, order_by)
        except ValueError as exc:
            raise ValueError(f"{exc}{where}") from None
        for name in wanted:
            data_type = schema.field(name).type
            kind = _kind_of(name, file_order)
            if not _arrow_type_fits(kind, data_type):
                raise _type_error(name, kind, str(data_type), where)
        if first is None:
            first, columns, order = (path, schema), wanted, file_order
            continue
        first_path, first_schema = first
        for name in (*columns, *wanted):
            if name not in wanted or name not in columns:
                having, lacking = (first_path, path) if name in columns else (path, first_path)
                raise ValueError(f"column {name!r} is in {having} but not in {lacking}; "
                                 "every file must have the same columns")
            if schema.field(name).type != first_schema.field(name).type:
                raise ValueError(f"column {name!r} is {first_schema.field(name).type} in {first_path} "
                                 f"but {schema.field(name).type} in {path}")
    if first is None:
        raise ValueError("no Parquet files to audit")
    return columns, order


def worker_error(exc: BaseException) -> ValueError | None:
    """The ValueError a Python worker raised (bad input), out of the Spark exception that carries it."""
    text = str(exc)
    marker = "ValueError: "
    if marker not in text:
        return None
    message = text[text.rindex(marker) + len(marker):].strip().splitlines()[0]
    return ValueError(message)
