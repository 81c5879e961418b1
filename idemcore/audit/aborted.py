"""AbortedRecords: how many records each stream's aborted transactions wrote (data a read_committed
consumer skips), counted as a task's batches go by.

A transaction's records are the producer's transactional batches appended
from the transaction's first batch up to its marker, in stream order (the
order the kernel saw them, as a read_committed consumer reads the log; a
given ``base_offset`` is taken as given, so offsets need not grow along the
stream). A transaction can span Arrow batches, so the records of a
still-open transaction are carried as a pending count per (stream, producer).
"""

from __future__ import annotations

import numpy as np


class AbortedRecords:
    """Per stream id: records written by transactions that ended with an ABORT marker."""

    def __init__(self) -> None:
        self.per_stream = np.zeros(0, dtype=np.int64)
        self._pending: dict[tuple[int, int], int] = {}  # records of the open transaction, by (stream, producer)

    def grow(self, streams: int) -> None:
        """Room for stream ids below ``streams``."""
        if len(self.per_stream) < streams:
            self.per_stream = np.pad(self.per_stream, (0, streams - len(self.per_stream)))

    def forget(self, stream: int, producer_ids: np.ndarray) -> None:
        """Drop the records counted so far of the open transactions of ``producer_ids`` on ``stream``."""
        for producer in producer_ids.tolist():
            self._pending.pop((stream, int(producer)), None)

    def add(self, ids: np.ndarray, producer_id: np.ndarray, records: np.ndarray, data: np.ndarray,
            marker: np.ndarray, aborted: np.ndarray, streams: int) -> None:
        """One fed batch, its rows in stream order (stream id, producer, records): which rows are appended
        transactional data batches (``data``), which appended markers (``marker``), which markers ABORT
        (``aborted``). A marker ending no transaction has no records before it to count."""
        self.grow(streams)
        events = np.flatnonzero(data | marker)
        if not len(events):
            return
        # Data batches and markers of one (stream, producer), in stream order (never offset order: a given
        # base_offset may go back): a marker closes what precedes it.
        stream = ids[events].astype(np.int64)
        producer = producer_id[events]
        count = np.where(data[events], records[events], 0).astype(np.int64)
        aborted = marker[events] & aborted[events]
        marker = marker[events]
        order = np.lexsort((events, producer, stream))
        stream, producer, count, marker, aborted = (a[order] for a in (stream, producer, count, marker, aborted))

        position = np.arange(len(order))
        new_key = np.r_[True, (stream[1:] != stream[:-1]) | (producer[1:] != producer[:-1])]
        key_start = np.maximum.accumulate(np.where(new_key, position, 0))
        total = np.cumsum(count)
        before = np.r_[0, total[:-1]]  # records before each position
        last_marker = np.maximum.accumulate(np.where(marker, position, -1))
        previous_marker = np.r_[-1, last_marker[:-1]]
        segment_start = np.maximum(previous_marker + 1, key_start)  # first event of the transaction a marker ends
        for m in np.flatnonzero(marker).tolist():
            key = (int(stream[m]), int(producer[m]))
            records_in_txn = int(before[m] - before[segment_start[m]])
            if segment_start[m] == key_start[m]:  # the first marker of this key here: earlier batches count too
                records_in_txn += self._pending.pop(key, 0)
            if aborted[m]:
                self.per_stream[key[0]] += records_in_txn
        key_end = np.r_[np.flatnonzero(new_key)[1:], len(order)]  # one past each key's last event
        for start, end in zip(np.flatnonzero(new_key).tolist(), key_end.tolist(), strict=True):
            tail_start = max(int(last_marker[end - 1]) + 1, start)
            tail = int(total[end - 1] - before[tail_start]) if tail_start < end else 0
            if tail:
                key = (int(stream[start]), int(producer[start]))
                self._pending[key] = self._pending.get(key, 0) + tail if tail_start == start else tail
