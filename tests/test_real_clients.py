"""Real Kafka clients against `idemcore serve` (an in-process :class:`~idemcore.broker.server.Server` on a free
loopback port, the ``kafka_server`` fixture): confluent-kafka (librdkafka), kafka-python and aiokafka, each
producing idempotently and transactionally and reading back with both isolation levels.

Every test ends with the server's health: no frame refused, no broker or translation failure, no ERROR logged by
the server. The API versions each client asked for are printed at the end of each test (``pytest -s``). Every
client call runs under a hard time bound (:func:`bounded`). The tests that need the group coordinator over the
wire (OffsetFetch, TxnOffsetCommit, JoinGroup, ...) fail at once with the missing APIs named until the server
serves them (librdkafka would crash the process otherwise: see ``require_apis``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

import pytest

from tests.real_client_helpers import (
    GROUP_OFFSETS,
    MEMBERSHIP,
    OFFSET_FETCH,
    QUIET,
    TXN_OFFSET_COMMIT,
    Served,
    bounded,
    create_topics,
    read_confluent,
    record_api_versions,
    require_apis,
)


@pytest.fixture
def served(kafka_server, monkeypatch, caplog):
    """The ``kafka_server`` fixture with the API versions its clients use recorded (printed at the end)."""
    caplog.set_level(logging.INFO, logger="idemcore.broker.server")  # why a connection was closed
    served = Served(kafka_server)
    record_api_versions(monkeypatch, served)
    yield served
    print(f"\nAPI versions used: {served.versions()}\nserver stats: {kafka_server.stats}")
    for record in caplog.get_records("setup") + caplog.get_records("call"):  # shown with a failure
        if record.name.startswith("idemcore") and (record.levelno >= logging.WARNING
                                                   or record.name == "idemcore.broker.server"):
            print(f"{record.levelname} {record.name}: {record.getMessage()}")


def key_of(sequence: int) -> bytes:
    return b"%08d" % sequence


def value_of(sequence: int, size: int = 100) -> bytes:
    return key_of(sequence).ljust(size, b".")


# ---------------------------------------------------------------- confluent-kafka (librdkafka)


@pytest.mark.parametrize("partitions", [1, 4])
def test_confluent_idempotent_producer_100k_read_back_once_in_order(served, caplog, partitions):
    """100 000 records (100-byte values, keys = sequence numbers) from an idempotent producer (acks=all); a
    consumer reading every partition from the beginning finds each record once, at the offset its delivery report
    gave, in the order sent, and stops at the partition's end."""
    from confluent_kafka import Producer

    count, topic = 100_000, f"idempotent-{partitions}"
    create_topics(served.bootstrap, {topic: partitions})
    delivered: dict[bytes, tuple[int, int]] = {}
    failed: list[str] = []

    def report(error, message):
        if error is not None:
            failed.append(str(error))
        else:
            delivered[message.key()] = (message.partition(), message.offset())

    def produce() -> None:
        producer = Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, **QUIET})
        for sequence in range(count):
            while True:
                try:
                    producer.produce(topic, value_of(sequence), key_of(sequence), on_delivery=report)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(30) == 0, "records still undelivered after 30 s"

    started = time.monotonic()
    bounded(60, produce)
    assert not failed, failed[:5]
    assert len(delivered) == count

    read = bounded(60, lambda: read_confluent(served.bootstrap, topic, range(partitions)))
    elapsed = time.monotonic() - started
    seen = read.all_keys()
    assert len(seen) == count and set(seen) == set(delivered)  # each record once
    for partition in range(partitions):
        records = read.records[partition]
        sequences = [int(key) for _, key, _ in records]
        assert sequences == sorted(sequences), f"partition {partition}: not in the order sent"
        assert [offset for offset, _, _ in records] == list(range(len(records)))  # no gap, no duplicate
        for offset, key, value in records:
            assert delivered[key] == (partition, offset)
            assert value == value_of(int(key))
        assert read.positions[partition] == read.high_watermarks[partition] == len(records)
    if partitions > 1:
        assert all(read.records[p] for p in range(partitions)), "the keys did not spread over the partitions"
    print(f"\n{count} records over {partitions} partition(s): produced and read back in {elapsed:.2f} s")
    served.assert_clean(caplog)


def test_confluent_transactions_commit_abort_isolation(served, caplog):
    """Committed and aborted transactions (two aborted after their records were flushed to the broker, one
    aborted with its records still queued): read_committed sees exactly the committed records, in order, once;
    read_uncommitted also the aborted ones that reached the broker; both end past the last commit marker."""
    from confluent_kafka import Producer

    topic, partitions, per_txn = "txn", 2, 50
    plan = ["commit", "abort-flushed", "commit", "abort", "commit", "abort-flushed", "commit"]
    create_topics(served.bootstrap, {topic: partitions})
    sent: dict[str, list[tuple[int, bytes]]] = {"commit": [], "abort-flushed": [], "abort": []}

    def produce() -> None:
        producer = Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "confluent-txn",
                             "linger.ms": 5, **QUIET})
        producer.init_transactions(15)
        sequence = 0
        for outcome in plan:
            producer.begin_transaction()
            for _ in range(per_txn):
                partition = sequence % partitions
                producer.produce(topic, outcome.encode(), key_of(sequence), partition=partition)
                sent[outcome].append((partition, key_of(sequence)))
                sequence += 1
            if outcome == "commit":
                producer.commit_transaction(15)
            else:
                if outcome == "abort-flushed":
                    assert producer.flush(15) == 0  # on the broker, in the open transaction
                producer.abort_transaction(15)

    bounded(60, produce)
    committed = bounded(30, lambda: read_confluent(served.bootstrap, topic, range(partitions), "read_committed"))
    everything = bounded(30, lambda: read_confluent(served.bootstrap, topic, range(partitions), "read_uncommitted"))

    for partition in range(partitions):
        want = [key for p, key in sent["commit"] if p == partition]
        assert committed.keys(partition) == want  # exactly the committed ones, in order, once
        assert {value for _, _, value in committed.records[partition]} == {b"commit"}
        uncommitted = everything.keys(partition)
        assert uncommitted == sorted(uncommitted) and len(set(uncommitted)) == len(uncommitted)
        assert set(want) | {key for p, key in sent["abort-flushed"] if p == partition} <= set(uncommitted)
        assert set(uncommitted) <= {key for records in sent.values() for p, key in records if p == partition}
        # The last transaction committed: a marker follows its last record, and both consumers end past it.
        last_record = committed.records[partition][-1][0]
        assert committed.positions[partition] == committed.high_watermarks[partition] == last_record + 2
        assert everything.positions[partition] == everything.high_watermarks[partition] == last_record + 2
    served.assert_clean(caplog)


