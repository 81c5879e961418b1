"""The HTML page: one self-contained file (inline CSS, charts as inline SVG, no script, nothing fetched).

Every string that comes from the data or the command line goes through :func:`esc` (topic names, transactional
ids, file names, reasons): a topic called ``<script>`` is shown, never run. A Content-Security-Policy that allows
no script and no fetch backs that up.
"""

from __future__ import annotations

import datetime as dt
import html
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idemcore.audit.columns import TOPIC
from idemcore.audit.find_hanging import LOG_READ, NOT_CONFIRMED
from idemcore.audit.html import charts
from idemcore.audit.html.data import DUPLICATE, HANGING, LABELS, Limits, Prepared, activity, prepare
from idemcore.audit.replayer import NEGATIVE_DURATION, NO_DURATION
from idemcore.findings import FINDINGS, Finding

if TYPE_CHECKING:
    from idemcore.audit.report import AuditReport

_CSS = """
:root { --ink: #1d2330; --muted: #5b6475; --line: #d9dde5; --band: #f5f7fa; --accent: #1f5fbf; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: var(--ink);
       background: #fff; }
header { background: #1d2330; color: #fff; padding: 18px 28px 14px; }
header h1 { margin: 0 0 4px; font-size: 21px; font-weight: 600; }
header .sub { color: #c9d1e0; font-size: 13px; overflow-wrap: anywhere; }
nav { position: sticky; top: 0; background: #fff; border-bottom: 1px solid var(--line); padding: 6px 28px;
      font-size: 13px; z-index: 1; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; white-space: nowrap; }
main { padding: 4px 28px 40px; max-width: 1280px; }
section { margin-top: 26px; }
h2 { font-size: 17px; margin: 0 0 8px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
p, li { max-width: 980px; }
.muted, .note { color: var(--muted); }
.note { font-size: 13px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0 4px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 130px;
        background: var(--band); }
.card .n { font-size: 20px; font-weight: 600; }
.card .l { font-size: 12px; color: var(--muted); }
.card.bad .n { color: #c62828; }
table { border-collapse: collapse; margin: 6px 0 4px; font-size: 12.5px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 9px; text-align: left; vertical-align: top;
         white-space: nowrap; }
td.wrap { white-space: normal; min-width: 260px; max-width: 560px; }
th { background: var(--band); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:target { background: #fff4c2; }
tr.zero td { color: #9aa1ad; }
.scroll { overflow-x: auto; max-width: 100%; }
pre { background: var(--band); border: 1px solid var(--line); border-radius: 4px; padding: 8px 10px;
      white-space: pre-wrap; overflow-wrap: anywhere; font-size: 12.5px; }
code { font-size: 12.5px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 8px 0; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
figure.chart { margin: 10px 0 4px; }
figure.chart svg { width: 100%; height: auto; max-width: 1100px; display: block; }
figcaption { font-size: 12.5px; color: var(--muted); margin-top: 2px; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px;
          vertical-align: baseline; }
.verdict { font-weight: 600; }
.verdict.hanging { color: #c62828; }
.verdict.hanging_unconfirmed { color: #e65100; }
.verdict.cleared { color: #2e7d32; }
.verdict.recent { color: var(--muted); }
.more { font-size: 12.5px; color: #8a4b00; margin: 2px 0 10px; }
footer { color: var(--muted); font-size: 12px; padding: 18px 28px; border-top: 1px solid var(--line); }
"""

#: The page's generator tag: what marks a file as an idemcore report (:func:`is_html_report`).
GENERATOR = "idemcore audit report"
#: No script, no fetch: styles and images from the page itself only.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def esc(value: Any) -> str:
    """``value`` as HTML text (``&``, ``<``, ``>``, quotes escaped)."""
    return html.escape("" if value is None else str(value), quote=True)


