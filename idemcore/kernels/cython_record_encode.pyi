"""Stub of the compiled module built from idemcore/kernels/cython_record_encode.pyx."""

from collections.abc import Sequence

def encode_records(
    values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None, reserve: int,
    timestamps: Sequence[int] | None = None,
) -> bytearray: ...