def test_confluent_compressed_batches(served, caplog):
    """Compressed batches (gzip, snappy, lz4, zstd, one partition each; stored as sent): idempotent records, then
    a committed and an aborted transaction per codec; the consumers decompress what they read, read_committed
    sees the committed ones only."""
    from confluent_kafka import Producer

    codecs, topic, count = ("gzip", "snappy", "lz4", "zstd"), "compressed", 1_000
    create_topics(served.bootstrap, {topic: len(codecs)})

    def produce(partition: int, codec: str) -> None:
        common = {"bootstrap.servers": served.bootstrap, "compression.type": codec, "linger.ms": 5, **QUIET}
        producer = Producer({**common, "enable.idempotence": True})
        for sequence in range(count):
            producer.produce(topic, value_of(sequence), key_of(sequence), partition=partition)
        assert producer.flush(15) == 0
        producer = Producer({**common, "transactional.id": f"compressed-{codec}"})
        producer.init_transactions(15)
        for outcome in ("commit", "abort"):
            producer.begin_transaction()
            for sequence in range(count, count + 100):
                producer.produce(topic, outcome.encode(), key_of(sequence), partition=partition)
            assert producer.flush(15) == 0
            if outcome == "commit":
                producer.commit_transaction(15)
            else:
                producer.abort_transaction(15)

    for partition, codec in enumerate(codecs):
        bounded(60, partial(produce, partition, codec))
    committed = bounded(30, partial(read_confluent, served.bootstrap, topic, range(len(codecs)), "read_committed"))
    everything = bounded(30, partial(read_confluent, served.bootstrap, topic, range(len(codecs))))
    plain = [(key_of(s), value_of(s)) for s in range(count)]
    txn = [key_of(s) for s in range(count, count + 100)]
    for partition, codec in enumerate(codecs):
        assert [(k, v) for _, k, v in committed.records[partition]] == plain + [(k, b"commit") for k in txn], codec
        assert [(k, v) for _, k, v in everything.records[partition]] == (
            plain + [(k, b"commit") for k in txn] + [(k, b"abort") for k in txn]), codec
        assert committed.positions[partition] == committed.high_watermarks[partition] == count + 202, codec
    served.assert_clean(caplog)


def test_confluent_record_shapes(served, caplog):
    """Records of every shape round-trip: null key and value, headers (a null header value too), an explicit
    timestamp; acks=0 (no answer expected); batches larger than the consumer's fetch limits (KIP-74: the first
    batch is returned whole); a batch beyond the broker's message.max.bytes is refused with MESSAGE_TOO_LARGE and
    the next record of the same idempotent producer is still accepted."""
    from confluent_kafka import KafkaError, Producer

    create_topics(served.bootstrap, {"shapes": 1, "acks0": 1, "large": 1})
    reports: list[KafkaError | None] = []
    # Recent timestamps: older ones than retention.ms (7 days) would be deleted by the broker's housekeeping.
    base = int(time.time() * 1000) - 60_000

    def produce() -> None:
        producer = Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                             "message.max.bytes": 3_000_000, **QUIET})
        producer.produce("shapes", None, None, headers=[("a", b"1"), ("b", None)], timestamp=base + 123)
        producer.produce("shapes", b"v", b"k", headers=[("x", b"y")], timestamp=base + 456)
        for sequence in range(5):
            producer.produce("large", bytes([65 + sequence]) * 300_000, key_of(sequence))
        assert producer.flush(15) == 0
        producer.produce("large", b"x" * 2_000_000, b"too large", on_delivery=lambda e, m: reports.append(e))
        producer.produce("large", b"after", key_of(5), on_delivery=lambda e, m: reports.append(e))
        assert producer.flush(15) == 0
        fire_and_forget = Producer({"bootstrap.servers": served.bootstrap, "acks": 0, "linger.ms": 5, **QUIET})
        for sequence in range(1_000):
            fire_and_forget.produce("acks0", b"v", key_of(sequence))
        assert fire_and_forget.flush(15) == 0

    bounded(60, produce)
    assert [None if e is None else e.code() for e in reports] == [KafkaError.MSG_SIZE_TOO_LARGE, None]

    def read_all() -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "shapes", "enable.auto.commit": False,
                             "enable.partition.eof": True, "fetch.wait.max.ms": 50, **QUIET})
        try:
            consumer.assign([TopicPartition("shapes", 0, OFFSET_BEGINNING)])
            messages = []
            deadline = time.monotonic() + 20
            while len(messages) < 2 and time.monotonic() < deadline:
                messages += [m for m in consumer.consume(10, 0.2) if m.error() is None]
            shapes = [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in messages]
            assert shapes == [(None, None, [("a", b"1"), ("b", None)], base + 123),
                              (b"k", b"v", [("x", b"y")], base + 456)]
        finally:
            consumer.close()
        small = bounded(30, lambda: read_confluent(served.bootstrap, "acks0", [0]))
        assert small.keys(0) == [key_of(s) for s in range(1_000)]

    bounded(60, read_all)
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    def read_large() -> list[tuple[bytes, int]]:
        consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "large", "enable.auto.commit": False,
                             "fetch.max.bytes": 100_000, "message.max.bytes": 100_000,
                             "max.partition.fetch.bytes": 65_536, "fetch.wait.max.ms": 50, **QUIET})
        try:
            consumer.assign([TopicPartition("large", 0, OFFSET_BEGINNING)])
            got: list[tuple[bytes, int]] = []
            deadline = time.monotonic() + 20
            while len(got) < 6 and time.monotonic() < deadline:
                for message in consumer.consume(10, 0.2):
                    assert message.error() is None, message.error()
                    got.append((message.key(), len(message.value())))
            return got
        finally:
            consumer.close()

    assert bounded(30, read_large) == [(key_of(s), 300_000) for s in range(5)] + [(key_of(5), 5)]
    served.assert_clean(caplog)


