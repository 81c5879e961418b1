"""The coordinator's assignors (KIP-848: ``uniform`` and ``range``), by property: every partition of a subscribed
topic goes to exactly one of its subscribers; ``uniform`` is balanced and sticky; ``range`` equals a small model of
Kafka's rule (per topic, subscribers sorted, contiguous ranges, the first ones one more)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.broker.group.server_assignors import (
    SERVER_ASSIGNOR_NAMES,
    MemberSpec,
    Partitions,
    RangeAssignor,
    UniformAssignor,
    make_server_assignor,
)

TOPICS = ("a", "b", "c")

counts_st = st.fixed_dictionaries({t: st.integers(0, 7) for t in TOPICS})
subscription_st = st.frozensets(st.sampled_from((*TOPICS, "missing")), min_size=1)
members_st = st.dictionaries(st.text("mnopq", min_size=1, max_size=3), subscription_st, min_size=1, max_size=6)


def specs(members: dict[str, frozenset[str]], current: dict[str, Partitions] | None = None) -> list[MemberSpec]:
    return [MemberSpec(m, topics, None, (current or {}).get(m, {})) for m, topics in members.items()]


def flat(assignment: Partitions) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def check_exactly_once(members: dict[str, frozenset[str]], counts: dict[str, int],
                       result: dict[str, Partitions]) -> None:
    assert set(result) == set(members)
    seen: list[tuple[str, int]] = []
    for member, assignment in result.items():
        for topic, p in flat(assignment):
            assert topic in members[member], (member, topic)  # only partitions of a topic it subscribes to
            seen.append((topic, p))
    subscribed = {t for ts in members.values() for t in ts if counts.get(t, 0) > 0}
    assert sorted(seen) == sorted((t, p) for t in subscribed for p in range(counts[t]))


@settings(max_examples=300, deadline=None)
@given(members=members_st, counts=counts_st, name=st.sampled_from(SERVER_ASSIGNOR_NAMES))
def test_every_partition_of_a_subscribed_topic_goes_to_exactly_one_subscriber(members, counts, name):
    check_exactly_once(members, counts, make_server_assignor(name).assign(specs(members), counts))


def range_model(members: dict[str, frozenset[str]], counts: dict[str, int]) -> dict[str, set[tuple[str, int]]]:
    result: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    for topic in TOPICS:
        subscribers = sorted(m for m, ts in members.items() if topic in ts)
        if not subscribers:
            continue
        per, extra = divmod(counts[topic], len(subscribers))
        start = 0
        for k, m in enumerate(subscribers):
            size = per + (k < extra)
            result[m] |= {(topic, p) for p in range(start, start + size)}
            start += size
    return result


@settings(max_examples=300, deadline=None)
@given(members=members_st, counts=counts_st)
def test_range_equals_the_model(members, counts):
    result = RangeAssignor().assign(specs(members), counts)
    assert {m: flat(a) for m, a in result.items()} == range_model(members, counts)


def test_range_golden_case():
    # Kafka's RangeAssignorTest: 3 partitions, 2 members: the first gets 0-1, the second 2.
    result = RangeAssignor().assign(specs({"m1": frozenset("a"), "m2": frozenset("a")}), {"a": 3})
    assert result == {"m1": {"a": frozenset({0, 1})}, "m2": {"a": frozenset({2})}}


@settings(max_examples=300, deadline=None)
@given(topics=st.frozensets(st.sampled_from(TOPICS), min_size=1), names=st.lists(st.text("xyz", min_size=1,
       max_size=3), min_size=1, max_size=6, unique=True), counts=counts_st)
def test_uniform_is_balanced_when_members_subscribe_alike(topics, names, counts):
    members = dict.fromkeys(names, topics)
    result = UniformAssignor().assign(specs(members), counts)
    check_exactly_once(members, counts, result)
    sizes = [len(flat(a)) for a in result.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=300, deadline=None)
@given(members=members_st, counts=counts_st)
def test_uniform_heterogeneous_cannot_improve_by_moving_one_partition(members, counts):
    result = UniformAssignor().assign(specs(members), counts)
    check_exactly_once(members, counts, result)
    size = {m: len(flat(a)) for m, a in result.items()}
    for m, assignment in result.items():
        for topic, _ in flat(assignment):
            for other, topics in members.items():
                if topic in topics:
                    assert size[other] >= size[m] - 1, (m, other, result)


@settings(max_examples=300, deadline=None)
@given(topics=st.frozensets(st.sampled_from(TOPICS), min_size=1), names=st.lists(st.text("xyz", min_size=1,
       max_size=3), min_size=2, max_size=6, unique=True), counts=counts_st, joining=st.booleans())
def test_uniform_is_sticky_when_a_member_joins_or_leaves(topics, names, counts, joining):
    """A member joining: nobody gains a partition it did not have except the newcomer. A member leaving: nobody
    loses one it had."""
    before_members = dict.fromkeys(names[:-1] if joining else names, topics)
    before = UniformAssignor().assign(specs(before_members), counts)
    after_members = dict.fromkeys(names if joining else names[:-1], topics)
    after = UniformAssignor().assign(specs(after_members, before), counts)
    check_exactly_once(after_members, counts, after)
    for m in set(before_members) & set(after_members):
        if joining:
            assert flat(after[m]) <= flat(before[m]), m
        else:
            assert flat(before[m]) <= flat(after[m]), m


def test_an_unknown_assignor_is_refused_by_name():
    with pytest.raises(ValueError, match=r"'sticky'.*uniform, range"):
        make_server_assignor("sticky")
