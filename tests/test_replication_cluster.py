"""Replication through real processes and real clients: a ZooKeeper and three ``idemcore serve`` brokers
(LocalCluster with its recommended settings: replication factor 3, min.insync.replicas 2, a 6 s ZooKeeper
session), brokers SIGKILLed and restarted under confluent-kafka, kafka-python and aiokafka, and the replicas'
segment files compared batch by batch once they have caught up. One cluster for the module; each test starts
with every broker running and every replica in sync."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from idemcore.broker.coordinator.partitioning import coordinator_partition
from idemcore.record.kafka_files import read_offset_checkpoint

from .cluster_harness import alive, children, cluster_fixture, running_over, wait_gone
from .replication_checks import (
    QUIET,
    admin,
    assert_replicas_equal,
    create_topic,
    high_watermark,
    partition_dir,
    partition_state,
    read_partition,
    run_bounded,
    stored_batches,
    wait_for,
    wait_in_sync,
    wait_leader,
)

cluster = cluster_fixture(3)


@pytest.fixture
def client(cluster):
    """An AdminClient of a cluster whose brokers all run and whose replicas are all in sync (a test before may
    have left one down)."""
    for n in cluster.broker_ids:
        if cluster.broker(n).pid is None:
            cluster.start(n)
        else:
            cluster.kill(n, signal.SIGCONT)  # a test that failed may have left it stopped
    admin_client = admin(cluster)
    wait_in_sync(admin_client)
    return admin_client


def test_idempotent_producer_across_a_sigkill_of_the_leader_writes_each_acked_record_once_where_acked(
        cluster, client):
    create_topic(client, "failover", 1, 3)
    leader = partition_state(client, "failover").leader
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60_000, **QUIET})
    acked: dict[bytes, int] = {}
    failed: list[str] = []

    def delivered(err, msg):
        if err is not None:
            failed.append(f"{msg.value()!r}: {err}")
        else:
            acked[msg.value()] = msg.offset()

    total, killed_after, unacked_at_kill = 9000, None, 0
    started = time.monotonic()
    for i in range(total):
        producer.produce("failover", value=str(i).encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        if i % 50 == 0:  # paced at 3000 records/s: the kill lands while records are queued and in flight
            time.sleep(max(0.0, started + i / 3000 - time.monotonic()))
        if killed_after is None and len(acked) >= total // 3:
            killed_after, unacked_at_kill = len(acked), len(producer)
            cluster.kill(leader, signal.SIGKILL)  # in-flight batches are retried to the new leader
    assert producer.flush(90) == 0, "records still unacknowledged after 90 s"
    assert killed_after is not None and unacked_at_kill > 0, (killed_after, unacked_at_kill)
    assert failed == []
    new_leader = wait_leader(client, "failover", not_on=[leader]).leader

    end = high_watermark(cluster.bootstrap_servers, "failover")
    records = read_partition(cluster.bootstrap_servers, "failover", 0, end)
    values = [value for _, value in records]
    duplicates = [value for value, count in Counter(values).items() if count > 1]
    assert duplicates == [] and end == total
    assert records == [(offset, value) for value, offset in sorted(acked.items(), key=lambda item: item[1])]
    assert values == [str(i).encode() for i in range(total)]  # in the order produced

    cluster.start(leader)
    wait_in_sync(client, ["failover"])
    batches = assert_replicas_equal(cluster, "failover", 0, cluster.broker_ids, high_watermark(
        cluster.bootstrap_servers, "failover"))
    epochs = sorted({batch.leader_epoch for batch in batches})
    assert len(epochs) >= 2, epochs  # batches of the first leader and of its successor
    assert new_leader != leader


# ---------------------------------------------------------------- transactions across broker restarts


def _retrying(what: str, action, attempts: int = 10) -> None:
    """``action()`` again while librdkafka says its error is retriable (a coordinator or leader moving)."""
    for _ in range(attempts):
        try:
            action()
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            time.sleep(0.5)
    raise AssertionError(f"{what}: still retriable after {attempts} attempts")


def _send_offsets_bounded(producer: Producer, offsets: list[TopicPartition], metadata: object) -> None:
    """librdkafka's send_offsets_to_transaction, which may never return when the group coordinator's broker is
    down: a broker left out of Metadata (as Kafka leaves out a dead one) has its client thread decommissioned while
    it stays cached as the group coordinator, and the coordinator request's own timeout is never checked
    (confluentinc/librdkafka#5511, #5456, open against librdkafka 2.14+; this test's bouncer SIGKILLs that broker
    by design). Seen once in ~5 clean runs: the call blocked for 10 minutes with every broker idle and back in
    sync. Bounded at 120 s (the call's own timeout is 30 s), so such a hang ends the test as that client bug, an
    xfail naming it, instead of holding CI to its limit; everything else the test checks is asserted as before."""
    try:
        run_bounded("send_offsets_to_transaction", lambda: producer.send_offsets_to_transaction(offsets, metadata, 30),
                    120)
    except AssertionError:
        pytest.xfail("librdkafka's send_offsets_to_transaction (30 s timeout) did not return within 120 s with "
                     "the group coordinator's broker restarted: confluentinc/librdkafka#5511 / #5456")


class _Bouncer(threading.Thread):
    """SIGKILLs each broker in turn, starts it again ``down_s`` later (past the ZooKeeper session, so its
    partitions get new leaders meanwhile) and waits until every replica is back in sync. :meth:`stop` ends it
    early, the broker it killed started again: a test that ends early (its xfail) must not leave it killing
    brokers under the next tests (a follower it kills while a test kills the leader leaves no leader at all)."""

    def __init__(self, cluster, down_s: float = 8.0) -> None:
        super().__init__(daemon=True)
        self.cluster, self.down_s = cluster, down_s
        self.error: BaseException | None = None
        self.down: int | None = None  # the broker down right now
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            client = admin(self.cluster)
            for n in self.cluster.broker_ids:
                if self._stopping.wait(1):
                    return
                self.down = n
                self.cluster.kill(n, signal.SIGKILL)
                self._stopping.wait(self.down_s)
                self.cluster.start(n)
                self.down = None
                if self._stopping.is_set():
                    return
                wait_in_sync(client)
        except BaseException as error:  # the test's thread raises it
            self.error = error

    def stop(self, timeout_s: float = 120) -> None:
        """Stop after the current step (a killed broker is started again) and wait for it."""
        self._stopping.set()
        self.join(timeout_s)
        assert not self.is_alive(), f"the bouncer did not stop within {timeout_s:g} s"


def test_consume_transform_produce_while_brokers_restart_one_at_a_time_yields_each_input_once(cluster, client):
    create_topic(client, "ctp-in", 2, 3)
    create_topic(client, "ctp-out", 2, 3)
    inputs = 600
    feeder = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, **QUIET})
    for i in range(inputs):
        feeder.produce("ctp-in", value=f"in-{i}".encode(), partition=i % 2)
    assert feeder.flush(30) == 0
    ends = {p: high_watermark(cluster.bootstrap_servers, "ctp-in", p) for p in (0, 1)}
    assert sum(ends.values()) == inputs

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "ctp",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **QUIET})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "ctp-1", **QUIET})
    bouncer = _Bouncer(cluster)
    committed = {0: 0, 1: 0}
    commits = aborts = commits_while_down = 0

    def rewind() -> None:
        """Back to the group's committed offsets (what the aborted transaction read is read again)."""
        offsets = consumer.committed([TopicPartition("ctp-in", p) for p in (0, 1)], timeout=30)
        consumer.assign([TopicPartition("ctp-in", tp.partition, max(tp.offset, 0)) for tp in offsets])

    try:
        _retrying("init_transactions", lambda: producer.init_transactions(30))
        consumer.assign([TopicPartition("ctp-in", p, 0) for p in (0, 1)])
        bouncer.start()
        deadline = time.monotonic() + 240
        while committed != ends or bouncer.is_alive():
            assert time.monotonic() < deadline, f"committed {committed} of {ends} in 240 s"
            if bouncer.is_alive():
                time.sleep(0.4)  # paced, so transactions run across every restart
            messages = [m for m in consumer.consume(5, 1) if m.error() is None]
            if not messages:
                continue
            positions = {m.partition(): m.offset() + 1 for m in messages}
            down = bouncer.down
            try:
                producer.begin_transaction()
                for m in messages:
                    producer.produce("ctp-out", value=m.value() + b"-out", partition=m.partition())
                offsets = [TopicPartition("ctp-in", p, offset) for p, offset in positions.items()]
                _send_offsets_bounded(producer, offsets, consumer.consumer_group_metadata())
                _retrying("commit_transaction", lambda: producer.commit_transaction(30))
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                _retrying("abort_transaction", lambda: producer.abort_transaction(30))
                aborts += 1
                rewind()
                continue
            committed.update(positions)
            commits += 1
            commits_while_down += down is not None
        bouncer.join(1)
        if bouncer.error is not None:
            raise bouncer.error
    finally:
        consumer.close()
        if bouncer.is_alive():  # the test ended early (its xfail, a failure): no kills under the next tests
            bouncer.stop()

    assert commits_while_down > 0, (commits, aborts)
    outputs: list[bytes] = []
    for p in (0, 1):
        end = high_watermark(cluster.bootstrap_servers, "ctp-out", p, "read_committed")
        outputs += [value for _, value in read_partition(cluster.bootstrap_servers, "ctp-out", p, end,
                                                         isolation="read_committed")]
    seen = Counter(outputs)
    assert sorted(seen) == sorted(f"in-{i}-out".encode() for i in range(inputs))
    assert [value for value, count in seen.items() if count > 1] == []


# ---------------------------------------------------------------- a group's coordinator dies


def test_a_group_moves_to_its_offsets_partitions_new_leader_and_keeps_its_committed_offset(cluster, client):
    create_topic(client, "grp", 1, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **QUIET})
    for i in range(100):
        producer.produce("grp", value=str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    offsets_partition = coordinator_partition("grp-group", 50)
    coordinator = wait_leader(client, "__consumer_offsets", offsets_partition).leader

    settings = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "grp-group", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "session.timeout.ms": 6000, **QUIET}
    first = Consumer(settings)
    try:
        first.subscribe(["grp"])
        read = _poll_values(first, 40)
        assert read == [str(i).encode() for i in range(40)]
        first.commit(offsets=[TopicPartition("grp", 0, 40)], asynchronous=False)
    finally:
        first.close()

    cluster.kill(coordinator, signal.SIGKILL)
    successor = wait_leader(client, "__consumer_offsets", offsets_partition, not_on=[coordinator]).leader
    second = Consumer(settings)
    try:
        committed = second.committed([TopicPartition("grp", 0)], timeout=60)
        assert committed[0].offset == 40
        second.subscribe(["grp"])
        assert _poll_values(second, 60) == [str(i).encode() for i in range(40, 100)]
    finally:
        second.close()
    assert successor != coordinator


