"""One broker's connection to another (Kafka's ``BlockingSend`` / controller channel): a replica fetcher to its
leader, the controller to each broker, a transaction coordinator to partition leaders.

:class:`BrokerChannel` (asyncio) and :class:`BlockingBrokerChannel` (a thread's own socket) take the messages of
:mod:`idemcore.net.messages` and :mod:`idemcore.net.replication`, speak Kafka's protocol
(:mod:`idemcore.net.wire.broker_client` translates each), and give the answer back as a message:

- one request at a time per channel (a caller's next call waits for the answer to its last), so answers never
  need reordering; open a channel per concurrent caller;
- each connection first asks ApiVersions (KIP-511: an older broker's UNSUPPORTED_VERSION answer is retried at a
  version it has), then speaks per API the highest version both sides know;
- a lost connection (refused, closed, a frame cut short, an unreadable answer) raises ConnectionError naming the
  broker and loses that call; a call that outlives ``request_timeout_ms`` raises TimeoutError and drops the
  connection too (its answer could still arrive and be taken for the next one's). The next call reconnects.
- a Produce with ``acks=0`` gets no answer from a broker (Kafka's rule): it returns an empty ProduceResponse.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import socket
import struct
import threading
import time
from collections.abc import Generator
from typing import Any, Self

from idemcore.net.client_security import ClientSecurity
from idemcore.net.messages import ProduceRequest, ProduceResponse, Request, Response
from idemcore.net.sasl_client import SaslClientError, sasl_client
from idemcore.net.wire import sasl as sasl_wire
from idemcore.net.wire.broker_client import broker_api_of
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

_SIZE = struct.Struct(">i")
#: The largest answer frame read (as the clients' transport bounds them).
MAX_RESPONSE_BYTES = 1 << 30
#: A SASL exchange takes two (PLAIN) or three (SCRAM) requests: more is a broker leading the client on.
_MAX_SASL_STEPS = 8


class _Negotiation:
    """The sans-IO part both channels share: frames to send, and what an answer frame means."""

    def __init__(self, where: str, client_id: str) -> None:
        self.where = where
        self.client_id = client_id
        self._correlation = itertools.count(1)

    def next_correlation(self) -> int:
        return next(self._correlation) & 0x7FFFFFFF

    def versions_frame(self, version: int) -> tuple[int, bytes]:
        correlation_id = self.next_correlation()
        return correlation_id, request_frame(API_VERSIONS_KEY, version, correlation_id, self.client_id,
                                             api_versions_request(version))

    def read_versions(self, version: int, correlation_id: int,
                      frame: bytes) -> dict[int, tuple[int, int]] | int:
        """The broker's API ranges, or the ApiVersions version to ask at again (KIP-511)."""
        try:
            answered, body = read_api_versions(version, frame)
            self._check(answered, correlation_id)
            code, ranges = api_versions_ranges(body)
        except MalformedFrameError as error:  # not a Kafka broker there: say where, not only what did not parse
            raise ConnectionError(f"{self.where}: unreadable ApiVersions answer: {error}") from None
        if code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
            return max(0, min(ranges.get(API_VERSIONS_KEY, (0, 0))[1], version - 1))
        if code != ErrorCode.NONE:
            raise ConnectionError(f"{self.where}: ApiVersions answered error {code}")
        return ranges

    def request(self, request: Request, versions: dict[int, tuple[int, int]]) -> tuple[ClientApi, int, int, bytes]:
        """``(api, version, correlation id, frame)`` for ``request``; WireProtocolError when the broker lacks
        every version this side speaks."""
        api = broker_api_of(request)
        version = pick_version(api, versions.get(api.key))
        if version is None:
            server = versions.get(api.key)
            raise WireProtocolError(f"{self.where} speaks {api.name} at {server if server else 'no version'}, "
                                    f"this side at v{api.min_version}-{api.max_version}")
        correlation_id = self.next_correlation()
        return api, version, correlation_id, request_frame(api.key, version, correlation_id, self.client_id,
                                                           api.encode(request, version))

    def answer(self, request: Request, api: ClientApi, version: int, correlation_id: int, frame: bytes) -> Response:
        try:
            answered, body = read_response(api.key, version, frame)
            self._check(answered, correlation_id)
            return api.decode(request, version, body)
        except MalformedFrameError as error:
            raise ConnectionError(f"{self.where}: unreadable {api.name} v{version} answer: {error}") from None

    def sasl_exchange(self, security: ClientSecurity | None,
                      versions: dict[int, tuple[int, int]]) -> sasl_wire.ClientExchange | None:
        """The SASL exchange this connection runs after ApiVersions (None: not a SASL connection)."""
        if security is None or not security.uses_sasl:
            return None
        assert security.sasl_mechanism is not None and security.username is not None
        assert security.password is not None
        server = versions.get(sasl_wire.SASL_AUTHENTICATE_KEY)
        if server is None or versions.get(sasl_wire.SASL_HANDSHAKE_KEY, (0, 0))[1] < 1:
            raise ConnectionError(f"{self.where} does not speak SaslHandshake v1 and SaslAuthenticate (KIP-152)")
        client = sasl_client(security.sasl_mechanism, security.username, security.password)
        return sasl_wire.ClientExchange(client, authenticate_version=min(server[1], 2))

    def sasl_frame(self, step: tuple[int, int, Any]) -> tuple[int, int, int, bytes]:
        """``(api key, version, correlation id, frame)`` of one SASL request of an exchange."""
        api_key, version, body = step
        correlation_id = self.next_correlation()
        return api_key, version, correlation_id, request_frame(api_key, version, correlation_id, self.client_id, body)

    def sasl_answer(self, exchange: sasl_wire.ClientExchange, api_key: int, version: int, correlation_id: int,
                    frame: bytes) -> tuple[int, int, Any] | None:
        """The next SASL request after the answer ``frame``; None once authenticated; ConnectionError naming the
        broker when refused (an authentication failure is no broker fault to retry at once)."""
        try:
            answered, body = read_response(api_key, version, frame)
            self._check(answered, correlation_id)
            return exchange.on_response(api_key, body)
        except MalformedFrameError as error:
            raise ConnectionError(f"{self.where}: unreadable SASL answer: {error}") from None
        except (sasl_wire.SaslAuthenticationError, SaslClientError) as error:
            raise ConnectionError(f"{self.where}: SASL authentication as {exchange.client.mechanism} failed: "
                                  f"{error}") from None

    def handshake(self, security: ClientSecurity | None) -> Generator[tuple[bytes, str], bytes,
                                                                     dict[int, tuple[int, int]]]:
        """A new connection's opening, sans IO: yields ``(frame, what)`` to send and takes the answer frame back;
        returns the broker's API ranges once ApiVersions (retried lower per KIP-511) and SASL are through."""
        version = API_VERSIONS_RANGE[1]
        for _ in range(API_VERSIONS_RANGE[1] + 1):  # each retry asks at a lower version
            correlation_id, frame = self.versions_frame(version)
            outcome = self.read_versions(version, correlation_id, (yield frame, f"ApiVersions v{version}"))
            if isinstance(outcome, dict):
                break
            version = outcome
        else:
            raise ConnectionError(f"{self.where}: no ApiVersions version both sides speak")
        exchange = self.sasl_exchange(security, outcome)
        step = exchange.first() if exchange is not None else None
        for _ in range(_MAX_SASL_STEPS):
            if step is None or exchange is None:
                return outcome
            api_key, sasl_version, correlation_id, frame = self.sasl_frame(step)
            answer = yield frame, f"SASL api {api_key} v{sasl_version}"
            step = self.sasl_answer(exchange, api_key, sasl_version, correlation_id, answer)
        raise ConnectionError(f"{self.where}: SASL took more than {_MAX_SASL_STEPS} steps")

    @staticmethod
    def security_hint(security: ClientSecurity | None) -> str:
        """What to say of a connection closed instead of answered: a broker closes a client that skips the SASL
        its listener requires."""
        if security is not None and security.uses_sasl:
            return ""
        return " (if its listener requires SASL, connect with the listener's security: security.protocol, sasl.*)"

    def _check(self, answered: int, expected: int) -> None:
        if answered != expected:
            raise ConnectionError(f"{self.where}: an answer to correlation id {answered}, expected {expected}")

    def frame_size(self, head: bytes) -> int:
        (size,) = _SIZE.unpack(head)
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise ConnectionError(f"{self.where}: a response frame of {size} bytes")
        return size


