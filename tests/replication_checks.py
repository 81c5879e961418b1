"""What the replicated-cluster tests ask of a running LocalCluster through real clients (confluent-kafka's
AdminClient and Consumer) and of its brokers' files: partition leaders and ISRs from Metadata, waits bounded by
a deadline, every record of a partition read back, and each replica's batches read from its segment files."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from idemcore.cluster import LocalCluster
from idemcore.record.kafka_files import list_partition_dir, scan_segment

T = TypeVar("T")
#: The longest any one wait of these tests lasts (a broker restart and its catching up on a loaded machine).
WAIT_S = 90.0
QUIET = {"log_level": 3}  # librdkafka: errors only on stderr


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = WAIT_S, every_s: float = 0.25) -> T:
    """``probe()``'s first truthy answer; AssertionError naming ``what`` (and the last answer) after
    ``timeout_s``. A probe's KafkaException counts as no answer (a broker just killed)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            answer = probe()
            if answer:
                return answer
            last = answer
        except KafkaException as error:
            last = error
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")
        time.sleep(every_s)


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})


def create_topic(client: AdminClient, name: str, partitions: int = 1, replication_factor: int = 3, *,
                 assignment: list[list[int]] | None = None, config: Mapping[str, str] | None = None) -> None:
    """Create ``name`` (``assignment``: the replicas of each partition, leader first) and wait until every
    partition has a leader and its full ISR."""
    configs = dict(config or {})
    topic = (NewTopic(name, len(assignment), replica_assignment=assignment, config=configs) if assignment else
             NewTopic(name, partitions, replication_factor, config=configs))
    for future in client.create_topics([topic], operation_timeout=30).values():
        future.result(60)
    wait_in_sync(client, [name])


@dataclass(frozen=True)
class PartitionState:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def partition_state(client: AdminClient, topic: str, partition: int = 0) -> PartitionState | None:
    """The partition's leader, replicas and ISR as Metadata answers them (None: no such partition yet)."""
    found = client.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None or partition not in found.partitions:
        return None
    meta = found.partitions[partition]
    return PartitionState(meta.leader, tuple(meta.replicas), tuple(meta.isrs))


def wait_leader(client: AdminClient, topic: str, partition: int = 0, *, not_on: Iterable[int] = (),
                timeout_s: float = WAIT_S) -> PartitionState:
    """Wait until the partition has a leader that is not one of ``not_on``; on timeout the message names the
    last leader and ISR seen."""
    excluded = set(not_on)
    seen = ["no Metadata answer"]

    def probe() -> PartitionState | None:
        state = partition_state(client, topic, partition)
        seen[0] = "no such partition" if state is None else f"leader {state.leader} isr {list(state.isr)}"
        return state if state is not None and state.leader >= 0 and state.leader not in excluded else None

    try:
        return wait_for(f"{topic}-{partition} led by a broker not in {sorted(excluded)}", probe, timeout_s)
    except AssertionError:
        raise AssertionError(f"{topic}-{partition} led by a broker not in {sorted(excluded)}: not within "
                             f"{timeout_s:g} s (last seen: {seen[0]})") from None


def out_of_sync(client: AdminClient, topics: Iterable[str] | None = None) -> list[str]:
    """The partitions of ``topics`` (None: every topic, the internal ones too) without a leader or whose ISR is
    not all their replicas, as ``topic-p leader L isr [...] of [...]``."""
    metadata = client.list_topics(timeout=10)
    names = list(metadata.topics) if topics is None else list(topics)
    lagging = []
    for name in names:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            lagging.append(f"{name}: {topic.error if topic is not None else 'unknown'}")
            continue
        for p, meta in sorted(topic.partitions.items()):
            if meta.leader < 0 or sorted(meta.isrs) != sorted(meta.replicas):
                lagging.append(f"{name}-{p} leader {meta.leader} isr {sorted(meta.isrs)} of {sorted(meta.replicas)}")
    return lagging


