"""The report's charts: matplotlib figures saved as SVG text, to be inlined in the page.

matplotlib (Agg-free: a bare :class:`~matplotlib.figure.Figure` and the SVG canvas, no pyplot, no GUI backend)
writes static SVG: no script to run, nothing to fetch, text kept as text (``svg.fonttype = none``) and escaped
by matplotlib's SVG writer. Strings from the data (topic names) are never read as mathtext
(``text.parse_math = False``). Each chart gets its own id salt, so the ids of two inlined charts never clash.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from idemcore.audit.find_hanging import CLEARED, HANGING, RECENT, UNCONFIRMED
from idemcore.audit.html.data import DUPLICATE, Activity, Prepared, partition_label, top_partitions
from idemcore.audit.replayer import DURATION_EDGES_MS

#: A colour per finding (registry names), the same in every chart and in the page's legend.
KIND_COLORS = {
    "duplicate": "#9e9e9e", "duplicate_beyond_window": "#ff7f0e", "sequence_gap": "#d62728",
    "out_of_order": "#9467bd", "epoch_regression": "#8c564b", "fenced": "#e377c2", "invalid_txn_state": "#17becf",
    "invalid_record": "#bcbd22", "hanging_transaction": "#1f3b73", "offset_overflow": "#000000",
}
#: A colour per verdict of an open transaction.
VERDICT_COLORS = {HANGING: "#d62728", UNCONFIRMED: "#ff7f0e", CLEARED: "#2ca02c", RECENT: "#8c8c8c"}
VERDICT_ORDER = [HANGING, UNCONFIRMED, CLEARED, RECENT]

_WIDTH = 10.0  # inches; the page scales the SVG to its column
_STYLE: dict[str, Any] = {
    "svg.fonttype": "none", "text.parse_math": False, "font.size": 8.5, "axes.titlesize": 9.5,
    "axes.titlelocation": "left", "axes.spines.top": False, "axes.spines.right": False,
    "font.family": "DejaVu Sans",
}


@contextmanager
def _style(name: str) -> Iterator[None]:
    import matplotlib

    style: Any = {**_STYLE, "svg.hashsalt": f"idemcore-{name}", "svg.id": f"chart-{name}"}
    with matplotlib.rc_context(style):
        yield


def _figure(height: float, **kwargs: Any) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(_WIDTH, height), dpi=96, layout="constrained", **kwargs)


def _svg(figure: Any) -> str:
    """The figure as one ``<svg>`` element, made compact for inlining: no XML prolog or doctype (inline SVG
    carries none), no metadata, only the ids something refers to (matplotlib numbers its groups ``figure_1``,
    ``axes_1``... in every chart, which would repeat on the page), coordinates to 0.1 pt, no indentation."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    FigureCanvasSVG(figure)
    out = io.StringIO()
    with warnings.catch_warnings():  # (a chart of very few bars: matplotlib keeps its default layout, and says so)
        warnings.filterwarnings("ignore", message="constrained_layout not applied", category=UserWarning)
        figure.savefig(out, format="svg", metadata={"Date": None, "Creator": "idemcore (matplotlib)"})
    text = out.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
    root = re.match(r'<svg[^>]*\sid="([^"]+)"', text)
    referenced = set(re.findall(r'(?:url\(#|href="#)([^)"]+)', text))
    if root:
        referenced.add(root.group(1))
    text = re.sub(r'\sid="([^"]+)"', lambda m: m.group(0) if m.group(1) in referenced else "", text)
    text = re.sub(r'(\s(?:d|transform|x|y|x1|x2|y1|y2|width|height|points)=")([^"]*)"',
                  lambda m: m.group(1) + _compact(m.group(2)) + '"', text)
    return re.sub(r">\s+<", "><", text)


def _compact(value: str) -> str:
    """Coordinates to one decimal (a tenth of a point), on one line."""
    value = re.sub(r"(\d+\.\d)\d+", r"\1", value)
    return re.sub(r"\s+", " ", value).strip()


