"""One ``__consumer_offsets`` partition's offsets, changed only by replaying its log (Kafka's
``OffsetMetadataManager.replay`` and ``replayEndTransactionMarker``): the live coordinator replays each record
once it is durable, a restart replays the whole log, so both end in the same state.

Kafka's rule for transactional offsets: a record written by a transaction is pending, per producer id, until
that producer's marker reaches the partition. ABORT drops it; COMMIT makes it the committed offset only if it
is newer in the log (a higher record offset) than the offset committed now, so a plain commit written after
the transactional one but before its marker wins. Compaction keeps the newest plain record of a key and every
transactional one, so replaying a compacted log gives the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.broker.group.offsets_log import OffsetCommitKey, OffsetCommitValue
from idemcore.protocol.constants import NO_PRODUCER_ID
from idemcore.protocol.constants import TopicPartition as TopicPartition  # re-exported for the coordinator

#: (group, topic, partition)
GroupPartition = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """An offset as the coordinator keeps it (Kafka's ``OffsetAndMetadata``)."""

    #: Where its record sits in ``__consumer_offsets``: which of two commits is newer.
    record_offset: int
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    #: When it expires, as an old (version 1) record said; -1: by ``offsets.retention.minutes``.
    expire_timestamp: int = -1

    @classmethod
    def from_record(cls, record_offset: int, value: OffsetCommitValue) -> CommittedOffset:
        return cls(record_offset, value.offset, value.metadata, value.commit_timestamp, value.leader_epoch,
                   value.expire_timestamp)


class OffsetShard:
    """The committed and pending offsets of the groups one ``__consumer_offsets`` partition holds."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        #: Per producer id, the offsets its open transaction wrote here.
        self.pending: dict[int, dict[GroupPartition, CommittedOffset]] = {}
        #: Per group, the producers with an open transaction that wrote its offsets (Kafka's
        #: ``openTransactionsByGroup``).
        self.open_by_group: dict[str, set[int]] = {}

    def replay(self, record_offset: int, producer_id: int, key: OffsetCommitKey,
               value: OffsetCommitValue | None) -> None:
        """Apply one record; ``producer_id`` is NO_PRODUCER_ID for a plain commit, the producer's for a record
        of a transactional batch."""
        group, tp = key.group, (key.topic, key.partition)
        if value is not None:
            offset = CommittedOffset.from_record(record_offset, value)
            if producer_id == NO_PRODUCER_ID:
                self.committed.setdefault(group, {})[tp] = offset
            else:
                self.pending.setdefault(producer_id, {})[(group, *tp)] = offset
                self.open_by_group.setdefault(group, set()).add(producer_id)
            return
        # A tombstone deletes the committed offset and every pending one of the partition.
        offsets = self.committed.get(group)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self.committed[group]
        for open_producer in self.open_by_group.get(group, ()):
            self.pending.get(open_producer, {}).pop((group, *tp), None)

    def end_transaction(self, producer_id: int, committed: bool) -> None:
        """The producer's marker reached this partition: its pending offsets are committed or dropped."""
        pending = self.pending.pop(producer_id, None)
        for group in [g for g, producers in self.open_by_group.items() if producer_id in producers]:
            self.open_by_group[group].discard(producer_id)
            if not self.open_by_group[group]:
                del self.open_by_group[group]
        if not committed or not pending:
            return
        for (group, topic, partition), offset in pending.items():
            offsets = self.committed.setdefault(group, {})
            current = offsets.get((topic, partition))
            # Only a newer record wins: a plain commit written after this one (before the marker) stands.
            if current is None or offset.record_offset > current.record_offset:
                offsets[(topic, partition)] = offset

    def has_pending(self, group: str, topic: str, partition: int) -> bool:
        """Whether an open transaction wrote an offset of the group for the partition."""
        return any((group, topic, partition) in self.pending.get(producer, {})
                   for producer in self.open_by_group.get(group, ()))

    def group_exists(self, group: str) -> bool:
        """Whether the group is known here: it has committed offsets or an open transaction wrote some (a simple
        group with neither is what Kafka's periodic cleanup deletes)."""
        return group in self.committed or group in self.open_by_group
