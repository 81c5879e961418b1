"""ZooKeeper paths and node contents of Kafka's ZooKeeper mode (``kafka.zk.ZkData``), byte for byte in the
shapes Kafka writes, so a Kafka tool pointed at the same ensemble reads them."""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from idemcore.errors import IdemcoreError
from idemcore.net.replication import BrokerEndpoint, ListenerAddress

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
ISR_CHANGES = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
#: Kafka's ``createTopLevelPaths``: the persistent parents every broker makes at start.
TOP_LEVEL_PATHS = ("/consumers", "/admin/delete_topics", BROKER_IDS, TOPICS, "/config/changes", CONFIG_TOPICS,
                   "/config/clients", "/config/users", "/config/brokers", ISR_CHANGES, "/latest_producer_id_block",
                   "/log_dir_event_notification")
#: Kafka's ``KafkaController.InitialControllerEpoch``: the first controller writes 1.
INITIAL_CONTROLLER_EPOCH = 0
NO_LEADER = -1


class ZkDataError(IdemcoreError):
    """A node holds something Kafka would not have written there."""


@dataclass(frozen=True, slots=True)
class LeaderIsr:
    """A partition's ``state`` node: its leader, leader epoch, ISR and the epoch of the controller that wrote it
    (Kafka's ``LeaderIsrAndControllerEpoch``; the znode version travels beside it)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _load(data: bytes | None, what: str) -> Any:
    try:
        return json.loads(data or b"")
    except ValueError as exc:
        raise ZkDataError(f"{what}: not JSON: {data!r} ({exc})") from None


def encode_broker(host: str, port: int, rack: str | None = None,
                  listeners: tuple[ListenerAddress, ...] = ()) -> bytes:
    """``/brokers/ids/N``, version 5 (Kafka 2.7+): every listener (``NAME://host:port``) and its security protocol;
    the top-level host/port (for old clients) are the PLAINTEXT listener's, else null and -1, as Kafka writes them.
    Without ``listeners``: one PLAINTEXT listener at ``host``:``port``."""
    listeners = listeners or (ListenerAddress("PLAINTEXT", host, port, "PLAINTEXT"),)
    plaintext = next((one for one in listeners if one.protocol == "PLAINTEXT"), None)
    fields: dict[str, Any] = {
        "version": 5, "host": plaintext.host if plaintext else None, "port": plaintext.port if plaintext else -1,
        "endpoints": [f"{one.name}://{_bracketed(one.host)}:{one.port}" for one in listeners],
        "jmx_port": -1, "timestamp": str(int(time.time() * 1000))}
    if rack is not None:
        fields["rack"] = rack
    fields["listener_security_protocol_map"] = {one.name: one.protocol for one in listeners}
    fields["features"] = {}
    return _dump(fields)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def decode_broker(broker_id: int, data: bytes, listener: str | None = None) -> BrokerEndpoint:
    """The registration of any version Kafka writes (1: host/port; 2+: the endpoints list), with every listener;
    its host and port are those of ``listener`` (the inter-broker listener) when it has one, else of its
    PLAINTEXT listener, else of its first."""
    fields = _load(data, f"registration of broker {broker_id}")
    try:
        version = int(fields["version"])
        rack = fields.get("rack")
        if version <= 1 or not fields.get("endpoints"):
            return BrokerEndpoint(broker_id, str(fields["host"]), int(fields["port"]), rack)
        protocols = fields.get("listener_security_protocol_map") or {}
        addresses = []
        for endpoint in fields["endpoints"]:
            name, _, address = str(endpoint).partition("://")
            host, _, port = address.rpartition(":")
            addresses.append(ListenerAddress(name, host.strip("[]"), int(port), str(protocols.get(name, name))))
        chosen = next((one for one in addresses if one.name == listener), None) or \
            next((one for one in addresses if one.protocol == "PLAINTEXT"), addresses[0])
        if addresses == [ListenerAddress("PLAINTEXT", chosen.host, chosen.port, "PLAINTEXT")]:
            addresses = []  # one PLAINTEXT listener: the form BrokerEndpoint writes as no listener list
        return BrokerEndpoint(broker_id, chosen.host, chosen.port, rack, tuple(addresses))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ZkDataError(f"registration of broker {broker_id} is not Kafka's: {data!r} ({exc!r})") from None


def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))})


def decode_controller(data: bytes) -> int:
    fields = _load(data, CONTROLLER)
    try:
        return int(fields["brokerid"])
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{CONTROLLER} holds no broker id: {data!r}") from None


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise ZkDataError(f"{CONTROLLER_EPOCH} is not a number: {data!r}") from None


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, TypeError):
        raise ZkDataError(f"topic id {text!r} is not a Kafka Uuid") from None


def encode_topic(assignment: dict[int, list[int]], topic_id: uuid.UUID) -> bytes:
    """``/brokers/topics/T``, version 3 (Kafka 2.8+: KIP-455's adding/removing replicas, KIP-516's topic id)."""
    return _dump({"version": 3, "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
                  "adding_replicas": {}, "removing_replicas": {}, "topic_id": kafka_uuid(topic_id)})


def decode_topic(topic: str, data: bytes) -> tuple[dict[int, list[int]], uuid.UUID | None]:
    fields = _load(data, topic_path(topic))
    try:
        assignment = {int(p): [int(r) for r in replicas] for p, replicas in fields["partitions"].items()}
        topic_id = fields.get("topic_id")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ZkDataError(f"{topic_path(topic)} holds no partition assignment: {data!r}") from None
    return assignment, parse_kafka_uuid(topic_id) if topic_id else None


def encode_state(state: LeaderIsr) -> bytes:
    return _dump({"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                  "controller_epoch": state.controller_epoch, "isr": list(state.isr)})


def decode_state(topic: str, partition: int, data: bytes) -> LeaderIsr:
    fields = _load(data, state_path(topic, partition))
    try:
        return LeaderIsr(int(fields["leader"]), int(fields["leader_epoch"]), tuple(int(r) for r in fields["isr"]),
                         int(fields["controller_epoch"]))
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{state_path(topic, partition)} is not a partition state: {data!r}") from None


def encode_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": {str(k): str(v) for k, v in configs.items()}})


def decode_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    fields = _load(data, "config node")
    config = fields.get("config") if isinstance(fields, dict) else None
    return {str(k): str(v) for k, v in config.items()} if isinstance(config, dict) else {}


def encode_config_change(entity_path: str) -> bytes:
    """A ``/config/changes/config_change_N`` node (Kafka's ``ConfigEntityChangeNotificationSequenceZNode``)."""
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes | None) -> str | None:
    try:
        fields = _load(data or b"", "config change")
    except ZkDataError:
        return None
    path = fields.get("entity_path") if isinstance(fields, dict) else None
    return path if isinstance(path, str) else None


def encode_isr_change(partitions: list[tuple[str, int]]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_isr_change(data: bytes) -> set[tuple[str, int]]:
    fields = _load(data, ISR_CHANGES)
    try:
        return {(str(e["topic"]), int(e["partition"])) for e in fields["partitions"]}
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"ISR change notification is not Kafka's: {data!r}") from None
