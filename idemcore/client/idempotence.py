"""The idempotent producer's bookkeeping (the idempotence half of Kafka's TransactionManager, docs/rules.md §3).

It owns the producer id and epoch, each partition's in-flight batches in
sequence order, the last acknowledged sequence, unresolved sequences after
delivery timeouts, and the epoch bump that restarts a partition's sequences
at 0. The per-partition numbers live in :class:`PartitionArrays`, where the
drain kernel reads and advances them.
"""

from __future__ import annotations

import logging

from idemcore.client.batch import ProducerBatch
from idemcore.client.partitions import PartitionArrays
from idemcore.protocol.codes import RETRIABLE_ERRORS, ErrorCode
from idemcore.protocol.constants import INT16_MAX, NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from idemcore.protocol.sequences import in_sequence, seq_add, seq_at_or_before

log = logging.getLogger(__name__)


class IdempotenceManager:
    def __init__(self, partitions: PartitionArrays) -> None:
        self.partitions = partitions
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.inflight: dict[int, list[ProducerBatch]] = {}
        self.unresolved_next: dict[int, int] = {}
        self.epoch_bump_required = False
        self.partitions_to_rewrite: set[int] = set()
        self.epoch_bumps = 0

    # ------------------------------------------------------------ producer id and epoch

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def set_producer_id_and_epoch(self, producer_id: int, producer_epoch: int) -> None:
        log.info("producer id %d -> %d, epoch %d -> %d", self.producer_id, producer_id, self.producer_epoch,
                 producer_epoch)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch

    def request_epoch_bump(self, number: int) -> None:
        self.epoch_bump_required = True
        self.partitions_to_rewrite.add(number)

    def bump_epoch_if_needed(self) -> None:
        """Apply a requested bump: epoch + 1 (a new producer id at 32767) and rewrite the partitions' sequences."""
        if not self.epoch_bump_required:
            return
        self.epoch_bumps += 1
        if self.producer_epoch >= INT16_MAX:
            self.set_producer_id_and_epoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)  # the sender asks for a new id
        else:
            self.set_producer_id_and_epoch(self.producer_id, self.producer_epoch + 1)
        for number in sorted(self.partitions_to_rewrite):
            self.start_sequences_at_beginning(number)
            self._clear_unresolved(number)
        self.partitions_to_rewrite.clear()
        self.epoch_bump_required = False

    def start_sequences_at_beginning(self, number: int) -> None:
        """Give the in-flight batches of a partition sequences 0, 1, ... under the current id and epoch."""
        p = self.partitions
        sequence = 0
        for batch in self.inflight.get(number, ()):
            batch.set_producer_state(self.producer_id, self.producer_epoch, sequence)
            batch.sequence_reset = True
            sequence = seq_add(sequence, batch.record_count)
        p.next_sequence[number] = sequence
        p.last_acked_sequence[number] = -1
        p.partition_producer_id[number] = self.producer_id
        p.partition_epoch[number] = self.producer_epoch
        self._sync_inflight(number)

    # ------------------------------------------------------------ in flight

    def add_inflight(self, batch: ProducerBatch) -> None:
        """Track a batch the drain kernel just gave a sequence (the kernel already counted it)."""
        self.inflight.setdefault(batch.stream, []).append(batch)

    def replace_inflight(self, batch: ProducerBatch, parts: tuple[ProducerBatch, ...]) -> None:
        """A split batch's halves take its place, in sequence order."""
        batches = self.inflight.get(batch.stream)
        if batches and batch in batches:
            where = batches.index(batch)
            batches[where:where + 1] = parts
            self._sync_inflight(batch.stream)

    def remove_inflight(self, batch: ProducerBatch) -> None:
        batches = self.inflight.get(batch.stream)
        if batches and batch in batches:
            batches.remove(batch)
            self._sync_inflight(batch.stream)

    def _sync_inflight(self, number: int) -> None:
        batches = self.inflight.get(number, [])
        self.partitions.inflight_count[number] = len(batches)
        self.partitions.first_inflight_sequence[number] = batches[0].base_sequence if batches else -1

    def has_inflight(self, number: int) -> bool:
        return bool(self.inflight.get(number))

    # ------------------------------------------------------------ outcomes

    def _is_next_sequence(self, number: int, sequence: int) -> bool:
        """Does ``sequence`` directly follow the last acknowledged one (0 when none is, wrapping after 2147483647)?"""
        return in_sequence(int(self.partitions.last_acked_sequence[number]), sequence)

    def handle_completed_batch(self, batch: ProducerBatch) -> None:
        """Advance the last acknowledged sequence, in sequence order: to this batch's last sequence when nothing
        was acknowledged yet, or when it lies ahead of the last acknowledged one (less than half the sequence
        space ahead, wrapping after 2147483647). An answer arriving late for an earlier batch leaves it."""
        last = batch.last_sequence
        last_acked = int(self.partitions.last_acked_sequence[batch.stream])
        if last >= 0 and (last_acked < 0 or (last != last_acked and seq_at_or_before(last_acked, last))):
            self.partitions.last_acked_sequence[batch.stream] = last
        self.remove_inflight(batch)

    def handle_failed_batch(self, batch: ProducerBatch, error_code: int, adjust_sequences: bool) -> None:
        self.remove_inflight(batch)
        # A gap in the log, lost broker state, or a batch that failed for good: restart the sequences.
        if adjust_sequences or error_code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
            self.request_epoch_bump(batch.stream)

    def is_already_written(self, batch: ProducerBatch, error_code: int) -> bool:
        """Beyond Kafka: OUT_OF_ORDER_SEQUENCE_NUMBER for a batch whose sequences lie at or before the last
        acknowledged one under the same epoch means it was written earlier (its answer was lost) and has
        since left the broker's five-batch window. The broker's sequences of an epoch are contiguous from
        the first acknowledged batch (the drain kernel sends one batch until then), so a later sequence
        acknowledged implies this one is in the log: delivered, offset unknown, as with
        DUPLICATE_SEQUENCE_NUMBER. Kafka retries it until the delivery timeout instead. "At or before" is
        in sequence order across the wrap (2147483647 is before 0): the batch's last sequence is the last
        acknowledged one or less than half the sequence space behind it; nothing acknowledged (-1) means
        nothing is known written. Not covered: the broker expiring the producer mid-stream."""
        last_acked = int(self.partitions.last_acked_sequence[batch.stream])
        return (error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and not batch.sequence_reset
                and last_acked >= 0 and batch.base_sequence >= 0
                and seq_at_or_before(batch.last_sequence, last_acked)
                and batch.producer_epoch == int(self.partitions.partition_epoch[batch.stream]))

    def can_retry(self, batch: ProducerBatch, error_code: int) -> bool:
        """Kafka's TransactionManager.canRetry for an idempotent (non-transactional) producer."""
        number = batch.stream
        if error_code == ErrorCode.UNKNOWN_PRODUCER_ID:
            if not batch.sequence_reset:
                self.request_epoch_bump(number)  # the broker lost our state: restart at sequence 0
            return True
        if error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            unresolved = number in self.unresolved_next
            if not unresolved and (batch.sequence_reset or not self._is_next_sequence(number, batch.base_sequence)):
                return True  # an earlier batch failed; this one must wait for it
            if not unresolved or self.unresolved_next[number] == batch.base_sequence:
                self.request_epoch_bump(number)  # a real gap
            return True
        return error_code in RETRIABLE_ERRORS

    # ------------------------------------------------------------ unresolved sequences

    def mark_unresolved(self, batch: ProducerBatch) -> None:
        """Remember the sequence after an expired batch's last; of several, the latest in sequence order."""
        following = seq_add(batch.last_sequence, 1)
        earlier = self.unresolved_next.get(batch.stream)
        if earlier is None or not seq_at_or_before(following, earlier):
            self.unresolved_next[batch.stream] = following
        self.partitions.unresolved[batch.stream] = 1

    def _clear_unresolved(self, number: int) -> None:
        self.unresolved_next.pop(number, None)
        self.partitions.unresolved[number] = 0

    def maybe_resolve_sequences(self) -> None:
        """Once a partition has nothing in flight: resolved if every sequence was acknowledged, else bump."""
        for number in list(self.unresolved_next):
            if self.has_inflight(number):
                continue
            if not self._is_next_sequence(number, int(self.partitions.next_sequence[number])):
                log.info("partition %s: sequences unresolved after delivery timeouts; bumping the epoch",
                         self.partitions.names[number])
                self.request_epoch_bump(number)
            self._clear_unresolved(number)
