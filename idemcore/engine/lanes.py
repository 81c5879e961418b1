"""validate() over lanes of streams, on threads side by side; and any long validate() on one thread.

A stream's producer state and log end belong to that stream alone, so batches of different streams can
be checked in any interleaving as long as each stream's batches keep their order. This module:

1. gives every batch its stream and producer row first, adding entries for new ones (the kernels'
   ``reserve_rows``, one pass on the calling thread), so no lane ever inserts into the shared indexes;
2. deals the streams out to lanes, the biggest first to the least loaded lane, and lists each lane's batches
   (in input order);
3. runs ``validate_listed`` over each lane's list on its own thread (the compiled kernels release the GIL), each
   with its own count of completed transactions and its own stretch of the transaction columns; verdicts go
   straight to their batch's place;
4. sorts the completed transactions by the marker that closed them, and drops the entries step 1 added that no
   batch was committed to (a first write that was refused).

On one thread there is one lane: steps 1 and 3 go chunk by chunk (``ONE_LANE_CHUNK``) while the table is small
enough to stay cached between them, then over the rest of the call (:func:`_validate_one_lane`).

On more than one thread a long call goes chunk by chunk (``PIPELINE_CHUNK``): step 1 for the next chunk runs on
the calling thread while the lanes check this one. That is safe because a chunk's lanes only touch rows and
streams reserved before they started, and find existing keys only along probe chains no insertion changes
(an insertion fills an empty slot; no slot is emptied during a call); the table grows only once they have ended.
The pre-pass being faster than the check, the calling thread then takes a lane of the chunk too (``_Lanes``). As on
one thread, the first ``ONE_LANE_CHUNK`` batches size the table for the call (:func:`expected_streams`), and each
chunk's rows go to scratch of a chunk's length.

The verdicts, the completed transactions (in order) and the state (``ProducerStateTable.canonical``) are the
ones :func:`idemcore.validate` computes on one thread; only row numbers may differ.

On one thread too, the pre-pass pays on a long call: finding every batch's row first, then checking the batches
with their rows known, replaces the kernel's chain of dependent misses (index slot, then row) with two passes that
each prefetch far ahead (measured by bench/bench_validate.py: see MIN_BATCHES).

Tried and not kept: grouping the batches stream by stream (a stable permutation of the twelve columns
before the kernel, the verdicts gathered back after). On stream (b) of bench/bench_validate.py the kernel alone
went from 10.1 to 16.2 M batches/s, since a stream's 10,000 producers then stay in the caches, but the
permutation and the gather cost 2.6 s per 20M batches on this machine, more than the 0.75 s the kernel saved.
"""

from __future__ import annotations

import functools
import heapq
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from idemcore.engine.table import ProducerStateTable
from idemcore.engine.verdicts import CompletedTxns, Verdicts
from idemcore.interrupts import deferred_interrupts
from idemcore.kernels import Backend
from idemcore.kernels import rules_reference as rules
from idemcore.kernels.abi import StateArrays, TxnColumns, VerdictColumns
from idemcore.kernels.columns import BatchColumns
from idemcore.protocol.codes import Origin, Status

_T = TypeVar("_T")
_R = TypeVar("_R")


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="idemcore-lane")


def thread_map(function: Callable[[_T], _R], items: Sequence[_T], threads: int, kernel: Backend) -> list[_R]:
    """``[function(item) for item in items]`` on up to ``threads`` threads; on this thread when one is enough or
    the kernel holds the GIL (``python``). Returns, or raises, only once every call has ended: an interrupt of
    the caller does not leave threads writing the state behind it."""
    if threads <= 1 or len(items) <= 1 or kernel.name == "python":
        return [function(item) for item in items]
    futures: list[Future[_R]] = []
    try:
        pool = _pool(min(threads, len(items)))
        for item in items:
            futures.append(pool.submit(function, item))  # (one at a time: an interrupt here still waits for them)
        return [future.result() for future in futures]
    finally:
        wait(futures)


