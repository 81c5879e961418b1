"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) as messages. A mechanism travels as its
KIP-554 type (0 unknown, 1 SCRAM-SHA-256, 2 SCRAM-SHA-512); an upsertion carries the salted password, never the
password (the client salts it)."""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_MECHANISM = 0


@dataclass(slots=True, frozen=True)
class DescribeUserScramCredentialsRequest:
    """``users`` None (or empty): every user that has a credential."""

    users: tuple[str, ...] | None = None
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class CredentialInfo:
    mechanism: int
    iterations: int


@dataclass(slots=True, frozen=True)
class DescribedUser:
    user: str
    error_code: int
    error_message: str | None = None
    credentials: tuple[CredentialInfo, ...] = ()


@dataclass(slots=True, frozen=True)
class DescribeUserScramCredentialsResponse:
    error_code: int
    results: tuple[DescribedUser, ...] = ()
    error_message: str | None = None
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ScramCredentialDeletion:
    user: str
    mechanism: int


@dataclass(slots=True, frozen=True)
class ScramCredentialUpsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:  # the salted password is as good as the password against this server
        return f"ScramCredentialUpsertion({self.user!r}, {self.mechanism}, {self.iterations})"


@dataclass(slots=True, frozen=True)
class AlterUserScramCredentialsRequest:
    deletions: tuple[ScramCredentialDeletion, ...] = ()
    upsertions: tuple[ScramCredentialUpsertion, ...] = ()
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class AlteredUser:
    user: str
    error_code: int
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class AlterUserScramCredentialsResponse:
    """One result per user named in the request: each user's changes are made together or not at all."""

    results: tuple[AlteredUser, ...]
    request_id: int = 0