def _time_axis(ax: Any, prepared: Prepared) -> None:
    axis = prepared.axis
    assert axis is not None
    if axis.time:
        import matplotlib.dates as mdates

        locator = mdates.AutoDateLocator(minticks=4, maxticks=9)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, show_offset=True))
    ax.set_xlim(_x(prepared, axis.start), _x(prepared, axis.stop))


def _x(prepared: Prepared, values: Any) -> Any:
    """Axis values (ms since the epoch, or the ordering column) as matplotlib's x: date numbers for time."""
    axis = prepared.axis
    assert axis is not None
    if not axis.time:
        return values
    array = np.asarray(values, dtype=np.float64)
    return array / 86_400_000.0  # days since 1970-01-01: matplotlib's default date epoch


def _binned(prepared: Prepared, mask: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
    """Counts per (row, time bin) of the findings selected by ``mask``, ``rows`` their row (-1: none)."""
    axis = prepared.axis
    assert axis is not None
    bins = len(axis.edges) - 1
    keep = mask & (rows >= 0)
    if axis.time:
        keep &= prepared.finding_x > 0
    flat = rows[keep] * bins + axis.bin_of(prepared.finding_x[keep])
    return np.bincount(flat, minlength=n_rows * bins).reshape(n_rows, bins)


def findings_over_time(prepared: Prepared) -> str | None:
    """All partitions: duplicates per time bin (retries caught in the window), and the other findings stacked
    by kind."""
    axis = prepared.axis
    kinds = [k for k in prepared.kinds if k != "hanging_transaction"]
    if axis is None or not kinds:
        return None
    with _style("findings-over-time"):
        per_kind = _binned(prepared, np.ones(len(prepared.finding_kind), bool), prepared.finding_kind,
                           len(prepared.kinds))
        panels = [[DUPLICATE]] if DUPLICATE in kinds else []
        others = [k for k in kinds if k != DUPLICATE]
        if others:
            panels.append(others)
        figure = _figure(1.6 + 1.5 * len(panels))
        axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        edges = _x(prepared, axis.edges)
        for ax, labels in zip(axes, panels, strict=True):
            bottom = np.zeros(len(edges) - 1)
            for label in labels:
                counts = per_kind[prepared.kinds.index(label)]
                drawn = np.flatnonzero(counts)
                if len(drawn) < 30:  # a few bars, only where there is something
                    ax.bar(edges[drawn], counts[drawn], width=np.diff(edges)[drawn], bottom=bottom[drawn],
                           align="edge", color=KIND_COLORS[label], label=label, linewidth=0)
                else:  # many: one filled step outline (a single path, whatever the bins)
                    ax.stairs(bottom + counts, edges, baseline=bottom.copy(), fill=True, color=KIND_COLORS[label],
                              label=label, linewidth=0)
                bottom += counts
            ax.set_ylim(0, max(1.0, float(bottom.max()) * 1.08))
            ax.set_ylabel("batches per bin")
            ax.set_title("duplicates (retries answered with the original offsets)" if labels == [DUPLICATE]
                         else "other findings, by kind")
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=7.5)
            ax.yaxis.get_major_locator().set_params(integer=True)
            _time_axis(ax, prepared)
        axes[-1].set_xlabel(axis.label)
        return _svg(figure)


