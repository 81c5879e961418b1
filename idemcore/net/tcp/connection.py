"""One socket to one broker node (Kafka's ``KafkaChannel`` with its ``SslTransportLayer``,
``SaslClientAuthenticator`` and ``InFlightRequests``): the non-blocking connect, the TLS handshake, ApiVersions,
the SASL exchange, request and response framing, and the matching of each answer to its correlation id.

A connection knows nothing of topics, leaders or coordinators: its owner (:class:`ConnectionOwner`, the
:class:`~idemcore.net.tcp.transport.TcpTransport`) decides what goes on it, and is told when it fails.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import struct
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from idemcore.errors import IdemcoreError
from idemcore.net.client_security import ClientSecurity
from idemcore.net.sasl_client import SaslClientError, sasl_client
from idemcore.net.wire import sasl as sasl_wire
from idemcore.net.wire.client import (
    API_VERSIONS_KEY,
    API_VERSIONS_RANGE,
    ClientApi,
    WireProtocolError,
    api_versions_ranges,
    api_versions_request,
    pick_version,
    read_api_versions,
)
from idemcore.net.wire.frames import MalformedFrameError, read_response, request_frame
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
#: The client name of the transport's own requests (metadata, coordinator lookups).
INTERNAL = "\x00idemcore-tcp"
#: The connection roles: data (partition leaders, any broker) and coordinator.
DATA, COORDINATOR = "data", "coordinator"
#: At most this many bytes are read from one socket per readiness event, and this many reads per event.
_RECV_BYTES, _MAX_READS = 1 << 20, 64
#: The largest response frame accepted (Kafka's clients have no such limit; a bound against a garbled size).
MAX_RESPONSE_BYTES = 1 << 30
#: A SASL exchange takes two (PLAIN) or three (SCRAM) requests: more is a broker leading the client on.
_MAX_SASL_STEPS = 8
#: TLS errors that mean the connection was cut, not refused: lost like a plain connection.
_TLS_CUT = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


class AuthenticationError(IdemcoreError):
    """A broker refused this client's TLS handshake or SASL authentication, or its certificate failed the
    client's check (Kafka's ``SslAuthenticationException`` / ``SaslAuthenticationException``): fatal for the
    transport. One line naming the broker and the reason."""


class ConnectionOwner(Protocol):
    """What a :class:`Connection` reads from and tells the transport that owns it (the selector all its
    connections share, the settings, the correlation ids, and what happens on a failure)."""

    client_id: str
    security: ClientSecurity | None
    connect_timeout_ms: int
    request_timeout_ms: int
    _fatal: AuthenticationError | None
    _last_failure: str | None
    _pending: set[Connection]

    @property
    def _selector(self) -> selectors.BaseSelector: ...

    @property
    def _correlation_ids(self) -> Iterator[int]: ...

    def now_ms(self) -> int: ...

    def _authentication_failed(self, error: AuthenticationError) -> None: ...

    def _connection_failed(self, connection: Connection) -> None: ...



@dataclass(slots=True)
class Sent:
    """A request on a connection, waiting for its answer (``on_answer(version, body)``) or its loss."""

    correlation_id: int
    api_key: int
    version: int
    sent_ms: int
    on_answer: Callable[[int, Any], None]
    on_lost: Callable[[str], None]


@dataclass(slots=True)
class Call:
    """A request waiting for its connection to be ready (its version is picked then)."""

    api: ClientApi
    build: Callable[[int], Any]  # version -> kio body
    on_answer: Callable[[int, Any], None]
    on_lost: Callable[[str], None]
    #: The request cannot be written at the versions both sides speak (None: counted as lost).
    on_refused: Callable[[str], None] | None = None
    expects_answer: bool = True


CONNECTING, HANDSHAKING, NEGOTIATING, AUTHENTICATING, READY, CLOSED = (
    "connecting", "handshaking", "negotiating", "authenticating", "ready", "closed")


class Connection:
    """One socket to one broker node, for one client and role."""

    def __init__(self, transport: ConnectionOwner, key: tuple[str, int, str], address: tuple[str, int],
                 connect_at_ms: int) -> None:
        self.transport = transport
        self.key = key
        self.address = address
        self.sock: socket.socket | None = None
        self.state = CONNECTING
        self.connect_at_ms = connect_at_ms
        self.deadline_ms = 0
        self.out = bytearray()
        self.inbuf = bytearray()
        self.inflight: deque[Sent] = deque()
        self.queued: deque[Call] = deque()
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
        if self.sock is not None or self.state != CONNECTING or now < self.connect_at_ms \
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
        if self.state == CONNECTING:
            return selectors.EVENT_WRITE
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)

    def _where(self) -> str:
        return f"broker {self.address[0]}:{self.address[1]}"

    def refuse(self, why: str) -> None:
        """Close on an authentication failure: fatal for the transport (the package docstring)."""
        self.transport._authentication_failed(AuthenticationError(why))
        self.fail(why)

    def fail(self, why: str) -> None:
        """Close: everything in flight and queued is lost."""
        if self.state == CLOSED:
            return
        if self.state != CONNECTING or self.sock is not None:
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
        self.state = CLOSED
        if self.sock is not None:
            if self._events:
                self.transport._selector.unregister(self.sock)
                self._events = 0
            self.sock.close()
            self.sock = None

    # ------------------------------------------------------------ requests

    def call(self, call: Call) -> None:
        if self.state == READY:
            self._send_call(call)
        else:
            self.queued.append(call)

    def _send_call(self, call: Call) -> None:
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
            self.inflight.append(Sent(correlation_id, api_key, version, self.transport.now_ms(), on_answer,
                                       on_lost))
        self.flush()

    def flush(self) -> None:
        """Write what the socket takes now."""
        if self.sock is None or self.state in (CONNECTING, HANDSHAKING, CLOSED):
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
        if self.state == CONNECTING and mask & selectors.EVENT_WRITE:
            assert self.sock is not None
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code != 0:
                self.fail(f"connect to {self.address[0]}:{self.address[1]} failed: {errno.errorcode.get(code, code)}")
                return
            security = self.transport.security
            if security is not None and security.ssl_context is not None:
                self._start_tls(security.ssl_context)
                return
            self.state = NEGOTIATING
            self._ask_versions()
            return
        if self.state == HANDSHAKING:
            self._handshake()
            return
        if mask & selectors.EVENT_READ:
            self._read()
        if self.state not in (CLOSED, CONNECTING) and mask & selectors.EVENT_WRITE:
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
        self.state = HANDSHAKING
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
        self.state = NEGOTIATING
        self._ask_versions()

    def _tls_failed(self, error: ssl.SSLError) -> None:
        """A cut connection is lost as any other; a refusal before the connection is ready is fatal."""
        if isinstance(error, _TLS_CUT) or self.state == READY:
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
        self.state = READY
        log.debug("%r ready", self)
        while self.queued and self.state == READY:  # a failed send closes it: fail() loses the rest
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
        self.state = AUTHENTICATING
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
                if self.state != CLOSED:
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
                if self.state == CLOSED:
                    return
                # A broker refusing a client certificate after a TLS 1.3 handshake may close without its alert.
                self.fail("the broker closed the connection" if self.state == READY else
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
            while len(buf) - position >= 4 and self.state != CLOSED:
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
            if self.state != CLOSED:
                del buf[:position]

    def _answer(self, frame: bytes) -> None:
        (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
        if not self.inflight or self.inflight[0].correlation_id != correlation_id:
            expected = self.inflight[0].correlation_id if self.inflight else None
            self.fail(f"an answer to correlation id {correlation_id}, expected {expected}")
            return
        sent = self.inflight[0]
        try:
            if sent.api_key == API_VERSIONS_KEY:
                _, body = read_api_versions(sent.version, frame)
            else:
                _, body = read_response(sent.api_key, sent.version, frame)
        except MalformedFrameError as error:
            self.fail(f"unreadable answer: {error}")  # loses it with the rest
            return
        self.inflight.popleft()
        sent.on_answer(sent.version, body)

    def check_time(self, now: int) -> None:
        if self.state == READY:  # the common case first: it runs for every connection on every poll
            if self.key[0] == INTERNAL and self.inflight and \
                    now - self.inflight[0].sent_ms >= self.transport.request_timeout_ms:
                self.fail(f"no answer within request_timeout_ms={self.transport.request_timeout_ms}")
        elif self.state == CONNECTING and self.sock is not None and now >= self.deadline_ms:
            self.fail(f"no connection to {self.address[0]}:{self.address[1]} within "
                      f"connect_timeout_ms={self.transport.connect_timeout_ms}")
        elif self.state == HANDSHAKING and now >= self.deadline_ms:
            self.fail(f"{self._where()}: no TLS handshake within connect_timeout_ms="
                      f"{self.transport.connect_timeout_ms}")
        elif self.state in (NEGOTIATING, AUTHENTICATING) and self.inflight and \
                now - self.inflight[0].sent_ms >= self.transport.request_timeout_ms:
            what = "ApiVersions" if self.state == NEGOTIATING else "SASL"
            self.fail(f"no {what} answer within request_timeout_ms")


def _tls_reason(error: ssl.SSLError) -> str:
    """One line: OpenSSL's reason, and a certificate check's message."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"the broker's certificate failed verification: {error.verify_message}"
    return str(error.reason or error.strerror or error).replace("\n", " ")

