"""The sticky and cooperative-sticky assignors: golden cases from Kafka's AbstractStickyAssignorTest,
StickyAssignorTest and CooperativeStickyAssignorTest (by test name), the user data formats against kafka-python,
and property tests: valid, balanced, sticky, and (cooperative) never giving a partition another member still owns."""

from __future__ import annotations

import struct
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

from idemcore.client.assignors import COOPERATIVE, EAGER, make_assignor
from idemcore.client.assignors.cooperative_sticky import CooperativeStickyAssignor
from idemcore.client.assignors.sticky import StickyAssignor, decode_user_data, encode_user_data
from idemcore.client.assignors.sticky_base import StickyBase
from idemcore.client.assignors.sticky_owned import MemberData
from idemcore.net.consumer_protocol import Assignment, Subscription

T, T1, T2, T3 = "topic", "topic1", "topic2", "topic3"
C1, C2, C3, C4 = "consumer1", "consumer2", "consumer3", "consumer4"
KINDS = ("sticky", "cooperative-sticky")


def sub(kind: str, topics: list[str], owned: list | None = None, generation: int = 1) -> Subscription:
    """A member's subscription as each assignor's Java client sends it (Kafka's buildSubscriptionV2Above)."""
    owned = owned or []
    if kind == "sticky":
        user_data = encode_user_data(owned, generation) if owned or generation != -1 else None
    else:
        user_data = struct.pack(">i", generation)
    return Subscription(topics=tuple(topics), user_data=user_data, owned_partitions=tuple(owned),
                        generation_id=generation)


def run(kind: str, counts: dict[str, int], subs: dict[str, Subscription]) -> tuple[dict, dict | None]:
    """The sticky assignment before the cooperative adjustment (what Kafka's assignPartitions tests check)."""
    assignor = make_assignor(kind)
    assert isinstance(assignor, StickyBase)
    assignment, transferring = assignor.sticky_assign(counts, subs)
    return {m: sorted(tps) for m, tps in assignment.items()}, transferring


def tps(*pairs: tuple[str, int]) -> list:
    return sorted(pairs)


# ---------------------------------------------------------------- AbstractStickyAssignorTest, both assignors


@pytest.mark.parametrize("kind", KINDS)
def test_two_consumers_two_topics_six_partitions(kind: str) -> None:
    # testTwoConsumersTwoTopicsSixPartitions
    got, moving = run(kind, {T1: 3, T2: 3}, {C1: sub(kind, [T1, T2], generation=-1),
                                            C2: sub(kind, [T1, T2], generation=-1)})
    assert got == {C1: tps((T1, 0), (T1, 2), (T2, 1)), C2: tps((T1, 1), (T2, 0), (T2, 2))} and moving == {}


@pytest.mark.parametrize("kind", KINDS)
def test_multiple_consumers_mixed_topic_subscriptions(kind: str) -> None:
    # testMultipleConsumersMixedTopicSubscriptions: the general case, no transfer map
    got, moving = run(kind, {T1: 3, T2: 2}, {C1: sub(kind, [T1]), C2: sub(kind, [T1, T2]), C3: sub(kind, [T1])})
    assert got == {C1: tps((T1, 0), (T1, 2)), C2: tps((T2, 0), (T2, 1)), C3: tps((T1, 1))} and moving is None


@pytest.mark.parametrize("kind", KINDS)
def test_only_assigns_partitions_from_subscribed_topics(kind: str) -> None:
    # testOnlyAssignsPartitionsFromSubscribedTopics: owned partitions of an unsubscribed topic are dropped
    owned = [(T, 0), (T, 1), ("other", 0), ("other", 1)]
    got, moving = run(kind, {T: 2}, {"consumer": sub(kind, [T], owned)})
    assert got == {"consumer": tps((T, 0), (T, 1))} and moving == {}


