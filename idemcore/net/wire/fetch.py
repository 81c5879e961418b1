"""Fetch (v4+: isolation level, last stable offset, aborted transactions; v13+ by topic id) and ListOffsets on
the wire. A fetch answers each partition's stored batches as the log holds them (its bytes), one ``records``
per partition; sessions (KIP-227) are not kept: every answer is a full one, session id 0."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.messages import (
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from idemcore.net.wire.api import WireApi, WireContext, topic_id_of
from idemcore.net.wire.frames import make, millis, nested, response_class
from idemcore.protocol.constants import READ_UNCOMMITTED

#: Kafka's UNKNOWN_TOPIC_ID (v13+: a topic id the broker does not have).
UNKNOWN_TOPIC_ID = 100


def _fetch_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[FetchRequest, Any]:
    wanted: list[FetchPartition] = []
    unknown: list[tuple[Any, int]] = []  # (topic id, partition) of ids this broker does not have
    for topic in body.topics:
        name = getattr(topic, "topic", None)
        if name is None:
            name = ctx.topic_name(topic.topic_id)
            if name is None:
                unknown.extend((topic.topic_id, int(p.partition)) for p in topic.partitions)
                continue  # answered by id (UNKNOWN_TOPIC_ID) in _fetch_to_wire
        # v9+: current leader epoch; v12+: last fetched epoch; v5+: a follower's log start offset.
        wanted.extend(FetchPartition(str(name), int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes),
                                     int(getattr(p, "current_leader_epoch", -1)),
                                     int(getattr(p, "last_fetched_epoch", -1)), int(getattr(p, "log_start_offset", -1)))
                      for p in topic.partitions)
    isolation = int(getattr(body, "isolation_level", READ_UNCOMMITTED))
    # A fetch holding an error is answered at once, as Kafka does, not held for max_wait.
    max_wait = 0 if unknown else millis(body.max_wait)
    request = FetchRequest(tuple(wanted), isolation, int(body.max_bytes), int(body.min_bytes), max_wait,
                           correlation_id, _replica_id(version, body))
    return request, unknown


def _replica_id(version: int, body: Any) -> int:
    """The fetching follower's broker id (-1: a consumer): top-level before v15, in ReplicaState (KIP-903) since."""
    if version >= 15:
        return int(body.replica_state.replica_id)
    return int(body.replica_id)


def _fetch_to_wire(ctx: WireContext, version: int, body: Any, response: FetchResponse, unknown: Any) -> Any:
    cls = response_class(body)
    topic_cls, partition_cls = nested(cls, "FetchableTopicResponse"), nested(cls, "PartitionData")
    aborted_cls = nested(cls, "AbortedTransaction")
    epoch_cls = nested(cls, "EpochEndOffset") if version >= 12 else None
    by_topic: dict[str, list[Any]] = {}
    for answer in response.partitions:
        by_topic.setdefault(answer.topic, []).append(_partition(partition_cls, aborted_cls, epoch_cls, answer))
    topics = [make(topic_cls, topic=name, topic_id=topic_id_of(name), partitions=tuple(partitions))
              for name, partitions in by_topic.items()]
    for topic_id, partition in unknown:
        topics.append(make(topic_cls, topic_id=topic_id, partitions=(make(
            partition_cls, partition_index=partition, error_code=WireError(UNKNOWN_TOPIC_ID), high_watermark=-1,
            last_stable_offset=-1, log_start_offset=-1, preferred_read_replica=-1, records=None),)))
    return make(cls, error_code=WireError(response.error_code), session_id=0, responses=tuple(topics))


def _partition(partition_cls: type, aborted_cls: type, epoch_cls: type | None, answer: FetchedPartition) -> Any:
    aborted = None if answer.aborted_transactions is None else tuple(
        make(aborted_cls, producer_id=a.producer_id, first_offset=a.first_offset)
        for a in answer.aborted_transactions)
    extra = {}
    if epoch_cls is not None and answer.diverging_epoch is not None:  # v12+, a tagged field: absent when none
        epoch, end_offset = answer.diverging_epoch
        extra["diverging_epoch"] = make(epoch_cls, epoch=epoch, end_offset=end_offset)
    return make(partition_cls, partition_index=answer.partition, error_code=WireError(answer.error_code),
                high_watermark=answer.high_watermark, last_stable_offset=answer.last_stable_offset,
                log_start_offset=answer.log_start_offset, aborted_transactions=aborted,
                preferred_read_replica=-1, records=answer.records, **extra)


def _list_to_message(ctx: WireContext, version: int, correlation_id: int,
                     body: Any) -> tuple[ListOffsetsRequest, Any]:
    partitions = tuple((str(topic.name), int(p.partition_index), int(p.timestamp))
                       for topic in body.topics for p in topic.partitions)
    isolation = int(getattr(body, "isolation_level", READ_UNCOMMITTED))
    # v4+ (KIP-320): the asker's leader epochs; None when it gives none (every one -1), as before v4.
    epochs = None if version < 4 else tuple(int(p.current_leader_epoch)
                                            for topic in body.topics for p in topic.partitions)
    if epochs is not None and all(epoch == -1 for epoch in epochs):
        epochs = None
    return ListOffsetsRequest(partitions, isolation, correlation_id, epochs), None


def _list_to_wire(ctx: WireContext, version: int, body: Any, response: ListOffsetsResponse, carry: Any) -> Any:
    cls = response_class(body)
    topic_cls, partition_cls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    by_topic: dict[str, list[Any]] = {}
    for result in response.results:
        by_topic.setdefault(result.topic, []).append(make(
            partition_cls, partition_index=result.partition, error_code=WireError(result.error_code),
            timestamp=result.timestamp, offset=result.offset, leader_epoch=result.leader_epoch))
    return make(cls, topics=tuple(make(topic_cls, name=name, partitions=tuple(partitions))
                                  for name, partitions in by_topic.items()))


FETCH = WireApi(1, "Fetch", 4, 16, _fetch_to_message, _fetch_to_wire)
#: v1+: one offset per partition (v0's offset lists are gone from Kafka 4); the timestamps served are
#: EARLIEST (-2) and LATEST (-1), as ``broker.fetch.list_offsets`` answers.
LIST_OFFSETS = WireApi(2, "ListOffsets", 1, 10, _list_to_message, _list_to_wire)
