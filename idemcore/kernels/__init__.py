"""The kernel contract and backend selection (the one place that picks a backend).

Every backend provides the same functions over plain arrays; their
parameters are named in :mod:`idemcore.kernels.abi`:

``validate_batches(...) -> int``
    check and commit batches ``start..stop-1`` one after the other; returns
    the first index not processed (``stop`` unless the state table ran out of
    rows). Boolean columns are passed as ``uint8`` views.
``check_batches(...) -> int``
    prepare: the verdicts of ``start..stop-1`` against the state as it
    stands, writing no state (at most one batch per stream).
``commit_batches(...) -> int``
    commit the batches ``check_batches`` accepted (after the log write).
``reserve_rows(...) -> int``
    the pre-pass of a validation split into lanes of streams (``engine.lanes``):
    every batch's stream and producer row, entries added for new ones;
    ``validate_listed(...) -> int`` is validate_batches over a lane's batches.
``rebuild_producer_index(...)`` and ``rebuild_stream_index(...)``
    refill the open-addressing indexes after the table grows or drops rows.
``drain_partitions(...) -> int``
    one send round of the producer: which head batches to take and their
    sequences (see :mod:`idemcore.kernels.drain_reference`).
``scan_headers(...) -> int``
    walk a log segment's RecordBatch v2 headers into the batch metadata
    columns, with file positions and CRC checks; returns the batches decoded
    and leaves where and why it stopped in ``cursor`` (and, in a longer cursor,
    facts of the batches scanned; see :mod:`idemcore.kernels.header_scan_reference`).

``bind_batches(backend, columns, state, verdicts, txns, commit)`` gives ``check_batches`` and ``commit_batches``
over arrays that stay the same from call to call (a broker's request columns): the compiled backend takes their
buffers once (``cython_rules.BoundBatches``), the others are called with the arrays as usual.

``get_record_encoder(name)`` is apart from that contract: the records section of a RecordBatch v2 built from
Python objects (:mod:`idemcore.kernels.record_encode_reference` and its compiled twin ``cython_record_encode``),
which ``record.v2.batches.encode_record_batch`` calls on every batch the broker appends.

The rules are in :mod:`idemcore.kernels.rules_reference` (docs/rules.md in prose).
Backends: ``cython`` (compiled extension), ``numba`` (the reference compiled
with ``@njit``; needs the optional ``numba`` extra) and ``python`` (the
reference, interpreted). Choose one with a ``backend=`` argument or
``IDEMCORE_BACKEND``; ``auto`` (the default) takes the fastest that loads and
warns once when it had to fall back (not when Cython loads: numba missing is
then no loss).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from idemcore.errors import BackendUnavailableError

#: Fastest first: the order ``auto`` tries (measured by bench/bench_validate.py).
PREFERENCE = ("cython", "numba", "python")
_MODULES = {
    "cython": ("idemcore.kernels.cython_rules", "idemcore.kernels.cython_drain",
               "idemcore.kernels.cython_header_scan"),
    "numba": ("idemcore.kernels.numba_rules",),
    "python": ("idemcore.kernels.rules_reference", "idemcore.kernels.drain_reference",
               "idemcore.kernels.header_scan_reference"),
}
ENV_VAR = "IDEMCORE_BACKEND"
#: Backends that need an optional dependency, and the extra that installs it (numba is optional when the Cython
#: extension is built: ``auto`` prefers Cython anyway).
_EXTRAS = {"numba": "numba"}


@dataclass(frozen=True)
class Backend:
    """One implementation of the kernel contract."""

    name: str
    validate_batches: Callable[..., int]
    check_batches: Callable[..., int]
    commit_batches: Callable[..., int]
    reserve_rows: Callable[..., int]
    validate_listed: Callable[..., int]
    rebuild_producer_index: Callable[..., None]
    rebuild_stream_index: Callable[..., None]
    drain_partitions: Callable[..., int]
    scan_headers: Callable[..., int]


class BoundBatches(Protocol):
    """``check_batches`` and ``commit_batches`` over the arrays given to :func:`bind_batches`."""

    def check_batches(self, origin: int, start: int, stop: int) -> int: ...

    def commit_batches(self, start: int, stop: int) -> int: ...


class _Splatted:
    """A backend's functions with the bound arrays passed at each call (what the compiled class saves)."""

    def __init__(self, backend: Backend, columns: tuple, state: tuple, verdicts: tuple, txns: tuple,
                 commit: tuple) -> None:
        self._backend = backend
        self._columns, self._state, self._verdicts, self._txns, self._commit = columns, state, verdicts, txns, commit

    def check_batches(self, origin: int, start: int, stop: int) -> int:
        return self._backend.check_batches(*self._columns, origin, start, stop, *self._state, *self._verdicts,
                                           *self._txns)

    def commit_batches(self, start: int, stop: int) -> int:
        return self._backend.commit_batches(*self._columns, start, stop, *self._state, *self._commit)


def bind_batches(backend: Backend, columns: Iterable[Any], state: Sequence[Any], verdicts: Sequence[Any],
                 txns: Sequence[Any], commit: Sequence[Any]) -> BoundBatches:
    """``backend``'s check_batches and commit_batches over these argument groups (:mod:`idemcore.kernels.abi`:
    BatchColumns, StateArrays, VerdictColumns, TxnColumns, CommitVerdicts). Bind again once any array is replaced.
    A Cython build without ``BoundBatches`` (built before it existed) is called as usual."""
    groups = (tuple(columns), tuple(state), tuple(verdicts), tuple(txns), tuple(commit))
    if backend.name == "cython":
        bound = getattr(importlib.import_module(_MODULES["cython"][0]), "BoundBatches", None)
        if bound is not None:
            return bound(*groups)
    return _Splatted(backend, *groups)


