"""How a client reaches a broker: the transport interface and the in-process transport.

A transport carries requests (:mod:`idemcore.net.messages`) from a client to
whatever handles them (``Broker.handle``) and their responses back. Responses
are collected with :meth:`Transport.poll`; :meth:`Transport.disconnect` drops
everything a client has in flight (its late responses are lost, as after a
broken connection). The simulated network (:mod:`idemcore.sim`) implements the
same interface; a TCP server will be the third. None of them looks inside a
request: they only carry it to ``handle``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.net.messages import Pending, Request, Response

#: How long :meth:`InProcessTransport.tick` lets pass: the clients' clock is the wall clock there.
_TICK_S = 0.001


class UnknownTopicError(IdemcoreError, KeyError):
    """The cluster has no topic of that name."""


@runtime_checkable
class RequestHandler(Protocol):
    """What a transport delivers requests to (a :class:`idemcore.Broker`)."""

    @property
    def topics(self) -> Mapping[str, int]:
        """Each topic's partition count."""

    def handle(self, request: Request) -> Response | Pending | None:
        """Answer one request; None when no answer is sent (a produce request with acks=0); a :class:`Pending`
        for an answer given later (a JoinGroup waiting for its group)."""


class Transport(Protocol):
    def now_ms(self) -> int:
        """The clock producers use (wall clock, or the simulation's virtual clock)."""

    def partition_count(self, topic: str) -> int:
        """Number of partitions of ``topic``; raises UnknownTopicError."""

    def send(self, client: str, request: Request) -> None:
        """Put a request on its way."""

    def poll(self, client: str) -> list[tuple[Request, Response]]:
        """``(request, response)`` pairs whose responses have reached ``client``."""

    def disconnect(self, client: str) -> None:
        """Forget ``client``'s requests in flight; their responses will never arrive."""

    def tick(self) -> None:
        """Let time pass while a caller waits for responses."""


#: The methods a transport has, in the order :class:`Transport` declares them.
TRANSPORT_METHODS = ("now_ms", "partition_count", "send", "poll", "disconnect", "tick")


def as_transport(obj: Transport | RequestHandler) -> Transport:
    """``obj`` if it is a transport; a :class:`RequestHandler` (a Broker) wrapped in an
    :class:`InProcessTransport`; else TypeError naming the methods it lacks."""
    transport = InProcessTransport(obj) if isinstance(obj, RequestHandler) else obj
    missing = [name for name in TRANSPORT_METHODS if not callable(getattr(transport, name, None))]
    if missing:
        raise TypeError(f"transport must be a Broker or a Transport, not {type(transport).__name__} "
                        f"(it has no {', '.join(missing)})")
    return transport


def connection_broke(transport: Transport, client: str) -> bool:
    """Whether a connection of ``client`` broke since it last asked, losing what it had in flight (a
    transport over a real network says so through an optional ``lost(client)`` method; Kafka's NetworkClient
    fails those requests at once). Without it, a lost request shows only as a request timeout."""
    lost = getattr(transport, "lost", None)
    return bool(lost(client)) if lost is not None else False


def partition_count(topics: Mapping[str, int], topic: str) -> int:
    """``topics[topic]``, or UnknownTopicError naming the topics there are."""
    try:
        return topics[topic]
    except KeyError:
        raise UnknownTopicError(f"unknown topic {topic!r}; the broker has {sorted(topics)}") from None


class InProcessTransport:
    """Calls ``handler.handle`` in process: no answer is lost. Most requests are answered at once; an answer the
    handler gives later (a :class:`Pending`) reaches :meth:`poll` once it completes, unless the client
    disconnected in between."""

    def __init__(self, handler: RequestHandler) -> None:
        self.handler = handler
        self._responses: dict[str, list[tuple[Request, Response]]] = defaultdict(list)
        #: Bumped by disconnect: a pending answer to an earlier connection is dropped.
        self._connections: dict[str, int] = defaultdict(int)

    def now_ms(self) -> int:
        return wall_clock_ms()

    def partition_count(self, topic: str) -> int:
        return partition_count(self.handler.topics, topic)

    def send(self, client: str, request: Request) -> None:
        response = self.handler.handle(request)
        if isinstance(response, Pending):
            connection = self._connections[client]

            def deliver(answer: Response) -> None:
                if self._connections[client] == connection:
                    self._responses[client].append((request, answer))

            response.add_done_callback(deliver)
        elif response is not None:
            self._responses[client].append((request, response))

    def poll(self, client: str) -> list[tuple[Request, Response]]:
        return self._responses.pop(client, None) or []

    def disconnect(self, client: str) -> None:
        self._responses.pop(client, None)
        self._connections[client] += 1

    def tick(self) -> None:
        # A waiting client (a consumer polling an empty partition, a producer in its retry backoff) waits here,
        # as a broker holds an empty fetch for max_wait_ms, instead of spinning on requests.
        time.sleep(_TICK_S)
