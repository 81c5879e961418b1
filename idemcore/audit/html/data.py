"""What the HTML report draws, computed from an :class:`~idemcore.audit.report.AuditReport`'s tables.

Everything here is bounded by the caps of :class:`Limits`, whatever the number of batches: time series are
aggregated into ``time_bins`` bins, per-partition charts keep the partitions with the most findings (the others
are summed into one row and counted), tables keep their first rows and say how many were left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from idemcore.audit.columns import TOPIC
from idemcore.findings import Finding

if TYPE_CHECKING:
    from idemcore.audit.report import AuditReport

#: A batch's ``max_timestamp`` at or below this is no time (a column missing from the source is filled with 0;
#: Kafka writes -1 for no timestamp).
NO_TIMESTAMP = 0
DUPLICATE = Finding.DUPLICATE.label
HANGING = Finding.HANGING_TRANSACTION.label
#: Every finding the kernel or the audit can report, in registry order.
LABELS = [f.label for f in Finding if f is not Finding.NONE]


@dataclass(frozen=True)
class Limits:
    """How much of a big audit the page shows: rows per table, partitions and transactions per chart, and the
    bins of every time axis. What is left out is counted on the page."""

    rows: int = 50  # rows of each detail table (gaps, zombies, each finding's batches, open transactions, ...)
    partition_rows: int = 500  # rows of the per-partition table
    chart_partitions: int = 40  # partitions drawn per chart (the rest summed into one row)
    panels: int = 8  # partitions drawn in detail, one panel each (those with the most findings)
    timeline_rows: int = 40  # open transactions on the timeline
    time_bins: int = 60  # bins of every time axis
    activity_partitions: int = 8  # partitions drawn one panel each by batches over time (the busiest; rest summed)

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Axis:
    """The x axis of the time charts: batch timestamps (``time``) or, when the data has none, the audit's
    ordering column (``seq_no``: arrival order, ``base_offset``: log order)."""

    time: bool
    label: str
    start: float
    stop: float
    edges: np.ndarray

    def bin_of(self, values: np.ndarray) -> np.ndarray:
        inner = self.edges[1:-1]
        return np.searchsorted(inner, values, side="right")

    @property
    def width(self) -> float:
        return float(self.edges[1] - self.edges[0])


@dataclass
class Prepared:
    """The report's tables reduced to what the page draws and lists."""

    report: AuditReport
    limits: Limits
    axis: Axis | None
    kinds: list[str]  # findings that occurred, registry order (hanging_transaction included)
    counts: dict[str, int]
    #: per partition row: findings of each kind (columns: ``kinds``)
    partition_kinds: np.ndarray
    #: per partition row: findings other than duplicates (hanging transactions included)
    anomalies: np.ndarray
    #: per finding row: its partition's row in ``report.partitions`` and its kind's index in ``kinds``
    finding_partition: np.ndarray
    finding_kind: np.ndarray
    finding_x: np.ndarray  # the axis value of each finding (its timestamp, or its ordering column)
    open_partition: np.ndarray  # per open transaction: its partition's row
    lag: np.ndarray  # per partition: log end offset - last stable offset
    coordinator_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per open txn, -1: unknown


