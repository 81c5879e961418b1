"""What the client knows of the cluster (Kafka's ``Metadata``, refreshed as ``NetworkClient``'s
``DefaultMetadataUpdater`` does): the bootstrap servers, the brokers' addresses, each topic's partition leaders
and the controller, from Metadata answers; which topics are wanted, and when to ask again.

A Metadata request goes to whichever connection the owner's ``connect`` gives (any broker); one is in flight at
a time, at most one per ``retry_backoff_ms``, and the known topics are asked again after ``metadata_max_age_ms``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from idemcore.net.messages import MetadataRequest
from idemcore.net.tcp.connection import Call, Connection
from idemcore.net.wire.client import METADATA, TopicLeaders, cluster_metadata


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` as pairs; ValueError naming a malformed entry."""
    out = []
    for entry in (s.strip() for s in servers.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {entry!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"no bootstrap server in {servers!r}")
    return out


class MetadataSettings(Protocol):
    """The owner's settings the refresh follows (read at each use: the owner may change them)."""

    auto_create_topics: bool
    retry_backoff_ms: int
    metadata_max_age_ms: int


class ClusterMetadata:
    """Brokers, leaders and the controller as the last Metadata answers said, and the refresh of them.

    ``connect()``: a connection to ask any broker on (None when there is none yet); ``now_ms()``: the owner's
    clock. Node ids -1, -2, ... stand for the bootstrap servers, in order."""

    def __init__(self, bootstrap: list[tuple[str, int]], settings: MetadataSettings,
                 connect: Callable[[], Connection | None], now_ms: Callable[[], int]) -> None:
        self.bootstrap = bootstrap
        self._settings = settings
        self._connect = connect
        self._now_ms = now_ms
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicLeaders] = {}
        self.controller = -1
        #: When the last answer came.
        self.updated_ms = 0
        self.asked: set[str] = set()  # topics asked for by the Metadata request in flight
        self.inflight = False
        #: No Metadata request before this (``retry_backoff_ms`` after the last).
        self.next_ms = 0
        self.wanted: set[str] = set()

    def address(self, node: int) -> tuple[str, int] | None:
        """A broker's address; a negative node is a bootstrap server."""
        if node < 0:
            index = -node - 1
            return self.bootstrap[index] if index < len(self.bootstrap) else None
        return self.brokers.get(node)

    def learn_broker(self, node: int, address: tuple[str, int]) -> None:
        """A broker named outside Metadata (a FindCoordinator answer): kept until Metadata says otherwise."""
        self.brokers.setdefault(node, address)

    def nodes(self) -> list[int]:
        """The known brokers' ids, or the bootstrap servers' (-1, -2, ...) while none is known."""
        return sorted(self.brokers) or [-(k + 1) for k in range(len(self.bootstrap))]

    def bootstrap_text(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.bootstrap)

    def leader(self, topic: str, partition: int) -> int | None:
        """The node leading ``topic``'s ``partition``; None (and the topic's metadata asked for) when no known
        broker leads it."""
        known = self.topics.get(topic)
        if known is None or not 0 <= partition < len(known.leaders) or known.leaders[partition] < 0 \
                or known.leaders[partition] not in self.brokers:
            self.want({topic})
            return None
        return known.leaders[partition]

    def want(self, topics: set[str]) -> None:
        """Ask for ``topics`` (an empty set: for the brokers) now, or as soon as the backoff allows."""
        # A topic the request in flight asks for is not asked again (its answer is on the way).
        self.wanted |= topics - self.asked if self.inflight else topics
        self.ask(self._now_ms())

    def refresh_if_due(self, now: int) -> None:
        """Ask when topics are wanted, or when what is known is older than ``metadata_max_age_ms``."""
        if self.wanted or (self.topics and now - self.updated_ms >= self._settings.metadata_max_age_ms):
            self.ask(now)

    def ask(self, now: int) -> None:
        """Send a Metadata request for the wanted and the known topics, unless one is in flight or backing off."""
        if self.inflight or now < self.next_ms:
            return
        topics = sorted(self.wanted | set(self.topics))
        self.wanted.clear()
        self.inflight = True
        self.asked = set(topics)
        self.next_ms = now + self._settings.retry_backoff_ms
        request = MetadataRequest(tuple(topics), self._settings.auto_create_topics)
        connection = self._connect()
        if connection is None:
            self.inflight = False
            self.wanted |= self.asked
            return

        def answered(version: int, body: Any) -> None:
            self.inflight = False
            self.asked = set()
            self.updated_ms = self._now_ms()
            fresh = cluster_metadata(body)
            if fresh.brokers:
                self.brokers = dict(fresh.brokers)
            if fresh.controller_id >= 0:
                self.controller = fresh.controller_id
            # A topic still without leaders is asked again by who needs it; a partition answered with an older
            # leader epoch than known keeps the newer leader (KIP-320).
            self.topics.update({name: leaders.newer_of(self.topics.get(name))
                                for name, leaders in fresh.topics.items()})

        def lost(why: str) -> None:
            self.inflight = False
            self.asked = set()
            self.wanted |= set(topics)

        connection.call(Call(METADATA, lambda version: METADATA.encode(request, version), answered, lost))
