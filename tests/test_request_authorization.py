"""Each API checked as Kafka's KafkaApis checks it, through Broker.handle_from with an authorizer: the refused
parts answered with Kafka's authorization codes, the allowed parts with the broker's own answer."""

from __future__ import annotations

import logging

import pytest

from idemcore.broker import Broker
from idemcore.broker.security.request_authorization import RequestRefused, authorized_handle
from idemcore.net.admin import (
    DeleteRecordsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from idemcore.net.configs import (
    AlterConfigsRequest,
    AlterResource,
    ConfigChange,
    DescribeConfigsRequest,
    DescribeResource,
    IncrementalAlterConfigsRequest,
    IncrementalResource,
    ResourceType,
)
from idemcore.net.consumer_group import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from idemcore.net.group_admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest, OffsetDeleteRequest
from idemcore.net.membership import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeavingMember,
    SyncGroupRequest,
)
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    EndTxnRequest,
    FetchPartition,
    FetchRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    MetadataRequest,
    NewTopic,
    OffsetCommitRequest,
    OffsetEntry,
    OffsetFetchRequest,
    PartitionResponse,
    Pending,
    ProduceRequest,
    ProduceResponse,
    TxnMarker,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from idemcore.net.replication import (
    ElectLeadersRequest,
    EpochQuery,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    OffsetForLeaderEpochRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from idemcore.protocol.acls import AclOperation as Op
from idemcore.protocol.acls import AclResourceType as Kind
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from tests.authz_model import ALICE, AllowSet

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.fixture
def broker():
    with Broker({"a": 2, "b": 1}, offsets_topic_partitions=1, transaction_state_partitions=1) as made:
        made.authorizer = AllowSet()
        yield made


def _batch(topic: str, partition: int = 0, **extra) -> RecordBatch:
    return RecordBatch(topic, partition, [b"v"], **extra)


def _end(broker: Broker, topic: str, partition: int = 0) -> int:
    return broker.log(topic, partition).log_end_offset


def _codes(results) -> list[tuple[str, int, int]]:
    return [(r.topic, r.partition, r.error_code) for r in results]


# ---------------------------------------------------------------- no authorizer


def test_without_an_authorizer_handle_from_is_handle():
    with Broker({"a": 1}) as plain:
        answer = plain.handle_from(ALICE, ProduceRequest((_batch("a"),)))
        assert answer.responses[0].error_code == ErrorCode.NONE and _end(plain, "a") == 1


# ---------------------------------------------------------------- produce and fetch


def test_a_produce_to_two_topics_one_allowed_writes_only_that_one(broker):
    broker.authorizer.allow(Op.WRITE, Kind.TOPIC, "a")
    answer = broker.handle_from(ALICE, ProduceRequest((_batch("b"), _batch("a", 1), _batch("a", 0)), request_id=7))
    assert answer.request_id == 7
    assert _codes(answer.responses) == [("b", 0, TOPIC_DENIED), ("a", 1, 0), ("a", 0, 0)]
    assert (_end(broker, "a", 0), _end(broker, "a", 1), _end(broker, "b")) == (1, 1, 0)


def test_a_produce_with_nothing_allowed_reaches_no_log(broker):
    answer = broker.handle_from(ALICE, ProduceRequest((_batch("a"), _batch("b"))))
    assert _codes(answer.responses) == [("a", 0, TOPIC_DENIED), ("b", 0, TOPIC_DENIED)]
    assert _end(broker, "a") == _end(broker, "b") == 0


def test_an_acks_0_produce_with_a_refused_topic_writes_the_rest_and_closes(broker):
    broker.authorizer.allow(Op.WRITE, Kind.TOPIC, "a")
    with pytest.raises(RequestRefused, match="acks=0"):
        broker.handle_from(ALICE, ProduceRequest((_batch("a"), _batch("b")), acks=0))
    assert (_end(broker, "a"), _end(broker, "b")) == (1, 0)
    assert broker.handle_from(ALICE, ProduceRequest((_batch("a"),), acks=0)) is None
    assert _end(broker, "a") == 2


def test_transactional_batches_need_write_on_the_transactional_id(broker):
    broker.authorizer.allow(Op.WRITE, Kind.TOPIC, "a", "b")
    batches = (_batch("a", producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True),
               _batch("b", producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True))
    for transactional_id in (None, "tx"):
        answer = broker.handle_from(ALICE, ProduceRequest(batches, transactional_id=transactional_id))
        assert _codes(answer.responses) == [("a", 0, TXN_DENIED), ("b", 0, TXN_DENIED)]
    assert _end(broker, "a") == _end(broker, "b") == 0


def test_fetch_needs_read_per_topic_and_a_replica_fetch_cluster_action(broker):
    broker.handle(ProduceRequest((_batch("a"), _batch("b"))))
    broker.authorizer.allow(Op.READ, Kind.TOPIC, "b")
    request = FetchRequest((FetchPartition("a", 0, 0), FetchPartition("b", 0, 0)))
    answer = broker.handle_from(ALICE, request)
    assert _codes(answer.partitions) == [("a", 0, TOPIC_DENIED), ("b", 0, 0)]
    assert answer.partitions[0].records == b"" and answer.partitions[1].records != b""
    replica = FetchRequest((FetchPartition("b", 0, 0),), replica_id=1)
    assert _codes(broker.handle_from(ALICE, replica).partitions) == [("b", 0, TOPIC_DENIED)]  # READ is not enough
    broker.authorizer.allow_cluster(Op.CLUSTER_ACTION)
    assert broker.handle_from(ALICE, replica).partitions[0].records != b""


def test_list_offsets_needs_describe_and_keeps_leader_epochs_paired(broker):
    broker.handle(ProduceRequest((_batch("a", 1),)))
    broker.authorizer.allow(Op.DESCRIBE, Kind.TOPIC, "a")
    request = ListOffsetsRequest((("b", 0, -1), ("a", 1, -1)), current_leader_epochs=(3, -1))
    answer = broker.handle_from(ALICE, request)
    assert [(r.topic, r.error_code, r.offset) for r in answer.results] == [("b", TOPIC_DENIED, -1), ("a", 0, 1)]


def test_a_pending_answer_is_merged_when_it_completes():
    later = Pending()
    sent = []

    def handle(request):
        sent.append(request)
        return later
    authorizer = AllowSet().allow(Op.WRITE, Kind.TOPIC, "a")
    merged = authorized_handle(handle, authorizer, ALICE, ProduceRequest((_batch("b"), _batch("a")), request_id=3))
    assert isinstance(merged, Pending) and merged is not later and not merged.done
    assert [b.topic for b in sent[0].batches] == ["a"]
    later.complete(ProduceResponse(3, (PartitionResponse("a", 0, 0, base_offset=41),)))
    assert merged.done and _codes(merged.response.responses) == [("b", 0, TOPIC_DENIED), ("a", 0, 0)]
    assert merged.response.responses[1].base_offset == 41


# ---------------------------------------------------------------- metadata and topics


def test_metadata_of_every_topic_shows_only_described_ones(broker):
    broker.authorizer.allow(Op.DESCRIBE, Kind.TOPIC, "b")
    answer = broker.handle_from(ALICE, MetadataRequest(None))
    assert [t.name for t in answer.topics] == ["b"]


def test_metadata_of_named_topics_refuses_the_undescribed(broker):
    broker.authorizer.allow(Op.DESCRIBE, Kind.TOPIC, "a")
    answer = broker.handle_from(ALICE, MetadataRequest(("b", "a")))
    assert [(t.name, t.error_code, t.partitions) for t in answer.topics] == [("b", TOPIC_DENIED, 0), ("a", 0, 2)]


def test_a_missing_topic_is_made_only_with_create_on_the_cluster_or_the_topic(broker):
    model = broker.authorizer.allow(Op.DESCRIBE, Kind.TOPIC, "new1", "new2", "new3")
    answer = broker.handle_from(ALICE, MetadataRequest(("new1",)))
    assert [(t.name, t.error_code) for t in answer.topics] == [("new1", TOPIC_DENIED)]
    assert "new1" not in broker.topics
    model.allow(Op.CREATE, Kind.TOPIC, "new2")
    answer = broker.handle_from(ALICE, MetadataRequest(("new1", "new2")))
    assert [(t.name, t.error_code) for t in answer.topics] == [("new1", TOPIC_DENIED), ("new2", 0)]
    assert "new2" in broker.topics and "new1" not in broker.topics
    model.allow_cluster(Op.CREATE)
    assert broker.handle_from(ALICE, MetadataRequest(("new3",))).topics[0].error_code == 0
    assert "new3" in broker.topics


def test_without_auto_creation_a_missing_topic_is_unknown_not_refused():
    with Broker({"a": 1}, auto_create_topics=False) as plain:
        plain.authorizer = AllowSet().allow(Op.DESCRIBE, Kind.TOPIC, "nope")
        answer = plain.handle_from(ALICE, MetadataRequest(("nope",)))
        assert answer.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        no_auto = plain.handle_from(ALICE, MetadataRequest(("nope",), allow_auto_topic_creation=False))
        assert no_auto.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_needs_create_on_the_cluster_or_each_topic(broker):
    model = broker.authorizer.allow(Op.CREATE, Kind.TOPIC, "x")
    answer = broker.handle_from(ALICE, CreateTopicsRequest((NewTopic("y", 1), NewTopic("x", 1)), request_id=4))
    assert [(r.name, r.error_code, r.error_message) for r in answer.results] == [
        ("y", TOPIC_DENIED, "Authorization failed."), ("x", 0, None)]
    assert "x" in broker.topics and "y" not in broker.topics
    assert (answer.results[1].configs, answer.results[1].partitions) == ((), -1)  # no DESCRIBE_CONFIGS on x
    model.allow_cluster(Op.CREATE)
    model.allow(Op.DESCRIBE_CONFIGS, Kind.TOPIC, "y")
    answer = broker.handle_from(ALICE, CreateTopicsRequest((NewTopic("y", 1),)))
    assert answer.results[0].error_code == 0 and answer.results[0].configs != () and answer.results[0].partitions == 1


# ---------------------------------------------------------------- transactions


def test_init_producer_id_without_transactional_id_needs_idempotent_write_or_write_on_a_topic(broker):
    assert broker.handle_from(ALICE, InitProducerIdRequest(request_id=2)).error_code == CLUSTER_DENIED
    broker.authorizer.allow(Op.WRITE, Kind.TOPIC, "b")
    assert broker.handle_from(ALICE, InitProducerIdRequest()).error_code == 0
    with Broker({"a": 1}) as other:
        other.authorizer = AllowSet().allow_cluster(Op.IDEMPOTENT_WRITE)
        assert other.handle_from(ALICE, InitProducerIdRequest()).error_code == 0


def test_a_transactional_flow_refused_at_each_step(broker):
    model = broker.authorizer
    assert broker.handle_from(ALICE, FindCoordinatorRequest("tx", TRANSACTION_KEY)).error_code == TXN_DENIED
    assert broker.handle_from(ALICE, InitProducerIdRequest(transactional_id="tx")).error_code == TXN_DENIED
    model.allow(Op.WRITE, Kind.TRANSACTIONAL_ID, "tx")  # no implied DESCRIBE in this model (the authorizer's job)
    assert broker.handle_from(ALICE, FindCoordinatorRequest("tx", TRANSACTION_KEY)).error_code == TXN_DENIED
    model.allow(Op.DESCRIBE, Kind.TRANSACTIONAL_ID, "tx")
    assert broker.handle_from(ALICE, FindCoordinatorRequest("tx", TRANSACTION_KEY)).error_code == 0
    init = broker.handle_from(ALICE, InitProducerIdRequest(transactional_id="tx"))
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch

    def add(*partitions, tid="tx"):
        return _codes(broker.handle_from(ALICE, AddPartitionsToTxnRequest(tid, pid, epoch, partitions)).results)
    assert add(("a", 0), tid="other") == [("a", 0, TXN_DENIED)]
    model.allow(Op.WRITE, Kind.TOPIC, "a")
    assert add(("a", 0), ("b", 0), ("a", 9)) == [("a", 0, ErrorCode.OPERATION_NOT_ATTEMPTED), ("b", 0, TOPIC_DENIED),
                                                 ("a", 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert add(("__consumer_offsets", 0)) == [("__consumer_offsets", 0, TOPIC_DENIED)]  # never a client's to add
    assert broker.txn_coordinator.describe_transactions(["tx"])[0].topic_partitions == ()  # nothing was added
    assert add(("a", 0)) == [("a", 0, 0)]

    offsets = AddOffsetsToTxnRequest("tx", pid, epoch, "g")
    assert broker.handle_from(ALICE, offsets).error_code == GROUP_DENIED
    model.allow(Op.READ, Kind.GROUP, "g")
    assert broker.handle_from(ALICE, offsets).error_code == 0

    def commit(tid="tx", group="g"):
        request = TxnOffsetCommitRequest(tid, group, pid, epoch, (OffsetEntry("a", 0, 5), OffsetEntry("b", 0, 6)))
        return _codes(broker.handle_from(ALICE, request).results)
    assert commit(tid="other") == [("a", 0, TXN_DENIED), ("b", 0, TXN_DENIED)]
    assert commit(group="h") == [("a", 0, GROUP_DENIED), ("b", 0, GROUP_DENIED)]
    model.allow(Op.READ, Kind.TOPIC, "a")
    assert commit() == [("a", 0, 0), ("b", 0, TOPIC_DENIED)]

    assert broker.handle_from(ALICE, EndTxnRequest("other", pid, epoch, True)).error_code == TXN_DENIED
    assert broker.handle_from(ALICE, EndTxnRequest("tx", pid, epoch, True)).error_code == 0


def test_describe_and_list_transactions_show_only_described_ids_and_topics(broker):
    for tid in ("t1", "t2"):
        init = broker.handle(InitProducerIdRequest(transactional_id=tid))
        broker.handle(AddPartitionsToTxnRequest(tid, init.producer_id, init.producer_epoch, (("a", 0), ("b", 0))))
    broker.authorizer.allow(Op.DESCRIBE, Kind.TRANSACTIONAL_ID, "t2").allow(Op.DESCRIBE, Kind.TOPIC, "b")
    answer = broker.handle_from(ALICE, DescribeTransactionsRequest(("t1", "t2")))
    assert [(t.transactional_id, t.error_code) for t in answer.transactions] == [("t1", TXN_DENIED), ("t2", 0)]
    assert answer.transactions[1].topic_partitions == (("b", 0),)
    listed = broker.handle_from(ALICE, ListTransactionsRequest())
    assert [t.transactional_id for t in listed.transactions] == ["t2"]


# ---------------------------------------------------------------- groups and offsets


def test_offset_commit_and_fetch(broker):
    model = broker.authorizer
    commit = OffsetCommitRequest("g", (OffsetEntry("a", 0, 3), OffsetEntry("b", 0, 4)))
    assert _codes(broker.handle_from(ALICE, commit).results) == [("a", 0, GROUP_DENIED), ("b", 0, GROUP_DENIED)]
    model.allow(Op.READ, Kind.GROUP, "g").allow(Op.READ, Kind.TOPIC, "a")
    assert _codes(broker.handle_from(ALICE, commit).results) == [("a", 0, 0), ("b", 0, TOPIC_DENIED)]
    broker.handle(OffsetCommitRequest("g", (OffsetEntry("b", 0, 4),)))
    # READ on the group implies DESCRIBE in Kafka's authorizer, not in this model: DESCRIBE is asked for.
    assert broker.handle_from(ALICE, OffsetFetchRequest("g")).error_code == GROUP_DENIED
    model.allow(Op.DESCRIBE, Kind.GROUP, "g").allow(Op.DESCRIBE, Kind.TOPIC, "a")
    every = broker.handle_from(ALICE, OffsetFetchRequest("g"))
    assert [(o.topic, o.offset) for o in every.offsets] == [("a", 3)]  # b's offset is not shown
    named = broker.handle_from(ALICE, OffsetFetchRequest("g", (("b", 0), ("a", 0))))
    assert [(o.topic, o.offset, o.error_code) for o in named.offsets] == [("b", -1, TOPIC_DENIED), ("a", 3, 0)]


def test_find_coordinator_of_a_group_needs_describe(broker):
    assert broker.handle_from(ALICE, FindCoordinatorRequest("g", GROUP_KEY)).error_code == GROUP_DENIED
    broker.authorizer.allow(Op.DESCRIBE, Kind.GROUP, "g")
    assert broker.handle_from(ALICE, FindCoordinatorRequest("g", GROUP_KEY)).error_code == 0


def test_group_membership_needs_read_on_the_group(broker):
    join = JoinGroupRequest("g", 10_000, 10_000, "consumer", (("range", b""),), request_id=9)
    refused = broker.handle_from(ALICE, join)
    assert (refused.error_code, refused.member_id, refused.request_id) == (GROUP_DENIED, "", 9)
    for request in (SyncGroupRequest("g", 1, "m"), HeartbeatRequest("g", 1, "m"),
                    LeaveGroupRequest("g", (LeavingMember("m"),)), ConsumerGroupHeartbeatRequest("g", "m", 0)):
        assert broker.handle_from(ALICE, request).error_code == GROUP_DENIED, request
    broker.authorizer.allow(Op.READ, Kind.GROUP, "g")
    assert broker.handle_from(ALICE, join).error_code == ErrorCode.MEMBER_ID_REQUIRED  # the coordinator's answer
    assert broker.handle_from(ALICE, HeartbeatRequest("g", 1, "m")).error_code != GROUP_DENIED


def test_group_admin_apis(broker):
    broker.handle(OffsetCommitRequest("g1", (OffsetEntry("a", 0, 1), OffsetEntry("b", 0, 1))))
    broker.handle(OffsetCommitRequest("g2", (OffsetEntry("a", 0, 1),)))
    model = broker.authorizer.allow(Op.DESCRIBE, Kind.GROUP, "g2")
    described = broker.handle_from(ALICE, DescribeGroupsRequest(("g1", "g2")))
    assert [(g.group_id, g.error_code) for g in described.groups] == [("g1", GROUP_DENIED), ("g2", 0)]
    consumer = broker.handle_from(ALICE, ConsumerGroupDescribeRequest(("g1", "g2")))
    assert [(g.group_id, g.error_code == GROUP_DENIED) for g in consumer.groups] == [("g1", True), ("g2", False)]
    assert [g.group_id for g in broker.handle_from(ALICE, ListGroupsRequest()).groups] == ["g2"]
    model.allow_cluster(Op.DESCRIBE)
    assert sorted(g.group_id for g in broker.handle_from(ALICE, ListGroupsRequest()).groups) == ["g1", "g2"]

    delete = OffsetDeleteRequest("g1", (("a", 0), ("b", 0)))
    assert broker.handle_from(ALICE, delete).error_code == GROUP_DENIED
    model.allow(Op.DELETE, Kind.GROUP, "g1").allow(Op.READ, Kind.TOPIC, "b")
    answer = broker.handle_from(ALICE, delete)
    assert (answer.error_code, answer.results) == (0, (("a", 0, TOPIC_DENIED), ("b", 0, 0)))
    deleted = broker.handle_from(ALICE, DeleteGroupsRequest(("g2", "g1")))
    assert deleted.results == (("g2", GROUP_DENIED), ("g1", 0))


# ---------------------------------------------------------------- admin, configs and the cluster


def test_delete_records_and_describe_producers_per_topic(broker):
    broker.handle(ProduceRequest((_batch("a"), _batch("b"))))
    broker.authorizer.allow(Op.DELETE, Kind.TOPIC, "a").allow(Op.READ, Kind.TOPIC, "b")
    deleted = broker.handle_from(ALICE, DeleteRecordsRequest((("b", 0, -1), ("a", 0, -1))))
    assert [(d.topic, d.error_code, d.low_watermark) for d in deleted.partitions] == [("b", TOPIC_DENIED, -1),
                                                                                      ("a", 0, 1)]
    assert broker.log("b", 0).log_start_offset == 0
    producers = broker.handle_from(ALICE, DescribeProducersRequest((("a", 0), ("b", 0))))
    assert _codes(producers.partitions) == [("a", 0, TOPIC_DENIED), ("b", 0, 0)]


def test_configs_on_topics_and_the_cluster(broker):
    model = broker.authorizer.allow(Op.DESCRIBE_CONFIGS, Kind.TOPIC, "a")
    request = DescribeConfigsRequest((DescribeResource(ResourceType.BROKER, "0"), DescribeResource(ResourceType.TOPIC,
                                      "b"), DescribeResource(ResourceType.TOPIC, "a", ("retention.ms",))))
    answer = broker.handle_from(ALICE, request)
    assert [(r.resource_name, r.error_code) for r in answer.results] == [("0", CLUSTER_DENIED), ("b", TOPIC_DENIED),
                                                                         ("a", 0)]
    assert [c.name for c in answer.results[2].configs] == ["retention.ms"]
    alter = IncrementalAlterConfigsRequest((IncrementalResource(ResourceType.TOPIC, "a", (
        ConfigChange("retention.ms", 0, "1000"),)), IncrementalResource(ResourceType.BROKER, "0", ())))
    assert [r.error_code for r in broker.handle_from(ALICE, alter).results] == [TOPIC_DENIED, CLUSTER_DENIED]
    assert broker.topic_configs["a"].retention_ms != 1000
    model.allow(Op.ALTER_CONFIGS, Kind.TOPIC, "a")
    assert [r.error_code for r in broker.handle_from(ALICE, alter).results] == [0, CLUSTER_DENIED]
    assert broker.topic_configs["a"].retention_ms == 1000
    legacy = AlterConfigsRequest((AlterResource(ResourceType.BROKER_LOGGER, "0", ()),))
    assert broker.handle_from(ALICE, legacy).results[0].error_code == ErrorCode.INVALID_REQUEST


def test_inter_broker_requests_need_cluster_action(broker):
    leader = LeaderAndIsrRequest(0, 1, 0, (LeaderAndIsrPartition("a", 0, 1, 0, 1, (0,), 0, (0,)),), ())
    answer = broker.handle_from(ALICE, leader)
    assert (answer.error_code, answer.partitions) == (CLUSTER_DENIED, (("a", 0, CLUSTER_DENIED),))
    assert broker.handle_from(ALICE, UpdateMetadataRequest(0, 1, 0, (), ())).error_code == CLUSTER_DENIED
    stop = broker.handle_from(ALICE, StopReplicaRequest(0, 1, 0, (StopReplicaPartition("a", 0, -1, True),)))
    assert stop.partitions == (("a", 0, CLUSTER_DENIED),)
    elect = broker.handle_from(ALICE, ElectLeadersRequest(0, (("a", 0),)))
    assert elect.results == (("a", 0, CLUSTER_DENIED, None),)
    markers = WriteTxnMarkersRequest((TxnMarker(5, 0, True, 0, (("a", 0),)),))
    assert _codes(broker.handle_from(ALICE, markers).markers[0].responses) == [("a", 0, CLUSTER_DENIED)]
    assert _end(broker, "a") == 0
    epochs = OffsetForLeaderEpochRequest(-1, (EpochQuery("a", 0, -1, 0), EpochQuery("b", 0, -1, 0)))
    broker.authorizer.allow(Op.DESCRIBE, Kind.TOPIC, "b")
    assert _codes(broker.handle_from(ALICE, epochs).partitions) == [("a", 0, TOPIC_DENIED), ("b", 0, 0)]
    broker.authorizer.allow_cluster(Op.CLUSTER_ACTION)
    assert _codes(broker.handle_from(ALICE, epochs).partitions) == [("a", 0, 0), ("b", 0, 0)]
    assert broker.handle_from(ALICE, markers).markers[0].responses[0].error_code == 0
    assert _end(broker, "a") == 1  # the marker written


def test_an_unknown_request_is_refused_not_passed_on():
    sent = []
    with pytest.raises(RequestRefused, match="object has no authorization check"):
        authorized_handle(sent.append, AllowSet(), ALICE, object())
    assert sent == []


def test_a_refusal_is_logged_with_principal_host_operation_and_resource(broker, caplog):
    with caplog.at_level(logging.INFO, logger="idemcore.broker.security.request_context"):
        broker.handle_from(ALICE, ProduceRequest((_batch("b"),)))
    (line,) = [r.getMessage() for r in caplog.records if "Denied" in r.getMessage()]
    assert line == ("Principal = User:alice is Denied Operation = Write from host = 10.0.0.7 on resource = "
                    "Topic:LITERAL:b for request = Produce")


def test_a_kip848_heartbeat_and_describe_need_describe_on_the_subscribed_topics(broker):
    model = broker.authorizer.allow(Op.READ, Kind.GROUP, "cg").allow(Op.DESCRIBE, Kind.TOPIC, "a")
    join = ConsumerGroupHeartbeatRequest("cg", "m1", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("a", "b"),
                                         owned_partitions=())
    refused = broker.handle_from(ALICE, join)
    assert refused.error_code == TOPIC_DENIED and "'b'" in refused.error_message
    assert broker.handle(ConsumerGroupDescribeRequest(("cg",))).groups[0].members == ()  # it did not join
    model.allow(Op.DESCRIBE, Kind.TOPIC, "b")
    assert broker.handle_from(ALICE, join).error_code == 0
    model.allow(Op.DESCRIBE, Kind.GROUP, "cg")
    (described,) = broker.handle_from(ALICE, ConsumerGroupDescribeRequest(("cg",))).groups
    assert described.error_code == 0 and [m.member_id for m in described.members] == ["m1"]
    model.allowed.discard(("User:alice", Op.DESCRIBE, Kind.TOPIC, "b"))
    (hidden,) = broker.handle_from(ALICE, ConsumerGroupDescribeRequest(("cg",))).groups
    assert (hidden.error_code, hidden.members) == (TOPIC_DENIED, ())


def test_a_produce_from_the_wire_carries_its_transactional_id():
    from idemcore.net.wire.api import WireContext
    from idemcore.net.wire.client import encode_produce
    from idemcore.net.wire.produce import PRODUCE

    ctx = WireContext(0, "127.0.0.1", 9092, "idemcore", lambda: {"a": 1})
    batch = _batch("a", producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    body = encode_produce(ProduceRequest((batch,)), 9, transactional_id="tx")
    message, _ = PRODUCE.to_message(ctx, 9, 1, body)
    assert message.transactional_id == "tx" and message.batches[0].is_transactional
    assert PRODUCE.to_message(ctx, 9, 1, encode_produce(ProduceRequest((_batch("a"),)), 9))[0].transactional_id is None


def test_checks_kafka_asks_quietly_log_nothing(broker, caplog):
    broker.authorizer.allow(Op.DESCRIBE, Kind.TOPIC, "new").allow(Op.CREATE, Kind.TOPIC, "new")
    with caplog.at_level(logging.INFO, logger="idemcore.broker.security.request_context"):
        assert broker.handle_from(ALICE, MetadataRequest(None)).topics == ()  # the filter of every topic: silent
        assert broker.handle_from(ALICE, MetadataRequest(("new",))).topics[0].error_code == 0  # CREATE on cluster
        epochs = OffsetForLeaderEpochRequest(-1, ())
        assert broker.handle_from(ALICE, epochs).partitions == ()  # CLUSTER_ACTION first, then per topic
    assert [r.getMessage() for r in caplog.records if "Denied" in r.getMessage()] == []


def test_in_a_cluster_the_topics_known_are_the_metadata_cache_s(broker, monkeypatch):
    from types import SimpleNamespace

    from idemcore.broker.metadata_cache import MetadataCache
    from idemcore.net.replication import UpdateMetadataPartition

    cache = MetadataCache(0)
    cache.update(UpdateMetadataRequest(1, 1, 0, (UpdateMetadataPartition("far", 0, 1, 1, 0, (1,), 0, (1,)),
                                                 UpdateMetadataPartition("far", 1, 1, 1, 0, (1,), 0, (1,))), ()))
    monkeypatch.setattr(broker, "cluster", SimpleNamespace(metadata=cache))
    assert broker._partition_count("far") == 2  # held by broker 1 only: known from the cache, not the log dir
    assert broker._partition_count("a") is None  # this broker's logs, but not in the cluster's metadata


def test_a_table_entry_builds_a_cluster_checked_refusal():
    from idemcore.broker.security.request_authorization import CLUSTER_REFUSALS
    from tests.test_request_authorization_props import CreateAclsRequest, CreateAclsResponse

    kept = CLUSTER_REFUSALS["CreateAclsRequest"]  # the real one, put back after
    CLUSTER_REFUSALS["CreateAclsRequest"] = lambda request, code: CreateAclsResponse((code,), request.request_id)
    try:
        refused = authorized_handle(lambda r: None, AllowSet(), ALICE, CreateAclsRequest(request_id=6))
        assert refused == CreateAclsResponse((CLUSTER_DENIED,), 6)
    finally:
        CLUSTER_REFUSALS["CreateAclsRequest"] = kept
