"""The sticky assignment when members subscribe to different topics (the goals of Kafka's ``AbstractStickyAssignor``
general assignment, by a simpler search of our own):

1. every member keeps its valid owned partitions;
2. each unassigned partition, the ones with the fewest possible members first, goes to the subscribed member with
   the fewest partitions (then by member id);
3. while some member holds at least two partitions more than another member subscribed to one of them, one such
   partition moves: from the heaviest such giver to its lightest such taker (then by member id), a partition the
   giver did not own before if it has one, else its first by topic and partition. Each move lowers the sum of the
   squared counts, so this ends; at the end no single move can even out the counts.

Kafka's general algorithm also weighs each partition's previous-but-one owner and avoids moving partitions of one
topic back and forth between two members; this one does not."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from idemcore.protocol.constants import TopicPartition


def general_assign(partitions: Sequence[TopicPartition], topics_of: Mapping[str, frozenset[str]],
                   owned: Mapping[str, Sequence[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """Every member of ``topics_of`` (its subscribed topics) gets an entry; ``owned`` holds each member's valid
    owned partitions, all of subscribed topics and each claimed by one member."""
    assignment: dict[str, list[TopicPartition]] = {member: list(owned.get(member, ())) for member in topics_of}
    taken = {tp for kept in assignment.values() for tp in kept}
    candidates = {topic: sorted(m for m in topics_of if topic in topics_of[m]) for topic, _ in partitions}
    pending = sorted((tp for tp in partitions if tp not in taken), key=lambda tp: (len(candidates[tp[0]]), tp))
    for tp in pending:
        member = min(candidates[tp[0]], key=lambda m: (len(assignment[m]), m))
        assignment[member].append(tp)
    _even_out(assignment, topics_of, {m: set(owned.get(m, ())) for m in topics_of})
    return assignment


def _even_out(assignment: dict[str, list[TopicPartition]], topics_of: Mapping[str, frozenset[str]],
              owned: Mapping[str, set[TopicPartition]]) -> None:
    # each member's partitions in the order it would give them away: those it did not own first, then by topic and
    # partition; ``_next_move`` takes the moved partition out of its giver's list
    def give_order(member: str) -> Callable[[TopicPartition], tuple[bool, TopicPartition]]:
        return lambda tp: (tp in owned[member], tp)

    queue = {m: sorted(tps, key=give_order(m)) for m, tps in assignment.items()}
    # how many partitions of each topic each member holds: whether a member can give another anything at all
    per_topic = {m: Counter(topic for topic, _ in tps) for m, tps in assignment.items()}
    subscribers: dict[str, list[str]] = {}
    for member in sorted(topics_of):
        for topic in topics_of[member]:
            subscribers.setdefault(topic, []).append(member)
    while (move := _next_move(queue, per_topic, topics_of, subscribers)) is not None:
        tp, source, target = move
        per_topic[source][tp[0]] -= 1
        per_topic[target][tp[0]] += 1
        bisect.insort(queue[target], tp, key=give_order(target))
    assignment.update(queue)


def _next_move(queue: dict[str, list[TopicPartition]], per_topic: Mapping[str, Counter[str]],
               topics_of: Mapping[str, frozenset[str]], subscribers: Mapping[str, list[str]]
               ) -> tuple[TopicPartition, str, str] | None:
    """A partition to move: from the heaviest member that holds at least two more than some member able to take one
    of its partitions, to the lightest such member; the first such partition in the giver's order."""
    lightest = min(len(line) for line in queue.values())
    for source in sorted(queue, key=lambda m: (-len(queue[m]), m)):
        limit = len(queue[source]) - 2
        if limit < lightest:
            return None  # no lighter giver can find a taker either
        taker = None
        for topic, count in per_topic[source].items():
            if count:
                for member in subscribers.get(topic, ()):
                    if len(queue[member]) <= limit and (taker is None or len(queue[member]) < len(queue[taker])
                                                        or (len(queue[member]) == len(queue[taker])
                                                            and member < taker)):
                        taker = member
        if taker is not None:
            line = queue[source]
            index = next(i for i, tp in enumerate(line) if tp[0] in topics_of[taker])
            return line.pop(index), source, taker
    return None
