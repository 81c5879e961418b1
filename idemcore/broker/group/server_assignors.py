"""The assignors a consumer-protocol group's coordinator runs (KIP-848: the server, not a member, assigns):
``uniform`` and ``range``, by Kafka's rules (``org.apache.kafka.coordinator.group.assignor.UniformAssignor`` and
``RangeAssignor``).

An assignor is a pure function of the members (their subscribed topics and the partitions the last target
assignment gave them) and of the partition counts of the topics that exist: it returns every member's new target
assignment, ``{member id: {topic: partitions}}``. A topic a member subscribes to that does not exist is ignored
(Kafka's subscription metadata only holds existing topics).

- ``uniform``: every partition of a subscribed topic to exactly one of its subscribers, counts balanced, and sticky
  (a partition stays with its member when balance allows). When every member subscribes to the same topics
  (Kafka's homogeneous case) each member gets ``total // members`` partitions, the first ``total % members`` of
  them one more, keeping what it had up to its quota; otherwise (heterogeneous) partitions go to the least loaded
  of their subscribers and are then moved from the most to the least loaded while one has two more than another.
- ``range``: per topic, its subscribers sorted (members with an instance id first, by it; then by member id), each
  given a contiguous range; the first ``partitions % subscribers`` one partition more. Not sticky (as Kafka's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

#: ``{topic: partitions}``: one member's assignment.
Partitions = dict[str, frozenset[int]]

UNIFORM, RANGE = "uniform", "range"
#: The server assignors idemcore has, in Kafka's default order (``group.consumer.assignors``).
SERVER_ASSIGNOR_NAMES = (UNIFORM, RANGE)


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member as an assignor sees it: what it subscribes to and its last target assignment (``current``)."""

    member_id: str
    topics: frozenset[str]
    instance_id: str | None = None
    current: Mapping[str, frozenset[int]] = field(default_factory=dict)


class ServerAssignor(Protocol):
    name: str

    def assign(self, members: Sequence[MemberSpec], partitions: Mapping[str, int]) -> dict[str, Partitions]:
        """Every member's target assignment; ``partitions``: the partition count of each existing topic."""
        ...


def _subscribed(member: MemberSpec, partitions: Mapping[str, int]) -> list[str]:
    return sorted(t for t in member.topics if partitions.get(t, 0) > 0)


def _frozen(assignment: dict[str, set[int]]) -> Partitions:
    return {topic: frozenset(parts) for topic, parts in assignment.items() if parts}


class RangeAssignor:
    name = RANGE

    def assign(self, members: Sequence[MemberSpec], partitions: Mapping[str, int]) -> dict[str, Partitions]:
        ordered = sorted(members, key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id))
        result: dict[str, dict[str, set[int]]] = {m.member_id: {} for m in members}
        topics = sorted({t for m in members for t in _subscribed(m, partitions)})
        for topic in topics:
            subscribers = [m for m in ordered if topic in m.topics]
            count = partitions[topic]
            quota, extra = divmod(count, len(subscribers))
            start = 0
            for k, member in enumerate(subscribers):
                end = start + quota + (1 if k < extra else 0)
                if end > start:
                    result[member.member_id][topic] = set(range(start, end))
                start = end
        return {member_id: _frozen(assignment) for member_id, assignment in result.items()}


class UniformAssignor:
    name = UNIFORM

    def assign(self, members: Sequence[MemberSpec], partitions: Mapping[str, int]) -> dict[str, Partitions]:
        if not members:
            return {}
        subscriptions = {frozenset(_subscribed(m, partitions)) for m in members}
        if len(subscriptions) == 1:
            return _homogeneous(sorted(members, key=lambda m: m.member_id), partitions)
        return _heterogeneous(sorted(members, key=lambda m: m.member_id), partitions)


def _kept(member: MemberSpec, partitions: Mapping[str, int]) -> list[tuple[str, int]]:
    """The member's last partitions it may keep: of a topic it still subscribes to, that still exists."""
    return sorted((topic, p) for topic, parts in member.current.items()
                  if topic in member.topics for p in parts if 0 <= p < partitions.get(topic, 0))


