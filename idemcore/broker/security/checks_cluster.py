"""The checks of the requests on the cluster and its settings: the inter-broker requests (CLUSTER_ACTION), ElectLeaders,
the config APIs (DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, group or cluster) and, by message type name, the ACL
and SCRAM credential APIs (ALTER / DESCRIBE on the cluster)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from idemcore.broker.security.request_context import (
    CHECKED_BY_NAME,
    CLUSTER,
    CLUSTER_DENIED,
    GROUP,
    GROUP_DENIED,
    TOPIC,
    TOPIC_DENIED,
    Handle,
    Op,
    RequestContext,
    RequestRefused,
    check,
    pick,
    split,
)
from idemcore.broker.security.scram_requests import refused_alter
from idemcore.net.acls import refused_create_acls, refused_delete_acls
from idemcore.net.configs import (
    AlterConfigsResponse,
    AlteredResource,
    DescribeConfigsResponse,
    DescribedResource,
    IncrementalAlterConfigsResponse,
    ResourceType,
)
from idemcore.net.messages import (
    PartitionResponse,
    TxnMarkerResult,
    WriteTxnMarkersResponse,
)
from idemcore.net.replication import (
    ElectLeadersResponse,
    LeaderAndIsrResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
)
from idemcore.protocol.acls import CLUSTER_NAME, AclOperation, AclResourceType
from idemcore.protocol.codes import ErrorCode

# ---------------------------------------------------------------- inter-broker requests: CLUSTER_ACTION


@check("WriteTxnMarkersRequest")
def _write_txn_markers(c: RequestContext, handle: Handle, r: Any) -> Any:
    if c.cluster(Op.CLUSTER_ACTION):
        return handle(r)
    return WriteTxnMarkersResponse(r.request_id, tuple(
        TxnMarkerResult(m.producer_id, tuple(PartitionResponse(t, p, CLUSTER_DENIED) for t, p in m.partitions))
        for m in r.markers))


def _controller_request(response: Callable[..., Any]) -> Callable[[RequestContext, Handle, Any], Any]:
    """The check of a controller's request answered per partition (LeaderAndIsr, StopReplica): CLUSTER_ACTION, else
    every partition denied."""
    def checked(c: RequestContext, handle: Handle, r: Any) -> Any:
        if c.cluster(Op.CLUSTER_ACTION):
            return handle(r)
        return response(CLUSTER_DENIED, tuple((p.topic, p.partition, CLUSTER_DENIED) for p in r.partitions),
                        r.request_id)
    return checked


check("LeaderAndIsrRequest")(_controller_request(LeaderAndIsrResponse))
check("StopReplicaRequest")(_controller_request(StopReplicaResponse))


@check("UpdateMetadataRequest")
def _update_metadata(c: RequestContext, handle: Handle, r: Any) -> Any:
    if c.cluster(Op.CLUSTER_ACTION):
        return handle(r)
    return UpdateMetadataResponse(CLUSTER_DENIED, r.request_id)




@check("ElectLeadersRequest")
def _elect_leaders(c: RequestContext, handle: Handle, r: Any) -> Any:
    """ALTER on the cluster."""
    if c.cluster(Op.ALTER):
        return handle(r)
    return ElectLeadersResponse(CLUSTER_DENIED, tuple((t, p, CLUSTER_DENIED, None) for t, p in r.partitions or ()),
                                r.request_id)




# ---------------------------------------------------------------- configs

#: The message each refusal carries where Kafka's response has one (its exceptions' default messages).
_DENIED_MESSAGES = {TOPIC_DENIED: "Topic authorization failed.", GROUP_DENIED: "Group authorization failed.",
                    CLUSTER_DENIED: "Cluster authorization failed."}
#: Per config resource type: the ACL resource its check names and the refusal's code.
_CONFIG_RESOURCES: dict[int, tuple[AclResourceType, int]] = {
    ResourceType.TOPIC: (TOPIC, TOPIC_DENIED),
    ResourceType.BROKER: (CLUSTER, CLUSTER_DENIED),
    ResourceType.BROKER_LOGGER: (CLUSTER, CLUSTER_DENIED),
    ResourceType.CLIENT_METRICS: (CLUSTER, CLUSTER_DENIED),
    ResourceType.GROUP: (GROUP, GROUP_DENIED),
}


def _config_refusal(c: RequestContext, op: AclOperation, resource: Any,
                    legal: frozenset[int]) -> tuple[int, str] | None:
    """The code and message refusing ``op`` on a config resource; None when allowed."""
    kind_code = _CONFIG_RESOURCES.get(resource.resource_type) if resource.resource_type in legal else None
    if kind_code is None:
        return int(ErrorCode.INVALID_REQUEST), f"Unexpected resource type {resource.resource_type} for resource " \
                                               f"{resource.resource_name}"
    kind, code = kind_code
    name = CLUSTER_NAME if kind is CLUSTER else resource.resource_name
    return None if c.allowed(op, kind, name) else (code, _DENIED_MESSAGES[code])


def _configs(c: RequestContext, handle: Handle, r: Any, op: AclOperation, legal: frozenset[int], answer_type: type,
             empty: Any) -> Any:
    resources = tuple(r.resources)
    refusals: list[Any] = []
    for resource in resources:
        refusal = _config_refusal(c, op, resource, legal)
        refusals.append(None if refusal is None else answer_type(resource.resource_type, resource.resource_name,
                                                                 refusal[0], refusal[1]))
    key = lambda item: (item.resource_type, item.resource_name)  # noqa: E731
    return split(handle, r, resources, refusals, lambda kept: dataclasses.replace(r, resources=pick(resources, kept)),
                  "results", empty, key, key)


_ALL_CONFIG_TYPES = frozenset(_CONFIG_RESOURCES)


@check("DescribeConfigsRequest")
def _describe_configs(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DESCRIBE_CONFIGS on each topic (or group), on the cluster for the broker's."""
    return _configs(c, handle, r, Op.DESCRIBE_CONFIGS, _ALL_CONFIG_TYPES, DescribedResource,
                    DescribeConfigsResponse((), r.request_id))