def _no_answer(request: Request) -> Response | None:
    """The answer to a request the broker never answers (Produce with acks=0), else None."""
    if isinstance(request, ProduceRequest) and request.acks == 0:
        return ProduceResponse(request.request_id, ())
    return None


class _Channel(abc.ABC):
    """What both channels are set up with: the broker's address, timeouts and security, and the sans-IO part."""

    def __init__(self, host: str, port: int, client_id: str, *, connect_timeout_ms: int = 10_000,
                 request_timeout_ms: int = 30_000, security: ClientSecurity | None = None) -> None:
        self.host, self.port = host, port
        self.security = security
        self.connect_timeout_ms = connect_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self._wire = _Negotiation(f"broker {host}:{port}", client_id)
        self._versions: dict[int, tuple[int, int]] = {}
        self._unconnected()

    @abc.abstractmethod
    def _unconnected(self) -> None:
        """Each channel's own starting state: its lock (one call at a time) and no connection yet."""

    def _step(self, opening: Generator[tuple[bytes, str], bytes, dict[int, tuple[int, int]]],
              answer: bytes | None = None) -> tuple[bytes, str] | None:
        """The opening's next ``(frame, what)`` to send after ``answer`` (None: its first); None once it is through,
        its API ranges kept."""
        try:
            return next(opening) if answer is None else opening.send(answer)
        except StopIteration as done:
            self._versions = done.value
            return None

    def _connect_failed(self, error: OSError) -> Exception:
        """The error to raise for a connection that could not be opened."""
        if isinstance(error, TimeoutError):
            return TimeoutError(f"{self._wire.where}: no connection within "
                                f"connect_timeout_ms={self.connect_timeout_ms}")
        return ConnectionError(f"{self._wire.where}: cannot connect: {error}")  # ssl.SSLError is an OSError too


