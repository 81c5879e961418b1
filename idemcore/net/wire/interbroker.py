"""The inter-broker APIs on the wire (server side): LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6) from
the controller, OffsetForLeaderEpoch (23) from a follower, WriteTxnMarkers (27) from a transaction coordinator,
and ElectLeaders (43) from an admin client. Each reads the kio request into :mod:`idemcore.net.replication`'s
(or :mod:`idemcore.net.messages`') message and writes the broker's answer back.

LeaderAndIsr, StopReplica and UpdateMetadata are served at one flexible version each (their schemas are in
:mod:`idemcore.net.wire.schema`: kio follows Kafka 4, which has none); a controller (idemcore's or Kafka 3.x's
in IBP 3.0+) sends them at those versions."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.messages import (
    Response,
    TxnMarker,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.net.replication import (
    NO_REPLICA_ID,
    SECURITY_PROTOCOL_IDS,
    BrokerEndpoint,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EpochQuery,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ListenerAddress,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataPartition,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from idemcore.net.wire.api import WireApi, WireContext, topic_id_of
from idemcore.net.wire.frames import group_by_topic, make, millis, nested, response_class
from idemcore.net.wire.transactions import NO_THROTTLE, answer_of
from idemcore.protocol.codes import ErrorCode


def _topic_name(ctx: WireContext, name: Any, topic_id: Any) -> str:
    """A topic's name from a request that carries both name and id (the name wins; an id alone is looked up)."""
    if name:
        return str(name)
    found = ctx.topic_name(topic_id)
    if found is None:
        raise ValueError(f"no topic has id {topic_id}")
    return found


# ---------------------------------------------------------------- LeaderAndIsr (key 4)


def _leader_and_isr_to_message(ctx: WireContext, version: int, correlation_id: int,
                               body: Any) -> tuple[LeaderAndIsrRequest, None]:
    partitions = tuple(
        LeaderAndIsrPartition(_topic_name(ctx, topic.topic_name, topic.topic_id), int(p.partition_index),
                              int(p.controller_epoch), int(p.leader), int(p.leader_epoch),
                              tuple(int(r) for r in p.isr), int(p.zk_version), tuple(int(r) for r in p.replicas),
                              bool(p.is_new))
        for topic in body.topic_states for p in topic.partition_states)
    leaders = tuple(BrokerEndpoint(int(b.broker_id), str(b.host_name), int(b.port)) for b in body.live_leaders)
    return LeaderAndIsrRequest(int(body.controller_id), int(body.controller_epoch), int(body.broker_epoch),
                               partitions, leaders, correlation_id), None


def _leader_and_isr_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, LeaderAndIsrResponse)
    cls = response_class(body)
    topic_cls, partition_cls = nested(cls, "LeaderAndIsrTopicError"), nested(cls, "LeaderAndIsrPartitionError")
    grouped = group_by_topic((topic, make(partition_cls, partition_index=partition, error_code=WireError(code)))
                             for topic, partition, code in response.partitions)
    return make(cls, error_code=WireError(response.error_code), topics=tuple(
        make(topic_cls, topic_id=topic_id_of(name), partition_errors=tuple(errors))
        for name, errors in grouped.items()))


LEADER_AND_ISR = WireApi(4, "LeaderAndIsr", 5, 5, _leader_and_isr_to_message, _leader_and_isr_to_wire)


# ---------------------------------------------------------------- StopReplica (key 5)


def _stop_replica_to_message(ctx: WireContext, version: int, correlation_id: int,
                             body: Any) -> tuple[StopReplicaRequest, None]:
    partitions = tuple(StopReplicaPartition(str(topic.topic_name), int(p.partition_index), int(p.leader_epoch),
                                            bool(p.delete_partition))
                       for topic in body.topic_states for p in topic.partition_states)
    return StopReplicaRequest(int(body.controller_id), int(body.controller_epoch), int(body.broker_epoch),
                              partitions, correlation_id), None


def _stop_replica_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, StopReplicaResponse)
    cls = response_class(body)
    error_cls = nested(cls, "StopReplicaPartitionError")
    return make(cls, error_code=WireError(response.error_code), partition_errors=tuple(
        make(error_cls, topic_name=topic, partition_index=partition, error_code=WireError(code))
        for topic, partition, code in response.partitions))


STOP_REPLICA = WireApi(5, "StopReplica", 3, 3, _stop_replica_to_message, _stop_replica_to_wire)


# ---------------------------------------------------------------- UpdateMetadata (key 6)


def _update_metadata_to_message(ctx: WireContext, version: int, correlation_id: int,
                                body: Any) -> tuple[UpdateMetadataRequest, None]:
    partitions = tuple(
        UpdateMetadataPartition(_topic_name(ctx, topic.topic_name, topic.topic_id), int(p.partition_index),
                                int(p.controller_epoch), int(p.leader), int(p.leader_epoch),
                                tuple(int(r) for r in p.isr), int(p.zk_version), tuple(int(r) for r in p.replicas),
                                tuple(int(r) for r in p.offline_replicas))
        for topic in body.topic_states for p in topic.partition_states)
    brokers = []
    protocols = {number: name for name, number in SECURITY_PROTOCOL_IDS.items()}
    for broker in body.live_brokers:
        if not broker.endpoints:
            raise ValueError(f"UpdateMetadata: broker {broker.id} has no endpoint")
        listeners = tuple(ListenerAddress(str(e.listener), str(e.host), int(e.port),
                                          protocols.get(int(e.security_protocol), "PLAINTEXT"))
                          for e in broker.endpoints)
        # host/port: where brokers reach it, the controller's inter-broker listener (the receiver's is the same)
        first = listeners[0]
        if listeners == (ListenerAddress("PLAINTEXT", first.host, first.port, "PLAINTEXT"),):
            listeners = ()  # one PLAINTEXT listener: the form BrokerEndpoint writes as no listener list
        brokers.append(BrokerEndpoint(int(broker.id), first.host, first.port,
                                      None if broker.rack is None else str(broker.rack), listeners))
    return UpdateMetadataRequest(int(body.controller_id), int(body.controller_epoch), int(body.broker_epoch),
                                 partitions, tuple(brokers), correlation_id), None