def partition_heatmap(prepared: Prepared) -> tuple[str | None, int]:
    """Per partition over time: findings other than duplicates per time bin (colour), and beside it each
    partition's batches (appended, duplicates, rejected). Returns the SVG and how many partitions were summed
    into the last row."""
    report, limits, axis = prepared.report, prepared.limits, prepared.axis
    n = report.partitions.num_rows
    if n == 0:
        return None, 0
    cap = limits.chart_partitions
    rows = top_partitions(prepared.anomalies * 1_000_000 + prepared.partition_kinds.sum(axis=1),
                          cap - 1 if n > cap else cap)
    others = n - len(rows)
    with _style("partition-heatmap"):
        from matplotlib.colors import LogNorm
        from matplotlib.ticker import NullFormatter

        labels = [partition_label(report, int(r)) for r in rows] + ([f"{others:,} other partitions"] if others else [])
        height = 1.2 + 0.2 * len(labels)
        figure = _figure(height)
        grid = figure.add_gridspec(1, 2, width_ratios=[3.2, 1])
        heat = figure.add_subplot(grid[0, 0])
        bars = figure.add_subplot(grid[0, 1], sharey=heat)
        y = np.arange(len(labels))
        if axis is not None:
            duplicate = prepared.kinds.index(DUPLICATE) if DUPLICATE in prepared.kinds else -1
            mask = (prepared.finding_kind >= 0) & (prepared.finding_kind != duplicate)
            per_partition = _binned(prepared, mask, prepared.finding_partition, n)
            matrix = per_partition[rows]
            if others:
                rest = np.ones(n, bool)
                rest[rows] = False
                matrix = np.vstack([matrix, per_partition[rest].sum(axis=0)])
            if matrix.any():
                import matplotlib
                from matplotlib.colors import ListedColormap

                # YlOrRd without its palest third: a single finding in a bin must stand out from the background.
                cmap = ListedColormap(matplotlib.colormaps["YlOrRd"](np.linspace(0.3, 1.0, 200))).with_extremes(
                    bad=(1, 1, 1, 0))
                # A raster of the cells (bins x partitions), drawn unsmoothed: its size does not grow with counts.
                image = heat.imshow(np.ma.masked_equal(matrix, 0), cmap=cmap, aspect="auto", interpolation="none",
                                    norm=LogNorm(vmin=1, vmax=max(2, int(matrix.max()))),
                                    extent=(float(_x(prepared, axis.start)), float(_x(prepared, axis.stop)),
                                            len(labels) - 0.5, -0.5))
                bar = figure.colorbar(image, ax=heat, location="top", shrink=0.5, aspect=40, pad=0.01,
                                      label="findings per bin (duplicates excluded)")
                top = int(matrix.max())
                bar.set_ticks(sorted({t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000, 100_000)
                                      if t <= top} | {max(top, 2)}))
                bar.ax.xaxis.set_major_formatter(_count_format())
                bar.ax.xaxis.set_minor_formatter(NullFormatter())
            else:
                heat.text(0.5, 0.5, "no findings here but duplicates" if DUPLICATE in prepared.kinds
                          else "no finding on a batch", transform=heat.transAxes, ha="center", va="center",
                          color="#555555")
            _time_axis(heat, prepared)
            heat.set_xlabel(axis.label)
        heat.set_yticks(y, labels)
        heat.set_ylim(len(labels) - 0.5, -0.5)
        heat.set_title("findings over time, per partition")
        for tick, row in zip(heat.get_yticklabels(), rows, strict=False):
            tick.set_url(f"#part-{int(row)}")
        parts = report.partitions
        stacks = []
        for name, color in (("appended", "#4c78a8"), ("duplicates", KIND_COLORS[DUPLICATE]), ("rejected", "#d62728")):
            values = parts.column(name).to_numpy()
            shown = values[rows]
            if others:  # the partitions summed into the last row: their average, so the scale stays readable
                shown = np.append(shown, (values.sum() - shown.sum()) / others)
            stacks.append((name, color, shown))
        left = np.zeros(len(labels))
        for name, color, values in stacks:
            drawn = bars.barh(y, values, left=left, color=color, label=name, height=0.7, linewidth=0)
            if others:
                drawn.patches[-1].set_alpha(0.55)
            left += values
        bars.set_xlabel("batches" + (" (last row: average per partition)" if others else ""))
        bars.tick_params(axis="y", labelleft=False)
        bars.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), frameon=False, fontsize=7, ncols=3, handlelength=1,
                    columnspacing=0.8, borderaxespad=0.2)
        bars.ticklabel_format(axis="x", style="sci", scilimits=(-3, 5))
        return _svg(figure), others


