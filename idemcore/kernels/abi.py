"""The kernels' argument groups, by name: no call site depends on the order of ~50 positional arguments.

Each group is a NamedTuple whose field order is the kernel's parameter order;
call sites build a group by keyword (or from a table, see ``engine.table``) and
splat it. ``tests/test_seams.py`` checks that every backend's parameters are
these names in this order.

``validate_batches(*BatchColumns, origin, start, stop, *StateArrays, *VerdictColumns, *TxnColumns) -> int``
``check_batches``    same arguments (prepare: verdicts, no state written)
``commit_batches(*BatchColumns, start, stop, *StateArrays, *CommitVerdicts) -> int``
``reserve_rows(stream, producer_id, start, stop, *StateArrays, *LaneColumns) -> int``
``validate_listed(*BatchColumns, origin, listed, batch_row, start, stop, *StateArrays, *VerdictColumns,
*TxnColumns) -> int``
``scan_headers(data, file_position, stream, verify_crc, cursor, *HeaderScanColumns) -> int``
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from idemcore.kernels.columns import COLUMNS

#: The batch columns' names in the kernels' order: the arguments a :class:`~idemcore.kernels.columns.BatchColumns`
#: splats into (``stream`` is the dense id of a batch's (topic, partition); producer state is keyed by it).
BATCH_FIELDS: tuple[str, ...] = tuple(COLUMNS)


class StateArrays(NamedTuple):
    """A :class:`idemcore.ProducerStateTable`: producer index, rows, streams, counters.

    The index and the rows are one buffer each, passed as views of several widths (``slot_i64`` and
    ``slot_i32`` of the index's 16-byte slots; ``row_i64`` to ``row_i8`` of the 192-byte rows): the layout is
    in :mod:`idemcore.kernels.rules_reference` (``SLOT_*``, ``ROW_*``)."""

    slot_i64: np.ndarray
    slot_i32: np.ndarray
    row_i64: np.ndarray
    row_i32: np.ndarray
    row_i16: np.ndarray
    row_i8: np.ndarray
    sslot_stream: np.ndarray
    sslot_index: np.ndarray
    stream_id: np.ndarray
    stream_next_offset: np.ndarray
    counters: np.ndarray


class VerdictColumns(NamedTuple):
    """One verdict per batch (``engine.verdicts.VERDICT_DTYPES``)."""

    out_status: np.ndarray
    out_error_code: np.ndarray
    out_base_offset: np.ndarray
    out_last_offset: np.ndarray
    out_finding: np.ndarray
    out_expected: np.ndarray


class TxnColumns(NamedTuple):
    """Transactions completed by markers, appended at ``counters[N_COMPLETED]`` in batch order."""

    txn_stream: np.ndarray
    txn_producer_id: np.ndarray
    txn_first_offset: np.ndarray
    txn_last_offset: np.ndarray
    txn_aborted: np.ndarray
    txn_marker: np.ndarray  # int64: the index of the marker batch that closed it


class CommitVerdicts(NamedTuple):
    """What ``commit_batches`` reads of the verdicts: which batches to commit, at which offsets."""

    out_status: np.ndarray
    out_base_offset: np.ndarray
    out_last_offset: np.ndarray


class LaneColumns(NamedTuple):
    """What ``reserve_rows`` writes per batch (int32: bucket, the stream's index + 1 or 0, unless the array is
    empty; row, -1 without a producer id or with a negative stream) and per bucket (int64 count of batches;
    one more bucket than the stream capacity)."""

    batch_bucket: np.ndarray
    batch_row: np.ndarray
    bucket_count: np.ndarray


#: Parameter names of each entry point, in order (checked against every backend by the tests).
SCALARS_CHECK = ("origin", "start", "stop")
SCALARS_COMMIT = ("start", "stop")
SIGNATURES: dict[str, tuple[str, ...]] = {
    "validate_batches": (*BATCH_FIELDS, *SCALARS_CHECK, *StateArrays._fields, *VerdictColumns._fields,
                         *TxnColumns._fields),
    "check_batches": (*BATCH_FIELDS, *SCALARS_CHECK, *StateArrays._fields, *VerdictColumns._fields,
                      *TxnColumns._fields),
    "commit_batches": (*BATCH_FIELDS, *SCALARS_COMMIT, *StateArrays._fields, *CommitVerdicts._fields),
    "reserve_rows": ("stream", "producer_id", *SCALARS_COMMIT, *StateArrays._fields, *LaneColumns._fields),
    "validate_listed": (*BATCH_FIELDS, "origin", "listed", "batch_row", *SCALARS_COMMIT,
                        *StateArrays._fields,
                        *VerdictColumns._fields, *TxnColumns._fields),
}


class HeaderScanColumns(NamedTuple):
    """What ``scan_headers`` writes, one row per batch of a segment: the batch metadata columns first (the
    fields of :data:`BATCH_FIELDS`, in their order, with an ``out_`` prefix; booleans as uint8), then where the
    batch lies and what else its header says. ``HEADER_SCAN_DTYPES`` gives each array's dtype."""

    out_stream: np.ndarray
    out_producer_id: np.ndarray
    out_producer_epoch: np.ndarray
    out_base_sequence: np.ndarray
    out_last_sequence: np.ndarray
    out_base_offset: np.ndarray
    out_record_count: np.ndarray
    out_max_timestamp: np.ndarray
    out_is_transactional: np.ndarray
    out_is_control: np.ndarray
    out_control_type: np.ndarray
    out_coordinator_epoch: np.ndarray
    out_position: np.ndarray
    out_batch_length: np.ndarray
    out_last_offset: np.ndarray
    out_leader_epoch: np.ndarray
    out_compression: np.ndarray
    out_crc_ok: np.ndarray

    @classmethod
    def empty(cls, capacity: int) -> HeaderScanColumns:
        """Room for ``capacity`` batches (uninitialised: a scan writes rows ``0..count-1``)."""
        return cls(*(np.empty(capacity, dtype=dtype) for dtype in HEADER_SCAN_DTYPES.values()))


#: Each output array's dtype (the first twelve are ``kernels.columns.COLUMNS`` with booleans as uint8).
HEADER_SCAN_DTYPES: dict[str, np.dtype] = {
    "out_stream": np.dtype(np.int32),
    "out_producer_id": np.dtype(np.int64),
    "out_producer_epoch": np.dtype(np.int16),
    "out_base_sequence": np.dtype(np.int32),
    "out_last_sequence": np.dtype(np.int32),
    "out_base_offset": np.dtype(np.int64),
    "out_record_count": np.dtype(np.int32),
    "out_max_timestamp": np.dtype(np.int64),
    "out_is_transactional": np.dtype(np.uint8),
    "out_is_control": np.dtype(np.uint8),
    "out_control_type": np.dtype(np.int8),
    "out_coordinator_epoch": np.dtype(np.int32),
    "out_position": np.dtype(np.int64),  # file position of the batch: file_position + its index in data
    "out_batch_length": np.dtype(np.int32),  # Kafka's batchLength: the bytes after that field
    "out_last_offset": np.dtype(np.int64),  # base offset + last offset delta
    "out_leader_epoch": np.dtype(np.int32),  # partition leader epoch
    "out_compression": np.dtype(np.int8),  # attributes bits 0-2: none, gzip, snappy, lz4, zstd
    "out_crc_ok": np.dtype(np.uint8),  # CRC_BAD 0, CRC_OK 1, CRC_UNCHECKED 2 (verify_crc off)
}

#: ``scan_headers(data, file_position, stream, verify_crc, cursor, *HeaderScanColumns) -> int`` (every backend;
#: not in SIGNATURES, whose entry points all live in ``kernels.rules_reference``).
SCALARS_SCAN = ("data", "file_position", "stream", "verify_crc", "cursor")
HEADER_SCAN_SIGNATURE: tuple[str, ...] = (*SCALARS_SCAN, *HeaderScanColumns._fields)
