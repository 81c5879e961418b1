"""The broker's delayed operations on a loop (idemcore.broker.delayed, .purgatory, .flusher), driven by a virtual
loop: a delayed fetch is tried again only when a partition it watches moves and answers at min_bytes or max_wait;
an acks=all produce waits for the flusher thread, many of them covered by one fsync; a failed fsync answers
KAFKA_STORAGE_ERROR and never acknowledges; a roll's fsync and the recovery-point checkpoint run on the flusher
thread, the checkpoint never past what was fsync'd; flush.messages and flush.ms flush."""

from __future__ import annotations

import errno
import heapq
import itertools
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from idemcore.broker import Broker
from idemcore.broker.delayed import SWITCH_INTERVAL_S
from idemcore.broker.purgatory import DelayedFetch
from idemcore.net.messages import (
    TRANSACTION_KEY,
    CreateTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    NewTopic,
    Pending,
    ProduceRequest,
    ProduceResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import read_offset_checkpoint

FLUSHER = "idemcore-log-flusher"


class VirtualLoop:
    """An event loop whose timers run on a virtual clock (:meth:`advance`); callbacks posted by the flusher thread
    are run by :meth:`run_until` on the test's thread, which is the broker's."""

    def __init__(self) -> None:
        self.now = 0.0
        self._soon: deque[Callable[[], Any]] = deque()
        self._timers: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()
        self._posted = threading.Condition()

    def call_soon(self, callback: Callable[[], Any]) -> None:
        self._soon.append(callback)

    def call_soon_threadsafe(self, callback: Callable[[], Any]) -> None:
        with self._posted:
            self._soon.append(callback)
            self._posted.notify()

    def call_later(self, delay: float, callback: Callable[[], Any]) -> _Timer:
        timer = _Timer(callback)
        heapq.heappush(self._timers, (self.now + delay, next(self._order), timer))
        return timer

    def run_soon(self) -> None:
        while self._soon:
            self._soon.popleft()()

    def run_until(self, done: Callable[[], bool], seconds: float = 10) -> None:
        """Run posted callbacks until ``done()`` (real time: the flusher thread works meanwhile)."""
        deadline = time.monotonic() + seconds
        while True:
            self.run_soon()
            if done():
                return
            if time.monotonic() > deadline:
                raise AssertionError("the loop waited 10 s for the flusher")
            with self._posted:
                if not self._soon:
                    self._posted.wait(0.01)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, running the timers due."""
        until = self.now + seconds
        while self._timers and self._timers[0][0] <= until:
            at, _, timer = heapq.heappop(self._timers)
            self.now = at
            if not timer.cancelled:
                timer.callback()
            self.run_soon()
        self.now = until


class _Timer:
    def __init__(self, callback: Callable[[], Any]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def record(partition: int, value: bytes = b"v" * 100, topic: str = "t") -> RecordBatch:
    return RecordBatch(topic, partition, (value,), max_timestamp=int(time.time() * 1000))


def produce(broker: Broker, partition: int, acks: int = 1, topic: str = "t", **kwargs: Any) -> Any:
    return broker.handle(ProduceRequest((record(partition, topic=topic),), acks=acks, **kwargs))


def fetch_request(topic: str, partition: int, offset: int, *, min_bytes: int = 1, max_wait_ms: int = 500) -> \
        FetchRequest:
    return FetchRequest((FetchPartition(topic, partition, offset),), min_bytes=min_bytes, max_wait_ms=max_wait_ms)


def records_bytes(response: FetchResponse) -> int:
    return sum(len(p.records) for p in response.partitions)


@pytest.fixture
def fsyncs(monkeypatch):
    """Every os.fsync, as the name of the thread that called it."""
    calls: list[str] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(threading.current_thread().name)
        real(fd)
    monkeypatch.setattr(os, "fsync", counting)
    return calls


@pytest.fixture
def running(tmp_path):
    """A broker over tmp_path running on a virtual loop (settings as keyword arguments)."""
    made: list[Broker] = []

    def make(topics: dict[str, int] | None = None, **settings: Any) -> tuple[Broker, VirtualLoop]:
        loop = VirtualLoop()
        broker = Broker(topics or {"t": 2}, data_dir=tmp_path / f"data{len(made)}", **settings)
        made.append(broker)
        broker.start_background(loop)
        return broker, loop
    yield make
    for broker in made:
        broker.close()


# ---------------------------------------------------------------- delayed fetch


def test_a_write_tries_only_the_fetches_watching_its_partition(running, monkeypatch):
    broker, loop = running({"t": 2}, fsync=False)
    tried: list[int] = []
    real = DelayedFetch.try_complete

    def counted(self: DelayedFetch) -> Any:
        tried.append(self.request.partitions[0].partition)
        return real(self)
    monkeypatch.setattr(DelayedFetch, "try_complete", counted)
    # Six fetches wait on partition 1, one on partition 0 wanting more than the writes below bring.
    idle = [broker.handle(fetch_request("t", 1, 0)) for _ in range(6)]
    busy = broker.handle(fetch_request("t", 0, 0, min_bytes=1 << 20))
    assert all(isinstance(p, Pending) and not p.done for p in [*idle, busy])
    tried.clear()
    for _ in range(20):
        produce(broker, 0)
        loop.run_soon()
    # Every write tried the one fetch on partition 0, never those on partition 1 (waking every fetch on every
    # write would have tried 7 per write).
    assert tried == [0] * 20
    assert not any(p.done for p in [*idle, busy])
    assert broker.delayed.fetches is not None and broker.delayed.fetches.watched == 7
    produce(broker, 1)
    loop.run_soon()
    assert all(p.done and records_bytes(p.response) > 0 for p in idle)  # type: ignore[arg-type]
    assert tried.count(1) == 6


def test_a_delayed_fetch_answers_once_min_bytes_are_readable(running):
    broker, loop = running({"t": 1}, fsync=False)
    waiting = broker.handle(fetch_request("t", 0, 0, min_bytes=1_000))
    assert isinstance(waiting, Pending)
    sizes = []
    while not waiting.done:
        produce(broker, 0)  # about 170 bytes stored per batch
        loop.run_soon()
        sizes.append(broker.log("t", 0).segments[-1].size)
        assert len(sizes) < 50
    assert sizes[-1] >= 1_000 > sizes[-2]  # answered by the write that made min_bytes readable, not before
    answer = waiting.response
    assert isinstance(answer, FetchResponse) and records_bytes(answer) == sizes[-1]


def test_a_delayed_fetch_answers_at_max_wait_with_what_there_is(running):
    broker, loop = running({"t": 1}, fsync=False)
    empty = broker.handle(fetch_request("t", 0, 0, max_wait_ms=500))
    short = broker.handle(fetch_request("t", 0, 0, min_bytes=10_000, max_wait_ms=800))
    produce(broker, 0)
    loop.run_soon()
    assert isinstance(empty, Pending) and empty.done  # a write answers a fetch of min_bytes 1 at once
    assert isinstance(short, Pending) and not short.done
    loop.advance(0.79)
    assert not short.done
    loop.advance(0.02)
    assert short.done and 0 < records_bytes(short.response) < 10_000  # type: ignore[arg-type]
    nothing = broker.handle(fetch_request("t", 0, 1, max_wait_ms=300))
    loop.advance(0.31)
    assert isinstance(nothing, Pending) and nothing.done and records_bytes(nothing.response) == 0  # type: ignore


def test_fetches_answered_at_once_do_not_wait(running):
    broker, _ = running({"t": 1}, fsync=False)
    produce(broker, 0)
    assert isinstance(broker.handle(fetch_request("t", 0, 0)), FetchResponse)  # data there
    assert isinstance(broker.handle(fetch_request("t", 0, 1, max_wait_ms=0)), FetchResponse)
    out_of_range = broker.handle(fetch_request("t", 0, 7))
    assert isinstance(out_of_range, FetchResponse)
    assert out_of_range.partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert isinstance(broker.handle(fetch_request("nope", 0, 0)), FetchResponse)


def test_in_process_a_fetch_never_waits(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        answer = broker.handle(fetch_request("t", 0, 0, min_bytes=10_000))
        assert isinstance(answer, FetchResponse) and records_bytes(answer) == 0


# ---------------------------------------------------------------- delayed produce and the flusher


def test_many_acks_all_requests_are_answered_after_few_fsyncs(running, fsyncs):
    broker, loop = running({"t": 2}, fsync=True)
    for partition in (0, 1):  # a partition's first batch writes its leader-epoch-checkpoint (on the loop, once)
        produce(broker, partition)
    fsyncs.clear()
    answers = [produce(broker, k % 2, acks=-1) for k in range(40)]
    assert all(isinstance(a, Pending) for a in answers)
    assert not [name for name in fsyncs if not name.startswith(FLUSHER)]  # none on the broker's thread
    loop.run_until(lambda: all(a.done for a in answers))
    offsets = sorted((r.partition, r.base_offset) for a in answers for r in a.response.responses)
    assert all(r.error_code == 0 for a in answers for r in a.response.responses)
    assert offsets == sorted((p, k) for p in (0, 1) for k in range(1, 21))
    # One fsync in flight per partition; the 19 requests behind each were covered by the next (group commit).
    assert len(fsyncs) <= 6, fsyncs
    assert all(broker.delayed.scheduler.durable_end(broker.log("t", p)) == 21 for p in (0, 1))  # type: ignore


def test_a_failed_fsync_answers_storage_error_and_never_acknowledges(running, monkeypatch):
    broker, loop = running({"t": 1}, fsync=True)
    assert produce(broker, 0, acks=1).responses[0].error_code == 0  # acks=1: no wait
    real = os.fsync

    def failing(fd: int) -> None:
        if threading.current_thread().name.startswith(FLUSHER):
            raise OSError(errno.EIO, "Input/output error")
        real(fd)
    monkeypatch.setattr(os, "fsync", failing)
    batch = RecordBatch("t", 0, (b"x",), producer_id=broker.handle(_init()).producer_id, producer_epoch=0,
                        base_sequence=0, max_timestamp=int(time.time() * 1000))
    first = broker.handle(ProduceRequest((batch,), acks=-1))
    assert isinstance(first, Pending)
    loop.run_until(lambda: first.done)
    (answer,) = first.response.responses  # type: ignore[union-attr]
    assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR and "Input/output error" in answer.error_message
    # The producer's retry is a duplicate of a batch that is not durable: not acknowledged either, nor is
    # anything after it on that partition, even once fsync works again (its pages may have been dropped).
    monkeypatch.setattr(os, "fsync", real)
    for request in (ProduceRequest((batch,), acks=-1), ProduceRequest((record(0),), acks=-1)):
        again = broker.handle(request)
        done = again if isinstance(again, ProduceResponse) else (loop.run_until(lambda a=again: a.done)
                                                                  or again.response)
        assert done.responses[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR  # type: ignore[union-attr]
    assert broker.delayed.scheduler.durable_end(broker.log("t", 0)) <= 1  # type: ignore[union-attr]
    # Kafka's log directory failure: nothing is appended any more, acks=1 included, and the stop is not clean.
    assert "Input/output error" in (broker.log_manager.offline or "")
    end = broker.log("t", 0).log_end_offset
    assert produce(broker, 0, acks=1).responses[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert broker.log("t", 0).log_end_offset == end
    data_dir = broker.data_dir
    assert data_dir is not None
    created = broker.handle(CreateTopicsRequest((NewTopic("late", 1),)))
    assert created.results[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR and not (data_dir / "late-0").exists()
    broker.close()
    assert not (data_dir / ".kafka_cleanshutdown").exists()


def test_an_acks_all_produce_times_out_at_its_timeout(running, monkeypatch):
    broker, loop = running({"t": 1}, fsync=True)
    release = threading.Event()
    real = os.fsync

    def stuck(fd: int) -> None:
        if threading.current_thread().name.startswith(FLUSHER):
            release.wait(10)
        real(fd)
    monkeypatch.setattr(os, "fsync", stuck)
    try:
        waiting = produce(broker, 0, acks=-1, timeout_ms=250)
        assert isinstance(waiting, Pending)
        loop.advance(0.24)
        assert not waiting.done
        loop.advance(0.02)
        (answer,) = waiting.response.responses  # type: ignore[union-attr]
        assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT and "timeout_ms=250" in answer.error_message
    finally:
        release.set()


def test_without_fsync_acks_all_is_answered_at_once(running):
    broker, _ = running({"t": 1}, fsync=False)
    assert isinstance(produce(broker, 0, acks=-1), ProduceResponse)


def test_a_roll_is_fsynced_by_the_flusher(running, fsyncs):
    broker, loop = running({"t": 1}, fsync=False, segment_bytes=1_000)
    fsyncs.clear()
    for _ in range(30):
        assert produce(broker, 0).responses[0].error_code == 0
    partition_log = broker.log("t", 0)
    assert len(partition_log.segments) > 3
    rolled = partition_log.segments[-1].base_offset
    loop.run_until(lambda: broker.delayed.scheduler.durable_end(partition_log) == rolled)  # type: ignore
    assert fsyncs and all(name.startswith(FLUSHER) for name in fsyncs), fsyncs  # snapshots included


def test_a_snapshot_the_flusher_cannot_write_takes_the_log_directory_offline(running, monkeypatch):
    """A roll's producer snapshot fails on the flusher (the disk is full): as Kafka's roll does, the log directory
    goes offline, and nothing more is appended there."""
    from idemcore.broker.log import PartitionLog

    broker, loop = running({"t": 1}, fsync=False, segment_bytes=1_000)

    def full(self, offset, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(PartitionLog, "write_snapshot", full)
    answers = []
    while broker.log_manager.offline is None and len(answers) < 50:
        answers.append(produce(broker, 0).responses[0].error_code)
        loop.run_soon()
    assert "writing the snapshot" in (broker.log_manager.offline or "") and 0 in answers
    assert produce(broker, 0).responses[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR


def test_the_recovery_point_checkpoint_counts_only_what_was_fsynced(running):
    broker, loop = running({"t": 1}, fsync=False, recovery_point_checkpoint_ms=1_000, flush_messages=10)
    path = broker.data_dir / "recovery-point-offset-checkpoint"  # type: ignore[operator]

    def checkpointed() -> int:
        return {(e.topic, e.partition): e.offset for e in read_offset_checkpoint(path).entries}[("t", 0)]

    for _ in range(5):
        produce(broker, 0)
    loop.run_soon()
    loop.advance(1.0)
    loop.run_until(lambda: broker.delayed.flusher.stats["jobs"] >= 1)  # type: ignore[union-attr]
    assert checkpointed() == 0  # 5 records in the log, none fsync'd (fsync=False, fewer than flush.messages)
    for _ in range(7):
        produce(broker, 0)
    loop.run_soon()
    assert broker.delayed.scheduler.stats["flushes"] == 1  # type: ignore[union-attr]  # at 10 records
    loop.run_until(lambda: broker.delayed.scheduler.durable_end(broker.log("t", 0)) >= 10)  # type: ignore
    jobs = broker.delayed.flusher.stats["jobs"]  # type: ignore[union-attr]
    loop.advance(1.0)
    loop.run_until(lambda: broker.delayed.flusher.stats["jobs"] > jobs)  # type: ignore[union-attr]
    assert 10 <= checkpointed() <= 12 and checkpointed() == broker.delayed.scheduler.durable_end(  # type: ignore
        broker.log("t", 0))


def test_flush_ms_flushes_a_log_whose_last_flush_is_that_old(tmp_path):
    now = [1_000_000]
    loop = VirtualLoop()
    with Broker({"t": 1}, data_dir=tmp_path, fsync=False, clock=lambda: now[0], flush_ms=200) as broker:
        broker.start_background(loop)
        produce(broker, 0)
        loop.run_soon()
        partition_log = broker.log("t", 0)
        scheduler = broker.delayed.scheduler
        assert scheduler is not None and scheduler.durable_end(partition_log) == 0
        now[0] += 100
        loop.advance(0.1)
        assert scheduler.stats["flushes"] == 0
        now[0] += 100
        loop.advance(0.1)
        assert scheduler.stats["flushes"] == 1
        loop.run_until(lambda: scheduler.durable_end(partition_log) == 1)


def test_stopping_flushes_what_is_queued_and_answers_in_place_again(running):
    broker, _ = running({"t": 1}, fsync=True)
    waiting = produce(broker, 0, acks=-1)
    assert isinstance(waiting, Pending)
    broker.stop_background()
    assert waiting.done and waiting.response.responses[0].error_code == 0  # type: ignore[union-attr]
    assert isinstance(produce(broker, 0, acks=-1), ProduceResponse)


def test_an_internal_topic_is_made_off_the_loop(running, monkeypatch):
    broker, loop = running({"t": 1}, fsync=False)
    threads: set[str] = set()
    real = os.mkdir

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if "__transaction_state" in str(path):
            threads.add(threading.current_thread().name)
        real(path, *args, **kwargs)
    monkeypatch.setattr(os, "mkdir", mkdir)
    answers = [broker.handle(FindCoordinatorRequest(f"txn-{k}", TRANSACTION_KEY)) for k in range(3)]
    assert all(isinstance(a, Pending) for a in answers)
    assert "__transaction_state" not in broker.topics
    loop.run_until(lambda: all(a.done for a in answers))
    assert all(a.response.error_code == 0 for a in answers)  # type: ignore[union-attr]
    assert broker.topics["__transaction_state"] == broker.transaction_state_partitions
    assert threads and all(name.startswith(FLUSHER) for name in threads), threads
    assert broker.started_txn_coordinator is not None


def _init() -> Any:
    from idemcore.net.messages import InitProducerIdRequest

    return InitProducerIdRequest()


def test_a_topic_made_while_running_with_a_short_flush_ms_is_flushed_on_time(tmp_path):
    now = [1_000_000]
    loop = VirtualLoop()
    with Broker({"t": 1}, data_dir=tmp_path, fsync=False, clock=lambda: now[0]) as broker:
        broker.start_background(loop)
        broker.create_topic("f", 1, {"flush.ms": 50})
        produce(broker, 0, topic="f")
        produce(broker, 0, topic="t")
        loop.run_soon()
        now[0] += 50
        loop.advance(0.05)
        scheduler = broker.delayed.scheduler
        assert scheduler is not None
        loop.run_until(lambda: scheduler.durable_end(broker.log("f", 0)) == 1)
        assert scheduler.durable_end(broker.log("t", 0)) == 0  # flush.ms unset there: the OS decides


def test_the_switch_interval_is_short_while_a_flusher_runs(tmp_path):
    before = sys.getswitchinterval()
    with Broker({"t": 1}, data_dir=tmp_path / "a") as one, Broker({"t": 1}, data_dir=tmp_path / "b") as two:
        one.start_background(VirtualLoop())
        two.start_background(VirtualLoop())
        assert sys.getswitchinterval() == pytest.approx(min(before, SWITCH_INTERVAL_S))
        one.stop_background()
        assert sys.getswitchinterval() == pytest.approx(min(before, SWITCH_INTERVAL_S))  # the other runs on
    assert sys.getswitchinterval() == before


@pytest.mark.parametrize("setting, value, message", [
    ("flush_scheduler_interval_ms", -1, "scheduler_interval_ms must be a non-negative integer, got -1"),
    ("recovery_point_checkpoint_ms", "60s", "checkpoint_interval_ms must be a non-negative integer, got '60s'"),
    ("flush_messages", 0, "Invalid value 0 for configuration flush.messages: Value must be at least 1"),
    ("flush_ms", -5, "Invalid value -5 for configuration flush.ms: Value must be at least 0")])
def test_bad_flush_settings_are_refused_before_the_directory_is_touched(tmp_path, setting, value, message):
    with pytest.raises(ValueError, match=message):
        Broker({"t": 1}, data_dir=tmp_path / "data", **{setting: value})
    assert not (tmp_path / "data").exists()
