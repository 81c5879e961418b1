"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: the mechanisms and their iteration bounds (``ScramMechanism``), the
key derivations shared by server and client (``ScramFormatter``), the credential a broker keeps
(``ScramCredential``) in Kafka's text form (``ScramCredentialUtils``), and the four messages of an exchange
(``ScramMessages``).

Kafka hashes the password's UTF-8 bytes without SASLprep, and so does this module: a client and a broker that
both follow Kafka agree on every password."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

#: Kafka's ``ZkAdminManager`` / ``ScramControlManager`` refuse credentials with more iterations than this.
MAX_ITERATIONS = 16384


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """A SCRAM mechanism: its SASL name, hash, the type AlterUserScramCredentials gives it (KIP-554) and the
    fewest iterations Kafka accepts."""

    name: str
    hash_name: str
    wire_type: int
    min_iterations: int = 4096

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_WIRE_TYPE: dict[int, ScramMechanism] = {m.wire_type: m for m in MECHANISMS.values()}


def mechanism_named(name: str) -> ScramMechanism:
    """The SCRAM mechanism called ``name``; ValueError naming it and the known ones otherwise."""
    try:
        return MECHANISMS[name]
    except KeyError:
        raise ValueError(f"SCRAM mechanism {name!r} is not one of {', '.join(MECHANISMS)}") from None


# ---------------------------------------------------------------- the formulas (RFC 5802 section 3)


def _utf8(text: str | bytes) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else text


def salted_password(mechanism: ScramMechanism, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, i)``: PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, _utf8(password), salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Client Key")


def stored_key(mechanism: ScramMechanism, key: bytes) -> bytes:
    """``H(ClientKey)``: what the server keeps in place of the client key."""
    return mechanism.digest(key)


def server_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Server Key")


def auth_message(client_first_bare: str, server_first: str, client_final_without_proof: str) -> bytes:
    return f"{client_first_bare},{server_first},{client_final_without_proof}".encode()


def client_signature(mechanism: ScramMechanism, stored: bytes, message: bytes) -> bytes:
    return mechanism.hmac(stored, message)


def xor(left: bytes, right: bytes) -> bytes:
    if len(left) != len(right):
        raise ValueError(f"cannot xor {len(left)} bytes with {len(right)}")
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def client_proof(mechanism: ScramMechanism, salted: bytes, message: bytes) -> bytes:
    """``ClientKey XOR HMAC(StoredKey, AuthMessage)``."""
    key = client_key(mechanism, salted)
    return xor(key, client_signature(mechanism, stored_key(mechanism, key), message))


