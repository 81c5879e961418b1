"""AuditReport: the findings and summaries of an audit, merged from its tasks, written as Parquet + JSON."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from idemcore.audit.columns import TOPIC
from idemcore.audit.find_hanging import (
    CLEARED,
    HANGING,
    LOG_ABSENT,
    LOG_IGNORED,
    LOG_READ,
    RECENT,
    UNCONFIRMED,
    TransactionLog,
    judge_open_txns,
)
from idemcore.audit.replayer import TaskResult, merge_durations, merge_timelines
from idemcore.findings import Finding
from idemcore.protocol.constants import DEFAULT_TRANSACTION_MAX_TIMEOUT_MS, INT32_MAX
from idemcore.record.parquet_files import write_parquet

#: A transaction open longer than Kafka's default ``transaction.max.timeout.ms`` is hanging.
DEFAULT_HANGING_AFTER_MS = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
#: Rows of each detail list in ``summary.json`` (gaps, zombie writes, open transactions): the rest are in the
#: Parquet files beside it, so its size depends on the partitions only.
SUMMARY_ROWS = 10
#: The files :meth:`AuditReport.write` writes, by name.
REPORT_FILES = {"findings": "findings.parquet", "producers": "producers.parquet", "summary": "summary.json"}
_STREAM = [TOPIC, "partition", "producer_id"]


def _concat(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables, promote_options="default")


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


class ProblemsListed:
    """For a report that lists what was wrong in what it read (its ``problems``, each with a ``kind``)."""

    problems: tuple[Any, ...]

    def problem_counts(self) -> dict[str, int]:
        """How many problems of each kind."""
        counts: dict[str, int] = {}
        for problem in self.problems:
            counts[problem.kind] = counts.get(problem.kind, 0) + 1
        return counts

    def problem_lines(self) -> list[str]:
        """One line per problem (its ``str``: where, then what)."""
        return [str(problem) for problem in self.problems]


@dataclass(frozen=True)
class AuditReport:
    """What an audit found (docs/rules.md §5), over every (topic, partition) stream of the source.

    ``findings``: one row per batch with a finding (the batch, ``finding``,
    ``error_code``, ``expected``). ``partitions``: per (topic, partition)
    counts (batches, appended, duplicates, rejected, records, committed and
    aborted transactions, ``aborted_records``: data a read_committed consumer
    skips), ``log_end_offset`` and ``last_stable_offset``. ``open_txns``:
    transactions with no marker at the end, with ``idle_ms``, what the
    transaction coordinator's log says of each (``transactional_id``,
    ``coordinator_state``, ``coordinator_producer_id``/``_epoch``), the
    ``verdict`` with its ``reason``, and ``hanging``
    (:mod:`idemcore.audit.find_hanging`). ``transaction_log``: the
    coordinator's state read from ``__transaction_state`` (None without it);
    ``transaction_log_status``: ``read``, ``absent`` or ``ignored``.

    For the report's time charts, collected as the replay walked the batches: ``timeline``, batches per (topic,
    partition, ``bucket``) where a bucket is ``floor(max_timestamp / timeline_ms)`` (batches without a timestamp
    are in no bucket); ``txn_durations``, completed transactions per (``aborted``, ``bucket``) of the time from
    their first batch to their marker (buckets of :data:`~idemcore.audit.replayer.DURATION_EDGES_MS`; -1: the
    marker is older, -2: no timestamp). None: the input did not provide them (a report built by hand).
    """

    findings: pa.Table
    partitions: pa.Table
    open_txns: pa.Table
    batches: int
    seconds: float
    order_by: str
    hanging_after_ms: int
    now_ms: int
    source: str = ""
    transaction_log: TransactionLog | None = None
    transaction_log_status: str = LOG_ABSENT
    timeline: pa.Table | None = None
    timeline_ms: int = 0
    txn_durations: pa.Table | None = None

    @classmethod
    def from_results(cls, results: Iterable[TaskResult], *, order_by: str, seconds: float,
                     hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS, now_ms: int | None = None,
                     source: str = "", transaction_log: TransactionLog | None = None,
                     transaction_log_ignored: bool = False, transaction_log_status: str | None = None
                     ) -> AuditReport:
        """Merge task results. ``now_ms`` (default: the newest batch timestamp seen) is when open
        transactions are judged: one whose producer last wrote more than ``hanging_after_ms`` before
        is a candidate, as Kafka's ``kafka-transactions.sh find-hanging`` collects them. With the
        coordinator's ``transaction_log`` a candidate is hanging only if the coordinator would write no
        marker for it (:meth:`TransactionLog.judge`); without one, every candidate is hanging, unconfirmed
        (``transaction_log_ignored``: the log was there but not read, which the reasons say;
        ``transaction_log_status``: the status to report instead, e.g. ``refused`` over the wire)."""
        if hanging_after_ms < 0:
            raise ValueError(f"hanging_after_ms must be >= 0, got {hanging_after_ms}")
        results = list(results) or [TaskResult.empty(order_by)]  # no rows at all: an empty report
        batches = sum(r.batches for r in results)
        if now_ms is None:
            now_ms = max((r.max_timestamp for r in results if r.batches), default=0)
        findings = _concat([r.findings for r in results])
        partitions = _concat([r.partitions for r in results])
        open_txns = _concat([r.open_txns for r in results])
        duplicated = partitions.group_by([TOPIC, "partition"]).aggregate([("batches", "count")])
        if duplicated.num_rows != partitions.num_rows:
            raise ValueError("a (topic, partition) stream was split across tasks; each task must own whole streams")

        idle = now_ms - open_txns.column("last_timestamp").to_numpy()
        open_txns = open_txns.append_column("idle_ms", pa.array(idle, pa.int64()))
        status = LOG_READ if transaction_log is not None else LOG_IGNORED if transaction_log_ignored else LOG_ABSENT
        if transaction_log_status is not None:
            status = transaction_log_status
        open_txns = judge_open_txns(open_txns, hanging_after_ms, transaction_log, status, int(now_ms))
        earliest = open_txns.group_by([TOPIC, "partition"]).aggregate([("first_offset", "min")])
        partitions = partitions.join(earliest, [TOPIC, "partition"], join_type="left outer")
        first_open = partitions.column("first_offset_min")
        lso = pc.if_else(pc.is_null(first_open), partitions.column("log_end_offset"),
                         pc.min_element_wise(first_open, partitions.column("log_end_offset")))
        partitions = partitions.drop_columns(["first_offset_min"]).append_column("last_stable_offset", lso)
        partitions = partitions.sort_by([(TOPIC, "ascending"), ("partition", "ascending")])
        open_txns = open_txns.sort_by([(TOPIC, "ascending"), ("partition", "ascending"), ("first_offset", "ascending")])
        findings = findings.sort_by([(TOPIC, "ascending"), ("partition", "ascending"), (order_by, "ascending")])
        timeline, timeline_ms = merge_timelines([(r.timeline, r.timeline_ms) for r in results])
        durations = merge_durations([r.txn_durations for r in results])
        return cls(findings, partitions, open_txns, batches, seconds, order_by, hanging_after_ms, int(now_ms), source,
                   transaction_log, status, timeline, timeline_ms, durations)

    # ------------------------------------------------------------ views

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0

    def finding_counts(self) -> dict[str, int]:
        """Batches per finding name, plus ``hanging_transaction`` (transactions); findings that occurred only."""
        counts = {row["finding"]: row["finding_count"]
                  for row in _rows(self.findings.group_by("finding").aggregate([("finding", "count")]))}
        hanging = self.hanging_transactions().num_rows
        if hanging:
            counts[Finding.HANGING_TRANSACTION.label] = hanging
        return {f.label: counts[f.label] for f in Finding if f.label in counts}

    def counts_by_stream(self) -> pa.Table:
        """Per topic, partition and producer: how many of each finding (hanging transactions included)."""
        per_batch = self.findings.group_by([*_STREAM, "finding"]).aggregate([("finding", "count")])
        per_batch = per_batch.rename_columns([*_STREAM, "finding", "count"])
        hanging = self.hanging_transactions().group_by(_STREAM).aggregate([("first_offset", "count")])
        hanging = pa.table({**{name: hanging.column(name) for name in _STREAM},
                            "finding": pa.array([Finding.HANGING_TRANSACTION.label] * hanging.num_rows, pa.string()),
                            "count": hanging.column("first_offset_count")})
        both = _concat([per_batch, hanging.cast(per_batch.schema)])
        return both.sort_by([(name, "ascending") for name in [*_STREAM, "finding"]])

    def _of(self, *names: str) -> pa.Table:
        return self.findings.filter(pc.is_in(self.findings.column("finding"), pa.array(names)))

    def gaps(self) -> pa.Table:
        """Sequence gaps: the missing sequences ``missing_first..missing_last`` before each batch found after them."""
        gaps = self._of(Finding.SEQUENCE_GAP.label)
        base = gaps.column("base_sequence").to_numpy().astype(np.int64)
        missing_last = (base - 1) % (INT32_MAX + 1)
        return pa.table({**{name: gaps.column(name) for name in [*_STREAM, "producer_epoch"]},
                         "missing_first": gaps.column("expected"),
                         "missing_last": pa.array(missing_last, pa.int64()),
                         "found_base_sequence": gaps.column("base_sequence"),
                         self.order_by: gaps.column(self.order_by)})

    def zombie_writes(self) -> pa.Table:
        """Writes with an old epoch (``epoch_regression`` and ``fenced``): the zombie's and the current epoch."""
        zombies = self._of(Finding.EPOCH_REGRESSION.label, Finding.FENCED.label)
        return pa.table({**{name: zombies.column(name) for name in _STREAM},
                         "zombie_epoch": zombies.column("producer_epoch"), "current_epoch": zombies.column("expected"),
                         "is_control": zombies.column("is_control"),
                         "coordinator_epoch": zombies.column("coordinator_epoch"), "finding": zombies.column("finding"),
                         "error_code": zombies.column("error_code"), self.order_by: zombies.column(self.order_by)})

    def hanging_transactions(self) -> pa.Table:
        """Hanging transactions: open ones idle longer than ``hanging_after_ms`` that the coordinator's log
        confirms (verdict ``hanging``), or every such one without a log (``hanging_unconfirmed``)."""
        return self.open_txns.filter(self.open_txns.column("hanging"))

    def open_not_hanging(self) -> pa.Table:
        """Open transactions that are not hanging: idle ``hanging_after_ms`` or less (``recent``), or older but
        still tracked by the coordinator (``cleared``)."""
        return self.open_txns.filter(pc.invert(self.open_txns.column("hanging")))

    def _verdict(self, *verdicts: str) -> pa.Table:
        return self.open_txns.filter(pc.is_in(self.open_txns.column("verdict"), pa.array(verdicts, pa.string())))

    def hanging_candidates(self) -> pa.Table:
        """Open transactions idle longer than ``hanging_after_ms``: what find-hanging asks the coordinator about
        (verdict ``hanging``, ``hanging_unconfirmed`` or ``cleared``)."""
        return self._verdict(HANGING, UNCONFIRMED, CLEARED)

    def cleared(self) -> pa.Table:
        """Candidates the coordinator's log clears: it still tracks their partition and will write the marker."""
        return self._verdict(CLEARED)

    def recent(self) -> pa.Table:
        """Open transactions idle ``hanging_after_ms`` or less: not candidates yet."""
        return self._verdict(RECENT)

    def hanging_check(self) -> dict[str, Any]:
        """How the candidates were judged: ``transaction_log`` (``read``, ``absent``, ``ignored``), what was
        read, and how many candidates were confirmed hanging, cleared, or left unconfirmed."""
        verdicts = self.open_txns.column("verdict").to_pylist()
        log = self.transaction_log
        return {"transaction_log": self.transaction_log_status,
                "read": log.describe() if log is not None else None,
                "transaction_state_partitions": list(log.partitions) if log is not None else [],
                "transactional_ids": len(log.transactions) if log is not None else 0,
                "candidates": sum(v != RECENT for v in verdicts), "confirmed": verdicts.count(HANGING),
                "cleared": verdicts.count(CLEARED), "unconfirmed": verdicts.count(UNCONFIRMED)}

    def transactions(self) -> dict[str, int]:
        """Totals: ``committed``, ``aborted``, ``aborted_records`` (skipped by read_committed consumers), ``open``
        at the end = ``hanging`` + ``open_not_hanging``."""
        totals = {name: int(pc.sum(self.partitions.column(column)).as_py() or 0)
                  for name, column in (("committed", "committed_txns"), ("aborted", "aborted_txns"),
                                       ("aborted_records", "aborted_records"))}
        hanging = self.hanging_transactions().num_rows
        return {**totals, "open": self.open_txns.num_rows, "hanging": hanging,
                "open_not_hanging": self.open_txns.num_rows - hanging}

    def held_partitions(self) -> pa.Table:
        """Partitions whose last stable offset is held below the log end offset by an open transaction, with
        the transaction holding it (the earliest open one: its producer, ``idle_ms`` and ``hanging``)."""
        held = self.partitions.filter(pc.less(self.partitions.column("last_stable_offset"),
                                              self.partitions.column("log_end_offset")))
        held = held.select([TOPIC, "partition", "last_stable_offset", "log_end_offset"])
        holders = self.open_txns.select([TOPIC, "partition", "first_offset", "producer_id", "producer_epoch",
                                         "idle_ms", "hanging"]).rename_columns(
            [TOPIC, "partition", "last_stable_offset", "producer_id", "producer_epoch", "idle_ms", "hanging"])
        # One open transaction per (partition, producer) and distinct first offsets: at most one match each.
        held = held.join(holders, [TOPIC, "partition", "last_stable_offset"], join_type="left outer")
        return held.sort_by([(TOPIC, "ascending"), ("partition", "ascending")])

    def producers(self) -> pa.Table:
        """Per (topic, partition, producer) with a finding or a transaction open at the end: one count column
        per finding (0 when none), then the open transaction (``open_txn_first_offset``, ``idle_ms``,
        ``hanging``, ``verdict``, ``transactional_id``; null without one). Written as ``producers.parquet``."""
        counts = self.counts_by_stream()
        keys = _concat([counts.select(_STREAM), self.open_txns.select(_STREAM)]).group_by(_STREAM).aggregate([])
        keys = keys.sort_by([(name, "ascending") for name in _STREAM])
        n = keys.num_rows
        indexed = keys.append_column("_row", pa.array(np.arange(n, dtype=np.int64)))
        found = counts.join(indexed, _STREAM)
        rows, names = found.column("_row").to_numpy(), found.column("finding").to_numpy(zero_copy_only=False)
        number = found.column("count").to_numpy()
        columns: dict[str, pa.Array] = {}
        for finding in Finding:
            if finding is not Finding.NONE:
                count = np.zeros(n, np.int64)
                mine = names == finding.label
                count[rows[mine]] = number[mine]  # one (stream, finding) row each
                columns[finding.label] = pa.array(count)
        opened = self.open_txns.join(indexed, _STREAM)
        at = opened.column("_row").to_numpy()
        absent = np.ones(n, bool)
        absent[at] = False
        for name, source, dtype in (("open_txn_first_offset", "first_offset", np.int64),
                                    ("idle_ms", "idle_ms", np.int64), ("hanging", "hanging", np.bool_)):
            values = np.zeros(n, dtype)
            values[at] = opened.column(source).to_numpy(zero_copy_only=False)
            columns[name] = pa.array(values, mask=absent)
        for name in ("verdict", "transactional_id"):
            texts: list[str | None] = [None] * n
            for row, text in zip(at.tolist(), opened.column(name).to_pylist(), strict=True):
                texts[row] = text
            columns[name] = pa.array(texts, pa.string())
        return pa.table({**{name: keys.column(name) for name in _STREAM}, **columns})

    def last_stable_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition): the last stable offset (first offset of the earliest open transaction, else
        the log end offset)."""
        return {(row[TOPIC], row["partition"]): row["last_stable_offset"]
                for row in _rows(self.partitions.select([TOPIC, "partition", "last_stable_offset"]))}

    # ------------------------------------------------------------ output

    def summary(self) -> dict[str, Any]:
        """Totals, per-partition summaries and the first :data:`SUMMARY_ROWS` rows of each detail list, as
        JSON-ready values: bounded by the number of partitions, whatever the batches and producers. The
        per-batch findings and the per-producer detail are in the Parquet files of ``files``."""
        per_partition: dict[tuple[str, int], dict[str, int]] = {}
        by_partition = self.findings.group_by([TOPIC, "partition", "finding"]).aggregate([("finding", "count")])
        hanging = self.hanging_transactions().group_by([TOPIC, "partition"]).aggregate([("producer_id", "count")])
        for row in _rows(by_partition):
            per_partition.setdefault((row[TOPIC], row["partition"]), {})[row["finding"]] = row["finding_count"]
        for row in _rows(hanging):
            per_partition.setdefault((row[TOPIC], row["partition"]), {})[Finding.HANGING_TRANSACTION.label] = \
                row["producer_id_count"]
        order = [f.label for f in Finding]
        partitions = [{**row, "findings": dict(sorted(per_partition.get((row[TOPIC], row["partition"]), {}).items(),
                                                      key=lambda item: order.index(item[0])))}
                      for row in _rows(self.partitions)]

        def first(table: pa.Table) -> list[dict[str, Any]]:
            return _rows(table.slice(0, SUMMARY_ROWS))

        return {
            "source": self.source, "order_by": self.order_by, "batches": self.batches,
            "findings": self.finding_counts(), "seconds": round(self.seconds, 3),
            "batches_per_s": round(self.batches_per_s), "now_ms": self.now_ms,
            "hanging_after_ms": self.hanging_after_ms, "transactions": self.transactions(),
            "hanging_check": self.hanging_check(),
            "partitions": partitions, "lso_held": _rows(self.held_partitions()),
            "detail_rows": SUMMARY_ROWS,
            "gaps": first(self.gaps()), "zombie_writes": first(self.zombie_writes()),
            "hanging_transactions": first(self.hanging_transactions()),
            "open_not_hanging": first(self.open_not_hanging()),
            "files": {name: file for name, file in REPORT_FILES.items() if name != "summary"},
        }

    def write(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """Write ``findings.parquet`` (every batch with a finding), ``producers.parquet`` (:meth:`producers`)
        and ``summary.json`` (:meth:`summary`, one compact line) into ``out_dir``; each appears whole or not
        at all."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {name: out / file for name, file in REPORT_FILES.items()}
        partial = {name: path.with_name(f".{path.name}.partial") for name, path in paths.items()}
        write_parquet(self.findings, partial["findings"])
        write_parquet(self.producers(), partial["producers"])
        partial["summary"].write_text(json.dumps(self.summary(), separators=(",", ":")) + "\n")
        for name, path in paths.items():
            os.replace(partial[name], path)
        return paths

    def compare(self, truth: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """``{finding: (expected, found)}`` over the findings of ``truth`` (name -> count) and of this report."""
        found = self.finding_counts()
        return {name: (int(truth.get(name, 0)), found.get(name, 0))
                for name in [f.label for f in Finding if f.label in truth or f.label in found]}
