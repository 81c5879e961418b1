"""The group-offset APIs on the wire: OffsetCommit, OffsetFetch and TxnOffsetCommit.

idemcore keeps no leader epochs with offsets (``committed_leader_epoch`` is read and dropped, answered -1), no
expiry per commit (OffsetCommit v2–4's ``retention_time``, which Kafka turns into that commit's expiry, is
ignored). A static member's ``group_instance_id`` is checked against the group (FENCED_INSTANCE_ID). Versions
stop before topic ids replace topic names (OffsetCommit and OffsetFetch v10) and before TxnOffsetCommit v5
(transaction version 2)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.messages import (
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetEntry,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.frames import make, nested, optional_str, response_class
from idemcore.net.wire.transactions import NO_THROTTLE, answer_of
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_OFFSET, TopicPartition

#: Kafka's "no leader epoch" (idemcore keeps none with an offset).
NO_LEADER_EPOCH = -1


def _entries(topics: Any) -> tuple[OffsetEntry, ...]:
    """The offsets of an OffsetCommit or TxnOffsetCommit request, in its order (null metadata is Kafka's "")."""
    return tuple(OffsetEntry(str(topic.name), int(p.partition_index), int(p.committed_offset),
                             "" if p.committed_metadata is None else str(p.committed_metadata))
                 for topic in topics for p in topic.partitions)


def _commit_results(cls: type, entries: tuple[OffsetEntry, ...],
                    results: tuple[PartitionResult, ...]) -> tuple[Any, ...]:
    """The ``topics`` of an (Txn)OffsetCommit response: per topic of the request, one result per partition."""
    prefix = cls.__name__.removesuffix("Response")
    topic_cls, partition_cls = nested(cls, f"{prefix}ResponseTopic"), nested(cls, f"{prefix}ResponsePartition")
    codes = {(result.topic, result.partition): result.error_code for result in results}
    by_topic: dict[str, list[Any]] = {}
    for entry in entries:
        code = codes.get((entry.topic, entry.partition), ErrorCode.UNKNOWN_SERVER_ERROR)
        by_topic.setdefault(entry.topic, []).append(
            make(partition_cls, partition_index=entry.partition, error_code=WireError(int(code))))
    return tuple(make(topic_cls, name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items())


# ---------------------------------------------------------------- OffsetCommit (key 8)


def _offset_commit_to_message(ctx: WireContext, version: int, correlation_id: int,
                              body: Any) -> tuple[OffsetCommitRequest, tuple[OffsetEntry, ...]]:
    entries = _entries(body.topics)
    request = OffsetCommitRequest(str(body.group_id), entries, int(body.generation_id_or_member_epoch),
                                  str(body.member_id), correlation_id,
                                  optional_str(getattr(body, "group_instance_id", None)))
    return request, entries


def _offset_commit_to_wire(ctx: WireContext, version: int, body: Any, answer: Response,
                           entries: tuple[OffsetEntry, ...]) -> Any:
    response = answer_of(answer, OffsetCommitResponse)
    cls = response_class(body)
    return make(cls, throttle_time=NO_THROTTLE, topics=_commit_results(cls, entries, response.results))


#: v2–9 (v8+ flexible; v9 is v8 for a classic group). v10 names topics by id only.
OFFSET_COMMIT = WireApi(8, "OffsetCommit", 2, 9, _offset_commit_to_message, _offset_commit_to_wire)


# ---------------------------------------------------------------- TxnOffsetCommit (key 28)


def _txn_offset_commit_to_message(ctx: WireContext, version: int, correlation_id: int,
                                  body: Any) -> tuple[TxnOffsetCommitRequest, tuple[OffsetEntry, ...]]:
    entries = _entries(body.topics)
    request = TxnOffsetCommitRequest(
        str(body.transactional_id), str(body.group_id), int(body.producer_id), int(body.producer_epoch), entries,
        # v3+ (KIP-447): the consumer's generation and member, checked as OffsetCommit checks them.
        generation_id=int(getattr(body, "generation_id", -1)), member_id=str(getattr(body, "member_id", "")),
        request_id=correlation_id, group_instance_id=optional_str(getattr(body, "group_instance_id", None)))
    return request, entries


def _txn_offset_commit_to_wire(ctx: WireContext, version: int, body: Any, answer: Response,
                               entries: tuple[OffsetEntry, ...]) -> Any:
    response = answer_of(answer, TxnOffsetCommitResponse)
    cls = response_class(body)
    return make(cls, throttle_time=NO_THROTTLE, topics=_commit_results(cls, entries, response.results))


#: v0–4 (v3+ flexible, with generation and member). v5 also adds the group to the transaction (transaction
#: version 2), which this broker does not do.
TXN_OFFSET_COMMIT = WireApi(28, "TxnOffsetCommit", 0, 4, _txn_offset_commit_to_message, _txn_offset_commit_to_wire)


# ---------------------------------------------------------------- OffsetFetch (key 9)
#
# v8+ (KIP-709) may ask for several groups at once, where the message takes one group: such a request becomes
# one OffsetFetchRequest per group (``api.handle_each``), and each group is answered from its own.

#: ``(version < 2: the partitions asked for, to answer a group error per partition; the group ids, v8+)``
OffsetFetchCarry = tuple[tuple[TopicPartition, ...], tuple[str, ...]]


def _partitions(topics: Any) -> tuple[TopicPartition, ...] | None:
    if topics is None:  # v2+: every partition the group has an offset for
        return None
    return tuple((str(topic.name), int(index)) for topic in topics for index in topic.partition_indexes)


def _offset_fetch_to_message(ctx: WireContext, version: int, correlation_id: int,
                             body: Any) -> tuple[Any, OffsetFetchCarry]:
    # v7+: require_stable (UNSTABLE_OFFSET_COMMIT for a partition with a pending transactional offset); before,
    # Kafka answers as if it were false, and an older client would not know the error.
    require_stable = bool(getattr(body, "require_stable", False))
    if version >= 8:
        groups = tuple(str(group.group_id) for group in body.groups)
        return tuple(OffsetFetchRequest(str(group.group_id), _partitions(group.topics), require_stable, correlation_id)
                     for group in body.groups), ((), groups)
    partitions = _partitions(body.topics)
    return (OffsetFetchRequest(str(body.group_id), partitions, require_stable, correlation_id),
            (partitions or (), ()))


def _fetched_topics(topic_cls: type, partition_cls: type, offsets: tuple[FetchedOffset, ...]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for fetched in offsets:
        by_topic.setdefault(fetched.topic, []).append(make(
            partition_cls, partition_index=fetched.partition, committed_offset=fetched.offset,
            committed_leader_epoch=NO_LEADER_EPOCH, metadata=fetched.metadata,
            error_code=WireError(int(fetched.error_code))))
    return tuple(make(topic_cls, name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items())


def _offset_fetch_to_wire(ctx: WireContext, version: int, body: Any, answer: Any,
                          carry: OffsetFetchCarry) -> Any:
    cls = response_class(body)
    asked, groups = carry
    if version >= 8:
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        topic_cls = nested(cls, "OffsetFetchResponseTopics")
        partition_cls = nested(cls, "OffsetFetchResponsePartitions")
        answers = [answer_of(one, OffsetFetchResponse) for one in answer]
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(make(
            group_cls, group_id=group_id, error_code=WireError(int(response.error_code)),
            topics=_fetched_topics(topic_cls, partition_cls, response.offsets))
            for group_id, response in zip(groups, answers, strict=True)))
    response = answer_of(answer, OffsetFetchResponse)
    topic_cls, partition_cls = nested(cls, "OffsetFetchResponseTopic"), nested(cls, "OffsetFetchResponsePartition")
    offsets = response.offsets
    if version < 2 and response.error_code != ErrorCode.NONE:
        # No group-level error code before v2: Kafka (OffsetFetchRequest.getErrorResponse) answers it in each
        # partition asked for, with no offset.
        offsets = tuple(FetchedOffset(topic, partition, NO_OFFSET, "", response.error_code)
                        for topic, partition in asked)
    return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(int(response.error_code)),
                topics=_fetched_topics(topic_cls, partition_cls, offsets))


#: v1–9 (v2+ all partitions and a group error code, v6+ flexible, v7+ require_stable, v8+ several groups; v9 is
#: v8 for a classic group). v10 names topics by id only.
OFFSET_FETCH = WireApi(9, "OffsetFetch", 1, 9, _offset_fetch_to_message, _offset_fetch_to_wire)


