"""The ACL requests and responses (Kafka's CreateAcls, DescribeAcls and DeleteAcls, KIP-140), over the model of
:mod:`idemcore.protocol.acls`. Like :mod:`idemcore.net.messages`, every response carries its request's
``request_id``; a broker without an authorizer answers each SECURITY_DISABLED, as Kafka's does."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.protocol.acls import AclBinding, AclBindingFilter
from idemcore.protocol.codes import ErrorCode


@dataclass(slots=True, frozen=True)
class CreateAclsRequest:
    creations: tuple[AclBinding, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class AclCreationResult:
    """One creation's outcome, in the request's order."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class CreateAclsResponse:
    results: tuple[AclCreationResult, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class DescribeAclsRequest:
    acl_filter: AclBindingFilter
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class DescribeAclsResponse:
    """The ACLs the filter matched, or why none were looked for."""

    error_code: int = ErrorCode.NONE
    bindings: tuple[AclBinding, ...] = ()
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class DeleteAclsRequest:
    filters: tuple[AclBindingFilter, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class DeletedAcl:
    """An ACL a filter matched and deleted (or failed to: its error)."""

    binding: AclBinding
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class DeleteAclsFilterResult:
    """One filter's outcome, in the request's order: its error, or the ACLs it deleted."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    deleted: tuple[DeletedAcl, ...] = ()


@dataclass(slots=True, frozen=True)
class DeleteAclsResponse:
    results: tuple[DeleteAclsFilterResult, ...]
    request_id: int = 0


AclRequest = CreateAclsRequest | DescribeAclsRequest | DeleteAclsRequest
AclResponse = CreateAclsResponse | DescribeAclsResponse | DeleteAclsResponse


def refused_create_acls(request: CreateAclsRequest, code: int) -> CreateAclsResponse:
    """The whole request refused with ``code`` (as Kafka's ``getErrorResponse``: every creation gets it)."""
    return CreateAclsResponse(tuple(AclCreationResult(code) for _ in request.creations), request.request_id)


def refused_delete_acls(request: DeleteAclsRequest, code: int) -> DeleteAclsResponse:
    """The whole request refused with ``code``: every filter gets it, nothing deleted."""
    return DeleteAclsResponse(tuple(DeleteAclsFilterResult(code) for _ in request.filters), request.request_id)
