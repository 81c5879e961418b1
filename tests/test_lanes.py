"""validate(threads=N): lanes of partitions on threads give what one thread in input order gives.

Checked against the single-threaded validate of the same backend (itself checked against the oracle and the
reference in test_properties): every verdict column, the completed transactions in order, and the state.
"""

from __future__ import annotations

import dataclasses
import itertools
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import idemcore
from idemcore import ProducerStateTable
from idemcore.engine import lanes, validate
from idemcore.synth.streams import synthetic_stream

from .helpers import batches, data
from .test_properties import SETTINGS, _txn_rows, assert_same_state, chaotic_stream, origins, streams

THREADS = [1, 2, 3, 4]  # 1: the lanes' pre-pass on one thread, as every long call takes it (MIN_BATCHES)


def assert_same_verdicts(result, reference):
    for name, column in reference.to_dict().items():
        np.testing.assert_array_equal(getattr(result, name), column, err_msg=name)
    assert _txn_rows(result) == _txn_rows(reference)
    np.testing.assert_array_equal(result.completed_txns.marker, reference.completed_txns.marker)


@SETTINGS
@given(rows=streams(), origin=origins, threads=st.sampled_from(THREADS),
       cuts=st.lists(st.integers(0, 60), max_size=3), chunk=st.sampled_from([lanes.PIPELINE_CHUNK, 1, 3, 8]),
       cached=st.sampled_from([lanes.ONE_LANE_CACHED_ROWS, 2]))
def test_lanes_equal_one_thread(backend, rows, origin, threads, cuts, chunk, cached):
    whole_state = ProducerStateTable()
    whole = validate(batches(rows), whole_state, origin=origin, backend=backend)
    packed = idemcore.BatchColumns.coerce(batches(rows))
    bounds = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    state = ProducerStateTable(row_capacity=1, stream_capacity=1)  # reserve_rows grows it mid-pass
    with mock.patch.object(lanes, "MIN_BATCHES", 1), mock.patch.object(lanes, "PIPELINE_CHUNK", chunk), \
            mock.patch.object(lanes, "ONE_LANE_CHUNK", chunk), mock.patch.object(lanes, "ONE_LANE_CACHED_ROWS", cached):
        parts = [validate(packed.slice(a, b), state, origin=origin, backend=backend, threads=threads)
                 for a, b in itertools.pairwise(bounds)]
    for name, column in whole.to_dict().items():
        np.testing.assert_array_equal(np.concatenate([getattr(p, name) for p in parts]), column, err_msg=name)
    assert [txn for p in parts for txn in _txn_rows(p)] == _txn_rows(whole)
    assert_same_state(state, whole_state)
    assert state.n_producers == whole_state.n_producers and state.n_streams == whole_state.n_streams


@pytest.mark.parametrize("chunk", [lanes.PIPELINE_CHUNK, 1_000])  # 1,000: the next chunk reserved beside the lanes
@pytest.mark.parametrize("origin", ["client", "replication"])
@pytest.mark.parametrize("threads", THREADS)
def test_lanes_on_a_large_chaotic_stream(backend, origin, threads, chunk, monkeypatch):
    monkeypatch.setattr(lanes, "PIPELINE_CHUNK", chunk)
    monkeypatch.setattr(lanes, "ONE_LANE_CHUNK", chunk)  # (one thread: the pre-pass and the check chunk by chunk)
    columns = chaotic_stream(20_000, seed=5)
    columns["is_control"][::97] = True  # markers closing transactions across all partitions
    columns["control_type"][::97] = np.arange(len(columns["control_type"][::97])) % 2
    ref_state, state = ProducerStateTable(), ProducerStateTable(row_capacity=2, stream_capacity=1)
    reference = validate(columns, ref_state, origin=origin, backend=backend)
    with mock.patch.object(lanes, "MIN_BATCHES", 1):
        result = validate(columns, state, origin=origin, backend=backend, threads=threads)
    assert len(reference.completed_txns) > 20
    assert_same_verdicts(result, reference)
    assert_same_state(state, ref_state)
    # the state carries on as one thread's would
    more = chaotic_stream(5_000, seed=6)
    with mock.patch.object(lanes, "MIN_BATCHES", 1):
        carried_on = validate(more, state, origin=origin, backend=backend, threads=threads)
    assert_same_verdicts(carried_on, validate(more, ref_state, origin=origin, backend=backend))
    assert_same_state(state, ref_state)


