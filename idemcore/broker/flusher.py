"""The log flusher: fsyncs and checkpoint writes on a thread of their own, so the event loop that answers every
connection never waits on the disk (Kafka's ``LogManager`` runs ``flushDirtyLogs`` and the checkpoints on its
scheduler threads, and a roll schedules the old segment's flush instead of running it).

Two halves. :class:`LogFlusher` is the threads: a few lanes that fsync side by side (a log's jobs always on the
same lane, in the order they came) and one for the rest; each outcome goes back to the broker's thread through
``post`` (the event loop's ``call_soon_threadsafe``) as soon as it is known. It touches no broker state: a job owns
what it works on (descriptors of its own, bytes to write). :class:`FlushScheduler` lives on
the broker's thread and decides what to flush and when:

- **group commit**: at most one fsync in flight per log; every wait for durability (an acks=all produce) that
  arrives meanwhile is covered by the next one, which fsyncs up to the log end at the moment it starts. So N
  requests waiting on a partition cost about two fsyncs, not N;
- **Kafka's flush settings**: a log with ``flush.messages`` or more records past its last flush is flushed
  (``UnifiedLog.append``), and one whose last flush is ``flush.ms`` old (checked every
  ``log.flush.scheduler.interval.ms``, or more often when a ``flush.ms`` is shorter) too;
- **rolls**: the old segment's files go to the flusher whole (their descriptors handed over before they close);
- **the recovery point**: per log, the offset below which everything is fsync'd; only a job that succeeded moves
  it, and only after the jobs of that log that came before it (one lane per log, in order), so it never counts a byte
  that is not on disk. ``recovery-point-offset-checkpoint`` is written from these every
  ``log.flush.offset.checkpoint.interval.ms`` (Kafka's ``checkpointLogRecoveryOffsets``).

A failed fsync fails the log for good (Kafka takes its log directory offline, since after a failed fsync the
kernel may have dropped the dirty pages it could not write, and a second fsync would wrongly succeed): its recovery
point stops, and everything waiting on it is answered KAFKA_STORAGE_ERROR, never acknowledged.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from idemcore.broker.log import LogSegment, PartitionLog
from idemcore.broker.log.partition_log import FlushTarget
from idemcore.record.kafka_files import encode_offset_checkpoint, write_file_atomically

log = logging.getLogger(__name__)

#: A setting at or above this (Kafka's Long.MAX_VALUE defaults) means "never": no timer is set for it.
NEVER_MS = 2**62


class Job(Protocol):
    """Work for the flusher thread: :meth:`run` there; :meth:`abandon` instead when the broker dies first."""

    def run(self) -> None: ...

    def abandon(self) -> None: ...


class FsyncJob:
    """fsync ``descriptors`` in order, then close them (closed whatever happens)."""

    __slots__ = ("descriptors",)

    def __init__(self, descriptors: Iterable[int]) -> None:
        self.descriptors = tuple(descriptors)

    def run(self) -> None:
        try:
            for fd in self.descriptors:
                os.fsync(fd)
        finally:
            self.abandon()

    def abandon(self) -> None:
        for fd in self.descriptors:
            try:
                os.close(fd)
            except OSError:
                log.exception("closing descriptor %d after its fsync", fd)
        self.descriptors = ()


class WriteJob:
    """Write ``data`` to ``path`` whole (temporary file, fsync, rename), as the broker's checkpoints are."""

    __slots__ = ("data", "path")

    def __init__(self, path: Path, data: bytes) -> None:
        self.path, self.data = path, data

    def run(self) -> None:
        write_file_atomically(self.path, self.data)

    def abandon(self) -> None:
        pass


Done = Callable[[BaseException | None], None]


#: Threads that fsync logs (a log always goes to the same one, so its jobs run in order); the file system runs
#: their fsyncs side by side (8 files' fsyncs took 0.9 ms one after another here, 0.4 ms on 8 threads).
FSYNC_LANES = 4


