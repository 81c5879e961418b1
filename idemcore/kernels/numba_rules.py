"""The reference kernels compiled with Numba.

There is no second copy of the rules here: every function of
:mod:`idemcore.kernels.rules_reference` (and of ``drain_reference`` and ``header_scan_reference``) is re-bound to
a namespace in which its helpers are the compiled versions, then compiled with ``@njit``. So the
interpreted and the compiled backend run one source; the tests compare them
anyway, because Numba's integer typing differs from Python's. The header scan swaps two helpers for its own
(reading a byte as int64, and CRC-32C through a C function), see below.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib
import types
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba.core import cgutils
from numba.extending import intrinsic

from idemcore.kernels import drain_reference, header_scan_reference, rules_reference
from idemcore.protocol import sequences


def _without_refcounts() -> dict[str, Any]:
    """``_nrt=False`` where this Numba accepts it: the kernels never allocate, so they need no reference counts,
    and with them every helper taking a tuple of arrays counts references to each array on every batch (measured
    on stream (a), 400,000 batches: 1.4-2.9 M batches/s with them, 16.7 without). An undocumented option of
    Numba's own, so a Numba that refuses it compiles the kernels as before."""
    options: dict[str, Any] = {"_nrt": False}
    try:
        numba.njit(**options)(lambda: 0)()  # (options are checked when a function compiles)
    except (KeyError, TypeError, ValueError):
        return {}
    return options


#: One place for JIT options: integer code, so no fastmath; cached on disk.
JIT_OPTIONS = {"nopython": True, "cache": True, "nogil": True, **_without_refcounts()}
#: Numba's disk cache is keyed by a function's own source file, not by its options nor by this module (which
#: swaps some helpers): functions compiled with other options, or by another version of this module, are cached
#: under another name (the tag is part of each cache file's name).
_CACHE_TAG = ("_norefs" if "_nrt" in JIT_OPTIONS else "") + "_" + hashlib.sha1(
    Path(__file__).read_bytes()).hexdigest()[:8]
#: Helpers are inlined at Numba-IR level: a call passing arrays would otherwise
#: pay reference counting on every batch.
HELPER_OPTIONS: dict[str, Any] = {**JIT_OPTIONS, "inline": "always"}
_ENTRY_POINTS = ("rebuild_producer_index", "rebuild_stream_index", "validate_batches", "check_batches",
                 "commit_batches", "reserve_rows", "validate_listed", "drain_partitions", "scan_batches")

# Helpers first: a function is compiled on first call, looking its helpers up
# in the shared namespace, which by then holds their compiled versions.
_SEQUENCES = ("seq_add", "seq_sub", "in_sequence")
_FUNCTIONS = (
    "producer_hash", "stream_hash", "producer_slot", "stream_slot", "metadata_error", "ring_pos",
    "find_duplicate", "newest_last_seq", "check_marker", "check_epoch", "sequence_error", "sequence_finding",
    "check_sequence", "check_txn_state", "check_offsets", "log_end", "emit", "check_batch", "ring_push", "init_row",
    "commit_batch", "apply_every_rule", "plain_data", "append_to_row", "prefill", "append_in_sequence",
    *_ENTRY_POINTS[:7],
)


def _compile_module_functions(module: types.ModuleType, names: tuple[str, ...], compiled: dict | None = None) -> dict:
    namespace = {**vars(module), **(compiled or {})}  # helpers compiled already, shared across modules
    for name in names:
        source = getattr(module, name)
        rebound = types.FunctionType(source.__code__, namespace, name, source.__defaults__, source.__closure__)
        rebound.__module__ = module.__name__
        rebound.__qualname__ = source.__qualname__ + _CACHE_TAG
        options = JIT_OPTIONS if name in _ENTRY_POINTS else HELPER_OPTIONS
        namespace[name] = numba.jit(**options)(rebound)
    return {name: namespace[name] for name in names}


ir = importlib.import_module("llvmlite.ir")  # (llvmlite comes with numba; it has no type hints)


def _prefetch_lines(lines: int) -> Any:
    """An intrinsic ``(array2d, index)`` prefetching the first ``lines`` cache lines of ``array2d[index]``."""
    @intrinsic
    def prefetch(typingctx, rows, row):
        return numba.types.none(rows, row), functools.partial(_prefetch_codegen, lines)
    return prefetch


def _prefetch_codegen(lines, context, builder, signature, args):
    """An LLVM prefetch (read, locality 3, data cache) of each of the first ``lines`` cache lines of
    ``args[0][args[1]]``."""
    array_type = signature.args[0]
    array = context.make_array(array_type)(context, builder, args[0])
    index = context.cast(builder, args[1], signature.args[1], numba.types.intp)
    address = cgutils.get_item_pointer2(
        context, builder, data=array.data, shape=cgutils.unpack_tuple(builder, array.shape),
        strides=cgutils.unpack_tuple(builder, array.strides), layout=array_type.layout,
        inds=[index, ir.Constant(ir.IntType(64), 0)])
    byte_pointer = ir.IntType(8).as_pointer()
    word = ir.IntType(32)
    prefetch = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, word, word, word]), "llvm.prefetch.p0")
    base = builder.bitcast(address, byte_pointer)
    for offset in range(0, 64 * lines, 64):
        line = builder.gep(base, [ir.Constant(ir.IntType(64), offset)])
        builder.call(prefetch, [line, ir.Constant(word, 0), ir.Constant(word, 3), ir.Constant(word, 1)])
    return context.get_dummy_value()


