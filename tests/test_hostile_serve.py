"""`idemcore serve` as a hostile user and environment treat it, the broker a child process on a free loopback port:

* bad command lines and config files are refused in one line (status 2, no traceback) before anything is made
  on disk;
* SIGKILL at random moments while confluent-kafka producers write (idempotent, and transactional) loses no
  acknowledged record and repeats none, and the broker starts again each time;
* damage to the files of a data directory served by real clients is refused naming the file, or served without
  a traceback;
* a second broker on the same directory is refused without disturbing the first;
* hostile admin requests (CreateTopics, DeleteRecords, ListOffsets) get Kafka's error codes.

The file-by-file fault matrix of the broker in process is tests/test_fault_matrix.py; this file holds what the
command, a real client or a file only serve writes (topics.json, the internal topics) adds to it.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.peers import ServeProcess
from tests.real_client_helpers import QUIET, bounded, create_topics, read_confluent


def serve(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """`idemcore serve ARGS` to its end (these are refused before listening)."""
    return subprocess.run([sys.executable, "-m", "idemcore.cli", "serve", *args], capture_output=True, text=True,
                          timeout=timeout)


def assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Status 2, no traceback, the error in one line naming each of ``words``; that line."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize("args, words", [
    # --topics is checked as it is read: the data directory was made (and a first topic created) before.
    (("--topics", "bad/name:1"), ["'bad/name'", "not legal"]),
    (("--topics", "__consumer_offsets:3"), ["'__consumer_offsets'", "internal"]),
    (("--topics", "a:100000"), ["'a'", "100,000 partitions"]),
    (("--topics", "a:3,a:4"), ["'a'", "named twice"]),
    (("--topics", "a:x"), ["'a:x'"]),
    # An address that cannot be listened on is found before the directory is made.
    (("--host", "no-such-host.invalid"), ["no-such-host.invalid"]),
    (("--override", "log.segment.bytes=abc"), ["'abc'", "log.segment.bytes"]),
    (("--override", "log.segment.bytes="), ["''", "log.segment.bytes"]),
    (("--override", "num.partitions=0"), ["'0'", "num.partitions"]),
    (("--override", "message.max.bytes=99999999999999999999"), ["99999999999999999999", "message.max.bytes"]),
    (("--override", "=5"), ["'=5'"]),
    (("--override", "node.id=1", "--override", "broker.id=2"), ["node.id=1", "broker.id=2"]),
])
def test_a_bad_command_line_is_one_line_and_makes_nothing(tmp_path, args, words):
    data = tmp_path / "data"
    assert_refused(serve("--data-dir", str(data), "--port", "0", *args), *words)
    assert not data.exists()


@pytest.mark.parametrize("below", ["", "sub"])
def test_a_data_dir_that_is_a_file_is_one_line_and_the_file_stays(tmp_path, below):
    afile = tmp_path / "afile"
    afile.write_bytes(b"mine")
    data = afile / below if below else afile
    assert_refused(serve("--data-dir", str(data), "--port", "0"), str(data), "is a file")
    assert afile.read_bytes() == b"mine"


def test_a_taken_port_is_refused_before_the_directory_is_made(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_refused(serve("--data-dir", str(tmp_path / "data"), "--port", str(port)), f"127.0.0.1:{port}",
                       "in use")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("kind", ["directory", "missing", "huge", "bad escape", "not latin-1 text", "unreadable"])
def test_a_bad_config_file_is_one_line_and_makes_nothing(tmp_path, kind):
    config = tmp_path / "server.properties"
    words = [str(config)]
    if kind == "directory":
        config.mkdir()
    elif kind == "huge":  # as --config /dev/zero would be: read to a bound, not forever
        config.write_bytes(b"#" * ((1 << 20) + 1))
        words.append("larger than")
    elif kind == "bad escape":
        config.write_text("num.partitions=\\uZZZZ\n")
    elif kind == "not latin-1 text":  # read as ISO-8859-1 (as Java's Properties.load): the value is named
        config.write_bytes(b"log.segment.bytes=\xff\xfe1000\n")
        words = ["log.segment.bytes", "\u00ff\u00fe1000"]
    elif kind == "unreadable":  # open() fails (ENXIO) whoever runs it: chmod 000 would not stop root
        listening = socket.socket(socket.AF_UNIX)
        listening.bind(str(config))
        listening.close()
    result = serve("--config", str(config), "--data-dir", str(tmp_path / "data"), "--port", "0")
    assert_refused(result, *words)
    assert not (tmp_path / "data").exists()


# ---------------------------------------------------------------- SIGKILL while real clients write


def _produce_until(bootstrap: str, stop: threading.Event, acked: list[tuple[int, int, bytes]], seed: int,
                   transactional: bool) -> None:
    """Write with acks=all (idempotent; ``transactional``: in transactions of 1-30 records) until ``stop`` or the
    broker goes; ``acked`` gets (partition, offset, value) of each record acknowledged (a transaction's once it
    committed)."""
    from confluent_kafka import KafkaException, Producer

    rng = random.Random(seed)
    settings = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                "linger.ms": rng.choice([0, 5]), "message.timeout.ms": 3000, "reconnect.backoff.max.ms": 100, **QUIET}
    if transactional:
        settings |= {"transactional.id": "hostile", "transaction.timeout.ms": 60_000}
    producer = Producer(settings)
    try:
        if transactional:
            producer.init_transactions(10)
        number = 0
        while not stop.is_set():
            delivered: list[tuple[int, int, bytes]] = []

            def report(error, message, delivered=delivered) -> None:
                if error is None:
                    delivered.append((message.partition(), message.offset(), message.value()))
            if transactional:
                producer.begin_transaction()
            for _ in range(rng.randint(1, 30)):
                number += 1
                producer.produce("k", f"{seed}-{number}".encode(), partition=rng.randrange(3), on_delivery=report)
                producer.poll(0)
            if transactional:
                producer.commit_transaction(3)
            else:
                producer.flush(3)
            acked.extend(delivered)
    except KafkaException:
        pass  # the broker was killed under it
    finally:
        try:
            producer.purge()
        except KafkaException:
            pass  # a transactional producer in a fatal state


@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "transactional"])
def test_sigkill_while_a_real_producer_writes_keeps_every_acknowledged_record_once(tmp_path, transactional):
    rng = random.Random(20260)
    broker = ServeProcess(tmp_path / "data", "--override", "log.segment.bytes=4000",
                          "--override", "log.index.interval.bytes=200").start()
    try:
        create_topics(broker.bootstrap, {"k": 3})
        acked: list[tuple[int, int, bytes]] = []
        for round_number in range(2 if transactional else 3):
            stop = threading.Event()
            writer = threading.Thread(target=_produce_until, daemon=True, args=(
                broker.bootstrap, stop, acked, round_number, transactional))
            writer.start()
            time.sleep(rng.uniform(0.3, 1.2))
            broker.kill()
            stop.set()
            writer.join(15)
            assert not writer.is_alive()
            broker.start()
        read = read_confluent(broker.bootstrap, "k", range(3),
                              "read_committed" if transactional else "read_uncommitted", seconds=15)
    finally:
        assert broker.stop() == 0
    assert acked, "nothing was acknowledged before the kills"
    for partition in range(3):
        stored = [(offset, value) for offset, _, value in read.records[partition]]
        values = [value for _, value in stored]
        assert len(values) == len(set(values)), f"k-{partition}: a record stored twice"
        at = dict((value, offset) for offset, value in stored)
        expected = [(offset, value) for p, offset, value in acked if p == partition]
        assert [(at.get(value), value) for _, value in expected] == expected  # each where it was acknowledged
    assert "Traceback" not in broker.output()


# ---------------------------------------------------------------- damaged files of a served directory


def _served_directory(data: Path) -> None:
    """A directory written by real clients: topic t (2 partitions), committed transactions (so
    __transaction_state has records), a group's committed offset; closed cleanly. Index entries every 100 bytes:
    a clean start then checks only each segment's tail after its last entry, as Kafka's does."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    with ServeProcess(data, "--override", "log.index.interval.bytes=100") as broker:
        create_topics(broker.bootstrap, {"t": 2})
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "x", **QUIET})
        producer.init_transactions(10)
        for round_number in range(2):
            producer.begin_transaction()
            for i in range(10):
                producer.produce("t", b"%d-%d" % (round_number, i), partition=i % 2)
            producer.commit_transaction(10)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", **QUIET})
        consumer.commit(offsets=[TopicPartition("t", 0, 5)], asynchronous=False)
        consumer.close()


