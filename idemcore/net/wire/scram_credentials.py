"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51), v0 (their only version; KIP-554),
on the wire in both directions: the server's translations (``SCRAM_CREDENTIAL_APIS``, in
:data:`idemcore.net.wire.apis.APIS`) and the client's (``SCRAM_CREDENTIAL_CLIENT_APIS``, registered by
:mod:`idemcore.net.wire.client` as the group admin APIs are)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.messages import Response
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
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.frames import make, nested, optional_str, response_class
from idemcore.net.wire.schema import load_request_schema
from idemcore.net.wire.transactions import NO_THROTTLE, answer_of

DESCRIBE_KEY, ALTER_KEY = 50, 51


# ---------------------------------------------------------------- server side


def _describe_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    users = None if body.users is None else tuple(str(user.name) for user in body.users)
    return DescribeUserScramCredentialsRequest(users, correlation_id), None


def _describe_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, DescribeUserScramCredentialsResponse)
    cls = response_class(body)
    result_cls, info_cls = nested(cls, "DescribeUserScramCredentialsResult"), nested(cls, "CredentialInfo")
    return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(response.error_code),
                error_message=response.error_message, results=tuple(
                    make(result_cls, user=r.user, error_code=WireError(r.error_code), error_message=r.error_message,
                         credential_infos=tuple(make(info_cls, mechanism=i.mechanism, iterations=i.iterations)
                                                for i in r.credentials)) for r in response.results))


def _alter_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return AlterUserScramCredentialsRequest(
        tuple(ScramCredentialDeletion(str(d.name), int(d.mechanism)) for d in body.deletions),
        tuple(ScramCredentialUpsertion(str(u.name), int(u.mechanism), int(u.iterations), bytes(u.salt),
                                       bytes(u.salted_password)) for u in body.upsertions),
        correlation_id), None


def _alter_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, AlterUserScramCredentialsResponse)
    cls = response_class(body)
    result_cls = nested(cls, "AlterUserScramCredentialsResult")
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(
        make(result_cls, user=r.user, error_code=WireError(r.error_code), error_message=r.error_message)
        for r in response.results))


DESCRIBE_USER_SCRAM_CREDENTIALS = WireApi(DESCRIBE_KEY, "DescribeUserScramCredentials", 0, 0,
                                          _describe_to_message, _describe_to_wire)
ALTER_USER_SCRAM_CREDENTIALS = WireApi(ALTER_KEY, "AlterUserScramCredentials", 0, 0,
                                       _alter_to_message, _alter_to_wire)
SCRAM_CREDENTIAL_APIS = (DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS)


# ---------------------------------------------------------------- client side


def _encode_describe(request: DescribeUserScramCredentialsRequest, version: int) -> Any:
    cls = load_request_schema(DESCRIBE_KEY, version)
    user_cls = nested(cls, "UserName")
    users = None if request.users is None else tuple(make(user_cls, name=name) for name in request.users)
    return make(cls, users=users)


def _decode_describe(request: DescribeUserScramCredentialsRequest, version: int, body: Any
                     ) -> DescribeUserScramCredentialsResponse:
    return DescribeUserScramCredentialsResponse(int(body.error_code), tuple(
        DescribedUser(str(r.user), int(r.error_code), optional_str(r.error_message),
                      tuple(CredentialInfo(int(i.mechanism), int(i.iterations)) for i in r.credential_infos))
        for r in body.results), optional_str(body.error_message), request.request_id)


def _encode_alter(request: AlterUserScramCredentialsRequest, version: int) -> Any:
    cls = load_request_schema(ALTER_KEY, version)
    deletion_cls, upsertion_cls = nested(cls, "ScramCredentialDeletion"), nested(cls, "ScramCredentialUpsertion")
    return make(cls, deletions=tuple(make(deletion_cls, name=d.user, mechanism=d.mechanism) for d in request.deletions),
                upsertions=tuple(make(upsertion_cls, name=u.user, mechanism=u.mechanism, iterations=u.iterations,
                                      salt=u.salt, salted_password=u.salted_password) for u in request.upsertions))


def _decode_alter(request: AlterUserScramCredentialsRequest, version: int, body: Any
                  ) -> AlterUserScramCredentialsResponse:
    return AlterUserScramCredentialsResponse(tuple(
        AlteredUser(str(r.user), int(r.error_code), optional_str(r.error_message)) for r in body.results),
        request.request_id)


Encode = Callable[[Any, int], Any]
Decode = Callable[[Any, int, Any], Any]

#: ``(request class, key, name, min version, max version, encode, decode)`` of each API.
SCRAM_CREDENTIAL_CLIENT_APIS: tuple[tuple[type, int, str, int, int, Encode, Decode], ...] = (
    (DescribeUserScramCredentialsRequest, DESCRIBE_KEY, "DescribeUserScramCredentials", 0, 0, _encode_describe,
     _decode_describe),
    (AlterUserScramCredentialsRequest, ALTER_KEY, "AlterUserScramCredentials", 0, 0, _encode_alter, _decode_alter),
)