@check("AlterConfigsRequest")
def _alter_configs(c: RequestContext, handle: Handle, r: Any) -> Any:
    """ALTER_CONFIGS on each topic, on the cluster for the broker's (the legacy API takes no other type)."""
    return _configs(c, handle, r, Op.ALTER_CONFIGS, frozenset({ResourceType.TOPIC, ResourceType.BROKER}),
                    AlteredResource, AlterConfigsResponse((), r.request_id))


@check("IncrementalAlterConfigsRequest")
def _incremental_alter_configs(c: RequestContext, handle: Handle, r: Any) -> Any:
    """ALTER_CONFIGS on each topic (or group), on the cluster for the broker's and its loggers."""
    return _configs(c, handle, r, Op.ALTER_CONFIGS, _ALL_CONFIG_TYPES, AlteredResource,
                    IncrementalAlterConfigsResponse((), r.request_id))




# ---------------------------------------------------------------- ACL and SCRAM credential APIs (by name)

#: The cluster operation each ACL and SCRAM credential API needs (Kafka's ``AclApis`` and KIP-554's handlers).
#: Their messages arrive with the ACL (net/acls.py) and SASL (net/scram_credentials.py) work; a refusal is
#: built by :data:`CLUSTER_REFUSALS` when it has an entry for the type, else as :func:`_generic_refusal` can.
CLUSTER_CHECKED: dict[str, AclOperation] = {
    "CreateAclsRequest": Op.ALTER,
    "DeleteAclsRequest": Op.ALTER,
    "DescribeAclsRequest": Op.DESCRIBE,
    "AlterUserScramCredentialsRequest": Op.ALTER,
    "DescribeUserScramCredentialsRequest": Op.DESCRIBE,
}
#: Per-item refusals (request -> response with every item CLUSTER_AUTHORIZATION_FAILED) where the response has
#: per-item results without defaults (CreateAcls' and DeleteAcls' results, ...).
CLUSTER_REFUSALS: dict[str, Callable[[Any, int], Any]] = {
    "CreateAclsRequest": refused_create_acls,
    "DeleteAclsRequest": refused_delete_acls,
    "AlterUserScramCredentialsRequest": refused_alter,
}


def _generic_refusal(request: Any, code: int) -> Any:
    """The response class beside the request's (``XRequest`` -> ``XResponse`` in its module) with ``error_code``
    and ``request_id`` set; :class:`RequestRefused` when it cannot be built so (a field with no default)."""
    name = type(request).__name__
    response_type = getattr(sys.modules.get(type(request).__module__), name[:-len("Request")] + "Response", None)
    if not isinstance(response_type, type) or not dataclasses.is_dataclass(response_type):
        raise RequestRefused(f"{name} refused: no response type to answer CLUSTER_AUTHORIZATION_FAILED with")
    values = {"error_code": code, "request_id": getattr(request, "request_id", 0)}
    fields = {f.name: f for f in dataclasses.fields(response_type)}
    for key in [key for key in values if key not in fields]:
        del values[key]
    missing = [f.name for f in fields.values() if f.name not in values and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing or "error_code" not in values:
        raise RequestRefused(f"{name} refused: {response_type.__name__} needs {missing or ['error_code']} filled")
    return response_type(**values)


def _cluster_checked(c: RequestContext, handle: Handle, r: Any) -> Any:
    name = type(r).__name__
    if c.cluster(CLUSTER_CHECKED[name]):
        return handle(r)
    refusal = CLUSTER_REFUSALS.get(name, _generic_refusal)
    return refusal(r, CLUSTER_DENIED)


for _name in CLUSTER_CHECKED:
    CHECKED_BY_NAME[_name] = _cluster_checked