def test_a_live_group_keeps_its_generation_and_assignment_when_its_coordinator_is_killed(cluster, client):
    """Two consumers share a 4-partition topic; the broker leading the group's ``__consumer_offsets`` partition is
    SIGKILLed. Its successor loads the group's metadata from the replicated log (GroupMetadata records), so the
    members' heartbeats go on in the same generation: no partition is revoked or assigned again, and every record
    produced before and after the kill is read exactly once (no rebalance re-reads from committed offsets)."""
    create_topic(client, "live-grp", 4, 3)
    group = "live-group"
    offsets_partition = coordinator_partition(group, 50)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **QUIET})
    callbacks: list[tuple[str, int, str, frozenset[int]]] = []  # (member, callback count, kind, partitions)
    read: Counter[bytes] = Counter()
    killed_at = [0]
    stop = threading.Event()
    errors: list[BaseException] = []

    def member(name: str) -> None:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 30_000,
                             "heartbeat.interval.ms": 500, "auto.commit.interval.ms": 200, **QUIET})

        def seen(kind: str) -> object:
            def callback(_: object, parts: list[TopicPartition]) -> None:
                if not stop.is_set():  # not the revocation of closing at the end
                    callbacks.append((name, killed_at[0], kind, frozenset(p.partition for p in parts)))
            return callback
        consumer.subscribe(["live-grp"], on_assign=seen("assign"), on_revoke=seen("revoke"), on_lost=seen("lost"))
        try:
            while not stop.is_set():
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    read[message.value()] += 1
        except BaseException as error:
            errors.append(error)
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(name,), daemon=True) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    try:
        wait_for("both members assigned", lambda: {c[0] for c in callbacks if c[2] == "assign" and c[3]} == {"a", "b"})
        coordinator = wait_leader(client, "__consumer_offsets", offsets_partition).leader
        for i in range(200):
            producer.produce("live-grp", value=b"before-%d" % i, partition=i % 4)
        assert producer.flush(30) == 0
        wait_for("the records before the kill read", lambda: len(read) == 200)

        def committed() -> dict[int, int]:
            from confluent_kafka import ConsumerGroupTopicPartitions

            asked = ConsumerGroupTopicPartitions(group, [TopicPartition("live-grp", p) for p in range(4)])
            answer = client.list_consumer_group_offsets([asked])[group].result(30)
            return {tp.partition: tp.offset for tp in answer.topic_partitions}
        # The auto commits of all that was read land before the coordinator dies (50 records a partition).
        wait_for("the offsets of what was read committed", lambda: committed() == dict.fromkeys(range(4), 50))
        settled = list(callbacks)
        killed_at[0] = 1
        cluster.kill(coordinator, signal.SIGKILL)
        wait_leader(client, "__consumer_offsets", offsets_partition, not_on=[coordinator])
        for i in range(200):
            producer.produce("live-grp", value=b"after-%d" % i, partition=i % 4)
        assert producer.flush(60) == 0
        wait_for("the records after the kill read", lambda: len(read) == 400)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors
    assert [c for c in callbacks if c[1] == 1] == [], f"a rebalance after the kill: {callbacks}, settled {settled}"
    assert set(read.values()) == {1}, [value for value, count in read.items() if count > 1][:5]


