"""ProducerStateTable: the producer state of many streams, as columns.

One row per (stream, producer_id) that has written: epoch, coordinator
epoch, last timestamp, open-transaction first offset and the ring of the last
five batches ``(last_seq, offset_delta, last_offset, timestamp)``. Rows are
found through an open-addressing index held in arrays, so the kernels never
touch a Python object. Streams have their own small index and carry the
log end offset (the next offset to assign).

Each row is one 192-byte record, 64-byte aligned (its layout: ``ROW_*`` in
:mod:`idemcore.kernels.rules_reference`), so a batch touches a row's first cache line
and one more; each index slot holds its key beside the row number. The
per-field arrays (``row_epoch``, ``ring_last_seq``, ...) are strided views of
those records, reading and writing them in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from idemcore.interrupts import deferred_interrupts
from idemcore.kernels import Backend, get_backend
from idemcore.kernels import rules_reference as rules
from idemcore.kernels.abi import StateArrays
from idemcore.protocol.constants import NUM_BATCHES_TO_RETAIN

#: The fields of a row and their dtypes (what the views give, and what ``engine.persist`` writes).
_ROW_FIELDS = {
    "row_stream": np.int32,
    "row_producer_id": np.int64,
    "row_stream_index": np.int32,
    "row_epoch": np.int16,
    "row_coordinator_epoch": np.int32,
    "row_last_timestamp": np.int64,
    "row_txn_first_offset": np.int64,
}
_RING_FIELDS = {
    "ring_last_seq": np.int32,
    "ring_offset_delta": np.int32,
    "ring_last_offset": np.int64,
    "ring_timestamp": np.int64,
}
_RING_POSITION_FIELDS = {"ring_head": np.int8, "ring_len": np.int8}
_STREAM_FIELDS = {"stream_id": np.int32, "stream_next_offset": np.int64}
#: Every per-row field (each a view of the row records).
ROW_ARRAYS = (*_ROW_FIELDS, *_RING_FIELDS, *_RING_POSITION_FIELDS)

_R = NUM_BATCHES_TO_RETAIN
#: Each per-row field as (row view of its width, column or columns) of the row records.
_ROW_VIEWS: dict[str, tuple[str, int | slice]] = {
    "row_stream": ("_row_i32", rules.ROW_STREAM),
    "row_producer_id": ("_row_i64", rules.ROW_PRODUCER_ID),
    "row_stream_index": ("_row_i32", rules.ROW_STREAM_INDEX),
    "row_epoch": ("_row_i16", rules.ROW_EPOCH),
    "row_coordinator_epoch": ("_row_i32", rules.ROW_COORDINATOR_EPOCH),
    "row_last_timestamp": ("_row_i64", rules.ROW_LAST_TIMESTAMP),
    "row_txn_first_offset": ("_row_i64", rules.ROW_TXN_FIRST_OFFSET),
    "row_reserved_by": ("_row_i64", rules.ROW_RESERVED_BY),  # scratch of engine.lanes: not state, not persisted
    "ring_last_seq": ("_row_i32", slice(rules.ROW_RING_LAST_SEQ, rules.ROW_RING_LAST_SEQ + _R)),
    "ring_offset_delta": ("_row_i32", slice(rules.ROW_RING_OFFSET_DELTA, rules.ROW_RING_OFFSET_DELTA + _R)),
    "ring_last_offset": ("_row_i64", slice(rules.ROW_RING_LAST_OFFSET, rules.ROW_RING_LAST_OFFSET + 2 * _R, 2)),
    "ring_timestamp": ("_row_i64", slice(rules.ROW_RING_TIMESTAMP, rules.ROW_RING_TIMESTAMP + 2 * _R, 2)),
    "ring_head": ("_row_i8", rules.ROW_HEAD),
    "ring_len": ("_row_i8", rules.ROW_LEN),
}
_SLOT_VIEWS: dict[str, tuple[str, int]] = {
    "slot_producer_id": ("_slot_i64", rules.SLOT_PRODUCER_ID),
    "slot_stream": ("_slot_i32", rules.SLOT_STREAM),
    "slot_row": ("_slot_i32", rules.SLOT_ROW),
}
_CACHE_LINE = 64
_Item = TypeVar("_Item", bound=np.generic)


def _slots_for(capacity: int) -> int:
    # Index at most half full: a power of two at least twice the capacity.
    return 1 << max(4, (2 * capacity - 1).bit_length())


def _aligned_zeros(rows: int, words: int) -> npt.NDArray[np.int64]:
    """A zeroed C-contiguous ``(rows, words)`` int64 array whose data starts on a cache line."""
    spare = _CACHE_LINE // 8
    raw = np.zeros(rows * words + spare, dtype=np.int64)
    skip = (-raw.ctypes.data % _CACHE_LINE) // 8
    return raw[skip:skip + rows * words].reshape(rows, words)


class _View(Generic[_Item]):
    """A per-field array of the table: a strided view of the row records or index slots (not settable)."""

    def __init__(self, views: dict[str, tuple[str, Any]]):
        self._views = views

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, table: Any, owner: type | None = None) -> npt.NDArray[_Item]:
        if table is None:
            return self  # type: ignore[return-value]  # (the class attribute, for introspection)
        buffer, columns = self._views[self._name]
        view: npt.NDArray[_Item] = getattr(table, buffer)[:, columns]
        return view

    def __set__(self, table: Any, value: Any) -> None:
        raise AttributeError(f"{self._name} is a view of the table's rows: assign into it ({self._name}[...] = ...)")


class ProducerStateTable:
    """Producer state for any number of streams, held in NumPy arrays; grows as needed.

    Pass the same table to successive :func:`idemcore.validate` calls to carry
    state across chunks of a stream.
    """

    # Views of the row records (dtypes as in _ROW_FIELDS, _RING_FIELDS and _RING_POSITION_FIELDS; ring_* except
    # head and len are (rows, NUM_BATCHES_TO_RETAIN)) and of the index slots.
    row_stream = _View[np.int32](_ROW_VIEWS)
    row_producer_id = _View[np.int64](_ROW_VIEWS)
    row_stream_index = _View[np.int32](_ROW_VIEWS)
    row_epoch = _View[np.int16](_ROW_VIEWS)
    row_coordinator_epoch = _View[np.int32](_ROW_VIEWS)
    row_last_timestamp = _View[np.int64](_ROW_VIEWS)
    row_txn_first_offset = _View[np.int64](_ROW_VIEWS)
    row_reserved_by = _View[np.int64](_ROW_VIEWS)
    ring_last_seq = _View[np.int32](_ROW_VIEWS)
    ring_offset_delta = _View[np.int32](_ROW_VIEWS)
    ring_last_offset = _View[np.int64](_ROW_VIEWS)
    ring_timestamp = _View[np.int64](_ROW_VIEWS)
    ring_head = _View[np.int8](_ROW_VIEWS)
    ring_len = _View[np.int8](_ROW_VIEWS)
    slot_producer_id = _View[np.int64](_SLOT_VIEWS)
    slot_stream = _View[np.int32](_SLOT_VIEWS)
    slot_row = _View[np.int32](_SLOT_VIEWS)
    # Set in _allocate_streams (by name).
    stream_id: npt.NDArray[np.int32]
    stream_next_offset: npt.NDArray[np.int64]
    # The row records and index slots, and their views of the other widths (_bind_views).
    _row_i64: npt.NDArray[np.int64]
    _row_i32: npt.NDArray[np.int32]
    _row_i16: npt.NDArray[np.int16]
    _row_i8: npt.NDArray[np.int8]
    _slot_i64: npt.NDArray[np.int64]
    _slot_i32: npt.NDArray[np.int32]

    def __init__(self, row_capacity: int = 1024, stream_capacity: int = 16):
        if row_capacity < 1 or stream_capacity < 1:
            raise ValueError("capacities must be at least 1")
        self.counters = np.zeros(3, dtype=np.int64)  # n_rows, n_streams, completed txns of a call
        self._arrays: StateArrays | None = None
        #: Bumped by every change of state (commit, validate, removal): a check made before it is stale.
        self.generation = 0
        self._allocate_rows(row_capacity)
        self._allocate_streams(stream_capacity)

    # ------------------------------------------------------------ allocation

    def _allocate_rows(self, capacity: int, keep: int = 0, old: np.ndarray | None = None) -> None:
        """Room for ``capacity`` rows; ``old``: the previous row records, of which the first ``keep`` are kept.
        The index is left empty (``_reindex`` fills it)."""
        self._arrays = None
        rows = _aligned_zeros(capacity, rules.ROW_WORDS)
        if old is not None:
            rows[:keep] = old[:keep]
        self._row_i64 = rows
        slots = _aligned_zeros(_slots_for(capacity), rules.SLOT_WORDS)
        slots.view(np.int32)[:, rules.SLOT_ROW] = -1
        self._slot_i64 = slots
        self._bind_views()

    def _bind_views(self) -> None:
        self._row_i32 = self._row_i64.view(np.int32)
        self._row_i16 = self._row_i64.view(np.int16)
        self._row_i8 = self._row_i64.view(np.int8)
        self._slot_i32 = self._slot_i64.view(np.int32)

    def _allocate_streams(self, capacity: int, keep: int = 0, old: dict | None = None) -> None:
        self._arrays = None
        for name, dtype in _STREAM_FIELDS.items():
            array = np.zeros(capacity, dtype=dtype)
            if old is not None:
                array[:keep] = old[name][:keep]
            setattr(self, name, array)
        slots = _slots_for(capacity)
        self.sslot_stream = np.zeros(slots, dtype=np.int32)
        self.sslot_index = np.full(slots, -1, dtype=np.int32)

    def _reindex(self, backend: Backend) -> None:
        backend.rebuild_producer_index(self._slot_i64, self._slot_i32, self._row_i64, self._row_i32, self.n_producers)
        backend.rebuild_stream_index(self.sslot_stream, self.sslot_index, self.stream_id, self.n_streams)

    def grow(self, backend: Backend | str | None = None, spare: int = 0) -> None:
        """Double whichever of rows or streams is full (the kernel stopped for room), or would be left with no
        more than ``spare`` free entries (``reserve_rows`` keeps one)."""
        backend = get_backend(backend)
        with deferred_interrupts():  # (rows replaced, index not rebuilt: a table no kernel can use)
            if self.n_producers + spare >= len(self._row_i64):
                self._allocate_rows(2 * len(self._row_i64), self.n_producers, self._row_i64)
            if self.n_streams + spare >= len(self.stream_id):
                old = {name: getattr(self, name) for name in _STREAM_FIELDS}
                self._allocate_streams(2 * len(self.stream_id), self.n_streams, old)
            self._reindex(backend)

    def reserve(self, rows: int, backend: Backend | str | None = None) -> None:
        """Room for at least ``rows`` producer entries, in one reallocation if the table has less: for a caller
        that knows how many are coming, instead of doubling (each doubling copies the rows and rebuilds the
        index)."""
        rows = int(rows)
        if rows <= len(self._row_i64):
            return
        backend = get_backend(backend)
        with deferred_interrupts():  # (rows replaced, index not rebuilt: see grow)
            self._allocate_rows(rows, self.n_producers, self._row_i64)
            self._reindex(backend)

    def remove_rows(self, remove: np.ndarray, backend: Backend | str | None = None) -> int:
        """Drop the rows where ``remove`` (bool, one per producer row) is true; return how many."""
        n = self.n_producers
        remove = np.asarray(remove, dtype=bool)
        if remove.shape != (n,):
            raise ValueError(f"remove must have one flag per producer row ({n}), got shape {remove.shape}")
        keep = ~remove
        kept = int(keep.sum())
        backend = get_backend(backend)
        with deferred_interrupts():  # (rows moved, index not rebuilt: see grow)
            self._row_i64[:kept] = self._row_i64[:n][keep]
            self.counters[rules.N_ROWS] = kept
            self.generation += 1
            self._reindex(backend)
        return n - kept

    def remove_streams(self, remove: np.ndarray, backend: Backend | str | None = None) -> int:
        """Drop the streams where ``remove`` (bool, one per stream) is true; return how many. A stream
        that still has producer rows cannot be removed (ValueError)."""
        p, n = self.n_streams, self.n_producers
        remove = np.asarray(remove, dtype=bool)
        if remove.shape != (p,):
            raise ValueError(f"remove must have one flag per stream ({p}), got shape {remove.shape}")
        held = remove[self.row_stream_index[:n]]
        if held.any():
            stream = int(self.stream_id[self.row_stream_index[:n][held][0]])
            raise ValueError(f"stream {stream} still has producer rows: remove them first")
        keep = ~remove
        kept = int(keep.sum())
        backend = get_backend(backend)
        with deferred_interrupts():  # (streams moved, index not rebuilt: see grow)
            self.row_stream_index[:n] = (np.cumsum(keep) - 1)[self.row_stream_index[:n]]
            for name in _STREAM_FIELDS:
                array = getattr(self, name)
                array[:kept] = array[:p][keep]
                array[kept:p] = 0
            self.counters[rules.N_STREAMS] = kept
            self.generation += 1
            self._reindex(backend)
        return p - kept

    def set_next_offset(self, stream: int, offset: int, backend: Backend | str | None = None) -> None:
        """Set the offset the next batch appended to ``stream`` gets (its log end, e.g. after recovery loaded
        a snapshot and replayed the log after it), adding the stream if the table has not seen it."""
        offset = int(offset)
        if not 0 <= offset <= rules.INT64_MAX:
            raise ValueError(f"next offset {offset} for stream {stream} is not in [0, {rules.INT64_MAX}]")
        index = self._stream_index(stream, get_backend(backend))
        self.stream_next_offset[index] = offset
        self.generation += 1

    def add_rows(self, stream: int, producer_ids: npt.ArrayLike,
                 backend: Backend | str | None = None) -> npt.NDArray[np.intp]:
        """Add an entry for each of ``producer_ids`` on ``stream`` as a first write would create it (epoch,
        coordinator epoch, timestamp and open-transaction offset -1, no batch retained), growing the table as
        needed; return their row numbers, in the order given, for the caller to fill. A producer id that is
        negative, given twice or already on the stream raises ValueError."""
        pids = np.asarray(producer_ids, dtype=np.int64).reshape(-1)
        n = self.n_producers
        on_partition = self.row_producer_id[:n][self.row_stream[:n] == stream]
        unique, counts = np.unique(pids, return_counts=True)
        for what, bad in (("is negative", pids[pids < 0]), ("is given twice", unique[counts > 1]),
                          (f"already has an entry on stream {stream}", pids[np.isin(pids, on_partition)])):
            if len(bad):
                raise ValueError(f"producer id {int(bad[0])} {what}")
        backend = get_backend(backend)
        with deferred_interrupts():  # (rows added, index not rebuilt: see grow)
            index = self._stream_index(stream, backend)
            n = self.n_producers  # (adding the stream may have grown the table, never its rows' count)
            need = n + len(pids)
            if need > len(self._row_i64):
                capacity = len(self._row_i64)
                while capacity < need:
                    capacity *= 2
                self._allocate_rows(capacity, n, self._row_i64)
            rows = np.arange(n, need)
            self.row_stream[rows] = stream
            self.row_producer_id[rows] = pids
            self.row_stream_index[rows] = index
            for name in ("row_epoch", "row_coordinator_epoch", "row_last_timestamp", "row_txn_first_offset"):
                getattr(self, name)[rows] = -1  # as commit_batch creates a row (init_row)
            for name in (*_RING_FIELDS, *_RING_POSITION_FIELDS):
                getattr(self, name)[rows] = 0  # rows past n may hold what remove_rows left there
            self.counters[rules.N_ROWS] = need
            self.generation += 1
            self._reindex(backend)
        return rows

    def _stream_index(self, stream: int, backend: Backend) -> int:
        """The index of ``stream`` in the stream arrays, adding it (next offset 0) if new."""
        stream = int(stream)
        if not 0 <= stream <= rules.INT32_MAX:
            raise ValueError(f"stream {stream} is not in [0, {rules.INT32_MAX}]")
        slot = rules.stream_slot(self.sslot_stream, self.sslot_index, stream)
        index = int(self.sslot_index[slot])
        if index >= 0:
            return index
        if self.n_streams >= len(self.stream_id):
            self.grow(backend)
            slot = rules.stream_slot(self.sslot_stream, self.sslot_index, stream)
        index = self.n_streams
        with deferred_interrupts():  # (a slot naming an index not yet counted: see grow)
            self.sslot_stream[slot] = stream
            self.sslot_index[slot] = index
            self.stream_id[index] = stream
            self.stream_next_offset[index] = 0
            self.counters[rules.N_STREAMS] = index + 1
        return index

    def expired_rows(self, now_ms: int, expiration_ms: int) -> np.ndarray:
        """Rows with no open transaction whose last write is ``expiration_ms`` or more before ``now_ms``."""
        n = self.n_producers
        return (self.row_txn_first_offset[:n] < 0) & (now_ms - self.row_last_timestamp[:n] >= expiration_ms)

    def kernel_arrays(self) -> StateArrays:
        """Index, row, ring and stream arrays plus counters, as the kernels take them (kept until the
        table reallocates)."""
        if self._arrays is None:
            self._arrays = StateArrays(self._slot_i64, self._slot_i32, self._row_i64, self._row_i32, self._row_i16,
                                       self._row_i8, self.sslot_stream, self.sslot_index, self.stream_id,
                                       self.stream_next_offset, self.counters)
        return self._arrays

    # ------------------------------------------------------------ reading

    @property
    def n_producers(self) -> int:
        """Number of (stream, producer_id) entries."""
        return int(self.counters[rules.N_ROWS])

    @property
    def n_streams(self) -> int:
        """Number of streams that have had a batch appended."""
        return int(self.counters[rules.N_STREAMS])

    def row_of(self, stream: int, producer_id: int) -> int | None:
        """Row number of a producer's entry on a stream, or None."""
        if producer_id < 0:
            return None
        slot = rules.producer_slot(self._slot_i64, self._slot_i32, int(producer_id), int(stream))
        row = int(self._slot_i32[slot, rules.SLOT_ROW])
        return row if row >= 0 else None

    def next_offset(self, stream: int) -> int:
        """The offset the next batch appended to ``stream`` gets (0 for an unseen stream)."""
        index = int(self.sslot_index[rules.stream_slot(self.sslot_stream, self.sslot_index, int(stream))])
        return int(self.stream_next_offset[index]) if index >= 0 else 0

    def ring(self, row: int) -> Iterator[tuple[int, int, int, int]]:
        """Retained batches of a row, oldest first: ``(last_seq, offset_delta, last_offset, timestamp)``."""
        head, length = int(self.ring_head[row]), int(self.ring_len[row])
        for k in range(length):
            pos = (head + k) % NUM_BATCHES_TO_RETAIN
            yield (int(self.ring_last_seq[row, pos]), int(self.ring_offset_delta[row, pos]),
                   int(self.ring_last_offset[row, pos]), int(self.ring_timestamp[row, pos]))

    def canonical(self) -> dict[str, np.ndarray]:
        """The whole state, independent of row order and ring rotation (for comparing tables).

        Rows are sorted by (stream, producer_id); each ring is rotated so its
        oldest batch comes first and unused positions are zero.
        """
        n = self.n_producers
        order = np.lexsort((self.row_producer_id[:n], self.row_stream[:n]))
        state = {name: getattr(self, name)[:n][order] for name in (*_ROW_FIELDS, "ring_len")}
        del state["row_stream_index"]  # an internal pointer, not state
        positions = (self.ring_head[:n, None].astype(np.int64) + np.arange(NUM_BATCHES_TO_RETAIN)) \
            % NUM_BATCHES_TO_RETAIN
        used = np.arange(NUM_BATCHES_TO_RETAIN) < self.ring_len[:n, None]
        for name in _RING_FIELDS:
            rotated = np.take_along_axis(getattr(self, name)[:n], positions, axis=1)
            state[name] = np.where(used, rotated, 0)[order]
        p = self.n_streams
        porder = np.argsort(self.stream_id[:p])
        state["stream_id"] = self.stream_id[:p][porder]
        state["stream_next_offset"] = self.stream_next_offset[:p][porder]
        return state

    def copy(self) -> ProducerStateTable:
        """An independent copy."""
        clone = object.__new__(ProducerStateTable)
        for name, value in vars(self).items():
            if name in ("_row_i64", "_slot_i64"):
                value = _aligned_zeros(*value.shape)
                value[:] = getattr(self, name)
            elif isinstance(value, np.ndarray):
                value = value.copy()
            setattr(clone, name, None if name == "_arrays" else value)  # the kernel view is rebuilt on use
        clone._bind_views()  # (the narrower views of the copied records, not of this table's)
        return clone

    def __repr__(self) -> str:
        return f"ProducerStateTable({self.n_producers} producer entries, {self.n_streams} streams)"
