"""Checks on a DataFrame's columns before any job runs, with errors that name the column."""

from __future__ import annotations

from typing import Any

from idemcore.audit.columns import TOPIC, required_columns
from idemcore.record.columns import COLUMNS

_INTEGER_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType")


def _type_name(data_type: Any) -> str:
    return type(data_type).__name__


def check_input(schema: Any, order_by: str | None = None) -> str:
    """Raise ValueError for a missing or mistyped column; return the ordering column."""
    names = schema.fieldNames()
    _, order = required_columns(names, order_by)
    for field in schema.fields:
        kind = _type_name(field.dataType)
        if field.name == TOPIC and kind != "StringType":
            raise ValueError(f"column 'topic' must be a string; got {field.dataType.simpleString()}")
        if field.name in COLUMNS or field.name == order:
            boolean = field.name in COLUMNS and COLUMNS[field.name].kind == "b"
            allowed = (*_INTEGER_TYPES, "BooleanType") if boolean else _INTEGER_TYPES
            if kind not in allowed:
                wanted = "a boolean (or 0/1 integer)" if boolean else "an integer"
                raise ValueError(f"column {field.name!r} must be {wanted}; got {field.dataType.simpleString()}")
    return order


def worker_error(exc: BaseException) -> ValueError | None:
    """The ValueError a Python worker raised (bad input), out of the Spark exception that carries it."""
    text = str(exc)
    marker = "ValueError: "
    if marker not in text:
        return None
    message = text[text.rindex(marker) + len(marker):].strip().splitlines()[0]
    return ValueError(message)
