"""Kafka's ConsumerProtocol: the subscription a consumer sends in JoinGroup and the assignment the leader sends back
in SyncGroup, as the bytes every Kafka client reads (Kafka's ``ConsumerProtocol``).

Each is an int16 version, then the body in the schema of that version (kio's classes, generated from Kafka's
``ConsumerProtocolSubscription.json`` and ``ConsumerProtocolAssignment.json``). A version above the highest known
is read with the highest known schema and bytes after the body are ignored, as Kafka reads them (its forward
compatibility: later versions only add fields at the end)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.schema.consumer_protocol_assignment import v0 as assignment_v0
from kio.schema.consumer_protocol_assignment import v1 as assignment_v1
from kio.schema.consumer_protocol_assignment import v2 as assignment_v2
from kio.schema.consumer_protocol_assignment import v3 as assignment_v3
from kio.schema.consumer_protocol_subscription import v0 as subscription_v0
from kio.schema.consumer_protocol_subscription import v1 as subscription_v1
from kio.schema.consumer_protocol_subscription import v2 as subscription_v2
from kio.schema.consumer_protocol_subscription import v3 as subscription_v3
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from idemcore.errors import IdemcoreError, one_line
from idemcore.net.wire.encoder import entity_encoder
from idemcore.net.wire.errors import MalformedFrameError
from idemcore.net.wire.frames import make, nested
from idemcore.net.wire.guard import check_lengths
from idemcore.protocol.constants import TopicPartition

CONSUMER_PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3

_SUBSCRIPTIONS: tuple[type, ...] = (
    subscription_v0.ConsumerProtocolSubscription, subscription_v1.ConsumerProtocolSubscription,
    subscription_v2.ConsumerProtocolSubscription, subscription_v3.ConsumerProtocolSubscription)
_ASSIGNMENTS: tuple[type, ...] = (
    assignment_v0.ConsumerProtocolAssignment, assignment_v1.ConsumerProtocolAssignment,
    assignment_v2.ConsumerProtocolAssignment, assignment_v3.ConsumerProtocolAssignment)
_VERSION = struct.Struct(">h")


class ConsumerProtocolError(IdemcoreError, ValueError):
    """Bytes that are not a consumer protocol subscription or assignment, or a version below 0."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's subscription (Kafka's ``ConsumerPartitionAssignor.Subscription``)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()  # v1+
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+
    group_instance_id: str | None = None  # not in the bytes: the coordinator tells the leader (KIP-345)


@dataclass(frozen=True, slots=True)
class Assignment:
    """A member's assignment (Kafka's ``ConsumerPartitionAssignor.Assignment``)."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


def encode_subscription(subscription: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """The bytes of ``subscription`` at ``version`` (above 3 is written as 3); topics and owned partitions sorted,
    as Kafka writes them. Fields the version lacks are left out."""
    version = _known(version, "subscription")
    cls = _SUBSCRIPTIONS[version]
    # v0 has no owned partitions (nor their class)
    owned = _grouped(nested(cls, "TopicPartition"), sorted(subscription.owned_partitions)) if version else ()
    entity = make(cls, topics=tuple(sorted(subscription.topics)), user_data=subscription.user_data,
                  owned_partitions=owned, generation_id=subscription.generation_id, rack_id=subscription.rack_id)
    return _write(version, cls, entity)


def decode_subscription(data: bytes) -> Subscription:
    """The subscription in ``data``; ConsumerProtocolError naming what is wrong."""
    entity = _read(data, _SUBSCRIPTIONS, "subscription")
    owned = tuple(_flat(getattr(entity, "owned_partitions", ())))
    rack = getattr(entity, "rack_id", None)
    return Subscription(topics=tuple(entity.topics), user_data=entity.user_data, owned_partitions=owned,
                        generation_id=int(getattr(entity, "generation_id", -1)), rack_id=rack or None)


def encode_assignment(assignment: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """The bytes of ``assignment`` at ``version`` (above 3 is written as 3): partitions grouped by topic in the
    order the topics first appear, as Kafka groups them."""
    version = _known(version, "assignment")
    cls = _ASSIGNMENTS[version]
    topics = _grouped(nested(cls, "TopicPartition"), assignment.partitions)
    return _write(version, cls, make(cls, assigned_partitions=topics, user_data=assignment.user_data))


def decode_assignment(data: bytes) -> Assignment:
    """The assignment in ``data``; no bytes at all is no partitions (a member the leader gave nothing, as Kafka's
    coordinator sends it)."""
    if not data:
        return Assignment(partitions=())
    entity = _read(data, _ASSIGNMENTS, "assignment")
    return Assignment(partitions=tuple(_flat(entity.assigned_partitions)), user_data=entity.user_data)


# ---------------------------------------------------------------- helpers


def _known(version: int, what: str) -> int:
    if version < 0:
        raise ConsumerProtocolError(f"consumer protocol {what} version {version} is below 0")
    return min(version, HIGHEST_VERSION)


def _grouped(cls: type, partitions: Iterable[TopicPartition]) -> tuple[Any, ...]:
    """``(topic, partition)`` pairs as one kio ``TopicPartition`` per topic, topics in first-seen order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return tuple(cls(topic=topic, partitions=tuple(ids)) for topic, ids in by_topic.items())


def _flat(topics: Iterable[Any]) -> Iterable[TopicPartition]:
    for entry in topics:
        for partition in entry.partitions:
            yield (str(entry.topic), int(partition))


def _write(version: int, cls: type, entity: Any) -> bytes:
    out: list[bytes] = [_VERSION.pack(version)]
    try:
        entity_encoder(cls)(out, entity)
    except (struct.error, TypeError, ValueError) as error:
        raise ConsumerProtocolError(f"cannot write {cls.__name__} v{version}: {one_line(error)}"[:300]) from None
    return b"".join(out)


@cache
def _reader(cls: type) -> Callable[..., Any]:
    return entity_reader(cls)


def _read(data: bytes, classes: tuple[type, ...], what: str) -> Any:
    if len(data) < _VERSION.size:
        raise ConsumerProtocolError(f"consumer protocol {what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data, 0)
    cls = classes[_known(version, what)]
    try:
        check_lengths(cls, data, _VERSION.size, [])  # bound every length before kio's reader reserves it
        entity, _ = _reader(cls)(bytes(data), _VERSION.size)
    except (MalformedFrameError, SerialError, ValueError, UnicodeDecodeError, OverflowError, IndexError) as error:
        raise ConsumerProtocolError(
            f"undecodable consumer protocol {what} v{version} ({len(data)} bytes): {one_line(error)}"[:300]) from None
    return entity
