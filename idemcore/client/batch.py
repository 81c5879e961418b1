"""A producer batch, the futures of its records and what they resolve to."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from idemcore.errors import IdemcoreError
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_OFFSET, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from idemcore.protocol.sequences import seq_add
from idemcore.record.batch import RecordBatch, records_size
from idemcore.record.v2 import NO_PARTITION_LEADER_EPOCH, encode_record_batch, with_producer_state


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 when the broker answered DUPLICATE_SEQUENCE_NUMBER (delivered, offset unknown)
    timestamp: int


class DeliveryError(IdemcoreError):
    """A record could not be delivered; ``error_code`` is the Kafka error that ended its batch."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class ProducerBatch:
    """Records for one partition that travel together, with their idempotence metadata."""

    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "closed",
        "created_ms",
        "done",
        "error",
        "headers",
        "keys",
        "last_attempt_ms",
        "partition",
        "parts",
        "producer_epoch",
        "producer_id",
        "sent",
        "sent_batch",
        "sequence_reset",
        "size",
        "stream",
        "timestamps",
        "topic",
        "values",
    )

    def __init__(self, topic: str, partition: int, stream: int, created_ms: int) -> None:
        self.topic = topic
        self.partition = partition
        self.stream = stream  # the producer's dense id of (topic, partition): its queue and drain arrays' index
        self.values: list[bytes | None] = []  # None: a null value (tombstone)
        self.keys: list[bytes | None] | None = None
        # None until a record has headers, then one tuple of (key, value) pairs per record up to the last record
        # with headers: records after it (no headers) are not added, so send() without headers does no work here.
        # all_headers() gives one per record.
        self.headers: list[tuple[tuple[str, bytes | None], ...]] | None = None
        self.timestamps: list[int] = []
        self.size = 0
        self.created_ms = created_ms
        self.last_attempt_ms = created_ms
        self.attempts = 0
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.sequence_reset = False  # sequences were rewritten after an epoch bump
        self.sent = False
        self.closed = False  # takes no more records (sent once, split, or a send_batch's own batch)
        self.done = False
        self.base_offset = NO_OFFSET
        self.error: DeliveryError | None = None
        self.parts: tuple[ProducerBatch, ProducerBatch] | None = None  # the halves it was split into
        #: What every attempt sends, its v2 bytes as ``wire``: built at the first (see ``to_wire``), dropped once
        #: the batch is done (its futures need only ``timestamps``).
        self.sent_batch: RecordBatch | None = None

    @property
    def record_count(self) -> int:
        return len(self.values)

    @property
    def last_sequence(self) -> int:
        return seq_add(self.base_sequence, len(self.values) - 1) if self.base_sequence >= 0 else NO_SEQUENCE

    def add_headers(self, headers: tuple[tuple[str, bytes | None], ...]) -> None:
        """The headers of the record about to be appended (the records before it without any get ``()``)."""
        if self.headers is None:
            self.headers = []
        self.headers += [()] * (len(self.values) - len(self.headers))
        self.headers.append(headers)

    def all_headers(self) -> list[tuple[tuple[str, bytes | None], ...]] | None:
        """One header tuple per record, or None when no record has headers (pads ``headers`` to the records)."""
        headers = self.headers
        if headers is not None and len(headers) < len(self.values):
            headers += [()] * (len(self.values) - len(headers))
        return headers

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence

    def split(self) -> tuple[ProducerBatch, ProducerBatch]:
        """Halve a batch the broker found too large (MESSAGE_TOO_LARGE): two batches of the same records, in
        order, keeping their sequences (Kafka's ProducerBatch.split), sent as if never tried. Kafka splits
        by batch.size, which need not shrink the batch; halving always ends, at single records."""
        middle = len(self.values) // 2
        headers = self.all_headers()
        halves = []
        for start, stop in ((0, middle), (middle, len(self.values))):
            half = ProducerBatch(self.topic, self.partition, self.stream, self.created_ms)
            half.values = self.values[start:stop]
            half.keys = None if self.keys is None else self.keys[start:stop]
            half.headers = None if headers is None else headers[start:stop]
            half.timestamps = self.timestamps[start:stop]
            half.size = records_size(half.values, half.keys, half.headers)
            if self.base_sequence >= 0:
                half.set_producer_state(self.producer_id, self.producer_epoch, seq_add(self.base_sequence, start))
            half.sequence_reset = self.sequence_reset
            half.closed = True  # its sequences are fixed: a record added later would reuse one
            halves.append(half)
        self.parts = (halves[0], halves[1])
        return self.parts

    def leaf(self, position: int) -> tuple[ProducerBatch, int]:
        """The batch that now carries record ``position`` of this one (itself unless it was split)."""
        batch = self
        while batch.parts is not None:
            first = batch.parts[0]
            batch, position = (first, position) if position < len(first.values) else \
                (batch.parts[1], position - len(first.values))
        return batch, position

    def to_wire(self, transactional: bool = False) -> RecordBatch:
        """What one attempt sends: the batch's RecordBatch v2 bytes (``wire``) with its records' fields, built
        once, when the batch is first drained with its producer id, epoch and base sequence (Kafka's
        ProducerBatch.close), and every record with its own timestamp (base timestamp the first record's,
        Kafka's MemoryRecordsBuilder). A retry sends the same object, so the same bytes; after the producer state
        was reset (an epoch bump, or sequences moved down past a failed batch) only the header is rewritten, the
        records left as they are (Kafka's resetProducerState). ``transactional``: written inside a transaction
        (the batch's transactional attribute bit). Immutable: a log keeping the bytes never sees them change."""
        sent = self.sent_batch
        if sent is None:
            sent = self.sent_batch = self._build(transactional)
        elif (sent.producer_id != self.producer_id or sent.producer_epoch != self.producer_epoch
              or sent.base_sequence != self.base_sequence or sent.is_transactional != transactional):
            assert sent.wire is not None  # _build always sets it
            sent = self.sent_batch = dataclasses.replace(
                sent, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence, is_transactional=transactional,
                wire=with_producer_state(sent.wire, self.producer_id, self.producer_epoch, self.base_sequence,
                                         transactional))
        return sent

    def _build(self, transactional: bool) -> RecordBatch:
        headers = self.all_headers()
        timestamps = self.timestamps
        # One timestamp for the whole batch (send_batch's, or records sent within one millisecond): deltas 0, and
        # no per-record tuple. count() runs in C.
        first = timestamps[0] if timestamps else 0
        uniform = timestamps.count(first) == len(timestamps)
        batch = RecordBatch(self.topic, self.partition, tuple(self.values),
                            None if self.keys is None else tuple(self.keys), self.producer_id, self.producer_epoch,
                            self.base_sequence, first if uniform else max(timestamps), transactional,
                            None if headers is None else tuple(headers),
                            timestamps=None if uniform else tuple(timestamps))
        # Kafka's producer leaves the partition leader epoch unset (-1): the broker writes its own.
        wire = encode_record_batch(batch, 0, NO_PARTITION_LEADER_EPOCH)
        return dataclasses.replace(batch, wire=bytes(wire))

    def complete(self, base_offset: int) -> None:
        self.done = True
        self.base_offset = base_offset
        self.sent_batch = None

    def fail(self, error_code: int, message: str, *, from_broker: bool = False) -> None:
        """End the batch with an error; a broker's ``error_message`` already names the partition and code."""
        self.done = True
        self.sent_batch = None
        if not from_broker:
            message = f"{self.topic}-{self.partition}: {message} ({ErrorCode(error_code).name})"
        self.error = DeliveryError(error_code, message)

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.topic}-{self.partition}, {len(self.values)} records, pid {self.producer_id} "
                f"epoch {self.producer_epoch} seq {self.base_sequence}, attempts {self.attempts})")


class RecordFuture:
    """The outcome of one ``send``: ``result()`` waits for delivery and returns :class:`RecordMetadata`."""

    __slots__ = ("_batch", "_drive", "_position")

    def __init__(self, batch: ProducerBatch, position: int, drive: Callable[[Callable[[], bool]], None]) -> None:
        self._batch = batch
        self._position = position
        self._drive = drive

    def done(self) -> bool:
        return self._follow().done

    def _follow(self) -> ProducerBatch:
        # A split batch hands its records to its halves: follow this record there.
        if self._batch.parts is not None:
            self._batch, self._position = self._batch.leaf(self._position)
        return self._batch

    def result(self) -> RecordMetadata:
        """Delivery metadata; raises :class:`DeliveryError` if the record was not delivered."""
        if not self.done():
            self._drive(self.done)
        batch = self._follow()
        if batch.error is not None:
            raise batch.error
        offset = batch.base_offset + self._position if batch.base_offset >= 0 else NO_OFFSET
        return RecordMetadata(batch.topic, batch.partition, offset, batch.timestamps[self._position])

    def exception(self) -> DeliveryError | None:
        if not self.done():
            self._drive(self.done)
        return self._follow().error
