"""validate(): SPEC §2 over a stream of batch metadata, through the selected kernel backend."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._kernels import Backend, get_backend
from ._kernels import reference as rules
from .batches import BatchMetadata
from .constants import ErrorCode, Finding, Origin, Status
from .state import ProducerStateTable


@dataclass(frozen=True)
class CompletedTxns:
    """Transactions closed by a marker: one entry per COMMIT/ABORT that ended an open transaction."""

    partition: np.ndarray  # int32
    producer_id: np.ndarray  # int64
    first_offset: np.ndarray  # int64, first offset of the transaction's data
    last_offset: np.ndarray  # int64, offset of the marker
    aborted: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.partition)

    @classmethod
    def empty(cls, size: int) -> CompletedTxns:
        return cls(np.zeros(size, np.int32), np.zeros(size, np.int64), np.zeros(size, np.int64),
                   np.zeros(size, np.int64), np.zeros(size, np.bool_))

    @classmethod
    def concat(cls, parts: list[CompletedTxns]) -> CompletedTxns:
        if not parts:
            return cls.empty(0)
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in cls.__dataclass_fields__))

    def head(self, size: int) -> CompletedTxns:
        return CompletedTxns(*(getattr(self, name)[:size] for name in self.__dataclass_fields__))


#: The per-batch verdict columns, in kernel order, and their dtypes.
VERDICT_DTYPES = {"status": np.dtype(np.int8), "error_code": np.dtype(np.int16), "base_offset": np.dtype(np.int64),
                  "last_offset": np.dtype(np.int64), "finding": np.dtype(np.int8), "expected": np.dtype(np.int64)}


@dataclass(frozen=True)
class Verdicts:
    """The outcome of every batch, in input order.

    ``status`` (int8, :class:`idemcore.Status`), ``error_code`` (int16, Kafka's
    numbers), ``base_offset``/``last_offset`` (int64: the assigned offsets, the
    original ones for a duplicate, -1 when rejected), ``finding`` (int8,
    :class:`idemcore.Finding`), ``expected`` (int64: what the batch
    contradicted — the expected first sequence for sequence findings, the
    current epoch for an old epoch, the current coordinator epoch for a fenced
    marker, the open transaction's first offset for INVALID_TXN_STATE; else
    -1), ``completed_txns``.
    """

    status: np.ndarray
    error_code: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    finding: np.ndarray
    expected: np.ndarray
    completed_txns: CompletedTxns
    backend: str

    def __len__(self) -> int:
        return len(self.status)

    @staticmethod
    def allocate(size: int) -> dict[str, np.ndarray]:
        """Empty per-batch columns for ``size`` batches, by name."""
        return {name: np.empty(size, dtype=dtype) for name, dtype in VERDICT_DTYPES.items()}

    def counts(self) -> dict[str, int]:
        """How many batches were appended, duplicates, and rejected with each error."""
        result = {
            "appended": int(np.count_nonzero(self.status == Status.APPENDED)),
            "duplicate": int(np.count_nonzero(self.status == Status.DUPLICATE)),
        }
        rejected = Counter(self.error_code[self.status == Status.REJECTED].tolist())
        for code, number in sorted(rejected.items()):
            result[ErrorCode(code).name] = number
        return result

    def finding_counts(self) -> dict[str, int]:
        """How many batches got each finding, by SPEC §5 name (findings that occurred only)."""
        counts = np.bincount(self.finding, minlength=len(Finding))
        return {Finding(code).label: int(number) for code, number in enumerate(counts) if code and number}

    def to_dict(self) -> dict[str, np.ndarray]:
        """The per-batch columns by name."""
        return {"status": self.status, "error_code": self.error_code, "base_offset": self.base_offset,
                "last_offset": self.last_offset, "finding": self.finding, "expected": self.expected}


def validate(
    batches: Any,
    state: ProducerStateTable | None = None,
    origin: str | Origin = "client",
    backend: str | Backend | None = None,
) -> Verdicts:
    """Apply Kafka's producer-state rules (SPEC §2) to every batch, in order.

    ``batches``: a mapping of arrays, pandas DataFrame or pyarrow Table with the
    columns of :data:`idemcore.batches.COLUMNS`. ``state``: a
    :class:`ProducerStateTable` carried across calls (updated in place); None
    starts from empty state. ``origin``: ``"client"``, ``"coordinator"`` or
    ``"replication"``; it applies to data batches, control batches are always
    checked as markers written by the coordinator. ``backend``: ``"cython"``,
    ``"numba"``, ``"python"``, ``"auto"`` or None (``$IDEMCORE_BACKEND``).
    """
    packed = BatchMetadata.coerce(batches)
    origin = Origin.parse(origin)
    kernel = get_backend(backend)
    if state is None:
        state = ProducerStateTable()
    elif not isinstance(state, ProducerStateTable):
        raise TypeError(f"state must be a ProducerStateTable, not {type(state).__name__}")

    return validate_into(packed, state, origin, kernel, Verdicts.allocate(len(packed)))


def validate_into(packed: BatchMetadata, state: ProducerStateTable, origin: Origin, kernel: Backend,
                  out: dict[str, np.ndarray]) -> Verdicts:
    """:func:`validate` on checked input, writing the per-batch columns into ``out`` (arrays, or views
    of bigger ones, of :data:`VERDICT_DTYPES`)."""
    completed = CompletedTxns.empty(int(np.count_nonzero(packed["is_control"])))
    txn_buffers = (completed.partition, completed.producer_id, completed.first_offset,
                   completed.last_offset, completed.aborted.view(np.uint8))
    columns = packed.kernel_columns()
    outputs = [out[name] for name in VERDICT_DTYPES]

    state.counters[rules.N_COMPLETED] = 0
    start = 0
    while True:
        start = kernel.validate_batches(*columns, int(origin), start, *state.kernel_arrays(), *outputs, *txn_buffers)
        if start >= len(packed):
            break
        state.grow(kernel)
    return Verdicts(*outputs, completed.head(int(state.counters[rules.N_COMPLETED])), kernel.name)
