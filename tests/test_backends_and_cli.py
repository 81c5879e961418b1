"""Backend selection, a few rules (docs/rules.md) not covered by Kafka's cases, and the CLI end to end."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import idemcore
from idemcore import BackendUnavailableError, ProducerStateManager, Status, kernels

from .helpers import batches, data, marker


def test_unknown_backend_name_raises():
    with pytest.raises(ValueError, match=r"^unknown backend backend='fortran'; expected one of 'auto', 'cython', "
                                         r"'numba', 'python'$"):
        idemcore.validate(batches([data(1, 0, 0)]), backend="fortran")


def test_environment_variable_selects_backend(monkeypatch):
    monkeypatch.setenv("IDEMCORE_BACKEND", "python")
    assert idemcore.validate(batches([data(1, 0, 0)])).backend == "python"


def test_auto_falls_back_with_one_warning(monkeypatch):
    def broken(name):
        if name == "cython":
            raise BackendUnavailableError("backend 'cython' is not available: test")
        return real(name)

    real = kernels.load_backend
    monkeypatch.setattr(kernels, "load_backend", broken)
    kernels._auto_backend.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = kernels.get_backend("auto")
            second = kernels.get_backend("auto")
        assert first.name == second.name == "numba"
        assert len([w for w in caught if "falls back" in str(w.message)]) == 1
    finally:
        kernels._auto_backend.cache_clear()


def test_batches_without_producer_id_are_appended_untracked(backend):
    state = idemcore.ProducerStateTable()
    rows = [data(-1, -1, -1, record_count=3), data(-1, -1, -1, record_count=2)]
    verdicts = idemcore.validate(batches(rows), state, backend=backend)
    assert verdicts.base_offset.tolist() == [0, 3] and verdicts.last_offset.tolist() == [2, 4]
    assert state.n_producers == 0 and state.next_offset(0) == 5


def test_coordinator_origin_checks_epoch_but_not_sequence(backend):
    rows = [data(9, 2, 0), data(9, 2, 40), data(9, 1, 41), data(9, 2, 40)]
    verdicts = idemcore.validate(batches(rows), origin="coordinator", backend=backend)
    assert verdicts.error_code.tolist() == [0, 0, 47, 0]
    assert verdicts.status.tolist() == [0, 0, 2, 0]  # no duplicate detection outside client appends


def test_replication_accepts_old_epoch_and_adopts_it(backend):
    manager = ProducerStateManager(backend=backend)
    manager.append(9, 3, 0, 0)
    assert manager.append(9, 2, 0, 0, origin="replication").status == Status.APPENDED
    assert manager.last_entry(9).producer_epoch == 2


def test_explicit_offsets_are_kept_and_move_the_log_end(backend):
    state = idemcore.ProducerStateTable()
    verdicts = idemcore.validate(batches([data(1, 0, 0, 1, base_offset=100), data(1, 0, 2)]), state,
                                 backend=backend)
    assert verdicts.base_offset.tolist() == [100, 102] and state.next_offset(0) == 103


def test_markers_complete_transactions_per_partition(backend):
    rows = [data(1, 0, 0, is_transactional=True, partition=0), data(1, 0, 0, is_transactional=True, partition=1),
            marker(1, 0, commit=True, partition=1), marker(1, 0, commit=False, partition=0),
            marker(1, 0, commit=True, partition=0)]
    txns = idemcore.validate(batches(rows), backend=backend).completed_txns
    assert txns.stream.tolist() == [1, 0] and txns.aborted.tolist() == [False, True]
    assert txns.first_offset.tolist() == [0, 0] and txns.last_offset.tolist() == [1, 1]


def test_manager_rejects_misuse():
    manager = ProducerStateManager()
    with pytest.raises(TypeError, match="producer_id must be an int"):
        manager.append("7", 0, 0, 0)
    with pytest.raises(TypeError, match="is_transactional must be a bool"):
        manager.append(7, 0, 0, 0, is_transactional=1)
    with pytest.raises(ValueError, match="unknown origin 'leader'"):
        manager.append(7, 0, 0, 0, origin="leader")
    with pytest.raises(ValueError, match=r"stream must be in \[0, 2147483647\], got -1"):
        ProducerStateManager(stream=-1)


def test_table_grows_from_one_row(backend):
    state = idemcore.ProducerStateTable(row_capacity=1, stream_capacity=1)
    rows = [data(pid, 0, 0, partition=pid % 7) for pid in range(200)]
    verdicts = idemcore.validate(batches(rows), state, backend=backend)
    assert (verdicts.status == 0).all() and state.n_producers == 200 and state.n_streams == 7
    assert all(state.row_of(pid % 7, pid) is not None for pid in range(200))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "idemcore.cli", *args], capture_output=True, text=True, timeout=300)


def test_demo_bad_arguments_fail_clearly():
    result = _cli("demo", "--batches", "-5")
    assert result.returncode == 2 and "must be at least 1" in result.stderr
    result = _cli("demo", "--batches", "1000", "--producers", "500")  # fails while generating, before Spark starts
    assert result.returncode == 2 and "(partition, producer) streams of 9+ batches" in result.stderr
    result = _cli("generate", "/tmp/idemcore-never", "--anomalies", "zombie=3")
    assert result.returncode == 2 and "unknown anomaly 'zombie'" in result.stderr
    result = _cli("generate", "/tmp/idemcore-never", "--partitions", "10", "--partitions-per-file", "4")
    assert result.returncode == 2 and "partitions_per_file (4) must divide partitions (10)" in result.stderr


def test_backends_command_lists_all():
    result = _cli("backends")
    assert result.returncode == 0
    assert [line.split()[0] for line in result.stdout.splitlines()[:3]] == ["cython", "numba", "python"]
    assert all(line.split()[1] == "available" for line in result.stdout.splitlines()[:3])


def test_the_cli_loads_without_arrow_or_spark():
    # simulate and backends must work on a base installation: pyarrow and pyspark load only when needed.
    code = ("import sys, idemcore.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyarrow', 'pyspark', 'pandas'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
