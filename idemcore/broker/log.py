"""A partition's log: the batches it holds, in offset order, optionally persisted to an append-only file.

File format (little-endian), one frame per batch::

    u32 length of the rest of the frame after this field and the CRC
    u32 CRC-32 of those bytes
    i64 base_offset, i64 producer_id, i16 producer_epoch, i32 base_sequence,
    i32 record_count, i64 max_timestamp, u8 flags (1: transactional)
    per record: i32 key length (-1: no key), key, i32 value length, value

Offsets are contiguous from 0. A frame cut short or failing its CRC beyond the
recovery point (see :class:`PartitionLog`) is the tail of a write cut short by
a crash: recovery truncates the file there. Below it, or a log ending below it,
or offsets that skip or repeat, is damage from outside: recovery refuses to
start (``LogCorruptionError``) rather than drop acknowledged batches.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from idemcore.errors import IdemcoreError
from idemcore.record.batch import RecordBatch

log = logging.getLogger(__name__)

#: Where the broker keeps the recovery points (named in messages; see ``broker.LOG_END_CHECKPOINT``).
CHECKPOINT_HINT = "<data_dir>/log-end-offsets.json and <data_dir>/written-log-ends"

_PREFIX = struct.Struct("<II")
_HEADER = struct.Struct("<qqhiiqB")
_LENGTH = struct.Struct("<i")
_TRANSACTIONAL = 1


class LogCorruptionError(IdemcoreError):
    """A log file holds something that is neither a valid frame nor a torn tail."""


class StoredBatch(NamedTuple):
    base_offset: int
    batch: RecordBatch


def encode_frame(base_offset: int, batch: RecordBatch) -> bytes:
    """The bytes of one batch frame."""
    parts = [_HEADER.pack(base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                          batch.record_count, batch.max_timestamp, _TRANSACTIONAL if batch.is_transactional else 0)]
    keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
    for key, value in zip(keys, batch.values, strict=True):
        if key is None:
            parts.append(_LENGTH.pack(-1))
        else:
            parts += (_LENGTH.pack(len(key)), key)
        parts += (_LENGTH.pack(len(value)), value)
    body = b"".join(parts)
    return _PREFIX.pack(len(body), zlib.crc32(body)) + body


def _decode_body(topic: str, partition: int, body: bytes) -> StoredBatch:
    base_offset, producer_id, epoch, base_sequence, count, max_timestamp, flags = _HEADER.unpack_from(body)
    position = _HEADER.size
    keys: list[bytes | None] = []
    values: list[bytes] = []
    for _ in range(count):
        (size,) = _LENGTH.unpack_from(body, position)
        position += 4
        keys.append(None if size < 0 else body[position:position + size])
        position += max(size, 0)
        (size,) = _LENGTH.unpack_from(body, position)
        position += 4
        values.append(body[position:position + size])
        position += size
    if position != len(body):
        raise LogCorruptionError(f"{topic}-{partition}: frame at offset {base_offset} has {len(body) - position} "
                                 "bytes after its records")
    has_keys = any(key is not None for key in keys)
    return StoredBatch(base_offset, RecordBatch(topic, partition, values, keys if has_keys else None, producer_id,
                                                epoch, base_sequence, max_timestamp, bool(flags & _TRANSACTIONAL)))


class StoredLog:
    """What every partition log offers over its batches, whatever its file format: the log end, its name,
    where the last append started, and every record in offset order."""

    topic: str
    partition: int
    batches: list[StoredBatch]
    log_start_offset: int
    _last_position: int

    @property
    def log_end_offset(self) -> int:
        if not self.batches:
            return self.log_start_offset
        last = self.batches[-1]
        return last.base_offset + last.batch.record_count

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def last_append_position(self) -> int:
        """The byte (of the file being appended to) at which the last appended batch starts: a crash
        mid-write tears from there."""
        return self._last_position

    def records(self) -> Iterator[tuple[int, bytes | None, bytes, RecordBatch]]:
        """Every record as ``(offset, key, value, batch)``, in offset order."""
        for base_offset, batch in self.batches:
            keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
            for index, (key, value) in enumerate(zip(keys, batch.values, strict=True)):
                yield base_offset + index, key, value, batch


class PartitionLog(StoredLog):
    """Batches of one topic-partition; with ``directory``, also written to ``directory/log``.

    ``recovery_point``: the log end when the broker last started or closed cleanly (its checkpoint), or when
    it last wrote the log in this boot (its written ends: a killed process's writes stay in the OS). A log
    that ends below it was damaged outside the broker and is refused; a bad frame beyond it is the torn tail
    of a crash and is cut (Kafka's recovery point plays the same part).
    """

    def __init__(self, topic: str, partition: int, directory: Path | None = None, fsync: bool = True,
                 recovery_point: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.batches: list[StoredBatch] = []
        self.log_start_offset = 0
        self.truncated_bytes = 0
        self._file: BinaryIO | None = None
        self._dirty = False
        self._last_position = 0
        #: Bytes of the file known to be on disk (fsync'd): what a power loss cannot take back.
        self.synced_bytes = 0
        self._closed = False
        self._fsync = fsync
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / "log"
            self.batches, valid_bytes = self._read(path, recovery_point) if path.exists() else ([], 0)
            if not path.exists() and recovery_point > 0:
                raise LogCorruptionError(
                    f"{self.name}: {path} is missing, but held offsets up to {recovery_point - 1} when the broker "
                    f"last started, closed or wrote it. Restore it, or remove {CHECKPOINT_HINT} to accept the loss")
            # Unbuffered: every append reaches the OS (page cache) before the broker answers, whatever the
            # acks; acks=all also fsyncs (sync()).
            self._file = open(path, "ab", buffering=0)
            if self._file.tell() != valid_bytes:
                self.truncated_bytes = self._file.tell() - valid_bytes
                log.warning("%s: dropping a torn tail of %d bytes after offset %d (a write cut short by a crash)",
                            self.name, self.truncated_bytes, self.log_end_offset - 1)
                self._file.truncate(valid_bytes)
                self._file.seek(valid_bytes)

    def _read(self, path: Path, recovery_point: int) -> tuple[list[StoredBatch], int]:
        data = path.read_bytes()
        batches: list[StoredBatch] = []
        position = 0
        while position + _PREFIX.size <= len(data):
            length, crc = _PREFIX.unpack_from(data, position)
            end = position + _PREFIX.size + length
            body = data[position + _PREFIX.size:end]
            if end > len(data) or zlib.crc32(body) != crc or length < _HEADER.size:
                break  # a torn tail if it lies beyond the recovery point (checked below)
            stored = _decode_body(self.topic, self.partition, body)
            expected = self._end_of(batches) + 1
            if stored.base_offset != expected:
                raise LogCorruptionError(f"{self.name}: {path} holds offset {stored.base_offset} at byte {position} "
                                         f"where offset {expected} belongs: batches are missing or repeated")
            batches.append(stored)
            position = end
        end_offset = self._end_of(batches) + 1
        if end_offset < recovery_point:
            what = f"is corrupt at byte {position}" if position < len(data) else "is shorter"
            raise LogCorruptionError(
                f"{self.name}: {path} {what}: it ends at offset {end_offset}, but held {recovery_point} when the "
                "broker last started, closed or wrote it (deleted, cut or damaged outside the broker). Restore it, or "
                f"remove {CHECKPOINT_HINT} to accept the loss")
        return batches, position

    def _end_of(self, batches: list[StoredBatch]) -> int:
        return batches[-1].base_offset + batches[-1].batch.record_count - 1 if batches else -1

    @property
    def path(self) -> Path | None:
        """The log file, or None for a log kept in memory."""
        return None if self._file is None else Path(self._file.name)

    def abandon(self) -> None:
        """Close the file as a dying process does: no flush; what reached the OS stays, nothing more."""
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def append(self, base_offset: int, batch: RecordBatch) -> None:
        """Add a batch the producer-state check accepted at ``base_offset``. All or nothing: when the write
        raises, the file is cut back to where it was and the batch is not added."""
        if self._closed:
            raise IdemcoreError(f"{self.name}: the log is closed")
        if type(batch.values) is not tuple or not (batch.keys is None or type(batch.keys) is tuple):
            # The log keeps its own immutable copy: a caller changing its list later changes nothing here.
            batch = RecordBatch(batch.topic, batch.partition, tuple(batch.values),
                                None if batch.keys is None else tuple(batch.keys), batch.producer_id,
                                batch.producer_epoch, batch.base_sequence, batch.max_timestamp,
                                batch.is_transactional)
        if base_offset < self.log_end_offset:
            raise IdemcoreError(f"{self.name}: append at offset {base_offset} below the log end "
                                f"offset {self.log_end_offset}")
        if self._file is not None:
            position = self._file.tell()
            try:
                frame = memoryview(encode_frame(base_offset, batch))
                while frame:
                    frame = frame[self._file.write(frame):]  # a raw write may take only part of the bytes
            except BaseException:
                self._cut(self._file, position)
                raise
            self._last_position = position
            self._dirty = True
        self.batches.append(StoredBatch(base_offset, batch))

    def rollback_last(self) -> None:
        """Take back the batch appended last (its sync failed): the log is as it was before that append."""
        self.batches.pop()
        if self._file is not None:
            self._cut(self._file, self._last_position)

    def _cut(self, file: BinaryIO, position: int) -> None:
        try:
            file.seek(position)
            file.truncate(position)
        except OSError:
            log.exception("%s: could not cut the log back to byte %d", self.name, position)

    def sync(self) -> None:
        """Make the batches appended since the last sync durable (acks=all): fsync, unless the log was opened
        with fsync=False (the appends are in the OS already)."""
        if self._dirty and self._fsync:
            self.flush()
        self._dirty = False

    def flush(self) -> None:
        """fsync the whole file whatever the fsync setting, and what an earlier process appended: before a
        recovery point counts these batches, and at close (Kafka flushes at shutdown too)."""
        if self._file is not None:
            os.fsync(self._file.fileno())
            self.synced_bytes = self._file.tell()
            self._dirty = False

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None