@pytest.mark.parametrize("kind", KINDS)
def test_quota_cases(kind: str) -> None:
    # testConsumerOwningMinQuotaExpectedMaxQuota
    got, moving = run(kind, {T1: 2, T2: 3}, {C1: sub(kind, [T1, T2], [(T1, 0), (T2, 1)]),
                                            C2: sub(kind, [T1, T2], [(T1, 1), (T2, 2)])})
    assert got == {C1: tps((T1, 0), (T2, 1), (T2, 0)), C2: tps((T1, 1), (T2, 2))} and moving == {}
    # testMaxQuotaConsumerMoreThanNumExpectedMaxCapacityMembers
    got, moving = run(kind, {T1: 2, T2: 2}, {C1: sub(kind, [T1, T2], [(T1, 0), (T2, 0)]),
                                            C2: sub(kind, [T1, T2], [(T1, 1), (T2, 1)]), C3: sub(kind, [T1, T2])})
    assert got == {C1: tps((T1, 0)), C2: tps((T1, 1), (T2, 1)), C3: tps((T2, 0))} and moving == {(T2, 0): C3}
    # testAllConsumersAreUnderMinQuota
    got, moving = run(kind, {T1: 2, T2: 3}, {C1: sub(kind, [T1, T2], [(T1, 0)]),
                                            C2: sub(kind, [T1, T2], [(T1, 1)]), C3: sub(kind, [T1, T2])})
    assert got == {C1: tps((T1, 0), (T2, 1)), C2: tps((T1, 1), (T2, 2)), C3: tps((T2, 0))} and moving == {}
    # testAllConsumersReachExpectedQuotaAndAreConsideredFilled
    got, moving = run(kind, {T: 4}, {C1: sub(kind, [T], [(T, 0), (T, 1)]), C2: sub(kind, [T], [(T, 2)]),
                                     C3: sub(kind, [T])})
    assert got == {C1: tps((T, 0), (T, 1)), C2: tps((T, 2)), C3: tps((T, 3))} and moving == {}


@pytest.mark.parametrize("kind", KINDS)
def test_add_remove_two_consumers_two_topics(kind: str) -> None:
    # testAddRemoveTwoConsumersTwoTopics
    both = [T1, T2]
    counts = {T1: 3, T2: 4}
    got, _ = run(kind, counts, {C1: sub(kind, both, generation=-1), C2: sub(kind, both, generation=-1)})
    assert got == {C1: tps((T1, 0), (T1, 2), (T2, 1), (T2, 3)), C2: tps((T1, 1), (T2, 0), (T2, 2))}
    got, moving = run(kind, counts, {C1: sub(kind, both, got[C1]), C2: sub(kind, both, got[C2]),
                                     C3: sub(kind, both), C4: sub(kind, both)})
    assert moving == {(T1, 2): C3, (T2, 3): C3, (T2, 2): C4}
    assert got == {C1: tps((T1, 0), (T2, 1)), C2: tps((T2, 0), (T1, 1)), C3: tps((T1, 2), (T2, 3)),
                   C4: tps((T2, 2))}
    got, moving = run(kind, counts, {C3: sub(kind, both, got[C3]), C4: sub(kind, both, got[C4])})
    assert got == {C3: tps((T1, 2), (T2, 3), (T1, 0), (T2, 1)), C4: tps((T2, 2), (T1, 1), (T2, 0))}
    assert moving == {}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stale", [9, -1])
def test_owned_partitions_are_invalidated_for_consumer_with_stale_or_no_generation(kind: str, stale: int) -> None:
    # testOwnedPartitionsAreInvalidatedForConsumerWithStaleGeneration / ...WithNoGeneration
    owned = [(T, 0), (T, 2), (T2, 1)]
    subs = {C1: sub(kind, [T, T2], owned, 10), C2: sub(kind, [T, T2], owned, stale)}
    got, moving = run(kind, {T: 3, T2: 3}, subs)
    assert got == {C1: tps(*owned), C2: tps((T, 1), (T2, 0), (T2, 2))} and moving == {}
    # the stale claim holds nothing back: consumer1 keeps what it owns, consumer2 gets what nobody owned
    final = make_assignor(kind).assign({T: 3, T2: 3}, subs)
    assert {m: sorted(a.partitions) for m, a in final.items()} == got


@pytest.mark.parametrize("kind", KINDS)
def test_partition_claimed_by_multiple_consumers_in_same_generation(kind: str) -> None:
    # testPartitionsTransferringOwnershipIncludeThePartitionClaimedByMultipleConsumersInSameGeneration
    got, moving = run(kind, {T: 3}, {C1: sub(kind, [T], [(T, 0), (T, 1)]), C2: sub(kind, [T], [(T, 0), (T, 2)]),
                                     C3: sub(kind, [T])})
    assert got == {C1: tps((T, 1)), C2: tps((T, 2)), C3: tps((T, 0))} and moving == {(T, 0): C3}


