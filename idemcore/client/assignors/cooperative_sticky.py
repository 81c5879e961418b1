"""Kafka's ``CooperativeStickyAssignor`` (KIP-429): the sticky assignment, minus every partition that would move to
a new member while another member still owns it (and, when all subscriptions match, minus the partitions several
members of the newest generation claimed). The owner, not finding it in its new assignment, revokes it and
rejoins; the next rebalance gives it to its new member. So a partition is never owned by two members at once.

Owned partitions come from the subscription (v1+); the generation from the subscription (v2+), else from the user
data, which holds the member's generation as one int32 (Kafka's ``CooperativeStickyAssignor`` user data)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from idemcore.client.assignors.base import COOPERATIVE, EAGER, to_assignments
from idemcore.client.assignors.sticky_base import StickyBase
from idemcore.client.assignors.sticky_owned import DEFAULT_GENERATION, MemberData
from idemcore.net.consumer_protocol import Assignment, Subscription
from idemcore.protocol.constants import TopicPartition

_GENERATION = struct.Struct(">i")


class CooperativeStickyAssignor(StickyBase):
    name = "cooperative-sticky"
    supported_protocols: tuple[str, ...] = (COOPERATIVE, EAGER)

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        return _GENERATION.pack(self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._generation = generation_id

    def member_data(self, subscription: Subscription) -> MemberData:
        if subscription.generation_id != DEFAULT_GENERATION:
            return MemberData(partitions=subscription.owned_partitions, generation=subscription.generation_id)
        data = subscription.user_data
        if data is None:
            generation = None
        elif len(data) >= _GENERATION.size:
            (generation,) = _GENERATION.unpack_from(data, 0)
        else:
            generation = DEFAULT_GENERATION  # unreadable user data: Kafka's default generation
        return MemberData(partitions=subscription.owned_partitions, generation=generation)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        assignment, transferring = self.sticky_assign(partitions_per_topic, subscriptions)
        held_back = set(transferring or ()) | still_owned_elsewhere(assignment, subscriptions)
        return to_assignments({m: [tp for tp in tps if tp not in held_back] for m, tps in assignment.items()})


def still_owned_elsewhere(assignment: Mapping[str, Iterable[TopicPartition]],
                          subscriptions: Mapping[str, Subscription]) -> set[TopicPartition]:
    """The partitions newly assigned to a member while another member's subscription still claims them (Kafka's
    ``computePartitionsTransferringOwnership``, which counts every claim, whatever its generation). A member keeping
    a partition it owns keeps it even if a stale member claims it too, as in Kafka."""
    claimed = {tp for subscription in subscriptions.values() for tp in subscription.owned_partitions}
    return {tp for member, tps in assignment.items() for tp in tps
            if tp in claimed and tp not in subscriptions[member].owned_partitions}
