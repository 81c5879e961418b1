"""Fault matrix (issue 10): every file the broker keeps x delete, truncate, flip a byte, read-only, directory.

For each cell, acknowledged records are written by idempotent producers (acks=all), then the broker either
closes cleanly ("closed") or its process dies by SIGKILL ("killed"); the fault is applied to a copy of that
data directory and a broker starts on it. The outcome each cell must have is in ``MATRIX``:

* ``Error(...)``, (a) a clear error: the start raises an IdemcoreError or OSError whose message names the
  file's path; the failed start changes nothing on disk (``.lock`` aside) and releases the directory; once
  the file is restored, a broker starts with every acknowledged record.
* ``SAFE``, (b) a safe recovery: the start succeeds with every acknowledged record exactly once at its
  offset; retries of the old producers are still answered as duplicates; a new producer gets an id above
  every id in the logs and its records continue the offsets; a second broker is refused the directory
  (naming the holder); and a further restart finds all of it again.

* ``READ_ERROR``, (d) the start succeeds (after a clean shutdown Kafka's loader, and ours, does not read
  flushed segments whole) and reading the partition finds the damage (a CRC mismatch, or offsets that do not
  follow).

Never (c): a start that succeeds with an acknowledged record missing, or offsets restarting or repeating.

A file the broker starts keeping is one more ``FILES`` entry and its six ``MATRIX`` rows;
``test_every_file_the_broker_keeps_is_in_the_matrix`` fails until both are there. Partition ``t-0`` stands for
every partition: three segments (offsets 0-3 and 4-7 rolled, 8-9 active) with their indexes, the first one's
``.txnindex`` (an aborted transaction), the producer-state snapshots (the newest two of those taken at each
roll and at a clean shutdown), and ``leader-epoch-checkpoint``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from idemcore.broker import Broker
from idemcore.client import Producer
from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.net.messages import ProduceRequest, TxnMarker, WriteTxnMarkersRequest
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import CorruptRecordError

REPO = Path(__file__).resolve().parent.parent
TOPICS = {"t": 2}

#: Every file the broker keeps in its data directory, by the name the matrix uses (partition t-0 stands for
#: every partition).
FILES = {
    "segment": "t-0/00000000000000000000.log",
    "index": "t-0/00000000000000000000.index",
    "time index": "t-0/00000000000000000000.timeindex",
    "txn index": "t-0/00000000000000000000.txnindex",
    "middle segment": "t-0/00000000000000000004.log",
    "middle index": "t-0/00000000000000000004.index",
    "middle time index": "t-0/00000000000000000004.timeindex",
    "active segment": "t-0/00000000000000000008.log",
    "active index": "t-0/00000000000000000008.index",
    "active time index": "t-0/00000000000000000008.timeindex",
    "older snapshot": "t-0/00000000000000000004.snapshot",
    "snapshot": "t-0/00000000000000000008.snapshot",
    "shutdown snapshot": "t-0/00000000000000000010.snapshot",
    "leader epochs": "t-0/leader-epoch-checkpoint",
    "checkpoint": "recovery-point-offset-checkpoint",
    "clean shutdown": ".kafka_cleanshutdown",
    "id store": "producer_ids.sqlite",
    "lock": ".lock",
    "written ends": "written-log-ends",
    "id floor": "producer-id-floor",
}
#: Files that only one way of stopping leaves: Kafka snapshots the producer state at a clean shutdown, and the
#: broker keeps the newest two snapshots.
ONLY_AFTER = {"shutdown snapshot": "closed", "older snapshot": "killed", "clean shutdown": "closed"}
#: Every broker here: three segments per partition of at most 300 bytes (an aborted transaction, 150 bytes,
#: then two 72-byte batches; four; two), an index entry for every batch but the first of a segment.
SETTINGS = {"segment_bytes": 300, "index_interval_bytes": 0}
#: The producer of the aborted transaction each partition starts with (its records are never acknowledged).
TXN_PRODUCER = 900
FAULTS = ("delete", "truncate-0", "truncate-half", "flip", "read-only", "directory")
MODES = ("closed", "killed")


@dataclass(frozen=True)
class Error:
    """(a) The start fails with an IdemcoreError or OSError naming the file; ``says``: a regex the message
    must also match."""

    says: str = ""

    def __repr__(self) -> str:
        return "error"


SAFE = "safe"
#: (d) The start succeeds, and reading the partition finds the damage: a batch fails its CRC check, or (a flipped
#: base offset, outside the CRC) its offsets do not follow the batch before it. Kafka's start does not read
#: flushed segments either; its readers (and an audit of the log directory) find such damage.
READ_ERROR = "read error"

# file, fault, outcome after a clean close, outcome after the process was killed
MATRIX = [
    # A rolled segment was fsync'd before the next one started: any damage to it is from outside, whatever
    # the recovery point says. Missing, empty or cut, its offsets are gone; refuse, naming it. A rolled segment
    # is only read.
    # After a clean shutdown a start reads only each segment's tail after its last index entry (Kafka's
    # readNextOffset, CRC-checked here): a missing, emptied or cut segment is found there; a flipped byte before
    # that tail is found when the batch is read (every reader checks the CRC), as in Kafka.
    *[(file, fault, READ_ERROR if fault == "flip" else outcome, outcome) for file in ("segment", "middle segment")
      for fault, outcome in (("delete", Error("is missing")), ("truncate-0", Error("is shorter")),
                             ("truncate-half", Error("is shorter|is corrupt")), ("flip", Error("is corrupt")),
                             ("read-only", SAFE), ("directory", Error("Is a directory")))],
    # The active segment. A partition listed in the checkpoint had one (the broker creates it at start, before
    # the checkpoint): its absence is damage from outside. Starting without it would restart the partition's
    # offsets (Kafka would re-fetch it from a replica; a single broker has none).
    ("active segment", "delete", Error("is missing"), Error("is missing")),
    # An empty or cut segment is damage, not a crash's torn tail, wherever acknowledged (fsync'd) batches are
    # lost: refuse to start, never drop them silently. After a kill, the written ends (same boot) say how far
    # the log reached.
    ("active segment", "truncate-0", Error("is shorter"), Error()),
    ("active segment", "truncate-half", Error("is shorter|is corrupt"), Error()),
    # A batch failing its CRC with acknowledged batches after it: damage (as above); cutting there drops them.
    ("active segment", "flip", Error("is corrupt"), Error()),
    # The broker cannot append to it: Kafka takes a log directory it cannot write offline; here, refuse.
    ("active segment", "read-only", Error("Permission denied"), Error("Permission denied")),
    ("active segment", "directory", Error("Is a directory"), Error("Is a directory")),
    # Producer-state snapshots (at the roll to offset 4; at the clean close, offset 8): a missing or corrupt one
    # (Kafka's CorruptSnapshotException) is skipped for an older one or the log, which rebuild the same state,
    # and deleted. They are only read, and deleted by name. Something else in its place is refused.
    *[(file, fault, outcome, outcome) for file in ("snapshot", "shutdown snapshot", "older snapshot")
      for fault, outcome in (("delete", SAFE), ("truncate-0", SAFE), ("truncate-half", SAFE), ("flip", SAFE),
                             ("read-only", SAFE), ("directory", Error("is not a file")))],
    # Derived from the log (epoch 0 from its first offset): rewritten by rename when missing or different.
    *[("leader epochs", fault, SAFE, SAFE) for fault in ("delete", "truncate-0", "truncate-half", "flip",
                                                          "read-only")],
    ("leader epochs", "directory", Error("Is a directory"), Error("Is a directory")),
] + [
    # An index is a function of its segment: missing, cut or wrong, it is rebuilt (Kafka rebuilds a corrupt
    # index too), by rename, so its mode does not matter; the active one is appended to, so it must be
    # writable. A directory in its place cannot be read or replaced.
    (f"{which}{kind}", fault, outcome, outcome)
    for which, kinds in (("", ("index", "time index", "txn index")), ("middle ", ("index", "time index")),
                         ("active ", ("index", "time index")))
    for kind in kinds
    for fault, outcome in (("delete", SAFE), ("truncate-0", SAFE), ("truncate-half", SAFE), ("flip", SAFE),
                           ("read-only", Error("Permission denied") if which == "active " else SAFE),
                           ("directory", Error("Is a directory")))
] + [
    # Recovery points only protect the logs from damage; without them every log is read in full (Kafka
    # recovers every segment when its recovery-point checkpoint is missing). The logs are intact: safe.
    ("checkpoint", "delete", SAFE, SAFE),
    # Written by atomic rename, a checkpoint is never empty, cut or garbled by the broker: this is damage
    # from outside. Taking it for absent would silently drop the protection it gives; the message says to
    # remove it to start anyway.
    ("checkpoint", "truncate-0", Error("is damaged"), Error("is damaged")),
    ("checkpoint", "truncate-half", Error("is damaged"), Error("is damaged")),
    ("checkpoint", "flip", Error("is damaged"), Error("is damaged")),
    # Replaced by rename, never written in place: the file's own mode does not matter.
    ("checkpoint", "read-only", SAFE, SAFE),
    # Only its presence is read (a clean shutdown: no segment scanned); removed at start. Without it every log is
    # scanned from its recovery point, as after a crash: safe. Its content is not read: safe. Something else in
    # its place is refused, naming it.
    *[("clean shutdown", fault, SAFE, SAFE) for fault in ("delete", "truncate-0", "truncate-half", "flip",
                                                          "read-only")],
    ("clean shutdown", "directory", Error("is not a file"), Error("is not a file")),
    # Neither readable nor replaceable: refuse at once, before reading any log as if there were no recovery
    # points, and leave nothing behind (no lock held, no temporary file).
    ("checkpoint", "directory", Error(), Error()),
    # The id store lost: ids are claimed above the floor file (the last block claimed) and the highest id in
    # the logs, so none is handed out again, not even one whose producer has not written yet.
    ("id store", "delete", SAFE, SAFE),
    # SQLite opens an empty file as an empty database: the same as deleted.
    ("id store", "truncate-0", SAFE, SAFE),
    # A cut database: SQLite finds it malformed. The error must name the file (the operator may delete it:
    # ids in the logs are skipped), not be a bare sqlite3 error.
    ("id store", "truncate-half", Error(), Error()),
    # The middle of this small database is unused page space (SQLite keeps no checksums): nothing changes.
    # A flip inside the block record is test_a_flipped_byte_in_the_id_store_block_record_is_a_clear_error.
    ("id store", "flip", SAFE, SAFE),
    # The broker could never claim a block: say so at start, naming the file, not with a bare sqlite3
    # error at the first InitProducerId.
    ("id store", "read-only", Error(), Error()),
    # Not a database at all: a clear error naming it.
    ("id store", "directory", Error(), Error()),
    # The lock is flock on the directory itself; .lock only names the holder for messages. Every fault on
    # it is harmless, and a second broker is still refused with a message naming this process.
    ("lock", "delete", SAFE, SAFE),
    ("lock", "truncate-0", SAFE, SAFE),
    ("lock", "truncate-half", SAFE, SAFE),
    ("lock", "flip", SAFE, SAFE),
    ("lock", "read-only", SAFE, SAFE),
    ("lock", "directory", SAFE, SAFE),
    # The written ends only add knowledge for the boot they were written in: without them recovery falls
    # back to the recovery points, and the logs (untouched here) are read in full. Safe.
    ("written ends", "delete", SAFE, SAFE),
    # Written by rename at start and then in place slot by slot, each slot CRC'd: empty, cut or flipped is
    # damage from outside; the message says to remove it (losing only the extra protection).
    ("written ends", "truncate-0", Error("is damaged"), Error("is damaged")),
    ("written ends", "truncate-half", Error("is damaged"), Error("is damaged")),
    ("written ends", "flip", Error("is damaged"), Error("is damaged")),
    # Replaced by rename at start: the old file's mode does not matter.
    ("written ends", "read-only", SAFE, SAFE),
    ("written ends", "directory", Error("cannot be read"), Error("cannot be read")),
    # The id store still knows its blocks: the floor only adds a lower bound. Safe.
    ("id floor", "delete", SAFE, SAFE),
    # Written by rename after an fsync, never in place: empty, cut or garbled is damage from outside, and
    # taking it for absent would drop the protection it gives when the store is lost too.
    ("id floor", "truncate-0", Error("is damaged"), Error("is damaged")),
    ("id floor", "truncate-half", Error("is damaged"), Error("is damaged")),
    ("id floor", "flip", Error("is damaged"), Error("is damaged")),
    # Replaced by rename: the old file's mode does not matter.
    ("id floor", "read-only", SAFE, SAFE),
    ("id floor", "directory", Error("is damaged"), Error("is damaged")),
]

CELLS = [pytest.param(file, fault, mode, closed if mode == "closed" else killed, id=f"{mode}-{file}-{fault}")
         for file, fault, closed, killed in MATRIX for mode in MODES if ONLY_AFTER.get(file, mode) == mode]


class Acked(NamedTuple):
    """A record a producer was told is written."""

    partition: int
    offset: int
    value: bytes
    producer_id: int
    producer_epoch: int
    sequence: int


def _acknowledge(broker: Broker) -> list[Acked]:
    """An aborted transaction on each partition (a transactional batch and its ABORT marker: the .txnindex),
    then two idempotent producers (acks=all) write four records each to both partitions, one request each."""
    for partition in range(TOPICS["t"]):
        batch = RecordBatch("t", partition, [b"aborted"], None, TXN_PRODUCER, 0, 0, wall_clock_ms(), True)
        assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == 0
    marker = TxnMarker(TXN_PRODUCER, 0, False, 0, tuple(("t", p) for p in range(TOPICS["t"])))
    assert all(r.error_code == 0 for r in broker.handle(WriteTxnMarkersRequest((marker,))).markers[0].responses)
    producers = [Producer(broker), Producer(broker)]
    acked: list[Acked] = []
    for i in range(4):
        for number, producer in enumerate(producers):
            for partition in range(TOPICS["t"]):
                value = b"p%d-%d" % (number, i)
                offset = producer.send("t", value, partition=partition).result().offset
                state = producer.idempotence
                acked.append(Acked(partition, offset, value, state.producer_id, state.producer_epoch, i))
    return acked


def _die_after_acknowledging(data_dir: str) -> None:
    """In a child process: acknowledge records, print them, and die by SIGKILL (no close, no checkpoint)."""
    broker = Broker(TOPICS, data_dir=data_dir, **SETTINGS)
    acked = _acknowledge(broker)
    print(json.dumps([[*a[:2], a.value.decode(), *a[3:]] for a in acked]), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture(scope="module")
def workspace():
    """A directory every user can traverse (pytest's tmp_path is not: see _writes_denied)."""
    path = Path(tempfile.mkdtemp(prefix="idemcore-fault-matrix-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def template(workspace):
    """``template(mode)``: a data directory as a clean close or a killed process left it, with its
    acknowledged records (built once per module, copied for every cell)."""
    built: dict[str, tuple[Path, list[Acked]]] = {}

    def get(mode: str) -> tuple[Path, list[Acked]]:
        if mode not in built:
            data_dir = workspace / f"template-{mode}"
            if mode == "closed":
                with Broker(TOPICS, data_dir=data_dir, **SETTINGS) as broker:
                    acked = _acknowledge(broker)
            else:
                code = f"from tests.test_fault_matrix import _die_after_acknowledging as d; d({str(data_dir)!r})"
                child = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                       timeout=120)
                assert child.returncode == -signal.SIGKILL, child.stderr
                acked = [Acked(p, o, v.encode(), *rest) for p, o, v, *rest in json.loads(child.stdout)]
            built[mode] = data_dir, acked
        return built[mode]

    return get


# ------------------------------------------------------------ faults


def _apply(fault: str, path: Path) -> None:
    if fault == "delete":
        path.unlink()
    elif fault == "truncate-0":
        os.truncate(path, 0)
    elif fault == "truncate-half":
        os.truncate(path, path.stat().st_size // 2)
    elif fault == "flip":
        with open(path, "r+b") as file:
            middle = os.fstat(file.fileno()).st_size // 2
            file.seek(middle)
            byte = file.read(1)[0]
            file.seek(middle)
            file.write(bytes([byte ^ 0xFF]))
    elif fault == "read-only":
        path.chmod(0o444)
    elif fault == "directory":
        path.unlink()
        path.mkdir()
    else:
        raise AssertionError(f"no fault {fault!r}")


def _restore(path: Path, original: Path) -> None:
    """The operator's repair: the file as it was before the fault."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    shutil.copy2(original, path)


@contextlib.contextmanager
def _writes_denied(data_dir: Path, path: Path):
    """Run the block as a user whom ``chmod 0o444`` on ``path`` really stops writing. Root is not stopped by
    a file's mode, so as root the block runs with the effective user ``nobody`` (owning the data directory,
    so that only the file's mode denies anything), and root again after it."""
    if os.geteuid() != 0:
        _require_denied(path, "this user (with CAP_DAC_OVERRIDE?)")
        yield
        return
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root, and there is no user 'nobody' whom chmod 0o444 stops writing")
    for entry in [data_dir, *data_dir.rglob("*")]:
        os.chown(entry, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
    gid = os.getegid()
    os.setegid(nobody.pw_gid)
    os.seteuid(nobody.pw_uid)
    try:
        _require_denied(path, "the user 'nobody'")
        yield
    finally:
        os.seteuid(0)
        os.setegid(gid)


def _require_denied(path: Path, who: str) -> None:
    try:
        with open(path, "r+b"):
            pass
    except PermissionError:
        return
    pytest.skip(f"chmod 0o444 does not stop {who} writing {path.name}: no way to make it read-only here")


# ------------------------------------------------------------ outcomes


def _snapshot(data_dir: Path) -> dict[str, bytes | str]:
    """Everything in the data directory but ``.lock`` (rewritten by every start, even a failed one)."""
    return {entry.relative_to(data_dir).as_posix(): "<directory>" if entry.is_dir() else entry.read_bytes()
            for entry in sorted(data_dir.rglob("*")) if entry.name != ".lock"}


def _lost_or_repeated(broker: Broker, acked: list[Acked]) -> list[str]:
    problems = []
    for partition in range(TOPICS["t"]):
        held = [(offset, value) for offset, _, value, batch in broker.log("t", partition).records()
                if batch.producer_id != TXN_PRODUCER]  # the aborted transaction's record was never acknowledged
        wanted = sorted((a.offset, a.value) for a in acked if a.partition == partition)
        if held != wanted:
            missing = sorted(set(wanted) - set(held))
            problems.append(f"(c) the broker started, but t-{partition} holds offsets {[o for o, _ in held]} "
                            f"where {len(wanted)} records were acknowledged: missing {missing}, "
                            f"unexpected {sorted(set(held) - set(wanted))}")
    return problems


def _examine(broker: Broker, data_dir: Path, acked: list[Acked]) -> tuple[list[str], list[Acked]]:
    """Problems of a started broker against (b), and the records it acknowledged here."""
    problems = _lost_or_repeated(broker, acked)
    if problems:
        return problems, []
    for partition in range(TOPICS["t"]):  # the last batch of each old producer, retried: still a duplicate
        for producer_id in sorted({a.producer_id for a in acked}):
            last = max(a for a in acked if a.partition == partition and a.producer_id == producer_id)
            retry = RecordBatch("t", partition, [last.value], producer_id=last.producer_id,
                                producer_epoch=last.producer_epoch, base_sequence=last.sequence)
            answer = broker.handle(ProduceRequest((retry,))).responses[0]
            if (answer.error_code, answer.base_offset) != (0, last.offset):
                problems.append(f"a retry of producer {producer_id}'s record at t-{partition} offset {last.offset} "
                                f"was answered ({answer.error_code}, offset {answer.base_offset}), not as a "
                                "duplicate")
    in_logs = max(batch.producer_id for partition_log in broker.logs() for _, batch, *_ in partition_log.batches)
    new: list[Acked] = []
    producer = Producer(broker)
    try:
        for partition in range(TOPICS["t"]):
            expected = 1 + max(a.offset for a in acked if a.partition == partition)
            offset = producer.send("t", b"new", partition=partition).result().offset
            state = producer.idempotence
            new.append(Acked(partition, offset, b"new", state.producer_id, state.producer_epoch, 0))
            if offset != expected:
                problems.append(f"(c) a new record on t-{partition} got offset {offset}, not {expected}")
        if producer.idempotence.producer_id <= in_logs:
            problems.append(f"a new producer got id {producer.idempotence.producer_id}, but the logs hold "
                            f"writes of ids up to {in_logs}")
    except Exception as exc:
        problems.append(f"a new producer could not write: {type(exc).__module__}.{type(exc).__name__}: {exc}")
    try:
        other = Broker(TOPICS, data_dir=data_dir, **SETTINGS)
    except IdemcoreError as exc:
        holder = re.search(r"\(process (\w+)\)", str(exc))
        if "is in use by another broker" not in str(exc) or holder is None:
            problems.append(f"a second broker on the directory was refused with: {exc}")
        elif holder.group(1) not in (str(os.getpid()), "unknown"):
            problems.append(f"a second broker is told process {holder.group(1)} holds the directory; this "
                            f"process ({os.getpid()}) does")
    except Exception as exc:
        problems.append(f"a second broker on the directory got {type(exc).__name__}: {exc}, not the refusal "
                        "naming the holder")
    else:
        other.close()
        problems.append("a second broker started on the same directory")
    return problems, new


def _start_safely(data_dir: Path, acked: list[Acked]) -> list[str]:
    """(b): the problems found, none if the recovery was safe."""
    try:
        broker = Broker(TOPICS, data_dir=data_dir, **SETTINGS)
    except Exception as exc:
        return [f"the start failed: {type(exc).__module__}.{type(exc).__name__}: {exc}"]
    try:
        problems, new = _examine(broker, data_dir, acked)
    finally:
        broker.close()
    if problems:
        return problems
    try:  # what the recovered broker wrote (its checkpoint, the new records) opens again
        with Broker(TOPICS, data_dir=data_dir, **SETTINGS) as again:
            return [f"on a further restart: {problem}" for problem in _lost_or_repeated(again, acked + new)]
    except Exception as exc:
        return [f"a further restart failed: {type(exc).__name__}: {exc}"]


def _start_fails_clearly(data_dir: Path, path: Path, expected: Error, original: Path,
                         acked: list[Acked]) -> list[str]:
    """(a): the problems found, none if the start failed clearly and the repaired directory starts."""
    before = _snapshot(data_dir)
    try:
        broker = Broker(TOPICS, data_dir=data_dir, **SETTINGS)
    except Exception as exc:
        problems = []
        message = str(exc)
        if not isinstance(exc, IdemcoreError | OSError):
            problems.append(f"raised {type(exc).__module__}.{type(exc).__name__}, not an IdemcoreError or "
                            f"OSError: {message}")
        if str(path) not in message:
            problems.append(f"the message does not name {path}: {message!r}")
        if expected.says and not re.search(expected.says, message):
            problems.append(f"the message does not say {expected.says!r}: {message!r}")
        after = _snapshot(data_dir)
        if after != before:
            changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
            problems.append(f"the failed start changed {changed} in the data directory")
        _restore(path, original)
        problems += [f"once {path.name} was restored: {problem}" for problem in _start_safely(data_dir, acked)]
        return problems
    try:
        found, _ = _examine(broker, data_dir, acked)
    finally:
        broker.close()
    return [f"the start succeeded; expected a clear error naming {path}", *found]


def _start_then_reading_fails(data_dir: Path) -> list[str]:
    """(d): the problems found, none if the start succeeded and reading t-0 (every batch decoded, its CRC
    checked, its offsets following the last batch's, as an audit of the log directory reads it) finds the
    damage."""
    with Broker(TOPICS, data_dir=data_dir, **SETTINGS) as broker:
        try:
            batches = broker.log("t", 0).batches
        except CorruptRecordError as exc:
            return [] if "CRC mismatch" in str(exc) else [f"reading failed, but not on a CRC: {exc}"]
    if any(b.base_offset != a.next_offset for a, b in itertools.pairwise(batches)):
        return []  # a base offset (outside the CRC) was hit: the offsets no longer follow
    return ["the start succeeded and every batch read back: the damage went unseen"]


@pytest.mark.parametrize("file, fault, mode, expected", CELLS)
def test_fault_matrix(workspace, template, file, fault, mode, expected):
    source, acked = template(mode)
    data_dir = workspace / f"{mode}-{file.replace(' ', '-')}-{fault}"
    shutil.copytree(source, data_dir, symlinks=True)
    path = data_dir / FILES[file]
    _apply(fault, path)
    with _writes_denied(data_dir, path) if fault == "read-only" else contextlib.nullcontext():
        if isinstance(expected, Error):
            problems = _start_fails_clearly(data_dir, path, expected, source / FILES[file], acked)
        elif expected == READ_ERROR:
            problems = _start_then_reading_fails(data_dir)
        else:
            problems = _start_safely(data_dir, acked)
    assert not problems, f"{file} {fault} after the broker {mode}, expected {expected!r}:\n  " + "\n  ".join(problems)


def test_a_flipped_byte_in_the_id_store_block_record_is_a_clear_error(workspace, template):
    """The flip that matters in a SQLite file (it keeps no checksums): inside the block record itself. The
    broker cannot tell which block it holds; it must say so at start, naming the file (the operator may
    delete it: ids in the logs are skipped), not fail later at the first InitProducerId."""
    source, acked = template("closed")
    data_dir = workspace / "closed-id-store-record-flip"
    shutil.copytree(source, data_dir, symlinks=True)
    path = data_dir / FILES["id store"]
    data = bytearray(path.read_bytes())
    marker = b'"block_end": "'
    positions = [m.end() for m in re.finditer(re.escape(marker), data)]
    assert positions, "the id store holds no block record"
    for position in positions:
        data[position] ^= 0xFF  # the block end's first digit
    path.write_bytes(bytes(data))
    problems = _start_fails_clearly(data_dir, path, Error(), source / FILES["id store"], acked)
    assert not problems, "\n  ".join(problems)


def test_every_file_the_broker_keeps_is_in_the_matrix(template):
    """A file the broker starts keeping gets its row in FILES and MATRIX, and each cell is decided once."""
    for mode in MODES:
        source, _ = template(mode)
        kept = {re.sub(r"^[^/]+-\d+/", "t-0/", entry.relative_to(source).as_posix())
                for entry in source.rglob("*") if not entry.is_dir()}
        wanted = {path for file, path in FILES.items() if ONLY_AFTER.get(file, mode) == mode}
        assert kept == wanted, f"after the broker {mode}: files kept {sorted(kept)}, matrix {sorted(wanted)}"
    decided = [(file, fault) for file, fault, *_ in MATRIX]
    assert sorted(decided) == sorted((file, fault) for file in FILES for fault in FAULTS)
