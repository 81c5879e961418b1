"""Minimal per-API response builders through make(); each encoded with kio and decoded by kafka-python 3 as a check."""
import datetime, uuid, timeit
from kio.index import load_response_schema, load_request_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta
from server import make, nested, ZERO
import wire, sample
from kafka.protocol.admin import DescribeProducersResponse as KDP, DescribeTransactionsResponse as KDT
from kafka.protocol.producer import TxnOffsetCommitResponse as KTO
from kafka.protocol.consumer import OffsetFetchResponse as KOF, JoinGroupResponse as KJG, SyncGroupResponse as KSG, HeartbeatResponse as KHB

def describe_producers(v=0):
    R = load_response_schema(61, v); T, P, S = (nested(R, n) for n in ("TopicResponse", "PartitionResponse", "ProducerState"))
    return make(R, throttle_time=ZERO, topics=(make(T, name="t", partitions=(make(P, partition_index=0, error_code=ErrorCode.none,
        error_message=None, active_producers=(make(S, producer_id=1001, producer_epoch=0, last_sequence=41, last_timestamp=1700000000000,
        coordinator_epoch=-1, current_txn_start_offset=-1),)),)),))

def describe_transactions(v=0):
    R = load_response_schema(65, v); S, T = nested(R, "TransactionState"), nested(R, "TopicData")
    return make(R, throttle_time=ZERO, transaction_states=(make(S, error_code=ErrorCode.none, transactional_id="tx-1",
        transaction_state="Ongoing", transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        transaction_start_time=datetime.datetime.fromtimestamp(1700000000, datetime.UTC), producer_id=1001,
        producer_epoch=0, topics=(make(T, topic="t", partitions=(0,)),)),))

def offset_fetch(v):   # v8+: batched by group
    R = load_response_schema(9, v)
    if v >= 8:
        G, T, P = (nested(R, n) for n in ("OffsetFetchResponseGroup", "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions"))
        return make(R, throttle_time=ZERO, groups=(make(G, group_id="g", error_code=ErrorCode.none, topics=(make(T, name="t", topic_id=uuid.UUID(int=0), partitions=(
            make(P, partition_index=0, committed_offset=42, committed_leader_epoch=-1, metadata="", error_code=ErrorCode.none),)),)),))
    T, P = nested(R, "OffsetFetchResponseTopic"), nested(R, "OffsetFetchResponsePartition")
    return make(R, throttle_time=ZERO, error_code=ErrorCode.none, topics=(make(T, name="t", partitions=(make(P, partition_index=0,
        committed_offset=42, committed_leader_epoch=-1, metadata="", error_code=ErrorCode.none),)),))

def txn_offset_commit(v):
    R = load_response_schema(28, v); T, P = nested(R, "TxnOffsetCommitResponseTopic"), nested(R, "TxnOffsetCommitResponsePartition")
    return make(R, throttle_time=ZERO, topics=(make(T, name="t", partitions=(make(P, partition_index=0, error_code=ErrorCode.none),)),))

def join_group(v):
    R = load_response_schema(11, v); M = nested(R, "JoinGroupResponseMember")
    return make(R, throttle_time=ZERO, error_code=ErrorCode.none, generation_id=1, protocol_type="consumer", protocol_name="range",
                leader="m-1", skip_assignment=False, member_id="m-1",
                members=(make(M, member_id="m-1", group_instance_id=None, metadata=b"\0\1"),))

def sync_group(v):
    R = load_response_schema(14, v)
    return make(R, throttle_time=ZERO, error_code=ErrorCode.none, protocol_type="consumer", protocol_name="range", assignment=b"\0\1")

def heartbeat(v):
    return make(load_response_schema(12, v), throttle_time=ZERO, error_code=ErrorCode.none)

checks = [("DescribeProducers", describe_producers, KDP, [0]), ("DescribeTransactions", describe_transactions, KDT, [0]),
          ("OffsetFetch", offset_fetch, KOF, range(1, 11)), ("TxnOffsetCommit", txn_offset_commit, KTO, range(0, 6)),
          ("JoinGroup", join_group, KJG, range(0, 10)), ("SyncGroup", sync_group, KSG, range(0, 6)), ("Heartbeat", heartbeat, KHB, range(0, 5))]
for name, fn, K, vs in checks:
    out = []
    for v in vs:
        frame = wire.encode_response(3, fn(v))
        o = K[v].decode(frame, header=True, framed=True)
        assert bytes(o.encode(header=True, framed=True)) == frame
        out.append(v)
    print(f"{name:22s} built with make() and decoded by kafka-python at v{list(out)}")
