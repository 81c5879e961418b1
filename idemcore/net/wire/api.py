"""What one Kafka API needs on the wire: its advertised versions, and the two translations between kio's entities
and :mod:`idemcore.net.messages` (one module per API family defines a :class:`WireApi`; ``apis`` lists them)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple


@dataclass(slots=True)
class WireContext:
    """What the translations need to know about the server: this node's address on the listener served
    (Metadata, FindCoordinator) and the topics (topic ids both ways)."""

    node_id: int
    host: str
    port: int
    cluster_id: str
    topics: Callable[[], Mapping[str, int]]
    #: The listener the request came in on: Metadata and FindCoordinator name other brokers by theirs.
    listener: str = "PLAINTEXT"
    _names: dict[uuid.UUID, str] = field(default_factory=dict)

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        """The topic whose id is ``topic_id``, None when there is none (a Fetch v13+ asks this per topic: the map
        is built again only when the broker's topics changed)."""
        topics = self.topics()
        if len(self._names) != len(topics):  # topics are only ever added
            self._names = {topic_id_of(name): name for name in topics}
        return self._names.get(topic_id) if topic_id is not None else None


#: Topic ids (KIP-516) are derived from the name: stable across restarts without a file, and a client that
#: only knows ids (librdkafka's Fetch v13+) finds the topic again.
_TOPIC_ID_NAMESPACE = uuid.UUID("6b1d4c1e-0a5f-4d8e-9a55-6964656d636f")


@cache
def topic_id_of(name: str) -> uuid.UUID:
    return uuid.uuid5(_TOPIC_ID_NAMESPACE, name)


#: ``(context, version, correlation_id, kio request body) -> (a Request for Broker.handle, carry)``, or a tuple of
#: Requests when one wire request asks what several messages do (OffsetFetch v8+ for several groups): each goes
#: through ``Broker.handle`` in turn (:func:`handle_each`) and ``to_wire`` gets the tuple of answers. The carry is
#: whatever the answer needs that the message does not hold (partitions refused before the broker, the order
#: and form of the names asked for).
ToMessage = Callable[[WireContext, int, int, Any], tuple[Any, Any]]
#: ``(context, version, kio request body, Broker.handle's Response, carry) -> kio response body``. (Typed Any:
#: each API takes its own message types.)
ToWire = Callable[[WireContext, int, Any, Any, Any], Any]


def handle_each(handle: Callable[[Any], Any], message: Any) -> Any:
    """``handle(message)``, or for a tuple of messages the tuple of their answers, in order."""
    if type(message) is tuple:
        return tuple(handle(one) for one in message)
    return handle(message)


class WireApi(NamedTuple):
    key: int
    name: str
    #: The versions advertised in ApiVersions: what the translation and the broker really serve.
    min_version: int
    max_version: int
    to_message: ToMessage
    to_wire: ToWire