def _reserve(kernel: Backend, columns: BatchColumns, state: ProducerStateTable, bucket: npt.NDArray[np.int32],
             row: npt.NDArray[np.int32], start: int, stop: int,
             before_growing: Callable[[], object] = lambda: None) -> npt.NDArray[np.int64]:
    """reserve_rows over batches ``start..stop-1``, growing the table as it asks (``before_growing`` first: the
    lanes still reading the old arrays must end): each batch's bucket and row, and the number of batches in each
    bucket."""
    if state.n_producers + 1 >= len(state.row_producer_id) or state.n_streams + 1 >= len(state.stream_id):
        before_growing()
        state.grow(kernel, spare=1)  # a full table (a lane stops at one, even adding nothing): make the spare
    counts = np.zeros(len(state.stream_id) + 1, np.int64)
    while True:
        start = kernel.reserve_rows(columns.stream, columns.producer_id, start, stop, *state.kernel_arrays(),
                                    bucket, row, counts)
        if start >= stop:
            return counts[:state.n_streams + 1]
        before_growing()
        state.grow(kernel, spare=1)
        counts = np.concatenate([counts, np.zeros(len(state.stream_id) + 1 - len(counts), np.int64)])


def deal(counts: npt.NDArray[np.int64], lanes: int, shares: Sequence[float] | None = None) -> npt.NDArray[np.int8]:
    """The lane of each bucket: the biggest bucket first to the least loaded lane (ties: the lower lane); with
    ``shares`` (one per lane, positive), the lane least loaded for its share."""
    lane_of = np.zeros(len(counts), np.int8)
    share = [1.0] * lanes if shares is None else [float(x) for x in shares]
    loads = [(0.0, lane, 0) for lane in range(lanes)]  # (load / share, lane, load)
    for bucket in np.argsort(-counts, kind="stable"):
        if counts[bucket] == 0:
            break
        _, lane, load = heapq.heappop(loads)
        lane_of[bucket] = lane
        load += int(counts[bucket])
        heapq.heappush(loads, (load / share[lane], lane, load))
    return lane_of


def _prefill(out: VerdictColumns) -> None:
    """The verdict columns as an appended batch has them (validate_listed writes the rest)."""
    out.out_status[:] = Status.APPENDED
    out.out_error_code[:] = rules.NONE
    out.out_finding[:] = rules.F_NONE
    out.out_expected[:] = -1


#: Most lanes a call runs (the lane of a bucket is an int8).
MAX_THREADS = 127
#: Calls of at least this many batches take the lanes on one thread too. Measured with the Cython kernel on a
#: fresh table (4 streams; 2-core AMD EPYC, 1 MiB L2, 32 MiB L3): 100,000 batches 15.3 ms in one pass
#: against 18.1 ms with the pre-pass, 1,000,000 batches 97.6 against 83.4 ms; 20M batches of bench streams
#: (a) and (b) 21.7 against 29.2 and 6.4 against 9.8 M batches/s.
MIN_BATCHES = 500_000


#: On one thread, a call is taken in chunks of this many batches (each reserved, then checked): 1 MiB of row
#: scratch, and the chunk's stream and producer id columns, stay cached from the pre-pass to the check.
#: Measured on bench/bench_validate.py's stream (a) (10,000 streams), table presized, CPU time: 72.6 M batches/s
#: in chunks of 2^18 against 67.5 in chunks of 2^20 and 63.3 in one pass each.
ONE_LANE_CHUNK = 1 << 18
#: ... while the table holds fewer rows than this (12 MiB of them); from there on the rest of the call is taken
#: in one chunk: the rows no longer stay cached from one pass to the next, and each chunk's pre-pass would fetch
#: the index again (stream (b), 640,000 streams: 26.9 M batches/s in chunks of 2^18 against 29.7 in one).
ONE_LANE_CACHED_ROWS = 1 << 16


#: On more than one thread, a call of at least two chunks of this many batches is taken chunk by chunk: the
#: pre-pass (serial: it inserts into the shared indexes) of the next chunk runs on the calling thread while the
#: lanes check this one.
PIPELINE_CHUNK = 1 << 20


