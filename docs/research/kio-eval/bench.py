"""µs per message: Produce request (one 16 KB batch), Fetch response (1 MB records). Best of N repeats."""
import os, io, struct, time, datetime, timeit, uuid
import wire
from kio.static.primitive import i8, i16, i32, i64, i32Timedelta, Records
from kio.schema.errors import ErrorCode

BATCH = os.urandom(16 * 1024)
MB = os.urandom(1 << 20)

def best(fn, number, repeat=7):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6

rows = []
def row(lib, what, v, us): rows.append((lib, what, v, us)); print(f"{lib:14s} {what:32s} v{v:<3d} {us:10.1f} µs", flush=True)

# ---------------- kio
def kio_produce(v):
    m = __import__(f"kio.schema.produce.v{v}.request", fromlist=["x"])
    req = m.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(index=i32(0), records=Records(BATCH)),)),))
    frame = wire.encode_request(1, req, "c")
    body = frame[4:]
    h, back = wire.parse_request(body); assert back.topic_data[0].partition_data[0].records == BATCH
    row("kio", "Produce req encode (client)", v, best(lambda: wire.encode_request(1, req, "c"), 2000))
    row("kio", "Produce req decode (server)", v, best(lambda: wire.parse_request(body), 2000))

def kio_fetch(v):
    m = __import__(f"kio.schema.fetch.v{v}.response", fromlist=["x"])
    kw = dict(partition_index=i32(0), error_code=ErrorCode.none, high_watermark=i64(1000), last_stable_offset=i64(990),
              log_start_offset=i64(0), aborted_transactions=(m.AbortedTransaction(producer_id=i64(7), first_offset=i64(10)),),
              preferred_read_replica=i32(-1), records=Records(MB))
    resp = m.FetchResponse(throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, session_id=i32(0),
        responses=(m.FetchableTopicResponse(topic="t", partitions=(m.PartitionData(**kw),)) if v < 13 else
                   m.FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=(m.PartitionData(**kw),)),))
    frame = wire.encode_response(1, resp)
    from kio.serial import entity_reader
    rd = entity_reader(type(resp)); hd = entity_reader(type(resp).__header_schema__)
    def dec():
        h, n = hd(frame, 4); return rd(frame, 4 + n)
    assert dec()[0].responses[0].partitions[0].records == MB
    row("kio", "Fetch resp encode (server)", v, best(lambda: wire.encode_response(1, resp), 200))
    row("kio", "Fetch resp decode (client)", v, best(dec, 200))

# ---------------- kafka-python 3.x (JSON-schema driven, compiled encoders)
from kafka.protocol.producer import ProduceRequest as KPProduce
from kafka.protocol.consumer import FetchResponse as KPFetchResp
def kp_produce(v):
    req = KPProduce[v](transactional_id=None, acks=-1, timeout_ms=30000,
        topic_data=[KPProduce.TopicProduceData(name="t", partition_data=[KPProduce.TopicProduceData.PartitionProduceData(index=0, records=BATCH)])]) \
        if hasattr(KPProduce, "TopicProduceData") else None
    req.with_header(correlation_id=1, client_id="c")
    frame = req.encode(header=True, framed=True)
    back = KPProduce[v].decode(frame, header=True, framed=True)
    row("kafka-python3", "Produce req encode (client)", v, best(lambda: req.encode(header=True, framed=True), 2000))
    row("kafka-python3", "Produce req decode (server)", v, best(lambda: KPProduce[v].decode(frame, header=True, framed=True), 2000))

def kp_fetch(v):
    # build via kio bytes, decode with kafka-python, then time its encode/decode
    m = __import__(f"kio.schema.fetch.v{v}.response", fromlist=["x"])
    kw = dict(partition_index=i32(0), error_code=ErrorCode.none, high_watermark=i64(1000), last_stable_offset=i64(990),
              log_start_offset=i64(0), aborted_transactions=(m.AbortedTransaction(producer_id=i64(7), first_offset=i64(10)),),
              preferred_read_replica=i32(-1), records=Records(MB))
    resp = m.FetchResponse(throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, session_id=i32(0),
        responses=(m.FetchableTopicResponse(topic="t", partitions=(m.PartitionData(**kw),)),))
    frame = wire.encode_response(1, resp)
    obj = KPFetchResp[v].decode(frame, header=True, framed=True)
    assert bytes(obj.encode(header=True, framed=True)) == frame
    row("kafka-python3", "Fetch resp encode (server)", v, best(lambda: obj.encode(header=True, framed=True), 200))
    row("kafka-python3", "Fetch resp decode (client)", v, best(lambda: KPFetchResp[v].decode(frame, header=True, framed=True), 200))