@pytest.mark.parametrize(("threads", "chunk"), [(1, lanes.PIPELINE_CHUNK), (2, 1_000), (3, 7_777)])
def test_tables_big_enough_to_prefetch_give_the_references_answers(backend, threads, chunk, monkeypatch):
    # From PREFETCH_MIN_ROWS rows the compiled kernels take their prefetching loops (reserve_rows hashes batches
    # ahead, validate_listed and validate_batches fetch rows ahead), which smaller tests never reach.
    from idemcore.kernels import rules_reference as rules

    monkeypatch.setattr(lanes, "PIPELINE_CHUNK", chunk)
    columns = chaotic_stream(30_000, seed=7, producers=1_500)  # about 7,000 streams
    expected = validate(columns, ProducerStateTable(), backend="python")
    one_pass = ProducerStateTable(row_capacity=rules.PREFETCH_MIN_ROWS, stream_capacity=8)
    assert_same_verdicts(validate(columns, one_pass, backend=backend), expected)  # (under MIN_BATCHES: one pass)
    state = ProducerStateTable(row_capacity=rules.PREFETCH_MIN_ROWS, stream_capacity=8)
    with mock.patch.object(lanes, "MIN_BATCHES", 1):
        assert_same_verdicts(validate(columns, state, backend=backend, threads=threads), expected)
    assert state.n_producers > rules.PREFETCH_MIN_ROWS  # (grown past it mid-pass)
    assert_same_state(state, one_pass)


@pytest.mark.parametrize("threads", [1, 2])
def test_refused_first_writes_leave_no_entry(threads, monkeypatch):
    # A new producer whose first batch is refused, on a partition nothing is written to: reserve_rows added
    # entries for both, which must not stay. (One thread, chunks of one batch: each chunk's rows are looked up
    # again at the end, under the call's batch numbers.)
    monkeypatch.setattr(lanes, "MIN_BATCHES", 1)
    monkeypatch.setattr(lanes, "ONE_LANE_CHUNK", 1)
    rows = [{"partition": 0, "producer_id": 5, "producer_epoch": 0, "base_sequence": 0, "last_sequence": 0},
            {"partition": 1, "producer_id": 6, "producer_epoch": 0, "base_sequence": -1, "last_sequence": -1,
             "is_transactional": True},  # no sequence from a client: INVALID_RECORD
            {"partition": 0, "producer_id": 7, "producer_epoch": 0, "base_sequence": 3, "last_sequence": 2},
            {"partition": 0, "producer_id": 7, "producer_epoch": 0, "base_sequence": 0, "last_sequence": 0}]
    rows = [{"record_count": 1, **row} for row in rows]
    state = ProducerStateTable()
    verdicts = validate(batches(rows), state, threads=threads)
    assert verdicts.status.tolist() == [0, 2, 2, 0]
    assert state.n_streams == 1 and state.n_producers == 2
    assert sorted(state.row_producer_id[:2].tolist()) == [5, 7]
    assert state.row_of(1, 6) is None and state.next_offset(1) == 0
    assert state.next_offset(0) == 2


def test_deal_puts_the_biggest_first_on_the_least_loaded_lane():
    assert lanes.deal(np.array([0, 10, 3, 3, 4]), 2).tolist() == [0, 0, 1, 1, 1]
    assert lanes.deal(np.array([0, 5]), 3).tolist() == [0, 0]
    # With shares: lane 0 takes about 80% of the batches, the calling thread's lane 1 the rest.
    counts = np.array([0] + [10] * 64)
    lane = lanes.deal(counts, 2, [0.8, 0.2])
    assert abs(counts[lane == 0].sum() / counts.sum() - 0.8) < 0.02 and lane[0] == 0


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_threads_must_be_a_whole_number(threads):
    with pytest.raises(ValueError, match=f"threads must be .* not {threads!r}"):
        validate(batches([{"producer_id": 1}]), threads=threads)


