"""Kafka's broker settings by Kafka's names: ``server.properties`` read, typed and checked once into a
:class:`BrokerConfig`, which gives today's ``Broker(...)`` and ``Server(...)`` their arguments.

The settings, their types, defaults and ranges are in :mod:`idemcore.broker.config_keys`; values are read as
Kafka's ``ConfigDef`` reads them (trimmed; ``true``/``false`` in any case; whole numbers of the type's width; a
LIST split on commas), and the derived settings follow ``KafkaConfig``'s rules (``log.roll.ms`` over
``log.roll.hours``; ``log.retention.ms`` over ``.minutes`` over ``.hours``; ``node.id`` and ``broker.id`` one
id; ``log.dirs`` over ``log.dir``; ``advertised.listeners`` falling back to ``listeners``).
"""

from __future__ import annotations

import difflib
import logging
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from idemcore.broker.config_keys import DOUBLE_TEXT, INTEGER_TEXT, KEYS, LIST_SEPARATOR, Key, Kind, Use
from idemcore.broker.security.listeners import (
    Endpoint,
    ListenerSecurity,
    inter_broker_listener,
    listener_securities,
    parse_endpoints,
    parse_protocol_map,
    split_listener_overrides,
)
from idemcore.errors import ConfigError
from idemcore.net.properties import read_properties

log = logging.getLogger(__name__)

#: Where ``idemcore serve`` listens when ``listeners`` is not set: loopback, not Kafka's every interface.
DEFAULT_LISTENER = "PLAINTEXT://127.0.0.1:9092"
_HOST_PORT = re.compile(r"[^\s:/,]+:[0-9]{1,5}")


