"""Shared fixtures: every kernel test runs once per backend; and the markers every test gets by what it uses.

The suite fails (never skips) when a backend it is told to expect did not
load: IDEMCORE_EXPECT_BACKENDS (default: all three) names them.

Markers (``scripts/dev test --fast`` deselects all five; ``scripts/dev test`` and CI run everything). Nobody writes
them on a test: :func:`pytest_collection_modifyitems` gives each test the markers of what it *uses*, where "uses"
means its own code, the code of the fixtures it requests (all the way down), and the code of every function or
class from tests/ that these call or name, transitively (a helper's helper counts):

- ``spark``: a Spark session: the ``spark`` fixture (so also ``arrow_batch_size``), or anything from pyspark or
  ``idemcore.audit.spark.session``.
- ``subprocess``: a child process: :mod:`subprocess`, :mod:`multiprocessing`, ``os.fork``/``os.system``/spawn,
  ``asyncio.create_subprocess_*``, and so :class:`tests.peers.ServeProcess` (``idemcore serve``),
  :class:`idemcore.cluster.LocalCluster` (the ``cluster_fixture`` clusters) and
  :class:`idemcore.zookeeper_server.ZooKeeperServer`.
- ``real_clients``: a real Kafka client or a peer broker talking over the network: confluent-kafka (anything),
  kafka-python's and aiokafka's clients (``KafkaProducer``, ``AIOKafkaConsumer``, admin clients, connections),
  tansu (:class:`tests.peers.TansuProcess`, also ``subprocess``). Their record codecs and protocol structs, used
  in process as independent oracles (``kafka.record``, ``aiokafka.record``, ``kafka.protocol``, ...), are not.
- ``browser``: a string constant naming Chromium (the HTML report's headless-browser test).
- ``slow``: listed in :data:`SLOW` by hand: a test over ~4 s (``pytest --durations=30 -m "not (...)"``) that none
  of the above marks. Add a new one there when ``--durations`` shows it (a renamed one is refused at collection).

So a new test gets its marker by using the shared helper (``ServeProcess``, the ``spark`` fixture, ...) rather than
hand-rolling one; a marker written on a test by hand (``@pytest.mark.slow``) is kept too. ``pytest --markers`` lists
them; ``pytest -m spark --collect-only -q`` shows what got one.
"""

from __future__ import annotations

import asyncio
import dis
import importlib
import logging
import os
import types
from collections.abc import Iterable, Iterator

import pytest

from idemcore.kernels import PREFERENCE, load_backend
from tests import peers

EXPECTED = [name.strip() for name in os.environ.get("IDEMCORE_EXPECT_BACKENDS", ",".join(PREFERENCE)).split(",")
            if name.strip()]
#: The record encoders to test: the Python twin always, the compiled one unless IDEMCORE_EXPECT_BACKENDS leaves
#: it out (a build without a compiler; when expected and missing, pytest_sessionstart fails the run).
ENCODERS = ["python", pytest.param("cython", marks=pytest.mark.skipif(
    "cython" not in EXPECTED, reason="IDEMCORE_EXPECT_BACKENDS leaves the compiled backend out"))]


