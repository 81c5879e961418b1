"""The replay layer without Spark: stream keys, stream order, replaying tables, the report."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from idemcore import Finding
from idemcore.audit import AuditReport, StreamKeys, replay_table
from idemcore.audit.replayer import in_stream_order
from idemcore.audit.spark.plan import RowGroup, components, plan_tasks
from idemcore.audit.spark.schema import InputError
from idemcore.engine import validate
from idemcore.synth.dataset import read_truth
from idemcore.synth.ground_truth import check_against_truth


def dataset_table(path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in sorted((path / "data").glob("*.parquet"))],
                            promote_options="default")


def per_stream_reference(table: pa.Table) -> dict[tuple[str, int, int], tuple]:
    """Each stream validated on its own with idemcore.validate, keyed by (topic, partition, seq_no)."""
    frame = table.to_pandas()
    frame["topic"] = frame["topic"].astype(str)
    frame = frame.sort_values(["topic", "partition", "seq_no"])
    out = {}
    for (topic, partition), rows in frame.groupby(["topic", "partition"], sort=False):
        v = validate(rows.drop(columns=["topic", "seq_no"]))
        for k, seq in enumerate(rows["seq_no"].tolist()):
            out[(topic, partition, seq)] = (int(v.status[k]), int(v.error_code[k]), int(v.base_offset[k]),
                                            int(v.last_offset[k]), int(v.finding[k]))
    return out


def test_stream_keys_are_dense_stable_and_decode_back():
    keys = StreamKeys()
    first = keys.encode(pa.array(["b", "a", "b", "b"]), np.array([5, 5, 5, 0]))
    assert first.tolist() == [0, 1, 0, 2]
    again = keys.encode(pa.array(["a", "a", "c"]).dictionary_encode(), np.array([5, 5, 1]))
    assert again.tolist() == [1, 1, 3]
    topics, partitions = keys.decode(np.array([0, 1, 2, 3]))
    assert topics.to_pylist() == ["b", "a", "b", "c"] and partitions.tolist() == [5, 5, 0, 1]
    sorted_ids = keys.encode(pa.array(["z"] * 50 + ["y"] * 50), np.zeros(100, np.int64))  # long runs
    assert sorted_ids.tolist() == [4] * 50 + [5] * 50


@pytest.mark.parametrize(("topic", "partition", "message"), [
    (pa.array(["a", None]), [0, 1], "column 'topic' contains 1 null value"),
    (pa.array([1, 2]), [0, 1], "column 'topic' must be a string; got int64"),
    (pa.array(["a", "b"]), [0, -1], "column 'partition' has values outside"),
])
def test_stream_keys_reject_bad_input(topic, partition, message):
    with pytest.raises(ValueError, match=message):
        StreamKeys().encode(topic, np.array(partition))


def test_stream_order_is_kept_when_already_ordered_and_restored_otherwise():
    ids, order = np.array([0, 1, 0, 1]), np.array([1, 2, 3, 4])
    assert in_stream_order(ids, order) is None  # arrival order over all streams
    assert in_stream_order(np.array([0, 0, 1, 1]), np.array([5, 9, 1, 2])) is None  # clustered, each in order
    assert in_stream_order(np.array([0, 1, 0, 1]), np.array([3, 2, 1, 4])).tolist() == [2, 0, 1, 3]


def test_replay_equals_each_stream_validated_alone_whatever_the_row_order(small_dataset):
    path, _ = small_dataset
    table = dataset_table(path)
    shuffled = table.take(np.random.default_rng(0).permutation(table.num_rows))
    reference = per_stream_reference(table)
    result = replay_table(shuffled)
    report = AuditReport.from_results([result], order_by="seq_no", seconds=1.0)
    expected = {key: Finding(v[4]).label for key, v in reference.items() if v[4]}
    found = {(r["topic"], r["partition"], r["seq_no"]): r["finding"] for r in report.findings.to_pylist()}
    assert found == expected and len(found) > 50
    ends = {(r["topic"], r["partition"]): r["log_end_offset"] for r in report.partitions.to_pylist()}
    for (topic, partition, _), verdict in reference.items():
        assert verdict[3] < ends[(topic, partition)]


def test_in_process_report_matches_the_ground_truth(small_dataset):
    path, truth = small_dataset
    report = AuditReport.from_results([replay_table(dataset_table(path))], order_by="seq_no", seconds=1.0)
    check = check_against_truth(report, read_truth(path))
    assert check.ok, (check.rows, check.missed, check.unexpected)
    assert report.finding_counts() == truth["findings"]
    for row in report.partitions.to_pylist():  # offsets are assigned from 0: every appended record has one
        assert row["records"] == row["log_end_offset"] > 0
        assert row["batches"] == row["appended"] + row["duplicates"] + row["rejected"]
    assert report.partitions.column("committed_txns").to_numpy().sum() > 0
    # Hanging transactions hold the last stable offset at their first offset.
    lso = report.last_stable_offsets()
    for txn in report.hanging_transactions().to_pylist():
        assert lso[(txn["topic"], txn["partition"])] <= txn["first_offset"]
    assert report.open_txns.num_rows == truth["findings"]["hanging_transaction"] + 1  # plus one recent, not hanging


def test_hanging_depends_on_the_bound_and_now(small_dataset):
    path, _ = small_dataset
    result = replay_table(dataset_table(path))
    never = AuditReport.from_results([result], order_by="seq_no", seconds=1.0, hanging_after_ms=10**12)
    assert never.hanging_transactions().num_rows == 0 and "hanging_transaction" not in never.finding_counts()
    later = AuditReport.from_results([result], order_by="seq_no", seconds=1.0, now_ms=result.max_timestamp + 10**9)
    assert later.hanging_transactions().num_rows == later.open_txns.num_rows == 3


def test_report_refuses_a_stream_split_across_tasks(small_dataset):
    path, _ = small_dataset
    table = dataset_table(path)
    halves = [replay_table(table.slice(0, 100)), replay_table(table.slice(50, 100))]
    with pytest.raises(ValueError, match="split across tasks"):
        AuditReport.from_results(halves, order_by="seq_no", seconds=1.0)


def test_report_writes_parquet_and_json(tmp_path, small_dataset):
    import json

    path, truth = small_dataset
    report = AuditReport.from_results([replay_table(dataset_table(path))], order_by="seq_no", seconds=2.0)
    paths = report.write(tmp_path / "out")
    assert pq.read_table(paths["findings"]).num_rows == report.findings.num_rows
    summary = json.loads(paths["summary"].read_text())
    assert summary["findings"] == truth["findings"] and summary["batches"] == truth["batches"]
    assert len(summary["gaps"]) == 2 and {z["current_epoch"] for z in summary["zombie_writes"]} == {1}
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["findings.parquet", "producers.parquet", "summary.json"]


def _group(path, index, low, high, rows=10):
    return RowGroup(path, index, rows, low, high)


def test_overlapping_row_groups_share_a_task():
    groups = [_group("a", 0, ("t", 0), ("t", 1)), _group("a", 1, ("t", 1), ("t", 2)),
              _group("b", 0, ("t", 3), ("t", 3)), _group("b", 1, ("u", 0), ("u", 0)),
              _group("c", 0, ("t", 2), ("t", 2))]  # c's stream t/2 is also in a/1
    merged = [sorted((g.path, g.index) for g in c) for c in components(groups)]
    assert merged == [[("a", 0), ("a", 1), ("c", 0)], [("b", 0)], [("b", 1)]]
    with pytest.warns(RuntimeWarning, match="no topic/partition statistics"):
        assert len(components([*groups, _group("d", 0, None, None)])) == 1


def test_plan_tasks_cover_every_row_group_once_with_whole_streams(small_dataset):
    path, _ = small_dataset
    plans = plan_tasks(path / "data", tasks=3)
    assert len(plans) == 3
    assert all(plan.parts == 1 for plan in plans)  # one stream per file: nothing to slice
    listed = [(p, i) for plan in plans for p, indexes in plan.groups for i in indexes]
    assert len(listed) == len(set(listed)) == sum(pq.ParquetFile(f).num_row_groups
                                                  for f in (path / "data").glob("*.parquet"))
    seen: dict[tuple, int] = {}
    for k, plan in enumerate(plans):
        for p, indexes in plan.groups:
            table = pq.ParquetFile(p).read_row_groups(indexes, columns=["topic", "partition"])
            for key in set(zip(table["topic"].to_pylist(), table["partition"].to_pylist(), strict=True)):
                assert seen.setdefault(key, k) == k, f"stream {key} in tasks {seen[key]} and {k}"


@pytest.mark.parametrize("own_table_run", [1, 25, 10**9])  # every stream its own table / some / all shared
@pytest.mark.parametrize("layout", ["clustered", "interleaved"])
def test_sharded_state_equals_each_stream_alone_for_any_cut(monkeypatch, small_dataset, own_table_run, layout):
    from idemcore.audit import StreamReplayer, shards

    monkeypatch.setattr(shards, "OWN_TABLE_RUN", own_table_run)
    path, _ = small_dataset
    table = dataset_table(path)
    if layout == "interleaved":
        table = table.sort_by("seq_no")  # arrival order: streams interleave row by row
    reference = per_stream_reference(table)
    replayer = StreamReplayer(collect=False)
    rng = np.random.default_rng(own_table_run)
    cuts = np.sort(rng.choice(np.arange(1, table.num_rows), size=25, replace=False))
    got = {}
    for start, stop in zip(np.r_[0, cuts], np.r_[cuts, table.num_rows], strict=True):
        part = table.slice(start, stop - start)
        v = replayer.feed(part)
        keys = zip(part["topic"].to_pylist(), part["partition"].to_pylist(), part["seq_no"].to_pylist(), strict=True)
        for k, key in enumerate(keys):
            got[key] = (int(v.status[k]), int(v.error_code[k]), int(v.base_offset[k]), int(v.last_offset[k]),
                        int(v.finding[k]))
    assert got == reference
    # Independently of the replayer: a stream gets a table of its own when it has at least OWN_TABLE_RUN rows
    # in the slice it is first seen in; the other streams share table 0.
    first_run: dict[tuple[str, int], int] = {}
    for start, stop in zip(np.r_[0, cuts], np.r_[cuts, table.num_rows], strict=True):
        part = table.slice(start, stop - start)
        for key, run in Counter(zip(part["topic"].to_pylist(), part["partition"].to_pylist(), strict=True)).items():
            first_run.setdefault(key, run)
    own = {key for key, run in first_run.items() if run >= own_table_run}
    assert len(own) == {1: 6, 10**9: 0}[own_table_run] if own_table_run != 25 else 0 < len(own) < 6
    assert len(replayer.state.tables) == 1 + len(own)
    for key in first_run:
        (stream,) = replayer.keys.encode(pa.array([key[0]]), np.array([key[1]]))
        assert (replayer.state._table_of[stream] > 0) == (key in own), key


def test_no_batches_make_an_empty_report(tmp_path):
    report = AuditReport.from_results([], order_by="seq_no", seconds=0.0)
    assert (report.batches, report.finding_counts(), report.partitions.num_rows, report.open_txns.num_rows) == (
        0, {}, 0, 0)
    assert report.summary()["batches_per_s"] == 0
    assert pq.read_table(report.write(tmp_path)["findings"]).num_rows == 0


def test_interleaved_streams_are_sliced_by_stream_across_tasks(tmp_path, small_dataset):
    from idemcore.audit.spark.plan import read_task

    path, _ = small_dataset
    table = dataset_table(path).sort_by("seq_no")  # arrival order: every row group holds every stream
    pq.write_table(table, tmp_path / "interleaved.parquet", row_group_size=500)
    plans = plan_tasks(tmp_path, tasks=3)
    assert [(plan.part, plan.parts) for plan in plans] == [(0, 3), (1, 3), (2, 3)]
    parts = [read_task(plan) for plan in plans]
    assert sum(part.num_rows for part in parts) == table.num_rows
    owners: dict[tuple, int] = {}
    for k, part in enumerate(parts):
        for key in set(zip(part["topic"].to_pylist(), part["partition"].to_pylist(), strict=True)):
            assert owners.setdefault(key, k) == k
    assert len(owners) == 6 and len(set(owners.values())) > 1
    report = AuditReport.from_results([replay_table(part) for part in parts], order_by="seq_no", seconds=1.0)
    whole = AuditReport.from_results([replay_table(table)], order_by="seq_no", seconds=1.0)
    assert report.findings.equals(whole.findings) and report.partitions.equals(whole.partitions)


def brute_force_aborted_records(table: pa.Table) -> dict[tuple[str, int], int]:
    """Walk each stream row by row: a producer's appended transactional records, dropped at COMMIT,
    counted at ABORT."""
    frame = table.to_pandas()
    frame["topic"] = frame["topic"].astype(str)
    out = {}
    for (topic, partition), rows in frame.sort_values(["topic", "partition", "seq_no"]).groupby(
            ["topic", "partition"], sort=False):
        verdicts = validate(rows.drop(columns=["topic", "seq_no"]))
        open_records: dict[int, int] = {}
        aborted = 0
        for k, row in enumerate(rows.itertuples()):
            if verdicts.status[k] != 0:
                continue
            if row.is_control:
                records = open_records.pop(row.producer_id, 0)
                aborted += records if row.control_type == 0 else 0
            elif row.is_transactional:
                open_records[row.producer_id] = open_records.get(row.producer_id, 0) + row.record_count
        out[(topic, partition)] = aborted
    return out


@pytest.mark.parametrize("cuts", [0, 7, 60])
def test_aborted_records_equal_a_row_by_row_walk_for_any_cut(small_dataset, cuts):
    from idemcore.audit import StreamReplayer

    path, _ = small_dataset
    table = dataset_table(path).sort_by("seq_no")  # interleaved: transactions span many feeds
    expected = brute_force_aborted_records(table)
    assert sum(expected.values()) > 0
    replayer = StreamReplayer()
    bounds = np.r_[0, np.sort(np.random.default_rng(cuts).choice(table.num_rows, cuts, replace=False)), table.num_rows]
    for start, stop in itertools.pairwise(bounds):
        replayer.feed(table.slice(int(start), int(stop - start)))
    result = replayer.finish()
    got = {(r["topic"], r["partition"]): r["aborted_records"] for r in result.partitions.to_pylist()}
    assert got == expected


class _NoJob(Exception):
    pass


class _PathModeSpark:
    """Stands in for Spark in path mode: records the one job audit() would start, and starts none."""

    def __init__(self):
        self.tasks: int | None = None
        self.function = None

    def range(self, start, end, numPartitions):
        assert start == 0 and numPartitions == end
        self.tasks = end
        return self

    def mapInArrow(self, function, schema):
        self.function = function
        raise _NoJob("audit() started its job")

    def run_tasks(self) -> list:
        """Each task's function on this process, as a Python worker would run it."""
        from idemcore.audit import TaskResult
        from idemcore.audit.spark.task_rows import raise_task_errors as _raise_errors

        rows = [row for task in range(self.tasks)
                for batch in self.function(iter([pa.record_batch({"id": pa.array([task], pa.int64())})]))
                for row in batch.to_pylist()]
        _raise_errors(rows)  # the driver's part: a task's data error comes back as its row
        return [TaskResult.from_row(row) for row in rows]


