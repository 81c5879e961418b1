"""The transactional producer's bookkeeping: the transactional half of Kafka's ``TransactionManager`` (client
side; the coordinator's half is :mod:`idemcore.broker.coordinator`), at transaction version 0.

:class:`TransactionManager` holds the client's transaction state machine (one setter logs every ``old -> new``),
the partitions of the ongoing transaction, and the queue of transactional requests (FindCoordinator,
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn) that the sender sends one at a
time, in Kafka's priority order. The application's calls (``Producer.init_transactions`` ...) start a
:class:`TransactionalResult` here; the producer drives the sender until it is done. :class:`TransactionalSequences`
is the idempotence bookkeeping with Kafka's rules for a transactional producer: it never bumps its epoch by
itself; a batch that failed makes the transaction abortable, and the abort asks the coordinator for the next
epoch (KIP-360), which restarts every partition's sequences at 0.

Differences from Kafka, all deliberate:

- INVALID_PRODUCER_EPOCH on a produce is fatal here (:class:`ProducerFencedError`) at once. Kafka (KIP-588)
  makes it abortable first; at transaction version 0 the abort's EndTxn then gets PRODUCER_FENCED, so the
  producer ends in the same fatal state one call later.
- A request retried because the coordinator was not known yet (its first lookup) is not delayed by
  ``retry_backoff_ms``: Kafka sleeps there too, which only slows every ``init_transactions`` down.
- UNKNOWN_PRODUCER_ID on a produce is not retried (Kafka retries it when the log start passed the last
  acknowledged offset): the batch fails, the transaction becomes abortable and the abort bumps the epoch.
"""

from __future__ import annotations

import abc
import copy
import enum
import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

from idemcore.client.batch import ProducerBatch
from idemcore.client.idempotence import IdempotenceManager
from idemcore.client.partitions import PartitionArrays
from idemcore.errors import IdemcoreError
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetEntry,
    Request,
    Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.protocol.codes import RETRIABLE_ERRORS, ErrorCode, error_name
from idemcore.protocol.constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from idemcore.protocol.sequences import seq_at_or_before, seq_sub

log = logging.getLogger(__name__)

E = ErrorCode


# ---------------------------------------------------------------- errors


class TransactionError(IdemcoreError):
    """Base of the transactional producer's errors; ``error_code`` is the Kafka error behind it, if any."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class TransactionStateError(TransactionError):
    """A call the producer's state does not allow (Kafka's IllegalStateException): ``begin_transaction``
    twice, ``send`` outside a transaction, ``commit_transaction`` with none begun, a transactional method on a
    producer without ``transactional_id``... Nothing changed; the producer can go on."""


class TransactionAbortableError(TransactionError):
    """The transaction cannot commit (a batch failed, or the coordinator answered an abortable error): only
    ``abort_transaction`` works now; after it the producer can begin the next transaction."""


class TransactionFatalError(TransactionError):
    """The producer cannot go on (Kafka's fatal errors): every later call raises this again; close it."""


class ProducerFencedError(TransactionFatalError):
    """Another producer with the same ``transactional_id`` has initialised since (PRODUCER_FENCED, or
    INVALID_PRODUCER_EPOCH): this one is a zombie and can do nothing more."""


class TransactionTimeoutError(TransactionError, TimeoutError):
    """The call did not complete within ``max_block_ms`` (Kafka's TimeoutException). Its requests go on:
    calling ``init_transactions``, ``commit_transaction`` or ``abort_transaction`` again waits for them. After
    ``send_offsets_to_transaction`` timed out, its requests stay queued ahead of EndTxn (Kafka's request
    priorities), so a commit is sent only after them; calling it again sends the offsets again."""


_FENCED: Final = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH})
_FATAL_CODES: Final = frozenset({E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED})
_NO_COORDINATOR: Final = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR})
#: What a TxnOffsetCommit says of the consumer that read the offsets (KIP-447): its generation, member id and
#: group instance id.
GroupMember = tuple[int, str, "str | None"]
#: Kafka's lower backoff for an AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS before any partition of the
#: transaction was added: the previous transaction is completing and will be done soon.
ADD_PARTITIONS_RETRY_BACKOFF_MS: Final = 20


def _fenced(transactional_id: str) -> ProducerFencedError:
    return ProducerFencedError(f"producer with transactional id {transactional_id!r} has been fenced by another "
                               "producer with the same transactional id", E.PRODUCER_FENCED)


# ---------------------------------------------------------------- states


