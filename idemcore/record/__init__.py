"""Batches: the metadata columns the kernels read, and the batch object shared by wire and disk."""

from idemcore.record.batch import RecordBatch
from idemcore.record.columns import COLUMNS, DEFAULTS, INPUT_COLUMNS, REQUIRED, BatchMetadata

__all__ = ["COLUMNS", "DEFAULTS", "INPUT_COLUMNS", "REQUIRED", "BatchMetadata", "RecordBatch"]
