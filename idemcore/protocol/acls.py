"""Kafka's ACL vocabulary, with Kafka's wire codes (``org.apache.kafka.common.acl`` and ``.resource``): the
operations, resource types, pattern types and permissions an ACL names, and the name Kafka's ZooKeeper data and
``kafka-acls.sh`` use for each (``Read``, ``Topic``, ``Allow``); and the ACL itself (:class:`AclBinding`: a
:class:`ResourcePattern` and an :class:`AccessControlEntry`) with the filters DescribeAcls and DeleteAcls take
(:class:`AclBindingFilter`), matching as Kafka's ``ResourcePatternFilter`` and ``AccessControlEntryFilter`` do."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

#: The literal resource name that matches every resource of its type (``ResourcePattern.WILDCARD_RESOURCE``).
WILDCARD_RESOURCE = "*"
#: The only resource name of the cluster resource (``Resource.CLUSTER_NAME``).
CLUSTER_NAME = "kafka-cluster"
#: An ACL's host that matches every client host.
WILDCARD_HOST = "*"


class _Named(IntEnum):
    """An enum whose members print and parse as Kafka's camel-case names (``IDEMPOTENT_WRITE``: ``IdempotentWrite``)."""

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, text: str) -> _Named:
        """The member named ``text`` in any case, with or without underscores (``Read``, ``READ``,
        ``idempotent_write``);
        ValueError naming the text and the choices otherwise."""
        wanted = text.replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == wanted:
                return member
        choices = ", ".join(member.kafka_name for member in cls if member.value > 1)
        raise ValueError(f"{text!r} is not a {cls.__name__} (one of {choices})")


class AclOperation(_Named):
    """``AclOperation``: what an ACL allows or denies."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclResourceType(_Named):
    """``ResourceType`` of an ACL (not the config resources' ``ConfigResource.Type``, whose codes differ)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    """``PatternType``: how an ACL's resource name matches (LITERAL, PREFIXED); ANY and MATCH only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(_Named):
    """``AclPermissionType``: DENY wins over ALLOW."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The pattern types an ACL itself may have (``PatternType.isSpecific``); ANY and MATCH exist only in filters.
SPECIFIC_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """``ResourcePattern``: the resources an ACL is about: one resource (LITERAL; the name ``*`` means every
    resource of the type) or every resource whose name starts with ``name`` (PREFIXED)."""

    resource_type: AclResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{self.resource_type.kafka_name}:{self.pattern_type.name}:{self.name}"

    def problem(self) -> str | None:
        """Why this pattern cannot be bound to an ACL (Kafka's ``ResourcePattern`` and ``AclBinding`` checks and
        those ``CreateAcls`` makes), None when it can."""
        if self.resource_type in (AclResourceType.UNKNOWN, AclResourceType.ANY):
            return f"resource type {self.resource_type.name} is not one an ACL may name"
        if self.pattern_type not in SPECIFIC_PATTERN_TYPES:
            return f"pattern type {self.pattern_type.name} is not one an ACL may have (LITERAL or PREFIXED)"
        if not self.name:
            return "Invalid empty resource name specified"
        if self.resource_type == AclResourceType.CLUSTER and self.name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME} (got {self.name!r})"
        if "/" in self.name:  # it would be a ZooKeeper path separator
            return f"ACL binding contains invalid resource name: {self.name}"
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """``AccessControlEntry``: who (``User:alice``, ``User:*``), from which host (an IP address or ``*``), may
    or may not (``permission``) do ``operation``."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def problem(self) -> str | None:
        """Why this entry cannot be part of an ACL, None when it can."""
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"operation {self.operation.name} is not one an ACL may name"
        if self.permission in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
            return f"permission type {self.permission.name} is not one an ACL may have (ALLOW or DENY)"
        principal_type, colon, name = self.principal.partition(":")
        if not colon or not principal_type or not name:
            return f"principal {self.principal!r} is not of the form type:name (as User:alice)"
        if not self.host:
            return "the host of an ACL may not be empty (an IP address, or * for any)"
        return None


@dataclass(frozen=True, slots=True)
class AclBinding:
    """``AclBinding``: one ACL, an entry bound to a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def problem(self) -> str | None:
        """Why this ACL cannot be created (one line), None when it can."""
        return self.pattern.problem() or self.entry.problem()

    def __str__(self) -> str:
        e = self.entry
        return (f"{e.permission.kafka_name} {e.principal} {e.operation.kafka_name} from host {e.host} on "
                f"{self.pattern}")


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """``ResourcePatternFilter``: ANY resource type, a name or None (any), and a pattern type: LITERAL or
    PREFIXED (that pattern exactly), ANY (either, same name), or MATCH (every pattern that would apply to the
    resource ``name``: its literal, the wildcard ``*`` and the prefixes of it)."""

    resource_type: AclResourceType = AclResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def is_unknown(self) -> bool:
        return self.resource_type == AclResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != AclResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns that would grant or deny on the resource named self.name.
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        return self.name.startswith(pattern.name)

    def matches_at_most_one(self) -> bool:
        """True when this filter names one pattern exactly (no ANY, MATCH or missing name)."""
        return self.resource_type not in (AclResourceType.ANY, AclResourceType.UNKNOWN) and self.name is not None \
            and self.pattern_type in SPECIFIC_PATTERN_TYPES


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """``AccessControlEntryFilter``: None for a principal or host matches any; ANY operation or permission
    matches any."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def is_unknown(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission == AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        return (self.principal is None or self.principal == entry.principal) \
            and (self.host is None or self.host == entry.host) \
            and self.operation in (AclOperation.ANY, entry.operation) \
            and self.permission in (AclPermissionType.ANY, entry.permission)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """``AclBindingFilter``: the ACLs DescribeAcls lists and DeleteAcls deletes."""

    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def problem(self) -> str | None:
        """Why the filter cannot be used (Kafka refuses filters with UNKNOWN elements), None when it can."""
        if self.pattern.is_unknown() or self.entry.is_unknown():
            return "Filter contain UNKNOWN elements"
        return None

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


#: Every ACL (``AclBindingFilter.ANY``).
ANY_ACL = AclBindingFilter()
