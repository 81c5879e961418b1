"""A transport the test answers by hand: every request waits until the test replies to it."""

from __future__ import annotations

from idemcore.net.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    PartitionResponse,
    ProduceRequest,
    ProduceResponse,
)
from idemcore.protocol.codes import ErrorCode


class ScriptedTransport:
    def __init__(self, partitions: int = 1, producer_id: int = 7) -> None:
        self.now = 0
        self.partitions = partitions
        self.producer_id = producer_id
        self.produce_requests: list[ProduceRequest] = []
        self._inbox: list = []
        self.disconnects = 0

    def now_ms(self) -> int:
        return self.now

    def partition_count(self, topic: str) -> int:
        return self.partitions

    def send(self, client, request) -> None:
        if isinstance(request, InitProducerIdRequest):
            self._inbox.append((request, InitProducerIdResponse(ErrorCode.NONE, self.producer_id, 0)))
        else:
            self.produce_requests.append(request)

    def reply(self, request: ProduceRequest, error_code: int = ErrorCode.NONE, base_offset: int = -1) -> None:
        answers = tuple(PartitionResponse(b.topic, b.partition, error_code, base_offset) for b in request.batches)
        self._inbox.append((request, ProduceResponse(request.request_id, answers)))

    def poll(self, client):
        inbox, self._inbox = self._inbox, []
        return inbox

    def disconnect(self, client) -> None:
        self.disconnects += 1
        self._inbox = [(q, r) for q, r in self._inbox if isinstance(q, InitProducerIdRequest)]

    def tick(self) -> None:
        self.now += 1


def sent_batches(transport: ScriptedTransport):
    """(base_sequence, producer_epoch, record_count) of every batch sent so far, in order."""
    return [(b.base_sequence, b.producer_epoch, b.record_count) for r in transport.produce_requests for b in r.batches]
