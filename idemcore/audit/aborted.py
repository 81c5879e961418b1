"""AbortedRecords: how many records each stream's aborted transactions wrote (data a read_committed
consumer skips), counted as a task's batches go by.

A transaction's records are the producer's transactional batches appended
from the transaction's first offset up to its marker. A transaction can span
Arrow batches, so the records of a still-open transaction are carried as a
pending count per (stream, producer).
"""

from __future__ import annotations

import numpy as np

from idemcore.state.validate import CompletedTxns


class AbortedRecords:
    """Per stream id: records written by transactions that ended with an ABORT marker."""

    def __init__(self) -> None:
        self.per_stream = np.zeros(0, dtype=np.int64)
        self._pending: dict[tuple[int, int], int] = {}  # records of the open transaction, by (stream, producer)

    def add(self, ids: np.ndarray, producer_id: np.ndarray, base_offset: np.ndarray, records: np.ndarray,
            txns: CompletedTxns, streams: int) -> None:
        """One fed batch: its appended transactional data batches (stream id, producer, first offset,
        records) and the transactions its markers completed."""
        if len(self.per_stream) < streams:
            self.per_stream = np.pad(self.per_stream, (0, streams - len(self.per_stream)))
        if not len(ids) and not len(txns):
            return
        # Data batches and markers of one (stream, producer), in offset order: a marker closes what precedes it.
        stream = np.concatenate([ids.astype(np.int64), txns.partition.astype(np.int64)])
        producer = np.concatenate([producer_id, txns.producer_id])
        offset = np.concatenate([base_offset, txns.last_offset])
        count = np.concatenate([records.astype(np.int64), np.zeros(len(txns), np.int64)])
        marker = np.r_[np.zeros(len(ids), bool), np.ones(len(txns), bool)]
        aborted = np.r_[np.zeros(len(ids), bool), txns.aborted]
        order = np.lexsort((offset, producer, stream))
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
