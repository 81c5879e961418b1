"""A Kafka-protocol TCP server over one :class:`~idemcore.broker.Broker`: ``idemcore serve``, and a
:class:`Server` object for tests and programs (``with Server(broker) as server: server.bootstrap``).

The server is only a transport: every request is read with kio (:mod:`idemcore.net.wire`), translated to one
:mod:`idemcore.net.messages` request, answered by ``Broker.handle`` and translated back. One asyncio loop runs
it all, so the broker sees one request at a time; each connection's requests are answered in the order they
came (Kafka mutes a connection while its request is handled). A frame that cannot be read, an API or version
not served, or a size beyond ``max_request_bytes`` (Kafka's ``socket.request.max.bytes``) closes that
connection only; every other connection keeps being served. ApiVersions with a version this server lacks is
answered at v0 with UNSUPPORTED_VERSION and the ranges it serves (KIP-511).

The broker runs on the server's loop while it serves (``Broker.start_background``): its answers given later
(:class:`~idemcore.net.messages.Pending`: a fetch waiting for data, an acks=all produce waiting for its fsync, a
JoinGroup waiting for its group) are awaited without the server knowing what they wait for, and its flusher thread
keeps the disk off the loop. ``run_housekeeping`` runs every ``housekeeping_ms`` (transaction timeouts, markers,
retention).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from idemcore.broker.broker import Broker
from idemcore.broker.security.listeners import Endpoint, ListenerSecurity, distinguished_name
from idemcore.broker.security.request_context import RequestRefused
from idemcore.broker.security.sasl_answers import answer as sasl_answer
from idemcore.broker.security.sasl_server import SaslAuthenticator
from idemcore.broker.security.session import ANONYMOUS, KafkaPrincipal, Session
from idemcore.checks import int_setting
from idemcore.errors import IdemcoreError
from idemcore.net.messages import Pending
from idemcore.net.wire import sasl as sasl_wire
from idemcore.net.wire.api import WireContext, handle_each
from idemcore.net.wire.apis import (
    API_VERSIONS_KEY,
    API_VERSIONS_RANGE,
    APIS,
    SASL_API_RANGES,
    api_versions_response,
)
from idemcore.net.wire.frames import (
    SIZE,
    MalformedFrameError,
    UnsupportedApiError,
    peek_request,
    read_request,
    response_frame,
)
from idemcore.net.wire.membership import with_client
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)


def _one_line_accept_failures(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's accept loop out of descriptors (EMFILE: a connection flood) logs a traceback each second while it
    pauses accepting: one warning line instead, as it is no failure of the broker (Kafka's Acceptor logs it too);
    every other report goes to asyncio's default handler."""
    error = context.get("exception")
    if context.get("message") == "socket.accept() out of system resource" and isinstance(error, OSError):
        log.warning("cannot accept a connection: %s (accepting again in a second)", error.strerror or error)
        return
    loop.default_exception_handler(context)

#: Kafka's ``socket.request.max.bytes`` default: the largest request frame read.
DEFAULT_MAX_REQUEST_BYTES = 104_857_600
DEFAULT_HOUSEKEEPING_MS = 1_000
#: How long a SASL client may take to authenticate (idemcore's bound: Kafka relies on ``connections.max.idle.ms``,
#: 10 minutes, which still lets a flood of silent connections hold the broker's descriptors).
DEFAULT_AUTHENTICATION_TIMEOUT_MS = 30_000
#: Kafka's ``connection.failed.authentication.delay.ms`` default.
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100


