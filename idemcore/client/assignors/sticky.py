"""Kafka's ``StickyAssignor`` (eager): balanced and sticky, each member telling its previous assignment and
generation in its subscription's user data, in Kafka's ``StickyAssignor`` user data format:

    V1 => previous_assignment:[topic:string partitions:[int32]] generation:int32   (what is written)
    V0 => previous_assignment:[topic:string partitions:[int32]]

with no version prefix: V1 is tried first, then V0, and user data neither can read counts as nothing owned.
kafka-python 3 writes the same V1 behind an int16 version; Kafka cannot read that and ignores it, we read it (a
mixed group keeps its kafka-python members sticky under our leader).
Kafka takes both from the user data, never from the subscription's owned partitions (an eager member has revoked
everything before it joins)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from idemcore.client.assignors.base import EAGER
from idemcore.client.assignors.sticky_base import StickyBase
from idemcore.client.assignors.sticky_owned import DEFAULT_GENERATION, MemberData
from idemcore.net.consumer_protocol import Assignment, Subscription
from idemcore.protocol.constants import TopicPartition

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_KAFKA_PYTHON_V1 = b"\x00\x01"  # the version kafka-python puts before its V1 user data


class StickyAssignor(StickyBase):
    name = "sticky"
    supported_protocols: tuple[str, ...] = (EAGER,)

    def __init__(self) -> None:
        self._assigned: tuple[TopicPartition, ...] | None = None  # none before the first assignment
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        if self._assigned is None:
            return None
        return encode_user_data(self._assigned, self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._assigned = assignment.partitions
        self._generation = generation_id

    def member_data(self, subscription: Subscription) -> MemberData:
        if not subscription.user_data:
            return MemberData(partitions=())
        return decode_user_data(subscription.user_data)


def encode_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """StickyAssignor's user data V1: the partitions by topic (topics sorted), then the generation."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = [_I32.pack(len(by_topic))]
    for topic, ids in by_topic.items():
        name = topic.encode()
        out += [_I16.pack(len(name)), name, _I32.pack(len(ids)), *(_I32.pack(p) for p in ids)]
    out.append(_I32.pack(generation))
    return b"".join(out)


def decode_user_data(data: bytes) -> MemberData:
    """V1 if ``data`` holds a generation after the assignment, else V0; nothing owned if neither fits (Kafka ignores
    a previous assignment it cannot parse)."""
    try:
        partitions, end = _read_assignment(data)
    except (struct.error, UnicodeDecodeError, ValueError):
        if data[:2] == _KAFKA_PYTHON_V1 and len(data) > 2:
            return decode_user_data(data[2:])
        return MemberData(partitions=(), generation=DEFAULT_GENERATION)
    if len(data) - end >= _I32.size:
        return MemberData(partitions=partitions, generation=_I32.unpack_from(data, end)[0])
    return MemberData(partitions=partitions)


def _read_assignment(data: bytes) -> tuple[tuple[TopicPartition, ...], int]:
    (topics,), pos = _I32.unpack_from(data, 0), _I32.size
    if topics < 0:
        raise ValueError(f"{topics} topics")
    out: list[TopicPartition] = []
    for _ in range(topics):
        (size,) = _I16.unpack_from(data, pos)
        pos += _I16.size
        if size < 0 or pos + size > len(data):
            raise ValueError(f"topic name of {size} bytes")
        topic = data[pos:pos + size].decode()
        pos += size
        (count,) = _I32.unpack_from(data, pos)
        pos += _I32.size
        if count < 0 or pos + count * _I32.size > len(data):
            raise ValueError(f"{count} partitions")
        out.extend((topic, p) for p in struct.unpack_from(f">{count}i", data, pos))
        pos += count * _I32.size
    return tuple(out), pos
