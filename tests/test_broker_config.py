"""Kafka's broker settings by Kafka's names: ``server.properties`` read as Java reads it, every setting typed and
range-checked as Kafka's ``ConfigDef`` does, ``KafkaConfig``'s precedence rules, unknown names warned about, and
``idemcore serve --config`` end to end (segments rolled at ``log.segment.bytes``, a bad value refused in one
line with exit status 2, an unknown name warned about while serve still starts)."""

from __future__ import annotations

import itertools
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from idemcore.broker import Broker
from idemcore.broker.config import BrokerConfig, Endpoint, parse_override, shortcut_listener
from idemcore.broker.config_keys import KEYS, Kind, Use
from idemcore.broker.server import Server
from idemcore.cli import build_parser
from idemcore.cli.serve import _settings
from idemcore.errors import ConfigError
from idemcore.net.properties import read_properties

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "docs" / "broker.md"  # the README's Broker settings section


def _config(**settings: str) -> BrokerConfig:
    """A config from ``settings`` given as keyword arguments (dots spelt as ``__``)."""
    return BrokerConfig.from_properties({name.replace("__", "."): value for name, value in settings.items()})


def _refused(properties: dict[str, str], *words: str) -> str:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_properties(properties, dict.fromkeys(properties, "test.properties"))
    message = str(caught.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    return message


# ------------------------------------------------------------ reading Java properties


def test_a_properties_file_is_read_as_java_reads_it(tmp_path):
    path = tmp_path / "server.properties"
    path.write_bytes(
        b"# a comment\n"
        b"! another comment\n"
        b"   \n"
        b"log.dirs = /data/kafka\\\n"            # a continuation line: the next line's leading blanks dropped
        b"           -logs\n"
        b"listeners: PLAINTEXT://127.0.0.1:9093\n"  # ':' separates too
        b"num.partitions 4\n"                      # and a blank
        b"log.cleanup.policy=compact,\\\n"
        b"    delete\n"
        b"zookeeper.connect=zk\\u0031:2181/kafka\n"  # a \\u escape
        b"key\\=with\\:seps\\ and\\ blanks=v\\tw\n"   # escaped separators in a key; \\t in a value
        b"message.max.bytes=1000\n"
        b"message.max.bytes=2000\n"                # given twice: the last one
        b"caf\xe9=latin-1\n")                       # a stream is ISO-8859-1, as java.util.Properties.load reads it
    properties = read_properties(path)
    assert properties == {
        "log.dirs": "/data/kafka-logs", "listeners": "PLAINTEXT://127.0.0.1:9093", "num.partitions": "4",
        "log.cleanup.policy": "compact,delete", "zookeeper.connect": "zk1:2181/kafka",
        "key=with:seps and blanks": "v\tw", "message.max.bytes": "2000", "café": "latin-1"}
    properties.pop("key=with:seps and blanks")
    properties.pop("café")
    config = BrokerConfig.from_properties(properties)
    assert config.log_dir == Path("/data/kafka-logs")
    assert config.listener == Endpoint("127.0.0.1", 9093)
    assert config["num.partitions"] == 4 and config["message.max.bytes"] == 2000
    assert config["log.cleanup.policy"] == ("compact", "delete")
    assert config["zookeeper.connect"] == "zk1:2181/kafka"


def test_an_unreadable_file_or_bad_escape_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^cannot read the properties file .*missing\.properties: No such file"):
        read_properties(tmp_path / "missing.properties")
    bad = tmp_path / "bad.properties"
    bad.write_bytes(b"log.dirs=/a\\u00zz\n")
    with pytest.raises(ConfigError) as caught:
        read_properties(bad)
    assert str(caught.value).startswith(f"{bad}: ") and "\n" not in str(caught.value)


def test_load_puts_each_override_over_the_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.segment.bytes=4096\n")
    config = BrokerConfig.load(path, ["num.partitions=7", "log.roll.ms=5"])
    assert config["num.partitions"] == 7 and config["log.segment.bytes"] == 4096 and config.log_roll_ms == 5
    assert config.origins == {"num.partitions": "--override", "log.segment.bytes": str(path),
                              "log.roll.ms": "--override"}
    assert parse_override(" zookeeper.connect =zk:2181/a=b") == ("zookeeper.connect", "zk:2181/a=b")
    for text in ("num.partitions", "=3", " =3"):
        with pytest.raises(ConfigError, match="--override takes key=value"):
            BrokerConfig.load(None, [text])
    with pytest.raises(ConfigError, match=r"^invalid value '' for num.partitions \(from --override\)"):
        BrokerConfig.load(path, ["num.partitions="])


# ------------------------------------------------------------ every setting's type and range


def _integer_cases() -> list[tuple[str, str, str]]:
    """(setting, value, words of the refusal) for every integer setting: not a number, past its type's width,
    and past each bound of its range."""
    cases = []
    for name, key in KEYS.items():
        if key.kind not in (Kind.SHORT, Kind.INT, Kind.LONG):
            continue
        low, high = key.kind.bounds
        kind = f"not a number of type {key.kind.value}"
        cases += [(name, "abc", kind), (name, "1.5", kind), (name, "1_000", kind), (name, "0x10", kind),
                  (name, str(high + 1), kind), (name, str(low - 1), kind)]
        if key.low is not None:
            cases.append((name, str(key.low - 1), "must be"))
        if key.high is not None:
            cases.append((name, str(key.high + 1), "must be"))
    return cases


@pytest.mark.parametrize(("name", "value", "words"), _integer_cases())
def test_every_integer_setting_refuses_a_wrong_type_or_range_in_one_line(name, value, words):
    _refused({name: value}, f"invalid value {value!r} for {name} (from test.properties)", words)


@pytest.mark.parametrize("name", [name for name, key in KEYS.items() if key.kind in (Kind.SHORT, Kind.INT, Kind.LONG)])
def test_every_integer_setting_takes_its_bounds_and_kafkas_default(name):
    key = KEYS[name]
    low, high = key.kind.bounds
    edges = {key.low if key.low is not None else low, key.high if key.high is not None else high}
    if key.default is not None:
        edges.add(int(key.default))
    # Values a rule between settings refuses (tested below): log.roll.ms and log.retention.ms at least 1, the
    # follower's fetch wait within the replica socket timeout (30 s) and the lag time (30 s).
    derived = {"log.roll.ms": lambda v: v < 1, "log.retention.ms": lambda v: v == 0,
               "replica.fetch.wait.max.ms": lambda v: v > 30_000, "replica.socket.timeout.ms": lambda v: v < 500,
               "replica.lag.time.max.ms": lambda v: v < 500}
    for value in sorted(edges):
        if name in derived and derived[name](value):
            continue
        config = BrokerConfig.from_properties({name: f" {value} "})  # trimmed, as ConfigDef trims
        assert config[name] == value


@pytest.mark.parametrize("name", [name for name, key in KEYS.items() if key.kind is Kind.BOOLEAN])
def test_every_boolean_setting_takes_true_or_false_in_any_case_only(name):
    assert _config(**{name.replace(".", "__"): " TRUE "})[name] is True
    assert _config(**{name.replace(".", "__"): "False"})[name] is False
    for value in ("yes", "1", "", "t"):
        _refused({name: value}, f"invalid value {value!r} for {name}", "expected true or false")


def test_kafkas_ranges_and_defaults_for_the_settings_the_broker_honours():
    """Facts from Kafka 3.x's ConfigDef, checked one by one (a wrong table fails here, not only its own test)."""
    defaults = BrokerConfig.from_properties({})
    assert defaults.broker_kwargs() == {
        "broker_id": 0, "data_dir": None, "default_partitions": 1, "auto_create_topics": True,
        "segment_bytes": 1 << 30, "segment_ms": 7 * 86_400_000, "retention_ms": 7 * 86_400_000,
        "retention_bytes": -1, "index_interval_bytes": 4096, "message_max_bytes": 1_048_588,
        "producer_id_expiration_ms": 86_400_000, "transaction_state_partitions": 50,
        "transaction_max_timeout_ms": 900_000, "offsets_topic_partitions": 50, "flush_messages": 2**63 - 1,
        "flush_ms": 2**63 - 1, "flush_scheduler_interval_ms": 2**63 - 1, "recovery_point_checkpoint_ms": 60_000}
    assert defaults.server_kwargs() == {"host": "127.0.0.1", "port": 9092, "advertised_host": None,
                                        "advertised_port": None, "max_request_bytes": 104_857_600,
                                        "failed_authentication_delay_ms": 100}
    assert defaults["log.cleanup.policy"] == ("delete",) and defaults["log.retention.check.interval.ms"] == 300_000
    assert defaults["transactional.id.expiration.ms"] == 7 * 86_400_000
    assert defaults["log.flush.offset.checkpoint.interval.ms"] == 60_000 and defaults["min.insync.replicas"] == 1
    assert defaults["unclean.leader.election.enable"] is False and defaults["zookeeper.session.timeout.ms"] == 18_000
    assert defaults.log_flush_interval_ms == 2**63 - 1  # log.flush.interval.ms unset: the scheduler's interval
    accepted = {"log.segment.bytes": "14", "log.index.interval.bytes": "0", "log.retention.bytes": "-5",
                "log.flush.offset.checkpoint.interval.ms": "0", "log.retention.ms": "2147483648",
                "replica.fetch.max.bytes": "0", "transaction.state.log.replication.factor": "1"}
    config = BrokerConfig.from_properties(accepted)
    assert config.broker_kwargs()["segment_bytes"] == 14 and config.broker_kwargs()["index_interval_bytes"] == 0
    assert config.broker_kwargs()["retention_bytes"] == -1  # any negative: no limit, as Kafka
    assert config.log_retention_ms == 2**31  # a LONG
    for name, value in (("log.segment.bytes", "13"), ("log.roll.hours", "0"), ("num.partitions", "0"),
                        ("transaction.max.timeout.ms", "0"), ("producer.id.expiration.ms", "0"),
                        ("message.max.bytes", "2147483648"), ("log.flush.interval.messages", "0"),
                        ("offsets.topic.replication.factor", "32768"), ("log.retention.check.interval.ms", "0"),
                        ("transaction.state.log.num.partitions", "0"), ("offsets.topic.num.partitions", "10001")):
        _refused({name: value}, name, repr(value))


def test_a_list_setting_takes_only_its_choices():
    assert _config(log__cleanup__policy=" compact , delete ")["log.cleanup.policy"] == ("compact", "delete")
    assert _config(log__cleanup__policy="")["log.cleanup.policy"] == ()  # Kafka 3.x: neither, so never cleaned
    _refused({"log.cleanup.policy": "compact,shrink"}, "'shrink' is not one of compact, delete")


def test_replication_settings_are_taken_and_checked():
    """A cluster acts on them (a broker alone has one replica: CreateTopics refuses more); only their ranges and
    KafkaConfig's rules refuse values."""
    config = _config(default__replication__factor="3", min__insync__replicas="2",
                     unclean__leader__election__enable="true")
    assert config.not_acted_on() == ["unclean.leader.election.enable"]  # no zookeeper.connect: not a cluster's
    assert _config(unclean__leader__election__enable="true", zookeeper__connect="zk:2181").not_acted_on() == []
    assert (config["default.replication.factor"], config["min.insync.replicas"]) == (3, 2)
    _refused({"default.replication.factor": "0"}, "default.replication.factor")
    _refused({"min.insync.replicas": "0"}, "min.insync.replicas")
    _refused({"replica.fetch.wait.max.ms": "40000"}, "replica.fetch.wait.max.ms=40000",
             "replica.socket.timeout.ms=30000")
    _refused({"replica.fetch.wait.max.ms": "800", "replica.lag.time.max.ms": "700"},
             "more than replica.lag.time.max.ms=700 (from test.properties)")
    for good in ("zk:2181", "zk1:2181,zk2:2182/kafka/prod", "10.0.0.1:2181/kafka"):
        assert _config(zookeeper__connect=good)["zookeeper.connect"] == good
    for bad in ("zk", "zk:2181/", "zk:99999", "", "zk:2181,/x", "zk:2181//x"):
        _refused({"zookeeper.connect": bad}, "for zookeeper.connect", "host:port")


# ------------------------------------------------------------ KafkaConfig's precedence rules


def test_log_roll_ms_goes_over_log_roll_hours():
    assert _config(log__roll__hours="2").log_roll_ms == 2 * 3_600_000
    assert _config(log__roll__hours="2", log__roll__ms="1500").log_roll_ms == 1500
    _refused({"log.roll.ms": "0", "log.roll.hours": "5"}, "log.roll.ms", "at least 1")


def test_log_retention_ms_goes_over_minutes_over_hours():
    assert _config().log_retention_ms == 168 * 3_600_000
    assert _config(log__retention__hours="5").log_retention_ms == 5 * 3_600_000
    assert _config(log__retention__hours="5", log__retention__minutes="7").log_retention_ms == 7 * 60_000
    assert _config(log__retention__hours="5", log__retention__minutes="7",
                   log__retention__ms="900").log_retention_ms == 900
    for unlimited in ({"log.retention.ms": "-1"}, {"log.retention.ms": "-5", "log.retention.hours": "3"},
                      {"log.retention.hours": "-1"}, {"log.retention.minutes": "-2"}):
        assert BrokerConfig.from_properties(unlimited).log_retention_ms == -1
        assert BrokerConfig.from_properties(unlimited).broker_kwargs()["retention_ms"] == -1
    _refused({"log.retention.ms": "0", "log.retention.hours": "3"}, "for log.retention.ms", "unlimited (-1)")
    _refused({"log.retention.minutes": "0"}, "for log.retention.minutes")


def test_node_id_and_broker_id_name_one_id():
    assert _config().broker_id == 0
    assert _config(broker__id="4").broker_id == 4
    assert _config(node__id="5").broker_id == 5
    assert _config(node__id="6", broker__id="6").broker_kwargs()["broker_id"] == 6
    _refused({"node.id": "6", "broker.id": "7"}, "node.id=6 (from test.properties) and broker.id=7", "same value")
    _refused({"broker.id": "-1"}, "must be at least 0", "ZooKeeper")


def test_log_dirs_goes_over_log_dir_and_names_one_directory():
    assert _config().log_dir is None
    assert _config(log__dir="/a").log_dir == Path("/a")
    assert _config(log__dir="/a", log__dirs=" /b ").log_dir == Path("/b")
    assert _config(log__dirs="/b,").log_dir == Path("/b")  # Kafka's CSV parsing drops empty items
    _refused({"log.dirs": "/a,/b"}, "names 2 directories", "serves one log directory")
    _refused({"log.dirs": " , "}, "at least one log directory")


def test_listeners_and_advertised_listeners():
    config = _config(listeners="plaintext://[::1]:0")
    assert config.listener == Endpoint("::1", 0) and str(config.listener) == "PLAINTEXT://[::1]:0"
    assert config.server_kwargs()["host"] == "::1" and config.server_kwargs()["port"] == 0
    config = _config(listeners="PLAINTEXT://0.0.0.0:9093", advertised__listeners="PLAINTEXT://kafka.example:19093")
    assert config.server_kwargs() == {"host": "0.0.0.0", "port": 9093, "advertised_host": "kafka.example",
                                      "advertised_port": 19093, "max_request_bytes": 104_857_600,
                                      "failed_authentication_delay_ms": 100}
    # Port 0 advertised: the port bound; an empty host: every interface, the machine's name advertised (Kafka's).
    assert _config(advertised__listeners="PLAINTEXT://proxy:0").server_kwargs()["advertised_port"] is None
    everywhere = _config(listeners="PLAINTEXT://:9092").server_kwargs()
    assert everywhere["host"] == "" and everywhere["advertised_host"] not in ("", None)
    _refused({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "0.0.0.0", "advertised.listeners is unset")
    _refused({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "nonroutable meta-address 0.0.0.0")
    _refused({"listeners": "SSL://:9093"}, "listener SSL uses TLS and has no key store")
    _refused({"listeners": "INTERNAL://:9093"}, "no security protocol for the listener name 'INTERNAL'")
    _refused({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "the listener name PLAINTEXT is given twice")
    _refused({"listeners": "localhost:9092"}, "is not NAME://host:port")
    # Several listeners: each advertised by name; the flags that change one listener refuse several.
    config = _config(listeners="PLAINTEXT://127.0.0.1:9092,CLIENT://127.0.0.2:9094",
                     listener__security__protocol__map="PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
                     advertised__listeners="CLIENT://client.example:19094")
    assert [str(one.endpoint) for one in config.listeners] == ["PLAINTEXT://127.0.0.1:9092",
                                                              "CLIENT://127.0.0.2:9094"]
    assert {name: str(e) for name, e in config.advertised_listeners.items()} == {
        "CLIENT": "CLIENT://client.example:19094", "PLAINTEXT": "PLAINTEXT://127.0.0.1:9092"}
    assert config.inter_broker_listener == "PLAINTEXT" and len(config.server_kwargs()["listeners"]) == 2
    with pytest.raises(ConfigError, match="has 2 listeners: --host, --port and --advertised-host change a single"):
        shortcut_listener("PLAINTEXT://:1,SSL://:2", None, 5)
    _refused({"listeners": "PLAINTEXT://:70000"}, "port 70000")
    _refused({"advertised.listeners": ""}, "no listener")


def test_the_flush_settings_reach_the_broker(tmp_path):
    config = _config(log__flush__interval__messages="500", log__flush__interval__ms="-3",
                     log__flush__scheduler__interval__ms="250", log__flush__offset__checkpoint__interval__ms="5000")
    kwargs = config.broker_kwargs()
    assert (kwargs["flush_messages"], kwargs["flush_ms"], kwargs["flush_scheduler_interval_ms"],
            kwargs["recovery_point_checkpoint_ms"]) == (500, 0, 250, 5000)
    with Broker({"t": 1}, **{**kwargs, "data_dir": tmp_path}) as broker:
        assert (broker.topic_configs["t"].flush_messages, broker.topic_configs["t"].flush_ms) == (500, 0)
        assert broker.delayed.scheduler_interval_ms == 250 and broker.delayed.checkpoint_interval_ms == 5000
    assert not config.not_acted_on()


def test_log_flush_interval_ms_falls_back_to_the_scheduler_interval():
    assert _config(log__flush__scheduler__interval__ms="2000").log_flush_interval_ms == 2000
    assert _config(log__flush__scheduler__interval__ms="2000",
                   log__flush__interval__ms="100").log_flush_interval_ms == 100


# ------------------------------------------------------------ warnings


def test_an_unknown_name_is_one_warning_line_and_ignored(caplog):
    with caplog.at_level(logging.WARNING, logger="idemcore.broker.config"):
        config = BrokerConfig.from_properties({"log.segmnet.bytes": "5", "num.partitions": "2"},
                                              {"log.segmnet.bytes": "server.properties"})
    assert config["num.partitions"] == 2 and "log.segmnet.bytes" not in config.origins
    [record] = caplog.records
    assert record.getMessage() == ("the configuration 'log.segmnet.bytes' (from server.properties) was supplied but "
                                   "isn't a known config: ignored; did you mean log.segment.bytes?")
    with pytest.raises(KeyError, match="not a broker setting"):
        config["log.segmnet.bytes"]


def test_settings_given_but_not_acted_on_are_named_in_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="idemcore.broker.config"):
        config = _config(zookeeper__connect="zk:2181", log__cleanup__policy="compact", num__io__threads="4",
                         log__segment__bytes="4096", log__flush__interval__messages="1")
    # log.cleanup.policy gives the topics' cleanup.policy, log.flush.interval.messages their flush.messages.
    assert config.not_acted_on() == ["num.io.threads"]  # zookeeper.connect makes it a cluster's broker
    [record] = caplog.records
    assert record.getMessage().endswith(": num.io.threads")
    assert {key.use for key in KEYS.values()} == set(Use)


#: The settings of Kafka 3.x's own config/server.properties (its comments left out).
KAFKA_SERVER_PROPERTIES = """\
broker.id=0
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""


def test_kafkas_own_server_properties_is_known_setting_by_setting(tmp_path, caplog):
    path = tmp_path / "server.properties"
    path.write_text(KAFKA_SERVER_PROPERTIES)
    with caplog.at_level(logging.WARNING, logger="idemcore.broker.config"):
        config = BrokerConfig.load(path)
    [record] = caplog.records  # no unknown name: only the line naming what is not acted on yet
    assert config.not_acted_on() == [
        "num.network.threads", "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
        "log.retention.check.interval.ms", "num.recovery.threads.per.data.dir"]
    # its zookeeper.connect makes it a cluster's: those settings act
    assert record.getMessage().endswith(", ".join(config.not_acted_on()))
    assert config.log_dir == Path("/tmp/kafka-logs") and config.broker_kwargs()["segment_bytes"] == 1 << 30


# ------------------------------------------------------------ today's Broker and Server take them


def test_the_broker_and_server_take_the_arguments_the_settings_give(tmp_path):
    config = _config(log__dirs=str(tmp_path / "logs"), broker__id="3", num__partitions="2",
                     auto__create__topics__enable="false", log__segment__bytes="4096", log__roll__ms="60000",
                     log__retention__minutes="30", log__retention__bytes="1000000", log__index__interval__bytes="100",
                     message__max__bytes="50000", producer__id__expiration__ms="1000",
                     transaction__state__log__num__partitions="3", transaction__max__timeout__ms="5000",
                     offsets__topic__num__partitions="4", listeners="PLAINTEXT://127.0.0.1:0",
                     socket__request__max__bytes="1000")
    broker = Broker({}, fsync=False, **config.broker_kwargs())
    try:
        assert (broker.broker_id, broker.data_dir, broker.default_partitions) == (3, tmp_path / "logs", 2)
        assert broker.auto_create_topics is False and broker.message_max_bytes == 50_000
        assert broker.producer_id_expiration_ms == 1000 and broker.transaction_state_partitions == 3
        assert broker.transaction_max_timeout_ms == 5000 and broker.offsets_topic_partitions == 4
        defaults = broker.topic_configs_default
        assert (defaults.segment_bytes, defaults.segment_ms, defaults.retention_ms, defaults.retention_bytes,
                defaults.index_interval_bytes) == (4096, 60_000, 1_800_000, 1_000_000, 100)
        with Server(broker, **config.server_kwargs()) as server:
            assert server.address[0] == "127.0.0.1" and server.address[1] != 0 and server.max_request_bytes == 1000
    finally:
        broker.close()


# ------------------------------------------------------------ the serve command: flags as shortcuts


def _serve_settings(*argv: str) -> BrokerConfig:
    return _settings(build_parser().parse_args(["serve", *argv]))[0]


def test_a_flag_sets_its_setting_over_the_file_and_the_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("log.dirs=/from/file\nnum.partitions=3\nbroker.id=1\nnode.id=1\nsocket.request.max.bytes=5000\n"
                    "listeners=PLAINTEXT://127.0.0.2:9093\nauto.create.topics.enable=true\n")
    config = _serve_settings("--config", str(path))
    assert config.log_dir == Path("/from/file") and config.listener == Endpoint("127.0.0.2", 9093)
    config = _serve_settings("--config", str(path), "--override", "num.partitions=4", "--override", "broker.id=2",
                             "--override", "node.id=2")
    assert config["num.partitions"] == 4 and config.broker_id == 2
    config = _serve_settings("--config", str(path), "--override", "num.partitions=4", "--default-partitions", "5",
                             "--data-dir", "/from/flag", "--node-id", "7", "--port", "0", "--max-request-bytes", "99",
                             "--no-auto-create-topics")
    assert config["num.partitions"] == 5 and config.origins["num.partitions"] == "--default-partitions"
    assert config.log_dir == Path("/from/flag") and config.broker_id == 7  # node.id and broker.id both
    assert config.listener == Endpoint("127.0.0.2", 0)  # --port sets the port of listeners; its host stays
    assert config["socket.request.max.bytes"] == 99 and config["auto.create.topics.enable"] is False
    config = _serve_settings("--config", str(path), "--host", "127.0.0.3", "--advertised-host", "proxy.example")
    assert config.listener == Endpoint("127.0.0.3", 9093)
    assert config.server_kwargs()["advertised_host"] == "proxy.example"
    assert config.server_kwargs()["advertised_port"] is None  # the port listened on
    # Without --config the flags give what serve always did.
    config = _serve_settings("--data-dir", str(tmp_path / "d"))
    assert config.server_kwargs()["host"] == "127.0.0.1" and config.server_kwargs()["port"] == 9092
    assert config.broker_id == 0 and config.log_dir == tmp_path / "d"


def test_a_flag_value_refused_by_its_setting_names_both(tmp_path):
    with pytest.raises(ConfigError, match=r"^invalid value '20000' for num.partitions \(from --default-partitions\)"):
        _serve_settings("--data-dir", str(tmp_path), "--default-partitions", "20000")
    with pytest.raises(ConfigError, match=r"no log directory: set log\.dirs"):
        _serve_settings("--port", "0")
    with pytest.raises(ConfigError, match=r"listeners='PLAINTEXT://0.0.0.0:9092' \(from --host\)"):
        _serve_settings("--data-dir", str(tmp_path), "--host", "0.0.0.0")
    assert _serve_settings("--data-dir", str(tmp_path), "--host", "0.0.0.0", "--advertised-host",
                           "me.example").server_kwargs()["advertised_host"] == "me.example"


# ------------------------------------------------------------ end to end


def _start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "idemcore.cli", "serve", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})


def _listening_port(process: subprocess.Popen[str], timeout_s: float = 60.0) -> int:
    """The port of serve's "listening on host:port" line (bounded wait; fails if serve exits first)."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                line = process.stdout.readline()
                if not line:
                    break
                match = re.search(r"listening on [^ ]+:(\d+) ", line)
                if match:
                    return int(match.group(1))
    process.kill()
    raise AssertionError(f"serve did not listen: status {process.wait(10)}, stderr {process.stderr.read()!r}")


def test_serve_with_a_config_rolls_segments_at_log_segment_bytes(tmp_path):
    from idemcore.client import Producer
    from idemcore.net.tcp import TcpTransport
    from idemcore.record.kafka_files.segment import scan_segment

    segment_bytes = 2048
    (tmp_path / "server.properties").write_text(
        "# a broker for this test\n"
        "log.dirs=kafka-logs\n"  # relative: to serve's working directory, as Kafka's
        f"log.segment.bytes={segment_bytes}\n"
        "num.partitions=1\n"
        "not.a.kafka.setting=1\n")
    process = _start("--config", "server.properties", "--port", "0", cwd=tmp_path)
    try:
        port = _listening_port(process)
        with TcpTransport(f"127.0.0.1:{port}") as transport:
            producer = Producer(transport, linger_ms=0)
            futures = []
            for i in range(60):  # one batch per request: each ~270 bytes
                futures.append(producer.send("rolled", b"%03d" % i + b"x" * 200, partition=0))
                producer.flush()
            assert all(f.exception() is None for f in futures)
    finally:
        process.send_signal(signal.SIGTERM)
        err = process.communicate(timeout=60)[1]
    assert process.returncode == 0, err
    warnings = [line for line in err.splitlines() if "not.a.kafka.setting" in line]
    assert warnings == ["idemcore: WARNING: the configuration 'not.a.kafka.setting' (from server.properties) was "
                        "supplied but isn't a known config: ignored"]
    segments = sorted((tmp_path / "kafka-logs" / "rolled-0").glob("*.log"))
    assert len(segments) >= 5, [s.name for s in segments]
    scans = [scan_segment(path) for path in segments]
    assert all(scan.clean for scan in scans)
    assert sum(len(scan) for scan in scans) == 60
    for scan, following in itertools.pairwise(scans):
        assert scan.size <= segment_bytes  # never past the setting
        first_batch = int(following["position"][1]) if len(following) > 1 else following.size
        assert scan.size + first_batch > segment_bytes  # and rolled only when the next batch would pass it
        assert int(following["base_offset"][0]) == int(scan["last_offset"][-1]) + 1


def test_serve_refuses_a_bad_value_in_one_line_with_status_2(tmp_path):
    (tmp_path / "server.properties").write_text("log.dirs=kafka-logs\nlog.segment.bytes=1GB\nnot.known=1\n")
    result = subprocess.run([sys.executable, "-m", "idemcore.cli", "serve", "--config", "server.properties",
                             "--port", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "idemcore: error: invalid value '1GB' for log.segment.bytes (from server.properties): not a number of type "
        "INT (a whole number from -2147483648 to 2147483647)"]
    assert not (tmp_path / "kafka-logs").exists()  # refused before anything was made
    result = subprocess.run([sys.executable, "-m", "idemcore.cli", "serve", "--override", "log.dirs=a,b"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and "one log directory" in result.stderr


# ------------------------------------------------------------ the README


def test_the_readme_names_every_setting_where_it_says_what_idemcore_does_with_it():
    text = README.read_text()
    section = text[text.index("### Broker settings"):]
    section = re.split(r"\n##+ ", section)[0]  # up to the next heading (### Topic configs)
    assert "idemcore serve --config server.properties" in section
    bullets = {"Acted on in a cluster": Use.REPLICATION, "Acted on": Use.HONOURED,
               "Checked and kept, not acted on": Use.PENDING, "Checked, no meaning here": Use.INERT}
    for item in section.split("\n- ")[1:]:
        item = item.split("\n\n")[0]  # the last bullet ends at the paragraph after it
        use = next(use for start, use in bullets.items() if item.startswith(start))
        named = set(re.findall(r"`([a-z.]+)`", item)) & set(KEYS)
        assert named == {name for name, key in KEYS.items() if key.use is use}, use