#: Tests over ~4 s on their own that no other marker covers (file::name, parameters dropped), from
#: ``pytest --durations=40 -m "not (spark or subprocess or real_clients or browser)"`` run twice: the first run in
#: a fresh tree also compiles the numba kernels (~15 s in whichever [numba] test comes first; cached after).
SLOW: frozenset[str] = frozenset({
    # group members' heartbeat threads against session timeouts that must run out
    "test_consumer_group_thread.py::test_the_heartbeat_thread_heartbeats_while_a_listener_runs_longer_than_the_session",
    "test_consumer_group_thread.py::test_the_heartbeat_thread_keeps_a_member_that_does_not_poll_for_longer_than_its_"
    "session",
    "test_consumer_group_thread.py::test_a_static_member_closes_without_leaving_the_group",
    "test_consumer_group_thread.py::test_a_member_that_does_not_poll_in_time_leaves_and_finds_its_partitions_lost_at_"
    "its_next_poll",
    "test_hostile_groups_tcp.py::test_closing_during_a_join_or_while_the_coordinator_is_down_stops_the_heartbeat_thread",
    "test_hostile_groups_tcp.py::test_the_coordinator_dying_mid_join_and_coming_back_leaves_each_partition_owned_once",
    "test_hostile_groups_tcp.py::test_a_listener_raising_at_close_is_raised_after_the_member_left_and_its_thread_"
    "stopped",
    "test_wire_membership_client.py::test_a_group_over_tcp_with_heartbeats_from_a_second_thread",
    # model-based and large runs
    "test_txn_coordinator_model.py::TestCoordinatorAgainstModel::runTest",
    "test_hostile_transactions.py::test_huge_transactions_commit_and_abort",
    "test_compaction.py::test_compaction_keeps_the_newest_record_per_key_below_the_active_segment",
    # clients over TLS and SASL_SSL handshakes, the README's snippets against a served broker
    "test_client_security.py::test_producers_and_a_group_consumer_over_sasl_ssl_with_scram",
    "test_client_security.py::test_producers_and_a_group_consumer_over_mutual_tls",
    "test_readme_serve.py::test_the_readme_snippets_run_against_a_served_broker",
})

#: Module prefixes whose functions, classes or modules mark a test that uses them.
_MODULE_KINDS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "idemcore.audit.spark.session"),
    "subprocess": ("subprocess", "multiprocessing", "idemcore.cluster", "idemcore.zookeeper_server"),
    # (confluent-kafka's compiled classes, Producer and Consumer, say they are from ``cimpl``)
    "real_clients": ("confluent_kafka", "cimpl", "kafka.producer", "kafka.consumer", "kafka.admin",
                     "kafka.client_async", "kafka.conn", "aiokafka.producer", "aiokafka.consumer", "aiokafka.admin",
                     "aiokafka.client", "aiokafka.conn"),
}
#: Single objects that mark a test that uses them (named here, not by module: os and asyncio do much else).
_OBJECT_KINDS: dict[int, str] = {id(getattr(module, name)): kind for module, kind, names in (
    (os, "subprocess", ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp", "spawnv", "spawnl", "execv",
                        "execvp")),
    (asyncio, "subprocess", ("create_subprocess_exec", "create_subprocess_shell")),
    (peers, "real_clients", ("TansuProcess", "tansu_binary"))) for name in names if hasattr(module, name)}
_TEXT_KINDS = {"chromium": "browser"}
#: The test helpers whose code is read too (test modules, tests/peers.py, tests/conftest.py, ...).
_OURS = "tests"


def _module_of(obj: object) -> str:
    return obj.__name__ if isinstance(obj, types.ModuleType) else str(getattr(obj, "__module__", None) or "")


def _kinds_of_object(obj: object) -> set[str]:
    found = {_OBJECT_KINDS[id(obj)]} if id(obj) in _OBJECT_KINDS else set()
    module = _module_of(obj)
    for kind, prefixes in _MODULE_KINDS.items():
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            found.add(kind)
    return found


def _ours(obj: object) -> bool:
    module = _module_of(obj)
    return module == _OURS or module.startswith(_OURS + ".")


def _functions(obj: object) -> Iterable[types.FunctionType]:
    """The Python functions behind ``obj``: itself, a method's function, or a tests/ class's methods."""
    obj = getattr(obj, "__func__", obj)
    obj = getattr(obj, "__wrapped__", obj)
    if isinstance(obj, types.FunctionType):
        yield obj
    elif isinstance(obj, type) and _ours(obj):
        for member in vars(obj).values():
            member = getattr(member, "fget", member)  # a property's getter
            member = getattr(member, "__func__", member)
            if isinstance(member, types.FunctionType):
                yield member


