"""RecordAccumulator: per-partition queues of batches, and the drain round through the kernel (docs/rules.md §3)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import cast

import numpy as np

from idemcore.client.batch import ProducerBatch
from idemcore.client.config import ProducerConfig
from idemcore.client.idempotence import IdempotenceManager
from idemcore.client.partitions import BOOKKEEPING_FIELDS, HEAD_FIELDS, PartitionArrays
from idemcore.kernels import Backend
from idemcore.protocol.sequences import seq_at_or_before
from idemcore.record.batch import RECORD_OVERHEAD, headers_size, records_size


class RecordAccumulator:
    def __init__(self, config: ProducerConfig, partitions: PartitionArrays, idempotence: IdempotenceManager | None,
                 backend: Backend) -> None:
        self.config = config
        self.partitions = partitions
        self.idempotence = idempotence
        self.backend = backend
        self.queues: list[deque[ProducerBatch]] = []
        self._dirty: set[int] = set()  # partitions whose queue head may have changed
        self._cursor = np.zeros(1, dtype=np.int64)
        self.flushing = False
        #: A transactional producer's partitions added to its transaction (the TransactionManager's set, shared):
        #: only these are offered to the drain kernel (Kafka's isSendToPartitionAllowed). None: every partition.
        self.send_allowed: set[int] | None = None
        #: Called with the stream (dense id of the topic-partition) of every new batch (a transactional producer
        #: adds the partition to its transaction). Enough without a call per record: a transaction begins with
        #: every queue empty (the last one ended only after each of its batches was done), so its first record in a
        #: partition always starts a batch. None: nobody asks (no cost per batch).
        self.batch_created: Callable[[int], None] | None = None

    def queue(self, topic: str, partition: int) -> tuple[int, deque[ProducerBatch]]:
        stream = self.partitions.stream_of(topic, partition)
        while len(self.queues) <= stream:
            self.queues.append(deque())
        return stream, self.queues[stream]

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None, timestamp: int,
               now_ms: int, headers: tuple[tuple[str, bytes | None], ...] | None = None) -> tuple[ProducerBatch, int]:
        """Add one record (``headers``: checked pairs, or None for none); returns its batch and position in it."""
        stream, queue = self.queue(topic, partition)
        size = (0 if value is None else len(value)) + (len(key) if key is not None else 0) + RECORD_OVERHEAD
        if headers is not None:
            size += headers_size(headers)
        batch = queue[-1] if queue else None
        if batch is None or batch.sent or batch.closed or (batch.size + size > self.config.batch_size and batch.values):
            batch = ProducerBatch(topic, partition, stream, now_ms)
            queue.append(batch)
            if self.batch_created is not None:
                self.batch_created(stream)
        if key is not None and batch.keys is None:
            batch.keys = [None] * len(batch.values)
        if batch.keys is not None:
            batch.keys.append(key)
        if headers is not None:
            batch.add_headers(headers)  # records without headers cost nothing here: see ProducerBatch.headers
        batch.values.append(value)
        batch.timestamps.append(timestamp)
        batch.size += size
        self._dirty.add(stream)
        return batch, len(batch.values) - 1

    def append_records(self, topic: str, partition: int, values: list[bytes], keys: list[bytes | None] | None,
                       now_ms: int) -> ProducerBatch:
        """Queue many records as one batch of their own (``send_batch``), sized as ``append`` sizes them."""
        stream, queue = self.queue(topic, partition)
        batch = ProducerBatch(topic, partition, stream, now_ms)
        batch.values = cast("list[bytes | None]", values)  # taken over, not copied: send_batch's own list
        batch.keys = keys
        batch.timestamps = [now_ms] * len(values)
        batch.size = records_size(values, keys)
        batch.closed = True  # its records are the caller's batch: a later send() starts a new one
        queue.append(batch)
        if self.batch_created is not None:
            self.batch_created(stream)
        self._dirty.add(stream)
        return batch

    def has_queued(self) -> bool:
        return any(self.queues)

    def ready(self, now_ms: int) -> bool:
        """Is some partition worth a request now: a full batch, linger passed, a retry, or a flush."""
        linger = self.config.linger_ms
        for queue in self.queues:
            if queue and (self.flushing or len(queue) > 1 or queue[0].attempts > 0
                          or queue[0].size >= self.config.batch_size or now_ms - queue[0].created_ms >= linger):
                return True
        return False

    def _refresh_heads(self) -> None:
        p = self.partitions
        allowed = self.send_allowed
        for stream in self._dirty:
            queue = self.queues[stream]
            # A partition not yet added to the transaction shows the kernel no head, as an empty queue does: the
            # kernel skips it (head_queued 0) and drains the others; added later, it is marked dirty again.
            if queue and (allowed is None or stream in allowed):
                head = queue[0]
                p.head_queued[stream] = 1
                p.head_sequence[stream] = head.base_sequence
                p.head_record_count[stream] = len(head.values)
                p.head_attempts[stream] = head.attempts
                p.head_last_attempt_ms[stream] = head.last_attempt_ms
                p.head_size[stream] = head.size
            else:
                p.head_queued[stream] = 0
        self._dirty.clear()

    def drain(self, now_ms: int, max_request_size: int) -> list[ProducerBatch]:
        """One send round: the head batches to put in one request, with their sequences assigned."""
        self._refresh_heads()
        n = len(self.partitions)
        out_stream = np.empty(n, np.int32)
        out_base_sequence = np.empty(n, np.int32)
        out_reset = np.empty(n, np.uint8)
        idem = self.idempotence
        taken = self.backend.drain_partitions(
            *self.partitions.kernel_view(HEAD_FIELDS), *self.partitions.kernel_view(BOOKKEEPING_FIELDS),
            idem is not None, idem.producer_id if idem else -1, idem.producer_epoch if idem else -1,
            now_ms, self.config.retry_backoff_ms, max_request_size,
            self._cursor, out_stream, out_base_sequence, out_reset)
        batches = []
        for k in range(taken):
            stream = int(out_stream[k])
            batch = self.queues[stream].popleft()
            batch.sent = True
            self._dirty.add(stream)
            if idem is not None and batch.base_sequence < 0:
                batch.set_producer_state(idem.producer_id, idem.producer_epoch, int(out_base_sequence[k]))
                idem.add_inflight(batch)
            batches.append(batch)
        return batches

    def reenqueue(self, batch: ProducerBatch, now_ms: int, attempt: bool = True) -> None:
        """Put a batch back for a retry: in sequence order when it has one (idempotence; 2147483647 comes before
        0), else first. ``attempt=False``: a split batch's half, sent as if never tried (no backoff)."""
        if attempt:
            batch.attempts += 1
            batch.last_attempt_ms = now_ms
        queue = self.queues[batch.stream]
        if batch.base_sequence < 0 or self.idempotence is None:
            queue.appendleft(batch)
        else:
            position = 0
            sequence = batch.base_sequence
            while position < len(queue) and _before(queue[position].base_sequence, sequence):
                position += 1
            queue.insert(position, batch)
        self._dirty.add(batch.stream)

    def mark_dirty(self, streams: Iterable[int]) -> None:
        """These partitions' heads may have changed (sequences rewritten, or added to the transaction)."""
        self._dirty.update(streams)

    def abort_undrained(self, error_code: int, message: str) -> list[ProducerBatch]:
        """Fail every queued batch that was never sent (no sequence yet) and return them: the transaction is
        aborting (Kafka's abortUndrainedBatches). Batches with a sequence stay: the broker may hold them, so
        they are resent until their outcome is known."""
        failed = []
        for stream, queue in enumerate(self.queues):
            if queue and any(batch.base_sequence < 0 for batch in queue):
                failed += [batch for batch in queue if batch.base_sequence < 0]
                self.queues[stream] = deque(batch for batch in queue if batch.base_sequence >= 0)
                self._dirty.add(stream)
        for batch in failed:
            batch.fail(error_code, message)
        return failed

    def mark_all_dirty(self) -> None:
        """Sequences of queued batches changed (epoch bump): re-read every head before the next drain."""
        self._dirty.update(range(len(self.queues)))

    def expired(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches past their delivery timeout."""
        timeout = self.config.delivery_timeout_ms
        expired = []
        for stream, queue in enumerate(self.queues):
            if queue and now_ms - queue[0].created_ms >= timeout:
                keep = deque(b for b in queue if now_ms - b.created_ms < timeout)
                expired += [b for b in queue if now_ms - b.created_ms >= timeout]
                self.queues[stream] = keep
                self._dirty.add(stream)
        return expired


def _before(sequence: int, reference: int) -> bool:
    """``sequence`` (-1: none yet) comes strictly before ``reference`` in sequence order, across the wrap."""
    return 0 <= sequence != reference and seq_at_or_before(sequence, reference)