@pytest.mark.parametrize("kind", KINDS)
def test_no_exception_when_only_subscribed_topic_deleted(kind: str) -> None:
    # testNoExceptionThrownWhenOnlySubscribedTopicDeleted
    got = make_assignor(kind).assign({}, {"consumer": sub(kind, [T], [(T, 0), (T, 1), (T, 2)])})
    assert got == {"consumer": Assignment(partitions=())}


# ---------------------------------------------------------------- member data and user data


def test_sticky_member_data_comes_from_the_user_data() -> None:
    # StickyAssignorTest.testMemberData (the V0 schema has no generation; Kafka ignores the owned partitions field)
    assignor = StickyAssignor()
    owned = ((T1, 0), (T2, 1))
    with_user_data = Subscription(topics=(T,), user_data=encode_user_data(owned, 1), owned_partitions=())
    assert assignor.member_data(with_user_data) == MemberData(partitions=owned, generation=1)
    v0 = encode_user_data(owned, 1)[:-4]
    assert assignor.member_data(Subscription(topics=(T,), user_data=v0)) == MemberData(partitions=owned)
    assert assignor.member_data(Subscription(topics=(T,), owned_partitions=owned, generation_id=4)) == \
        MemberData(partitions=())
    assert assignor.member_data(Subscription(topics=(T,), user_data=b"\x00\x00\x00\x05xy")) == \
        MemberData(partitions=(), generation=-1)


def test_sticky_user_data_matches_kafka_python() -> None:
    ours = encode_user_data([(T2, 1), (T1, 2), (T1, 0)], 7)
    theirs = StickyAssignorUserData([(T1, [0, 2]), (T2, [1])], 7).encode(header=False)
    assert ours == bytes(theirs)
    decoded = StickyAssignorUserData.decode(ours, version=1, header=False)
    assert decoded.generation == 7 and [tuple(x) for x in decoded.previous_assignment] == [(T1, [0, 2]), (T2, [1])]
    assert decode_user_data(bytes(theirs)) == MemberData(partitions=((T1, 0), (T1, 2), (T2, 1)), generation=7)


def test_sticky_assignor_remembers_its_assignment_for_the_next_subscription() -> None:
    assignor = StickyAssignor()
    assert assignor.subscription_user_data([T]) is None  # nothing assigned yet: Kafka sends no user data
    assignor.on_assignment(Assignment(partitions=((T, 1), (T, 0))), 3)
    data = assignor.subscription_user_data([T])
    assert data is not None and decode_user_data(data) == MemberData(partitions=((T, 0), (T, 1)), generation=3)
    assert assignor.supported_protocols == (EAGER,)


def test_cooperative_member_data_and_generation_user_data() -> None:
    # CooperativeStickyAssignorTest.testEncodeAndDecodeGeneration / testDecodeGeneration / testMemberData
    assignor = CooperativeStickyAssignor()
    assert assignor.subscription_user_data([T]) == struct.pack(">i", -1)
    assignor.on_assignment(Assignment(partitions=()), 5)
    assert assignor.subscription_user_data([T]) == struct.pack(">i", 5)
    owned = ((T1, 0), (T2, 1))
    v2 = Subscription(topics=(T,), owned_partitions=owned, generation_id=1)
    v1 = Subscription(topics=(T,), user_data=struct.pack(">i", 1), owned_partitions=owned)
    for subscription in (v1, v2):
        assert assignor.member_data(subscription) == MemberData(partitions=owned, generation=1)
    assert assignor.member_data(Subscription(topics=(T,), user_data=b"\x01")).generation == -1
    assert assignor.member_data(Subscription(topics=(T,))).generation is None
    assert assignor.supported_protocols == (COOPERATIVE, EAGER)


# ---------------------------------------------------------------- CooperativeStickyAssignorTest


def test_cooperative_holds_back_a_partition_claimed_by_several_members() -> None:
    # CooperativeStickyAssignorTest.testAllConsumersHaveOwnedPartitionInvalidatedWhenClaimedByMultipleConsumers...
    # ...InSameGenerationWithEqualPartitionsPerConsumer: topic-0 waits until both claimers have revoked it
    kind = "cooperative-sticky"
    subs = {C1: sub(kind, [T], [(T, 0), (T, 1)]), C2: sub(kind, [T], [(T, 0), (T, 2)]), C3: sub(kind, [T])}
    got = make_assignor(kind).assign({T: 3}, subs)
    assert got == {C1: Assignment(partitions=((T, 1),)), C2: Assignment(partitions=((T, 2),)),
                   C3: Assignment(partitions=())}


