"""Stub of the compiled module built from idemcore/kernels/cython_header_scan.pyx."""

from typing import Any

import numpy as np

SCAN_CODES: dict[str, int]

def scan_headers(
    data: Any, file_position: int, stream: int, verify_crc: bool, cursor: np.ndarray,
    out_stream: np.ndarray, out_producer_id: np.ndarray, out_producer_epoch: np.ndarray,
    out_base_sequence: np.ndarray, out_last_sequence: np.ndarray, out_base_offset: np.ndarray,
    out_record_count: np.ndarray, out_max_timestamp: np.ndarray, out_is_transactional: np.ndarray,
    out_is_control: np.ndarray, out_control_type: np.ndarray, out_coordinator_epoch: np.ndarray,
    out_position: np.ndarray, out_batch_length: np.ndarray, out_last_offset: np.ndarray,
    out_leader_epoch: np.ndarray, out_compression: np.ndarray, out_crc_ok: np.ndarray,
) -> int: ...
