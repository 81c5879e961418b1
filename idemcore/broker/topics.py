"""The topics a broker serves: each one's partition count and settings (Kafka's topic configs over the broker's
defaults), and the ones ``create_topic`` made, recorded in ``topics.json`` (idemcore's own file; Kafka keeps
topics in its metadata log). The Metadata and CreateTopics handlers work on this catalog, not on the broker."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, ItemsView, Iterator, Mapping
from pathlib import Path
from typing import Any

from idemcore.broker.input_checks import check_topic
from idemcore.broker.log import LogCorruptionError, PartitionLog
from idemcore.broker.topic_config import TopicConfig
from idemcore.errors import IdemcoreError
from idemcore.protocol.constants import INTERNAL_TOPICS
from idemcore.record.kafka_files import write_file_atomically

log = logging.getLogger(__name__)

#: In data_dir: the topics create_topic made, with their settings, and the configs set since on topics given to
#: the broker (idemcore's own; Kafka keeps both in its metadata log).
TOPICS_FILE = "topics.json"

#: Opens (creates) the partitions of a new topic: ``(name, partitions, config, made)`` (``made``: their logs,
#: made already off the loop, or None); undoes what it opened and raises when one fails, and returns how to take
#: all of them back.
OpenPartitions = Callable[[str, int, TopicConfig, "list[PartitionLog] | None"], Callable[[], None]]


class TopicExistsError(IdemcoreError):
    """``create_topic`` for a topic the broker has (Kafka's TOPIC_ALREADY_EXISTS)."""


class Topics:
    """The served topics by name: ``counts`` (partitions) and ``configs`` (:class:`TopicConfig`). ``given``: the
    topics the broker was started with; ``topic_configs``: Kafka's settings for some of them, over ``defaults``.
    ``auto_create`` / ``default_partitions``: Kafka's ``auto.create.topics.enable`` and ``num.partitions``, for
    the handlers. ``open_partitions`` is set by the broker before :meth:`create` is used."""

    def __init__(self, given: Mapping[str, int], defaults: TopicConfig, topic_configs: Mapping[str, Any] | None,
                 data_dir: Path | None, *, auto_create: bool, default_partitions: int, broker_id: int) -> None:
        for name, count in given.items():
            check_topic(name, count)
            if name in INTERNAL_TOPICS:
                raise ValueError(f"{name!r} is an internal topic: the broker makes it when its coordinator needs it")
        if topic_configs is not None and not isinstance(topic_configs, Mapping):
            raise TypeError(f"topic_configs must map topic names to their settings, got {topic_configs!r:.80}")
        unknown = sorted(set(topic_configs or {}) - set(given))
        if unknown:
            raise ValueError(f"topic_configs names {unknown}, which are not among the topics {sorted(given)}")
        self.counts: dict[str, int] = dict(given)
        self.defaults = defaults
        self.configs: dict[str, TopicConfig] = {name: defaults.overridden(name, (topic_configs or {}).get(name, {}))
                                                for name in given}
        self.data_dir = data_dir
        self.auto_create = auto_create
        self.default_partitions = default_partitions
        self.broker_id = broker_id
        self.open_partitions: OpenPartitions | None = None
        self._created: dict[str, dict[str, Any]] = {}
        self._altered: dict[str, dict[str, Any]] = {}  # the configs set on topics given to the broker

    # --- the catalog as a mapping of partition counts ----------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self.counts

    def __getitem__(self, name: str) -> int:
        return self.counts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.counts)

    def get(self, name: str, default: int | None = None) -> int | None:
        return self.counts.get(name, default)

    def items(self) -> ItemsView[str, int]:
        return self.counts.items()

    # --- topics.json ----------------------------------------------------------------------------------------

    def load_created(self) -> None:
        """Add the topics :meth:`create` made in this data_dir (``topics.json``) to those served, and take the
        configs :meth:`set_configs` gave the topics the broker is given (they replace ``topic_configs``: as in
        Kafka, a topic's stored configs are the truth)."""
        if self.data_dir is None or not os.path.lexists(self.data_dir / TOPICS_FILE):
            return
        path = self.data_dir / TOPICS_FILE
        try:
            content = json.loads(path.read_text())
            created, altered = content["topics"], content.get("altered", {})
            for name, entry in created.items():
                check_topic(name, entry["partitions"])
                config = self.defaults.overridden(name, entry["configs"])
                if name in self.counts and self.counts[name] != entry["partitions"]:
                    raise ValueError(f"topic {name!r} was created with {entry['partitions']} partitions, the broker "
                                     f"is given {self.counts[name]}")
                self.counts[name] = entry["partitions"]
                self.configs[name] = config
            for name, overrides in altered.items():
                config = self.defaults.overridden(name, overrides)
                if name in self.counts and name not in created:  # kept for a topic not given this time
                    if self.configs[name].overrides != config.overrides:
                        log.warning("topic %r: its configs set by AlterConfigs (%s) replace those given (%s)", name,
                                    dict(config.overrides), dict(self.configs[name].overrides))
                    self.configs[name] = config
        except OSError as exc:
            raise LogCorruptionError(f"{path} cannot be read ({exc.strerror})") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LogCorruptionError(f"{path} is damaged or disagrees with the topics given ({exc}); it lists the "
                                     "topics create_topic made: restore it (removing it stops serving them; their "
                                     "partitions stay on disk)") from None
        self._created = {name: dict(entry) for name, entry in created.items()}
        self._altered = {name: dict(overrides) for name, overrides in altered.items()}

    def _write(self, created: Mapping[str, Any], altered: Mapping[str, Any]) -> None:
        assert self.data_dir is not None
        content = {"version": 1, "topics": created, **({"altered": altered} if altered else {})}
        write_file_atomically(self.data_dir / TOPICS_FILE, json.dumps(content, sort_keys=True).encode())

    def set_configs(self, name: str, overrides: Mapping[str, Any], validate_only: bool = False) -> TopicConfig:
        """Replace the configs set on topic ``name`` by ``overrides`` (Kafka's AlterConfigs): checked, recorded in
        ``topics.json``, then in ``configs``. KeyError for a topic not served; ValueError for a bad name or value."""
        if name not in self.counts:
            raise KeyError(f"The topic '{name}' does not exist.")
        config = self.defaults.overridden(name, overrides)
        if validate_only:
            return config
        if self.data_dir is not None:
            stored = dict(config.overrides)
            created, altered = self._created, self._altered
            if name in created:
                created = {**created, name: {**created[name], "configs": stored}}
            else:
                altered = {**altered, name: stored}
            self._write(created, altered)
            self._created, self._altered = created, altered
        self.configs[name] = config
        return config

    # --- new topics -----------------------------------------------------------------------------------------

    def adopt(self, name: str, partitions: int, configs: Mapping[str, Any]) -> None:
        """In a cluster: serve a topic the controller assigned replicas of here (made in ZooKeeper, by any broker),
        recorded in ``topics.json`` so a restart knows its settings; its partitions are opened one by one, those
        this broker holds a replica of (:meth:`ReplicaManager.open_partition`)."""
        check_topic(name, partitions)
        config = self.defaults.overridden(name, configs)
        if self.data_dir is not None:
            created = {**self._created, name: {"partitions": partitions, "configs": dict(config.overrides)}}
            self._write(created, self._altered)
            self._created = created
        self.configs[name] = config
        self.counts[name] = partitions

    def check_new(self, name: str, partitions: int, configs: Mapping[str, Any] | None = None) -> TopicConfig:
        """What :meth:`create` would check, without making anything: the topic's settings, or the error it would
        raise (TopicExistsError, ValueError)."""
        check_topic(name, partitions)
        if name in self.counts:
            raise TopicExistsError(f"topic {name!r} already exists with {self.counts[name]} partitions")
        config = self.defaults.overridden(name, configs or {})
        if self.data_dir is not None:
            for partition in range(partitions):
                directory = self.data_dir / f"{name}-{partition}"
                if os.path.lexists(directory):  # its data would not be recovered into the producer state
                    advice = ("restore topics.json, which listed it" if name in INTERNAL_TOPICS  # not a --topics one
                              else "start the broker with it in its topics")
                    raise TopicExistsError(f"{directory} exists (a topic of that name was served here before): "
                                           f"{advice}, or remove it")
        return config

    def create(self, name: str, partitions: int, configs: Mapping[str, Any] | None = None, *,
               internal: bool = False, made: list[PartitionLog] | None = None) -> None:
        """Add a topic of ``partitions`` partitions with Kafka's topic ``configs``, served from now on and after a
        restart (recorded in ``topics.json`` once its partitions exist). ``internal``: one of the coordinators'
        topics, which clients may not create."""
        if name in INTERNAL_TOPICS and not internal:
            raise ValueError(f"{name!r} is an internal topic: the broker makes it when its coordinator needs it")
        try:
            if made is None:
                config = self.check_new(name, partitions, configs)
            else:  # checked before they were made (their directories exist now)
                if name in self.counts:
                    raise TopicExistsError(f"topic {name!r} already exists with {self.counts[name]} partitions")
                config = self.defaults.overridden(name, configs or {})
        except BaseException:
            for partition_log in made or ():  # made off the loop, never to be served
                partition_log.discard()
            raise
        assert self.open_partitions is not None, "the broker sets open_partitions before topics are created"
        self.configs[name] = config
        try:
            undo = self.open_partitions(name, partitions, config, made)
        except BaseException:
            del self.configs[name]
            raise
        try:
            if self.data_dir is not None:  # recorded once every partition exists: a start serves all of them
                created = {**self._created, name: {"partitions": partitions, "configs": dict(config.overrides)}}
                altered = {topic: kept for topic, kept in self._altered.items() if topic != name}  # now its entry's
                self._write(created, altered)
                self._created, self._altered = created, altered
        except BaseException:
            undo()
            del self.configs[name]
            raise
        self.counts[name] = partitions
