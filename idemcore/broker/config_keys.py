"""The broker settings :class:`~idemcore.broker.config.BrokerConfig` accepts: Kafka's names, types, defaults and
ranges (Kafka 3.x: ``KafkaConfig``, ``ServerLogConfigs``, ``TransactionLogConfigs``, ``ReplicationConfigs``), and
what each does in idemcore today.

A range stricter than Kafka's says why in ``note``: it is where idemcore's broker or server needs more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from idemcore.broker.group.consumer_group import DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_SESSION_TIMEOUT_MS
from idemcore.broker.group.coordinator import (
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    DEFAULT_MIN_SESSION_TIMEOUT_MS,
    DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    DEFAULT_OFFSETS_RETENTION_MS,
)
from idemcore.broker.group.membership import DEFAULT_INITIAL_REBALANCE_DELAY_MS
from idemcore.broker.group.server_assignors import SERVER_ASSIGNOR_NAMES
from idemcore.protocol.constants import (
    DEFAULT_DELETE_RETENTION_MS,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_MESSAGE_MAX_BYTES,
    DEFAULT_OFFSET_METADATA_MAX_BYTES,
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_INDEX_BYTES,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    DEFAULT_TRANSACTION_STATE_PARTITIONS,
    DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
    MAX_PARTITIONS_PER_TOPIC,
    OFFSETS_TOPIC_SEGMENT_BYTES,
    TRANSACTION_STATE_SEGMENT_BYTES,
)

LONG_MAX = 2**63 - 1
#: The smallest segment Kafka 3.x takes (``LegacyRecord.RECORD_OVERHEAD_V0``).
MIN_SEGMENT_BYTES = 14
#: The smallest request frame the server reads (``Server``'s own floor).
MIN_REQUEST_BYTES = 64


#: A whole number as Java's ``Integer.parseInt`` / ``Long.parseLong`` read one (its range checked apart).
INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
#: A decimal number as Java's ``Double.parseDouble`` reads one (no Python-only forms: ``1_0``, ``inf``, ``nan``).
DOUBLE_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
#: Kafka's ``ConfigDef`` LIST separator: a comma, with any spaces around it.
LIST_SEPARATOR = re.compile(r"\s*,\s*")


class Kind(Enum):
    """Kafka's ``ConfigDef.Type`` of a setting, with the range of its integers."""

    BOOLEAN = "BOOLEAN"
    SHORT = "SHORT"
    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    STRING = "STRING"
    LIST = "LIST"

    @property
    def bits(self) -> int:
        """The width of an integer kind."""
        return {"SHORT": 16, "INT": 32, "LONG": 64}[self.value]

    @property
    def bounds(self) -> tuple[int, int]:
        return -(2 ** (self.bits - 1)), 2 ** (self.bits - 1) - 1

    @property
    def integral(self) -> bool:
        return self in (Kind.SHORT, Kind.INT, Kind.LONG)


class Use(Enum):
    """What idemcore does with a setting today."""

    #: Given to ``Broker(...)`` or ``Server(...)``: it acts as in Kafka.
    HONOURED = "honoured"
    #: Checked and kept; the broker does not act on it yet (a warning says so).
    PENDING = "pending"
    #: Acted on by a broker in a cluster (``zookeeper.connect`` set); a broker alone has nothing to do with it.
    REPLICATION = "replication"
    #: Checked; no meaning here (thread counts, socket buffers: one asyncio loop serves every connection).
    INERT = "inert"


@dataclass(frozen=True)
class Key:
    """One setting: Kafka's name, type and default (None: unset, as Kafka's ``null`` default); ``low``/``high``:
    the range; ``choices``: the allowed values of a STRING or items of a LIST; ``note``: why a range is stricter
    than Kafka's."""

    name: str
    kind: Kind
    default: object
    use: Use
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    note: str = ""


#: Kafka's PASSWORD settings: DescribeConfigs gives their names, never their values (``isSensitive``).
SENSITIVE = frozenset({"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "ssl.keystore.key",
                       "ssl.keystore.certificate.chain", "ssl.truststore.certificates"})

