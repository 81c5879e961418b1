"""Producer-state snapshots: a stream's rows of a :class:`ProducerStateTable` as the entries of Kafka's
``<offset>.snapshot`` file, and those entries loaded back as Kafka's recovery loads them.

Kafka (storage/.../internals/log/ProducerStateManager, ProducerStateEntry, BatchColumns):

- ``takeSnapshot`` writes every producer of the stream's map (``writeSnapshot``), those that have written
  only markers too. Per producer one entry: epoch, ``lastSeq``, ``lastDataOffset`` and ``lastOffsetDelta`` of the
  *newest* retained batch (-1, -1 and 0 when none is retained: a marker-only producer, or one whose epoch changed
  with its marker), ``lastTimestamp``, ``coordinatorEpoch`` and ``currentTxnFirstOffset`` (-1: no open
  transaction). The older retained batches are not written.
- ``readSnapshot`` rebuilds each entry with at most one batch: ``BatchColumns(lastSeq, lastOffset, offsetDelta,
  timestamp)`` when the last offset is ``>= 0`` (the test is on the offset, not on the sequence), taking the
  entry's timestamp; an open transaction when the first offset is ``>= 0``. ``loadFromSnapshot`` skips producers
  that have expired by then (no open transaction, idle ``producer.id.expiration.ms`` or more) and puts the rest
  in the map (``loadProducerEntry``: a later entry of the same producer id replaces an earlier one).

So after a restart from a snapshot a producer's newest batch is still deduplicated, and the next batch in
sequence, a gap, an old epoch or a fenced marker get the verdicts they would have got before; a retry of one of
the (up to four) older batches is not recognised any more and is refused as out of order (Kafka's known limit
of snapshots; the audit calls it ``duplicate_beyond_window``).

Use: :func:`snapshot_entries` then :func:`idemcore.record.kafka_files.encode_snapshot` and
:func:`~idemcore.record.kafka_files.write_file_atomically` to ``<log end, 20 digits>.snapshot``; on recovery
:func:`load_snapshot_file` (newest first; a file with problems is left unloaded, for the caller to delete and try
the next older one), then replay the log after the snapshot's offset and set the log end with
:meth:`ProducerStateTable.set_next_offset`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from idemcore.engine.table import ProducerStateTable
from idemcore.kernels import Backend, get_backend
from idemcore.protocol.constants import DEFAULT_PRODUCER_ID_EXPIRATION_MS, INT32_MAX, NUM_BATCHES_TO_RETAIN
from idemcore.record.kafka_files.indexes import FileProblem, FileRead, ProducerSnapshotEntry, read_snapshot
from idemcore.record.kafka_files.names import SNAPSHOT_SUFFIX, parse_offset_file

#: Each snapshot field and the dtype of the table column it fills (the range it must fit).
_FIELD_DTYPES: dict[str, type[np.integer]] = {
    "producer_id": np.int64,
    "producer_epoch": np.int16,
    "last_sequence": np.int32,
    "last_offset": np.int64,
    "offset_delta": np.int32,
    "timestamp": np.int64,
    "coordinator_epoch": np.int32,
    "current_txn_first_offset": np.int64,
}


def snapshot_entries(table: ProducerStateTable, stream: int) -> list[ProducerSnapshotEntry]:
    """The entries Kafka's ``writeSnapshot`` would write for ``stream`` from ``table``'s rows, sorted by
    producer id: one per producer with an entry there, with its newest retained batch only (module docstring)."""
    n = table.n_producers
    rows = np.flatnonzero(table.row_stream[:n] == stream)
    rows = rows[np.argsort(table.row_producer_id[rows], kind="stable")]
    length = table.ring_len[rows].astype(np.int64)
    has_batch = length > 0
    newest = (table.ring_head[rows].astype(np.int64) + length - 1) % NUM_BATCHES_TO_RETAIN
    txn_first = table.row_txn_first_offset[rows]
    columns = (
        table.row_producer_id[rows],
        table.row_epoch[rows],
        np.where(has_batch, table.ring_last_seq[rows, newest], -1),  # ProducerStateEntry.lastSeq: NO_SEQUENCE
        np.where(has_batch, table.ring_last_offset[rows, newest], -1),  # lastDataOffset
        np.where(has_batch, table.ring_offset_delta[rows, newest], 0),  # lastOffsetDelta
        table.row_last_timestamp[rows],
        table.row_coordinator_epoch[rows],
        np.where(txn_first >= 0, txn_first, -1),  # currentTxnFirstOffset.orElse(-1)
    )
    return [ProducerSnapshotEntry(*fields) for fields in zip(*(c.tolist() for c in columns), strict=True)]


def load_snapshot(table: ProducerStateTable, stream: int, entries: Iterable[ProducerSnapshotEntry],
                  backend: Backend | str | None = None, *, next_offset: int | None = None,
                  now_ms: int | None = None,
                  expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> int:
    """Make ``stream``'s producer state in ``table`` what Kafka's ``loadFromSnapshot`` makes of ``entries``
    (module docstring): every row the stream had is dropped, each producer gets one row with its newest batch
    as the only retained one (none when its last offset is -1). Returns how many producers were loaded.

    ``next_offset``: the stream's log end after the load (the snapshot's offset, from its file name); None
    leaves it as it was (0 for a stream new to the table). ``now_ms``: skip the producers expired at that time,
    as Kafka does (no open transaction and ``now_ms - timestamp >= expiration_ms``); None loads them all.
    A later entry of a producer id replaces an earlier one, as in Kafka's map. A field that does not fit the
    table's column raises ValueError before anything changes."""
    kernel = get_backend(backend)
    if not 0 <= stream <= INT32_MAX:
        raise ValueError(f"stream {stream} is not in [0, {INT32_MAX}]")
    by_pid = {int(entry[0]): ProducerSnapshotEntry(*entry) for entry in entries}  # last one wins, as in Kafka
    loaded = [entry for entry in by_pid.values()
              if now_ms is None or entry.current_txn_first_offset >= 0 or now_ms - entry.timestamp < expiration_ms]
    columns = _columns(loaded)
    if len(loaded) and columns["producer_id"].min() < 0:
        raise ValueError(f"producer id {int(columns['producer_id'].min())} is negative")
    if next_offset is not None and next_offset < 0:
        raise ValueError(f"next offset {next_offset} for stream {stream} is negative")

    n = table.n_producers
    if n:
        old = table.row_stream[:n] == stream
        if old.any():
            table.remove_rows(old, kernel)
    rows = table.add_rows(stream, columns["producer_id"], kernel)
    table.row_epoch[rows] = columns["producer_epoch"]
    table.row_coordinator_epoch[rows] = columns["coordinator_epoch"]
    table.row_last_timestamp[rows] = columns["timestamp"]
    table.row_txn_first_offset[rows] = np.where(columns["current_txn_first_offset"] >= 0,
                                                columns["current_txn_first_offset"], -1)
    keep = columns["last_offset"] >= 0  # readSnapshot: a batch when the last offset is >= 0, whatever the sequence
    with_batch = rows[keep]
    table.ring_head[with_batch] = 0
    table.ring_len[with_batch] = 1
    table.ring_last_seq[with_batch, 0] = columns["last_sequence"][keep]
    table.ring_offset_delta[with_batch, 0] = columns["offset_delta"][keep]
    table.ring_last_offset[with_batch, 0] = columns["last_offset"][keep]
    table.ring_timestamp[with_batch, 0] = columns["timestamp"][keep]  # BatchColumns gets the entry's timestamp
    if next_offset is not None:
        table.set_next_offset(stream, next_offset, kernel)
    return len(loaded)