def partition_panels(prepared: Prepared) -> tuple[str | None, int]:
    """The partitions with the most findings other than duplicates (at most ``limits.panels``), one block of
    rows each: a row per finding kind, a cell per time bin, darker for more; a hanging transaction's idle time
    (its producer's last write to the audit's now) as a line. One axes and one raster for all of them. Returns
    the SVG and how many partitions with such findings were not drawn."""
    report, limits, axis = prepared.report, prepared.limits, prepared.axis
    if axis is None:
        return None, 0
    chosen = top_partitions(prepared.anomalies, limits.panels, keep_zero=False)
    left_out = int((prepared.anomalies > 0).sum()) - len(chosen)
    if not len(chosen):
        return None, 0
    from matplotlib.colors import to_rgb

    n_parts, bins = report.partitions.num_rows, len(axis.edges) - 1
    per_kind = {k: _binned(prepared, prepared.finding_kind == k, prepared.finding_partition, n_parts)
                for k in range(len(prepared.kinds))}
    biggest = max([int(m.max()) for m in per_kind.values() if m.size] + [1])
    hanging_mask = report.open_txns.column("hanging").to_numpy(zero_copy_only=False) if report.open_txns.num_rows \
        else np.zeros(0, bool)
    hanging_rows = prepared.open_partition[hanging_mask]
    hanging_last = report.open_txns.column("last_timestamp").to_numpy()[hanging_mask] if report.open_txns.num_rows \
        else np.zeros(0, np.int64)
    # The rows, top to bottom: per partition a title row, then one row per kind it has.
    layout: list[tuple[str, int, int]] = []  # (what, partition row, kind): "title" or "kind"
    for row in chosen:
        layout.append(("title", int(row), -1))
        layout += [("kind", int(row), k) for k, _ in enumerate(prepared.kinds) if prepared.partition_kinds[row, k]]
    cells = np.zeros((len(layout), bins, 4))
    for y, (what, row, k) in enumerate(layout):
        if what == "kind" and prepared.kinds[k] != "hanging_transaction":
            counts = per_kind[k][row]
            cells[y, :, :3] = to_rgb(KIND_COLORS[prepared.kinds[k]])
            cells[y, :, 3] = np.where(counts > 0, 0.3 + 0.7 * np.log1p(counts) / np.log1p(biggest), 0.0)
    with _style("partition-panels"):
        figure = _figure(0.6 + 0.19 * len(layout))
        ax = figure.add_subplot()
        start, stop = float(_x(prepared, axis.start)), float(_x(prepared, axis.stop))
        ax.imshow(cells, aspect="auto", interpolation="none", extent=(start, stop, len(layout) - 0.5, -0.5))
        ticks, labels = [], []
        for y, (what, row, k) in enumerate(layout):
            if what == "title":
                parts = report.partitions.slice(row, 1).to_pylist()[0]
                ax.text(0.0, y + 0.1, f"{partition_label(report, row)}: {parts['batches']:,} batches "
                        f"({parts['duplicates']:,} duplicates, {parts['rejected']:,} rejected); findings besides "
                        f"duplicates: {int(prepared.anomalies[row]):,}", transform=ax.get_yaxis_transform(),
                        fontsize=8, fontweight="bold", va="center", url=f"#part-{row}")
                if y:
                    ax.axhline(y - 0.5, color="#888888", linewidth=0.8)
                continue
            ticks.append(y)
            labels.append(prepared.kinds[k])
            ax.axhline(y + 0.5, color="#eeeeee", linewidth=0.6)
            if prepared.kinds[k] == "hanging_transaction":
                for last in hanging_last[hanging_rows == row]:
                    ax.plot(_x(prepared, [max(float(last), axis.start), float(report.now_ms)]), [y, y],
                            color=KIND_COLORS["hanging_transaction"], linewidth=3, solid_capstyle="butt")
                    ax.plot(_x(prepared, [float(last)]), [y], marker="|", color=KIND_COLORS["hanging_transaction"],
                            markersize=9)
        ax.set_yticks(ticks, labels, fontsize=7.5)
        ax.tick_params(axis="y", length=0)
        ax.set_ylim(len(layout) - 0.5, -0.5)
        ax.spines["left"].set_visible(False)
        _time_axis(ax, prepared)
        ax.set_xlabel(axis.label)
        ax.set_title("the partitions with the most findings besides duplicates")
        return _svg(figure), left_out


