"""The transaction coordinator (Kafka's ``TransactionCoordinator`` with its ``TransactionStateManager``): one
handler per request, each answering Kafka's error codes in Kafka's order of checks, at transaction version 0.

Every transition is written to ``__transaction_state`` first and applied to memory only once the write is durable
(:mod:`idemcore.broker.coordinator.metadata`); the one exception is Kafka's: a fence whose PrepareAbort could not
be written keeps its raised epoch in memory (``has_failed_epoch_fence``), so the fenced producer stays fenced and
the next fence does not raise the epoch again.

Synchronous where Kafka is asynchronous, with the same answers:

- Kafka answers EndTxn as soon as the Prepare* record is durable and writes the markers and the Complete*
  record afterwards on another thread. So does this coordinator when the broker hands
  :meth:`TransactionCoordinator.complete_later` a scheduler (a broker running on an event loop does: the
  call runs half a millisecond after the answer): EndTxn answers once Prepare* is durable, and the markers and
  Complete* are written by the scheduled call while the client reads the answer. Without a scheduler (a broker
  used in process) :meth:`TransactionCoordinator.end_txn` writes them before it returns, and still answers what
  Kafka answers: NONE once Prepare* is durable, even if markers are still missing. Every coordinator request
  first finishes what is queued, so no answer differs from the inline one; only a Fetch that races the answer may
  still find the transaction open, as it may in Kafka.
- Kafka answers CONCURRENT_TRANSACTIONS to requests that arrive while markers are outstanding (the Complete*
  transition is pending). Done inline there is no such window, except when a marker or the Complete* record
  could not be written in ``marker_attempts`` tries: then the transition stays pending, requests get
  CONCURRENT_TRANSACTIONS, and :meth:`TransactionCoordinator.retry_pending_markers` (which the broker calls on
  a timer, as Kafka's marker sender thread retries) finishes it.
- InitProducerId on an ongoing transaction fences it and answers CONCURRENT_TRANSACTIONS once the PrepareAbort
  is durable; here the abort has usually completed by then too, so the client's retry succeeds at once.
- Loading is one call, so COORDINATOR_LOAD_IN_PROGRESS never arises. A broker running alone loads every
  partition of ``__transaction_state`` at once (:meth:`TransactionCoordinator.load`, coordinator epoch 0); a
  broker in a cluster loads one partition when it becomes its leader and drops it when it stops leading
  (:meth:`TransactionCoordinator.load_partition` / :meth:`TransactionCoordinator.unload_partition`, Kafka's
  ``TransactionStateManager.loadTransactionsForTxnTopicPartition`` / ``removeTransactionsForTxnTopicPartition``)
  with the partition's leader epoch as coordinator epoch, stamped on that partition's markers. An id whose
  partition is not owned is answered NOT_COORDINATOR.
- In a cluster a Prepare* record must be replicated before its markers go out (a new leader that never saw it
  would abort what the markers committed): with a ``replication`` view (:class:`LogReplication`) a completion
  waits until its partition's high watermark passes the Prepare* record, and
  :meth:`TransactionCoordinator.partition_replicated` finishes it when it does.

Not thread-safe: the caller serialises calls, as ``Broker.handle`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Final

from idemcore.broker.coordinator.collaborators import (
    LogReplication,
    MarkerWriter,
    ProducerIdAllocator,
    TopicPartition,
    TransactionLogWriter,
)
from idemcore.broker.coordinator.markers import PendingCompletion, send_markers
from idemcore.broker.coordinator.metadata import (
    IllegalTransitionError,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from idemcore.broker.coordinator.partitioning import coordinator_partition
from idemcore.broker.coordinator.results import (
    InitProducerIdResult,
    ListTransactionsResult,
    TransactionDescription,
    TransactionListing,
)
from idemcore.checks import bool_arg, index_arg, int_arg, int_setting, str_arg
from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import (
    CONSUMER_OFFSETS_TOPIC,
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    DEFAULT_TRANSACTION_STATE_PARTITIONS,
    DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
    INTERNAL_TOPICS,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TRANSACTION_STATE_TOPIC,
)
from idemcore.record.kafka_files.transaction_log import (
    TransactionLogFormatError,
    TransactionLogValue,
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
)

__all__ = ["InitProducerIdResult", "ListTransactionsResult", "TransactionCoordinator", "TransactionDescription",
           "TransactionListing", "TransactionMetadata", "coordinator_error"]

log = logging.getLogger(__name__)

S = TransactionState
E = ErrorCode
_IDLE: Final = (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
_PREPARE: Final = (S.PREPARE_COMMIT, S.PREPARE_ABORT)
#: How often a marker round is tried inline before the transaction is left to retry_pending_markers.
DEFAULT_MARKER_ATTEMPTS = 3

# A log append's error as the coordinator reports it (Kafka's TransactionStateManager.appendTransactionToLog).
_APPEND_ERRORS: Final = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR, E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR, E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}


def coordinator_error(append_error: int) -> ErrorCode:
    """The error a client sees when the coordinator's log append answered ``append_error``."""
    if append_error == 0:
        return E.NONE
    try:
        code = ErrorCode(append_error)
    except ValueError:
        return E.UNKNOWN_SERVER_ERROR
    return _APPEND_ERRORS.get(code, code)