def test_cooperative_two_rebalances_when_a_member_joins() -> None:
    # the cooperative protocol of KIP-429: first the owner revokes, then the next rebalance assigns
    kind = "cooperative-sticky"
    assignor = make_assignor(kind)
    first = assignor.assign({T: 4}, {C1: sub(kind, [T], generation=-1)})
    assert first[C1].partitions == ((T, 0), (T, 1), (T, 2), (T, 3))
    second = assignor.assign({T: 4}, {C1: sub(kind, [T], list(first[C1].partitions), 1), C2: sub(kind, [T])})
    assert second == {C1: Assignment(partitions=((T, 0), (T, 1))), C2: Assignment(partitions=())}
    third = assignor.assign({T: 4}, {C1: sub(kind, [T], list(second[C1].partitions), 2), C2: sub(kind, [T], [], 2)})
    assert third == {C1: Assignment(partitions=((T, 0), (T, 1))), C2: Assignment(partitions=((T, 2), (T, 3)))}


# ---------------------------------------------------------------- properties

_TOPICS = ("a", "b", "c")
_member_ids = st.sampled_from([f"m{i}" for i in range(6)])


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, tuple[frozenset[str], list, int]]]:
    counts = draw(st.dictionaries(st.sampled_from(_TOPICS), st.integers(0, 7), min_size=1))
    members = draw(st.lists(_member_ids, min_size=1, max_size=6, unique=True))
    same = draw(st.booleans())
    shared = frozenset(draw(st.sets(st.sampled_from(_TOPICS), min_size=1)))
    all_partitions = [(t, p) for t in _TOPICS for p in range(8)]
    group = {}
    for member in members:
        topics = shared if same else frozenset(draw(st.sets(st.sampled_from(_TOPICS))))
        owned = draw(st.lists(st.sampled_from(all_partitions), max_size=6, unique=True))
        generation = draw(st.sampled_from([-1, 3, 4]))
        group[member] = (topics, owned, generation)
    return counts, group


def _subs(kind: str, group: dict) -> dict[str, Subscription]:
    return {m: sub(kind, sorted(topics), owned, generation) for m, (topics, owned, generation) in group.items()}


def _model_valid_owners(wanted: set, group: dict) -> dict:
    """Partition -> its one valid previous owner: the only claimer of the newest generation among its claimers."""
    claims: dict = {}
    for member, (_, owned, generation) in group.items():
        for tp in owned:
            if tp in wanted:
                claims.setdefault(tp, []).append((generation, member))
    owners = {}
    for tp, claimers in claims.items():
        newest = max(g for g, _ in claimers)
        top = [m for g, m in claimers if g == newest]
        if len(top) == 1:
            owners[tp] = top[0]
    return owners


def _wanted(counts: dict[str, int], subs: dict[str, Subscription]) -> set:
    return {(t, p) for t, n in counts.items() for p in range(n) if any(t in s.topics for s in subs.values())}


def _check_valid(assignment: dict, subs: dict[str, Subscription]) -> None:
    assert set(assignment) == set(subs)
    seen = Counter(tp for partitions in assignment.values() for tp in partitions)
    assert all(n == 1 for n in seen.values()), "a partition assigned twice"
    assert all(tp[0] in subs[m].topics for m, partitions in assignment.items() for tp in partitions)


