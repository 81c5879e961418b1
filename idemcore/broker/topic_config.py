"""Per-topic settings under Kafka's names (Kafka 3.x ``TopicConfig`` and ``LogConfig``): the broker's defaults,
overridden topic by topic (``Broker(topic_configs=...)``, CreateTopics, AlterConfigs, IncrementalAlterConfigs).

:data:`TOPIC_KEYS` lists each topic config: Kafka's type, default, range or choices, the broker settings that give
its default (Kafka's ``ServerTopicConfigSynonyms``, first the one Kafka names as the server default), and whether
idemcore acts on it. A value is read as Kafka's ``ConfigDef`` reads one (a string trimmed, ``true``/``false`` in
any case, whole numbers of the type's width, a LIST split on commas) or given as the Python value of its type; a
name Kafka does not know or a bad value is refused with Kafka's message, naming both
(``Invalid value 1GB for configuration segment.bytes: Not a number of type INT``).

Acted on: ``cleanup.policy``, ``retention.ms``, ``retention.bytes`` (housekeeping), ``segment.bytes``,
``segment.ms``, ``segment.index.bytes``, ``index.interval.bytes`` (the partition logs), ``delete.retention.ms``
(the cleaner), ``max.message.bytes`` and ``min.insync.replicas`` (the produce path). The others are accepted,
checked, kept and described, without effect yet (:data:`NOT_ACTED_ON` says why for each).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from idemcore.broker.config_keys import DOUBLE_TEXT, INTEGER_TEXT, LIST_SEPARATOR, MIN_SEGMENT_BYTES, Kind
from idemcore.protocol.constants import (
    DEFAULT_DELETE_RETENTION_MS,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_MESSAGE_MAX_BYTES,
    DEFAULT_RETENTION_MS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_INDEX_BYTES,
    DEFAULT_SEGMENT_MS,
)

if TYPE_CHECKING:
    from idemcore.broker.config import BrokerConfig

LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class TopicKey:
    """One of Kafka's topic configs. ``synonyms``: the broker settings that give its default, in Kafka's order of
    precedence; ``acted_on``: whether idemcore's broker does what the setting says."""

    name: str
    kind: Kind
    default: Any
    acted_on: bool
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    synonyms: tuple[str, ...] = ()
    doc: str = ""

    @property
    def attribute(self) -> str:
        return self.name.replace(".", "_")


