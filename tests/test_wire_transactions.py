"""The transaction APIs through kio and back (idemcore.net.wire.transactions), against a real Broker: each request
is built with kio, framed, read back, translated, answered by Broker.handle, translated back, framed, and the
answer decoded by kafka-python 3's independent codec (docs/research/kio-evaluation.md §1). Also a whole
transaction (with its offsets: idemcore.net.wire.offsets) at the versions real clients use."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

# Importing kafka-python's message modules registers their response classes by api key (decode_response).
import kafka.protocol.consumer.group
import kafka.protocol.metadata.find_coordinator
import kafka.protocol.producer.transaction  # noqa: F401
import pytest
from kafka.protocol.api_header import RequestHeader as KafkaPythonRequestHeader
from kio.index import load_request_schema, load_response_schema

from idemcore.broker import Broker
from idemcore.net.messages import FindCoordinatorResponse, InitProducerIdResponse
from idemcore.net.wire.api import WireApi, WireContext, handle_each
from idemcore.net.wire.frames import make, nested, read_request, request_frame, response_frame
from idemcore.net.wire.offsets import OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT
from idemcore.net.wire.transactions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
)
from idemcore.protocol.codes import ErrorCode as E

NODE_ID, HOST, PORT = 3, "broker.example", 19093


class Wire:
    """A client of ``broker`` that speaks only frames: every call goes through both translations and both codecs."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.ctx = WireContext(NODE_ID, HOST, PORT, "cluster", lambda: broker.topics)
        self._ids = itertools.count(1000)

    def call(self, api: WireApi, version: int, **fields: Any) -> Any:
        assert api.min_version <= version <= api.max_version
        correlation_id = next(self._ids)
        frame = request_frame(api.key, version, correlation_id, "wire-test", make(
            load_request_schema(api.key, version), **fields))
        header, body = read_request(frame[4:])
        assert (header.request_api_key, header.request_api_version, header.correlation_id) == \
            (api.key, version, correlation_id)
        message, carry = api.to_message(self.ctx, version, correlation_id, body)
        response = handle_each(self.broker.handle, message)
        for one, answered in zip(*((message, response) if type(message) is tuple else ((message,), (response,))),
                                 strict=True):
            assert one.request_id == correlation_id
            assert answered is not None and answered.request_id == correlation_id
        translated = api.to_wire(self.ctx, version, body, response, carry)
        out = b"".join(response_frame(correlation_id, translated))
        decoded = decode_response(api.key, version, out)
        assert decoded.header.correlation_id == correlation_id
        # kafka-python writes the same bytes back: nothing was lost or misread on the way.
        assert decoded.API_VERSION == version and decoded.encode(header=True, framed=True) == out
        return decoded


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    """A response frame (with its size) decoded by kafka-python 3: its class for ``api_key`` at ``version``."""
    cls = KafkaPythonRequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=0,
                                   client_id="x").get_response_class()
    assert cls is not None, f"kafka-python has no response class for api key {api_key}"
    return cls.decode(frame, header=True, framed=True)


def entity(api: WireApi, version: int, kind: str, /, **fields: Any) -> Any:
    """A nested request entity (a topic, a group...) of ``api`` at ``version``."""
    return make(nested(load_request_schema(api.key, version), kind), **fields)