def _count_footer_reads(monkeypatch) -> Counter:
    """Count, per path, every read of a Parquet footer (a ParquetFile opened, metadata or schema read)."""
    reads: Counter = Counter()
    for name in ("ParquetFile", "read_metadata", "read_schema"):
        real = getattr(pq, name)

        def counted(where, *args, _real=real, **kwargs):
            reads[str(where)] += 1
            return _real(where, *args, **kwargs)

        monkeypatch.setattr(pq, name, counted)
    return reads


def test_path_mode_reads_each_footer_once_on_the_driver_and_once_per_task(monkeypatch, small_dataset):
    from idemcore.audit.spark import audit
    from idemcore.protocol.codes import Origin

    path, _ = small_dataset
    files = sorted(str(f) for f in (path / "data").glob("*.parquet"))
    reads = _count_footer_reads(monkeypatch)
    spark = _PathModeSpark()
    with pytest.raises(_NoJob, match=r"audit\(\) started its job"):
        audit(path / "data", spark=spark, tasks=3, origin="replication")
    assert reads == dict.fromkeys(files, 1)  # planning and checking: each footer once
    closure = dict(zip(spark.function.__code__.co_freevars, (c.cell_contents for c in spark.function.__closure__),
                       strict=True))
    assert closure["origin"] is Origin.REPLICATION  # the enum travels to the workers, not its name

    reads.clear()
    results = spark.run_tasks()  # the workers: each reads the footers of its own files, once
    assert spark.tasks == len(results) == 3 and reads == dict.fromkeys(files, 1)
    table = dataset_table(path)
    report = AuditReport.from_results(results, order_by="seq_no", seconds=1.0)
    whole = AuditReport.from_results([replay_table(table, "replication")], order_by="seq_no", seconds=1.0)
    assert report.findings.equals(whole.findings) and report.partitions.equals(whole.partitions)
    client = AuditReport.from_results([replay_table(table)], order_by="seq_no", seconds=1.0)
    assert report.finding_counts() != client.finding_counts()  # the origin reached the kernel


