"""StreamReplayer.feed's shortcuts give what the plain path gives: flags unpacked from Arrow's bitmap, verdicts
written into reused or given columns, records appended counted per run from the offsets the kernel assigned."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from idemcore.audit import StreamReplayer
from idemcore.audit.replayer import _SEARCHED_RUNS, _appended_records, _flags, feed_in_order
from idemcore.engine.verdicts import Verdicts
from idemcore.protocol.codes import Status


def _sorted_table(small_dataset) -> pa.Table:
    out, _ = small_dataset
    table = pa.concat_tables([pq.read_table(f) for f in sorted((out / "data").glob("*.parquet"))],
                             promote_options="default")
    table = table.set_column(table.schema.get_field_index("topic"), "topic", table.column("topic").cast(pa.string()))
    return table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("seq_no", "ascending")])


def test_flags_are_arrows_booleans_at_any_offset():
    values = pa.array(np.random.default_rng(1).random(1000) < 0.3)
    for start, length in [(0, 1000), (3, 17), (13, 987), (64, 1), (999, 1)]:
        part = values.slice(start, length)
        expected = part.to_numpy(zero_copy_only=False)
        assert _flags(part).dtype == np.bool_
        assert np.array_equal(_flags(part), expected)
        assert np.array_equal(_flags(pa.chunked_array([part])), expected)
    with_null = pa.array([True, None, False])
    assert _flags(with_null) is with_null  # left for BatchColumns.coerce to refuse, naming the column


def _assigned(status: np.ndarray, count: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets as the kernel gives them from each stream's log end: consecutive for appended batches, a
    duplicate answered with an earlier batch's, -1 for a refused one."""
    base, last = np.full(len(status), -1, np.int64), np.full(len(status), -1, np.int64)
    for start, stop in itertools.pairwise(bounds):
        end = 1000 * int(start)  # a stream's log need not start at 0
        for i in range(start, stop):
            if status[i] == Status.APPENDED:
                base[i], last[i] = end, end + count[i] - 1
                end += int(count[i])
            elif status[i] == Status.DUPLICATE:
                base[i], last[i] = 5, 7
    return base, last


@pytest.mark.parametrize("seed", range(5))
def test_records_from_offsets_equal_the_sum_over_appended_batches(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, 30)
    bounds = np.r_[0, np.cumsum(lengths)]
    n = int(bounds[-1])
    status = rng.choice([Status.APPENDED, Status.DUPLICATE, Status.REJECTED], n, p=[0.6, 0.2, 0.2]).astype(np.int8)
    status[bounds[3]:bounds[4]] = Status.REJECTED  # a run with nothing appended
    status[bounds[5]] = Status.DUPLICATE  # runs that begin and end with a batch not appended
    status[bounds[7] - 1] = Status.REJECTED
    count = rng.integers(1, 5, n).astype(np.int32)
    base, last = _assigned(status, count, bounds)
    expected = [int(count[a:b][status[a:b] == Status.APPENDED].sum()) for a, b in itertools.pairwise(bounds)]
    assert _appended_records(status, base, last, bounds).tolist() == expected


def test_too_many_runs_to_search_give_none():
    bounds = np.arange(0, 2 * (_SEARCHED_RUNS + 1) + 1, 2)
    status = np.zeros(bounds[-1], np.int8)
    status[bounds[:-1]] = Status.DUPLICATE  # every run begins with a duplicate
    base, last = _assigned(status, np.ones(len(status), np.int32), bounds)
    assert _appended_records(status, base, last, bounds) is None


def test_counts_per_run_equal_counts_per_row(small_dataset):
    # The same rows with a base_offset column of -1 (the kernel still assigns every offset) are counted per row.
    table = _sorted_table(small_dataset)
    given = table.append_column("base_offset", pa.array(np.full(table.num_rows, -1, np.int64)))
    by_runs, by_rows = StreamReplayer("client", "seq_no"), StreamReplayer("client", "seq_no")
    feed_in_order(table, by_runs)
    feed_in_order(given, by_rows)
    runs, rows = by_runs.finish(), by_rows.finish()
    assert runs.partitions.equals(rows.partitions)
    assert runs.findings.equals(rows.findings.select(runs.findings.column_names))
    assert int(np.sum(runs.partitions.column("duplicates"))) > 0
    # And the records are those of the appended batches, from the verdicts.
    verdicts = StreamReplayer("client", "seq_no", collect=False).feed(table)
    appended = verdicts.status == Status.APPENDED
    records = table.column("record_count").to_numpy()
    assert int(np.sum(runs.partitions.column("records"))) == int(records[appended].sum())


def test_verdicts_written_into_reused_or_given_columns_equal_new_ones(small_dataset):
    table = _sorted_table(small_dataset)
    half = table.num_rows // 2
    fresh = StreamReplayer("client", "seq_no")
    expected = [fresh.feed(table.slice(0, half)).to_dict(), fresh.feed(table.slice(half)).to_dict()]
    reusing = StreamReplayer("client", "seq_no")
    for k, part in enumerate((table.slice(0, half), table.slice(half))):
        got = reusing.feed(part, reuse=True).to_dict()
        assert all(np.array_equal(got[name], expected[k][name]) for name in got)
    assert reusing.finish().partitions.equals(fresh.finish().partitions)
    out = Verdicts.allocate(table.num_rows)
    feed_in_order(table, StreamReplayer("client", "seq_no"), out)
    for column, name in zip(out, expected[0], strict=True):
        assert np.array_equal(column, np.r_[expected[0][name], expected[1][name]])
