"""The continuous audit's checkpoint file: data only (a JSON manifest and arrays), never code.

Layout of one file: the magic line ``idemcore-follow-checkpoint\\n``, the SHA-256 of everything after it (32
bytes), the length of the manifest (8 bytes, little-endian), the manifest (UTF-8 JSON: ``version``, the
caller's values, and ``blobs``: each blob's ``name``, ``kind`` and ``length``), then the blobs one after the
other. A blob is either ``npy`` (a NumPy array in ``.npy`` format, read with ``allow_pickle=False``) or
``bytes`` (e.g. a producer state table from :func:`idemcore.engine.persist.save_state`). A file whose magic,
digest, lengths, JSON or version do not check is refused whole with one line naming it (:class:`CheckpointError`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

MAGIC = b"idemcore-follow-checkpoint\n"
_LENGTH = struct.Struct("<Q")
_DIGEST = 32


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded: damaged, truncated, not a checkpoint, or of another version."""


def restore(path: os.PathLike[str] | str, apply: Callable[[], None]) -> None:
    """``apply()`` (a follower's state taken from a decoded checkpoint); what does not fit the state it was
    decoded for is one CheckpointError naming the file."""
    try:
        apply()
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise CheckpointError(f"{path}: damaged checkpoint ({exc!r}); delete it to start over") from None


def encode(manifest: dict[str, Any], blobs: dict[str, np.ndarray | bytes], version: int) -> bytes:
    """The bytes of a checkpoint: ``manifest`` (JSON-ready values) plus ``blobs`` (arrays or bytes by name)."""
    entries, parts = [], []
    for name, value in blobs.items():
        if isinstance(value, np.ndarray):
            buffer = io.BytesIO()
            np.save(buffer, value, allow_pickle=False)
            data, kind = buffer.getvalue(), "npy"
        else:
            data, kind = bytes(value), "bytes"
        entries.append({"name": name, "kind": kind, "length": len(data)})
        parts.append(data)
    head = json.dumps({**manifest, "version": version, "blobs": entries}, sort_keys=True).encode()
    body = _LENGTH.pack(len(head)) + head + b"".join(parts)
    return MAGIC + hashlib.sha256(body).digest() + body


def decode(data: bytes, version: int, path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The manifest and blobs of a checkpoint's bytes (read from ``path``); :class:`CheckpointError` unless the
    whole file checks and is of ``version``."""
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{path}: not a follow checkpoint of this idemcore (checkpoint version {version}); "
                              "delete it to start over")
    digest, body = data[len(MAGIC):len(MAGIC) + _DIGEST], data[len(MAGIC) + _DIGEST:]
    if len(digest) < _DIGEST or hashlib.sha256(body).digest() != digest or len(body) < _LENGTH.size:
        raise CheckpointError(f"{path}: damaged or truncated checkpoint ({len(data)} bytes, checksum mismatch); "
                              "delete it to start over")
    (size,) = _LENGTH.unpack_from(body)
    try:
        manifest = json.loads(body[_LENGTH.size:_LENGTH.size + size].decode())
        if manifest.get("version") != version:
            raise CheckpointError(f"{path}: checkpoint version {manifest.get('version')!r}, expected {version}")
        blobs: dict[str, Any] = {}
        offset = _LENGTH.size + size
        for entry in manifest.pop("blobs"):
            end = offset + int(entry["length"])
            if end > len(body):
                raise ValueError("a blob runs past the end of the file")
            chunk = body[offset:end]
            if entry["kind"] == "npy":
                blobs[entry["name"]] = np.load(io.BytesIO(chunk), allow_pickle=False)
            elif entry["kind"] == "bytes":
                blobs[entry["name"]] = chunk
            else:
                raise ValueError(f"unknown blob kind {entry['kind']!r}")
            offset = end
        if offset != len(body):
            raise ValueError(f"{len(body) - offset} bytes after the last blob")
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: damaged checkpoint ({exc}); delete it to start over") from None
    return manifest, blobs


__all__ = ["CheckpointError", "decode", "encode"]