def partition_index(report: AuditReport, table: pa.Table) -> np.ndarray:
    """Each row's partition: its row in ``report.partitions`` (joined on topic and partition)."""
    if table.num_rows == 0:
        return np.zeros(0, np.int64)
    keyed = report.partitions.select([TOPIC, "partition"]).append_column(
        "_part", pa.array(np.arange(report.partitions.num_rows, dtype=np.int64)))
    rows = table.select([TOPIC, "partition"]).append_column(
        "_row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    joined = rows.join(keyed, [TOPIC, "partition"], join_type="left outer")
    out = np.full(table.num_rows, -1, np.int64)
    out[joined.column("_row").to_numpy()] = joined.column("_part").fill_null(-1).to_numpy()
    return out


def _values(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy() if table.num_rows else np.zeros(0, np.int64)


def coordinator_starts(report: AuditReport) -> np.ndarray:
    """Per open transaction: when the coordinator's log says its transactional id's transaction started
    (``txnStartTimestamp``), or -1 (no log, no id, or the id now holds another producer)."""
    log = report.transaction_log
    starts = np.full(report.open_txns.num_rows, -1, np.int64)
    if log is None or report.open_txns.num_rows == 0:
        return starts
    ids = report.open_txns.column("transactional_id").to_pylist()
    pids = report.open_txns.column("producer_id").to_pylist()
    for k, (tid, pid) in enumerate(zip(ids, pids, strict=True)):
        txn = log.transactions.get(tid) if tid is not None else None
        if txn is not None and txn.producer_id == pid and txn.start_timestamp_ms > NO_TIMESTAMP:
            starts[k] = txn.start_timestamp_ms
    return starts


def _axis(report: AuditReport, limits: Limits, finding_times: np.ndarray) -> Axis | None:
    times = [finding_times[finding_times > NO_TIMESTAMP]]
    open_last = _values(report.open_txns, "last_timestamp")
    times.append(open_last[open_last > NO_TIMESTAMP])
    known = np.concatenate(times) if times else np.zeros(0, np.int64)
    if len(known):
        start = float(known.min())
        stop = float(max(known.max(), report.now_ms))
        label = "batch timestamp (UTC)"
        time = True
    else:
        order = report.order_by
        if report.findings.num_rows == 0 or order not in report.findings.column_names:
            return None
        values = report.findings.column(order).to_numpy()
        start, stop = float(values.min()), float(values.max())
        label = {"seq_no": "arrival order (seq_no: the data has no batch timestamps)",
                 "base_offset": "offset (base_offset: the data has no batch timestamps)"}.get(
            order, f"{order} (the data has no batch timestamps)")
        time = False
    if stop <= start:
        pad = 1000.0 if time else 1.0
        start, stop = start - pad, stop + pad
    edges = np.linspace(start, stop, limits.time_bins + 1)
    return Axis(time, label, start, stop, edges)


def prepare(report: AuditReport, limits: Limits) -> Prepared:
    findings = report.findings
    counts = report.finding_counts()
    kinds = [label for label in LABELS if label in counts]
    n_parts = report.partitions.num_rows
    finding_partition = partition_index(report, findings)
    if findings.num_rows:
        finding_kind = pc.index_in(findings.column("finding"), value_set=pa.array(kinds, pa.string())).to_numpy(
            zero_copy_only=False)
        finding_kind = np.nan_to_num(finding_kind, nan=-1).astype(np.int64)
    else:
        finding_kind = np.zeros(0, np.int64)
    finding_times = _values(findings, "max_timestamp") if "max_timestamp" in findings.column_names \
        else np.zeros(findings.num_rows, np.int64)
    axis = _axis(report, limits, finding_times)
    if axis is not None and not axis.time:
        finding_x = findings.column(report.order_by).to_numpy().astype(np.float64)
    else:
        finding_x = finding_times.astype(np.float64)
    partition_kinds = np.zeros((n_parts, len(kinds)), np.int64)
    ok = (finding_partition >= 0) & (finding_kind >= 0)
    if ok.any():
        flat = np.bincount(finding_partition[ok] * len(kinds) + finding_kind[ok], minlength=n_parts * len(kinds))
        partition_kinds += flat.reshape(n_parts, len(kinds))
    hanging = report.hanging_transactions()
    if hanging.num_rows and HANGING in kinds:
        rows = partition_index(report, hanging)
        partition_kinds[:, kinds.index(HANGING)] += np.bincount(rows[rows >= 0], minlength=n_parts)
    anomaly_columns = [k for k, label in enumerate(kinds) if label != DUPLICATE]
    anomalies = partition_kinds[:, anomaly_columns].sum(axis=1) if anomaly_columns else np.zeros(n_parts, np.int64)
    lag = (_values(report.partitions, "log_end_offset") - _values(report.partitions, "last_stable_offset"))
    return Prepared(report, limits, axis, kinds, counts, partition_kinds, anomalies, finding_partition, finding_kind,
                    finding_x, partition_index(report, report.open_txns), lag, coordinator_starts(report))


def top_partitions(score: np.ndarray, cap: int, keep_zero: bool = True) -> np.ndarray:
    """The partition rows a chart draws, in the report's order (topic, partition): all of them when they fit in
    ``cap``, else the ``cap`` with the highest ``score`` (ties: the report's order). ``keep_zero=False``: only
    rows scoring more than 0."""
    candidates = np.arange(len(score)) if keep_zero else np.flatnonzero(score > 0)
    if len(candidates) <= cap:
        return candidates
    return np.sort(candidates[np.argsort(-score[candidates], kind="stable")[:cap]])


def partition_label(report: AuditReport, row: int) -> str:
    return f"{report.partitions.column(TOPIC)[row].as_py()}-{report.partitions.column('partition')[row].as_py()}"


@dataclass(frozen=True)
class Activity:
    """Batches and findings per time bin for the busiest partitions (``rows``, one series each) and, when there
    are more, the rest summed (the last series). Bins are the report's ``timeline`` buckets merged by a power of
    two (``width_ms``, aligned to the epoch), so every count is exact: bin ``k`` holds the batches whose
    ``max_timestamp`` lies in ``[(first + k) * width_ms, (first + k + 1) * width_ms)``."""

    width_ms: int
    first: int  # the bin (``floor(max_timestamp / width_ms)``) of column 0
    rows: np.ndarray  # partition rows in ``report.partitions`` drawn each in its own series
    others: int  # partitions summed into the last series (0: none)
    batches: np.ndarray  # (series, bins)
    findings: np.ndarray  # (series, bins): batches with a finding other than a duplicate
    duplicates: np.ndarray  # (series, bins)
    untimed_findings: int  # findings on batches without a timestamp: in no bin

    @property
    def edges_ms(self) -> np.ndarray:
        return (self.first + np.arange(self.batches.shape[1] + 1, dtype=np.int64)) * self.width_ms


def activity(prepared: Prepared) -> Activity | None:
    """The data of the per-partition batches-over-time chart; None when the report has no timeline (not
    collected for this input) or no batch had a timestamp."""
    report, limits = prepared.report, prepared.limits
    timeline = report.timeline
    if timeline is None or timeline.num_rows == 0 or report.timeline_ms <= 0:
        return None
    part = partition_index(report, timeline)
    buckets = timeline.column("bucket").to_numpy()
    counts = timeline.column("batches").to_numpy()
    findings = report.findings
    stamps = _values(findings, "max_timestamp") if "max_timestamp" in findings.column_names \
        else np.zeros(findings.num_rows, np.int64)
    timed = stamps > NO_TIMESTAMP
    finding_buckets = stamps[timed] // report.timeline_ms
    low = int(min(buckets.min(), finding_buckets.min(initial=buckets.min())))
    high = int(max(buckets.max(), finding_buckets.max(initial=buckets.max())))
    factor = 1  # merge buckets by powers of two until the span fits the axis: bins stay exact and aligned
    while high // factor - low // factor + 1 > limits.time_bins:
        factor *= 2
    first, bins = low // factor, high // factor - low // factor + 1
    n = report.partitions.num_rows
    per_partition = np.zeros((n, bins), np.int64)
    ok = part >= 0
    np.add.at(per_partition, (part[ok], buckets[ok] // factor - first), counts[ok])
    duplicate = prepared.kinds.index(DUPLICATE) if DUPLICATE in prepared.kinds else -1
    kind = prepared.finding_kind[timed]
    where = prepared.finding_partition[timed]
    columns = finding_buckets // factor - first
    found = np.zeros((n, bins), np.int64)
    dups = np.zeros((n, bins), np.int64)
    good = where >= 0
    np.add.at(found, (where[good & (kind != duplicate)], columns[good & (kind != duplicate)]), 1)
    np.add.at(dups, (where[good & (kind == duplicate)], columns[good & (kind == duplicate)]), 1)
    cap = limits.activity_partitions
    rows = top_partitions(per_partition.sum(axis=1), cap - 1 if n > cap else cap)
    others = n - len(rows)
    rest = np.ones(n, bool)
    rest[rows] = False

    def series(matrix: np.ndarray) -> np.ndarray:
        return np.vstack([matrix[rows], matrix[rest].sum(axis=0)]) if others else matrix[rows]

    return Activity(report.timeline_ms * factor, first, rows, others, series(per_partition), series(found),
                    series(dups), int((~timed).sum()))