def transaction_durations(prepared: Prepared) -> str | None:
    """Distributions of how long transactions have been open: each transaction still open at the end by its idle
    time (the audit's now less its producer's last write there: a lower bound of its age), stacked by verdict,
    with the hanging bound; and, with the coordinator's log, each transactional id's latest transaction (its
    start to its last update when complete, to now while open), by state."""
    report = prepared.report
    open_txns = report.open_txns
    log = report.transaction_log
    coordinator: dict[str, list[float]] = {}
    if log is not None:
        for txn in log.transactions.values():
            if txn.start_timestamp_ms <= 0:
                continue
            complete = txn.state_name in ("CompleteCommit", "CompleteAbort", "Empty")
            end = txn.last_update_timestamp_ms if complete else report.now_ms
            coordinator.setdefault(txn.state_name, []).append(max(0.0, float(end - txn.start_timestamp_ms)))
    if not open_txns.num_rows and not coordinator:
        return None
    with _style("transaction-durations"):
        panels = int(bool(open_txns.num_rows)) + int(bool(coordinator))
        figure = _figure(2.6 * panels)
        axes = list(figure.subplots(panels, 1, squeeze=False)[:, 0])
        if open_txns.num_rows:
            ax = axes.pop(0)
            idle = np.maximum(open_txns.column("idle_ms").to_numpy().astype(np.float64), 1.0)
            verdicts = np.asarray(open_txns.column("verdict").to_pylist(), dtype=object)
            edges = _log_edges(np.append(idle, report.hanging_after_ms))
            stacks = [(v, idle[verdicts == v]) for v in VERDICT_ORDER if (verdicts == v).any()]
            ax.hist([values for _, values in stacks], bins=edges, stacked=True,
                    color=[VERDICT_COLORS[v] for v, _ in stacks], label=[v for v, _ in stacks])
            ax.axvline(max(report.hanging_after_ms, 1), color="#333333", linestyle="--", linewidth=1)
            ax.annotate(f"hanging after {report.hanging_after_ms:,} ms", (max(report.hanging_after_ms, 1), 1),
                        xycoords=("data", "axes fraction"), xytext=(3, -10), textcoords="offset points",
                        fontsize=7.5)
            _log_ms_axis(ax)
            ax.set_xlabel("idle ms (now less the producer's last write on the partition; the transaction is at "
                          "least this old)")
            ax.set_ylabel("open transactions")
            ax.set_title(f"transactions still open at the end ({open_txns.num_rows:,}), by idle time and verdict")
            ax.legend(frameon=False, fontsize=7.5)
            ax.yaxis.get_major_locator().set_params(integer=True)
        if coordinator:
            ax = axes.pop(0)
            states = sorted(coordinator)
            values = [np.maximum(np.asarray(coordinator[s]), 1.0) for s in states]
            edges = _log_edges(np.concatenate(values))
            ax.hist(values, bins=edges, stacked=True, label=states)
            _log_ms_axis(ax)
            ax.set_xlabel("ms from the transaction's start to its last update (complete) or to now (open)")
            ax.set_ylabel("transactional ids")
            ax.set_title(f"each transactional id's latest transaction in the coordinator's log "
                         f"({sum(len(v) for v in values):,}), by state")
            ax.legend(frameon=False, fontsize=7.5)
            ax.yaxis.get_major_locator().set_params(integer=True)
        return _svg(figure)


def _count_format() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:,.0f}")


def duration_label(ms: float) -> str:
    """A short duration for an axis: ``250 ms``, ``4 s``, ``15 min``, ``3 h``, ``2 d``."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            return f"{ms / size:,.3g} {unit}"
    return f"{ms:,.3g} ms"


def _log_ms_axis(ax: Any) -> None:
    """A log x axis of milliseconds, labelled as durations (no mathtext: the page never parses it)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: duration_label(value)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _log_edges(values: np.ndarray, bins: int = 30) -> np.ndarray:
    low, high = float(max(values.min(), 1.0)), float(max(values.max(), 2.0))
    return np.geomspace(low / 1.5, high * 1.5, bins + 1)