def _homogeneous(members: list[MemberSpec], partitions: Mapping[str, int]) -> dict[str, Partitions]:
    topics = _subscribed(members[0], partitions)
    every = [(topic, p) for topic in topics for p in range(partitions[topic])]
    min_quota, extras = divmod(len(every), len(members))
    owned: dict[str, list[tuple[str, int]]] = {}
    quota: dict[str, int] = {}
    taken: set[tuple[str, int]] = set()
    for member in members:  # sticky: each keeps up to its quota; one more while extras last, for those with more
        kept = [tp for tp in _kept(member, partitions) if tp not in taken]
        quota[member.member_id] = min_quota
        if len(kept) > min_quota and extras > 0:
            quota[member.member_id] += 1
            extras -= 1
        owned[member.member_id] = kept[:quota[member.member_id]]
        taken.update(owned[member.member_id])
    for member in members:  # the extras left go to the members in order
        if extras == 0:
            break
        if quota[member.member_id] == min_quota:
            quota[member.member_id] += 1
            extras -= 1
    free = iter(tp for tp in every if tp not in taken)
    for member in members:
        mine = owned[member.member_id]
        while len(mine) < quota[member.member_id]:
            mine.append(next(free))
    return {member_id: _grouped(tps) for member_id, tps in owned.items()}


def _heterogeneous(members: list[MemberSpec], partitions: Mapping[str, int]) -> dict[str, Partitions]:
    subscribed = {m.member_id: set(_subscribed(m, partitions)) for m in members}
    owner: dict[tuple[str, int], str] = {}
    count = {m.member_id: 0 for m in members}
    for member in members:
        for tp in _kept(member, partitions):
            if tp not in owner:
                owner[tp] = member.member_id
                count[member.member_id] += 1
    topics = sorted(set().union(*subscribed.values()))
    for topic in topics:  # the unowned partitions to the least loaded of their subscribers
        candidates = [m.member_id for m in members if topic in subscribed[m.member_id]]
        for p in range(partitions[topic]):
            if (topic, p) not in owner:
                chosen = min(candidates, key=lambda m: (count[m], m))
                owner[(topic, p)] = chosen
                count[chosen] += 1
    # Balance: move a partition from a member to a subscriber of its topic with two fewer, until none can move.
    # Each move lowers the sum of squared counts, so this ends; the bound only guards against a mistake here.
    for _ in range(len(owner) * len(members) + 1):
        move = _a_balancing_move(owner, count, subscribed)
        if move is None:
            break
        tp, target = move
        count[owner[tp]] -= 1
        count[target] += 1
        owner[tp] = target
    result: dict[str, list[tuple[str, int]]] = {m.member_id: [] for m in members}
    for tp, member_id in owner.items():
        result[member_id].append(tp)
    return {member_id: _grouped(tps) for member_id, tps in result.items()}


def _a_balancing_move(owner: dict[tuple[str, int], str], count: dict[str, int],
                      subscribed: dict[str, set[str]]) -> tuple[tuple[str, int], str] | None:
    for tp in sorted(owner, key=lambda tp: (-count[owner[tp]], tp)):
        holder = owner[tp]
        candidates = [m for m in count if tp[0] in subscribed[m] and count[m] < count[holder] - 1]
        if candidates:
            return tp, min(candidates, key=lambda m: (count[m], m))
    return None


def _grouped(tps: list[tuple[str, int]]) -> Partitions:
    grouped: dict[str, set[int]] = {}
    for topic, p in tps:
        grouped.setdefault(topic, set()).add(p)
    return _frozen(grouped)


def make_server_assignor(name: str) -> ServerAssignor:
    """The server assignor called ``name``; ValueError naming the value and the known names."""
    if name == UNIFORM:
        return UniformAssignor()
    if name == RANGE:
        return RangeAssignor()
    raise ValueError(f"unknown server assignor {name!r}: the known ones are {', '.join(SERVER_ASSIGNOR_NAMES)}")