class TransactionCoordinator:
    """Transaction state per transactional id, kept in ``__transaction_state``; see the module docstring.

    ``log_writer`` appends its records, ``marker_writer`` writes markers to the data partitions,
    ``producer_ids`` allocates producer ids, ``clock`` gives the time in ms.
    """

    def __init__(self, log_writer: TransactionLogWriter, marker_writer: MarkerWriter,
                 producer_ids: ProducerIdAllocator, clock: Callable[[], int] = wall_clock_ms, *,
                 transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
                 transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
                 transaction_state_partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS,
                 offsets_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS,
                 marker_attempts: int = DEFAULT_MARKER_ATTEMPTS,
                 partition_exists: Callable[[str, int], bool] | None = None) -> None:
        #: Whether the cluster has a partition (Kafka's KafkaApis checks it before the coordinator is called).
        self.partition_exists = partition_exists
        self._log_writer = log_writer
        #: Writes markers (a broker in a cluster puts in one that reaches the partitions' leaders).
        self.marker_writer = marker_writer
        #: How far each partition of the log is replicated (None: a broker running alone, where a durable record
        #: is a committed one).
        self.replication: LogReplication | None = None
        self._producer_ids = producer_ids
        self._clock = clock
        self.transaction_max_timeout_ms = int_setting("transaction_max_timeout_ms", transaction_max_timeout_ms, 1)
        self.transactional_id_expiration_ms = int_setting("transactional_id_expiration_ms",
                                                        transactional_id_expiration_ms, 1)
        self.transaction_state_partitions = int_setting("transaction_state_partitions", transaction_state_partitions, 1)
        self.offsets_partitions = int_setting("offsets_partitions", offsets_partitions, 1)
        self.marker_attempts = int_setting("marker_attempts", marker_attempts, 1)
        self._metadata: dict[str, TransactionMetadata] = {}
        self._completions: dict[str, PendingCompletion] = {}
        #: Completions of answered EndTxn requests still to write (only with a scheduler, see complete_later).
        self._queued: list[PendingCompletion] = []
        self._schedule: Callable[[Callable[[], None]], object] | None = None
        #: The partitions of ``__transaction_state`` this coordinator owns, each with its coordinator epoch.
        self._epochs: dict[int, int] = {}

    # ------------------------------------------------------------ introspection

    @property
    def coordinator_epoch(self) -> int | None:
        """The highest coordinator epoch of the partitions owned (after :meth:`load`, its epoch); None when none
        is owned."""
        return max(self._epochs.values(), default=None)

    def owns(self, partition: int) -> bool:
        """Whether this coordinator serves ``__transaction_state-<partition>`` (it is loaded here)."""
        return partition in self._epochs

    def coordinator_epoch_of(self, partition: int) -> int | None:
        """The coordinator epoch of an owned partition (stamped on the markers of its ids); None if not owned."""
        return self._epochs.get(partition)

    @property
    def owned_partitions(self) -> dict[int, int]:
        """Each owned partition and its coordinator epoch."""
        return dict(self._epochs)

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition that owns ``transactional_id``."""
        return coordinator_partition(transactional_id, self.transaction_state_partitions)

    def metadata(self, transactional_id: str) -> TransactionMetadata | None:
        """The live state of one id (for the broker and tests to inspect; change it only through the handlers)."""
        return self._metadata.get(transactional_id)

    @property
    def pending_completions(self) -> tuple[str, ...]:
        """Ids whose Prepare* is durable but whose markers or Complete* record are still missing."""
        return tuple(sorted(self._completions))

    # ------------------------------------------------------------ completing after the answer

    def complete_later(self, schedule: Callable[[Callable[[], None]], object] | None) -> None:
        """From now on a client's EndTxn is answered once its Prepare* record is durable, and its markers and
        Complete* record are written by ``schedule(self.complete_queued)`` (called once per batch of queued
        completions: a broker's event loop runs it after the answer is sent). None: written before
        EndTxn returns again (the default); what is queued is written now."""
        self._schedule = schedule
        if schedule is None:
            self.complete_queued()

    def complete_queued(self) -> None:
        """Write the markers and Complete* records of the EndTxn requests answered so far (see
        :meth:`complete_later`); one that fails stays pending, as inline, for :meth:`retry_pending_markers`."""
        while self._queued:
            queued, self._queued = self._queued, []
            for completion in queued:
                if self._completions.get(completion.metadata.transactional_id) is completion:
                    self._finish(completion)

    # ------------------------------------------------------------ InitProducerId

    def init_producer_id(self, transactional_id: str | None, transaction_timeout_ms: int,
                         producer_id: int = NO_PRODUCER_ID,
                         producer_epoch: int = NO_PRODUCER_EPOCH) -> InitProducerIdResult:
        """A producer id and epoch for ``transactional_id`` (None: an idempotent producer, a fresh id each call).
        ``producer_id``/``producer_epoch`` are the caller's current ones (KIP-360), or both -1."""
        if transactional_id is not None:
            _check_args(transactional_id, producer_id, producer_epoch)
        if self._queued:
            self.complete_queued()
        int_arg("transaction_timeout_ms", transaction_timeout_ms)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return InitProducerIdResult(E.INVALID_REQUEST)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        if transactional_id is None:
            allocated = self._allocate_producer_id()
            if isinstance(allocated, ErrorCode):
                return InitProducerIdResult(allocated)
            return InitProducerIdResult(E.NONE, allocated, 0)
        if transactional_id == "":
            return InitProducerIdResult(E.INVALID_REQUEST)
        if not 0 < transaction_timeout_ms <= self.transaction_max_timeout_ms:
            return InitProducerIdResult(E.INVALID_TRANSACTION_TIMEOUT)
        if not self.owns(self.partition_for(transactional_id)):
            return InitProducerIdResult(E.NOT_COORDINATOR)
        metadata = self._metadata.get(transactional_id)
        created = metadata is None
        if metadata is None:
            allocated = self._allocate_producer_id()
            if isinstance(allocated, ErrorCode):
                return InitProducerIdResult(allocated)
            # Epoch -1: the first bump makes it 0. Only in memory until its first record is durable.
            metadata = TransactionMetadata(transactional_id, allocated, NO_PRODUCER_EPOCH, transaction_timeout_ms,
                                           S.EMPTY, self._clock())
            self._metadata[transactional_id] = metadata
        prepared = self._prepare_init(metadata, transaction_timeout_ms, expected)
        if isinstance(prepared, ErrorCode):
            error = prepared
        elif prepared.txn_state is S.PREPARE_EPOCH_FENCE:
            error = self._end_transaction(transactional_id, prepared.producer_id, prepared.producer_epoch,
                                          committed=False, from_client=False)
            if metadata.pending_state is S.PREPARE_EPOCH_FENCE:  # refused before its write: nothing is in flight
                metadata.pending_state = None
            # The bumped epoch is never handed out: the client retries and gets the next one.
            error = E.CONCURRENT_TRANSACTIONS if error is E.NONE else error
        else:
            error = self._write(metadata, prepared)
            if error is E.NONE:
                return InitProducerIdResult(E.NONE, prepared.producer_id, prepared.producer_epoch)
        if created and self._metadata.get(transactional_id) is metadata:
            # Kafka keeps the never-written entry (epoch -1) in memory; dropping it keeps memory equal to the log.
            del self._metadata[transactional_id]
        return InitProducerIdResult(error)

    def _prepare_init(self, metadata: TransactionMetadata, timeout_ms: int,
                      expected: tuple[int, int] | None) -> TxnTransitMetadata | ErrorCode:
        """Kafka's ``prepareInitProducerIdTransit``: the checks in order, then the transition to write."""
        if metadata.pending_state is not None:
            return E.CONCURRENT_TRANSACTIONS
        # The caller's producer is still the id's: the id was just created (e.g. the producer's state expired),
        # or same producer id (its epoch is checked by the bump below), or a retry of a rotation.
        if expected is not None and not (
                metadata.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == metadata.producer_id
                or (expected[0] == metadata.previous_producer_id and is_epoch_exhausted(expected[1]))):
            return E.PRODUCER_FENCED
        if metadata.state in _PREPARE:
            return E.CONCURRENT_TRANSACTIONS
        now = self._clock()
        if metadata.state in _IDLE:
            if metadata.is_producer_epoch_exhausted:
                if expected is not None and expected[1] != metadata.producer_epoch:
                    # Kafka throws here (no epoch left to bump) and the request fails with UNKNOWN_SERVER_ERROR.
                    log.error("%s: producer %d epoch %d is exhausted and the request expected epoch %d",
                              metadata.transactional_id, metadata.producer_id, metadata.producer_epoch, expected[1])
                    return E.UNKNOWN_SERVER_ERROR
                allocated = self._allocate_producer_id()
                if isinstance(allocated, ErrorCode):
                    return allocated
                return metadata.prepare_producer_id_rotation(allocated, timeout_ms, now, expected is not None)
            transit = metadata.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1],
                                                                now)
            return E.PRODUCER_FENCED if transit is None else transit
        if metadata.state is S.ONGOING:
            try:
                return metadata.prepare_fence_producer_epoch()
            except IllegalTransitionError as exc:  # epoch 32767 reached without a failed fence: unreachable
                log.error("%s", exc)
                return E.UNKNOWN_SERVER_ERROR
        raise IllegalTransitionError(f"{metadata.transactional_id}: current state {metadata.state.kafka_name} "
                                     f"is never current")

    def _allocate_producer_id(self) -> int | ErrorCode:
        try:
            producer_id = self._producer_ids()
        except (IdemcoreError, OSError) as exc:
            log.error("no producer id: %s", exc)
            return E.UNKNOWN_SERVER_ERROR
        if type(producer_id) is not int or producer_id < 0:
            raise ValueError(f"the producer id allocator returned {producer_id!r}, not an int >= 0")
        return producer_id

    # ------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn

    def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Add ``partitions`` to the transaction; the coordinator's one answer for every partition."""
        _check_args(transactional_id, producer_id, producer_epoch)
        if self._queued:
            self.complete_queued()
        wanted = list(partitions)
        for tp in wanted:
            if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and type(tp[1]) is int):
                raise TypeError(f"a partition must be a (topic, partition) tuple of str and int, got {tp!r}")
        # KafkaApis.handleAddPartitionsToTxnRequest: internal topics are never authorised for a transaction (their
        # markers would land in a coordinator's own log), unknown partitions are refused; then nothing is added
        # and the others are not attempted.
        refused = {tp: E.TOPIC_AUTHORIZATION_FAILED for tp in wanted if tp[0] in INTERNAL_TOPICS}
        refused.update((tp, E.UNKNOWN_TOPIC_OR_PARTITION) for tp in wanted if tp not in refused
                       and self.partition_exists is not None and not self.partition_exists(*tp))
        if refused:
            return {tp: refused.get(tp, E.OPERATION_NOT_ATTEMPTED) for tp in wanted}
        error = self._add_partitions(transactional_id, producer_id, producer_epoch, frozenset(wanted))
        return dict.fromkeys(wanted, error)

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           group_id: str) -> ErrorCode:
        """Add the group's ``__consumer_offsets`` partition to the transaction (its offsets commit with it)."""
        partition = (CONSUMER_OFFSETS_TOPIC, coordinator_partition(group_id, self.offsets_partitions))
        if self._queued:
            self.complete_queued()
        return self._add_partitions(transactional_id, producer_id, producer_epoch, frozenset([partition]))

    def _add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        partitions: frozenset[TopicPartition]) -> ErrorCode:
        metadata = self._owned(transactional_id, producer_id)
        if isinstance(metadata, ErrorCode):
            return metadata
        if metadata.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED
        if metadata.pending_state is not None or metadata.state in _PREPARE:
            return E.CONCURRENT_TRANSACTIONS
        if metadata.state is S.ONGOING and partitions <= metadata.topic_partitions:
            return E.NONE  # nothing new: no write
        return self._write(metadata, metadata.prepare_add_partitions(partitions, self._clock()))

    # ------------------------------------------------------------ EndTxn

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool) -> ErrorCode:
        """Commit (``committed``) or abort the ongoing transaction; NONE once the decision is durable."""
        _check_args(transactional_id, producer_id, producer_epoch)
        bool_arg("committed", committed)
        if self._queued:
            self.complete_queued()
        return self._end_transaction(transactional_id, producer_id, producer_epoch, committed, from_client=True)

    def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
                         from_client: bool) -> ErrorCode:
        """Kafka's ``endTransaction``; ``from_client`` False for the coordinator's own fence and timeout aborts,
        which carry the bumped epoch."""
        metadata = self._owned(transactional_id, producer_id)
        if isinstance(metadata, ErrorCode):
            return metadata
        # A client must match exactly; the coordinator's own abort may carry a higher (fencing) epoch.
        if not ((not from_client or producer_epoch == metadata.producer_epoch)
                and producer_epoch >= metadata.producer_epoch):
            return E.PRODUCER_FENCED
        fencing = metadata.pending_state is S.PREPARE_EPOCH_FENCE
        if metadata.pending_state is not None and not fencing:
            return E.CONCURRENT_TRANSACTIONS
        state = metadata.state
        if state is S.ONGOING:
            target = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
            if fencing and target is S.PREPARE_ABORT:
                # The fence becomes the abort: the PrepareAbort record carries the bumped epoch.
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = metadata.prepare_abort_or_commit(target, self._clock())
        elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return E.NONE if committed == (state is S.COMPLETE_COMMIT) else E.INVALID_TXN_STATE  # a retry
        elif state in _PREPARE:
            return E.CONCURRENT_TRANSACTIONS if committed == (state is S.PREPARE_COMMIT) else E.INVALID_TXN_STATE
        elif state is S.EMPTY:
            return E.INVALID_TXN_STATE
        else:
            raise IllegalTransitionError(f"{transactional_id}: current state {state.kafka_name} is never current")
        error = self._write(metadata, transit)
        if error is not E.NONE:
            if fencing:
                metadata.has_failed_epoch_fence = True  # the epoch stays raised in memory, unreturned
            return error
        self._start_completion(metadata, later=from_client and self._schedule is not None)
        return E.NONE

    # ------------------------------------------------------------ markers and Complete*

    def _start_completion(self, metadata: TransactionMetadata, later: bool = False) -> None:
        """The Prepare* record is durable: Complete* becomes pending, then markers go out and Complete* is written
        (``later``: queued for the scheduled :meth:`complete_queued`)."""
        partition = self.partition_for(metadata.transactional_id)
        coordinator_epoch = self._epochs.get(partition)
        if coordinator_epoch is None:
            raise IllegalTransitionError(f"{metadata.transactional_id}: completing before its partition is loaded")
        transit = metadata.prepare_complete(self._clock())
        # In a cluster the markers wait until the Prepare* record (the log's end now) is replicated.
        replicated_at = 0 if self.replication is None else self.replication.log_end(partition)
        completion = PendingCompletion(metadata, transit, metadata.producer_id, metadata.producer_epoch,
                                       coordinator_epoch, partition, replicated_at)
        self._completions[metadata.transactional_id] = completion
        if later:
            self._queued.append(completion)
            if len(self._queued) == 1:
                assert self._schedule is not None
                self._schedule(self.complete_queued)
            return
        self._finish(completion)

    def _finish(self, completion: PendingCompletion) -> bool:
        """Write missing markers, then the Complete* record; True once the transaction is complete."""
        if completion.abandoned or not self._replicated(completion) \
                or not send_markers(self.marker_writer, completion, self.marker_attempts):
            return False
        metadata = completion.metadata
        for _ in range(self.marker_attempts):
            # Kafka retries this write only on COORDINATOR_NOT_AVAILABLE and otherwise leaves it to the next
            # coordinator's load; with one coordinator, keeping it pending and retrying is that load's effect.
            if self._write(metadata, completion.transit, keep_pending_on_error=True) is E.NONE:
                del self._completions[metadata.transactional_id]
                return True
        return False

    def _replicated(self, completion: PendingCompletion) -> bool:
        """Whether the completion's Prepare* record is replicated (always, for a broker running alone)."""
        return (self.replication is None
                or self.replication.high_watermark(completion.log_partition) >= completion.replicated_at)

    def partition_replicated(self, partition: int) -> int:
        """``__transaction_state-<partition>``'s high watermark moved: finish the completions that waited for it
        (the broker calls this from its replication hook); answers how many of the partition's remain."""
        left = 0
        for transactional_id in sorted(self._completions):
            completion = self._completions.get(transactional_id)
            if completion is None or completion.log_partition != partition or completion.abandoned:
                continue
            if not self._finish(completion):
                left += 1
        return left

    def retry_pending_markers(self) -> int:
        """Try again to finish every transaction whose markers or Complete* record are missing (the broker calls
        this on a timer); answers how many are still unfinished. Abandoned ones (a partition reported a newer
        producer or coordinator epoch) are not retried: only a reload finishes them."""
        self.complete_queued()
        for transactional_id in sorted(self._completions):
            completion = self._completions[transactional_id]
            if not completion.abandoned:
                self._finish(completion)
        return len(self._completions)

    # ------------------------------------------------------------ timeouts and expiry

    def abort_timed_out_transactions(self) -> dict[str, ErrorCode]:
        """Fence and abort every ongoing transaction older than its timeout (epoch + 1, ABORT markers with it);
        answers each attempted id's outcome."""
        self.complete_queued()
        now = self._clock()
        timed_out = [(txn_id, m.producer_id) for txn_id, m in sorted(self._metadata.items())
                     if m.pending_state is None and m.state is S.ONGOING
                     and m.txn_start_timestamp + m.txn_timeout_ms < now]
        outcomes: dict[str, ErrorCode] = {}
        for transactional_id, producer_id in timed_out:
            metadata = self._metadata.get(transactional_id)
            if metadata is None or metadata.producer_id != producer_id or metadata.pending_state is not None:
                continue
            try:
                fence = metadata.prepare_fence_producer_epoch()
            except IllegalTransitionError as exc:
                log.error("%s", exc)
                outcomes[transactional_id] = E.UNKNOWN_SERVER_ERROR
                continue
            error = self._end_transaction(transactional_id, fence.producer_id, fence.producer_epoch,
                                          committed=False, from_client=False)
            if metadata.pending_state is S.PREPARE_EPOCH_FENCE:
                metadata.pending_state = None
            outcomes[transactional_id] = error
            log.info("timed-out transaction of %s (producer %d) aborted: %s", transactional_id, producer_id,
                     error.name)
        return outcomes

    def expire_transactional_ids(self) -> list[str]:
        """Remove every id idle (Empty or Complete*) for ``transactional_id_expiration_ms`` with a tombstone;
        answers the ids removed."""
        self.complete_queued()
        now = self._clock()
        removed: list[str] = []
        for transactional_id, metadata in sorted(self._metadata.items()):
            if (metadata.pending_state is not None or not metadata.state.expiration_allowed
                    or metadata.txn_last_update_timestamp > now - self.transactional_id_expiration_ms):
                continue
            metadata.prepare_dead()
            error = self._append(transactional_id, None)
            if error is E.NONE and metadata.pending_state is S.DEAD:
                del self._metadata[transactional_id]
                removed.append(transactional_id)
            else:
                metadata.pending_state = None
        return removed

    # ------------------------------------------------------------ Describe / List

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """DescribeTransactions: per id its state, or an error."""
        self.complete_queued()
        return [self._describe(transactional_id) for transactional_id in transactional_ids]

    def _describe(self, transactional_id: str) -> TransactionDescription:
        if transactional_id == "":
            return TransactionDescription(transactional_id, E.INVALID_REQUEST)
        if not self.owns(self.partition_for(transactional_id)):
            return TransactionDescription(transactional_id, E.NOT_COORDINATOR)
        metadata = self._metadata.get(transactional_id)
        if metadata is None or metadata.state is S.DEAD:
            return TransactionDescription(transactional_id, E.TRANSACTIONAL_ID_NOT_FOUND)
        return TransactionDescription(transactional_id, E.NONE, metadata.state.kafka_name, metadata.producer_id,
                                      metadata.producer_epoch, metadata.txn_timeout_ms, metadata.txn_start_timestamp,
                                      tuple(sorted(metadata.topic_partitions)))

    def list_transactions(self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None,
                          duration_ms: int = -1) -> ListTransactionsResult:
        """ListTransactions: ids filtered by Kafka state names, producer ids, and (``duration_ms`` >= 0) those
        whose transaction started more than ``duration_ms`` ago."""
        self.complete_queued()
        names = list(states or ())
        wanted_ids = frozenset(producer_ids or ())
        known = {state for name in names if (state := S.from_name(name)) is not None}
        unknown = tuple(name for name in names if S.from_name(name) is None)
        now = self._clock()
        listed = tuple(
            TransactionListing(txn_id, m.producer_id, m.state.kafka_name)
            for txn_id, m in sorted(self._metadata.items())
            if m.state is not S.DEAD
            and (not wanted_ids or m.producer_id in wanted_ids)
            and (not names or m.state in known)
            and (duration_ms < 0 or now - m.txn_start_timestamp > duration_ms))
        return ListTransactionsResult(E.NONE, listed, unknown)

    # ------------------------------------------------------------ loading

    def load(self, records: Iterable[tuple[int, bytes, bytes | None]], coordinator_epoch: int) -> None:
        """Own every partition of ``__transaction_state`` (a broker running alone): rebuild every id's state from
        the records ``(partition, key, value)`` in log order (the last record of an id wins, a tombstone removes
        it), then finish every Prepare* by sending its markers again with the new ``coordinator_epoch``; Ongoing
        transactions are left to time out.

        Raises TransactionLogFormatError for a record this reader cannot decode, one in the wrong partition (Kafka
        refuses to load when the partition count changed) or one with a state that is only ever pending; the
        state is then unchanged."""
        _check_epoch(coordinator_epoch)
        latest: dict[str, TransactionLogValue | None] = {}
        for partition, key, value in records:
            self._read_record(partition, key, value, latest)
        self._metadata = {}
        self._completions = {}  # markers of the previous incarnation are moot: they are sent again below
        self._queued = []
        self._epochs = dict.fromkeys(range(self.transaction_state_partitions), coordinator_epoch)
        self._adopt(latest)

    def load_partition(self, partition: int, records: Iterable[tuple[bytes, bytes | None]],
                       coordinator_epoch: int) -> None:
        """Own ``__transaction_state-<partition>`` (this broker became its leader at leader epoch
        ``coordinator_epoch``): its ids rebuilt from its records ``(key, value)`` in log order, replacing what was
        loaded of it before, and its Prepare* transactions finished with markers carrying ``coordinator_epoch``
        (Kafka's ``TransactionCoordinator.onElection``). The other partitions are untouched. Raises as
        :meth:`load` does, leaving the state unchanged."""
        self._check_partition(partition)
        _check_epoch(coordinator_epoch)
        latest: dict[str, TransactionLogValue | None] = {}
        for key, value in records:
            self._read_record(partition, key, value, latest)
        self._drop(partition)
        self._epochs[partition] = coordinator_epoch
        log.info("%s-%d loaded at coordinator epoch %d: %d transactional ids", TRANSACTION_STATE_TOPIC, partition,
                 coordinator_epoch, sum(value is not None for value in latest.values()))
        self._adopt(latest)

    def unload_partition(self, partition: int) -> int:
        """Stop serving ``__transaction_state-<partition>`` (this broker no longer leads it: Kafka's
        ``onResignation``): its ids and their unfinished completions are dropped (the next leader finishes them)
        and requests for them are answered NOT_COORDINATOR. Answers how many ids were dropped."""
        self._check_partition(partition)
        dropped = self._drop(partition)
        if self._epochs.pop(partition, None) is not None:
            log.info("%s-%d unloaded: %d transactional ids", TRANSACTION_STATE_TOPIC, partition, dropped)
        return dropped

    def _check_partition(self, partition: int) -> None:
        index_arg("partition", partition, self.transaction_state_partitions)

    def _read_record(self, partition: int, key: bytes, value: bytes | None,
                     latest: dict[str, TransactionLogValue | None]) -> None:
        transactional_id = decode_key(key)
        if transactional_id is None:
            log.warning("skipping a __transaction_state record with an unknown key version in partition %d",
                        partition)
            return
        owner = self.partition_for(transactional_id)
        if partition != owner:
            raise TransactionLogFormatError(f"{transactional_id!r} is in partition {partition} but belongs to "
                                            f"partition {owner} of {self.transaction_state_partitions}")
        decoded = decode_value(value)
        if decoded is not None and decoded.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            raise TransactionLogFormatError(f"{transactional_id!r} has state {decoded.state.kafka_name}, which "
                                            f"is never written to the log")
        latest[transactional_id] = decoded

    def _drop(self, partition: int) -> int:
        """Forget the ids of ``partition``, their completions (abandoned: a scheduled run skips them) and queue."""
        gone = [txn_id for txn_id in self._metadata if self.partition_for(txn_id) == partition]
        for transactional_id in gone:
            del self._metadata[transactional_id]
            completion = self._completions.pop(transactional_id, None)
            if completion is not None:
                completion.abandoned = True
        self._queued = [c for c in self._queued if c.log_partition != partition]
        return len(gone)

    def _adopt(self, latest: dict[str, TransactionLogValue | None]) -> None:
        """Take the ids read, then finish their Prepare* transactions."""
        loaded = {txn_id: TransactionMetadata.from_log_value(txn_id, value)
                  for txn_id, value in latest.items() if value is not None}
        self._metadata.update(loaded)
        for transactional_id in sorted(loaded):
            metadata = loaded[transactional_id]
            if metadata.state in _PREPARE:
                self._start_completion(metadata)

    # ------------------------------------------------------------ the log

    def _owned(self, transactional_id: str, producer_id: int) -> TransactionMetadata | ErrorCode:
        """The id's metadata if ``producer_id`` holds it, else the error Kafka answers first, in its order:
        INVALID_REQUEST for an empty id, NOT_COORDINATOR before the log is loaded, INVALID_PRODUCER_ID_MAPPING
        for an unknown id or another producer id."""
        if not transactional_id:
            return E.INVALID_REQUEST
        if not self.owns(self.partition_for(transactional_id)):
            return E.NOT_COORDINATOR
        metadata = self._metadata.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        return metadata

    def _write(self, metadata: TransactionMetadata, transit: TxnTransitMetadata,
               keep_pending_on_error: bool = False) -> ErrorCode:
        """Write ``transit``; apply it once durable. On failure the pending state is cleared (the transition did
        not happen), unless the caller will retry the same record."""
        try:
            error = self._append(metadata.transactional_id, transit.log_value_bytes())
        except ValueError as exc:  # a value the record cannot hold (a partition or name out of range)
            log.error("%s: %s cannot be written: %s", metadata.transactional_id, transit.txn_state.kafka_name, exc)
            error = E.INVALID_REQUEST
            keep_pending_on_error = False
        if error is not E.NONE:
            if not keep_pending_on_error:
                metadata.pending_state = None
            log.info("%s: writing %s failed: %s", metadata.transactional_id, transit.txn_state.kafka_name, error.name)
            return error
        metadata.complete_transition_to(transit)
        return E.NONE

    def _append(self, transactional_id: str, value: bytes | None) -> ErrorCode:
        partition = self.partition_for(transactional_id)
        try:
            answer = self._log_writer.append(partition, encode_key(transactional_id), value)
        except (IdemcoreError, OSError) as exc:  # a log that cannot be written is a storage error
            log.error("__transaction_state-%d: append for %s failed: %s", partition, transactional_id, exc)
            answer = E.KAFKA_STORAGE_ERROR
        return coordinator_error(answer)


def _check_epoch(coordinator_epoch: object) -> None:
    int_setting("coordinator_epoch", coordinator_epoch, 0)


def _check_args(transactional_id: object, producer_id: object, producer_epoch: object) -> None:
    """A caller's types, checked before anything is looked up or stored: one wrong call must not leave an entry
    keyed by a non-str id behind (every later listing would fail)."""
    if transactional_id is not None:  # None: a null id, INVALID_REQUEST
        str_arg("transactional_id", transactional_id)
    int_arg("producer_id", producer_id)
    int_arg("producer_epoch", producer_epoch)
