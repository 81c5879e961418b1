"""One place that builds (or reuses) the Spark session idemcore runs in."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

#: Log4j 2 settings for the JVM of a session idemcore starts: errors only.
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

#: Settings for a session idemcore creates: Arrow on, no UI, few shuffle partitions, workers on this Python.
LOCAL_SETTINGS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "4g",
    "spark.python.worker.reuse": "true",
    "spark.sql.session.timeZone": "UTC",
}


def import_pyspark() -> Any:
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("idemcore.spark needs pyspark: pip install 'idemcore[spark]'") from exc
    return pyspark


def get_session(master: str | None = None, spark: Any = None, config: dict[str, str] | None = None) -> Any:
    """``spark`` if given; else the active session; else a new one on ``master`` (default ``local[*]``).

    A new session runs its Python workers on this interpreter, so they import
    the same installed idemcore.
    """
    if spark is not None:
        return spark
    import_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    master = master or "local[*]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: no need to look for a routable address
    builder = SparkSession.builder.master(master).appName("idemcore")
    settings = {**LOCAL_SETTINGS, "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONFIG}"}
    for key, value in {**settings, **(config or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
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
