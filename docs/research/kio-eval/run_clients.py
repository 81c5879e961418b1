"""Start the server, run confluent-kafka, kafka-python and aiokafka against it, print negotiated versions."""
import asyncio, logging, socket, struct, sys, threading, time, collections
import server, wire
logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")

def run_server():
    loop = asyncio.new_event_loop()
    box = {}
    def target():
        asyncio.set_event_loop(loop)
        b, srv = loop.run_until_complete(server.start())
        box["b"] = b
        loop.run_forever()
    threading.Thread(target=target, daemon=True).start()
    while "b" not in box: time.sleep(0.01)
    return box["b"]

B = run_server()
BOOT = f"127.0.0.1:{B.port}"
print("server on", BOOT)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
results = {}

def versions(client):
    c = collections.defaultdict(set)
    for (name, v, cid), n in B.seen.items():
        if cid is not None and client in str(cid): c[name].add(v)
    return {k: sorted(v) for k, v in sorted(c.items())}

def ck_idempotent():
    from confluent_kafka import Producer, Consumer, TopicPartition
    acks = []
    p = Producer({"bootstrap.servers": BOOT, "enable.idempotence": True, "acks": "all", "client.id": "ck-idem",
                  "linger.ms": 5})
    for i in range(N):
        p.produce("ck-idem", value=f"v{i}".encode(), key=b"k", on_delivery=lambda e, m: acks.append((e, None if e else m.offset())))
        if i % 10000 == 0: p.poll(0)
    left = p.flush(30)
    errs = [e for e, _ in acks if e]
    results["ck idempotent produce"] = f"{len(acks)} acked, {len(errs)} errors {errs[:2]}, flush left {left}, last offset {acks[-1][1] if acks else None}"
    c = Consumer({"bootstrap.servers": BOOT, "group.id": "g", "client.id": "ck-cons", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition("ck-idem", 0, 0)])
    got = []
    t0 = time.time()
    while len(got) < N and time.time() - t0 < 30:
        for m in c.consume(1000, 1.0):
            if m.error(): results["ck consume error"] = str(m.error()); break
            got.append(m.value())
    c.close()
    results["ck read back"] = f"{len(got)} records, in order: {got == [f'v{i}'.encode() for i in range(N)]}"

def ck_transactional():
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": BOOT, "transactional.id": "tx-1", "client.id": "ck-txn"})
    p.init_transactions(10)
    for commit in (True, False):
        p.begin_transaction()
        for i in range(10): p.produce("ck-txn", value=b"x%d" % i)
        p.commit_transaction(10) if commit else p.abort_transaction(10)
    results["ck transactional"] = "init/begin/produce/commit/abort OK"

def kp():
    from kafka import KafkaProducer, KafkaConsumer, TopicPartition
    p = KafkaProducer(bootstrap_servers=BOOT, acks="all", enable_idempotence=True, client_id="kp-idem")
    fs = [p.send("kp-idem", b"v%d" % i) for i in range(N)]
    p.flush(30)
    md = [f.get(10) for f in fs]
    results["kafka-python idempotent"] = f"{len(md)} acked, last offset {md[-1].offset}"
    p.close()
    p = KafkaProducer(bootstrap_servers=BOOT, transactional_id="kp-tx", client_id="kp-txn")
    p.init_transactions()
    p.begin_transaction(); p.send("kp-txn", b"a"); p.commit_transaction()
    p.begin_transaction(); p.send("kp-txn", b"b"); p.abort_transaction()
    p.close()
    results["kafka-python transactional"] = "commit+abort OK"
    c = KafkaConsumer(bootstrap_servers=BOOT, client_id="kp-cons", auto_offset_reset="earliest", enable_auto_commit=False,
                      isolation_level="read_committed", consumer_timeout_ms=5000)
    c.assign([TopicPartition("kp-idem", 0)]); c.seek_to_beginning()
    got = [m.value for m in c]
    c.close()
    results["kafka-python read back"] = f"{len(got)} records"

async def ak():
    from aiokafka import AIOKafkaProducer, AIOKafkaConsumer, TopicPartition
    p = AIOKafkaProducer(bootstrap_servers=BOOT, enable_idempotence=True, acks="all", client_id="ak-idem")
    await p.start()
    fs = [await p.send("ak-idem", b"v%d" % i) for i in range(N)]
    md = [await f for f in fs]
    await p.stop()
    results["aiokafka idempotent"] = f"{len(md)} acked, last offset {md[-1].offset}"
    p = AIOKafkaProducer(bootstrap_servers=BOOT, transactional_id="ak-tx", client_id="ak-txn")
    await p.start()
    async with p.transaction():
        await p.send_and_wait("ak-txn", b"a")
    await p.begin_transaction(); await p.send_and_wait("ak-txn", b"b"); await p.abort_transaction()
    await p.stop()
    results["aiokafka transactional"] = "commit+abort OK"
    c = AIOKafkaConsumer(bootstrap_servers=BOOT, client_id="ak-cons", isolation_level="read_committed", enable_auto_commit=False)
    await c.start()
    c.assign([TopicPartition("ak-idem", 0)]); await c.seek_to_beginning()
    got = []
    try:
        while len(got) < N:
            batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 10)
            for tp, ms in batch.items(): got += [m.value for m in ms]
    finally:
        await c.stop()
    results["aiokafka read back"] = f"{len(got)} records"

def apiversions_fallback():
    s = socket.create_connection(("127.0.0.1", B.port))
    body = struct.pack(">hhi", 18, 9, 77) + struct.pack(">h", 1) + b"x" + b"\0" + b"\x02a\x021\x00"  # v9 (unknown)
    s.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", s.recv(4))[0]; data = b""
    while len(data) < size: data += s.recv(size - len(data))
    from kio.schema.api_versions.v0 import ApiVersionsResponse
    from kio.serial import entity_reader
    corr = struct.unpack_from(">i", data)[0]
    resp, _ = entity_reader(ApiVersionsResponse)(data, 4)   # response header v0 = correlation id only
    results["ApiVersions v9 fallback"] = f"corr={corr} error={resp.error_code.name} keys={[(k.api_key, k.min_version, k.max_version) for k in resp.api_keys][:3]}..."
    s.close()

ONLY = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
for name, fn in [("fallback", apiversions_fallback), ("ck idem", ck_idempotent), ("ck txn", ck_transactional), ("kafka-python", kp),
                 ("aiokafka", lambda: asyncio.run(ak()))]:
    if ONLY and name not in ONLY: continue
    t0 = time.time()
    try: fn()
    except Exception as e:
        import traceback; traceback.print_exc(); results[name + " FAILED"] = repr(e)[:300]
    print(f"-- {name}: {time.time() - t0:.1f}s", flush=True)
for k, v in results.items(): print(f"{k:30s} {v}")
for cl in ("ck-idem", "ck-cons", "ck-txn", "kp-idem", "kp-txn", "kp-cons", "ak-idem", "ak-txn", "ak-cons"):
    print(cl, versions(cl))
print("fallbacks:", {k: v for k, v in B.seen.items() if "fallback" in str(k[2])})