def test_remove_partitions_refuses_one_with_rows():
    state = ProducerStateTable()
    validate(batches([data(1, 0, 0, partition=3)]), state)
    with pytest.raises(ValueError, match="stream 3 still has producer rows"):
        state.remove_streams(np.array([True]))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from idemcore.synth.dataset import generate

    from .test_replay import dataset_table

    out = tmp_path_factory.mktemp("lanes") / "ds"
    generate(out, topics=2, partitions=4, producers=12, batches=12_000, seed=5, partitions_per_file=4,
             progress=False)
    return dataset_table(out)


def test_replayer_threads_find_what_one_thread_finds(dataset, monkeypatch):
    from idemcore.audit import replayer as replayer_module
    from idemcore.audit import shards

    monkeypatch.setattr(shards, "OWN_TABLE_RUN", 16)  # every stream its own table: tables run side by side
    monkeypatch.setattr(replayer_module, "FEED_ROWS", 1500)
    one = replayer_module.replay_table(dataset)
    two = replayer_module.replay_table(dataset, replayer=replayer_module.StreamReplayer(order_by="seq_no",
                                                                                        threads=2))
    assert one.findings.num_rows > 10  # the dataset has duplicates, gaps and transactions to find
    for name in ("findings", "partitions", "open_txns", "txn_durations", "timeline"):
        assert getattr(two, name).equals(getattr(one, name)), name
    assert two.batches == one.batches == dataset.num_rows


def test_sharded_state_names_each_transactions_marker(dataset, monkeypatch):
    from idemcore.audit import shards
    from idemcore.audit.replayer import StreamReplayer

    monkeypatch.setattr(shards, "OWN_TABLE_RUN", 16)
    replayer = StreamReplayer(order_by="seq_no", threads=2)
    frame = dataset.to_pandas()
    frame = frame.sort_values(["topic", "partition", "seq_no"], kind="stable").reset_index(drop=True)
    # streams interleaved at random, each in its own order: every stream's rows get random places, in order
    frame["place"] = np.random.default_rng(2).permutation(len(frame))
    frame["place"] = frame.groupby(["topic", "partition"], observed=True)["place"].transform(np.sort)
    interleaved = pa.Table.from_pandas(frame.sort_values("place").drop(columns="place"), preserve_index=False)
    verdicts = replayer.feed(interleaved)
    done = verdicts.completed_txns
    assert len(done) > 5
    marker = done.marker
    assert (interleaved.column("is_control").to_numpy()[marker]).all()
    np.testing.assert_array_equal(verdicts.base_offset[marker], done.last_offset)


def held_lane(monkeypatch, kernel):
    """A ``validate_listed`` that ends only once validate waits for every running lane (the lanes' own
    ``concurrent.futures.wait``, patched to open it): a validate raising without that wait leaves it unended,
    however the threads are scheduled. Returns the stub, its ``ended`` Event and the ``release`` Event (set it
    after the call, so that a lane a wrong validate left behind ends)."""
    import threading
    from concurrent.futures import ALL_COMPLETED

    ended, release = threading.Event(), threading.Event()
    real_wait = lanes.wait

    def waiting(futures, timeout=None, return_when=ALL_COMPLETED):
        if timeout is None and return_when == ALL_COMPLETED and any(not future.done() for future in futures):
            release.set()
        return real_wait(futures, timeout, return_when)

    def listed(*args):
        assert release.wait(30), "validate never waited for its running lanes"
        result = kernel.validate_listed(*args)
        ended.set()
        return result

    monkeypatch.setattr(lanes, "wait", waiting)
    return listed, ended, release


