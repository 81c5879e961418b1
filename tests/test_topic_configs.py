"""Kafka's topic configs: the table (Kafka 3.x's names, types, defaults and ranges), values read as Kafka's
ConfigDef reads them, IncrementalAlterConfigs and AlterConfigs checked against a model of their semantics,
DescribeConfigs' sources and synonyms, the configs in force on the live partitions and kept across restarts, the
three APIs through kafka-python's codec at every served version, and confluent-kafka's and kafka-python's admin
clients against ``idemcore serve``."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore import Broker
from idemcore.broker.config import BrokerConfig
from idemcore.broker.config_keys import Kind
from idemcore.broker.topic_config import NOT_ACTED_ON, TOPIC_KEYS, InvalidTopicConfig, TopicConfig, parse_value
from idemcore.net.configs import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterResource,
    ConfigChange,
    ConfigSource,
    ConfigSynonym,
    DescribeConfigsRequest,
    DescribeResource,
    IncrementalAlterConfigsRequest,
    IncrementalResource,
    ResourceType,
)
from idemcore.net.messages import CreateTopicsRequest, NewTopic, ProduceRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch

from .peers import ServeProcess

ROOT = Path(__file__).resolve().parent.parent
TOPIC, BROKER = ResourceType.TOPIC, ResourceType.BROKER
SET, DELETE, APPEND, SUBTRACT = AlterConfigOp.SET, AlterConfigOp.DELETE, AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT
DYNAMIC, STATIC, DEFAULT = ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.STATIC_BROKER_CONFIG, \
    ConfigSource.DEFAULT_CONFIG
NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1


def describe(broker: Broker, name: str, *keys: str, synonyms: bool = False, kind: int = TOPIC) -> Any:
    (result,) = broker.handle(DescribeConfigsRequest((DescribeResource(kind, name, keys or None),),
                                                     include_synonyms=synonyms)).results
    return result


def entries(broker: Broker, name: str, *keys: str, synonyms: bool = False) -> dict[str, Any]:
    result = describe(broker, name, *keys, synonyms=synonyms)
    assert result.error_code == ErrorCode.NONE, result
    return {entry.name: entry for entry in result.configs}


def overrides(broker: Broker, name: str) -> dict[str, str]:
    return {n: e.value for n, e in entries(broker, name).items() if e.source == DYNAMIC}


def incremental(broker: Broker, name: str, *changes: tuple[str, int, str | None], validate_only: bool = False,
                kind: int = TOPIC) -> tuple[int, str | None]:
    (answer,) = broker.handle(IncrementalAlterConfigsRequest(
        (IncrementalResource(kind, name, tuple(ConfigChange(*c) for c in changes)),), validate_only)).results
    return answer.error_code, answer.error_message


def alter(broker: Broker, name: str, configs: dict[str, str | None], validate_only: bool = False,
          kind: int = TOPIC) -> tuple[int, str | None]:
    (answer,) = broker.handle(AlterConfigsRequest((AlterResource(kind, name, tuple(configs.items())),),
                                                  validate_only)).results
    return answer.error_code, answer.error_message


# ------------------------------------------------------------ the table


def test_the_topic_configs_are_kafkas_names_types_defaults_and_ranges():
    """Facts from Kafka 3.x's LogConfig and ServerTopicConfigSynonyms, one by one (a wrong table fails here)."""
    facts = {  # name: (type, default, low, high, first broker synonym)
        "cleanup.policy": (Kind.LIST, ("delete",), None, None, "log.cleanup.policy"),
        "retention.ms": (Kind.LONG, 604_800_000, -1, None, "log.retention.ms"),
        "retention.bytes": (Kind.LONG, -1, None, None, "log.retention.bytes"),
        "segment.bytes": (Kind.INT, 1_073_741_824, 14, None, "log.segment.bytes"),
        "segment.ms": (Kind.LONG, 604_800_000, 1, None, "log.roll.ms"),
        "segment.index.bytes": (Kind.INT, 10_485_760, 4, None, "log.index.size.max.bytes"),
        "index.interval.bytes": (Kind.INT, 4096, 0, None, "log.index.interval.bytes"),
        "delete.retention.ms": (Kind.LONG, 86_400_000, 0, None, "log.cleaner.delete.retention.ms"),
        "min.compaction.lag.ms": (Kind.LONG, 0, 0, None, "log.cleaner.min.compaction.lag.ms"),
        "max.compaction.lag.ms": (Kind.LONG, LONG_MAX, 1, None, "log.cleaner.max.compaction.lag.ms"),
        "min.cleanable.dirty.ratio": (Kind.DOUBLE, 0.5, 0, 1, "log.cleaner.min.cleanable.ratio"),
        "file.delete.delay.ms": (Kind.LONG, 60_000, 0, None, "log.segment.delete.delay.ms"),
        "flush.messages": (Kind.LONG, LONG_MAX, 1, None, "log.flush.interval.messages"),
        "flush.ms": (Kind.LONG, LONG_MAX, 0, None, "log.flush.interval.ms"),
        "max.message.bytes": (Kind.INT, 1_048_588, 0, None, "message.max.bytes"),
        "min.insync.replicas": (Kind.INT, 1, 1, None, "min.insync.replicas"),
        "unclean.leader.election.enable": (Kind.BOOLEAN, False, None, None, "unclean.leader.election.enable"),
        "message.timestamp.type": (Kind.STRING, "CreateTime", None, None, "log.message.timestamp.type"),
        "preallocate": (Kind.BOOLEAN, False, None, None, "log.preallocate"),
        "compression.type": (Kind.STRING, "producer", None, None, "compression.type"),
    }
    assert {name: (k.kind, k.default, k.low, k.high, k.synonyms[0]) for name, k in TOPIC_KEYS.items()} == facts
    assert TOPIC_KEYS["compression.type"].choices == ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
    defaults = TopicConfig()
    assert all(defaults.value(name) == key.default for name, key in TOPIC_KEYS.items())
    assert TOPIC_KEYS["flush.ms"].synonyms == ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")
    assert TOPIC_KEYS["retention.ms"].synonyms == ("log.retention.ms", "log.retention.minutes", "log.retention.hours")


