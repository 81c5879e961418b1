"""A flipped byte in a Parquet page: every file idemcore writes carries a CRC per page, and every reader of an
audit's input verifies it, so the byte is an error naming the file, never an audit of wrong values with exit 0
(before, one such byte turned 3 planted sequence gaps into 147)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from idemcore.audit.follow import follow
from idemcore.audit.spark.plan import TaskPlan, read_task
from idemcore.cli import main
from idemcore.synth.dataset import generate


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("checksums") / "ds"
    generate(out, topics=1, partitions=4, producers=40, batches=6000, seed=3, partitions_per_file=2,
             anomalies={"sequence_gap": 3}, progress=False)
    return out


def data_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.parquet"))


def chunk_ranges(path: Path) -> dict[str, tuple[int, int]]:
    """Each column chunk's bytes (its pages, headers included) in the file's first row group."""
    group = pq.ParquetFile(path).metadata.row_group(0)
    ranges = {}
    for j in range(group.num_columns):
        column = group.column(j)
        start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
        ranges[column.path_in_schema] = (start, start + column.total_compressed_size)
    return ranges


def flipped(raw: bytes, position: int) -> bytes:
    changed = bytearray(raw)
    changed[position] ^= 0x10
    return bytes(changed)


def silent_flip(path: Path, column: str = "base_sequence") -> bytes:
    """The file with one byte of ``column``'s pages flipped where a reader that checks no CRC reads other values
    without an error (the dangerous byte)."""
    raw, want = path.read_bytes(), pq.read_table(path)
    start, stop = chunk_ranges(path)[column]
    probe = path.with_name(".probe")
    for position in range(stop - 1, start, -7):
        probe.write_bytes(flipped(raw, position))
        try:
            got = pq.ParquetFile(probe, page_checksum_verification=False).read()
        except OSError:
            continue
        if not got.equals(want):
            probe.unlink()
            return flipped(raw, position)
    raise AssertionError("no silent flip found")  # (the file would then not show what the test is about)


def test_a_flipped_byte_anywhere_in_a_generated_files_pages_is_refused_or_harmless(dataset, tmp_path):
    path = data_files(dataset)[0]
    raw, want = path.read_bytes(), pq.read_table(path)
    corrupt = tmp_path / path.name
    plan = TaskPlan([(str(corrupt), [0])])
    refused = 0
    for column, (start, stop) in chunk_ranges(path).items():
        for position in range(start, stop, max(1, (stop - start) // 12)):
            corrupt.write_bytes(flipped(raw, position))
            try:
                got = read_task(plan)
            except (OSError, ValueError) as exc:
                assert f"cannot read {corrupt}" in str(exc) and "\n" not in str(exc)
                refused += 1
            else:  # a byte no value depends on (a page header's statistics): the rows as written
                assert got.equals(want), f"flip at {position} in {column} read as other values"
    assert refused > 50


def test_the_spark_audit_of_a_flipped_byte_fails_in_one_line_naming_the_file(spark, dataset, tmp_path, capsys):
    source = tmp_path / "ds"
    shutil.copytree(dataset, source)
    path = data_files(source)[1]
    assert main(["audit", str(source), "--json", "-q"]) == 0  # (the copy as generated: audited)
    capsys.readouterr()
    path.write_bytes(silent_flip(path))
    assert main(["audit", str(source), "--json", "-q"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"idemcore: error: cannot read {path}: ") and "CRC checksum verification failed" in line


def test_a_followed_file_with_a_flipped_byte_fails_naming_it_rather_than_waiting(dataset, tmp_path):
    # Its footer is written, so the file is whole: the follow stops with the file's name (exit 2 from the CLI),
    # where it used to wait, saying only that the file was incomplete, for a file that would never change.
    source = tmp_path / "in"
    source.mkdir()
    first, second = data_files(dataset)[:2]
    shutil.copy(first, source / "part-0.parquet")
    (source / "part-1.parquet").write_bytes(silent_flip(second))
    with pytest.raises(ValueError, match=r"cannot read .*part-1\.parquet: .*CRC checksum verification failed"):
        follow(source, tmp_path / "out", tmp_path / "ckpt", rounds=1)


def test_the_spark_follow_fails_in_one_line_naming_the_file(spark, dataset, tmp_path):
    # `audit --follow --engine spark` reads with Spark's own reader, which checks no CRC unless the session says
    # so; the CLI then gives the query's failure as one line (java_causes), not a Java stack trace.
    from idemcore.audit.spark import follow_stream
    from idemcore.audit.spark.session import java_causes

    source = tmp_path / "in"
    source.mkdir()
    (source / "f.parquet").write_bytes(silent_flip(data_files(dataset)[0]))
    query = follow_stream(spark, source, tmp_path / "out", tmp_path / "ckpt", trigger={"availableNow": True})
    with pytest.raises(Exception, match="CRC checksum verification failed"):
        query.awaitTermination(120)
    reason = java_causes(query.exception())
    assert "\n" not in reason and f"{source / 'f.parquet'}" in reason
    assert reason.endswith("could not verify page integrity, CRC checksum verification failed")
