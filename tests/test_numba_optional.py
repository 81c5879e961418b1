"""numba is an optional extra (``idemcore[numba]``): without it idemcore imports, ``auto`` takes Cython, and only
asking for the numba backend fails, in one line naming the extra. Each test runs Python in a subprocess whose
``sitecustomize`` makes numba unimportable, as if it were not installed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import EXPECTED

PACKAGE = Path(__file__).resolve().parent.parent / "idemcore"
HINT = "pip install 'idemcore[numba]'"

#: A meta-path finder ahead of all others: ``import numba`` (or any numba.*) fails as for a missing package.
SITECUSTOMIZE = '''
import sys


class _NoNumba:
    def find_spec(self, name, path=None, target=None):
        if name == "numba" or name.startswith("numba."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoNumba())
'''


@pytest.fixture(scope="module")
def without_numba(tmp_path_factory) -> dict[str, str]:
    """The environment of a Python without numba: a ``sitecustomize`` on PYTHONPATH hides it."""
    site = tmp_path_factory.mktemp("no-numba")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {key: value for key, value in os.environ.items() if key != "IDEMCORE_BACKEND"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(PACKAGE.parent), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run(env: dict[str, str], code: str, *extra_env: tuple[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "error", "-c", code], env={**env, **dict(extra_env)},
                          capture_output=True, text=True, timeout=120)


def test_the_sitecustomize_hides_numba(without_numba):
    result = run(without_numba, "import numba")
    assert result.returncode == 1 and "ModuleNotFoundError: No module named 'numba'" in result.stderr


def test_idemcore_validates_with_cython_without_numba(without_numba):
    code = """
import sys
import numpy as np
import idemcore
columns = {"producer_id": np.array([7, 7, 7]), "producer_epoch": np.array([0, 0, 0]),
           "base_sequence": np.array([0, 1, 1]), "last_sequence": np.array([0, 1, 1]),
           "record_count": np.array([1, 1, 1])}
verdicts = idemcore.validate(columns)  # auto
print(verdicts.backend, verdicts.status.tolist(), idemcore.available_backends())
print(idemcore.Broker({"t": 1}).backend.name)
print(sorted(name for name in sys.modules if name.split(".")[0] == "numba"))
"""
    result = run(without_numba, code)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # -W error: not even a fallback warning (Cython loaded, nothing fell back)
    assert result.stdout.splitlines() == ["cython [0, 0, 1] ['cython', 'python']", "cython", "[]"]


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_asking_for_numba_names_the_extra(without_numba, how):
    code = """
import numpy as np
import idemcore
columns = {"producer_id": np.array([7]), "producer_epoch": np.array([0]), "base_sequence": np.array([0]),
           "last_sequence": np.array([0]), "record_count": np.array([1])}
try:
    idemcore.validate(columns, backend="numba" if ARGUMENT else None)
except idemcore.BackendUnavailableError as exc:
    print(repr(str(exc)))
""".replace("ARGUMENT", str(how == "argument"))
    result = run(without_numba, code, ("IDEMCORE_BACKEND", "numba" if how == "environment" else "auto"))
    assert result.returncode == 0, result.stderr
    message = ast.literal_eval(result.stdout.strip())
    assert message == f"backend 'numba' is not available: No module named 'numba'; install it with: {HINT}"


def test_the_backends_command_without_numba(without_numba):
    result = subprocess.run([sys.executable, "-m", "idemcore.cli", "backends"], env=without_numba,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cython", "available", "numba", "not", "available", "python", "available",
                                     "default:", "cython"]


def test_only_the_numba_backend_imports_numba():
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name.split(".")[0] == "numba" for name in names):
                importers.append(str(path.relative_to(PACKAGE.parent)))
    assert sorted(set(importers)) == ["idemcore/kernels/numba_rules.py"]


def test_numba_is_an_extra_and_a_test_dependency():
    import tomllib

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    assert not [dep for dep in project["dependencies"] if dep.startswith("numba")]
    extras = project["optional-dependencies"]
    assert [dep for dep in extras["numba"] if dep.startswith("numba")] == ["numba>=0.59"]
    assert "numba>=0.59" in extras["test"]  # the suite still runs all three backends


def test_numba_rules_count_no_references():
    # The kernels never allocate, so they are compiled without Numba's reference counting (it made every helper
    # that takes a tuple of arrays count references per batch: ~6x slower), and cached under a name of their own.
    # numba is optional for users, not for the suite: it is in the test extra, so unless IDEMCORE_EXPECT_BACKENDS
    # leaves it out a missing numba fails here (as pytest_sessionstart fails the run) instead of skipping.
    if "numba" not in EXPECTED:
        pytest.skip("IDEMCORE_EXPECT_BACKENDS leaves the numba backend out")
    import idemcore.kernels.numba_rules as nk
    for name in ("validate_batches", "validate_listed", "reserve_rows", "check_batches", "commit_batches"):
        function = getattr(nk, name)
        assert function.targetoptions.get("_nrt") is False, name
        assert function.py_func.__qualname__ == f"{name}{nk._CACHE_TAG}" and nk._CACHE_TAG.startswith("_norefs_")
