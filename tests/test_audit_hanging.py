"""Hanging transactions confirmed or cleared by the transaction coordinator's log, as ``kafka-transactions.sh
find-hanging`` then ``describe`` judge them (idemcore/audit/find_hanging.py).

The log directories are written by the real broker and its coordinator: ``__transaction_state`` holds what the
coordinator wrote, the data partitions what the producers and the markers wrote. Each way a transaction can be
left open is built once:

- ``expired``: committed, then a late transactional write; the id then expired (a tombstone): no transactional id
  has the producer id any more -> hanging;
- ``ongoing``: open on a partition it added -> cleared (the coordinator aborts it at its timeout);
- ``stray``: open on u-0 (added) and on t-2 (never added, which the broker does not check) -> u-0 cleared, t-2
  hanging;
- ``late``: committed, then a data batch after the markers (Kafka's classic hanging transaction) -> hanging, the
  coordinator says CompleteCommit;
- ``prepare``: committed, but the markers could not be written: PrepareCommit -> cleared (the markers are pending);
- ``recent``: open for a second on t-2 (added) and u-1 (not added) -> not candidates yet.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from idemcore.audit.find_hanging import (
    CLEARED,
    HANGING,
    RECENT,
    UNCONFIRMED,
    CoordinatorTxn,
    TransactionLog,
    TransactionLogError,
)
from idemcore.audit.logdir import audit_log_dir
from idemcore.audit.replayer import replay_table
from idemcore.audit.report import AuditReport
from idemcore.broker import Broker
from idemcore.broker.coordinator.partitioning import partition_for
from idemcore.cli import main
from idemcore.net.messages import (
    PartitionResponse,
    ProduceRequest,
    TxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files.transaction_log import TransactionState, encode_key
from idemcore.record.v2 import Record, decode_batch, encode_batch, iter_batches

T0 = 1_700_000_000_000
DAY = 86_400_000
HOUR = 3_600_000
#: When the second act starts: after the first id expired (7 days idle, transactional.id.expiration.ms).
T1 = T0 + 8 * DAY
#: The newest batch of the directory: the audit's "now".
NOW = T1 + 2 * HOUR
TIMEOUT_MS = 60_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@dataclass
class Built:
    root: Path
    pids: dict[str, int] = field(default_factory=dict)


def _produce(broker: Broker, topic: str, partition: int, pid: int, seq: int, at: int,
             transactional: bool = True) -> None:
    batch = RecordBatch(topic, partition, [b"v%d" % seq], None, pid, 0 if pid >= 0 else -1, seq, at, transactional)
    (answer,) = broker.handle(ProduceRequest((batch,))).responses
    assert answer.error_code == ErrorCode.NONE, answer


def _begin(broker: Broker, tid: str, partitions: list[tuple[str, int]]) -> int:
    coordinator = broker.txn_coordinator
    init = coordinator.init_producer_id(tid, TIMEOUT_MS)
    assert init.error_code == ErrorCode.NONE and init.producer_epoch == 0
    added = coordinator.add_partitions_to_txn(tid, init.producer_id, 0, partitions)
    assert set(added.values()) == {ErrorCode.NONE}
    return init.producer_id


def _markers_unavailable(request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    return WriteTxnMarkersResponse(request.request_id, tuple(
        TxnMarkerResult(m.producer_id, tuple(PartitionResponse(t, p, ErrorCode.KAFKA_STORAGE_ERROR)
                                             for t, p in m.partitions)) for m in request.markers))


def build(root: Path) -> Built:
    clock = Clock()
    built = Built(root)
    pids = built.pids
    with Broker({"t": 4, "u": 2}, data_dir=root, clock=clock, transaction_state_partitions=3) as broker:
        coordinator = broker.txn_coordinator
        # expired: committed, a late write opens a transaction nobody knows, then the id expires.
        pids["expired"] = pid = _begin(broker, "expired", [("t", 1)])
        _produce(broker, "t", 1, pid, 0, T0)
        assert coordinator.end_txn("expired", pid, 0, committed=True) == ErrorCode.NONE
        _produce(broker, "t", 1, pid, 1, T0 + 1)
        clock.now = T1
        assert coordinator.expire_transactional_ids() == ["expired"]  # the tombstone
        # ongoing: a transaction the coordinator tracks (it would abort it at its timeout).
        pids["ongoing"] = pid = _begin(broker, "ongoing", [("t", 0)])
        _produce(broker, "t", 0, pid, 0, T1)
        # stray: one partition added, one never added.
        pids["stray"] = pid = _begin(broker, "stray", [("u", 0)])
        _produce(broker, "u", 0, pid, 0, T1)
        _produce(broker, "t", 2, pid, 0, T1)
        # late: a data batch after the COMMIT markers.
        pids["late"] = pid = _begin(broker, "late", [("t", 3)])
        _produce(broker, "t", 3, pid, 0, T1)
        assert coordinator.end_txn("late", pid, 0, committed=True) == ErrorCode.NONE
        _produce(broker, "t", 3, pid, 1, T1 + 1)
        # prepare: the decision is durable, its markers are not written.
        pids["prepare"] = pid = _begin(broker, "prepare", [("u", 1)])
        _produce(broker, "u", 1, pid, 0, T1)
        handlers = broker._handlers
        kept = handlers[WriteTxnMarkersRequest]
        handlers[WriteTxnMarkersRequest] = _markers_unavailable
        try:
            assert coordinator.end_txn("prepare", pid, 0, committed=True) == ErrorCode.NONE
        finally:
            handlers[WriteTxnMarkersRequest] = kept
        # recent: open a second before the newest batch, on an added and a never-added partition.
        clock.now = NOW - 1000
        pids["recent"] = pid = _begin(broker, "recent", [("t", 2)])
        _produce(broker, "t", 2, pid, 0, NOW - 1000)
        _produce(broker, "u", 1, pid, 0, NOW - 1000)
        clock.now = NOW
        _produce(broker, "u", 0, -1, -1, NOW, transactional=False)  # the newest batch: the audit's "now"
        assert [d.state for d in coordinator.describe_transactions(["prepare", "late", "ongoing"])] == [
            "PrepareCommit", "CompleteCommit", "Ongoing"]
    return built


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    return build(tmp_path_factory.mktemp("hanging") / "logs")


@pytest.fixture(scope="module")
def report(built):
    return audit_log_dir(built.root)


def _verdicts(report) -> dict[tuple[str, int, int], dict]:
    return {(row["topic"], row["partition"], row["producer_id"]): row for row in report.open_txns.to_pylist()}


# --- The verdicts ---------------------------------------------------------------------------------------------------

def test_each_open_transaction_is_confirmed_cleared_or_recent(built, report):
    p = built.pids
    rows = _verdicts(report)
    got = {key: (row["verdict"], row["transactional_id"], row["coordinator_state"], row["coordinator_producer_id"],
                 row["coordinator_producer_epoch"], row["hanging"]) for key, row in rows.items()}
    assert got == {
        ("t", 1, p["expired"]): (HANGING, None, None, None, None, True),
        ("t", 0, p["ongoing"]): (CLEARED, "ongoing", "Ongoing", p["ongoing"], 0, False),
        ("u", 0, p["stray"]): (CLEARED, "stray", "Ongoing", p["stray"], 0, False),
        ("t", 2, p["stray"]): (HANGING, "stray", "Ongoing", p["stray"], 0, True),
        ("t", 3, p["late"]): (HANGING, "late", "CompleteCommit", p["late"], 0, True),
        ("u", 1, p["prepare"]): (CLEARED, "prepare", "PrepareCommit", p["prepare"], 0, False),
        ("t", 2, p["recent"]): (RECENT, "recent", "Ongoing", p["recent"], 0, False),
        ("u", 1, p["recent"]): (RECENT, "recent", "Ongoing", p["recent"], 0, False),
    }
    assert report.now_ms == NOW


def test_each_verdict_says_why_in_one_line(built, report):
    p = built.pids
    reason = {key: row["reason"] for key, row in _verdicts(report).items()}
    assert all("\n" not in text for text in reason.values())
    assert reason[("t", 1, p["expired"])] == (f"no transactional id in the transaction log has producer id "
                                              f"{p['expired']}: no coordinator will write a marker here")
    assert reason[("t", 2, p["stray"])] == (f"'stray' is Ongoing (producer {p['stray']} epoch 0) with u-0 but not "
                                            "t-2: no marker will come for t-2")
    assert reason[("t", 3, p["late"])] == (f"'late' is CompleteCommit (producer {p['late']} epoch 0): no "
                                           "transaction in progress, so no marker will come for t-3")
    assert reason[("u", 1, p["prepare"])] == (f"'prepare' is PrepareCommit (producer {p['prepare']} epoch 0): its "
                                              "COMMIT marker for u-1 is pending (a coordinator sends it again when "
                                              "it loads)")
    overdue = NOW - T1 - TIMEOUT_MS
    assert reason[("t", 0, p["ongoing"])] == (
        f"'ongoing' is Ongoing (producer {p['ongoing']} epoch 0) with t-0 in its transaction: EndTxn, or an abort "
        f"at its 60,000 ms timeout, will write the marker (its timeout passed {overdue:,} ms ago: the abort is due)")
    assert reason[("t", 2, p["recent"])] == ("idle 1,000 ms, not more than 900,000 ms: not a find-hanging "
                                             "candidate yet")
    assert reason[("u", 1, p["recent"])] == ("idle 1,000 ms, not more than 900,000 ms: not a find-hanging "
                                             "candidate yet; the coordinator does not track it, so it will hang")


def test_the_counts_follow_the_verdicts(report):
    assert report.hanging_check() == {
        "transaction_log": "read", "transaction_state_partitions": [0, 1, 2], "transactional_ids": 5,
        "read": f"__transaction_state partition(s) 0-2: 5 transactional id(s) from "
                f"{report.transaction_log.records} record(s)",
        "candidates": 6, "confirmed": 3, "cleared": 3, "unconfirmed": 0}
    assert report.finding_counts()["hanging_transaction"] == 3
    assert report.transactions() == {"committed": 2, "aborted": 0, "aborted_records": 0, "open": 8,
                                     "hanging": 3, "open_not_hanging": 5}
    assert report.cleared().num_rows == 3 and report.recent().num_rows == 2
    assert report.hanging_candidates().num_rows == 6
    # Every partition with an open transaction is held; hanging says whether its holder is confirmed hanging.
    held = {(row["topic"], row["partition"]): row["hanging"] for row in report.held_partitions().to_pylist()}
    assert held == {("t", 0): False, ("t", 1): True, ("t", 2): True, ("t", 3): True, ("u", 0): False,
                    ("u", 1): False}


def test_the_tombstone_removed_the_expired_id(built, report):
    log = report.transaction_log
    assert sorted(log.transactions) == ["late", "ongoing", "prepare", "recent", "stray"]
    assert log.tombstones == 1 and log.unknown_keys == 0
    # The log holds the id's records, then its tombstone: the last record wins.
    home = built.root / f"__transaction_state-{partition_for('expired', 3)}"
    values = []
    for segment in sorted(home.glob("*.log")):  # (8 days on, the coordinator's log rolled: segment.ms is 7 days)
        data = segment.read_bytes()
        values += [record.value for position, _ in iter_batches(data) for record in decode_batch(data, position)[1]
                   if record.key == encode_key("expired")]
    assert len(values) >= 4 and values[-1] is None and all(value is not None for value in values[:-1])


def test_without_the_transaction_log_the_idle_verdict_stands_unconfirmed(built, tmp_path, capsys):
    """A broker's log directory that holds no __transaction_state partition (another broker leads them)."""
    data = tmp_path / "logs"
    for path in built.root.iterdir():
        if path.name[:2] in ("t-", "u-"):
            shutil.copytree(path, data / path.name)
    report = audit_log_dir(data)
    assert report.transaction_log is None and report.transaction_log_status == "absent"
    verdicts = _verdicts(report)
    assert {key: row["verdict"] for key, row in verdicts.items() if row["verdict"] != RECENT} == dict.fromkeys(
        [("t", 0, built.pids["ongoing"]), ("t", 1, built.pids["expired"]), ("t", 2, built.pids["stray"]),
         ("t", 3, built.pids["late"]), ("u", 0, built.pids["stray"]), ("u", 1, built.pids["prepare"])], UNCONFIRMED)
    assert {row["reason"] for row in verdicts.values() if row["verdict"] == UNCONFIRMED} == {
        "not confirmed: no transaction log"}
    assert report.hanging_transactions().num_rows == 6 and report.hanging_check()["unconfirmed"] == 6
    assert all(row["transactional_id"] is None for row in verdicts.values())
    assert main(["audit", str(data), "-q"]) == 0
    text = capsys.readouterr().out
    assert ("\nhanging transactions (idle more than 900,000 ms, --hanging-after-ms):\n"
            "not confirmed: no transaction log: judged by idle time alone") in text
    assert "hanging check: 6 candidate(s) idle more than 900,000 ms, not confirmed: no transaction log\n" in text