def _transaction_state_segment(data: Path) -> Path:
    (segment,) = [path for path in data.glob("__transaction_state-*/*.log") if path.stat().st_size]
    return segment


def test_a_flipped_byte_in_the_transaction_log_is_refused_naming_the_segment(tmp_path):
    data = tmp_path / "data"
    bounded(60, lambda: _served_directory(data))
    segment = _transaction_state_segment(data)
    damaged = bytearray(segment.read_bytes())
    damaged[30] ^= 0x40  # in the first batch, before the tail a clean start checks: the coordinator meets it
    segment.write_bytes(bytes(damaged))
    before = sorted(str(path.relative_to(data)) for path in data.rglob("*"))
    line = assert_refused(serve("--data-dir", str(data), "--port", "0"), str(segment), "CRC")
    assert "is corrupt" in line
    assert sorted(str(path.relative_to(data)) for path in data.rglob("*")) == before  # nothing removed


def test_without_topics_json_a_coordinator_request_is_answered_not_a_traceback(tmp_path):
    """topics.json lost: the broker starts, warns that it leaves partitions unserved, and a client asking for a
    coordinator (whose internal topic's directories are still there) is told COORDINATOR_NOT_AVAILABLE, with
    the directory named in the log, instead of its connection closed on a traceback; the data stays."""
    from confluent_kafka import KafkaException, Producer

    data = tmp_path / "data"
    bounded(60, lambda: _served_directory(data))
    (data / "topics.json").unlink()
    sizes = {str(path): path.stat().st_size for path in data.rglob("*.log")}
    with ServeProcess(data) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "y", **QUIET})
        with pytest.raises(KafkaException):
            producer.init_transactions(3)
        output = broker.output()
    assert "holds partitions this broker does not serve" in output and "restore topics.json" in output
    assert "Traceback" not in output
    assert "could not make __transaction_state" in output and "restore topics.json, which listed it" in output
    assert {str(path): path.stat().st_size for path in data.rglob("*.log")} == sizes


