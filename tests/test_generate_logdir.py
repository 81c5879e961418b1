"""``generate --format kafka`` (issue 11, item 7): the synthetic attempts as the Kafka log directory their leaders
would have written, checked by readers that are not the writer's: the audit (exactly the ground truth, by offset),
kafka-python (every batch, CRCs, offsets), idemcore's own decoder and encoder (bytes-exact batches), independent
``struct`` readings of the index files, ``dump-log`` and the command line end to end."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.memory_records import MemoryRecords

from idemcore.audit.logdir import audit_log_dir
from idemcore.findings import Finding
from idemcore.record.v2 import decode_batch, encode_batch, encode_end_txn_marker
from idemcore.synth.dataset import generate, read_truth
from idemcore.synth.ground_truth import check_against_truth
from idemcore.synth.kafka_log import (
    INDEX_INTERVAL_BYTES,
    KAFKA_ANOMALIES,
    KAFKA_CANNOT_OCCUR,
    KAFKA_DEFAULT_MIX,
    VALUE_BYTES,
    kafka_mix,
    leader_writes,
)
from idemcore.synth.streams import ANOMALIES, inject_anomalies, synthetic_stream

pytestmark = pytest.mark.filterwarnings(r"ignore:.* is deprecated\. Use files\(\) instead:DeprecationWarning")
PACKAGE_PARENT = Path(__file__).resolve().parent.parent
SMALL = {"topics": 2, "partitions": 3, "producers": 12, "batches": 6000, "seed": 3, "progress": False,
         "format": "kafka", "segment_bytes": 64 << 10}
HANGING = Finding.HANGING_TRANSACTION.label


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("kafka-dataset") / "ds"
    truth = generate(out, **SMALL)
    return out, truth


def batches_of(path: Path) -> list[tuple[int, KafkaPythonBatch, bytes]]:
    """(position, kafka-python's batch, raw bytes) of every batch of a segment, as kafka-python walks it."""
    data = path.read_bytes()
    records = MemoryRecords(data)
    out = []
    position = 0
    while records.has_next():
        batch = records.next_batch()
        size = 12 + struct.unpack_from(">i", data, position + 8)[0]
        out.append((position, batch, data[position:position + size]))
        position += size
    assert position == len(data), f"{path}: kafka-python stopped at {position} of {len(data)} bytes"
    return out


def partition_dirs(out: Path) -> list[Path]:
    return sorted(path for path in (out / "logs").iterdir() if path.is_dir())


def segments_of(partition: Path) -> list[Path]:
    return sorted(partition.glob("*.log"))


# --- What is planted, and what cannot be -----------------------------------------------------------------------------

def test_every_finding_is_either_planted_in_a_log_or_said_why_it_cannot_be():
    labels = {f.label for f in Finding if f is not Finding.NONE}
    assert set(KAFKA_ANOMALIES) | set(KAFKA_CANNOT_OCCUR) == labels
    assert not set(KAFKA_ANOMALIES) & set(KAFKA_CANNOT_OCCUR)
    assert set(KAFKA_ANOMALIES) <= set(ANOMALIES) and set(KAFKA_DEFAULT_MIX) == set(KAFKA_ANOMALIES)
    assert all(count > 0 for count in KAFKA_DEFAULT_MIX.values())


@pytest.mark.parametrize("kind", ["invalid_record", "invalid_txn_state"])
def test_a_kind_no_leader_writes_is_refused_with_the_reason(tmp_path, kind):
    with pytest.raises(ValueError, match=rf"{kind} cannot be planted in a Kafka log: .{{40}}"):
        generate(tmp_path / "ds", **{**SMALL, "anomalies": {kind: 1}})
    assert not (tmp_path / "ds").exists() and list(tmp_path.iterdir()) == []  # refused before anything is written
    assert kafka_mix({kind: 0, "fenced": 2}) == {**dict.fromkeys(ANOMALIES, 0), "fenced": 2}


def test_the_log_holds_exactly_the_attempts_a_leader_appends_in_arrival_order(dataset):
    """The same attempts, built again from the parameters: per partition, the batches kafka-python reads are the
    attempts the leader wrote (no in-window retry, nothing of a producer behind an anomaly it accepted), in
    arrival order, with offsets contiguous from 0 across the segments."""
    out, truth = dataset
    params = truth["parameters"]
    columns = synthetic_stream(params["batches"], n_producers=params["producers"],
                               n_partitions=params["topics"] * params["partitions"],
                               retry_fraction=params["retry_fraction"], seed=params["seed"])
    columns, _, planted = inject_anomalies(columns, params["anomalies"], duration_ms=params["duration_ms"],
                                           seed=params["seed"])
    written, not_written = leader_writes(columns, planted)
    assert not_written == truth["not_written"] and not_written["duplicate"] > 0
    assert not_written["refused_after_anomaly"] > 0
    assert int(written.sum()) == truth["batches"] == truth["produce_attempts"] - sum(not_written.values())
    for stream in range(params["topics"] * params["partitions"]):
        topic, partition = divmod(stream, params["partitions"])
        rows = np.flatnonzero(written & (columns["partition"] == stream))
        expected = [(int(columns["producer_id"][r]), int(columns["producer_epoch"][r]),
                     -1 if columns["is_control"][r] else int(columns["base_sequence"][r]),
                     int(columns["record_count"][r]), bool(columns["is_transactional"][r]),
                     bool(columns["is_control"][r]), int(columns["max_timestamp"][r])) for r in rows]
        got = []
        next_offset = 0
        for segment in segments_of(out / "logs" / f"topic-{topic:03d}-{partition}"):
            batches = batches_of(segment)
            if batches:
                assert int(segment.stem) == batches[0][1].base_offset
            for _, batch, _ in batches:
                assert batch.base_offset == next_offset
                next_offset = batch.last_offset + 1
                got.append((batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.records_count,
                            batch.is_transactional, batch.is_control_batch, batch.max_timestamp))
        assert got == expected, (topic, partition)


# --- The audit against the truth -------------------------------------------------------------------------------------

def test_the_audit_of_the_log_directory_is_exactly_the_truth(dataset):
    out, truth = dataset
    report = audit_log_dir(out / "logs")
    assert report.problems == ()
    assert report.batches == truth["batches"]
    assert report.finding_counts() == truth["findings"] == KAFKA_DEFAULT_MIX
    located = report.located_findings.to_pylist()
    assert [(r["topic"], r["partition"], r["base_offset"], r["producer_id"], r["finding"],
             os.path.relpath(r["file"], out), r["position"]) for r in located] == [
        (p["topic"], p["partition"], p["base_offset"], p["producer_id"], p["finding"], p["file"], p["position"])
        for p in truth["planted"] if p["finding"] != HANGING]
    hanging = report.hanging_transactions().to_pylist()
    assert sorted((h["topic"], h["partition"], h["producer_id"], h["first_offset"]) for h in hanging) == sorted(
        (p["topic"], p["partition"], p["producer_id"], p["base_offset"]) for p in truth["planted"]
        if p["finding"] == HANGING)
    txns = report.transactions()
    assert txns["aborted"] > 0 and txns["committed"] > 0 and txns["open_not_hanging"] > 0  # markers were written
    assert check_against_truth(report, read_truth(out)).ok


@pytest.mark.parametrize(("seed", "segment_bytes"), [(1, 2048), (5, 1 << 30), (8, 10_000)])
def test_other_seeds_and_segment_sizes_audit_to_their_truth(tmp_path, seed, segment_bytes):
    truth = generate(tmp_path / "ds", **{**SMALL, "seed": seed, "segment_bytes": segment_bytes,
                                         "anomalies": {"sequence_gap": 2, "fenced": 1, "hanging_transaction": 2,
                                                       "duplicate_beyond_window": 1}})
    report = audit_log_dir(tmp_path / "ds" / "logs")
    assert report.problems == () and report.finding_counts() == truth["findings"]
    assert report.located_findings.column("base_offset").to_pylist() == [
        p["base_offset"] for p in truth["planted"] if p["finding"] != HANGING]
    assert check_against_truth(report, truth).ok
    sizes = [path.stat().st_size for path in (tmp_path / "ds" / "logs").glob("*/*.log")]
    assert max(sizes) <= segment_bytes and (len(sizes) > 6) == (segment_bytes < 1 << 20)


# --- Read by codecs that are not the writer --------------------------------------------------------------------------

def test_kafka_python_reads_every_batch_with_a_valid_crc_and_idemcore_encodes_the_same_bytes(dataset):
    out, truth = dataset
    count = markers = 0
    for partition in partition_dirs(out):
        for segment in segments_of(partition):
            for position, batch, raw in batches_of(segment):
                assert batch.validate_crc(), (segment, position)
                assert batch.leader_epoch == 0 and batch.compression_type == 0 and batch.magic == 2
                header, records = decode_batch(raw)  # idemcore's decoder, CRC checked
                assert (header.base_offset, header.last_offset, header.record_count) == (
                    batch.base_offset, batch.last_offset, batch.records_count)
                if batch.is_control_batch:
                    markers += 1
                    assert raw == encode_end_txn_marker(
                        int.from_bytes(records[0].key[2:4], "big"), int.from_bytes(records[0].value[2:6], "big"),
                        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                        timestamp=batch.max_timestamp, base_offset=batch.base_offset, partition_leader_epoch=0)
                else:
                    read = list(batch)  # kafka-python's records
                    assert [r.offset for r in read] == list(range(batch.base_offset, batch.last_offset + 1))
                    assert all(r.key is None and VALUE_BYTES[0] <= len(r.value) <= VALUE_BYTES[1] for r in read)
                    assert [r.value for r in read] == [r.value for r in records]
                    assert raw == encode_batch(records, base_offset=batch.base_offset,
                                               base_timestamp=batch.first_timestamp, producer_id=batch.producer_id,
                                               producer_epoch=batch.producer_epoch,
                                               base_sequence=batch.base_sequence,
                                               is_transactional=batch.is_transactional, partition_leader_epoch=0)
                count += 1
    assert count == truth["batches"] and markers > 0


def test_segments_roll_before_a_batch_that_would_pass_segment_bytes(dataset):
    out, truth = dataset
    limit = truth["parameters"]["segment_bytes"]
    rolled = 0
    for partition in partition_dirs(out):
        segments = segments_of(partition)
        for segment, following in itertools.pairwise(segments):
            first_next = batches_of(following)[0][2]
            assert segment.stat().st_size <= limit < segment.stat().st_size + len(first_next)
            rolled += 1
    assert rolled == truth["log"]["segments"] - len(partition_dirs(out)) > 0


def test_the_index_files_are_kafka_s(dataset):
    """Read with struct, checked against the batches kafka-python reads: an offset entry (last offset, position)
    before each batch after more than index.interval.bytes since the last, a time entry with it when the largest
    timestamp so far grew, and one at the end; a .txnindex entry per aborted transaction, in its marker's
    segment, with the last stable offset Kafka's ProducerStateManager gives it."""
    out, _ = dataset
    entries = aborted = 0
    for partition in partition_dirs(out):
        open_txns: dict[int, int] = {}
        for segment in segments_of(partition):
            base = int(segment.stem)
            index = segment.with_suffix(".index").read_bytes()
            times = segment.with_suffix(".timeindex").read_bytes()
            want_index, want_times, want_txns = [], [], []
            since, largest, largest_at = 0, -1, -1
            batches = batches_of(segment)
            for k, (position, batch, raw) in enumerate(batches):
                if batch.max_timestamp > largest:
                    largest, largest_at = batch.max_timestamp, batch.last_offset
                if since > INDEX_INTERVAL_BYTES:
                    want_index.append((batch.last_offset - base, position))
                    if not want_times or largest > want_times[-1][0]:
                        want_times.append((largest, largest_at - base))
                    since = 0
                since += len(raw)
                if batch.is_transactional and not batch.is_control_batch:
                    open_txns.setdefault(batch.producer_id, batch.base_offset)
                elif batch.is_control_batch:
                    first = open_txns.pop(batch.producer_id)
                    if next(iter(batch)).key[2:4] == b"\x00\x00":  # ABORT
                        lso = min(open_txns.values(), default=batch.base_offset + 1)
                        want_txns.append((0, batch.producer_id, first, batch.base_offset, lso))
                if k == len(batches) - 1 and (not want_times or largest > want_times[-1][0]):
                    want_times.append((largest, largest_at - base))  # on roll, and on close
            assert [struct.unpack_from(">ii", index, at) for at in range(0, len(index), 8)] == want_index
            assert [struct.unpack_from(">qi", times, at) for at in range(0, len(times), 12)] == want_times
            txn_index = segment.with_suffix(".txnindex")
            assert txn_index.exists() == bool(want_txns)
            if want_txns:
                raw_txns = txn_index.read_bytes()
                assert [struct.unpack_from(">hqqqq", raw_txns, at) for at in range(0, len(raw_txns), 34)] == want_txns
            entries += len(want_index)
            aborted += len(want_txns)
        assert (partition / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
        assert (partition / "partition.metadata").read_text().startswith("version: 0\ntopic_id: ")
    assert entries > 100 and aborted > 0


# --- The command line ------------------------------------------------------------------------------------------------

def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_PARENT)}
    return subprocess.run([sys.executable, "-m", "idemcore.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)


def test_dump_log_reads_the_segments_and_indexes(dataset):
    out, truth = dataset
    marker = next(p for p in truth["planted"] if p["finding"] == "fenced")  # a transactional producer's partition
    partition = (out / marker["file"]).parent
    segment = max(segments_of(partition), key=lambda path: path.with_suffix(".index").stat().st_size)
    result = cli("dump-log", segment, segment.with_suffix(".index"), segment.with_suffix(".timeindex"), "--json")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    batches = [row for row in rows if row["type"] == "batch"]
    assert [(b["baseOffset"], b["position"], b["isvalid"]) for b in batches] == [
        (batch.base_offset, position, True) for position, batch, _ in batches_of(segment)]
    assert [(r["offset"], r["position"]) for r in rows if r["type"] == "offset_index_entry"] == [
        (int(segment.stem) + rel, pos) for rel, pos in struct.iter_unpack(">ii", segment.with_suffix(".index")
                                                                           .read_bytes())]
    assert sum(row["type"] == "time_index_entry" for row in rows) == segment.with_suffix(".timeindex").stat(
        ).st_size // 12 > 0


def test_generate_then_audit_on_the_command_line(tmp_path):
    out = tmp_path / "ds"
    made = cli("generate", out, "--format", "kafka", "--topics", "2", "--partitions", "3", "--producers", "12",
               "--batches", "6000", "--seed", "4", "--segment-bytes", "65536", "-q")
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    assert lines[0].startswith("wrote ") and f"to {out}/logs: what the leaders appended of" in lines[0]
    assert {line.split(":")[1].strip() for line in lines if line.startswith("not planted:")} == set(KAFKA_CANNOT_OCCUR)
    truth = read_truth(out)
    audited = cli("audit", out / "logs", "--json", "-q")
    assert audited.returncode == 0 and audited.stderr == "", audited.stderr
    summary = json.loads(audited.stdout)
    assert summary["findings"] == truth["findings"] == KAFKA_DEFAULT_MIX
    assert summary["batches"] == truth["batches"] and summary["hanging_transactions"] == 3
    assert summary["order_by"] == "base_offset"
    as_json = cli("generate", out, "--format", "kafka", "--topics", "1", "--partitions", "2", "--producers", "10",
                  "--batches", "3000", "--anomalies", "fenced=1,hanging_transaction=1", "--overwrite", "--json", "-q")
    assert as_json.returncode == 0, as_json.stderr
    printed = json.loads(as_json.stdout)
    assert printed["findings"] == {"fenced": 1, "hanging_transaction": 1} == read_truth(out)["findings"]
    assert printed["format"] == "kafka" and printed["files"] == 2 and printed["segments"] >= 2
    refused = cli("generate", tmp_path / "other", "--format", "kafka", "--anomalies", "invalid_txn_state=2")
    assert refused.returncode == 2 and "invalid_txn_state cannot be planted in a Kafka log" in refused.stderr


# --- Overwrite -------------------------------------------------------------------------------------------------------

def test_overwrite_replaces_a_generated_log_directory_but_never_a_user_s_file_in_it(tmp_path):
    small = {**SMALL, "topics": 1, "partitions": 2, "producers": 10, "batches": 3000,
             "anomalies": {"hanging_transaction": 1}}
    generate(tmp_path / "ds", **small)
    generate(tmp_path / "ds", **{**small, "format": "parquet"}, overwrite=True, partitions_per_file=2)
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["data", "truth.json"]
    generate(tmp_path / "ds", **small, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["logs", "truth.json"]
    notes = tmp_path / "ds" / "logs" / "topic-000-1" / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(FileExistsError, match=r"it holds logs/topic-000-1/notes\.txt"):
        generate(tmp_path / "ds", **small, overwrite=True)
    notes.unlink()
    shutil.copytree(tmp_path / "ds" / "logs" / "topic-000-1", tmp_path / "ds" / "logs" / "topic-000-7")
    with pytest.raises(FileExistsError, match=r"it holds logs/topic-000-7"):  # not listed in truth.json
        generate(tmp_path / "ds", **small, overwrite=True)
    assert notes.parent.exists() and (tmp_path / "ds" / "logs" / "topic-000-7").exists()
