"""Kafka's ``RangeAssignor``: topic by topic, the partitions split into contiguous ranges over the members
subscribed to that topic, the first members taking one more when they do not divide evenly.

Kafka 3.5's rack-aware placement (KIP-881, used only when members and partitions carry racks) is left out: the
placement here is the one Kafka makes without rack information."""

from __future__ import annotations

from collections.abc import Mapping

from idemcore.client.assignors.base import EAGER, NoUserData, sorted_members, to_assignments
from idemcore.net.consumer_protocol import Assignment, Subscription
from idemcore.protocol.constants import TopicPartition


class RangeAssignor(NoUserData):
    name = "range"
    supported_protocols: tuple[str, ...] = (EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        assigned: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        members = sorted_members(subscriptions)
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            subscribers = [m for m in members if topic in subscriptions[m].topics]
            each, extra = divmod(count, len(subscribers))
            start = 0
            for index, member in enumerate(subscribers):
                size = each + (1 if index < extra else 0)
                assigned[member].extend((topic, p) for p in range(start, start + size))
                start += size
        return to_assignments(assigned)