def test_a_parquet_audit_has_no_transaction_log():
    table = pa.table({"topic": ["t"] * 2, "partition": [0, 0], "producer_id": [7, 9], "producer_epoch": [0, 0],
                      "base_sequence": [0, 0], "record_count": [1, 1], "is_transactional": [True, False],
                      "max_timestamp": [T0, T0 + HOUR], "seq_no": [0, 1]})
    report = AuditReport.from_results([replay_table(table)], order_by="seq_no", seconds=1.0)
    (row,) = report.open_txns.to_pylist()
    assert (row["producer_id"], row["verdict"], row["reason"], row["hanging"]) == (
        7, UNCONFIRMED, "not confirmed: no transaction log", True)
    assert report.hanging_check()["transaction_log"] == "absent"


# --- The CLI ----------------------------------------------------------------------------------------------------------

def test_cli_text_shows_the_coordinator_s_word_on_each(built, report, capsys):
    p = built.pids
    assert main(["audit", str(built.root), "-q"]) == 0
    text = capsys.readouterr().out
    title = ("\nhanging transactions (idle more than 900,000 ms, --hanging-after-ms), confirmed by the transaction "
             "coordinator's log:\n")
    section = text[text.index(title) + len(title):].splitlines()
    assert section[0].split() == ["topic", "partition", "producer_id", "producer_epoch", "first_offset", "idle_ms",
                                  "transactional_id", "coordinator_state"]
    assert [line.split()[:3] + line.split()[6:] for line in section[1:4]] == [
        ["t", "1", str(p["expired"]), "-", "-"], ["t", "2", str(p["stray"]), "stray", "Ongoing"],
        ["t", "3", str(p["late"]), "late", "CompleteCommit"]]
    assert section[5] == (f"  t-2 producer {p['stray']} epoch 0: hanging: 'stray' is Ongoing (producer {p['stray']} "
                          "epoch 0) with u-0 but not t-2: no marker will come for t-2")
    assert ("\ncleared (idle more than 900,000 ms, --hanging-after-ms, but the transaction coordinator still tracks "
            "them: not hanging):\n") in text
    assert (f"  u-1 producer {p['prepare']} epoch 0: cleared: 'prepare' is PrepareCommit (producer {p['prepare']} "
            "epoch 0): its COMMIT marker for u-1 is pending") in text
    assert "8 still open: 3 hanging, 5 not hanging (3 of them cleared by the coordinator's log)\n" in text
    assert ("hanging check: 6 candidate(s) idle more than 900,000 ms; the transaction coordinator's log "
            "(__transaction_state partition(s) 0-2: 5 transactional id(s) from") in text
    assert "confirms 3 as hanging and clears 3, as kafka-transactions.sh find-hanging would\n" in text
    assert "\nopen but not hanging (idle at most 900,000 ms, --hanging-after-ms):\n" in text
    assert "the coordinator does not track it, so it will hang" in text