def test_confluent_offsets_for_times(served, caplog):
    """offsets_for_times (ListOffsets with a timestamp): the first offset whose timestamp is at or after it."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    create_topics(served.bootstrap, {"times": 1})

    base = int(time.time() * 1000) - 60_000  # within retention.ms

    def run() -> list[int]:
        producer = Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True, **QUIET})
        for sequence in range(3):
            producer.produce("times", b"v", key_of(sequence), timestamp=base + 1000 * sequence)
            assert producer.flush(15) == 0  # one batch each
        consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "times", **QUIET})
        try:
            return [consumer.offsets_for_times([TopicPartition("times", 0, base + at)], 10)[0].offset
                    for at in (0, 500, 1000, 5000)]
        except KafkaException as error:
            raise AssertionError(f"offsets_for_times failed: {error}") from error
        finally:
            consumer.close()

    assert bounded(60, run) == [0, 1, 1, -1]
    served.assert_clean(caplog)


def test_confluent_hanging_transaction_times_out(served, caplog):
    """A transaction left open (records flushed, never ended) holds read_committed consumers at its first offset
    (the last stable offset); the broker aborts it after transaction.timeout.ms, the consumer then reaches the
    end past the abort marker, and the producer's late commit is refused as fenced (its epoch was bumped)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

    topic = "hanging"
    create_topics(served.bootstrap, {topic: 1})
    partition = TopicPartition(topic, 0)

    def run() -> tuple[list[int], float, KafkaError]:
        producer = Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "hanging",
                             "transaction.timeout.ms": 4000, "linger.ms": 5, **QUIET})
        producer.init_transactions(15)
        producer.begin_transaction()
        for sequence in range(10):
            producer.produce(topic, b"open", key_of(sequence), partition=0)
        assert producer.flush(15) == 0
        started = time.monotonic()
        consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "hanging-reader",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "enable.partition.eof": True, "fetch.wait.max.ms": 50, **QUIET})
        ends: list[int] = []  # the offset of each end of partition met
        try:
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            while not ends or ends[-1] == 0:
                assert time.monotonic() - started < 20, f"read_committed still held at {ends[-1:]} after 20 s"
                for message in consumer.consume(100, 0.1):
                    assert message.error() is not None, "read_committed returned a record of an open transaction"
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    ends.append(message.offset())
            waited = time.monotonic() - started
            assert consumer.position([partition])[0].offset == ends[-1]
        finally:
            consumer.close()
        with pytest.raises(KafkaException) as refused:
            producer.commit_transaction(15)
        return ends, waited, refused.value.args[0]

    ends, waited, refused = bounded(60, run)
    assert ends[0] == 0 and ends[-1] == 11  # held at the open transaction, then past its 10 records and marker
    assert waited >= 3, f"the transaction was aborted after {waited:.1f} s, before its 4 s timeout"
    assert refused.fatal() and refused.code() == KafkaError._FENCED, refused
    served.assert_clean(caplog)