@pytest.mark.parametrize("name", ["topics.json", "log-start-offset-checkpoint", "producer-id-floor"])
@pytest.mark.parametrize("fault", ["truncate-0", "directory"])
def test_damage_to_a_file_only_serve_writes_is_refused_naming_it(tmp_path, name, fault):
    data = tmp_path / "data"
    bounded(60, lambda: _served_directory(data))
    if name == "log-start-offset-checkpoint":  # written once a log start moved: DeleteRecords
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        with ServeProcess(data) as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
            for future in admin.delete_records([TopicPartition("t", 1, 3)]).values():
                future.result(10)
    path = data / name
    if fault == "truncate-0":
        path.write_bytes(b"")
    else:
        path.unlink()
        path.mkdir()
    assert_refused(serve("--data-dir", str(data), "--port", "0"), str(path))


# ---------------------------------------------------------------- two brokers, one directory


def test_a_second_serve_on_the_directory_is_refused_and_the_first_keeps_serving(tmp_path):
    from confluent_kafka import Producer

    data = tmp_path / "data"
    with ServeProcess(data, "--topics", "t:1") as first:
        producer = Producer({"bootstrap.servers": first.bootstrap, "acks": "all", **QUIET})
        producer.produce("t", b"before", partition=0)
        assert producer.flush(10) == 0
        files = {str(path): path.stat().st_size for path in data.rglob("*") if path.is_file()}
        link = tmp_path / "link"
        link.symlink_to(data)
        for directory in (data, link):  # by another name too: the lock is on the directory
            assert_refused(serve("--data-dir", str(directory), "--port", "0", "--topics", "u:1"), str(directory),
                           "in use by another broker")
        assert {str(path): path.stat().st_size for path in data.rglob("*") if path.is_file()} == files
        assert not (data / "u-0").exists()
        producer.produce("t", b"after", partition=0)
        assert producer.flush(10) == 0
        read = read_confluent(first.bootstrap, "t", [0], seconds=15)
    assert [value for _, _, value in read.records[0]] == [b"before", b"after"]