def _rewrite(table: pa.Table, change: str) -> pa.Table:
    if change == "no producer_epoch":
        return table.drop_columns(["producer_epoch"])
    if change == "no seq_no":
        return table.drop_columns(["seq_no"])
    if change == "double producer_id":
        return table.set_column(table.schema.get_field_index("producer_id"), "producer_id",
                                table["producer_id"].cast(pa.float64(), safe=False))
    if change == "int topic":
        return table.set_column(0, "topic", table["partition"])
    if change == "string is_control":
        return table.set_column(table.schema.get_field_index("is_control"), "is_control",
                                table["is_control"].cast(pa.string()))
    if change == "float seq_no":
        return table.set_column(table.schema.get_field_index("seq_no"), "seq_no", table["seq_no"].cast(pa.float32()))
    raise AssertionError(change)


@pytest.mark.parametrize(("change", "message"), [
    ("no producer_epoch", r"missing required column\(s\): producer_epoch \(in .*/part-1\.parquet\)"),
    ("no seq_no", r"ordering column 'seq_no' is missing from 1 of 2 files \(first: .*/part-1\.parquet\); every file"),
    ("double producer_id", r"column 'producer_id' must be an integer; got double \(in .*/part-1\.parquet\)"),
    ("int topic", r"column 'topic' must be a string; got int32 \(in .*/part-1\.parquet\)"),
    ("string is_control", r"column 'is_control' must be a boolean \(or 0/1 integer\); got string"),
    ("float seq_no", r"column 'seq_no' must be an integer; got float"),
])
def test_path_mode_names_a_bad_column_before_any_job(tmp_path, small_dataset, change, message):
    from idemcore.audit.spark import audit

    table = dataset_table(small_dataset[0])
    pq.write_table(table.slice(0, 3000), tmp_path / "part-0.parquet")
    pq.write_table(_rewrite(table.slice(3000), change), tmp_path / "part-1.parquet")
    spark = _PathModeSpark()
    with pytest.raises(ValueError, match=message):
        audit(tmp_path, spark=spark, tasks=2)
    assert spark.tasks is None  # no job started


