"""Batches: the metadata columns the kernels read, and the batch object shared by wire and disk."""

from idemcore.record.batch import RecordBatch
from idemcore.record.columns import COLUMNS, DEFAULTS, REQUIRED, BatchMetadata

__all__ = ["COLUMNS", "DEFAULTS", "REQUIRED", "BatchMetadata", "RecordBatch"]
