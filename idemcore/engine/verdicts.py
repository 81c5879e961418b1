"""What a replay through the producer-state rules says of each batch (:class:`Verdicts`) and of the transactions
its markers closed (:class:`CompletedTxns`); :mod:`idemcore.engine.validate` and its lanes (:mod:`.lanes`) fill them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from idemcore.findings import Finding
from idemcore.kernels.abi import TxnColumns, VerdictColumns
from idemcore.protocol.codes import ErrorCode, Status


@dataclass(frozen=True)
class CompletedTxns:
    """Transactions closed by a marker: one entry per COMMIT/ABORT that ended an open transaction."""

    stream: np.ndarray  # int32
    producer_id: np.ndarray  # int64
    first_offset: np.ndarray  # int64, first offset of the transaction's data
    last_offset: np.ndarray  # int64, offset of the marker
    aborted: np.ndarray  # bool
    marker: np.ndarray  # int64, the index (in the call's batches) of the marker that closed it

    def __len__(self) -> int:
        return len(self.stream)

    @classmethod
    def empty(cls, size: int) -> CompletedTxns:
        return cls(np.zeros(size, np.int32), np.zeros(size, np.int64), np.zeros(size, np.int64),
                   np.zeros(size, np.int64), np.zeros(size, np.bool_), np.zeros(size, np.int64))

    @classmethod
    def concat(cls, parts: list[CompletedTxns]) -> CompletedTxns:
        if not parts:
            return cls.empty(0)
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in cls.__dataclass_fields__))

    def kernel_columns(self) -> TxnColumns:
        """The columns as the kernels write them (``aborted`` as a uint8 view)."""
        return TxnColumns(self.stream, self.producer_id, self.first_offset, self.last_offset,
                          self.aborted.view(np.uint8), self.marker)

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
    def allocate(size: int) -> VerdictColumns:
        """Empty per-batch columns for ``size`` batches, as the kernels take them."""
        return VerdictColumns(*(np.empty(size, dtype=dtype) for dtype in VERDICT_DTYPES.values()))

    def reuse(self, size: int) -> VerdictColumns:
        """The first ``size`` of each per-batch column, to be overwritten (``validate(..., out=)``)."""
        columns = self.to_dict()
        for name, column in columns.items():
            if column.dtype != VERDICT_DTYPES[name] or column.ndim != 1 or not column.flags.c_contiguous \
                    or not column.flags.writeable:
                raise ValueError(f"out.{name} is not a writeable contiguous 1-D {VERDICT_DTYPES[name]} array")
            if len(column) < size:
                raise ValueError(f"out holds verdicts for {len(column)} batches, fewer than the {size} given")
        return VerdictColumns(*(column[:size] for column in columns.values()))

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
        """How many batches got each finding, by name (docs/rules.md §5) (findings that occurred only)."""
        counts = np.bincount(self.finding, minlength=len(Finding))
        return {Finding(code).label: int(number) for code, number in enumerate(counts) if code and number}

    def to_dict(self) -> dict[str, np.ndarray]:
        """The per-batch columns by name."""
        return {"status": self.status, "error_code": self.error_code, "base_offset": self.base_offset,
                "last_offset": self.last_offset, "finding": self.finding, "expected": self.expected}