@dataclass(frozen=True)
class BrokerConfig:
    """One broker's settings, by Kafka's names, read and checked once (:meth:`from_properties`, :meth:`load`).

    ``config["log.segment.bytes"]`` gives any setting (its default when not supplied; None for an unset one
    without a default). What idemcore does with each today:

    - honoured (:meth:`broker_kwargs`, :meth:`server_kwargs`): ``broker.id``/``node.id``, ``listeners``,
      ``advertised.listeners``, ``log.dirs``/``log.dir`` (one directory for now), ``num.partitions``,
      ``auto.create.topics.enable``, ``log.segment.bytes``, ``log.roll.ms``/``.hours``, ``log.retention.ms``/
      ``.minutes``/``.hours``/``.bytes``, ``log.index.interval.bytes``, ``log.index.size.max.bytes``,
      ``log.cleanup.policy``, ``log.cleaner.delete.retention.ms`` (topic defaults: ``Broker(settings=...)``),
      ``message.max.bytes``,
      ``socket.request.max.bytes``, ``producer.id.expiration.ms``, ``transaction.state.log.num.partitions``,
      ``transaction.max.timeout.ms``, ``offsets.topic.num.partitions``, ``default.replication.factor`` (1),
      ``log.flush.interval.messages``, ``log.flush.interval.ms``, ``log.flush.scheduler.interval.ms``,
      ``log.flush.offset.checkpoint.interval.ms`` (while the broker runs behind its TCP server: :mod:`.delayed`),
      the group coordinator's ``offset.metadata.max.bytes``, ``offsets.retention.minutes``,
      ``offsets.retention.check.interval.ms``, ``group.min.session.timeout.ms``, ``group.max.session.timeout.ms``,
      ``group.initial.rebalance.delay.ms`` (:meth:`group_coordinator_kwargs`, read by the broker from its
      ``settings``), the KIP-848 groups' ``group.consumer.session.timeout.ms``,
      ``group.consumer.heartbeat.interval.ms`` and ``group.consumer.assignors`` (:meth:`consumer_groups_kwargs`);
    - checked and kept, not acted on yet (a warning names them): ``log.retention.check.interval.ms``,
      the defaults of the topic configs idemcore does not act on (``log.cleaner.*`` compaction
      lags and ratio, ``log.segment.delete.delay.ms``, ``log.preallocate``, ``log.message.timestamp.type``,
      ``compression.type``), ``transactional.id.expiration.ms``, the internal topics' segment
      sizes, the transaction coordinator's cleanup intervals;
    - checked and kept for replication: ``zookeeper.*``, ``replica.*``, ``num.replica.fetchers``,
      ``unclean.leader.election.enable``, ``min.insync.replicas`` (1), the internal topics' replication factor
      and ``transaction.state.log.min.isr`` (a lone broker makes the internal topics with one replica, where Kafka
      waits for enough brokers);
    - checked, no meaning here: thread counts and socket buffer sizes; ``log.flush.start.offset.checkpoint.interval.ms``
      (``log-start-offset-checkpoint`` is written whenever retention moves a log start, before any file goes).

    ``default.replication.factor`` and ``min.insync.replicas`` above 1 are refused: one broker cannot keep a
    second replica, and refusing is better than acknowledging writes with less durability than asked.
    """

    values: Mapping[str, Any]
    #: The settings given (file, overrides, flags), each with where it came from.
    origins: Mapping[str, str]
    broker_id: int
    log_dir: Path | None
    #: The first listener (where ``--host``/``--port`` point, and a one-listener server listens).
    listener: Endpoint
    #: Where clients of the first listener are sent (None: the listener, the port it was given).
    advertised: Endpoint | None
    log_roll_ms: int
    log_retention_ms: int
    log_flush_interval_ms: int
    #: Every listener with its security (protocol, TLS context, SASL mechanisms), in ``listeners``' order.
    listeners: tuple[ListenerSecurity, ...] = ()
    #: Each listener's advertised address by listener name (``advertised.listeners``, else ``listeners``).
    advertised_listeners: Mapping[str, Endpoint] = field(default_factory=lambda: MappingProxyType({}))
    #: The listener brokers reach each other on.
    inter_broker_listener: str = "PLAINTEXT"

    def __getitem__(self, name: str) -> Any:
        if name not in KEYS:
            raise KeyError(f"{name!r} is not a broker setting idemcore knows")
        return self.values[name]

    # ------------------------------------------------------------ building

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
        """The settings of the properties file ``path`` (if any), each ``key=value`` of ``overrides`` over them (as
        ``kafka-server-start.sh server.properties --override key=value``)."""
        return cls.from_properties(*read_settings(path, overrides))

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], origins: Mapping[str, str] | None = None) -> BrokerConfig:
        """Check ``properties`` (Kafka's names, string values) the way ``KafkaConfig`` does; raise
        :class:`~idemcore.errors.ConfigError` in one line naming the setting and its value. A name Kafka's broker
        would not know is logged as a warning and ignored, as Kafka does (once every value passed: a refusal is
        the one line said)."""
        origins = dict(origins or {})
        values: dict[str, Any] = {name: key.default for name, key in KEYS.items()}
        for name, text in properties.items():
            key = KEYS.get(name)
            if key is None:
                continue
            if not isinstance(text, str):
                raise ConfigError(f"{name}{_origin(origins, name)}: a value must be a string, got {text!r}")
            values[name] = _parse(key, text, _origin(origins, name))
        supplied = {name: origins.get(name, "") for name in properties if name in KEYS}
        overrides = {where: _parse(KEYS[where[1]], text, _origin(origins, f"listener.name.{where[0].lower()}."
                                                                  f"{where[1]}")) if where[1] in KEYS else text
                     for where, text in split_listener_overrides(properties).items()}
        endpoints, advertised, inter_broker = _listeners(values, supplied)
        securities = listener_securities(endpoints, parse_protocol_map(values["listener.security.protocol.map"]),
                                         values.__getitem__, overrides)
        first_advertised = advertised.get(endpoints[0].name)
        config = cls(values=MappingProxyType(values), origins=MappingProxyType(supplied),
                     broker_id=_broker_id(values, supplied), log_dir=_log_dir(values, supplied),
                     listener=endpoints[0],
                     advertised=first_advertised if values["advertised.listeners"] is not None else None,
                     log_roll_ms=_roll_ms(values, supplied), log_retention_ms=_retention_ms(values, supplied),
                     log_flush_interval_ms=_flush_interval_ms(values), listeners=securities,
                     advertised_listeners=MappingProxyType(advertised), inter_broker_listener=inter_broker)
        _check_replication(values, supplied)
        if not values["group.consumer.assignors"]:  # the first is the default: there must be one
            name = "group.consumer.assignors"
            raise ConfigError(f"invalid value {properties[name]!r} for {name}{_origin(origins, name)}: "
                              "name at least one server assignor")
        for name in properties:
            if name not in KEYS and not name.startswith("listener.name."):
                _warn_unknown(name, origins.get(name))
        idle = config.not_acted_on()
        if idle:
            log.warning("accepted and checked, not acted on yet (README: Broker settings): %s", ", ".join(idle))
        return config

    # ------------------------------------------------------------ using

    def not_acted_on(self) -> list[str]:
        """The settings given that this broker does not act on (not yet, without meaning here, or a cluster's
        setting given to a broker without ``zookeeper.connect``), in the order of
        :data:`~idemcore.broker.config_keys.KEYS`."""
        clustered = self.values["zookeeper.connect"] is not None
        return [name for name, key in KEYS.items() if name in self.origins and key.use is not Use.HONOURED
                and not (key.use is Use.REPLICATION and clustered)]

    def broker_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of today's :class:`~idemcore.broker.Broker` these settings give."""
        v = self.values
        return {
            "broker_id": self.broker_id,
            "data_dir": self.log_dir,
            "default_partitions": v["num.partitions"],
            "auto_create_topics": v["auto.create.topics.enable"],
            "segment_bytes": v["log.segment.bytes"],
            "segment_ms": self.log_roll_ms,
            "retention_ms": self.log_retention_ms,
            # Kafka deletes by size only for a positive retention.bytes: any negative value means no limit.
            "retention_bytes": max(-1, v["log.retention.bytes"]),
            "index_interval_bytes": v["log.index.interval.bytes"],
            "message_max_bytes": v["message.max.bytes"],
            "producer_id_expiration_ms": v["producer.id.expiration.ms"],
            "transaction_state_partitions": v["transaction.state.log.num.partitions"],
            "transaction_max_timeout_ms": v["transaction.max.timeout.ms"],
            "offsets_topic_partitions": v["offsets.topic.num.partitions"],
            "flush_messages": v["log.flush.interval.messages"],
            # Kafka takes any long; a negative interval acts as 0 there (due at every check), and so here.
            "flush_ms": max(0, self.log_flush_interval_ms),
            "flush_scheduler_interval_ms": max(0, v["log.flush.scheduler.interval.ms"]),
            "recovery_point_checkpoint_ms": v["log.flush.offset.checkpoint.interval.ms"],
        }

    def group_coordinator_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~idemcore.broker.group.GroupCoordinator` these settings give (the
        broker passes them when it makes its group coordinator)."""
        v = self.values
        return {
            "offset_metadata_max_bytes": v["offset.metadata.max.bytes"],
            "min_session_timeout_ms": v["group.min.session.timeout.ms"],
            "max_session_timeout_ms": v["group.max.session.timeout.ms"],
            "initial_rebalance_delay_ms": v["group.initial.rebalance.delay.ms"],
            "offsets_retention_ms": v["offsets.retention.minutes"] * 60_000,
            "offsets_retention_check_interval_ms": v["offsets.retention.check.interval.ms"],
        }

    def consumer_groups_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~idemcore.broker.group.consumer_group.ConsumerGroups` (KIP-848) these
        settings give (the broker passes them when it makes them)."""
        v = self.values
        return {
            "session_timeout_ms": v["group.consumer.session.timeout.ms"],
            "heartbeat_interval_ms": v["group.consumer.heartbeat.interval.ms"],
            "assignors": v["group.consumer.assignors"],
        }

    def server_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~idemcore.broker.server.Server` (after the broker) these settings give:
        where to listen (every listener with its security), where to send clients, the largest request."""
        advertised = self.advertised
        if advertised is None and self.listener.host == "":
            # Kafka advertises the machine's canonical host name for a listener on every interface.
            advertised = Endpoint(socket.getfqdn(), 0)
        kwargs: dict[str, Any] = {
            "host": self.listener.host,
            "port": self.listener.port,
            "advertised_host": advertised.host if advertised is not None else None,
            # Port 0 advertised: the port bound (Kafka's KafkaServer does the same).
            "advertised_port": (advertised.port or None) if advertised is not None else None,
            "max_request_bytes": self.values["socket.request.max.bytes"],
            "failed_authentication_delay_ms": self.values["connection.failed.authentication.delay.ms"],
        }
        if len(self.listeners) > 1 or any(one.protocol != "PLAINTEXT" for one in self.listeners):
            kwargs["listeners"] = self.listeners
            kwargs["advertised_listeners"] = {name: _advertise(endpoint) for name, endpoint in
                                              self.advertised_listeners.items()}
            kwargs["inter_broker_listener"] = self.inter_broker_listener
        return kwargs