@pytest.mark.parametrize("name, value, typed", [
    ("segment.bytes", " 1024 ", 1024), ("segment.bytes", "14", 14), ("segment.bytes", 2**31 - 1, 2**31 - 1),
    ("retention.ms", "-1", -1), ("retention.bytes", "-5", -5), ("retention.ms", str(LONG_MAX), LONG_MAX),
    ("cleanup.policy", "compact, delete", ("compact", "delete")), ("cleanup.policy", "", ()),
    ("cleanup.policy", ["delete"], ("delete",)), ("unclean.leader.election.enable", " TRUE", True),
    ("preallocate", False, False), ("min.cleanable.dirty.ratio", "0.25", 0.25), ("min.cleanable.dirty.ratio", 1, 1.0),
    ("message.timestamp.type", "LogAppendTime ", "LogAppendTime"), ("compression.type", "zstd", "zstd"),
])
def test_a_value_is_read_as_kafkas_config_def_reads_it(name, value, typed):
    assert parse_value(TOPIC_KEYS[name], value) == typed


@pytest.mark.parametrize("name, value, says", [
    ("segment.bytes", "1GB", "Invalid value 1GB for configuration segment.bytes: Not a number of type INT"),
    ("segment.bytes", "13", "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
    ("segment.bytes", "2147483648", "Invalid value 2147483648 for configuration segment.bytes: Not a number of type "
                                    "INT"),
    ("segment.bytes", True, "Invalid value True for configuration segment.bytes: Expected value to be a 32-bit "
                            "integer, but it was a bool"),
    ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("retention.ms", "1e3", "Invalid value 1e3 for configuration retention.ms: Not a number of type LONG"),
    ("min.cleanable.dirty.ratio", "1.5", "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must "
                                         "be no more than 1"),
    ("min.cleanable.dirty.ratio", "-0.1", "Value must be no less than 0"),
    ("min.cleanable.dirty.ratio", "nan", "Not a number of type DOUBLE"),
    ("message.timestamp.type", "Now", "Invalid value Now for configuration message.timestamp.type: String must be "
                                      "one of: CreateTime, LogAppendTime"),
    ("cleanup.policy", "compact,shrink", "Invalid value shrink for configuration cleanup.policy: String must be one "
                                         "of: compact, delete"),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: Expected value to be either true or "
                           "false"),
    ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
])
def test_a_bad_value_is_refused_with_kafkas_message_naming_key_and_value(name, value, says):
    with pytest.raises(InvalidTopicConfig) as caught:
        parse_value(TOPIC_KEYS[name], value)
    assert says in caught.value.reason
    with pytest.raises(InvalidTopicConfig, match=f"^topic 't': {re.escape(caught.value.reason)}$"):
        TopicConfig().overridden("t", {name: value})


def test_the_readme_says_which_topic_configs_are_acted_on():
    text = (ROOT / "docs" / "broker.md").read_text()  # the README's Topic configs section
    section = text[text.index("### Topic configs"):]
    section = re.split(r"\n##+ ", section)[0]
    bullets = [item.split("\n\n")[0] for item in section.split("\n- ")[1:]]
    named = [set(re.findall(r"`([a-z.]+)`", item)) & set(TOPIC_KEYS) for item in bullets]
    assert bullets[0].startswith("Acted on") and bullets[1].startswith("Accepted, checked")
    assert named == [{n for n, k in TOPIC_KEYS.items() if k.acted_on}, set(NOT_ACTED_ON)]


# ------------------------------------------------------------ the model: IncrementalAlterConfigs vs AlterConfigs

#: Values the model draws, and which of them it holds bad (for reasons of its own, not the implementation's).
POOL = {
    "segment.bytes": ["1024", "2048", "14"], "retention.ms": ["-1", "60000"], "retention.bytes": ["-1", "500"],
    "cleanup.policy": ["compact", "delete", "compact,delete", ""], "min.insync.replicas": ["1", "3"],
    "unclean.leader.election.enable": ["true", "false"], "min.cleanable.dirty.ratio": ["0.1", "1.0"],
    "message.timestamp.type": ["LogAppendTime", "CreateTime"], "segment.index.bytes": ["4", "4096"],
}
BAD = {"segment.bytes": ["13", "1GB"], "retention.ms": ["-2"], "cleanup.policy": ["shrink", "compact,shrink"],
       "min.insync.replicas": ["0"], "unclean.leader.election.enable": ["maybe"],
       "min.cleanable.dirty.ratio": ["2"], "message.timestamp.type": ["Now"], "nope.config": ["1"],
       "retention.hours": ["5"]}
