"""The client side of SASL mechanisms, without I/O: what a broker channel (or any idemcore client) sends in each
SaslAuthenticate after its SaslHandshake, and how it checks the server's answers.

Use: ``client = sasl_client("SCRAM-SHA-256", "alice", "secret")``; send SaslHandshake(``client.mechanism``); then
``token = client.first()`` and, while ``not client.complete``, send ``token`` in a SaslAuthenticate and
``token = client.respond(answer.auth_bytes)`` (a server answering with an error code ends the exchange: the caller
reports it). PLAIN completes after its one token; SCRAM after verifying the server's signature.
:class:`SaslClientError` says the server's answer is not what a genuine server sends."""

from __future__ import annotations

import hmac

from idemcore.errors import IdemcoreError
from idemcore.net import scram

#: The most iterations a client will compute for a server (an answer asking more is refused: a hostile server
#: could otherwise make the client spin).
CLIENT_MAX_ITERATIONS = 100_000


class SaslClientError(IdemcoreError):
    """The server's SASL answer is malformed or fails verification (one line, naming what)."""


class PlainClient:
    """SASL/PLAIN (RFC 4616): one token ``NUL username NUL password``."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self.username, self._password = username, password
        self.complete = False

    def first(self) -> bytes:
        self.complete = True  # the server's empty answer (or its error code) ends the exchange
        return f"\0{self.username}\0{self._password}".encode()

    def respond(self, challenge: bytes) -> bytes:
        raise SaslClientError("SASL/PLAIN takes one token; the server asked for another")


class ScramClient:
    """SCRAM-SHA-256/512 (RFC 5802): client-first, then client-final with the proof, then the server's signature
    checked."""

    def __init__(self, mechanism: str, username: str, password: str, client_nonce: str | None = None) -> None:
        self._scram = scram.mechanism_named(mechanism)
        self.mechanism = mechanism
        self.username, self._password = username, password
        self._nonce = client_nonce or scram.nonce()
        self._bare = ""
        self._server_signature: bytes | None = None
        self.complete = False

    def first(self) -> bytes:
        message, self._bare = scram.ClientFirst.build(self.username, self._nonce)
        return message

    def respond(self, challenge: bytes) -> bytes:
        if self._server_signature is None:
            return self._final(challenge)
        return self._verify(challenge)

    def _final(self, challenge: bytes) -> bytes:
        try:
            server_first = scram.ServerFirst.parse(challenge)
        except scram.ScramFormatError as error:
            raise SaslClientError(str(error)) from None
        if not server_first.nonce.startswith(self._nonce) or server_first.nonce == self._nonce:
            raise SaslClientError("the server's nonce does not extend the client's")
        if not self._scram.min_iterations <= server_first.iterations <= CLIENT_MAX_ITERATIONS:
            raise SaslClientError(f"the server asks {server_first.iterations} iterations (accepted: "
                                  f"{self._scram.min_iterations} to {CLIENT_MAX_ITERATIONS})")
        salted = scram.salted_password(self._scram, self._password, server_first.salt, server_first.iterations)
        without_proof = scram.ClientFinal.without_proof_of(server_first.nonce)
        message = scram.auth_message(self._bare, server_first.text, without_proof)
        self._server_signature = scram.server_signature(self._scram, scram.server_key(self._scram, salted), message)
        return scram.ClientFinal.build(without_proof, scram.client_proof(self._scram, salted, message))

    def _verify(self, challenge: bytes) -> bytes:
        try:
            final = scram.ServerFinal.parse(challenge)
        except scram.ScramFormatError as error:
            raise SaslClientError(str(error)) from None
        if final.error is not None:
            raise SaslClientError(f"the server refused the SCRAM exchange: {final.error}")
        assert self._server_signature is not None and final.signature is not None
        if not hmac.compare_digest(final.signature, self._server_signature):
            raise SaslClientError("the server's SCRAM signature is wrong: it does not hold this user's credential")
        self.complete = True
        return b""


def sasl_client(mechanism: str, username: str, password: str) -> PlainClient | ScramClient:
    """The client of ``mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); ValueError naming another."""
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in scram.MECHANISMS:
        return ScramClient(mechanism, username, password)
    raise ValueError(f"SASL mechanism {mechanism!r} is not one of PLAIN, {', '.join(scram.MECHANISMS)}")