def _known(name: str, source: str = "") -> str:
    """``name`` if it names a backend (or ``auto``); else ValueError naming where it came from."""
    if name != "auto" and name not in _MODULES:
        names = ", ".join(map(repr, PREFERENCE))
        raise ValueError(f"unknown backend {source}{name!r}; expected one of 'auto', {names}")
    return name


@functools.cache
def load_backend(name: str) -> Backend:
    """Load the backend called ``name``; raise BackendUnavailableError if it cannot be loaded."""
    if _known(name) == "auto":
        raise ValueError("load_backend takes a backend's name; use get_backend('auto') for the fastest")
    functions = {}
    for module_name in _MODULES[name]:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if name in _EXTRAS:
                reason += f"; install it with: pip install 'idemcore[{_EXTRAS[name]}]'"
            raise BackendUnavailableError(f"backend {name!r} is not available: {reason}") from exc
        functions.update(vars(module))
    names = [field.name for field in dataclasses.fields(Backend)[1:]]
    missing = [function for function in names if function not in functions]
    if missing:  # a stale build of the extensions
        raise BackendUnavailableError(f"backend {name!r} is not available: it lacks {', '.join(missing)} "
                                      "(rebuild the extensions: pip install -e .)")
    return Backend(name, *(functions[function] for function in names))


@functools.cache
def _auto_backend() -> Backend:
    failures = []
    for name in PREFERENCE:
        try:
            backend = load_backend(name)
        except BackendUnavailableError as exc:
            failures.append(str(exc))
            continue
        if failures:
            warnings.warn(
                f"idemcore falls back to the {name!r} backend ({'; '.join(failures)})",
                RuntimeWarning,
                stacklevel=3,
            )
        return backend
    raise BackendUnavailableError("no idemcore backend could be loaded: " + "; ".join(failures))


def get_backend(name: str | Backend | None = None) -> Backend:
    """Resolve a backend: a :class:`Backend`, a name, ``"auto"``, or None for ``$IDEMCORE_BACKEND`` (else auto)."""
    if isinstance(name, Backend):
        return name
    name = _backend_name(name)
    return _auto_backend() if name == "auto" else load_backend(name)


def _backend_name(name: str | None) -> str:
    """A known backend name or "auto": ``name``, else ``$IDEMCORE_BACKEND``, else "auto"."""
    source = "backend="
    if name is None:
        name = os.environ.get(ENV_VAR, "auto") or "auto"
        source = f"${ENV_VAR}="
    if not isinstance(name, str):
        raise TypeError(f"backend must be a name or a Backend, not {type(name).__name__}")
    return _known(name.strip().lower(), source)


def available_backends() -> list[str]:
    """Names of the backends that load on this machine, fastest first."""
    names = []
    for name in PREFERENCE:
        try:
            load_backend(name)
        except BackendUnavailableError:
            continue
        names.append(name)
    return names


#: The records encoder of each backend. numba has none of its own (it compiles array loops, not loops over Python
#: objects): like ``auto`` it takes the compiled encoder when it loads, else the Python twin.
_RECORD_ENCODERS = {"cython": "idemcore.kernels.cython_record_encode",
                    "python": "idemcore.kernels.record_encode_reference"}
#: The records scanner (a v2 records section checked without a Python object per record), the same way.
_RECORD_SCANNERS = {"cython": "idemcore.kernels.cython_record_scan",
                    "python": "idemcore.kernels.record_scan_reference"}


@functools.cache
def _load_twin(modules: tuple[tuple[str, str], ...], function: str, noun: str, name: str) -> Callable[..., Any]:
    """``function`` of backend ``name``'s module in ``modules`` (pairs of backend and module); ``noun`` names it in
    the error."""
    try:
        module = importlib.import_module(dict(modules)[name])
    except ImportError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendUnavailableError(f"backend {name!r} has no {noun}: {reason} (rebuild the extensions: "
                                      "pip install -e .)") from exc
    loaded: Callable[..., Any] = getattr(module, function)
    return loaded


@functools.cache
def _auto_twin(modules: tuple[tuple[str, str], ...], function: str, noun: str, doing: str) -> Callable[..., Any]:
    try:
        return _load_twin(modules, function, noun, "cython")
    except BackendUnavailableError as exc:
        warnings.warn(f"idemcore {doing} in Python ({exc})", RuntimeWarning, stacklevel=4)
        return _load_twin(modules, function, noun, "python")


def _get_twin(table: dict[str, str], function: str, noun: str, doing: str,
              name: str | Backend | None) -> Callable[..., Any]:
    modules = tuple(sorted(table.items()))
    name = _backend_name(name.name if isinstance(name, Backend) else name)
    if name in table:
        return _load_twin(modules, function, noun, name)
    return _auto_twin(modules, function, noun, doing)


def get_record_encoder(name: str | Backend | None = None) -> Callable[..., bytearray]:
    """The ``encode_records`` function of a backend (see :mod:`idemcore.kernels.record_encode_reference`), chosen as
    :func:`get_backend` chooses: a name, a :class:`Backend`, ``"auto"``, or None for ``$IDEMCORE_BACKEND``.
    ``cython`` raises BackendUnavailableError when its extension is not built; ``auto`` and ``numba`` fall back
    to the Python twin (``auto`` with one warning)."""
    return _get_twin(_RECORD_ENCODERS, "encode_records", "record encoder", "encodes records", name)


def get_record_scanner(name: str | Backend | None = None) -> Callable[..., tuple[int, int, int, int, int, int]]:
    """The ``scan_records`` function of a backend (:mod:`idemcore.kernels.record_scan_reference`), chosen as
    :func:`get_record_encoder` chooses."""
    return _get_twin(_RECORD_SCANNERS, "scan_records", "record scanner", "scans records", name)
