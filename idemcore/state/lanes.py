"""validate() split into lanes of partitions: run side by side on threads, or grouped by partition.

A partition's producer state and log end belong to that partition alone, so batches of different partitions can
be checked in any interleaving as long as each partition's batches keep their order. This module:

1. gives every batch its partition and producer row first, adding entries for new ones (the kernels'
   ``reserve_rows``, one pass on one thread), so no lane ever inserts into the shared indexes;
2. deals the partitions out to lanes, the biggest first to the least loaded lane, and permutes the batch columns
   so each lane's batches are contiguous: in input order, or grouped partition by partition (a partition's
   producers then stay in the caches while its batches run, instead of a random walk over every producer);
3. runs ``validate_batches`` over each lane, on its own thread (the compiled kernels release the GIL), each with
   its own count of completed transactions and its own stretch of the transaction columns;
4. puts the verdicts back in input order, sorts the completed transactions by the marker that closed them, and
   drops the entries step 1 added that no batch was committed to (a first write that was refused).

The verdicts, the completed transactions (in order) and the state (``ProducerStateTable.canonical``) are the
ones :func:`idemcore.validate` computes on one thread; only row numbers may differ.
"""

from __future__ import annotations

import functools
import heapq
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from idemcore.kernels import Backend
from idemcore.kernels import reference as rules
from idemcore.kernels.abi import BatchColumns, VerdictColumns
from idemcore.protocol.codes import Origin, Status
from idemcore.record.columns import BatchMetadata
from idemcore.state.table import ProducerStateTable

#: Grouping by partition pays once the rows outgrow the caches: a table of this many producer rows (192 bytes
#: each: 24 MiB) and more than one partition (measured by bench/bench_validate.py, see docs/performance.md).
GROUP_MIN_ROWS = 131_072
#: ... and on a call of at least this many batches (the permutation is a pass over every column).
GROUP_MIN_BATCHES = 1_000_000


def should_group(state: ProducerStateTable, batches: int) -> bool:
    """The measured rule for ``group=None``: group by partition when the table is big and the call long."""
    return batches >= GROUP_MIN_BATCHES and state.n_partitions > 1 and state.n_producers >= GROUP_MIN_ROWS


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="idemcore-lane")


