"""The storage benchmarks' workloads against any Kafka-protocol broker on loopback: a fixed-rate load of many
idempotent producers (confluent-kafka) measuring produce latency, with consumers reading alongside or not;
small produce requests sent raw (one 100-byte record each, idempotent, acks=all), to count what one request
costs the broker; and a Metadata request asked until a starting broker answers it.

Also runnable alone, to profile a server under load (``py-spy record -- idemcore serve ...``, say)::

    python bench/storage_workloads.py 127.0.0.1:9092 latency --seconds 10 --consumers 2
    python bench/storage_workloads.py 127.0.0.1:9092 small --requests 5000
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import wire_workloads as work
from kio.index import load_request_schema

from idemcore.net.wire.frames import make, nested, read_response, request_frame
from idemcore.record.v2.codec import Record, encode_batch
from tests.test_server_fuzz import Closed, RawClient

#: The latency load: producers, records a second each, topic partitions (producer i writes partition i).
PRODUCERS = 8
RATE = 10_000
PARTITIONS = 8
#: Raw small produce: Produce v7 and InitProducerId v4, versions idemcore and tansu both serve (tansu answers
#: UNKNOWN_SERVER_ERROR to InitProducerId below v3).
PRODUCE_VERSION = 7
INIT_PRODUCER_ID_VERSION = 4
METADATA_VERSION = 1
#: Requests in flight per connection: librdkafka's max.in.flight.requests.per.connection under idempotence.
IN_FLIGHT = 5


def _port(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


# ---------------------------------------------------------------- a starting broker


def answers_metadata(port: int, topic: str, partitions: int, timeout_s: float, poll_s: float = 0.005) -> None:
    """Return once the broker on 127.0.0.1:``port`` answers Metadata for ``topic`` with ``partitions`` partitions,
    each with a leader (asked every ``poll_s`` on a fresh connection); RuntimeError after ``timeout_s``."""
    schema: Any = load_request_schema(3, METADATA_VERSION)
    frame = request_frame(3, METADATA_VERSION, 1, "bench", make(schema, topics=(
        make(nested(schema, "MetadataRequestTopic"), name=topic),)))
    deadline = time.monotonic() + timeout_s
    last: object = "no answer"
    while time.monotonic() < deadline:
        try:
            client = RawClient(("127.0.0.1", port), timeout=5)
            try:
                client.send(frame)
                _, body = read_response(3, METADATA_VERSION, client.read_frame())
            finally:
                client.close()
            found = [t for t in body.topics if t.name == topic]
            if (found and found[0].error_code == 0 and len(found[0].partitions) == partitions
                    and all(p.leader_id >= 0 for p in found[0].partitions)):
                return
            last = found[0].error_code if found else "the topic missing"
        except (OSError, Closed) as error:
            last = error
        time.sleep(poll_s)
    raise RuntimeError(f"127.0.0.1:{port} did not answer Metadata for {topic} within {timeout_s} s (last: {last})")


# ---------------------------------------------------------------- produce latency at a fixed rate


@dataclass
class LatencyResult:
    """Acknowledgement latencies (seconds, librdkafka's: produce() to the acknowledgement) of the records produced
    after the warm-up, and what the client achieved."""

    latencies: list[float]
    seconds: float
    records: int
    #: The longest pause of the pacing loop (seconds): far above 1 ms, the client, not the broker, was late.
    max_gap: float
    consumed: list[int] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _consume_until(stop: Any, ready: Any, bootstrap: str, topic: str, partitions: int, out: Any) -> None:
    """A read_committed consumer of every partition of ``topic`` from the beginning, until ``stop`` is set; puts
    (records read, errors as text) on ``out``. Runs in a child process: in the producers' process its Python
    work would hold the GIL the pacing loop needs."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    count, errors = 0, []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         **work.CONSUMER_SETTINGS})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        consumer.consume(1, 0.5)  # connected, the offsets being looked up
        ready.set()
        while not stop.is_set():
            for message in consumer.consume(1000, 0.1):
                if message.error() is not None:
                    errors.append(str(message.error()))
                else:
                    count += 1
    except Exception as error:
        errors.append(repr(error))
    finally:
        ready.set()
        consumer.close()
        out.put((count, errors[:3]))


def latency_load(bootstrap: str, topic: str, seconds: float, consumers: int = 0, producers: int = PRODUCERS,
                 rate: int = RATE, partitions: int = PARTITIONS, warmup_s: float = 1.0) -> LatencyResult:
    """``producers`` idempotent producers (:data:`wire_workloads.PRODUCER_SETTINGS`: acks=all, linger.ms 5), each
    producing ``rate`` records of 100 bytes a second to its own partition of ``topic`` (empty, ``partitions``
    partitions) for ``warmup_s`` + ``seconds``, while ``consumers`` read_committed consumers, each in a process of
    its own, read every partition from the beginning. One thread paces every producer (each millisecond, the
    records now due); the latencies of records produced in the warm-up are left out."""
    context = multiprocessing.get_context("spawn")  # no fork of a process holding librdkafka's threads
    stop, out = context.Event(), context.Queue()
    children = []
    for _ in range(consumers):
        ready = context.Event()
        child = context.Process(target=_consume_until, args=(stop, ready, bootstrap, topic, partitions, out),
                                daemon=True)
        child.start()
        children.append(child)
        deadline = time.monotonic() + work.TIMEOUT_S
        while not ready.wait(0.05):
            if not child.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: a consumer process did not start (exit status {child.exitcode})")
    value = work.values(1)[0]
    latencies: list[float] = []
    made = [work._producer(bootstrap, topic, latencies) for _ in range(producers)]
    try:
        start = time.perf_counter()
        measured_from, marked, sent, sent_before, max_gap, last = 0, False, 0, 0, 0.0, start
        while (now := time.perf_counter()) < start + warmup_s + seconds:
            max_gap, last = max(max_gap, now - last), now
            due = int((now - start) * rate)
            for i, (producer, _) in enumerate(made):
                for _ in range(due - sent):
                    work._produce(producer, topic, value, i % partitions)
                producer.poll(0)
            sent = due
            if not marked and now >= start + warmup_s:
                measured_from, marked, sent_before = len(latencies), True, sent
            time.sleep(0.001)
        elapsed = time.perf_counter() - start - warmup_s
        for producer, _ in made:
            left = producer.flush(work.TIMEOUT_S)
            if left:
                raise RuntimeError(f"{topic}: {left} records not acknowledged after {work.TIMEOUT_S} s")
    finally:
        stop.set()
        results = [out.get(timeout=60) for _ in children]
        for child in children:
            child.join(30)
    for _, producer_errors in made:
        work._check(producer_errors, topic)
    errors = [error for _, found in results for error in found]
    if errors:
        raise RuntimeError(f"{topic}: the consumers got errors, the first {errors[:3]}")
    return LatencyResult(latencies[measured_from:], elapsed, (sent - sent_before) * producers, max_gap,
                         [count for count, _ in results])


# ---------------------------------------------------------------- small produce requests, raw


def _init_producer_id(client: RawClient) -> tuple[int, int]:
    schema: Any = load_request_schema(22, INIT_PRODUCER_ID_VERSION)
    client.send(request_frame(22, INIT_PRODUCER_ID_VERSION, 0, "bench", make(
        schema, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
        producer_epoch=-1)))
    _, body = read_response(22, INIT_PRODUCER_ID_VERSION, client.read_frame())
    if body.error_code != 0:
        raise RuntimeError(f"InitProducerId answered {body.error_code!r}")
    return body.producer_id, body.producer_epoch


def _produce_frames(topic: str, partition: int, producer: tuple[int, int], count: int) -> list[bytes]:
    """``count`` Produce requests (acks=all), each one batch of one 100-byte record, sequences 0 to count-1."""
    schema: Any = load_request_schema(0, PRODUCE_VERSION)
    topic_cls, partition_cls = nested(schema, "TopicProduceData"), nested(schema, "PartitionProduceData")
    value, now = work.values(1)[0], int(time.time() * 1000)
    frames = []
    for sequence in range(count):
        batch = encode_batch([Record(0, 0, None, value)], base_timestamp=now, producer_id=producer[0],
                             producer_epoch=producer[1], base_sequence=sequence)
        data = make(topic_cls, name=topic, partition_data=(make(partition_cls, index=partition, records=batch),))
        frames.append(request_frame(0, PRODUCE_VERSION, sequence + 1, "bench", make(
            schema, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(data,))))
    return frames


def small_produce(bootstrap: str, topic: str, connections: int, requests: int) -> float:
    """Seconds for ``connections`` connections, each an idempotent producer of its own partition of ``topic``, to
    have ``requests`` small Produce requests each answered (:data:`IN_FLIGHT` in flight on each). The requests are
    built and the producer ids fetched before the clock starts; every answer is checked after it stops."""
    clients = [RawClient(("127.0.0.1", _port(bootstrap)), timeout=60) for _ in range(connections)]
    try:
        frames = [_produce_frames(topic, index, _init_producer_id(client), requests)
                  for index, client in enumerate(clients)]
        answers: list[list[bytes]] = [[] for _ in clients]

        def run(client: RawClient, mine: list[bytes], out: list[bytes]) -> None:
            for first in range(0, len(mine), IN_FLIGHT):
                chunk = mine[first:first + IN_FLIGHT]
                client.send(b"".join(chunk))
                out.extend(client.read_frame() for _ in chunk)
        threads = [threading.Thread(target=run, args=(client, mine, out), daemon=True)
                   for client, mine, out in zip(clients, frames, answers, strict=True)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - start
    finally:
        for client in clients:
            client.close()
    for index, out in enumerate(answers):
        if len(out) != requests:
            raise RuntimeError(f"{topic}-{index}: {len(out)} answers to {requests} requests")
        codes = {partition.error_code for frame in out
                 for response in read_response(0, PRODUCE_VERSION, frame)[1].responses
                 for partition in response.partition_responses}
        if codes != {0}:
            raise RuntimeError(f"{topic}-{index}: Produce answered {sorted(codes)}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bootstrap")
    parser.add_argument("workload", choices=["latency", "small"])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--consumers", type=int, default=0)
    parser.add_argument("--requests", type=int, default=5000, help="small produce requests per connection")
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    if args.workload == "latency":
        topic = work.fresh_topic(args.bootstrap, "latency", PARTITIONS)
        result = latency_load(args.bootstrap, topic, args.seconds, args.consumers)
        print(f"latency {topic}: {result.records / result.seconds:,.0f} records/s, p50 "
              f"{result.percentile(50) * 1e3:.1f} ms, p99 {result.percentile(99) * 1e3:.1f} ms, the pacing loop's "
              f"longest pause {result.max_gap * 1e3:.1f} ms, consumed {result.consumed}")
    else:
        topic = work.fresh_topic(args.bootstrap, "small", args.connections)
        seconds = small_produce(args.bootstrap, topic, args.connections, args.requests)
        total = args.connections * args.requests
        print(f"small {topic}: {total} requests in {seconds:.2f} s = {total / seconds:,.0f} requests/s")


if __name__ == "__main__":
    main()
