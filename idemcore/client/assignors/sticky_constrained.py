"""The sticky assignment when every member subscribes to the same topics (Kafka's ``AbstractStickyAssignor``
constrained assignment): each member ends with ``floor(P/M)`` or ``ceil(P/M)`` partitions, exactly ``P % M`` of
them with the larger count, keeping as many of its owned partitions as that allows.

1. Each member keeps its owned partitions up to its quota: all of them when it owns fewer than the minimum; the
   maximum while members above the minimum are still to be had; otherwise the minimum. The rest are revoked.
   Members are visited in descending member id order: Kafka visits them in its ``HashMap``'s order, which for the
   member ids of Kafka's tests (``consumer1`` .. ``consumer4``) is descending, so Kafka's expected assignments hold.
2. The unassigned partitions, by topic then partition, go round the members still under the minimum (in member id
   order); once none is, each further one goes to a member at the minimum (in member id order, then those that
   reached it in step 2), one partition each, until ``P % M`` members hold the maximum."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from idemcore.protocol.constants import TopicPartition


def constrained_assign(partitions: Sequence[TopicPartition], owned: Mapping[str, Sequence[TopicPartition]],
                       doubly_claimed: set[TopicPartition]) -> tuple[dict[str, list[TopicPartition]],
                                                                     dict[TopicPartition, str]]:
    """``(assignment, transferring)``: every member of ``owned`` (each member's valid owned partitions) gets an
    entry; ``transferring`` maps each partition given to a member other than one that owned it (revoked here, or
    claimed by several) to its new member, for the cooperative assignor to hold back.

    ``partitions`` are all partitions to assign, sorted by topic then partition."""
    members = sorted(owned)
    total = len(partitions)
    min_quota, extra = divmod(total, len(members))
    max_quota = min_quota + (1 if extra else 0)
    over_min = 0  # members given more than the minimum so far: at most ``extra``
    assignment: dict[str, list[TopicPartition]] = {member: [] for member in members}
    under_min: list[str] = []
    at_min: deque[str] = deque()  # members at the minimum that may take one more
    revoked: set[TopicPartition] = set()

    for member in reversed(members):
        # Kafka keeps the owned partitions of lowest partition number first (then by topic)
        mine = sorted((tp for tp in owned[member] if tp not in doubly_claimed), key=lambda tp: (tp[1], tp[0]))
        if len(mine) < min_quota:
            keep = len(mine)
            under_min.append(member)
        elif len(mine) >= max_quota and over_min < extra:
            keep = max_quota
            over_min += 1
            if over_min == extra:
                at_min.clear()
        else:
            keep = min_quota
            if over_min < extra:
                at_min.append(member)
        assignment[member].extend(mine[:keep])
        revoked.update(mine[keep:])

    under_min.sort()
    at_min = deque(sorted(at_min))
    taken = {tp for kept in assignment.values() for tp in kept}
    transferring: dict[TopicPartition, str] = {}
    turn = 0  # position in ``under_min``, which shrinks as members reach the minimum
    for tp in (tp for tp in partitions if tp not in taken):
        if under_min:
            turn %= len(under_min)
            member = under_min[turn]
        elif at_min:
            member = at_min.popleft()
        else:
            raise AssertionError(f"no member left to take {tp}: the quotas do not add up")
        assignment[member].append(tp)
        if tp in revoked or tp in doubly_claimed:
            transferring[tp] = member
        count = len(assignment[member])
        if under_min and member == under_min[turn]:
            if count == min_quota:
                under_min.pop(turn)
                if over_min < extra:
                    at_min.append(member)
            else:
                turn += 1
        elif count == max_quota:
            over_min += 1
    return assignment, transferring