def lso_lag(prepared: Prepared) -> tuple[str | None, int]:
    """Per partition whose last stable offset is held: how many offsets it lags the log end offset, coloured
    by the verdict of the transaction holding it. Returns the SVG and the held partitions not drawn."""
    report, limits = prepared.report, prepared.limits
    held = np.flatnonzero(prepared.lag > 0)
    if not len(held):
        return None, 0
    rows = top_partitions(np.where(prepared.lag > 0, prepared.lag, 0), limits.chart_partitions, keep_zero=False)
    left_out = len(held) - len(rows)
    # The holder of each partition: its earliest open transaction (first offset = the last stable offset).
    verdict = {}
    if report.open_txns.num_rows:
        first = report.open_txns.column("first_offset").to_numpy()
        verdicts = report.open_txns.column("verdict").to_pylist()
        lso = report.partitions.column("last_stable_offset").to_numpy()
        for k, part in enumerate(prepared.open_partition):
            if part >= 0 and first[k] == lso[part]:
                verdict[int(part)] = verdicts[k]
    with _style("lso-lag"):
        labels = [partition_label(report, int(r)) for r in rows]
        figure = _figure(1.0 + 0.22 * len(rows))
        ax = figure.add_subplot()
        lags = prepared.lag[rows]
        colors = [VERDICT_COLORS.get(verdict.get(int(r), ""), "#4c78a8") for r in rows]
        bars = ax.barh(np.arange(len(rows)), lags, color=colors, height=0.7)
        for bar, row in zip(bars, rows, strict=True):
            bar.set_url(f"#part-{int(row)}")
        ax.bar_label(bars, labels=[f"{int(v):,}" for v in lags], padding=3, fontsize=7)
        ax.set_yticks(np.arange(len(rows)), labels)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel("offsets between the last stable offset and the log end offset (held from read_committed "
                      "consumers)")
        ax.set_title("last stable offset lag per held partition, coloured by the holding transaction's verdict")
        shown = sorted({verdict.get(int(r), "") for r in rows}, key=lambda v: VERDICT_ORDER.index(v)
                       if v in VERDICT_ORDER else len(VERDICT_ORDER))
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=VERDICT_COLORS.get(v, "#4c78a8"), label=v or "no verdict") for v in shown],
                  frameon=False, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.margins(x=0.12)
        return _svg(figure), left_out


