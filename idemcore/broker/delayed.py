"""The broker's waiting, off the request path: the purgatories of delayed fetches and produces, the log flusher
and its timers (Kafka's ``ReplicaManager`` owns the purgatories, ``LogManager`` the flusher and checkpoints).

A broker runs in one of two ways. **In process** (no loop given: the in-process transport, the simulated
network, programs calling ``Broker.handle``) nothing waits: a fetch is answered with what there is, an acks=all
produce is fsync'd before its answer, a roll fsyncs the old segment, the recovery points are written at start and
close; exactly as before this module existed. **On a loop** (:meth:`DelayedOperations.start`, which the TCP server
calls with its asyncio loop): a fetch with less than ``min_bytes`` waits in the fetch purgatory, an acks=all produce
(with ``fsync``) in the produce purgatory until the flusher thread made its partitions durable (group commit),
rolls and checkpoint writes go to that thread, and Kafka's ``flush.messages`` / ``flush.ms`` and
``log.flush.offset.checkpoint.interval.ms`` run on the loop's timers. :meth:`stop` goes back to the first way.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from idemcore.broker.flusher import NEVER_MS, FlushScheduler, LogFlusher
from idemcore.broker.log import PartitionLog
from idemcore.broker.purgatory import (
    DelayedFetch,
    DelayedProduce,
    EventLoop,
    FindPartition,
    Purgatory,
    TimerHandle,
    answered_at_once,
)
from idemcore.broker.topic_config import TopicConfig
from idemcore.checks import int_setting
from idemcore.net.messages import FetchRequest, FetchResponse, Pending, ProduceResponse

log = logging.getLogger(__name__)


class ReplicationView(Protocol):
    """What a delayed produce asks of replication, by log: its high watermark (None: not replicated), why its
    ISR is below ``min.insync.replicas`` now (None: it is not) and why this broker no longer leads it (None: it
    does)."""

    def high_watermark(self, partition_log: PartitionLog) -> int | None: ...

    def isr_short(self, partition_log: PartitionLog) -> str | None: ...

    def not_leader(self, partition_log: PartitionLog) -> str | None: ...

#: The interpreter's thread switch interval while the flusher runs beside the loop (Python's default is 5 ms): a
#: thread coming back from an fsync waits that long for the GIL while the loop is busy, once per fsync, so with the
#: default an acks=all answer behind 8 partitions' fsyncs took 15-100 ms under load, and 5 ms with this.
SWITCH_INTERVAL_S = 0.0005
#: Kafka's ``log.flush.offset.checkpoint.interval.ms`` default.
DEFAULT_RECOVERY_POINT_CHECKPOINT_MS = 60_000


class DelayedOperations:
    """The broker's delayed operations and flusher (module docstring).

    ``find_partition(topic, partition)``: a partition or None; ``read(request)``: the fetch path; ``clock``: the
    broker's time in ms; ``checkpoint_path``: where the recovery points go (None: a broker in memory);
    ``checkpoint_entries()``: that file's entries as the broker last wrote them (those of logs not tracked here are
    written again as they are); ``scheduler_interval_ms``: Kafka's ``log.flush.scheduler.interval.ms`` (0: never);
    ``checkpoint_interval_ms``: Kafka's ``log.flush.offset.checkpoint.interval.ms`` (0: only at start and close)."""

    def __init__(self, find_partition: FindPartition,
                 read: Callable[[FetchRequest], FetchResponse], clock: Callable[[], int], *,
                 checkpoint_path: Path | None, checkpoint_entries: Callable[[], Mapping[tuple[str, int], int]],
                 scheduler_interval_ms: int = NEVER_MS,
                 checkpoint_interval_ms: int = DEFAULT_RECOVERY_POINT_CHECKPOINT_MS,
                 on_log_failure: Callable[[str], None] | None = None) -> None:
        int_setting("scheduler_interval_ms", scheduler_interval_ms, 0)
        int_setting("checkpoint_interval_ms", checkpoint_interval_ms, 0)
        self._find_partition = find_partition
        self._read = read
        self._clock = clock
        self._checkpoint_path = checkpoint_path
        self._checkpoint_entries = checkpoint_entries
        self._on_log_failure = on_log_failure
        self.scheduler_interval_ms = scheduler_interval_ms or NEVER_MS
        self.checkpoint_interval_ms = checkpoint_interval_ms or NEVER_MS
        self._loop: EventLoop | None = None
        self._thread: int | None = None
        self.fetches: Purgatory | None = None
        self.produces: Purgatory | None = None
        self.flusher: LogFlusher | None = None
        self.scheduler: FlushScheduler | None = None
        self._touched: dict[PartitionLog, None] = {}
        self._timers: dict[str, TimerHandle] = {}
        self._flush_check_ms = NEVER_MS
        #: A cluster's view of its partitions' high watermarks and ISR (None for a broker running alone).
        self.replication: ReplicationView | None = None
        #: Called with (topic, partition) each time :meth:`replicated` is (the coordinators' answers and markers).
        self.on_replicated: list[Callable[[str, int], None]] = []

    # --- life cycle -------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether a loop runs the broker (else every request is answered in place)."""
        return self._loop is not None

    def start(self, loop: EventLoop, logs: list[tuple[PartitionLog, TopicConfig]],
              recovery_points: Mapping[tuple[str, int], int]) -> None:
        """Run on ``loop`` (called on its thread): ``logs`` with their settings, each known durable below its
        recovery point (durable at start, or by a sync since)."""
        if self._loop is not None:
            raise RuntimeError("the broker's delayed operations already run on a loop")
        self._loop = loop
        self._thread = threading.get_ident()
        self._flush_check_ms = NEVER_MS
        _switch_interval(+1)
        self.fetches = Purgatory("fetch", loop)
        self.produces = Purgatory("produce", loop)
        self.flusher = LogFlusher(loop.call_soon_threadsafe)
        self.scheduler = FlushScheduler(self.flusher, self._durable, self._clock, self._on_log_failure)
        self.flusher.start()
        for partition_log, config in logs:
            self.track(partition_log, config, recovery_points.get((partition_log.topic, partition_log.partition), 0))
        self._every("checkpoint", self.checkpoint_interval_ms, self.write_recovery_points)

    def track(self, partition_log: PartitionLog, config: TopicConfig, flushed: int = 0) -> None:
        """Watch a log (one created while running starts durable at 0: nothing in it yet)."""
        if self.scheduler is None:
            return
        self.scheduler.track(partition_log, flushed, config.flush_messages, config.flush_ms)
        # flush.ms is checked every log.flush.scheduler.interval.ms, or as often as the smallest flush.ms when it is
        # shorter (Kafka checks only at the scheduler's interval, so a flush.ms alone would never act: here it does).
        interval = min(self.scheduler_interval_ms, self.scheduler.smallest_flush_ms())
        if interval < self._flush_check_ms:
            self._flush_check_ms = interval
            self._every("flush", interval, self.scheduler.flush_due)

    def stop(self) -> None:
        """Flush what is queued, stop the thread, answer what still waits (at its deadline answer), and answer in
        place from now on. The broker's close writes the final recovery points."""
        if self._loop is None:
            return
        assert self.flusher is not None and self.scheduler is not None
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.flusher.stop()  # what a completion asks from now on is done in place
        for purgatory in (self.fetches, self.produces):
            assert purgatory is not None
            purgatory.expire_all()
        self.scheduler.untrack_all()
        self._stopped()

    def _stopped(self) -> None:
        self._loop = None
        _switch_interval(-1)

    def abandon(self) -> None:
        """Stop as a killed process does: nothing more is flushed or answered."""
        if self._loop is None:
            return
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        assert self.flusher is not None and self.scheduler is not None
        self.flusher.abandon()
        self.scheduler.untrack_all()
        self._stopped()

    def _every(self, name: str, interval_ms: int, work: Callable[[], None]) -> None:
        """Run ``work`` on the loop every ``interval_ms`` (in place of what ran under ``name``)."""
        if interval_ms >= NEVER_MS or self._loop is None:
            return
        loop = self._loop
        if name in self._timers:
            self._timers.pop(name).cancel()

        def tick() -> None:
            if self._loop is not loop:
                return
            try:
                work()
            except Exception:  # a timer must keep running; the next round tries again
                log.exception("a periodic flush task failed")
            if self._timers.get(name) is handle[0]:
                handle[0] = self._timers[name] = loop.call_later(interval_ms / 1000, tick)
        handle = [loop.call_later(interval_ms / 1000, tick)]
        self._timers[name] = handle[0]

    # --- what the broker asks ---------------------------------------------------------------------------------

    @property
    def waits_for_flush(self) -> bool:
        """Whether an acks=all produce waits in the purgatory for the flusher instead of an fsync in place."""
        return self._loop is not None

    def fetch(self, request: FetchRequest) -> FetchResponse | Pending:
        """Kafka's ``fetchMessages``: the answer now when it is due now, else a delayed fetch."""
        response = self._read(request)
        if self.fetches is None or answered_at_once(request, response):
            return response
        return self.fetches.try_complete_else_watch(DelayedFetch(request, self._read, self._find_partition))

    def produce(self, response: ProduceResponse, waits: list[tuple[int, PartitionLog, int]],
                timeout_ms: int, *, flushed: bool = True) -> ProduceResponse | Pending:
        """Kafka's ``DelayedProduce`` for an acks=all answer: ``waits`` lists, per answered partition (its position
        in the answer), its log and the end that must be durable (``flushed``: with fsync on) and, for a replicated
        partition, below its high watermark before the answer goes out."""
        if self.produces is None or self.scheduler is None or not waits:
            return response
        scheduler = self.scheduler
        replication = self.replication
        operation = DelayedProduce(response, waits, timeout_ms, scheduler.durable_end if flushed else None,
                                   scheduler.failure, None if replication is None else replication.high_watermark,
                                   None if replication is None else replication.isr_short,
                                   None if replication is None else replication.not_leader)
        answer = self.produces.try_complete_else_watch(operation)
        if isinstance(answer, Pending) and flushed:
            for _, partition_log, end in waits:
                scheduler.request(partition_log, end)
        return answer

    def replicated(self, topic: str, partition: int) -> None:
        """A partition's high watermark moved or its ISR changed: the produces and fetches waiting on it are tried
        again (Kafka's ``tryCompleteDelayedRequests`` after ``maybeIncrementLeaderHW``)."""
        if self.produces is not None:
            self.produces.check_and_complete((topic, partition))
        if self.fetches is not None:
            self.fetches.check_and_complete((topic, partition))
        for hook in self.on_replicated:
            hook(topic, partition)

    def appended(self, partition_log: PartitionLog) -> None:
        """A log's ``on_append``: its waiting fetches are tried once the current request is done (Kafka's
        ``tryCompleteDelayedRequests``, run after the append and not inside it), and its flush rules applied."""
        if self._loop is None or self._thread != threading.get_ident():
            return
        if not self._touched:
            self._loop.call_soon(self._after_appends)
        self._touched[partition_log] = None

    def _after_appends(self) -> None:
        touched, self._touched = list(self._touched), {}
        if self.fetches is None or self.scheduler is None:
            return
        for partition_log in touched:
            self.fetches.check_and_complete((partition_log.topic, partition_log.partition))
            self.scheduler.appended(partition_log)

    def log_dir_failed(self, why: str) -> None:
        """The log directory failed: every log stops being flushed, and the produces waiting are answered."""
        if self.scheduler is not None:
            self.scheduler.fail_all(why)

    def _durable(self, partition_log: PartitionLog) -> None:
        if self.produces is not None:
            self.produces.check_and_complete((partition_log.topic, partition_log.partition))

    def write_recovery_points(self) -> None:
        """Kafka's ``checkpointLogRecoveryOffsets``: every log's flushed end (never more) to
        ``recovery-point-offset-checkpoint``, written on the flusher."""
        if self.scheduler is None or self._checkpoint_path is None:
            return
        self.scheduler.write_checkpoint(self._checkpoint_path,
                                        {**self._checkpoint_entries(), **self.scheduler.recovery_points()})

    def in_background(self, work: Callable[[], Any], done: Callable[[Any, BaseException | None], None]) -> None:
        """Run ``work()`` on the flusher thread, then ``done(result, error)`` on the loop."""
        assert self.flusher is not None, "only while running on a loop"
        job = _CallJob(work)
        self.flusher.submit(job, lambda error: done(job.result, error))


_switching = {"running": 0, "before": 0.0, "set": 0.0}


def _switch_interval(change: int) -> None:
    """Count the flushers running in this process: the first lowers the switch interval to
    :data:`SWITCH_INTERVAL_S`, the last puts back what was there (unless someone changed it meanwhile)."""
    if change > 0 and _switching["running"] == 0:
        _switching["before"] = sys.getswitchinterval()
        sys.setswitchinterval(min(_switching["before"], SWITCH_INTERVAL_S))
        _switching["set"] = sys.getswitchinterval()
    _switching["running"] += change
    if change < 0 and _switching["running"] == 0 and sys.getswitchinterval() == _switching["set"]:
        sys.setswitchinterval(_switching["before"])


class _CallJob:
    __slots__ = ("result", "work")

    def __init__(self, work: Callable[[], Any]) -> None:
        self.work = work
        self.result: Any = None

    def run(self) -> None:
        self.result = self.work()

    def abandon(self) -> None:
        pass