def test_confluent_zombie_producer_fenced(served, caplog):
    """A second producer with the same transactional.id fences the first: its init aborts the first's open
    transaction (records on the broker), the first's next write is refused as fenced (fatal), and read_committed
    sees only the second producer's committed records."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    topic = "zombie"
    create_topics(served.bootstrap, {topic: 1})

    def run() -> KafkaError:
        settings = {"bootstrap.servers": served.bootstrap, "transactional.id": "zombie", "linger.ms": 5, **QUIET}
        zombie = Producer(settings)
        zombie.init_transactions(15)
        zombie.begin_transaction()
        for sequence in range(10):
            zombie.produce(topic, b"zombie", key_of(sequence), partition=0)
        assert zombie.flush(15) == 0
        successor = Producer(settings)
        successor.init_transactions(15)  # aborts the zombie's transaction and bumps the epoch
        successor.begin_transaction()
        for sequence in range(10, 15):
            successor.produce(topic, b"successor", key_of(sequence), partition=0)
        successor.commit_transaction(15)
        with pytest.raises(KafkaException) as fenced:
            zombie.produce(topic, b"zombie", key_of(99), partition=0)
            zombie.commit_transaction(15)
        return fenced.value.args[0]

    fenced = bounded(60, run)
    assert fenced.fatal() and fenced.code() == KafkaError._FENCED, fenced
    committed = bounded(30, lambda: read_confluent(served.bootstrap, topic, [0], "read_committed"))
    everything = bounded(30, lambda: read_confluent(served.bootstrap, topic, [0]))
    assert [(k, v) for _, k, v in committed.records[0]] == [(key_of(s), b"successor") for s in range(10, 15)]
    assert everything.keys(0) == [key_of(s) for s in range(15)]
    # 10 aborted records, the abort marker, 5 committed records, the commit marker.
    assert committed.positions[0] == everything.positions[0] == committed.high_watermarks[0] == 17
    served.assert_clean(caplog)


def test_confluent_consume_transform_produce(served, caplog):
    """The exactly-once loop: consume (read_committed, assign(), no auto commit), produce the transformed records
    and the consumer's offsets in one transaction, commit; one transaction midway is aborted (after its output
    reached the broker) and the consumer rewound to the committed offsets. The output then holds each
    transformed input exactly once, and the group's committed offsets are the input's end."""
    require_apis(OFFSET_FETCH, TXN_OFFSET_COMMIT)
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    source, sink, partitions, count, group = "ctp-in", "ctp-out", 2, 1_000, "ctp-group"
    create_topics(served.bootstrap, {source: partitions, sink: partitions})

    def fill() -> None:
        producer = Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                             **QUIET})
        for sequence in range(count):
            producer.produce(source, b"in-%d" % sequence, key_of(sequence), partition=sequence % partitions)
        assert producer.flush(15) == 0

    bounded(30, fill)
    source_partitions = [TopicPartition(source, p) for p in range(partitions)]
    ends = {p: count // partitions + (p < count % partitions) for p in range(partitions)}
    abort_at = 3
    report: dict[str, object] = {}

    def loop() -> list[TopicPartition]:
        consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": group,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50, **QUIET})
        producer = Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "ctp-txn",
                             "linger.ms": 5, **QUIET})
        try:
            consumer.assign(source_partitions)  # committed offsets (none yet: auto.offset.reset) via OffsetFetch
            producer.init_transactions(15)
            transactions = aborted = 0
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                messages = consumer.consume(200, 0.2)
                for message in messages:
                    assert message.error() is None, message.error()
                if not messages:
                    done = consumer.committed(source_partitions, 10)
                    if {tp.partition: tp.offset for tp in done} == ends:
                        break
                    continue
                producer.begin_transaction()
                for message in messages:
                    producer.produce(sink, message.value().replace(b"in-", b"out-"), message.key(),
                                     partition=message.partition())
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 15)
                transactions += 1
                if transactions == abort_at:
                    assert producer.flush(15) == 0  # the aborted output is on the broker
                    producer.abort_transaction(15)
                    aborted += 1
                    for tp in consumer.committed(source_partitions, 10):  # rewind, as an application does
                        consumer.seek(TopicPartition(source, tp.partition,
                                                     tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
                    continue
                producer.commit_transaction(15)
            report.update(transactions=transactions, aborted=aborted)
            return consumer.committed(source_partitions, 10)
        finally:
            consumer.close()

    final = bounded(90, loop)
    assert report["aborted"] == 1, report
    assert {tp.partition: tp.offset for tp in final} == ends

    output = bounded(30, lambda: read_confluent(served.bootstrap, sink, range(partitions), "read_committed"))
    for partition in range(partitions):
        want = [(key_of(s), b"out-%d" % s) for s in range(partition, count, partitions)]
        assert [(key, value) for _, key, value in output.records[partition]] == want  # once each, in order
    everything = bounded(30, lambda: read_confluent(served.bootstrap, sink, range(partitions)))
    assert len(everything.all_keys()) > count, "the aborted transaction's output never reached the broker"
    print(f"\n{report['transactions']} transactions, {report['aborted']} aborted")
    served.assert_clean(caplog)


def test_confluent_group_subscribe(served, caplog):
    """A consumer group with subscribe() (JoinGroup/SyncGroup/Heartbeat, OffsetFetch/OffsetCommit): two members
    read a topic together, each record once, and the commits leave the group at the topic's end."""
    require_apis(*MEMBERSHIP, *GROUP_OFFSETS)
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    retriable_commit = {KafkaError._NO_OFFSET, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION,
                        KafkaError.UNKNOWN_MEMBER_ID, KafkaError._STATE}

    topic, partitions, count, group = "subscribed", 4, 2_000, "confluent-group"
    create_topics(served.bootstrap, {topic: partitions})

    def fill() -> None:
        producer = Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                             **QUIET})
        for sequence in range(count):
            producer.produce(topic, b"v", key_of(sequence), partition=sequence % partitions)
        assert producer.flush(15) == 0

    bounded(30, fill)

    def consume() -> tuple[list[bytes], dict[int, int], list[set[int]]]:
        settings = {"bootstrap.servers": served.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                    "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                    "isolation.level": "read_committed", "fetch.wait.max.ms": 50, **QUIET}
        members = [Consumer(settings), Consumer(settings)]
        every = [TopicPartition(topic, p) for p in range(partitions)]

        def commit(member) -> None:
            try:
                member.commit(asynchronous=False)
            except KafkaException as error:  # nothing new to commit, or a rebalance under way: the next one
                if error.args[0].code() not in retriable_commit:
                    raise

        try:
            for member in members:
                member.subscribe([topic])
            keys: list[bytes] = []
            committed: dict[int, int] = {}
            deadline = time.monotonic() + 60
            while len(set(keys)) < count or committed != ends:
                assert time.monotonic() < deadline, f"{len(set(keys))} of {count} read, committed {committed}"
                for member in members:
                    messages = member.consume(500, 0.1)
                    for message in messages:
                        assert message.error() is None, message.error()
                        keys.append(message.key())
                    commit(member)
                if len(set(keys)) == count:
                    committed = {tp.partition: tp.offset for tp in members[0].committed(every, 10)}
            return keys, committed, [{tp.partition for tp in member.assignment()} for member in members]
        finally:
            for member in members:
                member.close()

    ends = {p: count // partitions for p in range(partitions)}
    keys, committed, assignments = bounded(90, consume)
    # Each record at least once (a rebalance may hand a partition over before its last read was committed: the
    # group's semantics without transactions), none other, and the commits end at the topic's end.
    assert set(keys) == {key_of(s) for s in range(count)} and len(keys) >= count
    assert committed == ends
    assert sorted(assignments[0] | assignments[1]) == list(range(partitions))
    print(f"\nassignments at the end: {assignments}; {len(keys) - count} record(s) read twice")
    served.assert_clean(caplog)


def test_interleaved_transactions_every_reader(served, caplog):
    """Three transactional producers interleave their transactions on one partition (each record flushed alone,
    so their batches alternate) and end them in a seeded order, some committed, some aborted. read_committed
    consumers of all three libraries (librdkafka Fetch v16, kafka-python v12, aiokafka v11) see exactly the
    committed records in offset order, and reach the end."""
    import random

    from confluent_kafka import Producer

    topic = "interleaved"
    create_topics(served.bootstrap, {topic: 1})
    rng = random.Random(7)

    def produce() -> list[bytes]:
        producers = [Producer({"bootstrap.servers": served.bootstrap, "transactional.id": f"interleaved-{i}",
                               "linger.ms": 0, **QUIET}) for i in range(3)]
        for producer in producers:
            producer.init_transactions(15)
        committed: list[bytes] = []
        sequence = 0
        for _ in range(4):
            for producer in producers:
                producer.begin_transaction()
            pending: list[list[bytes]] = [[], [], []]
            for _ in range(24):
                which = rng.randrange(3)
                producers[which].produce(topic, b"p%d" % which, key_of(sequence), partition=0)
                assert producers[which].flush(15) == 0
                pending[which].append(key_of(sequence))
                sequence += 1
            for which in rng.sample(range(3), 3):
                if rng.random() < 0.5:
                    producers[which].commit_transaction(15)
                    committed += pending[which]
                else:
                    producers[which].abort_transaction(15)
        return sorted(committed)

    want = bounded(60, produce)
    assert 0 < len(want) < 96

    read = bounded(30, lambda: read_confluent(served.bootstrap, topic, [0], "read_committed"))
    assert read.keys(0) == want
    assert read.positions[0] == read.high_watermarks[0]
    assert [key for _, key, _ in bounded(30, lambda: _kafka_python_read(served.bootstrap, topic, 1,
                                                                        "read_committed"))[0]] == want
    aio = bounded(30, lambda: asyncio.run(asyncio.wait_for(_aiokafka_read(served.bootstrap, topic, 1,
                                                                          "read_committed"), 25)))
    assert [key for _, key, _ in aio[0]] == want
    served.assert_clean(caplog)


def test_read_committed_from_inside_an_aborted_transaction(served, caplog):
    """A consumer that starts inside an aborted transaction (its first batches before the fetch offset) must still
    drop the rest of it: Fetch lists every aborted transaction overlapping the fetched range (Kafka's
    collectAbortedTxns), not only those starting in it. All three clients, from several offsets."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as ConfluentPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPartition

    topic = "inside-aborted"
    create_topics(served.bootstrap, {topic: 1})
    committed = [b"C%03d" % s for s in range(20)]

    def produce() -> None:
        producer = Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "inside", "linger.ms": 0,
                             **QUIET})
        producer.init_transactions(15)
        producer.begin_transaction()
        for sequence in range(100):  # offsets 0-99, in 10 batches
            producer.produce(topic, b"abort", b"A%03d" % sequence, partition=0)
            if sequence % 10 == 9:
                assert producer.flush(15) == 0
        producer.abort_transaction(15)  # marker at 100
        producer.begin_transaction()
        for key in committed:  # 101-120, marker at 121
            producer.produce(topic, b"commit", key, partition=0)
        producer.commit_transaction(15)

    def confluent_from(start: int) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "inside", "enable.auto.commit": False,
                             "isolation.level": "read_committed", "enable.partition.eof": True,
                             "fetch.wait.max.ms": 50, **QUIET})
        try:
            consumer.assign([ConfluentPartition(topic, 0, start)])
            keys: list[bytes] = []
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                messages = consumer.consume(100, 0.2)
                keys += [m.key() for m in messages if m.error() is None]
                if any(m.error() is not None for m in messages):
                    return keys
            raise AssertionError(f"no end of partition from {start} in 15 s")
        finally:
            consumer.close()

    def kafka_python_from(start: int) -> list[bytes]:
        consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, isolation_level="read_committed",
                                 enable_auto_commit=False)
        try:
            partition = KafkaPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, start)
            keys: list[bytes] = []
            deadline = time.monotonic() + 15
            while consumer.position(partition) < 122:
                assert time.monotonic() < deadline, f"kafka-python did not reach the end from {start}"
                for messages in consumer.poll(200).values():
                    keys += [m.key for m in messages]
            return keys
        finally:
            consumer.close()

    async def aiokafka_from(start: int) -> list[bytes]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as AioPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=served.bootstrap, isolation_level="read_committed",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            partition = AioPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, start)
            keys: list[bytes] = []
            while await consumer.position(partition) < 122:
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    keys += [m.key for m in messages]
            return keys
        finally:
            await consumer.stop()

    bounded(30, produce)
    for start in (0, 50, 99):
        assert bounded(30, partial(confluent_from, start)) == committed, f"confluent-kafka from {start}"
    for start in (50, 99):
        assert bounded(30, partial(kafka_python_from, start)) == committed, f"kafka-python from {start}"
        aio = bounded(30, partial(asyncio.run, asyncio.wait_for(aiokafka_from(start), 25)))
        assert aio == committed, f"aiokafka from {start}"
    served.assert_clean(caplog)


def test_auto_created_topics_and_end_offsets_at_the_last_stable_offset(served, caplog):
    """Each client's idempotent producer writes to a topic nobody created (Metadata makes it, one partition);
    with a transaction open on it, every client's end offsets are the last stable offset for read_committed and
    the high watermark for read_uncommitted (ListOffsets with each isolation level)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as ConfluentPartition
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaPartition

    async def aiokafka_part() -> tuple[int, dict[str, int]]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.structs import TopicPartition as AioPartition

        producer = AIOKafkaProducer(bootstrap_servers=served.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            offset = (await producer.send_and_wait("auto-aiokafka", b"v", b"k")).offset
        finally:
            await producer.stop()
        ends = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(bootstrap_servers=served.bootstrap, isolation_level=isolation)
            await consumer.start()
            try:
                ends[isolation] = (await consumer.end_offsets([AioPartition("open", 0)]))[AioPartition("open", 0)]
            finally:
                await consumer.stop()
        return offset, ends

    def run() -> dict[str, object]:
        seen: dict[str, object] = {}
        producer = Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True, **QUIET})
        for sequence in range(10):
            producer.produce("auto-confluent", b"v", key_of(sequence))
            producer.produce("open", b"v", key_of(sequence))
        assert producer.flush(15) == 0
        kafka_producer = KafkaProducer(bootstrap_servers=served.bootstrap, enable_idempotence=True,
                                       max_block_ms=10_000)
        try:
            seen["kafka-python offset"] = kafka_producer.send("auto-kafka-python", b"v", b"k").get(10).offset
        finally:
            kafka_producer.close(10)
        transactional = Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "open", **QUIET})
        transactional.init_transactions(15)
        transactional.begin_transaction()
        for sequence in range(5):
            transactional.produce("open", b"open", key_of(100 + sequence))
        assert transactional.flush(15) == 0  # 10 records stable, 5 in the open transaction
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "ends",
                                 "isolation.level": isolation, **QUIET})
            try:
                seen[f"confluent {isolation}"] = consumer.get_watermark_offsets(ConfluentPartition("open", 0), 10)
            finally:
                consumer.close()
            kafka_consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, isolation_level=isolation)
            try:
                ends = kafka_consumer.end_offsets([KafkaPartition("open", 0)], timeout_ms=10_000)
                seen[f"kafka-python {isolation}"] = ends[KafkaPartition("open", 0)]
            finally:
                kafka_consumer.close()
        seen["aiokafka offset"], aiokafka_ends = asyncio.run(asyncio.wait_for(aiokafka_part(), 30))
        for isolation, end in aiokafka_ends.items():
            seen[f"aiokafka {isolation}"] = end
        transactional.abort_transaction(15)
        return seen

    seen = bounded(60, run)
    assert seen == {"kafka-python offset": 0, "aiokafka offset": 0,
                    "confluent read_committed": (0, 10), "confluent read_uncommitted": (0, 15),
                    "kafka-python read_committed": 10, "kafka-python read_uncommitted": 15,
                    "aiokafka read_committed": 10, "aiokafka read_uncommitted": 15}
    assert {name: served.server.broker.topics.get(name) for name in
            ("auto-confluent", "auto-kafka-python", "auto-aiokafka")} == dict.fromkeys(
        ("auto-confluent", "auto-kafka-python", "auto-aiokafka"), 1)
    served.assert_clean(caplog)


