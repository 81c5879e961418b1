import asyncio, threading, time, sys
import server
loop = asyncio.new_event_loop(); box = {}
def t():
    asyncio.set_event_loop(loop); b, s = loop.run_until_complete(server.start()); box["b"] = b; loop.run_forever()
threading.Thread(target=t, daemon=True).start()
while "b" not in box: time.sleep(0.01)
from confluent_kafka import Producer
errs = []
p = Producer({"bootstrap.servers": f"127.0.0.1:{box['b'].port}", "enable.idempotence": True, "client.id": "ck-noidp",
              "error_cb": lambda e: errs.append(("error_cb", str(e))), "message.timeout.ms": 5000})
def dr(e, m):
    errs.append(("dr", str(e)))
try:
    for i in range(3): p.produce("t", b"x", on_delivery=dr)
    print("flush left", p.flush(8))
except Exception as e:
    print("exception", repr(e))
print(errs[:5]); print(dict(box["b"].seen))
