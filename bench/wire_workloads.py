"""The wire benchmarks' workloads: confluent-kafka (librdkafka) against any Kafka-protocol broker, with the same
client settings whatever the broker. Each function returns the seconds its timed part took; everything a
round needs first (a fresh topic, metadata, the producer id) is done before the clock starts, and what it
checks (no record failed, every record read) after it stops.

Also runnable alone, to profile a server under load (``idemcore serve`` under cProfile, say)::

    python bench/wire_workloads.py 127.0.0.1:9092 idempotent --records 200000
"""

from __future__ import annotations

import argparse
import itertools
import time
import uuid
from collections.abc import Iterable
from typing import Any

#: The producer settings of every produce workload (librdkafka's names). linger.ms 5 and batch.size 1,000,000
#: bytes are librdkafka's defaults, written out; acks=all and enable.idempotence are what exactly-once needs.
PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "max.in.flight.requests.per.connection": 5,
}
#: The consumer's: read_committed, librdkafka's default fetch sizes; assigned, no commits (confluent-kafka wants a
#: group.id all the same: a fresh one each time, so librdkafka looks its coordinator up).
CONSUMER_SETTINGS: dict[str, Any] = {
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "enable.partition.eof": False,
}
RECORD_BYTES = 100
TIMEOUT_S = 60

_names = itertools.count()


def client_version() -> str:
    """confluent-kafka's version and librdkafka's, for a benchmark's table."""
    import confluent_kafka

    return f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})"


def values(count: int) -> list[bytes]:
    """``count`` records of 100 bytes each."""
    return [b"%0100d" % i for i in range(count)]


def fresh_topic(bootstrap: str, prefix: str, partitions: int = 1) -> str:
    """A new topic of ``partitions`` partitions (CreateTopics), so that every round starts from an empty log."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name]
    future.result(TIMEOUT_S)
    _wait_leader(admin, name, partitions)
    return name


def _wait_leader(admin: Any, topic: str, partitions: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (meta is not None and meta.error is None and len(meta.partitions) == partitions
                and all(p.leader >= 0 for p in meta.partitions.values())):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{topic} has no leader for each of its {partitions} partitions after {TIMEOUT_S} s")


def _producer(bootstrap: str, topic: str, latencies: list[float] | None = None, **extra: Any) -> tuple[Any, list[Any]]:
    """A producer connected and holding its metadata for ``topic`` (not yet timed), and the list its callbacks
    fill: errors, and the records that failed. Without ``latencies`` only a failed record gets a delivery report
    (so none costs a callback); with it every record does, and an acknowledged one appends its latency there
    (librdkafka's, seconds from produce() to the acknowledgement)."""
    from confluent_kafka import Producer

    errors: list[Any] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        elif latencies is not None:
            latencies.append(message.latency())
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS, **extra,
                         "error_cb": lambda error: error.fatal() and errors.append(error),
                         "delivery.report.only.error": latencies is None,
                         "on_delivery": delivered})
    producer.list_topics(topic, timeout=10)
    return producer, errors


def _produce(producer: Any, topic: str, value: bytes, partition: int = 0) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=partition)
            return
        except BufferError:
            producer.poll(0.001)


def _check(errors: list[Any], topic: str) -> None:
    """A failed record or a fatal error fails the round (the error callback keeps only fatal errors: librdkafka
    also reports passing ones, such as a closed idle connection)."""
    if errors:
        raise RuntimeError(f"{topic}: {len(errors)} errors, the first {errors[:3]}")


def produce_idempotent(bootstrap: str, topic: str, records: Iterable[bytes], partitions: int = 1) -> float:
    """Seconds to produce ``records`` idempotently, the i-th to partition i % ``partitions`` (from the second
    produce to flush returning, every record acknowledged). The first record is produced and acknowledged before
    the clock starts: librdkafka asks for the producer id on a timer after it connects, and a round that began
    before the id came waited for it (~0.45 s: 0.14 s or 0.6 s for 200,000 records, by chance)."""
    producer, errors = _producer(bootstrap, topic)
    values = iter(records)
    first = next(values, None)
    if first is not None:
        _produce(producer, topic, first)
        if producer.flush(TIMEOUT_S):
            raise RuntimeError(f"{topic}: the first record was not acknowledged after {TIMEOUT_S} s")
    start = time.perf_counter()
    if partitions == 1:
        for value in values:
            _produce(producer, topic, value)
    else:
        for i, value in enumerate(values, 1):
            _produce(producer, topic, value, i % partitions)
    undelivered = producer.flush(TIMEOUT_S)
    seconds = time.perf_counter() - start
    _check(errors, topic)
    if undelivered:
        raise RuntimeError(f"{topic}: {undelivered} records not acknowledged after {TIMEOUT_S} s")
    return seconds


def produce_transactional(bootstrap: str, topic: str, records: list[bytes], per_transaction: int) -> float:
    """Seconds to produce ``records`` in transactions of ``per_transaction`` records, each committed before the
    next begins (init_transactions is done before the clock starts)."""
    producer, errors = _producer(bootstrap, topic, **{"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(TIMEOUT_S)
    start = time.perf_counter()
    for first in range(0, len(records), per_transaction):
        producer.begin_transaction()
        for value in records[first:first + per_transaction]:
            _produce(producer, topic, value)
        producer.commit_transaction(TIMEOUT_S)
    seconds = time.perf_counter() - start
    _check(errors, topic)
    return seconds


def consume_read_committed(bootstrap: str, topic: str, count: int, partitions: int = 1,
                           timeout_s: float = TIMEOUT_S) -> float:
    """Seconds for a read_committed consumer (assigned ``partitions`` partitions, from the beginning) to receive
    ``count`` records."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         **CONSUMER_SETTINGS})
    try:
        consumer.list_topics(topic, timeout=10)
        received = 0
        deadline = time.monotonic() + timeout_s
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while received < count:
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is not None:
                    raise RuntimeError(f"{topic}: the consumer got {error}")
                received += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: {received} of {count} records after {timeout_s} s")
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    if received != count:
        raise RuntimeError(f"{topic}: {received} records read, {count} committed")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bootstrap")
    parser.add_argument("workload", choices=["idempotent", "transactional", "consume"])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-transaction", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    records = values(args.records)
    for _ in range(args.rounds):
        topic = fresh_topic(args.bootstrap, args.workload)
        if args.workload == "idempotent":
            seconds = produce_idempotent(args.bootstrap, topic, records)
        else:
            seconds = produce_transactional(args.bootstrap, topic, records, args.per_transaction)
            if args.workload == "consume":
                seconds = consume_read_committed(args.bootstrap, topic, len(records))
        print(f"{args.workload} {topic}: {len(records)} records in {seconds:.3f} s = "
              f"{len(records) / seconds:,.0f} records/s")


if __name__ == "__main__":
    main()
