"""The HTML report (idemcore/audit/html/): one self-contained page, every section, data escaped, sizes bounded,
and loaded by a real browser (headless Chromium over its DevTools protocol: the DOM has the charts and tables,
the console has no error, the screenshot is not blank)."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from idemcore.audit import AuditReport, replay_table
from idemcore.audit.html import Limits, is_html_report, render_html, write_html
from idemcore.audit.logdir import audit_log_dir
from idemcore.cli import main
from idemcore.findings import Finding
from idemcore.synth.dataset import generate
from idemcore.synth.streams import DEFAULT_MIX

from .test_audit_hanging import build
from .test_replay import dataset_table

SECTIONS = ["findings", "over-time", "partitions", "transactions", "lso", "hanging", "gaps", "zombies", "details",
            "provenance"]
CHARTS = ["findings-over-time", "partition-activity", "partition-heatmap", "partition-panels", "completed-durations",
          "transaction-durations", "lso-lag", "hanging-timeline"]
#: Charts drawn from batch timestamps only (the replay's timeline and transaction durations).
TIMED_CHARTS = ["partition-activity", "completed-durations", "hanging-timeline"]
#: Topic names no Kafka cluster allows, but a Parquet file may hold: each must show as text, never act.
HOSTILE = {"topic-000": "<script>document.title='pwned'</script>",
           "topic-001": '"><img src=x onerror="document.title=1">$\\alpha$ & co'}


def _report(path: Path, *, topics: dict[str, str] | None = None, **options) -> AuditReport:
    table = dataset_table(path)
    if topics:
        names = pc.cast(table.column("topic"), pa.string()).to_pylist()
        table = table.set_column(table.schema.get_field_index("topic"), "topic",
                                 pa.array([topics.get(n, n) for n in names], pa.string()))
    return AuditReport.from_results([replay_table(table)], order_by="seq_no", seconds=1.0, source=str(path),
                                    **options)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A dataset as the demo writes one (the default mix of anomalies), small; more gaps than a table shows."""
    out = tmp_path_factory.mktemp("html") / "ds"
    generate(out, topics=2, partitions=4, producers=20, batches=20000, seed=5, partitions_per_file=4,
             anomalies={**DEFAULT_MIX, "sequence_gap": 60}, progress=False)
    return out


@pytest.fixture(scope="module")
def report(dataset) -> AuditReport:
    return _report(dataset)


@pytest.fixture(scope="module")
def page(report) -> str:
    return render_html(report, command=["idemcore", "audit", "ds", "--html", "r.html"])


@pytest.fixture(scope="module")
def hostile(dataset) -> AuditReport:
    return _report(dataset, topics=HOSTILE)


@pytest.fixture(scope="module")
def hostile_page(hostile) -> str:
    return render_html(hostile, command="idemcore audit '<b>bold</b>'", title="<i>t</i>")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    """A log directory written by the broker and its coordinator (``__transaction_state`` included): hanging,
    cleared and recent transactions (tests/test_audit_hanging.py)."""
    return build(tmp_path_factory.mktemp("html-logs") / "logs").root


