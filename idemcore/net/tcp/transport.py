"""The client transport (Kafka's ``NetworkClient``, with ``ClusterConnectionStates``' reconnect backoff): its
connections (one per client, broker node and role), the I/O loop that drives them in the caller's thread, and the
:class:`~idemcore.net.transport.Transport` interface the clients call; it leaves what the cluster looks like to
:class:`~idemcore.net.tcp.cluster_metadata.ClusterMetadata` and where each request goes to
:class:`~idemcore.net.tcp.routing.Router`.
"""

from __future__ import annotations

import functools
import itertools
import logging
import selectors
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from idemcore.checks import bool_setting, int_setting
from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.net.client_security import ClientSecurity
from idemcore.net.messages import CreateTopicsRequest, CreateTopicsResponse, NewTopic, Request, Response
from idemcore.net.tcp.cluster_metadata import ClusterMetadata, parse_bootstrap
from idemcore.net.tcp.connection import CLOSED, COORDINATOR, DATA, INTERNAL, READY, AuthenticationError, Connection
from idemcore.net.tcp.routing import Router
from idemcore.net.transport import UnknownTopicError
from idemcore.net.wire.client import BY_KEY, TopicLeaders, api_of, pick_version
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)


class TransportTimeoutError(IdemcoreError, TimeoutError):
    """A blocking call of the transport (metadata for a topic) got no answer in time."""


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``method`` holding the transport's lock."""
    @functools.wraps(method)
    def run(self: TcpTransport, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)
    return run


