"""Producer -> broker throughput in process, beside confluent-kafka's idempotent producer and librdkafka's
mock cluster, on the same 100-byte records (no faults).

Run: scripts/dev bench -k producer
"""

from __future__ import annotations

import pytest

from idemcore.broker import Broker
from idemcore.client import Producer

RECORDS = 200_000
#: librdkafka's defaults (batch.size 1,000,000 bytes, linger.ms 5), given to idemcore too.
SETTINGS = {"batch_size": 1_000_000, "linger_ms": 5}
VALUES = [b"%0100d" % i for i in range(RECORDS)]  # 100-byte records


def idemcore_send():
    producer = Producer(Broker({"bench": 1}), **SETTINGS)
    for value in VALUES:
        producer.send("bench", value)
    producer.flush()
    assert producer.metrics["failed_batches"] == 0


def idemcore_send_batch():
    producer = Producer(Broker({"bench": 1}), **SETTINGS)
    offsets = producer.send_batch("bench", VALUES).result()
    assert offsets[-1] == RECORDS - 1


def confluent_send():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"test.mock.num.brokers": 1, "enable.idempotence": True,
                                         "linger.ms": 5, "acks": "all"})
    for value in VALUES:
        while True:
            try:
                producer.produce("bench", value)
                break
            except BufferError:
                producer.poll(0.001)
    assert producer.flush(60) == 0


@pytest.mark.parametrize("name, run", [("idemcore send", idemcore_send),
                                       ("idemcore send_batch", idemcore_send_batch),
                                       ("confluent-kafka mock", confluent_send)])
def bench_producer(benchmark, record, name, run):
    run()  # warm up (imports, JIT caches, the mock cluster's topic)
    benchmark.pedantic(run, rounds=3, iterations=1)
    record(f"records {name}", benchmark, RECORDS)
