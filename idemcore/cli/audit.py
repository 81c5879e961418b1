"""The dataset and audit commands: ``idemcore generate``, ``idemcore audit`` and ``idemcore demo``."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from idemcore.cli.options import (
    BACKEND_CHOICES,
    BACKEND_HELP,
    COMMAND_CONFIG_HELP,
    ORIGIN_CHOICES,
    command_config_security,
    non_negative,
    positive,
    show_progress,
)
from idemcore.errors import IdemcoreError
from idemcore.findings import Finding
from idemcore.protocol.constants import DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
from idemcore.synth.dataset import DATA_DIR, TRUTH_FILE, generate, read_truth
from idemcore.synth.kafka_log import DEFAULT_SEGMENT_BYTES, KAFKA_DEFAULT_MIX, LOGS_DIR
from idemcore.synth.streams import CANNOT_OCCUR, DEFAULT_MIX, parse_mix

# pyarrow, pyspark and the modules that need them are imported by the commands that run them, so
# `idemcore simulate` and `idemcore backends` work on an installation without the extras.

_DETAIL_ROWS = 10
#: The modules of the spark extra.
_SPARK_EXTRA = ("pyarrow", "pandas", "pyspark")


def _missing_extra(command: str, module: str) -> IdemcoreError:
    return IdemcoreError(f"`idemcore {command}` needs {module}, which is not installed: pip install 'idemcore[spark]'")


def _needs_extra(*modules: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """A command that needs ``modules`` of the spark extra: one missing is one line naming the extra, said
    before any work (``demo`` would otherwise generate its dataset first), not a ModuleNotFoundError."""
    def decorate(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        command = run.__name__.removeprefix("run_")

        @functools.wraps(run)
        def wrapped(args: argparse.Namespace) -> int:
            for module in modules:
                try:
                    importlib.import_module(module)
                except ImportError:
                    raise _missing_extra(command, module) from None
            try:
                return run(args)
            except ImportError as exc:  # another module of the extra (pandas), imported on the way
                root = (exc.name or "").partition(".")[0]
                if root in _SPARK_EXTRA:
                    raise _missing_extra(command, root) from exc
                raise
        return wrapped
    return decorate


@contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Warnings (a column filled with its default, ...) as one line each, like the errors."""
    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        print(f"idemcore: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


_COUNTS = {"count", "planted", "found", "idle_ms"}


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[f"{v:,}" if h in _COUNTS and isinstance(v, int) else str(v) for h, v in zip(headers, row, strict=True)]
             for row in rows]
    widths = [max(len(h), *(len(r[k]) for r in cells)) if cells else len(h) for k, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) if k == 0 else h.rjust(w) for k, (h, w) in enumerate(zip(headers, widths,
                                                                                          strict=True)))]
    for row in cells:
        lines.append("  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                               for k, (c, w) in enumerate(zip(row, widths, strict=True))))
    return "\n".join(lines)


def _detail(title: str, table: Any, columns: list[str], yes_no: tuple[str, ...] = (), note: str | None = None,
            reasons: bool = False) -> None:
    """A titled table of the first :data:`_DETAIL_ROWS` rows of ``table``, then "... and N more". ``note``: a
    line between the title and the table. ``reasons``: then one line per row shown, its ``reason``."""
    print(f"\n{title}:")
    if note:
        print(note)
    shown = table.slice(0, _DETAIL_ROWS).to_pylist()
    print(_table(columns, [[("yes" if row[c] else "no") if c in yes_no else "-" if row[c] is None else row[c]
                            for c in columns] for row in shown]))
    if table.num_rows > _DETAIL_ROWS:
        print(f"... and {table.num_rows - _DETAIL_ROWS:,} more")
    if reasons:
        for row in shown:
            print(f"  {row['topic']}-{row['partition']} producer {row['producer_id']} epoch {row['producer_epoch']}: "
                  f"{row['verdict']}: {row['reason']}")


#: The open transactions' columns, and with the coordinator's log what it says of each.
_OPEN_COLUMNS = ["topic", "partition", "producer_id", "first_offset", "idle_ms"]
_JUDGED_COLUMNS = ["topic", "partition", "producer_id", "producer_epoch", "first_offset", "idle_ms",
                   "transactional_id", "coordinator_state"]


def _print_hanging(report: Any) -> None:
    """The hanging transactions; with the coordinator's log, each with its transactional id, state and reason,
    then the candidates it cleared. Without one, a line saying they are not confirmed."""
    from idemcore.audit.find_hanging import LOG_READ, NOT_CONFIRMED

    hanging = report.hanging_transactions()
    bound = f"idle more than {report.hanging_after_ms:,} ms, --hanging-after-ms"
    if report.transaction_log_status != LOG_READ:
        if hanging.num_rows:
            how = ("where the principal may call ListTransactions and DescribeTransactions (and not "
                   "--ignore-transaction-log), each is confirmed or cleared" if getattr(report, "bootstrap", "")
                   else "with the __transaction_state partitions in the audit, each is confirmed or cleared")
            _detail(f"hanging transactions ({bound})", hanging, _OPEN_COLUMNS,
                    note=f"{NOT_CONFIRMED[report.transaction_log_status]}: judged by idle time alone ({how} as "
                         "kafka-transactions.sh find-hanging does)")
        return
    if hanging.num_rows:
        _detail(f"hanging transactions ({bound}), confirmed by the transaction coordinator's log", hanging,
                _JUDGED_COLUMNS, reasons=True)
    cleared = report.cleared()
    if cleared.num_rows:
        _detail(f"cleared ({bound}, but the transaction coordinator still tracks them: not hanging)", cleared,
                _JUDGED_COLUMNS, reasons=True)


def print_report(report: Any) -> None:
    """The findings table, then the details an operator acts on: gaps, zombies, hanging transactions, the
    open transactions that are not hanging, and the partitions whose last stable offset is held."""
    counts = report.finding_counts()
    streams = report.partitions.num_rows
    print(f"audited {report.batches:,} batches in {streams:,} (topic, partition) streams in {report.seconds:.1f} s "
          f"({report.batches_per_s / 1e6:.2f} M batches/s)\n")
    rows = [[f.label, counts.get(f.label, 0)] for f in Finding if f is not Finding.NONE]
    print(_table(["finding", "count"], rows))
    sections = [
        ("sequence gaps", report.gaps(), ["topic", "partition", "producer_id", "producer_epoch", "missing_first",
                                          "missing_last", report.order_by]),
        ("zombie writes", report.zombie_writes(), ["topic", "partition", "producer_id", "zombie_epoch",
                                                   "current_epoch", "finding", report.order_by]),
    ]
    for title, table, columns in sections:
        if table.num_rows:
            _detail(title, table, columns)
    _print_hanging(report)
    txns = report.transactions()
    check = report.hanging_check()
    judged = check["transaction_log"] == "read"
    print(f"\ntransactions: {txns['committed']:,} committed, {txns['aborted']:,} aborted "
          f"({txns['aborted_records']:,} records a read_committed consumer skips), {txns['open']:,} still open"
          + (f": {txns['hanging']:,} hanging, {txns['open_not_hanging']:,} not hanging" if txns["open"] else "")
          + (f" ({check['cleared']:,} of them cleared by the coordinator's log)" if judged and check["cleared"]
             else ""))
    if judged:
        print(f"hanging check: {check['candidates']:,} candidate(s) idle more than {report.hanging_after_ms:,} ms; "
              f"the transaction coordinator's log ({check['read']}) confirms {check['confirmed']:,} as hanging and "
              f"clears {check['cleared']:,}, as kafka-transactions.sh find-hanging would")
    elif check["candidates"]:
        from idemcore.audit.find_hanging import NOT_CONFIRMED

        print(f"hanging check: {check['candidates']:,} candidate(s) idle more than {report.hanging_after_ms:,} ms, "
              f"{NOT_CONFIRMED[check['transaction_log']]}")
    waiting = report.recent()
    if waiting.num_rows:
        title = f"open but not hanging (idle at most {report.hanging_after_ms:,} ms, --hanging-after-ms)"
        if judged:
            _detail(title, waiting, _JUDGED_COLUMNS, reasons=True)
        else:
            _detail(title, waiting, _OPEN_COLUMNS)
    held = report.held_partitions()
    if held.num_rows:
        _detail(f"last stable offset held back by an open transaction in {held.num_rows:,} of {streams:,} "
                "partitions", held,
                ["topic", "partition", "last_stable_offset", "log_end_offset", "producer_id", "hanging"],
                yes_no=("hanging",))


def _report_files(out: Path) -> str:
    from idemcore.audit.report import REPORT_FILES

    return ", ".join(f"{name} {out / file}" for name, file in REPORT_FILES.items())


#: The parsers of the commands, by name: what :func:`_command_line` reads the options from.
_PARSERS: dict[str, argparse.ArgumentParser] = {}


def _command_line(command: str, args: argparse.Namespace) -> str:
    """The command as it ran, for the HTML report: ``idemcore COMMAND`` with its arguments and every option
    whose value is not the default (rebuilt from the parsed options, so it is the same whether the command came
    from a shell or from ``main([...])``)."""
    parser = _PARSERS[command]
    words = ["idemcore", command]
    options: list[str] = []
    for action in parser._actions:  # argparse keeps no public list of them
        if action.dest in ("help", "run") or not hasattr(args, action.dest):
            continue
        value = getattr(args, action.dest)
        if not action.option_strings:
            words.append(str(value))
        elif value != action.default and value is not None:
            flag = max(action.option_strings, key=len)
            if isinstance(action, argparse._StoreTrueAction | argparse._CountAction):
                options += [flag] * (value if isinstance(value, int) and not isinstance(value, bool) else 1)
            else:
                options += [flag, str(value)]
    return shlex.join(words + options)


def _check_html(html: Path, source: str | None) -> None:
    """``--html PATH`` may replace only an earlier HTML report, and not inside the audited path (the next audit
    would read it as input): said before the audit runs."""
    from idemcore.audit.html import is_html_report

    if html.is_dir():
        raise IsADirectoryError(f"--html {html} is a directory; name the file to write (e.g. {html / 'report.html'})")
    if html.exists() and not is_html_report(html):
        raise FileExistsError(f"--html {html} exists and is not an idemcore HTML report: not replaced")
    if source is None or "://" in source:
        return
    audited = Path(source).resolve()
    if audited.is_file():
        audited = audited.parent
    if audited in html.resolve().parents:
        raise ValueError(f"--html {html} is inside the audited path {source}: the next audit would read it as "
                         "input; write the report elsewhere")


def _write_html(report: Any, html: Path, command: str, args: argparse.Namespace, title: str | None = None) -> Path:
    from idemcore.audit.html import write_html
    from idemcore.progress import waiting

    with waiting("writing the HTML report", enabled=show_progress(args)):
        return write_html(report, html, command=_command_line(command, args), title=title)


@_needs_extra("pyarrow")
def run_generate(args: argparse.Namespace) -> int:
    truth = generate(args.out, topics=args.topics, partitions=args.partitions, producers=args.producers,
                     batches=args.batches, anomalies=None if args.anomalies is None else parse_mix(args.anomalies),
                     seed=args.seed, retry_fraction=args.retry_fraction, partitions_per_file=args.partitions_per_file,
                     overwrite=args.overwrite, progress=show_progress(args), format=args.format,
                     segment_bytes=args.segment_bytes)
    kafka = args.format == "kafka"
    if args.json:
        summary = {"out": str(args.out), "format": args.format, "batches": truth["batches"],
                   "findings": truth["findings"], "files": len(truth["files"])}
        if kafka:
            summary.update(produce_attempts=truth["produce_attempts"], not_written=truth["not_written"],
                           segments=truth["log"]["segments"], bytes=truth["log"]["bytes"],
                           not_planted=truth["not_planted"])
        print(json.dumps(summary))
        return 0
    if kafka:
        log = truth["log"]
        skipped = truth["not_written"]
        print(f"wrote {truth['batches']:,} batches ({log['bytes']:,} bytes in {log['segments']:,} segments of "
              f"{len(truth['files']):,} partitions) to {args.out}/{LOGS_DIR}: what the leaders appended of "
              f"{truth['produce_attempts']:,} produce attempts ({skipped['duplicate']:,} in-window retries "
              f"deduplicated, {skipped['refused_after_anomaly']:,} refused behind a planted anomaly)")
    else:
        print(f"wrote {truth['batches']:,} batches in {len(truth['files'])} Parquet files to {args.out}/{DATA_DIR}")
    print("planted: " + (", ".join(f"{n:,} {name}" for name, n in truth["findings"].items()) or "nothing"))
    if kafka:
        for name, why in truth["not_planted"].items():
            print(f"not planted: {name}: {why}")
        print(f"audit it: idemcore audit {args.out}/{LOGS_DIR}")
    print(f"ground truth: {args.out}/truth.json")
    return 0


def _audit(args: argparse.Namespace, source: Any) -> Any:
    from idemcore.audit.spark import audit

    with _one_line_warnings():
        return audit(source, master=args.master, order_by=getattr(args, "order_by", None),
                     origin=getattr(args, "origin", "client"), tasks=args.tasks,
                     hanging_after_ms=args.hanging_after_ms, now_ms=getattr(args, "now_ms", None), out=args.out,
                     backend=args.backend, progress=show_progress(args))


def _audit_log_dir(args: argparse.Namespace) -> Any:
    """Kafka's log directory (or partition directories, segments): in-process, over the native header scan."""
    from idemcore.audit.logdir import audit_log_dir
    from idemcore.audit.spark.audit_job import check_out
    from idemcore.progress import waiting

    if args.out:
        check_out(Path(args.out), args.path)  # never inside the audited directory, never over a user's files

    from idemcore.audit.find_hanging import TransactionLogError

    use_log = not getattr(args, "ignore_transaction_log", False)
    try:
        if args.spark:
            from idemcore.audit.spark import audit_log_dir_spark

            with _one_line_warnings():
                report = audit_log_dir_spark(args.path, master=args.master, tasks=args.tasks, backend=args.backend,
                                             hanging_after_ms=args.hanging_after_ms,
                                             now_ms=getattr(args, "now_ms", None), progress=show_progress(args),
                                             use_transaction_log=use_log)
        else:
            with _one_line_warnings(), waiting("auditing the log directory", enabled=show_progress(args)):
                report = audit_log_dir(args.path, backend=args.backend, hanging_after_ms=args.hanging_after_ms,
                                       now_ms=getattr(args, "now_ms", None), use_transaction_log=use_log)
    except TransactionLogError as exc:  # one line, and the way to audit anyway
        raise IdemcoreError(f"{exc} (--ignore-transaction-log audits without it)") from None
    if args.out:
        report.write(args.out)
    return report


def _topics(args: argparse.Namespace) -> list[str] | None:
    if args.topics is None:
        return None
    names = [name.strip() for name in args.topics.split(",") if name.strip()]
    if not names:
        raise IdemcoreError(f"--topics {args.topics!r} names no topic")
    return names


def _audit_cluster(args: argparse.Namespace) -> Any:
    """A live cluster (``kafka://HOST:PORT,...``): fetched over the wire, in-process or with --spark."""
    from idemcore.audit.spark.audit_job import check_out
    from idemcore.audit.wire import audit_cluster
    from idemcore.audit.wire_fetch import Position, parse_bootstrap

    parse_bootstrap(args.path)  # a bad address, said before any work
    start, end = Position.parse(args.start), Position.parse(args.end)
    start.check_before(end)  # said before any connection
    if args.out:
        check_out(Path(args.out), None)
    security = command_config_security(args.config)
    confirm = not getattr(args, "ignore_transaction_log", False)
    with _one_line_warnings():
        if args.spark:
            from idemcore.audit.spark import audit_cluster_spark

            report = audit_cluster_spark(args.path, topics=_topics(args), start=start, end=end,
                                         client_properties=args.config, master=args.master, tasks=args.tasks,
                                         backend=args.backend, hanging_after_ms=args.hanging_after_ms,
                                         now_ms=getattr(args, "now_ms", None), confirm_hanging=confirm,
                                         progress=show_progress(args))
        else:
            report = audit_cluster(args.path, topics=_topics(args), start=start, end=end, security=security,
                                   backend=args.backend, hanging_after_ms=args.hanging_after_ms,
                                   now_ms=getattr(args, "now_ms", None), confirm_hanging=confirm,
                                   progress=show_progress(args))
    if args.out:
        report.write(args.out)
    return report


def _print_cluster_details(report: Any) -> None:
    """What a cluster audit adds: the bytes fetched, the problems of the answers, the findings by offset."""
    print(f"\nfetched {report.fetched_bytes / 1e6:,.1f} MB from {report.bootstrap} "
          f"({report.megabytes_per_s:,.1f} MB/s)")
    _print_problems("problems in what the leaders served", report.problem_lines())
    located = report.located_findings
    if located is not None and located.num_rows:
        columns = ["topic", "partition", "base_offset", "last_offset", "producer_id", "producer_epoch",
                   "base_sequence", "finding"]
        shown = located.slice(0, _DETAIL_ROWS).to_pylist()
        print(f"\nfindings by offset{f' (first {_DETAIL_ROWS})' if located.num_rows > _DETAIL_ROWS else ''}:")
        print(_table(columns, [[row[c] for c in columns] for row in shown]))


def _print_problems(title: str, lines: list[str]) -> None:
    """The first :data:`_DETAIL_ROWS` problems under ``title`` (nothing when there are none)."""
    if lines:
        print(f"\n{title} ({len(lines)}):")
        for line in lines[:_DETAIL_ROWS]:
            print(f"  {line}")
        if len(lines) > _DETAIL_ROWS:
            print(f"  ... and {len(lines) - _DETAIL_ROWS} more")


def _print_log_dir_problems(report: Any) -> None:
    _print_problems("problems in the files", report.problem_lines())
    located = report.located_findings
    if located is not None and located.num_rows:
        columns = [name for name in ("topic", "partition", "base_offset", "producer_id", "finding", "file",
                                     "position") if name in located.column_names]
        shown = located.slice(0, _DETAIL_ROWS).to_pylist()
        print(f"\nfindings in the files{f' (first {_DETAIL_ROWS})' if located.num_rows > _DETAIL_ROWS else ''}:")
        print(_table(columns, [[row[c] for c in columns] for row in shown]))


#: The columns of each of the first candidates in `audit --json`.
_CANDIDATE_JSON = ["topic", "partition", "producer_id", "producer_epoch", "first_offset", "idle_ms", "transactional_id",
                   "coordinator_state", "coordinator_producer_id", "coordinator_producer_epoch", "verdict", "reason"]


#: Finding lines printed per round of `audit --follow` (the rest are in the round's findings file).
_FOLLOW_LINES = 20


def _run_follow(args: argparse.Namespace) -> int:
    """`audit --follow`: rounds until Ctrl-C (SIGINT or SIGTERM: the round under way finishes, the checkpoint
    stays consistent, a final summary, exit 0). One line per new finding, a line per round that read something."""
    import signal

    from idemcore.audit.follow import follow, round_summary

    for option, given in (("--html", args.html is not None), ("--spark", args.spark)):
        if given:
            raise IdemcoreError(f"{option} does not go with --follow")
    if args.engine == "spark":
        return _run_follow_spark(args)
    checkpoint = args.checkpoint
    if checkpoint is None and args.out is not None:
        checkpoint = args.out / "_checkpoint"
    stopping: list[int] = []

    def stop_soon(signum: int, frame: Any) -> None:
        if stopping:  # a second Ctrl-C: abandon the round (the checkpoint is replaced whole or not at all)
            raise KeyboardInterrupt
        stopping.append(signum)

    previous = {sig: signal.signal(sig, stop_soon) for sig in (signal.SIGINT, signal.SIGTERM)}
    totals = {"rounds": 0, "batches": 0, "findings": 0}
    counts: dict[str, int] = {}
    shown_waiting: list[str] = []  # the incomplete files last reported

    def on_round(result: Any) -> None:
        totals["rounds"] += 1
        totals["batches"] += result.batches
        totals["findings"] += result.findings.num_rows
        for name, n in result.report.finding_counts().items():
            if name != Finding.HANGING_TRANSACTION.label:
                counts[name] = counts.get(name, 0) + n
        if args.json:
            print(json.dumps(round_summary(result)), flush=True)
            return
        for problem in result.problems:
            print(f"round {result.round}: problem: {problem}", flush=True)
        rows = result.findings.slice(0, _FOLLOW_LINES).to_pylist()
        order = result.report.order_by
        for row in rows:
            where = f" {row['file']}@{row['position']}" if "file" in row else ""
            print(f"round {result.round}: {row['finding']}: {row['topic']}-{row['partition']} producer "
                  f"{row['producer_id']} epoch {row['producer_epoch']} sequence {row['base_sequence']} "
                  f"{order} {row[order]}{where}", flush=True)
        if result.findings.num_rows > _FOLLOW_LINES:
            print(f"round {result.round}: ... and {result.findings.num_rows - _FOLLOW_LINES:,} more in "
                  f"{result.findings_file}", flush=True)
        if result.batches:
            print(f"round {result.round}: {result.batches:,} batches ({result.total_batches:,} in all), "
                  f"{result.findings.num_rows:,} new finding(s), {result.report.open_txns.num_rows:,} open "
                  f"transaction(s), {result.report.hanging_transactions().num_rows:,} hanging"
                  + (f"; waiting for {len(result.waiting)} incomplete file(s)" if result.waiting else ""),
                  flush=True)
        elif result.waiting and result.waiting != shown_waiting:  # said once, not every idle round
            more = f" (and {len(result.waiting) - 1} more)" if len(result.waiting) > 1 else ""
            print(f"round {result.round}: waiting for an incomplete file, read in name order: "
                  f"{result.waiting[0]}{more}", flush=True)
        shown_waiting[:] = result.waiting

    started = time.perf_counter()
    try:
        with _one_line_warnings():
            if args.path.startswith("kafka://"):
                from idemcore.audit.wire_follow import follow_cluster

                if args.end != "latest":
                    raise IdemcoreError("--to does not go with --follow (a follow reads on as the log grows)")
                follow_cluster(args.path, args.out, checkpoint, topics=_topics(args), start=args.start,
                               security=command_config_security(args.config), interval_ms=args.interval_ms,
                               stop=lambda: bool(stopping), on_round=on_round, keep=False, backend=args.backend,
                               hanging_after_ms=args.hanging_after_ms)
            else:
                follow(args.path, args.out, checkpoint, interval_ms=args.interval_ms, stop=lambda: bool(stopping),
                       on_round=on_round, keep=False, order_by=args.order_by, origin=args.origin,
                       backend=args.backend, hanging_after_ms=args.hanging_after_ms)
    except KeyboardInterrupt:
        print("idemcore: round abandoned; the checkpoint holds the last whole round", file=sys.stderr)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _print_final(args, "rounds", "round(s)", totals, counts, time.perf_counter() - started, checkpoint)
    return 0


def _print_final(args: argparse.Namespace, unit: str, unit_text: str, totals: dict[str, int], counts: dict[str, int],
                 seconds: float, checkpoint: Path | None) -> None:
    """The summary a follow prints when it stops: one JSON object with --json, else a line; ``unit`` counts the
    rounds (in process) or micro-batches (Spark)."""
    final = {unit: totals[unit], "batches": totals["batches"], "findings": totals["findings"],
             "by_finding": counts, "seconds": round(seconds, 3),
             "out": str(args.out) if args.out else None, "checkpoint": str(checkpoint) if checkpoint else None}
    if args.json:
        print(json.dumps({"final": final}), flush=True)
    else:
        print(f"stopped after {totals[unit]:,} {unit_text} in {seconds:.1f} s: {totals['batches']:,} batches, "
              f"{totals['findings']:,} finding(s)"
              + (f" ({', '.join(f'{n:,} {name}' for name, n in counts.items())})" if counts else "")
              + (f"; findings in {args.out}" if args.out else "")
              + (f"; checkpoint {checkpoint}" if checkpoint else ""), flush=True)


def _run_follow_spark(args: argparse.Namespace) -> int:
    """`audit --follow --engine spark`: a Structured Streaming query (a micro-batch every --interval-ms) until
    Ctrl-C (SIGINT or SIGTERM: the query is stopped; a micro-batch cut short runs again on restart and rewrites
    the same findings file). One line per new finding (first ones), a line per micro-batch that read something."""
    import signal

    from idemcore.audit.follow import LOG_DIR, source_kind
    from idemcore.audit.spark import follow_stream, get_session
    from idemcore.audit.spark.session import java_causes

    if args.path.startswith("kafka://"):
        raise IdemcoreError(f"{args.path} is a cluster: --engine spark follows a Parquet directory; a cluster is "
                            "followed in process only (--engine local, the default)")
    if source_kind(args.path) == LOG_DIR:
        raise IdemcoreError(f"{args.path} is a Kafka log directory: --engine spark follows a Parquet directory; "
                            "a log directory is followed in process only (--engine local, the default)")
    if args.out is None:
        raise IdemcoreError("--engine spark needs --out DIR (findings files, and the checkpoint by default)")
    checkpoint = args.checkpoint if args.checkpoint is not None else args.out / "_checkpoint"
    stopping: list[int] = []

    def stop_soon(signum: int, frame: Any) -> None:
        stopping.append(signum)

    totals = {"batches": 0, "micro_batches": 0, "findings": 0}
    counts: dict[str, int] = {}

    def on_batch(batch_id: int, findings: Any) -> None:
        totals["findings"] += findings.num_rows
        names = findings.column("finding").to_pylist()
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        if args.json:
            return
        order = "seq_no" if "seq_no" in findings.column_names else "base_offset"
        for row in findings.slice(0, _FOLLOW_LINES).to_pylist():
            print(f"batch {batch_id}: {row['finding']}: {row['topic']}-{row['partition']} producer "
                  f"{row['producer_id']} epoch {row['producer_epoch']} sequence {row['base_sequence']} "
                  f"{order} {row[order]}", flush=True)
        if findings.num_rows > _FOLLOW_LINES:
            print(f"batch {batch_id}: ... and {findings.num_rows - _FOLLOW_LINES:,} more in "
                  f"{args.out}/findings-{batch_id:08d}.parquet", flush=True)

    started = time.perf_counter()
    with _one_line_warnings():
        spark = get_session(args.master, progress=show_progress(args))
        from pyspark.errors import StreamingQueryException  # (pyspark is there: the session started)

        previous = {sig: signal.signal(sig, stop_soon) for sig in (signal.SIGINT, signal.SIGTERM)}
        query = None
        reported = -1
        try:
            query = follow_stream(spark, args.path, args.out, checkpoint,
                                  trigger={"processingTime": f"{args.interval_ms} milliseconds"},
                                  order_by=args.order_by, origin=args.origin, backend=args.backend,
                                  on_batch=on_batch)
            while not stopping and query.isActive:
                try:
                    query.awaitTermination(0.2)
                except StreamingQueryException as exc:  # (a Java stack trace): one line
                    raise IdemcoreError(f"the streaming query failed: {java_causes(exc)}") from None
                for progress in query.recentProgress:
                    batch_id, rows = int(progress["batchId"]), int(progress["numInputRows"])
                    if batch_id <= reported or not rows:
                        continue
                    reported = batch_id
                    totals["batches"] += rows
                    totals["micro_batches"] += 1
                    seconds = progress["durationMs"].get("triggerExecution", 0) / 1000
                    line = {"batch": batch_id, "batches": rows, "seconds": seconds}
                    print(json.dumps(line) if args.json else
                          f"batch {batch_id}: {rows:,} batches read in {seconds:.1f} s", flush=True)
            if query.exception() is not None:
                raise IdemcoreError(f"the streaming query failed: {java_causes(query.exception())}")
        finally:
            if query is not None:
                try:
                    query.stop()
                except Exception:  # the JVM may be going away with the same Ctrl-C
                    pass
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    _print_final(args, "micro_batches", "micro-batch(es)", totals, counts, time.perf_counter() - started,
                 checkpoint)
    return 0


@_needs_extra("pyarrow")
def run_audit(args: argparse.Namespace) -> int:
    from idemcore.record.kafka_files.names import is_log_path

    if args.follow:
        return _run_follow(args)
    if args.checkpoint is not None:
        raise IdemcoreError("--checkpoint goes with --follow (a one-shot audit keeps no state to resume)")
    if args.engine != "local":
        raise IdemcoreError("--engine goes with --follow (the one-shot audit of Parquet always runs on Spark; "
                            "--spark audits a Kafka log directory with Spark)")
    cluster = args.path.startswith("kafka://")
    log_dir = "://" not in args.path and is_log_path(args.path)
    if not cluster:
        for option, given in (("--topics", args.topics is not None), ("--from", args.start != "earliest"),
                              ("--to", args.end != "latest"), ("--config", args.config is not None)):
            if given:
                raise IdemcoreError(f"{option} goes with a cluster (kafka://HOST:PORT), not {args.path}")
    if args.html is not None:
        _check_html(args.html, args.path)
    if cluster:
        report = _audit_cluster(args)
    elif log_dir:
        report = _audit_log_dir(args)
    else:
        importlib.import_module("pyspark")  # Parquet is audited with Spark: a missing extra is said first
        source: str | Path = args.path
        if "://" not in args.path and (Path(args.path) / DATA_DIR).is_dir():  # a dataset written by generate
            source = Path(args.path) / DATA_DIR
        report = _audit(args, source)
    html = _write_html(report, args.html, "audit", args) if args.html is not None else None
    if args.json:
        summary = {key: value for key, value in report.summary().items()
                   if key in ("source", "batches", "findings", "seconds", "batches_per_s", "order_by")}
        summary["hanging_transactions"] = report.hanging_transactions().num_rows
        summary["transactions"] = report.transactions()
        summary["lso_held_partitions"] = report.held_partitions().num_rows
        summary["hanging_check"] = report.hanging_check()
        if cluster:
            summary["fetched_bytes"] = report.fetched_bytes
            summary["fetch_problems"] = report.problem_counts()
            summary["located_findings"] = report.located_findings.slice(0, _DETAIL_ROWS).to_pylist()
        summary["hanging_candidates"] = report.hanging_candidates().select(_CANDIDATE_JSON).slice(
            0, _DETAIL_ROWS).to_pylist()
        summary["out"] = str(args.out) if args.out else None
        if args.out:
            from idemcore.audit.report import REPORT_FILES

            summary["files"] = {name: str(args.out / file) for name, file in REPORT_FILES.items()}
        summary["html"] = str(html) if html is not None else None
        print(json.dumps(summary))
    else:
        print_report(report)
        if log_dir:
            _print_log_dir_problems(report)
        if cluster:
            _print_cluster_details(report)
        if args.out:
            print(f"\nwritten: {_report_files(args.out)}")
        if html is not None:
            print(("" if args.out else "\n") + f"HTML report: {html}")
    return 0


#: The demo's HTML report: in ``--dir``, or without it, this file in the temporary directory (replaced by the
#: next demo; the dataset and Parquet report are removed).
DEMO_HTML = "report.html"
_TEMPORARY_HTML = "idemcore-demo-report.html"


def _temporary_html() -> Path:
    """Where the demo writes its HTML report without ``--dir``: one well-known file in the temporary directory,
    which the next demo replaces; a file of that name that is not an earlier report (or not writable) is left
    alone for a new unique name."""
    from idemcore.audit.html import is_html_report

    path = Path(tempfile.gettempdir()) / _TEMPORARY_HTML
    usable = is_html_report(path) and os.access(path, os.W_OK) if path.exists() else os.access(path.parent, os.W_OK)
    if usable:
        return path
    handle, name = tempfile.mkstemp(prefix="idemcore-demo-report-", suffix=".html")
    os.close(handle)
    return Path(name)


@_needs_extra("pyarrow", "pyspark")
def run_demo(args: argparse.Namespace) -> int:
    from idemcore.audit.spark.session import check_master
    from idemcore.synth.ground_truth import check_against_truth

    check_master(args.master)  # before generating the dataset

    if args.html is not None or args.dir:  # said before any work
        html = args.html if args.html is not None else Path(args.dir) / DEMO_HTML
        _check_html(html, str(Path(args.dir) / "dataset") if args.dir else None)
    else:
        html = _temporary_html()
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="idemcore-demo-"))
    dataset = workdir / "dataset"
    try:
        started = time.perf_counter()
        truth = generate(dataset, topics=args.topics, partitions=args.partitions, producers=args.producers,
                         batches=args.batches, seed=args.seed, overwrite=True, partitions_per_file=args.partitions,
                         progress=show_progress(args))
        generated = time.perf_counter() - started
        from idemcore.audit.spark.session import get_session, warm_up

        started = time.perf_counter()
        # Started first, so the audit's time is the audit's, not the JVM's start-up.
        warm_up(get_session(args.master, progress=show_progress(args)))
        spark_ready = time.perf_counter() - started
        args.out = workdir / "report"
        report = _audit(args, dataset / DATA_DIR)
        result = check_against_truth(report, read_truth(dataset))
    except BaseException:
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        html = _write_html(report, html, "demo", args,
                           title=f"idemcore demo: audit of {report.batches:,} generated produce attempts"
                           + ("" if args.dir else " (dataset since removed)"))
    finally:
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    # The per-batch findings the data cannot hold (planted nowhere, found nowhere), and why.
    absent = [f.label for f in Finding if f is not Finding.NONE and f.label not in truth["findings"]
              and f.label not in report.finding_counts()]
    largest_end = max(report.partitions.column("log_end_offset").to_pylist(), default=0)
    not_planted = {name: (f"not planted, cannot occur in this data: {CANNOT_OCCUR[name]} (the largest log end "
                          f"offset here is {largest_end:,})" if name in CANNOT_OCCUR else "not planted")
                   for name in absent}
    kept = {"dataset": str(dataset), "report": str(args.out)} if args.dir else None
    if args.json:
        print(json.dumps({"batches": report.batches, "findings": report.finding_counts(),
                          "planted": truth["findings"], "not_planted": not_planted,
                          "matches_ground_truth": result.ok, "missed": result.missed, "unexpected": result.unexpected,
                          "transactions": report.transactions(),
                          "lso_held_partitions": report.held_partitions().num_rows,
                          "seconds": round(report.seconds, 3), "batches_per_s": round(report.batches_per_s),
                          "kept": kept, "removed": None if args.dir else str(workdir), "html": str(html)}))
        return 0 if result.ok else 1
    print(f"\nidemcore demo: generated {truth['batches']:,} produce attempts of {args.producers:,} producers over "
          f"{args.topics} topics x {args.partitions} partitions in {generated:.1f} s (seed {args.seed}); "
          f"Spark ({args.master}) and its Python workers started in {spark_ready:.1f} s\n")
    print_report(report)
    print("\nagainst the ground truth:")
    print(_table(["finding", "planted", "found", ""],
                 [[name, want, got, "ok" if want == got else "MISMATCH"] for name, want, got in result.rows]))
    if not_planted:
        print()
    for name, why in not_planted.items():
        print(f"{name}: {why}")
    for label, items in (("missed", result.missed), ("unexpected", result.unexpected)):
        for item in items[:_DETAIL_ROWS]:
            print(f"  {label}: {item}")
    print("\nevery planted anomaly found at its batch, nothing else" if result.ok
          else "\nMISMATCH against the ground truth")
    print(f"HTML report: {html}" + ("" if args.dir else " (kept: one file, open it in a browser)"))
    if args.dir:
        from idemcore.audit.report import REPORT_FILES

        print(f"kept in {workdir}: {dataset.name}/ ({TRUTH_FILE}, {DATA_DIR}/*.parquet), {args.out.name}/ "
              f"({', '.join(REPORT_FILES.values())})")
    else:
        print(f"removed the dataset and report with their temporary directory {workdir}; --dir DIR keeps them")
    return 0 if result.ok else 1


