"""What a consumer tells a transactional producer about its group membership (Kafka's
``ConsumerGroupMetadata``, KIP-447): the producer's TxnOffsetCommit carries it, so the group coordinator refuses
the offsets of a consumer that has since lost its partitions (a zombie) and the transaction aborts."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.net.membership import NO_GENERATION, UNKNOWN_MEMBER_ID


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """The group, and the consumer's generation, member id and static instance id in it (the defaults: a
    consumer that is no member, whose offsets are checked by group alone)."""

    group_id: str
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        if type(self.group_id) is not str or not self.group_id:
            raise ValueError(f"group_id must be a non-empty string, got {self.group_id!r:.80}")
        if type(self.generation_id) is not int or type(self.member_id) is not str \
                or not (self.group_instance_id is None or type(self.group_instance_id) is str):
            raise TypeError(f"generation_id must be an int, member_id a str, group_instance_id a str or None: "
                            f"{self!r:.120}")