def test_path_mode_workers_still_name_null_values(tmp_path, small_dataset):
    from idemcore.audit.spark import audit

    table = dataset_table(small_dataset[0])
    ids = table["producer_id"].to_pylist()
    ids[17] = None
    nulls = table.set_column(table.schema.get_field_index("producer_id"), "producer_id", pa.array(ids, pa.int64()))
    message = r"column 'producer_id' in .*/nulls\.parquet: null at row 17 \(1 null value\(s\)\)"
    pq.write_table(nulls, tmp_path / "nulls.parquet")
    spark = _PathModeSpark()
    with pytest.raises(InputError, match=message):  # the footer's statistics show it: no job
        audit(tmp_path, spark=spark, tasks=1)
    assert spark.tasks is None
    pq.write_table(nulls, tmp_path / "nulls.parquet", write_statistics=False)  # only a worker can see it
    with pytest.warns(RuntimeWarning, match="no topic/partition statistics"), \
            pytest.raises(_NoJob, match=r"audit\(\) started its job"):
        audit(tmp_path, spark=spark, tasks=1)
    with pytest.raises(InputError, match=message):
        spark.run_tasks()


def _first_sight(pairs: list[tuple[str, int]], known: dict[tuple[str, int], int]) -> list[int]:
    """Dense ids in order of first sight, by walking the rows."""
    return [known.setdefault(pair, len(known)) for pair in pairs]