def add_audit_options(command: argparse.ArgumentParser) -> None:
    """Options shared by ``audit`` and ``demo``."""
    command.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    command.add_argument("--tasks", type=positive, default=None,
                         help="Spark tasks (default: twice the default parallelism)")
    command.add_argument("--hanging-after-ms", type=non_negative, default=DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
                         help="an open transaction idle longer than this is hanging "
                              f"(default {DEFAULT_TRANSACTION_MAX_TIMEOUT_MS:,}, Kafka's transaction.max.timeout.ms)")
    command.add_argument("--backend", default=None, choices=BACKEND_CHOICES, help=BACKEND_HELP)
    command.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register generate, audit and demo."""
    gen = commands.add_parser(
        "generate", parents=[common],
        help="write produce attempts with planted anomalies (Parquet batch metadata or a Kafka log directory) and "
             "the ground truth",
        description="Write produce attempts of idempotent and transactional producers, with anomalies planted, as "
                    "Parquet batch metadata (OUT/data) or, with --format kafka, as the Kafka log directory the "
                    "partition leaders would have written of them (OUT/logs: segments, .index, .timeindex, "
                    ".txnindex), and the ground truth of what was planted (OUT/truth.json; for a log directory, "
                    "every finding by offset).")
    gen.add_argument("out", type=Path, help="the dataset directory to create")
    gen.add_argument("--format", choices=("parquet", "kafka"), default="parquet",
                     help="parquet: produce attempts as batch metadata (OUT/data); kafka: what the leaders appended, "
                          "as Kafka's log directory (OUT/logs) (default parquet)")
    gen.add_argument("--topics", type=positive, default=4, help="topics (default 4)")
    gen.add_argument("--partitions", type=positive, default=64, help="partitions per topic (default 64)")
    gen.add_argument("--producers", type=positive, default=1000, help="idempotent producers (default 1,000)")
    gen.add_argument("--batches", type=positive, default=1_000_000, help="produce attempts (default 1,000,000)")
    gen.add_argument("--anomalies", default=None,
                     help="what to plant: name=count,... or 'none' (default: 3 of each kind the format can hold; "
                          f"parquet: {', '.join(DEFAULT_MIX)}; kafka: {', '.join(KAFKA_DEFAULT_MIX)})")
    gen.add_argument("--seed", type=non_negative, default=1, help="random seed (default 1)")
    gen.add_argument("--retry-fraction", type=float, default=0.01,
                     help="batches resent at once, in-window duplicates (default 0.01)")
    gen.add_argument("--partitions-per-file", type=positive, default=16,
                     help="streams of one topic per Parquet file; must divide --partitions (default 16)")
    gen.add_argument("--segment-bytes", type=positive, default=DEFAULT_SEGMENT_BYTES,
                     help=f"--format kafka: roll a segment before it would pass this size (default "
                          f"{DEFAULT_SEGMENT_BYTES:,}, Kafka's segment.bytes)")
    gen.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    gen.add_argument("--json", action="store_true", help="print one JSON object")
    gen.set_defaults(run=run_generate)

    aud = commands.add_parser(
        "audit", parents=[common],
        help="audit batch metadata in Parquet (with Spark), a Kafka log directory, or a live cluster "
             "(kafka://HOST:PORT); findings: docs/rules.md §5",
        description="Replay every (topic, partition) stream through Kafka's producer-state rules and report "
                    "duplicates, gaps, zombie writes and hanging transactions: a Parquet dataset with Spark "
                    "(Python workers read the files; only findings come back), a Kafka log directory in "
                    "process (--spark to distribute it), or a live cluster over the wire (kafka://...).")
    aud.add_argument("path", help="a Parquet file or directory, local or a URI (file://, hdfs://, s3://...), "
                                  "a dataset written by `idemcore generate`, Kafka's log directory (or "
                                  "partition directories, segment files: audited in-process), or a live cluster, "
                                  "kafka://HOST:PORT[,HOST:PORT...] (its batches fetched over the wire, "
                                  "read_uncommitted, headers only)")
    aud.add_argument("--topics", default=None, metavar="A,B",
                     help="a cluster: the topics to audit (default: every topic but internal ones)")
    aud.add_argument("--from", dest="start", default="earliest", metavar="WHERE",
                     help="a cluster: where each partition's audit starts: earliest (the default), latest-N (N "
                          "offsets before the end), offset:N, or a time (epoch ms or ISO 8601 with its zone: the "
                          "first offset at or after it, by ListOffsets)")
    aud.add_argument("--to", dest="end", default="latest", metavar="WHERE",
                     help="a cluster: where it stops, as --from (default latest: the log end when the audit "
                          "starts)")
    aud.add_argument("--config", default=None, metavar="FILE",
                     help="a cluster: " + COMMAND_CONFIG_HELP)
    aud.add_argument("--out", type=Path, default=None,
                     help="write findings.parquet, producers.parquet and summary.json here")
    aud.add_argument("--html", type=Path, default=None, metavar="PATH",
                     help="also write the report as one self-contained HTML page here (charts inline, no script, "
                          "opens without network access)")
    aud.add_argument("--order-by", default=None, help="ordering column (default: seq_no, else base_offset)")
    aud.add_argument("--origin", default="client", choices=ORIGIN_CHOICES,
                     help="who appended the batches: the checks that apply (default client)")
    aud.add_argument("--now-ms", type=int, default=None,
                     help="when open transactions are judged, epoch ms (default: the newest batch timestamp)")
    aud.add_argument("--ignore-transaction-log", action="store_true",
                     help="a Kafka log directory: do not read its __transaction_state partitions (by default each "
                          "open transaction idle past --hanging-after-ms is confirmed hanging or cleared by the "
                          "coordinator's state, as kafka-transactions.sh find-hanging does); a cluster: do not ask "
                          "its coordinators (ListTransactions, DescribeTransactions)")
    aud.add_argument("--spark", action="store_true",
                     help="a Kafka log directory or a cluster: audit it with Spark (whole partitions per task; "
                          "each task fetches its own partitions from their leaders) instead of in-process (Parquet "
                          "is always audited with Spark)")
    aud.add_argument("--follow", action="store_true",
                     help="keep auditing PATH as it grows (a Parquet directory gaining files, a Kafka log "
                          "directory whose segments grow, or a cluster's partitions, fetched on from where the last "
                          "round stopped), in-process unless --engine spark: new findings as they "
                          "appear, one line each "
                          "and OUT/findings-<round>.parquet; stops cleanly on Ctrl-C")
    aud.add_argument("--engine", choices=("local", "spark"), default="local",
                     help="--follow: local (in-process, Parquet or Kafka log directory; the default) or spark "
                          "(a Structured Streaming query on --master over a Parquet directory; state per stream in "
                          "Spark's state store, findings in OUT/findings-<micro-batch>.parquet)")
    aud.add_argument("--interval-ms", type=positive, default=1000,
                     help="--follow: milliseconds between rounds (default 1,000)")
    aud.add_argument("--checkpoint", type=Path, default=None, metavar="DIR",
                     help="--follow: checkpoint directory, to resume without reporting a finding twice or missing "
                          "one (default OUT/_checkpoint with --out, else none)")
    add_audit_options(aud)
    aud.set_defaults(run=run_audit)
    _PARSERS["audit"] = aud

    demo = commands.add_parser(
        "demo", parents=[common],
        help="generate a small dataset with anomalies, audit it with Spark, compare with the ground truth",
        description="Generate produce attempts with planted anomalies of every kind (docs/rules.md §5), audit "
                    "them with Spark in local mode, print the report and check it against the ground truth, "
                    "batch by batch. Exit status 1 on any mismatch.")
    demo.add_argument("--batches", type=positive, default=500_000, help="produce attempts (default 500,000)")
    demo.add_argument("--topics", type=positive, default=2, help="topics (default 2)")
    demo.add_argument("--partitions", type=positive, default=8, help="partitions per topic (default 8)")
    demo.add_argument("--producers", type=positive, default=200, help="idempotent producers (default 200)")
    demo.add_argument("--seed", type=non_negative, default=7, help="random seed (default 7)")
    demo.add_argument("--dir", default=None, help="keep the dataset and report here (default: a temporary "
                                                  "directory, removed at the end)")
    demo.add_argument("--html", type=Path, default=None, metavar="PATH",
                      help=f"write the HTML report here (default: DIR/{DEMO_HTML} with --dir, else "
                           f"{Path(tempfile.gettempdir()) / _TEMPORARY_HTML}, kept)")
    add_audit_options(demo)
    demo.set_defaults(run=run_demo)
    _PARSERS["demo"] = demo


def print_error(exc: BaseException) -> None:
    print(f"idemcore: error: {exc}", file=sys.stderr)
