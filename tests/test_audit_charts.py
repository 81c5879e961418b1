"""The data behind the HTML report's time charts, collected by the replay: batches per partition and time bucket
(``AuditReport.timeline``) and the durations of completed transactions (``AuditReport.txn_durations``); exact on
hand-made input, the same whatever the chunking, the tasks, the checkpoint or the input path; and drawn."""

from __future__ import annotations

import dataclasses
import itertools
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from idemcore.audit import AuditReport, StreamReplayer, replay_table
from idemcore.audit import replayer as replayer_module
from idemcore.audit.html import render_html
from idemcore.audit.logdir import audit_log_dir
from idemcore.audit.replayer import (
    DURATION_EDGES_MS,
    NEGATIVE_DURATION,
    NO_DURATION,
    TIMELINE_BASE_MS,
    BatchTimeline,
    TxnDurations,
    duration_buckets,
    feed_in_order,
)
from idemcore.protocol.codes import ControlType

from .test_audit_hanging import build
from .test_replay import dataset_table

T0 = 1_700_000_000_000  # a whole second: bucket T0 // 1000 starts exactly there
SECOND = T0 // 1000


def _table(rows: list[dict]) -> pa.Table:
    """Batches as a client or coordinator wrote them; ``seq_no`` is the row order."""
    defaults = {"topic": "a", "partition": 0, "producer_epoch": 0, "base_sequence": -1, "record_count": 1,
                "is_transactional": False, "is_control": False, "control_type": -1}
    full = [{**defaults, **row, "seq_no": k} for k, row in enumerate(rows)]
    types = {"topic": pa.string(), "partition": pa.int32(), "producer_id": pa.int64(), "producer_epoch": pa.int16(),
             "base_sequence": pa.int32(), "record_count": pa.int32(), "max_timestamp": pa.int64(),
             "is_transactional": pa.bool_(), "is_control": pa.bool_(), "control_type": pa.int8(),
             "seq_no": pa.int64()}
    return pa.table({name: pa.array([row[name] for row in full], kind) for name, kind in types.items()})


def _timeline(report: AuditReport) -> dict[tuple[str, int, int], int]:
    assert report.timeline is not None
    return {(r["topic"], r["partition"], r["bucket"]): r["batches"] for r in report.timeline.to_pylist()}


def _durations(report: AuditReport) -> dict[tuple[bool, int], int]:
    assert report.txn_durations is not None
    return {(r["aborted"], r["bucket"]): r["transactions"] for r in report.txn_durations.to_pylist()}


def _report(table: pa.Table, **options) -> AuditReport:
    return AuditReport.from_results([replay_table(table)], order_by="seq_no", seconds=1.0, **options)


# ---- batches per partition over time ----------------------------------------------------------------------------

def _idempotent(stamps: list[tuple[str, int, int]]) -> pa.Table:
    """One idempotent producer per (topic, partition), a batch per timestamp, in sequence."""
    sequence: dict[tuple[str, int], int] = {}
    rows = []
    for topic, partition, stamp in stamps:
        seq = sequence.get((topic, partition), 0)
        sequence[(topic, partition)] = seq + 1
        rows.append({"topic": topic, "partition": partition, "producer_id": 7 + partition, "base_sequence": seq,
                     "max_timestamp": stamp})
    return _table(rows)


def test_batches_are_counted_per_partition_and_second():
    table = _idempotent([("a", 0, T0 + 500), ("a", 0, T0 + 1200), ("a", 0, T0 + 1999), ("a", 1, T0 + 2000),
                         ("a", 0, T0 + 5000), ("a", 1, 0), ("b", 3, T0 - 1), ("a", 1, -1)])
    report = _report(table)
    assert report.timeline_ms == TIMELINE_BASE_MS == 1000
    # 1999 ms is still the second bucket; 2000 the third; T0 - 1 the bucket before T0's; no timestamp: nowhere.
    assert _timeline(report) == {("a", 0, SECOND): 1, ("a", 0, SECOND + 1): 2, ("a", 0, SECOND + 5): 1,
                                 ("a", 1, SECOND + 2): 1, ("b", 3, SECOND - 1): 1}
    assert report.batches == 8