def test_stream_keys_of_chunked_columns_equal_a_row_by_row_walk():
    # Runs of string topics (run-length encoded), dictionaries of one topic and of several (one with a topic
    # twice), chunk edges inside a run and between topics of one partition, partitions chunked unlike topics,
    # and interleaved rows whose last pair first shows up after the rows numbered first.
    rng = np.random.default_rng(5)
    keys: StreamKeys = StreamKeys()
    known: dict[tuple[str, int], int] = {}
    runs = [(f"t{int(rng.integers(3))}", int(rng.integers(4))) for _ in range(60)]
    rows = [pair for pair in runs for _ in range(int(rng.integers(100, 400)))]
    topics = [topic for topic, _ in rows]
    partition = np.array([p for _, p in rows], np.int64)
    cuts = [0, 1, 5000, 5001, len(rows)]  # the last chunk is long enough to be sampled first
    split = [partition[:7], partition[7:9000], partition[9000:]]
    for kind in (pa.string(), pa.large_string()):
        topic = pa.chunked_array([pa.array(topics[a:b], kind) for a, b in itertools.pairwise(cuts)])
        assert keys.encode_chunks(topic, split).tolist() == _first_sight(rows, known)
    dictionaries = [pa.array(topics[a:b]).dictionary_encode() for a, b in itertools.pairwise(cuts)]
    one_topic = pa.DictionaryArray.from_arrays(pa.array([0, 0, 0], pa.int32()), pa.array(["t0", "t0"]))
    doubled = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1], pa.int32()), pa.array(["t1", "t9", "t1"]))
    topic = pa.chunked_array([*dictionaries, one_topic, doubled])
    more = [(str(t), int(p)) for t, p in zip(topic.to_pylist(), np.r_[partition, 2, 2, 2, 2, 2, 3, 3], strict=True)]
    assert keys.encode_chunks(topic, [*split, np.array([2, 2, 2, 2, 2, 3, 3])]).tolist() == _first_sight(more, known)
    n = 70_000
    interleaved = [(f"t{int(t)}", int(p)) for t, p in zip(rng.integers(2, size=n), rng.integers(3, size=n),
                                                         strict=True)]
    interleaved[-3] = ("late", 7)
    topic = pa.array([t for t, _ in interleaved]).dictionary_encode()
    assert keys.encode(topic, np.array([p for _, p in interleaved])).tolist() == _first_sight(interleaved, known)
    decoded_topics, decoded_partitions = keys.decode(np.arange(len(known)))
    assert list(zip(decoded_topics.to_pylist(), decoded_partitions.tolist(), strict=True)) == list(known)


