"""A deterministic simulated network between producers and one broker (seeded RNG, virtual clock).

Every fault is decided by the RNG as a request is sent or handled, so a seed
reproduces a run exactly. Time is virtual: :meth:`tick` advances it by one
millisecond and delivers what is due.
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from idemcore.broker import Broker
from idemcore.broker.written_ends import FILE_NAME as WRITTEN_ENDS
from idemcore.broker.written_ends import rewind_written_end
from idemcore.errors import IdemcoreError
from idemcore.net.messages import (
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
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResponse,
    PartitionResult,
    Pending,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.net.transport import partition_count
from idemcore.protocol.codes import ErrorCode

CRASH_KINDS = ("process", "machine")
#: Requests that change a coordinator's state: a late second copy would act again where Kafka's TCP connection
#: delivers each once, in order (a duplicated OffsetCommit could move a group's offset back).
_COORDINATOR_WRITES = (InitProducerIdRequest, AddPartitionsToTxnRequest, AddOffsetsToTxnRequest, EndTxnRequest,
                       TxnOffsetCommitRequest, OffsetCommitRequest)


@dataclass(frozen=True)
class Faults:
    """Probabilities per request (or per response) and the crash schedule."""

    drop_request: float = 0.0  # the request never reaches the broker
    drop_response: float = 0.0  # the broker handles it, the answer is lost
    reorder: float = 0.0  # a request is held back and overtaken by later ones (not a coordinator's: see send)
    duplicate: float = 0.0  # the broker receives a request twice (not a coordinator's: see send)
    #: NOT_LEADER_OR_FOLLOWER before appending or REQUEST_TIMED_OUT after it (produce); a coordinator's retriable
    #: refusal before handling (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS...)
    retriable_error: float = 0.0
    crash_every: int = 0  # crash and restart the broker after this many records written (0: never)
    #: "process": the broker's process dies (what reached the OS survives); "machine": the machine loses power
    #: (each log keeps what was fsync'd and a random part of the rest, what the OS had written back).
    crash_kind: str = "process"
    tear_writes: bool = True  # the crash cuts the request being written: its last frame is torn, no answer
    latency_ms: int = 1
    reorder_delay_ms: int = 20
    restart_ms: int = 50

    def __post_init__(self) -> None:
        for name in ("drop_request", "drop_response", "reorder", "duplicate", "retriable_error"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1), got {value}")
        if self.crash_kind not in CRASH_KINDS:
            raise ValueError(f"crash_kind must be one of {', '.join(CRASH_KINDS)}, got {self.crash_kind!r}")
        for name in ("crash_every", "latency_ms", "reorder_delay_ms", "restart_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")


@dataclass
class NetworkStats:
    requests: int = 0
    dropped_requests: int = 0
    dropped_responses: int = 0
    reordered: int = 0
    duplicated: int = 0
    retriable_errors: int = 0  # produce requests answered NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT
    coordinator_errors: int = 0  # coordinator requests refused with a retriable code before being handled
    crashes: int = 0
    torn_writes: int = 0  # frames cut short by a crash
    bytes_lost: int = 0  # bytes of the logs a crash took back (torn frames; unsynced data on a machine crash)
    records_written: int = 0


class NoProgressError(IdemcoreError):
    """The broker crashed more often than ``max_crashes``: too little gets through between crashes."""


class SimulatedNetwork:
    """The transport of :mod:`idemcore.transport` with faults; ``broker_factory`` (re)starts the broker.
    ``max_crashes``: past this many crashes :meth:`tick` raises NoProgressError, ending a run whose clients
    would otherwise wait (up to their timeouts) for answers a broker that keeps crashing never gives."""

    def __init__(self, broker_factory: Callable[[], Broker], faults: Faults = Faults(), seed: int = 0,
                 max_crashes: int | None = None) -> None:
        self.broker_factory = broker_factory
        self.broker: Broker | None = broker_factory()
        self.topics = dict(self.broker.topics)
        self.faults = faults
        self.rng = np.random.default_rng(seed)
        self.now = 0
        self.stats = NetworkStats()
        # (due ms, tie-breaker, "request" or "response", client, connection, request, response or None)
        self._events: list[tuple[int, int, str, str, int, Request, Response | None]] = []
        self._order = itertools.count()
        self._connection: dict[str, int] = defaultdict(int)  # bumped by disconnect: older answers are lost
        self._inbox: dict[str, list[tuple[Request, Response]]] = defaultdict(list)
        self._restart_at: int | None = None
        self._written_since_crash = 0
        self.max_crashes = max_crashes

    # ------------------------------------------------------------ transport interface

    def now_ms(self) -> int:
        return self.now

    def partition_count(self, topic: str) -> int:
        return partition_count(self.topics, topic)

    def send(self, client: str, request: Request) -> None:
        self.stats.requests += 1
        faults = self.faults
        if self.rng.random() < faults.drop_request:
            self.stats.dropped_requests += 1
            return
        delay = faults.latency_ms
        # Produce requests (whose retries and overtaking the producer's sequences exist for) and reads may be held
        # back and delivered twice; the coordinators' requests go as over one TCP connection, at most once and in
        # order, though they and their answers may still be lost.
        loose = not isinstance(request, _COORDINATOR_WRITES)
        if loose and self.rng.random() < faults.reorder:
            self.stats.reordered += 1
            delay += int(self.rng.integers(1, max(2, faults.reorder_delay_ms)))
        self._schedule(self.now + delay, "request", client, request, None)
        if loose and self.rng.random() < faults.duplicate:
            self.stats.duplicated += 1
            self._schedule(self.now + delay + int(self.rng.integers(0, 1 + faults.reorder_delay_ms)),
                           "request", client, request, None)

    def poll(self, client: str) -> list[tuple[Request, Response]]:
        return self._inbox.pop(client, None) or []

    def disconnect(self, client: str) -> None:
        self._connection[client] += 1
        self._inbox.pop(client, None)

    def tick(self) -> None:
        """Advance the clock by 1 ms and deliver everything due."""
        if self.max_crashes is not None and self.stats.crashes > self.max_crashes:
            raise NoProgressError(f"no progress: the broker crashed {self.stats.crashes} times (more than "
                                  f"{self.max_crashes}); with crash_every={self.faults.crash_every} too little gets "
                                  "through between crashes (raise crash_every)")
        self.now += 1
        if self._restart_at is not None and self.now >= self._restart_at:
            self.broker = self.broker_factory()  # recovers producer state from its logs
            self._restart_at = None
        while self._events and self._events[0][0] <= self.now:
            _, _, kind, client, connection, request, response = heapq.heappop(self._events)
            if kind == "request":
                self._handle(client, connection, request)
            elif connection == self._connection[client]:
                assert response is not None  # _handle schedules a "response" event only with an answer
                self._inbox[client].append((request, response))

    # ------------------------------------------------------------ inside

    def _schedule(self, at: int, kind: str, client: str, request: Request, response: Response | None) -> None:
        heapq.heappush(self._events, (at, next(self._order), kind, client, self._connection[client], request,
                                      response))

    def _handle(self, client: str, connection: int, request: Request) -> None:
        broker = self.broker
        if broker is None:
            return  # the broker is down: the request is lost
        faults = self.faults
        if _coordinated(request) and self.rng.random() < faults.retriable_error:
            # A coordinator moving or loading, or a transaction still completing: answered before it is handled.
            self.stats.coordinator_errors += 1
            self._answer(client, connection, request, _coordinator_error(request, self.rng))
            return
        # Retriable errors are injected into produce requests; crashes follow any request that wrote (a
        # transaction request writes the coordinator's log and markers), before its answer goes out.
        produce = isinstance(request, ProduceRequest)
        retriable = produce and self.rng.random() < faults.retriable_error
        if retriable:
            self.stats.retriable_errors += 1
        if retriable and self.rng.random() < 0.5:
            response: Response | None = _error_response(request,  # type: ignore[arg-type]
                                                        ErrorCode.NOT_LEADER_OR_FOLLOWER)
        else:
            before = _log_ends(broker)
            answer = broker.handle(request)
            if isinstance(answer, Pending):  # the simulated clients never join groups
                raise IdemcoreError(f"the simulated network cannot carry an answer given later "
                                    f"({type(request).__name__})")
            response = answer
            after = _log_ends(broker)
            if len(after) > len(before):  # the request made an internal topic: its partitions start empty
                before += [0] * (len(after) - len(before))
            written = sum(after) - sum(before)  # duplicates answer NONE but add nothing
            self.stats.records_written += written
            self._written_since_crash += written
            if written and faults.crash_every and self._written_since_crash >= faults.crash_every:
                # The process dies while writing this request: no answer goes out.
                grown = [k for k, (old, new) in enumerate(zip(before, after, strict=True)) if new > old]
                # Only a produce request's frames are torn: a transaction request writes the coordinator's log and
                # markers in an order the log list does not show, and a torn early write with later ones intact
                # is no crash's doing (tests/test_txn_crash_steps.py kills the broker at each of those writes).
                if grown and faults.tear_writes and produce:
                    self._crash(broker, grown[-1], before[grown[-1]])
                else:
                    self._crash(broker, None)
                return
            if retriable:  # appended, but the answer says the replication wait timed out
                response = _error_response(request, ErrorCode.REQUEST_TIMED_OUT)  # type: ignore[arg-type]
        if response is not None:  # None: acks=0, nothing comes back
            self._answer(client, connection, request, response)

    def _answer(self, client: str, connection: int, request: Request, response: Response) -> None:
        """Send ``response`` back, unless the network loses it."""
        if self.rng.random() < self.faults.drop_response:
            self.stats.dropped_responses += 1
        else:
            heapq.heappush(self._events, (self.now + self.faults.latency_ms, next(self._order), "response", client,
                                          connection, request, response))

    def _crash(self, broker: Broker, torn: int | None, torn_from: int = 0) -> None:
        """The broker (``self.broker``) dies: :func:`crash_broker`."""
        self.stats.crashes += 1
        self._written_since_crash = 0
        torn_writes, lost = crash_broker(broker, self.rng, torn, torn_from, machine=self.faults.crash_kind == "machine")
        self.stats.torn_writes += torn_writes
        self.stats.bytes_lost += lost
        self.broker = None
        self._events = [e for e in self._events if e[2] == "request"]  # answers of a dead broker never come
        heapq.heapify(self._events)
        self._restart_at = self.now + max(1, self.faults.restart_ms)

    def close(self) -> None:
        if self.broker is not None:
            self.broker.close()


def _log_ends(broker: Broker) -> list[int]:
    return [partition_log.log_end_offset for partition_log in broker.logs()]


def crash_broker(broker: Broker, rng: np.random.Generator, torn: int | None, torn_from: int = 0, *,
                 machine: bool = False) -> tuple[int, int]:
    """Kill ``broker`` as its process (or machine) dies: ``torn`` (the number of a log in ``broker.logs()``) was
    being written from its end ``torn_from``: its last frame is cut at a random byte. A machine crash also takes
    back from every log what was not fsync'd (a random part of it). Returns (torn writes, bytes taken back)."""
    torn_writes = bytes_lost = 0
    logs = broker.logs()
    paths = [(partition_log.path, partition_log.last_append_position, partition_log.synced_bytes)
             for partition_log in logs]
    broker.kill()
    for k, (path, last_frame, synced) in enumerate(paths):
        if path is None:
            continue
        size = keep = path.stat().st_size
        if k == torn and size > last_frame:
            keep = last_frame + int(rng.integers(0, size - last_frame))
            torn_writes += 1
            # Killed mid-write: the broker had not yet recorded this write's end.
            rewind_written_end(path.parent.parent, logs[k].name, torn_from)
        if machine and keep > synced:
            # The OS had written back some of the page cache, a prefix of what was not fsync'd.
            keep = synced + int(rng.integers(0, keep - synced + 1))
        if keep < size:
            os.truncate(path, keep)
            bytes_lost += size - keep
    if machine and paths and paths[0][0] is not None:
        # A reboot: what the broker had written in the old boot is no longer known to be in the OS.
        (paths[0][0].parent.parent / WRITTEN_ENDS).unlink(missing_ok=True)
    return torn_writes, bytes_lost


