"""The seams between layers and twins: kernel signatures and codes, the ring size, the import layering."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from idemcore.engine.table import ProducerStateTable
from idemcore.findings import FINDINGS, PER_BATCH, Finding
from idemcore.kernels import abi, drain_reference, load_backend, rules_reference
from idemcore.protocol.codes import ControlType, ErrorCode, Origin, Status
from idemcore.protocol.constants import NUM_BATCHES_TO_RETAIN

PACKAGE = Path(__file__).resolve().parent.parent / "idemcore"
#: Bottom to top: a module may import only from its own layer or below.
LAYERS = ("errors", "checks", "clock", "progress", "protocol", "findings", "kernels", "record", "engine", "net",
          "client", "broker", "audit", "synth", "sim", "cli")
ENTRY_POINTS = (*abi.SIGNATURES, "rebuild_producer_index", "rebuild_stream_index")


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", sorted(abi.SIGNATURES))
def test_reference_entry_points_take_the_abi_groups_in_order(name):
    assert parameters(getattr(rules_reference, name)) == list(abi.SIGNATURES[name])


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_each_cython_signature_equals_its_python_twin(name):
    cython = load_backend("cython")
    assert parameters(getattr(cython, name)) == parameters(getattr(rules_reference, name))


def test_the_cython_drain_signature_equals_its_python_twin():
    assert parameters(load_backend("cython").drain_partitions) == parameters(drain_reference.drain_partitions)


def reference_codes() -> dict[str, int]:
    return {name: value for name, value in vars(rules_reference).items() if name.isupper() and isinstance(value, int)}


def test_kernel_codes_equal_the_python_enums():
    codes = reference_codes()
    enums = {**{s.name: s for s in Status}, **{f"ORIGIN_{o.name}": o for o in Origin},
             **{f"CONTROL_{c.name}": c for c in ControlType if c is not ControlType.NONE}}
    for name, member in enums.items():
        assert codes[name] == member, name
    errors = {name: value for name, value in codes.items() if name in ErrorCode.__members__}
    assert errors and all(ErrorCode[name] == value for name, value in errors.items())
    findings = {name.removeprefix("F_"): value for name, value in codes.items() if name.startswith("F_")}
    assert findings == {f.name: int(f) for f in (Finding.NONE, *PER_BATCH)}  # every per-batch finding, nothing else


def test_cython_kernel_codes_equal_the_reference():
    from idemcore.kernels import cython_rules

    codes = reference_codes()
    assert cython_rules.KERNEL_CODES == {name: codes[name] for name in cython_rules.KERNEL_CODES}
    assert {name for name in codes if name.startswith("F_")} <= set(cython_rules.KERNEL_CODES)


def test_every_finding_is_registered_once():
    assert set(FINDINGS) == set(Finding) - {Finding.NONE}
    assert all(entry.finding is finding for finding, entry in FINDINGS.items())
    assert [f for f in FINDINGS if not FINDINGS[f].per_batch] == [Finding.HANGING_TRANSACTION]


def test_ring_size_is_the_number_of_batches_retained():
    from idemcore.kernels import cython_rules

    assert rules_reference.RING_SIZE == NUM_BATCHES_TO_RETAIN == cython_rules.KERNEL_CODES["RING_SIZE"] == 5
    assert ProducerStateTable().ring_last_seq.shape[1] == NUM_BATCHES_TO_RETAIN


def test_the_client_imports_no_broker_module():
    code = ("import sys, idemcore.client; "
            "print(sorted(m for m in sys.modules if m.startswith('idemcore.broker') or m in ('sqlite3', 'pyarrow')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_audit_loads_no_broker_module():
    """The audit reads Kafka's files (``__transaction_state`` included) through idemcore.record, not the broker."""
    code = ("import importlib, pkgutil, sys, idemcore.audit as audit\n"
            "for m in pkgutil.walk_packages(audit.__path__, 'idemcore.audit.'): importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('idemcore.broker')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "idemcore" or len(parts) < 2:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def _imports(path: Path) -> list[tuple[int, str]]:
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = module.split(".")[: -node.level] if not path.name == "__init__.py" else \
                module.split(".")[: len(module.split(".")) - node.level + 1]
            found.append((node.lineno, ".".join([*base, *([node.module] if node.module else [])])))
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_imports_point_down_the_layers():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if own is None:
            continue  # the package root is the top: it re-exports the public API
        for line, target in _imports(path):
            layer = _layer(target)
            if layer is not None and layer > own:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert wrong == []


def test_column_lists_are_the_abi_groups():
    from idemcore.engine.verdicts import VERDICT_DTYPES
    from idemcore.kernels.columns import COLUMNS

    assert tuple(COLUMNS) == abi.BATCH_FIELDS
    assert tuple(f"out_{name}" for name in VERDICT_DTYPES) == abi.VerdictColumns._fields
