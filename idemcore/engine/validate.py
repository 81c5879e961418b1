"""validate, check and commit: the producer-state rules (docs/rules.md) over batch metadata, through the
selected kernel backend.

``validate`` checks and commits each batch in turn (a stream replayed in
order: the audit, recovery). A broker splits the two, as Kafka does
(ProducerAppendInfo, log append, ProducerStateManager.update): ``check``
computes the verdicts without touching the state, the broker writes the log,
and ``commit`` records only the batches whose write succeeded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from idemcore.engine import lanes
from idemcore.engine.table import ProducerStateTable
from idemcore.engine.verdicts import CompletedTxns, Verdicts
from idemcore.kernels import Backend, BoundBatches, bind_batches, get_backend
from idemcore.kernels import rules_reference as rules
from idemcore.kernels.abi import CommitVerdicts, TxnColumns, VerdictColumns
from idemcore.kernels.columns import BatchColumns
from idemcore.protocol.codes import Origin, Status


def _prepare(batches: Any, state: ProducerStateTable | None, origin: str | Origin, backend: str | Backend | None
             ) -> tuple[BatchColumns, ProducerStateTable, Origin, Backend]:
    packed = BatchColumns.coerce(batches)
    if state is None:
        state = ProducerStateTable()
    elif not isinstance(state, ProducerStateTable):
        raise TypeError(f"state must be a ProducerStateTable, not {type(state).__name__}")
    return packed, state, Origin.parse(origin), get_backend(backend)


def _refuse_shared_memory(out: VerdictColumns, inputs: BatchColumns) -> None:
    """ValueError when a verdict column to be written shares memory with another one or with an input column
    (the kernels read a batch's input after writing other batches' verdicts). Exact for the 1-D contiguous
    arrays both are."""
    arrays = {f"out.{name[4:]}": array for name, array in out._asdict().items()}
    arrays.update(inputs.to_dict())
    names = list(arrays)
    for k, name in enumerate(names[:len(out)]):
        for other in names[k + 1:]:
            if np.may_share_memory(arrays[name], arrays[other]):
                raise ValueError(f"{name} shares memory with {other}: out must be arrays of its own")


def check_threads(threads: Any) -> int:
    """``threads`` if it is a whole number of at least 1, else ValueError naming it."""
    if isinstance(threads, bool) or not isinstance(threads, int | np.integer) or threads < 1:
        raise ValueError(f"threads must be a whole number of at least 1, not {threads!r}")
    return int(threads)


def validate(
    batches: Any,
    state: ProducerStateTable | None = None,
    origin: str | Origin = "client",
    backend: str | Backend | None = None,
    *,
    threads: int = 1,
    out: Verdicts | None = None,
) -> Verdicts:
    """Apply Kafka's producer-state rules to every batch, in order, committing each accepted one.

    ``batches``: a mapping of arrays, pandas DataFrame or pyarrow Table with the
    columns of :data:`idemcore.COLUMNS` (or a :class:`~idemcore.BatchColumns`);
    the ``stream`` column may be given as Kafka's ``partition`` (the batches of
    one topic; :mod:`idemcore.kernels.columns`). ``state``: a
    :class:`ProducerStateTable` carried across calls (updated in place); None
    starts from empty state. ``origin``: ``"client"``, ``"coordinator"`` or
    ``"replication"``; it applies to data batches, control batches are always
    checked as markers written by the coordinator. ``backend``: ``"cython"``,
    ``"numba"``, ``"python"``, ``"auto"`` or None (``$IDEMCORE_BACKEND``).

    ``threads``: split the streams over this many threads, each checking its
    own streams' batches in order (the compiled backends release the GIL;
    ``python`` runs the lanes one after another). The verdicts, the completed
    transactions and the state are those of one thread in input order (see
    :mod:`idemcore.engine.lanes`, which also takes every call of at least
    ``lanes.MIN_BATCHES`` batches: its pre-pass makes the check faster).

    ``out``: verdicts of an earlier call, at least as long as ``batches``, whose
    columns this call overwrites (the returned verdicts' columns are views of
    them; pass the same full-length buffer each time, not the returned views).
    A loop over chunks saves the page faults of fresh arrays: on this project's
    bench machine about 60 ms per 20M batches. Columns that overlap each other
    or an input column raise ValueError.
    """
    check_threads(threads)
    _check_out(out)
    packed, state, origin, kernel = _prepare(batches, state, origin, backend)
    return validate_into(packed, state, origin, kernel, _verdict_columns(out, packed), threads=threads)


def _check_out(out: Any) -> None:
    if out is not None and not isinstance(out, Verdicts):
        raise TypeError(f"out must be the Verdicts of an earlier call, not {type(out).__name__}")


def _verdict_columns(out: Verdicts | None, packed: BatchColumns) -> VerdictColumns:
    """Fresh verdict columns for ``packed``, or the first ``len(packed)`` of ``out``'s (checked)."""
    if out is None:
        return Verdicts.allocate(len(packed))
    columns = out.reuse(len(packed))
    _refuse_shared_memory(columns, packed)
    return columns