def _update_metadata_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, UpdateMetadataResponse)
    return make(response_class(body), error_code=WireError(response.error_code))


UPDATE_METADATA = WireApi(6, "UpdateMetadata", 7, 7, _update_metadata_to_message, _update_metadata_to_wire)


# ---------------------------------------------------------------- OffsetForLeaderEpoch (key 23)


def _epoch_to_message(ctx: WireContext, version: int, correlation_id: int,
                      body: Any) -> tuple[OffsetForLeaderEpochRequest, None]:
    queries = tuple(EpochQuery(str(topic.topic), int(p.partition), int(p.current_leader_epoch), int(p.leader_epoch))
                    for topic in body.topics for p in topic.partitions)
    replica_id = int(getattr(body, "replica_id", NO_REPLICA_ID))  # v3+
    return OffsetForLeaderEpochRequest(replica_id, queries, correlation_id), None


def _epoch_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, OffsetForLeaderEpochResponse)
    cls = response_class(body)
    topic_cls, partition_cls = nested(cls, "OffsetForLeaderTopicResult"), nested(cls, "EpochEndOffset")
    grouped = group_by_topic((e.topic, make(partition_cls, error_code=WireError(e.error_code), partition=e.partition,
                                            leader_epoch=e.leader_epoch, end_offset=e.end_offset))
                             for e in response.partitions)
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(
        make(topic_cls, topic=name, partitions=tuple(partitions)) for name, partitions in grouped.items()))


#: v2–4 (v2 adds the current leader epoch, v3 the replica id, v4 is flexible): what kio has.
OFFSET_FOR_LEADER_EPOCH = WireApi(23, "OffsetForLeaderEpoch", 2, 4, _epoch_to_message, _epoch_to_wire)


# ---------------------------------------------------------------- WriteTxnMarkers (key 27)


def _markers_to_message(ctx: WireContext, version: int, correlation_id: int,
                        body: Any) -> tuple[WriteTxnMarkersRequest, None]:
    markers = tuple(TxnMarker(int(m.producer_id), int(m.producer_epoch), bool(m.transaction_result),
                              int(m.coordinator_epoch),
                              tuple((str(t.name), int(p)) for t in m.topics for p in t.partition_indexes))
                    for m in body.markers)
    return WriteTxnMarkersRequest(markers, correlation_id), None


def _markers_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, WriteTxnMarkersResponse)
    cls = response_class(body)
    marker_cls, topic_cls = nested(cls, "WritableTxnMarkerResult"), nested(cls, "WritableTxnMarkerTopicResult")
    partition_cls = nested(cls, "WritableTxnMarkerPartitionResult")
    return make(cls, markers=tuple(make(marker_cls, producer_id=marker.producer_id, topics=tuple(
        make(topic_cls, name=name, partitions=tuple(partitions))
        for name, partitions in group_by_topic((r.topic, make(partition_cls, partition_index=r.partition,
                                                        error_code=WireError(r.error_code)))
                                         for r in marker.responses).items()))
        for marker in response.markers))


#: v1–2 (v1 is v0 made flexible; kio, following Kafka 4, has no v0). v2's transaction_version is read and
#: dropped: the marker's epoch is the one in the request either way (transaction version 2 is not served).
WRITE_TXN_MARKERS = WireApi(27, "WriteTxnMarkers", 1, 2, _markers_to_message, _markers_to_wire)


# ---------------------------------------------------------------- ElectLeaders (key 43)


def _elect_to_message(ctx: WireContext, version: int, correlation_id: int,
                      body: Any) -> tuple[ElectLeadersRequest, Any]:
    partitions = None if body.topic_partitions is None else tuple(
        (str(t.topic), int(p)) for t in body.topic_partitions for p in t.partitions)
    # v0 has no election type: preferred.
    request = ElectLeadersRequest(int(getattr(body, "election_type", 0)), partitions, millis(body.timeout),
                                  correlation_id)
    return request, partitions


def _elect_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, asked: Any) -> Any:
    response = answer_of(answer, ElectLeadersResponse)
    cls = response_class(body)
    result_cls, partition_cls = nested(cls, "ReplicaElectionResult"), nested(cls, "PartitionResult")
    results = response.results
    if version == 0 and response.error_code != ErrorCode.NONE and not results:
        # v0 has no top-level error code: Kafka answers it in each partition asked for.
        results = tuple((topic, partition, response.error_code, None) for topic, partition in asked or ())
    grouped = group_by_topic((topic, make(partition_cls, partition_id=partition, error_code=WireError(code),
                                          error_message=message))
                             for topic, partition, code, message in results)
    return make(cls, throttle_time=NO_THROTTLE, error_code=WireError(response.error_code),
                replica_election_results=tuple(make(result_cls, topic=name, partition_result=tuple(partitions))
                                               for name, partitions in grouped.items()))


ELECT_LEADERS = WireApi(43, "ElectLeaders", 0, 2, _elect_to_message, _elect_to_wire)

INTER_BROKER_APIS = (LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, OFFSET_FOR_LEADER_EPOCH, WRITE_TXN_MARKERS,
                     ELECT_LEADERS)