class TcpTransport:
    """A :class:`~idemcore.net.transport.Transport` over Kafka's protocol (the package docstring).

    ``bootstrap_servers``: ``"host:port[,host:port...]"``. ``connect_timeout_ms``: how long a connection may take
    to open; ``request_timeout_ms``: how long a request may wait for its route, and the transport's own requests
    for their answers; ``metadata_timeout_ms``: how long :meth:`partition_count` waits for a topic's metadata;
    ``auto_create_topics``: whether Metadata asks the broker to create a missing topic; ``security``: how each
    connection authenticates (a :class:`~idemcore.net.client_security.ClientSecurity`, or Kafka's client
    properties such as ``{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", ...}`` read by
    :meth:`ClientSecurity.from_properties`; None: PLAINTEXT)."""

    def __init__(self, bootstrap_servers: str, client_id: str = "idemcore", *, connect_timeout_ms: int = 10_000,
                 request_timeout_ms: int = 30_000, metadata_timeout_ms: int = 30_000,
                 reconnect_backoff_ms: int = 50, retry_backoff_ms: int = 100,
                 metadata_max_age_ms: int = 300_000, auto_create_topics: bool = True,
                 security: ClientSecurity | Mapping[str, str] | None = None) -> None:
        for name, value in (("connect_timeout_ms", connect_timeout_ms), ("request_timeout_ms", request_timeout_ms),
                            ("metadata_timeout_ms", metadata_timeout_ms),
                            ("reconnect_backoff_ms", reconnect_backoff_ms), ("retry_backoff_ms", retry_backoff_ms),
                            ("metadata_max_age_ms", metadata_max_age_ms)):
            int_setting(name, value, 0)
        bool_setting("auto_create_topics", auto_create_topics)
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.connect_timeout_ms = connect_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.metadata_timeout_ms = metadata_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.auto_create_topics = auto_create_topics
        self.security = client_security(security)
        if self.security is not None and self.security.protocol == "PLAINTEXT":
            self.security = None  # the plain path, unchanged
        #: The first authentication failure: fatal (see the package docstring).
        self._fatal: AuthenticationError | None = None
        #: Why the last connection closed (said when a wait for metadata times out).
        self._last_failure: str | None = None
        #: TLS connections holding decrypted bytes the selector cannot see.
        self._pending: set[Connection] = set()
        self._selector: selectors.BaseSelector = selectors.DefaultSelector()
        self._correlation_ids: Iterator[int] = itertools.count(1)
        self._connections: dict[tuple[str, int, str], Connection] = {}
        #: When each node last failed a connection: the next one waits ``reconnect_backoff_ms``.
        self._failed_at: dict[int, int] = {}
        # The parts read this transport's settings at each use, and its clock through now_ms.
        self._metadata = ClusterMetadata(self.bootstrap, self,
                                         lambda: self._connection(INTERNAL, self._any_node(INTERNAL), DATA),
                                         lambda: self.now_ms())
        self._router = Router(self._metadata, self, self._connection, self._any_node, lambda: self.now_ms())
        self._closed = False
        #: Held by the public methods: a second thread (a consumer's heartbeats) may share the transport.
        self.lock = threading.RLock()

    #: The transport may be used from several threads (see :attr:`lock`).
    thread_safe = True

    # ------------------------------------------------------------ the Transport interface

    def now_ms(self) -> int:
        return wall_clock_ms()

    def partition_count(self, topic: str) -> int:
        """The partition count of ``topic`` from Metadata (asked now when not known; the broker may create the
        topic, as ``auto_create_topics`` allows). UnknownTopicError when the broker says it has no such topic;
        TransportTimeoutError when no answer comes within ``metadata_timeout_ms``."""
        if not isinstance(topic, str) or not topic:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        deadline = self.now_ms() + self.metadata_timeout_ms
        last: TopicLeaders | None = None
        while True:
            with self.lock:
                known = self._metadata.topics.get(topic)
            if known is not None and known.error_code == ErrorCode.NONE and known.leaders:
                return len(known.leaders)
            if known is not None and known is not last:
                last = known
                if known.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not self.auto_create_topics:
                    raise UnknownTopicError(f"unknown topic {topic!r}: the cluster at "
                                            f"{self._metadata.bootstrap_text()} has none (UNKNOWN_TOPIC_OR_PARTITION)")
            if self._fatal is not None:
                self._raise_fatal()
            if self.now_ms() >= deadline:
                break
            with self.lock:
                self._metadata.want({topic})
                self._io(0.005)
                self._housekeeping()
        if last is not None and last.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise UnknownTopicError(f"unknown topic {topic!r}: the cluster at {self._metadata.bootstrap_text()} "
                                    "has none")
        raise TransportTimeoutError(f"no metadata for topic {topic!r} from {self._metadata.bootstrap_text()} within "
                                    f"metadata_timeout_ms={self.metadata_timeout_ms}"
                                    + (f" (last answer: error {last.error_code})" if last is not None else
                                       f" (last connection failure: {self._last_failure})" if self._last_failure
                                       else ""))

    @_locked
    def send(self, client: str, request: Request) -> None:
        """Put ``request`` on its way to the broker(s) it goes to (or on hold while its route is looked up)."""
        if self._closed:
            raise IdemcoreError("send on a closed TcpTransport")
        api_of(request)  # WireProtocolError at once for a request no client sends
        self._router.send(client, request)

    @_locked
    def poll(self, client: str) -> list[tuple[Request, Response]]:
        self._io(0)
        self._housekeeping()
        if self._fatal is not None:
            self._raise_fatal()
        errors = self._router.errors.pop(client, None)
        if errors:
            raise errors[0]
        return self._router.responses.pop(client, None) or []

    @_locked
    def lost(self, client: str) -> bool:
        """Whether a connection of ``client`` broke (not by :meth:`disconnect`) since the last call: what it had in
        flight there is lost and will never be answered."""
        if client in self._router.broken:
            self._router.broken.discard(client)
            return True
        return False

    @_locked
    def disconnect(self, client: str) -> None:
        """Close ``client``'s connections: what it has in flight is lost; its next request reconnects."""
        for key in [key for key in self._connections if key[0] == client]:
            connection = self._connections.pop(key)
            connection.close()
        self._router.forget(client)

    @_locked
    def tick(self) -> None:
        """Wait up to ~1 ms for the sockets, and handle what they bring."""
        self._io(0.001)
        self._housekeeping()

    # ------------------------------------------------------------ extras

    def create_topics(self, topics: dict[str, int], timeout_ms: int | None = None,
                      configs: dict[str, str] | None = None) -> dict[str, int]:
        """Create ``topics`` (name -> partition count) with CreateTopics at the controller; wait for the answer
        and the topics' metadata. Returns each topic's error code (TOPIC_ALREADY_EXISTS counts as done)."""
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        request = CreateTopicsRequest(tuple(NewTopic(name, count, tuple((configs or {}).items()))
                                            for name, count in topics.items()), request_id=1)
        response = self.call(request, timeout)
        assert isinstance(response, CreateTopicsResponse)
        codes = {r.name: r.error_code for r in response.results}
        done = [name for name, code in codes.items() if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)]
        for name in done:
            self._metadata.topics.pop(name, None)
            self.partition_count(name)
        return codes

    def call(self, request: Request, timeout_ms: int | None = None) -> Response:
        """Send ``request`` and wait for its answer (the transport's own client); TransportTimeoutError after
        ``timeout_ms`` (default ``request_timeout_ms``)."""
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        client = f"{INTERNAL}-call"
        self.send(client, request)
        deadline = self.now_ms() + timeout
        while self.now_ms() < deadline:
            for sent, response in self.poll(client):  # raises an authentication failure
                if sent is request:
                    return response
            with self.lock:
                self._io(0.005)
        self.disconnect(client)
        raise TransportTimeoutError(f"no answer to {type(request).__name__} within {timeout} ms")

    @_locked
    def close(self) -> None:
        """Close every connection; the transport cannot be used after."""
        for connection in list(self._connections.values()):
            connection.close()
        self._connections.clear()
        self._selector.close()
        self._closed = True

    def __enter__(self) -> TcpTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def versions(self) -> dict[int, dict[int, tuple[int, int]]]:
        """Per node with a ready connection: the broker's version range of each API (from ApiVersions)."""
        out: dict[int, dict[int, tuple[int, int]]] = {}
        for (_, node, _), connection in self._connections.items():
            if connection.state == READY:
                out[node] = connection.versions
        return out

    def negotiated(self) -> dict[str, int]:
        """The version each API is spoken at with the first ready connection (by API name)."""
        for connection in self._connections.values():
            if connection.state == READY:
                chosen = {api.name: pick_version(api, connection.versions.get(api.key)) for api in BY_KEY.values()}
                return {name: version for name, version in chosen.items() if version is not None}
        return {}

    def _authentication_failed(self, error: AuthenticationError) -> None:
        if self._fatal is None:
            log.error("%s", error)
            self._fatal = error

    def _raise_fatal(self) -> None:
        assert self._fatal is not None
        raise AuthenticationError(str(self._fatal))

    # ------------------------------------------------------------ I/O

    def _io(self, timeout: float) -> None:
        now = self.now_ms()
        for connection in list(self._connections.values()):
            connection.start(now)
        if not self._selector.get_map():
            if timeout > 0:
                time.sleep(timeout)
            return
        pending = self._pending
        for key, mask in self._selector.select(0 if pending else timeout):
            connection = key.data
            if isinstance(connection, Connection) and connection.state != CLOSED:
                connection.on_event(mask)
        if pending:  # TLS bytes already decrypted: no readiness event will say so (the set fills in on_event)
            self._pending = set()
            for connection in pending:
                if connection.state != CLOSED:
                    connection.on_event(selectors.EVENT_READ)
        now = self.now_ms()
        for connection in list(self._connections.values()):
            connection.check_time(now)

    def _housekeeping(self) -> None:
        """Route the requests that waited for metadata or a coordinator; give up those that waited too long; ask
        for metadata that is wanted."""
        now = self.now_ms()
        self._router.route_waiting(now)
        self._metadata.refresh_if_due(now)

    def _connection(self, client: str, node: int, role: str) -> Connection | None:
        key = (client, node, role)
        connection = self._connections.get(key)
        if connection is not None and connection.state != CLOSED:
            return connection
        address = self._metadata.address(node)
        if address is None:
            return None
        now = self.now_ms()
        connect_at = self._failed_at.get(node, -self.reconnect_backoff_ms) + self.reconnect_backoff_ms
        connection = self._connections[key] = Connection(self, key, address, max(now, connect_at))
        connection.start(now)
        return connection

    def _connection_failed(self, connection: Connection) -> None:
        if self._connections.get(connection.key) is connection:
            del self._connections[connection.key]
        self._failed_at[connection.key[1]] = self.now_ms()
        if connection.key[2] == COORDINATOR:
            self._router.coordinator_lost(connection.key[1])

    def _any_node(self, client: str) -> int:
        """A broker to ask what any broker answers: one this client is connected to, else a known one, else a
        bootstrap server (node ids -1, -2, ...) that has not just failed."""
        for (owner, node, role), connection in self._connections.items():
            if owner == client and role == DATA and connection.state == READY:
                return node
        nodes = self._metadata.nodes()
        now = self.now_ms()
        healthy = [n for n in nodes if now - self._failed_at.get(n, -self.reconnect_backoff_ms) >=
                   self.reconnect_backoff_ms]
        return (healthy or nodes)[0]


def client_security(security: ClientSecurity | Mapping[str, str] | None) -> ClientSecurity | None:
    """``security`` as a ClientSecurity (Kafka client properties are read by
    :meth:`ClientSecurity.from_properties`); TypeError naming anything else."""
    if security is None or isinstance(security, ClientSecurity):
        return security
    if isinstance(security, Mapping):
        return ClientSecurity.from_properties(security)
    raise TypeError(f"security must be a ClientSecurity, Kafka client properties (a mapping) or None, got "
                    f"{type(security).__name__}")

