"""The state layout of the kernels (one record per producer row, key-beside-row index slots) and their fast path.

The fast path (``append_in_sequence``) must give exactly what the full rules give: every backend's ``validate``
is compared with a loop of the reference's ``check_batch`` / ``commit_batch`` alone, on streams made to hit the
cases the fast path must leave to them (retries, gaps, wraps, new epochs, transactions, given offsets, a full
offset space, unknown producers, a table that runs out of rows).
"""

from __future__ import annotations

import numpy as np
import pytest

from idemcore.engine import validate
from idemcore.engine.persist import load_state, save_state
from idemcore.engine.table import ProducerStateTable
from idemcore.engine.verdicts import CompletedTxns, Verdicts
from idemcore.kernels import rules_reference as rules
from idemcore.kernels.columns import COLUMNS, BatchColumns


def test_the_compiled_row_is_the_reference_layout():
    from idemcore.kernels import cython_rules

    layout = cython_rules.row_layout()
    assert layout["row_size"] == 8 * rules.ROW_WORDS and layout["slot_size"] == 8 * rules.SLOT_WORDS
    assert layout["ring_entry_size"] == 16
    assert layout["epoch"] == 2 * rules.ROW_EPOCH
    assert layout["head"] == rules.ROW_HEAD and layout["length"] == rules.ROW_LEN
    assert layout["stream_index"] == 4 * rules.ROW_STREAM_INDEX
    assert layout["txn_first_offset"] == 8 * rules.ROW_TXN_FIRST_OFFSET
    assert layout["last_timestamp"] == 8 * rules.ROW_LAST_TIMESTAMP
    assert layout["ring_last_seq"] == 4 * rules.ROW_RING_LAST_SEQ
    assert layout["ring_offset_delta"] == 4 * rules.ROW_RING_OFFSET_DELTA
    assert layout["ring_last_offset"] == 8 * rules.ROW_RING_LAST_OFFSET
    assert layout["ring_timestamp"] == 8 * rules.ROW_RING_TIMESTAMP
    assert layout["coordinator_epoch"] == 4 * rules.ROW_COORDINATOR_EPOCH
    assert layout["stream"] == 4 * rules.ROW_STREAM
    assert layout["producer_id"] == 8 * rules.ROW_PRODUCER_ID
    assert layout["reserved_by"] == 8 * rules.ROW_RESERVED_BY
    assert layout["slot_producer_id"] == 8 * rules.SLOT_PRODUCER_ID
    assert layout["slot_stream"] == 4 * rules.SLOT_STREAM and layout["slot_row"] == 4 * rules.SLOT_ROW
    # An in-sequence batch reads the first cache line only.
    assert layout["ring_offset_delta"] + 4 * rules.RING_SIZE <= 64
    from idemcore.kernels import cython_rules as compiled

    assert compiled.KERNEL_CODES["ROW_WORDS"] == rules.ROW_WORDS
    assert compiled.KERNEL_CODES["SLOT_WORDS"] == rules.SLOT_WORDS


def test_the_field_arrays_are_views_of_aligned_records():
    table = ProducerStateTable(row_capacity=8)
    rows = table.add_rows(3, [11, 12])
    table.row_epoch[rows] = [5, 6]
    table.ring_last_offset[rows[1], 4] = 1234
    table.ring_timestamp[rows[1], 4] = -7
    assert table._row_i16[rows[1], rules.ROW_EPOCH] == 6
    assert table._row_i64[rows[1], rules.ROW_RING_LAST_OFFSET + 8] == 1234
    assert table._row_i64[rows[1], rules.ROW_RING_TIMESTAMP + 8] == -7
    assert table.row_epoch.dtype == np.int16 and table.ring_last_seq.shape == (8, rules.RING_SIZE)
    clone = table.copy()
    clone.row_epoch[rows[0]] = 9
    assert table.row_epoch[rows[0]] == 5 and clone.row_epoch[rows[1]] == 6
    for t in (table, clone):
        assert t._row_i64.ctypes.data % 64 == 0 and t._slot_i64.ctypes.data % 64 == 0
        assert t.row_of(3, 12) == rows[1] and t.row_of(3, 13) is None
    table.add_rows(3, list(range(100, 120)))  # grows: the records and their views move together
    assert table.row_epoch[rows[1]] == 6 and table.ring_last_offset[rows[1], 4] == 1234
    assert table._row_i64.ctypes.data % 64 == 0
    with pytest.raises(AttributeError, match="assign into it"):
        table.row_epoch = np.zeros(len(table.row_epoch), np.int16)  # (would leave the records behind)


