"""The log directory failing under `idemcore serve` (a child process, real clients): a full disk (RLIMIT_FSIZE)
under transactions, descriptors exhausted (RLIMIT_NOFILE), files deleted under the running broker, SIGKILL
during the halt, and topic creations that fail. The broker must halt with status 1 and one line, or keep
serving; a restart must hold every acknowledged record once and leave no transaction hanging."""

from __future__ import annotations

import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import pytest

from idemcore.cluster import answers_api_versions
from tests.peers import ServeProcess, wait_listening
from tests.real_client_helpers import QUIET, create_topics, read_confluent, wait_until
from tests.test_server_faults import (
    FAST_CLIENT,
    PARTITIONS,
    RECORDS_PER_TRANSACTION,
    TOPIC,
    Outcomes,
    Sent,
    check_idempotent,
    check_transactions,
    flush_bounded,
    produce_numbered,
    read_back,
)

HALTED = "the log directory failed"
#: The warning of a child whose accept() failed for want of descriptors (EMFILE): the flood has reached its limit.
OUT_OF_DESCRIPTORS = "cannot accept a connection"


class LimitedServe(ServeProcess):
    """:class:`ServeProcess` whose child also has RLIMIT_NOFILE ``descriptors``."""

    def __init__(self, data_dir: Path, *args: str, descriptors: int, **kwargs) -> None:
        super().__init__(data_dir, *args, **kwargs)
        self.descriptors = descriptors
        if self.file_size_limit is None:
            self.file_size_limit = resource.RLIM_INFINITY  # so that start() runs the preexec below

    def _limit_file_size(self) -> None:
        super()._limit_file_size()
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.descriptors, self.descriptors))


def flood_until_out_of_descriptors(serve: ServeProcess, flood: list[socket.socket], seconds: float = 60) -> None:
    """Open connections to the child (kept in ``flood``) until its accept() fails for want of descriptors (its
    warning) or it exits. A connect that times out (the listen backlog full while a loaded child accepts slowly)
    is tried again rather than taken for the limit."""
    process = serve.process
    assert process is not None
    deadline = time.monotonic() + seconds
    while OUT_OF_DESCRIPTORS not in serve.output() and process.poll() is None:
        assert time.monotonic() < deadline, f"the child accepted {len(flood)} connections in {seconds} s, no limit"
        try:
            flood.append(socket.create_connection(("127.0.0.1", serve.port), timeout=1))
        except OSError:
            pass


def wait_halted(serve: ServeProcess, seconds: float = 20) -> str:
    """Wait for the child to exit; assert it halted (status 1, one line, no traceback); its output."""
    assert serve.process is not None
    status = serve.process.wait(seconds)
    serve.process = None
    output = serve.output()
    assert status == 1, (status, output[-2000:])
    assert "Traceback" not in output, output[-3000:]
    assert sum(HALTED in line for line in output.splitlines()) == 1, output[-2000:]
    return output


def assert_lso_reaches_high(bootstrap: str, seconds: float) -> None:
    """read_committed reaches each partition's high watermark: no transaction is left open."""
    def settled() -> bool:
        read = read_confluent(bootstrap, TOPIC, range(PARTITIONS), "read_committed", seconds=10)
        return all(read.positions[p] == read.high_watermarks[p] for p in range(PARTITIONS))
    wait_until(settled, seconds, "the last stable offset reaching the high watermark (a transaction hanging)", 0.5)


# ---------------------------------------------------------------- 1. a full disk under transactions


def _transactions_until_halt(serve: ServeProcess, outcomes: Outcomes, deadline: float) -> None:
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": serve.bootstrap, "transactional.id": "full-disk",
                         "transaction.timeout.ms": 3000, "message.timeout.ms": 3000, "request.timeout.ms": 2000,
                         "linger.ms": 1, **FAST_CLIENT})
    producer.init_transactions(10)
    n = 0
    try:
        while time.monotonic() < deadline and serve.process is not None and serve.process.poll() is None:
            ending = False
            try:
                producer.begin_transaction()
                for j in range(RECORDS_PER_TRANSACTION):
                    producer.produce(TOPIC, key=b"%04d:%04d" % (n, j), value=b"v" * 200, partition=j % PARTITIONS)
                    producer.poll(0)
                if n % 5 == 4:
                    producer.abort_transaction(5)
                    outcomes.aborted.add(n)
                else:
                    ending = True
                    producer.commit_transaction(5)
                    outcomes.committed.add(n)
            except KafkaException as exc:
                outcomes.errors.append(f"txn {n}: {exc.args[0]}")
                (outcomes.unknown if ending else outcomes.aborted).add(n)
                break
            n += 1
    finally:
        producer.purge()
        try:
            producer.flush(1)
        except KafkaException:
            pass