def _n(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return esc(value)


def _time(ms: Any) -> str:
    """Epoch ms as UTC (``2023-11-14 22:13:20.467Z``); ``–`` for no timestamp."""
    if ms is None or int(ms) <= 0:
        return "–"
    try:
        stamp = dt.datetime.fromtimestamp(int(ms) / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return esc(ms)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.") + f"{int(ms) % 1000:03d}Z"


def _duration(ms: Any) -> str:
    if ms is None:
        return "–"
    ms = int(ms)
    if abs(ms) < 10_000:
        return f"{ms:,} ms"
    seconds = ms / 1000
    if abs(seconds) < 3600:
        return f"{ms:,} ms ({seconds / 60:.1f} min)"
    if abs(seconds) < 3 * 86400:
        return f"{ms:,} ms ({seconds / 3600:.1f} h)"
    return f"{ms:,} ms ({seconds / 86400:.1f} d)"


def _id(value: Any) -> str:
    """An identifier (producer id, epoch): digits as they are, no thousands separators."""
    return "–" if value is None else esc(value)


class Column:
    """A table column: header, the row's key, how a value is shown (HTML), numeric (right-aligned), ``wrap``:
    long text that wraps (other cells do not)."""

    def __init__(self, header: str, key: str, show: Callable[[Any], str] = _n, numeric: bool | None = None,
                 wrap: bool = False):
        self.header, self.key, self.show, self.wrap = header, key, show, wrap
        self.numeric = show in (_n, _id) if numeric is None else numeric

    def cell(self, value: Any) -> str:
        css = "num" if self.numeric else "wrap" if self.wrap else ""
        return f'<td class="{css}">{self.show(value)}</td>' if css else f"<td>{self.show(value)}</td>"


def _table(columns: Sequence[Column], rows: Iterable[dict[str, Any]], *,
           row_id: Callable[[int, dict], str] | None = None, row_class: Callable[[dict], str] | None = None,
           css_class: str = "") -> str:
    head = "".join(f'<th class="num">{esc(c.header)}</th>' if c.numeric else f"<th>{esc(c.header)}</th>"
                   for c in columns)
    body = []
    for k, row in enumerate(rows):
        attrs = ""
        if row_id is not None:
            attrs += f' id="{esc(row_id(k, row))}"'
        if row_class is not None and row_class(row):
            attrs += f' class="{esc(row_class(row))}"'
        cells = "".join(c.cell(row.get(c.key)) for c in columns)
        body.append(f"<tr{attrs}>{cells}</tr>")
    cls = f' class="{esc(css_class)}"' if css_class else ""
    return f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _more(total: int, shown: int, what: str, where: str = "") -> str:
    if total <= shown:
        return ""
    return (f'<p class="more">showing the first {shown:,} of {total:,} {esc(what)}: {total - shown:,} more not shown'
            + (f" ({esc(where)})" if where else "") + "</p>")


def _figure(svg: str | None, caption: str, name: str) -> str:
    if svg is None:
        return ""
    return f'<figure class="chart" id="chart-{esc(name)}-figure">{svg}<figcaption>{caption}</figcaption></figure>'


def _unavailable(name: str, text: str) -> str:
    """Where a chart would be: why it is not (``id="chart-NAME-unavailable"``), never an empty or made-up chart."""
    return f'<p class="muted" id="chart-{esc(name)}-unavailable">{text}</p>'


def _swatch(color: str) -> str:
    return f'<span class="swatch" style="background:{esc(color)}"></span>'


def _verdict(value: Any) -> str:
    return f'<span class="verdict {esc(value)}">{esc(value)}</span>' if value else "–"


def _code(value: Any) -> str:
    return f"<code>{esc(value)}</code>" if value is not None else "–"


def _text(value: Any) -> str:
    return esc(value) if value is not None else "–"


# ---------------------------------------------------------------- sections


def _header(report: AuditReport, title: str, generated: str) -> str:
    return (f"<header><h1>{esc(title)}</h1><div class=\"sub\">{esc(report.source or 'no source named')} · "
            f"{report.batches:,} batches in {report.partitions.num_rows:,} (topic, partition) streams · written "
            f"{esc(generated)}</div></header>")


_SECTIONS = [("findings", "Findings"), ("over-time", "Over time"), ("partitions", "Partitions"),
             ("transactions", "Transactions"), ("lso", "Last stable offset"), ("hanging", "Open transactions"),
             ("gaps", "Gaps"), ("zombies", "Zombie writes"), ("details", "Finding details"),
             ("provenance", "Command and dataset")]


def _nav(extra: Sequence[tuple[str, str]]) -> str:
    return "<nav>" + "".join(f'<a href="#{esc(anchor)}">{esc(name)}</a>' for anchor, name in [*_SECTIONS, *extra]) \
        + "</nav>"


def _cards(prepared: Prepared) -> str:
    report = prepared.report
    counts = prepared.counts
    txns = report.transactions()
    anomalies = sum(n for name, n in counts.items() if name != DUPLICATE)
    held = int((prepared.lag > 0).sum())
    items = [
        (f"{report.batches:,}", "batches audited", False),
        (f"{counts.get(DUPLICATE, 0):,}", "duplicates (retries)", False),
        (f"{anomalies:,}", "other findings", anomalies > 0),
        (f"{txns['hanging']:,}", "hanging transactions", txns["hanging"] > 0),
        (f"{held:,}", "partitions with a held last stable offset", held > 0),
        (f"{txns['committed']:,} / {txns['aborted']:,}", "transactions committed / aborted", False),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card{" bad" if bad else ""}"><div class="n">{esc(n)}</div><div class="l">{esc(label)}</div></div>'
        for n, label, bad in items) + "</div>"


def _findings_section(prepared: Prepared) -> str:
    counts = prepared.counts
    partitions_with = {label: int((prepared.partition_kinds[:, k] > 0).sum()) for k, label in enumerate(prepared.kinds)}
    rows = []
    for label in LABELS:
        info = FINDINGS[Finding.parse(label)]
        rows.append({"finding": label, "count": counts.get(label, 0), "partitions": partitions_with.get(label, 0),
                     "meaning": info.meaning})

    def name(label: Any) -> str:
        color = charts.KIND_COLORS.get(label, "#999999")
        if counts.get(label, 0):
            return f'{_swatch(color)}<a href="#finding-{esc(label)}">{esc(label)}</a>'
        return f"{_swatch(color)}{esc(label)}"

    table = _table([Column("finding", "finding", name, numeric=False), Column("count", "count"),
                    Column("partitions", "partitions"), Column("meaning", "meaning", _text, numeric=False, wrap=True)],
                   rows, row_class=lambda row: "" if row["count"] else "zero")
    return (f'<section id="findings"><h2>Findings</h2>{_cards(prepared)}'
            '<p class="note">Batches per finding (hanging transactions: transactions), over every (topic, partition) '
            "stream; each name links to its batches below. The rules are in docs/rules.md §5.</p>"
            f"{table}</section>")


def _activity_figure(prepared: Prepared) -> str:
    """Batches and findings per partition over time, from the timeline the replay collected."""
    report = prepared.report
    if report.timeline is None:
        return _unavailable("partition-activity", "Batches per partition over time: not available for this input "
                                                  "(the report carries no timeline of its batches).")
    data = activity(prepared)
    if data is None:
        why = "no batch has a timestamp (max_timestamp)" if report.batches else "no batches"
        return _unavailable("partition-activity", f"Batches per partition over time: not available for this input: "
                                                  f"{why}.")
    caption = (f"Batches per time bin of {esc(_duration(data.width_ms))} by their <code>max_timestamp</code>, one "
               "panel per partition (the busiest by batches"
               + (f"; the last panel sums the other {data.others:,}" if data.others else "")
               + "); markers on the right axis: batches with a finding in that bin (red: other than duplicates, "
               "grey: duplicates). Counts are exact: the replay counts every batch per partition and time bucket.")
    if data.untimed_findings:
        caption += f" {data.untimed_findings:,} findings are on batches without a timestamp and in no bin."
    return _figure(charts.partition_activity(prepared, data), caption, "partition-activity")


def _over_time_section(prepared: Prepared) -> str:
    axis = prepared.axis
    out = ['<section id="over-time"><h2>Findings over time</h2>']
    if axis is None:
        out.append('<p class="muted">No finding to place in time: the audit found no batch with a finding.</p>')
        out.append(_activity_figure(prepared))
        out.append("</section>")
        return "".join(out)
    basis = ("the batch timestamps (each finding at its batch's <code>max_timestamp</code>)" if axis.time
             else f"the ordering column <code>{esc(prepared.report.order_by)}</code> (the data has no batch "
                  "timestamps)")
    out.append(f'<p class="note">Time axis: {basis}, in {len(axis.edges) - 1} bins of '
               f"{esc(_duration(axis.width) if axis.time else f'{axis.width:,.0f}')} from "
               f"{esc(_time(axis.start) if axis.time else f'{axis.start:,.0f}')} to "
               f"{esc(_time(axis.stop) if axis.time else f'{axis.stop:,.0f}')}. The audit keeps the timestamp of "
               "every batch with a finding; of the other batches it keeps the counts per partition (the bars beside "
               "the heat map).</p>")
    out.append(_figure(charts.findings_over_time(prepared), "Findings per time bin over all partitions.",
                       "findings-over-time"))
    out.append(_activity_figure(prepared))
    svg, others = charts.partition_heatmap(prepared)
    caption = ("Each row a partition (its label links to its row in the partition table): findings other than "
               "duplicates per time bin, and its batches.")
    if others:
        caption += (f" {others:,} partitions with the fewest findings are summed into the last row, their "
                    f"batches averaged (at most {prepared.limits.chart_partitions} rows).")
    out.append(_figure(svg, caption, "partition-heatmap"))
    svg, left_out = charts.partition_panels(prepared)
    caption = ("The partitions with the most findings other than duplicates, one panel each: a cell per time bin "
               "and kind, darker for more; a hanging transaction is a line from its producer's last write to "
               "the audit's now.")
    if left_out:
        caption += f" {left_out:,} more partitions with findings are not drawn (at most {prepared.limits.panels})."
    out.append(_figure(svg, caption, "partition-panels"))
    out.append("</section>")
    return "".join(out)


def _partitions_section(prepared: Prepared) -> str:
    report, limits = prepared.report, prepared.limits
    n = report.partitions.num_rows
    order = np.arange(n)
    sorted_note = ""
    if n > limits.partition_rows:
        # The partitions an operator looks at first: findings, then a held last stable offset.
        order = np.lexsort((np.arange(n), -prepared.lag, -prepared.anomalies))[:limits.partition_rows]
        sorted_note = " Sorted by findings other than duplicates, then last stable offset lag."
    rows = []
    for row in order:
        values = report.partitions.slice(int(row), 1).to_pylist()[0]
        found = ", ".join(f'<a href="#finding-{esc(label)}">{esc(label)}</a> {int(prepared.partition_kinds[row, k]):,}'
                          for k, label in enumerate(prepared.kinds) if prepared.partition_kinds[row, k])
        rows.append({**values, "_row": int(row), "lag": int(prepared.lag[row]), "findings": found or "–"})
    columns = [Column("topic", TOPIC, _text, numeric=False), Column("partition", "partition"),
               Column("findings", "findings", lambda html_: str(html_), numeric=False, wrap=True),
               Column("batches", "batches"), Column("appended", "appended"), Column("duplicates", "duplicates"),
               Column("rejected", "rejected"), Column("records", "records"), Column("committed", "committed_txns"),
               Column("aborted", "aborted_txns"), Column("aborted records", "aborted_records"),
               Column("log end offset", "log_end_offset"), Column("last stable offset", "last_stable_offset"),
               Column("LSO lag", "lag")]
    return (f'<section id="partitions"><h2>Partitions</h2><p class="note">Per (topic, partition): batches, '
            "records appended, transactions completed, records of aborted transactions (a read_committed consumer "
            f"skips them), log end and last stable offsets.{sorted_note}</p>"
            + _table(columns, rows, row_id=lambda k, row: f"part-{row['_row']}")
            + _more(n, len(rows), "partitions") + "</section>")


def _transactions_section(prepared: Prepared) -> str:
    report = prepared.report
    txns = report.transactions()
    check = report.hanging_check()
    lines = [f"{txns['committed']:,} committed, {txns['aborted']:,} aborted ({txns['aborted_records']:,} records a "
             f"read_committed consumer skips), {txns['open']:,} still open at the end"
             + (f": {txns['hanging']:,} hanging, {txns['open_not_hanging']:,} not hanging." if txns["open"] else ".")]
    if check["transaction_log"] == LOG_READ:
        lines.append(f"Hanging check: {check['candidates']:,} candidate(s) idle more than "
                     f"{report.hanging_after_ms:,} ms; the transaction coordinator's log ({esc(check['read'])}, "
                     f"{check['transactional_ids']:,} transactional ids) confirms {check['confirmed']:,} as hanging "
                     f"and clears {check['cleared']:,}, as <code>kafka-transactions.sh find-hanging</code> would.")
    else:
        lines.append(f"Hanging check: {check['candidates']:,} candidate(s) idle more than "
                     f"{report.hanging_after_ms:,} ms, {esc(NOT_CONFIRMED[check['transaction_log']])} (with the "
                     "<code>__transaction_state</code> partitions in the audit each is confirmed or cleared).")
    completed = _completed_figure(prepared)
    svg = charts.transaction_durations(prepared)
    caption = ("How long the transactions open at the end have been open: each is placed by its idle time, a lower "
               "bound of its age" + ("; each transactional id's latest transaction is placed by the coordinator's "
                                     "start and last-update timestamps." if report.transaction_log is not None
                                     else "."))
    body = _figure(svg, caption, "transaction-durations") if svg else \
        '<p class="muted">No transaction was open at the end, and no transaction log was read.</p>'
    return (f'<section id="transactions"><h2>Transactions</h2><p>{"</p><p>".join(lines)}</p>{completed}{body}'
            "</section>")


def _completed_figure(prepared: Prepared) -> str:
    """The distribution of completed transactions' durations, from the histogram the replay collected."""
    report = prepared.report
    durations = report.txn_durations
    if durations is None:
        return _unavailable("completed-durations", "Durations of completed transactions: not available for this "
                                                   "input (the report carries no durations).")
    buckets = durations.column("bucket").to_numpy() if durations.num_rows else np.zeros(0, np.int64)
    counts = durations.column("transactions").to_numpy() if durations.num_rows else np.zeros(0, np.int64)
    negative, untimed = int(counts[buckets == NEGATIVE_DURATION].sum()), int(counts[buckets == NO_DURATION].sum())
    txns = report.transactions()
    if not txns["committed"] + txns["aborted"]:
        return '<p class="muted" id="chart-completed-durations-none">No transaction completed.</p>'
    svg = charts.completed_durations(prepared)
    if svg is None:
        return _unavailable("completed-durations", "Durations of completed transactions: not available for this "
                                                   "input: their batches have no timestamps (max_timestamp).")
    caption = ("Each transaction that completed, by the time from its first batch to its COMMIT or ABORT marker "
               "(their <code>max_timestamp</code>), in fixed buckets of a quarter doubling each: committed below, "
               "aborted stacked above. Transactions still open at the end are in the chart below.")
    if negative:
        caption += (f" {negative:,} transactions whose marker is older than their first batch (clocks of producer "
                    "and broker differ) are not drawn.")
    if untimed:
        caption += f" {untimed:,} transactions without a timestamp on their first batch or marker are not drawn."
    return _figure(svg, caption, "completed-durations")


def _lso_section(prepared: Prepared) -> str:
    report, limits = prepared.report, prepared.limits
    held = report.held_partitions()
    svg, left_out = charts.lso_lag(prepared)
    caption = "Each held partition's lag; a bar links to the partition's row."
    if left_out:
        caption += f" {left_out:,} held partitions with a smaller lag are not drawn."
    rows = held.slice(0, limits.rows).to_pylist()
    keys = report.partitions.select([TOPIC, "partition"]).to_pylist()
    index = {(k[TOPIC], k["partition"]): i for i, k in enumerate(keys)}
    verdicts = {(r[TOPIC], r["partition"], r["first_offset"]): r["verdict"]
                for r in report.open_txns.select([TOPIC, "partition", "first_offset", "verdict"]).to_pylist()} \
        if report.open_txns.num_rows else {}
    for row in rows:
        row["lag"] = row["log_end_offset"] - row["last_stable_offset"]
        row["partition_link"] = index.get((row[TOPIC], row["partition"]))
        row["verdict"] = verdicts.get((row[TOPIC], row["partition"], row["last_stable_offset"]))

    def link(row_number: Any) -> str:
        return f'<a href="#part-{int(row_number)}">partition row</a>' if row_number is not None else "–"

    table = _table([Column("topic", TOPIC, _text, numeric=False), Column("partition", "partition"),
                    Column("last stable offset", "last_stable_offset"), Column("log end offset", "log_end_offset"),
                    Column("lag", "lag"), Column("held by producer", "producer_id", _id),
                    Column("epoch", "producer_epoch", _id), Column("idle", "idle_ms", _duration, numeric=True),
                    Column("verdict", "verdict", _verdict, numeric=False),
                    Column("", "partition_link", link, numeric=False)], rows) if rows else ""
    intro = (f"{held.num_rows:,} of {report.partitions.num_rows:,} partitions have their last stable offset held "
             "below the log end offset by an open transaction (the earliest open one): read_committed consumers "
             "stop there." if held.num_rows else "No partition's last stable offset is held: every transaction "
             "ended (or none was open) where the logs end.")
    return (f'<section id="lso"><h2>Last stable offset lag</h2><p>{intro}</p>'
            f"{_figure(svg, caption, 'lso-lag')}{table}{_more(held.num_rows, len(rows), 'held partitions')}</section>")


def _hanging_section(prepared: Prepared) -> str:
    report, limits = prepared.report, prepared.limits
    open_txns = report.open_txns
    svg, left_out = charts.hanging_timeline(prepared)
    caption = ("A bar is a transaction's idle time, from its producer's last write on the partition to the audit's "
               "now; a grey line before it, where the coordinator's log tells, runs from the transaction's start. "
               "Hanging first (verdict <b>hanging</b>: the coordinator's log confirms no marker will come; "
               "<b>hanging_unconfirmed</b>: idle past the bound, no transaction log to ask), then <b>cleared</b> "
               "(the coordinator still tracks it) and <b>recent</b> (not idle long enough to be a candidate). A bar "
               "links to its row below.")
    if left_out:
        caption += f" {left_out:,} open transactions are not drawn (at most {limits.timeline_rows})."
    if open_txns.num_rows and svg is None:
        caption = ""
        svg_html = '<p class="muted">The data has no batch timestamps: no time line.</p>'
    else:
        svg_html = _figure(svg, caption, "hanging-timeline")
    starts = prepared.coordinator_start
    rows = []
    for k, row in enumerate(open_txns.slice(0, limits.rows).to_pylist()):
        row["_k"] = k
        row["started"] = int(starts[k]) if k < len(starts) and starts[k] > 0 else None
        rows.append(row)
    columns = [Column("topic", TOPIC, _text, numeric=False), Column("partition", "partition"),
               Column("producer", "producer_id", _id), Column("epoch", "producer_epoch", _id),
               Column("first offset", "first_offset"), Column("last write", "last_timestamp", _time, numeric=False),
               Column("idle", "idle_ms", _duration, numeric=True),
               Column("verdict", "verdict", _verdict, numeric=False),
               Column("transactional id", "transactional_id", _code, numeric=False),
               Column("coordinator state", "coordinator_state", _text, numeric=False),
               Column("started (coordinator)", "started", _time, numeric=False),
               Column("reason", "reason", _text, numeric=False, wrap=True)]
    located = getattr(report, "located_open_txns", None)
    if located is not None and located.num_rows == open_txns.num_rows and "file" in located.column_names:
        for row, place in zip(rows, located.slice(0, len(rows)).select(["file", "position"]).to_pylist(), strict=True):
            row.update(place)
        columns += [Column("file", "file", _code, numeric=False), Column("position", "position")]
    intro = (f"{open_txns.num_rows:,} transactions had no marker when their partition's data ended "
             f"(<code>--hanging-after-ms</code> {report.hanging_after_ms:,}; now = {_time(report.now_ms)}, the "
             "newest batch unless <code>--now-ms</code> said otherwise)." if open_txns.num_rows
             else "No transaction was open when the data ended.")
    table = _table(columns, rows, row_id=lambda k, row: f"txn-{row['_k']}") if rows else ""
    return (f'<section id="hanging"><h2>Open and hanging transactions</h2><p>{intro}</p>{svg_html}{table}'
            f"{_more(open_txns.num_rows, len(rows), 'open transactions', 'producers.parquet has them all')}</section>")


def _gaps_section(prepared: Prepared) -> str:
    report, limits = prepared.report, prepared.limits
    gaps = report.gaps()
    order = report.order_by
    if not gaps.num_rows:
        return '<section id="gaps"><h2>Sequence gaps</h2><p class="muted">No sequence gap.</p></section>'
    rows = gaps.slice(0, limits.rows).to_pylist()
    for row in rows:
        first, last = row["missing_first"], row["missing_last"]
        row["missing"] = (last - first) % (2 ** 31) + 1 if first is not None else None
        row["range"] = f"{first:,} .. {last:,}" if first is not None else "–"
    table = _table([Column("topic", TOPIC, _text, numeric=False), Column("partition", "partition"),
                    Column("producer", "producer_id", _id), Column("epoch", "producer_epoch", _id),
                    Column("missing sequences", "range", _text, numeric=True), Column("count", "missing"),
                    Column("found at sequence", "found_base_sequence"), Column(order, order)], rows)
    return (f'<section id="gaps"><h2>Sequence gaps</h2><p>{gaps.num_rows:,} batches came after missing sequences: '
            "the missing range is <code>expected .. base_sequence - 1</code> of the batch found after it (for a new "
            f"epoch, from 0).</p>{table}{_more(gaps.num_rows, len(rows), 'gaps', 'findings.parquet has them all')}"
            "</section>")


def _zombies_section(prepared: Prepared) -> str:
    report, limits = prepared.report, prepared.limits
    zombies = report.zombie_writes()
    if not zombies.num_rows:
        return '<section id="zombies"><h2>Zombie writes</h2><p class="muted">No write with an old epoch.</p></section>'
    rows = zombies.slice(0, limits.rows).to_pylist()
    order = report.order_by
    table = _table([Column("topic", TOPIC, _text, numeric=False), Column("partition", "partition"),
                    Column("producer", "producer_id", _id), Column("zombie epoch", "zombie_epoch", _id),
                    Column("current epoch", "current_epoch", _id), Column("marker", "is_control"),
                    Column("finding", "finding", lambda v: f'<a href="#finding-{esc(v)}">{esc(v)}</a>',
                           numeric=False), Column("error code", "error_code"), Column(order, order)], rows)
    return (f'<section id="zombies"><h2>Zombie writes</h2><p>{zombies.num_rows:,} writes with an older epoch than '
            "the producer's current one (<code>epoch_regression</code>: idempotent, <code>fenced</code>: "
            f"transactional or a marker).</p>{table}"
            f"{_more(zombies.num_rows, len(rows), 'zombie writes', 'findings.parquet has them all')}</section>")


def _row_anchor(prefix: str) -> Callable[[int, dict], str]:
    def anchor(k: int, row: dict) -> str:
        return f"{prefix}-{k}"
    return anchor


def _details_section(prepared: Prepared) -> str:
    report, limits = prepared.report, prepared.limits
    findings = report.findings
    order = report.order_by
    located: Any = getattr(report, "located_findings", None)
    aligned = located is not None and located.num_rows == findings.num_rows and findings.num_rows > 0 \
        and "file" in located.column_names
    out = ['<section id="details"><h2>Finding details</h2><p class="note">For each finding that occurred: what it '
           "means, what <code>expected</code> holds, and its batches in stream order.</p>"]
    labels = findings.column("finding").to_numpy(zero_copy_only=False) if findings.num_rows else np.zeros(0, object)
    # Duplicates last: retries the window caught are the expected kind; the anomalies come first.
    for label in sorted(prepared.kinds, key=lambda name: name == DUPLICATE):
        info = FINDINGS[Finding.parse(label)]
        out.append(f'<div id="finding-{esc(label)}"><h3>{_swatch(charts.KIND_COLORS.get(label, "#999"))}'
                   f"{esc(label)}: {prepared.counts.get(label, 0):,}</h3><p>{esc(info.meaning)}"
                   + (f"; <code>expected</code>: {esc(info.expected)}" if info.expected else "") + ".</p>")
        if label == HANGING:
            out.append('<p>Found at the end of a stream, not on a batch: see <a href="#hanging">open and hanging '
                       "transactions</a>.</p></div>")
            continue
        where = np.flatnonzero(labels == label)
        shown = where[:limits.rows]
        rows = findings.take(shown).to_pylist() if len(shown) else []
        if aligned:
            for row, place in zip(rows, located.take(shown).select(["file", "position"]).to_pylist(), strict=True):
                row.update(place)
        columns = [Column("topic", TOPIC, _text, numeric=False), Column("partition", "partition"),
                   Column("producer", "producer_id", _id), Column("epoch", "producer_epoch", _id),
                   Column("base seq", "base_sequence"), Column("last seq", "last_sequence"),
                   Column("records", "record_count"), Column("timestamp", "max_timestamp", _time, numeric=False),
                   Column(order, order), Column("expected", "expected"), Column("error code", "error_code"),
                   Column("transactional", "is_transactional"), Column("marker", "is_control")]
        if label == DUPLICATE:
            columns.insert(-2, Column("original offsets", "assigned_base_offset"))
        if aligned:
            columns += [Column("file", "file", _code, numeric=False), Column("position", "position")]
        columns = [c for c in columns if not rows or c.key in rows[0]]
        out.append(_table(columns, rows, row_id=_row_anchor(f"finding-{label}")))
        out.append(_more(len(where), len(shown), f"{label} batches", "findings.parquet has them all"))
        out.append("</div>")
    if not prepared.kinds:
        out.append('<p class="muted">No finding.</p>')
    out.append("</section>")
    return "".join(out)


def _problems_section(report: AuditReport, limits: Limits) -> str:
    problems = getattr(report, "problems", None)
    if problems is None:
        return ""
    rows = [p.to_dict() for p in problems[:limits.rows]]
    columns = [Column("file", "file", _code, numeric=False), Column("position", "position"),
               Column("kind", "kind", _text, numeric=False), Column("what", "message", _text, numeric=False, wrap=True)]
    table = _table(columns, rows) if rows else \
        '<p class="muted">None: every segment, index and checkpoint read as expected.</p>'
    return (f'<section id="problems"><h2>Problems in the files</h2><p class="note">What is wrong in the log '
            f"directory's files themselves (torn tails, CRC failures, indexes that disagree), located by file and "
            f"byte position: {len(problems):,}.</p>{table}{_more(len(problems), len(rows), 'problems')}</section>")


def _provenance_section(report: AuditReport, command: str, command_origin: str, generated: str) -> str:
    from idemcore import __version__

    check = report.hanging_check()
    items = [
        ("source", f"<code>{esc(report.source or '–')}</code>"),
        ("batches audited", f"{report.batches:,} in {report.partitions.num_rows:,} (topic, partition) streams"),
        ("stream order", f"<code>{esc(report.order_by)}</code>"),
        ("audit time", f"{report.seconds:,.1f} s ({report.batches_per_s / 1e6:,.2f} M batches/s)"),
        ("now (open transactions judged at)", f"{_time(report.now_ms)} ({report.now_ms:,} ms)"),
        ("hanging after", f"{report.hanging_after_ms:,} ms (<code>--hanging-after-ms</code>)"),
        ("transaction log", esc(check["transaction_log"]) + (f": {esc(check['read'])}" if check["read"] else "")),
        ("written", f"{esc(generated)} by idemcore {esc(__version__)}"),
    ]
    listing = getattr(report, "listing", None)
    if listing is not None:
        segments = sum(len(p.segments) for p in listing.partitions)
        ignored = listing.all_ignored()
        items.append(("log directory", f"{len(listing.partitions):,} partition directories, {segments:,} segments"
                                       + (f", {len(ignored):,} files ignored" if ignored else "")))
    rows = "".join(f"<dt>{esc(name)}</dt><dd>{value}</dd>" for name, value in items)
    return (f'<section id="provenance"><h2>Command and dataset</h2><p class="note">{esc(command_origin)}</p>'
            f"<pre>{esc(command)}</pre><dl>{rows}</dl></section>")


def default_command() -> tuple[str, str]:
    """The command line of this process (``sys.orig_argv``), for a report written from Python."""
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    return shlex.join(argv), "Written from Python (write_html) by the process started with:"


def render_html(report: AuditReport, *, command: str | Sequence[str] | None = None, title: str | None = None,
                limits: Limits | None = None) -> str:
    """The report as one self-contained HTML page (see :func:`write_html`)."""
    limits = limits or Limits()
    if command is None:
        command_text, origin = default_command()
    else:
        command_text = command if isinstance(command, str) else shlex.join(command)
        origin = "The command that produced this report:"
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    title = title or f"idemcore audit of {report.source or 'batch metadata'}"
    prepared = prepare(report, limits)
    extra = [("problems", "Problems in the files")] if getattr(report, "problems", None) is not None else []
    body = [
        _header(report, title, generated), _nav(extra), "<main>",
        _findings_section(prepared), _over_time_section(prepared), _partitions_section(prepared),
        _transactions_section(prepared), _lso_section(prepared), _hanging_section(prepared),
        _gaps_section(prepared), _zombies_section(prepared), _details_section(prepared),
        _problems_section(report, limits), _provenance_section(report, command_text, origin, generated), "</main>",
        "<footer>One self-contained file: no script, nothing fetched. Charts drawn with matplotlib. The complete "
        "per-batch findings and per-producer detail are in the audit's Parquet files (<code>--out</code>).</footer>",
    ]
    from idemcore import __version__

    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta name="generator" content="{GENERATOR} {esc(__version__)}">'
            f'<meta http-equiv="Content-Security-Policy" content="{esc(_CSP)}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def is_html_report(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a page :func:`write_html` wrote (its generator tag), which a new report may replace."""
    try:
        with open(path, "rb") as file:
            head = file.read(512)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR} '.encode() in head


def write_html(report: AuditReport, path: str | os.PathLike[str], *, command: str | Sequence[str] | None = None,
               title: str | None = None, limits: Limits | None = None) -> Path:
    """Write ``report`` as one self-contained HTML file at ``path`` (whole or not at all) and return its path.

    ``command``: the command line that produced the report, shown on the page (default: this process's).
    ``limits``: how many rows and partitions the page shows (:class:`Limits`); what is left out is counted."""
    out = Path(path)
    text = render_html(report, command=command, title=title, limits=limits)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, out)
    return out
