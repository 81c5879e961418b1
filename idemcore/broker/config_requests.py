"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs as the broker answers them: a topic's configs read
and changed (durably, in ``topics.json``, and in force on its live partitions), the broker's settings read.

Kafka's rules (core ``ConfigHelper.describeConfigs`` / ``createTopicConfigEntry``, ``ConfigAdminManager.preprocess``,
metadata ``ConfigurationControlManager`` and ``ControllerConfigurationValidator``): a topic config's source is
DYNAMIC_TOPIC_CONFIG when the topic sets it, else STATIC_BROKER_CONFIG when the broker setting that gives its
default was given (server.properties, ``--override``, or a ``Broker(...)`` argument away from Kafka's default),
else DEFAULT_CONFIG; its synonyms list those sources in that order. AlterConfigs replaces the topic's whole set of
configs; IncrementalAlterConfigs SETs, DELETEs (back to the default), APPENDs to or SUBTRACTs from a LIST (whose
unset value counts as Kafka's own default, as Kafka's controller takes it). A resource named twice, a config
named twice in one resource, or a null value is answered INVALID_REQUEST; a bad config name or value
INVALID_CONFIG with Kafka's message naming both; a topic the broker lacks UNKNOWN_TOPIC_OR_PARTITION (after the
values are checked, as Kafka's controller orders it). The broker's settings are read-only here: altering a BROKER
resource is answered INVALID_REQUEST in one line. Malformed fields (in process) are answered INVALID_REQUEST,
never raised out of ``Broker.handle``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from idemcore.broker.config_keys import KEYS as BROKER_KEYS
from idemcore.broker.config_keys import SENSITIVE, Kind
from idemcore.broker.input_checks import illegal_topic_name
from idemcore.broker.topic_config import TOPIC_KEYS, InvalidTopicConfig, TopicConfig, value_text
from idemcore.net.configs import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlteredResource,
    AlterResource,
    ConfigChange,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedConfig,
    DescribedResource,
    DescribeResource,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IncrementalResource,
    ResourceType,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import DEFAULT_RETENTION_MS, DEFAULT_SEGMENT_MS

if TYPE_CHECKING:
    from idemcore.broker.config import BrokerConfig


class ConfiguredBroker(Protocol):
    """What these handlers read of a broker (``Broker`` is one): its settings, the topics' configs, and how to
    change a topic's configs."""

    broker_id: int
    settings: BrokerConfig | None
    data_dir: Path | None
    message_max_bytes: int
    producer_id_expiration_ms: int
    transaction_state_partitions: int
    transaction_max_timeout_ms: int
    offsets_topic_partitions: int

    @property
    def topics(self) -> dict[str, int]: ...

    @property
    def topic_configs(self) -> dict[str, TopicConfig]: ...

    @property
    def topic_configs_default(self) -> TopicConfig: ...

    @property
    def default_partitions(self) -> int: ...

    @property
    def auto_create_topics(self) -> bool: ...

    def set_topic_configs(self, name: str, overrides: Mapping[str, Any], validate_only: bool = False
                          ) -> TopicConfig: ...

__all__ = ["alter_configs", "config_handlers", "describe_configs", "described_topic_configs",
           "incremental_alter_configs"]

log = logging.getLogger(__name__)

#: Kafka's ``Topic.validate`` (as admin_requests applies it).
#: Broker settings that name one value together (Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``).
_BROKER_SYNONYMS = {name: group for group in (("log.roll.ms", "log.roll.hours"),
                                              ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
                                              ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"))
                    for name in group}

Answer = tuple[int, str | None]  # (error code, message)


def config_handlers(broker: ConfiguredBroker) -> dict[type, Callable[[Any], Any]]:
    """The three requests' handlers over ``broker``, to merge into its dispatch table."""
    return {
        DescribeConfigsRequest: lambda request: describe_configs(broker, request),
        AlterConfigsRequest: lambda request: alter_configs(broker, request),
        IncrementalAlterConfigsRequest: lambda request: incremental_alter_configs(broker, request),
    }


# ---------------------------------------------------------------- the broker's settings as Kafka's strings


def _static_settings(broker: ConfiguredBroker) -> dict[str, str | None]:
    """The broker settings given (Kafka's STATIC_BROKER_CONFIG), as Kafka's strings: those of its
    ``BrokerConfig``, or for a broker built by its arguments, those arguments that differ from Kafka's defaults
    (as the settings they stand for), and its id."""
    if broker.settings is not None:
        return {name: value_text(BROKER_KEYS[name].kind, broker.settings[name]) for name in broker.settings.origins}
    d = broker.topic_configs_default
    given = {  # setting: (the broker's value, Kafka's default)
        "num.partitions": (broker.default_partitions, 1),
        "auto.create.topics.enable": (broker.auto_create_topics, True),
        "log.segment.bytes": (d.segment_bytes, BROKER_KEYS["log.segment.bytes"].default),
        "log.roll.ms": (d.segment_ms, DEFAULT_SEGMENT_MS),
        "log.retention.ms": (d.retention_ms, DEFAULT_RETENTION_MS),
        "log.retention.bytes": (d.retention_bytes, -1),
        "log.index.interval.bytes": (d.index_interval_bytes, BROKER_KEYS["log.index.interval.bytes"].default),
        "message.max.bytes": (broker.message_max_bytes, BROKER_KEYS["message.max.bytes"].default),
        "producer.id.expiration.ms": (broker.producer_id_expiration_ms,
                                      BROKER_KEYS["producer.id.expiration.ms"].default),
        "transaction.state.log.num.partitions": (broker.transaction_state_partitions,
                                                 BROKER_KEYS["transaction.state.log.num.partitions"].default),
        "transaction.max.timeout.ms": (broker.transaction_max_timeout_ms,
                                       BROKER_KEYS["transaction.max.timeout.ms"].default),
        "offsets.topic.num.partitions": (broker.offsets_topic_partitions,
                                         BROKER_KEYS["offsets.topic.num.partitions"].default),
        "log.dirs": (None if broker.data_dir is None else str(broker.data_dir), None),
    }
    static = {name: value_text(BROKER_KEYS[name].kind, value) for name, (value, default) in given.items()
              if value != default}
    return {"broker.id": str(broker.broker_id), **static}


def _default_settings() -> dict[str, str]:
    """Kafka's defaults of the broker settings that have one (Kafka's DEFAULT_CONFIG)."""
    return {name: text for name, key in BROKER_KEYS.items()
            if key.default is not None and (text := value_text(key.kind, key.default)) is not None}


def _synonyms(name: str, static: Mapping[str, str | None], defaults: Mapping[str, str]) -> list[ConfigSynonym]:
    """Kafka's ``ConfigHelper.configSynonyms`` of broker setting ``name``: the given settings among its synonyms,
    then their defaults, from the first entry named ``name`` on (so ``log.retention.ms`` left unset has none, as
    in Kafka, though ``log.retention.hours`` gives the value)."""
    group = _BROKER_SYNONYMS.get(name, (name,))
    found = ([ConfigSynonym(n, static[n], ConfigSource.STATIC_BROKER_CONFIG) for n in group if n in static]
             + [ConfigSynonym(n, defaults[n], ConfigSource.DEFAULT_CONFIG) for n in group if n in defaults])
    while found and found[0].name != name:
        found.pop(0)
    return found


def _entry(name: str, value: str | None, synonyms: list[ConfigSynonym], kind: Kind, read_only: bool,
           include_synonyms: bool, documentation: str | None) -> DescribedConfig:
    source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
    return DescribedConfig(name, value, read_only, int(source), False,
                           tuple(synonyms) if include_synonyms else (), int(ConfigType[kind.value]), documentation)


def described_topic_configs(broker: ConfiguredBroker, config: TopicConfig, keys: Iterable[str] | None = None,
                            include_synonyms: bool = False, include_documentation: bool = False,
                            ) -> tuple[DescribedConfig, ...]:
    """A topic's settings ``config`` as DescribeConfigs gives them (``keys``: only those; None: all), by name."""
    static, defaults = _static_settings(broker), _default_settings()
    wanted = set(keys) if keys else None
    entries = []
    for name, key in sorted(TOPIC_KEYS.items()):
        if wanted is not None and name not in wanted:
            continue
        value = value_text(key.kind, config.value(name))
        synonyms = _synonyms(key.synonyms[0], static, defaults)
        if name in config.overrides:
            synonyms.insert(0, ConfigSynonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        entries.append(_entry(name, value, synonyms, key.kind, False, include_synonyms,
                              key.doc if include_documentation else None))
    return tuple(entries)


def _described_broker(broker: ConfiguredBroker, keys: Iterable[str] | None,
                      include_synonyms: bool) -> tuple[DescribedConfig, ...]:
    static, defaults = _static_settings(broker), _default_settings()
    wanted = set(keys) if keys else None
    entries = []
    for name, key in sorted(BROKER_KEYS.items()):
        if wanted is not None and name not in wanted:
            continue
        value = static[name] if name in static else defaults.get(name)
        # Read-only: idemcore takes its settings at start only (Kafka's dynamic ones included).
        synonyms = _synonyms(name, static, defaults)
        if name in SENSITIVE:  # Kafka's PASSWORD: the name and where it came from, never the value
            entries.append(DescribedConfig(
                name, None, True, int(synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG), True,
                tuple(ConfigSynonym(one.name, None, one.source) for one in synonyms) if include_synonyms else (),
                int(ConfigType.PASSWORD), None))
            continue
        entries.append(_entry(name, value, synonyms, key.kind, True, include_synonyms, None))
    return tuple(entries)


# ---------------------------------------------------------------- DescribeConfigs


def describe_configs(broker: ConfiguredBroker, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    """Each requested resource's settings, in the request's order (an error per resource, never for all)."""
    resources = request.resources
    if not isinstance(resources, tuple | list):
        return DescribeConfigsResponse((DescribedResource(ResourceType.UNKNOWN, "", ErrorCode.INVALID_REQUEST,
                                                          "DescribeConfigsRequest: resources must be a tuple of "
                                                          f"DescribeResource, got {resources!r:.80}"),),
                                       request.request_id)
    synonyms, documentation = request.include_synonyms is True, request.include_documentation is True
    return DescribeConfigsResponse(tuple(_describe_one(broker, resource, synonyms, documentation)
                                         for resource in resources), request.request_id)


def _describe_one(broker: ConfiguredBroker, resource: object, synonyms: bool, documentation: bool) -> DescribedResource:
    if (type(resource) is not DescribeResource or type(resource.resource_type) not in (int, ResourceType)
            or type(resource.resource_name) is not str
            or not (resource.keys is None or (isinstance(resource.keys, tuple | list)
                                              and all(type(k) is str for k in resource.keys)))):
        return DescribedResource(ResourceType.UNKNOWN, "", ErrorCode.INVALID_REQUEST,
                                 f"not a DescribeResource of a type, a name and config names: {resource!r:.80}")
    kind, name = resource.resource_type, resource.resource_name
    if kind == ResourceType.TOPIC:
        problem = _topic_name_problem(name)
        if problem is not None:
            return DescribedResource(kind, name, *problem)
        if name not in broker.topics:
            return DescribedResource(kind, name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"The topic '{name}' does not exist.")
        return DescribedResource(kind, name, configs=described_topic_configs(
            broker, broker.topic_configs[name], resource.keys, synonyms, documentation))
    if kind == ResourceType.BROKER:
        if name == "":  # the cluster-wide dynamic defaults: idemcore has none
            return DescribedResource(kind, name)
        problem = _broker_name_problem(broker, name, "Broker id", " or empty string")
        if problem is not None:
            return DescribedResource(kind, name, *problem)
        return DescribedResource(kind, name, configs=_described_broker(broker, resource.keys, synonyms))
    return DescribedResource(kind, name, ErrorCode.INVALID_REQUEST, _unsupported(kind, "describes"))


def _unsupported(kind: int, verb: str) -> str:
    known = kind in ResourceType._value2member_map_
    return (f"idemcore {verb} TOPIC and BROKER resources, not {ResourceType(kind).name}" if known
            else f"Unknown resource type {kind}")


def _topic_name_problem(name: str) -> Answer | None:
    """Kafka's ``ControllerConfigurationValidator.validateTopicName``."""
    if name == "":
        return ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed."
    illegal = illegal_topic_name(name)
    return None if illegal is None else (ErrorCode.INVALID_TOPIC_EXCEPTION, illegal)


def _broker_name_problem(broker: ConfiguredBroker, name: str, what: str, alternative: str) -> Answer | None:
    try:
        number = int(name)
    except ValueError:
        return ErrorCode.INVALID_REQUEST, f"{what} must be an integer, but it is: {name}"
    if number != broker.broker_id:
        return ErrorCode.INVALID_REQUEST, (f"Unexpected broker id, expected {broker.broker_id}{alternative}, but "
                                           f"received {name}")
    return None


# ---------------------------------------------------------------- AlterConfigs / IncrementalAlterConfigs


def alter_configs(broker: ConfiguredBroker, request: AlterConfigsRequest) -> AlterConfigsResponse:
    """Give each TOPIC resource exactly the configs named (Kafka's legacy AlterConfigs: any other config set on
    the topic goes back to its default)."""
    return AlterConfigsResponse(_alter_each(broker, request, AlterResource, _replacement), request.request_id)


def incremental_alter_configs(broker: ConfiguredBroker, request: IncrementalAlterConfigsRequest,
                              ) -> IncrementalAlterConfigsResponse:
    """Apply each TOPIC resource's SET/DELETE/APPEND/SUBTRACT operations to the configs the topic has set."""
    return IncrementalAlterConfigsResponse(_alter_each(broker, request, IncrementalResource, _applied),
                                           request.request_id)


def _alter_each(broker: ConfiguredBroker, request: AlterConfigsRequest | IncrementalAlterConfigsRequest, shape: type,
                new_overrides: Callable[[Any, Mapping[str, str]], dict[str, str] | Answer]) -> tuple[AlteredResource,
                                                                                                         ...]:
    """Each resource's answer, in the request's order: the checks every resource passes first
    (``ConfigAdminManager.preprocess``), then ``new_overrides`` (the topic's configs after the request, from
    those it has) checked and stored unless ``validate_only``."""
    resources = request.resources
    if not isinstance(resources, tuple | list):
        return (AlteredResource(ResourceType.UNKNOWN, "", ErrorCode.INVALID_REQUEST,
                                f"{type(request).__name__}: resources must be a tuple of {shape.__name__}, got "
                                f"{resources!r:.80}"),)
    validate_only = request.validate_only is True
    given = cast("list[AlterResource | IncrementalResource]", list(resources))  # each checked below
    well_formed = [type(r) is shape and _well_formed(r) for r in given]
    counts = Counter((r.resource_type, r.resource_name) for r, ok in zip(given, well_formed, strict=True) if ok)
    answers = []
    for resource, ok in zip(given, well_formed, strict=True):
        if not ok:
            answers.append(AlteredResource(ResourceType.UNKNOWN, "", ErrorCode.INVALID_REQUEST,
                                           f"not a {shape.__name__} of a type, a name and configs: {resource!r:.80}"))
            continue
        kind, name = resource.resource_type, resource.resource_name
        if counts[(kind, name)] > 1:
            answer: Answer = ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
        else:
            answer = _alter_one(broker, resource, validate_only, new_overrides)
        answers.append(AlteredResource(kind, name, *answer))
    return tuple(answers)


def _well_formed(resource: AlterResource | IncrementalResource) -> bool:
    if type(resource.resource_type) not in (int, ResourceType) or type(resource.resource_name) is not str:
        return False
    if isinstance(resource, AlterResource):
        return isinstance(resource.configs, tuple | list) and all(
            isinstance(c, tuple) and len(c) == 2 and type(c[0]) is str and (c[1] is None or type(c[1]) is str)
            for c in resource.configs)
    return isinstance(resource.changes, tuple | list) and all(
        type(c) is ConfigChange and type(c.name) is str and type(c.op) in (int, AlterConfigOp)
        and (c.value is None or type(c.value) is str) for c in resource.changes)


def _alter_one(broker: ConfiguredBroker, resource: AlterResource | IncrementalResource, validate_only: bool,
               new_overrides: Callable[[Any, Mapping[str, str]], dict[str, str] | Answer]) -> Answer:
    pairs = (resource.configs if isinstance(resource, AlterResource)
             else [(c.name, c.value) for c in resource.changes])
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
    deletes = set() if isinstance(resource, AlterResource) else {
        c.name for c in resource.changes if c.op == AlterConfigOp.DELETE}
    nulls = [name for name, value in pairs if value is None and name not in deletes]
    if nulls:
        return ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}"
    kind, name = resource.resource_type, resource.resource_name
    if kind == ResourceType.BROKER:
        if name:
            problem = _broker_name_problem(broker, name, "Node id", "")
            if problem is not None:
                return problem
        return ErrorCode.INVALID_REQUEST, (f"Cannot update these configs dynamically: {', '.join(names) or 'none'} "
                                           "(idemcore reads its broker settings at start: server.properties, "
                                           "--override)")
    if kind != ResourceType.TOPIC:
        return ErrorCode.INVALID_REQUEST, _unsupported(kind, "alters")
    problem = _topic_name_problem(name)
    if problem is not None:
        return problem
    current = broker.topic_configs.get(name)
    overrides = new_overrides(resource, {} if current is None else current.overrides)
    if isinstance(overrides, tuple):
        return overrides
    try:  # the values first, then whether the topic exists (Kafka's ConfigurationControlManager)
        broker.topic_configs_default.overridden(name, overrides)
        if current is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        broker.set_topic_configs(name, overrides, validate_only)
    except InvalidTopicConfig as error:
        return ErrorCode.INVALID_CONFIG, error.reason
    except OSError as error:
        log.error("topic %r: its configs could not be recorded: %s", name, error)
        return ErrorCode.KAFKA_STORAGE_ERROR, f"topic {name!r}: its configs could not be recorded: {error}"
    return ErrorCode.NONE, None


def _replacement(resource: AlterResource, current: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in resource.configs if value is not None}


def _applied(resource: IncrementalResource, current: Mapping[str, str]) -> dict[str, str] | Answer:
    """The topic's configs after ``resource``'s operations (Kafka's ``incrementalAlterConfigResource``)."""
    overrides = dict(current)
    for change in resource.changes:
        if change.op == AlterConfigOp.SET:
            overrides[change.name] = change.value  # type: ignore[assignment]  # null refused above
        elif change.op == AlterConfigOp.DELETE:
            overrides.pop(change.name, None)
        elif change.op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            key = TOPIC_KEYS.get(change.name)
            if key is None or key.kind is not Kind.LIST:
                return ErrorCode.INVALID_CONFIG, (f"Can't {AlterConfigOp(change.op).name} to key {change.name} "
                                                  "because its type is not LIST.")
            # Unset: Kafka's own default, not the broker's (Kafka's ConfigurationControlManager.getParts).
            text = overrides.get(change.name, value_text(key.kind, key.default))
            items = [item for item in (text or "").split(",") if item]
            for item in (change.value or "").split(","):
                if change.op == AlterConfigOp.APPEND and item not in items:
                    items.append(item)
                elif change.op == AlterConfigOp.SUBTRACT and item in items:
                    items.remove(item)
            overrides[change.name] = ",".join(items)
        else:
            return ErrorCode.INVALID_REQUEST, f"Unknown operations type {change.op}"
    return overrides
