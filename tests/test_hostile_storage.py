"""A hostile user's damage to a stopped broker's log directory, then ``idemcore audit LOGDIR`` and a restart: the
audit names each damaged file and the byte where it is damaged (a warning, never a traceback), and the broker
starts on what is whole or refuses in one line naming the file.

What tests/test_fault_matrix.py (one flip in the middle of each file) and tests/test_hostile_serve.py (real
clients) cover is not repeated: these are the byte positions they do not reach (a batch's length field, ...).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from idemcore.audit import follow as follow_module
from idemcore.audit.follow import Follower
from idemcore.audit.logdir import audit_log_dir, audit_partitions
from idemcore.broker import Broker
from idemcore.client import Producer
from idemcore.errors import IdemcoreError
from idemcore.record.kafka_files import list_log_dir, scan_segment
from idemcore.record.v2 import CorruptRecordError

REPO = Path(__file__).resolve().parent.parent
#: Index entries at every batch (so the .index and .timeindex of a segment have entries to check).
SETTINGS = {"segment_bytes": 1 << 20, "index_interval_bytes": 0}


def _written(data_dir: Path) -> list[int]:
    """Topic t (one partition): three batches of an idempotent producer, closed cleanly; their offsets."""
    with Broker({"t": 1}, data_dir=data_dir, **SETTINGS) as broker:
        producer = Producer(broker)
        return [producer.send("t", b"v%d" % i, partition=0).result().offset for i in range(3)]


def _flip(path: Path, position: int, mask: int = 0x40) -> None:
    damaged = bytearray(path.read_bytes())
    damaged[position] ^= mask
    path.write_bytes(bytes(damaged))


def test_a_first_batch_length_past_the_file_is_named_by_the_audit_not_a_traceback(tmp_path):
    """The high byte of the first batch's length flipped: the segment holds no whole batch any more, while its
    .index and .timeindex still have entries. The audit checked those entries against the batches scanned by
    indexing an empty column (IndexError); it must name the torn batch at byte 0 and each index's first entry."""
    data = tmp_path / "data"
    _written(data)
    segment = data / "t-0" / "00000000000000000000.log"
    _flip(segment, 8)  # batchLength, the byte after the 8-byte base offset: 0x40 << 24 more bytes than the file
    report = audit_log_dir(data)
    named = {(problem.path.name, problem.position) for problem in report.problems}
    assert (segment.name, 0) in named
    assert ("00000000000000000000.index", 0) in named and ("00000000000000000000.timeindex", 0) in named
    done = subprocess.run([sys.executable, "-m", "idemcore.cli", "audit", str(data)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"{segment}: position 0: torn tail" in done.stdout


def test_a_flipped_byte_in_a_producer_snapshot_is_named_by_the_audit_and_the_broker_rebuilds_the_state(tmp_path):
    """The broker deletes a snapshot whose CRC fails and rebuilds from the log, as Kafka's loader does; the
    audit, which replays the log and never loads snapshots, said nothing of the damage."""
    data = tmp_path / "data"
    offsets = _written(data)
    (snapshot,) = (data / "t-0").glob("*.snapshot")
    _flip(snapshot, snapshot.stat().st_size - 3)  # in the last producer entry, which only the CRC covers
    problems = [problem for problem in audit_log_dir(data).problems if problem.path == snapshot]
    assert [(problem.position, problem.kind) for problem in problems] == [(2, "crc_mismatch")]
    with Broker({"t": 1}, data_dir=data, **SETTINGS) as broker:
        producer = Producer(broker)
        assert producer.send("t", b"after", partition=0).result().offset == offsets[-1] + 1


@pytest.mark.parametrize("topic", ["__transaction_state", "__consumer_offsets"])
def test_a_flipped_batch_length_in_an_internal_topic_is_refused_naming_the_segment(tmp_path, topic):
    """After a clean stop the loader checks a segment only past its last index entry; a coordinator then reads
    the whole partition. A batch length flipped before that tail made the read stop there as if at a torn tail
    of a fetch answer: the broker started with the transactional id (or the group's offset) silently forgotten,
    so a new producer got a new producer id and the old one's zombie was no longer fenced."""
    data = tmp_path / "data"
    with Broker({"t": 1}, data_dir=data, **SETTINGS) as broker:
        producer = Producer(broker, transactional_id="x")
        producer.init_transactions()
        for i in range(3):
            producer.begin_transaction()
            producer.send("t", b"v%d" % i, partition=0)
            producer.send_offsets_to_transaction({("t", 0): i + 1}, "g")
            producer.commit_transaction()
        producer_id = producer.idempotence.producer_id
    (segment,) = [path for path in data.glob(f"{topic}-*/*.log") if path.stat().st_size]
    _flip(segment, 8)
    with pytest.raises(CorruptRecordError) as raised:
        Broker({"t": 1}, data_dir=data, **SETTINGS).close()
    assert str(segment) in str(raised.value) and "position 0" in str(raised.value)
    _flip(segment, 8)  # restored: the same id comes back
    with Broker({"t": 1}, data_dir=data, **SETTINGS) as broker:
        again = Producer(broker, transactional_id="x")
        again.init_transactions()
        assert again.idempotence.producer_id == producer_id


@pytest.mark.parametrize("inside", ["t-0", "t-0/sub", "__consumer_offsets-0"])
def test_a_data_dir_inside_a_running_brokers_is_refused_and_makes_nothing(tmp_path, inside):
    """A second broker given a directory inside the first's (a partition directory, or the name of an internal
    topic's partition the first has not made yet) took its own lock there and wrote its files into the first's
    partition, or made ``__consumer_offsets-0`` so that the first could never make its offsets topic."""
    data = tmp_path / "data"
    with Broker({"t": 1}, data_dir=data, **SETTINGS) as first:
        Producer(first).send("t", b"before", partition=0).result()
        files = sorted(path.relative_to(data) for path in data.rglob("*"))
        nested = data / inside
        refusal = re.escape(f"{nested}: inside {data}, the data directory in use by another broker")
        with pytest.raises(IdemcoreError, match=refusal):
            Broker({"u": 1}, data_dir=nested, **SETTINGS)
        assert sorted(path.relative_to(data) for path in data.rglob("*")) == files
        assert Producer(first).send("t", b"after", partition=0).result().offset == 1


def test_a_snapshot_the_broker_deletes_between_listing_and_reading_is_skipped(tmp_path):
    """A running broker keeps only its newest snapshots: one listed by the audit of a live directory can be gone
    when it is read, which failed the whole audit with ENOENT (seen under a real producer's load)."""
    data = tmp_path / "data"
    _written(data)
    listing = list_log_dir(data)
    (snapshot,) = (data / "t-0").glob("*.snapshot")
    snapshot.unlink()  # as the broker's cleanup does, after the listing
    result = audit_partitions(listing.partitions)
    assert result.problems.num_rows == 0


@pytest.mark.parametrize("deleted", [1, 2], ids=["starts-with-a-marker", "starts-with-data"])
def test_retention_deleting_a_transactional_producers_first_segments_is_no_finding(tmp_path, deleted):
    """Retention deletes the oldest segments: the audit meets a producer in the middle of its sequences and
    accepts its first batch whatever its sequence (Kafka's rule for a producer whose records retention removed).
    When the oldest segment left began with the producer's COMMIT marker, the marker made the producer known
    with no sequence, and its next batch was reported as a gap from sequence 0."""
    data = tmp_path / "data"
    with Broker({"t": 1}, data_dir=data, segment_bytes=400, index_interval_bytes=0) as broker:
        producer = Producer(broker, transactional_id="x")
        producer.init_transactions()
        for i in range(12):  # a data batch and a COMMIT marker each: segments of 5 batches, alternately first
            producer.begin_transaction()
            producer.send("t", b"v%d" % i, partition=0)
            producer.commit_transaction()
    segments = sorted((data / "t-0").glob("*.log"))
    for segment in segments[:deleted]:
        for path in segment.parent.glob(segment.stem + ".*"):
            path.unlink()
    report = audit_log_dir(data)
    assert report.finding_counts() == {}
    assert not report.problems


def test_a_follow_whose_listed_segment_retention_deletes_goes_on_with_the_next(tmp_path, monkeypatch):
    """``audit --follow`` of a live log directory lists it each round, then reads the segments listed: retention
    deleting one in between ended the follow with ENOENT (seen under a real producer's load with a small
    retention.bytes). The segment is gone: the round reads on from the next one."""
    data = tmp_path / "data"
    with Broker({"t": 1}, data_dir=data, segment_bytes=400, index_interval_bytes=0) as broker:
        producer = Producer(broker)
        for i in range(12):
            producer.send("t", b"v%d" % i, partition=0).result()
    first, *rest = sorted((data / "t-0").glob("*.log"))
    assert rest
    real_listing = follow_module.list_log_dir

    def listed_then_deleted(path):  # the race, made certain: the listing names a segment retention then deletes
        listing = real_listing(path)
        for stale in first.parent.glob(first.stem + ".*"):
            stale.unlink()
        return listing

    monkeypatch.setattr(follow_module, "list_log_dir", listed_then_deleted)
    follower = Follower(data, checkpoint=tmp_path / "checkpoint")
    try:
        result = follower.poll()
    finally:
        follower.close()
    assert result.batches == sum(len(scan_segment(path)) for path in rest)


def test_a_follow_that_retention_outran_meets_the_producers_again_midway(tmp_path):
    """Segments written and deleted by retention between two rounds of ``audit --follow`` were never read: the
    producers' next batches were reported as sequence gaps, though nothing but retention removed anything (seen
    with a real producer and a small retention.bytes). Their producers are met again midway, as in a log whose
    start retention deleted, and the offsets never read are named."""
    data = tmp_path / "data"

    with Broker({"t": 1}, data_dir=data, segment_bytes=400, index_interval_bytes=0) as broker:
        producer = Producer(broker)
        for i in range(4):
            producer.send("t", b"a%d" % i, partition=0).result()
        follower = Follower(data, checkpoint=tmp_path / "checkpoint")
        try:
            assert follower.poll().batches == 4
            for i in range(20):
                producer.send("t", b"b%d" % i, partition=0).result()
            segments = sorted((data / "t-0").glob("*.log"))
            for segment in segments[:-2]:  # retention: all but the last two segments, the first round's included
                for path in segment.parent.glob(segment.stem + ".*"):
                    path.unlink()
            result = follower.poll()
        finally:
            follower.close()
    assert result.findings.num_rows == 0
    assert [problem.kind for problem in result.problems] == ["unread_offsets"]


def _follow_across_retention(tmp_path: Path, cut: int):
    """A transactional producer: a transaction of 4 batches read by a first round, 12 more batches in it and its
    COMMIT, then a second transaction of 6 batches and its COMMIT; before the second round, retention deletes the
    partition's oldest ``cut`` segments. The second round's result (None when fewer segments than ``cut`` + 1)."""
    data = tmp_path / f"data{cut}"
    with Broker({"t": 1}, data_dir=data, segment_bytes=400, index_interval_bytes=0) as broker:
        producer = Producer(broker, transactional_id="x")
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send("t", b"a%d" % i, partition=0).result()
        follower = Follower(data, checkpoint=tmp_path / f"checkpoint{cut}")
        try:
            assert "t-0" in follower.poll().read
            for i in range(12):
                producer.send("t", b"b%d" % i, partition=0).result()
            producer.commit_transaction()
            producer.begin_transaction()
            for i in range(6):
                producer.send("t", b"c%d" % i, partition=0).result()
            producer.commit_transaction()
            segments = sorted((data / "t-0").glob("*.log"))
            if len(segments) <= cut:
                return None
            for segment in segments[:cut]:
                for path in segment.parent.glob(segment.stem + ".*"):
                    path.unlink()
            return follower.poll()
        finally:
            follower.close()


@pytest.mark.parametrize("cut", range(1, 5))  # (the log has 5 segments)
def test_a_follow_that_retention_outran_in_an_open_transaction_reports_no_gap_and_leaves_none_open(tmp_path, cut):
    """As above, with the producer in a transaction across the offsets never read, wherever retention cut: it
    kept its state, so its next batch was reported as a sequence gap (or, when the COMMIT was its first batch
    read again, the batch after it), and a transaction whose COMMIT retention removed stayed open. The producer is
    met again midway: its transaction is counted from its next batch on, and nothing is left open."""
    result = _follow_across_retention(tmp_path, cut)
    if result is None:
        pytest.fail(f"the log has no more than {cut} segments: write more")
    assert result.findings.num_rows == 0
    assert [problem.kind for problem in result.problems] in ([], ["unread_offsets"])
    assert result.report.open_txns.num_rows == 0
    committed = [row["committed_txns"] for row in result.report.partitions.to_pylist() if row["topic"] == "t"]
    assert committed in ([1], [2])


def test_a_follow_past_a_corrupt_batch_reports_it_and_still_finds_gaps(tmp_path):
    """A batch failing its CRC at the end of a segment is reported and not replayed: the next segment then began
    past every offset replayed, and the follow took it for offsets retention removed, met the producers again
    midway and would have missed a real gap after it. Nothing was deleted: only the CRC is reported."""
    data = tmp_path / "data"
    with Broker({"t": 1}, data_dir=data, segment_bytes=400, index_interval_bytes=0) as broker:
        producer = Producer(broker)
        for i in range(8):
            producer.send("t", b"v%d" % i, partition=0).result()
    first, *rest = sorted((data / "t-0").glob("*.log"))
    assert rest
    scan = scan_segment(first)
    _flip(first, int(scan["position"][-1]) + 17)  # the CRC of the segment's last batch
    follower = Follower(data, checkpoint=tmp_path / "checkpoint")
    try:
        result = follower.poll()
    finally:
        follower.close()
    assert [problem.kind for problem in result.problems] == ["crc_mismatch"]


def test_a_follow_of_a_log_whose_start_retention_deleted_reports_no_gap(tmp_path):
    """The first round of ``audit --follow`` over a log whose oldest segment (retention) is gone and whose
    oldest left begins with a COMMIT marker: as in the one-shot audit, the marker is not replayed."""
    data = tmp_path / "data"
    with Broker({"t": 1}, data_dir=data, segment_bytes=400, index_interval_bytes=0) as broker:
        producer = Producer(broker, transactional_id="x")
        producer.init_transactions()
        for i in range(12):
            producer.begin_transaction()
            producer.send("t", b"v%d" % i, partition=0)
            producer.commit_transaction()
    oldest = sorted((data / "t-0").glob("*.log"))[0]
    for path in oldest.parent.glob(oldest.stem + ".*"):
        path.unlink()
    follower = Follower(data, checkpoint=tmp_path / "checkpoint")
    try:
        result = follower.poll()
    finally:
        follower.close()
    assert result.findings.num_rows == 0