class BrokerChannel(_Channel):
    """An asyncio connection to the broker at ``host``:``port`` (module docstring)."""

    def _unconnected(self) -> None:
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def call(self, request: Request) -> Response:
        """``request``'s answer; ConnectionError, TimeoutError or WireProtocolError naming the broker."""
        async with self._lock:
            if self._writer is None:
                await self._connect()
            api, version, correlation_id, frame = self._wire.request(request, self._versions)
            try:
                await self._send(frame)
                unanswered = _no_answer(request)
                if unanswered is not None:
                    return unanswered
                answer = await self._receive(f"{api.name} v{version}")
                return self._wire.answer(request, api, version, correlation_id, answer)
            except BaseException:
                self._drop()
                raise

    async def close(self) -> None:
        async with self._lock:
            writer = self._writer
            self._drop()
            if writer is not None:
                try:
                    await writer.wait_closed()
                except OSError:
                    pass

    async def _connect(self) -> None:
        try:
            tls = self.security.ssl_context if self.security is not None else None
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=tls, server_hostname=self.host if tls else None),
                self.connect_timeout_ms / 1000)
        except OSError as error:
            raise self._connect_failed(error) from None
        try:
            opening = self._wire.handshake(self.security)
            step = self._step(opening)
            while step is not None:
                frame, what = step
                await self._send(frame)
                step = self._step(opening, await self._receive(what))
        except BaseException:
            self._drop()
            raise

    async def _send(self, frame: bytes) -> None:
        assert self._writer is not None
        try:
            self._writer.write(frame)
            await asyncio.wait_for(self._writer.drain(), self.request_timeout_ms / 1000)
        except TimeoutError:
            raise TimeoutError(f"{self._wire.where}: a request not sent within "
                               f"request_timeout_ms={self.request_timeout_ms}") from None
        except OSError as error:
            raise ConnectionError(f"{self._wire.where}: send failed: {error}") from None

    async def _receive(self, what: str) -> bytes:
        assert self._reader is not None
        reader = self._reader
        try:
            async with asyncio.timeout(self.request_timeout_ms / 1000):
                size = self._wire.frame_size(await reader.readexactly(4))
                return await reader.readexactly(size)
        except TimeoutError:
            raise TimeoutError(f"{self._wire.where}: no answer to {what} within "
                               f"request_timeout_ms={self.request_timeout_ms}") from None
        except asyncio.IncompleteReadError as error:
            raise ConnectionError(f"{self._wire.where}: the connection closed after {len(error.partial)} bytes "
                                  f"of the answer to {what}{self._wire.security_hint(self.security)}") from None
        except OSError as error:
            raise ConnectionError(f"{self._wire.where}: receive failed: {error}") from None

    def _drop(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        self._versions = {}
        if writer is not None:
            writer.close()


class BlockingBrokerChannel(_Channel):
    """A blocking connection to the broker at ``host``:``port``, for a thread (module docstring). Safe to share
    between threads: calls take turns."""

    def _unconnected(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def call(self, request: Request) -> Response:
        """``request``'s answer; ConnectionError, TimeoutError or WireProtocolError naming the broker."""
        with self._lock:
            if self._sock is None:
                self._connect()
            api, version, correlation_id, frame = self._wire.request(request, self._versions)
            deadline = time.monotonic() + self.request_timeout_ms / 1000
            try:
                self._send(frame, deadline, f"{api.name} v{version}")
                unanswered = _no_answer(request)
                if unanswered is not None:
                    return unanswered
                answer = self._receive(deadline, f"{api.name} v{version}")
                return self._wire.answer(request, api, version, correlation_id, answer)
            except BaseException:
                self._drop()
                raise

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _connect(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_ms / 1000)
            if self.security is not None and self.security.ssl_context is not None:
                try:
                    sock = self.security.ssl_context.wrap_socket(sock, server_hostname=self.host)
                except BaseException:
                    sock.close()
                    raise
            self._sock = sock
        except OSError as error:
            raise self._connect_failed(error) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            opening = self._wire.handshake(self.security)
            step = self._step(opening)
            while step is not None:
                frame, what = step
                deadline = time.monotonic() + self.request_timeout_ms / 1000
                self._send(frame, deadline, what)
                step = self._step(opening, self._receive(deadline, what))
        except BaseException:
            self._drop()
            raise

    def _left(self, deadline: float, what: str) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self._wire.where}: no answer to {what} within "
                               f"request_timeout_ms={self.request_timeout_ms}")
        return left

    def _send(self, frame: bytes, deadline: float, what: str) -> None:
        assert self._sock is not None
        try:
            self._sock.settimeout(self._left(deadline, what))
            self._sock.sendall(frame)
        except TimeoutError:
            raise TimeoutError(f"{self._wire.where}: {what} not sent within "
                               f"request_timeout_ms={self.request_timeout_ms}") from None
        except OSError as error:
            raise ConnectionError(f"{self._wire.where}: send failed: {error}") from None

    def _receive(self, deadline: float, what: str) -> bytes:
        size = self._wire.frame_size(self._exactly(4, deadline, what))
        return self._exactly(size, deadline, what)

    def _exactly(self, count: int, deadline: float, what: str) -> bytes:
        assert self._sock is not None
        out = bytearray()
        while len(out) < count:
            try:
                self._sock.settimeout(self._left(deadline, what))
                data = self._sock.recv(min(count - len(out), 1 << 20))
            except TimeoutError:
                raise TimeoutError(f"{self._wire.where}: no answer to {what} within "
                                   f"request_timeout_ms={self.request_timeout_ms}") from None
            except OSError as error:
                raise ConnectionError(f"{self._wire.where}: receive failed: {error}") from None
            if not data:
                raise ConnectionError(f"{self._wire.where}: the connection closed in the answer to {what}"
                                      f"{self._wire.security_hint(self.security)}")
            out += data
        return bytes(out)

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        self._versions = {}
        if sock is not None:
            sock.close()


__all__ = ["MAX_RESPONSE_BYTES", "BlockingBrokerChannel", "BrokerChannel"]


class BrokerChannels:
    """Blocking channels to a cluster's brokers, one per address, opened when first asked for: the base of a client
    that talks to several brokers. A context manager: leaving it (or :meth:`close`) closes every channel."""

    def __init__(self, client_id: str, *, security: ClientSecurity | None = None, request_timeout_ms: int = 30_000,
                 connect_timeout_ms: int = 10_000) -> None:
        self.client_id = client_id
        self.security = security
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self._channels: dict[tuple[str, int], BlockingBrokerChannel] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def channel(self, address: tuple[str, int]) -> BlockingBrokerChannel:
        """The channel to the broker at ``address`` (opened now if it is not yet)."""
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = BlockingBrokerChannel(
                address[0], address[1], self.client_id, connect_timeout_ms=self.connect_timeout_ms,
                request_timeout_ms=self.request_timeout_ms, security=self.security)
        return channel
