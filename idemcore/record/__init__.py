"""Batches: the metadata columns the kernels read, and the batch object shared by wire and disk."""

from idemcore.kernels.columns import COLUMNS, DEFAULTS, INPUT_COLUMNS, REQUIRED, BatchColumns
from idemcore.record.batch import RecordBatch

__all__ = ["COLUMNS", "DEFAULTS", "INPUT_COLUMNS", "REQUIRED", "BatchColumns", "RecordBatch"]