class TransactionManagerState(enum.Enum):
    """Kafka's client-side transaction states (``TransactionManager.State``; the coordinator's are
    :class:`~idemcore.record.kafka_files.transaction_log.TransactionState`)."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionManagerState
#: The states each state may be entered from (Kafka's isTransitionValid); FATAL_ERROR from any.
VALID_SOURCES: Final[Mapping[TransactionManagerState, frozenset[TransactionManagerState]]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(S),
}


class TransactionalResult:
    """The outcome of one blocking call's requests (Kafka's TransactionalRequestResult): ``done`` once they
    finished, with ``error`` set if they failed; ``acked`` once the application was told."""

    __slots__ = ("acked", "done", "error", "operation")

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.done = False
        self.error: TransactionError | None = None
        self.acked = False

    def succeed(self) -> None:
        self.done = True

    def fail(self, error: TransactionError) -> None:
        if not self.done:
            self.done = True
            self.error = error

    def raise_error(self) -> None:
        """Raise the failure (a copy: the same error may be raised again by a later call)."""
        if self.error is not None:
            raise copy.copy(self.error).with_traceback(None)


# ---------------------------------------------------------------- requests


class _Priority(enum.IntEnum):
    """The order pending requests go out in (Kafka's): a coordinator first, then a producer id, partitions and
    offsets, EndTxn last except the epoch bump that follows an abort."""

    FIND_COORDINATOR = 0
    INIT_PRODUCER_ID = 1
    ADD_PARTITIONS_OR_OFFSETS = 2
    END_TXN = 3
    EPOCH_BUMP = 4


class _Handler(abc.ABC):
    """One transactional request: how to build it and what its answer does (Kafka's TxnRequestHandler)."""

    name = "request"  # Kafka's name of the request, for messages
    priority = _Priority.ADD_PARTITIONS_OR_OFFSETS
    is_end_txn = False

    def __init__(self, manager: TransactionManager, result: TransactionalResult | None = None) -> None:
        self.m = manager
        self.result = result if result is not None else TransactionalResult(self.name)
        self.not_before = 0  # when a retry may go out (now + backoff when it was put back)

    def coordinator(self) -> tuple[int, str] | None:
        """``(key type, key)`` of the coordinator this request goes to; None: any broker (FindCoordinator)."""
        return TRANSACTION_KEY, self.m.transactional_id

    def retry_backoff_ms(self) -> int:
        return self.m.retry_backoff_ms

    @abc.abstractmethod
    def build(self, request_id: int) -> Request:
        """The request to send, numbered ``request_id``."""

    @abc.abstractmethod
    def handle(self, response: Response, now: int) -> None:
        """Act on the answer: succeed, retry (put back with a backoff), or fail the result."""

    # What an answer leads to (Kafka's fatalError, abortableError, reenqueue).

    def fatal(self, error: TransactionFatalError) -> None:
        self.result.fail(error)
        self.m.transition_to_fatal(error)

    def abortable(self, error: TransactionError) -> None:
        self.result.fail(error)
        self.m.transition_to_abortable(error)

    def abortable_and_bump(self, code: int) -> None:
        """UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING: the coordinator lost the producer; abort, and the
        abort asks for a new epoch (Kafka's abortableErrorIfPossible, with a coordinator that bumps: KIP-360)."""
        self.m.epoch_bump_required = True
        self.abortable(TransactionAbortableError(f"{self.name}: {error_name(code)}", code))

    def retry(self, now: int, *, find_coordinator: bool = False) -> None:
        if find_coordinator:
            key = self.coordinator()
            if key is not None:
                self.m.lookup_coordinator(*key)
        self.not_before = now + self.retry_backoff_ms()
        self.m.enqueue(self)

    def unexpected(self, code: int) -> None:
        self.fatal(TransactionFatalError(f"unexpected error in the {self.name} response: {error_name(code)}", code))


class _FindCoordinatorHandler(_Handler):
    name = "FindCoordinator"
    priority = _Priority.FIND_COORDINATOR

    def __init__(self, manager: TransactionManager, key_type: int, key: str) -> None:
        super().__init__(manager)
        self.key_type = key_type
        self.key = key

    def coordinator(self) -> tuple[int, str] | None:
        return None

    def build(self, request_id: int) -> Request:
        return FindCoordinatorRequest(self.key, self.key_type, request_id)

    def handle(self, response: Response, now: int) -> None:
        assert isinstance(response, FindCoordinatorResponse)
        code = response.error_code
        if code == E.NONE:
            self.m.coordinators[(self.key_type, self.key)] = response.node_id
            log.info("%s: %s coordinator for %r is node %d", self.m.transactional_id,
                     "group" if self.key_type == GROUP_KEY else "transaction", self.key, response.node_id)
            self.result.succeed()
        elif code in RETRIABLE_ERRORS:
            self.retry(now)
        elif code == E.TRANSACTION_ABORTABLE:
            self.abortable(TransactionAbortableError(f"FindCoordinator for {self.key!r}: {error_name(code)}", code))
        else:
            self.fatal(TransactionFatalError(f"could not find the coordinator for {self.key!r} (key type "
                                             f"{self.key_type}): {error_name(code)}"
                                             + (f" ({response.error_message})" if response.error_message else ""),
                                             code))


class _InitProducerIdHandler(_Handler):
    name = "InitProducerId"
    def __init__(self, manager: TransactionManager, bump: tuple[int, int] | None,
                 result: TransactionalResult | None = None) -> None:
        super().__init__(manager, result if result is not None else TransactionalResult("init_transactions"))
        self.bump = bump  # (producer id, epoch) to bump after an abortable error (KIP-360), or None
        self.priority = _Priority.EPOCH_BUMP if bump is not None else _Priority.INIT_PRODUCER_ID

    def build(self, request_id: int) -> Request:
        producer_id, epoch = self.bump if self.bump is not None else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        return InitProducerIdRequest(request_id, self.m.transactional_id, self.m.transaction_timeout_ms,
                                     producer_id, epoch)

    def handle(self, response: Response, now: int) -> None:
        assert isinstance(response, InitProducerIdResponse)
        code = response.error_code
        if code == E.NONE:
            self.m.producer_id_received(response.producer_id, response.producer_epoch, self.bump is not None)
            self.result.succeed()
        elif code in _NO_COORDINATOR:
            self.retry(now, find_coordinator=True)
        elif code in RETRIABLE_ERRORS:  # CONCURRENT_TRANSACTIONS: the coordinator is aborting the last instance's
            self.retry(now)
        elif code in _FENCED:
            self.fatal(_fenced(self.m.transactional_id))
        elif code == E.TRANSACTION_ABORTABLE:
            self.abortable(TransactionAbortableError(f"InitProducerId: {error_name(code)}", code))
        else:
            message = f" ({response.error_message})" if response.error_message else ""
            self.fatal(TransactionFatalError(f"InitProducerId for {self.m.transactional_id!r} failed: "
                                             f"{error_name(code)}{message}", code))


class _AddPartitionsHandler(_Handler):
    name = "AddPartitionsToTxn"
    def __init__(self, manager: TransactionManager, streams: frozenset[int]) -> None:
        super().__init__(manager, TransactionalResult("AddPartitionsToTxn"))
        self.streams = streams
        self.backoff_ms = manager.retry_backoff_ms

    def retry_backoff_ms(self) -> int:
        return min(self.m.retry_backoff_ms, self.backoff_ms)

    def build(self, request_id: int) -> Request:
        names = self.m.partitions.names
        partitions = tuple(sorted(names[stream] for stream in self.streams))
        producer_id, epoch = self.m.producer_id_and_epoch
        return AddPartitionsToTxnRequest(self.m.transactional_id, producer_id, epoch, partitions, request_id)

    def handle(self, response: Response, now: int) -> None:
        assert isinstance(response, AddPartitionsToTxnResponse)
        m = self.m
        self.backoff_ms = m.retry_backoff_ms
        failed = []
        first_code: int | None = None
        for answer in response.results:
            code = answer.error_code
            if code == E.NONE:
                continue
            if code in _NO_COORDINATOR:
                self.retry(now, find_coordinator=True)
                return
            if code == E.CONCURRENT_TRANSACTIONS:
                if not m.partitions_in_transaction:  # the previous transaction is still completing
                    self.backoff_ms = ADD_PARTITIONS_RETRY_BACKOFF_MS
                self.retry(now)
                return
            if code in RETRIABLE_ERRORS:  # UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_LOAD_IN_PROGRESS...
                self.retry(now)
                return
            if code in _FENCED:
                self.fatal(_fenced(m.transactional_id))
                return
            if code in _FATAL_CODES or code == E.INVALID_TXN_STATE:
                self.fatal(TransactionFatalError(f"AddPartitionsToTxn: {error_name(code)}", code))
                return
            if code in (E.UNKNOWN_PRODUCER_ID, E.INVALID_PRODUCER_ID_MAPPING):
                self.abortable_and_bump(code)
                return
            if code == E.TRANSACTION_ABORTABLE:
                self.abortable(TransactionAbortableError(f"AddPartitionsToTxn: {error_name(code)}", code))
                return
            # OPERATION_NOT_ATTEMPTED (another partition failed) and anything unexpected
            failed.append(f"{answer.topic}-{answer.partition}: {error_name(code)}")
            first_code = code if first_code is None else first_code
        names = m.partitions.names
        answered = {(a.topic, a.partition) for a in response.results}
        failed += [f"{names[n][0]}-{names[n][1]}: no answer" for n in sorted(self.streams) if names[n] not in answered]
        # Out of the pending set whatever the outcome (Kafka): after an error the batches are aborted anyway.
        m.pending_partitions.difference_update(self.streams)
        if failed:
            self.abortable(TransactionAbortableError("could not add partitions to the transaction: "
                                                     + ", ".join(failed), first_code))
            return
        m.partitions_added(self.streams)
        self.result.succeed()


class _AddOffsetsHandler(_Handler):
    name = "AddOffsetsToTxn"
    def __init__(self, manager: TransactionManager, offsets: tuple[OffsetEntry, ...], group_id: str,
                 member: GroupMember) -> None:
        super().__init__(manager, TransactionalResult("send_offsets_to_transaction"))
        self.offsets = offsets
        self.group_id = group_id
        self.member = member

    def build(self, request_id: int) -> Request:
        producer_id, epoch = self.m.producer_id_and_epoch
        return AddOffsetsToTxnRequest(self.m.transactional_id, producer_id, epoch, self.group_id, request_id)

    def handle(self, response: Response, now: int) -> None:
        assert isinstance(response, AddOffsetsToTxnResponse)
        code = response.error_code
        m = self.m
        if code == E.NONE:
            # The result completes only once TxnOffsetCommit is answered.
            m.enqueue(_TxnOffsetCommitHandler(m, self.result, self.offsets, self.group_id, self.member))
            m.transaction_started = True
        elif code in _NO_COORDINATOR:
            self.retry(now, find_coordinator=True)
        elif code in RETRIABLE_ERRORS:
            self.retry(now)
        elif code in (E.UNKNOWN_PRODUCER_ID, E.INVALID_PRODUCER_ID_MAPPING):
            self.abortable_and_bump(code)
        elif code in _FENCED:
            self.fatal(_fenced(m.transactional_id))
        elif code in _FATAL_CODES or code == E.INVALID_TXN_STATE:
            self.fatal(TransactionFatalError(f"AddOffsetsToTxn: {error_name(code)}", code))
        elif code == E.TRANSACTION_ABORTABLE:
            self.abortable(TransactionAbortableError(f"AddOffsetsToTxn for group {self.group_id!r}: {error_name(code)}",
                                                     code))
        else:
            self.unexpected(code)


class _TxnOffsetCommitHandler(_Handler):
    name = "TxnOffsetCommit"
    def __init__(self, manager: TransactionManager, result: TransactionalResult, offsets: tuple[OffsetEntry, ...],
                 group_id: str, member: GroupMember) -> None:
        super().__init__(manager, result)
        self.group_id = group_id
        self.member = member
        for entry in offsets:
            manager.pending_offsets[(entry.topic, entry.partition)] = entry

    def coordinator(self) -> tuple[int, str] | None:
        return GROUP_KEY, self.group_id

    def build(self, request_id: int) -> Request:
        producer_id, epoch = self.m.producer_id_and_epoch
        offsets = tuple(self.m.pending_offsets[key] for key in sorted(self.m.pending_offsets))
        generation_id, member_id, instance_id = self.member
        return TxnOffsetCommitRequest(self.m.transactional_id, self.group_id, producer_id, epoch, offsets,
                                      generation_id, member_id, request_id, instance_id)

    def handle(self, response: Response, now: int) -> None:
        assert isinstance(response, TxnOffsetCommitResponse)
        m = self.m
        lookup = False
        for answer in response.results:
            code = answer.error_code
            if code == E.NONE:
                m.pending_offsets.pop((answer.topic, answer.partition), None)
            elif code in _NO_COORDINATOR or code == E.REQUEST_TIMED_OUT:
                lookup = True
            elif code in RETRIABLE_ERRORS:
                continue  # retried with the same coordinator
            elif code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID, E.TRANSACTION_ABORTABLE):
                # KIP-447: the consumer whose offsets these are is no longer the group's member (a zombie).
                self.abortable(TransactionAbortableError(f"TxnOffsetCommit for group {self.group_id!r}: "
                                                         f"{error_name(code)}", code))
                break
            elif code in _FENCED:
                self.fatal(_fenced(m.transactional_id))
                break
            else:
                self.fatal(TransactionFatalError(f"TxnOffsetCommit for group {self.group_id!r}: {error_name(code)}",
                                                 code))
                break
        if self.result.done:
            m.pending_offsets.clear()
        elif not m.pending_offsets:
            self.result.succeed()
        else:
            self.retry(now, find_coordinator=lookup)  # the partitions not yet committed


class _EndTxnHandler(_Handler):
    name = "EndTxn"
    priority = _Priority.END_TXN
    is_end_txn = True

    def __init__(self, manager: TransactionManager, committed: bool) -> None:
        super().__init__(manager, TransactionalResult("commit_transaction" if committed else "abort_transaction"))
        self.committed = committed

    def build(self, request_id: int) -> Request:
        producer_id, epoch = self.m.producer_id_and_epoch
        return EndTxnRequest(self.m.transactional_id, producer_id, epoch, self.committed, request_id)

    def handle(self, response: Response, now: int) -> None:
        assert isinstance(response, EndTxnResponse)
        code = response.error_code
        if code == E.NONE:
            # Also the answer to a retry whose first attempt's answer was lost: the coordinator finds the
            # transaction Complete* with this outcome and answers NONE again (never a second transaction).
            self.m.complete_transaction()
            if self.m.state is S.INITIALIZING and not self.m.bump_queued():
                # The bump became necessary while aborting (sequences found unresolved): the abort returns
                # once it is done, or the producer would wait in INITIALIZING with nothing to leave it.
                self.m.enqueue(_InitProducerIdHandler(self.m, self.m.producer_id_and_epoch, self.result))
                return
            self.result.succeed()
        elif code in _NO_COORDINATOR:
            self.retry(now, find_coordinator=True)
        elif code in RETRIABLE_ERRORS:  # CONCURRENT_TRANSACTIONS: markers still being written
            self.retry(now)
        elif code in _FENCED:
            self.fatal(_fenced(self.m.transactional_id))
        elif code in _FATAL_CODES or code == E.INVALID_TXN_STATE:
            self.fatal(TransactionFatalError(f"EndTxn({'commit' if self.committed else 'abort'}): {error_name(code)}",
                                             code))
        elif code in (E.UNKNOWN_PRODUCER_ID, E.INVALID_PRODUCER_ID_MAPPING):
            self.abortable_and_bump(code)
        elif code == E.TRANSACTION_ABORTABLE:
            self.abortable(TransactionAbortableError(f"EndTxn: {error_name(code)}", code))
        else:
            self.unexpected(code)


# ---------------------------------------------------------------- the manager


class TransactionManager:
    """Kafka's client transaction state machine and request queue for one ``transactional_id``.

    The application's side (``initialize_transactions``, ``begin_transaction``, ``begin_commit``,
    ``begin_abort``, ``send_offsets_to_transaction``, ``fail_if_not_ready_for_send``) raises
    :class:`TransactionError` subclasses; the sender's side (``next_request``, ``handle_response``,
    ``connection_lost``, ``handle_failed_batch``) never raises: a bad answer becomes an error state.
    """

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, retry_backoff_ms: int,
                 partitions: PartitionArrays) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.partitions = partitions
        self.sequences = TransactionalSequences(partitions, self)
        self.state = S.UNINITIALIZED
        self.last_error: TransactionError | None = None
        # Partitions by their stream (PartitionArrays): new ones wait for the next AddPartitionsToTxn, pending
        # ones are in one, added ones may be drained. ``partitions_in_transaction`` is shared with the accumulator
        # (its drain mask), so it is changed in place and ``on_partitions_changed`` tells the accumulator which
        # changed.
        self.new_partitions: set[int] = set()
        self.pending_partitions: set[int] = set()
        self.partitions_in_transaction: set[int] = set()
        self.on_partitions_changed: Callable[[Iterable[int]], None] = lambda streams: None
        self.pending_offsets: dict[tuple[str, int], OffsetEntry] = {}
        self.coordinators: dict[tuple[int, str], int] = {}
        self.transaction_started = False  # a partition or offsets were added: EndTxn must be sent
        self.epoch_bump_required = False  # the abort is followed by InitProducerId with the current epoch
        self._queue: list[tuple[int, int, _Handler]] = []
        self._order = itertools.count()  # FIFO among requests of one priority
        self._in_flight: tuple[_Handler, int, int] | None = None  # (handler, request id, sent ms)
        self._pending: tuple[TransactionalResult, TransactionManagerState, str] | None = None  # a call not yet acked

    # ------------------------------------------------------------ state

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        return self.sequences.producer_id, self.sequences.producer_epoch

    @property
    def has_producer_id(self) -> bool:
        return self.sequences.has_producer_id

    @property
    def has_fatal_error(self) -> bool:
        return self.state is S.FATAL_ERROR

    @property
    def has_abortable_error(self) -> bool:
        return self.state is S.ABORTABLE_ERROR

    @property
    def is_aborting(self) -> bool:
        return self.state is S.ABORTING_TRANSACTION

    @property
    def is_completing(self) -> bool:
        return self.state in (S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION)

    @property
    def has_ongoing_transaction(self) -> bool:
        """From begin_transaction until the transaction is complete (or the producer failed fatally)."""
        return self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR)

    def _transition_to(self, target: TransactionManagerState, error: TransactionError | None = None, *,
                       from_sender: bool = False) -> None:
        """The one place the state changes; logs ``old -> new``. An invalid transition asked for by the
        application raises TransactionStateError and changes nothing; one reached by an answer (the sender's
        side) is a bug in the protocol exchange and makes the producer fail fatally, as Kafka's does."""
        if self.state not in VALID_SOURCES[target]:
            message = (f"transactional id {self.transactional_id!r}: invalid transition from {self.state.name} to "
                       f"{target.name}")
            if from_sender:
                log.error("%s", message)
                self.transition_to_fatal(TransactionFatalError(message))
                return
            raise TransactionStateError(message)
        if target in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            assert error is not None
            self.last_error = error
            log.info("%s: %s -> %s (%s)", self.transactional_id, self.state.name, target.name, error)
        else:
            self.last_error = None
            log.debug("%s: %s -> %s", self.transactional_id, self.state.name, target.name)
        self.state = target

    def transition_to_abortable(self, error: TransactionError) -> None:
        if self.state is S.ABORTING_TRANSACTION:
            log.debug("%s: already aborting; not abortable again for %s", self.transactional_id, error)
            return
        if self.state is S.FATAL_ERROR:
            return  # fatal stays fatal
        if not isinstance(error, TransactionAbortableError):
            error = TransactionAbortableError(str(error), error.error_code)
        self._transition_to(S.ABORTABLE_ERROR, error, from_sender=True)

    def transition_to_fatal(self, error: TransactionFatalError) -> None:
        if self.state is S.FATAL_ERROR:
            return
        self._transition_to(S.FATAL_ERROR, error)
        # Nothing more is sent: every call waiting for a request ends with this error now.
        if self._pending is not None:
            self._pending[0].fail(error)
        for _, _, handler in self._queue:
            handler.result.fail(error)
        self._queue.clear()
        if self._in_flight is not None:
            self._in_flight[0].result.fail(error)
            self._in_flight = None

    def _maybe_fail_with_error(self) -> None:
        """In an error state every call but abort (after an abortable error) raises that error."""
        if self.state is S.FATAL_ERROR or self.state is S.ABORTABLE_ERROR:
            assert self.last_error is not None
            raise copy.copy(self.last_error).with_traceback(None)

    def _throw_if_pending(self, operation: str) -> None:
        """A call that timed out must be called again until it completes, before anything else (Kafka)."""
        if self._pending is not None:
            if self._pending[0].acked:
                self._pending = None
            else:
                raise TransactionStateError(f"cannot {operation}: the previous call to {self._pending[2]} timed out "
                                            "and must be retried")

    def _cached(self, operation: str, target: TransactionManagerState,
                start: Callable[[], TransactionalResult]) -> TransactionalResult:
        """The result of ``operation``: a fresh one, or that of the same call that timed out earlier."""
        if self._pending is not None:
            result, state, previous = self._pending
            if result.acked:
                self._pending = None
            elif state is not target:
                raise TransactionStateError(f"cannot {operation}: the previous call to {previous} timed out and "
                                            "must be retried")
            else:
                return result
        result = start()
        self._pending = (result, target, operation)
        return result

    # ------------------------------------------------------------ the application's calls

    def initialize_transactions(self) -> TransactionalResult:
        self._maybe_fail_with_error()

        def start() -> TransactionalResult:
            self._transition_to(S.INITIALIZING)
            handler = _InitProducerIdHandler(self, None)
            self.enqueue(handler)
            return handler.result

        return self._cached("init_transactions", S.INITIALIZING, start)

    def begin_transaction(self) -> None:
        self._maybe_fail_with_error()
        self._throw_if_pending("begin_transaction")
        self._transition_to(S.IN_TRANSACTION)

    def begin_commit(self) -> TransactionalResult:
        def start() -> TransactionalResult:
            self._maybe_fail_with_error()
            self._transition_to(S.COMMITTING_TRANSACTION)
            return self._begin_completing(committed=True)

        return self._cached("commit_transaction", S.COMMITTING_TRANSACTION, start)

    def begin_abort(self) -> TransactionalResult:
        def start() -> TransactionalResult:
            if self.state is not S.ABORTABLE_ERROR:
                self._maybe_fail_with_error()
            lost_mapping = self.last_error is not None and self.last_error.error_code == E.INVALID_PRODUCER_ID_MAPPING
            self._transition_to(S.ABORTING_TRANSACTION)
            self.new_partitions.clear()  # aborting: nothing more to add
            return self._begin_completing(committed=False, skip_end_txn=lost_mapping)

        return self._cached("abort_transaction", S.ABORTING_TRANSACTION, start)

    def _begin_completing(self, committed: bool, skip_end_txn: bool = False) -> TransactionalResult:
        if self.new_partitions:
            self.enqueue(self._add_partitions_handler())
        result = None
        # INVALID_PRODUCER_ID_MAPPING: the coordinator would refuse EndTxn, so only the epoch bump goes out.
        if not skip_end_txn:
            end = _EndTxnHandler(self, committed)
            self.enqueue(end)
            result = end.result
        if self.epoch_bump_required or result is None:
            bump = _InitProducerIdHandler(self, self.producer_id_and_epoch)
            self.enqueue(bump)
            result = bump.result
        return result

    def send_offsets_to_transaction(self, offsets: tuple[OffsetEntry, ...], group_id: str,
                                    member: GroupMember = (-1, "", None)) -> TransactionalResult:
        """``member``: the consumer's generation, member id and instance id (KIP-447), checked by the group
        coordinator so that a zombie's offsets are refused; ``(-1, "", None)`` for none."""
        self._maybe_fail_with_error()
        self._throw_if_pending("send_offsets_to_transaction")
        if self.state is not S.IN_TRANSACTION:
            raise TransactionStateError(f"cannot send offsets to a transaction in state {self.state.name}: "
                                        "call begin_transaction() first")
        handler = _AddOffsetsHandler(self, offsets, group_id, member)
        self.enqueue(handler)
        return handler.result

    def fail_if_not_ready_for_send(self) -> None:
        """Before a record is queued: only inside a transaction of an initialised producer (Kafka's checks in
        maybeAddPartition, done before the append so a refused record is never queued)."""
        if self.state is S.IN_TRANSACTION and self._pending is None and self.has_producer_id:
            return  # the common case, once per record: in a transaction, with an id, no error, nothing pending
        self._maybe_fail_with_error()
        self._throw_if_pending("send")
        if not self.has_producer_id:
            raise TransactionStateError("cannot send before init_transactions() has completed")
        if self.state is not S.IN_TRANSACTION:
            raise TransactionStateError(f"cannot send in state {self.state.name}: call begin_transaction() first")

    def maybe_add_partition(self, number: int) -> None:
        """The partition gets a batch of this transaction: add it with the next AddPartitionsToTxn."""
        if number not in self.partitions_in_transaction and number not in self.pending_partitions:
            self.new_partitions.add(number)

    # ------------------------------------------------------------ the sender's side

    def enqueue(self, handler: _Handler) -> None:
        heapq.heappush(self._queue, (handler.priority, next(self._order), handler))

    def bump_queued(self) -> bool:
        return any(isinstance(h, _InitProducerIdHandler) and h.bump is not None for _, _, h in self._queue)

    def lookup_coordinator(self, key_type: int, key: str) -> None:
        self.coordinators.pop((key_type, key), None)
        self.enqueue(_FindCoordinatorHandler(self, key_type, key))

    def _add_partitions_handler(self) -> _AddPartitionsHandler:
        self.pending_partitions |= self.new_partitions
        self.new_partitions.clear()
        return _AddPartitionsHandler(self, frozenset(self.pending_partitions))

    @property
    def has_in_flight_request(self) -> bool:
        return self._in_flight is not None

    def next_request(self, now: int, has_incomplete_batches: bool, request_ids: Iterator[int]) -> Request | None:
        """The transactional request to send now, if any (Kafka's nextRequest with the sender's coordinator
        check). One is in flight at a time; EndTxn waits until every batch is done."""
        if self._in_flight is not None:
            return None
        if self.new_partitions:
            self.enqueue(self._add_partitions_handler())
        while self._queue:
            handler = self._queue[0][2]
            if handler.is_end_txn and has_incomplete_batches:
                return None
            if handler.not_before > now:
                return None  # backing off before a retry (Kafka's sender sleeps)
            heapq.heappop(self._queue)
            if self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR) and not (
                    self.state is S.ABORTABLE_ERROR and isinstance(handler, _FindCoordinatorHandler)):
                assert self.last_error is not None
                handler.result.fail(self.last_error)  # not sent: the transaction is failing
                continue
            if handler.is_end_txn and not self.transaction_started:
                # Nothing reached the coordinator: there is no transaction there to end.
                handler.result.succeed()
                self.complete_transaction()
                continue
            coordinator = handler.coordinator()
            if coordinator is not None and coordinator not in self.coordinators:
                self.lookup_coordinator(*coordinator)
                self.enqueue(handler)  # after the lookup (see the module docstring: no backoff here)
                continue
            request = handler.build(next(request_ids))
            self._in_flight = (handler, request.request_id, now)
            log.debug("%s: sending %r", self.transactional_id, request)
            return request
        return None

    def handle_response(self, request: Request, response: Response, now: int) -> None:
        """An answer: to the request in flight, else a late one (after a disconnect), ignored."""
        if self._in_flight is None or self._in_flight[1] != request.request_id:
            log.debug("%s: ignoring a late answer %r", self.transactional_id, response)
            return  # also every answer after a fatal error: the in-flight request was given up then
        handler = self._in_flight[0]
        self._in_flight = None
        handler.handle(response, now)

    def request_timed_out(self, now: int, request_timeout_ms: int) -> bool:
        return self._in_flight is not None and now - self._in_flight[2] >= request_timeout_ms

    def connection_lost(self, now: int) -> None:
        """The connection broke (a request timed out): the request in flight is sent again, after finding its
        coordinator again (Kafka's disconnect handling). Every request is safe to repeat: AddPartitions and
        AddOffsets add what is already there without a write, EndTxn finds the transaction Complete* with this
        outcome and answers NONE (or, still writing markers, CONCURRENT_TRANSACTIONS), TxnOffsetCommit writes the
        same offsets, InitProducerId with an epoch answers a retry of the last bump with the same epoch."""
        if self._in_flight is not None:
            handler = self._in_flight[0]
            self._in_flight = None
            log.info("%s: connection lost with %s in flight; retrying", self.transactional_id,
                     type(handler).__name__)
            handler.retry(now, find_coordinator=True)

    # ------------------------------------------------------------ outcomes

    def producer_id_received(self, producer_id: int, epoch: int, bumped: bool) -> None:
        self.sequences.set_producer_id_and_epoch(producer_id, epoch)
        self._transition_to(S.READY, from_sender=True)
        if bumped:
            self.sequences.reset_sequence_numbers()
            self.epoch_bump_required = False
            # Normally done at EndTxn; an abort after INVALID_PRODUCER_ID_MAPPING skips it, and the next
            # transaction must add its partitions again (the coordinator knows none of them).
            self._forget_transaction()

    def partitions_added(self, streams: Iterable[int]) -> None:
        added = set(streams)
        self.partitions_in_transaction |= added
        self.transaction_started = True
        log.debug("%s: added %s to the transaction", self.transactional_id,
                  sorted(self.partitions.names[n] for n in added))
        self.on_partitions_changed(added)

    def complete_transaction(self) -> None:
        """EndTxn succeeded (or was not needed): ready for the next, or for the epoch bump queued after it."""
        self._transition_to(S.INITIALIZING if self.epoch_bump_required else S.READY, from_sender=True)
        self.epoch_bump_required = False
        self._forget_transaction()

    def _forget_transaction(self) -> None:
        self.transaction_started = False
        self.new_partitions.clear()
        self.pending_partitions.clear()
        changed = list(self.partitions_in_transaction)
        self.partitions_in_transaction.clear()  # in place: the accumulator holds this set
        self.pending_offsets.clear()
        self.on_partitions_changed(changed)

    def handle_failed_batch(self, batch: ProducerBatch) -> None:
        """A batch of the transaction failed for good: the producer is fenced, or the transaction abortable
        (Kafka's maybeTransitionToErrorState)."""
        error = batch.error
        code = error.error_code if error is not None else E.UNKNOWN_SERVER_ERROR
        if code in _FENCED:
            self.transition_to_fatal(_fenced(self.transactional_id))
        elif code in _FATAL_CODES:
            self.transition_to_fatal(TransactionFatalError(str(error), code))
        else:
            # A failed batch leaves the broker's sequences uncertain: the abort bumps the epoch to restart them,
            # unless the failure came while completing (Kafka's rule; an expired batch still asks for it through
            # its unresolved sequences).
            if not self.is_completing:
                self.epoch_bump_required = True
            self.transition_to_abortable(TransactionAbortableError(
                f"a batch of the transaction failed with {error_name(code)}: {error}", code))

    def sequences_unresolved(self, topic_partition: tuple[str, int]) -> None:
        """Batches expired after being sent and nothing acknowledged them since: abort, with an epoch bump."""
        self.epoch_bump_required = True
        topic, partition = topic_partition
        self.transition_to_abortable(TransactionAbortableError(
            f"{topic}-{partition}: the producer has no acknowledgment for batches it sent and can no longer retry "
            "them; it is safe to abort the transaction and go on"))

    @property
    def fatal_error(self) -> TransactionFatalError | None:
        error = self.last_error
        return error if self.state is S.FATAL_ERROR and isinstance(error, TransactionFatalError) else None


