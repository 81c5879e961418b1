"""The client direction of the inter-broker APIs: what a broker or the controller sends another broker
(:class:`idemcore.net.broker_channel.BrokerChannel`), as :class:`~idemcore.net.wire.client.ClientApi` entries
beside the clients' own in :mod:`idemcore.net.wire.client`.

A replica Fetch is the clients' Fetch (``client.FETCH``: the request's replica id and epochs are sent, each
partition's ``records`` kept as the bytes the leader sent, never decoded: the follower appends them as they are).
Metadata here is read in full (each partition's leader, epoch, replicas and ISR; the brokers; the controller),
where the clients' transport keeps only what a producer or consumer needs."""

from __future__ import annotations

from typing import Any

from idemcore.net.messages import (
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    PartitionResponse,
    ProduceRequest,
    Request,
    TopicMetadata,
    TxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.net.replication import (
    SECURITY_PROTOCOL_IDS,
    BrokerEndpoint,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EpochEndOffset,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ListenerAddress,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from idemcore.net.wire.api import topic_id_of
from idemcore.net.wire.client import (
    CLIENT_APIS,
    PRODUCE,
    ClientApi,
    WireProtocolError,
    _api,
    _encode_metadata,
    _ms,
    _request_class,
)
from idemcore.net.wire.frames import group_by_topic, make, nested
from idemcore.protocol.codes import ErrorCode

#: The listener name idemcore's brokers advertise (one plaintext listener).
LISTENER = "PLAINTEXT"


# ---------------------------------------------------------------- LeaderAndIsr (key 4)


def _encode_leader_and_isr(request: LeaderAndIsrRequest, version: int) -> Any:
    cls = _request_class(4, version)
    topic_cls, state_cls = nested(cls, "LeaderAndIsrTopicState"), nested(cls, "LeaderAndIsrPartitionState")
    leader_cls = nested(cls, "LeaderAndIsrLiveLeader")
    grouped = group_by_topic((p.topic, make(state_cls, partition_index=p.partition, controller_epoch=p.controller_epoch,
                                            leader=p.leader, leader_epoch=p.leader_epoch, isr=p.isr,
                                            zk_version=p.zk_version, replicas=p.replicas, adding_replicas=(),
                                       removing_replicas=(), is_new=p.is_new))
                        for p in request.partitions)
    return make(cls, controller_id=request.controller_id, controller_epoch=request.controller_epoch,
                broker_epoch=request.broker_epoch, type=0,
                topic_states=tuple(make(topic_cls, topic_name=name, topic_id=topic_id_of(name),
                                        partition_states=tuple(states)) for name, states in grouped.items()),
                live_leaders=tuple(make(leader_cls, broker_id=b.broker_id, host_name=b.host, port=b.port)
                                   for b in request.live_leaders))


def _decode_leader_and_isr(request: LeaderAndIsrRequest, version: int, body: Any) -> LeaderAndIsrResponse:
    names = {topic_id_of(p.topic): p.topic for p in request.partitions}
    results: list[tuple[str, int, int]] = []
    for topic in body.topics:
        name = names.get(topic.topic_id)
        if name is None:
            raise WireProtocolError(f"LeaderAndIsr answered topic id {topic.topic_id}, which it was not asked about")
        results.extend((name, int(p.partition_index), int(p.error_code)) for p in topic.partition_errors)
    return LeaderAndIsrResponse(int(body.error_code), tuple(results), request.request_id)


# ---------------------------------------------------------------- StopReplica (key 5)


def _encode_stop_replica(request: StopReplicaRequest, version: int) -> Any:
    cls = _request_class(5, version)
    topic_cls, state_cls = nested(cls, "StopReplicaTopicState"), nested(cls, "StopReplicaPartitionState")
    grouped = group_by_topic((p.topic, make(state_cls, partition_index=p.partition, leader_epoch=p.leader_epoch,
                                            delete_partition=p.delete))
                             for p in request.partitions)
    return make(cls, controller_id=request.controller_id, controller_epoch=request.controller_epoch,
                broker_epoch=request.broker_epoch,
                topic_states=tuple(make(topic_cls, topic_name=name, partition_states=tuple(states))
                                   for name, states in grouped.items()))


def _decode_stop_replica(request: StopReplicaRequest, version: int, body: Any) -> StopReplicaResponse:
    return StopReplicaResponse(int(body.error_code), tuple(
        (str(p.topic_name), int(p.partition_index), int(p.error_code)) for p in body.partition_errors),
        request.request_id)


# ---------------------------------------------------------------- UpdateMetadata (key 6)


def _encode_update_metadata(request: UpdateMetadataRequest, version: int) -> Any:
    cls = _request_class(6, version)
    topic_cls, state_cls = nested(cls, "UpdateMetadataTopicState"), nested(cls, "UpdateMetadataPartitionState")
    broker_cls, endpoint_cls = nested(cls, "UpdateMetadataBroker"), nested(cls, "UpdateMetadataEndpoint")
    grouped = group_by_topic((p.topic, make(state_cls, partition_index=p.partition, controller_epoch=p.controller_epoch,
                                            leader=p.leader, leader_epoch=p.leader_epoch, isr=p.isr,
                                            zk_version=p.zk_version, replicas=p.replicas,
                                       offline_replicas=p.offline_replicas))
                        for p in request.partitions)
    return make(cls, controller_id=request.controller_id, controller_epoch=request.controller_epoch,
                broker_epoch=request.broker_epoch,
                topic_states=tuple(make(topic_cls, topic_name=name, topic_id=topic_id_of(name),
                                        partition_states=tuple(states)) for name, states in grouped.items()),
                live_brokers=tuple(make(broker_cls, id=b.broker_id, rack=b.rack, endpoints=tuple(
                    make(endpoint_cls, port=one.port, host=one.host, listener=one.name,
                         security_protocol=SECURITY_PROTOCOL_IDS[one.protocol])
                    for one in _inter_broker_first(b)))
                    for b in request.live_brokers))


def _inter_broker_first(broker: BrokerEndpoint) -> tuple[ListenerAddress, ...]:
    """A broker's listeners, the one brokers reach it on (its host and port) first: the receiver takes the first
    endpoint as that."""
    listeners = broker.listeners or (ListenerAddress(LISTENER, broker.host, broker.port, "PLAINTEXT"),)
    return tuple(sorted(listeners, key=lambda one: (one.host, one.port) != (broker.host, broker.port)))


def _decode_update_metadata(request: UpdateMetadataRequest, version: int, body: Any) -> UpdateMetadataResponse:
    return UpdateMetadataResponse(int(body.error_code), request.request_id)


# ---------------------------------------------------------------- OffsetForLeaderEpoch (key 23)


def _encode_epochs(request: OffsetForLeaderEpochRequest, version: int) -> Any:
    cls = _request_class(23, version)
    topic_cls, partition_cls = nested(cls, "OffsetForLeaderTopic"), nested(cls, "OffsetForLeaderPartition")
    grouped = group_by_topic((q.topic, make(partition_cls, partition=q.partition,
                                            current_leader_epoch=q.current_leader_epoch, leader_epoch=q.leader_epoch))
                             for q in request.partitions)
    return make(cls, replica_id=request.replica_id, topics=tuple(
        make(topic_cls, topic=name, partitions=tuple(partitions)) for name, partitions in grouped.items()))


def _decode_epochs(request: OffsetForLeaderEpochRequest, version: int, body: Any) -> OffsetForLeaderEpochResponse:
    return OffsetForLeaderEpochResponse(tuple(
        EpochEndOffset(str(topic.topic), int(p.partition), int(p.error_code), int(p.leader_epoch), int(p.end_offset))
        for topic in body.topics for p in topic.partitions), request.request_id)


# ---------------------------------------------------------------- WriteTxnMarkers (key 27)


def _encode_markers(request: WriteTxnMarkersRequest, version: int) -> Any:
    cls = _request_class(27, version)
    marker_cls, topic_cls = nested(cls, "WritableTxnMarker"), nested(cls, "WritableTxnMarkerTopic")
    return make(cls, markers=tuple(make(
        marker_cls, producer_id=m.producer_id, producer_epoch=m.producer_epoch, transaction_result=m.committed,
        coordinator_epoch=m.coordinator_epoch, transaction_version=0,
        topics=tuple(make(topic_cls, name=name, partition_indexes=tuple(partitions))
                     for name, partitions in group_by_topic(m.partitions).items()))
        for m in request.markers))


def _decode_markers(request: WriteTxnMarkersRequest, version: int, body: Any) -> WriteTxnMarkersResponse:
    return WriteTxnMarkersResponse(request.request_id, tuple(
        TxnMarkerResult(int(m.producer_id), tuple(
            PartitionResponse(str(t.name), int(p.partition_index), int(p.error_code))
            for t in m.topics for p in t.partitions))
        for m in body.markers))


# ---------------------------------------------------------------- ElectLeaders (key 43)


def _encode_elect(request: ElectLeadersRequest, version: int) -> Any:
    cls = _request_class(43, version)
    if version == 0 and request.election_type != 0:
        raise WireProtocolError(f"ElectLeaders v0 elects preferred leaders only, not election type "
                                f"{request.election_type}")
    topic_cls = nested(cls, "TopicPartitions")
    topics = None if request.partitions is None else tuple(
        make(topic_cls, topic=name, partitions=tuple(partitions))
        for name, partitions in group_by_topic(request.partitions).items())
    return make(cls, election_type=request.election_type, topic_partitions=topics, timeout=_ms(request.timeout_ms))


def _decode_elect(request: ElectLeadersRequest, version: int, body: Any) -> ElectLeadersResponse:
    return ElectLeadersResponse(int(getattr(body, "error_code", ErrorCode.NONE)), tuple(
        (str(r.topic), int(p.partition_id), int(p.error_code),
         None if p.error_message is None else str(p.error_message))
        for r in body.replica_election_results for p in r.partition_result), request.request_id)


# ---------------------------------------------------------------- Metadata (key 3), in full


def _decode_full_metadata(request: MetadataRequest, version: int, body: Any) -> MetadataResponse:
    topics = []
    for t in body.topics:
        if t.name is None:
            continue
        states = tuple(sorted((PartitionMetadata(
            int(p.partition_index), int(p.error_code), int(p.leader_id), int(getattr(p, "leader_epoch", -1)),
            tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes),
            tuple(int(r) for r in getattr(p, "offline_replicas", ()))) for p in t.partitions),
            key=lambda state: state.partition))
        topics.append(TopicMetadata(str(t.name), int(t.error_code), len(states),
                                    bool(getattr(t, "is_internal", False)), states))
    brokers = tuple(BrokerEndpoint(int(b.node_id), str(b.host), int(b.port),
                                   None if getattr(b, "rack", None) is None else str(b.rack)) for b in body.brokers)
    return MetadataResponse(tuple(topics), request.request_id, brokers, int(getattr(body, "controller_id", -1)))


LEADER_AND_ISR = _api(4, "LeaderAndIsr", 5, 5, _encode_leader_and_isr, _decode_leader_and_isr)
STOP_REPLICA = _api(5, "StopReplica", 3, 3, _encode_stop_replica, _decode_stop_replica)
UPDATE_METADATA = _api(6, "UpdateMetadata", 7, 7, _encode_update_metadata, _decode_update_metadata)
OFFSET_FOR_LEADER_EPOCH = _api(23, "OffsetForLeaderEpoch", 2, 4, _encode_epochs, _decode_epochs)
WRITE_TXN_MARKERS = _api(27, "WriteTxnMarkers", 1, 2, _encode_markers, _decode_markers)
ELECT_LEADERS = _api(43, "ElectLeaders", 0, 2, _encode_elect, _decode_elect)
FULL_METADATA = _api(3, "Metadata", 1, 12, _encode_metadata, _decode_full_metadata)

#: Each request class a broker sends another, and the API that carries it.
BROKER_APIS: dict[type, ClientApi] = {
    **CLIENT_APIS,
    ProduceRequest: PRODUCE, MetadataRequest: FULL_METADATA,
    LeaderAndIsrRequest: LEADER_AND_ISR, StopReplicaRequest: STOP_REPLICA, UpdateMetadataRequest: UPDATE_METADATA,
    OffsetForLeaderEpochRequest: OFFSET_FOR_LEADER_EPOCH, WriteTxnMarkersRequest: WRITE_TXN_MARKERS,
    ElectLeadersRequest: ELECT_LEADERS,
}


def broker_api_of(request: Request) -> ClientApi:
    """The API that carries ``request`` between brokers; WireProtocolError for a message no broker sends."""
    api = BROKER_APIS.get(type(request))
    if api is None:
        raise WireProtocolError(f"a {type(request).__name__} is not a request a broker sends over the wire")
    return api