def validate_in_lanes(packed: BatchColumns, state: ProducerStateTable, origin: Origin, kernel: Backend,
                      out: VerdictColumns, threads: int) -> Verdicts:
    """:func:`idemcore.validate` over up to ``threads`` lanes of streams, on as many threads. The table is sized
    once, as on one thread (:func:`_reserve_sizing`), and each chunk's rows and buckets go to scratch of a
    chunk's length (two, taken in turn: the next chunk's pre-pass writes one while the lanes read the other)."""
    if threads <= 1:
        return _validate_one_lane(packed, state, origin, kernel, out)
    columns = packed
    n = len(packed)
    old_rows, old_streams = state.n_producers, state.n_streams
    chunk = PIPELINE_CHUNK if n >= 2 * PIPELINE_CHUNK else max(n, 1)
    scratch = [(np.empty(min(chunk, n), np.int32), np.empty(min(chunk, n), np.int32))
               for _ in range(2 if n > chunk else 1)]
    txns = CompletedTxns.empty(int(np.count_nonzero(columns.is_control)))
    lanes = _Lanes(kernel, int(origin), txns.kernel_columns(), threads)
    try:
        for number, start in enumerate(range(0, n, chunk)):
            stop = min(n, start + chunk)
            part = columns.slice(start, stop)
            verdicts = VerdictColumns(*(column[start:stop] for column in out))
            bucket, row = (array[:stop - start] for array in scratch[number % len(scratch)])
            before = state.n_producers
            began = time.perf_counter()
            counts = _reserve_sizing(kernel, part, state, bucket, row, old_rows, n if start == 0 else 0, lanes.wait)
            state.row_reserved_by[before:state.n_producers] += start  # (the chunk's batch numbers: the call's)
            _prefill(verdicts)  # (on this thread, beside the lanes of the chunk before)
            lanes.prepass_cost = (time.perf_counter() - began) / (stop - start)
            lanes.wait()  # a stream's batches of this chunk follow those of the chunk before
            lanes.start(state, part, verdicts, bucket, row, counts, start, beside_prepass=stop < n)
        lanes.wait()
    except BaseException:  # an interrupt, or a kernel bug: every lane has ended; their verdicts are not all written
        with deferred_interrupts():  # (a second Ctrl-C must not cut the cleanup short either)
            lanes.wait(quietly=True)
            _drop_untouched(state, old_rows, old_streams, kernel)
            state.generation += 1
        raise
    _drop_unwritten(state, old_rows, old_streams, functools.partial(_rows_of, kernel, columns, state, n),
                    out.out_status, kernel)
    state.generation += 1
    kept = lanes.completed()
    kept = kept[np.argsort(txns.marker[kept], kind="stable")]  # in the order one pass closes them
    completed = CompletedTxns(*(getattr(txns, name)[kept] for name in CompletedTxns.__dataclass_fields__))
    state.counters[rules.N_COMPLETED] = len(completed)
    return Verdicts(*out, completed, kernel.name)


def _reserve_sizing(kernel: Backend, part: BatchColumns, state: ProducerStateTable, bucket: npt.NDArray[np.int32],
                    row: npt.NDArray[np.int32], old_rows: int, total: int,
                    before_growing: Callable[[], object] = lambda: None) -> npt.NDArray[np.int64]:
    """:func:`_reserve` over all of ``part``; when ``total`` (the call's first chunk, of a call of ``total``
    batches), its first ``ONE_LANE_CHUNK`` batches are the cheap first pass that sizes the table for the call
    (:func:`_size_for_call`) before the rest are reserved, so the table grows once instead of doubling."""
    probe = min(len(part), ONE_LANE_CHUNK) if total else len(part)
    counts = _reserve(kernel, part, state, bucket, row, 0, probe, before_growing)
    if total and probe < total:
        _size_for_call(kernel, state, old_rows, probe, total)
    if probe < len(part):
        more = _reserve(kernel, part, state, bucket, row, probe, len(part), before_growing)
        more[:len(counts)] += counts
        counts = more
    return counts