# ---------------- aiokafka 0.14 (hand-written Struct classes, non-flexible versions only)
from aiokafka.protocol.produce import ProduceRequest_v8 as AKProd
from aiokafka.protocol.fetch import FetchResponse_v11 as AKFetch
def ak():
    req = AKProd(None, -1, 30000, [("t", [(0, BATCH)])])
    hdr = req.build_request_header(1, "c")
    def enc():
        b = hdr.encode() + req.encode(); return struct.pack(">i", len(b)) + b
    body = req.encode()
    row("aiokafka", "Produce req encode (client)", 8, best(enc, 2000))
    row("aiokafka", "Produce req decode (server)", 8, best(lambda: AKProd.decode(body), 2000))
    resp = AKFetch(0, 0, 0, [("t", [(0, 0, 1000, 990, 0, [(7, 10)], -1, MB)])])
    rb = resp.encode()
    row("aiokafka", "Fetch resp encode (server)", 11, best(lambda: struct.pack(">ii", len(rb) + 4, 1) + resp.encode(), 200))
    row("aiokafka", "Fetch resp decode (client)", 11, best(lambda: AKFetch.decode(rb), 200))

# ---------------- hand-written floor (struct.pack + join), Produce v9 / Fetch v12 flexible
def uv(n):
    out = bytearray()
    while n >= 0x80: out.append((n & 0x7f) | 0x80); n >>= 7
    out.append(n); return bytes(out)
def hand():
    def fetch_v12():
        parts = [struct.pack(">ihi", 0, 0, 0), uv(2), uv(2), b"t", uv(2),
                 struct.pack(">ihqqq", 0, 0, 1000, 990, 0), uv(2), struct.pack(">qq", 7, 10), b"\0",
                 struct.pack(">i", -1), uv(len(MB) + 1), MB, b"\0", b"\0", b"\0"]
        body = b"".join(parts)
        return struct.pack(">ii", len(body) + 5, 1) + b"\0" + body
    row("hand-written", "Fetch resp encode (server)", 12, best(fetch_v12, 200))

if __name__ == "__main__":
    for v in (8, 9): kio_produce(v)
    for v in (11, 12): kio_fetch(v)
    for v in (8, 9):
        try: kp_produce(v)
        except Exception as e: print("kp produce", v, repr(e)[:200])
    for v in (11, 12):
        try: kp_fetch(v)
        except Exception as e: print("kp fetch", v, repr(e)[:200])
    ak(); hand()

def produce_response():
    from kio.schema.produce.v9 import response as m
    def build_kio():
        return m.ProduceResponse(responses=(m.TopicProduceResponse(name="t", partition_responses=(
            m.PartitionProduceResponse(index=i32(0), error_code=ErrorCode.none, base_offset=i64(123456), log_append_time=None,
                                       log_start_offset=i64(0), record_errors=(), error_message=None),)),),
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)))
    r = build_kio()
    row("kio", "Produce resp build", 9, best(build_kio, 5000))
    row("kio", "Produce resp encode (server)", 9, best(lambda: wire.encode_response(1, r), 5000))
    from kafka.protocol.producer import ProduceResponse as KP
    frame = wire.encode_response(1, r)
    o = KP[9].decode(frame, header=True, framed=True)
    assert bytes(o.encode(header=True, framed=True)) == frame
    row("kafka-python3", "Produce resp encode (server)", 9, best(lambda: o.encode(header=True, framed=True), 5000))
    def hand():
        body = b"\0\0\0\x01" + b"\x02\x02t\x02" + struct.pack(">ihqqq", 0, 0, 123456, -1, 0) + b"\x01\x00\x00\x00\x00\x00\x00\x00"
        return struct.pack(">ii", len(body) + 5, 1) + b"\0" + body
    row("hand-written", "Produce resp encode (server)", 9, best(hand, 5000))