NAMES = sorted(set(POOL) | set(BAD))
LIST_ITEMS = ["compact", "delete", "compact,delete", "shrink"]


def _valid(name: str, value: str) -> bool:
    if name not in POOL:
        return False  # a name Kafka does not know
    items = value.split(",") if name == "cleanup.policy" and value else [value]
    return all(item not in BAD.get(name, ()) for item in items) and value not in BAD.get(name, ())


@st.composite
def steps(draw: Any) -> tuple[str, str, dict[str, Any], bool]:
    """One request: its kind, the topic it names, its configs (full: name -> value; incremental: name ->
    (op, value)), validate_only."""
    topic = draw(st.sampled_from(["t"] * 5 + ["missing"]))
    names = draw(st.lists(st.sampled_from(NAMES + ["cleanup.policy"] * 4), max_size=4, unique=True))
    validate_only = draw(st.booleans()) and draw(st.booleans())
    if draw(st.booleans()):
        return "full", topic, {name: draw(st.sampled_from(POOL.get(name, []) + BAD.get(name, []))) for name in names}, \
            validate_only
    changes = {}
    for name in names:
        op = draw(st.sampled_from([SET, DELETE] + [APPEND, SUBTRACT] * 2 if name == "cleanup.policy"
                                  else [SET] * 6 + [DELETE] * 2 + [APPEND, SUBTRACT]))
        if op in (APPEND, SUBTRACT):
            value = draw(st.sampled_from(LIST_ITEMS))
        elif op == DELETE:
            value = None
        else:
            value = draw(st.sampled_from(POOL.get(name, []) + BAD.get(name, [])))
        changes[name] = (op, value)
    return "incremental", topic, changes, validate_only


def model_step(model: dict[str, str], kind: str, topic: str, configs: dict[str, Any]) -> tuple[int, dict[str, str]]:
    """Kafka's answer and the topic's overrides after it, by the semantics alone."""
    base = model if topic == "t" else {}
    if kind == "full":
        after = dict(configs)
    else:
        after = dict(base)
        for name, (op, value) in configs.items():
            if op == SET:
                after[name] = value
            elif op == DELETE:
                after.pop(name, None)
            else:
                if name != "cleanup.policy":
                    return ErrorCode.INVALID_CONFIG, model  # APPEND/SUBTRACT on a key that is not a LIST
                items = [i for i in after.get(name, "delete").split(",") if i]  # unset: Kafka's own default
                for item in value.split(","):
                    if op == APPEND and item not in items:
                        items.append(item)
                    elif op == SUBTRACT and item in items:
                        items.remove(item)
                after[name] = ",".join(items)
    if not all(_valid(name, value) for name, value in after.items()):
        return ErrorCode.INVALID_CONFIG, model
    if topic != "t":
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, model
    return ErrorCode.NONE, after


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps(), min_size=1, max_size=12))
def test_incremental_and_full_alter_follow_kafkas_semantics(requests):
    """Each request answered as the model says; after it, DescribeConfigs shows exactly the model's overrides as
    DYNAMIC_TOPIC_CONFIG (every other config at the broker's default), the live partition log rolls at the
    topic's segment.bytes, and the other topic is untouched."""
    broker = Broker({"t": 2, "u": 1}, segment_bytes=4096)
    model: dict[str, str] = {}
    untouched = entries(broker, "u")
    for kind, topic, configs, validate_only in requests:
        if kind == "full":
            code, _ = alter(broker, topic, configs, validate_only)
        else:
            code, _ = incremental(broker, topic, *((n, op, v) for n, (op, v) in configs.items()),
                                  validate_only=validate_only)
        expected, after = model_step(model, kind, topic, configs)
        assert code == expected, (kind, topic, configs, model)
        if not validate_only:
            model = after
        described = entries(broker, "t")
        assert {n: e.value for n, e in described.items() if e.source == DYNAMIC} == model
        assert all(e.value == untouched[n].value for n, e in described.items() if n not in model)
        segment_bytes = int(model.get("segment.bytes", "4096"))
        assert [broker.log("t", p).segment_bytes for p in (0, 1)] == [segment_bytes] * 2
        assert broker.topic_configs["t"].compacted == ("compact" in model.get("cleanup.policy", "delete").split(","))
    assert entries(broker, "u") == untouched


def test_incremental_list_operations_and_deletes_by_example():
    broker = Broker({"t": 1})
    assert incremental(broker, "t", ("cleanup.policy", APPEND, "compact")) == (ErrorCode.NONE, None)
    assert overrides(broker, "t") == {"cleanup.policy": "delete,compact"}  # unset counted as Kafka's "delete"
    assert incremental(broker, "t", ("cleanup.policy", SUBTRACT, "delete,compact"))[0] == ErrorCode.NONE
    assert overrides(broker, "t") == {"cleanup.policy": ""}  # neither: never cleaned, as Kafka 3.x
    assert not broker.topic_configs["t"].deletes and not broker.topic_configs["t"].compacted
    assert incremental(broker, "t", ("segment.bytes", APPEND, "1")) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key segment.bytes because its type is not LIST.")
    assert incremental(broker, "t", ("cleanup.policy", DELETE, None), ("retention.ms", SET, "1000")) == (
        ErrorCode.NONE, None)
    assert overrides(broker, "t") == {"retention.ms": "1000"}
    assert alter(broker, "t", {"segment.ms": "5000"}) == (ErrorCode.NONE, None)
    assert overrides(broker, "t") == {"segment.ms": "5000"}  # AlterConfigs: retention.ms is back to its default
    assert alter(broker, "t", {}) == (ErrorCode.NONE, None) and overrides(broker, "t") == {}


