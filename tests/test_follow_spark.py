"""The continuous audit with Spark Structured Streaming (issue 15, item 2): ``follow_stream`` and ``idemcore
audit --follow --engine spark``. A Parquet directory grows in rounds; the findings written equal a one-shot
audit of the final data (the same findings, none twice), across a restart on the checkpoint and a crash between
a micro-batch's findings and its commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from idemcore.audit.follow import findings_files, read_findings
from idemcore.audit.replayer import replay_table
from idemcore.audit.report import AuditReport
from idemcore.audit.spark.follow_stream import findings_state_function
from idemcore.synth.dataset import generate

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[list[tuple[str, pa.Table]], pa.Table]:
    """A generated dataset's files, each as a table, and all its rows (anomalies of every per-batch kind)."""
    out = tmp_path_factory.mktemp("follow-spark") / "ds"
    generate(out, topics=2, partitions=3, producers=16, batches=4000, seed=11, partitions_per_file=3,
             progress=False)
    files = [(path.stem, pq.read_table(path)) for path in sorted((out / "data").glob("*.parquet"))]
    whole = pa.concat_tables([table for _, table in files], promote_options="default")
    whole = whole.cast(whole.schema.set(0, pa.field("topic", pa.string())))
    return files, whole


def add_round(directory: Path, files: list[tuple[str, pa.Table]], whole: pa.Table, k: int,
              age_days: float = 0) -> None:
    """Round ``k`` of each file: its rows in the k-th third of arrival order (seq_no), written under a hidden
    name and renamed, as a writer should (``age_days``: with a modification time that old, as a copy keeping
    the original's times)."""
    directory.mkdir(parents=True, exist_ok=True)
    cuts = np.quantile(whole.column("seq_no").to_numpy(), np.linspace(0, 1, ROUNDS + 1)[1:-1]).astype(np.int64)
    bounds = [np.iinfo(np.int64).min, *cuts.tolist(), np.iinfo(np.int64).max]
    for stem, table in files:
        seq = table.column("seq_no").to_numpy()
        part = table.filter(pa.array((seq >= bounds[k]) & (seq < bounds[k + 1])))
        hidden = directory / f".{stem}-{k}.parquet.tmp"
        pq.write_table(part, hidden)
        if age_days:
            then = time.time() - age_days * 86400
            os.utime(hidden, (then, then))
        os.replace(hidden, directory / f"{stem}-{k}.parquet")


def same_findings(written: pa.Table, expected: pa.Table) -> None:
    keys = [("topic", "ascending"), ("partition", "ascending"), ("seq_no", "ascending")]
    got = written.select(expected.column_names).sort_by(keys).to_pylist()
    want = expected.sort_by(keys).to_pylist()
    assert len(got) == len(want)
    assert got == want


def test_rounds_with_a_restart_and_a_crash_before_a_commit_equal_a_one_shot_audit(spark, dataset, tmp_path):
    from idemcore.audit.spark import follow_stream

    files, whole = dataset
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    add_round(source, files, whole, 0)
    seen: list[int] = []
    query = follow_stream(spark, source, out, checkpoint, trigger={"processingTime": "100 milliseconds"},
                          on_batch=lambda batch_id, table: seen.append(batch_id))
    try:
        query.processAllAvailable()
        add_round(source, files, whole, 1, age_days=30)  # copied keeping old times: still read
        query.processAllAvailable()
        with pytest.raises(ValueError, match="running query of this process"):
            follow_stream(spark, source, out, checkpoint)
    finally:
        query.stop()
    assert query.exception() is None and seen == sorted(set(seen)) and len(seen) >= 2  # files may split rounds
    # A crash after the last batch wrote its findings and before its commit landed: Spark runs it again.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert last == seen[-1]
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    ran = len(seen)
    add_round(source, files, whole, 2)
    again = follow_stream(spark, source, out, checkpoint, trigger={"availableNow": True},
                          on_batch=lambda batch_id, table: seen.append(batch_id))
    again.awaitTermination(120)
    assert again.exception() is None
    assert seen[ran:] == [last, last + 1]  # the uncommitted batch again (same files, same state), then round 3
    expected = AuditReport.from_results([replay_table(whole)], order_by="seq_no", seconds=0.0).findings
    assert expected.num_rows > 50 and len(set(expected.column("finding").to_pylist())) >= 5
    same_findings(read_findings(out), expected)
    written = [k for k, _ in findings_files(out)]
    assert set(written) <= set(seen)
    # Nothing new: a query reads nothing and writes nothing.
    idle = follow_stream(spark, source, out, checkpoint, trigger={"availableNow": True})
    idle.awaitTermination(120)
    assert [k for k, _ in findings_files(out)] == written
    # Findings of an earlier follow without its checkpoint are refused, as in process.
    with pytest.raises(FileExistsError, match="earlier follow"):
        follow_stream(spark, source, out, tmp_path / "other")


