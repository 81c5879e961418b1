"""Each partition's log end as last written to the OS, so recovery after a killed process knows it.

The recovery points (Kafka's ``recovery-point-offset-checkpoint``) count only what was fsync'd: written at a
clean start and close, and while running by the flusher, never past what it fsync'd; they are what survives
a power loss. Beyond them, a process that is killed leaves its appends in the page
cache, where they survive; so after a crash *in the same boot* the log must hold at least what the broker
had written, and anything shorter or damaged below that is outside damage, not a torn write. This file
keeps those ends: rewritten at start, then one small ``pwrite`` per partition per produce request (no
fsync: it only speaks for the boot it was written in, named in its header).

Format: ``u32`` header length, the header (JSON: boot id, partition names), then per partition 12 bytes:
``i64`` end offset and ``u32`` CRC-32 of those 8 bytes.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

from idemcore.errors import IdemcoreError

FILE_NAME = "written-log-ends"
_LENGTH = struct.Struct("<I")
_SLOT = struct.Struct("<qI")
_END = struct.Struct("<q")
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class WrittenEndsError(IdemcoreError):
    """The written-ends file is damaged."""


def boot_id() -> str:
    """This boot's id (Linux); "" where the system does not say, which no later boot matches."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def _slot(end: int) -> bytes:
    packed = _END.pack(end)
    return _SLOT.pack(end, zlib.crc32(packed))


def read_written_ends(data_dir: Path) -> dict[str, int]:
    """The ends written in this boot by the broker that last ran on ``data_dir``; {} when there are none
    (no file, or one from an earlier boot: after a reboot the page cache is gone, and only the recovery
    points speak). WrittenEndsError when the file is damaged."""
    path = data_dir / FILE_NAME
    if not os.path.lexists(path):
        return {}
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WrittenEndsError(f"{path} cannot be read ({exc.strerror}); remove it to recover from the "
                               "recovery points alone") from None
    try:
        (length,) = _LENGTH.unpack_from(data)
        header = json.loads(data[_LENGTH.size:_LENGTH.size + length])
        names = [str(name) for name in header["partitions"]]
        booted = str(header["boot"])
        body = data[_LENGTH.size + length:]
        if len(body) != _SLOT.size * len(names):
            raise ValueError(f"{len(body)} bytes of ends for {len(names)} partitions")
        ends = {}
        for k, name in enumerate(names):
            end, crc = _SLOT.unpack_from(body, k * _SLOT.size)
            if zlib.crc32(_END.pack(end)) != crc:
                raise ValueError(f"the end of {name} fails its CRC")
            ends[name] = end
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise WrittenEndsError(f"{path} is damaged ({exc}); remove it to recover from the recovery points "
                               "alone") from None
    return ends if booted and booted == boot_id() else {}


def rewind_written_end(data_dir: Path, name: str, end: int) -> None:
    """Set partition ``name``'s written end back to ``end``: what a process killed in the middle of writing
    leaves, since it records an end only after the write (for simulations and fault tests)."""
    path = data_dir / FILE_NAME
    data = path.read_bytes()
    (length,) = _LENGTH.unpack_from(data)
    names = json.loads(data[_LENGTH.size:_LENGTH.size + length])["partitions"]
    descriptor = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.pwrite(descriptor, _slot(end), _LENGTH.size + length + names.index(name) * _SLOT.size)
    finally:
        os.close(descriptor)


class WrittenEnds:
    """The file of one running broker: :meth:`update` after every write that reached a log."""

    def __init__(self, data_dir: Path, ends: dict[str, int]) -> None:
        self.path = data_dir / FILE_NAME
        self._slots = {name: k for k, name in enumerate(ends)}
        header = json.dumps({"boot": boot_id(), "partitions": list(ends)}).encode()
        self._base = _LENGTH.size + len(header)
        content = _LENGTH.pack(len(header)) + header + b"".join(_slot(end) for end in ends.values())
        partial = self.path.with_name(FILE_NAME + ".partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(descriptor, content)
        finally:
            os.close(descriptor)
        os.replace(partial, self.path)  # a whole file or the old one: never half a header
        self._descriptor: int | None = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW)

    def update(self, name: str, end: int) -> None:
        """Partition ``name`` now ends at ``end`` in the OS (one pwrite; in the page cache, not on disk)."""
        if self._descriptor is not None:
            os.pwrite(self._descriptor, _slot(end), self._base + self._slots[name] * _SLOT.size)

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None