def test_stream_order_of_chunks_equals_that_of_the_whole_column():
    rng = np.random.default_rng(9)
    for ids, order in [(np.repeat([0, 1, 2], 50), np.tile(np.arange(50), 3)),  # clustered, each in order
                       (np.tile([0, 1, 2], 50), np.arange(150)),  # arrival order
                       (np.repeat([0, 1, 2], 50), rng.permutation(150))]:  # to be sorted
        whole = in_stream_order(ids, order)
        for cuts in ([], [1], [50], [49, 50, 51, 100], [149]):
            parts = np.split(order, cuts)
            got = in_stream_order(ids, parts)
            assert (got is None and whole is None) or got.tolist() == whole.tolist()


def _replayed(table: pa.Table, feed_rows: int) -> dict:
    """Everything a replay keeps: the task's tables and scalars, and the checkpoint's arrays."""
    from idemcore.audit import StreamReplayer
    from idemcore.audit import replayer as replayer_module

    replayer = StreamReplayer()
    for start in range(0, table.num_rows, feed_rows):
        replayer_module.feed_in_order(table.slice(start, feed_rows), replayer)
    values, arrays = replayer.to_checkpoint()
    result = replayer.finish()
    tables = {name: getattr(result, name).to_pydict() for name in ("findings", "partitions", "open_txns",
                                                                    "timeline", "txn_durations")}
    return {**tables, "values": values, "batches": result.batches, "span": (result.min_timestamp,
                                                                              result.max_timestamp),
            "arrays": {name: array if isinstance(array, bytes) else np.asarray(array).tolist()
                       for name, array in arrays.items()}}


