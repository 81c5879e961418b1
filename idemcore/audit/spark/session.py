"""One place that builds (or reuses) the Spark session idemcore runs in."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from idemcore.errors import IdemcoreError
from idemcore.progress import waiting

#: Log4j 2 settings for the JVM of a session idemcore starts: errors only.
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

#: Spark's reader checks the CRCs of Parquet pages only when told to (a flipped byte then fails the read).
VERIFY_PAGE_CRCS = "parquet.page.verify-checksum.enabled"

#: Settings for a session idemcore creates: Arrow on, no UI, few shuffle partitions, workers on this Python.
LOCAL_SETTINGS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "4g",
    "spark.python.worker.reuse": "true",
    "spark.sql.session.timeZone": "UTC",
    f"spark.hadoop.{VERIFY_PAGE_CRCS}": "true",  # a flipped byte: an error, not other values
}


#: The masters Spark accepts: spark-submit's prefixes (yarn, spark, k8s, local) and SparkContext's
#: forms of a local master; anything else fails in the JVM with a Java stack trace.
_MASTER = re.compile(r"local(\[([1-9]\d*|\*)(\s*,\s*[1-9]\d*)?\])?|local-cluster\[\s*[1-9]\d*(\s*,\s*[1-9]\d*){2}\s*\]"
                     r"|yarn|(spark|k8s)://\S+")


class MissingExtraError(IdemcoreError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


class SparkStartError(IdemcoreError, RuntimeError):
    """Spark did not start: the message is the first line of Spark's reason."""


def import_pyspark() -> Any:
    try:
        import pyspark
    except ImportError:
        raise MissingExtraError("idemcore's Spark audit needs pyspark, which is not installed: "
                                "pip install 'idemcore[spark]'", name="pyspark") from None
    return pyspark


def check_master(master: str) -> None:
    """ValueError for a master Spark would refuse, before a JVM starts to say so in a stack trace."""
    if not _MASTER.fullmatch(master):
        raise ValueError(f"Spark master {master!r} is not one Spark accepts: use local, local[N], local[*], "
                         "spark://HOST:PORT, yarn or k8s://HOST:PORT")


def verify_page_crcs(spark: Any) -> None:
    """Have ``spark``'s Parquet reads check page CRCs from now on (sessions idemcore starts do from the start;
    this is for a DataFrame of the caller's own session)."""
    spark.conf.set(VERIFY_PAGE_CRCS, "true")


def java_causes(exc: BaseException) -> str:
    """One line for a failed Spark job or query: the message of each Java ``Caused by:`` in ``exc``, outermost
    first (say, the file a task could not read, then why), else the first line of its Java exception."""
    found = [line.split(": ", 2)[-1].strip() for line in str(exc).splitlines() if line.startswith("Caused by: ")]
    return ": ".join(found) if found else _reason(exc)


def _reason(exc: BaseException) -> str:
    # The Java exception's own line (class: message) rather than py4j's wrapping and stack trace.
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    return next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)


#: What the JVM prints on every start, whatever the log configuration: nothing a user can act on.
_START_CHATTER = (b"WARNING: Using incubator modules", b"Setting default log level to",
                  b"To adjust logging level use sc.setLogLevel")


def _forward(source: int, target: int) -> None:
    """Copy the JVM's standard error to ``target``, line by line, without its start-up chatter."""
    pending = b""
    while chunk := os.read(source, 65536):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        kept = [line for line in lines if not line.startswith(_START_CHATTER)]
        if kept:
            os.write(target, b"".join(line + b"\n" for line in kept))
    if pending:
        os.write(target, pending)
    os.close(source)  # the JVM is gone: both ends of the forwarding go with it
    os.close(target)


@contextlib.contextmanager
def _jvm_stderr_filtered() -> Iterator[TextIO]:
    """While the JVM starts it inherits standard error: hand it a pipe whose lines are forwarded to ours
    without the start-up chatter, for the JVM's whole life. Yields our own standard error meanwhile."""
    try:
        os.fstat(2)
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):  # no standard error at all (a daemon, 2>&-): nothing to keep quiet
        yield open(os.devnull, "w")
        return
    read_end, write_end = os.pipe()
    ours = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(target=_forward, args=(read_end, ours), name="idemcore-jvm-stderr", daemon=True).start()
    stream = os.fdopen(os.dup(ours), "w", buffering=1)
    try:
        yield stream
    finally:
        stream.flush()
        os.dup2(ours, 2)  # the JVM keeps the pipe; this process writes to its own standard error again
        stream.close()


def get_session(master: str | None = None, spark: Any = None, config: dict[str, str] | None = None,
                progress: bool = False) -> Any:
    """``spark`` if given; else the active session; else a new one on ``master`` (default ``local[*]``).

    A new session runs its Python workers on this interpreter, so they import
    the same installed idemcore. ``progress``: show the seconds the start takes.
    """
    if spark is not None:
        return spark
    import_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and (master is None or active.sparkContext.master == master):
        return active  # already started (the demo starts it first): no second "starting Spark"
    master = master or "local[*]"
    check_master(master)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: no need to look for a routable address
    builder = SparkSession.builder.master(master).appName("idemcore")
    settings = {**LOCAL_SETTINGS, "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONFIG}"}
    for key, value in {**settings, **(config or {})}.items():
        builder = builder.config(key, value)
    try:
        with _jvm_stderr_filtered() as stderr, waiting("starting Spark", enabled=progress, file=stderr):
            session = builder.getOrCreate()
    except Exception as exc:  # the JVM did not start, or refused the settings: one line, not a stack trace
        raise SparkStartError(f"Spark did not start on master {master!r}: {_reason(exc)}") from exc
    session.sparkContext.setLogLevel("ERROR")
    return session


def _load_kernel(batches: Any) -> Any:
    # In each Python worker: import idemcore and load its kernel once, outside any timed job.
    from idemcore.kernels import get_backend

    get_backend(None)
    yield from batches


def warm_up(spark: Any) -> None:
    """Start the Python workers of every core and load the kernel in them (the first job's fixed cost)."""
    cores = spark.sparkContext.defaultParallelism
    spark.range(0, cores, numPartitions=cores).mapInArrow(_load_kernel, "id long").collect()