def wait_in_sync(client: AdminClient, topics: Iterable[str] | None = None, timeout_s: float = WAIT_S) -> None:
    """Wait until every partition of ``topics`` (None: all) has a leader and every replica in its ISR."""
    names = None if topics is None else list(topics)
    last: list[str] = []

    def probe() -> bool:
        nonlocal last
        last = out_of_sync(client, names)
        return not last

    try:
        wait_for("every replica in sync", probe, timeout_s)
    except AssertionError:
        raise AssertionError(f"not every replica in sync within {timeout_s:g} s: {last[:5]}") from None


def read_partition(bootstrap: str, topic: str, partition: int, end: int, *, isolation: str = "read_uncommitted",
                   timeout_s: float = WAIT_S) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the partition from offset 0 up to ``end`` (exclusive)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-back", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True, **QUIET})
    records: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout_s
        position = 0
        while position < end:
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}-{partition}: read up to offset {position} of {end} in {timeout_s:g} s")
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is None:
                records.append((message.offset(), message.value()))
                position = message.offset() + 1
            elif message.error().code() == KafkaError._PARTITION_EOF:  # past records a reader never gets (markers)
                position = max(position, message.offset())
    finally:
        consumer.close()
    return records


def high_watermark(bootstrap: str, topic: str, partition: int = 0,
                   isolation: str = "read_uncommitted") -> int:
    """The partition's high watermark (its last stable offset for read_committed) as its leader answers."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "isolation.level": isolation,
                         **QUIET})
    try:
        return int(wait_for(f"{topic}-{partition} watermarks",
                            lambda: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10))[1])
    finally:
        consumer.close()


# ---------------------------------------------------------------- the replicas' files


@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    raw: bytes  # the whole batch as stored: offset, length, header, records

    def __repr__(self) -> str:
        return f"batch {self.base_offset}..{self.last_offset} epoch {self.leader_epoch} ({len(self.raw)} bytes)"


def partition_dir(cluster: LocalCluster, broker: int, topic: str, partition: int = 0) -> Path:
    return cluster.broker(broker).log_dir / f"{topic}-{partition}"


def stored_batches(directory: Path) -> list[StoredBatch]:
    """Every whole batch of the partition directory's segment files, in offset order (Kafka's layout: a batch is
    its 8-byte base offset, its 4-byte length, then that many bytes)."""
    batches = []
    for segment in list_partition_dir(directory).segments:
        scan = scan_segment(segment.log)
        assert not scan.problems(), scan.problems()
        data = segment.log.read_bytes()
        for row in range(len(scan)):
            start = int(scan["position"][row])
            raw = data[start:start + 12 + int(scan["batch_length"][row])]
            batches.append(StoredBatch(int(scan["base_offset"][row]), int(scan["last_offset"][row]),
                                       int(scan["leader_epoch"][row]), raw))
    return batches


def assert_replicas_equal(cluster: LocalCluster, topic: str, partition: int, brokers: Iterable[int],
                          below: int) -> list[StoredBatch]:
    """Every broker's files hold the same batches, byte for byte, for every offset below ``below`` (a high
    watermark), and those batches cover offsets 0 to below-1 with no gap; returns them."""
    held = {n: [b for b in stored_batches(partition_dir(cluster, n, topic, partition)) if b.base_offset < below]
            for n in brokers}
    first, *others = held
    for n in others:
        mismatch = next((i for i, (a, b) in enumerate(zip(held[first], held[n], strict=False)) if a != b), None)
        differ = "" if mismatch is None else f"; batch {mismatch}: {held[first][mismatch]} vs {held[n][mismatch]}"
        assert len(held[n]) == len(held[first]) and mismatch is None, (
            f"{topic}-{partition}: broker {first} holds {len(held[first])} batches below {below}, broker {n} "
            f"{len(held[n])}{differ}")
    batches = held[first]
    assert [b.base_offset for b in batches] == [0] + [b.last_offset + 1 for b in batches[:-1]], "offset gap"
    assert not batches or batches[-1].last_offset == below - 1, (batches[-1:], below)
    return batches


def run_bounded(what: str, fn: Callable[[], Any], timeout_s: float) -> Any:
    """``fn()``, failing with ``what`` if it has not returned after ``timeout_s`` (it runs on a daemon thread)."""
    import threading

    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as error:  # handed to the caller
            result["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise AssertionError(f"{what}: not done within {timeout_s:g} s")
    if "error" in result:
        raise result["error"]
    return result.get("value")