def check(
    batches: Any,
    state: ProducerStateTable,
    origin: str | Origin = "client",
    backend: str | Backend | None = None,
    *,
    out: Verdicts | None = None,
) -> Verdicts:
    """Prepare: the verdict of every batch against ``state`` as it stands, changing nothing.

    Every batch sees the same state, so no two may be for one stream (each
    is given the stream's log end): a produce request carries one batch per
    stream. Record the batches once they are written with :func:`commit`.

    ``out``: as :func:`validate`'s, verdicts of an earlier call whose columns
    this call overwrites (at least as long as ``batches``; the returned
    verdicts' columns are views of them), so a loop of checks allocates none.
    """
    _check_out(out)
    packed, state, origin, kernel = _prepare(batches, state, origin, backend)
    if len(np.unique(packed["stream"])) != len(packed):
        raise ValueError("check() takes at most one batch per stream (a topic's partition; each is given its "
                         "log end); use validate() for a sequence of batches")
    columns = _verdict_columns(out, packed)
    txns = CompletedTxns.empty(int(np.count_nonzero(packed["is_control"])))
    completed = check_into(kernel, packed, origin, 0, len(packed), state, columns,
                           txns.kernel_columns())
    return Verdicts(*columns, txns.head(completed), kernel.name)


def commit(
    batches: Any,
    verdicts: Verdicts,
    state: ProducerStateTable,
    written: np.ndarray | None = None,
    backend: str | Backend | None = None,
) -> None:
    """Record in ``state`` the batches :func:`check` accepted (``written``: a mask of those whose log write
    succeeded; by default all of them)."""
    packed, state, _, kernel = _prepare(batches, state, "client", backend)
    if len(verdicts) != len(packed):
        raise ValueError(f"{len(verdicts)} verdicts for {len(packed)} batches")
    status = verdicts.status
    if written is not None:
        written = np.asarray(written, dtype=bool)
        if written.shape != status.shape:
            raise ValueError(f"written must have one flag per batch ({len(status)}), got shape {written.shape}")
        status = np.where(written, status, Status.REJECTED).astype(np.int8)
    commit_into(kernel, packed, 0, len(packed), state,
                CommitVerdicts(status, verdicts.base_offset, verdicts.last_offset))


def check_into(kernel: Backend, columns: BatchColumns, origin: Origin, start: int, stop: int,
               state: ProducerStateTable, out: VerdictColumns, txns: TxnColumns) -> int:
    """The kernel's check_batches over checked, packed input; returns the number of completed transactions
    written to ``txns``."""
    state.counters[rules.N_COMPLETED] = 0
    kernel.check_batches(*columns, int(origin), start, stop, *state.kernel_arrays(), *out, *txns)
    return int(state.counters[rules.N_COMPLETED])


class BoundChecks:
    """:func:`check_into` and :func:`commit_into` over columns that stay the same from call to call (a broker's
    request columns): the kernel binds to them once (:func:`idemcore.kernels.bind_batches`), and again only when
    the kernel or the state table's arrays change (the table grew, another table). Taking some 40 buffers at
    each call was 7 of the ~25 us a one-batch append cost."""

    def __init__(self, columns: BatchColumns, out: VerdictColumns, txns: TxnColumns, commit: CommitVerdicts) -> None:
        self._groups = (columns, out, txns, commit)
        self._key: tuple[Backend, Any] | None = None
        self._bound: BoundBatches | None = None

    def _bind(self, kernel: Backend, state: ProducerStateTable) -> BoundBatches:
        arrays = state.kernel_arrays()  # the same object until the table reallocates
        key = self._key
        if key is None or key[0] is not kernel or key[1] is not arrays or self._bound is None:
            columns, out, txns, commit = self._groups
            self._bound = bind_batches(kernel, columns, arrays, out, txns, commit)
            self._key = (kernel, arrays)
        return self._bound

    def check(self, kernel: Backend, origin: Origin, start: int, stop: int, state: ProducerStateTable) -> int:
        """:func:`check_into` over the bound columns."""
        state.counters[rules.N_COMPLETED] = 0
        self._bind(kernel, state).check_batches(int(origin), start, stop)
        return int(state.counters[rules.N_COMPLETED])

    def commit(self, kernel: Backend, start: int, stop: int, state: ProducerStateTable) -> None:
        """:func:`commit_into` over the bound columns."""
        state.generation += 1
        while True:
            start = self._bind(kernel, state).commit_batches(start, stop)
            if start >= stop:
                return
            state.grow(kernel)


def commit_into(kernel: Backend, columns: BatchColumns, start: int, stop: int, state: ProducerStateTable,
                verdicts: CommitVerdicts) -> None:
    """The kernel's commit_batches, growing the table when it runs out of room."""
    state.generation += 1
    while True:
        start = kernel.commit_batches(*columns, start, stop, *state.kernel_arrays(), *verdicts)
        if start >= stop:
            return
        state.grow(kernel)


def validate_into(packed: BatchColumns, state: ProducerStateTable, origin: Origin, kernel: Backend,
                  out: VerdictColumns, threads: int = 1) -> Verdicts:
    """:func:`validate` on checked input, writing the per-batch columns into ``out`` (arrays, or views
    of bigger ones, of :data:`VERDICT_DTYPES`)."""
    if (threads > 1 and len(packed) > 1) or len(packed) >= lanes.MIN_BATCHES:  # (threads: check_threads'd)
        return lanes.validate_in_lanes(packed, state, origin, kernel, out, int(threads))
    completed = CompletedTxns.empty(int(np.count_nonzero(packed["is_control"])))
    txns = completed.kernel_columns()
    columns = packed
    n = len(packed)
    state.counters[rules.N_COMPLETED] = 0
    state.generation += 1
    start = 0
    while True:
        start = kernel.validate_batches(*columns, int(origin), start, n, *state.kernel_arrays(), *out, *txns)
        if start >= n:
            break
        state.grow(kernel)
    return Verdicts(*out, completed.head(int(state.counters[rules.N_COMPLETED])), kernel.name)