def _advertise(endpoint: Endpoint) -> Endpoint:
    """A listener on every interface is advertised by the machine's canonical host name (Kafka's rule)."""
    return Endpoint(socket.getfqdn(), endpoint.port, endpoint.name) if endpoint.host == "" else endpoint


# ------------------------------------------------------------ reading


def read_settings(path: str | Path | None, overrides: Iterable[str] = ()) -> tuple[dict[str, str], dict[str, str]]:
    """The properties of the file ``path`` (if any) with ``overrides`` (``key=value``) over them, and where each
    came from (the file's name, or ``--override``)."""
    properties = read_properties(path) if path is not None else {}
    origins = dict.fromkeys(properties, str(path))
    for text in overrides:
        key, value = parse_override(text)
        properties[key], origins[key] = value, "--override"
    return properties, origins


def parse_override(text: str) -> tuple[str, str]:
    """``key=value`` of ``--override`` (the value may hold more ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--override takes key=value, got {text!r}")
    return key.strip(), value


def shortcut_listener(current: str | None, host: str | None, port: int | None, name: str = "listeners",
                      default: str = DEFAULT_LISTENER, origin: str = "") -> str:
    """``current`` (a ``listeners`` or ``advertised.listeners`` value; None: ``default``) with its host and/or
    port replaced: how the ``--host``, ``--port`` and ``--advertised-host`` flags set those settings."""
    text = current if current is not None else default
    endpoints = parse_endpoints(name, text, _ANY_NAME, f" (from {origin})" if origin else "")
    if len(endpoints) > 1:
        raise ConfigError(f"{name}={text!r}{f' (from {origin})' if origin else ''} has {len(endpoints)} listeners: "
                          f"--host, --port and --advertised-host change a single one; set {name} instead")
    endpoint = endpoints[0]
    return str(Endpoint(endpoint.host if host is None else host, endpoint.port if port is None else port,
                        endpoint.name))


class _AnyName(dict[str, str]):
    """A protocol map where every name has a protocol: the flags change addresses, names are checked later."""

    def __contains__(self, name: object) -> bool:
        return True


_ANY_NAME = _AnyName()


# ------------------------------------------------------------ values


def _origin(origins: Mapping[str, str], name: str) -> str:
    origin = origins.get(name)
    return f" (from {origin})" if origin else ""


def _warn_unknown(name: str, origin: str | None) -> None:
    near = difflib.get_close_matches(name, KEYS, n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    log.warning("the configuration %r%s was supplied but isn't a known config: ignored%s", name,
                f" (from {origin})" if origin else "", hint)


def _parse(key: Key, text: str, origin: str) -> Any:
    """``text`` as Kafka's ``ConfigDef.parseType`` reads a value of ``key``'s type, then checked against its
    range or choices."""
    value = text.strip()

    def bad(reason: str) -> ConfigError:
        return ConfigError(f"invalid value {text!r} for {key.name}{origin}: {reason}")

    if key.kind is Kind.BOOLEAN:
        if value.lower() not in ("true", "false"):
            raise bad("expected true or false")
        return value.lower() == "true"
    if key.kind is Kind.STRING:
        if key.choices and value not in key.choices:
            raise bad(f"must be one of {', '.join(key.choices)}")
        return value
    if key.kind is Kind.DOUBLE:
        if not DOUBLE_TEXT.fullmatch(value):
            raise bad("not a number of type DOUBLE")
        real = float(value)
        if (key.low is not None and real < key.low) or (key.high is not None and real > key.high):
            raise bad(f"must be from {key.low} to {key.high}")
        return real
    if key.kind is Kind.LIST:
        items = [item for item in LIST_SEPARATOR.split(value) if item] if value else []
        wrong = [item for item in items if key.choices and item not in key.choices]
        if wrong:
            raise bad(f"{wrong[0]!r} is not one of {', '.join(key.choices)}")
        return tuple(items)
    low, high = key.kind.bounds
    if not INTEGER_TEXT.fullmatch(value) or not low <= int(value) <= high:
        raise bad(f"not a number of type {key.kind.value} (a whole number from {low} to {high})")
    number = int(value)
    if (key.low is not None and number < key.low) or (key.high is not None and number > key.high):
        if key.high is None:
            limit = f"at least {key.low}"
        elif key.low == key.high:
            limit = f"{key.low}"
        else:
            limit = f"from {key.low} to {key.high}"
        raise bad(f"must be {limit}" + (f" ({key.note})" if key.note else ""))
    return number


# ------------------------------------------------------------ derived settings (KafkaConfig's rules)


def _broker_id(values: Mapping[str, Any], origins: Mapping[str, str]) -> int:
    """``broker.id`` and ``node.id`` name one id (``KafkaConfig.populateSynonyms``): either one sets both, and
    both set must agree. Neither: 0 (Kafka's -1 asks ZooKeeper for an id, and this broker runs without it)."""
    broker_id, node_id = values["broker.id"], values["node.id"]
    if broker_id is not None and node_id is not None and broker_id != node_id:
        raise ConfigError(f"node.id={node_id}{_origin(origins, 'node.id')} and broker.id={broker_id}"
                          f"{_origin(origins, 'broker.id')} differ: they name one id, set them to the same value")
    chosen = broker_id if broker_id is not None else node_id
    return 0 if chosen is None else int(chosen)


def _log_dir(values: Mapping[str, Any], origins: Mapping[str, str]) -> Path | None:
    """``log.dirs``, else ``log.dir``, as Kafka's comma-separated list; None when neither is set (Kafka's
    default ``/tmp/kafka-logs`` is not taken: a log in /tmp is lost at the next boot)."""
    name = "log.dirs" if values["log.dirs"] is not None else "log.dir"
    text = values[name]
    if text is None:
        return None
    dirs = [item for item in LIST_SEPARATOR.split(text) if item]
    if not dirs:
        raise ConfigError(f"invalid value {text!r} for {name}{_origin(origins, name)}: at least one log directory "
                          "must be defined via log.dirs or log.dir")
    if len(dirs) > 1:
        raise ConfigError(f"{name}={text!r}{_origin(origins, name)} names {len(dirs)} directories: idemcore serves "
                          "one log directory (Kafka's JBOD, several, is not supported); name one")
    return Path(dirs[0])


def _listeners(values: Mapping[str, Any], origins: Mapping[str, str]) -> tuple[tuple[Endpoint, ...],
                                                                            dict[str, Endpoint], str]:
    """``listeners``; ``advertised.listeners`` (else ``listeners``: KafkaConfig's rule, which must then not be
    0.0.0.0) by listener name; the inter-broker listener's name."""
    protocols = parse_protocol_map(values["listener.security.protocol.map"],
                                   _origin(origins, "listener.security.protocol.map"))
    text = values["listeners"]
    endpoints = parse_endpoints("listeners", DEFAULT_LISTENER if text is None else text, protocols,
                                _origin(origins, "listeners"))
    name = "advertised.listeners" if values["advertised.listeners"] is not None else "listeners"
    advertised_text = values[name]
    advertised = endpoints if advertised_text is None else \
        parse_endpoints(name, advertised_text, protocols, _origin(origins, name))
    for endpoint in advertised:
        if endpoint.host == "0.0.0.0":
            fallback = "" if name == "advertised.listeners" else " (advertised.listeners is unset, so listeners " \
                "is advertised)"
            raise ConfigError(f"{name}={advertised_text!r}{_origin(origins, name)}: advertised.listeners cannot use "
                              f"the nonroutable meta-address 0.0.0.0{fallback}; set advertised.listeners to a "
                              "routable host")
        if not any(e.name == endpoint.name for e in endpoints):
            raise ConfigError(f"advertised.listeners={advertised_text!r}{_origin(origins, name)}: {endpoint.name} is "
                              f"not a listener in listeners ({', '.join(e.name for e in endpoints)})")
    by_name = {e.name: e for e in advertised}
    for endpoint in endpoints:  # a listener not advertised is advertised as it listens
        by_name.setdefault(endpoint.name, endpoint)
    try:
        inter_broker = inter_broker_listener(endpoints, protocols, values["inter.broker.listener.name"],
                                             values["security.inter.broker.protocol"],
                                             "security.inter.broker.protocol" in origins)
    except ConfigError:
        if values["zookeeper.connect"] is not None or values["inter.broker.listener.name"] is not None:
            raise
        inter_broker = endpoints[0]  # a broker alone talks to no other: any listener will do
    return endpoints, by_name, inter_broker.name


def _roll_ms(values: Mapping[str, Any], origins: Mapping[str, str]) -> int:
    ms = values["log.roll.ms"]
    if ms is None:
        return int(values["log.roll.hours"]) * 3_600_000
    if ms < 1:
        raise ConfigError(f"invalid value {ms} for log.roll.ms{_origin(origins, 'log.roll.ms')}: must be at least 1")
    return int(ms)


def _retention_ms(values: Mapping[str, Any], origins: Mapping[str, str]) -> int:
    """``log.retention.ms``, else ``.minutes``, else ``.hours``; any negative: no limit (-1); 0 is refused."""
    name, unit = next((name, unit) for name, unit in (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                                                      ("log.retention.hours", 3_600_000)) if values[name] is not None)
    ms = int(values[name]) * unit
    if ms == 0:
        raise ConfigError(f"invalid value 0 for {name}{_origin(origins, name)}: log.retention.ms must be unlimited "
                          "(-1) or at least 1")
    return -1 if ms < 0 else ms


def _flush_interval_ms(values: Mapping[str, Any]) -> int:
    ms = values["log.flush.interval.ms"]
    return int(values["log.flush.scheduler.interval.ms"] if ms is None else ms)


def _check_replication(values: Mapping[str, Any], origins: Mapping[str, str]) -> None:
    """KafkaConfig's two rules on the follower's fetch wait, and the form of ``zookeeper.connect``."""
    wait = values["replica.fetch.wait.max.ms"]
    for name, why in (("replica.socket.timeout.ms", "to prevent unnecessary socket timeouts"),
                      ("replica.lag.time.max.ms", "to prevent frequent changes in ISR")):
        if wait > values[name]:
            raise ConfigError(f"replica.fetch.wait.max.ms={wait}{_origin(origins, 'replica.fetch.wait.max.ms')} is "
                              f"more than {name}={values[name]}{_origin(origins, name)}: it must be at most that, "
                              f"{why}")
    connect = values["zookeeper.connect"]
    if connect is not None and not _zookeeper_connect(connect):
        raise ConfigError(f"invalid value {connect!r} for zookeeper.connect{_origin(origins, 'zookeeper.connect')}: "
                          "expected host:port[,host:port...][/chroot]")


def _zookeeper_connect(text: str) -> bool:
    """ZooKeeper's connect string: ``host:port`` pairs, comma-separated, then an optional ``/chroot``."""
    hosts, slash, chroot = text.partition("/")
    if slash and (not chroot or chroot.startswith("/") or chroot.endswith("/") or "//" in chroot):
        return False
    pairs = [pair.strip() for pair in hosts.split(",")]
    return bool(pairs) and all(_HOST_PORT.fullmatch(pair) and int(pair.rsplit(":", 1)[1]) <= 65535 for pair in pairs)