def _reserve(kernel: Backend, columns: BatchColumns, state: ProducerStateTable
             ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    n = len(columns.partition)
    bucket = np.empty(n, np.int32)
    rank = np.empty(n, np.int32)
    row = np.empty(n, np.int32)
    counts = np.zeros(len(state.partition_id) + 1, np.int64)
    start = 0
    while True:
        start = kernel.reserve_rows(columns.partition, columns.producer_id, start, n, *state.kernel_arrays(),
                                    bucket, rank, row, counts)
        if start >= n:
            return bucket, rank, row, counts[:state.n_partitions + 1]
        state.grow(kernel, spare=1)
        counts = np.concatenate([counts, np.zeros(len(state.partition_id) + 1 - len(counts), np.int64)])


def deal(counts: npt.NDArray[np.int64], lanes: int) -> npt.NDArray[np.int32]:
    """The lane of each bucket: the biggest bucket first to the least loaded lane (ties: the lower lane)."""
    lane_of = np.zeros(len(counts), np.int32)
    loads = [(0, lane) for lane in range(lanes)]
    for bucket in np.argsort(-counts, kind="stable"):
        if counts[bucket] == 0:
            break
        load, lane = heapq.heappop(loads)
        lane_of[bucket] = lane
        heapq.heappush(loads, (load + int(counts[bucket]), lane))
    return lane_of


def _positions(bucket: npt.NDArray[np.int32], rank: npt.NDArray[np.int32], counts: npt.NDArray[np.int64],
               lane_of: npt.NDArray[np.int32], lanes: int, group: bool
               ) -> tuple[npt.NDArray[np.int64], list[tuple[int, int]]]:
    """Where each batch goes in the permuted columns, and each lane's stretch of them."""
    lane_sizes = np.bincount(lane_of, weights=counts, minlength=lanes).astype(np.int64)
    lane_start = np.concatenate([[0], np.cumsum(lane_sizes)])
    bounds = [(int(lane_start[t]), int(lane_start[t + 1])) for t in range(lanes)]
    if group:  # buckets in (lane, bucket) order; a batch at its bucket's start plus its rank
        order = np.lexsort((np.arange(len(counts)), lane_of))
        starts = np.empty(len(counts), np.int64)
        starts[order] = np.concatenate([[0], np.cumsum(counts[order])[:-1]])
        return starts[bucket] + rank, bounds
    batch_lane = lane_of[bucket]
    pos = np.empty(len(bucket), np.int64)
    for lane, (lo, hi) in enumerate(bounds):
        pos[batch_lane == lane] = np.arange(lo, hi)
    return pos, bounds


def validate_in_lanes(packed: BatchMetadata, state: ProducerStateTable, origin: Origin, kernel: Backend,
                      out: VerdictColumns, threads: int, group: bool):  # -> Verdicts (a cycle to state.validate)
    """:func:`idemcore.validate` over ``threads`` lanes of partitions (grouped by partition if ``group``)."""
    from idemcore.state.validate import CompletedTxns, Verdicts

    columns = packed.kernel_columns()
    n = len(packed)
    old_rows, old_partitions = state.n_producers, state.n_partitions
    bucket, rank, row, counts = _reserve(kernel, columns, state)
    lanes = max(1, min(threads, int(np.count_nonzero(counts))))
    lane_of = deal(counts, lanes)
    pos, bounds = _positions(bucket, rank, counts, lane_of, lanes, group)

    permuted = BatchColumns(*(np.empty_like(column) for column in columns))
    verdicts = Verdicts.allocate(n)

    def scatter(k: int) -> None:
        permuted[k][pos] = columns[k]

    def gather(k: int) -> None:
        np.take(verdicts[k], pos, out=out[k])

    run = _pool(lanes).map if lanes > 1 and kernel.name != "python" else map
    list(run(scatter, range(len(columns))))
    controls = [int(np.count_nonzero(permuted.is_control[lo:hi])) for lo, hi in bounds]
    txns = CompletedTxns.empty(sum(controls))
    txn_columns = txns.kernel_columns()
    counters = [state.counters.copy() for _ in bounds]
    txn_start = np.concatenate([[0], np.cumsum(controls)]).astype(np.int64)
    arrays = state.kernel_arrays()

    def lane(t: int) -> int:
        lo, hi = bounds[t]
        counters[t][rules.N_COMPLETED] = 0
        mine = arrays._replace(counters=counters[t])
        region = [column[txn_start[t]:txn_start[t + 1]] for column in txn_columns]
        return kernel.validate_batches(*permuted, int(origin), lo, hi, *mine, *verdicts, *region)

    stopped = list(run(lane, range(lanes)))
    if any(stop < hi for stop, (_, hi) in zip(stopped, bounds, strict=True)):
        raise RuntimeError("a lane ran out of table room after reserve_rows made room for it")  # a kernel bug
    list(run(gather, range(len(out))))

    done = [int(c[rules.N_COMPLETED]) for c in counters]
    kept = np.concatenate([np.arange(txn_start[t], txn_start[t] + done[t]) for t in range(lanes)]).astype(np.int64)
    completed = CompletedTxns(*(getattr(txns, name)[kept] for name in CompletedTxns.__dataclass_fields__))
    if len(completed):
        source = np.empty(n, np.int64)
        source[pos] = np.arange(n)
        completed.marker[:] = source[completed.marker]
        order = np.argsort(completed.marker, kind="stable")
        completed = CompletedTxns(*(getattr(completed, name)[order] for name in CompletedTxns.__dataclass_fields__))
    state.counters[rules.N_COMPLETED] = len(completed)
    _drop_unwritten(state, old_rows, old_partitions, row, out.out_status, kernel)
    state.generation += 1
    return Verdicts(*out, completed, kernel.name)


def _drop_unwritten(state: ProducerStateTable, old_rows: int, old_partitions: int, row: npt.NDArray[np.int32],
                    status: npt.NDArray[np.int8], kernel: Backend) -> None:
    """Remove the entries reserve_rows added that no batch was committed to: the table then holds what a
    single pass holds. A committed partition has a next offset of at least 1 (a batch's last offset + 1)."""
    new_rows = state.n_producers - old_rows
    if new_rows:
        written = np.zeros(new_rows, bool)
        rows = row[status == Status.APPENDED]
        written[rows[rows >= old_rows] - old_rows] = True
        if not written.all():
            state.remove_rows(np.concatenate([np.zeros(old_rows, bool), ~written]), kernel)
    unwritten = state.partition_next_offset[old_partitions:state.n_partitions] == 0
    if unwritten.any():
        state.remove_partitions(np.concatenate([np.zeros(old_partitions, bool), unwritten]), kernel)
