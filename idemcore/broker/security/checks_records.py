"""The checks of the requests that read and write topics' records and metadata (KafkaApis' Produce, Fetch,
ListOffsets, Metadata, CreateTopics, DeleteRecords, DescribeProducers, OffsetForLeaderEpoch handlers)."""

from __future__ import annotations

import dataclasses
from typing import Any

from idemcore.broker.input_checks import illegal_topic_name
from idemcore.broker.security.request_context import (
    TOPIC,
    TOPIC_DENIED,
    TXN,
    TXN_DENIED,
    Handle,
    Op,
    RequestContext,
    RequestRefused,
    check,
    first_two,
    pick,
    split,
    then,
    tp,
)
from idemcore.net.admin import (
    DeletedRecords,
    DeleteRecordsResponse,
    DescribeProducersResponse,
    PartitionProducers,
)
from idemcore.net.messages import (
    CreatedTopic,
    CreateTopicsResponse,
    FetchedPartition,
    FetchResponse,
    ListedOffset,
    ListOffsetsResponse,
    PartitionResponse,
    ProduceResponse,
    TopicMetadata,
)
from idemcore.net.replication import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import INTERNAL_TOPICS


@check("ProduceRequest")
def _produce(c: RequestContext, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id for transactional batches (else the whole request is refused), then WRITE on
    each topic (TOPIC_AUTHORIZATION_FAILED for the others); an acks=0 request with a refusal closes the
    connection, after the authorized batches are written (Kafka's ``handleProduceRequest``)."""
    batches = tuple(r.batches)
    if any(batch.is_transactional for batch in batches):
        transactional_id = getattr(r, "transactional_id", None)
        if transactional_id is None or not c.allowed(Op.WRITE, TXN, transactional_id):
            if r.acks == 0:
                raise RequestRefused(f"an acks=0 produce for transactional id {transactional_id!r} refused")
            return ProduceResponse(r.request_id, tuple(PartitionResponse(b.topic, b.partition, TXN_DENIED)
                                                      for b in batches))
    denied = c.denied(Op.WRITE, TOPIC, (batch.topic for batch in batches))
    if r.acks == 0:
        if not denied:
            return handle(r)
        kept = tuple(batch for batch in batches if batch.topic not in denied)
        if kept:
            handle(dataclasses.replace(r, batches=kept))
        raise RequestRefused(f"an acks=0 produce to topics {sorted(denied)} refused")
    refusals = [PartitionResponse(b.topic, b.partition, TOPIC_DENIED) if b.topic in denied else None
                for b in batches]
    return split(handle, r, batches, refusals, lambda kept: dataclasses.replace(r, batches=pick(batches, kept)),
                  "responses", ProduceResponse(r.request_id), tp, tp)


@check("FetchRequest")
def _fetch(c: RequestContext, handle: Handle, r: Any) -> Any:
    """A follower's fetch (replica id >= 0) needs CLUSTER_ACTION on the cluster; a consumer's, READ on each topic."""
    parts = tuple(r.partitions)
    if r.replica_id >= 0:
        if c.cluster(Op.CLUSTER_ACTION):
            return handle(r)
        return FetchResponse(tuple(FetchedPartition(p.topic, p.partition, TOPIC_DENIED) for p in parts),
                             request_id=r.request_id)
    denied = c.denied(Op.READ, TOPIC, (p.topic for p in parts))
    refusals = [FetchedPartition(p.topic, p.partition, TOPIC_DENIED) if p.topic in denied else None for p in parts]
    return split(handle, r, parts, refusals, lambda kept: dataclasses.replace(r, partitions=pick(parts, kept)),
                  "partitions", FetchResponse((), request_id=r.request_id), tp, tp)


@check("ListOffsetsRequest")
def _list_offsets(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DESCRIBE on each topic."""
    parts = tuple(r.partitions)
    denied = c.denied(Op.DESCRIBE, TOPIC, (p[0] for p in parts))
    refusals = [ListedOffset(p[0], p[1], TOPIC_DENIED) if p[0] in denied else None for p in parts]

    def rebuild(kept: list[int]) -> Any:
        epochs = r.current_leader_epochs
        return dataclasses.replace(r, partitions=pick(parts, kept),
                                   current_leader_epochs=None if epochs is None else pick(epochs, kept))
    return split(handle, r, parts, refusals, rebuild, "results", ListOffsetsResponse((), r.request_id), first_two,
                  tp)


@check("MetadataRequest")
def _metadata(c: RequestContext, handle: Handle, r: Any) -> Any:
    """Only topics the principal may DESCRIBE: all topics filtered silently; a named topic refused with
    TOPIC_AUTHORIZATION_FAILED. A missing topic to be made on the way needs CREATE on the cluster or on the topic
    (TOPIC_AUTHORIZATION_FAILED otherwise, and it is not made)."""
    names = r.topics
    if names is None:
        return then(handle(r), lambda response: dataclasses.replace(response, topics=tuple(
            topic for topic in response.topics if c.allowed(Op.DESCRIBE, TOPIC, topic.name, log_denied=False))))
    names = tuple(names)
    refusals: dict[str, TopicMetadata] = {name: TopicMetadata(name, TOPIC_DENIED)
                                          for name in c.denied(Op.DESCRIBE, TOPIC, names)}
    authorized = [name for name in dict.fromkeys(names) if name not in refusals]
    if r.allow_auto_topic_creation and c.auto_create_topics:
        missing = [name for name in authorized if not c.topic_exists(name)]
        if missing and not c.cluster(Op.CREATE, log_denied=False):
            for name in c.denied(Op.CREATE, TOPIC, missing):
                refusals[name] = TopicMetadata(name, TOPIC_DENIED, is_internal=name in INTERNAL_TOPICS)
    if not refusals:
        return handle(r)

    def merge(response: Any) -> Any:
        answers: dict[str, Any] = {}
        for topic in response.topics:
            answers.setdefault(topic.name, topic)
        merged = [refusals.get(name) or answers.get(name) for name in names]
        return dataclasses.replace(response, topics=tuple(topic for topic in merged if topic is not None))
    # Always asked (even for no topic): the answer carries the brokers and the controller.
    return then(handle(dataclasses.replace(r, topics=tuple(name for name in names if name not in refusals))), merge)


@check("CreateTopicsRequest")
def _create_topics(c: RequestContext, handle: Handle, r: Any) -> Any:
    """CREATE on the cluster, else on each topic ("Authorization failed."); a topic named twice is the broker's
    INVALID_REQUEST whatever the ACLs; the configs and partition count of a made topic only with DESCRIBE_CONFIGS
    on it."""
    topics = tuple(r.topics)
    names = [getattr(topic, "name", None) for topic in topics]
    repeated = {name for name in names if names.count(name) > 1}
    denied: set[Any] = set()
    if not c.cluster(Op.CREATE, log_denied=False):
        denied = c.denied(Op.CREATE, TOPIC, (n for n in names if isinstance(n, str) and n not in repeated))
    refusals = [CreatedTopic(str(name), TOPIC_DENIED, "Authorization failed.") if name in denied else None
                for name in names]

    def hide_configs(response: Any) -> Any:  # as Kafka's createTopics leaves out configs and partition count
        return dataclasses.replace(response, results=tuple(
            result if result.error_code != ErrorCode.NONE
            or c.allowed(Op.DESCRIBE_CONFIGS, TOPIC, result.name, log_denied=False)
            else dataclasses.replace(result, configs=(), partitions=-1) for result in response.results))

    def rebuild(kept: list[int]) -> Any:
        return dataclasses.replace(r, topics=pick(topics, kept))
    name_of = lambda item: getattr(item, "name", None)  # noqa: E731
    # The broker answers a repeated name once: its answer goes to the first mention, the others get none.
    answer = split(handle, r, topics, refusals, rebuild, "results", CreateTopicsResponse((), r.request_id), name_of,
                    name_of)
    return then(answer, hide_configs)




@check("DeleteRecordsRequest")
def _delete_records(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DELETE on each topic."""
    parts = tuple(r.partitions)
    denied = c.denied(Op.DELETE, TOPIC, (p[0] for p in parts))
    refusals = [DeletedRecords(p[0], p[1], TOPIC_DENIED) if p[0] in denied else None for p in parts]
    return split(handle, r, parts, refusals, lambda kept: dataclasses.replace(r, partitions=pick(parts, kept)),
                  "partitions", DeleteRecordsResponse((), r.request_id), first_two, tp)


@check("DescribeProducersRequest")
def _describe_producers(c: RequestContext, handle: Handle, r: Any) -> Any:
    """READ on each topic (an illegal name is the broker's INVALID_TOPIC_EXCEPTION first, as Kafka checks it)."""
    parts = tuple(r.partitions)
    denied = c.denied(Op.READ, TOPIC, (t for t, _ in parts if illegal_topic_name(t) is None))
    refusals = [PartitionProducers(t, p, TOPIC_DENIED) if t in denied else None for t, p in parts]
    return split(handle, r, parts, refusals, lambda kept: dataclasses.replace(r, partitions=pick(parts, kept)),
                  "partitions", DescribeProducersResponse((), r.request_id), first_two, tp)




@check("OffsetForLeaderEpochRequest")
def _offset_for_leader_epoch(c: RequestContext, handle: Handle, r: Any) -> Any:
    """CLUSTER_ACTION on the cluster (a follower), else DESCRIBE on each topic (a consumer, KIP-320)."""
    if c.cluster(Op.CLUSTER_ACTION, log_denied=False):
        return handle(r)
    parts = tuple(r.partitions)
    denied = c.denied(Op.DESCRIBE, TOPIC, (q.topic for q in parts))
    refusals = [EpochEndOffset(q.topic, q.partition, TOPIC_DENIED) if q.topic in denied else None for q in parts]
    return split(handle, r, parts, refusals, lambda kept: dataclasses.replace(r, partitions=pick(parts, kept)),
                  "partitions", OffsetForLeaderEpochResponse((), r.request_id), tp, tp)
