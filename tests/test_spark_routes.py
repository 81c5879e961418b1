"""audit(df) and validate(df) take a faster route for a DataFrame that only reads Parquet files (the files read in
Python workers, path mode); the answers are those of the route every DataFrame takes (rows through Arrow).

The small dataset has duplicates, gaps, out-of-order batches, epoch regressions, fenced zombies and hanging
transactions planted (the ``small_dataset`` fixture). One local[2] session (the ``spark`` fixture).
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from idemcore.audit.spark import audit, validate
from idemcore.audit.spark.scan import scanned_files, scanned_parquet
from idemcore.synth.dataset import read_truth
from idemcore.synth.ground_truth import check_against_truth


@pytest.fixture(scope="module")
def scan(spark, small_dataset):
    path, _ = small_dataset
    return spark.read.parquet(str(path / "data"))


def _same_report(a, b) -> None:
    assert a.batches == b.batches
    assert a.findings.equals(b.findings)
    assert a.partitions.equals(b.partitions)
    assert a.open_txns.equals(b.open_txns)
    assert a.hanging_transactions().equals(b.hanging_transactions())


def test_a_parquet_scan_is_audited_in_path_mode_with_the_dataframe_routes_answer(spark, small_dataset, scan):
    path, _ = small_dataset
    assert scanned_parquet(scan, "seq_no") is not None
    not_a_scan = scan.withColumn("note", scan.seq_no * 2)  # a computed column: the rows go through Arrow
    assert scanned_files(not_a_scan) is None
    now = 2**62  # every open transaction hangs by then
    from_scan = audit(scan, spark=spark, tasks=3, now_ms=now)
    from_rows = audit(not_a_scan, spark=spark, tasks=3, now_ms=now)
    from_paths = audit(path / "data", spark=spark, now_ms=now)
    _same_report(from_scan, from_rows)
    _same_report(from_scan, from_paths)
    truth = read_truth(path)
    assert {"duplicate_beyond_window", "sequence_gap", "fenced"} <= from_scan.finding_counts().keys()
    assert from_scan.hanging_transactions().num_rows >= truth["findings"]["hanging_transaction"]
    check = check_against_truth(audit(scan, spark=spark), truth)
    assert check.ok, (check.rows, check.missed, check.unexpected)


def test_only_a_plain_scan_with_the_files_columns_takes_path_mode(spark, small_dataset, scan, tmp_path):
    path, _ = small_dataset
    assert scanned_parquet(scan.select("topic", "partition", *[c for c in scan.columns if c not in
                                                                  ("topic", "partition")]), "seq_no") is not None
    # What the DataFrame shows is not what path mode would read: a filter, a column dropped, renamed or cast.
    assert scanned_parquet(scan.filter("partition > 0"), "seq_no") is None
    assert scanned_parquet(scan.drop("coordinator_epoch"), "seq_no") is None
    assert scanned_parquet(scan.withColumnRenamed("seq_no", "arrival"), "arrival") is None
    assert scanned_parquet(scan.withColumn("producer_epoch", scan.producer_epoch.cast("int")), "seq_no") is None
    assert scanned_parquet(spark.createDataFrame(scan.limit(5).toPandas()), "seq_no") is None
    # Hive-style partition directories: the partition column is not in the files.
    table = pq.read_table(next((path / "data").glob("*.parquet")))
    pq.write_to_dataset(table.drop(["topic"]).append_column("topic", table.column("topic").cast("string")),
                        tmp_path / "by_topic", partition_cols=["topic"])
    assert scanned_parquet(spark.read.parquet(str(tmp_path / "by_topic")), "seq_no") is None
    # Dropping a column the replay does not read keeps the shortcut.
    assert scanned_parquet(scan.withColumn("note", scan.seq_no).drop("note"), "seq_no") is not None


def _verdict_rows(frame) -> list[tuple]:
    return sorted(tuple(row) for row in frame.collect())


@pytest.mark.parametrize("arrow_batch_size", [7, 10000], indirect=True)
def test_validate_of_a_parquet_scan_skips_the_shuffle_and_equals_the_udf_route(spark, scan, arrow_batch_size):
    from idemcore.audit.spark.frame import _FILE_KEY

    fast = validate(scan)
    plan = fast._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan and "Sort" not in plan and _FILE_KEY not in fast.columns
    shuffled = validate(scan, num_partitions=3)  # num_partitions given: the shuffle route
    assert "Exchange" in shuffled._jdf.queryExecution().executedPlan().toString()
    assert fast.columns == shuffled.columns
    rows = _verdict_rows(fast)
    assert rows == _verdict_rows(shuffled) and len(rows) == scan.count()
    # Several files per task (no open cost): a task's rows change file within an Arrow batch.
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    try:
        packed = validate(scan)
        assert packed.rdd.getNumPartitions() < len(scan.inputFiles())
        assert _verdict_rows(packed) == rows
    finally:
        spark.conf.unset("spark.sql.files.openCostInBytes")
    statuses = {row[-5] for row in rows}
    assert statuses == {"appended", "duplicate", "rejected"}


def test_validate_takes_the_shuffle_when_a_stream_spans_files(spark, small_dataset, tmp_path):
    from .test_replay import dataset_table

    table = dataset_table(small_dataset[0]).sort_by("seq_no")
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), tmp_path / "first.parquet")
    pq.write_table(table.slice(half), tmp_path / "second.parquet")
    frame = spark.read.parquet(str(tmp_path))
    checked = validate(frame)
    assert "Exchange" in checked._jdf.queryExecution().executedPlan().toString()
    assert _verdict_rows(checked) == _verdict_rows(validate(frame.withColumn("note", frame.seq_no)).drop("note"))


@pytest.mark.parametrize("change", ["partition as int64", "a column the replay does not read"])
def test_validate_of_a_parquet_scan_takes_each_column_as_spark_reads_it(spark, small_dataset, tmp_path, change):
    import pyarrow as pa

    for k, path in enumerate(sorted((small_dataset[0] / "data").glob("*.parquet"))):
        table = pq.read_table(path)
        if change == "partition as int64":
            table = table.set_column(1, "partition", table.column("partition").cast(pa.int64()))
        else:
            table = table.append_column("note", pa.array([f"row {i}" for i in range(table.num_rows)]))
        pq.write_table(table, tmp_path / f"part-{k}.parquet", row_group_size=500)
    frame = spark.read.parquet(str(tmp_path))
    fast = validate(frame)
    assert "Exchange" not in fast._jdf.queryExecution().executedPlan().toString()
    assert fast.schema == validate(frame, num_partitions=2).schema
    assert _verdict_rows(fast) == _verdict_rows(validate(frame, num_partitions=2))


def test_a_path_mode_task_replays_on_the_cores_spark_gave_it(spark, monkeypatch):
    # spark.task.cpus is read in the task (1 in this session's local[2]); outside a task there is no context.
    from idemcore.audit.spark.audit_job import task_threads

    assert spark.sparkContext.parallelize([0, 1], 2).map(lambda _: task_threads()).collect() == [1, 1]
    assert task_threads() == 1

    class TwoCores:
        def cpus(self) -> int:
            return 2

    monkeypatch.setattr("pyspark.TaskContext.get", staticmethod(lambda: TwoCores()))
    assert task_threads() == 2


def test_a_file_read_twice_is_audited_as_spark_reads_it(spark, small_dataset):
    # spark.read.parquet(f, f) reads f's rows twice (inputFiles() names it once): no shortcut, the rows route
    # sees every row Spark shows.
    path, _ = small_dataset
    first = str(sorted((path / "data").glob("*.parquet"))[0])
    twice = spark.read.parquet(first, first)
    assert scanned_files(twice) is None
    assert scanned_files(spark.read.parquet(str(path / "data"), first)) is None  # a file and its directory
    assert scanned_files(spark.read.parquet(first)) is not None
    assert audit(twice).batches == twice.count() == 2 * pq.ParquetFile(first).metadata.num_rows