def _imported(code: types.CodeType) -> list[object]:
    """What ``code`` imports itself (``import kafka`` or ``from confluent_kafka.admin import AdminClient`` in a
    test's body): the modules and the names taken from them."""
    found: list[object] = []
    module: types.ModuleType | None = None
    for instruction in dis.get_instructions(code):
        if instruction.opname == "IMPORT_NAME":
            try:
                module = importlib.import_module(instruction.argval)
            except (ImportError, ValueError):  # a relative import (``from . import x``: no name), or a module the
                module = None  # test itself expects to be missing
            if module is not None:
                found.append(module)
        elif instruction.opname == "IMPORT_FROM" and module is not None:
            name = instruction.argval
            if name in vars(module):
                found.append(vars(module)[name])
            else:  # a submodule: ``from kafka import admin``
                try:
                    found.append(importlib.import_module(f"{module.__name__}.{name}"))
                except ImportError:
                    pass
    return found


class _Uses:
    """What a function uses, transitively through the tests/ functions and classes it names (memoized)."""

    def __init__(self) -> None:
        self._kinds: dict[types.CodeType, set[str]] = {}

    def of(self, function: types.FunctionType) -> set[str]:
        return self._code(function.__code__, function.__globals__)

    def _code(self, code: types.CodeType, namespace: dict, enclosing: tuple[object, ...] = ()) -> set[str]:
        if code in self._kinds:
            return self._kinds[code]
        found: set[str] = set()
        self._kinds[code] = found  # a cycle (mutual recursion) ends here, with what is known of it so far
        # ``enclosing``: what the function around a lambda or comprehension imported (its locals).
        objects = [namespace[name] for name in code.co_names if name in namespace] + _imported(code)
        inner = (*enclosing, *objects)
        objects += enclosing
        # ``module.attribute``: attribute names are in co_names too (read from the module's dict: a module's
        # __getattr__ may warn or import, as numpy's does).
        objects += [vars(module)[name] for module in list(objects) if isinstance(module, types.ModuleType)
                    for name in code.co_names if name in vars(module)]
        for obj in objects:
            found |= _kinds_of_object(obj)
            if _ours(obj):
                for function in _functions(obj):
                    found |= self._code(function.__code__, function.__globals__)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):  # lambdas, nested functions, comprehensions
                found |= self._code(const, namespace, inner)
            elif isinstance(const, str):
                found |= {kind for text, kind in _TEXT_KINDS.items() if text in const.lower()}
        return found


def _slow_key(item: pytest.Item) -> str:
    path, _, name = item.nodeid.partition("::")
    return f"{path.rpartition('/')[2]}::{name.partition('[')[0]}"


def _item_kinds(item: pytest.Item, uses: _Uses) -> set[str]:
    found: set[str] = set()
    functions = list(_functions(getattr(item, "obj", None)))
    for definitions in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values():
        functions += [function for definition in definitions if _ours(definition.func)
                      for function in _functions(definition.func)]
    for function in functions:
        found |= uses.of(function)
    if "spark" in getattr(item, "fixturenames", ()):
        found.add("spark")
    if _slow_key(item) in SLOW:
        found.add("slow")
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    uses = _Uses()
    for item in items:
        for kind in sorted(_item_kinds(item, uses)):
            item.add_marker(kind)
    # A renamed test would silently leave SLOW (and join the quick loop): an entry whose file was collected whole
    # must name one of its tests.
    if not config.getoption("keyword") and not config.getoption("deselect"):
        keys = {_slow_key(item) for item in items}
        files = {key.partition("::")[0] for key in keys}
        stale = sorted(key for key in SLOW if key.partition("::")[0] in files and key not in keys)
        if stale:
            raise pytest.UsageError(f"tests/conftest.py SLOW names tests that are not there: {stale}")


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
