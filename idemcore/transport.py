"""How a producer reaches a broker: the transport interface and the direct (in-process, no-fault) transport.

A transport carries :class:`ProduceRequest` and :class:`InitProducerIdRequest`
objects from a client to the broker and their responses back. Responses are
collected with :meth:`poll`; :meth:`disconnect` drops everything a client has
in flight (its late responses are lost, as after a broken connection). The
simulated network (``idemcore.sim``) implements the same interface.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Protocol

from .broker import Broker, InitProducerIdRequest, ProduceRequest
from .errors import IdemcoreError

Request = ProduceRequest | InitProducerIdRequest


class UnknownTopicError(IdemcoreError, KeyError):
    """The cluster has no topic of that name."""


class Transport(Protocol):
    def now_ms(self) -> int:
        """The clock producers use (wall clock, or the simulation's virtual clock)."""

    def partition_count(self, topic: str) -> int:
        """Number of partitions of ``topic``; raises UnknownTopicError."""

    def send(self, client: str, request: Request) -> None:
        """Put a request on its way."""

    def poll(self, client: str) -> list[tuple[Request, object]]:
        """``(request, response)`` pairs whose responses have reached ``client``."""

    def disconnect(self, client: str) -> None:
        """Forget ``client``'s requests in flight; their responses will never arrive."""

    def tick(self) -> None:
        """Let time pass while a caller waits for responses."""


class DirectTransport:
    """Calls the broker in process: every request is handled at once and its response never lost."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._responses: dict[str, list[tuple[Request, object]]] = defaultdict(list)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def partition_count(self, topic: str) -> int:
        try:
            return self.broker.topics[topic]
        except KeyError:
            raise UnknownTopicError(f"unknown topic {topic!r}; the broker has {sorted(self.broker.topics)}") from None

    def send(self, client: str, request: Request) -> None:
        if isinstance(request, InitProducerIdRequest):
            response: object = self.broker.init_producer_id()
        else:
            response = self.broker.produce(request)
        if response is not None:
            self._responses[client].append((request, response))

    def poll(self, client: str) -> list[tuple[Request, object]]:
        responses = self._responses.pop(client, None)
        return responses or []

    def disconnect(self, client: str) -> None:
        self._responses.pop(client, None)

    def tick(self) -> None:
        pass
