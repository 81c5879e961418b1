"""What every consumer partition assignor shares (Kafka's ``ConsumerPartitionAssignor``): the rebalance protocols,
the interface the group leader calls, and the order in which members are considered."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from idemcore.net.consumer_protocol import Assignment, Subscription
from idemcore.protocol.constants import TopicPartition

#: Kafka's ``ConsumerPartitionAssignor.RebalanceProtocol``: EAGER revokes everything before a rebalance,
#: COOPERATIVE (KIP-429) only what moves.
EAGER, COOPERATIVE = "EAGER", "COOPERATIVE"


class Assignor(Protocol):
    """One assignment strategy, named as in ``partition.assignment.strategy`` (the JoinGroup protocol name)."""

    name: str
    supported_protocols: tuple[str, ...]

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        """The user data this member puts in its subscription."""
        ...

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Called on every member with its assignment once a rebalance completes."""
        ...

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        """The leader's assignment: every member id of ``subscriptions`` gets an entry. Topics absent from
        ``partitions_per_topic`` (no metadata) are not assigned, as Kafka skips them."""
        ...


def rebalance_protocol(assignors: Sequence[Assignor]) -> str:
    """The protocol a member configured with ``assignors`` follows (Kafka's ``ConsumerCoordinator``): COOPERATIVE
    only when every one of them supports it, so Kafka's default ``range, cooperative-sticky`` rebalances eagerly."""
    if not assignors:
        raise ValueError("no partition assignment strategy configured")
    common = set.intersection(*(set(a.supported_protocols) for a in assignors))
    if not common:
        names = ", ".join(a.name for a in assignors)
        raise ValueError(f"partition assignment strategies {names} share no rebalance protocol")
    return COOPERATIVE if COOPERATIVE in common else EAGER


def member_order(member_id: str, subscription: Subscription) -> tuple[int, str, str]:
    """Kafka's ``MemberInfo`` order: static members first, by group instance id, then the others by member id."""
    instance = subscription.group_instance_id
    return (0, instance, member_id) if instance is not None else (1, member_id, "")


def sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(subscriptions, key=lambda member: member_order(member, subscriptions[member]))


def to_assignments(assigned: Mapping[str, Iterable[TopicPartition]]) -> dict[str, Assignment]:
    """Each member's partitions, sorted by topic then partition."""
    return {member: Assignment(partitions=tuple(sorted(partitions))) for member, partitions in assigned.items()}


class NoUserData:
    """Strategies that keep no state between rebalances (range, round robin)."""

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        return None

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        return None