class _Page(HTMLParser):
    """What a page holds: ids, in-page links, tags, rows per table, text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.links: list[str] = []
        self.tags: dict[str, int] = {}
        self.attributes: list[tuple[str, str, str]] = []
        self.tables: list[int] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            self.attributes.append((tag, name, value or ""))
            if name == "id":
                self.ids.append(value)
            if name in ("href", "xlink:href") and value and value.startswith("#"):
                self.links.append(value[1:])
        if tag == "table":
            self.tables.append(0)
        if tag == "tr" and self.tables:
            self.tables[-1] += 1

    def handle_data(self, data):
        self.text.append(data)


def _section(text: str, anchor: str) -> str:
    start = text.index(f'<section id="{anchor}">')
    return text[start:text.index("</section>", start)]


def _rows(section: str) -> int:
    return section.count("<tr") - section.count("<thead>")


def test_every_section_chart_and_link_is_there(report, page):
    parsed = _Page(page)
    assert len(parsed.ids) == len(set(parsed.ids)), "ids repeat"
    for anchor in SECTIONS:
        assert anchor in parsed.ids, anchor
    for chart in CHARTS:
        assert f"chart-{chart}" in parsed.ids, chart
    assert parsed.tags["svg"] == len(CHARTS)
    # Every in-page link (navigation, findings table, chart bars and labels) lands on an element of the page.
    assert set(parsed.links) <= set(parsed.ids), set(parsed.links) - set(parsed.ids)
    counts = report.finding_counts()
    for name, count in counts.items():
        assert f'href="#finding-{name}"' in page and f"finding-{name}" in parsed.ids
        assert f"{name}: {count:,}</h3>" in page
    # The findings table lists every kind of the registry, with its count.
    table = _section(page, "findings")
    for finding in Finding:
        if finding is not Finding.NONE:
            assert re.search(rf">{finding.label}(</a>)?</td><td class=\"num\">{counts.get(finding.label, 0):,}</td>",
                             table), finding.label
    # Gaps with their missing ranges, open transactions with their verdicts, the command and the dataset.
    gaps = report.gaps().slice(0, 3).to_pylist()
    for gap in gaps:
        assert f"{gap['missing_first']:,} .. {gap['missing_last']:,}" in _section(page, "gaps")
    hanging = _section(page, "hanging")
    assert hanging.count('<span class="verdict hanging_unconfirmed">') == report.hanging_transactions().num_rows
    assert all(f'id="txn-{k}"' in hanging for k in range(report.open_txns.num_rows))
    provenance = _section(page, "provenance")
    assert "idemcore audit ds --html r.html" in provenance and str(report.source) in provenance
    # Last stable offsets held, per partition.
    held = report.held_partitions()
    assert f"{held.num_rows:,} of {report.partitions.num_rows:,} partitions" in _section(page, "lso")


def test_the_page_is_self_contained(page):
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page.lower()
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "@import" not in page and "<link" not in page
    assert not re.search(r"url\((?!#)", page)  # CSS and SVG refer only to the page's own ids
    policy = [value for tag, name, value in _Page(page).attributes if tag == "meta" and name == "content"
              and "default-src" in value]
    assert policy and policy[0].startswith("default-src 'none';") and "script-src" not in policy[0]


def test_strings_from_the_data_and_command_are_escaped(hostile_page):
    page = hostile_page
    parsed = _Page(page)
    assert parsed.tags.get("script", 0) == 0 and parsed.tags.get("img", 0) == 0
    assert "<b>bold" not in page and "<i>t" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    # Every hostile name is shown as text, in the tables and in the charts' text, and no attribute carries it
    # unescaped (no onerror=, no injected element).
    text = "".join(parsed.text)
    for name in HOSTILE.values():
        assert name not in page
        assert text.count(name) >= 3, name
    assert all(not name.startswith("on") for _, name, _ in parsed.attributes)
    # Read as text, not as mathtext: the dollars are still there in the charts.
    svg_text = "".join(re.findall(r"<svg.*?</svg>", page, re.S))
    assert "$\\alpha$ &amp; co" in svg_text


def test_an_empty_audit_has_every_section(tmp_path):
    report = AuditReport.from_results([], order_by="seq_no", seconds=0.0)
    path = write_html(report, tmp_path / "empty.html")
    page = path.read_text()
    parsed = _Page(page)
    assert all(anchor in parsed.ids for anchor in SECTIONS)
    assert parsed.tags.get("svg", 0) == 0 and set(parsed.links) <= set(parsed.ids)
    assert "No sequence gap." in page and "No transaction was open" in page and is_html_report(path)


def test_without_batch_timestamps_the_time_axis_is_the_stream_order(dataset):
    table = dataset_table(dataset).drop_columns(["max_timestamp"])
    report = AuditReport.from_results([replay_table(table)], order_by="seq_no", seconds=1.0)
    page = render_html(report)
    assert "arrival order (seq_no: the data has no batch timestamps)" in page
    assert "The data has no batch timestamps: no time line." in page
    assert all(f'id="chart-{name}"' in page for name in CHARTS if name not in TIMED_CHARTS)
    # The per-partition batches and the completed transactions' durations need timestamps: said, not drawn.
    for name in ("partition-activity", "completed-durations"):
        assert f'id="chart-{name}"' not in page and f'id="chart-{name}-unavailable"' in page
    assert page.count("not available for this input") == 2


def test_cli_demo_writes_the_page_and_says_where(spark, tmp_path, capsys):
    kept = tmp_path / "demo"
    assert main(["demo", "--batches", "20000", "--producers", "20", "--partitions", "4", "--seed", "5", "--dir",
                 str(kept), "-q"]) == 0
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-2] == f"HTML report: {kept / 'report.html'}" and lines[-1].startswith(f"kept in {kept}: ")
    page = (kept / "report.html").read_text()
    assert "<title>idemcore demo: audit of " in page
    assert f"idemcore demo --quiet --batches 20000 --partitions 4 --producers 20 --seed 5 --dir {kept}</pre>" in page
    assert all(f'id="chart-{name}"' in page for name in CHARTS)


def test_a_log_directory_audit_with_its_transaction_log(log_dir, tmp_path):
    report = audit_log_dir(log_dir)
    path = write_html(report, tmp_path / "logs.html", command="idemcore audit logs --html logs.html")
    page = path.read_text()
    parsed = _Page(page)
    verdicts = report.open_txns.column("verdict").to_pylist()
    assert sorted(set(verdicts)) == ["cleared", "hanging", "recent"]
    hanging = _section(page, "hanging")
    for verdict in set(verdicts):
        assert hanging.count(f'<span class="verdict {verdict}">') == verdicts.count(verdict), verdict
    for tid in ("ongoing", "stray", "late", "prepare", "recent"):
        assert f"<code>{tid}</code>" in hanging, tid
    # The time line: a bar per open transaction, linked to its row; the coordinator's durations chart.
    timeline = page[page.index('id="chart-hanging-timeline"'):]
    timeline = timeline[:timeline.index("</svg>")]
    assert all(f'href="#txn-{k}"' in timeline for k in range(len(verdicts)))
    assert "each transactional id's latest transaction in the coordinator's log" in page
    assert "problems" in parsed.ids and "Problems in the files" in page and set(parsed.links) <= set(parsed.ids)
    assert "transaction log</dt><dd>read: __transaction_state" in page
    # Without the log, every candidate is hanging, unconfirmed.
    page = render_html(audit_log_dir(log_dir, use_transaction_log=False))
    assert '<span class="verdict hanging_unconfirmed">' in _section(page, "hanging")


def test_big_audits_are_cut_with_a_count_of_what_was_left_out(report):
    limits = Limits(rows=2, partition_rows=3, chart_partitions=4, panels=2, timeline_rows=2)
    page = render_html(report, limits=limits)
    gaps = report.gaps().num_rows
    assert gaps > 2 and min(report.finding_counts().values()) > 2  # every table is cut
    assert _rows(_section(page, "gaps")) == 2
    assert f"showing the first 2 of {gaps:,} gaps: {gaps - 2:,} more not shown" in page
    assert _rows(_section(page, "partitions")) == 3 and "showing the first 3 of 8 partitions" in page
    duplicates = report.finding_counts()["duplicate"]
    assert f"showing the first 2 of {duplicates:,} duplicate batches" in page
    assert "5 other partitions" in page  # the heat map's last row sums the partitions not drawn
    opened = report.open_txns.num_rows
    assert f"{opened - 2:,} open transactions are not drawn (at most 2)" in page
    # Forty times the findings: as many rows, as many chart elements (the bins aggregate), about the same size.
    bigger = render_html(dataclasses.replace(report, findings=pa.concat_tables([report.findings] * 40)),
                         limits=limits)
    assert f"showing the first 2 of {40 * gaps:,} gaps" in bigger and _rows(_section(bigger, "gaps")) == 2
    assert bigger.count("<tr") == page.count("<tr")
    assert bigger.count("<path") == pytest.approx(page.count("<path"), abs=5)  # axes may get another tick
    assert len(bigger) < 1.05 * len(page)  # longer numbers only


def test_cli_audit_writes_the_page_and_refuses_to_clobber(log_dir, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["audit", str(log_dir), "--html", str(out), "--hanging-after-ms", "60000", "-q"]) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith(f"HTML report: {out}")
    page = out.read_text()
    # The command as it ran (rebuilt from the parsed options: long names, defaults left out).
    assert f"idemcore audit {log_dir} --quiet --html {out} --hanging-after-ms 60000</pre>" in page
    assert main(["audit", str(log_dir), "--html", str(out), "--json"]) == 0  # an earlier report: replaced
    assert json.loads(capsys.readouterr().out)["html"] == str(out)
    mine = tmp_path / "notes.html"
    mine.write_text("<p>my notes</p>")
    assert main(["audit", str(log_dir), "--html", str(mine)]) == 2
    assert "exists and is not an idemcore HTML report: not replaced" in capsys.readouterr().err
    assert mine.read_text() == "<p>my notes</p>"
    assert main(["audit", str(log_dir), "--html", str(log_dir / "t-0" / "r.html")]) == 2
    assert "is inside the audited path" in capsys.readouterr().err and not (log_dir / "t-0" / "r.html").exists()


# ---- In a real browser ----------------------------------------------------------------------------------------


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium to load the page in: `scripts/dev test` installs Debian's chromium package "
                "(apt-get install -y chromium) and could not")


class _DevTools:
    """Headless Chromium driven over its DevTools protocol: one page, its console and exceptions recorded."""

    def __init__(self, binary: str, profile: Path):
        import websocket  # websocket-client, of the test extra
        self.process = subprocess.Popen(
            [binary, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--hide-scrollbars",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "--remote-allow-origins=*", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError(f"Chromium did not open its DevTools port ({binary})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t["type"] == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(method)
        self.call("Emulation.setDeviceMetricsOverride", width=1280, height=1000, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def load(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            assert time.monotonic() < deadline, "the page did not load"
            self.events.append(json.loads(self.socket.recv()))

    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and browser log errors (CSP violations, ...)."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: {params['args']}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(f"log {params['entry']['level']}: {params['entry']['text']}")
        return found

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"]["value"]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


_DOM = """JSON.stringify({
  title: document.title,
  sections: [...document.querySelectorAll('main > section')].map(s => s.id),
  charts: [...document.querySelectorAll('figure.chart svg')].map(s => ({id: s.id,
      width: s.getBoundingClientRect().width, height: s.getBoundingClientRect().height,
      shapes: s.querySelectorAll('path, image, text').length})),
  tables: document.querySelectorAll('table').length,
  rows: document.querySelectorAll('tbody tr').length,
  scripts: document.querySelectorAll('script').length,
  images: document.querySelectorAll('img').length,
  brokenLinks: [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href').slice(1))
      .filter(id => !document.getElementById(id)),
  svgLinks: document.querySelectorAll('svg a').length,
  activityPanels: [...document.querySelectorAll('#chart-partition-activity text')]
      .map(t => t.textContent).filter(t => / batches; findings besides duplicates: [0-9,]+; duplicates: /.test(t)),
  durationSeries: [...document.querySelectorAll('#chart-completed-durations text')]
      .map(t => t.textContent).filter(t => /^(committed|aborted) [(]/.test(t)),
  height: document.documentElement.scrollHeight,
})"""


def test_chromium_renders_the_page_without_errors(report, page, hostile, hostile_page, tmp_path):
    binary = _chromium()
    from PIL import Image

    demo = tmp_path / "report.html"
    demo.write_text(page)
    bad = tmp_path / "hostile.html"
    bad.write_text(hostile_page)
    browser = _DevTools(binary, Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)))
    try:
        # The recorder sees an error when there is one.
        check = tmp_path / "check.html"
        check.write_text("<html><body><script>console.error('seen')</script></body></html>")
        browser.load(check.as_uri())
        assert any("seen" in error for error in browser.errors())

        browser.load(demo.as_uri())
        dom = json.loads(browser.evaluate(_DOM))
        assert browser.errors() == []
        assert dom["sections"] == SECTIONS and dom["scripts"] == 0 and dom["brokenLinks"] == []
        assert [chart["id"] for chart in dom["charts"]] == [f"chart-{name}" for name in CHARTS]
        for chart in dom["charts"]:
            assert chart["width"] > 600 and chart["height"] > 100 and chart["shapes"] > 20, chart
        assert dom["tables"] >= 8 and dom["rows"] > 100 and dom["svgLinks"] > 0
        # The two charts drawn from what the replay collects: a panel per partition (8 partitions, the default
        # cap of 8: none summed), and the completed transactions' durations, committed and aborted.
        assert len(dom["activityPanels"]) == report.partitions.num_rows == 8, dom["activityPanels"]
        txns = report.transactions()
        assert dom["durationSeries"] == [f"committed ({txns['committed']:,})", f"aborted ({txns['aborted']:,})"]
        shot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
        pixels = np.asarray(Image.open(io.BytesIO(shot)).convert("L"), dtype=np.float64)
        assert pixels.shape == (1000, 1280)
        assert pixels.std() > 20 and len(np.unique(pixels)) > 50  # drawn, not a blank or single-colour page

        browser.load(bad.as_uri())
        dom = json.loads(browser.evaluate(_DOM))
        assert browser.errors() == []  # nothing injected ran or was blocked
        assert dom["title"] == "<i>t</i>"  # shown as text, as the title was given
        assert dom["scripts"] == 0 and dom["images"] == 0 and dom["brokenLinks"] == []
        shown = browser.evaluate("document.body.innerText")
        assert all(name in shown for name in HOSTILE.values())
    finally:
        browser.close()
