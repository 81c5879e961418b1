"""The sticky assignment when members subscribe to different topics (the goals of Kafka's ``AbstractStickyAssignor``
general assignment, by a simpler search of our own):

1. every member keeps its valid owned partitions;
2. each unassigned partition, the ones with the fewest possible members first, goes to the subscribed member with
   the fewest partitions (then by member id);
3. while some member holds at least two partitions more than another member subscribed to one of them, one such
   partition moves to the lighter member, a partition the heavier member did not own before if it has one. Each
   move lowers the sum of the squared counts, so this ends; at the end no single move can even out the counts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
    # each member's partitions by topic, so that "can the lighter member take one of these" is one lookup a topic
    held: dict[str, dict[str, set[TopicPartition]]] = {m: {} for m in assignment}
    for member, tps in assignment.items():
        for tp in tps:
            held[member].setdefault(tp[0], set()).add(tp)
    load = {m: len(tps) for m, tps in assignment.items()}
    while (move := _next_move(load, held, topics_of, owned)) is not None:
        tp, source, target = move
        held[source][tp[0]].discard(tp)
        held[target].setdefault(tp[0], set()).add(tp)
        assignment[source].remove(tp)
        assignment[target].append(tp)
        load[source] -= 1
        load[target] += 1


def _next_move(load: Mapping[str, int], held: Mapping[str, Mapping[str, set[TopicPartition]]],
               topics_of: Mapping[str, frozenset[str]], owned: Mapping[str, set[TopicPartition]]
               ) -> tuple[TopicPartition, str, str] | None:
    """A partition to move: to the lightest member that can take one, from the heaviest member holding one it can
    take at least two more than it has; a partition the giver did not own before if there is one, else the
    smallest."""
    by_load = sorted(load, key=lambda m: (load[m], m))
    for target in by_load:
        wanted = topics_of[target]
        for source in reversed(by_load):
            if load[source] < load[target] + 2:
                break
            movable = [tp for topic, tps in held[source].items() if topic in wanted for tp in tps]
            if movable:
                return min(movable, key=lambda tp: (tp in owned[source], tp)), source, target
    return None
