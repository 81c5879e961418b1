"""A flipped byte in a Parquet page: every file idemcore writes carries a CRC per page, and every reader of an
audit's input verifies it, so the byte is an error naming the file, never an audit of wrong values with exit 0
(before, one such byte turned 3 planted sequence gaps into 147)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from idemcore.audit.follow import follow
from idemcore.audit.spark.plan import TaskPlan, read_task
from idemcore.cli import main
from idemcore.record.parquet_files import footer_written
from idemcore.synth.dataset import generate

ROOT = Path(__file__).resolve().parent.parent


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


def same_values(got: pa.Table, want: pa.Table) -> bool:
    """The same columns and values (a footer flip may change only a type: int16 read as int32, a string as
    bytes; the audit's schema reconciliation casts or refuses those)."""
    if got.column_names != want.column_names or got.num_rows != want.num_rows:
        return False
    try:
        return got.cast(want.schema, safe=False).equals(want)
    except pa.ArrowException:  # a type whose values do not cast back: other values
        return False


def refused_or_harmless(raw: bytes, positions: list[int], corrupt: Path, want: pa.Table) -> int:
    """Flip each position in turn and read the file as a path-mode task does: each must be refused in one line
    naming the file, or read as the values written. Returns how many were refused."""
    plan = TaskPlan([(str(corrupt), list(range(pq.ParquetFile(pa.BufferReader(raw)).num_row_groups)))])
    refused = 0
    for position in positions:
        corrupt.write_bytes(flipped(raw, position))
        try:
            got = read_task(plan)
        except (OSError, ValueError) as exc:
            assert str(exc).startswith(f"cannot read {corrupt}: ") and "\n" not in str(exc), (position, exc)
            refused += 1
        else:
            assert same_values(got, want), f"the flip at byte {position} read as other values"
    return refused


def test_a_flipped_byte_in_a_generated_files_pages_is_refused_or_harmless(dataset, tmp_path):
    # Every page header's first bytes (what no CRC covers: a dictionary page's value count, say) and bytes
    # spread over every column's pages.
    path = data_files(dataset)[0]
    raw, want = path.read_bytes(), pq.read_table(path)
    positions = set()
    for start, stop in chunk_ranges(path).values():
        positions |= set(range(start, min(stop, start + 24))) | set(range(start, stop, max(1, (stop - start) // 12)))
    assert refused_or_harmless(raw, sorted(positions), tmp_path / path.name, want) > 100


def test_a_flipped_byte_in_the_footer_is_refused_or_harmless(dataset, tmp_path):
    # No CRC covers the footer: its row counts (a flipped bit made readers stop early: rows missing, exit 0), the
    # column names (is_transactional renamed: filled with False) are checked against the rest of the footer.
    path = data_files(dataset)[0]
    raw, want = path.read_bytes(), pq.read_table(path)
    footer = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    assert refused_or_harmless(raw, list(range(footer, len(raw))), tmp_path / path.name, want) > 500


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
    with pytest.raises(OSError, match=r"cannot read .*part-1\.parquet: .*CRC checksum verification failed"):
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


def test_the_follow_waits_for_an_unfinished_file_but_stops_at_a_whole_one_it_cannot_read(dataset, tmp_path):
    # A writer writes the footer, its length and PAR1 last: a file without them is waited for; a file with them
    # whose footer does not parse is corrupt and will not get better, so the follow names it.
    source = tmp_path / "in"
    source.mkdir()
    raw = data_files(dataset)[0].read_bytes()
    assert footer_written(data_files(dataset)[0])
    (source / "part-0.parquet").write_bytes(raw[: len(raw) - 9])  # all but the end of the footer
    assert not footer_written(source / "part-0.parquet")
    (waiting,) = follow(source, tmp_path / "out", tmp_path / "ckpt", rounds=1)
    assert waiting.batches == 0 and len(waiting.waiting) == 1 and "\n" not in waiting.waiting[0]
    end = len(raw) - 8
    (source / "part-0.parquet").write_bytes(raw[: end - 100] + bytes(100) + raw[end:])  # the footer zeroed
    with pytest.raises(ValueError, match=r"cannot read .*part-0\.parquet: "):
        follow(source, tmp_path / "out", tmp_path / "ckpt", rounds=1)


def test_the_cli_spark_follow_fails_in_one_line(dataset, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    path = data_files(dataset)[0]
    shutil.copy(path, source / "a.parquet")  # (a readable first file: the query starts)
    (source / "b.parquet").write_bytes(silent_flip(data_files(dataset)[1]))
    result = subprocess.run([sys.executable, "-m", "idemcore.cli", "audit", "--follow", str(source), "--engine",
                             "spark", "--master", "local[1]", "--out", str(tmp_path / "out"), "-q"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = result.stderr.splitlines()
    assert line.startswith("idemcore: error: the streaming query failed: ") and "b.parquet" in line
    assert line.endswith("CRC checksum verification failed")


def test_a_dataframe_of_the_callers_own_session_gets_its_crcs_checked(spark, dataset, tmp_path):
    # A session idemcore did not start checks no page CRC: validate(df) and audit(df) turn the check on.
    from idemcore.audit.spark import validate
    from idemcore.audit.spark.session import VERIFY_PAGE_CRCS

    source = tmp_path / "in"
    source.mkdir()
    (source / "f.parquet").write_bytes(silent_flip(data_files(dataset)[0]))
    spark.conf.set(VERIFY_PAGE_CRCS, "false")  # as a session of the caller's own has it
    try:
        frame = spark.read.parquet(str(source)).filter("partition >= 0")  # (not a plain scan: Spark reads it)
        assert frame.count() > 0  # unchecked: read
        verdicts = validate(frame)
        assert spark.conf.get(VERIFY_PAGE_CRCS) == "true"
        with pytest.raises(Exception, match="CRC checksum verification failed"):
            verdicts.count()
    finally:
        spark.conf.unset(VERIFY_PAGE_CRCS)
