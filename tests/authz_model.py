"""A tiny authorizer for the request-check tests: a set of allowed ``(principal, operation, resource type, name)``
and a set of allowed ``(principal, operation)`` on the cluster; every ask is recorded."""

from __future__ import annotations

from idemcore.broker.security.session import KafkaPrincipal, Session
from idemcore.protocol.acls import AclOperation, AclResourceType

ALICE = Session(KafkaPrincipal("User", "alice"), "10.0.0.7")


class AllowSet:
    def __init__(self, allowed: set[tuple[str, AclOperation, AclResourceType, str]] | None = None,
                 cluster: set[tuple[str, AclOperation]] | None = None) -> None:
        self.allowed = set(allowed or ())
        self.cluster = set(cluster or ())
        self.asked: list[tuple[str, AclOperation, AclResourceType, str]] = []

    def allow(self, op: AclOperation, kind: AclResourceType, *names: str, principal: str = "User:alice") -> AllowSet:
        for name in names:
            self.allowed.add((principal, op, kind, name))
        return self

    def allow_cluster(self, *ops: AclOperation, principal: str = "User:alice") -> AllowSet:
        self.cluster.update((principal, op) for op in ops)
        return self

    def authorize(self, session: Session, operation: AclOperation, resource_type: AclResourceType,
                  name: str) -> bool:
        self.asked.append((str(session.principal), operation, resource_type, name))
        if resource_type is AclResourceType.CLUSTER:
            return (str(session.principal), operation) in self.cluster
        return (str(session.principal), operation, resource_type, name) in self.allowed

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: AclResourceType) -> bool:
        return any(p == str(session.principal) and o == operation and k == resource_type
                   for p, o, k, _ in self.allowed)