def test_a_long_span_doubles_the_bucket_width_exactly():
    # 600 s between the first and last batch: 601 one-second buckets > 256, so 2 s (301), then 4 s (151).
    stamps = [("a", 0, T0), ("a", 0, T0 + 3999), ("a", 0, T0 + 4000), ("a", 1, T0 + 300_000), ("a", 0, T0 + 600_000)]
    report = _report(_idempotent(stamps))
    assert report.timeline_ms == 4000
    assert _timeline(report) == {("a", 0, T0 // 4000): 2, ("a", 0, T0 // 4000 + 1): 1,
                                 ("a", 1, (T0 + 300_000) // 4000): 1, ("a", 0, (T0 + 600_000) // 4000): 1}


def test_tasks_of_different_widths_merge_at_the_widest():
    wide = replay_table(_idempotent([("a", 0, T0), ("a", 0, T0 + 600_000)]))  # 4 s buckets
    narrow = replay_table(_idempotent([("b", 0, T0 + 1000), ("b", 0, T0 + 2500), ("b", 0, T0 + 5000)]))  # 1 s
    assert (wide.timeline_ms, narrow.timeline_ms) == (4000, 1000)
    report = AuditReport.from_results([wide, narrow], order_by="seq_no", seconds=1.0)
    assert report.timeline_ms == 4000
    assert _timeline(report) == {("a", 0, T0 // 4000): 1, ("a", 0, (T0 + 600_000) // 4000): 1,
                                 ("b", 0, T0 // 4000): 2, ("b", 0, T0 // 4000 + 1): 1}


# ---- durations of completed transactions -------------------------------------------------------------------------

def _data(producer: int, seq: int, stamp: int, partition: int = 0) -> dict:
    return {"partition": partition, "producer_id": producer, "base_sequence": seq, "max_timestamp": stamp,
            "is_transactional": True}


def _marker(producer: int, stamp: int, kind: ControlType, partition: int = 0) -> dict:
    return {"partition": partition, "producer_id": producer, "max_timestamp": stamp, "is_transactional": True,
            "is_control": True, "control_type": int(kind)}


TRANSACTIONS = [
    _data(10, 0, T0 + 100), _data(11, 0, T0 + 300), _data(10, 1, T0 + 400),
    _data(10, 1, T0 + 450),  # a retry of the last batch: a duplicate, no new transaction
    _marker(10, T0 + 1500, ControlType.COMMIT),  # 10's first: 1400 ms, committed
    _data(12, 0, T0 + 500), _data(10, 2, T0 + 2000),
    _marker(10, T0 + 2050, ControlType.ABORT),  # 10's second: 50 ms, aborted
    _marker(11, T0 + 9300, ControlType.COMMIT),  # 11's: 9000 ms, committed
    _marker(11, T0 + 9400, ControlType.COMMIT),  # ends no transaction
    _data(13, 0, T0 + 9000, partition=1), _marker(13, T0 + 8000, ControlType.COMMIT, partition=1),  # clock skew
    _data(14, 0, 0, partition=1), _marker(14, T0 + 9500, ControlType.ABORT, partition=1),  # no timestamp
    # 12 stays open: listed as open, never a duration.
]


def test_each_transaction_lasts_from_its_first_batch_to_its_marker():
    report = _report(_table(TRANSACTIONS))
    assert report.transactions()["committed"] == 3 and report.transactions()["aborted"] == 2
    assert report.open_txns.column("producer_id").to_pylist() == [12]
    assert _durations(report) == {(False, int(duration_buckets(np.array([1400]))[0])): 1,
                                  (False, int(duration_buckets(np.array([9000]))[0])): 1,
                                  (False, NEGATIVE_DURATION): 1,
                                  (True, int(duration_buckets(np.array([50]))[0])): 1, (True, NO_DURATION): 1}


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 7, 11])
def test_durations_are_exact_whatever_the_feeds(cut):
    """The pure step, fed in pieces: the open transactions are carried from piece to piece."""
    rows = [row for k, row in enumerate(TRANSACTIONS) if k != 3]  # the duplicate is not appended
    stream = np.array([r["partition"] for r in rows], np.int32)
    producer = np.array([r["producer_id"] for r in rows], np.int64)
    stamp = np.array([r["max_timestamp"] for r in rows], np.int64)
    marker = np.array([r.get("is_control", False) for r in rows])
    aborted = np.array([r.get("control_type") == ControlType.ABORT for r in rows])
    offsets = np.arange(len(rows), dtype=np.int64) * 10
    durations = TxnDurations()
    done = []
    for start in range(0, len(rows), cut):
        piece = slice(start, start + cut)
        done.append(durations.add(stream[piece], producer[piece], offsets[piece], stamp[piece], ~marker[piece],
                                  marker[piece], aborted[piece]))
    got = sorted((int(s), int(p), int(f), int(d), bool(a)) for part in done
                 for s, p, f, d, a in zip(part.stream, part.producer_id, part.first_offset, part.duration_ms,
                                          part.aborted, strict=True))
    # (stream, producer, first offset, duration, aborted): 10's first starts at row 0, its second at row 5.
    assert got == [(0, 10, 0, 1400, False), (0, 10, 50, 50, True), (0, 11, 10, 9000, False),
                   (1, 13, 90, -1000, False), (1, 14, 110, T0 + 9500, True)]
    assert durations.open_producer.tolist() == [12] and durations.open_offset.tolist() == [40]
    assert durations.open_timestamp.tolist() == [T0 + 500]


def test_duration_buckets_are_fixed_edges():
    assert DURATION_EDGES_MS[:6].tolist() == [0, 1, 2, 3, 4, 5] and (np.diff(DURATION_EDGES_MS) > 0).all()
    values = np.array([0, 1, 2, 7, 8, 1399, 1400, 86_400_000, -5])
    buckets = duration_buckets(values)
    assert buckets[-1] == NEGATIVE_DURATION
    for value, bucket in zip(values[:-1], buckets[:-1], strict=True):
        assert DURATION_EDGES_MS[bucket] <= value < DURATION_EDGES_MS[bucket + 1], (value, bucket)


# ---- the same data whatever the path ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> pa.Table:
    from idemcore.synth.dataset import generate

    out = tmp_path_factory.mktemp("charts") / "ds"
    generate(out, topics=2, partitions=3, producers=12, batches=8000, seed=11, partitions_per_file=3,
             progress=False)
    return dataset_table(out)


def _same_charts(one: AuditReport, other: AuditReport) -> None:
    assert (one.timeline_ms, _timeline(one)) == (other.timeline_ms, _timeline(other))
    assert _durations(one) == _durations(other)


def test_every_completed_transaction_and_timed_batch_is_counted(synthetic):
    report = _report(synthetic)
    totals = report.transactions()
    assert totals["committed"] + totals["aborted"] > 5
    assert sum(_durations(report).values()) == totals["committed"] + totals["aborted"]
    aborted = sum(n for (is_aborted, _), n in _durations(report).items() if is_aborted)
    assert aborted == totals["aborted"]
    timed = int(pc.sum(pc.greater(synthetic.column("max_timestamp"), 0)).as_py())
    assert sum(_timeline(report).values()) == timed
    per_partition: dict[tuple[str, int], int] = {}
    for (topic, partition, _), n in _timeline(report).items():
        per_partition[(topic, partition)] = per_partition.get((topic, partition), 0) + n
    assert per_partition == {(r["topic"], r["partition"]): r["batches"] for r in report.partitions.to_pylist()}


def test_chunks_tasks_and_checkpoints_change_nothing(synthetic, monkeypatch):
    whole = _report(synthetic)
    monkeypatch.setattr(replayer_module, "FEED_ROWS", 97)
    _same_charts(_report(synthetic), whole)
    monkeypatch.undo()
    topics = synthetic.column("topic").to_pylist()
    tasks = [replay_table(synthetic.filter(pa.array([t == name for t in topics]))) for name in sorted(set(topics))]
    _same_charts(AuditReport.from_results(tasks, order_by="seq_no", seconds=1.0), whole)
    # A follow-style restart half way: the replay state goes through a checkpoint and on.
    half = synthetic.num_rows // 2
    first = StreamReplayer(order_by="seq_no")
    feed_in_order(synthetic.slice(0, half), first)
    values, arrays = first.to_checkpoint()
    second = StreamReplayer(order_by="seq_no")
    second.restore_checkpoint(values, arrays)
    feed_in_order(synthetic.slice(half), second)
    resumed = AuditReport.from_results([second.finish()], order_by="seq_no", seconds=1.0)
    _same_charts(resumed, whole)


def test_the_spark_audit_carries_the_same_data(spark, small_dataset):
    from idemcore.audit.spark import audit

    path, _ = small_dataset
    report = audit(path / "data", spark=spark, tasks=3)
    in_process = AuditReport.from_results([replay_table(dataset_table(path))], order_by="seq_no", seconds=1.0)
    _same_charts(report, in_process)
    assert report.timeline is not None and report.timeline.num_rows and report.txn_durations is not None


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    return build(tmp_path_factory.mktemp("chart-logs") / "logs").root


def test_a_log_directory_audit_carries_the_data_in_process_and_in_spark(spark, log_dir):
    from idemcore.audit.spark import audit_log_dir_spark

    report = audit_log_dir(log_dir)
    totals = report.transactions()
    assert sum(_durations(report).values()) == totals["committed"] + totals["aborted"] > 0
    assert sum(_timeline(report).values()) == int(pc.sum(report.partitions.column("batches")).as_py())
    _same_charts(audit_log_dir_spark(log_dir, spark=spark), report)


# ---- drawn, or said not to be available ---------------------------------------------------------------------------

def test_the_page_draws_both_charts_or_says_why_not():
    report = _report(_table(TRANSACTIONS))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (nothing a user could act on: matplotlib's layout notes)
        page = render_html(report, command="x")
    assert 'id="chart-partition-activity"' in page and 'id="chart-completed-durations"' in page
    assert "completed transactions by duration (3), committed and aborted" in page
    assert "1 transactions whose marker is older than their first batch" in page
    assert "1 transactions without a timestamp on their first batch or marker" in page
    # A report that carries no such data (built by hand): the charts say so, never draw nothing as zero.
    bare = dataclasses.replace(report, timeline=None, timeline_ms=0, txn_durations=None)
    page = render_html(bare, command="x")
    assert 'id="chart-partition-activity"' not in page and 'id="chart-completed-durations"' not in page
    assert 'id="chart-partition-activity-unavailable"' in page and 'id="chart-completed-durations-unavailable"' in page
    assert page.count("not available for this input") == 2
    # Data without timestamps: nothing to place in time, and said so.
    untimed = _report(_table(TRANSACTIONS).drop_columns(["max_timestamp"]))
    page = render_html(untimed, command="x")
    assert "not available for this input: no batch has a timestamp (max_timestamp)." in page
    assert "not available for this input: their batches have no timestamps (max_timestamp)." in page


@pytest.mark.parametrize("seed", range(6))
def test_timeline_counted_by_runs_equals_row_by_row(seed):
    # Runs whose times ascend are counted by search, the others by division: both as the row-by-row count.
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 400, 12)
    ids = np.repeat(rng.permutation(12), lengths).astype(np.int32)
    stamps = rng.integers(1, 40_000_000, len(ids)).astype(np.int64)
    on_edges = rng.random(len(ids)) < 0.3  # exactly on a bucket's lower edge, at every width the test reaches
    stamps[on_edges] = rng.integers(1, 39, int(on_edges.sum())) * 1_024_000
    bounds = np.r_[0, np.cumsum(lengths)]
    for k, (start, stop) in enumerate(itertools.pairwise(bounds)):
        if k % 3:  # two runs in three in time order, the third as drawn
            stamps[start:stop].sort()
    by_runs, by_rows = BatchTimeline(), BatchTimeline()
    half = int(bounds[6])  # two feeds: the second widens and coarsens what the first counted
    by_runs.add(ids[:half], stamps[:half] // 8, 12, bounds[:7])
    by_rows.add(ids[:half], stamps[:half] // 8, 12)
    by_runs.add(ids[half:], stamps[half:], 12, bounds[6:] - half)
    by_rows.add(ids[half:], stamps[half:], 12)
    assert (by_runs.width, by_runs.origin) == (by_rows.width, by_rows.origin)
    assert np.array_equal(by_runs.counts, by_rows.counts)
    assert by_runs.counts.sum() == len(ids)
