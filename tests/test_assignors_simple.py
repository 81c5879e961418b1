"""The range and round-robin assignors: golden cases from Kafka's RangeAssignorTest and RoundRobinAssignorTest (by
test name), and property tests against tiny models written another way."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.client.assignors import ASSIGNOR_NAMES, EAGER, make_assignor
from idemcore.net.consumer_protocol import Subscription

T1, T2 = "topic1", "topic2"


def _assign(name: str, partitions: dict[str, int], subscriptions: dict[str, Subscription]) -> dict[str, list]:
    return {m: list(a.partitions) for m, a in make_assignor(name).assign(partitions, subscriptions).items()}


def _static(topics: tuple[str, ...], instance: str) -> Subscription:
    return Subscription(topics=topics, group_instance_id=instance)


# ---------------------------------------------------------------- make_assignor


def test_make_assignor_names() -> None:
    assert set(ASSIGNOR_NAMES) >= {"range", "roundrobin"}
    for name in ASSIGNOR_NAMES:
        assignor = make_assignor(name)
        assert assignor.name == name and assignor.supported_protocols
    assert make_assignor("range").supported_protocols == (EAGER,)
    with pytest.raises(ValueError, match=r"'rang'.*range.*roundrobin"):
        make_assignor("rang")


# ---------------------------------------------------------------- RangeAssignorTest


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_one_consumer_nonexistent_topic_and_no_topic(name: str) -> None:
    # testOneConsumerNonexistentTopic, testOneConsumerNoTopic
    assert _assign(name, {}, {"c": Subscription(topics=("topic",))}) == {"c": []}
    assert _assign(name, {"topic": 3}, {"c": Subscription(topics=())}) == {"c": []}


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_only_assigns_partitions_from_subscribed_topics(name: str) -> None:
    # testOnlyAssignsPartitionsFromSubscribedTopics
    got = _assign(name, {"topic": 3, "other": 3}, {"c": Subscription(topics=("topic",))})
    assert got == {"c": [("topic", 0), ("topic", 1), ("topic", 2)]}


def test_range_two_consumers_two_topics_six_partitions() -> None:
    # RangeAssignorTest.testTwoConsumersTwoTopicsSixPartitions
    subs = {"consumer1": Subscription(topics=(T1, T2)), "consumer2": Subscription(topics=(T1, T2))}
    assert _assign("range", {T1: 3, T2: 3}, subs) == {
        "consumer1": [(T1, 0), (T1, 1), (T2, 0), (T2, 1)], "consumer2": [(T1, 2), (T2, 2)]}


def test_range_multiple_consumers_mixed_topics() -> None:
    # RangeAssignorTest.testMultipleConsumersMixedTopics
    subs = {"consumer1": Subscription(topics=(T1,)), "consumer2": Subscription(topics=(T1, T2)),
            "consumer3": Subscription(topics=(T1,))}
    assert _assign("range", {T1: 3, T2: 2}, subs) == {
        "consumer1": [(T1, 0)], "consumer2": [(T1, 1), (T2, 0), (T2, 1)], "consumer3": [(T1, 2)]}


def test_range_static_members_ordered_by_instance_id() -> None:
    # RangeAssignorTest.testTwoStaticConsumersTwoTopicsSixPartitions: consumer-b's instance id sorts first
    subs = {"consumer-b": _static((T1, T2), "instance1"), "consumer-a": _static((T1, T2), "instance2")}
    assert _assign("range", {T1: 3, T2: 3}, subs) == {
        "consumer-b": [(T1, 0), (T1, 1), (T2, 0), (T2, 1)], "consumer-a": [(T1, 2), (T2, 2)]}
    # testOneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions: a static member before a dynamic one
    subs = {"consumer-b": _static((T1, T2), "instance1"), "consumer-a": Subscription(topics=(T1, T2))}
    assert _assign("range", {T1: 3, T2: 3}, subs)["consumer-b"] == [(T1, 0), (T1, 1), (T2, 0), (T2, 1)]


# ---------------------------------------------------------------- RoundRobinAssignorTest


def test_roundrobin_multiple_consumers_mixed_topics() -> None:
    # RoundRobinAssignorTest.testMultipleConsumersMixedTopics
    subs = {"consumer1": Subscription(topics=(T1,)), "consumer2": Subscription(topics=(T1, T2)),
            "consumer3": Subscription(topics=(T1,))}
    assert _assign("roundrobin", {T1: 3, T2: 2}, subs) == {
        "consumer1": [(T1, 0)], "consumer2": [(T1, 1), (T2, 0), (T2, 1)], "consumer3": [(T1, 2)]}


def test_roundrobin_two_dynamic_and_static_consumers() -> None:
    # testTwoDynamicConsumersTwoTopicsSixPartitions, testOneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions
    first, second = [(T1, 0), (T1, 2), (T2, 1)], [(T1, 1), (T2, 0), (T2, 2)]
    subs = {"consumer1": Subscription(topics=(T1, T2)), "consumer2": Subscription(topics=(T1, T2))}
    assert _assign("roundrobin", {T1: 3, T2: 3}, subs) == {"consumer1": first, "consumer2": second}
    subs = {"consumer-b": _static((T1, T2), "instance1"), "consumer-a": Subscription(topics=(T1, T2))}
    assert _assign("roundrobin", {T1: 3, T2: 3}, subs) == {"consumer-b": first, "consumer-a": second}


def test_roundrobin_static_member_assignment_persistent() -> None:
    # RoundRobinAssignorTest.testStaticMemberAssignmentPersistent
    subs = {f"consumer{i}": _static((T1, T2), f"instance{i}") for i in (1, 2, 3)}
    subs["consumer4"] = Subscription(topics=(T1, T2))
    expected = {"consumer1": [(T1, 0), (T2, 1)], "consumer2": [(T1, 1), (T2, 2)], "consumer3": [(T1, 2)],
                "consumer4": [(T2, 0)]}
    assert _assign("roundrobin", {T1: 3, T2: 3}, subs) == expected
    del subs["consumer4"]
    subs["consumer5"] = Subscription(topics=(T1, T2))
    expected["consumer5"] = expected.pop("consumer4")
    assert _assign("roundrobin", {T1: 3, T2: 3}, subs) == expected


# ---------------------------------------------------------------- against tiny models

_TOPICS = ("a", "b", "c", "d")
_groups = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(7)]),
    st.tuples(st.sets(st.sampled_from(_TOPICS)), st.one_of(st.none(), st.sampled_from(["i1", "i2", "i3"]))),
    min_size=1, max_size=6)
_counts = st.dictionaries(st.sampled_from(_TOPICS), st.integers(0, 9))


def _subscriptions(group: dict[str, tuple[set[str], str | None]]) -> dict[str, Subscription]:
    seen: set[str] = set()
    out = {}
    for member, (topics, instance) in group.items():
        if instance in seen:  # instance ids are unique in a group
            instance = None
        if instance is not None:
            seen.add(instance)
        out[member] = Subscription(topics=tuple(sorted(topics)), group_instance_id=instance)
    return out


def _rank(member: str, s: Subscription) -> tuple[bool, str]:
    return (s.group_instance_id is None, s.group_instance_id or member)


def _range_model(counts: dict[str, int], subs: dict[str, Subscription]) -> dict[str, list]:
    out: dict[str, list] = {m: [] for m in subs}
    for topic, n in counts.items():
        members = sorted((m for m in subs if topic in subs[m].topics), key=lambda m: _rank(m, subs[m]))
        slots = [m for i, m in enumerate(members) for _ in range(math.ceil((n - i) / len(members)))]
        for partition, member in enumerate(slots):
            out[member].append((topic, partition))
    return {m: sorted(ps) for m, ps in out.items()}


def _roundrobin_model(counts: dict[str, int], subs: dict[str, Subscription]) -> dict[str, list]:
    out: dict[str, list] = {m: [] for m in subs}
    circle = itertools.cycle(sorted(subs, key=lambda m: _rank(m, subs[m])))
    pending = next(circle)
    for topic in sorted(counts):
        if not any(topic in s.topics for s in subs.values()):
            continue
        for partition in range(counts[topic]):
            while topic not in subs[pending].topics:
                pending = next(circle)
            out[pending].append((topic, partition))
            pending = next(circle)
    return {m: sorted(ps) for m, ps in out.items()}


def _check_complete(counts: dict[str, int], subs: dict[str, Subscription], got: dict[str, list]) -> None:
    assert set(got) == set(subs)
    owners = [(tp, m) for m, ps in got.items() for tp in ps]
    assert len({tp for tp, _ in owners}) == len(owners), "a partition assigned twice"
    assert all(tp[0] in subs[m].topics for tp, m in owners), "a partition given to a member not subscribed"
    wanted = {(t, p) for t, n in counts.items() for p in range(n) if any(t in s.topics for s in subs.values())}
    assert {tp for tp, _ in owners} == wanted


@settings(max_examples=200, deadline=None)
@given(group=_groups, counts=_counts)
def test_range_and_roundrobin_match_their_models(group: dict, counts: dict[str, int]) -> None:
    subs = _subscriptions(group)
    for name, model in (("range", _range_model), ("roundrobin", _roundrobin_model)):
        got = _assign(name, counts, subs)
        _check_complete(counts, subs, got)
        assert got == model(counts, subs), name


# ---------------------------------------------------------------- kafka-python's assignors as a third opinion


class _Cluster:
    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.counts[topic])) if topic in self.counts else None


class _Member:
    def __init__(self, member_id: str, topics: tuple[str, ...]) -> None:
        self.member_id, self.group_instance_id = member_id, None
        self.metadata = type("Metadata", (), {"topics": list(topics)})()


@settings(max_examples=100, deadline=None)
@given(group=_groups, counts=_counts, same=st.booleans())
def test_range_and_roundrobin_agree_with_kafka_python(group: dict, counts: dict[str, int], same: bool) -> None:
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    from idemcore.net.consumer_protocol import encode_assignment

    # dynamic members only, and for round robin one subscription: kafka-python 3.0 mixes up static and dynamic
    # members (itertools.groupby on unsorted input) and fails on skipped members (a tuple for a member id)
    first = next(iter(group.values()))[0]
    subs = {m: Subscription(topics=tuple(sorted(first if same else topics))) for m, (topics, _) in group.items()}
    members = [_Member(m, s.topics) for m, s in subs.items()]
    oracles = [("range", RangePartitionAssignor)] + ([("roundrobin", RoundRobinPartitionAssignor)] if same else [])
    for name, oracle in oracles:
        theirs = oracle.assign(_Cluster(counts), members)
        for member, assignment in make_assignor(name).assign(counts, subs).items():
            # our bytes, read by kafka-python, name the partitions kafka-python assigns
            decoded = ConsumerProtocolAssignment.decode(encode_assignment(assignment))
            assert sorted(tuple(tp) for tp in decoded.partitions()) == \
                sorted(tuple(tp) for tp in theirs[member].partitions()), (name, member)


def test_rebalance_protocol_is_cooperative_only_when_every_strategy_supports_it() -> None:
    from idemcore.client.assignors import COOPERATIVE, DEFAULT_STRATEGY, rebalance_protocol

    assert rebalance_protocol([make_assignor(n) for n in DEFAULT_STRATEGY]) == EAGER  # Kafka's default
    assert rebalance_protocol([make_assignor("cooperative-sticky")]) == COOPERATIVE
    assert rebalance_protocol([make_assignor("sticky"), make_assignor("roundrobin")]) == EAGER
    with pytest.raises(ValueError, match="no partition assignment strategy"):
        rebalance_protocol([])
