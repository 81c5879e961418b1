"""Where a segment's bytes live: a file (read and written at positions through its descriptor, never through a
Python buffer), or memory for a broker without a data directory. Both answer the same few calls, so a segment
and its indexes are one code path whichever holds them."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path


class ByteStore(ABC):
    """Bytes that grow at the end, are read at any position, and can be cut back."""

    size: int

    @abstractmethod
    def read(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``position`` (fewer at the end)."""

    @abstractmethod
    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Add ``data`` at the end (``size`` grows by its length)."""

    @abstractmethod
    def truncate(self, size: int) -> None:
        """Cut the bytes back to ``size``."""

    @abstractmethod
    def sync(self) -> None:
        """Make what was appended durable."""

    @abstractmethod
    def close(self) -> None:
        """Let go of the descriptor, if any (a closed file store opens it again when next used)."""

    @abstractmethod
    def duplicate(self) -> int | None:
        """A descriptor of its own on the file (``os.dup``: the flusher fsyncs it while appends and rolls go on
        with this store's; the caller closes it), None for bytes in memory."""

    @abstractmethod
    def detach(self) -> int | None:
        """Hand over the open descriptor, if any (the caller closes it); the store opens another when next used."""

    @property
    @abstractmethod
    def name(self) -> str:
        """What the bytes are called in messages."""


class MemoryStore(ByteStore):
    """The bytes in a ``bytearray`` (a broker without a data directory)."""

    def __init__(self) -> None:
        self._data = bytearray()
        self.size = 0

    def read(self, position: int, length: int) -> bytes:
        return bytes(self._data[position:position + length])

    def append(self, data: bytes | bytearray | memoryview) -> None:
        self._data += data
        self.size = len(self._data)

    def truncate(self, size: int) -> None:
        del self._data[size:]
        self.size = len(self._data)

    def sync(self) -> None:
        pass  # memory: nothing to make durable

    def close(self) -> None:
        pass  # no descriptor

    def duplicate(self) -> None:
        return None

    def detach(self) -> None:
        return None

    @property
    def name(self) -> str:
        return "<memory>"


class FileStore(ByteStore):
    """One file, read with ``pread`` and appended with ``pwrite`` at its size. The descriptor is opened when first
    needed and may be closed (a rolled segment keeps none open until it is read again)."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = path
        self._fd: int | None = None
        if create:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            self.size = os.fstat(self._fd).st_size
        else:
            try:
                self.size = os.stat(path).st_size
            except FileNotFoundError:
                self.size = 0

    @property
    def name(self) -> str:
        return str(self.path)

    @property
    def exists(self) -> bool:
        return self._fd is not None or os.path.lexists(self.path)

    def _descriptor(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except PermissionError:  # a rolled segment's file is only read: its mode need not allow writes
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        return self._fd

    def read(self, position: int, length: int) -> bytes:
        length = max(0, min(length, self.size - position))
        if length == 0:
            return b""
        data = os.pread(self._descriptor(), length, position)
        while len(data) < length:  # a short read only at the end of a file cut outside the broker
            more = os.pread(self._descriptor(), length - len(data), position + len(data))
            if not more:
                break
            data += more
        return data

    def append(self, data: bytes | bytearray | memoryview) -> None:
        fd = self._descriptor()
        done = os.pwrite(fd, data, self.size)
        if done < len(data):  # pwrite may write less than asked
            with memoryview(data) as view:
                while done < len(view):
                    done += os.pwrite(fd, view[done:], self.size + done)
        self.size += len(data)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._descriptor(), size)
        self.size = size

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def duplicate(self) -> int:
        return os.dup(self._descriptor())

    def detach(self) -> int | None:
        fd, self._fd = self._fd, None
        return fd

