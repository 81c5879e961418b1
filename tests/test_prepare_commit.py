"""check (prepare) then commit, as a broker uses them, against validate over what was really written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore import ProducerStateTable, Status, check, commit, validate
from idemcore.kernels.columns import BatchColumns
from idemcore.synth.streams import synthetic_stream


def requests(packed: BatchColumns) -> list[np.ndarray]:
    """Consecutive batches grouped into requests of at most one batch per stream, in order."""
    groups, current, seen = [], [], set()
    for i, partition in enumerate(packed["stream"].tolist()):
        if partition in seen:
            groups.append(np.array(current))
            current, seen = [], set()
        current.append(i)
        seen.add(partition)
    if current:
        groups.append(np.array(current))
    return groups


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), fail_rate=st.sampled_from([0.0, 0.1, 0.5]),
       first_sequence=st.sampled_from([0, 2147483640]))
def test_check_and_commit_equal_validate_over_the_batches_written(backend, seed, fail_rate, first_sequence):
    packed = BatchColumns.coerce(synthetic_stream(200, n_producers=4, n_partitions=3, retry_fraction=0.2,
                                                   first_sequence=first_sequence, seed=seed))
    rng = np.random.default_rng(seed)
    state = ProducerStateTable(row_capacity=1, stream_capacity=1)  # small: commit must grow it
    kept, verdict_rows = [], []
    for rows in requests(packed):
        batch = packed.take(rows)
        verdicts = check(batch, state, backend=backend)
        written = (verdicts.status == Status.APPENDED) & (rng.random(len(rows)) >= fail_rate)
        failed = (verdicts.status == Status.APPENDED) & ~written
        commit(batch, verdicts, state, written=written, backend=backend)
        kept += rows[~failed].tolist()  # a failed write is as if the batch never arrived
        verdict_rows += [(int(verdicts.status[k]), int(verdicts.error_code[k]), int(verdicts.base_offset[k]),
                          int(verdicts.finding[k])) for k in np.flatnonzero(~failed)]
    expected_state = ProducerStateTable()
    expected = validate(packed.take(np.array(kept, dtype=np.int64)), expected_state, backend=backend)
    assert verdict_rows == list(zip(expected.status.tolist(), expected.error_code.tolist(),
                                    expected.base_offset.tolist(), expected.finding.tolist(), strict=True))
    mine, theirs = state.canonical(), expected_state.canonical()
    assert mine.keys() == theirs.keys()
    for name in mine:
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)


def test_check_changes_no_state_and_refuses_two_batches_for_one_partition(backend):
    state = ProducerStateTable()
    batches = {"partition": [0, 1], "producer_id": [7, 7], "producer_epoch": [0, 0], "base_sequence": [0, 0],
               "record_count": [2, 1], "is_transactional": [True, False]}
    before = {name: array.copy() for name, array in state.canonical().items()}
    verdicts = check(batches, state, backend=backend)
    assert verdicts.status.tolist() == [Status.APPENDED] * 2 and verdicts.last_offset.tolist() == [1, 0]
    after = state.canonical()
    assert all(np.array_equal(before[name], after[name]) for name in before)
    commit(batches, verdicts, state, written=[False, True], backend=backend)
    assert state.row_of(0, 7) is None and state.row_of(1, 7) is not None and state.next_offset(1) == 1
    with pytest.raises(ValueError, match="at most one batch per stream"):
        check({**batches, "partition": [2, 2]}, state, backend=backend)
    with pytest.raises(ValueError, match="written must have one flag per batch"):
        commit(batches, verdicts, state, written=[True], backend=backend)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), fail_rate=st.sampled_from([0.0, 0.3]))
def test_bound_checks_equal_check_into_and_commit_into_across_growth(backend, seed, fail_rate):
    """As a broker appends: one set of request columns, filled per request and checked through the bound kernels
    (BoundChecks), against the unbound check_into/commit_into on a twin table. Both tables start with one row and
    one partition, so commit grows them (the bound kernels must follow the new arrays)."""
    from idemcore.broker.replica_manager import RequestColumns
    from idemcore.engine.validate import check_into, commit_into
    from idemcore.kernels import get_backend
    from idemcore.kernels.columns import COLUMNS
    from idemcore.protocol.codes import Origin

    kernel = get_backend(backend)
    packed = BatchColumns.coerce(synthetic_stream(150, n_producers=5, n_partitions=4, retry_fraction=0.2,
                                                   seed=seed))
    rng = np.random.default_rng(seed)
    bound_state = ProducerStateTable(row_capacity=1, stream_capacity=1)
    plain_state = ProducerStateTable(row_capacity=1, stream_capacity=1)
    bound, plain = RequestColumns(8), RequestColumns(8)
    grown = 0
    for rows in requests(packed):
        k = len(rows)
        for columns in (bound, plain):
            for name, column in zip(COLUMNS, columns.batch, strict=True):
                column[:k] = packed[name][rows]
        arrays_before = bound_state.kernel_arrays()
        completed = bound.kernels.check(kernel, Origin.CLIENT, 0, k, bound_state)
        assert completed == check_into(kernel, plain.batch, Origin.CLIENT, 0, k, plain_state, plain.verdicts,
                                       plain.txns)
        for name in bound.verdicts._fields:
            np.testing.assert_array_equal(getattr(bound.verdicts, name)[:k], getattr(plain.verdicts, name)[:k])
        np.testing.assert_array_equal(bound.txns.txn_marker[:completed], plain.txns.txn_marker[:completed])
        failed = rng.random(k) < fail_rate
        for columns in (bound, plain):
            columns.verdicts.out_status[:k][failed] = Status.REJECTED  # a failed write is not committed
        bound.kernels.commit(kernel, 0, k, bound_state)
        commit_into(kernel, plain.batch, 0, k, plain_state, plain.commit)
        grown += bound_state.kernel_arrays() is not arrays_before
    assert grown >= 2  # rows and partitions grew while bound
    mine, theirs = bound_state.canonical(), plain_state.canonical()
    for name in mine:
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)


def test_bind_batches_takes_the_compiled_class_and_falls_back_on_an_old_build(monkeypatch):
    from idemcore import kernels
    from idemcore.broker.replica_manager import RequestColumns
    from idemcore.kernels import cython_rules

    columns, state = RequestColumns(4), ProducerStateTable()
    groups = (columns.batch, state.kernel_arrays(), columns.verdicts, columns.txns, columns.commit)
    compiled = kernels.bind_batches(kernels.load_backend("cython"), *groups)
    assert type(compiled) is cython_rules.BoundBatches
    with pytest.raises(ValueError, match=r"start\.\.stop beyond the bound columns"):
        compiled.check_batches(0, 0, 5)
    with pytest.raises(ValueError, match=r"start\.\.stop beyond the bound columns"):
        compiled.commit_batches(3, 5)
    assert compiled.check_batches(0, 0, 0) == 0 and compiled.commit_batches(2, 2) == 2
    assert type(kernels.bind_batches(kernels.load_backend("python"), *groups)).__name__ == "_Splatted"
    monkeypatch.delattr(cython_rules, "BoundBatches")  # an extension built before the class existed
    fallback = kernels.bind_batches(kernels.load_backend("cython"), *groups)
    assert type(fallback).__name__ == "_Splatted" and fallback.check_batches(0, 0, 0) == 0


def test_check_into_an_earlier_calls_verdicts_gives_what_a_fresh_check_gives(backend):
    # check(..., out=): a broker-like loop of requests writing every verdict into one buffer, stale values from
    # the request before overwritten, gives fresh check()'s verdicts and commits the same state.
    packed = BatchColumns.coerce(synthetic_stream(400, n_producers=5, n_partitions=6, retry_fraction=0.2, seed=3))
    stale = {"partition": np.arange(9), "producer_id": np.full(9, 99), "producer_epoch": np.full(9, 5),
             "base_sequence": np.zeros(9, int), "record_count": np.ones(9, int)}
    fenced_by = ProducerStateTable()
    validate(stale, fenced_by, backend=backend)
    buffer = check({**stale, "producer_epoch": np.zeros(9, int)}, fenced_by, backend=backend)
    assert (buffer.expected == 5).all() and (buffer.base_offset == -1).all()  # (stale values in every column)
    state, fresh_state = ProducerStateTable(row_capacity=1), ProducerStateTable(row_capacity=1)
    requests_seen = 0
    for rows in requests(packed):
        batch = packed.take(rows)
        fresh = check(batch, fresh_state, backend=backend)
        reused = check(batch, state, backend=backend, out=buffer)
        assert len(reused) == len(rows) and np.shares_memory(reused.status, buffer.status)
        for name, column in fresh.to_dict().items():
            np.testing.assert_array_equal(getattr(reused, name), column, err_msg=name)
        commit(batch, fresh, fresh_state, backend=backend)
        commit(batch, reused, state, backend=backend)
        requests_seen += 1
    assert requests_seen > 50
    mine, theirs = state.canonical(), fresh_state.canonical()
    for name in mine:
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)


def test_check_refuses_an_out_too_short_or_not_verdicts():
    batches = {"partition": [0, 1], "producer_id": [7, 7], "producer_epoch": [0, 0], "base_sequence": [0, 0],
               "record_count": [1, 1]}
    short = check({name: column[:1] for name, column in batches.items()}, ProducerStateTable())
    with pytest.raises(ValueError, match=r"^out holds verdicts for 1 batches, fewer than the 2 given$"):
        check(batches, ProducerStateTable(), out=short)
    with pytest.raises(TypeError, match="out must be the Verdicts of an earlier call, not dict"):
        check(batches, ProducerStateTable(), out=short.to_dict())
