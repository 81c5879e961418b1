"""Coordinator answers that wait for replication, for a broker in a cluster.

Kafka's coordinators append their records with acks=all and answer only from the append's callback
(``TransactionStateManager.appendTransactionToLog``, ``GroupMetadataManager.storeOffsets``): InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit and OffsetCommit are answered once the record is on
every replica in sync, so a client never hears of a decision a new leader of the coordinator's partition would not
know. A partition leader answers WriteTxnMarkers the same way (``KafkaApis.handleWriteTxnMarkersRequest`` appends
with acks=all). Here the coordinators write through the broker's request path and are answered in place (the
write is durable then, not replicated); :class:`ReplicationGate` holds their answers back: given the answer and,
per partition written, the log end right after the handler ran, it returns the answer at once when the partition's
high watermark has reached that end, else a :class:`Pending` completed when it does (the broker calls
:meth:`ReplicationGate.replicated` when a high watermark moves) or with an error when the partition stops being
led here (NOT_LEADER_OR_FOLLOWER) or the deadline passes (REQUEST_TIMED_OUT), each turned into what the request's
client expects by the ``rewrite`` the caller passes (Kafka's mapping of append errors: see
:func:`transaction_error`, :func:`offset_commit_error`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from idemcore.broker.coordinator import coordinator_error
from idemcore.broker.partition import Partition
from idemcore.net.group_admin import DeleteGroupsResponse, OffsetDeleteResponse
from idemcore.net.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    OffsetCommitResponse,
    PartitionResult,
    Pending,
    TxnOffsetCommitResponse,
)
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

E = ErrorCode
#: Kafka's ``request.timeout.ms``: how long a transaction coordinator's append and a leader's markers wait.
DEFAULT_APPEND_TIMEOUT_MS = 30_000
#: Kafka's ``offsets.commit.timeout.ms``: how long an offset commit waits for its replicas.
DEFAULT_OFFSET_COMMIT_TIMEOUT_MS = 5_000

#: ``rewrite(codes)``: the answer when some partition failed; ``codes`` has one error code per wait (0: replicated).
Rewrite = Callable[[Sequence[int]], Any]


@dataclass(slots=True)
class _Wait:
    partition: Partition
    end: int
    leader_epoch: int
    code: int | None = None


@dataclass(slots=True)
class _Answer:
    response: Any
    waits: list[_Wait]
    rewrite: Rewrite
    deadline_ms: int
    pending: Pending = field(default_factory=Pending)


class ReplicationGate:
    """Answers held until their records are replicated (module docstring). ``clock``: the broker's ms;
    ``isr_short(partition)``: why its ISR is below ``min.insync.replicas`` now, or None (then a replicated record
    is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka's DelayedProduce does); ``schedule(delay_s, call)``:
    runs ``call`` later on the broker's loop (the deadlines; None: only :meth:`expire` answers them);
    ``moved(partition)``: told when a check moved a high watermark (others waiting on it must hear)."""

    def __init__(self, clock: Callable[[], int], *, isr_short: Callable[[Partition], str | None] | None = None,
                 schedule: Callable[[float, Callable[[], None]], object] | None = None,
                 moved: Callable[[Partition], None] | None = None) -> None:
        self._clock = clock
        self._moved = moved
        self._isr_short = isr_short
        self.schedule = schedule
        self._waiting: dict[tuple[str, int], list[_Answer]] = {}

    @property
    def waiting(self) -> int:
        """Answers held now."""
        return len({id(answer) for answers in self._waiting.values() for answer in answers})

    def answer(self, response: Any, waits: Sequence[tuple[Partition, int]], rewrite: Rewrite,
               timeout_ms: int = DEFAULT_APPEND_TIMEOUT_MS) -> Any:
        """``response`` now if every ``(partition, end)`` is replicated up to ``end`` (or failed: then
        ``rewrite(codes)``), else a Pending completed with one of them when the last wait is settled."""
        held = _Answer(response, [_Wait(partition, end, partition.leader_epoch) for partition, end in waits],
                       rewrite, self._clock() + timeout_ms)
        if self._settle(held):
            return self._final(held)
        for wait in held.waits:
            if wait.code is None:
                self._waiting.setdefault((wait.partition.topic, wait.partition.partition), []).append(held)
        if self.schedule is not None:
            self.schedule(timeout_ms / 1000, self._expire_now)
        return held.pending

    def replicated(self, topic: str, partition: int) -> int:
        """A partition's high watermark moved, or its leadership or ISR changed: the answers waiting on it are
        checked; answers how many went out."""
        answers = self._waiting.pop((topic, partition), None)
        if not answers:
            return 0
        done = 0
        still: list[_Answer] = []
        for held in answers:
            if held.pending.done:
                continue
            if self._settle(held):
                held.pending.complete(self._final(held))
                done += 1
            else:
                still.append(held)
        if still:
            self._waiting.setdefault((topic, partition), []).extend(still)
        return done

    def expire(self, now_ms: int | None = None) -> int:
        """Answer those whose deadline passed: their unsettled partitions REQUEST_TIMED_OUT; how many."""
        now = self._clock() if now_ms is None else now_ms
        done = 0
        for key in list(self._waiting):
            still = []
            for held in self._waiting[key]:
                if held.pending.done:
                    continue
                if not self._settle(held) and held.deadline_ms > now:
                    still.append(held)
                    continue
                for wait in held.waits:
                    if wait.code is None:
                        wait.code = E.REQUEST_TIMED_OUT
                held.pending.complete(self._final(held))
                done += 1
            if still:
                self._waiting[key] = still
            else:
                del self._waiting[key]
        return done

    def _expire_now(self) -> None:
        self.expire()

    def _settle(self, held: _Answer) -> bool:
        """Settle what can be settled now; True once every wait is."""
        for wait in held.waits:
            if wait.code is None:
                wait.code = self._status(wait)
        return all(wait.code is not None for wait in held.waits)

    def _status(self, wait: _Wait) -> int | None:
        partition = wait.partition
        if (not partition.is_leader or partition.leader_epoch != wait.leader_epoch
                or partition.log.log_end_offset < wait.end):
            return E.NOT_LEADER_OR_FOLLOWER  # deposed: the record may be lost with this leader's history
        # Kafka's appendRecordsToLeader moves the high watermark after each append; with the leader alone in
        # the ISR nothing else would.
        if partition.maybe_increment_high_watermark() and self._moved is not None:
            self._moved(partition)
        if partition.high_watermark < wait.end:
            return None
        if self._isr_short is not None and self._isr_short(partition) is not None:
            return E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return E.NONE

    @staticmethod
    def _final(held: _Answer) -> Any:
        codes = [int(wait.code or 0) for wait in held.waits]
        if any(codes):
            failed = [f"{w.partition.name}: {E(c).name}" for w, c in zip(held.waits, codes, strict=True) if c]
            log.info("a coordinator answer is not replicated: %s", ", ".join(failed))
            return held.rewrite(codes)
        return held.response


# ------------------------------------------------------------------ what clients see when the append failed


def transaction_error(append_error: int) -> ErrorCode:
    """The transaction coordinator's answer when its record did not replicate (Kafka's
    ``appendTransactionToLog``: NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR, REQUEST_TIMED_OUT and
    NOT_ENOUGH_REPLICAS_AFTER_APPEND -> COORDINATOR_NOT_AVAILABLE)."""
    return coordinator_error(append_error)


def offset_commit_error(append_error: int) -> ErrorCode:
    """The group coordinator's answer when an offset commit did not replicate (Kafka's
    ``GroupMetadataManager.storeOffsets``: NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR, NOT_ENOUGH_REPLICAS* ->
    COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT stays)."""
    if append_error == E.REQUEST_TIMED_OUT:
        return E.REQUEST_TIMED_OUT
    return coordinator_error(append_error)


def with_error(response: Any, code: int) -> Any:
    """A coordinator's answer with ``code`` in place of its success: the one code of InitProducerId (its id and
    epoch withheld), AddOffsetsToTxn, EndTxn; every partition answered NONE of AddPartitionsToTxn, OffsetCommit
    and TxnOffsetCommit (those that failed before the append keep their own error)."""
    if isinstance(response, InitProducerIdResponse):
        return InitProducerIdResponse(code, request_id=response.request_id)
    if isinstance(response, AddOffsetsToTxnResponse | EndTxnResponse):
        return replace(response, error_code=code)
    if isinstance(response, AddPartitionsToTxnResponse | OffsetCommitResponse | TxnOffsetCommitResponse):
        return replace(response, results=tuple(
            PartitionResult(r.topic, r.partition, code) if r.error_code == E.NONE else r for r in response.results))
    if isinstance(response, OffsetDeleteResponse):  # the whole request failed: Kafka's top-level error
        return replace(response, error_code=code, results=())
    if isinstance(response, DeleteGroupsResponse):
        return replace(response, results=tuple((g, code if c == E.NONE else c) for g, c in response.results))
    raise TypeError(f"no error can be put in a {type(response).__name__}")


def succeeded(response: Any) -> bool:
    """Whether a coordinator's answer reports a write (anything answered NONE): only those wait."""
    if isinstance(response, AddPartitionsToTxnResponse | OffsetCommitResponse | TxnOffsetCommitResponse):
        return any(r.error_code == E.NONE for r in response.results)
    if isinstance(response, DeleteGroupsResponse):
        return any(code == E.NONE for _, code in response.results)
    return getattr(response, "error_code", None) == E.NONE