# ---------------------------------------------------------------- kafka-python


def _kafka_python_read(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, list]:
    """Read ``topic`` from the beginning to its end (assign + seek_to_beginning) with kafka-python."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             request_timeout_ms=10_000)
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(assigned, timeout_ms=10_000)
        records: dict[int, list] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 30
        while any(consumer.position(tp, timeout_ms=10_000) < ends[tp] for tp in assigned):
            assert time.monotonic() < deadline, "kafka-python did not reach the end in 30 s"
            for tp, messages in consumer.poll(200).items():
                records[tp.partition] += [(m.offset, m.key, m.value) for m in messages]
        for tp in assigned:
            assert consumer.position(tp) == ends[tp]
        return records
    finally:
        consumer.close(autocommit=False)


def test_kafka_python_idempotent_and_transactions(served, caplog):
    """kafka-python: an idempotent producer (acks=all) read back by a read_committed consumer, each once and in
    order; then a transactional producer's committed and aborted transactions, read with both isolation levels."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    partitions, count = 2, 2_000
    plan = ["commit", "abort", "commit", "abort", "commit"]

    def run() -> tuple[dict, dict, dict, dict[str, list]]:
        admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
        try:
            admin.create_topics([NewTopic("kp-idempotent", partitions, 1), NewTopic("kp-txn", partitions, 1)])
        finally:
            admin.close()

        producer = KafkaProducer(bootstrap_servers=served.bootstrap, enable_idempotence=True, acks="all",
                                 linger_ms=5, max_block_ms=10_000)
        try:
            futures = [producer.send("kp-idempotent", value_of(s), key_of(s), partition=s % partitions)
                       for s in range(count)]
            producer.flush(15)
            offsets = [future.get(10).offset for future in futures]
        finally:
            producer.close(10)
        assert offsets == [s // partitions for s in range(count)]
        idempotent = _kafka_python_read(served.bootstrap, "kp-idempotent", partitions, "read_committed")

        sent: dict[str, list] = {"commit": [], "abort": []}
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, transactional_id="kafka-python-txn",
                                 linger_ms=5, max_block_ms=10_000)
        try:
            producer.init_transactions()
            sequence = 0
            for outcome in plan:
                producer.begin_transaction()
                for _ in range(40):
                    producer.send("kp-txn", outcome.encode(), key_of(sequence), partition=sequence % partitions)
                    sent[outcome].append((sequence % partitions, key_of(sequence)))
                    sequence += 1
                if outcome == "commit":
                    producer.commit_transaction()
                else:
                    producer.flush(15)  # the aborted records are on the broker
                    producer.abort_transaction()
        finally:
            producer.close(10)
        committed = _kafka_python_read(served.bootstrap, "kp-txn", partitions, "read_committed")
        uncommitted = _kafka_python_read(served.bootstrap, "kp-txn", partitions, "read_uncommitted")
        return idempotent, committed, uncommitted, sent

    idempotent, committed, uncommitted, sent = bounded(90, run)
    for partition in range(partitions):
        want = [key_of(s) for s in range(partition, count, partitions)]
        assert [key for _, key, _ in idempotent[partition]] == want
        assert [offset for offset, _, _ in idempotent[partition]] == list(range(len(want)))
        assert [key for _, key, _ in committed[partition]] == [k for p, k in sent["commit"] if p == partition]
        everything = sorted(sent["commit"] + sent["abort"], key=lambda sent_key: sent_key[1])
        assert [key for _, key, _ in uncommitted[partition]] == [k for p, k in everything if p == partition]
    served.assert_clean(caplog)