def _stream(seed: int, n: int) -> dict[str, np.ndarray]:
    """Mostly in-sequence data from a few producers on a few partitions, with every kind of disturbance."""
    rng = np.random.default_rng(seed)
    pids = rng.choice([-1, 0, 1, 2, 3, 7, 2**40 + 5, 2**62], size=n, p=[.02, .2, .2, .15, .15, .1, .1, .08])
    parts = rng.integers(0, 3, size=n)
    state: dict[tuple[int, int], list[int]] = {}
    columns: dict[str, list[int]] = {name: [] for name in COLUMNS}
    for pid, part in zip(pids.tolist(), parts.tolist(), strict=True):
        epoch, next_seq = state.setdefault((pid, part), [int(rng.integers(-1, 2)), int(rng.integers(0, 3))])
        count = int(rng.choice([1, 2, 3, 7]))
        transactional = control = 0
        base_offset = -1
        roll = rng.random()
        if roll < .05:
            next_seq = max(0, next_seq - int(rng.integers(1, 12)))  # a retry or an older duplicate
        elif roll < .08:
            next_seq = rules.seq_add(next_seq, int(rng.integers(1, 4)))  # a gap
        elif roll < .10:
            next_seq = rules.INT32_MAX - int(rng.integers(0, 4))  # about to wrap
        elif roll < .12:
            epoch, next_seq = epoch + int(rng.choice([-1, 1])), int(rng.choice([0, 0, 5]))  # a new or old epoch
        elif roll < .17:
            transactional = 1
        elif roll < .21:
            control = 1
        elif roll < .23:
            base_offset = int(rng.integers(0, 10**6))
        elif roll < .24:
            epoch = -1
        first = next_seq
        last = rules.seq_add(first, count - 1)
        if control or pid < 0:
            first = last = -1
            count = 1 if control else count
        state[(pid, part)] = [epoch, rules.seq_add(last, 1) if last >= 0 else next_seq]
        row = {"stream": part, "producer_id": pid, "producer_epoch": epoch, "base_sequence": first,
               "last_sequence": last, "base_offset": base_offset, "record_count": count,
               "max_timestamp": int(rng.integers(0, 10**6)), "is_transactional": transactional or control,
               "is_control": control, "control_type": int(rng.integers(0, 2)) if control else -1,
               "coordinator_epoch": int(rng.integers(0, 3)) if control else -1}
        for name in COLUMNS:
            columns[name].append(row[name])
    return {name: np.asarray(values, dtype=dtype) for (name, dtype), values in
            zip(COLUMNS.items(), columns.values(), strict=True)}