def _poll_values(consumer: Consumer, count: int, timeout_s: float = 60) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count:
        assert time.monotonic() < deadline, f"read {len(values)} of {count} records in {timeout_s:g} s"
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value())
    return values


# ---------------------------------------------------------------- the Python clients


def test_kafka_python_produces_with_acks_all_and_consumes_from_each_partitions_leader(cluster, client):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaPartition

    create_topic(client, "kp", 3, 3)
    leaders = {partition_state(client, "kp", p).leader for p in range(3)}
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", max_block_ms=30_000)
    try:
        sent = {(m.partition, m.offset) for m in
                (producer.send("kp", f"kp-{i}".encode(), partition=i % 3).get(30) for i in range(30))}
    finally:
        producer.close(10)
    assert sent == {(p, offset) for p in range(3) for offset in range(10)}
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                             request_timeout_ms=30_000)
    try:
        consumer.assign([KafkaPartition("kp", p) for p in range(3)])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 30 and time.monotonic() < deadline:
            for records in consumer.poll(1000).values():
                got += [record.value for record in records]
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"kp-{i}".encode() for i in range(30))
    assert len(leaders) > 1  # the partitions are led by different brokers: the clients followed Metadata


def test_aiokafka_produces_with_acks_all_and_consumes(cluster, client):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioPartition

    create_topic(client, "aio", 3, 3)

    async def round_trip() -> tuple[set[tuple[int, int]], list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        await producer.start()
        try:
            sent = {(m.partition, m.offset) for m in
                    [await producer.send_and_wait("aio", f"aio-{i}".encode(), partition=i % 3) for i in range(30)]}
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AioPartition("aio", p) for p in range(3)])
            got: list[bytes] = []
            while len(got) < 30:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got += [record.value for record in records]
        finally:
            await consumer.stop()
        return sent, got

    sent, got = asyncio.run(asyncio.wait_for(round_trip(), 90))
    assert sent == {(p, offset) for p in range(3) for offset in range(10)}
    assert sorted(got) == sorted(f"aio-{i}".encode() for i in range(30))