class LogFlusher:
    """The threads (module docstring): :data:`FSYNC_LANES` lanes for fsyncs, each log's jobs always on the same one
    and run in the order :meth:`submit` got them, and one lane for the rest (snapshots, checkpoints, new topics'
    files). ``post(callback)`` must run ``callback`` on the broker's thread soon (it is called from these
    threads): each finished job is handed back at once, not after the others of its lane's queue."""

    def __init__(self, post: Callable[[Callable[[], None]], None], name: str = "idemcore-log-flusher",
                 lanes: int = FSYNC_LANES) -> None:
        self._post = post
        self._lanes = [_Lane(self, f"{name}-{k}") for k in range(lanes)] + [_Lane(self, f"{name}-background")]
        self._completed: deque[tuple[Done, BaseException | None]] = deque()
        self._lock = threading.Lock()
        self._drain_posted = False
        self._running = False
        #: Counts for tests and logs: jobs run, and those that raised.
        self.stats = {"jobs": 0, "failed": 0}

    @property
    def fsync_lanes(self) -> int:
        return len(self._lanes) - 1

    def start(self) -> None:
        if not self._running:
            self._running = True
            for lane in self._lanes:
                lane.start()

    def submit(self, job: Job, done: Done, lane: int | None = None) -> None:
        """Run ``job`` on lane ``lane`` (None: the background lane), then ``done(error or None)`` on the broker's
        thread (from :meth:`drain`). Once stopped, both run here and now (what a completion asks while the broker
        stops)."""
        if not self._running:
            error: BaseException | None = None
            try:
                job.run()
            except Exception as exc:
                error = exc
            done(error)
            return
        self._lanes[-1 if lane is None else lane % self.fsync_lanes].submit(job, done)

    def drain(self) -> None:
        """Run the ``done`` callbacks of the jobs finished so far (on the broker's thread)."""
        with self._lock:
            self._drain_posted = False
        while self._completed:
            done, error = self._completed.popleft()
            try:
                done(error)
            except Exception:  # one caller's bookkeeping must not stop the others'
                log.exception("a flush completion failed")

    def stop(self) -> None:
        """Run what is queued, stop the threads, then :meth:`drain` here (the broker's thread)."""
        self._running = False
        for lane in self._lanes:
            lane.halt(abandon=False)
        self.drain()

    def abandon(self) -> None:
        """Stop as a killed process does: the fsyncs under way finish, the queued ones never run; nothing is
        answered."""
        self._running = False
        for lane in self._lanes:
            lane.halt(abandon=True)
        self._completed.clear()

    def _finished(self, done: Done, error: BaseException | None) -> None:
        """On a lane's thread: hand ``done`` back, waking the broker's thread unless a wake-up is on its way."""
        self._completed.append((done, error))
        with self._lock:
            self.stats["jobs"] += 1
            self.stats["failed"] += error is not None
            if self._drain_posted:
                return
            self._drain_posted = True
        try:
            self._post(self.drain)
        except RuntimeError:  # the loop is closed: stop() drains on the broker's thread
            pass


class _Lane:
    """One thread of the flusher and its queue."""

    def __init__(self, flusher: LogFlusher, name: str) -> None:
        self._flusher = flusher
        self._name = name
        self._queue: deque[tuple[Job, Done]] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._abandoning = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping = self._abandoning = False
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def submit(self, job: Job, done: Done) -> None:
        with self._wake:
            self._queue.append((job, done))
            self._wake.notify()

    def halt(self, abandon: bool) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        with self._wake:
            self._stopping = True
            self._abandoning = abandon
            self._wake.notify()
        thread.join()
        if abandon:
            with self._wake:
                queued, self._queue = list(self._queue), deque()
            for job, _ in queued:
                job.abandon()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if self._abandoning or not self._queue:
                    return
                job, done = self._queue.popleft()
            error: BaseException | None = None
            try:
                job.run()
            except BaseException as exc:  # handed to the broker's thread: a failed fsync fails its waiters
                error = exc
            self._flusher._finished(done, error)


@dataclass(eq=False)
class _LogState:
    """What the scheduler knows of one log."""

    log: PartitionLog
    flushed: int
    #: Durability wanted up to here (a waiter, or a flush rule); a job is started while it is past ``flushed``.
    wanted: int = 0
    in_flight: bool = False
    failure: str | None = None
    last_flush_ms: int = 0
    flush_messages: int = NEVER_MS
    flush_ms: int = NEVER_MS
    #: The flusher lane its fsyncs run on (one lane per log: its jobs run in order).
    lane: int = 0


