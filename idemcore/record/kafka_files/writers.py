"""Writers of the files beside a segment that :mod:`~idemcore.record.kafka_files.indexes` reads: producer-state
``.snapshot``, ``.txnindex`` entries and ``leader-epoch-checkpoint``, byte for byte as Kafka writes them; and
:func:`write_file_atomically`, the one way to put such a file in place.

Authority (storage/.../internals/log/ and server-common):

- ``ProducerStateManager.writeSnapshot``: version i16 = 1, CRC-32C u32 of every byte after the crc field, then the
  producers as an array (count i32) of 46-byte entries, producer id i64, epoch i16, last sequence i32, last offset
  i64, offset delta i32, timestamp i64, coordinator epoch i32, current transaction's first offset i64 (-1: none).
  Kafka writes its producer map in hash order; :func:`encode_snapshot` writes the entries in the order given
  (:func:`idemcore.engine.snapshot.snapshot_entries` sorts them by producer id).
- ``AbortedTxn``: 34-byte entries, ``CURRENT_VERSION`` i16 = 0, producer id i64, first offset i64, last offset i64
  (the ABORT marker's), last stable offset i64. ``TransactionIndex.append`` appends them one after the other.
- ``CheckpointFile`` with ``LeaderEpochCheckpointFile``'s formatter: text, the version line (0), the count line,
  then one ``<epoch> <start offset>`` line per entry, every line ending in a newline.

Everything big-endian. The encoders return bytes and touch no file; a value that does not fit its field raises
ValueError naming it.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from idemcore.record.crc import crc32c
from idemcore.record.kafka_files.indexes import (
    CHECKPOINT_VERSION,
    SNAPSHOT_ENTRY,
    SNAPSHOT_VERSION,
    TXN_INDEX_ENTRY,
    TXN_INDEX_VERSION,
    ProducerSnapshotEntry,
)

#: The name write_file_atomically gives a file before it is in place (Kafka's checkpoint temp name): one left
#: behind was never in use.
TEMPORARY_SUFFIX = ".tmp"

# The layouts are spelled out here, apart from the readers', so the round-trip tests check one against the other.
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_TXN = struct.Struct(">hqqqq")
#: A ``.txnindex`` entry as a NumPy record (big-endian, unpadded), for encoding many at once.
TXN_INDEX_DTYPE = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
                            ("last_offset", ">i8"), ("last_stable_offset", ">i8")])
assert _SNAPSHOT_ENTRY.size == SNAPSHOT_ENTRY and _TXN.size == TXN_INDEX_DTYPE.itemsize == TXN_INDEX_ENTRY

_VERSION_AND_CRC = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """A producer-state ``.snapshot`` holding ``entries`` in the order given (Kafka's ``writeSnapshot``)."""
    rows = list(entries)
    body = bytearray(_COUNT.size + len(rows) * _SNAPSHOT_ENTRY.size)
    _COUNT.pack_into(body, 0, len(rows))
    at = _COUNT.size
    for entry in rows:
        try:
            _SNAPSHOT_ENTRY.pack_into(body, at, *entry)
        except struct.error:
            raise ValueError(f"snapshot entry {entry!r} does not fit the format (8 integers: producer id i64, "
                             "epoch i16, last sequence i32, last offset i64, offset delta i32, timestamp i64, "
                             "coordinator epoch i32, current txn first offset i64)") from None
        at += _SNAPSHOT_ENTRY.size
    return _VERSION_AND_CRC.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def encode_txn_index_entry(producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int) -> bytes:
    """One 34-byte ``.txnindex`` entry: an aborted transaction of ``producer_id`` from ``first_offset`` to its ABORT
    marker at ``last_offset``, and the partition's last stable offset when it completed (Kafka's ``AbortedTxn``)."""
    try:
        return _TXN.pack(TXN_INDEX_VERSION, producer_id, first_offset, last_offset, last_stable_offset)
    except struct.error:
        raise ValueError(f"aborted transaction (producer {producer_id!r}, first offset {first_offset!r}, last offset "
                         f"{last_offset!r}, last stable offset {last_stable_offset!r}) does not fit four int64 "
                         "fields") from None


def encode_txn_index(producer_id: npt.ArrayLike, first_offset: npt.ArrayLike, last_offset: npt.ArrayLike,
                     last_stable_offset: npt.ArrayLike) -> bytes:
    """Many ``.txnindex`` entries at once, in the order given: the same bytes as joining
    :func:`encode_txn_index_entry` of each, packed with NumPy (the synthetic log writes thousands)."""
    columns = {"producer_id": producer_id, "first_offset": first_offset, "last_offset": last_offset,
               "last_stable_offset": last_stable_offset}
    arrays = {name: _int64_column(name, values) for name, values in columns.items()}
    lengths = {len(values) for values in arrays.values()}
    if len(lengths) != 1:
        raise ValueError("producer_id, first_offset, last_offset and last_stable_offset must have one value per "
                         f"entry, got lengths {[len(v) for v in arrays.values()]}")
    out = np.zeros(lengths.pop(), TXN_INDEX_DTYPE)
    out["version"] = TXN_INDEX_VERSION
    for name, values in arrays.items():
        out[name] = values
    return out.tobytes()


def _int64_column(name: str, values: npt.ArrayLike) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    if array.size and array.dtype == np.uint64 and int(array.max()) > _INT64[1]:
        raise ValueError(f"{name} value {int(array.max())} does not fit int64")
    return array.astype(np.int64)


def encode_leader_epoch_checkpoint(entries: Sequence[tuple[int, int]]) -> bytes:
    """A ``leader-epoch-checkpoint``: ``(epoch, start offset)`` per leader epoch, oldest first (Kafka's
    ``CheckpointFile`` with ``LeaderEpochCheckpointFile``'s formatter)."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    for epoch, start_offset in entries:
        for what, value, (low, high) in (("epoch", epoch, _INT32), ("start offset", start_offset, _INT64)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
                raise ValueError(f"leader epoch entry ({epoch!r}, {start_offset!r}): {what} {value!r} is not an "
                                 f"integer in [{low}, {high}]")
        lines.append(f"{int(epoch)} {int(start_offset)}")
    return ("\n".join(lines) + "\n").encode("ascii")


def write_file_atomically(path: str | os.PathLike[str], data: bytes | bytearray, fsync: bool = True,
                          mode: int | None = None) -> None:
    """Put ``data`` at ``path`` whole or not at all: written to ``<path>.tmp`` beside it, fsync'd, renamed over
    ``path``, then the directory fsync'd so the rename survives a power loss (Kafka's ``CheckpointFile.write``:
    temp file, sync, ``atomicMoveWithFallback``). ``fsync=False`` skips both fsyncs (the file is still never seen
    half written, but a machine crash may lose it). ``mode``: the file's permissions from its first byte (0o600 for
    secrets), else 0o644 less the umask."""
    path = os.fspath(path)
    partial = path + TEMPORARY_SUFFIX
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                         0o644 if mode is None else mode)
    try:
        try:
            if mode is not None:
                os.fchmod(descriptor, mode)  # a partial file left by a crash keeps its old mode through O_TRUNC
            with memoryview(data) as view:
                written = 0
                while written < len(view):  # os.write may write less than asked
                    written += os.write(descriptor, view[written:])
            if fsync:
                os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    if fsync:
        directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself
        finally:
            os.close(directory)


def encode_offset_checkpoint(entries: Iterable[tuple[str, int, int]]) -> bytes:
    """An offset checkpoint (``log-start-offset-checkpoint`` and its kind: Kafka's ``OffsetCheckpointFile``):
    the version line (0), the count line, then ``<topic> <partition> <offset>`` per entry."""
    rows = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(rows))]
    for topic, partition, offset in rows:
        if not topic or any(c.isspace() for c in topic):
            raise ValueError(f"topic {topic!r} cannot be written in an offset checkpoint")
        for what, value, (low, high) in (("partition", partition, _INT32), ("offset", offset, _INT64)):
            if not low <= value <= high:
                raise ValueError(f"{what} {value} of {topic} does not fit an offset checkpoint")
        lines.append(f"{topic} {partition} {offset}")
    return ("\n".join(lines) + "\n").encode()
