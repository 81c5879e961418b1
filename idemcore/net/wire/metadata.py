"""Metadata and CreateTopics on the wire; topic ids are derived from names (``api.topic_id_of``). A Metadata answer
lists the partitions' leaders, replicas and ISR, the live brokers and the controller as the broker's answer gives
them; where it gives none (a single broker), this node is every partition's leader and only replica, and the
controller."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    NewTopic,
    PartitionMetadata,
    TopicMetadata,
)
from idemcore.net.wire.api import WireApi, WireContext, topic_id_of
from idemcore.net.wire.frames import make, millis, nested, response_class
from idemcore.protocol.codes import ErrorCode

#: Kafka's "authorized operations not asked for" (INT32_MIN).
_NO_OPERATIONS = -(1 << 31)


def _metadata_to_message(ctx: WireContext, version: int, correlation_id: int,
                         body: Any) -> tuple[MetadataRequest, Any]:
    asked_by_id: dict[str, Any] = {}  # the name each topic id asked for resolved to ("" for an unknown id)
    if body.topics is None or (version == 0 and not body.topics):  # v0: an empty list means every topic
        names = None
    else:
        listed = []
        for t in body.topics:
            name = str(t.name) if t.name is not None else ctx.topic_name(t.topic_id) or ""
            if t.name is None:
                asked_by_id.setdefault(name, t.topic_id)
            listed.append(name)
        names = tuple(listed)
    allow = bool(getattr(body, "allow_auto_topic_creation", True))
    return MetadataRequest(names, allow, correlation_id), asked_by_id


def _metadata_to_wire(ctx: WireContext, version: int, body: Any, response: MetadataResponse, carry: Any) -> Any:
    cls = response_class(body)
    broker_cls, topic_cls = nested(cls, "MetadataResponseBroker"), nested(cls, "MetadataResponseTopic")
    partition_cls = nested(cls, "MetadataResponsePartition")
    node = ctx.node_id
    # A topic asked by id and refused is answered without its name, as Kafka answers it: the name of a topic the
    # principal may not describe is not told (nor, the ids being the names' hashes, whether it exists). Before v12
    # the name may not be null: empty.
    asked_by_id = carry or {}
    hidden = {t.name for t in response.topics
              if t.name in asked_by_id and t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    topics = tuple(make(
        topic_cls, error_code=WireError(t.error_code), name=(None if version >= 12 else "") if t.name in hidden
        else t.name,
        topic_id=asked_by_id[t.name] if t.name in hidden else topic_id_of(t.name) if t.error_code == ErrorCode.NONE
        else None, is_internal=t.is_internal,
        topic_authorized_operations=_NO_OPERATIONS, partitions=tuple(
            make(partition_cls, error_code=WireError(p.error_code), partition_index=p.partition, leader_id=p.leader,
                 leader_epoch=p.leader_epoch, replica_nodes=p.replicas, isr_nodes=p.isr,
                 offline_replicas=p.offline_replicas)
            for p in _partition_states(t, node)))
        for t in response.topics)
    if response.brokers:  # each on the listener this client came in on; one without it is left out, as Kafka
        addresses = ((b, b.address(ctx.listener)) for b in response.brokers)
        brokers = tuple(make(broker_cls, node_id=b.broker_id, host=where[0], port=where[1], rack=b.rack)
                        for b, where in addresses if where is not None)
    else:
        brokers = (make(broker_cls, node_id=node, host=ctx.host, port=ctx.port, rack=None),)
    controller = node if response.controller_id == -1 else response.controller_id
    return make(cls, brokers=brokers, cluster_id=ctx.cluster_id, controller_id=controller, topics=topics,
                cluster_authorized_operations=_NO_OPERATIONS, error_code=WireError.none)


def _partition_states(topic: TopicMetadata, node: int) -> tuple[PartitionMetadata, ...]:
    """The topic's partition states; without them, this node leads each partition at epoch 0, alone."""
    if topic.partition_states is not None:
        return topic.partition_states
    return tuple(PartitionMetadata(p, ErrorCode.NONE, node, 0, (node,), (node,), ())
                 for p in range(topic.partitions))


def _create_to_message(ctx: WireContext, version: int, correlation_id: int,
                       body: Any) -> tuple[CreateTopicsRequest, Any]:
    topics = tuple(NewTopic(str(t.name), int(t.num_partitions),
                            tuple((str(c.name), None if c.value is None else str(c.value)) for c in t.configs),
                            int(t.replication_factor),
                            tuple((int(a.partition_index), tuple(int(b) for b in a.broker_ids))
                                  for a in getattr(t, "assignments", ())))
                   for t in body.topics)
    return CreateTopicsRequest(topics, bool(getattr(body, "validate_only", False)), correlation_id,
                               timeout_ms=millis(body.timeout)), None


def _create_to_wire(ctx: WireContext, version: int, body: Any, response: CreateTopicsResponse, carry: Any) -> Any:
    cls = response_class(body)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if version >= 5 else None
    return make(cls, topics=tuple(make(
        result_cls, name=r.name, topic_id=topic_id_of(r.name) if r.error_code == ErrorCode.NONE else None,
        error_code=WireError(r.error_code), error_message=r.error_message, num_partitions=r.partitions,
        replication_factor=1 if r.error_code == ErrorCode.NONE else -1,
        configs=None if r.error_code or config_cls is None else tuple(  # v5+: the topic's configs (KIP-525)
            make(config_cls, name=c.name, value=c.value, read_only=c.read_only, config_source=c.source,
                 is_sensitive=c.is_sensitive) for c in r.configs))
        for r in response.results))


METADATA = WireApi(3, "Metadata", 0, 13, _metadata_to_message, _metadata_to_wire)
CREATE_TOPICS = WireApi(19, "CreateTopics", 2, 7, _create_to_message, _create_to_wire)