# ------------------------------------------------------------ errors per resource


def test_malformed_resources_are_answered_one_by_one_with_kafkas_codes():
    broker = Broker({"t": 1})
    twice = broker.handle(IncrementalAlterConfigsRequest((
        IncrementalResource(TOPIC, "t", (ConfigChange("segment.bytes", SET, "2048"),)),
        IncrementalResource(TOPIC, "t", ()),
        IncrementalResource(TOPIC, "missing", (ConfigChange("segment.bytes", SET, "2048"),))))).results
    assert [(r.resource_name, r.error_code, r.error_message) for r in twice] == [
        ("t", ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."),
        ("t", ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."),
        ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'missing' does not exist.")]
    assert incremental(broker, "t", ("segment.bytes", SET, "2048"), ("segment.bytes", DELETE, None)) == (
        ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    assert incremental(broker, "t", ("segment.bytes", SET, None), ("retention.ms", APPEND, None)) == (
        ErrorCode.INVALID_REQUEST, "Null value not supported for : segment.bytes, retention.ms")
    assert alter(broker, "t", {"segment.bytes": None}) == (
        ErrorCode.INVALID_REQUEST, "Null value not supported for : segment.bytes")
    assert incremental(broker, "t", ("segment.bytes", 7, "1")) == (ErrorCode.INVALID_REQUEST,
                                                                   "Unknown operations type 7")
    assert alter(broker, "missing", {"segment.bytes": "1GB"}) == (  # the values are checked before the topic
        ErrorCode.INVALID_CONFIG, "Invalid value 1GB for configuration segment.bytes: Not a number of type INT")
    assert alter(broker, "", {})[0] == ErrorCode.INVALID_REQUEST
    assert alter(broker, "a/b", {})[0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert alter(broker, "t", {"retention.hours": "1"}) == (ErrorCode.INVALID_CONFIG,
                                                           "Unknown topic config name: retention.hours")
    assert alter(broker, "t", {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}) == (
        ErrorCode.INVALID_CONFIG, "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms "
                                  "(5)")
    assert overrides(broker, "t") == {}
    refused = alter(broker, "0", {"log.segment.bytes": "1024"}, kind=BROKER)
    assert refused[0] == ErrorCode.INVALID_REQUEST and "Cannot update these configs dynamically: log.segment.bytes" \
        in refused[1] and "\n" not in refused[1]
    assert incremental(broker, "5", ("log.segment.bytes", SET, "1024"), kind=BROKER) == (
        ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 0, but received 5")
    assert alter(broker, "g", {}, kind=ResourceType.GROUP) == (
        ErrorCode.INVALID_REQUEST, "idemcore alters TOPIC and BROKER resources, not GROUP")
    assert alter(broker, "x", {}, kind=99) == (ErrorCode.INVALID_REQUEST, "Unknown resource type 99")
    bad = broker.handle(AlterConfigsRequest(("t",))).results  # type: ignore[arg-type]  # a misuse in process
    assert bad[0].error_code == ErrorCode.INVALID_REQUEST and "not a AlterResource" in bad[0].error_message


def test_validate_only_checks_and_changes_nothing(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert incremental(broker, "t", ("segment.bytes", SET, "2048"), validate_only=True) == (ErrorCode.NONE, None)
        assert incremental(broker, "t", ("segment.bytes", SET, "1"), validate_only=True)[0] == ErrorCode.INVALID_CONFIG
        assert overrides(broker, "t") == {} and broker.log("t", 0).segment_bytes == 1 << 30
    assert not (tmp_path / "topics.json").exists()


# ------------------------------------------------------------ DescribeConfigs


def test_describe_gives_kafkas_sources_and_synonyms():
    settings_ = BrokerConfig.from_properties({"log.segment.bytes": "2048", "log.retention.hours": "24",
                                              "log.cleanup.policy": "compact", "min.insync.replicas": "1"})
    broker = Broker({"t": 1}, settings=settings_, topic_configs={"t": {"retention.ms": 5000}},
                    **settings_.broker_kwargs())
    described = entries(broker, "t", synonyms=True)
    assert set(described) == set(TOPIC_KEYS)
    segment = described["segment.bytes"]
    assert (segment.value, segment.source, segment.read_only, segment.is_sensitive) == ("2048", STATIC, False, False)
    assert segment.synonyms == (ConfigSynonym("log.segment.bytes", "2048", STATIC),
                                ConfigSynonym("log.segment.bytes", "1073741824", DEFAULT))
    retention = described["retention.ms"]
    assert (retention.value, retention.source) == ("5000", DYNAMIC)
    # Kafka lists the broker synonyms from the first named log.retention.ms on: none, since only .hours is set.
    assert retention.synonyms == (ConfigSynonym("retention.ms", "5000", DYNAMIC),)
    assert (described["cleanup.policy"].value, described["cleanup.policy"].source) == ("compact", STATIC)
    assert broker.topic_configs["t"].compacted  # log.cleanup.policy gives the topics' default
    assert described["min.insync.replicas"].source == STATIC
    assert (described["preallocate"].value, described["preallocate"].source) == ("false", DEFAULT)
    assert described["preallocate"].config_type == 1 and described["cleanup.policy"].config_type == 7
    only = entries(broker, "t", "segment.bytes", "nope")
    assert list(only) == ["segment.bytes"] and only["segment.bytes"].synonyms == ()
    (documented,) = broker.handle(DescribeConfigsRequest((DescribeResource(TOPIC, "t", ("segment.ms",)),),
                                                         include_documentation=True)).results[0].configs
    assert documented.documentation == "the time after which a segment rolls"
    broker.close()


def test_a_broker_built_by_its_arguments_reports_those_as_static_settings():
    broker = Broker({"t": 1}, segment_bytes=4096, retention_ms=-1, broker_id=3)
    described = entries(broker, "t", synonyms=True)
    assert (described["segment.bytes"].value, described["segment.bytes"].source) == ("4096", STATIC)
    assert (described["retention.ms"].value, described["retention.ms"].source) == ("-1", STATIC)
    assert described["retention.ms"].synonyms == (ConfigSynonym("log.retention.ms", "-1", STATIC),
                                                  ConfigSynonym("log.retention.hours", "168", DEFAULT))
    own = {e.name: e for e in describe(broker, "3", synonyms=True, kind=BROKER).configs}
    assert (own["broker.id"].value, own["broker.id"].source, own["broker.id"].read_only) == ("3", STATIC, True)
    assert (own["log.segment.bytes"].value, own["log.segment.bytes"].source) == ("4096", STATIC)
    assert (own["num.partitions"].value, own["num.partitions"].source) == ("1", DEFAULT)
    assert own["log.roll.ms"].value is None and own["log.roll.hours"].value == "168"
    assert all(entry.read_only for entry in own.values())


@pytest.mark.parametrize("kind, name, code, says", [
    (TOPIC, "missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'missing' does not exist."),
    (TOPIC, "a/b", ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name 'a/b' is not legal"),
    (BROKER, "7", ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 0 or empty string, but received 7"),
    (BROKER, "x", ErrorCode.INVALID_REQUEST, "Broker id must be an integer, but it is: x"),
    (ResourceType.BROKER_LOGGER, "0", ErrorCode.INVALID_REQUEST, "idemcore describes TOPIC and BROKER resources, "
                                                                 "not BROKER_LOGGER"),
])
def test_describe_answers_each_resource_its_own_error(kind, name, code, says):
    broker = Broker({"t": 1})
    (wrong, right) = broker.handle(DescribeConfigsRequest((DescribeResource(kind, name),
                                                           DescribeResource(TOPIC, "t")))).results
    assert (wrong.error_code, wrong.configs) == (code, ()) and says in wrong.error_message
    assert right.error_code == ErrorCode.NONE and right.configs
    assert describe(broker, "", kind=BROKER).configs == ()  # the cluster-wide dynamic defaults: none here


def test_create_topics_answers_the_topics_configs():
    broker = Broker({})
    (made,) = broker.handle(CreateTopicsRequest((NewTopic("c", 2, (("cleanup.policy", "compact"),
                                                                    ("retention.ms", None))),))).results
    assert made.error_code == ErrorCode.NONE
    by_name = {entry.name: entry for entry in made.configs}
    assert (by_name["cleanup.policy"].value, by_name["cleanup.policy"].source) == ("compact", DYNAMIC)
    assert by_name["retention.ms"].source == DEFAULT  # null: the broker's default
    (bad,) = broker.handle(CreateTopicsRequest((NewTopic("d", 1, (("segment.bytes", "1GB"),)),))).results
    assert (bad.error_code, bad.error_message) == (
        ErrorCode.INVALID_CONFIG, "Invalid value 1GB for configuration segment.bytes: Not a number of type INT")
    (unknown,) = broker.handle(CreateTopicsRequest((NewTopic("d", 1, (("nope", "1"),)),))).results
    assert (unknown.error_code, unknown.error_message) == (ErrorCode.INVALID_CONFIG, "Unknown topic config name: nope")


# ------------------------------------------------------------ in force on the partitions, and durable


def _batch(topic: str, partition: int, value: bytes, key: bytes | None = b"k") -> RecordBatch:
    return RecordBatch(topic, partition, [value], [key], -1, -1, -1, NOW)


def test_min_insync_replicas_above_one_refuses_acks_all_as_kafka_does():
    broker = Broker({"t": 1, "u": 1})
    assert incremental(broker, "t", ("min.insync.replicas", SET, "2")) == (ErrorCode.NONE, None)
    (refused,) = broker.handle(ProduceRequest((_batch("t", 0, b"v"),), acks=-1)).responses
    assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert refused.error_message == ("The size of the current ISR Set(0) is insufficient to satisfy the min.isr "
                                     "requirement of 2 for partition t-0")
    assert broker.log("t", 0).log_end_offset == 0
    assert broker.handle(ProduceRequest((_batch("t", 0, b"v"),), acks=1)).responses[0].error_code == ErrorCode.NONE
    assert broker.handle(ProduceRequest((_batch("u", 0, b"v"),), acks=-1)).responses[0].error_code == ErrorCode.NONE


def test_max_message_bytes_of_a_topic_overrides_the_brokers():
    broker = Broker({"t": 1, "u": 1})
    assert incremental(broker, "t", ("max.message.bytes", SET, "100")) == (ErrorCode.NONE, None)
    big = b"x" * 200
    (refused,) = broker.handle(ProduceRequest((_batch("t", 0, big),))).responses
    assert refused.error_code == ErrorCode.MESSAGE_TOO_LARGE and "max.message.bytes=100 of topic t" in \
        refused.error_message
    assert broker.handle(ProduceRequest((_batch("u", 0, big),))).responses[0].error_code == ErrorCode.NONE


def _segments(directory: Path) -> list[tuple[int, int, int, int]]:
    """(base offset, .log size, .index size, .timeindex size) of each segment, oldest first."""
    return [(int(path.stem), path.stat().st_size, path.with_suffix(".index").stat().st_size,
             path.with_suffix(".timeindex").stat().st_size) for path in sorted(directory.glob("*.log"))]


def test_segment_settings_take_effect_on_the_live_log_and_after_a_restart(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path, fsync=False) as broker:
        for i in range(5):
            broker.handle(ProduceRequest((_batch("t", 0, b"%03d" % i + b"x" * 200),)))
        assert len(_segments(tmp_path / "t-0")) == 1
        assert incremental(broker, "t", ("segment.bytes", SET, "600")) == (ErrorCode.NONE, None)
        for i in range(5, 15):
            broker.handle(ProduceRequest((_batch("t", 0, b"%03d" % i + b"x" * 200),)))
        rolled = _segments(tmp_path / "t-0")
        assert len(rolled) >= 4 and all(size <= 600 for _, size, _, _ in rolled[1:])
        # segment.index.bytes: an index entry per batch; 12 bytes hold one time entry, so each segment takes two.
        assert incremental(broker, "t", ("segment.index.bytes", SET, "12"), ("index.interval.bytes", SET, "0")) == (
            ErrorCode.NONE, None)
        broker.handle(ProduceRequest((_batch("t", 0, b"roll"),)))  # a segment with the new index interval
        before = len(_segments(tmp_path / "t-0"))
        for i in range(6):
            broker.handle(ProduceRequest((_batch("t", 0, b"i%d" % i),)))
        indexed = _segments(tmp_path / "t-0")[before - 1:]
        assert len(indexed) >= 3 and all(index <= 8 and time_index <= 12 for _, _, index, time_index in indexed)
    stored = json.loads((tmp_path / "topics.json").read_text())
    assert stored["altered"] == {"t": {"segment.bytes": "600", "segment.index.bytes": "12",
                                       "index.interval.bytes": "0"}}
    with Broker({"t": 1}, data_dir=tmp_path) as again:
        assert overrides(again, "t") == {"segment.bytes": "600", "segment.index.bytes": "12",
                                         "index.interval.bytes": "0"}
        assert (again.log("t", 0).segment_bytes, again.log("t", 0).segment_index_bytes) == (600, 12)
        assert [value[:3] for _, _, value, _ in again.log("t", 0).records()][:15] == [b"%03d" % i for i in range(15)]


def test_a_created_topics_configs_are_changed_in_its_entry_and_win_over_those_given(tmp_path, caplog):
    with Broker({"t": 1}, data_dir=tmp_path, topic_configs={"t": {"retention.ms": 1000}}) as broker:
        broker.create_topic("c", 2, {"cleanup.policy": "compact"})
        assert incremental(broker, "c", ("retention.bytes", SET, "5000")) == (ErrorCode.NONE, None)
        assert incremental(broker, "t", ("retention.ms", SET, "2000")) == (ErrorCode.NONE, None)
    stored = json.loads((tmp_path / "topics.json").read_text())
    assert stored["topics"]["c"] == {"partitions": 2, "configs": {"cleanup.policy": "compact",
                                                                  "retention.bytes": "5000"}}
    assert stored["altered"] == {"t": {"retention.ms": "2000"}}
    with caplog.at_level(logging.WARNING, logger="idemcore.broker.broker"), \
            Broker({"t": 1}, data_dir=tmp_path, topic_configs={"t": {"retention.ms": 1000}}) as again:
        assert overrides(again, "c") == {"cleanup.policy": "compact", "retention.bytes": "5000"}
        assert overrides(again, "t") == {"retention.ms": "2000"} and again.topic_configs["t"].retention_ms == 2000
    assert any("replace those given" in record.getMessage() for record in caplog.records)


def test_a_failed_write_of_topics_json_changes_nothing(tmp_path, monkeypatch):
    import idemcore.broker.topics as broker_module

    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        def broken(*args: Any, **kwargs: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(broker_module, "write_file_atomically", broken)
        code, message = incremental(broker, "t", ("segment.bytes", SET, "2048"))
        assert code == ErrorCode.KAFKA_STORAGE_ERROR and "No space left on device" in message
        assert overrides(broker, "t") == {} and broker.log("t", 0).segment_bytes == 1 << 30
        monkeypatch.undo()  # the close writes its checkpoints


# ------------------------------------------------------------ the wire, through kafka-python's codec


def _kp_exchange(broker: Broker, request: Any, version: int) -> Any:
    """``request`` (a kafka-python message) framed as kafka-python sends it, answered through idemcore's wire
    translation, and the answer as kafka-python reads it."""
    from idemcore.net.wire.apis import APIS
    from idemcore.net.wire.frames import read_request, response_frame

    request.with_header(correlation_id=9, client_id="configs-test")
    frame = bytes(request.encode(header=True, framed=True))
    header, body = read_request(frame[4:])
    api = APIS[int(header.request_api_key)]
    message, carry = api.to_message(None, version, 9, body)  # type: ignore[arg-type]  # no context needed
    answer = api.to_wire(None, version, body, broker.handle(message), carry)  # type: ignore[arg-type]
    out = b"".join(response_frame(9, answer))
    decoded = type(request).__module__, type(request).__name__.replace("Request", "Response")
    import importlib

    response_cls = getattr(importlib.import_module(decoded[0]), decoded[1])
    read = response_cls.decode(out, version=version, header=True, framed=True)
    assert read.header.correlation_id == 9 and read.encode(header=True, framed=True) == out
    return read


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_on_the_wire_at_every_served_version(version):
    from kafka.protocol.admin.configs import DescribeConfigsRequest as KpDescribe

    broker = Broker({"t": 1}, topic_configs={"t": {"segment.bytes": 2048}})
    request = KpDescribe(resources=[KpDescribe.DescribeConfigsResource(resource_type=2, resource_name="t",
                                                                       configuration_keys=["segment.bytes"]),
                                    KpDescribe.DescribeConfigsResource(resource_type=2, resource_name="nope",
                                                                       configuration_keys=None)],
                         include_synonyms=True, include_documentation=True, version=version)
    (found, missing) = _kp_exchange(broker, request, version).results
    (entry,) = found.configs
    assert (entry.name, entry.value, entry.config_source, entry.read_only) == ("segment.bytes", "2048", 1, False)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("segment.bytes", "2048", 1), ("log.segment.bytes", "1073741824", 5)]
    if version >= 3:
        assert (entry.config_type, entry.documentation) == (3, "the size at which a segment rolls")
    assert (missing.error_code, missing.resource_name) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "nope")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_on_the_wire_at_every_served_version(version):
    from kafka.protocol.admin.configs import AlterConfigsRequest as KpAlter

    broker = Broker({"t": 1})
    resource = KpAlter.AlterConfigsResource
    request = KpAlter(resources=[resource(resource_type=2, resource_name="t", configs=[
        resource.AlterableConfig(name="retention.ms", value="1000")]), resource(
        resource_type=2, resource_name="t2", configs=[resource.AlterableConfig(name="segment.bytes", value="1")])],
        validate_only=False, version=version)
    (ok, bad) = _kp_exchange(broker, request, version).responses
    assert (ok.error_code, ok.resource_name) == (0, "t") and overrides(broker, "t") == {"retention.ms": "1000"}
    assert (bad.error_code, bad.error_message) == (
        ErrorCode.INVALID_CONFIG, "Invalid value 1 for configuration segment.bytes: Value must be at least 14")


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_on_the_wire_at_every_served_version(version):
    from kafka.protocol.admin.configs import IncrementalAlterConfigsRequest as KpIncremental

    broker = Broker({"t": 1})
    resource = KpIncremental.AlterConfigsResource
    request = KpIncremental(resources=[resource(resource_type=2, resource_name="t", configs=[
        resource.AlterableConfig(name="cleanup.policy", config_operation=2, value="compact"),
        resource.AlterableConfig(name="retention.bytes", config_operation=0, value="10")])],
        validate_only=False, version=version)
    (ok,) = _kp_exchange(broker, request, version).responses
    assert ok.error_code == 0
    assert overrides(broker, "t") == {"cleanup.policy": "delete,compact", "retention.bytes": "10"}


def test_the_three_apis_are_advertised_at_the_versions_kio_and_kafka_python_share():
    from kio.index import load_request_schema, load_response_schema

    from idemcore.net.wire.apis import advertised

    served = {key: (low, high) for key, low, high in advertised()}
    assert (served[32], served[33], served[44]) == ((1, 4), (0, 2), (0, 1))
    for key in (32, 33, 44):
        for version in range(served[key][0], served[key][1] + 1):
            load_request_schema(key, version)
            load_response_schema(key, version)


# ------------------------------------------------------------ real admin clients against `idemcore serve`

TIMEOUT_S = 20
QUIET = {"log.connection.close": False}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProcess]:
    """`idemcore serve` in a child process, with a log.segment.bytes of its own (a STATIC_BROKER_CONFIG)."""
    process = ServeProcess(tmp_path / "kafka-logs", "--override", "log.segment.bytes=8388608")
    process.start()
    try:
        yield process
    finally:
        status = process.stop()
        assert status == 0, process.output()[-2000:]


def _confluent_admin(serve: ServeProcess) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": serve.bootstrap, **QUIET})


def _described(admin: Any, kind: str, name: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_kafka_admin_creates_describes_and_alters_topic_configs(serve):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

    admin = _confluent_admin(serve)
    created = admin.create_topics([NewTopic("orders", 2, 1, config={"cleanup.policy": "compact",
                                                                     "segment.bytes": "1048576"})],
                                  request_timeout=TIMEOUT_S)
    created["orders"].result(TIMEOUT_S)
    configs = _described(admin, "topic", "orders")
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (
        "1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["cleanup.policy"].value == "compact" and not configs["cleanup.policy"].is_default
    assert configs["retention.ms"].is_default and not configs["retention.ms"].is_read_only
    assert set(configs["segment.bytes"].synonyms) == {"segment.bytes", "log.segment.bytes"}

    def incremental_change(*entries: Any) -> Any:
        resource = ConfigResource("topic", "orders", incremental_configs=list(entries))
        return admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource]

    incremental_change(ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
                       ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
                       ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE)
                       ).result(TIMEOUT_S)
    configs = _described(admin, "topic", "orders")
    assert configs["retention.ms"].value == "3600000" and configs["cleanup.policy"].value == "compact,delete"
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (  # back to the broker's setting
        "8388608", ConfigSource.STATIC_BROKER_CONFIG.value)

    with pytest.raises(KafkaException) as caught:
        incremental_change(ConfigEntry("segment.bytes", "1GB", incremental_operation=AlterConfigOpType.SET)
                           ).result(TIMEOUT_S)
    error = caught.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "Invalid value 1GB for configuration segment.bytes" in error.str()

    legacy = ConfigResource("topic", "orders", set_config={"retention.bytes": "1000000"})
    admin.alter_configs([legacy], request_timeout=TIMEOUT_S)[legacy].result(TIMEOUT_S)
    configs = _described(admin, "topic", "orders")
    modified = {name for name, entry in configs.items() if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    assert modified == {"retention.bytes"}  # AlterConfigs set the whole set: the others went back

    dry = ConfigResource("topic", "orders", set_config={"retention.bytes": "5"})
    admin.alter_configs([dry], validate_only=True, request_timeout=TIMEOUT_S)[dry].result(TIMEOUT_S)
    assert _described(admin, "topic", "orders")["retention.bytes"].value == "1000000"

    with pytest.raises(KafkaException) as missing:
        _described(admin, "topic", "nope")
    assert missing.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    own = _described(admin, "broker", "0")
    assert (own["log.segment.bytes"].value, own["log.segment.bytes"].source) == (
        "8388608", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert own["log.segment.bytes"].is_read_only and own["num.partitions"].is_default
    broker_change = ConfigResource("broker", "0", set_config={"log.segment.bytes": "1024"})
    with pytest.raises(KafkaException) as refused:
        admin.alter_configs([broker_change], request_timeout=TIMEOUT_S)[broker_change].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in refused.value.args[0].str()


def test_kafka_python_admin_describes_and_alters_topic_configs(serve):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    client = KafkaAdminClient(bootstrap_servers=serve.bootstrap, request_timeout_ms=10_000)
    try:
        client.create_topics({"events": {"num_partitions": 1, "replication_factor": 1,
                                         "configs": {"retention.ms": "7200000"}}})
        described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "events")],
                                            include_synonyms=True)["topic"]["events"]
        assert set(described) == {"retention.ms"}  # 'modified': the configs the topic sets
        assert (described["retention.ms"]["value"], described["retention.ms"]["config_source"]) == (
            "7200000", "DYNAMIC_TOPIC_CONFIG")
        everything = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "events")],
                                             config_filter="all")["topic"]["events"]
        assert set(everything) == set(TOPIC_KEYS) and everything["segment.bytes"]["value"] == "8388608"

        result = client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "events",
                                                      configs={"segment.ms": "60000"})], incremental=False)
        assert result == {"topic": {"events": "OK"}}
        # kafka-python fills in the configs the topic already set before a legacy AlterConfigs (its docstring).
        modified = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "events")])["topic"]["events"]
        assert {name: entry["value"] for name, entry in modified.items()} == {"retention.ms": "7200000",
                                                                              "segment.ms": "60000"}
        result = client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "events",
                                                      configs={"retention.ms": "bad"})])  # incremental
        assert "InvalidConfigurationError" in result["topic"]["events"]
        assert "Invalid value bad for configuration retention.ms" in result["topic"]["events"]
        own = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        assert own["broker"]["0"]["log.segment.bytes"]["value"] == "8388608"
    finally:
        client.close()