def server_signature(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return mechanism.hmac(key, message)


def nonce() -> str:
    """A fresh random nonce: printable, without commas (Kafka's ``secureRandomString`` is base 36)."""
    return secrets.token_urlsafe(24)


# ---------------------------------------------------------------- the credential a broker keeps


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """Kafka's ``ScramCredential``: never the password, only what verifies a proof and signs an answer."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``: ``salt=..,stored_key=..,server_key=..,
        iterations=..`` with standard base64."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},server_key={_b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """The credential of Kafka's text form; ValueError in one line naming what is wrong."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, eq, value = part.partition("=")
            if not eq or key in fields:
                raise ValueError(f"SCRAM credential {text[:80]!r}: {part[:40]!r} is not one key=value")
            fields[key] = value
        wanted = {"salt", "stored_key", "server_key", "iterations"}
        if set(fields) != wanted:
            raise ValueError(f"SCRAM credential {text[:80]!r} has keys {sorted(fields)}, not {sorted(wanted)}")
        try:
            iterations = int(fields["iterations"])
            return cls(_unb64(fields["salt"]), _unb64(fields["stored_key"]), _unb64(fields["server_key"]),
                       iterations)
        except ValueError as error:
            raise ValueError(f"SCRAM credential {text[:80]!r}: {error}") from None


def credential_of_salted(mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The credential of a salted password (what AlterUserScramCredentials carries: Kafka's admin client salts
    the password itself, so the broker never sees it)."""
    return ScramCredential(salt, stored_key(mechanism, client_key(mechanism, salted)), server_key(mechanism, salted),
                           iterations)


def make_credential(mechanism: ScramMechanism, password: str | bytes, iterations: int,
                    salt: bytes | None = None) -> ScramCredential:
    """A credential for ``password`` with a fresh random salt (Kafka's ``ScramFormatter.generateCredential``)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_of_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError(f"{text[:40]!r} is not base64") from None


# ---------------------------------------------------------------- the messages (RFC 5802 section 7)


class ScramFormatError(ValueError):
    """A SCRAM message that does not follow RFC 5802's grammar."""


def sasl_name(username: str) -> str:
    """The username as a ``saslname``: ``,`` and ``=`` escaped as ``=2C`` and ``=3D``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(name: str) -> str:
    """The username of a ``saslname``; ScramFormatError for an ``=`` that starts no escape."""
    username = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in re.sub("=2C|=3D", "", name):
        raise ScramFormatError(f"invalid username {name[:80]!r}: '=' not escaped as =3D")
    return username


_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # printable ASCII but the comma
_CLIENT_FIRST = re.compile(
    rf"(?P<header>n,(?:a=(?P<authzid>[^,]*))?,)(?P<bare>n=(?P<name>[^,]*),r=(?P<nonce>{_PRINTABLE})(?P<extensions>(?:,[^,]*)*))")
_SERVER_FIRST = re.compile(rf"r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>[A-Za-z0-9+/]+=*),i=(?P<iterations>[0-9]+)"
                           r"(?:,.*)?")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<binding>[A-Za-z0-9+/]*=*),r=(?P<nonce>{_PRINTABLE})(?P<extensions>(?:,[^,]*)*)),"
    r"p=(?P<proof>[A-Za-z0-9+/]+=*)")
_SERVER_FINAL = re.compile(r"(?:v=(?P<signature>[A-Za-z0-9+/]+=*)|e=(?P<error>[^,]*))(?:,.*)?")


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramFormatError(f"the {what} is not UTF-8") from None


def _extensions(text: str, what: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in text.split(",")[1:]:
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise ScramFormatError(f"the {what}'s extension {part[:40]!r} is not key=value")
        found[key] = value
    return found


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """``n,[a=authzid],n=saslname,r=nonce[,ext=value...]``: the client's first message."""

    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str
    header: str = "n,,"

    @classmethod
    def parse(cls, data: bytes) -> ClientFirst:
        text = _text(data, "client's first message")
        found = _CLIENT_FIRST.fullmatch(text)
        if found is None:
            raise ScramFormatError(f"invalid SCRAM client first message {text[:80]!r}")
        return cls(found["authzid"] or "", username_of(found["name"]), found["nonce"],
                   _extensions(found["extensions"], "client's first message"), found["bare"], found["header"])

    @staticmethod
    def build(username: str, client_nonce: str, extensions: dict[str, str] | None = None) -> tuple[bytes, str]:
        """``(message, bare)``: the gs2 header ``n,,`` (no channel binding, no authzid) and the bare part."""
        bare = f"n={sasl_name(username)},r={client_nonce}" + "".join(
            f",{key}={value}" for key, value in (extensions or {}).items())
        return f"n,,{bare}".encode(), bare


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str
    salt: bytes
    iterations: int
    text: str

    @classmethod
    def parse(cls, data: bytes) -> ServerFirst:
        text = _text(data, "server's first message")
        found = _SERVER_FIRST.fullmatch(text)
        if found is None:
            raise ScramFormatError(f"invalid SCRAM server first message {text[:80]!r}")
        return cls(found["nonce"], _unb64(found["salt"]), int(found["iterations"]), text)

    @classmethod
    def build(cls, nonce_: str, salt: bytes, iterations: int) -> ServerFirst:
        return cls(nonce_, salt, iterations, f"r={nonce_},s={_b64(salt)},i={iterations}")


@dataclass(frozen=True, slots=True)
class ClientFinal:
    """``c=binding,r=nonce[,ext],p=proof``; ``without_proof`` is what the auth message ends with."""

    binding: bytes
    nonce: str
    proof: bytes
    without_proof: str

    @classmethod
    def parse(cls, data: bytes) -> ClientFinal:
        text = _text(data, "client's final message")
        found = _CLIENT_FINAL.fullmatch(text)
        if found is None:  # not echoed: it may hold a proof
            raise ScramFormatError(f"invalid SCRAM client final message ({len(data)} bytes)")
        try:
            return cls(_unb64(found["binding"]), found["nonce"], _unb64(found["proof"]), found["without_proof"])
        except ValueError as error:
            raise ScramFormatError(f"invalid SCRAM client final message: {error}") from None

    @staticmethod
    def without_proof_of(nonce_: str) -> str:
        """The final message before its proof: binding ``biws`` (base64 of the gs2 header ``n,,``)."""
        return f"c={_b64(b'n,,')},r={nonce_}"

    @staticmethod
    def build(without_proof: str, proof: bytes) -> bytes:
        return f"{without_proof},p={_b64(proof)}".encode()


@dataclass(frozen=True, slots=True)
class ServerFinal:
    signature: bytes | None
    error: str | None

    @classmethod
    def parse(cls, data: bytes) -> ServerFinal:
        text = _text(data, "server's final message")
        found = _SERVER_FINAL.fullmatch(text)
        if found is None:
            raise ScramFormatError(f"invalid SCRAM server final message {text[:80]!r}")
        signature = found["signature"]
        return cls(_unb64(signature) if signature else None, found["error"])

    @staticmethod
    def build(signature: bytes) -> bytes:
        return f"v={_b64(signature)}".encode()
