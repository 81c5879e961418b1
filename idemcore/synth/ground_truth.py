"""Checking an audit against the ground truth of a generated dataset: counts, and every planted batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from idemcore.audit import AuditReport
from idemcore.findings import Finding


@dataclass(frozen=True)
class TruthCheck:
    """``rows``: (finding, planted, found) per finding; ``missed``/``unexpected``: planted batches not found
    and findings nothing planted (in-window duplicates are checked by count only: the stream's own retries)."""

    rows: list[tuple[str, int, int]]
    missed: list[dict[str, Any]] = field(default_factory=list)
    unexpected: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missed and not self.unexpected and all(want == got for _, want, got in self.rows)


def _key(row: dict[str, Any], order_by: str) -> tuple:
    return row["topic"], int(row["partition"]), int(row["producer_id"]), int(row[order_by]), row["finding"]


def check_against_truth(report: AuditReport, truth: dict[str, Any]) -> TruthCheck:
    """Compare ``report`` with ``truth`` (as written by :func:`idemcore.dataset.generate`, either format: a Kafka
    log directory's report is ordered by ``base_offset``, as its truth)."""
    order_by = truth.get("order_by", "seq_no")
    rows = [(name, want, got) for name, (want, got) in report.compare(truth["findings"]).items()]
    hanging = Finding.HANGING_TRANSACTION.label
    # Planted batches are named by their arrival order (Parquet attempts: seq_no) or by their offset (a Kafka log
    # directory: base_offset, the truth's order_by).
    planted = {_key(p, order_by if order_by in p else "seq_no") for p in truth["planted"] if p["finding"] != hanging}
    found_rows = report.findings.select(["topic", "partition", "producer_id", order_by, "finding"]).to_pylist()
    found = {_key(r, order_by) for r in found_rows if r["finding"] != Finding.DUPLICATE.label}
    planted_hanging = {(p["topic"], p["partition"], p["producer_id"]) for p in truth["planted"]
                       if p["finding"] == hanging}
    found_hanging = {(r["topic"], r["partition"], r["producer_id"])
                     for r in report.hanging_transactions().to_pylist()}
    names = ("topic", "partition", "producer_id", order_by, "finding")
    missed = [dict(zip(names, key, strict=True)) for key in sorted(planted - found)]
    missed += [{"topic": t, "partition": p, "producer_id": pid, "finding": hanging}
               for t, p, pid in sorted(planted_hanging - found_hanging)]
    unexpected = [dict(zip(names, key, strict=True)) for key in sorted(found - planted)]
    unexpected += [{"topic": t, "partition": p, "producer_id": pid, "finding": hanging}
                   for t, p, pid in sorted(found_hanging - planted_hanging)]
    return TruthCheck(rows, missed, unexpected)
