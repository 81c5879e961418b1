"""The reference kernels compiled with Numba.

There is no second copy of the rules here: every function of
:mod:`idemcore.kernels.reference` (and of ``drain_reference``) is re-bound to a namespace in which its
helpers are the compiled versions, then compiled with ``@njit``. So the
interpreted and the compiled backend run one source; the tests compare them
anyway, because Numba's integer typing differs from Python's.
"""

from __future__ import annotations

import types

import numba

from idemcore.kernels import drain_reference, reference
from idemcore.protocol import sequences

#: One place for JIT options: integer code, so no fastmath; cached on disk.
JIT_OPTIONS = {"nopython": True, "cache": True, "nogil": True}
#: Helpers are inlined at Numba-IR level: a call passing arrays would otherwise
#: pay reference counting on every batch.
HELPER_OPTIONS = {**JIT_OPTIONS, "inline": "always"}
_ENTRY_POINTS = ("rebuild_producer_index", "rebuild_partition_index", "validate_batches", "check_batches",
                 "commit_batches", "drain_partitions")

# Helpers first: a function is compiled on first call, looking its helpers up
# in the shared namespace, which by then holds their compiled versions.
_SEQUENCES = ("seq_add", "seq_sub", "in_sequence")
_FUNCTIONS = (
    "producer_hash", "partition_hash", "producer_slot", "partition_slot", "metadata_error", "ring_pos",
    "find_duplicate", "newest_last_seq", "check_marker", "check_epoch", "sequence_error", "sequence_finding",
    "check_sequence", "check_txn_state", "check_offsets", "log_end", "emit", "check_batch", "ring_push", "commit_batch",
    *_ENTRY_POINTS[:5],
)


def _compile_module_functions(module: types.ModuleType, names: tuple[str, ...], compiled: dict | None = None) -> dict:
    namespace = {**vars(module), **(compiled or {})}  # helpers compiled already, shared across modules
    for name in names:
        source = getattr(module, name)
        rebound = types.FunctionType(source.__code__, namespace, name, source.__defaults__, source.__closure__)
        rebound.__module__ = module.__name__
        rebound.__qualname__ = source.__qualname__
        options = JIT_OPTIONS if name in _ENTRY_POINTS else HELPER_OPTIONS
        namespace[name] = numba.jit(**options)(rebound)
    return {name: namespace[name] for name in names}


_compiled_sequences = _compile_module_functions(sequences, _SEQUENCES)
_compiled = _compile_module_functions(reference, _FUNCTIONS, _compiled_sequences)

_compiled_drain = _compile_module_functions(drain_reference, ("drain_partitions",), _compiled_sequences)

validate_batches = _compiled["validate_batches"]
check_batches = _compiled["check_batches"]
commit_batches = _compiled["commit_batches"]
drain_partitions = _compiled_drain["drain_partitions"]
rebuild_producer_index = _compiled["rebuild_producer_index"]
rebuild_partition_index = _compiled["rebuild_partition_index"]
