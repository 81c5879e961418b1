"""The group coordinator: committed offsets (of simple groups: consumers that assign partitions themselves, and
transactional producers' ``send_offsets``; and of classic groups' members) and classic group membership, kept in
the compacted ``__consumer_offsets`` topic in Kafka's record formats.

The rules are Kafka's (``GroupCoordinatorService``, ``OffsetMetadataManager``, ``ClassicGroup``, and the
partition checks of ``KafkaApis``), in their order:

1. A partition the broker does not have: UNKNOWN_TOPIC_OR_PARTITION for it (KafkaApis; the rest go on).
2. A null group id: INVALID_GROUP_ID; an empty one too for TxnOffsetCommit (OffsetCommit and OffsetFetch accept
   ``""``, for backward compatibility, as Kafka does).
3. A ``__consumer_offsets`` partition not loaded: NOT_COORDINATOR.
4. Generation: for a group with members (or membership state), Kafka's ``validateOffsetCommit``: a member id,
   instance id or generation >= 0 must name a member (UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID for a static member's
   instance id with another member id) of this generation (ILLEGAL_GENERATION); an anonymous
   plain commit into a group with members is UNKNOWN_MEMBER_ID; a plain commit while the group awaits its
   assignment is REBALANCE_IN_PROGRESS. Otherwise a negative generation is a simple commit and is accepted
   (whatever the member id: the group is Empty), and a generation >= 0 names a member of a group with none:
   ILLEGAL_GENERATION when the group is unknown (Kafka's answer before OffsetCommit v9, and always for
   TxnOffsetCommit), UNKNOWN_MEMBER_ID when it is known.
5. Per partition: metadata longer than ``offset_metadata_max_bytes`` (counted as Java's ``String.length``):
   OFFSET_METADATA_TOO_LARGE. Negative offsets are stored as given (Kafka's broker does not check them).
6. The remaining offsets go out as one batch; if the append fails, every partition that got this far answers
   the coordinator error Kafka maps the append error to, and nothing changes.

Every write is durable before memory changes: the shard (:mod:`idemcore.broker.group.shard`) replays a record
only after its append succeeded, and :meth:`GroupCoordinator.load` replays the same records after a restart.

A group is known while it has committed offsets, an open transaction wrote some, or it has membership state.
Kafka keeps a simple group whose offsets are gone until its periodic cleanup deletes it; here a simple group is
its offsets, and goes with the last of them.

Membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup: :mod:`idemcore.broker.group.membership`, with static
members) is written to ``__consumer_offsets`` as Kafka's GroupMetadata records
(:mod:`idemcore.broker.group.group_metadata_log`) where Kafka writes them, and :meth:`GroupCoordinator.load`
brings the groups back: a restart or a coordinator move does not rebalance members that keep heartbeating. A
group with members checks a generation of an offset commit against them (rule 4 becomes Kafka's
``ClassicGroup.validateOffsetCommit``); :meth:`expire` runs the membership timers (sessions, rebalance and sync
timeouts) and, every ``offsets_retention_check_interval_ms``, :meth:`cleanup_group_metadata`: offsets
``offsets_retention_ms`` old expire (KIP-211: from when an Empty group became empty, else from the commit) and
Empty groups left without offsets (classic or KIP-848) are deleted, all with tombstones.

Admin calls (Kafka's ``GroupMetadataManager`` / ``OffsetMetadataManager``): :meth:`describe_groups`,
:meth:`list_groups` (a simple group is listed Empty with protocol type ``""``, as Kafka lists it),
:meth:`delete_groups` and :meth:`offset_delete`, whose tombstones are durable before memory changes. The
consumer-protocol (KIP-848) groups of the same partitions (:attr:`consumer_groups`, made by the broker at the
first ConsumerGroupHeartbeat) are listed, deleted, expired and unloaded with the classic ones; an offset commit to
one is checked against its member's epoch (rule 4 becomes Kafka's ``ConsumerGroup.validateOffsetCommit``), and a
classic JoinGroup to one with members is INCONSISTENT_GROUP_PROTOCOL.

Not thread-safe: the caller serialises calls, as ``Broker.handle`` does.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import cast

from idemcore.broker.coordinator import coordinator_error, coordinator_partition
from idemcore.broker.group.consumer_group import ConsumerGroups
from idemcore.broker.group.group_metadata_log import (
    GroupMetadataValue,
    decode_group_value,
    encode_group_key,
    encode_group_value,
)
from idemcore.broker.group.membership import DEFAULT_INITIAL_REBALANCE_DELAY_MS, ClassicGroups, GroupState
from idemcore.broker.group.offset_log_writer import OffsetLogWriter
from idemcore.broker.group.offsets_log import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetLogFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from idemcore.broker.group.shard import CommittedOffset, OffsetShard, TopicPartition
from idemcore.broker.input_checks import strings, topic_partitions
from idemcore.checks import bool_arg, index_arg, int_arg, int_setting, str_arg, str_or_none_arg
from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.net.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from idemcore.net.group_admin import CLASSIC, DEAD, DescribedGroup, DescribedMember, ListedGroup
from idemcore.net.membership import (
    INVALID_SESSION_TIMEOUT,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import FetchedOffset, OffsetEntry, Pending
from idemcore.protocol.codes import ControlType, ErrorCode
from idemcore.protocol.constants import (
    CONSUMER_OFFSETS_TOPIC,
    DEFAULT_OFFSET_METADATA_MAX_BYTES,
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    NO_OFFSET,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
)
from idemcore.record.stored import StoredBatch

log = logging.getLogger(__name__)

E = ErrorCode
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
#: Kafka's group.min.session.timeout.ms and group.max.session.timeout.ms.
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
#: Kafka's offsets.retention.minutes (7 days, in ms) and offsets.retention.check.interval.ms.
DEFAULT_OFFSETS_RETENTION_MS = 10_080 * 60_000
DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000


def java_length(text: str) -> int:
    """Java's ``String.length()``: UTF-16 code units (a character beyond the BMP counts twice)."""
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


