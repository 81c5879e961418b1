"""The transaction coordinator's writers over a broker's one request path, the implementations of
:class:`~idemcore.broker.coordinator.TransactionLogWriter` and :class:`~idemcore.broker.coordinator.MarkerWriter`:
its log records go out as produce requests to ``__transaction_state`` (acks=all), its markers as WriteTxnMarkers
requests. Only the ``handle`` callable and the messages are used, so this module needs nothing from the broker
itself; the group coordinator's writer (:mod:`idemcore.broker.group.offset_log_writer`) takes the same ``handle``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from idemcore.broker.coordinator.collaborators import TopicPartition
from idemcore.net.messages import Pending, ProduceRequest, Request, Response, TxnMarker, WriteTxnMarkersRequest
from idemcore.protocol.constants import TRANSACTION_STATE_TOPIC
from idemcore.record.batch import RecordBatch

#: ``Broker.handle`` (the coordinators' writes are produce and marker requests, never answered later).
Handle = Callable[[Request], Response | Pending | None]


class HandledTransactionLog:
    """A :class:`~idemcore.broker.coordinator.TransactionLogWriter` that produces to ``__transaction_state``:
    one non-idempotent keyed record per transition (a tombstone for an expired id), acks=all."""

    def __init__(self, handle: Handle, clock: Callable[[], int]) -> None:
        self._handle = handle
        self._clock = clock

    def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        batch = RecordBatch(TRANSACTION_STATE_TOPIC, partition, (value,), (key,), max_timestamp=self._clock())
        response = self._handle(ProduceRequest((batch,), acks=-1, internal=True))
        assert response is not None  # acks=all is always answered
        return int(response.responses[0].error_code)  # type: ignore[union-attr]


class HandledMarkers:
    """A :class:`~idemcore.broker.coordinator.MarkerWriter` that sends WriteTxnMarkers requests."""

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]:
        marker = TxnMarker(producer_id, producer_epoch, committed, coordinator_epoch, tuple(partitions))
        response = self._handle(WriteTxnMarkersRequest((marker,)))
        assert response is not None
        (result,) = response.markers  # type: ignore[union-attr]
        return {(answer.topic, answer.partition): int(answer.error_code) for answer in result.responses}
