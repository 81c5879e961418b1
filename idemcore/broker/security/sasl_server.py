"""The server side of SASL on one connection, without I/O (Kafka's ``SaslServerAuthenticator`` with
``PlainSaslServer`` and ``ScramSaslServer``).

The connection makes one :class:`SaslAuthenticator` when it accepts a SASL client and feeds it what arrives:

1. a SaslHandshake's mechanism to :meth:`SaslAuthenticator.handshake`, which answers ``(error_code, enabled
   mechanisms)``: NONE, or UNSUPPORTED_SASL_MECHANISM (33) for one not enabled (Kafka then closes);
2. each SaslAuthenticate's bytes to :meth:`SaslAuthenticator.authenticate`, which answers a :class:`SaslStep`:
   the bytes to send back, and ``complete`` with the principal once the client is authenticated. PLAIN takes one
   step, SCRAM two. A step with ``error_code`` SASL_AUTHENTICATION_FAILED (58) is Kafka's answer to a failure,
   sent before the connection is closed; ILLEGAL_SASL_STATE (34) is a request out of order.

A failure is logged at INFO with the client's host, the mechanism and the user it claimed (never a password,
proof or token bytes). Passwords and proofs are compared in constant time (``hmac.compare_digest``). SCRAM answers
a user that does not exist as one that does (a stand-in salt, stable per user, and the refusal at the proof; RFC
5802 section 5.1), where Kafka refuses it at the first message and so tells who exists.

Delegation tokens (SCRAM's ``tokenauth`` extension) are not supported: such a client is refused."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from idemcore.broker.security.session import KafkaPrincipal
from idemcore.net import scram
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
#: The mechanisms this server can run.
SUPPORTED_MECHANISMS = (PLAIN, *scram.MECHANISMS)


class ScramCredentialSource(Protocol):
    """Where SCRAM credentials come from (:class:`~idemcore.broker.security.scram_credentials.ScramCredentialStore`
    is one)."""

    def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        """``user``'s credential for ``mechanism`` (``SCRAM-SHA-256``), None when there is none."""
        ...


@dataclass(frozen=True, slots=True)
class SaslStep:
    """The answer to one SaslAuthenticate: its error code and message, the bytes for the client, and once the
    exchange is done ``complete`` with the authenticated ``principal``."""

    error_code: int
    error_message: str | None
    auth_bytes: bytes
    principal: KafkaPrincipal | None = None
    complete: bool = False


class _Refused(Exception):
    """A mechanism refused the client. ``public``: the message is for the client (Kafka's
    SaslAuthenticationException); otherwise the client gets Kafka's generic message and only the log has it."""

    def __init__(self, reason: str, public: bool = False) -> None:
        super().__init__(reason)
        self.public = public


class _Mechanism(Protocol):
    user: str | None

    def evaluate(self, data: bytes) -> tuple[bytes, bool]:
        """``(bytes for the client, complete?)``; raises _Refused."""
        ...