def _size_for_call(kernel: Backend, state: ProducerStateTable, old_rows: int, seen_batches: int, total: int) -> None:
    """Room for the rows a call of ``total`` batches is expected to add, from those its first ``seen_batches``
    added (:func:`expected_streams`); a table sized for them already is left as it is."""
    expected = old_rows + expected_streams(state.n_producers - old_rows, seen_batches, total) + 1
    if expected > len(state.row_producer_id):
        state.reserve(expected + expected // 10, kernel)  # (+10%: the estimate's spread)


def _validate_one_lane(packed: BatchColumns, state: ProducerStateTable, origin: Origin, kernel: Backend,
                       out: VerdictColumns) -> Verdicts:
    """:func:`validate_in_lanes` on one thread: the pre-pass and the check chunk by chunk (``ONE_LANE_CHUNK``)
    while the table is small enough to stay cached (``ONE_LANE_CACHED_ROWS``), then the rest in one go. A
    chunk's table rows, its rows scratch and its stream and producer id columns are then still cached when
    the check reads them, and the scratch is a chunk's, not the call's (whose pages would be faulted)."""
    columns = packed
    n = len(packed)
    old_rows, old_streams = state.n_producers, state.n_streams
    scratch, no_buckets, every = np.empty(0, np.int32), np.empty(0, np.int32), np.empty(0, np.int64)
    txns = CompletedTxns.empty(int(np.count_nonzero(columns.is_control)))
    txn_columns = txns.kernel_columns()
    completed = 0
    start = 0
    try:
        while start < n:
            stop = min(n, start + ONE_LANE_CHUNK) if state.n_producers < ONE_LANE_CACHED_ROWS else n
            if stop - start > len(scratch):
                scratch = np.empty(stop - start, np.int32)  # (at most twice a call: a chunk's, then the rest's)
            part = columns.slice(start, stop)
            verdicts = VerdictColumns(*(column[start:stop] for column in out))
            row = scratch[:stop - start]
            before = state.n_producers
            _reserve(kernel, part, state, no_buckets, row, 0, stop - start)
            state.row_reserved_by[before:state.n_producers] += start  # (the chunk's batch numbers: the call's)
            _prefill(verdicts)
            state.counters[rules.N_COMPLETED] = 0
            region = [column[completed:] for column in txn_columns]
            stopped = kernel.validate_listed(*part, int(origin), every, row, 0, stop - start, *state.kernel_arrays(),
                                             *verdicts, *region)
            if stopped < stop - start:
                raise RuntimeError("the check ran out of table room after reserve_rows made room for it")  # a bug
            closed = int(state.counters[rules.N_COMPLETED])
            txn_columns.txn_marker[completed:completed + closed] += start
            completed += closed
            if start == 0 and stop < n:  # the first chunk was the cheap first pass: room for the call's streams
                _size_for_call(kernel, state, old_rows, stop, n)
            start = stop
    except BaseException:  # an interrupt, or a kernel bug: the verdicts are not all written
        with deferred_interrupts():
            _drop_untouched(state, old_rows, old_streams, kernel)
            state.generation += 1
        raise
    _drop_unwritten(state, old_rows, old_streams, functools.partial(_rows_of, kernel, columns, state, n),
                    out.out_status, kernel)
    state.generation += 1
    state.counters[rules.N_COMPLETED] = completed
    return Verdicts(*out, txns.head(completed), kernel.name)


def expected_streams(seen: int, first: int, total: int) -> int:
    """How many distinct streams ``total`` batches hold when their first ``first`` held ``seen``, as if each batch
    picked one of D streams at random: solve ``seen = D (1 - exp(-first / D))`` for D (bisection), then
    ``D (1 - exp(-total / D))``, at most five times ``seen`` (and ``total``): a stream mix unlike the model (new
    producers arriving late, a burst of one-off ones at the start) costs a doubling later or some unused rows,
    never a table out of all proportion. ``seen`` when the model says nothing (every batch so far a new
    stream, or none)."""
    if seen <= 0 or first <= 0 or seen >= first * 0.98:
        return max(seen, 0)
    low, high = float(seen), float(seen)
    while high * -np.expm1(-first / high) < seen:  # (d(D) grows with D towards first)
        low, high = high, high * 2
    for _ in range(40):
        middle = (low + high) / 2
        if middle * -np.expm1(-first / middle) < seen:
            low = middle
        else:
            high = middle
    estimate = high * -np.expm1(-total / high)
    return int(min(max(estimate, seen), 5 * seen, total))


def _rows_of(kernel: Backend, columns: BatchColumns, state: ProducerStateTable, n: int) -> npt.NDArray[np.int32]:
    """Every batch's row, looked up again (reserve_rows finds them all: it adds none)."""
    row = np.empty(n, np.int32)
    _reserve(kernel, columns, state, np.empty(0, np.int32), row, 0, n)
    return row


class _Lanes:
    """The lanes of one call: each chunk's streams dealt out and checked on the pool (on the calling thread
    with one thread, or the ``python`` kernel), each lane writing completed transactions to its own stretch of
    the transaction columns.

    Beside the next chunk's pre-pass, which is faster than the check (stream (b) of bench/bench_validate.py,
    Cython, CPU time: 80 against 50 M batches/s), the calling thread also takes a lane once its pre-pass is done
    (:meth:`wait` runs it): a share of the chunk sized so that it ends with the pool's lanes, from the pre-pass's
    and the lanes' time per batch on the chunk before."""

    #: The calling thread's lane is left out below this share of a chunk (not worth its listing).
    MIN_CALLER_SHARE = 0.05

    def __init__(self, kernel: Backend, origin: int, txn_columns: Sequence[np.ndarray], threads: int):
        self.kernel, self.origin, self.txn_columns, self.threads = kernel, origin, txn_columns, threads
        self.txn_cursor = 0
        self.regions: list[tuple[int, np.ndarray]] = []  # per lane run: its first transaction slot, its counters
        self.running: list[Future[None]] = []
        self.deferred: list[Callable[[], None]] = []  # the calling thread's lane, run by wait()
        self.prepass_cost = 0.6 / 50e6  # seconds per batch (measured each chunk; first: the ratio above)
        self.check_cost = 1 / 50e6  # seconds per batch of the pool's lanes, on the chunk before
        self._lane_costs: list[float] = []

    def caller_share(self) -> float:
        """The share of a chunk the calling thread checks after its pre-pass of the next one, so that it ends
        with the pool's ``threads - 1`` lanes: (1 - (threads - 1) r / c) / threads for a pre-pass of r and a
        check of c seconds per batch; 0 when too small (``MIN_CALLER_SHARE``)."""
        ratio = self.prepass_cost / max(self.check_cost, 1e-12)
        share = (1 - (self.threads - 1) * ratio) / self.threads
        return share if share >= self.MIN_CALLER_SHARE else 0.0

    def start(self, state: ProducerStateTable, part: BatchColumns, out: VerdictColumns,
              bucket: npt.NDArray[np.int32], row: npt.NDArray[np.int32], counts: npt.NDArray[np.int64],
              start: int, beside_prepass: bool = False) -> None:
        """Start checking the chunk ``part`` (the call's batches from ``start`` on; ``out``, ``bucket`` and
        ``row``: its verdicts, and the buckets and rows reserve_rows gave it); ``beside_prepass``: the next
        chunk's pre-pass runs meanwhile on this thread, which then takes the last lane (:meth:`caller_share`; on
        stream (b) of bench/bench_validate.py, 2 threads, before this lane: 15.7-16.7 M batches/s with two pool
        lanes beside the pre-pass, 18.2-20.8 with one)."""
        pooled = self.threads > 1 and self.kernel.name != "python"
        caller = self.caller_share() if beside_prepass and pooled else 0.0
        threads = max(1, self.threads - 1) + (caller > 0) if beside_prepass else self.threads
        lanes = max(1, min(threads, MAX_THREADS, int(np.count_nonzero(counts))))
        control = part.is_control.view(bool)
        if lanes == 1:
            runs = [(np.empty(0, np.int64), 0, len(part))]  # (every batch, in order)
            controls = [int(np.count_nonzero(control))]
            caller = 0.0
        else:
            shares = None
            if caller > 0:
                shares = [(1 - caller) / (lanes - 1)] * (lanes - 1) + [caller]
            batch_lane = deal(counts, lanes, shares)[bucket]
            listed = [np.flatnonzero(batch_lane == lane) for lane in range(lanes)]
            runs = [(mine, 0, len(mine)) for mine in listed]
            controls = np.bincount(batch_lane[control], minlength=lanes).tolist()
        arrays = state.kernel_arrays()
        jobs = []
        for (listed_t, lo, hi), count in zip(runs, controls, strict=True):
            counters = state.counters.copy()
            counters[rules.N_COMPLETED] = 0
            region = [column[self.txn_cursor:self.txn_cursor + count] for column in self.txn_columns]
            self.regions.append((self.txn_cursor, counters))
            self.txn_cursor += count
            jobs.append(functools.partial(self._check, part, out, row, listed_t, lo, hi,
                                          arrays._replace(counters=counters), region, start))
        if pooled:
            if caller > 0:
                self.deferred = [jobs.pop()]
            pool = _pool(min(self.threads, MAX_THREADS))  # (no more lanes than that: one pool for any more)
            self.running = []
            self._lane_costs = []
            for job in jobs:
                self.running.append(pool.submit(job))  # (one at a time: an interrupt here still waits for them)
        else:
            for job in jobs:
                job()

    def _check(self, part: BatchColumns, out: VerdictColumns, row: npt.NDArray[np.int32], listed: np.ndarray,
               lo: int, hi: int, arrays: StateArrays, region: list[np.ndarray], start: int) -> None:
        began = time.perf_counter()
        stopped = self.kernel.validate_listed(*part, self.origin, listed, row, lo, hi, *arrays, *out, *region)
        if stopped < hi:
            raise RuntimeError("a lane ran out of table room after reserve_rows made room for it")  # a kernel bug
        TxnColumns(*region).txn_marker[:int(arrays.counters[rules.N_COMPLETED])] += start  # (the chunk's batch numbers)
        if hi > lo:
            self._lane_costs.append((time.perf_counter() - began) / (hi - lo))

    def wait(self, quietly: bool = False) -> None:
        """Run the calling thread's lane, if any, then return once every running lane has ended; raise the first
        error unless ``quietly`` (the calling thread's lane is run even so: the chunk's lanes all end)."""
        try:
            while self.deferred:
                self.deferred.pop()()
        except BaseException:
            if not quietly:
                raise
        finally:
            wait(self.running)
        if self.running and self._lane_costs:
            self.check_cost = sum(self._lane_costs) / len(self._lane_costs)
        if not quietly:
            for future in self.running:
                future.result()

    def completed(self) -> npt.NDArray[np.int64]:
        """Where the lanes wrote their completed transactions."""
        return np.concatenate([np.arange(first, first + int(counters[rules.N_COMPLETED]), dtype=np.int64)
                               for first, counters in self.regions] or [np.empty(0, np.int64)])


def _drop_unwritten(state: ProducerStateTable, old_rows: int, old_streams: int,
                    rows_of: Callable[[], npt.NDArray[np.int32]], status: npt.NDArray[np.int8],
                    kernel: Backend) -> None:
    """Remove the entries reserve_rows added that no batch was committed to: the table then holds what a
    single pass holds. Usually the batch that added an entry was appended (then nothing is looked at but those
    batches; ``rows_of``, every batch's row, is not called); a committed stream has a next offset of at
    least 1 (a batch's last offset + 1)."""
    new_rows = state.n_producers - old_rows
    added_by = state.row_reserved_by[old_rows:state.n_producers]
    if new_rows and not (status[added_by] == Status.APPENDED).all():
        written = np.zeros(new_rows, bool)
        rows = rows_of()[status == Status.APPENDED]
        written[rows[rows >= old_rows] - old_rows] = True
        if not written.all():
            state.remove_rows(np.concatenate([np.zeros(old_rows, bool), ~written]), kernel)
    _drop_empty_streams(state, old_streams, kernel)


def _drop_empty_streams(state: ProducerStateTable, old_streams: int, kernel: Backend) -> None:
    unwritten = state.stream_next_offset[old_streams:state.n_streams] == 0
    if unwritten.any():
        state.remove_streams(np.concatenate([np.zeros(old_streams, bool), unwritten]), kernel)


def _drop_untouched(state: ProducerStateTable, old_rows: int, old_streams: int, kernel: Backend) -> None:
    """After an interrupt, when the verdicts do not say which batches were committed: remove the added entries
    still as reserve_rows made them. Such an entry reads as absent to every rule, committed or not (a marker of
    epoch -1, coordinator epoch -1 and timestamp -1 leaves one so), so later verdicts are one pass's; the table
    may then lack such an entry that one pass would hold."""
    n = state.n_producers
    fresh = ((state.row_epoch[old_rows:n] == -1) & (state.ring_len[old_rows:n] == 0)
             & (state.row_txn_first_offset[old_rows:n] == -1) & (state.row_last_timestamp[old_rows:n] == -1)
             & (state.row_coordinator_epoch[old_rows:n] == -1))
    if fresh.any():
        state.remove_rows(np.concatenate([np.zeros(old_rows, bool), fresh]), kernel)
    _drop_empty_streams(state, old_streams, kernel)