# ---------------------------------------------------------------- hostile admin requests


def test_hostile_create_topics_get_kafkas_error_codes_and_make_nothing(tmp_path):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    data = tmp_path / "data"
    with ServeProcess(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})

        def outcome(*topics: NewTopic) -> dict[str, int]:
            futures = admin.create_topics(list(topics), operation_timeout=10, request_timeout=10)
            codes = {}
            for name, future in futures.items():
                error = future.exception(15)
                codes[name] = KafkaError.NO_ERROR if error is None else error.args[0].code()
            return codes

        # One broker keeps one replica: more (or none) is refused, never served with fewer than asked.
        assert outcome(NewTopic("rf3", 1, 3)) == {"rf3": KafkaError.INVALID_REPLICATION_FACTOR}
        assert outcome(NewTopic("rf0", 1, 0)) == {"rf0": KafkaError.INVALID_REPLICATION_FACTOR}
        # A name twice in one request: neither is made (Kafka's ControllerApis), answered once.
        assert outcome(NewTopic("twice", 1, 1), NewTopic("twice", 2, 1)) == {"twice": KafkaError.INVALID_REQUEST}
        assert outcome(NewTopic("p", 10_001, 1)) == {"p": KafkaError.INVALID_PARTITIONS}
        assert outcome(NewTopic("x" * 250, 1, 1)) == {"x" * 250: KafkaError.TOPIC_EXCEPTION}
        assert outcome(NewTopic("__consumer_offsets", 1, 1)) == {"__consumer_offsets": KafkaError.TOPIC_EXCEPTION}
        assert outcome(NewTopic("cfg", 1, 1, config={"segment.bytes": "-1"})) == {"cfg": KafkaError.INVALID_CONFIG}
        assert outcome(NewTopic("cfg", 1, 1, config={"no.such": "1"})) == {"cfg": KafkaError.INVALID_CONFIG}
        assert outcome(NewTopic("fine", 2, 1), NewTopic("fine-default", 1, -1)) == {
            "fine": KafkaError.NO_ERROR, "fine-default": KafkaError.NO_ERROR}
        topics = admin.list_topics(timeout=10).topics
        output = broker.output()
    assert {"fine", "fine-default"} <= set(topics)
    assert not {"rf3", "rf0", "twice", "p", "cfg"} & set(topics)
    assert not {"rf3-0", "rf0-0", "twice-0", "cfg-0"} & {path.name for path in data.iterdir()}
    assert sorted(json.loads((data / "topics.json").read_text())["topics"]) == ["fine", "fine-default"]
    assert "Traceback" not in output


def test_hostile_delete_records_and_list_offsets_are_answered_and_change_nothing_else(tmp_path):
    from confluent_kafka import KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    with ServeProcess(tmp_path / "data", "--topics", "t:1") as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
        for i in range(10):
            producer.produce("t", b"%d" % i, partition=0)
        assert producer.flush(10) == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})

        def delete(offset: int) -> int:
            (future,) = admin.delete_records([TopicPartition("t", 0, offset)]).values()
            error = future.exception(15)
            return KafkaError.NO_ERROR if error is None else error.args[0].code()

        def listed(spec: OffsetSpec) -> int:
            (future,) = admin.list_offsets({TopicPartition("t", 0): spec}).values()
            return future.result(15).offset

        for beyond in (11, 2 ** 62, -2, -3):  # -1 is Kafka's "to the high watermark"; others are out of range
            assert delete(beyond) == KafkaError.OFFSET_OUT_OF_RANGE
        assert delete(4) == KafkaError.NO_ERROR
        assert delete(2) == KafkaError.NO_ERROR  # below the log start: nothing moves back
        assert (listed(OffsetSpec.earliest()), listed(OffsetSpec.latest())) == (4, 10)
        assert listed(OffsetSpec.for_timestamp(2 ** 62)) == -1  # no record that late
        assert listed(OffsetSpec.for_timestamp(0)) == 4
        read = read_confluent(broker.bootstrap, "t", [0], seconds=15)
        output = broker.output()
    assert [value for _, _, value in read.records[0]] == [b"%d" % i for i in range(4, 10)]
    assert "Traceback" not in output
