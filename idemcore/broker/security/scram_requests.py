"""The broker's answers to DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), with Kafka's
checks and messages (``ZkAdminManager`` / ``ScramControlManager``): an empty user name, an unknown mechanism,
iterations outside 4096..16384 (UNACCEPTABLE_CREDENTIAL), a user's credential named twice (DUPLICATE_RESOURCE),
deleting or describing what does not exist (RESOURCE_NOT_FOUND). Each user's changes are made together or not
at all. Who may call them (ALTER / DESCRIBE on the cluster) is the request checks' business."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any, Protocol

from idemcore.broker.security.scram_credentials import Credentials, Refusal, ScramStoreError
from idemcore.net import scram
from idemcore.net.scram_credentials import (
    AlteredUser,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CredentialInfo,
    DescribedUser,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

EMPTY_USER = "Username must not be empty"


class CredentialStore(Protocol):
    def user(self, name: str) -> Credentials: ...

    def users(self) -> dict[str, Credentials]: ...

    def alter(self, user: str, upserts: dict[str, scram.ScramCredential], deletions: frozenset[str]) -> Refusal: ...


def _infos(credentials: Credentials) -> tuple[CredentialInfo, ...]:
    types = sorted((scram.MECHANISMS[name].wire_type, c.iterations) for name, c in credentials.items())
    return tuple(CredentialInfo(wire_type, iterations) for wire_type, iterations in types)


def describe(store: CredentialStore, request: DescribeUserScramCredentialsRequest
             ) -> DescribeUserScramCredentialsResponse:
    try:
        if not request.users:
            results = tuple(DescribedUser(name, int(ErrorCode.NONE), None, _infos(credentials))
                            for name, credentials in sorted(store.users().items()))
        else:
            counts = collections.Counter(request.users)
            answered: list[DescribedUser] = []
            for name in dict.fromkeys(request.users):
                if not name:
                    answered.append(DescribedUser(name, int(ErrorCode.RESOURCE_NOT_FOUND), EMPTY_USER))
                elif counts[name] > 1:
                    answered.append(DescribedUser(name, int(ErrorCode.DUPLICATE_RESOURCE), "Cannot describe SCRAM "
                                                  f"credentials for the same user twice in a single request: {name}"))
                elif credentials := store.user(name):
                    answered.append(DescribedUser(name, int(ErrorCode.NONE), None, _infos(credentials)))
                else:
                    answered.append(DescribedUser(name, int(ErrorCode.RESOURCE_NOT_FOUND),
                                                  f"Attempt to describe a user credential that does not exist: {name}"))
            results = tuple(answered)
    except ScramStoreError as error:
        return DescribeUserScramCredentialsResponse(int(ErrorCode.UNKNOWN_SERVER_ERROR), (), str(error),
                                                    request.request_id)
    return DescribeUserScramCredentialsResponse(int(ErrorCode.NONE), results, None, request.request_id)


def _check(change: ScramCredentialDeletion | ScramCredentialUpsertion) -> tuple[int, str] | None:
    """Kafka's per-change validation, in its order."""
    if not change.user:
        return int(ErrorCode.UNACCEPTABLE_CREDENTIAL), EMPTY_USER
    mechanism = scram.BY_WIRE_TYPE.get(change.mechanism)
    if mechanism is None:
        return int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), "Unknown SCRAM mechanism"
    if isinstance(change, ScramCredentialUpsertion):
        if change.iterations < mechanism.min_iterations:
            return int(ErrorCode.UNACCEPTABLE_CREDENTIAL), "Too few iterations"
        if change.iterations > scram.MAX_ITERATIONS:
            return int(ErrorCode.UNACCEPTABLE_CREDENTIAL), "Too many iterations"
        if not change.salt or not change.salted_password:
            return int(ErrorCode.UNACCEPTABLE_CREDENTIAL), "The salt and the salted password must not be empty"
    return None


def alter(store: CredentialStore, request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    changes: list[ScramCredentialDeletion | ScramCredentialUpsertion] = [*request.deletions, *request.upsertions]
    order = list(dict.fromkeys(change.user for change in changes))
    refused: dict[str, tuple[int, str]] = {}
    seen = collections.Counter((change.user, change.mechanism) for change in changes)
    for change in changes:
        if change.user in refused:
            continue
        problem = _check(change)
        if problem is None and seen[(change.user, change.mechanism)] > 1:
            problem = int(ErrorCode.DUPLICATE_RESOURCE), "A user credential cannot be altered twice in the same request"
        if problem is not None:
            refused[change.user] = problem
    results: list[AlteredUser] = []
    for user in order:
        if user in refused:
            results.append(AlteredUser(user, *refused[user]))
            continue
        upserts = {scram.BY_WIRE_TYPE[u.mechanism].name: scram.credential_of_salted(
            scram.BY_WIRE_TYPE[u.mechanism], u.salted_password, u.salt, u.iterations)
            for u in request.upsertions if u.user == user}
        deletions = frozenset(scram.BY_WIRE_TYPE[d.mechanism].name for d in request.deletions if d.user == user)
        try:
            refusal = store.alter(user, upserts, deletions)
        except (ScramStoreError, OSError) as error:
            log.warning("SCRAM credentials of %r not changed: %s", user, error)
            results.append(AlteredUser(user, int(ErrorCode.UNKNOWN_SERVER_ERROR), str(error)))
            continue
        if refusal is not None:
            results.append(AlteredUser(user, *refusal))
        else:
            log.info("SCRAM credentials of %r changed: set %s, deleted %s", user, sorted(upserts) or "none",
                     sorted(deletions) or "none")
            results.append(AlteredUser(user, int(ErrorCode.NONE)))
    return AlterUserScramCredentialsResponse(tuple(results), request.request_id)


def scram_credential_handlers(store_of: Callable[[], CredentialStore]) -> dict[type, Callable[[Any], Any]]:
    """The handlers ``Broker`` registers (``store_of``: the broker's store, looked up per request)."""
    return {
        DescribeUserScramCredentialsRequest: lambda request: describe(store_of(), request),
        AlterUserScramCredentialsRequest: lambda request: alter(store_of(), request),
    }


def refused_alter(request: AlterUserScramCredentialsRequest, code: int) -> AlterUserScramCredentialsResponse:
    """Every user of the request answered ``code`` (Kafka's ``AlterUserScramCredentialsRequest.getErrorResponse``,
    as KafkaApis answers a principal without ALTER on the cluster)."""
    changes: list[ScramCredentialDeletion | ScramCredentialUpsertion] = [*request.deletions, *request.upsertions]
    users = dict.fromkeys(change.user for change in changes)
    return AlterUserScramCredentialsResponse(tuple(AlteredUser(user, code) for user in users), request.request_id)