_H, _P, _R, _I = Use.HONOURED, Use.PENDING, Use.REPLICATION, Use.INERT
_HOUR_MS = 3_600_000
_PARTITIONS_NOTE = f"at most {MAX_PARTITIONS_PER_TOPIC:,} partitions per topic here"

KEYS: dict[str, Key] = {key.name: key for key in (
    # General and socket server
    Key("broker.id", Kind.INT, None, _H, low=0,
        note="-1 asks ZooKeeper to generate an id, and this broker runs without it: name the id"),
    Key("node.id", Kind.INT, None, _H, low=0, note="as broker.id"),
    Key("listeners", Kind.STRING, None, _H),
    Key("advertised.listeners", Kind.STRING, None, _H),
    Key("socket.request.max.bytes", Kind.INT, 104_857_600, _H, low=MIN_REQUEST_BYTES,
        note="the server reads no frame smaller than a request header's worth"),
    Key("message.max.bytes", Kind.INT, DEFAULT_MESSAGE_MAX_BYTES, _H, low=1,
        note="0 would refuse every batch"),
    Key("num.network.threads", Kind.INT, 3, _I, low=1),
    Key("num.io.threads", Kind.INT, 8, _I, low=1),
    Key("socket.send.buffer.bytes", Kind.INT, 102_400, _I),
    Key("socket.receive.buffer.bytes", Kind.INT, 102_400, _I),
    # Log
    Key("log.dirs", Kind.STRING, None, _H),
    Key("log.dir", Kind.STRING, None, _H),
    Key("num.partitions", Kind.INT, 1, _H, low=1, high=MAX_PARTITIONS_PER_TOPIC, note=_PARTITIONS_NOTE),
    Key("auto.create.topics.enable", Kind.BOOLEAN, True, _H),
    Key("log.segment.bytes", Kind.INT, DEFAULT_SEGMENT_BYTES, _H, low=MIN_SEGMENT_BYTES),
    Key("log.roll.ms", Kind.LONG, None, _H),
    Key("log.roll.hours", Kind.INT, 168, _H, low=1),
    Key("log.retention.ms", Kind.LONG, None, _H),
    Key("log.retention.minutes", Kind.INT, None, _H),
    Key("log.retention.hours", Kind.INT, 168, _H),
    Key("log.retention.bytes", Kind.LONG, -1, _H),
    Key("log.index.interval.bytes", Kind.INT, DEFAULT_INDEX_INTERVAL_BYTES, _H, low=0),
    Key("log.index.size.max.bytes", Kind.INT, DEFAULT_SEGMENT_INDEX_BYTES, _H, low=4),
    Key("log.retention.check.interval.ms", Kind.LONG, 300_000, _P, low=1),
    Key("log.cleanup.policy", Kind.LIST, ("delete",), _H, choices=("compact", "delete")),
    Key("log.cleaner.delete.retention.ms", Kind.LONG, DEFAULT_DELETE_RETENTION_MS, _H, low=0),
    Key("log.cleaner.min.compaction.lag.ms", Kind.LONG, 0, _P, low=0),
    Key("log.cleaner.max.compaction.lag.ms", Kind.LONG, LONG_MAX, _P, low=1),
    Key("log.cleaner.min.cleanable.ratio", Kind.DOUBLE, 0.5, _P, low=0, high=1),
    Key("log.segment.delete.delay.ms", Kind.LONG, 60_000, _P, low=0),
    Key("log.preallocate", Kind.BOOLEAN, False, _P),
    Key("log.message.timestamp.type", Kind.STRING, "CreateTime", _P, choices=("CreateTime", "LogAppendTime")),
    Key("compression.type", Kind.STRING, "producer", _P,
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    Key("log.flush.interval.messages", Kind.LONG, LONG_MAX, _H, low=1),
    Key("log.flush.interval.ms", Kind.LONG, None, _H),
    Key("log.flush.scheduler.interval.ms", Kind.LONG, LONG_MAX, _H),
    Key("log.flush.offset.checkpoint.interval.ms", Kind.INT, 60_000, _H, low=0),
    # log-start-offset-checkpoint is written whenever a log start moves, before a file goes.
    Key("log.flush.start.offset.checkpoint.interval.ms", Kind.INT, 60_000, _I, low=0),
    Key("num.recovery.threads.per.data.dir", Kind.INT, 1, _I, low=1),
    # Producer state, transactions and their coordinator
    Key("producer.id.expiration.ms", Kind.INT, DEFAULT_PRODUCER_ID_EXPIRATION_MS, _H, low=1),
    Key("transaction.state.log.num.partitions", Kind.INT, DEFAULT_TRANSACTION_STATE_PARTITIONS, _H, low=1,
        high=MAX_PARTITIONS_PER_TOPIC, note=_PARTITIONS_NOTE),
    Key("transaction.max.timeout.ms", Kind.INT, DEFAULT_TRANSACTION_MAX_TIMEOUT_MS, _H, low=1),
    Key("transactional.id.expiration.ms", Kind.INT, DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS, _P, low=1),
    Key("transaction.state.log.segment.bytes", Kind.INT, TRANSACTION_STATE_SEGMENT_BYTES, _P, low=1),
    Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", Kind.INT, 10_000, _P, low=1),
    Key("transaction.remove.expired.transaction.cleanup.interval.ms", Kind.INT, _HOUR_MS, _P, low=1),
    Key("transaction.state.log.replication.factor", Kind.SHORT, 3, _R, low=1),
    Key("transaction.state.log.min.isr", Kind.INT, 2, _R, low=1),
    # Consumer groups and their coordinator
    Key("offsets.topic.num.partitions", Kind.INT, DEFAULT_OFFSETS_TOPIC_PARTITIONS, _H, low=1,
        high=MAX_PARTITIONS_PER_TOPIC, note=_PARTITIONS_NOTE),
    Key("offsets.topic.segment.bytes", Kind.INT, OFFSETS_TOPIC_SEGMENT_BYTES, _P, low=1),
    Key("offset.metadata.max.bytes", Kind.INT, DEFAULT_OFFSET_METADATA_MAX_BYTES, _H, low=0,
        note="a negative limit would refuse every commit"),
    Key("offsets.retention.minutes", Kind.INT, DEFAULT_OFFSETS_RETENTION_MS // 60_000, _H, low=1),
    Key("offsets.retention.check.interval.ms", Kind.LONG, DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS, _H, low=1),
    Key("group.min.session.timeout.ms", Kind.INT, DEFAULT_MIN_SESSION_TIMEOUT_MS, _H, low=0,
        note="a negative session is no session"),
    Key("group.max.session.timeout.ms", Kind.INT, DEFAULT_MAX_SESSION_TIMEOUT_MS, _H, low=0,
        note="a negative session is no session"),
    Key("group.initial.rebalance.delay.ms", Kind.INT, DEFAULT_INITIAL_REBALANCE_DELAY_MS, _H, low=0,
        note="a delay cannot be negative"),
    # The consumer groups of KIP-848 (Kafka's GroupCoordinatorConfig); assignors by their short names.
    Key("group.consumer.session.timeout.ms", Kind.INT, DEFAULT_SESSION_TIMEOUT_MS, _H, low=1),
    Key("group.consumer.heartbeat.interval.ms", Kind.INT, DEFAULT_HEARTBEAT_INTERVAL_MS, _H, low=1),
    Key("group.consumer.assignors", Kind.LIST, SERVER_ASSIGNOR_NAMES, _H, choices=SERVER_ASSIGNOR_NAMES),
    Key("offsets.topic.replication.factor", Kind.SHORT, 3, _R, low=1),
    # Replication
    Key("default.replication.factor", Kind.INT, 1, _H, low=1),
    Key("min.insync.replicas", Kind.INT, 1, _H, low=1),
    Key("unclean.leader.election.enable", Kind.BOOLEAN, False, _R),
    Key("auto.leader.rebalance.enable", Kind.BOOLEAN, True, _R),
    Key("leader.imbalance.check.interval.seconds", Kind.LONG, 300, _R, low=1),
    Key("leader.imbalance.per.broker.percentage", Kind.INT, 10, _R, low=0),
    Key("zookeeper.connect", Kind.STRING, None, _R),
    Key("zookeeper.session.timeout.ms", Kind.INT, 18_000, _R, low=1, note="a session must last"),
    Key("zookeeper.connection.timeout.ms", Kind.INT, None, _R, low=1, note="a connection must be given time"),
    Key("replica.lag.time.max.ms", Kind.LONG, 30_000, _R),
    Key("replica.fetch.max.bytes", Kind.INT, 1_048_576, _R, low=0),
    Key("replica.fetch.min.bytes", Kind.INT, 1, _R),
    Key("replica.fetch.wait.max.ms", Kind.INT, 500, _R),
    Key("replica.fetch.response.max.bytes", Kind.INT, 10_485_760, _R, low=0),
    Key("replica.fetch.backoff.ms", Kind.INT, 1_000, _R, low=0),
    Key("replica.socket.timeout.ms", Kind.INT, 30_000, _I),
    Key("replica.socket.receive.buffer.bytes", Kind.INT, 65_536, _I),
    Key("replica.high.watermark.checkpoint.interval.ms", Kind.LONG, 5_000, _R),
    Key("num.replica.fetchers", Kind.INT, 1, _I, low=1, note="0 would leave no fetcher"),
    # Security: listeners' protocols, TLS (PEM stores, KIP-651), SASL (KIP-152), the authorizer. Per-listener
    # settings (listener.name.<listener>.<setting>) are read by idemcore.broker.security.listeners.
    Key("listener.security.protocol.map", Kind.STRING,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", _H),
    Key("inter.broker.listener.name", Kind.STRING, None, _H),
    Key("security.inter.broker.protocol", Kind.STRING, "PLAINTEXT", _H,
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    Key("sasl.enabled.mechanisms", Kind.LIST, ("GSSAPI",), _H),
    Key("sasl.mechanism.inter.broker.protocol", Kind.STRING, "GSSAPI", _H),
    Key("sasl.server.max.receive.size", Kind.INT, 524_288, _H, low=1),
    Key("connections.max.reauth.ms", Kind.LONG, 0, _P, low=0),
    Key("connection.failed.authentication.delay.ms", Kind.INT, 100, _H, low=0),
    Key("ssl.keystore.type", Kind.STRING, "JKS", _H),
    Key("ssl.keystore.location", Kind.STRING, None, _H),
    Key("ssl.keystore.password", Kind.STRING, None, _H),
    Key("ssl.keystore.key", Kind.STRING, None, _H),
    Key("ssl.keystore.certificate.chain", Kind.STRING, None, _H),
    Key("ssl.key.password", Kind.STRING, None, _H),
    Key("ssl.truststore.type", Kind.STRING, "JKS", _H),
    Key("ssl.truststore.location", Kind.STRING, None, _H),
    Key("ssl.truststore.password", Kind.STRING, None, _H),
    Key("ssl.truststore.certificates", Kind.STRING, None, _H),
    Key("ssl.client.auth", Kind.STRING, "none", _H, choices=("none", "requested", "required")),
    Key("ssl.protocol", Kind.STRING, "TLSv1.3", _H),
    Key("ssl.enabled.protocols", Kind.LIST, ("TLSv1.2", "TLSv1.3"), _H),
    Key("ssl.cipher.suites", Kind.LIST, (), _H),
    Key("ssl.endpoint.identification.algorithm", Kind.STRING, "https", _H),
    Key("ssl.principal.mapping.rules", Kind.STRING, "DEFAULT", _H),
    Key("authorizer.class.name", Kind.STRING, "", _H),
    Key("super.users", Kind.STRING, None, _H),
    Key("allow.everyone.if.no.acl.found", Kind.BOOLEAN, False, _H),
)}
