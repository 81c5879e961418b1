"""Per-topic settings under Kafka's names: the broker's defaults, overridden topic by topic.

``Broker(..., topic_configs={"offsets": {"cleanup.policy": "compact"}})``. The names and meanings are Kafka's
topic configs; a name not listed here or a value of the wrong kind is refused, naming both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from idemcore.protocol.constants import (
    DEFAULT_DELETE_RETENTION_MS,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_RETENTION_MS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_MS,
    INT32_MAX,
)

#: Kafka's default ``flush.messages`` and ``flush.ms`` (Long.MAX_VALUE): the OS decides, no fsync is forced.
NEVER_FLUSH = 2**63 - 1
_POLICIES = {"delete": frozenset({"delete"}), "compact": frozenset({"compact"}),
             "compact,delete": frozenset({"compact", "delete"}), "delete,compact": frozenset({"compact", "delete"})}


@dataclass(frozen=True)
class TopicConfig:
    """One topic's settings (Kafka's name of each in its comment)."""

    cleanup_policy: frozenset[str] = frozenset({"delete"})  # cleanup.policy: delete, compact or both
    retention_ms: int = DEFAULT_RETENTION_MS  # retention.ms (-1: no limit)
    retention_bytes: int = -1  # retention.bytes (-1: no limit)
    segment_bytes: int = DEFAULT_SEGMENT_BYTES  # segment.bytes
    segment_ms: int = DEFAULT_SEGMENT_MS  # segment.ms
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES  # index.interval.bytes
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS  # delete.retention.ms: how long tombstones stay
    flush_messages: int = NEVER_FLUSH  # flush.messages: records appended past the last fsync that force one
    flush_ms: int = NEVER_FLUSH  # flush.ms: age of the last fsync that forces one (when the log holds more)

    def __post_init__(self) -> None:
        for name, low, high in (("retention_ms", -1, None), ("retention_bytes", -1, None),
                                ("segment_bytes", 1, INT32_MAX),  # index positions are i32 (Kafka's limit too)
                                ("segment_ms", 1, None), ("index_interval_bytes", 0, INT32_MAX),
                                ("delete_retention_ms", 0, None), ("flush_messages", 1, NEVER_FLUSH),
                                ("flush_ms", 0, NEVER_FLUSH)):
            value = getattr(self, name)
            if type(value) is not int or value < low or (high is not None and value > high):
                limit = "-1 for no limit" if low == -1 else f"at least {low}"
                limit += "" if high is None else f" and at most {high}"
                raise ValueError(f"{name} must be an integer, {limit}, got {value!r}")

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    def log_settings(self) -> dict[str, int]:
        """The settings a :class:`~idemcore.broker.log.PartitionLog` takes."""
        return {"segment_bytes": self.segment_bytes, "segment_ms": self.segment_ms,
                "index_interval_bytes": self.index_interval_bytes}

    def overridden(self, topic: str, overrides: Mapping[str, Any]) -> TopicConfig:
        """These settings with ``overrides`` (Kafka's names: ``cleanup.policy``, ``retention.ms``, ...)."""
        if not isinstance(overrides, Mapping):
            raise TypeError(f"topic {topic!r}: settings must map Kafka's config names to values, got {overrides!r:.80}")
        fields = {field.name for field in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for name, value in overrides.items():
            attribute = str(name).replace(".", "_")
            if attribute not in fields:
                known = ", ".join(sorted(f.replace("_", ".") for f in fields))
                raise ValueError(f"topic {topic!r}: unknown setting {name!r} (known: {known})")
            if attribute == "cleanup_policy":
                if not isinstance(value, str) or value not in _POLICIES:
                    raise ValueError(f"topic {topic!r}: cleanup.policy must be 'delete', 'compact' or "
                                     f"'compact,delete', got {value!r}")
                value = _POLICIES[value]
            changes[attribute] = value
        try:
            return dataclasses.replace(self, **changes)
        except ValueError as exc:
            raise ValueError(f"topic {topic!r}: {exc}") from None
