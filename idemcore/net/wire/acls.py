"""The ACL APIs on the wire, server side: CreateAcls (key 30), DescribeAcls (29) and DeleteAcls (31), messages
in :mod:`idemcore.net.acls`.

v1–3 of each are served, the versions kio has (Kafka 4 dropped v0, which had no pattern types; v1 added them,
KIP-290; v2+ flexible). A code this broker does not know (an operation, resource type, pattern type or
permission) is read as UNKNOWN, as Kafka's ``fromCode`` reads it, and the ACL or filter holding it is refused
INVALID_REQUEST rather than the request failing to decode."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.acls import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from idemcore.net.messages import Response
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.frames import make, nested, optional_str, response_class
from idemcore.net.wire.transactions import NO_THROTTLE, answer_of
from idemcore.protocol.acls import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
)

CREATE_ACLS_KEY, DESCRIBE_ACLS_KEY, DELETE_ACLS_KEY = 30, 29, 31
#: The versions served (and, client side, sent) of each.
ACL_VERSIONS = (1, 3)

_E = TypeVar("_E", bound=IntEnum)


def code_of(kind: type[_E], value: Any) -> _E:
    """``value`` as a member of ``kind``; UNKNOWN (0) for a code it lacks (Kafka's ``fromCode``)."""
    try:
        return kind(int(value))
    except ValueError:
        return kind(0)


def binding_of(resource_type: Any, name: Any, pattern_type: Any, principal: Any, host: Any, operation: Any,
               permission: Any) -> AclBinding:
    return AclBinding(ResourcePattern(code_of(AclResourceType, resource_type), str(name),
                                      code_of(PatternType, pattern_type)),
                      AccessControlEntry(str(principal), str(host), code_of(AclOperation, operation),
                                         code_of(AclPermissionType, permission)))


def filter_of(body: Any) -> AclBindingFilter:
    """A DescribeAcls request's or DeleteAcls filter's fields as a filter."""
    return AclBindingFilter(
        ResourcePatternFilter(code_of(AclResourceType, body.resource_type_filter),
                              optional_str(body.resource_name_filter), code_of(PatternType, body.pattern_type_filter)),
        AccessControlEntryFilter(optional_str(body.principal_filter), optional_str(body.host_filter),
                                 code_of(AclOperation, body.operation),
                                 code_of(AclPermissionType, body.permission_type)))


def binding_fields(binding: AclBinding) -> dict[str, Any]:
    """The fields of a DescribeAcls / DeleteAcls answer naming ``binding``, by kio's names."""
    p, e = binding.pattern, binding.entry
    return {"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
            "principal": e.principal, "host": e.host, "operation": int(e.operation),
            "permission_type": int(e.permission)}


# ---------------------------------------------------------------- CreateAcls (key 30)


def _create_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return CreateAclsRequest(tuple(
        binding_of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
                   c.permission_type) for c in body.creations), correlation_id), None


def _create_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, CreateAclsResponse)
    cls = response_class(body)
    result_cls = nested(cls, "AclCreationResult")
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(
        make(result_cls, error_code=WireError(r.error_code), error_message=r.error_message)
        for r in response.results))


CREATE_ACLS = WireApi(CREATE_ACLS_KEY, "CreateAcls", *ACL_VERSIONS, _create_to_message, _create_to_wire)


# ---------------------------------------------------------------- DescribeAcls (key 29)


def _describe_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return DescribeAclsRequest(filter_of(body), correlation_id), None


def _describe_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, DescribeAclsResponse)
    cls = response_class(body)
    resource_cls = nested(cls, "DescribeAclsResource")
    acl_cls = nested(cls, "AclDescription")
    by_resource: dict[ResourcePattern, list[Any]] = {}
    for binding in response.bindings:
        fields = binding_fields(binding)
        by_resource.setdefault(binding.pattern, []).append(make(acl_cls, **fields))
    return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(response.error_code),
                error_message=response.error_message, resources=tuple(
                    make(resource_cls, resource_type=int(p.resource_type), resource_name=p.name,
                         pattern_type=int(p.pattern_type), acls=tuple(acls)) for p, acls in by_resource.items()))


DESCRIBE_ACLS = WireApi(DESCRIBE_ACLS_KEY, "DescribeAcls", *ACL_VERSIONS, _describe_to_message, _describe_to_wire)


# ---------------------------------------------------------------- DeleteAcls (key 31)


def _delete_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[Any, None]:
    return DeleteAclsRequest(tuple(filter_of(f) for f in body.filters), correlation_id), None


def _delete_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, DeleteAclsResponse)
    cls = response_class(body)
    result_cls = nested(cls, "DeleteAclsFilterResult")
    matching_cls = nested(cls, "DeleteAclsMatchingAcl")
    return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(
        make(result_cls, error_code=WireError(r.error_code), error_message=r.error_message, matching_acls=tuple(
            make(matching_cls, error_code=WireError(d.error_code), error_message=d.error_message,
                 **binding_fields(d.binding)) for d in r.deleted))
        for r in response.results))


DELETE_ACLS = WireApi(DELETE_ACLS_KEY, "DeleteAcls", *ACL_VERSIONS, _delete_to_message, _delete_to_wire)

ACL_APIS = (DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS)
