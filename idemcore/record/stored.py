"""A batch as a log holds it: its base offset, what compaction left of its offsets, and whether it is a
transaction marker. The broker's logs keep these; fetch responses carry them to consumers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from idemcore.record.batch import RecordBatch


class StoredBatch(NamedTuple):
    base_offset: int
    batch: RecordBatch
    #: Each record's offset from ``base_offset`` once compaction removed records (None: 0, 1, 2, ...).
    offset_deltas: tuple[int, ...] | None = None
    #: The batch's last offset delta, kept by compaction (None: ``record_count - 1``).
    last_offset_delta: int | None = None
    #: A transaction marker's ``(control type, coordinator epoch)`` (ABORT 0, COMMIT 1); None for data.
    control: tuple[int, int] | None = None
    #: The batch's v2 bytes as the log holds them (its base offset set), when the log has them: a batch sent
    #: over the wire, or read back from a segment. Fetch answers with these, as Kafka serves its segments.
    raw: bytes | None = None

    @property
    def next_offset(self) -> int:
        """The offset after the batch's last (compaction keeps it, as it keeps the producer's last sequence)."""
        if self.last_offset_delta is not None:
            return self.base_offset + self.last_offset_delta + 1
        return self.base_offset + (1 if self.control is not None else self.batch.record_count)

    def offsets(self) -> Iterator[int]:
        if self.offset_deltas is None:
            return iter(range(self.base_offset, self.base_offset + self.batch.record_count))
        return (self.base_offset + delta for delta in self.offset_deltas)
