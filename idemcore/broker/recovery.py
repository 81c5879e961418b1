"""Producer state rebuilt at start (Kafka's ``LogLoader`` with ``ProducerStateManager``): for each partition the
newest valid snapshot, then the batches after it replayed with REPLICATION origin, read by the native header scan
(nothing decoded). Transactions open in the state are noted in their logs (their LSO), and the producer ids seen
are never handed out again."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from idemcore.broker.log import LogCorruptionError, PartitionLog
from idemcore.broker.partition import Partition
from idemcore.broker.producer_ids import REACHABLE, ProducerIdManager
from idemcore.engine.snapshot import load_snapshot_file
from idemcore.engine.table import ProducerStateTable
from idemcore.engine.validate import validate_into
from idemcore.engine.verdicts import Verdicts
from idemcore.kernels import Backend
from idemcore.kernels.columns import BatchColumns, concatenate
from idemcore.protocol.codes import ErrorCode, Origin, Status

log = logging.getLogger(__name__)


def recover_producer_state(partitions: Sequence[Partition], state: ProducerStateTable, backend: Backend,
                           producer_ids: ProducerIdManager, *, now_ms: int, expiration_ms: int) -> int:
    """Load ``state`` from the partitions' snapshots and logs (module docstring); how many batches were replayed.
    Unusable snapshots (corrupt, beyond the log end, below the log start) are deleted once all succeeded."""
    scanned: list[BatchColumns] = []
    unusable: list[tuple[PartitionLog, int, str]] = []
    for partition in partitions:
        start = _load_snapshot(partition, state, backend, unusable, now_ms, expiration_ms)
        if start < partition.log.log_end_offset:
            found = partition.log.scan_from(start, partition.stream)
            if found is not None:
                scanned.append(found)
    replayed = _replay(scanned, partitions, state, backend) if scanned else 0
    for partition in partitions:
        if partition.log.log_end_offset:
            state.set_next_offset(partition.stream, partition.log.log_end_offset, backend)
    rows = state.n_producers
    # A transaction whose first batches retention deleted is known only to the producer state (its snapshot):
    # the log must hold its LSO at the log start too (Kafka loads ongoing transactions from the snapshot).
    for row in np.flatnonzero(state.row_txn_first_offset[:rows] >= 0).tolist():
        partitions[int(state.row_stream[row])].log.note_open_transaction(int(state.row_producer_id[row]),
                                                                           int(state.row_txn_first_offset[row]))
    if rows:  # ids in the logs and snapshots are never handed out again, even if the id store was lost
        ids = state.row_producer_id[:rows]
        reachable = ids[ids < REACHABLE]
        if len(reachable):
            producer_ids.skip_through(int(reachable.max()))
    for partition_log, offset, why in unusable:
        partition_log.delete_snapshot(offset, why)
    return replayed


def reload_partition_state(partition: Partition, state: ProducerStateTable, backend: Backend, *, now_ms: int,
                           expiration_ms: int) -> int:
    """After ``partition``'s log was truncated: drop its producer-state rows and load them again from its newest
    usable snapshot and the batches after it (Kafka's ``ProducerStateManager.truncateAndReload`` then
    ``rebuildProducerState``), note the transactions open in it on the log, and return how many batches were
    replayed. Unusable snapshots are deleted once it succeeded."""
    stream = partition.stream
    rows = state.n_producers
    drop = state.row_stream[:rows] == stream
    if drop.any():
        state.remove_rows(drop, backend)
    present = state.stream_id[:state.n_streams] == stream
    if present.any():
        state.remove_streams(present, backend)
    unusable: list[tuple[PartitionLog, int, str]] = []
    start = _load_snapshot(partition, state, backend, unusable, now_ms, expiration_ms)
    replayed = 0
    if start < partition.log.log_end_offset:
        found = partition.log.scan_from(start, stream)
        if found is not None:
            replayed = _replay([found], _Numbered(partition), state, backend)
    state.set_next_offset(stream, partition.log.log_end_offset, backend)
    rows = state.n_producers
    for row in np.flatnonzero((state.row_stream[:rows] == stream)
                              & (state.row_txn_first_offset[:rows] >= 0)).tolist():
        partition.log.note_open_transaction(int(state.row_producer_id[row]), int(state.row_txn_first_offset[row]))
    for partition_log, offset, why in unusable:
        partition_log.delete_snapshot(offset, why)
    return replayed


class _Numbered(Sequence[Partition]):
    """One partition, found by its stream (what :func:`_replay` names a bad batch's partition by)."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition

    def __getitem__(self, index: int) -> Partition:  # type: ignore[override]
        return self._partition

    def __len__(self) -> int:
        return 1


def _load_snapshot(partition: Partition, state: ProducerStateTable, backend: Backend,
                   unusable: list[tuple[PartitionLog, int, str]], now_ms: int, expiration_ms: int) -> int:
    """Load the newest usable snapshot of the partition into the state; the offset replay starts at. A corrupt
    one (Kafka: CorruptSnapshotException) or one beyond the log end is skipped, to be deleted."""
    partition_log = partition.log
    end = partition_log.log_end_offset
    offsets = partition_log.snapshot_offsets()
    for offset in offsets:  # damage from outside that no deletion should meet (Kafka lists regular files)
        path = partition_log.snapshot_path(offset)
        if not path.is_file() or path.is_symlink():
            raise LogCorruptionError(f"{partition_log.name}: {path} is not a file; a snapshot was there. "
                                     "Remove it (the state is rebuilt from an older snapshot or the log)")
    for offset in reversed(offsets):
        if offset > end:  # describes batches the log does not hold
            unusable.append((partition_log, offset, f"beyond the log end {end}"))
            continue
        if offset < partition_log.log_start_offset:  # replay from it would miss the batches retention took
            unusable.append((partition_log, offset, "below the log start offset"))
            continue
        path = partition_log.snapshot_path(offset)
        read = load_snapshot_file(state, partition.stream, path, backend, now_ms=now_ms, expiration_ms=expiration_ms)
        if not read.problems:
            return offset
        log.warning("%s: the snapshot %s is corrupt (%s); using an older one or the log", partition_log.name,
                    path, read.problems[0])
        unusable.append((partition_log, offset, "corrupt"))
    return partition_log.log_start_offset


def _replay(scanned: list[BatchColumns], partitions: Sequence[Partition], state: ProducerStateTable,
            backend: Backend) -> int:
    """Replay the scanned batches (each partition's from its snapshot on) into the state with REPLICATION
    origin; how many there were."""
    columns = scanned[0] if len(scanned) == 1 else concatenate(scanned)
    count = len(columns)
    verdicts = validate_into(columns, state, Origin.REPLICATION, backend, Verdicts.allocate(count))
    bad = np.flatnonzero(verdicts.status != Status.APPENDED)
    if len(bad):
        row = int(bad[0])
        reason = ErrorCode(int(verdicts.error_code[row])).name
        raise LogCorruptionError(f"{partitions[int(columns['partition'][row])].name}: the batch at offset "
                                 f"{int(columns['base_offset'][row])} does not replay ({reason})")
    return count
