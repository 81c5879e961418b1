"""SaslHandshake (key 17, v0–1) and SaslAuthenticate (key 36, v0–2) on the wire, both directions (KIP-152).

These two requests never reach ``Broker.handle``: the server's connection answers them through its
:class:`~idemcore.broker.security.sasl_server.SaslAuthenticator` before any other request (Kafka's
``SaslServerAuthenticator``), so they are not in :data:`idemcore.net.wire.apis.APIS`; :data:`SASL_API_RANGES`
is what a SASL listener advertises for them in ApiVersions.

Server side: :func:`answer` takes a request body to the :class:`SaslAnswer` (the response, the principal once
authenticated, whether to close); underneath, :func:`handshake_mechanism` / :func:`authenticate_bytes` read a
request body and :func:`handshake_response` / :func:`authenticate_response` build the answer. Client side (the
broker channels): :class:`ClientExchange` says which request to send next and reads each answer; underneath,
:func:`handshake_request` / :func:`authenticate_request` build a request body and
:func:`read_handshake_response` / :func:`read_authenticate_response` read the answer.

SaslHandshake v0 (the token then travels in raw frames, Kafka's pre-KIP-152 form) is decoded and answered, but a
server should then expect SaslAuthenticate only from v1 clients; v1+ handshakes are what every current client
sends."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.errors import IdemcoreError
from idemcore.net.sasl_client import PlainClient, ScramClient
from idemcore.net.wire.frames import make
from idemcore.net.wire.schema import load_request_schema, load_response_schema

SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36
#: Kafka's answer when ``connections.max.reauth.ms`` is not set: the session does not expire.
NO_SESSION_LIFETIME = 0


# ---------------------------------------------------------------- server side


def handshake_mechanism(body: Any) -> str:
    """The mechanism a SaslHandshake request body asks for."""
    return str(body.mechanism)


def handshake_response(version: int, error_code: int, mechanisms: tuple[str, ...]) -> Any:
    """The SaslHandshake answer: the error code and the mechanisms the listener enables."""
    return make(load_response_schema(SASL_HANDSHAKE_KEY, version), error_code=WireError(error_code),
                mechanisms=tuple(mechanisms))


def authenticate_bytes(body: Any) -> bytes:
    """The token a SaslAuthenticate request body carries."""
    return bytes(body.auth_bytes)


def authenticate_response(version: int, error_code: int, error_message: str | None, auth_bytes: bytes,
                          session_lifetime_ms: int = NO_SESSION_LIFETIME) -> Any:
    """The SaslAuthenticate answer (v1+: the session lifetime, KIP-368)."""
    return make(load_response_schema(SASL_AUTHENTICATE_KEY, version), error_code=WireError(error_code),
                error_message=error_message, auth_bytes=bytes(auth_bytes), session_lifetime=session_lifetime_ms)


# ---------------------------------------------------------------- client side


def handshake_request(version: int, mechanism: str) -> Any:
    return make(load_request_schema(SASL_HANDSHAKE_KEY, version), mechanism=mechanism)


def read_handshake_response(body: Any) -> tuple[int, tuple[str, ...]]:
    """``(error code, the server's enabled mechanisms)``."""
    return int(body.error_code), tuple(str(m) for m in body.mechanisms)


def authenticate_request(version: int, auth_bytes: bytes) -> Any:
    return make(load_request_schema(SASL_AUTHENTICATE_KEY, version), auth_bytes=bytes(auth_bytes))


def read_authenticate_response(body: Any) -> tuple[int, str | None, bytes]:
    """``(error code, error message, the server's token)``."""
    message = body.error_message
    return int(body.error_code), None if message is None else str(message), bytes(body.auth_bytes)


class SaslAuthenticationError(IdemcoreError):
    """The broker refused the exchange: its error code and message (Kafka's, as the broker sent it)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ClientExchange:
    """A client's whole SASL exchange, without I/O: send :meth:`first`'s request, then each request
    :meth:`on_response` returns for the answer to the last one, until it returns None (authenticated). Requests
    are ``(api key, version, kio body)``; pick the versions from the broker's ApiVersions (SaslHandshake v1 and
    SaslAuthenticate v0+: the token travels in SaslAuthenticate). A refusal raises
    :class:`SaslAuthenticationError`; a server answer a genuine server would not send, SaslClientError."""

    def __init__(self, client: PlainClient | ScramClient, authenticate_version: int = 2) -> None:
        self.client = client
        self.authenticate_version = authenticate_version

    def first(self) -> tuple[int, int, Any]:
        return SASL_HANDSHAKE_KEY, 1, handshake_request(1, self.client.mechanism)

    def on_response(self, api_key: int, body: Any) -> tuple[int, int, Any] | None:
        if api_key == SASL_HANDSHAKE_KEY:
            code, mechanisms = read_handshake_response(body)
            if code:
                raise SaslAuthenticationError(code, f"the broker does not enable SASL mechanism "
                                                    f"{self.client.mechanism} (it enables: {', '.join(mechanisms)})")
            return self._authenticate(self.client.first())
        code, message, token = read_authenticate_response(body)
        if code:
            raise SaslAuthenticationError(code, message or f"SASL authentication failed (error {code})")
        if self.client.complete:
            return None
        answer = self.client.respond(token)
        return None if self.client.complete else self._authenticate(answer)

    def _authenticate(self, token: bytes) -> tuple[int, int, Any]:
        return SASL_AUTHENTICATE_KEY, self.authenticate_version, authenticate_request(self.authenticate_version, token)
