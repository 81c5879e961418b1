"""audit_log_dir_spark: Kafka log directories audited with Spark (issue 11, item 6) give the in-process report.

Two Spark jobs in all (the session-scoped ``spark`` fixture): the planted directories plus a damaged copy, over
three tasks and over one. Planning, the worker function, its rows and the merge are tested without Spark: the
worker function is a plain closure, run here over Arrow batches as a Python worker would run it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from idemcore.audit import logdir
from idemcore.audit.logdir import LogDirReport, LogTaskResult, audit_log_dir, merge_log_tasks
from idemcore.audit.spark import audit_log_dir_spark
from idemcore.audit.spark.logdir_job import (
    RESULT_SCHEMA,
    _audit_tasks,
    partition_bytes,
    plan_partitions,
)
from idemcore.audit.spark.task_rows import raise_task_errors as _raise_errors
from idemcore.record.kafka_files import PartitionFiles, SegmentFiles, list_log_dir

from .test_logdir import HOUR, T0, PartitionWriter, build_log_dir

pytestmark = pytest.mark.filterwarnings(r"ignore:.* is deprecated\. Use files\(\) instead:DeprecationWarning")
#: Between the open transactions' idle time within their own partition (2 hours) and within the whole input
#: (10 hours, the "late" partition): hanging only if judged after the merge.
HANGING_AFTER_MS = 3 * HOUR


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> list[Path]:
    """The planted log directory of test_logdir, and a damaged copy under other topic names: a flipped byte and a
    torn tail in ``payments``, an ``.index`` entry off by one in ``orders.eu-west-1-0``, the ``.txnindex`` of the
    ABORT lost, and a partition written 10 hours later."""
    base = tmp_path_factory.mktemp("logdir-spark")
    planted = build_log_dir(base / "planted").root
    built = build_log_dir(base / "build")
    damaged = base / "damaged"
    damaged.mkdir()
    for child in built.root.iterdir():
        child.rename(damaged / f"damaged.{child.name}")

    def moved(path: Path) -> Path:
        relative = path.relative_to(built.root)
        return damaged / f"damaged.{relative.parts[0]}" / Path(*relative.parts[1:])

    payments = built.partitions["payments"]
    middle, last = payments.written[4], payments.written[-1]
    flipped = moved(middle.file)
    data = bytearray(flipped.read_bytes())
    data[middle.position + 75] ^= 0x01
    flipped.write_bytes(bytes(data))
    torn = moved(last.file)
    torn.write_bytes(torn.read_bytes()[:last.position + 20])
    orders0 = built.partitions["orders0"]
    index = moved(orders0.file(orders0.segments[0].base_offset, ".index"))
    relative, position = orders0.segments[0].index[0]
    index.write_bytes(struct.pack(">ii", relative, position + 1) + index.read_bytes()[8:])
    orders1 = built.partitions["orders1"]
    moved(orders1.file(orders1.segments[1].base_offset, ".txnindex")).unlink()
    late = PartitionWriter(damaged, "late", 0)
    late.data(42, 0, 0, 1, timestamp=T0 + 10 * HOUR)
    late.close()
    shutil.rmtree(built.root)
    return [planted, damaged]


@pytest.fixture(scope="module")
def expected(dirs) -> LogDirReport:
    return audit_log_dir(dirs, hanging_after_ms=HANGING_AFTER_MS)


def assert_same_report(got: LogDirReport, want: LogDirReport) -> None:
    """Every field but ``seconds`` equal (tables by value and schema), and the summary built from them."""
    assert type(got) is LogDirReport
    for field in dataclasses.fields(LogDirReport):
        if field.name == "seconds":
            continue
        mine, theirs = getattr(got, field.name), getattr(want, field.name)
        if isinstance(theirs, pa.Table):
            assert mine.equals(theirs), f"{field.name}:\n{mine.to_pylist()}\n!=\n{theirs.to_pylist()}"
        else:
            assert mine == theirs, field.name
    ours, theirs = got.summary(), want.summary()
    for timing in ("seconds", "batches_per_s"):
        ours.pop(timing), theirs.pop(timing)
    assert ours == theirs


def test_the_reference_report_has_something_in_every_part(expected):
    """The report the Spark audit must equal: findings in both copies, problems of both rounds (the files, then the
    .txnindex cross-check, whose problem comes after a later partition's file problems), open transactions
    hanging only by the newest batch of the whole input."""
    topics = set(expected.located_findings.column("topic").to_pylist())
    assert topics == {"orders.eu-west-1", "damaged.orders.eu-west-1", "damaged.payments"}
    problems = [(problem.path.parent.name, problem.kind) for problem in expected.problems]
    assert problems[0] == ("damaged.orders.eu-west-1-0", "index_mismatch")
    assert {("damaged.payments-0", "crc_mismatch"), ("damaged.payments-0", "torn_tail")} <= set(problems[1:-1])
    assert problems[-1] == ("damaged.orders.eu-west-1-1", "txnindex_missing")  # listed before damaged.payments-0
    txns = expected.located_open_txns.to_pylist()
    assert [(t["topic"], t["hanging"], t["idle_ms"] > 9 * HOUR) for t in txns] == [
        ("damaged.orders.eu-west-1", True, True), ("orders.eu-west-1", True, True)]
    assert all(t["file"] is not None and t["position"] is not None for t in txns)


# --- Planning (no Spark) --------------------------------------------------------------------------------------------

def fake_partition(topic: str, partition: int) -> PartitionFiles:
    return PartitionFiles(topic, partition, Path(f"/nowhere/{topic}-{partition}"),
                          (SegmentFiles(0, Path(f"/nowhere/{topic}-{partition}/{0:020d}.log")),))


def test_the_plan_puts_the_largest_partition_first_onto_the_lightest_task():
    sizes = {"a": 5, "b": 10, "c": 4, "d": 8, "e": 9, "f": 7, "g": 6}  # listing order is not size order
    partitions = [fake_partition(topic, 0) for topic in sizes]
    plans = plan_partitions(partitions, 3, size=lambda files: sizes[files.topic])
    # 10, 9, 8 open the three tasks; 7 joins 8, 6 joins 9, 5 joins 10; 4 finds three tasks of 15: the first.
    assert [[files.topic for files in plan.partitions] for plan in plans] == [["a", "b", "c"], ["e", "g"],
                                                                              ["d", "f"]]
    assert [plan.bytes for plan in plans] == [19, 15, 15]
    owned = sorted(id(files) for plan in plans for files in plan.partitions)
    assert owned == sorted(map(id, partitions))  # each partition once, whole: the listing's own object


def test_the_plan_has_no_empty_task_and_refuses_fewer_than_one():
    partitions = [fake_partition("t", k) for k in range(3)]
    plans = plan_partitions(partitions, 8, size=lambda files: 0)  # empty partitions: spread all the same
    assert [plan.partitions for plan in plans] == [(partitions[0],), (partitions[1],), (partitions[2],)]
    plans = plan_partitions([*partitions, fake_partition("u", 0)], 2, size=lambda files: 0)
    assert [len(plan.partitions) for plan in plans] == [2, 2]
    assert plan_partitions([], 4) == []
    assert [plan.partitions for plan in plan_partitions(partitions, 1, size=lambda files: 1)] == [tuple(partitions)]
    with pytest.raises(ValueError, match="tasks must be at least 1"):
        plan_partitions(partitions, 0)


def test_a_partition_s_bytes_are_its_segments_and_every_partition_is_in_one_task(dirs, tmp_path):
    root = tmp_path / "sizes"
    (root / "t-0").mkdir(parents=True)
    for offset, size in ((0, 1000), (7, 3000)):
        with open(root / "t-0" / f"{offset:020d}.log", "wb") as file:
            file.truncate(size)  # sparse: only the size is read
        (root / "t-0" / f"{offset:020d}.index").write_bytes(bytes(800))  # indexes do not count
    assert partition_bytes(list_log_dir(root).partitions[0]) == 4000
    listing = list_log_dir(dirs)
    for tasks in range(1, 9):
        plans = plan_partitions(listing.partitions, tasks)
        owned = [files for plan in plans for files in plan.partitions]
        assert sorted(owned, key=listing.partitions.index) == list(listing.partitions)  # each once, whole
        assert [plan.bytes for plan in plans] == [sum(map(partition_bytes, plan.partitions)) for plan in plans]
        assert all(list(plan.partitions) == sorted(plan.partitions, key=listing.partitions.index) for plan in plans)


# --- The worker function and the merge (no Spark) -------------------------------------------------------------------

def run_worker(plans, tasks: list[int] | None = None) -> list[dict]:
    """The Spark task function run here, over one Arrow batch of task numbers: its rows, as the driver gets them."""
    run = _audit_tasks(plans, os.getcwd(), None, True)
    numbers = pa.record_batch({"id": pa.array(range(len(plans)) if tasks is None else tasks, pa.int64())})
    batches = list(run(iter([numbers])))
    assert all(batch.schema.names == [name.split()[0] for name in RESULT_SCHEMA.split(", ")] for batch in batches)
    return [row for batch in batches for row in batch.to_pylist()]


@pytest.mark.parametrize("tasks", [2, 4, 7])
def test_the_worker_rows_merge_into_the_in_process_report(dirs, expected, tasks):
    listing = list_log_dir(dirs)
    plans = plan_partitions(listing.partitions, tasks)
    rows = run_worker(plans)
    assert len(rows) == len(plans) == tasks and not any(row["error"] for row in rows)
    results = [LogTaskResult.from_row(row) for row in rows]
    assert sum(result.result.batches for result in results) == expected.batches
    got = merge_log_tasks(results[::-1], listing, source=logdir.source_label(dirs), started=0.0,
                          hanging_after_ms=HANGING_AFTER_MS)  # the order rows come back in does not matter
    assert_same_report(got, expected)


def test_a_worker_s_file_error_comes_back_as_one_line_and_is_raised_as_such(dirs, tmp_path):
    root = tmp_path / "logs"
    shutil.copytree(dirs[0], root)
    listing = list_log_dir(root)
    plans = plan_partitions(listing.partitions, 2)
    victim = plans[1].partitions[0].segments[0].log
    victim.unlink()  # gone between the listing and the task
    rows = run_worker(plans)
    assert rows[0]["error"] is None
    assert rows[1]["error"].startswith("FileNotFoundError: ") and "\n" not in rows[1]["error"]
    assert str(victim) in rows[1]["error"]
    empty = LogTaskResult.from_row(rows[1])
    assert empty.result.batches == 0 and empty.problems.num_rows == 0
    with pytest.raises(FileNotFoundError, match=str(victim.name)):
        _raise_errors(rows)


def test_an_empty_log_directory_starts_no_spark_and_gives_the_in_process_report(tmp_path):
    (tmp_path / "logs").mkdir()
    got = audit_log_dir_spark(tmp_path / "logs", spark=object())  # any use of the session would fail
    assert_same_report(got, audit_log_dir(tmp_path / "logs"))
    with pytest.raises(ValueError, match="tasks must be at least 1"):
        audit_log_dir_spark(tmp_path / "logs", spark=object(), tasks=0)


# --- With Spark: two jobs --------------------------------------------------------------------------------------------

def test_spark_over_three_tasks_equals_the_in_process_audit_and_the_driver_reads_no_segment(spark, dirs, expected,
                                                                                           monkeypatch):
    listing = list_log_dir(dirs)
    plans = plan_partitions(listing.partitions, 3)
    assert len(plans) == 3
    # A task holding an open transaction's partition but not the late partition: its own newest batch would
    # leave the transaction idle 2 hours (not hanging); the merge judges it against the late batch.
    assert any({files.name for files in plan.partitions} & {"orders.eu-west-1-1", "damaged.orders.eu-west-1-1"}
               and "damaged.late-0" not in {files.name for files in plan.partitions} for plan in plans)

    def no_reads(*args, **kwargs):
        raise AssertionError("the driver read a segment or an index")

    for name in ("scan_segment", "read_offset_index", "read_time_index", "read_txn_index"):
        monkeypatch.setattr(logdir, name, no_reads)  # in the driver only: the workers import their own
    got = audit_log_dir_spark(dirs, spark=spark, tasks=3, hanging_after_ms=HANGING_AFTER_MS)
    assert_same_report(got, expected)


def test_spark_in_one_task_on_relative_paths_names_the_files_as_given(spark, dirs, monkeypatch):
    # The workers run in the JVM's working directory (this repository), not the driver's (the directories'
    # parent): relative paths must reach them made absolute, and come back as given.
    monkeypatch.chdir(dirs[0].parent)
    relative = [Path(path.name) for path in dirs]
    want = audit_log_dir(relative, hanging_after_ms=HANGING_AFTER_MS)
    named = [*want.located_findings.column("file").to_pylist(), *(str(p.path) for p in want.problems)]
    assert named and not any(Path(name).is_absolute() for name in named)
    got = audit_log_dir_spark(relative, spark=spark, tasks=1, hanging_after_ms=HANGING_AFTER_MS)
    assert_same_report(got, want)


def test_the_audit_command_with_spark_reports_what_the_in_process_audit_reports(spark, dirs, capsys):
    from idemcore.cli import main

    planted = dirs[0]
    assert main(["audit", str(planted), "--json", "-q"]) == 0
    in_process = json.loads(capsys.readouterr().out)
    # --master local[2] is the running session's: the command reuses it rather than starting one.
    assert main(["audit", str(planted), "--spark", "--master", "local[2]", "--tasks", "2", "--json", "-q"]) == 0
    with_spark = json.loads(capsys.readouterr().out)
    for key in ("batches", "findings", "transactions", "lso_held_partitions", "hanging_transactions"):
        assert with_spark[key] == in_process[key], key
    assert in_process["findings"] and in_process["batches"] > 0
