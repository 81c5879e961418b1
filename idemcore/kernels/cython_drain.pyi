"""Stub of the compiled module built from idemcore/kernels/cython_drain.pyx."""

import numpy as np

def drain_partitions(
    head_queued: np.ndarray, head_sequence: np.ndarray, head_record_count: np.ndarray, head_attempts: np.ndarray,
    head_last_attempt_ms: np.ndarray, head_size: np.ndarray, next_sequence: np.ndarray,
    last_acked_sequence: np.ndarray, partition_producer_id: np.ndarray, partition_epoch: np.ndarray,
    inflight_count: np.ndarray, first_inflight_sequence: np.ndarray, unresolved: np.ndarray,
    idempotent: bool, producer_id: int, producer_epoch: int, now_ms: int, retry_backoff_ms: int,
    max_request_size: int, cursor: np.ndarray, out_stream: np.ndarray, out_base_sequence: np.ndarray,
    out_reset: np.ndarray,
) -> int: ...
