"""The columns a stream of batch metadata needs beyond the kernel's: ``topic`` and an ordering column."""

from __future__ import annotations

from collections.abc import Iterable

from idemcore.kernels.columns import INPUT_COLUMNS, REQUIRED

TOPIC = "topic"
#: Ordering columns, preferred first: ``seq_no`` is explicit arrival order (produce attempts);
#: ``base_offset`` is log order (a written log).
ORDER_COLUMNS = ("seq_no", "base_offset")


def order_column(names: Iterable[str], order_by: str | None = None) -> str:
    """The column giving each stream's order: ``order_by`` if given (it must exist), else the first of
    ``seq_no``, ``base_offset`` present."""
    names = list(names)
    if order_by is not None:
        if order_by not in names:
            raise ValueError(f"ordering column {order_by!r} is not in the input (columns: {', '.join(names)})")
        return order_by
    for name in ORDER_COLUMNS:
        if name in names:
            return name
    raise ValueError("the input needs an ordering column: 'seq_no' (arrival order) or 'base_offset' (log order); "
                     f"columns: {', '.join(names)}")


def required_columns(names: Iterable[str], order_by: str | None = None) -> tuple[list[str], str]:
    """Check that ``names`` hold a stream's required columns; return the columns to read and the order column."""
    names = list(names)
    missing = [name for name in (TOPIC, "partition", *REQUIRED) if name not in names]
    if "last_sequence" not in names and "record_count" not in names:
        missing.append("last_sequence (or record_count)")
    if missing:
        raise ValueError(f"batch metadata is missing required column(s): {', '.join(missing)}")
    order = order_column(names, order_by)
    wanted = [TOPIC, *(name for name in INPUT_COLUMNS if name in names)]
    if order not in wanted:
        wanted.append(order)
    return wanted, order