@pytest.mark.parametrize("layout", ["clustered", "interleaved"])
@pytest.mark.parametrize("feed_rows", [97, 6000])
def test_counts_by_runs_equal_counts_by_rows(monkeypatch, small_dataset, layout, feed_rows):
    # Streams in long runs are counted (and sharded) per run; forcing the per-row way must change nothing.
    # Small feeds: most hold no transactional batch, while transactions stay open across them.
    from idemcore.audit import replayer as replayer_module
    from idemcore.audit import shards

    path, _ = small_dataset
    table = dataset_table(path)
    if layout == "interleaved":
        table = table.sort_by("seq_no")
    assert table.column("is_control").to_numpy().any()
    fast = _replayed(table, feed_rows)
    monkeypatch.setattr(replayer_module, "stream_runs", lambda ids, most: None)
    monkeypatch.setattr(shards, "stream_runs", lambda ids, most: None)
    monkeypatch.setattr(replayer_module, "TIMELINE_RUNS", 0)
    assert fast == _replayed(table, feed_rows)
    assert _cut_free(fast) == _cut_free(_replayed(table, table.num_rows))  # one feed: transactional batches in it
    # Independently of both: the records of aborted transactions, and a duration for every completed one.
    partitions = fast["partitions"]
    assert dict(zip(zip(partitions["topic"], partitions["partition"], strict=True), partitions["aborted_records"],
                    strict=True)) == brute_force_aborted_records(table)
    completed = sum(partitions["committed_txns"]) + sum(partitions["aborted_txns"])
    assert sum(fast["txn_durations"]["transactions"]) == completed > 0


def _cut_free(replayed: dict) -> dict:
    """What does not depend on how the rows were cut into feeds (producer tables are assigned per feed; open
    transactions are listed in the order the feeds left them)."""
    arrays = replayed["arrays"]
    kept = {name: arrays[name] for name in arrays if name.startswith(("counter.", "timeline.", "aborted"))}
    return {**{name: replayed[name] for name in ("findings", "partitions", "timeline", "txn_durations", "batches",
                                                  "span")},
            "open_txns": sorted(zip(*replayed["open_txns"].values(), strict=True)), **kept,
            **{name: sorted(map(tuple, arrays[name])) for name in ("pending", "durations.open")},
            "histogram": arrays["durations.histogram"]}