def test_a_full_disk_under_transactions_halts_and_the_restart_commits_or_aborts_each(tmp_path):
    settings = ("--topics", f"{TOPIC}:{PARTITIONS}", "--quiet", "--fsync")
    serve = ServeProcess(tmp_path / "data", *settings, file_size_limit=48 * 1024)
    serve.start()
    outcomes = Outcomes()
    try:
        _transactions_until_halt(serve, outcomes, time.monotonic() + 30)
        wait_halted(serve)
        assert outcomes.committed, outcomes
        assert not (tmp_path / "data" / ".kafka_cleanshutdown").exists()
        serve.file_size_limit = None
        serve.start()
        assert_lso_reaches_high(serve.bootstrap, 15)  # the open transaction timed out (3 s) and was aborted
        records = read_back(serve.bootstrap, read_committed=True, timeout=10)
    finally:
        serve.stop()
    check_transactions(outcomes, records)
    assert "Traceback" not in serve.output()


# ---------------------------------------------------------------- 2. descriptors


def test_a_connection_flood_past_the_descriptor_limit_does_not_halt(tmp_path):
    # Not --quiet: the warning that accept() failed says the child met its limit.
    serve = LimitedServe(tmp_path / "data", "--topics", f"{TOPIC}:{PARTITIONS}", descriptors=512)
    serve.start()
    flood: list[socket.socket] = []
    try:
        flood_until_out_of_descriptors(serve, flood)  # past the child's 512 descriptors
        assert serve.process is not None and serve.process.poll() is None, serve.output()[-2000:]
        for connection in flood:
            connection.close()
        flood.clear()
        wait_until(lambda: answers_api_versions(serve.port), 15, "the broker answering once the flood is gone")
        sent = Sent()
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "acks": "all",
                             "message.timeout.ms": 10_000, **FAST_CLIENT})
        deadline = time.monotonic() + 15
        for i in range(300):
            produce_numbered(producer, sent, i, deadline)
        assert flush_bounded(producer, deadline) == 0
        assert len(sent.acked) == 300, sent.failed
        records = read_back(serve.bootstrap, timeout=10)
    finally:
        for connection in flood:
            connection.close()
        status = serve.stop()
    check_idempotent(sent, records)
    assert status == 0, serve.output()[-2000:]
    assert HALTED not in serve.output() and "Traceback" not in serve.output(), serve.output()[-3000:]


def test_descriptors_exhausted_at_a_roll_halt_cleanly_and_the_restart_is_whole(tmp_path):
    """Connections hold every descriptor but a few, then segments roll: a roll that cannot open its files takes the
    directory offline (as Kafka's roll does on an IOException), serve halts in one line, the restart keeps every
    acknowledged record."""
    data = tmp_path / "data"
    serve = LimitedServe(data, "--topics", f"{TOPIC}:{PARTITIONS}",  # not --quiet: OUT_OF_DESCRIPTORS is a warning
                         "--override", "log.segment.bytes=2000", descriptors=80)
    serve.start()
    sent = Sent()
    flood: list[socket.socket] = []
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 1, "batch.num.messages": 10, "message.timeout.ms": 5000,
                         "request.timeout.ms": 2000,
                         **FAST_CLIENT})
    try:
        deadline = time.monotonic() + 15
        for i in range(30):
            produce_numbered(producer, sent, i, deadline)
        assert flush_bounded(producer, deadline) == 0 and len(sent.acked) == 30
        flood_until_out_of_descriptors(serve, flood)  # its descriptors are spent
        for i in range(30, 3000):  # rolls every ~2000 bytes need new files
            produce_numbered(producer, sent, i, deadline)
            if i % 20 == 0:
                producer.poll(0.01)
                if serve.process is None or serve.process.poll() is not None:
                    break
        flush_bounded(producer, deadline)
        halted = serve.process is not None and serve.process.poll() is not None
        for connection in flood:
            connection.close()
        flood.clear()
        assert halted, serve.output()[-2000:]
        wait_halted(serve)
        serve.start()
        records = read_back(serve.bootstrap, timeout=10)
    finally:
        for connection in flood:
            connection.close()
        producer.purge()
        serve.stop()
    check_idempotent(sent, records)
    assert "Traceback" not in serve.output(), serve.output()[-3000:]