def test_a_row_going_back_in_a_stream_fails_naming_it(dataset):
    _, whole = dataset
    frame = whole.to_pandas()
    one = frame[(frame.topic == frame.topic.iloc[0]) & (frame.partition == frame.partition.iloc[0])]

    class State:
        exists, hasTimedOut, value = False, False, None

        @property
        def get(self):
            return self.value

        def update(self, value):
            self.exists, self.value = True, value

    function, state = findings_state_function("seq_no"), State()
    list(function(("t", 0), iter([one.iloc[100:]]), state))
    assert state.value[1] == int(one.seq_no.max())
    with pytest.raises(ValueError, match=r"before .* already replayed"):
        list(function(("t", 0), iter([one.iloc[:100]]), state))
    assert isinstance(one, pd.DataFrame)


def test_a_kafka_log_directory_is_followed_in_process_only(spark, tmp_path):
    from idemcore.audit.spark import follow_stream

    partition = tmp_path / "logs" / "t-0"
    partition.mkdir(parents=True)
    (partition / f"{0:020d}.log").write_bytes(b"")
    with pytest.raises(ValueError, match="followed in process only"):
        follow_stream(spark, tmp_path / "logs", tmp_path / "out")


def test_cli_engine_spark_reports_findings_and_stops_cleanly_on_ctrl_c(dataset, tmp_path):
    files, whole = dataset
    source, out = tmp_path / "in", tmp_path / "out"
    add_round(source, files, whole, 0)
    process = subprocess.Popen([sys.executable, "-m", "idemcore.cli", "audit", "--follow", str(source), "--engine",
                                "spark", "--master", "local[1]", "--out", str(out), "--interval-ms", "200"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if "batches read" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(180), lines
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
    assert any(line.startswith("stopped after") for line in lines), lines
    assert any(": duplicate:" in line for line in lines), lines
    first = whole.filter(pa.compute.is_in(whole.column("seq_no"), pq.read_table(
        source, columns=["seq_no"]).column("seq_no")))
    expected = AuditReport.from_results([replay_table(first)], order_by="seq_no", seconds=0.0).findings
    same_findings(read_findings(out), expected)


def test_cli_engine_spark_refuses_a_log_directory_and_goes_with_follow(tmp_path):
    partition = tmp_path / "logs" / "t-0"
    partition.mkdir(parents=True)
    (partition / f"{0:020d}.log").write_bytes(b"")
    parquet = tmp_path / "in"
    parquet.mkdir()
    for args, message in (([str(tmp_path / "logs"), "--out", str(tmp_path / "out")], "followed in process only"),
                          ([str(parquet), "--no-follow"], "goes with --follow")):
        follow = ["--follow"] if "--no-follow" not in args else []
        command = [sys.executable, "-m", "idemcore.cli", "audit", *follow, *(a for a in args if a != "--no-follow"),
                   "--engine", "spark"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