# ---------------------------------------------------------------- KIP-101's two scenarios


def _since_last_start(cluster, n: int) -> str:
    """Broker ``n``'s serve.log since its last start."""
    text = cluster.broker(n).serve_log.read_text(errors="replace")
    return text[text.rfind("--- idemcore cluster: starting broker"):]


def _high_watermark_checkpoint(cluster, n: int, topic: str, partition: int = 0) -> int:
    """The high watermark broker ``n`` last checkpointed for the partition (0: none yet)."""
    path = cluster.broker(n).log_dir / "replication-offset-checkpoint"
    entries = read_offset_checkpoint(path).entries if path.exists() else []
    return next((e.offset for e in entries if (e.topic, e.partition) == (topic, partition)), 0)


def _two_replicas(client, topic: str, config: dict[str, str]) -> tuple[int, int]:
    """Create ``topic`` with one partition on two of the three brokers; its leader and its follower."""
    create_topic(client, topic, 1, 2, config=config)
    state = partition_state(client, topic)
    assert state is not None and len(state.replicas) == 2 and state.leader in state.replicas
    return state.leader, next(n for n in state.replicas if n != state.leader)


def test_create_topics_places_replicas_where_the_request_assigns_them(cluster, client):
    create_topic(client, "assigned", assignment=[[2, 0]])
    assert partition_state(client, "assigned").replicas == (2, 0)