def test_an_interrupted_lane_leaves_no_thread_writing_behind(monkeypatch):
    # One lane is interrupted at once, the other is slow: validate must not return (raise) before the slow one
    # has ended, and the table must hold no entry reserved for a batch that was never committed.
    import dataclasses

    from idemcore.kernels import get_backend

    kernel = get_backend("cython")
    held, ended, release = held_lane(monkeypatch, kernel)

    def listed(*args):
        if len(args[13]) and args[0][args[13][0]] == 0:  # the lane holding partition 0
            raise KeyboardInterrupt
        return held(*args)

    interrupted = dataclasses.replace(kernel, validate_listed=listed)
    rows = [data(pid, 0, 0, partition=pid % 2) for pid in range(40)]
    state = ProducerStateTable()
    try:
        with pytest.raises(KeyboardInterrupt):
            validate(batches(rows), state, backend=interrupted, threads=2)
        assert ended.is_set()
    finally:
        release.set()
    assert sorted(state.row_producer_id[:state.n_producers].tolist()) == list(range(1, 40, 2))
    assert state.n_streams == 1 and state.next_offset(1) == 20


def test_an_interrupted_pre_pass_waits_for_the_chunk_being_checked(monkeypatch):
    # Chunk by chunk, the next chunk's pre-pass runs while the lanes check this one: interrupted there, validate
    # must not raise before those lanes have ended, and keeps what they committed.
    import dataclasses

    from idemcore.kernels import get_backend

    kernel = get_backend("cython")
    listed, ended, release = held_lane(monkeypatch, kernel)

    calls = []

    def reserve_rows(*args):
        calls.append(args[3] - args[2])
        if len(calls) > 1:  # the second chunk's pre-pass (the table never grows here: one call a chunk)
            raise KeyboardInterrupt
        return kernel.reserve_rows(*args)

    interrupted = dataclasses.replace(kernel, reserve_rows=reserve_rows, validate_listed=listed)
    monkeypatch.setattr(lanes, "MIN_BATCHES", 1)
    monkeypatch.setattr(lanes, "PIPELINE_CHUNK", 20)
    rows = [data(pid, 0, 0, partition=pid % 2) for pid in range(40)]
    state = ProducerStateTable()
    try:
        with pytest.raises(KeyboardInterrupt):
            validate(batches(rows), state, backend=interrupted, threads=2)
        assert ended.is_set()
    finally:
        release.set()
    assert sorted(state.row_producer_id[:state.n_producers].tolist()) == list(range(20))
    assert state.next_offset(0) == 10 and state.next_offset(1) == 10
    assert calls == [20, 20]


def test_a_full_table_gets_its_spare_before_the_lanes():
    # 16 partitions fill the default table; the next call adds no entry, yet the lanes need a spare to run.
    state = ProducerStateTable()
    validate(batches([data(1, 0, 0, partition=p) for p in range(16)]), state)
    assert state.n_streams == len(state.stream_id)
    more = batches([data(1, 0, 1, partition=0), data(1, 1, 0, partition=1), data(1, 0, 1, partition=2)])
    reference = validate(more, state.copy())
    assert_same_verdicts(validate(more, state, threads=2), reference)
    assert [state.next_offset(p) for p in range(3)] == [2, 2, 2]


@pytest.mark.parametrize("backend_name", ["cython", "numba"])
def test_replayer_threads_keep_a_streams_runs_in_order(backend_name):
    # One stream in two runs with another stream's rows between: its table must not run both runs at once.
    from idemcore.audit.replayer import StreamReplayer

    half = 30_000
    part = np.r_[np.zeros(half), np.ones(10), np.zeros(half)].astype(np.int32)
    seq = np.r_[np.arange(half), np.arange(10), np.arange(half, 2 * half)].astype(np.int32)
    n = len(part)
    table = pa.table({"topic": ["t"] * n, "partition": part, "producer_id": np.ones(n, np.int64),
                      "producer_epoch": np.zeros(n, np.int16), "base_sequence": seq, "last_sequence": seq,
                      "record_count": np.ones(n, np.int32), "seq_no": np.arange(n, dtype=np.int64)})
    one = StreamReplayer(backend=backend_name).feed(table)
    assert (one.status == 0).all()
    for _ in range(5):  # (a race shows now and then: a few rounds)
        two = StreamReplayer(backend=backend_name, threads=2).feed(table)
        assert_same_verdicts(two, one)