# ---------------------------------------------------------------- 3. files deleted under the broker


def _retention_caught_up(directory: Path, retention_bytes: int) -> bool:
    """Whether retention.bytes leaves nothing to delete in a partition's directory: without its oldest segment the
    log would be smaller than ``retention_bytes`` (Kafka's ``deleteRetentionSizeBreachedSegments``)."""
    try:
        sizes = [path.stat().st_size for path in sorted(directory.glob("*.log"))]
    except OSError:  # a segment deleted between the listing and the stat: not settled yet
        return False
    return len(sizes) <= 1 or sum(sizes) - retention_bytes < sizes[0]


@pytest.mark.parametrize("what", ["segment", "directory"])
def test_deleting_files_under_a_running_broker_halts_or_serves_never_a_traceback(tmp_path, what):
    """A user deletes partition 0's oldest segment (which retention then deletes too) or its whole directory
    (whose next roll, and the clean stop's snapshot, cannot be written): the broker serves on or halts in one
    line, never a traceback; the restart refuses the damaged partition naming it, or serves; after the advised
    removal of the checkpoints the other partitions hold every acknowledged record."""
    data = tmp_path / "data"
    serve = ServeProcess(data, "--topics", f"{TOPIC}:{PARTITIONS}", "--quiet",
                         "--override", "log.segment.bytes=2000", "--override", "log.retention.check.interval.ms=300",
                         "--override", "log.retention.bytes=5000")
    serve.start()
    sent = Sent()
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 1, "batch.num.messages": 10, "message.timeout.ms": 5000,
                         "request.timeout.ms": 2000,
                         **FAST_CLIENT})
    try:
        deadline = time.monotonic() + 15
        for i in range(600):
            produce_numbered(producer, sent, i, deadline)
        assert flush_bounded(producer, deadline) == 0
        victim = data / f"{TOPIC}-0"
        if what == "segment":
            segments = sorted(victim.glob("*.log"))
            assert len(segments) > 1, segments
            segments[0].unlink()
        else:
            victim.rename(tmp_path / "trash")  # in one step (the broker writes in it meanwhile), then gone
            shutil.rmtree(tmp_path / "trash")
        for i in range(600, 1200):
            produce_numbered(producer, sent, i, deadline)
            producer.poll(0)
        flush_bounded(producer, deadline)
        process = serve.process
        assert process is not None
        # Retention (run by the broker's housekeeping each second) has met what was written, partition 0's damage
        # with it, when the other partitions have nothing left to delete; or the broker halted.
        wait_until(lambda: process.poll() is not None or all(
            _retention_caught_up(data / f"{TOPIC}-{p}", 5000) for p in range(1, PARTITIONS)), 30,
            "a retention check after the last records, or the halt")
        if serve.process.poll() is None:
            status = serve.stop()
            assert status in (0, 1), serve.output()[-3000:]
        else:
            wait_halted(serve)
        try:
            serve.start()
        except RuntimeError:  # refused naming what is missing: the advice taken
            assert f"{TOPIC}-0" in serve.output().splitlines()[-1], serve.output()[-2000:]
            for name in ("recovery-point-offset-checkpoint", "written-log-ends"):
                (data / name).unlink(missing_ok=True)
            serve.start()
        read = read_confluent(serve.bootstrap, TOPIC, range(1, PARTITIONS), seconds=10)
    finally:
        producer.purge()
        serve.stop()
    output = serve.output()
    assert "Traceback" not in output, output[-3000:]
    assert output.count(HALTED) <= 1, output[-3000:]
    for partition in range(1, PARTITIONS):  # nothing acknowledged elsewhere is lost (retention took the oldest)
        keys = {key for _, key, _ in read.records[partition]}
        start = min((offset for offset, _, _ in read.records[partition]), default=0)
        acked = {key for key, (p, offset) in sent.acked.items() if p == partition and offset >= start}
        assert acked and acked <= keys