class Server:
    """Serve ``broker`` over Kafka's protocol on ``host``:``port`` (0: a free port, see :attr:`address`).
    ``advertised_host`` / ``advertised_port``: where Metadata and FindCoordinator send clients (default: the address
    listened on; another when clients reach the server through a proxy, as Kafka's ``advertised.listeners``).
    ``authentication_timeout_ms``: how long a client of a SASL listener has to authenticate before it is closed;
    ``failed_authentication_delay_ms``: how long a refused authentication waits before its answer and close. The
    server does not close the broker: its owner does, after :meth:`stop`."""

    def __init__(self, broker: Broker, host: str = "127.0.0.1", port: int = 0, *, advertised_host: str | None = None,
                 advertised_port: int | None = None,
                 cluster_id: str = "idemcore", max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 housekeeping_ms: int = DEFAULT_HOUSEKEEPING_MS,
                 listeners: Sequence[ListenerSecurity] | None = None,
                 advertised_listeners: Mapping[str, Endpoint] | None = None,
                 inter_broker_listener: str | None = None,
                 authentication_timeout_ms: int = DEFAULT_AUTHENTICATION_TIMEOUT_MS,
                 failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS) -> None:
        int_setting("port", port, 0, 65535)
        int_setting("max_request_bytes", max_request_bytes, 64)
        int_setting("housekeeping_ms", housekeeping_ms, 1)
        int_setting("authentication_timeout_ms", authentication_timeout_ms, 1)
        int_setting("failed_authentication_delay_ms", failed_authentication_delay_ms, 0)
        self.broker = broker
        self.host, self.port = host, port
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.cluster_id = cluster_id
        self.max_request_bytes = max_request_bytes
        self.housekeeping_ms = housekeeping_ms
        #: How long a client of a SASL listener has, from its connection, to complete SASL authentication.
        self.authentication_timeout_ms = authentication_timeout_ms
        #: How long a refused authentication waits before it is answered and closed (Kafka's
        #: ``connection.failed.authentication.delay.ms``): each guess of a password costs a guesser that long.
        self.failed_authentication_delay_ms = failed_authentication_delay_ms
        #: Every listener (``listeners=None``: one PLAINTEXT listener on ``host``:``port``); the first is the one
        #: :attr:`address` names.
        self.listeners: tuple[ListenerSecurity, ...] = tuple(listeners) if listeners else (
            ListenerSecurity(Endpoint(host, port), "PLAINTEXT"),)
        if listeners:
            self.host, self.port = self.listeners[0].endpoint.host, self.listeners[0].endpoint.port
        self.advertised_listeners = dict(advertised_listeners or {})
        self.inter_broker_listener = inter_broker_listener or self.listeners[0].name
        #: Counts for tests and logs: connections closed for a bad frame, requests the broker raised on.
        self.stats = {"connections": 0, "requests": 0, "malformed": 0, "unsupported": 0, "broker_errors": 0,
                      "authentication_failures": 0, "unauthenticated": 0,
                      "authentication_timeouts": 0}
        self._served: list[_Served] = []
        self._ctx: WireContext | None = None
        self._bound_port = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # ------------------------------------------------------------ life cycle

    @property
    def address(self) -> tuple[str, int]:
        """The host and port listened on (the port chosen when 0 was asked for)."""
        if self._ctx is None:
            raise IdemcoreError("the server is not started")
        return self.host, self._bound_port

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the first listener, as clients' ``bootstrap.servers`` take it."""
        host, port = self.address
        return f"{host}:{port}"

    @property
    def addresses(self) -> dict[str, tuple[str, int]]:
        """Each listener's host and bound port, by listener name."""
        if self._ctx is None:
            raise IdemcoreError("the server is not started")
        return {served.security.name: (served.security.endpoint.host, served.port) for served in self._served}

    def bootstrap_of(self, listener: str) -> str:
        """``host:port`` of the listener named ``listener``."""
        addresses = self.addresses
        if listener.upper() not in addresses:
            raise IdemcoreError(f"no listener {listener!r} (listeners: {', '.join(addresses)})")
        host, port = addresses[listener.upper()]
        return f"{host}:{port}"

    def advertised_endpoints(self) -> tuple[tuple[str, str, int, str], ...]:
        """``(listener, host, port, security protocol)`` of every listener as clients are told to reach it (the
        bound port where 0 was advertised): what a broker in a cluster registers in ZooKeeper."""
        return tuple((served.security.name, served.ctx.host, served.ctx.port, served.security.protocol)
                     for served in self._served if served.ctx is not None)

    async def start_serving(self, join_cluster: bool = True) -> None:
        """Listen (in the running loop); a broker in a cluster then registers in ZooKeeper (``join_cluster``;
        False: the caller calls :meth:`join_cluster` itself, after saying where it listens)."""
        self._loop = asyncio.get_running_loop()
        if self._loop.get_exception_handler() is None:  # a loop of the caller's with its own handler keeps it
            self._loop.set_exception_handler(_one_line_accept_failures)
        self._stopping = asyncio.Event()
        self.broker.start_background(self._loop)
        try:
            for security in self.listeners:
                served = _Served(security)
                served.server = await asyncio.start_server(
                    functools.partial(self._connection, served),
                    security.endpoint.host or None, security.endpoint.port, limit=1 << 20, ssl=security.server_tls,
                    ssl_handshake_timeout=_TLS_HANDSHAKE_TIMEOUT_S if security.server_tls is not None else None)
                self._served.append(served)
        except BaseException:
            for served in self._served:
                if served.server is not None:
                    served.server.close()
            self._served.clear()
            self.broker.stop_background()
            raise
        for served in self._served:
            assert served.server is not None
            served.port = served.server.sockets[0].getsockname()[1]
            advertised = self.advertised_listeners.get(served.security.name)
            if advertised is not None:
                host, port = advertised.host, advertised.port or served.port
            elif served is self._served[0]:  # the one-listener form: advertised_host / advertised_port
                host, port = self.advertised_host or served.security.endpoint.host, self.advertised_port or served.port
            else:
                host, port = served.security.endpoint.host, served.port
            served.ctx = WireContext(self.broker.broker_id, host, port, self.cluster_id, lambda: self.broker.topics,
                                     listener=served.security.name)
        self._server = self._served[0].server
        self._bound_port = self._served[0].port
        self._ctx = self._served[0].ctx
        self._housekeeper = asyncio.create_task(self._housekeeping())
        if join_cluster:
            await self.join_cluster()

    async def join_cluster(self) -> None:
        """A broker in a cluster registers in ZooKeeper once clients can reach it, as Kafka's startup does (and
        runs for controller, starts its fetchers); nothing for a broker alone."""
        if self.broker.cluster is None or self._ctx is None:
            return
        try:
            await self.broker.cluster.start(self.advertised_endpoints(), self.inter_broker_listener)
        except BaseException:
            await self._close()
            raise

    async def serve_until_stopped(self) -> None:
        """Serve until :meth:`request_stop`, then close every connection (in the running loop)."""
        assert self._stopping is not None, "start_serving first"
        await self._stopping.wait()
        await self._close()

    def request_stop(self) -> None:
        """Ask the loop to stop serving (any thread, or a signal handler)."""
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)

    async def _close(self) -> None:
        for served in self._served:
            if served.server is not None:
                served.server.close()
        self._housekeeper.cancel()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(self._housekeeper, *self._connections, return_exceptions=True)
        if self.broker.cluster is not None:
            await self.broker.cluster.stop()
        self.broker.stop_background()  # what is queued is flushed; the broker answers in place again
        for served in self._served:
            if served.server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(served.server.wait_closed(), 5)

    def start(self) -> Server:
        """Serve from a background thread; returns once listening (raises what listening raised)."""
        if self._thread is not None:
            raise IdemcoreError("the server is started already")
        self._thread = threading.Thread(target=self._run_thread, name=f"idemcore-server-{self.port}", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            raise self._start_error
        return self

    def _run_thread(self) -> None:
        async def main() -> None:
            try:
                await self.start_serving()
            except BaseException as error:
                self._start_error = error
                self._started.set()
                return
            self._started.set()
            await self.serve_until_stopped()
        asyncio.run(main())

    def stop(self) -> None:
        """Stop serving and wait for the thread (connections are closed; the broker stays open)."""
        if self._thread is None:
            return
        self.request_stop()
        self._thread.join(30)
        self._thread = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ serving

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.housekeeping_ms / 1000)
            try:
                self.broker.run_housekeeping()
            except Exception:  # a failing timer must not stop the server; the next round tries again
                log.exception("housekeeping failed")

    async def _connection(self, served: _Served, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self.stats["connections"] += 1
        peer = writer.get_extra_info("peername")
        try:
            connection = self._open(served, peer, writer)
            # A client that has not authenticated by then is closed: else anyone reaching the port could hold
            # connections (and descriptors) forever without a password, sending nothing or a frame byte by byte.
            deadline = None if connection.authenticated else (
                asyncio.get_running_loop().time() + self.authentication_timeout_ms / 1000)
            while True:
                if connection.authenticated:
                    deadline = None
                try:
                    async with asyncio.timeout_at(deadline):
                        size = SIZE.unpack(await reader.readexactly(4))[0]
                        # Before a SASL client is authenticated, frames are bounded by sasl.server.max.receive.size.
                        largest = self.max_request_bytes if connection.authenticated else min(
                            self.max_request_bytes, served.security.sasl_max_receive_size)
                        smallest = 1 if connection.raw_tokens else 8
                        if not smallest <= size <= largest:
                            self.stats["malformed"] += 1
                            log.info("closing %s: a request frame of %d bytes (allowed: %d to %d)", peer, size,
                                     smallest, largest)
                            return
                        frame = await reader.readexactly(size)
                except TimeoutError:
                    self.stats["authentication_timeouts"] += 1
                    log.info("closing %s: SASL authentication not completed within %d ms", peer,
                             self.authentication_timeout_ms)
                    return
                chunks = (self._answer_raw_token(frame, peer, connection) if connection.raw_tokens
                          else await self._answer(frame, peer, connection))
                if chunks is None:
                    continue
                if connection.close_after:  # Kafka's connection.failed.authentication.delay.ms
                    await asyncio.sleep(self.failed_authentication_delay_ms / 1000)
                if served.security.server_tls is not None:  # one TLS record per answer, not one per chunk
                    writer.write(b"".join(chunks))
                else:
                    writer.writelines(chunks)
                await writer.drain()
                if connection.close_after:  # Kafka closes once a refused authentication is answered
                    return
        except _CloseConnection:
            pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _open(self, served: _Served, peer: Any, writer: asyncio.StreamWriter) -> _Connection:
        """A new connection's state: who it is before any request (ANONYMOUS; on a TLS listener with client
        authentication, the principal of its certificate's subject, as Kafka's ``DefaultKafkaPrincipalBuilder``)."""
        security = served.security
        principal = ANONYMOUS
        if security.protocol == "SSL":  # on SASL_SSL the principal is SASL's
            ssl_object = writer.get_extra_info("ssl_object")
            certificate = ssl_object.getpeercert() if ssl_object is not None else None
            if certificate:
                principal = KafkaPrincipal("User", security.principal_mapper.name_of(
                    distinguished_name(certificate.get("subject", ()))))
        host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
        assert served.ctx is not None
        sasl = None
        if security.uses_sasl:
            plain = security.jaas["PLAIN"].plain_users() if "PLAIN" in security.jaas else {}
            sasl = SaslAuthenticator(security.sasl_mechanisms, plain, self.broker.scram_credentials, host)
        return _Connection(served.ctx, Session(principal, host, security.name, security.protocol), sasl)

    def _answer_sasl(self, frame: bytes, peer: Any, connection: _Connection, api_key: int, version: int,
                     correlation_id: int) -> Iterable[bytes]:
        """SaslHandshake and SaslAuthenticate, answered by the connection's authenticator (Kafka's
        ``SaslServerAuthenticator``); on a listener without SASL, or once authenticated, ILLEGAL_SASL_STATE (as
        Kafka's ``KafkaApis`` answers them)."""
        low, high = next((low, high) for key, low, high in SASL_API_RANGES if key == api_key)
        if not low <= version <= high:
            raise self._refuse("unsupported", peer, f"api key {api_key} version {version} is not served")
        try:
            _, body = read_request(frame)
        except (MalformedFrameError, UnsupportedApiError) as error:
            raise self._refuse("malformed", peer, error) from None
        sasl = connection.sasl
        if sasl is None or sasl.complete:
            if api_key == sasl_wire.SASL_HANDSHAKE_KEY:
                response = sasl_wire.handshake_response(version, ErrorCode.ILLEGAL_SASL_STATE, ())
            else:
                response = sasl_wire.authenticate_response(
                    version, ErrorCode.ILLEGAL_SASL_STATE, "SASL authentication is not expected on this connection",
                    b"")
            return response_frame(correlation_id, response)
        answer = sasl_answer(sasl, api_key, version, body)
        if answer.principal is not None:
            connection.authenticated_as(answer.principal)
        if answer.close:
            self.stats["authentication_failures"] += 1
            connection.close_after = True
        elif api_key == sasl_wire.SASL_HANDSHAKE_KEY and version == 0:
            connection.raw_tokens = True  # v0: the tokens follow in raw frames, not in SaslAuthenticate
        return response_frame(correlation_id, answer.response)

    def _answer_raw_token(self, token: bytes, peer: Any, connection: _Connection) -> Iterable[bytes]:
        """A SASL token in a raw frame after SaslHandshake v0 (Kafka's pre-KIP-152 form); a refusal closes the
        connection without an answer, as Kafka does for these clients."""
        assert connection.sasl is not None
        step = connection.sasl.authenticate(token)
        if step.error_code != ErrorCode.NONE:  # closed (after the delay) with no answer
            self.stats["authentication_failures"] += 1
            connection.close_after = True
            return ()
        if step.complete and step.principal is not None:
            connection.raw_tokens = False
            connection.authenticated_as(step.principal)
        return (SIZE.pack(len(step.auth_bytes)), bytes(step.auth_bytes))

    async def _answer(self, frame: bytes, peer: Any, connection: _Connection) -> Iterable[bytes] | None:
        """The response frame's chunks, None when none is sent (acks=0); _CloseConnection when the frame is
        not one to answer."""
        ctx = connection.ctx
        self.stats["requests"] += 1
        try:
            api_key, version, correlation_id = peek_request(frame)
        except MalformedFrameError as error:
            raise self._refuse("malformed", peer, error) from None
        if api_key in (sasl_wire.SASL_HANDSHAKE_KEY, sasl_wire.SASL_AUTHENTICATE_KEY):
            return self._answer_sasl(frame, peer, connection, api_key, version, correlation_id)
        if not connection.authenticated and api_key != API_VERSIONS_KEY:  # Kafka closes such a connection
            raise self._refuse("unauthenticated", peer, f"api key {api_key} before SASL authentication completed")
        if api_key == API_VERSIONS_KEY:
            low, high = API_VERSIONS_RANGE
            if not low <= version <= high:
                return response_frame(correlation_id, api_versions_response(0, error_code=35))
            try:
                read_request(frame)
            except (MalformedFrameError, UnsupportedApiError) as error:
                raise self._refuse("malformed", peer, error) from None
            return response_frame(correlation_id, api_versions_response(version))
        api = APIS.get(api_key)
        if api is None or not api.min_version <= version <= api.max_version:
            raise self._refuse("unsupported", peer, f"api key {api_key} version {version} is not served")
        try:
            header, body = read_request(frame)
            message, carry = api.to_message(ctx, version, correlation_id, body)
            message = with_client(message, header.client_id, peer)  # JoinGroup, ConsumerGroupHeartbeat
        except (MalformedFrameError, UnsupportedApiError, ValueError, TypeError, KeyError, AttributeError) as error:
            raise self._refuse("malformed", peer, error) from None
        try:
            response = handle_each(connection.handle(self.broker), message)
            if isinstance(response, Pending):
                response = await _awaited(response)
            elif type(response) is tuple and any(isinstance(one, Pending) for one in response):
                response = tuple([await _awaited(one) if isinstance(one, Pending) else one for one in response])
        except RequestRefused as refused:  # no answer can be given (Kafka closes the connection too)
            log.info("closing %s: %s v%d refused: %s", peer, api.name, version, refused)
            raise _CloseConnection from None
        except Exception as error:
            self.stats["broker_errors"] += 1
            log.exception("closing %s: the broker failed on %s v%d", peer, api.name, version)
            raise _CloseConnection from error
        if response is None:
            return None
        try:
            return response_frame(correlation_id, api.to_wire(ctx, version, body, response, carry))
        except Exception as error:  # a translation bug: this client loses its connection, the others go on
            self.stats["broker_errors"] += 1
            log.exception("closing %s: could not answer %s v%d", peer, api.name, version)
            raise _CloseConnection from error

    def _refuse(self, kind: str, peer: Any, why: object) -> _CloseConnection:
        self.stats[kind] += 1
        log.info("closing %s: %s", peer, why)
        return _CloseConnection()


#: How long a TLS client may take to finish its handshake before its connection is closed.
_TLS_HANDSHAKE_TIMEOUT_S = 10.0


class _Served:
    """One listener being served: its security, its asyncio server, the port bound and what its translations
    tell clients (its advertised address)."""

    def __init__(self, security: ListenerSecurity) -> None:
        self.security = security
        self.server: asyncio.Server | None = None
        self.port = 0
        self.ctx: WireContext | None = None


class _Connection:
    """One client connection: the listener's wire context, who the client is (its :class:`Session`), and on a
    SASL listener its authenticator (no request but ApiVersions and SASL's own is served until it completes)."""

    __slots__ = ("close_after", "ctx", "raw_tokens", "sasl", "session")

    def __init__(self, ctx: WireContext, session: Session, sasl: SaslAuthenticator | None = None) -> None:
        self.ctx = ctx
        self.session = session
        self.sasl = sasl
        self.raw_tokens = False
        self.close_after = False

    @property
    def authenticated(self) -> bool:
        return self.sasl is None or self.sasl.complete

    def authenticated_as(self, principal: KafkaPrincipal) -> None:
        self.session = dataclasses.replace(self.session, principal=principal)

    def handle(self, broker: Broker) -> Callable[[Any], Any]:
        """The broker's answer to a request of this session (checked against the ACLs when an authorizer is on)."""
        session = self.session
        return lambda message: broker.handle_from(session, message)


class _CloseConnection(Exception):
    """Stop serving this connection (a frame not to answer)."""


async def _awaited(pending: Pending) -> Any:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def resolve(response: Any) -> None:
        if not future.done():  # the connection may have been cancelled meanwhile
            future.set_result(response)
    pending.add_done_callback(resolve)
    return await future
