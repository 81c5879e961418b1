"""Batch metadata as columns (:class:`BatchColumns`): one NumPy array per field, checked and coerced once at the
edge, and the kernels' batch arguments as they are (``*batches`` splats them into a kernel call).

Accepts a mapping of arrays, a pandas DataFrame, or a pyarrow Table/RecordBatch.
The first column, ``stream``, is the dense id the kernels key a producer's
state by: one per (topic, partition). Input may name it ``partition`` instead
(Kafka's partition number, taken as the stream for batches of one topic; the
same array, not a copy); there is no ``topic`` column here, so batches of
several topics need their (topic, partition) pairs numbered into ``stream``
first (as the audit does, ``audit.keys``).
Columns whose dtype already matches are used without a copy; integer columns
of another width are cast when every value fits; anything else (floats,
strings, nulls, values out of range) raises ``ValueError`` naming the column.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from idemcore.protocol.sequences import last_sequences, record_counts

#: Field name -> dtype, in the order the kernels take them.
COLUMNS: dict[str, np.dtype] = {
    "stream": np.dtype(np.int32),
    "producer_id": np.dtype(np.int64),
    "producer_epoch": np.dtype(np.int16),
    "base_sequence": np.dtype(np.int32),
    "last_sequence": np.dtype(np.int32),
    "base_offset": np.dtype(np.int64),
    "record_count": np.dtype(np.int32),
    "max_timestamp": np.dtype(np.int64),
    "is_transactional": np.dtype(np.bool_),
    "is_control": np.dtype(np.bool_),
    "control_type": np.dtype(np.int8),
    "coordinator_epoch": np.dtype(np.int32),
}
REQUIRED = ("producer_id", "producer_epoch", "base_sequence")
#: Another name input may give a column: Kafka's ``partition`` is the stream when the batches are of one topic.
ALIASES: dict[str, str] = {"stream": "partition"}
#: The columns as a user's batch metadata names them (Parquet files, DataFrames, findings): ``partition`` (with a
#: ``topic`` column beside it in the audit's input) where the kernels take ``stream``.
INPUT_COLUMNS: dict[str, np.dtype] = {ALIASES.get(name, name): dtype for name, dtype in COLUMNS.items()}
#: Defaults of optional columns. last_sequence and record_count derive from each other.
DEFAULTS: dict[str, int | bool] = {
    "stream": 0,
    "base_offset": -1,
    "max_timestamp": 0,
    "is_transactional": False,
    "is_control": False,
    "control_type": -1,
    "coordinator_epoch": 0,
}


def derive_record_counts(base_sequence: np.ndarray, last_sequence: np.ndarray,
                         is_control: np.ndarray | None = None) -> np.ndarray:
    """record_count from the sequences. A batch without sequences (base_sequence -1) is a marker, one record,
    only where ``is_control`` says so; a data batch of a producer without idempotence could hold any number,
    so ValueError names the first such row."""
    base = np.asarray(base_sequence)
    unknown = np.flatnonzero((base < 0) if is_control is None else (base < 0) & ~np.asarray(is_control, bool))
    if len(unknown):
        raise ValueError(f"record_count is needed: row {int(unknown[0])} is not a control batch and has no "
                         "sequence (base_sequence -1), so last_sequence cannot tell how many records it holds")
    return record_counts(base_sequence, last_sequence)


class BatchColumns:
    """Validated, packed batch metadata, one array per field of :data:`COLUMNS`: ``batches["producer_id"]`` (or
    ``batches.producer_id``) is an int64 array, and so on; the flags are bool arrays. ``len()`` is the number of
    batches. Iterating gives the kernels' batch arguments in their order (``abi.BATCH_FIELDS``; the flags as
    zero-copy uint8 views), so ``kernel.validate_batches(*batches, ...)`` takes them as they are."""

    __slots__ = ("_columns", "_length")

    def __init__(self, columns: dict[str, np.ndarray]):
        # Internal: use BatchColumns.coerce() or allocate(); this trusts that columns are complete and typed.
        self._columns = columns
        self._length = len(columns["producer_id"])

    @classmethod
    def allocate(cls, capacity: int) -> BatchColumns:
        """Room for ``capacity`` batches to fill in place (each column at its default, 0 where it has none)."""
        return cls({name: np.full(capacity, DEFAULTS.get(name, 0), dtype) for name, dtype in COLUMNS.items()})

    @classmethod
    def coerce(cls, data: Any) -> BatchColumns:
        """Check and pack ``data`` (mapping, pandas DataFrame, pyarrow Table/RecordBatch, BatchColumns)."""
        if isinstance(data, BatchColumns):
            return data
        raw = _columns_of(data)
        missing = [name for name in REQUIRED if name not in raw]
        if "last_sequence" not in raw and "record_count" not in raw:
            missing.append("last_sequence (or record_count)")
        if missing:
            raise ValueError(f"batch metadata is missing required column(s): {', '.join(missing)}")
        given = _input_names(raw)  # column -> the name the input gives it (errors name the input's column)
        present = [name for name in COLUMNS if name in given]
        columns = {name: _coerce_column(given[name], raw[given[name]], COLUMNS[name]) for name in present}
        length = len(columns[present[0]])
        for name in present:
            if len(columns[name]) != length:
                raise ValueError(
                    f"column {given[name]!r} has {len(columns[name])} values but {given[present[0]]!r} has "
                    f"{length}; all columns must have the same length"
                )
        if "last_sequence" not in columns:
            columns["last_sequence"] = last_sequences(columns["base_sequence"], columns["record_count"])
        if "record_count" not in columns:
            columns["record_count"] = derive_record_counts(columns["base_sequence"], columns["last_sequence"],
                                                           columns.get("is_control"))
        for name, value in DEFAULTS.items():
            if name not in columns:
                columns[name] = np.full(length, value, dtype=COLUMNS[name])
        return cls({name: columns[name] for name in COLUMNS})

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    def __getattr__(self, name: str) -> np.ndarray:
        if name.startswith("_"):  # (the slots before __init__ set them)
            raise AttributeError(name)
        try:
            return self._columns[name]
        except KeyError:
            raise AttributeError(f"BatchColumns has no column {name!r}") from None

    def __iter__(self) -> Iterator[np.ndarray]:
        for array in self._columns.values():
            yield array.view(np.uint8) if array.dtype == np.bool_ else array

    def __repr__(self) -> str:
        return f"BatchColumns({self._length} batches)"

    def to_dict(self) -> dict[str, np.ndarray]:
        """The columns, by name (the arrays themselves, not copies)."""
        return dict(self._columns)

    def slice(self, start: int, stop: int) -> BatchColumns:
        """Batches ``start..stop-1`` as views."""
        return BatchColumns({name: array[start:stop] for name, array in self._columns.items()})

    def take(self, indices: np.ndarray) -> BatchColumns:
        """The batches at ``indices``, in that order (copies)."""
        return BatchColumns({name: array[indices] for name, array in self._columns.items()})


def concatenate(parts: Sequence[BatchColumns]) -> BatchColumns:
    """The batches of ``parts``, one after the other (copies)."""
    first = parts[0].to_dict()
    return BatchColumns({name: np.concatenate([part[name] for part in parts]) for name in first})


def _input_names(raw: Mapping[str, Any]) -> dict[str, str]:
    """Each column ``raw`` holds, by its name here, to the name ``raw`` gives it (``ALIASES``, one of the two)."""
    given = {name: name for name in COLUMNS if name in raw}
    for name, alias in ALIASES.items():
        if alias in raw:
            if name in raw:
                raise ValueError(f"batch metadata has both a {name!r} and a {alias!r} column; give one "
                                 f"({alias!r} is taken as the {name} of batches of one topic)")
            given[name] = alias
    return given


def _columns_of(data: Any) -> Mapping[str, Any]:
    module = type(data).__module__
    if isinstance(data, Mapping):
        return data
    if module.startswith("pandas"):
        return {str(name): data[name] for name in data.columns}
    if module.startswith("pyarrow"):
        return {name: data.column(name) for name in data.schema.names}
    raise TypeError(
        "batch metadata must be a mapping of arrays, a pandas DataFrame or a pyarrow Table/RecordBatch, "
        f"not {type(data).__name__}"
    )


def _to_numpy(name: str, values: Any) -> np.ndarray:
    module = type(values).__module__
    if module.startswith("pyarrow"):
        if values.null_count:
            raise ValueError(f"column {name!r} contains {values.null_count} null value(s)")
        chunks = values.chunks if hasattr(values, "chunks") else [values]
        if len(chunks) == 1:
            return chunks[0].to_numpy(zero_copy_only=False)
        return values.to_numpy()
    if module.startswith("pandas"):
        if not isinstance(values.dtype, np.dtype) and values.isna().any():
            raise ValueError(f"column {name!r} contains {int(values.isna().sum())} null value(s)")
        return values.to_numpy()
    return np.asarray(values)


def _coerce_column(name: str, values: Any, dtype: np.dtype) -> np.ndarray:
    array = _to_numpy(name, values)
    if array.ndim != 1:
        raise ValueError(f"column {name!r} must be one-dimensional, got shape {array.shape}")
    if array.dtype == dtype:
        return np.ascontiguousarray(array)
    if array.size == 0:  # an empty list arrives as float64; nothing to lose
        return np.empty(0, dtype=dtype)
    source = array.dtype
    if dtype == np.bool_:
        if source.kind in "iu" and (array.size == 0 or (array.min() >= 0 and array.max() <= 1)):
            return array.astype(np.bool_)
        raise ValueError(f"column {name!r} must be boolean; got dtype {source} that cannot be cast safely")
    if source == np.bool_:
        return array.astype(dtype)
    if source.kind in "iu":
        if array.size:
            info = np.iinfo(dtype)
            low, high = array.min(), array.max()
            if low < info.min or high > info.max:
                raise ValueError(
                    f"column {name!r} has values in [{low}, {high}], outside the range of {dtype} "
                    f"[{info.min}, {info.max}]"
                )
        return array.astype(dtype)
    raise ValueError(f"column {name!r} must be {dtype}; got dtype {source} that cannot be cast safely")
