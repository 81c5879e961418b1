"""A transport over TCP to ``idemcore serve`` or any Kafka-compatible cluster, speaking Kafka's protocol
(:mod:`idemcore.net.wire.client` translates each request).

:class:`TcpTransport` does what Kafka's ``NetworkClient`` and ``Metadata`` do for a client:

- **connections**: one per client, broker node and role (the coordinator gets its own, as Kafka's consumer keeps
  one to ``Integer.MAX_VALUE - coordinator id``: a fetch a broker holds for ``max_wait`` does not hold up a
  commit). Non-blocking sockets under :mod:`selectors`, run in the caller's thread by :meth:`poll` and
  :meth:`tick` (which waits up to ~1 ms for a socket); no background thread.
- **versions**: each connection first asks ApiVersions and then speaks, per API, the highest version both sides
  know (``wire.client.pick_version``).
- **routing**: Produce, Fetch and ListOffsets to each partition's leader (a request over partitions of several
  leaders is split, and the answers joined back into one response); InitProducerId with a transactional id,
  AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the transaction coordinator; TxnOffsetCommit, OffsetCommit,
  OffsetFetch, JoinGroup, SyncGroup, Heartbeat and LeaveGroup to the group coordinator; Metadata, FindCoordinator
  and an idempotent InitProducerId to any broker; CreateTopics to the controller. Leaders come from Metadata,
  refreshed when an answer says a leader moved; coordinators from FindCoordinator (the clients' own, or the
  transport's), cached, forgotten on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE. A request whose route is not
  known yet waits (at most ``request_timeout_ms``) while the transport looks it up.
- **answers**: a connection's answers come in the order of its requests (Kafka guarantees it); each is matched to
  its correlation id. A broken connection loses the requests in flight on it, as :meth:`disconnect` does: the
  clients' request timeouts and retries handle that; the next request reconnects (after ``reconnect_backoff_ms``).

- **threads**: the public methods hold :attr:`TcpTransport.lock` (a re-entrant lock), so a second thread (a
  consumer's heartbeat thread) may use the transport with its own client name; the long waits
  (:meth:`~TcpTransport.partition_count`, :meth:`~TcpTransport.call`) take it for one step at a time.

- **security** (``security=``, a :class:`~idemcore.net.client_security.ClientSecurity` or Kafka's client
  properties): on SSL and SASL_SSL each connection, once its TCP connect completes, runs a non-blocking TLS
  handshake (driven on socket readiness; the broker's certificate checked against the trust store); on
  SASL_PLAINTEXT and SASL_SSL, after ApiVersions, it authenticates with SaslHandshake v1 and SaslAuthenticate
  (KIP-152) before anything else is sent on it. A connection lost during either is lost as any other (retried
  after ``reconnect_backoff_ms``); a refusal (a certificate that fails its check, a TLS alert from the broker, a
  SASL mechanism or credentials the broker refuses) is fatal, as Kafka's ``AuthenticationException``: every later
  :meth:`~TcpTransport.poll`, :meth:`~TcpTransport.partition_count` and :meth:`~TcpTransport.call` raises one
  :class:`AuthenticationError` naming the broker, and no connection is opened again.

A request the negotiated versions cannot carry (the broker lacks the API) is not lost silently: the next
:meth:`poll` of its client raises :class:`~idemcore.net.wire.client.WireProtocolError` naming it.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.net.client_security import ClientSecurity
from idemcore.net.membership import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    NewTopic,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.net.sasl_client import SaslClientError, sasl_client
from idemcore.net.transport import UnknownTopicError
from idemcore.net.wire import sasl as sasl_wire
from idemcore.net.wire.client import (
    API_VERSIONS_KEY,
    API_VERSIONS_RANGE,
    BY_KEY,
    METADATA,
    PRODUCE,
    ClientApi,
    TopicLeaders,
    WireProtocolError,
    api_of,
    api_versions_ranges,
    api_versions_request,
    cluster_metadata,
    encode_produce,
    pick_version,
)
from idemcore.net.wire.frames import MalformedFrameError, read_response, request_frame
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
#: The client name of the transport's own requests (metadata, coordinator lookups).
_INTERNAL = "\x00idemcore-tcp"
#: The connection roles: data (partition leaders, any broker) and coordinator.
_DATA, _COORDINATOR = "data", "coordinator"
#: Kafka's LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH (not in ErrorCode): a stale leader.
_LEADER_NOT_AVAILABLE, _FENCED_LEADER_EPOCH, _UNKNOWN_LEADER_EPOCH = 5, 74, 76
_STALE_LEADER = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           _LEADER_NOT_AVAILABLE, _FENCED_LEADER_EPOCH, _UNKNOWN_LEADER_EPOCH,
                           ErrorCode.KAFKA_STORAGE_ERROR})
_NO_COORDINATOR = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
#: The classic group protocol's requests: to the group coordinator, like the offset requests.
_MEMBERSHIP = (JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest)
#: At most this many bytes are read from one socket per readiness event, and this many reads per event.
_RECV_BYTES, _MAX_READS = 1 << 20, 64
#: The largest response frame accepted (Kafka's clients have no such limit; a bound against a garbled size).
MAX_RESPONSE_BYTES = 1 << 30
#: A SASL exchange takes two (PLAIN) or three (SCRAM) requests: more is a broker leading the client on.
_MAX_SASL_STEPS = 8
#: TLS errors that mean the connection was cut, not refused: lost like a plain connection.
_TLS_CUT = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


class TransportTimeoutError(IdemcoreError, TimeoutError):
    """A blocking call of the transport (metadata for a topic) got no answer in time."""


class AuthenticationError(IdemcoreError):
    """A broker refused this client's TLS handshake or SASL authentication, or its certificate failed the
    client's check (Kafka's ``SslAuthenticationException`` / ``SaslAuthenticationException``): fatal for the
    transport. One line naming the broker and the reason."""


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


@dataclass(slots=True)
class _Sent:
    """A request on a connection, waiting for its answer (``on_answer(version, body)``) or its loss."""

    correlation_id: int
    api_key: int
    version: int
    sent_ms: int
    on_answer: Callable[[int, Any], None]
    on_lost: Callable[[str], None]


@dataclass(slots=True)
class _Call:
    """A request waiting for its connection to be ready (its version is picked then)."""

    api: ClientApi
    build: Callable[[int], Any]  # version -> kio body
    on_answer: Callable[[int, Any], None]
    on_lost: Callable[[str], None]
    #: The request cannot be written at the versions both sides speak (None: counted as lost).
    on_refused: Callable[[str], None] | None = None
    expects_answer: bool = True


_CONNECTING, _HANDSHAKING, _NEGOTIATING, _AUTHENTICATING, _READY, _CLOSED = (
    "connecting", "handshaking", "negotiating", "authenticating", "ready", "closed")


class _Connection:
    """One socket to one broker node, for one client and role."""

    def __init__(self, transport: TcpTransport, key: tuple[str, int, str], address: tuple[str, int],
                 connect_at_ms: int) -> None:
        self.transport = transport
        self.key = key
        self.address = address
        self.sock: socket.socket | None = None
        self.state = _CONNECTING
        self.connect_at_ms = connect_at_ms
        self.deadline_ms = 0
        self.out = bytearray()
        self.inbuf = bytearray()
        self.inflight: deque[_Sent] = deque()
        self.queued: deque[_Call] = deque()
        self.versions: dict[int, tuple[int, int]] = {}
        self.api_versions_version = API_VERSIONS_RANGE[1]
        self._events = 0
        self.tls = False
        self._sasl_steps = 0

    def __repr__(self) -> str:
        client, node, role = self.key
        return f"<connection {client!r} -> node {node} ({role}) {self.address[0]}:{self.address[1]} {self.state}>"

    # ------------------------------------------------------------ life cycle

    def start(self, now: int) -> None:
        """Open the socket (non-blocking connect) once ``connect_at_ms`` has come."""
        if self.sock is not None or self.state != _CONNECTING or now < self.connect_at_ms \
                or self.transport._fatal is not None:  # after an authentication failure: no more connections
            return
        try:
            infos = socket.getaddrinfo(self.address[0], self.address[1], type=socket.SOCK_STREAM)
            family, kind, proto, _, sockaddr = infos[0]
            sock = socket.socket(family, kind, proto)
        except OSError as error:
            self.fail(f"cannot resolve {self.address[0]}:{self.address[1]}: {error}")
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.deadline_ms = now + self.transport.connect_timeout_ms
        code = sock.connect_ex(sockaddr)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            self.fail(f"connect to {self.address[0]}:{self.address[1]} failed: {errno.errorcode.get(code, code)}")
            return
        self._watch(selectors.EVENT_WRITE)

    def _watch(self, events: int) -> None:
        assert self.sock is not None
        selector = self.transport._selector
        if self._events == 0:
            selector.register(self.sock, events, self)
        elif events != self._events:
            selector.modify(self.sock, events, self)
        self._events = events

    def _want(self) -> int:
        if self.state == _CONNECTING:
            return selectors.EVENT_WRITE
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)

    def _where(self) -> str:
        return f"broker {self.address[0]}:{self.address[1]}"

    def refuse(self, why: str) -> None:
        """Close on an authentication failure: fatal for the transport (module docstring)."""
        self.transport._authentication_failed(AuthenticationError(why))
        self.fail(why)

    def fail(self, why: str) -> None:
        """Close: everything in flight and queued is lost."""
        if self.state == _CLOSED:
            return
        if self.state != _CONNECTING or self.sock is not None:
            log.info("%r closed: %s", self, why)
        self.close()
        self.transport._last_failure = why
        lost = [s.on_lost for s in self.inflight] + [c.on_lost for c in self.queued]
        self.inflight.clear()
        self.queued.clear()
        self.transport._connection_failed(self)
        self.transport._pending.discard(self)
        for on_lost in lost:
            on_lost(why)

    def close(self) -> None:
        self.state = _CLOSED
        if self.sock is not None:
            if self._events:
                self.transport._selector.unregister(self.sock)
                self._events = 0
            self.sock.close()
            self.sock = None

    # ------------------------------------------------------------ requests

    def call(self, call: _Call) -> None:
        if self.state == _READY:
            self._send_call(call)
        else:
            self.queued.append(call)

    def _send_call(self, call: _Call) -> None:
        version = pick_version(call.api, self.versions.get(call.api.key))
        refused = call.on_refused or call.on_lost
        if version is None:
            server = self.versions.get(call.api.key)
            refused(f"{call.api.name} cannot be sent to node {self.key[1]}: this client speaks "
                         f"v{call.api.min_version}-{call.api.max_version}, the broker "
                         + ("lacks the API" if server is None else f"v{server[0]}-{server[1]}"))
            return
        try:
            body = call.build(version)
        except (WireProtocolError, ValueError, TypeError) as error:
            refused(f"{call.api.name} v{version}: {error}")
            return
        self._write(call.api.key, version, body, call.on_answer if call.expects_answer else None, call.on_lost)

    def _write(self, api_key: int, version: int, body: Any, on_answer: Callable[[int, Any], None] | None,
               on_lost: Callable[[str], None]) -> None:
        correlation_id = next(self.transport._correlation_ids)
        self.out += request_frame(api_key, version, correlation_id, self.transport.client_id, body)
        if on_answer is not None:
            self.inflight.append(_Sent(correlation_id, api_key, version, self.transport.now_ms(), on_answer,
                                       on_lost))
        self.flush()

    def flush(self) -> None:
        """Write what the socket takes now."""
        if self.sock is None or self.state in (_CONNECTING, _HANDSHAKING, _CLOSED):
            return
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                break
            except ssl.SSLError as error:
                self._tls_failed(error)
                return
            except OSError as error:
                self.fail(f"send failed: {error}")
                return
            del self.out[:sent]
        self._watch(self._want())

    # ------------------------------------------------------------ events

    def on_event(self, mask: int) -> None:
        if self.state == _CONNECTING and mask & selectors.EVENT_WRITE:
            assert self.sock is not None
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code != 0:
                self.fail(f"connect to {self.address[0]}:{self.address[1]} failed: {errno.errorcode.get(code, code)}")
                return
            security = self.transport.security
            if security is not None and security.ssl_context is not None:
                self._start_tls(security.ssl_context)
                return
            self.state = _NEGOTIATING
            self._ask_versions()
            return
        if self.state == _HANDSHAKING:
            self._handshake()
            return
        if mask & selectors.EVENT_READ:
            self._read()
        if self.state not in (_CLOSED, _CONNECTING) and mask & selectors.EVENT_WRITE:
            self.flush()

    # ------------------------------------------------------------ TLS

    def _start_tls(self, context: ssl.SSLContext) -> None:
        """Wrap the connected socket (the handshake is driven by readiness events, :meth:`_handshake`)."""
        assert self.sock is not None
        plain = self.sock
        self.transport._selector.unregister(plain)  # the wrapped socket is a new object on the same descriptor
        self._events = 0
        try:
            self.sock = context.wrap_socket(plain, server_hostname=self.address[0], do_handshake_on_connect=False)
        except (OSError, ValueError) as error:
            self.sock = plain
            self.fail(f"{self._where()}: cannot start TLS: {error}")
            return
        self.tls = True
        self.state = _HANDSHAKING
        self._handshake()

    def _handshake(self) -> None:
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(selectors.EVENT_WRITE)
            return
        except ssl.SSLError as error:
            self._tls_failed(error)
            return
        except OSError as error:
            self.fail(f"{self._where()}: TLS handshake cut: {error}")
            return
        log.debug("%r TLS %s", self, self.sock.version())
        self.state = _NEGOTIATING
        self._ask_versions()

    def _tls_failed(self, error: ssl.SSLError) -> None:
        """A cut connection is lost as any other; a refusal before the connection is ready is fatal."""
        if isinstance(error, _TLS_CUT) or self.state == _READY:
            self.fail(f"{self._where()}: TLS connection cut: {_tls_reason(error)}")
        else:
            self.refuse(f"{self._where()}: TLS handshake failed: {_tls_reason(error)}")

    # ------------------------------------------------------------ ApiVersions, SASL

    def _ask_versions(self) -> None:
        version = self.api_versions_version
        self._write(API_VERSIONS_KEY, version, api_versions_request(version), self._on_versions, self.fail)

    def _on_versions(self, version: int, body: Any) -> None:
        code, ranges = api_versions_ranges(body)
        if code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
            # KIP-511: the broker answered at v0 with the versions it has; ask again at one it knows.
            high = ranges.get(API_VERSIONS_KEY, (0, 0))[1]
            self.api_versions_version = max(0, min(high, version - 1))
            self._ask_versions()
            return
        if code != ErrorCode.NONE:
            self.fail(f"ApiVersions answered error {code}")
            return
        self.versions = ranges
        security = self.transport.security
        if security is not None and security.uses_sasl:
            self._start_sasl(security)
            return
        self._ready()

    def _ready(self) -> None:
        self.state = _READY
        log.debug("%r ready", self)
        while self.queued and self.state == _READY:  # a failed send closes it: fail() loses the rest
            self._send_call(self.queued.popleft())

    def _start_sasl(self, security: ClientSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the exchange completes (nothing else is sent before)."""
        assert security.sasl_mechanism is not None and security.username is not None
        assert security.password is not None
        authenticate = self.versions.get(sasl_wire.SASL_AUTHENTICATE_KEY)
        if authenticate is None or self.versions.get(sasl_wire.SASL_HANDSHAKE_KEY, (0, 0))[1] < 1:
            self.refuse(f"{self._where()} does not speak SaslHandshake v1 and SaslAuthenticate (KIP-152): is its "
                        f"listener {security.protocol}?")
            return
        self.state = _AUTHENTICATING
        client = sasl_client(security.sasl_mechanism, security.username, security.password)
        exchange = sasl_wire.ClientExchange(client, authenticate_version=min(authenticate[1], 2))
        self._sasl_send(exchange, exchange.first())

    def _sasl_send(self, exchange: sasl_wire.ClientExchange, step: tuple[int, int, Any]) -> None:
        self._sasl_steps += 1
        if self._sasl_steps > _MAX_SASL_STEPS:
            self.refuse(f"{self._where()}: SASL took more than {_MAX_SASL_STEPS} steps")
            return
        api_key, version, body = step

        def answered(_version: int, answer: Any) -> None:
            try:
                following = exchange.on_response(api_key, answer)
            except (sasl_wire.SaslAuthenticationError, SaslClientError) as error:
                self.refuse(f"{self._where()}: SASL authentication of {exchange.client.username!r} with "
                            f"{exchange.client.mechanism} failed: {error}")
                return
            if following is None:
                self._ready()
            else:
                self._sasl_send(exchange, following)

        self._write(api_key, version, body, answered, self.fail)

    # ------------------------------------------------------------ reading

    def _read(self) -> None:
        if self.tls:
            self._read_tls()
            return
        assert self.sock is not None
        for _ in range(_MAX_READS):
            try:
                data = self.sock.recv(_RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as error:
                self.fail(f"receive failed: {error}")
                return
            if not data:
                self._frames()  # what came before the close is an answer first
                if self.state != _CLOSED:
                    self.fail("the broker closed the connection")
                return
            self.inbuf += data
            if len(data) < _RECV_BYTES:
                break
        self._frames()

    def _read_tls(self) -> None:
        """Read records until the socket has no more; bytes decrypted but not yet taken (``pending``) are read on
        the next :meth:`TcpTransport._io` pass, since the selector cannot see them."""
        sock = self.sock
        assert isinstance(sock, ssl.SSLSocket)
        for _ in range(_MAX_READS):
            try:
                data = sock.recv(_RECV_BYTES)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                break
            except ssl.SSLError as error:
                self._tls_failed(error)
                return
            except OSError as error:
                self.fail(f"receive failed: {error}")
                return
            if not data:
                self._frames()  # what came before the close is an answer (a refused login's, often) first
                if self.state == _CLOSED:
                    return
                # A broker refusing a client certificate after a TLS 1.3 handshake may close without its alert.
                self.fail("the broker closed the connection" if self.state == _READY else
                          f"{self._where()} closed the TLS connection before answering (if its listener requires a "
                          "client certificate: did it refuse this one?)")
                return
            self.inbuf += data
        if sock.pending():
            self.transport._pending.add(self)
        self._frames()

    def _frames(self) -> None:
        buf = self.inbuf
        position = 0
        try:
            while len(buf) - position >= 4 and self.state != _CLOSED:
                (size,) = _SIZE.unpack_from(buf, position)
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    self.fail(f"a response frame of {size} bytes")
                    return
                if len(buf) - position - 4 < size:
                    break
                frame = bytes(buf[position + 4:position + 4 + size])
                position += 4 + size
                self._answer(frame)
        finally:
            if self.state != _CLOSED:
                del buf[:position]

    def _answer(self, frame: bytes) -> None:
        (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
        if not self.inflight or self.inflight[0].correlation_id != correlation_id:
            expected = self.inflight[0].correlation_id if self.inflight else None
            self.fail(f"an answer to correlation id {correlation_id}, expected {expected}")
            return
        sent = self.inflight[0]
        try:
            _, body = read_response(sent.api_key, sent.version, frame)
        except MalformedFrameError as error:
            if sent.api_key != API_VERSIONS_KEY or sent.version == 0:
                self.fail(f"unreadable answer: {error}")  # loses it with the rest
                return
            try:  # KIP-511: an UNSUPPORTED_VERSION answer comes at v0
                _, body = read_response(API_VERSIONS_KEY, 0, frame)
            except MalformedFrameError:
                self.fail(f"unreadable ApiVersions answer: {error}")
                return
        self.inflight.popleft()
        sent.on_answer(sent.version, body)

    def check_time(self, now: int) -> None:
        if self.state == _READY:  # the common case first: it runs for every connection on every poll
            if self.key[0] == _INTERNAL and self.inflight and \
                    now - self.inflight[0].sent_ms >= self.transport.request_timeout_ms:
                self.fail(f"no answer within request_timeout_ms={self.transport.request_timeout_ms}")
        elif self.state == _CONNECTING and self.sock is not None and now >= self.deadline_ms:
            self.fail(f"no connection to {self.address[0]}:{self.address[1]} within "
                      f"connect_timeout_ms={self.transport.connect_timeout_ms}")
        elif self.state == _HANDSHAKING and now >= self.deadline_ms:
            self.fail(f"{self._where()}: no TLS handshake within connect_timeout_ms="
                      f"{self.transport.connect_timeout_ms}")
        elif self.state in (_NEGOTIATING, _AUTHENTICATING) and self.inflight and \
                now - self.inflight[0].sent_ms >= self.transport.request_timeout_ms:
            what = "ApiVersions" if self.state == _NEGOTIATING else "SASL"
            self.fail(f"no {what} answer within request_timeout_ms")


def _tls_reason(error: ssl.SSLError) -> str:
    """One line: OpenSSL's reason, and a certificate check's message."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"the broker's certificate failed verification: {error.verify_message}"
    return str(error.reason or error.strerror or error).replace("\n", " ")


@dataclass(slots=True)
class _Exchange:
    """One client request on its way: the parts it was split into (one per broker), and their answers."""

    client: str
    request: Request
    parts: int
    answers: list[Response] = field(default_factory=list)
    dead: bool = False


@dataclass(slots=True)
class _Waiting:
    client: str
    request: Request
    since_ms: int


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``method`` holding the transport's lock."""
    @functools.wraps(method)
    def run(self: TcpTransport, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)
    return run


class TcpTransport:
    """A :class:`~idemcore.net.transport.Transport` over Kafka's protocol (module docstring).

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
            if type(value) is not int or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
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
        #: The first authentication failure: fatal (see the module docstring).
        self._fatal: AuthenticationError | None = None
        #: Why the last connection closed (said when a wait for metadata times out).
        self._last_failure: str | None = None
        #: TLS connections holding decrypted bytes the selector cannot see.
        self._pending: set[_Connection] = set()
        self._selector = selectors.DefaultSelector()
        self._correlation_ids = itertools.count(1)
        self._connections: dict[tuple[str, int, str], _Connection] = {}
        #: When each node last failed a connection: the next one waits ``reconnect_backoff_ms``.
        self._failed_at: dict[int, int] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, TopicLeaders] = {}
        self._controller = -1
        self._metadata_ms = 0
        self._metadata_asked: set[str] = set()  # topics asked for by the Metadata request in flight
        self._metadata_inflight = False
        self._metadata_next_ms = 0
        self._metadata_wanted: set[str] = set()
        self._coordinators: dict[tuple[int, str], int] = {}
        self._coordinator_lookups: dict[tuple[int, str], int] = {}  # key -> when it may be asked (again)
        self._coordinator_inflight: set[tuple[int, str]] = set()
        #: Producer id -> transactional id (from InitProducerId answers): Produce names a transaction's id.
        self._transactional_ids: dict[int, str] = {}
        self._responses: dict[str, list[tuple[Request, Response]]] = defaultdict(list)
        self._errors: dict[str, list[Exception]] = defaultdict(list)
        #: Clients a connection of which broke (see :meth:`lost`).
        self._broken: set[str] = set()
        self._exchanges: dict[str, set[int]] = defaultdict(set)  # client -> ids of its exchanges in flight
        self._live: dict[int, _Exchange] = {}
        self._waiting: deque[_Waiting] = deque()
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
                known = self._topics.get(topic)
            if known is not None and known.error_code == ErrorCode.NONE and known.leaders:
                return len(known.leaders)
            if known is not None and known is not last:
                last = known
                if known.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not self.auto_create_topics:
                    raise UnknownTopicError(f"unknown topic {topic!r}: the cluster at {self._bootstrap_text()} "
                                            "has none (UNKNOWN_TOPIC_OR_PARTITION)")
            if self._fatal is not None:
                self._raise_fatal()
            if self.now_ms() >= deadline:
                break
            with self.lock:
                self._want_metadata({topic})
                self._io(0.005)
                self._housekeeping()
        if last is not None and last.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise UnknownTopicError(f"unknown topic {topic!r}: the cluster at {self._bootstrap_text()} has none")
        raise TransportTimeoutError(f"no metadata for topic {topic!r} from {self._bootstrap_text()} within "
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
        if not self._dispatch(client, request):
            self._waiting.append(_Waiting(client, request, self.now_ms()))

    @_locked
    def poll(self, client: str) -> list[tuple[Request, Response]]:
        self._io(0)
        self._housekeeping()
        if self._fatal is not None:
            self._raise_fatal()
        errors = self._errors.pop(client, None)
        if errors:
            raise errors[0]
        return self._responses.pop(client, None) or []

    @_locked
    def lost(self, client: str) -> bool:
        """Whether a connection of ``client`` broke (not by :meth:`disconnect`) since the last call: what it had in
        flight there is lost and will never be answered."""
        if client in self._broken:
            self._broken.discard(client)
            return True
        return False

    @_locked
    def disconnect(self, client: str) -> None:
        """Close ``client``'s connections: what it has in flight is lost; its next request reconnects."""
        self._broken.discard(client)
        for key in [key for key in self._connections if key[0] == client]:
            connection = self._connections.pop(key)
            connection.close()
        for exchange_id in self._exchanges.pop(client, set()):
            exchange = self._live.pop(exchange_id, None)
            if exchange is not None:
                exchange.dead = True
        self._waiting = deque(w for w in self._waiting if w.client != client)
        self._responses.pop(client, None)
        self._errors.pop(client, None)

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
            self._topics.pop(name, None)
            self.partition_count(name)
        return codes

    def call(self, request: Request, timeout_ms: int | None = None) -> Response:
        """Send ``request`` and wait for its answer (the transport's own client); TransportTimeoutError after
        ``timeout_ms`` (default ``request_timeout_ms``)."""
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        client = f"{_INTERNAL}-call"
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
            if connection.state == _READY:
                out[node] = connection.versions
        return out

    def negotiated(self) -> dict[str, int]:
        """The version each API is spoken at with the first ready connection (by API name)."""
        for connection in self._connections.values():
            if connection.state == _READY:
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
            if isinstance(connection, _Connection) and connection.state != _CLOSED:
                connection.on_event(mask)
        if pending:  # TLS bytes already decrypted: no readiness event will say so (the set fills in on_event)
            self._pending = set()
            for connection in pending:
                if connection.state != _CLOSED:
                    connection.on_event(selectors.EVENT_READ)
        now = self.now_ms()
        for connection in list(self._connections.values()):
            connection.check_time(now)

    def _housekeeping(self) -> None:
        """Route the requests that waited for metadata or a coordinator; give up those that waited too long; ask
        for metadata that is wanted."""
        now = self.now_ms()
        for _ in range(len(self._waiting)):
            waiting = self._waiting.popleft()
            if self._dispatch(waiting.client, waiting.request):
                continue
            if now - waiting.since_ms >= self.request_timeout_ms:
                log.warning("%s: gave up %s: no route within request_timeout_ms=%d", waiting.client,
                            type(waiting.request).__name__, self.request_timeout_ms)
                continue
            self._waiting.append(waiting)
        if self._metadata_wanted or (self._topics and now - self._metadata_ms >= self.metadata_max_age_ms):
            self._ask_metadata(now)

    def _connection(self, client: str, node: int, role: str) -> _Connection | None:
        key = (client, node, role)
        connection = self._connections.get(key)
        if connection is not None and connection.state != _CLOSED:
            return connection
        address = self._address(node)
        if address is None:
            return None
        now = self.now_ms()
        connect_at = self._failed_at.get(node, -self.reconnect_backoff_ms) + self.reconnect_backoff_ms
        connection = self._connections[key] = _Connection(self, key, address, max(now, connect_at))
        connection.start(now)
        return connection

    def _connection_failed(self, connection: _Connection) -> None:
        if self._connections.get(connection.key) is connection:
            del self._connections[connection.key]
        self._failed_at[connection.key[1]] = self.now_ms()
        if connection.key[2] == _COORDINATOR:  # the coordinator may have moved: look it up again
            node = connection.key[1]
            for key in [k for k, v in self._coordinators.items() if v == node]:
                del self._coordinators[key]

    def _address(self, node: int) -> tuple[str, int] | None:
        if node < 0:
            index = -node - 1
            return self.bootstrap[index] if index < len(self.bootstrap) else None
        return self._brokers.get(node)

    def _any_node(self, client: str) -> int:
        """A broker to ask what any broker answers: one this client is connected to, else a known one, else a
        bootstrap server (node ids -1, -2, ...) that has not just failed."""
        for (owner, node, role), connection in self._connections.items():
            if owner == client and role == _DATA and connection.state == _READY:
                return node
        nodes = sorted(self._brokers) or [-(k + 1) for k in range(len(self.bootstrap))]
        now = self.now_ms()
        healthy = [n for n in nodes if now - self._failed_at.get(n, -self.reconnect_backoff_ms) >=
                   self.reconnect_backoff_ms]
        return (healthy or nodes)[0]

    def _bootstrap_text(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.bootstrap)

    # ------------------------------------------------------------ metadata

    def _want_metadata(self, topics: set[str]) -> None:
        # A topic the request in flight asks for is not asked again (its answer is on the way).
        self._metadata_wanted |= topics - self._metadata_asked if self._metadata_inflight else topics
        self._ask_metadata(self.now_ms())

    def _ask_metadata(self, now: int) -> None:
        if self._metadata_inflight or now < self._metadata_next_ms:
            return
        topics = sorted(self._metadata_wanted | set(self._topics))
        self._metadata_wanted.clear()
        self._metadata_inflight = True
        self._metadata_asked = set(topics)
        self._metadata_next_ms = now + self.retry_backoff_ms
        request = MetadataRequest(tuple(topics), self.auto_create_topics)
        node = self._any_node(_INTERNAL)
        connection = self._connection(_INTERNAL, node, _DATA)
        if connection is None:
            self._metadata_inflight = False
            self._metadata_wanted |= self._metadata_asked
            return

        def answered(version: int, body: Any) -> None:
            self._metadata_inflight = False
            self._metadata_asked = set()
            self._metadata_ms = self.now_ms()
            fresh = cluster_metadata(body)
            if fresh.brokers:
                self._brokers = dict(fresh.brokers)
            if fresh.controller_id >= 0:
                self._controller = fresh.controller_id
            # A topic still without leaders is asked again by who needs it; a partition answered with an older
            # leader epoch than known keeps the newer leader (KIP-320).
            self._topics.update({name: leaders.newer_of(self._topics.get(name))
                                 for name, leaders in fresh.topics.items()})

        def lost(why: str) -> None:
            self._metadata_inflight = False
            self._metadata_asked = set()
            self._metadata_wanted |= set(topics)

        connection.call(_Call(METADATA, lambda version: METADATA.encode(request, version), answered, lost))

    def _leader(self, topic: str, partition: int) -> int | None:
        known = self._topics.get(topic)
        if known is None or not 0 <= partition < len(known.leaders) or known.leaders[partition] < 0 \
                or known.leaders[partition] not in self._brokers:
            self._want_metadata({topic})
            return None
        return known.leaders[partition]

    # ------------------------------------------------------------ coordinators

    def _coordinator(self, key_type: int, key: str) -> int | None:
        node = self._coordinators.get((key_type, key))
        if node is not None and self._address(node) is not None:
            return node
        self._lookup_coordinator(key_type, key)
        return None

    def _lookup_coordinator(self, key_type: int, key: str) -> None:
        wanted = (key_type, key)
        now = self.now_ms()
        if wanted in self._coordinator_inflight or now < self._coordinator_lookups.get(wanted, 0):
            return
        node = self._any_node(_INTERNAL)
        connection = self._connection(_INTERNAL, node, _DATA)
        if connection is None:
            return
        self._coordinator_inflight.add(wanted)
        self._coordinator_lookups[wanted] = now + self.retry_backoff_ms
        request = FindCoordinatorRequest(key, key_type)
        api = api_of(request)

        def answered(version: int, body: Any) -> None:
            self._coordinator_inflight.discard(wanted)
            response = api.decode(request, version, body)
            assert isinstance(response, FindCoordinatorResponse)
            self._learn_coordinator(request, response)

        def lost(why: str) -> None:
            self._coordinator_inflight.discard(wanted)

        connection.call(_Call(api, lambda version: api.encode(request, version), answered, lost))

    def _learn_coordinator(self, request: FindCoordinatorRequest, response: FindCoordinatorResponse) -> None:
        if response.error_code == ErrorCode.NONE and response.node_id >= 0:
            self._coordinators[(request.key_type, request.key)] = response.node_id
            self._brokers.setdefault(response.node_id, (response.host, response.port))

    def _forget_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)

    # ------------------------------------------------------------ routing

    def _routes(self, request: Request) -> list[tuple[int | None, str, Request]] | None:
        """``(node, role, part)`` for each broker ``request`` goes to (node None: any broker); None while a route
        is not known."""
        if isinstance(request, ProduceRequest):
            batches: dict[int, list[Any]] = defaultdict(list)
            for batch in request.batches:
                leader = self._leader(batch.topic, batch.partition)
                if leader is None:
                    return None
                batches[leader].append(batch)
            if len(batches) <= 1:
                return [(node, _DATA, request) for node in batches] or [(None, _DATA, request)]
            return [(node, _DATA, ProduceRequest(tuple(part), request.acks, request.timeout_ms, request.request_id))
                    for node, part in batches.items()]
        if isinstance(request, FetchRequest):
            wanted: dict[int, list[Any]] = defaultdict(list)
            for p in request.partitions:
                leader = self._leader(p.topic, p.partition)
                if leader is None:
                    return None
                wanted[leader].append(p)
            if len(wanted) <= 1:
                return [(node, _DATA, request) for node in wanted] or [(None, _DATA, request)]
            return [(node, _DATA, FetchRequest(tuple(part), request.isolation_level, request.max_bytes,
                                               request.min_bytes, request.max_wait_ms, request.request_id))
                    for node, part in wanted.items()]
        if isinstance(request, ListOffsetsRequest):
            asked: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
            for entry in request.partitions:
                leader = self._leader(entry[0], entry[1])
                if leader is None:
                    return None
                asked[leader].append(entry)
            if len(asked) <= 1:
                return [(node, _DATA, request) for node in asked] or [(None, _DATA, request)]
            return [(node, _DATA, ListOffsetsRequest(tuple(part), request.isolation_level, request.request_id))
                    for node, part in asked.items()]
        if isinstance(request, InitProducerIdRequest) and request.transactional_id is None:
            return [(None, _DATA, request)]
        if isinstance(request, (InitProducerIdRequest, AddPartitionsToTxnRequest, AddOffsetsToTxnRequest,
                                EndTxnRequest)):
            assert request.transactional_id is not None
            node = self._coordinator(TRANSACTION_KEY, request.transactional_id)
            return None if node is None else [(node, _COORDINATOR, request)]
        if isinstance(request, (TxnOffsetCommitRequest, OffsetCommitRequest, OffsetFetchRequest, *_MEMBERSHIP)):
            node = self._coordinator(GROUP_KEY, request.group_id)
            return None if node is None else [(node, _COORDINATOR, request)]
        if isinstance(request, CreateTopicsRequest) and self._controller in self._brokers:
            return [(self._controller, _DATA, request)]
        return [(None, _DATA, request)]  # Metadata, FindCoordinator, CreateTopics before any metadata: any broker

    def _dispatch(self, client: str, request: Request) -> bool:
        """Send ``request``'s parts; False when its route is not known yet (nothing was sent)."""
        routes = self._routes(request)
        if routes is None:
            return False
        connections = [self._connection(client, self._any_node(client) if node is None else node, role)
                       for node, role, _ in routes]
        if any(c is None for c in connections):
            self._want_metadata(set())
            return False
        exchange = _Exchange(client, request, len(routes))
        exchange_id = id(exchange)
        self._live[exchange_id] = exchange
        self._exchanges[client].add(exchange_id)
        expects_answer = not (isinstance(request, ProduceRequest) and request.acks == 0)
        for connection, (_, _, part) in zip(connections, routes, strict=True):
            assert connection is not None
            api = api_of(part)
            connection.call(_Call(api, self._builder(api, part), self._on_part(exchange, api, part),
                                  self._on_lost(exchange), self._on_refused(exchange, api), expects_answer))
        if not expects_answer:
            self._finish(exchange)
        return True

    def _builder(self, api: ClientApi, part: Request) -> Callable[[int], Any]:
        if api is PRODUCE:
            assert isinstance(part, ProduceRequest)
            transactional = next((b for b in part.batches if b.is_transactional), None)
            txn_id = None if transactional is None else self._transactional_ids.get(transactional.producer_id)
            return lambda version: encode_produce(part, version, txn_id)
        return lambda version: api.encode(part, version)

    def _on_part(self, exchange: _Exchange, api: ClientApi, part: Request) -> Callable[[int, Any], None]:
        def answered(version: int, body: Any) -> None:
            try:
                response = api.decode(part, version, body)
            except (ValueError, TypeError, AttributeError, KeyError) as error:
                self._fail_exchange(exchange, WireProtocolError(f"{api.name} v{version}: unreadable answer: "
                                                                f"{type(error).__name__}: {error}"))
                return
            self._observe(part, response)
            if exchange.dead:
                return
            exchange.answers.append(response)
            if len(exchange.answers) == exchange.parts:
                self._finish(exchange)
        return answered

    def _on_refused(self, exchange: _Exchange, api: ClientApi) -> Callable[[str], None]:
        def refused(why: str) -> None:
            self._fail_exchange(exchange, WireProtocolError(why))
        return refused

    def _on_lost(self, exchange: _Exchange) -> Callable[[str], None]:
        def lost(why: str) -> None:
            if exchange.dead:
                return
            exchange.dead = True
            self._drop(exchange)
            self._broken.add(exchange.client)
            log.debug("%s: %s lost: %s", exchange.client, type(exchange.request).__name__, why)
        return lost

    def _fail_exchange(self, exchange: _Exchange, error: Exception) -> None:
        if exchange.dead:
            return
        exchange.dead = True
        self._drop(exchange)
        self._errors[exchange.client].append(error)

    def _drop(self, exchange: _Exchange) -> None:
        exchange_id = id(exchange)
        self._live.pop(exchange_id, None)
        owned = self._exchanges.get(exchange.client)
        if owned is not None:
            owned.discard(exchange_id)

    def _finish(self, exchange: _Exchange) -> None:
        exchange.dead = True
        self._drop(exchange)
        if not exchange.answers:
            return  # acks=0: nobody answers
        response = exchange.answers[0] if exchange.parts == 1 else _joined(exchange.request, exchange.answers)
        self._responses[exchange.client].append((exchange.request, response))

    # ------------------------------------------------------------ what answers teach

    def _observe(self, request: Request, response: Response) -> None:
        """Learn from an answer: coordinators found or moved, leaders moved, transactional ids."""
        if isinstance(response, FindCoordinatorResponse) and isinstance(request, FindCoordinatorRequest):
            self._learn_coordinator(request, response)
        elif isinstance(response, InitProducerIdResponse) and isinstance(request, InitProducerIdRequest):
            if response.error_code == ErrorCode.NONE and request.transactional_id is not None:
                self._transactional_ids[response.producer_id] = request.transactional_id
            elif response.error_code in _NO_COORDINATOR and request.transactional_id is not None:
                self._forget_coordinator(TRANSACTION_KEY, request.transactional_id)
        elif isinstance(response, (AddOffsetsToTxnResponse, EndTxnResponse)) and \
                isinstance(request, (AddOffsetsToTxnRequest, EndTxnRequest)):
            if response.error_code in _NO_COORDINATOR:
                self._forget_coordinator(TRANSACTION_KEY, request.transactional_id)
        elif isinstance(response, AddPartitionsToTxnResponse) and isinstance(request, AddPartitionsToTxnRequest):
            if any(r.error_code in _NO_COORDINATOR for r in response.results):
                self._forget_coordinator(TRANSACTION_KEY, request.transactional_id)
        elif isinstance(response, (TxnOffsetCommitResponse, OffsetCommitResponse)) and \
                isinstance(request, (TxnOffsetCommitRequest, OffsetCommitRequest)):
            if any(r.error_code in _NO_COORDINATOR for r in response.results):
                self._forget_coordinator(GROUP_KEY, request.group_id)
        elif isinstance(response, OffsetFetchResponse) and isinstance(request, OffsetFetchRequest):
            if response.error_code in _NO_COORDINATOR or any(o.error_code in _NO_COORDINATOR
                                                             for o in response.offsets):
                self._forget_coordinator(GROUP_KEY, request.group_id)
        elif isinstance(request, _MEMBERSHIP):
            if response.error_code in _NO_COORDINATOR:
                self._forget_coordinator(GROUP_KEY, request.group_id)
        elif isinstance(response, ProduceResponse):
            self._stale({r.topic for r in response.responses if r.error_code in _STALE_LEADER})
        elif isinstance(response, FetchResponse):
            self._stale({p.topic for p in response.partitions if p.error_code in _STALE_LEADER})
        elif isinstance(response, ListOffsetsResponse):
            self._stale({r.topic for r in response.results if r.error_code in _STALE_LEADER})

    def _stale(self, topics: set[str]) -> None:
        if topics:
            self._want_metadata(topics)


def client_security(security: ClientSecurity | Mapping[str, str] | None) -> ClientSecurity | None:
    """``security`` as a ClientSecurity (Kafka client properties are read by
    :meth:`ClientSecurity.from_properties`); TypeError naming anything else."""
    if security is None or isinstance(security, ClientSecurity):
        return security
    if isinstance(security, Mapping):
        return ClientSecurity.from_properties(security)
    raise TypeError(f"security must be a ClientSecurity, Kafka client properties (a mapping) or None, got "
                    f"{type(security).__name__}")


def _joined(request: Request, answers: list[Response]) -> Response:
    """One response from the answers of a request's parts (one part per leader)."""
    if isinstance(request, ProduceRequest):
        by_partition = {(r.topic, r.partition): r for answer in answers if isinstance(answer, ProduceResponse)
                        for r in answer.responses}
        return ProduceResponse(request.request_id, tuple(
            by_partition.get((b.topic, b.partition)) or PartitionResponse(
                b.topic, b.partition, ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message=f"no answer for {b.topic}-{b.partition}") for b in request.batches))
    if isinstance(request, FetchRequest):
        fetched = [a for a in answers if isinstance(a, FetchResponse)]
        code = next((a.error_code for a in fetched if a.error_code != ErrorCode.NONE), ErrorCode.NONE)
        return FetchResponse(tuple(p for a in fetched for p in a.partitions), code, request.request_id)
    if isinstance(request, ListOffsetsRequest):
        return ListOffsetsResponse(tuple(r for a in answers if isinstance(a, ListOffsetsResponse) for r in a.results),
                                   request.request_id)
    return answers[0]