@settings(max_examples=300, deadline=None)
@given(data=groups(), kind=st.sampled_from(KINDS))
def test_sticky_assignment_is_valid_balanced_and_sticky(data: tuple, kind: str) -> None:
    counts, group = data
    subs = _subs(kind, group)
    got, _ = run(kind, counts, subs)
    _check_valid(got, subs)
    assert {tp for partitions in got.values() for tp in partitions} == _wanted(counts, subs)
    loads = {m: len(p) for m, p in got.items()}
    owners = _model_valid_owners(_wanted(counts, subs), group)
    same_topics = len({s.topics for s in subs.values()}) == 1
    if same_topics:
        # balanced: counts differ by at most one
        assert max(loads.values()) - min(loads.values()) <= 1
        # sticky: the fewest moves balance allows (each owner keeps its quota; the P % M larger quotas go to owners
        # holding more than the smaller one, as long as there are such owners)
        total = len(_wanted(counts, subs))
        low, extra = divmod(total, len(subs))
        held = Counter(owners.values())
        need = sum(max(0, n - low) for n in held.values()) - min(extra, sum(1 for n in held.values() if n > low))
        moved = sum(1 for tp, owner in owners.items() if tp not in got[owner])
        assert moved == need
    else:
        # no single move of a partition to a member subscribed to it can even the counts out more
        for target in got:
            for source in got:
                if loads[source] >= loads[target] + 2:
                    assert not [tp for tp in got[source] if tp[0] in subs[target].topics]
        # an owner still subscribed keeps its partition unless it went to a member that ends no fuller than it, and
        # the owner kept no partition new to it that the taker could have had instead
        for tp, owner in owners.items():
            if tp[0] in subs[owner].topics and tp not in got[owner]:
                taker = next(m for m, p in got.items() if tp in p)
                assert loads[taker] <= loads[owner] + 1
                new_to_owner = [x for x in got[owner] if owners.get(x) != owner]
                assert not [x for x in new_to_owner if x[0] in subs[taker].topics], (tp, owner, taker)


@settings(max_examples=300, deadline=None)
@given(data=groups())
def test_cooperative_never_gives_a_partition_another_member_still_owns(data: tuple) -> None:
    counts, group = data
    kind = "cooperative-sticky"
    subs = _subs(kind, group)
    got = {m: list(a.partitions) for m, a in make_assignor(kind).assign(counts, subs).items()}
    _check_valid(got, subs)
    for member, partitions in got.items():
        for tp in partitions:
            if tp not in subs[member].owned_partitions:  # new to it: nobody else may still own it
                assert not any(tp in subs[other].owned_partitions for other in subs if other != member), tp
    # what is left out is only what the sticky assignment would give a new member while another still claims it,
    # or (same subscriptions) a partition several members of the newest generation claim
    sticky, _ = run(kind, counts, subs)
    held_back = {tp for p in sticky.values() for tp in p} - {tp for p in got.values() for tp in p}
    wanted = _wanted(counts, subs)
    valid = _model_valid_owners(wanted, group)
    for tp in held_back:
        taker = next(m for m, p in sticky.items() if tp in p)
        claimed_elsewhere = any(tp in subs[other].owned_partitions for other in subs if other != taker)
        assert claimed_elsewhere
        assert valid.get(tp) != taker, tp  # its valid owner (newest generation) never waits for a stale claimer
    # the members revoke what they lost; within two more rebalances everything is assigned again
    for _ in range(2):
        subs = {m: sub(kind, list(s.topics), got[m], 9) for m, s in subs.items()}
        got = {m: list(a.partitions) for m, a in make_assignor(kind).assign(counts, subs).items()}
        _check_valid(got, subs)
    assert {tp for p in got.values() for tp in p} == _wanted(counts, subs)


# ---------------------------------------------------------------- kafka-python's members in a group we lead


def test_kafka_python_sticky_and_cooperative_subscriptions_are_understood() -> None:
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as PeerCooperative
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor as PeerSticky
    from kafka.structs import TopicPartition as PeerTopicPartition

    from idemcore.net.consumer_protocol import decode_subscription

    # kafka-python puts an int16 version before its sticky user data (Kafka's Java client does not): read either
    sticky = PeerSticky._metadata([T1, T2], [PeerTopicPartition(T1, 0), PeerTopicPartition(T2, 2)], 7)
    subscription = decode_subscription(bytes(sticky.encode()))
    assert StickyAssignor().member_data(subscription) == MemberData(partitions=((T1, 0), (T2, 2)), generation=7)
    cooperative = PeerCooperative()
    cooperative.member_assignment = [PeerTopicPartition(T1, 1)]
    subscription = decode_subscription(bytes(cooperative.metadata([T1]).encode()))
    assert subscription.owned_partitions == ((T1, 1),)
    assert CooperativeStickyAssignor().member_data(subscription).partitions == ((T1, 1),)
    # and a group of it and one of ours: the partition it owns stays with it
    ours = sub("cooperative-sticky", [T1], [(T1, 0)], -1)
    got = make_assignor("cooperative-sticky").assign({T1: 2}, {"peer": subscription, "ours": ours})
    assert got == {"peer": Assignment(partitions=((T1, 1),)), "ours": Assignment(partitions=((T1, 0),))}
