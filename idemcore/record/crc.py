"""CRC-32C (Kafka's batch, snapshot and index checksums) from the maintained ``crc32c`` package.

It is a dependency of idemcore; the import is guarded only so that the kernels (whose header scan takes its
CRC-32C from ``google-crc32c`` or refuses to verify) import in an environment that lacks it.
"""

from __future__ import annotations

from typing import Any

try:
    from crc32c import crc32c
except ImportError:  # reached only through a broken install: say what is missing when a CRC is needed

    def crc32c(data: Any, value: int = 0, gil_release_mode: int = -1) -> int:  # type: ignore[misc]
        raise ImportError("Kafka's checksums need CRC-32C: pip install crc32c")

__all__ = ["crc32c"]
