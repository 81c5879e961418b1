"""Kafka's ``RoundRobinAssignor``: the partitions of every subscribed topic, sorted by topic then partition, dealt
to the members in order around a circle, passing over members not subscribed to the partition's topic."""

from __future__ import annotations

from collections.abc import Mapping

from idemcore.client.assignors.base import EAGER, NoUserData, sorted_members, to_assignments
from idemcore.net.consumer_protocol import Assignment, Subscription
from idemcore.protocol.constants import TopicPartition


class RoundRobinAssignor(NoUserData):
    name = "roundrobin"
    supported_protocols: tuple[str, ...] = (EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        assigned: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        members = sorted_members(subscriptions)
        position = 0  # the circle's position carries over from one partition to the next
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            for partition in range(partitions_per_topic.get(topic, 0)):
                # at least one member subscribes to ``topic``, so this finds one within one turn of the circle
                while topic not in subscriptions[members[position % len(members)]].topics:
                    position += 1
                assigned[members[position % len(members)]].append((topic, partition))
                position += 1
        return to_assignments(assigned)
