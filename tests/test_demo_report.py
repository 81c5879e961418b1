"""The demo's data and report without Spark: every finding kind planted (or said impossible), checked against
the oracle and the replay at its batch; open transactions and held last stable offsets that reconcile; a
summary.json sized by partitions, with the per-producer detail in producers.parquet."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from idemcore import Finding
from idemcore.audit import AuditReport, replay_table
from idemcore.audit.report import REPORT_FILES, SUMMARY_ROWS
from idemcore.cli.audit import print_report
from idemcore.synth.dataset import generate, read_truth
from idemcore.synth.ground_truth import check_against_truth
from idemcore.synth.streams import ANOMALIES, CANNOT_OCCUR, DEFAULT_MIX, inject_anomalies, synthetic_stream

from .oracle import CLIENT, FINDING, OracleLog
from .test_replay import dataset_table

HANGING_AFTER_MS = 900_000


def _report(path, **options) -> AuditReport:
    return AuditReport.from_results([replay_table(dataset_table(path))], order_by="seq_no", seconds=1.0, **options)


@pytest.fixture(scope="module")
def demo_like(tmp_path_factory):
    """A dataset as the demo writes it (the default mix), its truth and its in-process report."""
    out = tmp_path_factory.mktemp("demo") / "ds"
    truth = generate(out, topics=2, partitions=4, producers=20, batches=20000, seed=5, partitions_per_file=4,
                     progress=False)
    return out, truth, _report(out)


def test_every_finding_the_kernel_reports_is_planted_or_said_impossible():
    labels = {f.label for f in Finding if f is not Finding.NONE}
    planted = {"duplicate", *ANOMALIES}  # duplicates: the stream's own retries
    assert planted | set(CANNOT_OCCUR) == labels and not planted & set(CANNOT_OCCUR)
    assert set(DEFAULT_MIX) == set(ANOMALIES) and all(count > 0 for count in DEFAULT_MIX.values())


def test_planted_anomalies_are_the_oracles_findings_at_their_batch():
    """The oracle (tests/oracle.py, no kernel code) finds each planted batch and nothing else; the transactions it
    leaves open are the hanging ones and one recent one."""
    columns, truth, planted = inject_anomalies(synthetic_stream(20000, n_producers=20, n_partitions=8, seed=2),
                                               seed=2)
    assert {name: truth[name] for name in ("invalid_txn_state", "invalid_record")} == {
        "invalid_txn_state": 3, "invalid_record": 3}
    names = {code: name for name, code in FINDING.items()}
    log, found, duplicates = OracleLog(), {}, 0
    for k in range(len(columns["partition"])):
        row = {name: column[k].item() for name, column in columns.items()}
        finding = names[log.append(row, CLIENT)[4]]
        if finding == "duplicate":
            duplicates += 1
        elif finding:
            found[k] = (row["partition"], row["producer_id"], finding)
    assert duplicates == truth["duplicate"]
    hanging = "hanging_transaction"
    assert found == {p["position"]: (p["partition"], p["producer_id"], p["finding"]) for p in planted
                     if p["finding"] != hanging}
    now = int(columns["max_timestamp"].max())
    still_open = {key: now - entry.last_timestamp for key, entry in log.entries.items() if entry.txn_first_offset >= 0}
    assert {key for key, idle in still_open.items() if idle > HANGING_AFTER_MS} == {
        (p["partition"], p["producer_id"]) for p in planted if p["finding"] == hanging}
    assert sum(idle <= HANGING_AFTER_MS for idle in still_open.values()) == 1  # the recent one


def test_invalid_records_are_malformed_in_each_way():
    columns, _, planted = inject_anomalies(synthetic_stream(20000, n_producers=20, n_partitions=8, seed=4),
                                           {"invalid_record": 3}, seed=4)
    kinds = []
    for k in (p["position"] for p in planted if p["finding"] == "invalid_record"):
        base, last, count = (int(columns[name][k]) for name in ("base_sequence", "last_sequence", "record_count"))
        kinds.append("no sequence" if base == -1 and last == -1 else "no records" if count == 0
                     else "wrong last sequence" if last != (base + count - 1) % 2**31 else "valid")
    assert sorted(kinds) == ["no records", "no sequence", "wrong last sequence"]


def test_the_replay_finds_every_planted_kind_at_its_batch(demo_like):
    path, truth, report = demo_like
    assert read_truth(path)["findings"] == truth["findings"]
    check = check_against_truth(report, truth)
    assert check.ok, (check.rows, check.missed, check.unexpected)
    assert {name for name, _, _ in check.rows} == {"duplicate", *ANOMALIES}
    # One planted invalid record or txn-state misuse taken out of the data: missed at its batch, and counted.
    for kind in ("invalid_record", "invalid_txn_state"):
        gone = next(p for p in truth["planted"] if p["finding"] == kind)
        table = dataset_table(path)
        table = table.filter(pc.not_equal(table.column("seq_no"), gone["seq_no"]))
        partial = AuditReport.from_results([replay_table(table)], order_by="seq_no", seconds=1.0)
        check = check_against_truth(partial, truth)
        assert not check.ok and (kind, 3, 2) in check.rows and not check.unexpected
        assert [m["seq_no"] for m in check.missed] == [gone["seq_no"]]


def test_open_transactions_reconcile(demo_like):
    _, _, report = demo_like
    txns = report.transactions()
    assert txns["open"] == report.open_txns.num_rows == txns["hanging"] + txns["open_not_hanging"]
    assert (txns["hanging"], txns["open_not_hanging"]) == (3, 1)
    waiting = report.open_not_hanging().to_pylist()
    assert all(row["idle_ms"] <= HANGING_AFTER_MS and not row["hanging"] for row in waiting)
    # Judged later, the recent one hangs too.
    later = _report(demo_like[0], now_ms=report.now_ms + HANGING_AFTER_MS)
    assert (later.transactions()["hanging"], later.open_not_hanging().num_rows) == (4, 0)


def test_held_partitions_name_the_transaction_holding_them(demo_like):
    _, _, report = demo_like
    held = report.held_partitions().to_pylist()
    partitions = report.partitions.to_pylist()
    assert [(h["topic"], h["partition"]) for h in held] == [
        (p["topic"], p["partition"]) for p in partitions if p["last_stable_offset"] < p["log_end_offset"]]
    opened = {(t["topic"], t["partition"], t["first_offset"]): t for t in report.open_txns.to_pylist()}
    for row in held:
        holder = opened[(row["topic"], row["partition"], row["last_stable_offset"])]
        assert (row["producer_id"], row["hanging"]) == (holder["producer_id"], holder["hanging"])
        assert row["last_stable_offset"] == min(t["first_offset"] for t in opened.values()
                                                if (t["topic"], t["partition"]) == (row["topic"], row["partition"]))
    assert len(held) == len({(t["topic"], t["partition"]) for t in opened.values()}) >= 1


def _printed(report: AuditReport, capsys) -> str:
    print_report(report)
    return capsys.readouterr().out


def test_the_printed_report_reconciles_and_names_held_partitions(demo_like, capsys):
    _, _, report = demo_like
    text = _printed(report, capsys)
    assert "4 still open: 3 hanging, 1 not hanging\n" in text
    (waiting,) = report.open_not_hanging().to_pylist()
    title = "open but not hanging (idle at most 900,000 ms, --hanging-after-ms):\n"
    section = text[text.index(title) + len(title):].splitlines()
    assert section[1].split() == [waiting["topic"], str(waiting["partition"]), str(waiting["producer_id"]),
                                  str(waiting["first_offset"]), f"{waiting['idle_ms']:,}"]
    held = report.held_partitions().to_pylist()
    title = f"last stable offset held back by an open transaction in {len(held)} of 8 partitions:\n"
    section = text[text.index(title) + len(title):].splitlines()
    assert section[0].split() == ["topic", "partition", "last_stable_offset", "log_end_offset", "producer_id",
                                  "hanging"]
    assert [line.split() for line in section[1:1 + len(held)]] == [
        [h["topic"], str(h["partition"]), str(h["last_stable_offset"]), str(h["log_end_offset"]),
         str(h["producer_id"]), "yes" if h["hanging"] else "no"] for h in held]


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory):
    """The same partitions, ten times the batches and producers; more gaps than a summary lists."""
    reports = []
    for batches, producers in ((20000, 20), (200000, 2000)):
        out = tmp_path_factory.mktemp("sizes") / "ds"
        generate(out, topics=2, partitions=4, producers=producers, batches=batches, seed=3, partitions_per_file=4,
                 anomalies={**DEFAULT_MIX, "sequence_gap": SUMMARY_ROWS + 5}, progress=False)
        reports.append(_report(out))
    return reports


def test_detail_sections_are_bounded_with_and_n_more(two_sizes, capsys):
    text = _printed(two_sizes[0], capsys)
    section = text[text.index("\nsequence gaps:\n") + 1:].split("\n\n")[0].splitlines()
    assert len(section) == 1 + 1 + 10 + 1 and section[-1] == "... and 5 more"  # title, header, rows, the rest


def test_summary_json_is_compact_bounded_and_names_its_files(two_sizes, tmp_path):
    sizes = []
    for k, report in enumerate(two_sizes):
        paths = report.write(tmp_path / str(k))
        assert {name: path.name for name, path in paths.items()} == REPORT_FILES
        text = paths["summary"].read_text()
        # One compact line (the reasons of open transactions hold ": " themselves: compare with compact JSON).
        assert text.count("\n") == 1 and text == json.dumps(json.loads(text), separators=(",", ":")) + "\n"
        summary = json.loads(text)
        sizes.append(len(text))
        assert summary["files"] == {"findings": "findings.parquet", "producers": "producers.parquet"}
        assert all((paths["summary"].parent / name).exists() for name in summary["files"].values())
        assert "counts_by_stream" not in summary
        assert summary["findings"]["sequence_gap"] == SUMMARY_ROWS + 5 and len(summary["gaps"]) == SUMMARY_ROWS
        assert summary["transactions"] == report.transactions()
        assert len(summary["partitions"]) == 8 and len(summary["lso_held"]) == report.held_partitions().num_rows
        # Per partition, the findings add up to the totals.
        for name, count in summary["findings"].items():
            assert sum(p["findings"].get(name, 0) for p in summary["partitions"]) == count
        # Per producer, in Parquet: the same counts.
        producers = pq.read_table(paths["producers"])
        assert producers.equals(report.producers())
        assert {name: pc.sum(producers.column(name)).as_py() for name in summary["findings"]} == summary["findings"]
        assert pc.sum(pc.is_valid(producers.column("open_txn_first_offset"))).as_py() == report.open_txns.num_rows
    small, big = sizes
    assert two_sizes[1].producers().num_rows > 10 * two_sizes[0].producers().num_rows
    assert big < 1.1 * small, sizes  # ten times the data, about the same summary


def test_an_empty_report_writes_empty_files(tmp_path):
    report = AuditReport.from_results([], order_by="seq_no", seconds=0.0)
    paths = report.write(tmp_path)
    assert pq.read_table(paths["producers"]).num_rows == 0
    assert json.loads(paths["summary"].read_text())["transactions"] == dict.fromkeys(
        ["committed", "aborted", "aborted_records", "open", "hanging", "open_not_hanging"], 0)
    assert report.held_partitions().num_rows == 0 and isinstance(report.producers(), pa.Table)
