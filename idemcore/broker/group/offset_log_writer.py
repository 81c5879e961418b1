"""The group coordinator's writer of ``__consumer_offsets``: what it needs (:class:`OffsetLogWriter`, one batch
appended to a partition) and the broker's implementation over its one request path (:class:`HandledOffsetLog`);
tests plug in fakes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from idemcore.broker.coordinator.request_path_writers import Handle
from idemcore.net.messages import ProduceRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import CONSUMER_OFFSETS_TOPIC, NO_SEQUENCE
from idemcore.record.batch import RecordBatch


class OffsetLogWriter(Protocol):
    """Appends one batch to a ``__consumer_offsets`` partition."""

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], producer_id: int,
               producer_epoch: int, transactional: bool) -> tuple[int, int]:
        """Write ``records`` (key, value) as one batch to ``partition`` with the producer's id and epoch
        (NO_PRODUCER_ID and NO_PRODUCER_EPOCH for a plain commit) and no sequence. Answers ``(NONE, base offset)``
        only once the batch is durable; otherwise ``(the broker's error code, -1)``, and nothing was written."""
        ...


class HandledOffsetLog:
    """An :class:`OffsetLogWriter` over the broker's request path: a ProduceRequest with ``internal=True`` (the
    broker checks it with COORDINATOR origin: the producer's epoch, not its sequence) and acks=all."""

    def __init__(self, handle: Handle, clock: Callable[[], int]) -> None:
        self._handle = handle
        self._clock = clock

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], producer_id: int,
               producer_epoch: int, transactional: bool) -> tuple[int, int]:
        batch = RecordBatch(CONSUMER_OFFSETS_TOPIC, partition, tuple(value for _, value in records),
                            tuple(key for key, _ in records), producer_id, producer_epoch, NO_SEQUENCE,
                            self._clock(), transactional)
        response = self._handle(ProduceRequest((batch,), acks=-1, internal=True))
        assert response is not None  # acks=all is always answered
        answer = response.responses[0]  # type: ignore[union-attr]
        if answer.error_code != ErrorCode.NONE:
            return int(answer.error_code), -1
        return int(ErrorCode.NONE), int(answer.base_offset)
