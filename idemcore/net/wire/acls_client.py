"""The client direction of the ACL APIs (messages in :mod:`idemcore.net.acls`): how idemcore's clients write
CreateAcls, DescribeAcls and DeleteAcls v1–3 and read the answers. :mod:`idemcore.net.wire.client` registers these
entries in its table (``ACL_CLIENT_APIS``, in the shape of ``GROUP_ADMIN_CLIENT_APIS``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idemcore.net.acls import (
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeletedAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from idemcore.net.wire.acls import (
    ACL_VERSIONS,
    CREATE_ACLS_KEY,
    DELETE_ACLS_KEY,
    DESCRIBE_ACLS_KEY,
    binding_of,
)
from idemcore.net.wire.frames import make, nested, optional_str
from idemcore.net.wire.schema import load_request_schema
from idemcore.protocol.acls import AclBindingFilter


def _filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    p, e = acl_filter.pattern, acl_filter.entry
    return {"resource_type_filter": int(p.resource_type), "resource_name_filter": p.name,
            "pattern_type_filter": int(p.pattern_type), "principal_filter": e.principal, "host_filter": e.host,
            "operation": int(e.operation), "permission_type": int(e.permission)}


def _encode_create(request: CreateAclsRequest, version: int) -> Any:
    cls = load_request_schema(CREATE_ACLS_KEY, version)
    creation_cls = nested(cls, "AclCreation")
    return make(cls, creations=tuple(make(
        creation_cls, resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
        resource_pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal, host=b.entry.host,
        operation=int(b.entry.operation), permission_type=int(b.entry.permission)) for b in request.creations))


def _decode_create(request: CreateAclsRequest, version: int, body: Any) -> CreateAclsResponse:
    return CreateAclsResponse(tuple(AclCreationResult(int(r.error_code), optional_str(r.error_message))
                                    for r in body.results), request.request_id)


def _encode_describe(request: DescribeAclsRequest, version: int) -> Any:
    return make(load_request_schema(DESCRIBE_ACLS_KEY, version), **_filter_fields(request.acl_filter))


def _decode_describe(request: DescribeAclsRequest, version: int, body: Any) -> DescribeAclsResponse:
    bindings = tuple(binding_of(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                                a.permission_type) for r in body.resources for a in r.acls)
    return DescribeAclsResponse(int(body.error_code), bindings, request.request_id, optional_str(body.error_message))


def _encode_delete(request: DeleteAclsRequest, version: int) -> Any:
    cls = load_request_schema(DELETE_ACLS_KEY, version)
    filter_cls = nested(cls, "DeleteAclsFilter")
    return make(cls, filters=tuple(make(filter_cls, **_filter_fields(f)) for f in request.filters))


def _decode_delete(request: DeleteAclsRequest, version: int, body: Any) -> DeleteAclsResponse:
    return DeleteAclsResponse(tuple(DeleteAclsFilterResult(int(r.error_code), optional_str(r.error_message), tuple(
        DeletedAcl(binding_of(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                              m.permission_type), int(m.error_code), optional_str(m.error_message))
        for m in r.matching_acls)) for r in body.filter_results), request.request_id)


Encode = Callable[[Any, int], Any]
Decode = Callable[[Any, int, Any], Any]

#: ``(request class, key, name, min version, max version, encode, decode)`` of each API.
ACL_CLIENT_APIS: tuple[tuple[type, int, str, int, int, Encode, Decode], ...] = (
    (CreateAclsRequest, CREATE_ACLS_KEY, "CreateAcls", *ACL_VERSIONS, _encode_create, _decode_create),
    (DescribeAclsRequest, DESCRIBE_ACLS_KEY, "DescribeAcls", *ACL_VERSIONS, _encode_describe, _decode_describe),
    (DeleteAclsRequest, DELETE_ACLS_KEY, "DeleteAcls", *ACL_VERSIONS, _encode_delete, _decode_delete),
)