class _PlainServer:
    """``[authzid] NUL username NUL password`` (RFC 4616), checked against the JAAS ``user_<name>`` entries."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.user: str | None = None

    def evaluate(self, data: bytes) -> tuple[bytes, bool]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise _Refused("the SASL/PLAIN response is not UTF-8") from None
        tokens = text.split("\0")
        if len(tokens) != 3:
            raise _Refused(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        self.user = username or None
        if not username:
            raise _Refused("Authentication failed: username not specified", public=True)
        if not password:
            raise _Refused("Authentication failed: password not specified", public=True)
        expected = self.users.get(username)
        # Digests compared, and for an unknown user too, so the time taken says neither which users exist nor how
        # long a password is (compare_digest returns at once for lengths that differ).
        matches = hmac.compare_digest(hashlib.sha256(password.encode()).digest(), hashlib.sha256(
            (expected if expected is not None else "\0").encode()).digest())
        if expected is None or not matches:
            raise _Refused("Authentication failed: Invalid username or password", public=True)
        if authzid and authzid != username:
            raise _Refused("Authentication failed: Client requested an authorization id that is different from "
                           "username", public=True)
        return b"", True


class _ScramServer:
    """RFC 5802's server: client-first -> server-first (nonce, salt, iterations), client-final -> server-final
    (the server's signature) once the client's proof matches the stored key."""

    def __init__(self, mechanism: scram.ScramMechanism, credentials: ScramCredentialSource | None) -> None:
        self.mechanism = mechanism
        self.credentials = credentials
        self.user: str | None = None
        self._first: scram.ClientFirst | None = None
        self._server_first: scram.ServerFirst | None = None
        self._credential: scram.ScramCredential | None = None
        self._unknown = False

    def evaluate(self, data: bytes) -> tuple[bytes, bool]:
        if self._server_first is None:
            return self._first_message(data), False
        return self._final_message(data), True

    def _first_message(self, data: bytes) -> bytes:
        try:
            first = scram.ClientFirst.parse(data)
        except scram.ScramFormatError as error:
            raise _Refused(str(error)) from None
        self.user = first.username
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise _Refused("delegation tokens (the tokenauth extension) are not supported")
        credential = None if self.credentials is None else self.credentials.get(first.username, self.mechanism.name)
        if credential is None:  # carried on to the proof, which cannot match: the answers do not say who exists
            self._unknown = True
            credential = _stand_in_credential(self.mechanism, first.username)
        if first.authzid and first.authzid != first.username:
            raise _Refused("Authentication failed: Client requested an authorization id that is different from "
                           "username", public=True)
        if credential.iterations < self.mechanism.min_iterations:
            raise _Refused(f"Iterations {credential.iterations} is less than the minimum "
                           f"{self.mechanism.min_iterations} for {self.mechanism.name}")
        self._first, self._credential = first, credential
        self._server_first = scram.ServerFirst.build(first.nonce + scram.nonce(), credential.salt,
                                                     credential.iterations)
        return self._server_first.text.encode()

    def _final_message(self, data: bytes) -> bytes:
        first, server_first, credential = self._first, self._server_first, self._credential
        assert first is not None and server_first is not None and credential is not None
        self._credential = None  # one attempt per exchange
        try:
            final = scram.ClientFinal.parse(data)
        except scram.ScramFormatError as error:
            raise _Refused(str(error)) from None
        if not hmac.compare_digest(final.nonce.encode(), server_first.nonce.encode()):
            raise _Refused("Invalid client nonce in the final client message.")
        if final.binding != first.header.encode():
            raise _Refused("the client final message's channel binding is not its first message's gs2 header")
        message = scram.auth_message(first.bare, server_first.text, final.without_proof)
        signature = scram.client_signature(self.mechanism, credential.stored_key, message)
        if len(final.proof) != len(signature):
            raise _Refused("Invalid client credentials")
        computed = self.mechanism.digest(scram.xor(final.proof, signature))
        if not hmac.compare_digest(computed, credential.stored_key) or self._unknown:
            raise _Refused("Authentication failed: Invalid user credentials" if self._unknown
                           else "Invalid client credentials")
        return scram.ServerFinal.build(scram.server_signature(self.mechanism, credential.server_key, message))


#: This process's key for the salts of users that do not exist (RFC 5802 section 5.1): stable per user, so asking
#: twice does not tell a made-up salt from a stored one.
_STAND_IN_KEY = secrets.token_bytes(32)


def _stand_in_credential(mechanism: scram.ScramMechanism, user: str) -> scram.ScramCredential:
    """A credential for a user without one, answered as if it existed (its keys match no proof): an unknown user
    is refused at the proof, where a wrong password is, and not at the first message."""
    salt = hmac.new(_STAND_IN_KEY, f"{mechanism.name}\0{user}".encode(), "sha256").digest()
    size = len(mechanism.digest(b""))
    return scram.ScramCredential(salt, secrets.token_bytes(size), secrets.token_bytes(size), mechanism.min_iterations)


class SaslAuthenticator:
    """One connection's SASL exchange (module docstring).

    ``enabled_mechanisms``: the listener's ``sasl.enabled.mechanisms`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512);
    ``plain_users``: user -> password from the listener's PLAIN JAAS config; ``scram_credentials``: the
    credential store; ``client_host``: the peer's address, for the log."""

    def __init__(self, enabled_mechanisms: Sequence[str], plain_users: Mapping[str, str],
                 scram_credentials: ScramCredentialSource | None, client_host: str) -> None:
        unknown = [m for m in enabled_mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(f"SASL mechanism {unknown[0]!r} is not supported (only {', '.join(SUPPORTED_MECHANISMS)})")
        self.enabled_mechanisms = tuple(enabled_mechanisms)
        self.plain_users = plain_users
        self.scram_credentials = scram_credentials
        self.client_host = client_host
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.failed = False
        self._server: _Mechanism | None = None

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def handshake(self, mechanism: str) -> tuple[int, tuple[str, ...]]:
        """``(error_code, enabled mechanisms)`` for a SaslHandshake asking for ``mechanism``."""
        if self._server is not None or self.complete or self.failed:
            return int(ErrorCode.ILLEGAL_SASL_STATE), self.enabled_mechanisms
        if mechanism not in self.enabled_mechanisms:
            self.failed = True
            log.info("Failed authentication with %s (Unsupported SASL mechanism %r)", self.client_host, mechanism)
            return int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), self.enabled_mechanisms
        self.mechanism = mechanism
        self._server = _PlainServer(self.plain_users) if mechanism == PLAIN else \
            _ScramServer(scram.MECHANISMS[mechanism], self.scram_credentials)
        return int(ErrorCode.NONE), self.enabled_mechanisms

    def authenticate(self, auth_bytes: bytes) -> SaslStep:
        """The answer to one SaslAuthenticate carrying ``auth_bytes``."""
        server = self._server
        if self.complete:
            return SaslStep(int(ErrorCode.ILLEGAL_SASL_STATE),
                            "SaslAuthenticate request received after successful authentication", b"")
        if server is None or self.failed:
            return SaslStep(int(ErrorCode.ILLEGAL_SASL_STATE),
                            "Unexpected SaslAuthenticate request: no SASL handshake in progress", b"")
        try:
            answer, done = server.evaluate(bytes(auth_bytes))
        except _Refused as refused:
            self.failed = True
            message = str(refused) if refused.public else (
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{self.mechanism}")
            log.info("Failed authentication with %s (user %r, mechanism %s: %s)", self.client_host, server.user,
                     self.mechanism, refused)
            return SaslStep(int(ErrorCode.SASL_AUTHENTICATION_FAILED), message, b"")
        if not done:
            return SaslStep(int(ErrorCode.NONE), None, answer)
        assert server.user is not None
        self.principal = KafkaPrincipal("User", server.user)
        log.debug("authenticated %s from %s with %s", self.principal, self.client_host, self.mechanism)
        return SaslStep(int(ErrorCode.NONE), None, answer, self.principal, True)