# ---------------------------------------------------------------- 4. SIGKILL during the halt, a second start


def test_sigkill_at_the_halt_and_a_second_start_while_the_first_exits(tmp_path):
    data = tmp_path / "data"
    settings = ("--topics", f"{TOPIC}:{PARTITIONS}", "--quiet")
    serve = ServeProcess(data, *settings, file_size_limit=24 * 1024)
    serve.start()
    sent = Sent()
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 2, "message.timeout.ms": 5000, "request.timeout.ms": 2000, **FAST_CLIENT})
    try:
        deadline = time.monotonic() + 15
        for i in range(5000):
            produce_numbered(producer, sent, i, deadline)
            if i % 20 == 0:
                producer.poll(0.002)
                if serve.process is None or serve.process.poll() is not None or HALTED in serve.output():
                    break
        assert serve.process is not None
        serve.process.kill()  # at or right after the halt line
        serve.process.wait(10)
        serve.process = None
        flush_bounded(producer, deadline)
        serve.file_size_limit = None
        second = subprocess.Popen([sys.executable, "-m", "idemcore.cli", "serve", "--data-dir", str(data),
                                   "--port", str(serve.port), *settings], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        try:
            wait_listening(serve.port, second)
        finally:
            second.kill()  # SIGKILL the first restart too
            second.wait(10)
        serve.start()
        records = read_back(serve.bootstrap, timeout=10)
    finally:
        producer.purge()
        status = serve.stop()
    check_idempotent(sent, records)
    assert status == 0 and "Traceback" not in serve.output(), serve.output()[-3000:]


# ---------------------------------------------------------------- 5. failed topic creations


def test_a_failed_creation_never_removes_a_directory_it_did_not_make(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    data = tmp_path / "data"
    serve = ServeProcess(data, "--quiet")
    serve.start()
    try:
        create_topics(serve.bootstrap, {"base": 1})
        (data / "x-1").write_bytes(b"the user's")  # a file where partition 1 of x would go
        (data / "y-2").mkdir()  # and a directory where partition 2 of y would go, with a file in it
        (data / "y-2" / "notes").write_text("mine")
        admin = AdminClient({"bootstrap.servers": serve.bootstrap, **QUIET})
        for name in ("x", "y"):
            future = admin.create_topics([NewTopic(name, 3, 1)], request_timeout=10)[name]
            with pytest.raises(confluent_kafka.KafkaException):
                future.result(10)
        assert (data / "x-1").read_bytes() == b"the user's"
        assert (data / "y-2" / "notes").read_text() == "mine"
        assert not (data / "x-0").exists() and not (data / "y-0").exists()
        assert serve.process is not None and serve.process.poll() is None
    finally:
        status = serve.stop()
    assert status == 0, serve.output()[-2000:]


def test_a_clean_stop_that_cannot_write_its_snapshot_takes_the_directory_offline(tmp_path):
    """A partition's directory removed under the broker: closing cannot write its snapshot there; the stop is then
    a failure of the directory (no clean-shutdown marker, the listeners told: serve halts), not an exception."""
    from idemcore.broker import Broker
    from tests.test_purgatory import produce

    data = tmp_path / "data"
    broker = Broker({"t": 2}, data_dir=data)
    told: list[str] = []
    broker.log_manager.on_offline.append(told.append)
    for partition in (0, 1):
        produce(broker, partition)
    shutil.rmtree(data / "t-0")
    broker.close()
    assert broker.log_manager.offline is not None and len(told) == 1 and "t-0" in told[0], told
    assert not (data / ".kafka_cleanshutdown").exists()
