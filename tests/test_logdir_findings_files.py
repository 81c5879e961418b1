"""Findings files that locate (issue 30, item 4): ``idemcore audit LOGDIR --out DIR`` writes each finding's
segment and byte position into ``findings.parquet``, and ``dump-log`` of that segment shows the batch there; a
follow's ``findings-<round>.parquet`` has the same columns. End to end through the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from idemcore.audit.follow import follow, read_findings
from idemcore.audit.logdir import PLACE_FINDING_COLUMNS, audit_log_dir
from idemcore.audit.replayer import findings_schema

ROOT = Path(__file__).resolve().parent.parent
KEYS = [("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")]


def _run(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run([sys.executable, "-m", "idemcore.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> tuple[Path, dict, Path]:
    """(generated dataset, its truth, the audit's --out), segments small enough to roll several times."""
    base = tmp_path_factory.mktemp("located")
    _run("generate", str(base / "ds"), "--format", "kafka", "--topics", "2", "--partitions", "2", "--producers",
         "12", "--batches", "6000", "--seed", "5", "--segment-bytes", str(96 << 10), "-q")
    # Run from the dataset's directory with a relative path: `segment` is relative to the audited directory either
    # way, `file` is the path as read.
    _run("audit", "logs", "--out", str(base / "report"), "-q", cwd=base / "ds")
    truth = json.loads((base / "ds" / "truth.json").read_text())
    return base / "ds", truth, base / "report"


def _batches(paths: list[Path]) -> dict[tuple[str, int], dict]:
    """Every batch ``dump-log --json`` prints of ``paths``, by (file, position)."""
    lines = _run("dump-log", "--json", *map(str, paths)).splitlines()
    rows = [json.loads(line) for line in lines]
    return {(row["file"], row["position"]): row for row in rows if row["type"] == "batch"}


def test_each_row_of_findings_parquet_names_the_batch_dump_log_prints_there(audited):
    dataset, truth, report = audited
    findings = pq.read_table(report / "findings.parquet")
    assert findings.num_rows >= 10
    # The Parquet audit's columns first, unchanged, then where each batch lies.
    assert findings.schema.names == [*findings_schema("base_offset").names, *PLACE_FINDING_COLUMNS]
    rows = findings.to_pylist()
    logs = dataset / "logs"
    segments = sorted({row["segment"] for row in rows})
    assert len(segments) > 1 and any(not name.endswith("/00000000000000000000.log") for name in segments)
    for row in rows:
        assert row["file"] == str(Path("logs") / row["segment"])  # as read, relative to where the audit ran
        assert (logs / row["segment"]).is_file()
    printed = _batches([logs / name for name in segments])
    for row in rows:
        batch = printed[(str(logs / row["segment"]), row["position"])]
        assert (batch["baseOffset"], batch["producerId"], batch["producerEpoch"], batch["baseSequence"],
                batch["lastSequence"], batch["isTransactional"], batch["isControl"]) == \
            (row["base_offset"], row["producer_id"], row["producer_epoch"], row["base_sequence"],
             row["last_sequence"], row["is_transactional"], row["is_control"])
    # Exactly the planted batches, where the generator wrote them (truth.json's file is relative to the dataset;
    # a hanging transaction is no batch's finding).
    found = {(f"logs/{row['segment']}", row["position"]): row["finding"] for row in rows}
    planted = {(p["file"], p["position"]): p["finding"] for p in truth["planted"]
               if p["finding"] != "hanging_transaction"}
    assert found == planted
    # summary.json's first located findings agree with the file.
    summary = json.loads((report / "summary.json").read_text())
    first = summary["located_findings"]
    assert [(r["base_offset"], r["position"]) for r in first] == [(r["base_offset"], r["position"])
                                                                  for r in rows[:len(first)]]


def test_a_follow_writes_the_same_columns_into_each_rounds_file(audited, tmp_path):
    dataset, _, report = audited
    one_shot = pq.read_table(report / "findings.parquet")
    follow(dataset / "logs", tmp_path / "out", tmp_path / "ckpt", rounds=1, fsync=False)
    written = read_findings(tmp_path / "out")
    assert written.schema.names == one_shot.schema.names
    places = [*(name for name, _ in KEYS), "segment", "position"]
    assert written.select(places).sort_by(KEYS).equals(one_shot.select(places).sort_by(KEYS))
    assert {Path(f).name for f in written.column("file").to_pylist()} == \
        {Path(f).name for f in one_shot.column("file").to_pylist()}


def test_a_partition_directory_audited_alone_names_segments_inside_its_log_directory(audited):
    dataset, _, _ = audited
    partition = dataset / "logs" / "topic-000-0"
    report = audit_log_dir(partition, use_transaction_log=False)
    assert report.findings.num_rows
    assert set(report.findings.column("segment").to_pylist()) <= {f"topic-000-0/{p.name}"
                                                                  for p in partition.glob("*.log")}
    assert report.findings.column("position").equals(report.located_findings.column("position"))
