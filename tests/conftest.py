"""Shared fixtures: every kernel test runs once per backend.

The suite fails (never skips) when a backend it is told to expect did not
load: IDEMCORE_EXPECT_BACKENDS (default: all three) names them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from idemcore.kernels import PREFERENCE, load_backend

EXPECTED = [name.strip() for name in os.environ.get("IDEMCORE_EXPECT_BACKENDS", ",".join(PREFERENCE)).split(",")
            if name.strip()]
#: The record encoders to test: the Python twin always, the compiled one unless IDEMCORE_EXPECT_BACKENDS leaves
#: it out (a build without a compiler; when expected and missing, pytest_sessionstart fails the run).
ENCODERS = ["python", pytest.param("cython", marks=pytest.mark.skipif(
    "cython" not in EXPECTED, reason="IDEMCORE_EXPECT_BACKENDS leaves the compiled backend out"))]


def pytest_sessionstart(session):
    for name in EXPECTED:
        load_backend(name)  # raises BackendUnavailableError: the run fails at once


@pytest.fixture(params=EXPECTED)
def backend(request):
    """Name of each expected backend in turn."""
    return request.param


@pytest.fixture(scope="session")
def spark():
    """The one Spark session of the test run: local[2], small shuffles."""
    from idemcore.audit.spark import get_session

    session = get_session("local[2]", config={"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g"})
    yield session
    session.stop()


@pytest.fixture
def arrow_batch_size(spark, request):
    """Spark's Arrow batch size set to the test's parameter (indirect), and put back after."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(request.param))
    yield request.param
    spark.conf.set(key, before)


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory):
    """A generated dataset: 2 topics x 3 partitions, a file per stream, each stream in several row groups."""
    from idemcore.synth.dataset import generate

    out = tmp_path_factory.mktemp("datasets") / "small"
    truth = generate(out, topics=2, partitions=3, producers=12, batches=6000, seed=3, partitions_per_file=1,
                     row_group_rows=700, progress=False, anomalies={"duplicate_beyond_window": 2, "sequence_gap": 2,
                     "out_of_order": 2, "epoch_regression": 2, "fenced": 2, "hanging_transaction": 2})
    return out, truth


@pytest.fixture
def kafka_server(tmp_path):
    """`idemcore serve` in process (a :class:`~idemcore.broker.server.Server` on a free loopback port) over a
    fresh Kafka log directory; topics are created on first use. ``kafka_server.bootstrap``: host:port."""
    from idemcore.broker import Broker
    from idemcore.broker.server import Server

    broker = Broker({}, data_dir=tmp_path / "kafka-logs", fsync=False)
    server = Server(broker).start()
    yield server
    server.stop()
    broker.close()


@pytest.fixture(autouse=True)
def _idemcore_logger_restored() -> Iterator[None]:
    """The ``idemcore`` logger as it was before each test: a CLI run in process (``configure_logging``) gives it its
    own handler, a level and ``propagate = False``, which would hide later tests' records from ``caplog``."""
    logger = logging.getLogger("idemcore")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved
