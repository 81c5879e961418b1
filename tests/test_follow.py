"""The continuous audit (issue 15, item 2; in-process, no Spark): ``idemcore.audit.follow`` and
``idemcore audit --follow``. A source grows between rounds; after the last round the findings written equal a
one-shot audit of the final data (the same findings, none twice), across restarts from the checkpoint, a SIGKILL
and a Ctrl-C."""

from __future__ import annotations

import functools
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from idemcore.audit.checkpoint import CheckpointError
from idemcore.audit.follow import CHECKPOINT_FILE, Follower, findings_files, follow, read_findings
from idemcore.audit.logdir import audit_log_dir
from idemcore.audit.replayer import replay_table
from idemcore.audit.report import AuditReport
from idemcore.broker import Broker
from idemcore.net.messages import ProduceRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.synth.dataset import generate

ROOT = Path(__file__).resolve().parent.parent
CHUNKS = 6


@pytest.fixture(scope="module")
def attempts(tmp_path_factory) -> pa.Table:
    """Produce attempts with every kind of anomaly planted, in arrival order (seq_no)."""
    out = tmp_path_factory.mktemp("follow-dataset") / "ds"
    truth = generate(out, topics=2, partitions=4, producers=60, batches=30_000, seed=5, partitions_per_file=4,
                     progress=False)
    assert len(truth["findings"]) >= 8  # something of every kind to find
    table = pa.concat_tables([pq.read_table(path) for path in sorted((out / "data").glob("*.parquet"))],
                             promote_options="default")
    table = table.cast(table.schema.set(0, pa.field("topic", pa.string())))
    return table.sort_by("seq_no")


def chunks(table: pa.Table, n: int = CHUNKS) -> list[pa.Table]:
    bounds = np.linspace(0, table.num_rows, n + 1).astype(int)
    return [table.slice(start, stop - start) for start, stop in itertools.pairwise(bounds)]


def add_file(directory: Path, k: int, table: pa.Table) -> None:
    """As a writer should: under a hidden name, then renamed."""
    directory.mkdir(parents=True, exist_ok=True)
    hidden = directory / f".part-{k:05d}.parquet.tmp"
    pq.write_table(table, hidden)
    os.replace(hidden, directory / f"part-{k:05d}.parquet")


def one_shot(table: pa.Table) -> AuditReport:
    return AuditReport.from_results([replay_table(table)], order_by="seq_no", seconds=0.0)


def same_findings(written: pa.Table, expected: pa.Table) -> None:
    names = expected.column_names
    order = "seq_no" if "seq_no" in names else "base_offset"
    keys = [("topic", "ascending"), ("partition", "ascending"), (order, "ascending")]
    got = written.select(names).sort_by(keys).to_pylist()
    want = expected.sort_by(keys).to_pylist()
    assert len(got) == len(want)
    assert got == want


