"""The batch object shared by the wire and the disk: one partition's records with the producer's metadata.

The same object travels in a produce request, is stored in a partition log and
is replayed on recovery; its producer metadata is what the kernels check
(``kernels.columns.BatchColumns`` packs many of them into columns).

Record headers (Kafka's: a ``str`` key, UTF-8 on the wire, and ``bytes`` or None) ride in ``headers``: None
when no record has any, else one sequence of ``(key, value)`` pairs per record (empty for a record without).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from idemcore.protocol.constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE

#: Bytes counted per record on top of its key and value (Kafka's record framing is about this size).
RECORD_OVERHEAD = 10
#: Bytes counted per record header on top of its key's UTF-8 and its value (their two varint lengths, mostly 1 byte).
HEADER_OVERHEAD = 2
#: Bytes of a v2 RecordBatch header (Kafka's ``RECORD_BATCH_OVERHEAD``).
BATCH_OVERHEAD = 61


@dataclass(slots=True, frozen=True)
class RecordBatch:
    """One partition's records in a produce request, with the producer's metadata.

    A producer builds a fresh one for every attempt, so what a broker stored
    never changes when the producer later re-stamps a retried batch.
    ``headers`` is last so that the nine fields before it keep their positions.
    """

    topic: str
    partition: int
    values: Sequence[bytes | None]  # None: a null value (a tombstone, on a compacted topic)
    keys: Sequence[bytes | None] | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    max_timestamp: int = 0
    is_transactional: bool = False
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None
    #: The v2 bytes a client sent over the wire (``record.v2.decode_wire_batch``), or idemcore's producer built
    #: (``client.batch.ProducerBatch``), which the log stores as sent (compression and per-record timestamps
    #: included) instead of an encoding of the fields above.
    wire: bytes | None = field(default=None, compare=False, repr=False)
    #: Each record's own timestamp (CREATE_TIME: the batch's base timestamp plus the record's delta), or None
    #: when every record's is ``max_timestamp`` (one timestamp for the batch, or LOG_APPEND_TIME).
    timestamps: Sequence[int] | None = None

    @property
    def record_count(self) -> int:
        return len(self.values)

    def size_in_bytes(self) -> int:
        """The batch's size as the broker's ``message_max_bytes`` counts it: the v2 header and the records
        (Kafka's v2 encoding is within a few bytes of this, uncompressed); a batch from the wire: its bytes."""
        if self.wire is not None:
            return len(self.wire)
        return BATCH_OVERHEAD + records_size(self.values, self.keys, self.headers)


def records_size(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                 headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None) -> int:
    """Bytes of records as batches count them: each key and value, and RECORD_OVERHEAD of framing each;
    each header's key (UTF-8) and value, and HEADER_OVERHEAD each."""
    try:
        size = sum(map(len, values))  # type: ignore[arg-type]  # the common case, in C
    except TypeError:  # null values (tombstones) count nothing
        size = sum(len(value) for value in values if value is not None)
    size += RECORD_OVERHEAD * len(values)
    if keys is not None:
        size += sum(len(key) for key in keys if key is not None)
    if headers is not None:
        size += sum(map(headers_size, headers))
    return size


def headers_size(headers: Sequence[tuple[str, bytes | None]]) -> int:
    """Bytes one record's headers count for: each key's UTF-8 and value, and HEADER_OVERHEAD each."""
    size = HEADER_OVERHEAD * len(headers)
    for key, value in headers:
        # surrogateescape: a key decoded from bytes that are not UTF-8 counts as the bytes it came from
        size += len(key.encode("utf-8", "surrogateescape")) if not key.isascii() else len(key)
        if value is not None:
            size += len(value)
    return size
