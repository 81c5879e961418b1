"""Leader elections of Kafka's ZooKeeper-era controller (``Election.scala``,
``PartitionLeaderElectionAlgorithms``): pure functions of the assignment, the ISR and the live brokers.

Each returns the new ``(leader, isr)`` or None when no replica may lead. Replicas are always tried in
assignment order, so every controller elects the same leader from the same facts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def offline_leader(assignment: Sequence[int], isr: Sequence[int], live: Collection[int],
                   unclean: bool) -> tuple[int, tuple[int, ...]] | None:
    """The leader of a partition whose leader is gone (Kafka's ``leaderForOffline``).

    Clean: the first replica that is live and in the ISR; the new ISR is the live part of the old one. Unclean
    (only when allowed, and only when no clean choice exists): the first live replica, alone in the ISR: what
    it lacks of the old leader's log is lost."""
    for replica in assignment:
        if replica in live and replica in isr:
            return replica, tuple(r for r in isr if r in live)
    if unclean:
        for replica in assignment:
            if replica in live:
                return replica, (replica,)
    return None


def preferred_leader(assignment: Sequence[int], isr: Sequence[int],
                     live: Collection[int]) -> tuple[int, tuple[int, ...]] | None:
    """The first replica of the assignment, when it is live and in the ISR (Kafka's ``leaderForPreferredReplica``);
    the ISR stays as it is."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0], tuple(isr)
    return None


def new_partition_leader(assignment: Sequence[int], live: Collection[int]) -> tuple[int, tuple[int, ...]] | None:
    """A new partition's first leader (Kafka's ``initializeLeaderAndIsrForPartitions``): the first live replica,
    with every live replica in the ISR (nothing is written yet, so all are in sync)."""
    live_replicas = tuple(r for r in assignment if r in live)
    return (live_replicas[0], live_replicas) if live_replicas else None


def without_replica(leader: int, isr: Sequence[int], replica: int) -> tuple[int, tuple[int, ...]]:
    """``replica`` went offline (Kafka's ``removeReplicasFromIsr``): it leaves the ISR, unless it is the last
    member (kept, so that a clean election can choose it when it returns); a leader that leaves makes the
    partition leaderless (-1)."""
    new_leader = -1 if leader == replica else leader
    new_isr = tuple(isr) if len(isr) == 1 else tuple(r for r in isr if r != replica)
    return new_leader, new_isr