class TransactionalSequences(IdempotenceManager):
    """The idempotence bookkeeping with Kafka's rules for a transactional producer: never an epoch bump of its
    own (the coordinator owns the epoch); a failed batch or unresolved sequences make the transaction
    abortable instead, and the abort's InitProducerId bumps the epoch."""

    def __init__(self, partitions: PartitionArrays, manager: TransactionManager) -> None:
        super().__init__(partitions)
        self.manager = manager

    def can_retry(self, batch: ProducerBatch, error_code: int) -> bool:
        """Kafka's TransactionManager.canRetry for a transactional producer."""
        number = batch.stream
        if error_code == ErrorCode.UNKNOWN_PRODUCER_ID:
            return batch.sequence_reset  # see the module docstring
        if error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            # Retried when an earlier batch failed (this one is not the next); else a real gap: the batch fails.
            return number not in self.unresolved_next and (
                batch.sequence_reset or not self._is_next_sequence(number, batch.base_sequence))
        return error_code in RETRIABLE_ERRORS

    def handle_failed_batch(self, batch: ProducerBatch, error_code: int, adjust_sequences: bool) -> None:
        self.manager.handle_failed_batch(batch)
        self.remove_inflight(batch)
        if self.manager.has_fatal_error:
            return
        if error_code == ErrorCode.UNKNOWN_PRODUCER_ID:
            # The broker lost the producer and takes sequence 0 next: this partition starts again once its
            # batches in flight are done (the kernel restarts a partition whose owner is not the producer).
            self.partitions.partition_producer_id[batch.stream] = NO_PRODUCER_ID
            self._clear_unresolved(batch.stream)
        elif adjust_sequences:
            self._adjust_sequences_due_to_failed_batch(batch)

    def _adjust_sequences_due_to_failed_batch(self, batch: ProducerBatch) -> None:
        """The broker refused the batch for good, so its sequences were never used: the batches after it move
        down by its record count (Kafka's adjustSequencesDueToFailedBatch), so they are not refused as out of
        order before the abort."""
        number = batch.stream
        p = self.partitions
        if batch.base_sequence < 0 or int(p.partition_producer_id[number]) != batch.producer_id \
                or int(p.partition_epoch[number]) != batch.producer_epoch:
            return  # its sequences belong to an earlier epoch, already restarted
        count = batch.record_count
        p.next_sequence[number] = seq_sub(int(p.next_sequence[number]), count)
        for later in self.inflight.get(number, ()):
            # The failed batch has left the in-flight list; those after it in sequence order move down.
            if later.base_sequence >= 0 and seq_at_or_before(batch.base_sequence, later.base_sequence):
                later.set_producer_state(later.producer_id, later.producer_epoch,
                                         seq_sub(later.base_sequence, count))
        self._sync_inflight(number)

    def maybe_resolve_sequences(self) -> None:
        """Once a partition with expired batches has nothing in flight: resolved if every sequence was
        acknowledged; otherwise the transaction must abort (and bump the epoch)."""
        for number in list(self.unresolved_next):
            if self.has_inflight(number):
                continue
            if not self._is_next_sequence(number, int(self.partitions.next_sequence[number])):
                self.manager.sequences_unresolved(self.partitions.names[number])
            self._clear_unresolved(number)

    def reset_sequence_numbers(self) -> None:
        """After the coordinator bumped the epoch: every partition restarts at sequence 0 (the drain kernel does
        so for a partition whose recorded epoch is not the producer's) and nothing is unresolved."""
        for number in list(self.unresolved_next):
            self._clear_unresolved(number)
        for number, batches in self.inflight.items():
            if batches:
                log.warning("%s: %d batches still in flight at an epoch bump", self.partitions.names[number],
                            len(batches))
        p = self.partitions
        p.partition_producer_id[:] = NO_PRODUCER_ID
        p.last_acked_sequence[:] = -1