def test_kafka_python_consumer_group_subscribe(served, caplog):
    """kafka-python: a consumer group with subscribe() reads every record once, commits, and the group's
    committed offsets are the topic's end (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, OffsetCommit/OffsetFetch)."""
    require_apis(*MEMBERSHIP, *GROUP_OFFSETS)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic, partitions, count, group = "kp-group", 3, 1_500, "kafka-python-group"

    def run() -> tuple[list[bytes], dict[int, int | None]]:
        admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, enable_idempotence=True, linger_ms=5,
                                 max_block_ms=10_000)
        try:
            for sequence in range(count):
                producer.send(topic, b"v", key_of(sequence), partition=sequence % partitions)
            producer.flush(15)
        finally:
            producer.close(10)
        consumer = KafkaConsumer(topic, bootstrap_servers=served.bootstrap, group_id=group,
                                 isolation_level="read_committed", auto_offset_reset="earliest",
                                 enable_auto_commit=False, session_timeout_ms=6_000, heartbeat_interval_ms=500,
                                 request_timeout_ms=10_000)
        try:
            keys: list[bytes] = []
            deadline = time.monotonic() + 45
            while len(keys) < count and time.monotonic() < deadline:
                for messages in consumer.poll(200).values():
                    keys += [m.key for m in messages]
            consumer.commit(timeout_ms=10_000)
            committed = {p: consumer.committed(TopicPartition(topic, p), timeout_ms=10_000) for p in range(partitions)}
        finally:
            consumer.close(autocommit=False)
        return keys, committed

    keys, committed = bounded(90, run)
    assert sorted(keys) == [key_of(s) for s in range(count)]
    assert committed == {p: count // partitions for p in range(partitions)}
    served.assert_clean(caplog)


def test_kafka_python_consume_transform_produce(served, caplog):
    """kafka-python's exactly-once loop: a read_committed consumer (assign(), a group id for the offsets, no auto
    commit) and a transactional producer sending the consumer's positions with ``send_offsets_to_transaction``;
    one transaction aborted after its output was flushed, the consumer rewound to the committed offsets. The output
    holds each transformed record once, in order; the group's committed offsets are the input's end."""
    require_apis(OFFSET_FETCH, TXN_OFFSET_COMMIT)
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    source, sink, partitions, count, group = "kp-ctp-in", "kp-ctp-out", 2, 600, "kp-ctp-group"
    ends = {p: count // partitions for p in range(partitions)}
    report: dict[str, int] = {}

    def run() -> tuple[dict[int, int | None], dict[int, list]]:
        admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
        try:
            admin.create_topics([NewTopic(source, partitions, 1), NewTopic(sink, partitions, 1)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, enable_idempotence=True, linger_ms=5,
                                 max_block_ms=10_000)
        try:
            for sequence in range(count):
                producer.send(source, b"in-%d" % sequence, key_of(sequence), partition=sequence % partitions)
            producer.flush(15)
        finally:
            producer.close(10)

        inputs = [TopicPartition(source, p) for p in range(partitions)]
        consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, group_id=group,
                                 isolation_level="read_committed", enable_auto_commit=False,
                                 auto_offset_reset="earliest", request_timeout_ms=10_000)
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, transactional_id="kp-ctp-txn", linger_ms=5,
                                 max_block_ms=10_000)
        try:
            consumer.assign(inputs)
            producer.init_transactions()
            transactions = aborted = 0
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, "kafka-python's loop did not finish in 60 s"
                batches = consumer.poll(200, max_records=150)
                if not batches:
                    done = {tp.partition: consumer.committed(tp, timeout_ms=10_000) for tp in inputs}
                    if done == ends:
                        break
                    continue
                producer.begin_transaction()
                for tp, messages in batches.items():
                    for m in messages:
                        producer.send(sink, m.value.replace(b"in-", b"out-"), m.key, partition=tp.partition)
                positions = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in batches}
                producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                transactions += 1
                if transactions == 3:
                    producer.flush(15)
                    producer.abort_transaction()
                    aborted += 1
                    for tp in inputs:  # rewind, as an application does
                        offset = consumer.committed(tp, timeout_ms=10_000)
                        if offset is None:
                            consumer.seek_to_beginning(tp)
                        else:
                            consumer.seek(tp, offset)
                    continue
                producer.commit_transaction()
            report.update(transactions=transactions, aborted=aborted)
            committed = {tp.partition: consumer.committed(tp, timeout_ms=10_000) for tp in inputs}
        finally:
            producer.close(10)
            consumer.close(autocommit=False)
        return committed, _kafka_python_read(served.bootstrap, sink, partitions, "read_committed")

    committed, output = bounded(90, run)
    assert report["aborted"] == 1, report
    assert committed == ends
    for partition in range(partitions):
        want = [(key_of(s), b"out-%d" % s) for s in range(partition, count, partitions)]
        assert [(key, value) for _, key, value in output[partition]] == want
    served.assert_clean(caplog)