def test_a_listed_row_past_the_table_is_looked_up_not_read():
    # validate_listed trusts batch_row only within the table's rows: a row past its capacity (a counter gone
    # wrong) is looked up through the index, never read out of bounds.
    from idemcore.kernels import get_backend

    rows = [data(1, 0, 0), data(1, 0, 1)]
    state = ProducerStateTable(row_capacity=4)
    validate(batches(rows[:1]), state)
    state.counters[0] = 1 << 20  # N_ROWS past the capacity
    packed = idemcore.BatchColumns.coerce(batches(rows[1:]))
    out = idemcore.engine.Verdicts.allocate(1)
    txns = idemcore.CompletedTxns.empty(0).kernel_columns()
    for name in ("cython", "numba", "python"):
        kernel = get_backend(name)
        copy = state.copy()
        copy.counters[0] = 1 << 20
        kernel.validate_listed(*packed, 0, np.empty(0, np.int64), np.array([3000], np.int32), 0, 1,
                               *copy.kernel_arrays(), *out, *txns)
        assert out.out_base_offset[0] == 1, name


@SETTINGS
@given(rows=streams(), threads=st.sampled_from(THREADS), cuts=st.lists(st.integers(0, 60), max_size=3),
       long_path=st.booleans())
def test_verdicts_written_into_an_earlier_calls(backend, rows, threads, cuts, long_path):
    # validate(..., out=): each chunk's verdicts land in the same arrays, stale values from the chunk before
    # overwritten, on the short path and the lanes' path alike.
    whole = validate(batches(rows), ProducerStateTable(), backend=backend)
    packed = idemcore.BatchColumns.coerce(batches(rows))
    bounds = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    state = ProducerStateTable()
    out = validate(packed.slice(len(rows) - 1, len(rows)), ProducerStateTable(), backend=backend)  # (stale values)
    out = idemcore.Verdicts(*(np.resize(column, len(rows) + 3) for column in out.to_dict().values()),
                            out.completed_txns, out.backend)
    with mock.patch.object(lanes, "MIN_BATCHES", 1 if long_path else 10**9):
        for a, b in itertools.pairwise(bounds):
            part = validate(packed.slice(a, b), state, backend=backend, threads=threads, out=out)
            assert len(part) == b - a and np.shares_memory(part.status, out.status)
            for name, column in whole.to_dict().items():
                np.testing.assert_array_equal(getattr(part, name), column[a:b], err_msg=name)


def test_out_must_be_long_enough_and_of_verdicts():
    rows = batches([data(1, 0, 0), data(1, 0, 1)])
    short = validate(batches([data(2, 0, 0)]))
    with pytest.raises(ValueError, match="out holds verdicts for 1 batches, fewer than the 2 given"):
        validate(rows, out=short)
    with pytest.raises(TypeError, match="out must be the Verdicts of an earlier call, not dict"):
        validate(rows, out=short.to_dict())
    wide = idemcore.Verdicts(*(np.zeros(2, np.int64),) * 6, short.completed_txns, "cython")
    with pytest.raises(ValueError, match=r"out\.status is not a writeable contiguous 1-D int8 array"):
        validate(rows, out=wide)
    buffer = validate(batches([data(2, 0, k) for k in range(5)]))
    for bad, message in [(dict(expected=buffer.expected[:1]), "out holds verdicts for 1 batches, fewer than the 2"),
                         (dict(finding=buffer.finding.reshape(5, 1)), r"out\.finding is not .* 1-D int8")]:
        with pytest.raises(ValueError, match=message):
            validate(rows, out=dataclasses.replace(buffer, **bad))