def hanging_timeline(prepared: Prepared) -> tuple[str | None, int]:
    """The open transactions on a time line, hanging ones first: a bar from the producer's last write on the
    partition to the audit's now (idle), coloured by verdict, and before it, where the coordinator's log tells,
    a thin line from the transaction's start. Each bar links to its row below. Returns the SVG and the open
    transactions not drawn."""
    report, limits, axis = prepared.report, prepared.limits, prepared.axis
    open_txns = report.open_txns
    if not open_txns.num_rows or axis is None or not axis.time:
        return None, 0
    verdicts = open_txns.column("verdict").to_pylist()
    rank = np.array([VERDICT_ORDER.index(v) if v in VERDICT_ORDER else len(VERDICT_ORDER) for v in verdicts])
    idle = open_txns.column("idle_ms").to_numpy()
    order = np.lexsort((-idle, rank))[:limits.timeline_rows]
    left_out = open_txns.num_rows - len(order)
    last = open_txns.column("last_timestamp").to_numpy()
    starts = prepared.coordinator_start
    start_all = min([axis.start, *(float(last[k]) for k in order if last[k] > 0),
                     *(float(starts[k]) for k in order if starts[k] > 0)])
    with _style("hanging-timeline"):
        figure = _figure(1.1 + 0.22 * len(order))
        ax = figure.add_subplot()
        labels = []
        for y, k in enumerate(order):
            row = open_txns.slice(int(k), 1).to_pylist()[0]
            begin = float(max(last[k], start_all))
            bar = ax.barh(y, _x(prepared, report.now_ms) - _x(prepared, begin), left=_x(prepared, begin), height=0.6,
                          color=VERDICT_COLORS.get(row["verdict"], "#4c78a8"))
            bar[0].set_url(f"#txn-{int(k)}")
            if starts[k] > 0 and starts[k] < last[k]:
                ax.plot(_x(prepared, [float(starts[k]), begin]), [y, y], color="#555555", linewidth=1)
                ax.plot(_x(prepared, [float(starts[k])]), [y], marker="|", color="#555555", markersize=7)
            labels.append(f"{row['topic']}-{row['partition']} pid {row['producer_id']}")
        ax.set_yticks(np.arange(len(order)), labels, fontsize=7.5)
        for tick, k in zip(ax.get_yticklabels(), order, strict=True):
            tick.set_url(f"#txn-{int(k)}")
        ax.set_ylim(len(order) - 0.5, -0.5)
        threshold = report.now_ms - report.hanging_after_ms
        ax.axvline(_x(prepared, threshold), color="#333333", linestyle="--", linewidth=1)
        ax.axvline(_x(prepared, report.now_ms), color="#333333", linewidth=1)
        ax.annotate("last write before this: candidate", (_x(prepared, threshold), 1.0),
                    xycoords=("data", "axes fraction"), xytext=(-3, 2), textcoords="offset points", ha="right",
                    fontsize=7)
        ax.annotate("now", (_x(prepared, report.now_ms), 1.0), xycoords=("data", "axes fraction"), xytext=(3, 2),
                    textcoords="offset points", ha="left", fontsize=7)
        import matplotlib.dates as mdates

        locator = mdates.AutoDateLocator(minticks=4, maxticks=9)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, show_offset=True))
        span = report.now_ms - start_all
        ax.set_xlim(_x(prepared, start_all - 0.02 * span), _x(prepared, report.now_ms + 0.02 * span))
        ax.set_xlabel("batch timestamp (UTC)")
        from matplotlib.patches import Patch

        present = [v for v in VERDICT_ORDER if v in verdicts]
        ax.legend(handles=[Patch(color=VERDICT_COLORS[v], label=v) for v in present], frameon=False, fontsize=7.5,
                  loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_title("open transactions at the end of the audit")
        return _svg(figure), left_out


#: Colours of the completed-transaction outcomes.
OUTCOME_COLORS = {"committed": "#2ca02c", "aborted": "#d62728"}
_BATCH_COLOR = "#4c78a8"
_DAY_MS = 86_400_000.0


def partition_activity(prepared: Prepared, data: Activity) -> str:
    """Small multiples, one panel per partition (the busiest; the rest summed into the last): batches per time bin
    as a filled step series, and on a second axis the batches with a finding per bin as markers (findings other
    than duplicates: red triangles; duplicates: grey dots). Bins are exact (the replay's timeline buckets)."""
    import matplotlib.dates as mdates

    report = prepared.report
    labels = [partition_label(report, int(r)) for r in data.rows]
    if data.others:
        labels.append(f"{data.others:,} other partitions (summed)")
    edges = data.edges_ms / _DAY_MS  # matplotlib date numbers
    centres = (edges[:-1] + edges[1:]) / 2
    with _style("partition-activity"):
        figure = _figure(0.7 + 0.95 * len(labels))
        axes = figure.subplots(len(labels), 1, sharex=True, squeeze=False)[:, 0]
        for k, (ax, label) in enumerate(zip(axes, labels, strict=True)):
            batches = data.batches[k]
            ax.stairs(batches, edges, fill=True, color=_BATCH_COLOR, alpha=0.85, linewidth=0, label="batches")
            ax.set_ylim(0, max(1.0, float(batches.max()) * 1.1))
            ax.yaxis.set_major_locator(_max_ticks(3))
            ax.yaxis.set_major_formatter(_count_format())
            title = ax.text(0.0, 1.02, f"{label}: {int(batches.sum()):,} batches; findings besides duplicates: "
                            f"{int(data.findings[k].sum()):,}; duplicates: {int(data.duplicates[k].sum()):,}",
                            transform=ax.transAxes, fontsize=7.5, fontweight="bold", va="bottom")
            if k < len(data.rows):
                title.set_url(f"#part-{int(data.rows[k])}")
            marks = ax.twinx()
            marks.spines["right"].set_visible(True)
            top = max(1, int(max(data.findings[k].max(), data.duplicates[k].max())))
            for values, marker, color, size, name in (
                    (data.duplicates[k], "o", KIND_COLORS[DUPLICATE], 3, "duplicates"),
                    (data.findings[k], "v", "#d62728", 5, "other findings")):
                shown = np.flatnonzero(values)
                marks.plot(centres[shown], values[shown], linestyle="none", marker=marker, color=color,
                           markersize=size, label=name)
            marks.set_ylim(0, top * 1.25)
            marks.yaxis.set_major_locator(_max_ticks(3))
            marks.tick_params(axis="y", labelsize=7, colors="#8a2222")
            if k == 0:
                handles = ax.get_legend_handles_labels()[0] + marks.get_legend_handles_labels()[0]
                ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=7,
                          ncols=3, borderaxespad=0.1)
        axes[len(labels) // 2].set_ylabel("batches per bin (left); batches with a finding (right, markers)")
        locator = mdates.AutoDateLocator(minticks=4, maxticks=9)
        axes[-1].xaxis.set_major_locator(locator)
        axes[-1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, show_offset=True))
        axes[-1].set_xlim(edges[0], edges[-1])
        axes[-1].set_xlabel(f"batch timestamp (UTC, max_timestamp), bins of {duration_label(data.width_ms)}")
        return _svg(figure)


