"""What the sticky and cooperative-sticky assignors share (Kafka's ``AbstractStickyAssignor``): an assignment as
balanced as possible that moves as few partitions as possible from their previous owners.

Kafka's rack-aware placement (KIP-881) is left out: member racks are ignored."""

from __future__ import annotations

import abc
from collections.abc import Mapping

from idemcore.client.assignors.base import to_assignments
from idemcore.client.assignors.sticky_constrained import constrained_assign
from idemcore.client.assignors.sticky_general import general_assign
from idemcore.client.assignors.sticky_owned import MemberData, previous_owners
from idemcore.net.consumer_protocol import Assignment, Subscription
from idemcore.protocol.constants import TopicPartition


class StickyBase(abc.ABC):
    """Subclasses say where a member's previous assignment and generation come from (:meth:`member_data`)."""

    @abc.abstractmethod
    def member_data(self, subscription: Subscription) -> MemberData:
        """The previous assignment and generation ``subscription`` claims (StickyAssignor: its user data;
        CooperativeStickyAssignor: its owned partitions and generation)."""

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        assignment, _ = self.sticky_assign(partitions_per_topic, subscriptions)
        return to_assignments(assignment)

    def sticky_assign(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
                      ) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str] | None]:
        """``(assignment, transferring)``; ``transferring`` (partitions moving from a previous owner, by new member)
        is known only when every member has the same subscription, otherwise None."""
        if not subscriptions:
            return {}, None
        topics_of = {m: frozenset(s.topics) for m, s in subscriptions.items()}
        subscribed = frozenset().union(*topics_of.values())
        # only topics someone subscribes to and that have metadata count
        counts = {t: n for t, n in partitions_per_topic.items() if t in subscribed}
        partitions = [(t, p) for t in sorted(counts) for p in range(counts[t])]
        claims = previous_owners(counts, {m: self.member_data(s) for m, s in subscriptions.items()})
        if len(set(topics_of.values())) == 1:
            return constrained_assign(partitions, claims.owned, claims.doubly_claimed)
        owned = {m: [tp for tp in claims.owned[m] if tp[0] in topics_of[m]] for m in subscriptions}
        return general_assign(partitions, topics_of, owned), None
