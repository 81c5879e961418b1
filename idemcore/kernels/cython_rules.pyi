"""Stub of the compiled module built from idemcore/kernels/cython_rules.pyx (see idemcore.kernels for the
contract, idemcore.kernels.abi for the argument groups, idemcore.kernels.rules_reference for the rules)."""

import numpy as np

#: The codes compiled in, by the names of idemcore.kernels.rules_reference's module globals.
KERNEL_CODES: dict[str, int]

def validate_batches(
    stream: np.ndarray, producer_id: np.ndarray, producer_epoch: np.ndarray, base_sequence: np.ndarray,
    last_sequence: np.ndarray, base_offset: np.ndarray, record_count: np.ndarray, max_timestamp: np.ndarray,
    is_transactional: np.ndarray, is_control: np.ndarray, control_type: np.ndarray, coordinator_epoch: np.ndarray,
    origin: int, start: int, stop: int,
    slot_i64: np.ndarray, slot_i32: np.ndarray, row_i64: np.ndarray, row_i32: np.ndarray, row_i16: np.ndarray,
    row_i8: np.ndarray,
    sslot_stream: np.ndarray, sslot_index: np.ndarray, stream_id: np.ndarray,
    stream_next_offset: np.ndarray, counters: np.ndarray,
    out_status: np.ndarray, out_error_code: np.ndarray, out_base_offset: np.ndarray, out_last_offset: np.ndarray,
    out_finding: np.ndarray, out_expected: np.ndarray,
    txn_stream: np.ndarray, txn_producer_id: np.ndarray, txn_first_offset: np.ndarray,
    txn_last_offset: np.ndarray, txn_aborted: np.ndarray, txn_marker: np.ndarray,
) -> int: ...
def check_batches(
    stream: np.ndarray, producer_id: np.ndarray, producer_epoch: np.ndarray, base_sequence: np.ndarray,
    last_sequence: np.ndarray, base_offset: np.ndarray, record_count: np.ndarray, max_timestamp: np.ndarray,
    is_transactional: np.ndarray, is_control: np.ndarray, control_type: np.ndarray, coordinator_epoch: np.ndarray,
    origin: int, start: int, stop: int,
    slot_i64: np.ndarray, slot_i32: np.ndarray, row_i64: np.ndarray, row_i32: np.ndarray, row_i16: np.ndarray,
    row_i8: np.ndarray,
    sslot_stream: np.ndarray, sslot_index: np.ndarray, stream_id: np.ndarray,
    stream_next_offset: np.ndarray, counters: np.ndarray,
    out_status: np.ndarray, out_error_code: np.ndarray, out_base_offset: np.ndarray, out_last_offset: np.ndarray,
    out_finding: np.ndarray, out_expected: np.ndarray,
    txn_stream: np.ndarray, txn_producer_id: np.ndarray, txn_first_offset: np.ndarray,
    txn_last_offset: np.ndarray, txn_aborted: np.ndarray, txn_marker: np.ndarray,
) -> int: ...
def commit_batches(
    stream: np.ndarray, producer_id: np.ndarray, producer_epoch: np.ndarray, base_sequence: np.ndarray,
    last_sequence: np.ndarray, base_offset: np.ndarray, record_count: np.ndarray, max_timestamp: np.ndarray,
    is_transactional: np.ndarray, is_control: np.ndarray, control_type: np.ndarray, coordinator_epoch: np.ndarray,
    start: int, stop: int,
    slot_i64: np.ndarray, slot_i32: np.ndarray, row_i64: np.ndarray, row_i32: np.ndarray, row_i16: np.ndarray,
    row_i8: np.ndarray,
    sslot_stream: np.ndarray, sslot_index: np.ndarray, stream_id: np.ndarray,
    stream_next_offset: np.ndarray, counters: np.ndarray,
    out_status: np.ndarray, out_base_offset: np.ndarray, out_last_offset: np.ndarray,
) -> int: ...
class BoundBatches:
    """check_batches and commit_batches over the argument groups given here, their buffers taken once."""

    arrays: tuple[tuple[np.ndarray, ...], ...]
    def __init__(self, columns: tuple[np.ndarray, ...], state: tuple[np.ndarray, ...],
                 verdicts: tuple[np.ndarray, ...], txns: tuple[np.ndarray, ...],
                 commit: tuple[np.ndarray, ...]) -> None: ...
    def check_batches(self, origin: int, start: int, stop: int) -> int: ...
    def commit_batches(self, start: int, stop: int) -> int: ...

def reserve_rows(
    stream: np.ndarray, producer_id: np.ndarray, start: int, stop: int,
    slot_i64: np.ndarray, slot_i32: np.ndarray, row_i64: np.ndarray, row_i32: np.ndarray, row_i16: np.ndarray,
    row_i8: np.ndarray,
    sslot_stream: np.ndarray, sslot_index: np.ndarray, stream_id: np.ndarray,
    stream_next_offset: np.ndarray, counters: np.ndarray,
    batch_bucket: np.ndarray, batch_row: np.ndarray, bucket_count: np.ndarray,
) -> int: ...
def validate_listed(
    stream: np.ndarray, producer_id: np.ndarray, producer_epoch: np.ndarray, base_sequence: np.ndarray,
    last_sequence: np.ndarray, base_offset: np.ndarray, record_count: np.ndarray, max_timestamp: np.ndarray,
    is_transactional: np.ndarray, is_control: np.ndarray, control_type: np.ndarray, coordinator_epoch: np.ndarray,
    origin: int, listed: np.ndarray, batch_row: np.ndarray, start: int, stop: int,
    slot_i64: np.ndarray, slot_i32: np.ndarray, row_i64: np.ndarray, row_i32: np.ndarray, row_i16: np.ndarray,
    row_i8: np.ndarray,
    sslot_stream: np.ndarray, sslot_index: np.ndarray, stream_id: np.ndarray,
    stream_next_offset: np.ndarray, counters: np.ndarray,
    out_status: np.ndarray, out_error_code: np.ndarray, out_base_offset: np.ndarray, out_last_offset: np.ndarray,
    out_finding: np.ndarray, out_expected: np.ndarray,
    txn_stream: np.ndarray, txn_producer_id: np.ndarray, txn_first_offset: np.ndarray,
    txn_last_offset: np.ndarray, txn_aborted: np.ndarray, txn_marker: np.ndarray,
) -> int: ...
def rebuild_producer_index(
    slot_i64: np.ndarray, slot_i32: np.ndarray, row_i64: np.ndarray, row_i32: np.ndarray, n_rows: int,
) -> None: ...
def rebuild_stream_index(
    sslot_stream: np.ndarray, sslot_index: np.ndarray, stream_id: np.ndarray, n_streams: int,
) -> None: ...
def row_layout() -> dict[str, int]: ...
