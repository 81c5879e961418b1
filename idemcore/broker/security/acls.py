"""Kafka's ACL vocabulary, with Kafka's wire codes (``org.apache.kafka.common.acl`` and ``.resource``): the
operations, resource types, pattern types and permissions an ACL names, and the name Kafka's ZooKeeper data and
``kafka-acls.sh`` use for each (``Read``, ``Topic``, ``Allow``)."""

from __future__ import annotations

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