class GroupCoordinator:
    """Committed offsets per group, kept in ``__consumer_offsets``; see the module docstring.

    ``log_writer`` appends its batches, ``clock`` gives the commit time in ms, ``partition_exists`` says whether
    the broker has a topic partition (None: every partition is taken to exist). The session timeouts a JoinGroup
    may ask for, and the initial rebalance's delay, are Kafka's ``group.*`` settings.
    """

    def __init__(self, log_writer: OffsetLogWriter, clock: Callable[[], int] = wall_clock_ms, *,
                 offsets_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS,
                 offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES,
                 partition_exists: Callable[[str, int], bool] | None = None,
                 min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
                 max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
                 initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS,
                 offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
                 offsets_retention_check_interval_ms: int = DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS) -> None:
        int_setting("offsets_partitions", offsets_partitions, 1)
        int_setting("offset_metadata_max_bytes", offset_metadata_max_bytes, 0)
        self._log_writer = log_writer
        self._clock = clock
        #: Whether the cluster has a topic partition (None: every partition is taken to exist).
        self.partition_exists = partition_exists
        self.offsets_partitions = offsets_partitions
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self._shards: dict[int, OffsetShard] = {}
        #: Each loaded partition's coordinator epoch (its leader epoch when it was loaded; 0 for a broker alone).
        self._epochs: dict[int, int] = {}
        int_setting("min_session_timeout_ms", min_session_timeout_ms, 0)
        int_setting("max_session_timeout_ms", max_session_timeout_ms, min_session_timeout_ms)
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        int_setting("offsets_retention_ms", offsets_retention_ms, 1)
        int_setting("offsets_retention_check_interval_ms", offsets_retention_check_interval_ms, 1)
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        #: When :meth:`expire` next runs :meth:`cleanup_group_metadata` (None: one interval after its first call).
        self._next_cleanup: int | None = None
        self.classic_groups = ClassicGroups(clock, initial_rebalance_delay_ms=initial_rebalance_delay_ms,
                                            store=self._store_group)
        #: The consumer-protocol (KIP-848) groups of the same partitions, once the broker has made them (at the first
        #: ConsumerGroupHeartbeat): listed, deleted and unloaded with the classic ones.
        self.consumer_groups: ConsumerGroups | None = None

    # ------------------------------------------------------------ introspection

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds ``group_id``'s offsets."""
        return coordinator_partition(group_id, self.offsets_partitions)

    @property
    def loaded_partitions(self) -> frozenset[int]:
        """The ``__consumer_offsets`` partitions this coordinator serves (those :meth:`load` was given)."""
        return frozenset(self._shards)

    def owns(self, partition: int) -> bool:
        """Whether this coordinator serves ``__consumer_offsets-<partition>``."""
        return partition in self._shards

    def coordinator_epoch_of(self, partition: int) -> int | None:
        """The epoch the partition was loaded at (its leader epoch in a cluster), None if it is not loaded."""
        return self._epochs.get(partition) if partition in self._shards else None

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction wrote an offset of ``group_id`` for the partition."""
        shard = self._shards.get(self.partition_for(group_id))
        return shard is not None and shard.has_pending(group_id, topic, partition)

    # ------------------------------------------------------------ OffsetCommit / TxnOffsetCommit

    def offset_commit(self, group_id: str | None, offsets: Sequence[OffsetEntry], generation_id: int = -1,
                      member_id: str = "", group_instance_id: str | None = None) -> dict[TopicPartition, ErrorCode]:
        """Commit ``offsets`` for the group, outside any transaction; one error code per partition. A static
        member's ``group_instance_id`` must be its own (FENCED_INSTANCE_ID otherwise)."""
        _check_member(generation_id, member_id)
        _check_instance(group_instance_id)
        return self._commit(group_id, _checked_offsets(offsets), generation_id, member_id, NO_PRODUCER_ID,
                            NO_PRODUCER_EPOCH, transactional=False, group_instance_id=group_instance_id)

    def txn_offset_commit(self, transactional_id: str, group_id: str | None, producer_id: int, producer_epoch: int,
                          offsets: Sequence[OffsetEntry], generation_id: int = -1, member_id: str = "",
                          group_instance_id: str | None = None) -> dict[TopicPartition, ErrorCode]:
        """Write ``offsets`` as part of the producer's transaction: one transactional batch with its id and epoch,
        pending until the transaction's marker reaches the group's partition (see :meth:`complete_transaction`).
        ``transactional_id`` is not checked here (at transaction version 0 Kafka does not verify the transaction
        with its coordinator); the producer's epoch is checked by the append. A member id, generation or instance
        id is checked against the group (KIP-447: a zombie's offsets are fenced)."""
        str_arg("transactional_id", transactional_id)
        int_arg("producer_id", producer_id)
        int_arg("producer_epoch", producer_epoch)
        _check_member(generation_id, member_id)
        _check_instance(group_instance_id)
        return self._commit(group_id, _checked_offsets(offsets), generation_id, member_id, producer_id,
                            producer_epoch, transactional=True, group_instance_id=group_instance_id)

    def _commit(self, group_id: str | None, entries: list[OffsetEntry], generation_id: int, member_id: str,
                producer_id: int, producer_epoch: int, transactional: bool,
                group_instance_id: str | None = None) -> dict[TopicPartition, ErrorCode]:
        _check_group_id(group_id)
        answers: dict[TopicPartition, ErrorCode] = {}
        wanted: list[OffsetEntry] = []
        for entry in entries:
            if self.partition_exists is not None and not self.partition_exists(entry.topic, entry.partition):
                answers[(entry.topic, entry.partition)] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(entry)
        if not wanted:
            return answers
        error = self._group_error(group_id, generation_id, member_id, transactional, group_instance_id)
        if error is not E.NONE:
            answers.update(((e.topic, e.partition), error) for e in wanted)
            return answers
        assert group_id is not None  # refused by _group_error
        partition = self.partition_for(group_id)
        now = self._clock()
        records: list[tuple[OffsetCommitKey, OffsetCommitValue]] = []
        for entry in wanted:
            metadata = entry.metadata or ""
            if java_length(metadata) > self.offset_metadata_max_bytes:
                answers[(entry.topic, entry.partition)] = E.OFFSET_METADATA_TOO_LARGE
            else:
                records.append((OffsetCommitKey(group_id, entry.topic, entry.partition),
                                OffsetCommitValue(entry.offset, metadata, now)))
                answers[(entry.topic, entry.partition)] = E.NONE
        if not records:
            return answers
        try:
            encoded = [(encode_key(k.group, k.topic, k.partition), encode_value(v)) for k, v in records]
        except ValueError as exc:  # checked before: only a metadata limit above what a record holds gets here
            raise ValueError(f"an offset of group {group_id!r:.80} cannot be written: {exc}") from None
        error, base_offset = self._append(partition, encoded, producer_id, producer_epoch, transactional)
        if error is not E.NONE:
            log.info("%s-%d: committing offsets of group %r failed: %s", CONSUMER_OFFSETS_TOPIC, partition, group_id,
                     error.name)
            answers.update(((e.topic, e.partition), error) for e in wanted)
            return answers
        shard = self._shards[partition]
        for k, (key, value) in enumerate(records):  # durable: now applied, as a restart would replay them
            shard.replay(base_offset + k, producer_id if transactional else NO_PRODUCER_ID, key, value)
        return answers

    def _group_error(self, group_id: str | None, generation_id: int, member_id: str,
                     transactional: bool, group_instance_id: str | None = None) -> ErrorCode:
        """The group-wide answer, in Kafka's order (GroupCoordinatorService, then ClassicGroup)."""
        if group_id is None or (transactional and group_id == ""):
            return E.INVALID_GROUP_ID
        shard = self._shards.get(self.partition_for(group_id))
        if shard is None:
            return E.NOT_COORDINATOR
        if self.consumer_groups is not None:
            # A KIP-848 group's member commits with its member epoch as the generation (Kafka's
            # ConsumerGroup.validateOffsetCommit); accepted, it is a commit outside any classic generation.
            modern = self.consumer_groups.offset_commit_error(group_id, generation_id, member_id)
            if modern is not None:
                return _error_code(modern)
        membership = self.classic_groups.offset_commit_error(group_id, generation_id, member_id, transactional,
                                                             group_instance_id)
        if membership is not None:
            return _error_code(membership)
        if generation_id < 0:
            return E.NONE  # a simple commit: the group is (or becomes) an Empty group
        # A generation names a member, and a group without members has none.
        return E.UNKNOWN_MEMBER_ID if shard.group_exists(group_id) else E.ILLEGAL_GENERATION

    def _append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], producer_id: int,
                producer_epoch: int, transactional: bool) -> tuple[ErrorCode, int]:
        try:
            error, base_offset = self._log_writer.append(partition, records, producer_id, producer_epoch,
                                                         transactional)
        except (IdemcoreError, OSError) as exc:  # a log that cannot be written is a storage error
            log.error("%s-%d: append failed: %s", CONSUMER_OFFSETS_TOPIC, partition, exc)
            error, base_offset = E.KAFKA_STORAGE_ERROR, -1
        if error == E.NONE and (type(base_offset) is not int or base_offset < 0):
            raise ValueError(f"the offsets log answered NONE with base offset {base_offset!r}")
        return coordinator_error(error), base_offset

    # ------------------------------------------------------------ OffsetFetch

    def offset_fetch(self, group_id: str | None, partitions: Sequence[TopicPartition] | None = None,
                     require_stable: bool = True) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        """The group's committed offsets for ``partitions`` (None: every partition it has one for), with a
        group-wide error code. NO_OFFSET where none is committed; with ``require_stable``,
        UNSTABLE_OFFSET_COMMIT (and NO_OFFSET) where an open transaction wrote one."""
        _check_group_id(group_id)
        wanted = None if partitions is None else _checked_partitions(partitions)
        bool_arg("require_stable", require_stable)
        if group_id is None:
            return E.INVALID_GROUP_ID, {}
        shard = self._shards.get(self.partition_for(group_id))
        if shard is None:
            return E.NOT_COORDINATOR, {}
        committed = shard.committed.get(group_id, {})
        answer: dict[TopicPartition, FetchedOffset] = {}
        for topic, partition in sorted(committed) if wanted is None else wanted:
            offset = committed.get((topic, partition))
            if require_stable and shard.has_pending(group_id, topic, partition):
                answer[(topic, partition)] = FetchedOffset(topic, partition, NO_OFFSET, "", E.UNSTABLE_OFFSET_COMMIT)
            elif offset is None:
                answer[(topic, partition)] = FetchedOffset(topic, partition)
            else:
                answer[(topic, partition)] = FetchedOffset(topic, partition, offset.offset, offset.metadata)
        return E.NONE, answer

    # ------------------------------------------------------------ membership

    def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse | Pending:
        """Kafka's JoinGroup: an answer now (an error, MEMBER_ID_REQUIRED, this generation again) or a
        :class:`Pending` completed when the join phase ends (by a later request or by :meth:`expire`)."""
        _check_join(request)
        rid = request.request_id
        error = self._membership_error(request.group_id)
        if error is None and not self.min_session_timeout_ms <= request.session_timeout_ms \
                <= self.max_session_timeout_ms:
            error = INVALID_SESSION_TIMEOUT
        if error is not None:
            return JoinGroupResponse(error, member_id=request.member_id, request_id=rid)
        refusal = self._consumer_group_join_error(request)
        if refusal is not None:
            return refusal
        return self.classic_groups.join(request)

    def drop_empty_classic_group(self, group_id: str) -> int:
        """An Empty classic group gives its id to a joining KIP-848 group (Kafka converts it): its GroupMetadata
        tombstone is written first, so a restart does not bring the classic group back over the consumer group.
        NONE once durable, else the coordinator error (the classic group stays)."""
        error = self._store_group(group_id, None)
        if error == E.NONE:
            del self.classic_groups.groups[group_id]
            log.info("converted the empty classic group %s to a consumer group", group_id)
        return error

    def _consumer_group_join_error(self, request: JoinGroupRequest) -> JoinGroupResponse | None:
        """INCONSISTENT_GROUP_PROTOCOL for a classic JoinGroup to a KIP-848 group with members (no mixed groups:
        Kafka 4 with online upgrade disabled); an empty KIP-848 group of that id is dropped, as Kafka converts it."""
        group_id, modern = request.group_id, self.consumer_groups
        group = None if modern is None else modern.groups.get(group_id)
        if modern is None or group is None:
            return None
        if not group.members:
            del modern.groups[group_id]
            return None
        return JoinGroupResponse(E.INCONSISTENT_GROUP_PROTOCOL, member_id=request.member_id,
                                 request_id=request.request_id,
                                 error_message=f"Member {request.member_id}'s protocols are not supported: group "
                                               f"{group_id} uses the consumer protocol.")

    def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse | Pending:
        """Kafka's SyncGroup: the leader's assignment sets every member's; a member answered before the leader
        sent it waits (a :class:`Pending`)."""
        _check_group_request(request, ("generation_id",), ("member_id",))
        if not isinstance(request.assignments, tuple | list) or not all(
                isinstance(a, tuple) and len(a) == 2 and type(a[0]) is str and isinstance(a[1], bytes)
                for a in request.assignments):
            raise TypeError(f"assignments must be (member_id str, bytes) pairs, got {request.assignments!r:.80}")
        for name in ("protocol_type", "protocol_name"):
            if not (getattr(request, name) is None or type(getattr(request, name)) is str):
                raise TypeError(f"{name} must be a str or None, got {getattr(request, name)!r:.80}")
        error = self._membership_error(request.group_id)
        if error is not None:
            return SyncGroupResponse(error, request_id=request.request_id)
        return self.classic_groups.sync(request)

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        _check_group_request(request, ("generation_id",), ("member_id",))
        error = self._membership_error(request.group_id)
        if error is not None:
            return HeartbeatResponse(error, request.request_id)
        return self.classic_groups.heartbeat(request)

    def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        _check_group_request(request, (), ())
        if not isinstance(request.members, tuple | list) or not all(
                type(m) is LeavingMember and type(m.member_id) is str
                and (m.group_instance_id is None or type(m.group_instance_id) is str) for m in request.members):
            raise TypeError(f"members must be LeavingMember with a str member_id, got {request.members!r:.80}")
        error = self._membership_error(request.group_id)
        if error is not None:
            return LeaveGroupResponse(error, request_id=request.request_id)
        return self.classic_groups.leave(request)

    def expire(self, now_ms: int) -> None:
        """Run the membership timers due at ``now_ms`` (the broker's housekeeping calls this): members whose
        session lapsed are removed, overdue join phases complete without the members that did not rejoin, members
        that did not sync are removed, and so are KIP-848 members past their session or rebalance timeout. Every
        ``offsets_retention_check_interval_ms`` it runs :meth:`cleanup_group_metadata` (Kafka's periodic
        cleanup)."""
        int_arg("now_ms", now_ms)
        self.classic_groups.expire(now_ms)
        if self.consumer_groups is not None:
            self.consumer_groups.expire(now_ms)
        if self._next_cleanup is None:
            self._next_cleanup = now_ms + self.offsets_retention_check_interval_ms
        elif now_ms >= self._next_cleanup:
            self._next_cleanup = now_ms + self.offsets_retention_check_interval_ms
            self.cleanup_group_metadata(now_ms)

    def cleanup_group_metadata(self, now_ms: int) -> int:
        """Kafka's ``cleanupGroupMetadata`` (``OffsetMetadataManager.cleanupExpiredOffsets``, KIP-211): expire
        offsets ``offsets_retention_ms`` old, then delete the Empty groups left without offsets (classic and
        KIP-848 ones). An offset's age runs from when its group became Empty (an Empty classic group; from its
        commit when that time is unknown), else from its commit (a simple group; topics no member of a Stable
        classic consumer group subscribes to; a KIP-848 group's topics none of its members subscribes to, Kafka's
        ``ConsumerGroup.offsetExpirationCondition``). Classic groups in a rebalance, and offsets an open
        transaction wrote, are left. Tombstones go out per partition in one
        batch before memory changes (a failed append changes nothing). Returns how many offsets expired."""
        int_arg("now_ms", now_ms)
        expired = 0
        modern = {} if self.consumer_groups is None else self.consumer_groups.groups
        # Every group's partition computed once (a Java string hash each), not once per loaded partition.
        by_partition: dict[int, dict[str, None]] = {}
        for group_id in itertools.chain(*(shard.committed for shard in self._shards.values()),
                                        self.classic_groups.groups, modern):
            by_partition.setdefault(self.partition_for(group_id), {})[group_id] = None
        for partition, shard in self._shards.items():
            group_ids = list(by_partition.get(partition, ()))
            offsets: list[OffsetCommitKey] = []
            deleted: list[str] = []
            for group_id in group_ids:
                gone, all_gone = self._expired_offsets(shard, group_id, now_ms)
                offsets += gone
                group = self.classic_groups.groups.get(group_id)
                consumer_group = modern.get(group_id)
                if all_gone and (group is None or (group.state is GroupState.EMPTY and not group.pending_members)) \
                        and (consumer_group is None or not consumer_group.members):
                    deleted.append(group_id)
            if not offsets and not deleted:
                continue
            records = [(encode_key(k.group, k.topic, k.partition), None) for k in offsets]
            records += [(encode_group_key(g), None) for g in deleted]
            error, _ = self._append(partition, records, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, False)
            if error is not E.NONE:
                log.warning("%s-%d: expiring offsets and groups failed: %s", CONSUMER_OFFSETS_TOPIC, partition,
                            error.name)
                continue
            for key in offsets:
                shard.replay(-1, NO_PRODUCER_ID, key, None)
            for group_id in deleted:
                self.classic_groups.groups.pop(group_id, None)
                modern.pop(group_id, None)
            expired += len(offsets)
            log.info("%s-%d: expired %d offsets, deleted groups %s", CONSUMER_OFFSETS_TOPIC, partition,
                     len(offsets), deleted)
        return expired

    def _expired_offsets(self, shard: OffsetShard, group_id: str, now_ms: int) -> tuple[list[OffsetCommitKey], bool]:
        """The group's offsets that expire at ``now_ms``, and whether none is left after them."""
        committed = shard.committed.get(group_id)
        if committed is None:
            return [], group_id not in shard.open_by_group
        group = self.classic_groups.groups.get(group_id)
        consumer_group = None if self.consumer_groups is None else self.consumer_groups.groups.get(group_id)
        if consumer_group is not None:  # Kafka's ConsumerGroup: by commit time, topics subscribed to kept
            subscribed = consumer_group.subscribed_topics
            return self._due_offsets(shard, group_id, committed, now_ms, _commit_time, subscribed.__contains__)
        # Kafka's ClassicGroup.offsetExpirationCondition: where an offset's age starts, or None (no expiry).
        since: Callable[[CommittedOffset], int] | None = None
        if group is None or group.protocol_type is None:
            since = _commit_time
        elif group.state is GroupState.EMPTY:
            empty_since = group.state_timestamp
            since = _commit_time if empty_since is None else (lambda _offset: empty_since)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.subscribed_topics is not None \
                and group.state is GroupState.STABLE:
            since = _commit_time
        if since is None:
            return [], False
        return self._due_offsets(shard, group_id, committed, now_ms, since,
                                 lambda topic: group is not None and group.is_subscribed_to_topic(topic))

    def _due_offsets(self, shard: OffsetShard, group_id: str, committed: Mapping[TopicPartition, CommittedOffset],
                     now_ms: int, since: Callable[[CommittedOffset], int], subscribed: Callable[[str], bool],
                     ) -> tuple[list[OffsetCommitKey], bool]:
        """The group's offsets of topics not ``subscribed`` ``offsets_retention_ms`` old (their age from
        ``since``) or past their own expiry, and whether none is left after them."""
        gone: list[OffsetCommitKey] = []
        all_gone = True
        for (topic, partition), offset in committed.items():
            if subscribed(topic):
                all_gone = False
                continue
            if offset.expire_timestamp >= 0:  # value version 1 carried its own expiry
                due = now_ms >= offset.expire_timestamp
            else:
                due = now_ms - since(offset) >= self.offsets_retention_ms
            if due and not shard.has_pending(group_id, topic, partition):
                gone.append(OffsetCommitKey(group_id, topic, partition))
            else:
                all_gone = False
        return gone, all_gone and group_id not in shard.open_by_group

    def _store_group(self, group_id: str, value: GroupMetadataValue | None) -> int:
        """Append the group's GroupMetadata record (None: its tombstone) to its partition: NONE once durable,
        else the coordinator error (Kafka's ``appendGroupMetadataErrorToResponseError``)."""
        partition = self.partition_for(group_id)
        if partition not in self._shards:
            return int(E.NOT_COORDINATOR)
        try:
            record = (encode_group_key(group_id), None if value is None else encode_group_value(value))
        except ValueError as exc:  # a field longer than a record's string (a client id of 32 KiB)
            log.error("group %r cannot be stored: %s", group_id, exc)
            return int(E.UNKNOWN_SERVER_ERROR)
        error, _ = self._append(partition, [record], NO_PRODUCER_ID, NO_PRODUCER_EPOCH, False)
        return int(error)

    def _membership_error(self, group_id: str | None) -> int | None:
        """INVALID_GROUP_ID for a null or empty id, NOT_COORDINATOR when its partition is not loaded."""
        if not group_id:
            return int(E.INVALID_GROUP_ID)
        if self.partition_for(group_id) not in self._shards:
            return int(E.NOT_COORDINATOR)
        return None

    # ------------------------------------------------------------ admin: DescribeGroups, ListGroups, DeleteGroups

    def describe_groups(self, group_ids: Sequence[str]) -> tuple[DescribedGroup, ...]:
        """Kafka's DescribeGroups, one answer per id in order: INVALID_GROUP_ID for an empty id,
        NOT_COORDINATOR for a group of a partition not served, state Dead for a group not known; the members'
        metadata and assignment only when Stable (``GroupMetadataManager.describeGroups``)."""
        described: list[DescribedGroup] = []
        for group_id in _checked_group_ids(group_ids):
            if not group_id:
                described.append(DescribedGroup(group_id, int(E.INVALID_GROUP_ID)))
                continue
            shard = self._shards.get(self.partition_for(group_id))
            if shard is None:
                described.append(DescribedGroup(group_id, int(E.NOT_COORDINATOR)))
                continue
            group = self.classic_groups.groups.get(group_id)
            if group is None:
                if shard.group_exists(group_id):  # a simple group: offsets only
                    described.append(DescribedGroup(group_id, int(E.NONE), GroupState.EMPTY.value))
                else:
                    described.append(DescribedGroup(group_id, int(E.NONE), DEAD))
                continue
            stable = group.state is GroupState.STABLE
            members = tuple(
                DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                m.metadata(group.protocol_name) if stable else b"", m.assignment if stable else b"")
                for m in group.members.values())
            described.append(DescribedGroup(group_id, int(E.NONE), group.state.value, group.protocol_type or "",
                                            (group.protocol_name or "") if stable else "", members))
        return tuple(described)

    def list_groups(self, states_filter: Sequence[str] = (),
                    types_filter: Sequence[str] = ()) -> tuple[ListedGroup, ...]:
        """Kafka's ListGroups over the served partitions: every classic group, every simple group (offsets only:
        protocol type ``""``, Empty) and every consumer-protocol group (type ``consumer``); filters matched without
        regard to case or surrounding spaces, an empty filter matching all (``GroupMetadataManager.listGroups``)."""
        states = {s.strip().lower() for s in strings(states_filter, "states_filter")}
        types = {t.strip().lower() for t in strings(types_filter, "types_filter")}
        listed: dict[str, ListedGroup] = {}
        for partition, shard in self._shards.items():
            for group_id in (*shard.committed, *shard.open_by_group):
                if self.partition_for(group_id) == partition:
                    listed[group_id] = ListedGroup(group_id, "", GroupState.EMPTY.value, CLASSIC)
        for group_id, group in self.classic_groups.groups.items():
            if self.partition_for(group_id) in self._shards:
                listed[group_id] = ListedGroup(group_id, group.protocol_type or "", group.state.value, CLASSIC)
        if self.consumer_groups is not None:  # a consumer group's offsets are its own
            listed.update((g.group_id, g) for g in self.consumer_groups.listed()
                          if self.partition_for(g.group_id) in self._shards)
        return tuple(g for g in listed.values() if (not states or g.state.lower() in states)
                     and (not types or g.group_type in types))

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, int]:
        """Kafka's DeleteGroups: an error code per group (INVALID_GROUP_ID, NOT_COORDINATOR, GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP, NONE). A deleted group's offsets and metadata get tombstones, written per
        ``__consumer_offsets`` partition as one batch before anything is forgotten; a failed append answers its
        groups with the coordinator error and changes nothing."""
        results: dict[str, int] = {}
        deletable: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(_checked_group_ids(group_ids)):  # each id once
            error = self._delete_error(group_id)
            if error is None:
                deletable.setdefault(self.partition_for(group_id), []).append(group_id)
            else:
                results[group_id] = error
        for partition, ids in deletable.items():
            shard = self._shards[partition]
            records: list[tuple[bytes, bytes | None]] = []
            keys: list[OffsetCommitKey] = []
            for group_id in ids:
                for topic, part in self._offset_partitions(shard, group_id):
                    keys.append(OffsetCommitKey(group_id, topic, part))
                    records.append((encode_key(group_id, topic, part), None))
                records.append((encode_group_key(group_id), None))
            error, _ = self._append(partition, records, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, False)
            if error is not E.NONE:
                log.info("%s-%d: deleting groups %s failed: %s", CONSUMER_OFFSETS_TOPIC, partition, ids, error.name)
                results.update((group_id, int(error)) for group_id in ids)
                continue
            for key in keys:
                shard.replay(-1, NO_PRODUCER_ID, key, None)
            for group_id in ids:
                self.classic_groups.groups.pop(group_id, None)
                if self.consumer_groups is not None and group_id in self.consumer_groups.groups:
                    self.consumer_groups.delete(group_id)
                log.info("group %r deleted", group_id)
                results[group_id] = int(E.NONE)
        return results

    def _delete_error(self, group_id: str) -> int | None:
        shard = self._shards.get(self.partition_for(group_id))
        if shard is None:
            return int(E.NOT_COORDINATOR)
        modern = None if self.consumer_groups is None else self.consumer_groups.groups.get(group_id)
        if modern is not None:
            return int(E.NON_EMPTY_GROUP) if modern.members else None
        group = self.classic_groups.groups.get(group_id)
        if group is None:
            return None if shard.group_exists(group_id) else int(E.GROUP_ID_NOT_FOUND)
        return None if group.state is GroupState.EMPTY else int(E.NON_EMPTY_GROUP)

    @staticmethod
    def _offset_partitions(shard: OffsetShard, group_id: str) -> list[TopicPartition]:
        """The partitions the group has a committed or a pending (transactional) offset for."""
        partitions = dict.fromkeys(shard.committed.get(group_id, {}))
        for producer in shard.open_by_group.get(group_id, ()):
            for group, topic, part in shard.pending.get(producer, {}):
                if group == group_id:
                    partitions[(topic, part)] = None
        return list(partitions)

    def offset_delete(self, group_id: str,
                      partitions: Sequence[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """Kafka's OffsetDelete (``OffsetMetadataManager.deleteOffsets``): a group-wide error (INVALID_GROUP_ID,
        NOT_COORDINATOR, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a group with members not of the consumer protocol,
        or the append's coordinator error), else a code per partition: UNKNOWN_TOPIC_OR_PARTITION for one the
        broker does not have, GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to its topic, NONE for the rest,
        whose offsets get tombstones in one batch."""
        wanted = _checked_partitions(partitions)
        if type(group_id) is not str:
            return int(E.INVALID_GROUP_ID), {}
        _check_string(group_id, "group_id")
        partition = self.partition_for(group_id)
        shard = self._shards.get(partition)
        if shard is None:
            return int(E.NOT_COORDINATOR), {}
        group = self.classic_groups.groups.get(group_id)
        modern = None if self.consumer_groups is None else self.consumer_groups.groups.get(group_id)
        if group is None and modern is None and not shard.group_exists(group_id):
            return int(E.GROUP_ID_NOT_FOUND), {}
        if group is not None and group.state is not GroupState.EMPTY \
                and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return int(E.NON_EMPTY_GROUP), {}
        subscribed: Set[str]
        if modern is not None:  # Kafka's ConsumerGroup.isSubscribedToTopic: any member's topics
            subscribed = modern.subscribed_topics
        else:
            subscribed = set() if group is None else {t for t, _ in wanted if group.is_subscribed_to_topic(t)}
        answers: dict[TopicPartition, int] = {}
        keys: dict[TopicPartition, OffsetCommitKey] = {}
        having = set(self._offset_partitions(shard, group_id))
        for topic, part in wanted:
            if self.partition_exists is not None and not self.partition_exists(topic, part):
                answers[(topic, part)] = int(E.UNKNOWN_TOPIC_OR_PARTITION)
            elif topic in subscribed:
                answers[(topic, part)] = int(E.GROUP_SUBSCRIBED_TO_TOPIC)
            else:
                answers[(topic, part)] = int(E.NONE)
                if (topic, part) in having:
                    keys[(topic, part)] = OffsetCommitKey(group_id, topic, part)
        if keys:
            error, _ = self._append(partition, [(encode_key(k.group, k.topic, k.partition), None)
                                                for k in keys.values()], NO_PRODUCER_ID, NO_PRODUCER_EPOCH, False)
            if error is not E.NONE:
                return int(error), {}
            for key in keys.values():
                shard.replay(-1, NO_PRODUCER_ID, key, None)
        return int(E.NONE), answers

    # ------------------------------------------------------------ markers and loading

    def complete_transaction(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        """A transaction marker of ``producer_id`` was written to ``__consumer_offsets-<offsets_partition>``:
        its pending offsets there become committed (``committed``) or are dropped. A partition not loaded is
        left alone: its load replays the marker from the log."""
        int_arg("offsets_partition", offsets_partition)
        int_arg("producer_id", producer_id)
        bool_arg("committed", committed)
        shard = self._shards.get(offsets_partition)
        if shard is not None:
            shard.end_transaction(producer_id, committed)

    def load(self, partition: int, stored_batches: Iterable[StoredBatch], *, skip_damaged: bool = False) -> None:
        """Serve ``__consumer_offsets-<partition>``, its state rebuilt from its batches in offset order: plain
        commits, transactional ones (pending until their producer's marker) and markers; a tombstone deletes.
        Classic groups come back from their last GroupMetadata record (a tombstone deletes): with members,
        Stable, every member's session restarted at load time, so members that keep heartbeating stay in their
        generation. Records of other types (key version 3 and up) are skipped. Raises OffsetLogFormatError
        for a record this reader cannot decode; the partition's state is then unchanged. ``skip_damaged`` (the
        broker's own loads): such a record is skipped instead, with one error line naming the partition and the
        offset, and its group keeps what its earlier records said (Kafka fails the partition's load, which for a
        broker with no other replica would leave every group of the partition without a coordinator)."""
        index_arg("partition", partition, self.offsets_partitions)
        shard = OffsetShard()
        groups: dict[str, GroupMetadataValue | None] = {}
        skipped = 0
        for stored in stored_batches:
            batch = stored.batch
            if stored.control is not None:
                control_type = stored.control[0]
                if control_type in (ControlType.COMMIT, ControlType.ABORT):
                    shard.end_transaction(batch.producer_id, control_type == ControlType.COMMIT)
                continue
            producer_id = batch.producer_id if batch.is_transactional else NO_PRODUCER_ID
            keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
            for offset, key, value in zip(stored.offsets(), keys, batch.values, strict=True):
                where = f"{CONSUMER_OFFSETS_TOPIC}-{partition} at offset {offset}"
                try:
                    if key is None:
                        raise OffsetLogFormatError("a record without a key")
                    decoded = decode_key(key)
                    if isinstance(decoded, GroupMetadataKey):
                        groups[decoded.group] = decode_group_value(value)  # the last one wins
                        continue
                    if decoded is None:
                        skipped += 1
                        continue
                    shard.replay(offset, producer_id, decoded, decode_value(value))
                except OffsetLogFormatError as exc:
                    if not skip_damaged:
                        raise OffsetLogFormatError(f"{where}: {exc}") from None
                    log.error("%s: a damaged record is skipped: %s", where, exc)
        if skipped:
            log.info("%s-%d: skipped %d records that are not offset commits", CONSUMER_OFFSETS_TOPIC, partition,
                     skipped)
        # Requests parked on this partition's groups are answered NOT_COORDINATOR (clients look it up again), then
        # its groups come back as their records left them, every member's session restarted now.
        self._unload_groups(partition)
        now = self._clock()
        for group_id, group_value in groups.items():
            if group_value is not None and self.partition_for(group_id) == partition:
                self.classic_groups.restore(group_id, group_value, now)
        self._shards[partition] = shard
        self._epochs[partition] = 0

    def load_partition(self, partition: int, stored_batches: Iterable[StoredBatch], coordinator_epoch: int, *,
                       skip_damaged: bool = False) -> None:
        """Serve ``__consumer_offsets-<partition>`` from now on: this broker became its leader at leader epoch
        ``coordinator_epoch`` (Kafka's ``GroupCoordinator.onElection``); its state rebuilt as :meth:`load` does."""
        int_setting("coordinator_epoch", coordinator_epoch, 0)
        self.load(partition, stored_batches, skip_damaged=skip_damaged)
        self._epochs[partition] = coordinator_epoch
        log.info("%s-%d loaded at coordinator epoch %d: %d groups", CONSUMER_OFFSETS_TOPIC, partition,
                 coordinator_epoch, len(self._shards[partition].committed))

    def _unload_groups(self, partition: int) -> None:
        """Forget the membership of the groups of ``partition`` (it is reloaded, or led elsewhere now)."""
        def keep(group_id: str) -> bool:
            return self.partition_for(group_id) != partition
        self.classic_groups.unload(keep)
        if self.consumer_groups is not None:
            self.consumer_groups.unload(keep)

    def unload_partition(self, partition: int) -> bool:
        """Stop serving ``__consumer_offsets-<partition>`` (this broker no longer leads it: Kafka's
        ``onResignation``): its offsets and its groups' membership go (requests parked in a join or sync are
        answered NOT_COORDINATOR) and every request for its groups is answered NOT_COORDINATOR. True if it was
        loaded."""
        index_arg("partition", partition, self.offsets_partitions)
        self._unload_groups(partition)
        self._epochs.pop(partition, None)
        if self._shards.pop(partition, None) is None:
            return False
        log.info("%s-%d unloaded", CONSUMER_OFFSETS_TOPIC, partition)
        return True


# ------------------------------------------------------------------ argument checks


def _commit_time(offset: CommittedOffset) -> int:
    return offset.commit_timestamp


def _error_code(code: int) -> ErrorCode:
    """``code`` as an ErrorCode; a code the enum lacks travels as its int."""
    try:
        return ErrorCode(code)
    except ValueError:
        return cast(ErrorCode, code)


def _check_group_request(request: object, ints: tuple[str, ...], strings: tuple[str, ...]) -> None:
    group_id = getattr(request, "group_id", None)
    if group_id is not None:
        str_arg("group_id", group_id)
    if group_id:
        _check_string(group_id, "group_id")
    for name in ints:
        value = getattr(request, name)
        if type(value) is not int or not _INT32[0] <= value <= _INT32[1]:
            raise TypeError(f"{name} must be an int32, got {value!r:.80}")
    for name in strings:
        str_arg(name, getattr(request, name))
    _check_instance(getattr(request, "group_instance_id", None))


def _check_join(request: JoinGroupRequest) -> None:
    _check_group_request(request, ("session_timeout_ms", "rebalance_timeout_ms"),
                         ("member_id", "protocol_type", "client_id", "client_host"))
    if not isinstance(request.protocols, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and type(p[0]) is str and isinstance(p[1], bytes)
            for p in request.protocols):
        raise TypeError(f"protocols must be a tuple of (name str, metadata bytes), got {request.protocols!r:.80}")
    bool_arg("member_id_required", request.member_id_required)



def _check_group_id(group_id: object) -> None:
    """None is a null id (answered INVALID_GROUP_ID); a str must fit a record's string."""
    if group_id is not None:
        _check_string(str_arg("group_id", group_id), "group_id")


def _check_string(text: str, what: str, bounded: bool = True) -> None:
    """``text`` encodes as UTF-8 and (``bounded``) fits a record's string."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} {text!r:.80} cannot be encoded as UTF-8") from None
    if bounded and size > 0x7FFF:
        raise ValueError(f"{what} of {size} UTF-8 bytes is longer than the 32767 a record's string may hold")


def _check_member(generation_id: object, member_id: object) -> None:
    int_arg("generation_id", generation_id)
    str_arg("member_id", member_id)


def _check_instance(group_instance_id: object) -> None:
    str_or_none_arg("group_instance_id", group_instance_id)


def _checked_offsets(offsets: object) -> list[OffsetEntry]:
    """The entries, each of the right types and ranges (TypeError or ValueError naming the first that is not),
    checked before anything is looked up or written."""
    if not isinstance(offsets, tuple | list):
        raise TypeError(f"offsets must be a tuple or list of OffsetEntry, got {offsets!r:.80}")
    for entry in offsets:
        if type(entry) is not OffsetEntry:
            raise TypeError(f"offsets must hold OffsetEntry, got {entry!r:.80}")
        if type(entry.topic) is not str or type(entry.partition) is not int or type(entry.offset) is not int \
                or not (entry.metadata is None or type(entry.metadata) is str):
            raise TypeError(f"an OffsetEntry needs a str topic, int partition and offset, str metadata: {entry!r:.120}")
        _check_string(entry.topic, "topic")
        if entry.metadata:  # its length is answered per partition (OFFSET_METADATA_TOO_LARGE)
            _check_string(entry.metadata, "metadata", bounded=False)
        if not _INT32[0] <= entry.partition <= _INT32[1] or not _INT64[0] <= entry.offset <= _INT64[1]:
            raise ValueError(f"partition or offset out of the int32/int64 range: {entry!r:.120}")
    return list(offsets)


def _checked_group_ids(group_ids: object) -> tuple[str, ...]:
    checked = strings(group_ids, "group_ids")
    for group_id in checked:
        _check_string(group_id, "group_id")
    return checked


def _checked_partitions(partitions: object) -> tuple[TopicPartition, ...]:
    """Any int32 partition: one the broker does not have is answered per partition, not refused."""
    return topic_partitions(partitions, lowest=_INT32[0])
