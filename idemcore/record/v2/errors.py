"""The one exception family of the v2 codec: bytes that are not a valid record batch."""

from __future__ import annotations

from idemcore.errors import IdemcoreError


class CorruptRecordError(IdemcoreError, ValueError):
    """Bytes that are not a valid RecordBatch v2 (Kafka's ``CorruptRecordException`` / ``InvalidRecordException``).

    The message is one line naming the bad value and where it is; ``position`` is that byte position in
    the buffer the caller passed, when there is one.
    """

    def __init__(self, message: str, position: int | None = None):
        super().__init__(message)
        self.position = position


class IncompleteBatchError(CorruptRecordError):
    """The buffer ends before the batch at ``position`` does: ``needed`` bytes from ``position`` would hold it,
    ``available`` are there. A reader of a growing stream waits for more bytes; a reader of a whole file has
    found a torn tail (Kafka's log reader stops there and recovery truncates it)."""

    def __init__(self, message: str, position: int, needed: int, available: int):
        super().__init__(message, position)
        self.needed = needed
        self.available = available


class VarintError(CorruptRecordError):
    """A varint or varlong that runs past its maximum length, overflows its width or is cut off.

    ``reason`` is the message without its position, so a caller can say where the bytes sit in a larger
    structure (a record inside a decompressed batch, for instance).
    """

    def __init__(self, reason: str, position: int):
        super().__init__(f"{reason} at position {position}", position)
        self.reason = reason