def test_kip101_a_restarted_follower_keeps_records_above_its_high_watermark_and_leads_with_all_of_them(
        cluster, client):
    """KIP-101's first scenario: a follower that truncated to its high watermark on restart and then became
    leader would lose acknowledged records; with leader epochs it asks its leader instead and keeps them."""
    topic = "kip101-loss"
    leader, follower = _two_replicas(client, topic, {"min.insync.replicas": "1"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **QUIET})
    for i in range(20):  # one batch each
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
        assert producer.flush(30) == 0
    cluster.kill(follower, signal.SIGKILL)  # at once: it has every record, its high watermark lags behind
    checkpointed = _high_watermark_checkpoint(cluster, follower, topic)
    assert checkpointed < 20, "the follower's high watermark caught up before it died: the scenario needs it behind"

    cluster.start(follower)
    wait_in_sync(client, [topic])
    assert f"{topic}-0: truncated to offset" not in _since_last_start(cluster, follower)
    cluster.kill(leader, signal.SIGKILL)
    assert wait_leader(client, topic, not_on=[leader]).leader == follower
    assert high_watermark(cluster.bootstrap_servers, topic) == 20
    assert [value for _, value in read_partition(cluster.bootstrap_servers, topic, 0, 20)] == \
        [f"r{i}".encode() for i in range(20)]
    assert len(stored_batches(partition_dir(cluster, follower, topic))) == 20