def test_parquet_files_in_rounds_equal_a_one_shot_audit_and_an_incomplete_file_waits(attempts, tmp_path):
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    parts = chunks(attempts)
    results = []
    for k, part in enumerate(parts):
        if k == 2:  # a file written in place, not finished yet: no footer, waited for (and the files after it)
            data = (tmp_path / "whole.parquet")
            pq.write_table(part, data)
            raw = data.read_bytes()
            (source / f"part-{k:05d}.parquet").write_bytes(raw[: len(raw) // 2])
            add_file(source, k + 1, parts[k + 1])
            (waiting,) = follow(source, out, checkpoint, rounds=1)
            assert waiting.batches == 0 and waiting.read == [] and len(waiting.waiting) == 1
            (source / f"part-{k:05d}.parquet").write_bytes(raw)
        elif k != 3:
            add_file(source, k, part)
        results += follow(source, out, checkpoint, rounds=1)
    assert sum(r.batches for r in results) == attempts.num_rows
    expected = one_shot(attempts)
    same_findings(read_findings(out), expected.findings)
    assert expected.findings.num_rows > 100
    last = results[-1].report
    assert last.open_txns.select(["topic", "partition", "producer_id", "first_offset"]).to_pylist() == \
        expected.open_txns.select(["topic", "partition", "producer_id", "first_offset"]).to_pylist()
    assert last.hanging_transactions().num_rows == expected.hanging_transactions().num_rows > 0
    assert last.partitions.drop_columns(["last_stable_offset"]).equals(
        expected.partitions.drop_columns(["last_stable_offset"]))
    # Nothing new: a round reads nothing and writes nothing.
    (idle,) = follow(source, out, checkpoint, rounds=1)
    assert idle.batches == 0 and idle.findings.num_rows == 0 and idle.findings_file is None


def test_restart_from_the_checkpoint_and_a_crash_between_findings_and_checkpoint(attempts, tmp_path):
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    parts = chunks(attempts)
    for k in range(3):
        add_file(source, k, parts[k])
        follow(source, out, checkpoint, rounds=1)
    # A crash after round 4 wrote its findings and before its checkpoint landed: the old checkpoint is back.
    saved = (checkpoint / CHECKPOINT_FILE).read_bytes()
    add_file(source, 3, parts[3])
    (fourth,) = follow(source, out, checkpoint, rounds=1)
    assert fourth.findings_file is not None and fourth.findings_file.exists()
    (checkpoint / CHECKPOINT_FILE).write_bytes(saved)
    follower = Follower(source, out, checkpoint)  # a new process, resuming
    assert follower.resumed and follower.round == 3 and not fourth.findings_file.exists()
    again = follower.poll()
    assert again.round == 4 and again.batches == fourth.batches
    for k in (4, 5):
        add_file(source, k, parts[k])
        Follower(source, out, checkpoint).poll()
    same_findings(read_findings(out), one_shot(attempts).findings)
    assert [k for k, _ in findings_files(out)] == sorted({k for k, _ in findings_files(out)})


def test_out_of_an_earlier_follow_without_its_checkpoint_is_refused(attempts, tmp_path):
    source, out = tmp_path / "in", tmp_path / "out"
    add_file(source, 0, chunks(attempts)[0])
    follow(source, out, tmp_path / "ckpt", rounds=1)
    with pytest.raises(FileExistsError):
        Follower(source, out, tmp_path / "other")
    with pytest.raises(ValueError, match="inside"):
        Follower(source, source / "out")


def test_a_checkpoint_given_with_another_out_is_refused_and_deletes_nothing(attempts, tmp_path):
    # Resuming removes the findings files of rounds after the checkpoint's (their checkpoint never landed): in
    # the checkpoint's own out only. Given another follow's out, it used to delete that follow's findings.
    source, mine, theirs = tmp_path / "in", tmp_path / "mine", tmp_path / "theirs"
    for k, part in enumerate(chunks(attempts)[:3]):
        add_file(source, k, part)
        follow(source, theirs, tmp_path / "their-ckpt", rounds=1)
    written = findings_files(theirs)
    assert written and written[-1][0] > 1
    follow(source, mine, tmp_path / "my-ckpt", rounds=1)  # my checkpoint: round 1
    with pytest.raises(ValueError, match=r"checkpoint of a follow writing its findings to .*mine, not .*theirs"):
        Follower(source, theirs, tmp_path / "my-ckpt")
    assert findings_files(theirs) == written


def test_two_followers_cannot_share_a_checkpoint(attempts, tmp_path):
    # Each writing its own out, they would overwrite each other's checkpoint (a lock is per process: the first
    # follower is the CLI's).
    source = tmp_path / "in"
    add_file(source, 0, chunks(attempts)[0])
    process = _cli(str(source), "--out", str(tmp_path / "out1"), "--checkpoint", str(tmp_path / "ckpt"),
                   "--interval-ms", "20")
    with _stopped_by_ctrl_c(process) as output:
        output.wait_for("batches (")
        with pytest.raises(ValueError, match=r"ckpt is in use by another `idemcore audit --follow` process"):
            Follower(source, tmp_path / "out2", tmp_path / "ckpt")
        assert not (tmp_path / "out2").exists() or not findings_files(tmp_path / "out2")


def _produce(broker: Broker, topic: str, partition: int, pid: int, epoch: int, seq: int, at: int,
             transactional: bool = False) -> None:
    batch = RecordBatch(topic, partition, [b"v%d" % seq] * 2, None, pid, epoch, seq, at, transactional)
    (answer,) = broker.handle(ProduceRequest((batch,))).responses
    assert answer.error_code == ErrorCode.NONE, answer


def test_kafka_log_directory_grown_by_a_broker(tmp_path):
    root, out, checkpoint = tmp_path / "logs", tmp_path / "out", tmp_path / "ckpt"
    at = 1_700_000_000_000
    sequences: dict[tuple[str, int, int], int] = {}
    results = []
    with Broker({"t": 3, "u": 1}, data_dir=root, clock=lambda: at, segment_bytes=2048, fsync=False) as broker:
        coordinator = broker.txn_coordinator
        init = coordinator.init_producer_id("tx", 60_000)
        assert coordinator.add_partitions_to_txn("tx", init.producer_id, 0, [("t", 1)]) == {("t", 1): ErrorCode.NONE}
        for round_ in range(5):
            for n in range(40):
                topic, partition = ("t", n % 3) if n % 4 else ("u", 0)
                pid = 1000 + n % 5
                key = (topic, partition, pid)
                _produce(broker, topic, partition, pid, 0, sequences.get(key, 0), at + n)
                sequences[key] = sequences.get(key, 0) + 2  # two records a batch
            if round_ == 1:  # a transaction opened and never ended
                _produce(broker, "t", 1, init.producer_id, init.producer_epoch, 0, at, transactional=True)
            at += 1000
            results += follow(root, out, checkpoint, rounds=1)
            if round_ == 2:  # a restart in the middle
                assert Follower(root, out, checkpoint).resumed
    final = audit_log_dir(root, use_transaction_log=False)
    assert sum(r.batches for r in results) == final.batches
    assert len(list((root / "t-0").glob("*.log"))) > 1  # segments rolled while followed
    last = results[-1].report
    assert last.open_txns.num_rows == final.open_txns.num_rows == 1
    assert last.partitions.select(["topic", "partition", "batches", "log_end_offset"]).equals(
        final.partitions.select(["topic", "partition", "batches", "log_end_offset"]))
    written = read_findings(out) if findings_files(out) else final.findings.slice(0, 0)
    same_findings(written, final.findings)


def test_kafka_log_directory_growing_byte_by_byte_chunks_with_torn_tails(tmp_path):
    """A generated log directory (planted anomalies) copied in pieces cut anywhere, mid-batch included: a torn
    tail is waited for, never reported; the findings (with file positions) equal the one-shot audit's."""
    generate(tmp_path / "ds", format="kafka", topics=1, partitions=2, producers=12, batches=3000, seed=4,
             segment_bytes=16 << 10, progress=False)
    origin, copy, out = tmp_path / "ds" / "logs", tmp_path / "copy", tmp_path / "out"
    files = sorted(p for p in origin.rglob("*.log"))
    rng = np.random.default_rng(1)
    pieces = []  # (file, bytes so far), growing in file order per partition
    for path in files:
        size = path.stat().st_size
        cuts = [*sorted(set(rng.integers(1, size, 3).tolist())), size]
        pieces += [(path, cut) for cut in cuts]
    results = []
    for k, (path, cut) in enumerate(pieces):
        target = copy / path.relative_to(origin)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes()[:cut])
        if k % 2 or k == len(pieces) - 1:
            results += follow(copy, out, tmp_path / "ckpt", rounds=1)
    assert any(r.waiting for r in results)
    assert not any(p.kind == "torn_tail" for r in results for p in r.problems)
    final = audit_log_dir(copy, use_transaction_log=False)
    assert sum(r.batches for r in results) == final.batches
    written = read_findings(out)
    same_findings(written, final.findings)
    assert final.findings.num_rows > 5
    located = final.located_findings.select(["topic", "partition", "base_offset", "file", "position"])
    assert written.select(located.column_names).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")]).equals(located)


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "idemcore.cli", "audit", "--follow", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class _Output:
    """A follow process's stdout, read line by line on a thread of its own; waits on what it has said."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._process = process
        self._said = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            with self._said:
                self.lines.append(line)
                self._said.notify_all()

    def count(self, text: str) -> int:
        with self._said:
            return sum(text in line for line in self.lines)

    def wait_for(self, text: str, times: int = 1, timeout: float = 20.0) -> list[str]:
        """The lines so far, once ``text`` is in ``times`` of them."""
        with self._said:
            assert self._said.wait_for(lambda: sum(text in line for line in self.lines) >= times, timeout), \
                f"not {times} x {text!r} in {self.lines}"
            return self.lines

    def ended(self, timeout: float = 20.0) -> list[str]:
        """Every line, once the process closed its stdout."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the follow's stdout still open after {timeout} s"
        return self.lines


@contextmanager
def _stopped_by_ctrl_c(process: subprocess.Popen[str]) -> Iterator[_Output]:
    """Run the block with the process's output, then Ctrl-C the follow, which must exit 0 (killed if anything fails
    on the way); after the block the output holds every line the process wrote."""
    output = _Output(process)
    try:
        yield output
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
    output.ended()


def test_a_sigkilled_follow_resumes_without_a_finding_twice_or_missed(attempts, tmp_path):
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    parts = chunks(attempts, 12)
    add_file(source, 0, parts[0])
    process = _cli(str(source), "--out", str(out), "--checkpoint", str(checkpoint), "--interval-ms", "10")
    try:
        output = _Output(process)
        output.wait_for("batches (")
        for k in range(1, 8):  # files arrive while it runs, each read by a round of its own but the last: the kill
            add_file(source, k, parts[k])  # comes while that one is being read, or before, or just after
            if k < 7:
                output.wait_for("batches (", times=k + 1)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    assert Follower(source, None, checkpoint).round > 1  # killed after some rounds, with files still to read
    for k in range(8, 12):
        add_file(source, k, parts[k])
    follow(source, out, checkpoint, rounds=1)
    same_findings(read_findings(out), one_shot(attempts).findings)


def test_ctrl_c_stops_the_cli_cleanly_with_a_consistent_checkpoint(attempts, tmp_path):
    source, out = tmp_path / "in", tmp_path / "out"
    parts = chunks(attempts, 4)
    for k in range(3):
        add_file(source, k, parts[k])
    process = _cli(str(source), "--out", str(out), "--interval-ms", "20")
    with _stopped_by_ctrl_c(process) as output:
        output.wait_for("batches (")
        # A second follower on the same directory, while the first runs, is refused (it would double findings).
        with pytest.raises(ValueError, match="in use by another `idemcore audit --follow` process"):
            Follower(source, out, out / "_checkpoint")
    lines = output.lines
    assert any(line.startswith("stopped after") for line in lines), lines
    assert any(": duplicate:" in line for line in lines)
    add_file(source, 3, parts[3])
    follower = Follower(source, out, out / "_checkpoint")  # the default checkpoint with --out
    assert follower.resumed
    follower.poll()
    same_findings(read_findings(out), one_shot(attempts).findings)
    shutil.rmtree(source)


def test_a_round_that_fails_half_way_leaves_the_checkpoint_to_resume_from(attempts, tmp_path):
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    parts = chunks(attempts)
    add_file(source, 0, parts[0])
    follower = Follower(source, out, checkpoint)
    follower.poll()
    add_file(source, 1, parts[1])
    add_file(source, 2, parts[2].drop_columns(["producer_epoch"]))  # not batch metadata: the round fails on it
    with pytest.raises(ValueError, match=r"part-00002\.parquet"):
        follower.poll()
    with pytest.raises(RuntimeError, match="new Follower"):
        follower.poll()
    add_file(source, 2, parts[2])  # put right
    for k in range(3, CHUNKS):
        add_file(source, k, parts[k])
    Follower(source, out, checkpoint).poll()
    same_findings(read_findings(out), one_shot(attempts).findings)


def test_a_damaged_or_truncated_checkpoint_is_refused_whole_with_one_line_naming_it(attempts, tmp_path):
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    add_file(source, 0, chunks(attempts)[0])
    follow(source, out, checkpoint, rounds=1)
    path = checkpoint / CHECKPOINT_FILE
    saved = path.read_bytes()
    flipped = bytearray(saved)
    flipped[len(saved) // 2] ^= 0xFF
    for damaged in (saved[:len(saved) // 2], saved[:10], bytes(flipped), b"", b"\x80\x05}q\x00."):
        path.write_bytes(damaged)
        with pytest.raises(CheckpointError) as caught:
            Follower(source, out, checkpoint)
        message = str(caught.value)
        assert str(path) in message and "\n" not in message
    path.write_bytes(saved.replace(b'"version": 2', b'"version": 9'))  # another version (its digest then fails too)
    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        Follower(source, out, checkpoint)
    path.write_bytes(saved)
    assert Follower(source, out, checkpoint).round == 1


def test_another_checkpoint_version_is_refused(tmp_path):
    from idemcore.audit import checkpoint

    data = checkpoint.encode({"round": 1}, {"a": np.arange(3)}, 1)
    with pytest.raises(CheckpointError, match=r"x\.ckpt: checkpoint version 1, expected 2"):
        checkpoint.decode(data, 2, tmp_path / "x.ckpt")


def test_follow_does_not_use_pickle():
    for name in ("follow.py", "checkpoint.py"):
        source = (ROOT / "idemcore" / "audit" / name).read_text()
        assert not re.search(r"^\s*(import|from)\s+(_?c?pickle|dill|marshal|shelve)\b", source, re.M), name
        assert "pickle.load" not in source and "allow_pickle=True" not in source, name
    code = ("import sys; import idemcore.audit.follow; "
            "sys.exit('pickle' in sys.modules and 'idemcore.audit.follow' in sys.modules "
            "and any(getattr(m, 'pickle', None) is sys.modules['pickle'] for m in "
            "(sys.modules['idemcore.audit.follow'], sys.modules['idemcore.audit.checkpoint'])))")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_the_cli_says_which_incomplete_file_it_waits_for(attempts, tmp_path, monkeypatch, capsys):
    # Files are read in name order: an empty or unfinished .parquet ahead of the rest holds them all back, and
    # the follow says so (once), rather than idling in silence. In process, with the rounds counted by the test
    # (the CLI's follow given rounds=6): round 1 says it, rounds 2-6 are idle and must not say it again.
    import idemcore.audit.follow as follow_module
    from idemcore.cli import main

    source = tmp_path / "in"
    add_file(source, 1, chunks(attempts)[0])
    (source / "part-00000.parquet").write_bytes(b"")  # a writer's file not written yet
    monkeypatch.setattr(follow_module, "follow", functools.partial(follow_module.follow, rounds=6))
    assert main(["audit", "--follow", str(source), "--interval-ms", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = [line for line in lines if "waiting for an incomplete file" in line]
    assert len(said) == 1 and said[0].startswith("round 1: ") and "part-00000.parquet" in said[0], lines
    assert not any("batches (" in line for line in lines)
    (final,) = [line.rstrip("\n") for line in lines if line.startswith("stopped after")]
    assert re.fullmatch(r"stopped after 6 round\(s\) in [\d.]+ s: 0 batches, 0 finding\(s\)(; .*)?", final), final