def test_segment_bytes_changed_by_a_client_rolls_segments_on_disk_and_survives_a_kill(tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from .real_client_helpers import read_confluent

    data_dir = tmp_path / "kafka-logs"
    serve = ServeProcess(data_dir).start()

    def produce(first: int, count: int) -> None:
        producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                             **QUIET})
        for i in range(first, first + count):  # one batch each: flushed one by one
            producer.produce("rolls", b"%04d" % i + b"v" * 1000, key=b"%d" % i, partition=0)
            assert producer.flush(TIMEOUT_S) == 0

    try:
        produce(0, 10)
        assert len(_segments(data_dir / "rolls-0")) == 1
        change = ConfigResource("topic", "rolls", incremental_configs=[
            ConfigEntry("segment.bytes", "4096", incremental_operation=AlterConfigOpType.SET)])
        admin = _confluent_admin(serve)
        admin.incremental_alter_configs([change], request_timeout=TIMEOUT_S)[change].result(TIMEOUT_S)
        produce(10, 20)
        rolled = _segments(data_dir / "rolls-0")
        assert len(rolled) >= 5 and all(size <= 4096 for _, size, _, _ in rolled[1:])
        serve.kill()  # the change was recorded before it was answered

        serve.start()
        configs = _described(_confluent_admin(serve), "topic", "rolls")
        assert (configs["segment.bytes"].value, configs["segment.bytes"].is_default) == ("4096", False)
        before = len(_segments(data_dir / "rolls-0"))
        produce(30, 10)
        after = _segments(data_dir / "rolls-0")
        assert len(after) >= before + 2 and all(size <= 4096 for _, size, _, _ in after[1:])
        read = read_confluent(serve.bootstrap, "rolls", [0])
        assert [value[:4] for _, _, value in read.records[0]] == [b"%04d" % i for i in range(40)]
    finally:
        assert serve.stop() == 0, serve.output()[-2000:]
