"""One transactional id's state in memory, changed in two phases (Kafka's ``TransactionMetadata``).

``prepare_*`` checks the move, marks the target as *pending* and returns the record to write (a
:class:`TxnTransitMetadata`); the coordinator writes it to ``__transaction_state`` and only once it is durable
calls :meth:`TransactionMetadata.complete_transition_to`, which applies it and clears the pending state. While
a transition is pending, client requests for the id are answered CONCURRENT_TRANSACTIONS.

Transaction version 0 semantics (Kafka 3.x, and 4.x with ``transaction.version`` 0): the epoch changes only on
InitProducerId, fencing and timeouts, never per transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from idemcore.broker.coordinator.collaborators import TopicPartition
from idemcore.errors import IdemcoreError
from idemcore.protocol.constants import INT16_MAX, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, PRODUCER_EPOCH_EXHAUSTED
from idemcore.record.kafka_files.transaction_log import (
    TransactionLogValue,
    TransactionState,
    encode_value_v0,
    group_by_topic,
)

S = TransactionState


class IllegalTransitionError(IdemcoreError, RuntimeError):
    """A transition the state machine forbids was asked for: a bug in the caller (Kafka's IllegalStateException)."""


def is_epoch_exhausted(epoch: int) -> bool:
    """True from epoch 32766: the next bump must rotate the producer id (32767 stays free for one fence)."""
    return epoch >= PRODUCER_EPOCH_EXHAUSTED


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The state a prepared transition leads to: exactly what is written to the log (Kafka's
    ``TxnTransitMetadata``). ``prev_producer_id`` is the producer id before the transition."""

    producer_id: int
    prev_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    def to_log_value(self) -> TransactionLogValue:
        """The ``__transaction_state`` value (version 0: the last epoch and previous id are not stored)."""
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.txn_timeout_ms, self.txn_state,
                                   None if self.txn_state is S.EMPTY else group_by_topic(self.topic_partitions),
                                   self.txn_last_update_timestamp, self.txn_start_timestamp)

    def log_value_bytes(self) -> bytes:
        """``encode_value(self.to_log_value())``, without the value object between (one per transition)."""
        return encode_value_v0(self.producer_id, self.producer_epoch, self.txn_timeout_ms, self.txn_state,
                               None if self.txn_state is S.EMPTY else group_by_topic(self.topic_partitions),
                               self.txn_last_update_timestamp, self.txn_start_timestamp)


@dataclass(slots=True, eq=False)
class TransactionMetadata:
    """A transactional id's current state, plus what is in flight (``pending_state``) and never stored:
    ``last_producer_epoch`` (for KIP-360 retries), ``has_failed_epoch_fence``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    txn_last_update_timestamp: int
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    pending_state: TransactionState | None = None
    #: A fence raised the epoch in memory but its PrepareAbort was not written: the next fence must not raise it
    #: again (the raised epoch was never handed to anyone).
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_log_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        """The state a loaded record describes (Kafka's ``readTxnRecordValue``): the last epoch is not stored, and
        the partitions of an Empty record are ignored."""
        partitions = set() if value.state is S.EMPTY else set(value.topic_partitions())
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                   value.state, value.last_update_timestamp_ms, previous_producer_id=value.previous_producer_id,
                   topic_partitions=partitions, txn_start_timestamp=value.start_timestamp_ms)

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # ------------------------------------------------------------ prepare

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int, expected_epoch: int | None,
                                         now: int) -> TxnTransitMetadata | None:
        """InitProducerId on an idle id: the next epoch, or the same one for a retry of the last bump; None if
        ``expected_epoch`` is stale (the caller answers PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(f"{self.transactional_id}: producer {self.producer_id} has no epoch left "
                                         f"after {self.producer_epoch}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH  # a new producer instance: no retry can match
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch  # KIP-360: the same producer bumps its own epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # retry of that bump: answer it again
        else:
            return None
        return self._prepare(S.EMPTY, self.producer_id, epoch, last, txn_timeout_ms, frozenset(), -1, now)

    def prepare_producer_id_rotation(self, new_producer_id: int, txn_timeout_ms: int, now: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        """InitProducerId with the epochs exhausted: a new producer id at epoch 0."""
        if self.state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransitionError(f"{self.transactional_id}: cannot rotate producer id {self.producer_id} "
                                         f"while its transaction is {self.state.kafka_name}")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(S.EMPTY, new_producer_id, 0, last, txn_timeout_ms, frozenset(), -1, now)

    def prepare_add_partitions(self, added: Iterable[TopicPartition], now: int) -> TxnTransitMetadata:
        """AddPartitionsToTxn: Ongoing with the union; a new transaction starts its clock now."""
        start = now if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else self.txn_start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions).union(added), start, now)

    def prepare_abort_or_commit(self, target: TransactionState, now: int) -> TxnTransitMetadata:
        """EndTxn (or a fence/timeout abort): PrepareCommit or PrepareAbort, everything else unchanged."""
        if target not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransitionError(f"{self.transactional_id}: {target.kafka_name} is not a prepare state")
        return self._prepare(target, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions), self.txn_start_timestamp, now)

    def prepare_complete(self, now: int) -> TxnTransitMetadata:
        """After the markers: CompleteCommit or CompleteAbort, no partitions. The Prepare* record is durable by
        now, so a failed fence no longer needs remembering."""
        target = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        return self._prepare(target, self.producer_id, self.producer_epoch, self.producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Fence the producer of an ongoing transaction: pending PrepareEpochFence with the epoch one higher
        (unless a previous fence already raised it and failed to write). Never written itself."""
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        if epoch > INT16_MAX:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot fence producer {self.producer_id} past "
                                         f"epoch {self.producer_epoch}")
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, epoch, NO_PRODUCER_EPOCH, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_dead(self) -> TxnTransitMetadata:
        """Expiry: pending Dead while the tombstone is written."""
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, self.txn_last_update_timestamp)

    def _prepare(self, target: TransactionState, producer_id: int, epoch: int, last_epoch: int, timeout: int,
                 partitions: frozenset[TopicPartition], start: int, now: int) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(f"{self.transactional_id}: transition to {target.kafka_name} while "
                                         f"{self.pending_state.kafka_name} is pending")
        if producer_id < 0:
            raise IllegalTransitionError(f"{self.transactional_id}: producer id {producer_id} is negative")
        if target is not S.DEAD and epoch < 0:
            raise IllegalTransitionError(f"{self.transactional_id}: producer epoch {epoch} is negative")
        if self.state not in target.valid_previous_states:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state.kafka_name} cannot move to "
                                         f"{target.kafka_name}")
        self.pending_state = target
        return TxnTransitMetadata(producer_id, self.producer_id, epoch, last_epoch, timeout, target, partitions,
                                  start, now)

    # ------------------------------------------------------------ complete

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Apply a transition whose record is durable; checks it is the one prepared."""
        target = transit.txn_state
        if self.pending_state is not target:
            pending = self.pending_state.kafka_name if self.pending_state is not None else "nothing"
            raise IllegalTransitionError(f"{self.transactional_id}: completing {target.kafka_name} while {pending} "
                                         f"is pending")
        same_producer = (transit.producer_id, transit.producer_epoch) == (self.producer_id, self.producer_epoch)
        if target is S.EMPTY:
            bump_ok = (transit.producer_epoch in (self.producer_epoch, self.producer_epoch + 1)
                       or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))
            self._check(bump_ok and not transit.topic_partitions and transit.txn_start_timestamp == -1, transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.previous_producer_id = transit.prev_producer_id
            # Kafka 3.x keeps the old start in memory here while the record says -1; 4.x copies it, as here, so
            # memory and the log agree.
            self.txn_start_timestamp = transit.txn_start_timestamp
        elif target is S.ONGOING:
            self._check(same_producer and self.topic_partitions <= transit.topic_partitions
                        and self.txn_timeout_ms == transit.txn_timeout_ms, transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions |= transit.topic_partitions
        elif target in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            self._check(same_producer and self.topic_partitions == transit.topic_partitions
                        and self.txn_timeout_ms == transit.txn_timeout_ms
                        and self.txn_start_timestamp == transit.txn_start_timestamp, transit)
        elif target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            self._check(same_producer and self.txn_timeout_ms == transit.txn_timeout_ms
                        and transit.txn_start_timestamp != -1, transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions.clear()
        else:  # Dead ends in removal, PrepareEpochFence in PrepareAbort: neither is ever completed
            raise IllegalTransitionError(f"{self.transactional_id}: {target.kafka_name} is never completed")
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.state = target

    def _check(self, ok: bool, transit: TxnTransitMetadata) -> None:
        if not ok:
            raise IllegalTransitionError(f"{self.transactional_id}: {transit} does not follow from producer "
                                         f"{self.producer_id} epoch {self.producer_epoch} {self.state.kafka_name} "
                                         f"partitions {sorted(self.topic_partitions)} timeout {self.txn_timeout_ms} "
                                         f"start {self.txn_start_timestamp}")

    def remove_partition(self, topic_partition: TopicPartition) -> None:
        """A marker is written on ``topic_partition`` (only while the transaction is Prepare*)."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransitionError(f"{self.transactional_id}: marker done for {topic_partition} while "
                                         f"{self.state.kafka_name}")
        self.topic_partitions.discard(topic_partition)
