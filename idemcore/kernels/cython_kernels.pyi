"""Stub of the compiled module built from pyx/cython_kernels.pyx (see idemcore.kernels for the contract)."""

import numpy as np

def validate_batches(*arrays_and_scalars: np.ndarray | int) -> int: ...
def rebuild_producer_index(
    slot_pid: np.ndarray,
    slot_part: np.ndarray,
    slot_row: np.ndarray,
    row_pid: np.ndarray,
    row_part: np.ndarray,
    n_rows: int,
) -> None: ...
def rebuild_partition_index(
    pslot_part: np.ndarray, pslot_index: np.ndarray, partition_id: np.ndarray, n_partitions: int
) -> None: ...
