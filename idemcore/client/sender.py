"""The sender: one round drains the accumulator into a request, handles responses, timeouts and retries."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

from idemcore.client.accumulator import RecordAccumulator
from idemcore.client.batch import ProducerBatch
from idemcore.client.config import ProducerConfig
from idemcore.client.idempotence import IdempotenceManager
from idemcore.client.transactions import TransactionManager
from idemcore.net.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
)
from idemcore.net.transport import Transport, connection_broke
from idemcore.protocol.codes import RETRIABLE_ERRORS, ErrorCode
from idemcore.protocol.constants import NO_OFFSET

log = logging.getLogger(__name__)


@dataclass
class SenderStats:
    requests: int = 0
    retries: int = 0
    failed_batches: int = 0
    expired_batches: int = 0
    request_timeouts: int = 0
    split_batches: int = 0  # halved after MESSAGE_TOO_LARGE
    sent: int = 0  # requests of every kind put on the transport


@dataclass
class _InFlight:
    request: ProduceRequest
    batches: list[ProducerBatch]
    sent_ms: int


class Sender:
    def __init__(self, config: ProducerConfig, accumulator: RecordAccumulator,
                 idempotence: IdempotenceManager | None, transport: Transport, client_id: str) -> None:
        self.config = config
        self.accumulator = accumulator
        self.idempotence = idempotence
        self.transport = transport
        self.client_id = client_id
        self.stats = SenderStats()
        self.busy = False  # whether the last round handled an answer or sent a request
        self.inflight: dict[int, _InFlight] = {}
        self._init_pending: tuple[int, int] | None = None  # (request id, sent ms) of an InitProducerId
        self._request_ids = itertools.count(1)
        self.fatal_error: str | None = None
        #: A transactional producer's TransactionManager (set by the producer): its requests go out before any
        #: produce request of the round, and only partitions it added are drained.
        self.transactions: TransactionManager | None = None
        self._transactional = False

    # ------------------------------------------------------------ one round

    def has_pending_work(self) -> bool:
        return bool(self.inflight) or self.accumulator.has_queued()

    def set_transactions(self, transactions: TransactionManager) -> None:
        self.transactions = transactions
        self._transactional = True

    def run_once(self) -> None:
        now = self.transport.now_ms()
        answers = self.transport.poll(self.client_id)
        sent_before = self.stats.sent
        self.busy = bool(answers)
        for request, response in answers:
            self._handle_response(request, response, now)
        try:
            self._round(now)
        finally:
            # Whether this round moved anything (an answer handled, a request sent): the producer lets time pass
            # (transport.tick) only after a round that did not, so an in-process exchange runs without waits.
            self.busy = self.busy or self.stats.sent != sent_before

    def _round(self, now: int) -> None:
        self._expire(now)
        idem = self.idempotence
        if self.transactions is not None:
            if self._run_transactions(self.transactions, now):
                return
        elif idem is not None:
            idem.maybe_resolve_sequences()
            if idem.epoch_bump_required:
                idem.bump_epoch_if_needed()
                self.accumulator.mark_all_dirty()
            if not idem.has_producer_id:
                self._request_producer_id(now)
                return
        if len(self.inflight) < self.config.max_in_flight_requests_per_connection and self.accumulator.ready(now):
            batches = self.accumulator.drain(now, self.config.max_request_size)
            if batches:
                self._send(batches, now)

    def _send_request(self, request: Request) -> None:
        self.stats.sent += 1
        self.transport.send(self.client_id, request)

    def _run_transactions(self, txn: TransactionManager, now: int) -> bool:
        """The transactional part of a round (Kafka's Sender.runOnce and maybeSendAndPollTransactionalRequest);
        True when no produce request may go out this round."""
        txn.sequences.maybe_resolve_sequences()
        fatal = txn.fatal_error
        if fatal is not None:
            if self.has_pending_work():  # nothing more is sent: every batch fails with the fatal error
                self._fail_everything(fatal.error_code or ErrorCode.UNKNOWN_SERVER_ERROR, str(fatal))
            return True
        if txn.has_in_flight_request:
            return True  # wait for its answer: it may decide what the batches may do
        if txn.has_abortable_error or txn.is_aborting:
            error = txn.last_error
            self.accumulator.abort_undrained(
                error.error_code if error is not None and error.error_code is not None
                else ErrorCode.TRANSACTION_ABORTABLE,
                f"not sent: the transaction must be aborted ({error})" if error is not None
                else "not sent: the transaction was aborted")
        request = txn.next_request(now, self.has_pending_work(), self._request_ids)
        if request is not None:
            self._send_request( request)
            return True
        return not txn.has_producer_id

    def _request_producer_id(self, now: int) -> None:
        if self._init_pending is not None and now - self._init_pending[1] < self.config.request_timeout_ms:
            return
        request_id = next(self._request_ids)
        self._init_pending = (request_id, now)
        self._send_request( InitProducerIdRequest(request_id))

    def _send(self, batches: list[ProducerBatch], now: int) -> None:
        transactional = self._transactional
        request = ProduceRequest(tuple(b.to_wire(transactional) for b in batches), self.config.acks,
                                 self.config.request_timeout_ms, next(self._request_ids))
        self.stats.requests += 1
        for batch in batches:
            batch.last_attempt_ms = now
        self._send_request( request)
        if self.config.acks == 0:
            for batch in batches:  # nobody answers: delivered as far as the producer can know
                batch.complete(NO_OFFSET)
                if self.idempotence is not None:
                    self.idempotence.handle_completed_batch(batch)
            return
        self.inflight[request.request_id] = _InFlight(request, batches, now)

    # ------------------------------------------------------------ responses

    def _handle_response(self, request: Request, response: Response, now: int) -> None:
        if self.transactions is not None and not isinstance(response, ProduceResponse):
            self.transactions.handle_response(request, response, now)
            return
        if isinstance(response, InitProducerIdResponse):
            if self._init_pending is None or request.request_id != self._init_pending[0]:
                return  # an answer to a request we gave up on
            self._init_pending = None
            # Only an idempotent producer sends InitProducerId (run_once asks only when idempotence is set).
            assert self.idempotence is not None
            if response.error_code == ErrorCode.NONE:
                self.idempotence.set_producer_id_and_epoch(response.producer_id, response.producer_epoch)
            elif response.error_code not in RETRIABLE_ERRORS:
                self.fatal_error = f"InitProducerId failed: {ErrorCode(response.error_code).name}" + \
                    (f" ({response.error_message})" if response.error_message else "")
                self._fail_everything(response.error_code, self.fatal_error)
            return
        assert isinstance(response, ProduceResponse)
        entry = self.inflight.pop(response.request_id, None)
        if entry is None:
            return  # the request timed out earlier; this late answer is ignored
        for batch, answer in zip(entry.batches, response.responses, strict=True):
            if not batch.done:
                self._complete_batch(batch, answer.error_code, answer.base_offset, now, answer.error_message,
                                     from_broker=answer.error_message is not None)

    def _complete_batch(self, batch: ProducerBatch, error_code: int, base_offset: int, now: int,
                        message: str | None = None, from_broker: bool = False) -> None:
        idem = self.idempotence
        if error_code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER) or \
                (idem is not None and idem.is_already_written(batch, error_code)):
            # Older brokers' DUPLICATE_SEQUENCE_NUMBER, or a sequence already passed: written, offset unknown.
            batch.complete(base_offset if error_code == ErrorCode.NONE else NO_OFFSET)
            if idem is not None:
                idem.handle_completed_batch(batch)
        elif error_code == ErrorCode.MESSAGE_TOO_LARGE and batch.record_count > 1:
            # Kafka splits a batch the broker finds too large and sends the halves, sequences kept.
            self.stats.split_batches += 1
            parts = batch.split()
            if idem is not None:
                idem.replace_inflight(batch, parts)
            for part in reversed(parts):
                self.accumulator.reenqueue(part, now, attempt=False)
        elif self._can_retry(batch, error_code, now):
            self.stats.retries += 1
            log.debug("retrying %r after %s", batch, message or ErrorCode(error_code).name)
            self.accumulator.reenqueue(batch, now)
        else:
            self.stats.failed_batches += 1
            batch.fail(error_code, message or "the broker rejected the batch", from_broker=from_broker)
            if idem is not None:
                idem.handle_failed_batch(batch, error_code, adjust_sequences=True)
                self.accumulator.mark_dirty((batch.stream,))  # a transactional producer moves later sequences down

    def _can_retry(self, batch: ProducerBatch, error_code: int, now: int) -> bool:
        if now - batch.created_ms >= self.config.delivery_timeout_ms or batch.attempts >= self.config.retries:
            return False
        if self.idempotence is not None:
            return self.idempotence.can_retry(batch, error_code)
        return error_code in RETRIABLE_ERRORS

    # ------------------------------------------------------------ time limits

    def _expire(self, now: int) -> None:
        # A request unanswered past request_timeout_ms breaks the connection: every request on it fails.
        txn = self.transactions
        broke = connection_broke(self.transport, self.client_id)  # lost at once: no need to wait for the timeout
        if broke or any(now - entry.sent_ms >= self.config.request_timeout_ms for entry in self.inflight.values()) or (
                txn is not None and txn.request_timed_out(now, self.config.request_timeout_ms)):
            if not broke:
                self.stats.request_timeouts += 1
            self.transport.disconnect(self.client_id)
            self._init_pending = None  # an InitProducerId on that connection is lost too: ask again
            if txn is not None:
                txn.connection_lost(now)  # one connection carries both: its request is sent again
            entries = sorted(self.inflight.values(), key=lambda e: e.request.request_id)
            self.inflight.clear()
            for entry in entries:
                for batch in entry.batches:
                    if not batch.done:
                        self._complete_batch(batch, ErrorCode.NETWORK_EXCEPTION, NO_OFFSET, now,
                                             "the connection broke" if broke else
                                             f"no answer within request_timeout_ms={self.config.request_timeout_ms}")
        timeout = self.config.delivery_timeout_ms
        expired = self.accumulator.expired(now)
        for entry in self.inflight.values():
            expired += [b for b in entry.batches if not b.done and now - b.created_ms >= timeout]
        for batch in expired:
            self.stats.expired_batches += 1
            batch.fail(ErrorCode.REQUEST_TIMED_OUT, f"delivery timeout of {timeout} ms expired")
            if self.idempotence is not None:
                self.idempotence.handle_failed_batch(batch, ErrorCode.REQUEST_TIMED_OUT, adjust_sequences=False)
                if batch.base_sequence >= 0:
                    self.idempotence.mark_unresolved(batch)  # sent at least once: the broker may have it

    def _fail_everything(self, error_code: int, message: str) -> None:
        for queue in self.accumulator.queues:
            while queue:
                queue.popleft().fail(error_code, message)
        self.accumulator.mark_all_dirty()
        for entry in self.inflight.values():
            for batch in entry.batches:
                if not batch.done:
                    batch.fail(error_code, message)
        self.inflight.clear()
