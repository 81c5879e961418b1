"""The batch object shared by the wire and the disk: one partition's records with the producer's metadata.

The same object travels in a produce request, is stored in a partition log and
is replayed on recovery; its producer metadata is what the kernels check
(``record.columns`` packs many of them into columns).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from idemcore.protocol.constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE

#: Bytes counted per record on top of its key and value (Kafka's record framing is about this size).
RECORD_OVERHEAD = 10
#: Bytes of a v2 RecordBatch header (Kafka's ``RECORD_BATCH_OVERHEAD``).
BATCH_OVERHEAD = 61


@dataclass(slots=True, frozen=True)
class RecordBatch:
    """One partition's records in a produce request, with the producer's metadata.

    A producer builds a fresh one for every attempt, so what a broker stored
    never changes when the producer later re-stamps a retried batch.
    """

    topic: str
    partition: int
    values: Sequence[bytes]
    keys: Sequence[bytes | None] | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    max_timestamp: int = 0
    is_transactional: bool = False

    @property
    def record_count(self) -> int:
        return len(self.values)

    def size_in_bytes(self) -> int:
        """The batch's size as the broker's ``message_max_bytes`` counts it: the v2 header and the records
        (Kafka's v2 encoding is within a few bytes of this, uncompressed)."""
        return BATCH_OVERHEAD + records_size(self.values, self.keys)


def records_size(values: Sequence[bytes], keys: Sequence[bytes | None] | None) -> int:
    """Bytes of records as batches count them: each key and value, and RECORD_OVERHEAD of framing each."""
    size = sum(map(len, values)) + RECORD_OVERHEAD * len(values)
    if keys is not None:
        size += sum(len(key) for key in keys if key is not None)
    return size
