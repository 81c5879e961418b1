"""Broker produce path: the cost of one produce request, now beside an earlier checkout in the same run.

Request shapes: one idempotent producer sending in sequence, (1) one batch of 16 records of 100 bytes to one
partition, (4) four such batches to four partitions; in memory (no data_dir), and on disk (a data_dir with
fsync=False: the cost of encoding and writing to the page cache, not of the disk). The earlier checkout is any
git revision built in place and named by IDEMCORE_BEFORE (its package is loaded as ``idemcore_before``):

    git worktree add /tmp/idemcore-before REV && (cd /tmp/idemcore-before && ../../work/main/.venv/bin/python
        setup.py build_ext --inplace)        # setuptools>=77 and Cython in the venv
    IDEMCORE_BEFORE=/tmp/idemcore-before scripts/dev bench -k broker

Without IDEMCORE_BEFORE only the current code is measured.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import sys

import pytest

from idemcore.broker import Broker
from idemcore.net.messages import ProduceRequest
from idemcore.record.batch import RecordBatch

VALUES = [b"%0100d" % i for i in range(16)]


def _before():
    """The earlier checkout's package, loaded under another name, or None."""
    root = os.environ.get("IDEMCORE_BEFORE")
    if not root:
        return None
    name = "idemcore_before"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, f"{root}/idemcore/__init__.py",
                                                      submodule_search_locations=[f"{root}/idemcore"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    for kernels in ("_kernels", "kernels"):  # the backend table names its modules absolutely
        try:
            table = importlib.import_module(f"{name}.{kernels}")
        except ImportError:
            continue
        table._MODULES = {k: tuple(m.replace("idemcore.", f"{name}.", 1) for m in v) for k, v in table._MODULES.items()}
        break
    return sys.modules[name]


def _now(partitions: int, data_dir):
    broker = Broker({"bench": partitions}, data_dir=data_dir, fsync=False)
    sequence = itertools.count(0, len(VALUES))

    def one():
        seq = next(sequence)
        request = ProduceRequest(tuple(RecordBatch("bench", p, VALUES, None, 7, 0, seq) for p in range(partitions)))
        response = broker.handle(request)
        assert response.responses[0].error_code == 0
    return one


def _earlier(partitions: int, data_dir):
    old = _before()
    if old is None:
        pytest.skip("IDEMCORE_BEFORE names no earlier checkout")
    modules = {name: importlib.import_module(f"idemcore_before.{name}") for name in ("broker",)}
    broker_module = modules["broker"]
    messages = broker_module  # the earlier layout exported its messages from broker/
    broker = broker_module.Broker({"bench": partitions}, data_dir=data_dir, fsync=False)
    handle = getattr(broker, "handle", None) or broker.produce
    sequence = itertools.count(0, len(VALUES))
    record_batch = getattr(messages, "RecordBatch", None) or \
        importlib.import_module("idemcore_before.record").RecordBatch
    produce_request = getattr(messages, "ProduceRequest", None) or \
        importlib.import_module("idemcore_before.net").ProduceRequest

    def one():
        seq = next(sequence)
        request = produce_request(tuple(record_batch("bench", p, VALUES, None, 7, 0, seq) for p in range(partitions)))
        assert handle(request).responses[0].error_code == 0
    return one


@pytest.mark.parametrize("storage", ["memory", "disk"])
@pytest.mark.parametrize("partitions", [1, 4])
@pytest.mark.parametrize("version", ["before", "now"])
def bench_broker_produce(benchmark, record_seconds, tmp_path, version, partitions, storage):
    data_dir = tmp_path / "data" if storage == "disk" else None
    one = _now(partitions, data_dir) if version == "now" else _earlier(partitions, data_dir)
    one()
    benchmark.pedantic(one, rounds=20, iterations=500, warmup_rounds=2)
    shape = f"{partitions}p" + ("-disk" if storage == "disk" else "")
    record_seconds(f"produce requests {version} {shape}", benchmark.stats.stats.min, 1)  # per request