def test_kip101_after_an_unclean_election_the_old_leader_truncates_its_divergent_offset_and_copies_the_new_one(
        cluster, client):
    """KIP-101's second scenario: A holds offsets 0-1, B offset 0 only; both die, B comes back first and leads (an
    unclean election) at a new epoch and writes another record at offset 1; A returns, finds where its history
    leaves B's (OffsetForLeaderEpoch / DivergingEpoch), truncates its offset 1 and copies B's."""
    topic = "kip101-div"
    a, b = _two_replicas(client, topic, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    settings = {"bootstrap.servers": cluster.bootstrap_servers, "message.timeout.ms": 60_000, **QUIET}
    both = Producer({**settings, "acks": "all"})
    both.produce(topic, value=b"r0", partition=0)
    assert both.flush(30) == 0
    cluster.kill(b, signal.SIGSTOP)  # B fetches nothing more
    leader_only = Producer({**settings, "acks": "1"})
    leader_only.produce(topic, value=b"r1-of-A", partition=0)
    assert leader_only.flush(30) == 0
    wait_for("B out of the ISR", lambda: partition_state(client, topic).isr == (a,))
    cluster.kill(b, signal.SIGKILL)
    cluster.kill(a, signal.SIGKILL)
    assert [batch.base_offset for batch in stored_batches(partition_dir(cluster, a, topic))] == [0, 1]
    assert [batch.base_offset for batch in stored_batches(partition_dir(cluster, b, topic))] == [0]

    cluster.start(b)
    state = wait_leader(client, topic, not_on=[a])
    assert state.leader == b and state.isr == (b,)
    after = Producer({**settings, "acks": "1"})
    written: list[int] = []
    after.produce(topic, value=b"r1-of-B", partition=0, on_delivery=lambda err, msg: written.append(msg.offset()))
    assert after.flush(30) == 0 and written == [1]

    cluster.start(a)
    wait_in_sync(client, [topic])
    assert f"{topic}-0: truncated to offset 1" in _since_last_start(cluster, a)
    batches = assert_replicas_equal(cluster, topic, 0, [a, b], high_watermark(cluster.bootstrap_servers, topic))
    assert [batch.base_offset for batch in batches] == [0, 1] and batches[1].leader_epoch > batches[0].leader_epoch
    assert read_partition(cluster.bootstrap_servers, topic, 0, 2) == [(0, b"r0"), (1, b"r1-of-B")]


# ---------------------------------------------------------------- the command


def test_idemcore_cluster_command_serves_a_producer_across_a_broker_kill_and_stops_on_sigterm(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "idemcore.cli", "cluster", "--brokers", "3", "--data-dir",
                                str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in process.stdout],
                         daemon=True).start()
        head = [lines.get(timeout=120) for _ in range(6)]  # bootstrap, zookeeper, the table's header, 3 brokers
        assert head[0].startswith("bootstrap.servers=") and head[1].startswith("zookeeper.connect=")
        bootstrap = head[0].removeprefix("bootstrap.servers=")
        pids = {int(row.split()[0]): int(row.split()[2]) for row in head[3:]}
        assert sorted(pids) == [0, 1, 2] and all(alive(pid) for pid in pids.values())

        client = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        create_topic(client, "cli", 1, 3)
        leader = partition_state(client, "cli").leader
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                             "message.timeout.ms": 60_000, **QUIET})
        acked: list[int] = []

        def delivered(err, msg):
            assert err is None, err
            acked.append(msg.offset())

        for i in range(400):
            producer.produce("cli", value=str(i).encode(), partition=0, on_delivery=delivered)
            producer.poll(0)
            if i == 200:
                assert producer.flush(30) == 0
                os.kill(pids[leader], signal.SIGKILL)
        assert producer.flush(90) == 0 and sorted(acked) == list(range(400))
        assert [int(value) for _, value in read_partition(bootstrap, "cli", 0, 400)] == list(range(400))

        process.send_signal(signal.SIGTERM)
        assert process.wait(90) == 0
        assert wait_gone(children(process.pid) + list(pids.values())) == []
        assert wait_gone(running_over(tmp_path)) == []  # the brokers and the ZooKeeper started for it
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
