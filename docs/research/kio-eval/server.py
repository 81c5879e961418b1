"""Tiny Kafka-protocol server over kio (sketch of idemcore/broker/server.py). One broker, in-memory logs."""
from __future__ import annotations

import asyncio, datetime, logging, struct, sys, uuid, dataclasses, collections
from dataclasses import fields
from functools import cache

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map, api_key_map
from kio.static.primitive import i32Timedelta, Records
import wire

log = logging.getLogger("srv")
ZERO = i32Timedelta.parse(datetime.timedelta(0))
NAMES = {v: k for k, v in api_key_map.items()}

# what we advertise: kio's full range for the APIs we answer (to observe each client's maximum)
SERVED = ["api_versions", "metadata", "produce", "fetch", "list_offsets", "init_producer_id", "find_coordinator",
          "add_partitions_to_txn", "add_offsets_to_txn", "end_txn"]
ADVERTISED = {NAMES[n]: (min(schema_name_map[n]), max(schema_name_map[n])) for n in SERVED}
ADVERTISED[NAMES["api_versions"]] = (0, 3)   # as Kafka 3.x (v4 exists in 4.x)
import os
for spec in filter(None, os.environ.get("DROP", "").split(",")):   # e.g. DROP=init_producer_id or produce:3-7
    n, _, rng = spec.partition(":")
    if rng: ADVERTISED[NAMES[n]] = tuple(map(int, rng.split("-")))
    else: ADVERTISED.pop(NAMES[n])