def _every_rule(packed: BatchColumns, table: ProducerStateTable) -> dict[str, np.ndarray]:
    """validate() by the reference's check_batch and commit_batch alone (no fast path)."""
    n = len(packed)
    out = Verdicts.allocate(n)
    txns = CompletedTxns.empty(n).kernel_columns()
    columns = packed
    i = 0
    while i < n:
        if table.n_producers >= len(table.row_epoch) or table.n_streams >= len(table.stream_id):
            table.grow("python")
        arrays = table.kernel_arrays()
        slots = (arrays.slot_i64, arrays.slot_i32)
        rows = (arrays.row_i64, arrays.row_i32, arrays.row_i16, arrays.row_i8)
        parts = (arrays.sslot_stream, arrays.sslot_index, arrays.stream_id, arrays.stream_next_offset)
        slot = rules.check_batch(i, tuple(columns), rules.ORIGIN_CLIENT, slots, rows, parts, arrays.counters,
                                 tuple(out), tuple(txns))
        if out.out_status[i] == rules.APPENDED:
            rules.commit_batch(i, slot, tuple(columns), slots, rows, parts, arrays.counters,
                               (out.out_status, out.out_base_offset, out.out_last_offset))
        i += 1
    return dict(zip(Verdicts.__dataclass_fields__, out, strict=False))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_fast_path_gives_what_every_rule_gives(backend, seed):
    packed = BatchColumns.coerce(_stream(seed, 3000))
    half = len(packed) // 2
    expected_table = ProducerStateTable(row_capacity=1, stream_capacity=1)
    expected = _every_rule(packed.slice(0, half), expected_table)
    table = ProducerStateTable(row_capacity=1, stream_capacity=1)  # grows mid-stream, more than once
    # In chunks, the second starting near the end of the offset space for partition 2.
    verdicts = [validate(packed.slice(0, half), table, backend=backend)]
    assert int(np.count_nonzero(verdicts[0].finding == rules.F_DUPLICATE)) > 0
    for t in (table, expected_table):
        t.set_next_offset(2, rules.INT64_MAX - 40)
    expected_second = _every_rule(packed.slice(half, len(packed)), expected_table)
    verdicts.append(validate(packed.slice(half, len(packed)), table, backend=backend))
    for name in expected:
        got = np.concatenate([getattr(v, name) for v in verdicts])
        want = np.concatenate([expected[name], expected_second[name]])
        assert np.array_equal(got, want), name
    assert int(np.count_nonzero(verdicts[1].finding == rules.F_OFFSET_OVERFLOW)) > 0
    got_state, want_state = table.canonical(), expected_table.canonical()
    assert got_state.keys() == want_state.keys()
    for name in want_state:
        assert np.array_equal(got_state[name], want_state[name]), name
    reloaded = load_state(save_state(table), backend).canonical()
    for name in want_state:
        assert np.array_equal(reloaded[name], want_state[name]), name


def test_a_large_table_prefetches_and_still_agrees(backend):
    """Past the rows where the compiled kernel starts prefetching (16384), over two partitions."""
    rng = np.random.default_rng(5)
    pids = rng.integers(0, 2**62, size=20_000)
    n = 60_000
    which = rng.integers(0, len(pids), size=n)
    seqs: dict[int, int] = {}
    first = np.empty(n, np.int32)
    for k, w in enumerate(which.tolist()):
        s = seqs.get(w, 0)
        if rng.random() < .02 and s:
            s -= 1  # a retry of the newest batch
        first[k] = s
        seqs[w] = s + 1
    batches = {"partition": (which % 2).astype(np.int32), "producer_id": pids[which],
               "producer_epoch": np.zeros(n, np.int16), "base_sequence": first, "last_sequence": first,
               "base_offset": np.full(n, -1, np.int64), "record_count": np.ones(n, np.int32),
               "max_timestamp": np.arange(n, dtype=np.int64), "is_transactional": np.zeros(n, bool),
               "is_control": np.zeros(n, bool), "control_type": np.full(n, -1, np.int8),
               "coordinator_epoch": np.full(n, -1, np.int32)}
    packed = BatchColumns.coerce(batches)
    table = ProducerStateTable()
    got = validate(packed, table, backend=backend)
    want_table = ProducerStateTable()
    want = validate(packed, want_table, backend="python")
    assert got.counts() == want.counts() and got.counts()["duplicate"] > 0
    for name, column in want.to_dict().items():
        assert np.array_equal(getattr(got, name), column), name
    for name, column in want_table.canonical().items():
        assert np.array_equal(table.canonical()[name], column), name
