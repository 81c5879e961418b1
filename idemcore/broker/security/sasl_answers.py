"""A SASL request answered by a connection's :class:`~idemcore.broker.security.sasl_server.SaslAuthenticator`:
the response to send, the principal once authenticated, and whether to close (the server's half of
:mod:`idemcore.net.wire.sasl`, which holds the wire forms)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from idemcore.broker.security.sasl_server import SaslAuthenticator
from idemcore.broker.security.session import KafkaPrincipal
from idemcore.net.wire.sasl import (
    NO_SESSION_LIFETIME,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    authenticate_bytes,
    authenticate_response,
    handshake_mechanism,
    handshake_response,
)


@dataclass(frozen=True, slots=True)
class SaslAnswer:
    """What a connection does with one SASL request: send ``response`` (a kio body), then close when ``close``
    (Kafka closes after a refused mechanism or authentication); ``principal`` once the client is authenticated."""

    response: Any
    principal: KafkaPrincipal | None
    close: bool


def answer(authenticator: SaslAuthenticator, api_key: int, version: int, body: Any,
           session_lifetime_ms: int = NO_SESSION_LIFETIME) -> SaslAnswer:
    """The answer to a SaslHandshake or SaslAuthenticate request ``body`` (its ``api_key`` and ``version``)."""
    if api_key == SASL_HANDSHAKE_KEY:
        code, mechanisms = authenticator.handshake(handshake_mechanism(body))
        return SaslAnswer(handshake_response(version, code, mechanisms), None, code != 0)
    if api_key == SASL_AUTHENTICATE_KEY:
        step = authenticator.authenticate(authenticate_bytes(body))
        return SaslAnswer(authenticate_response(version, step.error_code, step.error_message, step.auth_bytes,
                                                session_lifetime_ms), step.principal, step.error_code != 0)
    raise ValueError(f"api key {api_key} is neither SaslHandshake ({SASL_HANDSHAKE_KEY}) nor SaslAuthenticate "
                     f"({SASL_AUTHENTICATE_KEY})")