_compiled_sequences = _compile_module_functions(sequences, _SEQUENCES)
# rules_reference.prefetch_row and prefetch_slot compiled: the row's three lines (the first, read by an in-sequence
# batch, and those of the ring entry it writes), the slot's one (interpreted under DISABLE_JIT: the no-ops).
_prefetch = ({"prefetch_row": rules_reference.prefetch_row, "prefetch_slot": rules_reference.prefetch_slot}
             if getattr(numba.config, "DISABLE_JIT", False)
             else {"prefetch_row": _prefetch_lines(3), "prefetch_slot": _prefetch_lines(1)})
_compiled = _compile_module_functions(rules_reference, _FUNCTIONS, {**_compiled_sequences, **_prefetch})

_compiled_drain = _compile_module_functions(drain_reference, ("drain_partitions",), _compiled_sequences)

validate_batches = _compiled["validate_batches"]
check_batches = _compiled["check_batches"]
commit_batches = _compiled["commit_batches"]
reserve_rows = _compiled["reserve_rows"]
validate_listed = _compiled["validate_listed"]
drain_partitions = _compiled_drain["drain_partitions"]
rebuild_producer_index = _compiled["rebuild_producer_index"]
rebuild_stream_index = _compiled["rebuild_stream_index"]

# The header scan: header_scan_reference compiled the same way, except its CRC-32C, which calls a C function
# (Google's crc32c_extend, see header_scan_reference.crc32c_extend_address) by a symbol bound on first use: by
# name, not by address, so the compiled scan stays cacheable (an embedded address is a "dynamic global").
_CRC32C_SYMBOL = "idemcore_crc32c_extend"
_crc32c_extend = numba.types.ExternalFunction(
    _CRC32C_SYMBOL, numba.types.uint32(numba.types.uint32, numba.types.uintp, numba.types.uintp))


@numba.jit(**HELPER_OPTIONS)
def _batch_crc(data, start, stop):
    return _crc32c_extend(0, data.ctypes.data + np.uintp(start), np.uintp(stop - start))


if getattr(numba.config, "DISABLE_JIT", False):  # interpreted (coverage runs): Python cannot call an ExternalFunction
    _batch_crc = header_scan_reference.batch_crc


@intrinsic
def _prefetch_byte(typingctx, data, index):
    """An LLVM prefetch (read, locality 3, data cache) of the cache line of ``data[index]`` (a 1-D array)."""
    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        address = builder.gep(array.data, [context.cast(builder, args[1], signature.args[1], numba.types.intp)])
        byte_pointer = ir.IntType(8).as_pointer()
        word = ir.IntType(32)
        prefetch = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, word, word, word]), "llvm.prefetch.p0")
        builder.call(prefetch, [builder.bitcast(address, byte_pointer), ir.Constant(word, 0), ir.Constant(word, 3),
                                ir.Constant(word, 1)])
        return context.get_dummy_value()
    return numba.types.none(data, index), codegen


@numba.jit(**HELPER_OPTIONS)
def _read_ahead(data, ahead, until):
    while ahead < until:
        _prefetch_byte(data, ahead)
        ahead += header_scan_reference.CACHE_LINE
    return ahead


if getattr(numba.config, "DISABLE_JIT", False):  # interpreted: the reference's no-op
    _read_ahead = header_scan_reference.read_ahead


@numba.jit(**HELPER_OPTIONS)
def _read_u8(data, p):
    return np.int64(data[p])  # Numba's int() of a uint8 stays uint8 (and its shifts unsigned); Python's is exact


@functools.cache
def _bind_crc32c() -> object:
    address, _source = header_scan_reference.crc32c_extend_address()
    stand_in = None
    if not address:  # no CRC-32C package: a stand-in lets the scan link; prepare_crc32c keeps it from being called
        stand_in = header_scan_reference.CRC32C_EXTEND(lambda crc, data, size: 0)
        address = ctypes.cast(stand_in, ctypes.c_void_p).value or 0
    importlib.import_module("llvmlite.binding").add_symbol(_CRC32C_SYMBOL, address)  # llvmlite comes with numba
    return stand_in  # kept alive by the cache


def _prepare_crc32c(verify_crc) -> None:
    header_scan_reference.prepare_crc32c(verify_crc)
    _bind_crc32c()


_HEADER_SCAN_FUNCTIONS = ("read_u32", "read_i32", "read_i16", "read_i64", "add_i64", "batch_last_sequence",
                          "read_varint", "skip_varint", "decode_control", "scan_batches")
_compiled_scan = _compile_module_functions(header_scan_reference, _HEADER_SCAN_FUNCTIONS,
                                           {**_compiled_sequences, "read_u8": _read_u8, "batch_crc": _batch_crc,
                                            "read_ahead": _read_ahead})
# The entry point stays Python (argument checks, binding the CRC); it calls the compiled loop.
_scan_namespace = {**vars(header_scan_reference), **_compiled_scan, "prepare_crc32c": _prepare_crc32c}
scan_headers = types.FunctionType(header_scan_reference.scan_headers.__code__, _scan_namespace, "scan_headers")
scan_headers.__doc__ = header_scan_reference.scan_headers.__doc__