def txn_topics(version: int, *partitions: tuple[str, int]) -> tuple[Any, ...]:
    """AddPartitionsToTxn's ``v3_and_below_topics`` for ``partitions``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return tuple(entity(ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnTopic", name=name, partitions=tuple(ps))
                 for name, ps in by_topic.items())


def partition_codes(results_by_topic: Any) -> dict[tuple[str, int], int]:
    return {(topic.name, partition.partition_index): partition.partition_error_code
            for topic in results_by_topic for partition in topic.results_by_partition}


@pytest.fixture
def broker(tmp_path):
    with Broker({"t": 2}, data_dir=tmp_path, broker_id=NODE_ID, fsync=False, transaction_state_partitions=4,
                offsets_topic_partitions=4) as broker:
        yield broker


@pytest.fixture
def wire(broker):
    return Wire(broker)


def versions(api: WireApi) -> list[int]:
    return list(range(api.min_version, api.max_version + 1))


def init(wire: Wire, transactional_id: str = "tx", version: int = 4) -> tuple[int, int]:
    """The producer id and epoch for ``transactional_id``. Like a client, retried once on CONCURRENT_TRANSACTIONS
    (an ongoing transaction of an older instance is aborted first; in process the retry succeeds at once)."""
    for _ in range(2):
        answer = wire.call(INIT_PRODUCER_ID, version, transactional_id=transactional_id,
                           transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1)
        if answer.error_code != E.CONCURRENT_TRANSACTIONS:
            break
    assert answer.error_code == E.NONE
    return answer.producer_id, answer.producer_epoch


# ---------------------------------------------------------------- versions served


@pytest.mark.parametrize(("api", "key", "low", "high"), [
    (INIT_PRODUCER_ID, 22, 0, 5), (FIND_COORDINATOR, 10, 0, 6), (ADD_PARTITIONS_TO_TXN, 24, 0, 3),
    (ADD_OFFSETS_TO_TXN, 25, 0, 4), (END_TXN, 26, 0, 4)])
def test_served_versions_exist_in_kio(api, key, low, high):
    assert (api.key, api.min_version, api.max_version) == (key, low, high)
    for version in range(low, high + 1):
        assert load_request_schema(key, version).__version__ == version
        assert load_response_schema(key, version).__version__ == version


# ---------------------------------------------------------------- InitProducerId


@pytest.mark.parametrize("version", versions(INIT_PRODUCER_ID))
def test_init_producer_id_idempotent(wire, version):
    first = wire.call(INIT_PRODUCER_ID, version, transactional_id=None, transaction_timeout=datetime.timedelta(0),
                      producer_id=-1, producer_epoch=-1)
    second = wire.call(INIT_PRODUCER_ID, version, transactional_id=None, transaction_timeout=datetime.timedelta(0))
    assert (first.error_code, first.producer_epoch, second.error_code, second.producer_epoch) == (0, 0, 0, 0)
    assert first.producer_id >= 0 and second.producer_id > first.producer_id


@pytest.mark.parametrize("version", versions(INIT_PRODUCER_ID))
def test_init_producer_id_transactional_bumps_the_epoch(wire, version):
    producer_id, epoch = init(wire, "tx", version)
    again = wire.call(INIT_PRODUCER_ID, version, transactional_id="tx",
                      transaction_timeout=datetime.timedelta(seconds=30))
    assert (again.error_code, again.producer_id, again.producer_epoch) == (E.NONE, producer_id, epoch + 1)


@pytest.mark.parametrize("version", [v for v in versions(INIT_PRODUCER_ID) if v >= 3])
def test_init_producer_id_carries_the_current_id_and_epoch(wire, broker, version):
    """v3+ (KIP-360): the producer's current id and epoch reach the coordinator. The current epoch is bumped, the
    one before it is a retry of that bump (answered the current epoch, as Kafka), an older one is fenced."""
    producer_id, epoch = init(wire, "tx", version)

    def bump(expected_epoch: int) -> tuple[int, int, int]:
        answer = wire.call(INIT_PRODUCER_ID, version, transactional_id="tx",
                           transaction_timeout=datetime.timedelta(seconds=60), producer_id=producer_id,
                           producer_epoch=expected_epoch)
        return answer.error_code, answer.producer_id, answer.producer_epoch

    assert bump(epoch) == (E.NONE, producer_id, epoch + 1)
    assert bump(epoch) == (E.NONE, producer_id, epoch + 1)  # a retry
    assert bump(epoch + 1) == (E.NONE, producer_id, epoch + 2)
    fenced = E.PRODUCER_FENCED if version >= 4 else E.INVALID_PRODUCER_EPOCH
    assert bump(epoch) == (fenced, -1, -1)


def test_init_producer_id_timeout_reaches_the_coordinator(wire):
    """transaction_timeout (a kio timedelta) becomes the message's milliseconds: above the broker's maximum it is
    refused (INVALID_TRANSACTION_TIMEOUT)."""
    limit = wire.broker.transaction_max_timeout_ms
    answer = wire.call(INIT_PRODUCER_ID, 4, transactional_id="tx",
                       transaction_timeout=datetime.timedelta(milliseconds=limit + 1))
    assert answer.error_code == E.INVALID_TRANSACTION_TIMEOUT
    answer = wire.call(INIT_PRODUCER_ID, 0, transactional_id="tx",
                       transaction_timeout=datetime.timedelta(milliseconds=limit))
    assert answer.error_code == E.NONE


# ---------------------------------------------------------------- FindCoordinator


@pytest.mark.parametrize(("version", "key_type"), [(version, key_type) for version in versions(FIND_COORDINATOR)
                                                    for key_type in (0, 1) if version or not key_type])  # v0: groups
def test_find_coordinator_names_this_node(wire, version, key_type):
    if version >= 4:
        keys = ("first", "second", "third")
        answer = wire.call(FIND_COORDINATOR, version, key_type=key_type, coordinator_keys=keys)
        assert [(c.key, c.error_code, c.node_id, c.host, c.port, c.error_message) for c in answer.coordinators] \
            == [(key, 0, NODE_ID, HOST, PORT, None) for key in keys]
    else:
        answer = wire.call(FIND_COORDINATOR, version, key="g-or-tx", key_type=key_type)
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (0, NODE_ID, HOST, PORT)
        if version >= 1:
            assert answer.error_message is None


@pytest.mark.parametrize("version", [v for v in versions(FIND_COORDINATOR) if v >= 1])
def test_find_coordinator_unknown_key_type(wire, version):
    """A key type the broker does not know: INVALID_REQUEST and no node, for every key of the request."""
    if version >= 4:
        answer = wire.call(FIND_COORDINATOR, version, key_type=7, coordinator_keys=("a", "b"))
        assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in answer.coordinators] == \
            [("a", E.INVALID_REQUEST, -1, "", -1), ("b", E.INVALID_REQUEST, -1, "", -1)]
        assert all(c.error_message for c in answer.coordinators)
    else:
        answer = wire.call(FIND_COORDINATOR, version, key="a", key_type=7)
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (E.INVALID_REQUEST, -1, "", -1)
        assert answer.error_message


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_batched_without_keys(wire, version):
    answer = wire.call(FIND_COORDINATOR, version, key_type=1, coordinator_keys=())
    assert answer.coordinators == []


def test_find_coordinator_batched_asks_the_broker_once_per_key(wire):
    """The v4+ translation sends each key to the broker as its own message (in a cluster each key may have another
    coordinator) and answers each key from its own answer, naming the node the broker named."""
    body = make(load_request_schema(10, 6), key_type=1, coordinator_keys=("a", "b"))
    messages, keys = FIND_COORDINATOR.to_message(wire.ctx, 6, 9, body)
    assert [(m.key, m.key_type, m.request_id) for m in messages] == [("a", 1, 9), ("b", 1, 9)]
    assert keys == ("a", "b")
    answers = (FindCoordinatorResponse(E.NOT_COORDINATOR, request_id=9, error_message="moved"),
               FindCoordinatorResponse(E.NONE, 7, "elsewhere.example", 9093, request_id=9))
    mixed = FIND_COORDINATOR.to_wire(wire.ctx, 6, body, answers, keys)
    assert [(c.key, c.error_code, c.node_id, c.host, c.port, c.error_message) for c in mixed.coordinators] == \
        [("a", E.NOT_COORDINATOR, -1, "", -1, "moved"), ("b", E.NONE, 7, "elsewhere.example", 9093, None)]
    one = make(load_request_schema(10, 6), key_type=1, coordinator_keys=("a",))
    message, keys = FIND_COORDINATOR.to_message(wire.ctx, 6, 9, one)
    assert (message.key, keys) == ("a", ("a",))
    here = FIND_COORDINATOR.to_wire(wire.ctx, 6, one, FindCoordinatorResponse(E.NONE, request_id=9), keys)
    assert [(c.node_id, c.port) for c in here.coordinators] == [(wire.ctx.node_id, wire.ctx.port)]


# ---------------------------------------------------------------- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn


@pytest.mark.parametrize("version", versions(ADD_PARTITIONS_TO_TXN))
def test_add_partitions_to_txn(wire, version):
    producer_id, epoch = init(wire)
    added = wire.call(ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id="tx",
                      v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                      v3_and_below_topics=txn_topics(version, ("t", 1), ("t", 0)))
    assert [(t.name, [(p.partition_index, p.partition_error_code) for p in t.results_by_partition])
            for t in added.results_by_topic_v3_and_below] == [("t", [(1, E.NONE), (0, E.NONE)])]
    # An unknown partition refuses the request: the others are not attempted.
    refused = wire.call(ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id="tx",
                        v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                        v3_and_below_topics=txn_topics(version, ("t", 0), ("nope", 4)))
    assert partition_codes(refused.results_by_topic_v3_and_below) == {
        ("t", 0): E.OPERATION_NOT_ATTEMPTED, ("nope", 4): E.UNKNOWN_TOPIC_OR_PARTITION}


@pytest.mark.parametrize("version", versions(ADD_PARTITIONS_TO_TXN))
def test_add_partitions_to_txn_fenced(wire, version):
    """A fenced producer: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before (which older clients know)."""
    producer_id, epoch = init(wire)
    init(wire)  # a newer instance
    fenced = wire.call(ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id="tx",
                       v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                       v3_and_below_topics=txn_topics(version, ("t", 0)))
    expected = E.PRODUCER_FENCED if version >= 2 else E.INVALID_PRODUCER_EPOCH
    assert partition_codes(fenced.results_by_topic_v3_and_below) == {("t", 0): expected}


@pytest.mark.parametrize("version", versions(ADD_OFFSETS_TO_TXN))
def test_add_offsets_to_txn(wire, version):
    producer_id, epoch = init(wire)
    answer = wire.call(ADD_OFFSETS_TO_TXN, version, transactional_id="tx", producer_id=producer_id,
                       producer_epoch=epoch, group_id="group")
    assert answer.error_code == E.NONE
    unknown = wire.call(ADD_OFFSETS_TO_TXN, version, transactional_id="other", producer_id=producer_id,
                        producer_epoch=epoch, group_id="group")
    assert unknown.error_code == E.INVALID_PRODUCER_ID_MAPPING
    init(wire)
    fenced = wire.call(ADD_OFFSETS_TO_TXN, version, transactional_id="tx", producer_id=producer_id,
                       producer_epoch=epoch, group_id="group")
    assert fenced.error_code == (E.PRODUCER_FENCED if version >= 2 else E.INVALID_PRODUCER_EPOCH)


@pytest.mark.parametrize("version", versions(END_TXN))
def test_end_txn(wire, version):
    producer_id, epoch = init(wire)
    wire.call(ADD_PARTITIONS_TO_TXN, 0, v3_and_below_transactional_id="tx", v3_and_below_producer_id=producer_id,
              v3_and_below_producer_epoch=epoch, v3_and_below_topics=txn_topics(0, ("t", 0)))
    committed = wire.call(END_TXN, version, transactional_id="tx", producer_id=producer_id, producer_epoch=epoch,
                          committed=True)
    assert committed.error_code == E.NONE
    # Nothing open now: an abort is refused (INVALID_TXN_STATE), and a stale epoch is fenced.
    idle = wire.call(END_TXN, version, transactional_id="tx", producer_id=producer_id, producer_epoch=epoch,
                     committed=False)
    assert idle.error_code == E.INVALID_TXN_STATE
    init(wire)
    fenced = wire.call(END_TXN, version, transactional_id="tx", producer_id=producer_id, producer_epoch=epoch,
                       committed=True)
    assert fenced.error_code == (E.PRODUCER_FENCED if version >= 2 else E.INVALID_PRODUCER_EPOCH)


def test_init_producer_id_to_wire_keeps_errors_without_an_id(wire):
    body = make(load_request_schema(22, 1), transactional_id="tx", transaction_timeout=datetime.timedelta(0))
    answer = InitProducerIdResponse(E.PRODUCER_FENCED, request_id=1)
    translated = INIT_PRODUCER_ID.to_wire(wire.ctx, 1, body, answer, None)
    assert (translated.error_code, translated.producer_id, translated.producer_epoch) == \
        (E.INVALID_PRODUCER_EPOCH, -1, -1)


# ---------------------------------------------------------------- a whole transaction, at real clients' versions

#: The versions each client sends (docs/research/kio-evaluation.md §3). librdkafka: AddOffsetsToTxn 0,
#: TxnOffsetCommit 3 and OffsetFetch 9 are its source's maxima (not logged there); kafka-python 3: those not logged
#: are the maxima served; aiokafka uses v0 or the lowest served throughout.
CLIENTS = {
    "librdkafka-2.16": {"find_coordinator": 2, "init_producer_id": 4, "add_partitions": 0, "add_offsets": 0,
                        "txn_offset_commit": 3, "end_txn": 1, "offset_commit": 9, "offset_fetch": 9},
    "aiokafka-0.14": {"find_coordinator": 1, "init_producer_id": 0, "add_partitions": 0, "add_offsets": 0,
                      "txn_offset_commit": 0, "end_txn": 0, "offset_commit": 2, "offset_fetch": 1},
    "kafka-python-3": {"find_coordinator": 6, "init_producer_id": 4, "add_partitions": 3, "add_offsets": 4,
                       "txn_offset_commit": 4, "end_txn": 3, "offset_commit": 9, "offset_fetch": 9},
}


def find(wire: Wire, version: int, key: str, key_type: int) -> tuple[int, str, int]:
    if version >= 4:
        (answer,) = wire.call(FIND_COORDINATOR, version, key_type=key_type, coordinator_keys=(key,)).coordinators
    else:
        answer = wire.call(FIND_COORDINATOR, version, key=key, key_type=key_type)
    assert answer.error_code == E.NONE
    return answer.node_id, answer.host, answer.port


def fetch_offsets(wire: Wire, version: int, group: str, require_stable: bool) -> dict[tuple[str, int], Any]:
    topics = (entity(OFFSET_FETCH, version, "OffsetFetchRequestTopics" if version >= 8 else "OffsetFetchRequestTopic",
                     name="t", partition_indexes=(0, 1)),)
    if version >= 8:
        answer = wire.call(OFFSET_FETCH, version, require_stable=require_stable, groups=(
            entity(OFFSET_FETCH, version, "OffsetFetchRequestGroup", group_id=group, topics=topics),))
        (found,) = answer.groups
        assert (found.group_id, found.error_code) == (group, E.NONE)
        topic_answers = found.topics
    else:
        answer = wire.call(OFFSET_FETCH, version, group_id=group, topics=topics, require_stable=require_stable)
        if version >= 2:
            assert answer.error_code == E.NONE
        topic_answers = answer.topics
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
            for t in topic_answers for p in t.partitions}


def commit_in_txn(wire: Wire, v: dict[str, int], producer_id: int, epoch: int, offset: int) -> None:
    answer = wire.call(ADD_OFFSETS_TO_TXN, v["add_offsets"], transactional_id="txn-app", producer_id=producer_id,
                       producer_epoch=epoch, group_id="app")
    assert answer.error_code == E.NONE
    version = v["txn_offset_commit"]
    topics = (entity(TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestTopic", name="t", partitions=(
        entity(TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestPartition", partition_index=0,
               committed_offset=offset, committed_metadata=f"txn {offset}"),)),)
    answer = wire.call(TXN_OFFSET_COMMIT, version, transactional_id="txn-app", group_id="app",
                       producer_id=producer_id, producer_epoch=epoch, generation_id=-1, member_id="",
                       group_instance_id=None, topics=topics)
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.topics] == \
        [("t", [(0, E.NONE)])]


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_transactional_flow(wire, client):
    """InitProducerId → AddPartitionsToTxn → AddOffsetsToTxn → TxnOffsetCommit → EndTxn(commit): OffsetFetch
    sees the offset (and, asked for stable offsets while the transaction is open, does not); a second
    transaction's offset, aborted, is never seen."""
    v = CLIENTS[client]
    assert find(wire, v["find_coordinator"], "txn-app", 1) == (NODE_ID, HOST, PORT)
    assert find(wire, v["find_coordinator"], "app", 0) == (NODE_ID, HOST, PORT)
    producer_id, epoch = init(wire, "txn-app", v["init_producer_id"])

    # The group's offset before any transaction (a plain commit).
    version = v["offset_commit"]
    committed = wire.call(OFFSET_COMMIT, version, group_id="app", generation_id_or_member_epoch=-1, member_id="",
                          topics=(entity(OFFSET_COMMIT, version, "OffsetCommitRequestTopic", name="t", partitions=(
                              entity(OFFSET_COMMIT, version, "OffsetCommitRequestPartition", partition_index=0,
                                     committed_offset=1, committed_metadata=None),)),))
    assert [p.error_code for t in committed.topics for p in t.partitions] == [E.NONE]

    for committed_txn, offset in ((True, 5), (False, 9)):
        added = wire.call(ADD_PARTITIONS_TO_TXN, v["add_partitions"], v3_and_below_transactional_id="txn-app",
                          v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                          v3_and_below_topics=txn_topics(v["add_partitions"], ("t", 0), ("t", 1)))
        assert partition_codes(added.results_by_topic_v3_and_below) == {("t", 0): E.NONE, ("t", 1): E.NONE}
        commit_in_txn(wire, v, producer_id, epoch, offset)

        before = fetch_offsets(wire, v["offset_fetch"], "app", require_stable=True)
        previous = (1, "", E.NONE) if committed_txn else (5, "txn 5", E.NONE)
        if v["offset_fetch"] >= 7:  # require_stable: the pending offset is not answered
            assert before[("t", 0)] == (-1, "", E.UNSTABLE_OFFSET_COMMIT)
        else:
            assert before[("t", 0)] == previous
        assert before[("t", 1)] == (-1, "", E.NONE)

        ended = wire.call(END_TXN, v["end_txn"], transactional_id="txn-app", producer_id=producer_id,
                          producer_epoch=epoch, committed=committed_txn)
        assert ended.error_code == E.NONE

        after = fetch_offsets(wire, v["offset_fetch"], "app", require_stable=True)
        assert after == {("t", 0): (5, "txn 5", E.NONE), ("t", 1): (-1, "", E.NONE)}