# ---------------------------------------------------------------- aiokafka


async def _aiokafka_read(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, list]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning()
        ends = await consumer.end_offsets(assigned)
        records: dict[int, list] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 30
        while any([await consumer.position(tp) < ends[tp] for tp in assigned]):
            assert time.monotonic() < deadline, "aiokafka did not reach the end in 30 s"
            for tp, messages in (await consumer.getmany(timeout_ms=200)).items():
                records[tp.partition] += [(m.offset, m.key, m.value) for m in messages]
        return records
    finally:
        await consumer.stop()


def test_aiokafka_transactions_commit_abort(served, caplog):
    """aiokafka: a transactional producer commits and aborts (aborted records delivered to the broker first); a
    read_committed consumer sees exactly the committed records, a read_uncommitted one all of them."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic, partitions = "aio-txn", 2
    plan = ["commit", "abort", "commit", "abort", "commit"]

    async def main() -> tuple[dict, dict, dict[str, list]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=served.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            await admin.close()
        sent: dict[str, list] = {"commit": [], "abort": []}
        producer = AIOKafkaProducer(bootstrap_servers=served.bootstrap, transactional_id="aiokafka-txn", linger_ms=5)
        await producer.start()
        try:
            sequence = 0
            for outcome in plan:
                await producer.begin_transaction()
                deliveries = []
                for _ in range(30):
                    partition = sequence % partitions
                    deliveries.append(await producer.send(topic, outcome.encode(), key_of(sequence),
                                                          partition=partition))
                    sent[outcome].append((partition, key_of(sequence)))
                    sequence += 1
                if outcome == "commit":
                    await producer.commit_transaction()
                else:
                    await asyncio.gather(*deliveries)  # on the broker, in the open transaction
                    await producer.abort_transaction()
        finally:
            await producer.stop()
        committed = await _aiokafka_read(served.bootstrap, topic, partitions, "read_committed")
        uncommitted = await _aiokafka_read(served.bootstrap, topic, partitions, "read_uncommitted")
        return committed, uncommitted, sent

    committed, uncommitted, sent = bounded(90, lambda: asyncio.run(asyncio.wait_for(main(), 60)))
    for partition in range(partitions):
        assert [key for _, key, _ in committed[partition]] == [k for p, k in sent["commit"] if p == partition]
        assert {value for _, _, value in committed[partition]} == {b"commit"}
        everything = sorted(sent["commit"] + sent["abort"], key=lambda sent_key: sent_key[1])
        assert [key for _, key, _ in uncommitted[partition]] == [k for p, k in everything if p == partition]
    served.assert_clean(caplog)


def test_aiokafka_idempotent_and_send_offsets_to_transaction(served, caplog):
    """aiokafka: an idempotent producer's records read back once and in order; then its exactly-once loop (a
    read_committed consumer with a group id and assign(), ``send_offsets_to_transaction``, one transaction aborted
    and the consumer rewound to the committed offsets): the output holds each transformed record once, in order,
    and the group's committed offsets are the input's end. aiokafka uses the oldest versions (TxnOffsetCommit v0)."""
    require_apis(OFFSET_FETCH, TXN_OFFSET_COMMIT)
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    source, sink, partitions, count, group = "aio-in", "aio-out", 2, 600, "aio-group"
    ends = {p: count // partitions for p in range(partitions)}
    report: dict[str, int] = {}

    async def main() -> tuple[dict, dict, dict]:
        admin = AIOKafkaAdminClient(bootstrap_servers=served.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(source, partitions, 1), NewTopic(sink, partitions, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=served.bootstrap, enable_idempotence=True, acks="all",
                                    linger_ms=5)
        await producer.start()
        try:
            deliveries = [await producer.send(source, b"in-%d" % s, key_of(s), partition=s % partitions)
                          for s in range(count)]
            offsets = [(await delivery).offset for delivery in deliveries]
        finally:
            await producer.stop()
        assert offsets == [s // partitions for s in range(count)]
        read_back = await _aiokafka_read(served.bootstrap, source, partitions, "read_committed")

        inputs = [TopicPartition(source, p) for p in range(partitions)]
        consumer = AIOKafkaConsumer(bootstrap_servers=served.bootstrap, group_id=group,
                                    isolation_level="read_committed", enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        producer = AIOKafkaProducer(bootstrap_servers=served.bootstrap, transactional_id="aio-ctp-txn",
                                    linger_ms=5)
        await consumer.start()
        await producer.start()
        try:
            consumer.assign(inputs)
            transactions = aborted = 0
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=150)
                if not batches:
                    if {tp.partition: await consumer.committed(tp) for tp in inputs} == ends:
                        break
                    continue
                await producer.begin_transaction()
                for tp, messages in batches.items():
                    for m in messages:
                        await producer.send(sink, m.value.replace(b"in-", b"out-"), m.key, partition=tp.partition)
                positions = {tp: OffsetAndMetadata(await consumer.position(tp), "") for tp in batches}
                await producer.send_offsets_to_transaction(positions, group)
                transactions += 1
                if transactions == 3:
                    await producer.flush()
                    await producer.abort_transaction()
                    aborted += 1
                    for tp in inputs:  # rewind, as an application does
                        offset = await consumer.committed(tp)
                        if offset is None:
                            await consumer.seek_to_beginning(tp)
                        else:
                            consumer.seek(tp, offset)
                    continue
                await producer.commit_transaction()
            report.update(transactions=transactions, aborted=aborted)
            committed = {tp.partition: await consumer.committed(tp) for tp in inputs}
        finally:
            await producer.stop()
            await consumer.stop()
        output = await _aiokafka_read(served.bootstrap, sink, partitions, "read_committed")
        return read_back, committed, output

    read_back, committed, output = bounded(90, lambda: asyncio.run(asyncio.wait_for(main(), 75)))
    assert report["aborted"] == 1, report
    assert committed == ends
    for partition in range(partitions):
        sequences = range(partition, count, partitions)
        assert [(o, k) for o, k, _ in read_back[partition]] == [(i, key_of(s)) for i, s in enumerate(sequences)]
        assert [(k, v) for _, k, v in output[partition]] == [(key_of(s), b"out-%d" % s) for s in sequences]
    served.assert_clean(caplog)


def test_confluent_lists_every_topic(served, caplog):
    """librdkafka's list_topics sends Metadata v13 for all topics with three bytes after the body, which Kafka's
    parser ignores: the server must answer it, not close the connection."""
    from confluent_kafka.admin import AdminClient

    create_topics(served.bootstrap, {"listed": 2})
    admin = AdminClient({"bootstrap.servers": served.bootstrap, **QUIET})
    topics = bounded(30, lambda: admin.list_topics(timeout=10).topics)
    assert len(topics["listed"].partitions) == 2
    served.assert_clean(caplog)