def _columns(entries: list[ProducerSnapshotEntry]) -> dict[str, np.ndarray]:
    """The entries' fields as arrays of the table's dtypes; a value outside its range raises ValueError."""
    try:
        values: np.ndarray | None = np.array(entries, dtype=np.int64).reshape(len(entries), len(_FIELD_DTYPES))
    except OverflowError:
        values = None  # some value is past int64: found below, one entry at a time
    columns = {}
    for k, (name, dtype) in enumerate(_FIELD_DTYPES.items()):
        info = np.iinfo(dtype)
        if values is None:
            bad = [j for j, entry in enumerate(entries) if not info.min <= int(entry[k]) <= info.max]
        else:
            bad = np.flatnonzero((values[:, k] < info.min) | (values[:, k] > info.max)).tolist()
            columns[name] = values[:, k].astype(dtype)
        if bad:
            entry = entries[bad[0]]
            raise ValueError(f"producer {entry.producer_id}: {name} {int(entry[k])} does not fit "
                             f"{np.dtype(dtype).name}")
    return columns


def load_snapshot_file(table: ProducerStateTable, stream: int, path: str | os.PathLike[str],
                       backend: Backend | str | None = None, *, now_ms: int | None = None,
                       expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> FileRead[ProducerSnapshotEntry]:
    """Read the snapshot at ``path`` and, only if it has no problem (a CRC mismatch, a wrong version, a short
    file: Kafka's ``CorruptSnapshotException``), :func:`load_snapshot` its entries into ``stream`` with the
    offset in its name as the stream's next offset. Returns what was read: with problems, ``table`` is
    unchanged and the caller deletes the file and tries the next older snapshot, as Kafka does."""
    path = Path(path)
    parsed = parse_offset_file(path.name)
    if parsed is None or parsed[1] != SNAPSHOT_SUFFIX:
        raise ValueError(f"{path.name!r} is not a snapshot file name (<20-digit offset>.snapshot)")
    offset = parsed[0]
    read = read_snapshot(path)
    if not read.problems:
        try:
            load_snapshot(table, stream, read.entries, backend, next_offset=offset, now_ms=now_ms,
                          expiration_ms=expiration_ms)
        except ValueError as exc:  # a valid CRC over values no producer state holds: as corrupt
            read.problems.append(FileProblem(path, None, "snapshot_invalid", str(exc)))
    return read
