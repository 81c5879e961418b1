"""Kafka's ConsumerProtocol bytes: golden bytes built field by field from Kafka's schemas, round trips, kafka-python
(an independent codec) reading ours and we reading its, forward compatibility, and undecodable bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as PeerAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as PeerSubscription

from idemcore.net.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _b(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def _ints(values: list[int]) -> bytes:
    return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)


def _topic_partitions(groups: list[tuple[str, list[int]]]) -> bytes:
    return struct.pack(">i", len(groups)) + b"".join(_s(t) + _ints(ps) for t, ps in groups)


# ConsumerProtocolSubscription.json: topics, userData, ownedPartitions (v1+), generationId (v2+), rackId (v3+).
GOLDEN_SUBSCRIPTION_V3 = (struct.pack(">h", 3) + struct.pack(">i", 2) + _s("bar") + _s("foo") + _b(b"hello")
                          + _topic_partitions([("bar", [0, 2]), ("foo", [1])]) + struct.pack(">i", 7) + _s("rack-a"))
GOLDEN_ASSIGNMENT_V1 = (struct.pack(">h", 1) + _topic_partitions([("foo", [2, 0]), ("bar", [1])]) + _b(None))


def test_subscription_golden_bytes_sorted_as_kafka_writes_them() -> None:
    # Kafka's ConsumerProtocol.serializeSubscription sorts topics and owned partitions.
    subscription = Subscription(topics=("foo", "bar"), user_data=b"hello",
                                owned_partitions=(("foo", 1), ("bar", 2), ("bar", 0)), generation_id=7,
                                rack_id="rack-a")
    assert encode_subscription(subscription) == GOLDEN_SUBSCRIPTION_V3
    assert decode_subscription(GOLDEN_SUBSCRIPTION_V3) == Subscription(
        topics=("bar", "foo"), user_data=b"hello", owned_partitions=(("bar", 0), ("bar", 2), ("foo", 1)),
        generation_id=7, rack_id="rack-a")
    assert CONSUMER_PROTOCOL_TYPE == "consumer"


def test_assignment_golden_bytes_grouped_by_topic_in_order() -> None:
    assignment = Assignment(partitions=(("foo", 2), ("bar", 1), ("foo", 0)))
    assert encode_assignment(assignment, 1) == GOLDEN_ASSIGNMENT_V1
    assert decode_assignment(GOLDEN_ASSIGNMENT_V1) == Assignment(partitions=(("foo", 2), ("foo", 0), ("bar", 1)))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_each_version_keeps_only_its_fields(version: int) -> None:
    # Kafka's ConsumerProtocolTest.serializeDeserializeSubscriptionAllVersions
    full = Subscription(topics=("a", "b"), user_data=b"u", owned_partitions=(("a", 0),), generation_id=3,
                        rack_id="r")
    decoded = decode_subscription(encode_subscription(full, version))
    assert decoded.topics == ("a", "b") and decoded.user_data == b"u"
    assert decoded.owned_partitions == ((("a", 0),) if version >= 1 else ())
    assert decoded.generation_id == (3 if version >= 2 else -1)
    assert decoded.rack_id == ("r" if version >= 3 else None)
    assert int.from_bytes(encode_subscription(full, version)[:2], "big") == version


def test_a_future_version_is_read_with_the_highest_known_schema() -> None:
    # Kafka's ConsumerProtocolTest.deserializeFutureSubscriptionVersion / deserializeFutureAssignmentVersion:
    # a later version adds fields at the end, which are ignored.
    future = struct.pack(">h", 100) + GOLDEN_SUBSCRIPTION_V3[2:] + _s("a field of v100") + struct.pack(">q", 9)
    assert decode_subscription(future) == decode_subscription(GOLDEN_SUBSCRIPTION_V3)
    future_assignment = struct.pack(">h", 100) + GOLDEN_ASSIGNMENT_V1[2:] + b"\x00\x01extra"
    assert decode_assignment(future_assignment).partitions == (("foo", 2), ("foo", 0), ("bar", 1))
    # and writing a version above 3 writes 3
    assert encode_subscription(Subscription(topics=("t",)), 9)[:2] == b"\x00\x03"


def test_empty_assignment_bytes_are_no_partitions() -> None:
    assert decode_assignment(b"") == Assignment(partitions=())


def test_an_empty_rack_is_none() -> None:
    data = encode_subscription(Subscription(topics=("t",), rack_id=""))
    assert decode_subscription(data).rack_id is None


@pytest.mark.parametrize("data", [
    b"", b"\x00", b"\xff\xff" + _ints([]) + _b(None),
    struct.pack(">h", 0) + struct.pack(">i", 2**31 - 1),              # 2^31 topics in 4 bytes
    struct.pack(">h", 0) + struct.pack(">i", 1) + struct.pack(">h", 50) + b"ab",  # a topic cut short
    struct.pack(">h", 3) + struct.pack(">i", 0) + struct.pack(">i", 10) + b"x",   # user data cut short
    struct.pack(">h", 0) + struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe" + _b(None),  # not UTF-8
])
def test_undecodable_subscription_one_line_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError) as caught:
        decode_subscription(data)
    message = str(caught.value)
    assert "\n" not in message and "subscription" in message


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x01\x00\x00\x00\x05", b"\xff\xfe" + _topic_partitions([]) + _b(None)])
def test_undecodable_assignment_one_line_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError, match="assignment") as caught:
        decode_assignment(data)
    assert "\n" not in str(caught.value)


def test_negative_version_is_refused_when_writing() -> None:
    with pytest.raises(ConsumerProtocolError, match="version -1"):
        encode_assignment(Assignment(partitions=()), -1)


# ---------------------------------------------------------------- kafka-python as an independent codec

_topics = st.lists(st.text(alphabet="abcxyz-._", min_size=1, max_size=6), max_size=4, unique=True)
_partitions = st.lists(st.tuples(st.sampled_from(["t1", "t2", "t3"]), st.integers(0, 50)), max_size=8, unique=True)
_user_data = st.one_of(st.none(), st.binary(max_size=20))


@settings(max_examples=60, deadline=None)
@given(topics=_topics, owned=_partitions, user_data=_user_data, generation=st.integers(-1, 2**31 - 1),
       rack=st.one_of(st.none(), st.text(alphabet="rack12", min_size=1, max_size=5)), version=st.integers(0, 3))
def test_subscription_interop_with_kafka_python(topics: list[str], owned: list[tuple[str, int]],
                                                user_data: bytes | None, generation: int, rack: str | None,
                                                version: int) -> None:
    ours = Subscription(topics=tuple(topics), user_data=user_data, owned_partitions=tuple(owned),
                        generation_id=generation, rack_id=rack)
    peer = PeerSubscription.decode(encode_subscription(ours, version))
    assert peer.version == version
    assert list(peer.topics) == sorted(topics)
    assert peer.user_data == user_data
    if version >= 1:
        assert [(tp.topic, p) for tp in peer.owned_partitions for p in tp.partitions] == sorted(owned)
    if version >= 2:
        assert peer.generation_id == generation
    if version >= 3:
        assert peer.rack_id == rack
    # and theirs decodes with ours
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(owned):
        grouped.setdefault(topic, []).append(partition)
    theirs = PeerSubscription(version=version, topics=sorted(topics), user_data=user_data,
                              owned_partitions=[PeerSubscription.TopicPartition(topic=t, partitions=ps)
                                                for t, ps in grouped.items()],
                              generation_id=generation, rack_id=rack)
    assert decode_subscription(bytes(theirs.encode())) == decode_subscription(encode_subscription(ours, version))


@settings(max_examples=60, deadline=None)
@given(partitions=_partitions, user_data=_user_data, version=st.integers(0, 3))
def test_assignment_interop_with_kafka_python(partitions: list[tuple[str, int]], user_data: bytes | None,
                                              version: int) -> None:
    partitions.sort(key=lambda tp: tp[0])  # grouped by topic: the order survives the round trip
    ours = Assignment(partitions=tuple(partitions), user_data=user_data)
    data = encode_assignment(ours, version)
    peer = PeerAssignment.decode(data)
    assert [tuple(tp) for tp in peer.partitions()] == partitions and peer.user_data == user_data
    assert decode_assignment(bytes(peer.encode(version=version))) == ours
    assert decode_assignment(data) == ours


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=64),
                      st.tuples(st.integers(0, 3), st.binary(max_size=40)).map(
                          lambda vb: struct.pack(">h", vb[0]) + vb[1])))
def test_any_bytes_decode_or_raise_one_line(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except ConsumerProtocolError as error:
            assert "\n" not in str(error)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_truncation_is_refused(version: int) -> None:
    full = encode_subscription(Subscription(topics=("a", "bb"), user_data=b"xyz", owned_partitions=(("a", 1),),
                                            generation_id=2, rack_id="r"), version)
    for cut in range(len(full)):
        with pytest.raises(ConsumerProtocolError):
            decode_subscription(full[:cut])
    full = encode_assignment(Assignment(partitions=(("a", 1), ("b", 0)), user_data=b"u"), version)
    for cut in range(1, len(full)):
        with pytest.raises(ConsumerProtocolError):
            decode_assignment(full[:cut])
