"""Which member still owns what before a sticky assignment (Kafka's ``AbstractStickyAssignor``): each member's
claimed partitions, kept when the partition still exists and no member of a newer generation claims it too.

Two members of the newest generation claiming one partition is invalid input: neither keeps it, and it is recorded
as doubly claimed so that the cooperative assignor does not hand it out before both have revoked it. (Kafka
resolves claims member by member in its map's order, so with three or more claimers its outcome can depend on that
order; here the newest generation wins whatever the order, which is Kafka's outcome for two claimers.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from idemcore.protocol.constants import TopicPartition

#: Kafka's ``AbstractStickyAssignor.DEFAULT_GENERATION``: a member that tells no generation.
DEFAULT_GENERATION = -1


@dataclass(frozen=True, slots=True)
class MemberData:
    """What a member says it owned, and in which generation (Kafka's ``AbstractStickyAssignor.MemberData``)."""

    partitions: tuple[TopicPartition, ...]
    generation: int | None = None


@dataclass(slots=True)
class PreviousOwners:
    """Each member's valid previously owned partitions, and the partitions several members claimed at once."""

    owned: dict[str, list[TopicPartition]]
    doubly_claimed: set[TopicPartition] = field(default_factory=set)


def previous_owners(partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberData]) -> PreviousOwners:
    """Resolve the claims of ``members``: a claim on a partition that no longer exists is dropped; of several
    claims on one partition the newest generation wins; two or more at the newest generation void them all."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member, data in members.items():
        generation = DEFAULT_GENERATION if data.generation is None else data.generation
        for tp in dict.fromkeys(data.partitions):  # a member naming a partition twice claims it once
            if 0 <= tp[1] < partitions_per_topic.get(tp[0], 0):
                claims.setdefault(tp, []).append((generation, member))
    result = PreviousOwners(owned={member: [] for member in members})
    for tp, claimers in claims.items():
        newest = max(generation for generation, _ in claimers)
        winners = [member for generation, member in claimers if generation == newest]
        if len(winners) == 1:
            result.owned[winners[0]].append(tp)
        else:
            result.doubly_claimed.add(tp)
    return result
