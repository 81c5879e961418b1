"""The group coordinator: committed offsets and classic groups in the compacted ``__consumer_offsets`` topic
(Kafka's record formats), transactional offsets pending until their marker lands.

Like the transaction coordinator it is independent of the broker: it appends through an
:class:`OffsetLogWriter` (the broker plugs in :class:`HandledOffsetLog`, its one request path) and is rebuilt
from the log with :meth:`GroupCoordinator.load`; :mod:`idemcore.broker.group.requests` turns requests into calls.

Classic group membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup; stored as GroupMetadata records by
:mod:`idemcore.broker.group.group_metadata_log`) is
:mod:`idemcore.broker.group.membership`, reached through the coordinator; its requests are in
:mod:`idemcore.broker.group.membership_requests`.
"""

from idemcore.broker.group.coordinator import GroupCoordinator, java_length
from idemcore.broker.group.membership import ClassicGroup, ClassicGroups, GroupState
from idemcore.broker.group.offset_log_writer import HandledOffsetLog, OffsetLogWriter
from idemcore.broker.group.offsets_log import (
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetLogFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from idemcore.broker.group.shard import CommittedOffset, OffsetShard

__all__ = [
    "ClassicGroup", "ClassicGroups", "CommittedOffset", "GroupCoordinator", "GroupState", "HandledOffsetLog",
    "OffsetCommitKey", "OffsetCommitValue", "OffsetLogFormatError", "OffsetLogWriter", "OffsetShard", "decode_key",
    "decode_value", "encode_key", "encode_value", "java_length",
]
