"""Spark: validate() and audit() equal the in-process kernel, whatever the partitioning and Arrow batch size.

One local[2] session for the whole run (the ``spark`` fixture).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from idemcore import Finding
from idemcore.audit import AuditReport, replay_table
from idemcore.audit.spark import OUTPUT_COLUMNS, audit, validate
from idemcore.cli import main
from idemcore.synth.dataset import read_truth
from idemcore.synth.ground_truth import check_against_truth

from .test_replay import dataset_table, per_stream_reference

STATUS = ["appended", "duplicate", "rejected"]


@pytest.fixture(scope="module")
def small_table(small_dataset) -> pa.Table:
    return dataset_table(small_dataset[0])


@pytest.fixture(scope="module")
def reference(small_table):
    return per_stream_reference(small_table)


@pytest.fixture(scope="module")
def scrambled_frame(spark, small_table):
    """The dataset as a DataFrame whose rows are in random order across partitions."""
    shuffled = small_table.take(np.random.default_rng(1).permutation(small_table.num_rows))
    frame = shuffled.to_pandas()
    frame["topic"] = frame["topic"].astype(str)
    return spark.createDataFrame(frame)


@pytest.mark.parametrize("arrow_batch_size", [1, 7, 10000], indirect=True)
@pytest.mark.parametrize("input_partitions", [1, 5])
def test_validate_equals_the_in_process_kernel(scrambled_frame, reference, arrow_batch_size, input_partitions):
    frame = validate(scrambled_frame.repartition(input_partitions), num_partitions=3)
    assert frame.columns[-len(OUTPUT_COLUMNS):] == list(OUTPUT_COLUMNS)
    rows = frame.select("topic", "partition", "seq_no", *OUTPUT_COLUMNS).collect()
    got = {(r.topic, r.partition, r.seq_no): (STATUS.index(r.status), r.error_code, r.assigned_base_offset,
                                              r.assigned_last_offset, Finding.parse(r.finding) if r.finding else 0)
           for r in rows}
    assert got == reference


def test_validate_keeps_every_input_column_and_row(scrambled_frame, small_table):
    frame = validate(scrambled_frame.withColumn("note", scrambled_frame.seq_no * 2))
    assert frame.columns == [*scrambled_frame.columns, "note", *OUTPUT_COLUMNS]
    assert frame.count() == small_table.num_rows
    assert frame.filter("note != seq_no * 2").count() == 0


def test_audit_in_path_mode_finds_every_planted_anomaly_and_nothing_else(spark, small_dataset, small_table):
    path, truth = small_dataset
    report = audit(path / "data", spark=spark, tasks=3)
    check = check_against_truth(report, read_truth(path))
    assert check.ok, (check.rows, check.missed, check.unexpected)
    in_process = AuditReport.from_results([replay_table(small_table)], order_by="seq_no", seconds=1.0)
    assert report.findings.equals(in_process.findings)
    assert report.partitions.equals(in_process.partitions)
    assert report.open_txns.equals(in_process.open_txns)
    assert report.batches == truth["batches"]


def test_an_empty_dataframe_gives_an_empty_report(spark, scrambled_frame):
    report = audit(scrambled_frame.limit(0), spark=spark)
    assert report.batches == 0 and report.finding_counts() == {} and report.partitions.num_rows == 0
    assert validate(scrambled_frame.limit(0)).count() == 0


def test_audit_reads_uris_and_shows_progress(spark, small_dataset, capsys):
    path, truth = small_dataset
    report = audit(f"file://{path}/data", spark=spark, tasks=2, progress=True)
    assert report.finding_counts() == truth["findings"]
    progress = capsys.readouterr().err
    # Not a terminal: whole lines, the last one with every one of the 2 tasks done (Spark's status tracker).
    assert "\r" not in progress
    assert re.search(r"^auditing: 2/2 task \(\d+ s\)$", progress, re.MULTILINE), progress


def test_path_mode_on_streams_interleaved_in_one_file(spark, tmp_path, small_dataset, small_table):
    import pyarrow.parquet as pq

    path, _ = small_dataset
    pq.write_table(small_table.sort_by("seq_no"), tmp_path / "arrival-order.parquet", row_group_size=400)
    report = audit(tmp_path, spark=spark, tasks=2)  # one component, sliced by stream over two tasks
    check = check_against_truth(report, read_truth(path))
    assert check.ok, (check.rows, check.missed, check.unexpected)


@pytest.mark.parametrize("arrow_batch_size", [7, 10000], indirect=True)
def test_audit_of_a_dataframe_equals_path_mode(spark, small_dataset, scrambled_frame, arrow_batch_size):
    path, _ = small_dataset
    from_frame = audit(scrambled_frame.repartition(4), spark=spark, tasks=3)
    from_paths = audit(path / "data", spark=spark)
    assert from_frame.findings.equals(from_paths.findings)
    assert from_frame.partitions.equals(from_paths.partitions)
    assert from_frame.finding_counts() == read_truth(path)["findings"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda df: df.drop("producer_epoch"), "missing required column(s): producer_epoch"),
    (lambda df: df.drop("seq_no"), "needs an ordering column"),
    (lambda df: df.withColumn("producer_id", df.producer_id.cast("double")),
     "column 'producer_id' must be an integer; got double"),
    (lambda df: df.withColumn("topic", df.partition), "column 'topic' must be a string; got int"),
    (lambda df: df.withColumn("is_control", df.topic), "column 'is_control' must be a boolean"),
])
def test_bad_columns_are_named_before_any_job(scrambled_frame, change, message):
    bad = change(scrambled_frame)
    for run in (validate, audit):
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            run(bad)


@pytest.mark.parametrize("column", ["producer_id", "topic", "base_sequence", "seq_no"])
def test_nulls_in_key_columns_are_named(scrambled_frame, column):
    from pyspark.sql import functions as F

    bad = scrambled_frame.withColumn(column, F.when(F.col("seq_no") == 17, None).otherwise(F.col(column)))
    with pytest.raises(ValueError, match=f"column '{column}' contains 1 null value"):
        audit(bad)
    with pytest.raises(Exception, match=f"column '{column}' contains 1 null value"):
        validate(bad).collect()


def test_cli_generate_then_audit_json(tmp_path, capsys, spark):
    out = tmp_path / "ds"
    assert main(["generate", str(out), "--topics", "2", "--partitions", "2", "--producers", "10",
                 "--batches", "4000", "--partitions-per-file", "1", "--anomalies", "sequence_gap=2,fenced=1",
                 "--json"]) == 0
    generated = json.loads(capsys.readouterr().out)
    assert generated["findings"]["sequence_gap"] == 2 and generated["files"] == 4
    assert main(["generate", str(out), "--json"]) == 2  # refuses to overwrite
    assert "already exists" in capsys.readouterr().err

    assert main(["audit", str(out), "--json", "--out", str(tmp_path / "report"), "--tasks", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"batches", "findings", "seconds", "batches_per_s"} <= result.keys()
    assert result["batches"] == generated["batches"]
    assert result["findings"] == read_truth(out)["findings"]
    summary_text = (tmp_path / "report" / "summary.json").read_text()
    summary = json.loads(summary_text)
    assert summary["findings"] == result["findings"] and len(summary["gaps"]) == 2
    assert summary_text.count("\n") == 1 and "counts_by_stream" not in summary  # compact; per producer: Parquet
    assert result["files"] == {name: str(tmp_path / "report" / file) for name, file in
                               [("findings", "findings.parquet"), ("producers", "producers.parquet"),
                                ("summary", "summary.json")]}
    assert all(Path(path).is_file() for path in result["files"].values())
    assert result["transactions"]["open"] == 1 and result["transactions"]["open_not_hanging"] == 1
    assert result["hanging_transactions"] == 0  # the one open transaction is recent
    assert main(["audit", str(out), "--json", "--now-ms", str(2**62)]) == 0  # ... until much later
    assert json.loads(capsys.readouterr().out)["hanging_transactions"] == 1


def _printed_table(text: str, header: list[str]) -> list[list[str]]:
    """The rows of the table printed under ``header`` (up to the next blank line), split into cells."""
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if line.split() == header)
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_cli_audit_prints_the_findings_table(tmp_path, capsys, small_dataset, small_table, spark):
    path, truth = small_dataset
    assert main(["audit", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"audited {truth['batches']:,} batches in 6 (topic, partition) streams" in text
    counts = {name: int(count.replace(",", "")) for name, count in _printed_table(text, ["finding", "count"])}
    assert counts == {f.label: truth["findings"].get(f.label, 0) for f in Finding if f is not Finding.NONE}
    # The details are the in-process report's, row for row.
    expected = AuditReport.from_results([replay_table(small_table)], order_by="seq_no", seconds=1.0)
    for title, table, columns in [
        ("sequence gaps:", expected.gaps(), ["topic", "partition", "producer_id", "producer_epoch", "missing_first",
                                             "missing_last", "seq_no"]),
        ("hanging transactions (idle more than 900,000 ms, --hanging-after-ms):", expected.hanging_transactions(),
         ["topic", "partition", "producer_id", "first_offset", "idle_ms"]),
    ]:
        assert table.num_rows == 2
        section = text[text.index(f"\n{title}\n") + len(title) + 2:]
        assert _printed_table(section, columns) == [
            [f"{row[c]:,}" if c == "idle_ms" else str(row[c]) for c in columns] for row in table.to_pylist()]
    txns = expected.partitions.to_pydict()
    assert (f"transactions: {sum(txns['committed_txns']):,} committed, {sum(txns['aborted_txns']):,} aborted "
            f"({sum(txns['aborted_records']):,} records a read_committed consumer skips), "
            f"{expected.open_txns.num_rows:,} still open") in text


def test_cli_demo_matches_its_ground_truth(capsys, spark):
    assert main(["demo", "--batches", "20000", "--producers", "20", "--partitions", "4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["matches_ground_truth"] and not result["missed"] and not result["unexpected"]
    assert result["findings"] == result["planted"]
    # Every finding the kernel reports is planted, or said not to occur in this data.
    assert set(result["planted"]) | set(result["not_planted"]) == {f.label for f in Finding if f is not Finding.NONE}
    assert list(result["not_planted"]) == ["offset_overflow"]
    assert result["not_planted"]["offset_overflow"].startswith("not planted, cannot occur in this data: ")
    txns = result["transactions"]
    assert txns["open"] == txns["hanging"] + txns["open_not_hanging"] and txns["open_not_hanging"] == 1
    assert txns["hanging"] == result["planted"]["hanging_transaction"]
    assert 1 <= result["lso_held_partitions"] <= txns["open"]
    assert result["kept"] is None and result["removed"] and not Path(result["removed"]).exists()


def test_cli_demo_prints_report_and_comparison(capsys, spark, tmp_path):
    kept = tmp_path / "demo"
    assert main(["demo", "--batches", "20000", "--producers", "20", "--partitions", "4", "--seed", "5",
                 "--dir", str(kept)]) == 0
    text = capsys.readouterr().out
    assert "against the ground truth:" in text and "MISMATCH" not in text
    assert "every planted anomaly found at its batch, nothing else" in text
    compared = {row[0]: row[1:] for row in _printed_table(text, ["finding", "planted", "found"])}
    for name in ("invalid_txn_state", "invalid_record", "hanging_transaction"):
        assert compared[name] == ["3", "3", "ok"], name
    assert "\noffset_overflow: not planted, cannot occur in this data: produce attempts carry no offsets" in text
    # The open transactions reconcile; the held partitions are named.
    assert re.search(r"\d+ still open: \d+ hanging, 1 not hanging\n", text), text
    assert "\nopen but not hanging (idle at most 900,000 ms, --hanging-after-ms):\n" in text
    assert re.search(r"\nlast stable offset held back by an open transaction in \d+ of 8 partitions:\n"
                     r"topic +partition +last_stable_offset +log_end_offset +producer_id +hanging\n", text), text
    # Where the dataset and report are kept.
    assert text.rstrip().endswith(f"kept in {kept}: dataset/ (truth.json, data/*.parquet), report/ "
                                  "(findings.parquet, producers.parquet, summary.json)")
    assert (kept / "dataset" / "truth.json").is_file() and any((kept / "dataset" / "data").glob("*.parquet"))
    assert sorted(p.name for p in (kept / "report").iterdir()) == [
        "findings.parquet", "producers.parquet", "summary.json"]


def test_cli_audit_of_a_missing_path_fails_clearly(capsys, spark):
    assert main(["audit", "/nonexistent/idemcore"]) == 2
    assert "no such file or directory: /nonexistent/idemcore" in capsys.readouterr().err
