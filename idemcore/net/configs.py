"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs (Kafka's KIP-133, KIP-226 and KIP-339 admin APIs):
the settings of a resource (a topic, or the broker), read and changed by name. ``Broker.handle`` takes each request
and answers its response; every response carries its request's ``request_id``.

Only :mod:`idemcore.protocol` is imported here, so :mod:`idemcore.net.messages` may list these classes in its
``Request`` / ``Response`` unions without an import cycle."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from idemcore.protocol.codes import ErrorCode


class ResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` ids."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """Where a value comes from (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType(IntEnum):
    """A value's type (Kafka's ``DescribeConfigsResponse.ConfigType``)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' operations (Kafka's ``AlterConfigOp.OpType``); APPEND and SUBTRACT are for LIST
    settings."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# ---------------------------------------------------------------- DescribeConfigs


@dataclass(slots=True, frozen=True)
class DescribeResource:
    """A resource to describe: ``resource_type`` (:class:`ResourceType`) and name (a topic, or the broker's id;
    "" for the cluster-wide broker defaults); ``keys``: the settings wanted, None or empty for all."""

    resource_type: int
    resource_name: str
    keys: tuple[str, ...] | None = None


@dataclass(slots=True, frozen=True)
class DescribeConfigsRequest:
    resources: tuple[DescribeResource, ...]
    include_synonyms: bool = False
    include_documentation: bool = False
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ConfigSynonym:
    """One source of a value, most precedent first: its name there, value and :class:`ConfigSource`."""

    name: str
    value: str | None
    source: int


@dataclass(slots=True, frozen=True)
class DescribedConfig:
    """One setting: its value as Kafka's string (None when unset), whether it can be altered, where the value
    comes from, its synonyms (when asked), type and documentation (when asked)."""

    name: str
    value: str | None
    read_only: bool
    source: int
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: int = ConfigType.UNKNOWN
    documentation: str | None = None


@dataclass(slots=True, frozen=True)
class DescribedResource:
    resource_type: int
    resource_name: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    configs: tuple[DescribedConfig, ...] = ()


@dataclass(slots=True, frozen=True)
class DescribeConfigsResponse:
    """One answer per requested resource, in the request's order."""

    results: tuple[DescribedResource, ...]
    request_id: int = 0


# ---------------------------------------------------------------- AlterConfigs / IncrementalAlterConfigs


@dataclass(slots=True, frozen=True)
class AlterResource:
    """AlterConfigs: the whole set of settings the resource is to have (``(name, value)`` pairs; every setting
    left out goes back to its default)."""

    resource_type: int
    resource_name: str
    configs: tuple[tuple[str, str | None], ...]


@dataclass(slots=True, frozen=True)
class AlterConfigsRequest:
    resources: tuple[AlterResource, ...]
    validate_only: bool = False
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ConfigChange:
    """IncrementalAlterConfigs: one :class:`AlterConfigOp` on one setting (``value`` None for DELETE)."""

    name: str
    op: int
    value: str | None


@dataclass(slots=True, frozen=True)
class IncrementalResource:
    resource_type: int
    resource_name: str
    changes: tuple[ConfigChange, ...]


@dataclass(slots=True, frozen=True)
class IncrementalAlterConfigsRequest:
    resources: tuple[IncrementalResource, ...]
    validate_only: bool = False
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class AlteredResource:
    resource_type: int
    resource_name: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class AlterConfigsResponse:
    """One answer per resource, in the request's order."""

    results: tuple[AlteredResource, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class IncrementalAlterConfigsResponse:
    """One answer per resource, in the request's order."""

    results: tuple[AlteredResource, ...]
    request_id: int = 0


ConfigsRequest = DescribeConfigsRequest | AlterConfigsRequest | IncrementalAlterConfigsRequest
ConfigsResponse = DescribeConfigsResponse | AlterConfigsResponse | IncrementalAlterConfigsResponse