class FlushScheduler:
    """The broker-thread half (module docstring). ``on_durable(log)`` is called when a log's recovery point moves
    or its flush fails (the purgatory then tries the operations watching it); ``on_failure(why)`` when a flush
    fails (the log directory has failed); ``clock`` gives the time in ms."""

    def __init__(self, flusher: LogFlusher, on_durable: Callable[[PartitionLog], None],
                 clock: Callable[[], int], on_failure: Callable[[str], None] | None = None) -> None:
        self.flusher = flusher
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._clock = clock
        self._logs: dict[PartitionLog, _LogState] = {}
        #: Counts for tests: fsync jobs started per cause.
        self.stats = {"flushes": 0, "rolls": 0, "checkpoints": 0}

    # --- the logs ---------------------------------------------------------------------------------------------

    def track(self, partition_log: PartitionLog, flushed: int, flush_messages: int = NEVER_MS,
              flush_ms: int = NEVER_MS) -> None:
        """Take ``partition_log`` in, known durable below ``flushed``; hand its rolls to the flusher."""
        flushed = min(flushed, partition_log.log_end_offset)
        self._logs[partition_log] = _LogState(partition_log, flushed, flushed, last_flush_ms=self._clock(),
                                              flush_messages=flush_messages, flush_ms=flush_ms,
                                              lane=len(self._logs) % self.flusher.fsync_lanes)
        partition_log.flush_rolled = self._rolled
        partition_log.on_truncate.append(self._truncating)

    def _truncating(self, partition_log: PartitionLog, floor: int, start: int) -> None:
        """A truncation holds ``partition_log`` at ``floor`` at least: nothing past it counts as durable."""
        state = self._logs.get(partition_log)
        if state is not None:
            state.flushed = min(state.flushed, floor)

    def untrack_all(self) -> None:
        """Give every log back its own fsync at roll (the flusher is stopping)."""
        for partition_log in self._logs:
            partition_log.flush_rolled = None
        self._logs.clear()

    def durable_end(self, partition_log: PartitionLog) -> int:
        """The offset below which ``partition_log`` is on disk (its end for a log kept in memory)."""
        if partition_log.directory is None:
            return partition_log.log_end_offset
        return self._logs[partition_log].flushed

    def failure(self, partition_log: PartitionLog) -> str | None:
        """Why the log's flush failed (it stays failed), or None."""
        state = self._logs.get(partition_log)
        return None if state is None else state.failure

    def recovery_points(self) -> dict[tuple[str, int], int]:
        return {(state.log.topic, state.log.partition): state.flushed for state in self._logs.values()}

    # --- what to flush ---------------------------------------------------------------------------------------

    def request(self, partition_log: PartitionLog, end: int) -> None:
        """Someone waits for ``partition_log`` to be durable below ``end``."""
        state = self._logs[partition_log]
        if end > state.wanted:
            state.wanted = end
        self._maybe_start(state)

    def appended(self, partition_log: PartitionLog) -> None:
        """After an append: Kafka's ``flush.messages`` (a flush once that many records are past the last one)."""
        state = self._logs.get(partition_log)
        if state is not None and partition_log.log_end_offset - state.flushed >= state.flush_messages:
            self.request(partition_log, partition_log.log_end_offset)

    def flush_due(self) -> None:
        """Kafka's ``flushDirtyLogs``: flush the logs whose last flush is ``flush.ms`` old and that hold more."""
        now = self._clock()
        for state in self._logs.values():
            if now - state.last_flush_ms >= state.flush_ms and state.log.log_end_offset > state.flushed:
                self.request(state.log, state.log.log_end_offset)

    def smallest_flush_ms(self) -> int:
        return min((state.flush_ms for state in self._logs.values()), default=NEVER_MS)

    def write_checkpoint(self, path: Path, entries: dict[tuple[str, int], int]) -> None:
        """Write the offset checkpoint ``entries`` to ``path`` on the flusher's background lane (not ordered with
        the fsync lanes: safe because ``entries`` are ends already fsync'd)."""
        self.stats["checkpoints"] += 1
        data = encode_offset_checkpoint((topic, partition, offset)
                                        for (topic, partition), offset in sorted(entries.items()))

        def done(error: BaseException | None) -> None:
            if error is None:
                return
            if isinstance(error, OSError) and self._on_failure is not None:  # Kafka: the log directory goes offline
                self._on_failure(f"writing {path} failed: {error}")
            else:
                log.error("writing %s failed: %s", path, error)
        self.flusher.submit(WriteJob(path, data), done)

    def _maybe_start(self, state: _LogState) -> None:
        if state.in_flight or state.failure is not None or state.wanted <= state.flushed:
            return
        if state.log.directory is None:
            state.flushed = state.log.log_end_offset
            return
        try:
            target = state.log.flush_target()
        except OSError as exc:  # no descriptor to be had (descriptors exhausted, a file gone)
            self._fail(state, f"flushing {state.log.name} failed: {exc}")
            return
        state.in_flight = True
        state.last_flush_ms = self._clock()
        self.stats["flushes"] += 1
        self.flusher.submit(FsyncJob(target.descriptors), lambda error: self._flushed(state, target, error),
                            state.lane)

    def _flushed(self, state: _LogState, target: FlushTarget, error: BaseException | None) -> None:
        state.in_flight = False
        if self._logs.get(state.log) is not state:
            return  # no longer tracked (the flusher stopped meanwhile)
        if error is not None:
            self._fail(state, f"flushing {state.log.name} up to offset {target.end_offset} failed: {error}")
            return
        if target.truncations != state.log.truncations:  # the bytes it covered may be gone: it counts nothing
            self._maybe_start(state)
            return
        if state.log.log_end_offset < target.end_offset:  # an append was taken back (its inline sync failed)
            self._fail(state, f"{state.log.name} was cut below offset {target.end_offset} while it was flushed")
            return
        self._advance(state, target.end_offset)
        state.log.note_flushed(target)
        self._maybe_start(state)

    def _advance(self, state: _LogState, end: int) -> None:
        """A job of this log succeeded: every job of it submitted earlier ran first (its lane, in order) and
        succeeded too (a failure is final), so everything below ``end`` is on disk."""
        if state.failure is None and end > state.flushed:
            state.flushed = end
            self._on_durable(state.log)

    def _rolled(self, partition_log: PartitionLog, segment: LogSegment, next_base: int) -> None:
        """``segment`` stops being the active one: its four files, then the log's directory, are fsync'd off the
        loop, through descriptors taken from it before it closes."""
        state = self._logs[partition_log]
        directory = partition_log.directory_descriptor()  # the segment's names, if no flush covered them
        descriptors = [fd for store in segment.stores() if (fd := store.detach()) is not None] + [directory]
        self.stats["rolls"] += 1
        truncations = partition_log.truncations
        self.flusher.submit(FsyncJob(descriptors),
                            lambda error: self._roll_flushed(state, next_base, error, truncations), state.lane)

    def _roll_flushed(self, state: _LogState, next_base: int, error: BaseException | None,
                      truncations: int = 0) -> None:
        if self._logs.get(state.log) is not state:
            return
        if error is not None:
            self._fail(state, f"flushing the segment of {state.log.name} below offset {next_base} failed: {error}")
            return
        if truncations == state.log.truncations:  # (else the segment may be gone or cut since: it counts nothing)
            self._advance(state, next_base)

    def fail_all(self, why: str) -> None:
        """The log directory failed: no log's flushed end moves again, and what waits on any is answered."""
        for state in list(self._logs.values()):
            if state.failure is None:
                state.failure = why
            self._on_durable(state.log)

    def _fail(self, state: _LogState, why: str) -> None:
        if state.failure is None:
            log.error("%s; it is not flushed again until the broker restarts, and nothing waiting on it is "
                      "acknowledged", why)
            state.failure = why
            if self._on_failure is not None:
                self._on_failure(why)
        self._on_durable(state.log)