def _coordinated(request: Request) -> bool:
    """A request a coordinator answers (an idempotent producer's InitProducerId is not one: any broker can)."""
    if isinstance(request, InitProducerIdRequest):
        return request.transactional_id is not None
    return isinstance(request, (*_COORDINATOR_WRITES, FindCoordinatorRequest, OffsetFetchRequest))


def _coordinator_error(request: Request, rng: np.random.Generator) -> Response:
    """The answer of a coordinator that cannot take ``request`` now: NOT_COORDINATOR (the client looks the
    coordinator up again), COORDINATOR_LOAD_IN_PROGRESS, or for a transaction request CONCURRENT_TRANSACTIONS
    (the previous transaction is still completing); COORDINATOR_NOT_AVAILABLE to FindCoordinator."""
    codes = [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    if isinstance(request, InitProducerIdRequest | AddPartitionsToTxnRequest | AddOffsetsToTxnRequest | EndTxnRequest):
        codes.append(ErrorCode.CONCURRENT_TRANSACTIONS)
    code = codes[int(rng.integers(len(codes)))]
    rid = request.request_id
    if isinstance(request, FindCoordinatorRequest):
        return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, request_id=rid)
    if isinstance(request, InitProducerIdRequest):
        return InitProducerIdResponse(code, request_id=rid)
    if isinstance(request, AddPartitionsToTxnRequest):
        return AddPartitionsToTxnResponse(tuple(PartitionResult(t, p, code) for t, p in request.partitions), rid)
    if isinstance(request, AddOffsetsToTxnRequest):
        return AddOffsetsToTxnResponse(code, rid)
    if isinstance(request, EndTxnRequest):
        return EndTxnResponse(code, rid)
    if isinstance(request, TxnOffsetCommitRequest):
        return TxnOffsetCommitResponse(tuple(PartitionResult(o.topic, o.partition, code) for o in request.offsets), rid)
    if isinstance(request, OffsetCommitRequest):
        return OffsetCommitResponse(tuple(PartitionResult(o.topic, o.partition, code) for o in request.offsets), rid)
    assert isinstance(request, OffsetFetchRequest)
    return OffsetFetchResponse((), code, rid)


def _error_response(request: ProduceRequest, error_code: int) -> ProduceResponse:
    return ProduceResponse(request.request_id, tuple(
        PartitionResponse(b.topic, b.partition, error_code) for b in request.batches))


__all__ = ["CRASH_KINDS", "Faults", "NetworkStats", "NoProgressError", "SimulatedNetwork", "crash_broker"]