def make(cls, **kw):
    """Build a kio entity, dropping fields this version does not have (the per-version glue)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in kw.items() if k in names})


def nested(resp_cls, name):
    return getattr(sys.modules[resp_cls.__module__], name)


class Broker:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        self.logs: dict[tuple[str, int], list[tuple[int, bytes]]] = collections.defaultdict(list)
        self.ends: dict[tuple[str, int], int] = collections.defaultdict(int)
        self.next_pid = 1000
        self.seen: collections.Counter = collections.Counter()

    def topic(self, name):
        if name not in self.topics:
            self.topics[name] = (uuid.uuid4(), 1)
        return self.topics[name]

    # ------------------------------------------------------------------ handlers
    def api_versions(self, h, req, R):
        K = nested(R, "ApiVersion")
        keys = tuple(K(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(ADVERTISED.items()))
        return make(R, error_code=ErrorCode.none, api_keys=keys, throttle_time=ZERO)

    def metadata(self, h, req, R):
        B, T, P = (nested(R, n) for n in ("MetadataResponseBroker", "MetadataResponseTopic", "MetadataResponsePartition"))
        names = [t.name for t in req.topics] if req.topics is not None else list(self.topics)
        topics = []
        for n in names:
            tid, parts = self.topic(n)
            topics.append(make(T, error_code=ErrorCode.none, name=n, topic_id=tid, is_internal=False, partitions=tuple(
                make(P, error_code=ErrorCode.none, partition_index=p, leader_id=1, leader_epoch=0, replica_nodes=(1,),
                     isr_nodes=(1,), offline_replicas=()) for p in range(parts))))
        return make(R, throttle_time=ZERO, brokers=(make(B, node_id=1, host=self.host, port=self.port, rack=None),),
                    cluster_id="kio-eval", controller_id=1, topics=tuple(topics), error_code=ErrorCode.none)

    def produce(self, h, req, R):
        TR, PR = nested(R, "TopicProduceResponse"), nested(R, "PartitionProduceResponse")
        by_id = {tid: n for n, (tid, _) in self.topics.items()}
        out = []
        for t in req.topic_data:
            name = getattr(t, "name", None) or by_id.get(getattr(t, "topic_id", None))
            prs = []
            for p in t.partition_data:
                batch = bytes(p.records)  # RecordBatch v2 bytes as sent (one batch per partition for v3+)
                count = struct.unpack_from(">i", batch, 23)[0] + 1  # lastOffsetDelta + 1
                base = self.ends[(name, p.index)]
                self.logs[(name, p.index)].append((base, base + count - 1, struct.pack(">q", base) + batch[8:]))  # assign baseOffset
                self.ends[(name, p.index)] = base + count
                prs.append(make(PR, index=p.index, error_code=ErrorCode.none, base_offset=base, log_append_time=None,
                                log_start_offset=0, record_errors=(), error_message=None))
            out.append(make(TR, name=name, topic_id=getattr(t, "topic_id", None), partition_responses=tuple(prs)))
        if req.acks == 0:
            return None
        return make(R, responses=tuple(out), throttle_time=ZERO)

    def fetch(self, h, req, R):
        FT, PD = nested(R, "FetchableTopicResponse"), nested(R, "PartitionData")
        by_id = {tid: n for n, (tid, _) in self.topics.items()}
        out = []
        self.empty_fetch = True
        for t in req.topics:
            name = getattr(t, "topic", None) or by_id.get(getattr(t, "topic_id", None))
            pds = []
            for p in t.partitions:
                key = (name, p.partition)
                data = b"".join(b for base, last, b in self.logs[key] if last >= p.fetch_offset)
                self.empty_fetch = self.empty_fetch and not data
                pds.append(make(PD, partition_index=p.partition, error_code=ErrorCode.none, high_watermark=self.ends[key],
                                last_stable_offset=self.ends[key], log_start_offset=0, aborted_transactions=(),
                                preferred_read_replica=-1, records=Records(data)))
            out.append(make(FT, topic=name, topic_id=getattr(t, "topic_id", None), partitions=tuple(pds)))
        return make(R, throttle_time=ZERO, error_code=ErrorCode.none, session_id=0, responses=tuple(out))

    def list_offsets(self, h, req, R):
        LT, LP = nested(R, "ListOffsetsTopicResponse"), nested(R, "ListOffsetsPartitionResponse")
        out = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                off = 0 if p.timestamp == -2 else self.ends[(t.name, p.partition_index)]
                parts.append(make(LP, partition_index=p.partition_index, error_code=ErrorCode.none, timestamp=-1, offset=off, leader_epoch=0))
            out.append(make(LT, name=t.name, partitions=tuple(parts)))
        return make(R, throttle_time=ZERO, topics=tuple(out))

    def init_producer_id(self, h, req, R):
        self.next_pid += 1
        return make(R, throttle_time=ZERO, error_code=ErrorCode.none, producer_id=self.next_pid, producer_epoch=0)

    def find_coordinator(self, h, req, R):
        if h.request_api_version >= 4:   # batched: one Coordinator per key
            C = nested(R, "Coordinator")
            return make(R, throttle_time=ZERO, coordinators=tuple(make(C, key=k, node_id=1, host=self.host, port=self.port,
                        error_code=ErrorCode.none, error_message=None) for k in req.coordinator_keys))
        return make(R, throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, node_id=1, host=self.host, port=self.port)

    def add_partitions_to_txn(self, h, req, R):
        if h.request_api_version >= 4:   # batched by transaction (brokers' verification path; clients use v3-)
            RT, RTT, RP = (nested(R, n) for n in ("AddPartitionsToTxnResult", "AddPartitionsToTxnTopicResult", "AddPartitionsToTxnPartitionResult"))
            return make(R, throttle_time=ZERO, error_code=ErrorCode.none, results_by_transaction=tuple(
                make(RT, transactional_id=tx.transactional_id, topic_results=tuple(make(RTT, name=t.name, results_by_partition=tuple(
                    make(RP, partition_index=p, partition_error_code=ErrorCode.none) for p in t.partitions)) for t in tx.topics))
                for tx in req.transactions))
        RTT, RP = nested(R, "AddPartitionsToTxnTopicResult"), nested(R, "AddPartitionsToTxnPartitionResult")
        return make(R, throttle_time=ZERO, results_by_topic_v3_and_below=tuple(make(RTT, name=t.name, results_by_partition=tuple(
            make(RP, partition_index=p, partition_error_code=ErrorCode.none) for p in t.partitions)) for t in req.v3_and_below_topics))

    def add_offsets_to_txn(self, h, req, R):
        return make(R, throttle_time=ZERO, error_code=ErrorCode.none)

    def end_txn(self, h, req, R):
        return make(R, throttle_time=ZERO, error_code=ErrorCode.none, producer_id=-1, producer_epoch=-1)

    # ------------------------------------------------------------------ connection
    async def serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                if not 0 < size <= 100 << 20:
                    break
                frame = await reader.readexactly(size)
                self.empty_fetch = False
                out = self.dispatch(frame)
                if self.empty_fetch:
                    await asyncio.sleep(0.05)   # stand-in for max_wait: don't spin on empty fetches
                if out:
                    writer.write(out)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def dispatch(self, frame: bytes) -> bytes | None:
        api_key, version, corr = struct.unpack_from(">hhi", frame)
        if api_key == 18 and not ADVERTISED[18][0] <= version <= ADVERTISED[18][1]:
            # KIP-511 fallback: unknown ApiVersions version -> v0 body, UNSUPPORTED_VERSION, with our ranges
            n = struct.unpack_from(">h", frame, 8)[0]
            cid = frame[10:10 + n].decode(errors="replace") if n > 0 else None
            self.seen[("api_versions", version, f"fallback:{cid}")] += 1
            R = load_response_schema(18, 0)
            resp = dataclasses.replace(self.api_versions(None, None, R), error_code=ErrorCode.unsupported_version)
            return wire.encode_response(corr, resp)
        try:
            header, req = wire.parse_request(frame)
        except wire.UnsupportedRequest:
            log.warning("unsupported api_key %d v%d: closing", api_key, version)
            return b""
        name = api_key_map[api_key]
        self.seen[(name, version, header.client_id)] += 1
        handler = getattr(self, name, None)
        if handler is None or api_key not in ADVERTISED:
            log.warning("no handler for %s v%d (client %s): closing", name, version, header.client_id)
            raise ConnectionError
        resp = handler(header, req, load_response_schema(api_key, version))
        return None if resp is None else wire.encode_response(corr, resp)


async def start(host="127.0.0.1", port=0):
    b = Broker(host, port)
    srv = await asyncio.start_server(b.serve_conn, host, port)
    b.port = srv.sockets[0].getsockname()[1]
    return b, srv
