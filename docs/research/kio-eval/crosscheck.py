"""kio <-> kafka-python 3.x (an independent JSON-schema codec): encode with kio, decode+re-encode with kafka-python, compare bytes."""
import importlib, pkgutil, io, struct, sys, traceback
import kafka.protocol as kp
from kafka.protocol.api_message import ApiMessage
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer, entity_reader
from kio.static.primitive import i32
import sample, wire

for m in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
    try: importlib.import_module(m.name)
    except Exception: pass
KP = {}
def walk(c):
    for s in c.__subclasses__():
        if getattr(s, "_class_version", 0) is None and getattr(s, "_json", None): KP[(s.API_KEY, s.type)] = s
        walk(s)
walk(ApiMessage)

APIS = {"ApiVersions":18,"Metadata":3,"Produce":0,"Fetch":1,"ListOffsets":2,"InitProducerId":22,"FindCoordinator":10,
        "AddPartitionsToTxn":24,"AddOffsetsToTxn":25,"EndTxn":26,"TxnOffsetCommit":28,"OffsetCommit":8,"OffsetFetch":9,
        "JoinGroup":11,"SyncGroup":14,"Heartbeat":12,"LeaveGroup":13,"CreateTopics":19,"DescribeProducers":61,
        "DescribeTransactions":65,"ListTransactions":66,"WriteTxnMarkers":27}
from kio.schema.index import schema_name_map, api_key_map
ok = bad = 0
for name, key in APIS.items():
    vs = sorted(schema_name_map[api_key_map[key]])
    res = []
    for v in vs:
        for kind, load in (("request", load_request_schema), ("response", load_response_schema)):
            cls = load(key, v)
            ent = sample.sample(cls)
            if key == 18 and kind == "response":  # kafka-python decodes any errored ApiVersions body as v0
                import dataclasses; from kio.schema.errors import ErrorCode
                ent = dataclasses.replace(ent, error_code=ErrorCode.none)
            try:
                frame = wire.encode_request(5, ent, "cid") if kind == "request" else wire.encode_response(5, ent)
                # kio decode roundtrip
                if kind == "request":
                    h, back = wire.parse_request(frame[4:]); assert back == ent, "kio roundtrip"
                kpc = KP[(key, kind)][v]
                obj = kpc.decode(frame, header=True, framed=True)
                again = obj.encode(header=True, framed=True) if obj.header is not None else None
                if again is None:
                    obj.with_header(correlation_id=5, **({"client_id": "cid"} if kind=="request" else {})); again = obj.encode(header=True, framed=True)
                assert bytes(again) == frame, f"bytes differ len {len(again)} vs {len(frame)}"
                ok += 1
            except Exception as e:
                bad += 1; res.append(f"v{v}{kind[:3]}: {type(e).__name__}: {str(e)[:90]}")
    print(f"{name:22s} v{vs[0]}-{vs[-1]}", "OK" if not res else res)
print("ok", ok, "bad", bad)