TOPIC_KEYS: dict[str, TopicKey] = {key.name: key for key in (
    TopicKey("cleanup.policy", Kind.LIST, ("delete",), True, choices=("compact", "delete"),
             synonyms=("log.cleanup.policy",),
             doc="delete: old segments go by retention; compact: the newest record of each key is kept; or both"),
    TopicKey("retention.ms", Kind.LONG, DEFAULT_RETENTION_MS, True, low=-1,
             synonyms=("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
             doc="how long a segment is kept after its newest record (-1: no limit)"),
    TopicKey("retention.bytes", Kind.LONG, -1, True, synonyms=("log.retention.bytes",),
             doc="the size a partition's log is cut back to by deleting old segments (negative: no limit)"),
    TopicKey("segment.bytes", Kind.INT, DEFAULT_SEGMENT_BYTES, True, low=MIN_SEGMENT_BYTES,
             synonyms=("log.segment.bytes",), doc="the size at which a segment rolls"),
    TopicKey("segment.ms", Kind.LONG, DEFAULT_SEGMENT_MS, True, low=1, synonyms=("log.roll.ms", "log.roll.hours"),
             doc="the time after which a segment rolls"),
    TopicKey("segment.index.bytes", Kind.INT, DEFAULT_SEGMENT_INDEX_BYTES, True, low=4,
             synonyms=("log.index.size.max.bytes",),
             doc="the largest offset or time index of a segment: a full index rolls the segment"),
    TopicKey("index.interval.bytes", Kind.INT, DEFAULT_INDEX_INTERVAL_BYTES, True, low=0,
             synonyms=("log.index.interval.bytes",),
             doc="bytes appended between two offset index entries (segments made from now on)"),
    TopicKey("delete.retention.ms", Kind.LONG, DEFAULT_DELETE_RETENTION_MS, True, low=0,
             synonyms=("log.cleaner.delete.retention.ms",), doc="how long a compacted topic keeps its tombstones"),
    TopicKey("min.compaction.lag.ms", Kind.LONG, 0, False, low=0, synonyms=("log.cleaner.min.compaction.lag.ms",),
             doc="the least time a record stays uncompacted"),
    TopicKey("max.compaction.lag.ms", Kind.LONG, LONG_MAX, False, low=1,
             synonyms=("log.cleaner.max.compaction.lag.ms",), doc="the most time a record stays uncompacted"),
    TopicKey("min.cleanable.dirty.ratio", Kind.DOUBLE, 0.5, False, low=0, high=1,
             synonyms=("log.cleaner.min.cleanable.ratio",),
             doc="the share of a log not yet compacted at which the cleaner compacts it"),
    TopicKey("file.delete.delay.ms", Kind.LONG, 60_000, False, low=0, synonyms=("log.segment.delete.delay.ms",),
             doc="how long a deleted segment's files stay before they are removed"),
    TopicKey("flush.messages", Kind.LONG, LONG_MAX, True, low=1, synonyms=("log.flush.interval.messages",),
             doc="records appended between two fsyncs of a partition"),
    TopicKey("flush.ms", Kind.LONG, LONG_MAX, True, low=0,
             synonyms=("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
             doc="the longest time between two fsyncs of a partition"),
    TopicKey("max.message.bytes", Kind.INT, DEFAULT_MESSAGE_MAX_BYTES, True, low=0, synonyms=("message.max.bytes",),
             doc="the largest record batch the topic accepts"),
    TopicKey("min.insync.replicas", Kind.INT, 1, True, low=1, synonyms=("min.insync.replicas",),
             doc="the in-sync replicas an acks=all produce needs (a broker alone has one)"),
    TopicKey("unclean.leader.election.enable", Kind.BOOLEAN, False, True,
             synonyms=("unclean.leader.election.enable",),
             doc="whether a replica out of sync may become the leader (in a cluster)"),
    TopicKey("message.timestamp.type", Kind.STRING, "CreateTime", False, choices=("CreateTime", "LogAppendTime"),
             synonyms=("log.message.timestamp.type",), doc="whose time a record carries: the producer's or the log's"),
    TopicKey("preallocate", Kind.BOOLEAN, False, False, synonyms=("log.preallocate",),
             doc="whether a new segment file is made at its full size"),
    TopicKey("compression.type", Kind.STRING, "producer", False,
             choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), synonyms=("compression.type",),
             doc="the codec batches are stored with (producer: as the producer sent them)"),
)}

#: The topic configs accepted, checked, kept and described, that idemcore's broker does not act on yet, and why.
NOT_ACTED_ON: dict[str, str] = {
    "min.compaction.lag.ms": "the cleaner compacts every segment below the active one",
    "max.compaction.lag.ms": "the cleaner compacts every segment below the active one",
    "min.cleanable.dirty.ratio": "the cleaner compacts whenever a whole segment lies below the active one",
    "file.delete.delay.ms": "a segment's files are deleted at once",
    "message.timestamp.type": "records keep the producer's timestamps (LogAppendTime is not applied)",
    "preallocate": "segment files grow as they are written",
    "compression.type": "batches are stored as the producer compressed them",
}
assert set(NOT_ACTED_ON) == {name for name, key in TOPIC_KEYS.items() if not key.acted_on}


class InvalidTopicConfig(ValueError):
    """A topic config refused: ``reason`` is Kafka's message (``Invalid value ... for configuration ...``), the
    exception's text names the topic too."""

    def __init__(self, reason: str, topic: str | None = None) -> None:
        super().__init__(reason if topic is None else f"topic {topic!r}: {reason}")
        self.reason = reason


def _invalid(key: TopicKey, value: object, reason: str) -> InvalidTopicConfig:
    shown = value if isinstance(value, str) else value_text(key.kind, value) if _typed(key, value) else repr(value)
    return InvalidTopicConfig(f"Invalid value {shown} for configuration {key.name}: {reason}")


def _typed(key: TopicKey, value: object) -> bool:
    """Whether ``value`` is a Python value of ``key``'s type (not a string to parse)."""
    if key.kind.integral:
        return type(value) is int
    if key.kind is Kind.DOUBLE:
        return type(value) in (int, float)
    if key.kind is Kind.BOOLEAN:
        return type(value) is bool
    if key.kind is Kind.LIST:
        return isinstance(value, list | tuple) and all(type(item) is str for item in value)
    return False


def parse_value(key: TopicKey, value: object) -> Any:
    """``value`` (Kafka's string form, or a Python value of the key's type) as the key's typed value, checked
    against its range or choices; :class:`InvalidTopicConfig` with Kafka's message otherwise."""
    text = value.strip() if isinstance(value, str) else None
    if key.kind.integral:
        bits, (low, high) = key.kind.bits, key.kind.bounds
        if text is not None:
            if not INTEGER_TEXT.fullmatch(text) or not low <= int(text) <= high:
                raise _invalid(key, value, f"Not a number of type {key.kind.value}")
            number: Any = int(text)
        elif type(value) is int:
            if not low <= value <= high:
                raise _invalid(key, value, f"Not a number of type {key.kind.value}")
            number = value
        else:
            raise _invalid(key, value, f"Expected value to be a {bits}-bit integer, but it was a "
                                       f"{type(value).__name__}")
    elif key.kind is Kind.DOUBLE:
        if text is not None:
            if not DOUBLE_TEXT.fullmatch(text):
                raise _invalid(key, value, "Not a number of type DOUBLE")
            number = float(text)
        elif type(value) in (int, float) and value == value:
            number = float(value)  # type: ignore[arg-type]
        else:
            raise _invalid(key, value, f"Expected value to be a double, but it was a {type(value).__name__}")
    elif key.kind is Kind.BOOLEAN:
        if text is not None:
            if text.lower() not in ("true", "false"):
                raise _invalid(key, value, "Expected value to be either true or false")
            return text.lower() == "true"
        if type(value) is not bool:
            raise _invalid(key, value, "Expected value to be either true or false")
        return value
    elif key.kind is Kind.STRING:
        if text is None:
            raise _invalid(key, value, f"Expected value to be a string, but it was a {type(value).__name__}")
        if key.choices and text not in key.choices:
            raise _invalid(key, value, f"String must be one of: {', '.join(key.choices)}")
        return text
    else:  # LIST
        if text is not None:
            items = tuple(LIST_SEPARATOR.split(text)) if text else ()
        elif _typed(key, value):
            items = tuple(item.strip() for item in value)  # type: ignore[attr-defined]
        else:
            raise _invalid(key, value, "Expected a comma separated list")
        for item in items:
            if key.choices and item not in key.choices:
                raise InvalidTopicConfig(f"Invalid value {item} for configuration {key.name}: String must be one "
                                         f"of: {', '.join(key.choices)}")
        return items
    if (key.low is not None and number < key.low) or (key.high is not None and number > key.high):
        if key.high is None:
            raise _invalid(key, value, f"Value must be at least {_bound(key.low)}")
        side = "no less than" if key.low is not None and number < key.low else "no more than"
        raise _invalid(key, value, f"Value must be {side} {_bound(key.low if side == 'no less than' else key.high)}")
    return number


def _bound(value: float | None) -> str:
    return str(int(value)) if value is not None and value == int(value) else str(value)


def value_text(kind: Kind, value: Any) -> str | None:
    """A typed value as Kafka's ``ConfigDef.convertToString`` writes it (how DescribeConfigs reports it)."""
    if value is None:
        return None
    if kind is Kind.BOOLEAN:
        return "true" if value else "false"
    if kind is Kind.LIST:
        return ",".join(value)
    if kind is Kind.DOUBLE:
        return repr(float(value))  # 0.5, 1.0: Java's Double.toString in the range these settings take
    return str(value)


def _default_overrides() -> Mapping[str, str]:
    return MappingProxyType({})

#: Kafka's default ``flush.messages`` and ``flush.ms`` (Long.MAX_VALUE): the OS decides, no fsync is forced.
NEVER_FLUSH = LONG_MAX


@dataclass(frozen=True)
class TopicConfig:
    """One topic's settings, each under its Kafka name with dots as underscores; ``overrides``: the ones set for
    this topic (Kafka's dynamic topic configs), as Kafka's strings, by name."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    retention_ms: int = DEFAULT_RETENTION_MS
    retention_bytes: int = -1
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_ms: int = DEFAULT_SEGMENT_MS
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_timestamp_type: str = "CreateTime"
    preallocate: bool = False
    compression_type: str = "producer"
    overrides: Mapping[str, str] = field(default_factory=_default_overrides)

    def __post_init__(self) -> None:
        for key in TOPIC_KEYS.values():
            value = getattr(self, key.attribute)
            if not _typed(key, value) and not (key.kind is Kind.STRING and type(value) is str):
                raise _invalid(key, value, f"Expected a value of type {key.kind.value}")
            parse_value(key, value)  # the range or choices
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidTopicConfig(f"conflict topic config setting min.compaction.lag.ms "
                                     f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                                     f"({self.max_compaction_lag_ms})")

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    def value(self, name: str) -> Any:
        """The typed value of the topic config ``name``."""
        return getattr(self, TOPIC_KEYS[name].attribute)

    def log_settings(self) -> dict[str, int]:
        """The settings a :class:`~idemcore.broker.log.PartitionLog` takes (its attributes of the same names)."""
        return {"segment_bytes": self.segment_bytes, "segment_ms": self.segment_ms,
                "segment_index_bytes": self.segment_index_bytes, "index_interval_bytes": self.index_interval_bytes}

    def with_defaults(self, values: Mapping[str, Any]) -> TopicConfig:
        """These settings with other defaults (Kafka's names to typed values), before any topic override."""
        changes = {TOPIC_KEYS[name].attribute: parse_value(TOPIC_KEYS[name], value) for name, value in values.items()}
        return dataclasses.replace(self, **changes)

    def overridden(self, topic: str, overrides: Mapping[str, Any]) -> TopicConfig:
        """These settings with ``overrides`` set for ``topic`` (Kafka's names: ``cleanup.policy``, ``retention.ms``,
        ...; strings as Kafka's wire carries them, or Python values of each type) over them, added to the
        overrides these settings already have. :class:`InvalidTopicConfig` names a bad name or value."""
        if not isinstance(overrides, Mapping):
            raise TypeError(f"topic {topic!r}: settings must map Kafka's config names to values, got {overrides!r:.80}")
        changes: dict[str, Any] = {}
        texts = dict(self.overrides)
        for name, value in overrides.items():
            key = TOPIC_KEYS.get(name) if type(name) is str else None
            if key is None:
                raise InvalidTopicConfig(f"Unknown topic config name: {name}", topic)
            try:
                changes[key.attribute] = parse_value(key, value)
            except InvalidTopicConfig as error:
                raise InvalidTopicConfig(error.reason, topic) from None
            texts[name] = value_text(key.kind, changes[key.attribute])  # type: ignore[assignment]
        try:
            return dataclasses.replace(self, **changes, overrides=MappingProxyType(texts))
        except InvalidTopicConfig as error:
            raise InvalidTopicConfig(error.reason, topic) from None


#: The topic configs whose broker-wide default ``Broker(...)`` takes as its own arguments (``segment_bytes``,
#: ``retention_ms``, ...); the others get theirs from its ``settings`` (:func:`broker_topic_defaults`).
BROKER_ARGUMENTS = frozenset({"segment.bytes", "segment.ms", "retention.ms", "retention.bytes",
                              "index.interval.bytes", "max.message.bytes"})


def broker_topic_defaults(settings: BrokerConfig) -> dict[str, Any]:
    """The defaults the broker's ``settings`` give the topic configs ``Broker(...)`` takes no argument for
    (Kafka's ``KafkaConfig.extractLogConfigMap``): each from its first broker synonym, ``flush.ms`` from
    ``log.flush.interval.ms`` or else ``log.flush.scheduler.interval.ms``."""
    defaults = {name: settings[key.synonyms[0]] for name, key in TOPIC_KEYS.items()
                if name not in BROKER_ARGUMENTS and name != "flush.ms"}
    defaults["flush.ms"] = settings.log_flush_interval_ms
    return defaults