def test_cli_json_and_written_report_carry_the_verdicts(built, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["audit", str(built.root), "--json", "--out", str(out), "-q"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["hanging_transactions"] == 3 and printed["findings"]["hanging_transaction"] == 3
    assert printed["hanging_check"]["confirmed"] == 3 and printed["hanging_check"]["cleared"] == 3
    candidates = printed["hanging_candidates"]
    assert [(c["topic"], c["partition"], c["verdict"], c["transactional_id"]) for c in candidates] == [
        ("t", 0, CLEARED, "ongoing"), ("t", 1, HANGING, None), ("t", 2, HANGING, "stray"),
        ("t", 3, HANGING, "late"), ("u", 0, CLEARED, "stray"), ("u", 1, CLEARED, "prepare")]
    assert all(c["reason"] for c in candidates)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hanging_check"] == printed["hanging_check"]
    assert {row["verdict"] for row in summary["hanging_transactions"]} == {HANGING}
    assert {row["verdict"] for row in summary["open_not_hanging"]} == {CLEARED, RECENT}
    producers = pq.read_table(out / "producers.parquet").to_pylist()
    opened = {(row["topic"], row["partition"], row["producer_id"]): (row["verdict"], row["transactional_id"])
              for row in producers if row["verdict"] is not None}
    assert opened[("t", 3, built.pids["late"])] == (HANGING, "late") and len(opened) == 8


def test_cli_can_ignore_the_transaction_log(built, capsys):
    assert main(["audit", str(built.root), "--ignore-transaction-log", "--json", "-q"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["hanging_check"]["transaction_log"] == "ignored" and printed["hanging_transactions"] == 6
    assert {c["reason"] for c in printed["hanging_candidates"]} == {
        "not confirmed: transaction log not read (ignored)"}


# --- A log the coordinator could not load -------------------------------------------------------------------------

def _internal(broker: Broker, partition: int, key: bytes | None, value: bytes | None) -> int:
    batch = RecordBatch("__transaction_state", partition, [value], [key], max_timestamp=T0)
    (answer,) = broker.handle(ProduceRequest((batch,), internal=True)).responses
    assert answer.error_code == ErrorCode.NONE, answer
    return answer.base_offset


def _one_partition_log(root: Path, key: bytes | None, value: bytes | None) -> int:
    """A directory whose coordinator log (one partition) holds one id, then the record given: its offset."""
    with Broker({"t": 1}, data_dir=root, clock=lambda: T0, transaction_state_partitions=1) as broker:
        pid = _begin(broker, "fine", [("t", 0)])
        _produce(broker, "t", 0, pid, 0, T0)
        return _internal(broker, 0, key, value)


def test_a_malformed_value_is_refused_naming_file_and_offset(tmp_path, capsys):
    root = tmp_path / "logs"
    offset = _one_partition_log(root, encode_key("broken"), b"\x00\x00\x00\x00\x00")  # v0, cut in the producer id
    segment = root / "__transaction_state-0" / "00000000000000000000.log"
    with pytest.raises(TransactionLogError) as raised:
        audit_log_dir(root)
    message = str(raised.value)
    assert "\n" not in message and raised.value.offset == offset and raised.value.path == segment
    assert message.startswith(f"{segment}: offset {offset} (position ")
    assert "value of 'broken': record ends inside its producer id" in message
    assert main(["audit", str(root), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"idemcore: error: {segment}: offset {offset} (position ") and err.count("\n") == 1
    assert "(--ignore-transaction-log audits without it)" in err
    assert main(["audit", str(root), "-q", "--ignore-transaction-log", "--json"]) == 0  # the way out


def test_a_record_without_a_key_is_refused(tmp_path):
    """The broker refuses a keyless record on a compacted topic, so one is appended to the segment by hand (a
    damaged log, or another writer)."""
    root = tmp_path / "logs"
    last = _one_partition_log(root, encode_key("gone"), None)  # a tombstone: fine
    segment = root / "__transaction_state-0" / "00000000000000000000.log"
    position = segment.stat().st_size
    with segment.open("ab") as file:
        file.write(encode_batch([Record(0, 0, None, b"x")], base_offset=last + 1, base_timestamp=T0))
    with pytest.raises(TransactionLogError) as raised:
        audit_log_dir(root)
    assert str(raised.value) == (f"{segment}: offset {last + 1} (position {position}): a record without a key; the "
                                 "transaction coordinator's state cannot be rebuilt from this log")


def test_a_key_of_an_unknown_version_is_skipped_as_kafka_skips_it(tmp_path):
    _one_partition_log(tmp_path / "logs", b"\x00\x07whatever", b"anything")
    log = audit_log_dir(tmp_path / "logs", now_ms=T0 + HOUR).transaction_log
    assert log is not None and log.unknown_keys == 1 and list(log.transactions) == ["fine"]


def test_a_corrupt_coordinator_batch_is_refused(built, tmp_path):
    root = tmp_path / "logs"
    shutil.copytree(built.root, root)
    segment = root / "__transaction_state-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC no longer holds
    segment.write_bytes(bytes(data))
    with pytest.raises(TransactionLogError, match=r"offset 0 \(position 0\): CRC mismatch"):
        audit_log_dir(root)


def test_an_id_in_two_partitions_is_refused(tmp_path):
    root = tmp_path / "logs"
    with Broker({"t": 1}, data_dir=root, clock=lambda: T0, transaction_state_partitions=2) as broker:
        pid = _begin(broker, "twice", [("t", 0)])
        _produce(broker, "t", 0, pid, 0, T0)
        home = partition_for("twice", 2)
        # What the coordinator wrote, written again to the other partition (a changed partition count).
        value = next(v for _, k, v, _ in broker.log("__transaction_state", home).records() if k == encode_key("twice"))
        _internal(broker, 1 - home, encode_key("twice"), value)
    with pytest.raises(TransactionLogError, match=rf"'twice' is also in partition {home}"):
        audit_log_dir(root)


# --- The rule, record by record -----------------------------------------------------------------------------------

def _txn(tid: str, pid: int, epoch: int, state: TransactionState, *partitions: tuple[str, int]) -> CoordinatorTxn:
    return CoordinatorTxn(tid, pid, epoch, state, frozenset(partitions), TIMEOUT_MS, T0, T0, Path("x.log"), 0)


@pytest.mark.parametrize("state", [TransactionState.EMPTY, TransactionState.COMPLETE_ABORT])
def test_an_idle_id_clears_nothing(state):
    log = TransactionLog((0,), {"a": _txn("a", 5, 1, state)})
    judged = log.judge("t", 0, 5, 1)
    assert judged.verdict == HANGING and judged.txn is not None and judged.txn.state is state


def test_the_epoch_is_not_compared_only_reported():
    """Kafka's filterHangingTransactions looks at the partitions only: a marker with a higher epoch still ends the
    partition's open transaction."""
    log = TransactionLog((0,), {"a": _txn("a", 5, 3, TransactionState.PREPARE_ABORT, ("t", 0))})
    judged = log.judge("t", 0, 5, 2)
    assert judged.verdict == CLEARED
    assert judged.reason == ("'a' is PrepareAbort (producer 5 epoch 3): its ABORT marker for t-0 is pending (a "
                             "coordinator sends it again when it loads); the partition's transaction has epoch 2")


def test_an_id_with_another_producer_id_does_not_clear():
    """ListTransactions matches the coordinator's current producer id: an id that moved on to a new producer id
    (epochs exhausted) no longer speaks for the old one."""
    log = TransactionLog((0,), {"a": _txn("a", 6, 0, TransactionState.ONGOING, ("t", 0))})
    assert log.judge("t", 0, 5, 0).verdict == HANGING and log.judge("t", 0, 6, 0).verdict == CLEARED


def test_two_ids_with_one_producer_id_clear_if_either_holds_the_partition():
    log = TransactionLog((0,), {"a": _txn("a", 5, 0, TransactionState.COMPLETE_COMMIT),
                                "b": _txn("b", 5, 0, TransactionState.ONGOING, ("t", 0))})
    judged = log.judge("t", 0, 5, 0)
    assert (judged.verdict, judged.txn and judged.txn.transactional_id) == (CLEARED, "b")
    judged = log.judge("t", 1, 5, 0)
    assert (judged.verdict, judged.txn and judged.txn.transactional_id) == (HANGING, "a")


# --- Spark ------------------------------------------------------------------------------------------------------------

def test_the_spark_audit_gives_the_same_verdicts(built, report, spark):
    from idemcore.audit.spark import audit_log_dir_spark

    got = audit_log_dir_spark(built.root, spark=spark, tasks=3)
    columns = ["topic", "partition", "producer_id", "transactional_id", "coordinator_state", "verdict", "reason",
               "hanging"]
    assert got.open_txns.select(columns).to_pylist() == report.open_txns.select(columns).to_pylist()
    assert got.hanging_check() == report.hanging_check()