def test_out_sharing_memory_is_refused(backend):
    # A kernel reads a batch's input after writing other batches' verdicts: out columns overlapping each other
    # or an input column would give wrong verdicts (input columns of the right dtype are not copied).
    rows = batches([data(1, 0, k, base_offset=-1) for k in range(4)])
    buffer = validate(rows, backend=backend)
    with pytest.raises(ValueError, match=r"out\.last_offset shares memory with out\.expected"):
        validate(rows, out=dataclasses.replace(buffer, last_offset=buffer.expected), backend=backend)
    rows["base_offset"] = buffer.expected  # (int64, as the input column wants: taken as it is)
    with pytest.raises(ValueError, match=r"out\.expected shares memory with base_offset"):
        validate(rows, out=buffer, backend=backend)


def test_an_interrupt_between_two_submits_waits_for_the_first(monkeypatch):
    # The lanes are submitted one by one; an interrupt between two must still wait for those already running.
    from idemcore.kernels import get_backend

    kernel = get_backend("cython")
    listed, ended, release = held_lane(monkeypatch, kernel)
    real = lanes._pool(2)

    class InterruptedPool:
        calls = 0

        def submit(self, *args):
            InterruptedPool.calls += 1
            if InterruptedPool.calls == 2:
                raise KeyboardInterrupt  # stands for a signal delivered between the two submits
            return real.submit(*args)

    monkeypatch.setattr(lanes, "_pool", lambda threads: InterruptedPool())
    monkeypatch.setattr(lanes, "MIN_BATCHES", 1)
    state = ProducerStateTable()
    try:
        with pytest.raises(KeyboardInterrupt):
            validate(batches([data(pid, 0, 0, partition=pid % 2) for pid in range(40)]), state,
                     backend=dataclasses.replace(kernel, validate_listed=listed), threads=2)
        assert ended.is_set()
    finally:
        release.set()
    assert state.n_producers == 20 and state.next_offset(0) + state.next_offset(1) == 20


@pytest.mark.parametrize("threads", [1, 2])
def test_ctrl_c_while_the_table_grows_leaves_it_usable(monkeypatch, threads):
    # A real SIGINT landing halfway through a reallocation (rows replaced, index not yet rebuilt) is held back
    # until the table is whole: the KeyboardInterrupt comes out, and the table goes on as one whose index is
    # rebuilt from its rows (persist's save/load).
    import signal

    from idemcore.engine import persist
    from idemcore.engine import table as table_module

    real = table_module._aligned_zeros
    pressed: list[int] = []

    def interrupted(rows, words):
        if words == table_module.rules.SLOT_WORDS and not pressed:  # the new index, the new rows already in place
            pressed.append(rows)
            signal.raise_signal(signal.SIGINT)
        return real(rows, words)

    monkeypatch.setattr(lanes, "MIN_BATCHES", 1)
    columns = chaotic_stream(4_000, seed=8)
    state = ProducerStateTable(row_capacity=4, stream_capacity=2)
    monkeypatch.setattr(table_module, "_aligned_zeros", interrupted)  # (after the first allocation: in a growth)
    with pytest.raises(KeyboardInterrupt):
        validate(columns, state, threads=threads)
    assert pressed
    monkeypatch.setattr(table_module, "_aligned_zeros", real)
    for row in range(state.n_producers):
        assert state.row_of(int(state.row_stream[row]), int(state.row_producer_id[row])) == row
    rebuilt = persist.load_state(persist.save_state(state))
    more = chaotic_stream(2_000, seed=9)
    assert_same_verdicts(validate(more, state, threads=threads), validate(more, rebuilt, threads=threads))
    assert_same_state(state, rebuilt)


def test_expected_streams_from_the_first_chunk():
    # Drawn at random from D streams, the first chunk's distinct count tells D; the estimate is bounded.
    rng = np.random.default_rng(0)
    for streams_drawn in (1_000, 100_000, 400_000):
        draws = rng.integers(0, streams_drawn, 1_000_000)
        seen = len(np.unique(draws[:100_000]))
        truth = len(np.unique(draws))
        assert abs(lanes.expected_streams(seen, 100_000, len(draws)) - truth) < 0.03 * truth
    assert lanes.expected_streams(100_000, 100_000, 10**7) == 100_000  # every batch a new stream: no model
    assert lanes.expected_streams(0, 100_000, 10**7) == 0
    assert lanes.expected_streams(90_000, 100_000, 10**9) <= 5 * 90_000  # (the model's D: about 400,000)


