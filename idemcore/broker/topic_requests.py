"""Metadata and CreateTopics as the broker answers them: the topics it serves, made on request or, when
allowed, on first mention (Kafka's ``auto.create.topics.enable`` with ``num.partitions``). A bad name, count
or config is answered with Kafka's error code and a message naming the value, never raised out of
``Broker.handle``."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from idemcore.broker.topic_config import InvalidTopicConfig, TopicConfig
from idemcore.broker.topics import Topics
from idemcore.errors import IdemcoreError
from idemcore.net.configs import DescribedConfig
from idemcore.net.messages import (
    CreatedTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    NewTopic,
    TopicMetadata,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import INTERNAL_TOPICS, MAX_PARTITIONS_PER_TOPIC


def metadata(topics: Topics, request: MetadataRequest) -> MetadataResponse:
    names = request.topics
    if names is None:
        return MetadataResponse(tuple(TopicMetadata(name, ErrorCode.NONE, count, name in INTERNAL_TOPICS)
                                      for name, count in sorted(topics.items())), request.request_id)
    if not isinstance(names, tuple | list):
        return MetadataResponse((), request.request_id)
    answers = []
    for name in names:
        if name not in topics and type(name) is str and name not in INTERNAL_TOPICS \
                and request.allow_auto_topic_creation is True and topics.auto_create:
            created = _create(topics, NewTopic(name), validate_only=False, describe=None)
            if created.error_code != ErrorCode.NONE:
                answers.append(TopicMetadata(str(name), created.error_code))
                continue
        count = topics.get(name) if type(name) is str else None
        answers.append(TopicMetadata(str(name), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) if count is None
                       else TopicMetadata(name, ErrorCode.NONE, count, name in INTERNAL_TOPICS))
    return MetadataResponse(tuple(answers), request.request_id)


def create_topics(topics: Topics, request: CreateTopicsRequest,
                  describe: Callable[[TopicConfig], tuple[DescribedConfig, ...]]) -> CreateTopicsResponse:
    """Create (or with ``validate_only`` check) each topic; ``describe`` gives a created topic's configs as
    DescribeConfigs does (CreateTopics v5+ answers them)."""
    return CreateTopicsResponse(tuple(topic if isinstance(topic, CreatedTopic)
                                      else _create(topics, topic, request.validate_only is True, describe)
                                      for topic in new_topics(request)), request.request_id)


def new_topics(request: CreateTopicsRequest) -> Iterator[NewTopic | CreatedTopic]:
    """A CreateTopics request's entries in order: each NewTopic to create, or the refusal answering an entry that
    is not a NewTopic or (once) a name given twice."""
    wanted = request.topics if isinstance(request.topics, tuple | list) else ()
    names = [topic.name for topic in wanted if type(topic) is NewTopic]
    # Kafka's ControllerApis: a name given twice is created neither time, and answered once.
    repeated = {name for name, count in collections.Counter(names).items() if count > 1}
    answered: set[object] = set()
    for topic in wanted:
        if type(topic) is not NewTopic:
            yield CreatedTopic(str(topic)[:80], ErrorCode.INVALID_REQUEST, "not a NewTopic")
        elif topic.name in repeated:
            if topic.name not in answered:
                answered.add(topic.name)
                yield CreatedTopic(str(topic.name), ErrorCode.INVALID_REQUEST, "Found multiple entries for this topic.")
        else:
            yield topic


def _create(catalog: Topics, topic: NewTopic, validate_only: bool,
            describe: Callable[[TopicConfig], tuple[DescribedConfig, ...]] | None) -> CreatedTopic:
    """Make one topic (or only check it): its result, with Kafka's error code for what is wrong."""
    name, count = topic.name, topic.partitions
    if topic.assignments:  # a client's replica assignment: one broker can only hold every partition itself
        if count != -1 or topic.replication_factor != -1:
            return CreatedTopic(str(name), ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and "
                                "replicasAssignments were set. Both cannot be used at the same time.")
        assigned = dict(topic.assignments)
        if sorted(assigned) != list(range(len(assigned))) or any(
                tuple(replicas) != (catalog.broker_id,) for replicas in assigned.values()):
            return CreatedTopic(str(name), ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                f"topic {name!r}: replicas {dict(sorted(assigned.items()))}: this broker alone "
                                f"(id {catalog.broker_id}) holds every partition, partitions numbered from 0")
        count = len(assigned)
    if count == -1:
        count = catalog.default_partitions
    refused = refused_new_topic(name, count, catalog.counts.get)
    if refused is not None:
        return refused
    if topic.replication_factor not in (-1, 1):  # one broker keeps one replica: refused, never fewer than asked
        return CreatedTopic(name, ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"topic {name!r}: replication factor {topic.replication_factor!r}: one broker keeps 1 "
                            "replica (1, or -1 for the broker's default)")
    try:
        configs = wire_configs(topic.configs)
    except ValueError as error:
        return CreatedTopic(name, ErrorCode.INVALID_CONFIG, str(error))
    try:
        if validate_only:
            config = catalog.check_new(name, count, configs)
        else:
            catalog.create(name, count, configs)
            config = catalog.configs[name]
    except InvalidTopicConfig as error:
        return CreatedTopic(name, ErrorCode.INVALID_CONFIG, error.reason)
    except (ValueError, TypeError) as error:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION if "name" in str(error) else ErrorCode.INVALID_CONFIG
        return CreatedTopic(name, code, str(error))
    except IdemcoreError as error:  # TopicExistsError: its directory is there from an earlier run
        return CreatedTopic(name, ErrorCode.TOPIC_ALREADY_EXISTS, str(error))
    except OSError as error:  # its files could not be made (the disk, descriptors, an offline log directory)
        return CreatedTopic(name, ErrorCode.KAFKA_STORAGE_ERROR, f"topic {name!r} could not be made: {error}")
    return CreatedTopic(name, ErrorCode.NONE, None, count, () if describe is None else describe(config))


def refused_new_topic(name: object, count: object, existing: Callable[[str], int | None]) -> CreatedTopic | None:
    """The answer to a CreateTopics entry whose name is internal or not a string, whose topic ``existing`` knows
    (its partition count), or whose partition count (-1 resolved already) is out of range; None: it may be made.
    One check for the broker alone and for a cluster's member."""
    if type(name) is not str or name in INTERNAL_TOPICS:
        return CreatedTopic(str(name), ErrorCode.INVALID_TOPIC_EXCEPTION,
                            f"topic name {name!r} is internal or not a string")
    have = existing(name)
    if have is not None:
        return CreatedTopic(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists with {have} "
                            "partitions", have)
    if type(count) is not int or not 1 <= count <= MAX_PARTITIONS_PER_TOPIC:
        return CreatedTopic(name, ErrorCode.INVALID_PARTITIONS, f"topic {name!r}: {count!r} partitions (1 to "
                            f"{MAX_PARTITIONS_PER_TOPIC:,}, or -1 for the broker's default)")
    return None


def wire_configs(configs: Any) -> Mapping[str, str]:
    """Kafka's topic configs as the wire carries them, by name (``TopicConfig`` reads and checks each value)."""
    if not isinstance(configs, tuple | list):
        raise ValueError(f"configs must be (name, value) pairs, got {configs!r:.80}")
    given: dict[str, str] = {}
    for entry in configs:
        if not isinstance(entry, tuple) or len(entry) != 2 or type(entry[0]) is not str \
                or not (entry[1] is None or type(entry[1]) is str):
            raise ValueError(f"a config must be a (name, string value) pair, got {entry!r:.80}")
        name, value = entry
        if value is not None:  # null: the broker's default
            given[name] = value
    return given
