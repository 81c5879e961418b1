"""Delayed operations, Kafka's purgatory model (``DelayedOperationPurgatory``, ``DelayedFetch``,
``DelayedProduce``): an answer the broker gives later, watched under the keys it waits on (topic-partitions),
tried again whenever one of them changes, and answered at its deadline at the latest.

- :class:`Purgatory`: ``try_complete_else_watch`` answers at once when it can, else parks the operation under its
  keys with a timer; ``check_and_complete(key)`` tries only the operations watching ``key`` (an append wakes the
  fetches of that partition, not every fetch); the timer answers what is still waiting at its deadline.
- :class:`DelayedFetch`: complete once ``min_bytes`` are readable on its partitions (counted as Kafka's
  ``tryComplete`` counts them: bytes between the fetch position and the end it may read, the high watermark or,
  read_committed, the last stable offset, within each partition's limit), or at once when a partition went away,
  its log start passed the fetch offset, or the end moved to another segment; at ``max_wait_ms`` it is answered
  with whatever there is. Either way the answer is read afresh from the log (``onComplete``).
- :class:`DelayedProduce`: an acks=all answer held until every partition it wrote is durable (fsync'd, when the
  broker fsyncs) and, in a cluster, below the high watermark up to the end it reached; answered KAFKA_STORAGE_ERROR
  for a partition whose flush failed, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below
  ``min.insync.replicas`` meanwhile, REQUEST_TIMED_OUT for one still waiting at the request's ``timeout_ms``.

Everything here runs on the broker's thread (the event loop): the flusher thread reports through it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from idemcore.broker.log import PartitionLog
from idemcore.net.messages import FetchPartition, FetchRequest, FetchResponse, Pending, ProduceResponse, Response
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import READ_COMMITTED

if TYPE_CHECKING:
    from idemcore.broker.partition import Partition


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class EventLoop(Protocol):
    """What the broker needs of the loop it runs on (an asyncio loop has it all)."""

    def call_soon(self, callback: Callable[[], Any]) -> Any: ...

    def call_later(self, delay: float, callback: Callable[[], Any]) -> TimerHandle: ...

    def call_soon_threadsafe(self, callback: Callable[[], Any]) -> Any: ...


R = TypeVar("R", bound=Response)


class DelayedOperation(ABC, Generic[R]):
    """An answer given later (its :attr:`pending`), watched under :attr:`keys`. Subclasses say when it can be
    answered (:meth:`try_complete`) and what it answers at its deadline (:meth:`expired`)."""

    def __init__(self, keys: Iterable[Hashable], timeout_ms: int) -> None:
        self.keys = tuple(dict.fromkeys(keys))
        self.timeout_ms = max(0, timeout_ms)
        self.pending = Pending()
        self.timer: TimerHandle | None = None

    @abstractmethod
    def try_complete(self) -> R | None:
        """The answer, if the operation can be answered now; None to keep waiting."""

    @abstractmethod
    def expired(self) -> R:
        """The answer at the deadline."""


class Purgatory:
    """Delayed operations of one kind, watched by key (module docstring), timed on ``loop``."""

    def __init__(self, name: str, loop: EventLoop) -> None:
        self.name = name
        self._loop = loop
        self._watchers: dict[Hashable, dict[DelayedOperation[Any], None]] = {}
        #: Counts for tests and logs: ``checks`` is how often an operation was tried again after a key changed.
        self.stats = {"delayed": 0, "checks": 0, "completed": 0, "expired": 0}

    @property
    def watched(self) -> int:
        """Operations waiting (each counted once)."""
        return len({op for ops in self._watchers.values() for op in ops})

    def try_complete_else_watch(self, operation: DelayedOperation[R]) -> R | Pending:
        answer = operation.try_complete()
        if answer is not None:
            return answer
        self.stats["delayed"] += 1
        for key in operation.keys:
            self._watchers.setdefault(key, {})[operation] = None
        operation.timer = self._loop.call_later(operation.timeout_ms / 1000, lambda: self._expire(operation))
        return operation.pending

    def check_and_complete(self, key: Hashable) -> int:
        """Try the operations watching ``key``; how many were answered."""
        watching = self._watchers.get(key)
        if not watching:
            return 0
        answered = 0
        for operation in list(watching):
            if operation.pending.done:
                continue
            self.stats["checks"] += 1
            answer = operation.try_complete()
            if answer is not None:
                self.stats["completed"] += 1
                self._finish(operation, answer)
                answered += 1
        return answered

    def expire_all(self) -> None:
        """Answer everything still waiting with its deadline answer (the broker stops running its loop)."""
        for operation in list({op: None for ops in self._watchers.values() for op in ops}):
            self._expire(operation)

    def _expire(self, operation: DelayedOperation[Any]) -> None:
        if operation.pending.done:
            return
        self.stats["expired"] += 1
        self._finish(operation, operation.expired())

    def _finish(self, operation: DelayedOperation[Any], answer: Response) -> None:
        for key in operation.keys:
            watching = self._watchers.get(key)
            if watching is not None:
                watching.pop(operation, None)
                if not watching:
                    del self._watchers[key]
        if operation.timer is not None:
            operation.timer.cancel()
            operation.timer = None
        operation.pending.complete(answer)


#: Finds a partition, None when the broker has none of that name.
FindPartition = Callable[[str, int], "Partition | None"]


class DelayedFetch(DelayedOperation[FetchResponse]):
    """A fetch that found less than ``min_bytes`` (module docstring). ``read`` answers the request from the logs as
    they are (the fetch path); ``find_partition`` finds a partition. A consumer waits for data below the high
    watermark (read_committed: the last stable offset), a follower for data below the log end."""

    def __init__(self, request: FetchRequest, read: Callable[[FetchRequest], FetchResponse],
                 find_partition: FindPartition) -> None:
        super().__init__(((p.topic, p.partition) for p in request.partitions), request.max_wait_ms)
        self.request = request
        self._read = read
        self._find_partition = find_partition
        self._committed = request.isolation_level == READ_COMMITTED
        self._follower = type(request.replica_id) is int and request.replica_id >= 0
        # Where each partition's fetch starts (Kafka's fetch offset metadata): its segment and byte there.
        self._starts: list[tuple[FetchPartition, int, int, int]] = []
        for wanted in request.partitions:
            partition = find_partition(wanted.topic, wanted.partition)
            if partition is not None:
                self._starts.append((wanted, partition.leader_epoch, *partition.log.position(wanted.fetch_offset)))

    def try_complete(self) -> FetchResponse | None:
        readable = 0
        for wanted, epoch, segment, position in self._starts:
            partition = self._find_partition(wanted.topic, wanted.partition)
            if (partition is None or not partition.is_leader or partition.leader_epoch != epoch
                    or wanted.fetch_offset < partition.log.log_start_offset):
                return self._read(self.request)  # gone, moved, or retention passed it: answered with its error now
            partition_log = partition.log
            if self._follower:
                end = partition_log.log_end_offset
            else:
                end = partition.last_stable_offset if self._committed else partition.high_watermark
            if end <= wanted.fetch_offset:
                continue
            end_segment, end_position = partition_log.position(end)
            if end_segment != segment:  # the log rolled past the fetch position: read rather than count
                return self._read(self.request)
            readable += min(max(0, end_position - position), wanted.partition_max_bytes)
        if readable >= max(1, self.request.min_bytes):
            return self._read(self.request)
        return None

    def expired(self) -> FetchResponse:
        return self._read(self.request)


def answered_at_once(request: FetchRequest, response: FetchResponse) -> bool:
    """Whether a fetch is answered without waiting (Kafka's ``fetchMessages``: no wait asked, nothing asked for,
    an error, or ``min_bytes`` already read)."""
    if type(request.max_wait_ms) is not int or type(request.min_bytes) is not int:  # not from the wire: no wait
        return True
    if request.max_wait_ms <= 0 or not request.partitions or response.error_code:
        return True
    read = 0
    for partition in response.partitions:
        if partition.error_code:
            return True
        read += len(partition.records)
    return read >= max(1, request.min_bytes)


class DelayedProduce(DelayedOperation[ProduceResponse]):
    """An acks=all answer held until its partitions are durable and, in a cluster, replicated (module docstring).
    ``waits``: for each answered partition (by its position in ``response.responses``) its log and the end it must
    reach before the answer goes out; ``durable_end(log)`` and ``failure(log)`` say how far a log is on disk and why
    its flush failed (None: the answer does not wait for the disk); ``replicated_end(log)``: its high watermark
    (None for a log that is not replicated) and ``isr_short(log)``: why its ISR is below ``min.insync.replicas``
    now (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND), or None; ``not_leader(log)``: why this broker no longer leads
    the log's partition (NOT_LEADER_OR_FOLLOWER), or None."""

    def __init__(self, response: ProduceResponse, waits: Iterable[tuple[int, PartitionLog, int]], timeout_ms: int,
                 durable_end: Callable[[PartitionLog], int] | None, failure: Callable[[PartitionLog], str | None],
                 replicated_end: Callable[[PartitionLog], int | None] | None = None,
                 isr_short: Callable[[PartitionLog], str | None] | None = None,
                 not_leader: Callable[[PartitionLog], str | None] | None = None) -> None:
        self._waits = list(waits)
        super().__init__(((log.topic, log.partition) for _, log, _ in self._waits), timeout_ms)
        self.response = response
        self._durable_end = durable_end
        self._failure = failure
        self._replicated_end = replicated_end
        self._isr_short = isr_short
        self._not_leader = not_leader
        self._failed: dict[int, tuple[int, str]] = {}

    def _reached(self, partition_log: PartitionLog, end: int) -> bool:
        if self._durable_end is not None and self._durable_end(partition_log) < end:
            return False
        if self._replicated_end is not None:
            high_watermark = self._replicated_end(partition_log)
            if high_watermark is not None and high_watermark < end:
                return False
        return True

    def try_complete(self) -> ProduceResponse | None:
        waiting = []
        for wait in self._waits:
            position, partition_log, end = wait
            why = self._failure(partition_log) if self._durable_end is not None else None
            moved = self._not_leader(partition_log) if self._not_leader is not None else None
            if why is not None:
                self._failed[position] = (ErrorCode.KAFKA_STORAGE_ERROR, why)
            elif moved is not None:
                # Kafka's checkEnoughReplicasReachOffset: no longer the leader, the batch may be truncated away
                # (as a follower, this log's high watermark follows the new leader's history, not this batch's).
                self._failed[position] = (ErrorCode.NOT_LEADER_OR_FOLLOWER, moved)
            elif not self._reached(partition_log, end):
                waiting.append(wait)
            elif self._isr_short is not None:
                short = self._isr_short(partition_log)
                if short is not None:  # written and replicated to fewer replicas than asked: not safely acked
                    self._failed[position] = (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, short)
        self._waits = waiting
        return None if waiting else self._answer({})

    def expired(self) -> ProduceResponse:
        self.try_complete()
        return self._answer({position: f"{log.name} was not durable and replicated up to offset {end} within the "
                                       f"request's timeout_ms={self.timeout_ms}" for position, log, end in self._waits})

    def _answer(self, timed_out: dict[int, str]) -> ProduceResponse:
        if not self._failed and not timed_out:
            return self.response
        answers = list(self.response.responses)
        for position, (code, why) in self._failed.items():
            answers[position] = dataclasses.replace(answers[position], error_code=code, base_offset=-1,
                                                    error_message=why)
        for position, why in timed_out.items():
            answers[position] = dataclasses.replace(answers[position], error_code=ErrorCode.REQUEST_TIMED_OUT,
                                                    base_offset=-1, error_message=why)
        return ProduceResponse(self.response.request_id, tuple(answers))