@pytest.mark.parametrize(("threads", "pipeline_chunk"), [(1, 0), (2, 5_000), (2, lanes.PIPELINE_CHUNK)])
def test_a_long_call_sizes_the_table_once_from_its_first_chunk(monkeypatch, threads, pipeline_chunk):
    # Random streams: after the first chunk (on 2 threads: the first ONE_LANE_CHUNK batches of the first pipeline
    # chunk) the table is reserved for all of them, so it never grows again, and the verdicts and state are one
    # pass's.
    monkeypatch.setattr(lanes, "MIN_BATCHES", 1)
    if pipeline_chunk:
        monkeypatch.setattr(lanes, "PIPELINE_CHUNK", pipeline_chunk)
    monkeypatch.setattr(lanes, "ONE_LANE_CHUNK", 2_000)
    monkeypatch.setattr(lanes, "ONE_LANE_CACHED_ROWS", 1)
    columns = synthetic_stream(40_000, n_producers=3_000, n_partitions=2, seed=4)
    grown: list[int] = []
    real_grow = ProducerStateTable.grow
    state = ProducerStateTable()

    def counting_grow(table, *args, **kwargs):
        grown.append(table.n_producers)
        return real_grow(table, *args, **kwargs)

    monkeypatch.setattr(ProducerStateTable, "grow", counting_grow)
    result = validate(columns, state, threads=threads)
    assert grown and max(grown) < 2_000  # (only while the first chunk ran)
    assert state.n_producers <= len(state.row_producer_id) < 2 * state.n_producers
    one_pass = ProducerStateTable()
    monkeypatch.setattr(lanes, "MIN_BATCHES", 10**9)
    assert_same_verdicts(result, validate(columns, one_pass))
    assert_same_state(state, one_pass)


def test_reserve_makes_room_in_one_reallocation_and_keeps_every_entry():
    state = ProducerStateTable(row_capacity=4)
    validate(batches([data(pid, 0, 0, partition=pid % 3) for pid in range(1, 4)]), state)
    before = state.canonical()
    state.reserve(1_000)
    assert len(state.row_producer_id) == 1_000
    state.reserve(10)  # (never shrinks)
    assert len(state.row_producer_id) == 1_000
    for name, column in before.items():
        np.testing.assert_array_equal(state.canonical()[name], column, err_msg=name)
    assert [state.row_of(pid % 3, pid) for pid in range(1, 4)] == [0, 1, 2]


@pytest.mark.parametrize("backend_name", ["python", "numba"])
def test_validate_listed_stops_at_a_negative_position_or_index(backend_name):
    # The reference (and its Numba twin) process no negative start nor listed index: they return that position
    # (the Cython twin raises ValueError), and write nothing for it.
    from idemcore.engine.verdicts import CompletedTxns, Verdicts
    from idemcore.kernels import get_backend

    kernel = get_backend(backend_name)
    packed = idemcore.BatchColumns.coerce(batches([data(pid, 0, 0) for pid in range(4)]))
    state = ProducerStateTable()
    row = np.full(4, -1, np.int32)
    out = Verdicts.allocate(4)
    lanes._prefill(out)
    txns = CompletedTxns.empty(0).kernel_columns()
    listed = np.array([0, 1, -1, 3], np.int64)
    args = (*packed, 0)
    after = (*state.kernel_arrays(), *out, *txns)
    assert kernel.validate_listed(*args, listed, row, -1, 2, *after) == -1
    assert state.n_producers == 0
    assert kernel.validate_listed(*args, listed, row, 0, 4, *after) == 2
    assert state.n_producers == 2 and out.out_last_offset[:2].tolist() == [0, 1]  # (the first two, committed)
