"""Which member still owns what before a sticky assignment (Kafka's ``AbstractStickyAssignor``): each member's
claimed partitions, kept when the topic is still assigned and nobody of a newer generation claims them too.

Two members of the same generation claiming one partition is invalid input: neither keeps it, and it is recorded
as doubly claimed so that the cooperative assignor does not hand it out before both have revoked it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def previous_owners(partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberData],
                    order: Iterable[str]) -> PreviousOwners:
    """Resolve the claims of ``members`` (visited in ``order``): a claim on a partition that no longer exists is
    dropped; of two claims the newer generation wins; equal generations void both."""
    result = PreviousOwners(owned={member: [] for member in members})
    holder: dict[TopicPartition, str] = {}  # the current winner of each claimed partition
    for member in order:
        data = members[member]
        generation = _generation(data)
        for tp in data.partitions:
            topic, partition = tp
            if not 0 <= partition < partitions_per_topic.get(topic, 0):
                continue
            other = holder.get(tp)
            if other is None:
                holder[tp] = member
                result.owned[member].append(tp)
                continue
            other_generation = _generation(members[other])
            if generation == other_generation:
                result.doubly_claimed.add(tp)
                _discard(result.owned[other], tp)
                holder[tp] = member  # a third claimer of that generation finds nothing more to void
            elif generation > other_generation:
                _discard(result.owned[other], tp)
                result.owned[member].append(tp)
                holder[tp] = member
    return result


def _generation(data: MemberData) -> int:
    return DEFAULT_GENERATION if data.generation is None else data.generation


def _discard(partitions: list[TopicPartition], tp: TopicPartition) -> None:
    if tp in partitions:
        partitions.remove(tp)
