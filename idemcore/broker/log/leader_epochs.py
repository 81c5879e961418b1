"""A partition's leader epochs: which leader epoch began at which offset (Kafka's ``LeaderEpochFileCache`` over
its ``leader-epoch-checkpoint``).

Entries are ``(epoch, start offset)``, both rising. A new entry replaces the entries it conflicts with (an
epoch at or above its own, or a start at or past its own: Kafka's ``maybeTruncateNonMonotonicEntries``); an
entry for the latest epoch at a later offset changes nothing (the epoch began earlier). Every change an
``assign`` makes is written to the file at once, whole (temp file, rename); the truncations (Kafka writes those
in the background) are written at once too, so the file never lags what the log's truncation left.

OffsetsForLeaderEpoch's answer (:meth:`LeaderEpochCache.end_offset_for`) follows Kafka's ``endOffsetFor``: the
largest epoch at or below the one asked for and where it ended (the next epoch's start, or the log end for the
latest); an epoch below the first known one gets itself and the first entry's start (the follower keeps what
lies before the leader's oldest epoch); an unknown one (-1, past the latest, or an empty cache) gets (-1, -1).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from pathlib import Path

from idemcore.errors import IdemcoreError
from idemcore.record.kafka_files.indexes import read_leader_epoch_checkpoint
from idemcore.record.kafka_files.writers import encode_leader_epoch_checkpoint, write_file_atomically

log = logging.getLogger(__name__)

#: Kafka's ``UNDEFINED_EPOCH`` and ``UNDEFINED_EPOCH_OFFSET`` (OffsetsForLeaderEpochResponse).
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCheckpointError(IdemcoreError):
    """The ``leader-epoch-checkpoint`` cannot be read as one (its first problem named)."""


class LeaderEpochCache:
    """The ``(epoch, start offset)`` entries of one partition, kept in ``path`` (None: in memory only);
    ``fsync``: whether writes of the file are fsync'd. Reading a damaged file raises
    :class:`LeaderEpochCheckpointError` (the log rebuilds it from its batches)."""

    def __init__(self, path: Path | None, fsync: bool = True, entries: Iterable[tuple[int, int]] | None = None
                 ) -> None:
        self.path = path
        self.fsync = fsync
        self._epochs: list[int] = []
        self._starts: list[int] = []
        if entries is not None:
            for epoch, start in entries:
                self._put(epoch, start)
        elif path is not None and path.exists():
            read = read_leader_epoch_checkpoint(path)  # OSError (a directory there, say) goes to the caller
            if read.problems:
                raise LeaderEpochCheckpointError(f"{path} is damaged: {read.problems[0]}")
            for entry in read.entries:
                self._put(entry.epoch, entry.start_offset)

    # --- reading ------------------------------------------------------------------------------------------------

    @property
    def entries(self) -> list[tuple[int, int]]:
        """``(epoch, start offset)`` pairs, oldest first."""
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        """The newest epoch (-1: none)."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        """Where ``epoch`` began, or None when it has no entry."""
        k = bisect.bisect_left(self._epochs, epoch)
        return self._starts[k] if k < len(self._epochs) and self._epochs[k] == epoch else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch ``offset`` was written in: the entry with the largest start at or below it (None: below the
        first entry, or no entry). Kafka's ``epochForOffset``."""
        k = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[k] if k >= 0 else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor`` (module docstring): ``(epoch, end offset)``."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)  # the first entry past the epoch asked for
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    # --- changing -----------------------------------------------------------------------------------------------

    def _put(self, epoch: int, start_offset: int) -> bool:
        """Kafka's private ``assign``: whether the entries changed."""
        if type(epoch) is not int or type(start_offset) is not int or epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch!r}, {start_offset!r}): both must be integers "
                             "of at least 0")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False  # the latest epoch began no later than that
        removed = []
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            removed.append((self._epochs.pop(), self._starts.pop()))
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            log.warning("%s: leader epoch %d from offset %d replaced the conflicting entries %s",
                        self.path or "<memory>", epoch, start_offset, removed[::-1])
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` began at ``start_offset`` (module docstring); written at once when it changed
        anything. Returns whether it did."""
        if not self._put(epoch, start_offset):
            return False
        self.write()
        return True

    def assign_all(self, entries: Iterable[tuple[int, int]]) -> bool:
        """:meth:`assign` each entry, writing the file once."""
        changed = False
        for epoch, start in entries:
            changed |= self._put(epoch, start)
        if changed:
            self.write()
        return changed

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries starting at or past ``end_offset`` (a log truncated there); whether any went.
        A negative offset (Kafka's undefined) changes nothing."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return False
        k = bisect.bisect_left(self._starts, end_offset)
        del self._epochs[k:], self._starts[k:]
        self.write()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log starts at ``start_offset`` now (retention, DeleteRecords): the entries starting at or below it
        go but the last of them, which moves up to ``start_offset`` (an entry at exactly ``start_offset`` stays as
        it is); whether anything changed."""
        k = bisect.bisect_right(self._starts, start_offset)
        if k == 0 or (k == 1 and self._starts[0] == start_offset):
            return False
        epoch = self._epochs[k - 1]
        del self._epochs[:k], self._starts[:k]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        self.write()
        return True

    def clear(self) -> None:
        """Drop every entry (a log truncated whole), written at once."""
        self._epochs.clear()
        self._starts.clear()
        self.write()

    def write(self) -> None:
        """Write the entries to the file, whole (nothing for a cache in memory)."""
        if self.path is not None:
            write_file_atomically(self.path, encode_leader_epoch_checkpoint(self.entries), self.fsync)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {self.entries})"