def _max_ticks(n: int) -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=n, integer=True, min_n_ticks=1)


def completed_durations(prepared: Prepared) -> str | None:
    """The distribution of completed transactions' durations (first batch to marker, by ``max_timestamp``): a
    histogram over the replay's fixed log buckets, committed and aborted stacked; None when no completed
    transaction has a measurable duration."""
    durations = prepared.report.txn_durations
    if durations is None or durations.num_rows == 0:
        return None
    buckets = durations.column("bucket").to_numpy()
    counts = durations.column("transactions").to_numpy()
    aborted = durations.column("aborted").to_numpy(zero_copy_only=False)
    measured = buckets >= 0
    if not measured.any():
        return None
    low, high = int(buckets[measured].min()), int(buckets[measured].max()) + 1
    edges = np.append(DURATION_EDGES_MS, DURATION_EDGES_MS[-1] * 2)[low:high + 1].astype(np.float64)
    edges[0] = max(edges[0], 0.5)  # bucket [0, 1) ms on a log axis
    with _style("completed-durations"):
        figure = _figure(2.8)
        ax = figure.add_subplot()
        bottom = np.zeros(high - low, np.int64)
        for outcome, is_aborted in (("committed", False), ("aborted", True)):
            mine = measured & (aborted == is_aborted)
            if not mine.any():
                continue
            values = np.zeros(high - low, np.int64)
            np.add.at(values, buckets[mine] - low, counts[mine])
            drawn = np.flatnonzero(values)  # a bar per non-empty bucket, stacked: committed below, aborted above
            ax.bar(edges[drawn], values[drawn], width=np.diff(edges)[drawn], bottom=bottom[drawn], align="edge",
                   color=OUTCOME_COLORS[outcome], edgecolor="white", linewidth=0.4,
                   label=f"{outcome} ({int(values.sum()):,})")
            bottom += values
        _log_ms_axis(ax)
        ax.set_xlim(edges[0] / 3, edges[-1] * 3)  # room for a labelled tick on each side of a narrow spread
        ax.set_ylim(0, max(1, int(bottom.max())) * 1.1)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("ms from the transaction's first batch to its COMMIT/ABORT marker (their max_timestamp)")
        ax.set_ylabel("transactions")
        ax.set_title(f"completed transactions by duration ({int(counts[measured].sum()):,}), committed and aborted")
        ax.legend(frameon=False, fontsize=7.5)
        return _svg(figure)
