"""Who sent a request: Kafka's ``KafkaPrincipal`` and ``Session`` (principal, client address), with the
listener the connection came in on, and the :class:`Authorizer` protocol every request is checked through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from idemcore.protocol.acls import AclOperation, AclResourceType


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``type:name``, as Kafka writes principals in ACLs and ``super.users`` (``User:alice``)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` (Kafka's ``SecurityUtils.parseKafkaPrincipal``: the type is what comes before the first
        colon); a ValueError in one line naming the text otherwise."""
        principal_type, colon, name = text.partition(":")
        if not colon or not principal_type or not name:
            raise ValueError(f"principal {text!r} is not of the form type:name (as User:alice)")
        return cls(principal_type, name)


#: Who a connection is before (or without) authentication: Kafka's ``KafkaPrincipal.ANONYMOUS``.
ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
#: Any user, in an ACL (``User:*``, Kafka's ``WILDCARD_PRINCIPAL``).
WILDCARD_PRINCIPAL = KafkaPrincipal("User", "*")


@dataclass(frozen=True, slots=True)
class Session:
    """One authenticated connection: its principal, the client's IP address (what ACL hosts match), and the
    listener (name and security protocol) it came in on."""

    principal: KafkaPrincipal
    client_host: str
    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"


class Authorizer(Protocol):
    """What request checks ask (Kafka's ``Authorizer.authorize`` and ``authorizeByResourceType``)."""

    def authorize(self, session: Session, operation: AclOperation, resource_type: AclResourceType,
                  name: str) -> bool:
        """May ``session`` do ``operation`` on the resource ``resource_type`` ``name``?"""
        ...

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: AclResourceType) -> bool:
        """May ``session`` do ``operation`` on at least one resource of ``resource_type`` (KIP-679: an idempotent
        producer with WRITE on some topic needs no IDEMPOTENT_WRITE on the cluster)?"""
        ...
