"""Broker: one kernel call per produce request, persisted logs, recovery by replay (docs/rules.md §2)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from idemcore.broker import Broker, LogCorruptionError, PartitionLog
from idemcore.broker.written_ends import rewind_written_end
from idemcore.client import DeliveryError, Producer
from idemcore.client.partitioner import murmur2, partition_for_key
from idemcore.clock import wall_clock_ms
from idemcore.errors import IdemcoreError
from idemcore.net.messages import InitProducerIdRequest, ProduceRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from tests.helpers import set_recovery_point

#: Batches carry the time the tests start: a restart from a snapshot forgets producers idle for a day (Kafka).
NOW = wall_clock_ms()


def batch(partition, values, pid=5, epoch=0, seq=0, topic="t", timestamp=NOW):
    return RecordBatch(topic, partition, values, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       max_timestamp=timestamp)


def codes(response):
    return [(r.error_code, r.base_offset) for r in response.responses]


@pytest.mark.parametrize("text, expected", [("21", -973932308), ("foobar", -790332482),
                                            ("a-little-bit-long-string", -985981536),
                                            ("a-little-bit-longer-string", -1486304829)])
def test_murmur2_matches_kafka(text, expected):
    assert murmur2(text.encode()) == expected


def test_partition_for_key_is_positive_murmur2_modulo():
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_request_answers_per_partition_and_duplicates_get_original_offsets(backend):
    broker = Broker({"t": 2}, backend=backend)
    request = ProduceRequest((batch(0, [b"a", b"b"]), batch(1, [b"c"]), batch(9, [b"x"])))
    first = broker.handle(request)
    assert codes(first) == [(0, 0), (0, 0), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    again = broker.handle(request)
    assert codes(again) == codes(first)
    assert broker.log("t", 0).log_end_offset == 2 and broker.log("t", 1).log_end_offset == 1
    gap = broker.handle(ProduceRequest((batch(0, [b"z"], seq=5),)))
    assert codes(gap) == [(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)]
    assert broker.log("t", 0).log_end_offset == 2  # nothing written for a rejected batch


def test_malformed_batches_are_rejected_and_not_written():
    broker = Broker({"t": 1})
    response = broker.handle(ProduceRequest((batch(0, ["text"]),)))
    assert codes(response) == [(ErrorCode.CORRUPT_MESSAGE, -1)]
    response = broker.handle(ProduceRequest((batch(0, []),)))
    assert codes(response) == [(ErrorCode.INVALID_RECORD, -1)]
    response = broker.handle(ProduceRequest((batch(0, [b"a"]), batch(0, [b"b"], seq=1))))
    assert codes(response) == [(0, 0), (ErrorCode.INVALID_REQUEST, -1)]
    assert broker.log("t", 0).log_end_offset == 1


def test_restarted_broker_still_catches_retries(tmp_path):
    request = ProduceRequest((batch(0, [b"a", b"b"]),))
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert codes(broker.handle(request)) == [(0, 0)]
        first_id = broker.handle(InitProducerIdRequest()).producer_id
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert codes(broker.handle(request)) == [(0, 0)]  # a duplicate, answered with the original offset
        assert broker.log("t", 0).log_end_offset == 2
        assert [v for _, _, v, _ in broker.log("t", 0).records()] == [b"a", b"b"]
        assert broker.handle(InitProducerIdRequest()).producer_id >= first_id + 1000  # a fresh block after restart
        assert codes(broker.handle(ProduceRequest((batch(0, [b"c"], seq=2),)))) == [(0, 2)]


def test_torn_tail_is_truncated_on_recovery(tmp_path):
    broker = Broker({"t": 1}, data_dir=tmp_path)
    broker.handle(ProduceRequest((batch(0, [b"a"]),)))
    broker.handle(ProduceRequest((batch(0, [b"b"], seq=1),)))
    broker.kill()  # a crash: no clean-shutdown checkpoint or snapshot
    path = tmp_path / "t-0" / "00000000000000000000.log"
    path.write_bytes(path.read_bytes()[:-3])  # the last frame lost its end in the crash
    rewind_written_end(tmp_path, "t-0", 1)  # ... and the end of the write it died in was never recorded
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert broker.log("t", 0).log_end_offset == 1
        assert broker.log("t", 0).truncated_bytes > 0
        assert codes(broker.handle(ProduceRequest((batch(0, [b"b"], seq=1),)))) == [(0, 1)]


def test_expired_producers_are_forgotten():
    broker = Broker({"t": 1}, producer_id_expiration_ms=1000)
    broker.handle(ProduceRequest((RecordBatch("t", 0, [b"a"], None, 5, 0, 0, max_timestamp=10),)))
    assert broker.remove_expired_producers(500) == 0
    assert broker.remove_expired_producers(1010) == 1
    # unknown again: any sequence is accepted
    assert codes(broker.handle(ProduceRequest((batch(0, [b"b"], seq=40),)))) == [(0, 1)]


def test_bad_topics_and_acks_raise():
    with pytest.raises(ValueError, match="topic 't' needs a positive partition count, got 0"):
        Broker({"t": 0})
    with pytest.raises(ValueError, match="acks must be one of"):
        Broker({"t": 1}).handle(ProduceRequest((batch(0, [b"a"]),), acks=2))
    with pytest.raises(TypeError, match="cannot handle a str"):
        Broker({"t": 1}).handle("produce")


def _fail_once(monkeypatch, owner, name: str) -> list[int]:
    """Make ``owner.name`` raise OSError on its next call only; returns the list of calls that raised."""
    original = getattr(owner, name)
    raised: list[int] = []

    def failing(*args, **kwargs):
        if not raised:
            raised.append(1)
            raise OSError(28, "No space left on device")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)
    return raised


def test_a_failed_log_write_commits_no_state_and_takes_the_directory_offline(backend, monkeypatch):
    """Kafka's log directory failure: a write that raised leaves no producer state behind, and nothing more is
    appended (the retry included) until a restart, on any partition; the restart is the next test's."""
    broker = Broker({"t": 2}, backend=backend)
    request = ProduceRequest((batch(0, [b"a", b"b"]), batch(1, [b"c"])))
    raised = _fail_once(monkeypatch, PartitionLog, "append")
    first = broker.handle(request)
    assert raised
    # Partition 0's write failed; partition 1's, after it in the request, is not tried on the failed directory.
    assert codes(first) == [(ErrorCode.KAFKA_STORAGE_ERROR, -1)] * 2
    assert "writing t-0 at offset 0 failed" in first.responses[0].error_message
    assert "the log directory is offline" in first.responses[1].error_message
    assert broker.log("t", 0).log_end_offset == 0 and broker.state.next_offset(0) == 0
    assert broker.state.row_of(0, 5) is None  # nothing of the failed batch reached the producer state
    assert "No space left on device" in (broker.log_manager.offline or "")
    retry = broker.handle(request)
    assert codes(retry) == [(ErrorCode.KAFKA_STORAGE_ERROR, -1)] * 2
    assert "the log directory is offline" in retry.responses[1].error_message
    assert broker.log("t", 0).log_end_offset == 0 and broker.log("t", 1).log_end_offset == 0


def test_a_failed_sync_takes_the_batch_back_and_the_retry_after_a_restart_is_appended_once(tmp_path, monkeypatch):
    request = ProduceRequest((batch(0, [b"a"]),))
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        raised = _fail_once(monkeypatch, os, "fsync")
        assert codes(broker.handle(request)) == [(ErrorCode.KAFKA_STORAGE_ERROR, -1)] and raised
        assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == 0
        assert codes(broker.handle(request)) == [(ErrorCode.KAFKA_STORAGE_ERROR, -1)]  # offline until a restart
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # not a clean stop: the next start scans
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert codes(broker.handle(request)) == [(0, 0)]
    with Broker({"t": 1}, data_dir=tmp_path) as broker:  # what the disk holds: the batch, once
        assert [v for _, _, v, _ in broker.log("t", 0).records()] == [b"a"]
        assert codes(broker.handle(request)) == [(0, 0)]


def test_a_failed_fsync_at_start_records_no_clean_shutdown_and_no_recovery_point(tmp_path, monkeypatch):
    """The start's own flush fails (EIO): the directory is offline, the start is refused, and neither the
    recovery points nor a clean-shutdown marker speak for the unflushed tail; the next start scans it."""
    import errno

    broker = Broker({"t": 1}, data_dir=tmp_path, fsync=False)
    broker.handle(ProduceRequest((batch(0, [b"a"]),)))
    broker.kill()  # the batch is in the page cache only
    checkpoint = (tmp_path / "recovery-point-offset-checkpoint").read_bytes()

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output error"):
        Broker({"t": 1}, data_dir=tmp_path, fsync=False)
    monkeypatch.undo()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_bytes() == checkpoint
    with Broker({"t": 1}, data_dir=tmp_path, fsync=False) as again:
        assert not again.log_manager.clean_shutdown
        assert [v for _, _, v, _ in again.log("t", 0).records()] == [b"a"]


def test_rejections_name_every_value(backend):
    broker = Broker({"t": 1}, backend=backend)
    broker.handle(ProduceRequest((batch(0, [b"a"] * 3, pid=42, epoch=2, seq=0),)))
    gap = broker.handle(ProduceRequest((batch(0, [b"x"] * 2, pid=42, epoch=2, seq=7),))).responses[0]
    assert gap.error_message == ("OUT_OF_ORDER_SEQUENCE_NUMBER: producer 42 epoch 2 on t-0: incoming sequence 7..8, "
                                 "expected 3 (sequence_gap)")
    old = broker.handle(ProduceRequest((batch(0, [b"x"], pid=42, epoch=1, seq=3),))).responses[0]
    assert old.error_message == ("INVALID_PRODUCER_EPOCH: producer 42 epoch 1 on t-0: epoch 1 is older than the "
                                 "current epoch 2 (epoch_regression)")
    producer = Producer(broker, backend=backend)
    producer.idempotence.set_producer_id_and_epoch(42, 1)  # a zombie of producer 42: its exception says why
    with pytest.raises(DeliveryError, match=r"producer 42 epoch 1 on t-0: epoch 1 is older than the current epoch 2"):
        producer.send("t", b"y", partition=0).result()


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_records_acknowledged_with_any_acks_survive_the_process_dying(tmp_path, acks):
    """Kafka's acks=1 means "in the leader's log" (the OS page cache), not "buffered in the process"."""
    script = (
        "import os, sys\n"
        "from idemcore import Broker, Producer\n"
        f"broker = Broker({{'t': 1}}, data_dir={str(tmp_path)!r})\n"
        f"producer = Producer(broker, acks={acks}, enable_idempotence={acks == -1})\n"
        "for i in range(10):\n"
        "    producer.send('t', b'v%d' % i, partition=0).result()\n"
        "print('acknowledged', flush=True)\n"
        "os._exit(0)  # no close, no flush: the process just ends\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "acknowledged", result.stderr
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert [v for _, _, v, _ in broker.log("t", 0).records()] == [b"v%d" % i for i in range(10)]


def test_a_second_broker_on_the_same_directory_is_refused(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as first:
        with pytest.raises(IdemcoreError, match=rf"{tmp_path} is in use by another broker \(process {os.getpid()}\)"):
            Broker({"t": 1}, data_dir=tmp_path)
        code = f"from idemcore import Broker; Broker({{'t': 1}}, data_dir={str(tmp_path)!r})"
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert other.returncode != 0 and "is in use by another broker" in other.stderr
        assert codes(first.handle(ProduceRequest((batch(0, [b"a"]),)))) == [(0, 0)]
    with Broker({"t": 1}, data_dir=tmp_path) as again:  # released on close
        assert again.log("t", 0).log_end_offset == 1


def test_producer_ids_in_the_logs_are_not_handed_out_again_when_the_id_store_is_lost(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        old = broker.handle(InitProducerIdRequest()).producer_id
        broker.handle(ProduceRequest((batch(0, [b"old"], pid=old),)))
    (tmp_path / "producer_ids.sqlite").unlink()
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        new = broker.handle(InitProducerIdRequest()).producer_id
        assert new > old
        producer = Producer(broker)
        assert producer.send("t", b"new", partition=0).result().offset == 1  # written, not taken for a duplicate
        assert [v for _, _, v, _ in broker.log("t", 0).records()] == [b"old", b"new"]


def _two_batches(tmp_path) -> Path:
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        broker.handle(ProduceRequest((batch(0, [b"a"]),)))
        broker.handle(ProduceRequest((batch(0, [b"b"], seq=1),)))
    return tmp_path / "t-0" / "00000000000000000000.log"


# Inside the first batch (the second is intact): its leader epoch (outside the CRC), its CRC'd attributes, a
# record's value.
@pytest.mark.parametrize("byte", [12, 21, 66])
def test_a_flipped_byte_in_the_middle_of_a_log_is_refused_not_truncated(tmp_path, byte):
    path = _two_batches(tmp_path)
    data = bytearray(path.read_bytes())
    data[byte] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError, match=r"t-0: .* is corrupt at byte 0: .*the log ends at offset 0, but "
                                                 r"held 2 when the broker last started, closed or wrote it"):
        Broker({"t": 1}, data_dir=tmp_path)
    assert path.read_bytes() == bytes(data)  # nothing cut
    data[byte] ^= 0xFF  # repaired: the lock was released, the directory opens again
    path.write_bytes(bytes(data))
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert broker.log("t", 0).log_end_offset == 2


@pytest.mark.parametrize("damage", ["delete", "empty", "cut"])
def test_a_log_shorter_than_at_the_last_start_or_close_is_refused(tmp_path, damage):
    path = _two_batches(tmp_path)
    if damage == "delete":
        path.unlink()
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(path.read_bytes()[:-3])  # one whole frame, then one cut short
    message = {"delete": r"is missing .*, but held offsets up to 1",
               "empty": r"is shorter, or .* is missing: the log ends at offset 0, but held 2",
               "cut": r"is corrupt at byte \d+: .*the log ends at offset 1, but held 2"}[damage]
    with pytest.raises(LogCorruptionError, match=rf"t-0: .*{message} when the broker last started, closed or wrote it"):
        Broker({"t": 1}, data_dir=tmp_path)
    (tmp_path / "recovery-point-offset-checkpoint").unlink()  # the operator accepts the loss, as the message says
    (tmp_path / "written-log-ends").unlink()
    if damage == "cut":  # without recovery points nothing says the broker wrote the tail: it is not cut for them
        with pytest.raises(LogCorruptionError, match=r"not cut\. Move the file aside, or truncate it to 69 bytes"):
            Broker({"t": 1}, data_dir=tmp_path)
        os.truncate(path, 69)
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert broker.log("t", 0).log_end_offset in (0, 1)


def test_a_closed_broker_acknowledges_nothing(tmp_path):
    broker = Broker({"t": 1}, data_dir=tmp_path)
    producer = Producer(broker)
    assert producer.send("t", b"one", partition=0).result().offset == 0
    broker.close()
    with pytest.raises(IdemcoreError, match="broker 0 is closed"):
        producer.send("t", b"two", partition=0).result()
    with Broker({"t": 1}, data_dir=tmp_path) as again:
        assert [v for _, _, v, _ in again.log("t", 0).records()] == [b"one"]


@pytest.mark.parametrize("field, value, code", [
    ("max_timestamp", 1.5, ErrorCode.INVALID_RECORD), ("producer_id", 5.0, ErrorCode.INVALID_RECORD),
    ("producer_epoch", None, ErrorCode.INVALID_RECORD), ("max_timestamp", 2**64, ErrorCode.INVALID_RECORD),
    ("values", None, ErrorCode.CORRUPT_MESSAGE), ("values", b"abc", ErrorCode.CORRUPT_MESSAGE),
    ("is_transactional", "yes", ErrorCode.INVALID_RECORD), ("topic", ["t"], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
])
def test_a_malformed_batch_is_answered_and_does_not_wedge_its_neighbour(tmp_path, field, value, code):
    """Malformed metadata is refused before anything is written, so the good batch beside it is committed."""
    with Broker({"t": 2}, data_dir=tmp_path) as broker:
        bad = dataclasses.replace(batch(1, [b"x"], pid=9), **{field: value})
        response = broker.handle(ProduceRequest((batch(0, [b"a"]), bad)))
        assert codes(response) == [(0, 0), (code, -1)]
        assert codes(broker.handle(ProduceRequest((batch(0, [b"b"], seq=1),)))) == [(0, 1)]  # not wedged
        assert codes(broker.handle(ProduceRequest((batch(0, [b"a"]),)))) == [(0, 0)]  # the first is committed


def test_an_unexpected_error_while_writing_still_commits_what_was_written(monkeypatch):
    broker = Broker({"t": 2})
    original = PartitionLog.append

    def append(self, base_offset, stored):
        if self.partition == 1:
            raise RuntimeError("disk controller on fire")
        return original(self, base_offset, stored)

    monkeypatch.setattr(PartitionLog, "append", append)
    with pytest.raises(RuntimeError, match="on fire"):
        broker.handle(ProduceRequest((batch(0, [b"a"]), batch(1, [b"b"]))))
    monkeypatch.setattr(PartitionLog, "append", original)
    # t-0 was written and committed: its retry is a duplicate; t-1 was not: its retry is appended.
    assert codes(broker.handle(ProduceRequest((batch(0, [b"a"]), batch(1, [b"b"]))))) == [(0, 0), (0, 0)]
    assert broker.log("t", 0).log_end_offset == 1 and broker.log("t", 1).log_end_offset == 1


def test_a_made_up_huge_producer_id_does_not_exhaust_the_allocator(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        broker.handle(ProduceRequest((batch(0, [b"x"], pid=2**63 - 1),)))
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        response = broker.handle(InitProducerIdRequest())
        assert response.error_code == 0 and response.producer_id < 2**62


def test_a_log_whose_offsets_go_backwards_is_refused(tmp_path):
    path = _two_batches(tmp_path)
    path.write_bytes(path.read_bytes() * 2)  # every frame valid, offsets 0, 1, 0, 1
    with pytest.raises(LogCorruptionError, match=r"t-0: .* is corrupt at byte \d+: it holds offset 0 where offset 2 "):
        Broker({"t": 1}, data_dir=tmp_path)


def test_a_frame_inside_the_torn_write_is_not_taken_for_corruption(tmp_path):
    """A record whose bytes hold a whole frame (here, a copy of the log itself) is cut by a crash mid-write."""
    inner = _two_batches(tmp_path / "inner").read_bytes()
    with Broker({"t": 1}, data_dir=tmp_path / "b") as broker:
        broker.handle(ProduceRequest((batch(0, [b"a"]),)))
        broker.handle(ProduceRequest((batch(0, [b"x" * 40 + inner], seq=1),)))
    path = tmp_path / "b" / "t-0" / "00000000000000000000.log"
    path.write_bytes(path.read_bytes()[:-5])  # torn in a crash, with no checkpoint of the run
    set_recovery_point(tmp_path / "b", "t", 0, 1)
    rewind_written_end(tmp_path / "b", "t-0", 1)
    with Broker({"t": 1}, data_dir=tmp_path / "b") as broker:
        assert broker.log("t", 0).log_end_offset == 1 and broker.log("t", 0).truncated_bytes > 0


@pytest.mark.parametrize("name", ["../escape", "/abs", ".", "..", "a b", "x" * 250, ""])
def test_illegal_topic_names_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="is not legal"):
        Broker({name: 1}, data_dir=tmp_path / "d")
    assert not (tmp_path / "escape-0").exists()


def test_a_batch_removed_from_the_middle_of_a_log_is_refused(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        for seq, value in enumerate([b"a", b"b", b"c"]):
            broker.handle(ProduceRequest((batch(0, [value], seq=seq),)))
    path = tmp_path / "t-0" / "00000000000000000000.log"
    data = path.read_bytes()
    frame = len(data) // 3  # three frames of one equal-sized record each
    path.write_bytes(data[:frame] + data[2 * frame:])
    with pytest.raises(LogCorruptionError, match=r"is corrupt at byte \d+: it holds offset 2 where offset 1 belongs"):
        Broker({"t": 1}, data_dir=tmp_path)


def test_a_torn_write_of_crafted_bytes_never_blocks_a_restart(tmp_path):
    """Recovery decides torn tail or damage by the recovery point, not by scanning record bytes: a value full
    of frame-like bytes (here, length fields) is cut quickly, however it looks."""
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        broker.handle(ProduceRequest((batch(0, [b"a"]),)))
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        broker.handle(ProduceRequest((batch(0, [b"\x10\x00\x00\x00" * 250_000], seq=1),)))
    path = tmp_path / "t-0" / "00000000000000000000.log"
    path.write_bytes(path.read_bytes()[:-100])  # the crash tore the big write; no close after it
    set_recovery_point(tmp_path, "t", 0, 1)  # as the start before it left it
    rewind_written_end(tmp_path, "t-0", 1)
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert broker.log("t", 0).log_end_offset == 1


def test_the_directory_lock_cannot_be_removed_or_redirected(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("user data")
    data = tmp_path / "data"
    data.mkdir()
    (data / ".lock").symlink_to(victim)
    with Broker({"t": 1}, data_dir=data):
        assert victim.read_text() == "user data"  # the holder's pid is never written through a symlink
        (data / ".lock").unlink()
        with pytest.raises(IdemcoreError, match="is in use by another broker"):
            Broker({"t": 1}, data_dir=data)


def test_a_batch_above_message_max_bytes_is_refused_and_its_neighbours_are_written():
    broker = Broker({"t": 2}, message_max_bytes=200)
    small, large = batch(0, [b"a" * 50]), batch(1, [b"b" * 60, b"c" * 60])  # 61 + 50 + 10; 61 + 120 + 20
    answers = broker.handle(ProduceRequest((small, large))).responses
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, 0), (ErrorCode.MESSAGE_TOO_LARGE, -1)]
    assert answers[1].error_message == "a batch of 201 bytes is larger than message_max_bytes=200"
    assert broker.log("t", 1).log_end_offset == 0
    # Refused before the producer-state check: the same sequence, made small enough, is appended.
    retry = broker.handle(ProduceRequest((batch(1, [b"b"]),))).responses[0]
    assert (retry.error_code, retry.base_offset) == (0, 0)
    with pytest.raises(ValueError, match="message_max_bytes must be a positive integer, got 0"):
        Broker({"t": 1}, message_max_bytes=0)


def test_a_producer_told_message_too_large_fails_a_single_record_with_the_broker_s_words():
    producer = Producer(Broker({"t": 1}, message_max_bytes=100), batch_size=1000)
    future = producer.send("t", b"x" * 80, partition=0)
    # 150: the v2 bytes the producer sent (a 61-byte header and one record of 89), not an estimate
    with pytest.raises(DeliveryError, match="a batch of 150 bytes is larger than message_max_bytes=100") as caught:
        future.result()
    assert caught.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert producer.send("t", b"y", partition=0).result().offset == 0  # the sequences were adjusted


@pytest.mark.parametrize("how, idempotent", [("send", True), ("send_batch", True), ("send", False)])
def test_a_batch_the_broker_finds_too_large_is_split_and_every_record_delivered_once_in_order(how, idempotent):
    broker = Broker({"t": 1}, message_max_bytes=400)
    producer = Producer(broker, batch_size=100_000, linger_ms=1000, enable_idempotence=idempotent)
    values = [b"r%03d" % i + b"." * 36 for i in range(40)]  # 50 bytes each: 40 records are 2,061 bytes
    keys = [b"k%d" % i if i % 3 or how == "send_batch" else None for i in range(40)]  # send_batch: all or none
    if how == "send":
        futures = [producer.send("t", value, key, partition=0) for value, key in zip(values, keys, strict=True)]
        offsets = [future.result().offset for future in futures]
    else:
        offsets = producer.send_batch("t", values, keys, partition=0).result().tolist()
    assert offsets == list(range(40))
    records = list(broker.log("t", 0).records())
    assert [(key, value) for _, key, value, _ in records] == list(zip(keys, values, strict=True))
    if not idempotent:
        return
    assert producer.metrics["split_batches"] >= 3 and producer.metrics["failed_batches"] == 0
    sequences = [(s.batch.base_sequence, s.batch.record_count) for s in broker.log("t", 0).batches]
    assert all(base == sum(c for _, c in sequences[:k]) for k, (base, _) in enumerate(sequences))


def test_a_record_above_max_request_size_is_refused_at_send():
    from idemcore.client import RecordTooLargeError

    producer = Producer(Broker({"t": 1}), max_request_size=100)
    with pytest.raises(RecordTooLargeError, match="a record of 101 bytes is larger than max_request_size=100"):
        producer.send("t", b"x" * 91, partition=0)
    assert RecordTooLargeError.error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_written_ends_speak_only_for_the_boot_they_were_written_in(tmp_path, monkeypatch):
    import idemcore.broker.written_ends as written_ends

    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        broker.handle(ProduceRequest((batch(0, [b"a"]),)))
        broker.handle(ProduceRequest((batch(0, [b"b"], seq=1),)))
        broker.kill()  # the process dies: the written ends (2) are the only record of the second batch
    path = tmp_path / "t-0" / "00000000000000000000.log"
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(LogCorruptionError, match="the log ends at offset 1, but held 2"):
        Broker({"t": 1}, data_dir=tmp_path)
    # After a reboot the page cache is gone, and a cut tail may be what the crash left: it is cut.
    monkeypatch.setattr(written_ends, "boot_id", lambda: "another-boot")
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert broker.log("t", 0).log_end_offset == 1 and broker.log("t", 0).truncated_bytes > 0


def test_an_id_handed_out_but_never_written_is_not_handed_out_again_when_the_id_store_is_lost(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        idle = broker.handle(InitProducerIdRequest()).producer_id  # its producer has not written yet
    (tmp_path / "producer_ids.sqlite").unlink()
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        fresh = broker.handle(InitProducerIdRequest()).producer_id
        assert fresh > idle  # the floor file knew the block the idle producer's id came from
        for pid in (idle, fresh):  # both write sequence 0: two records, neither taken for the other's retry
            assert codes(broker.handle(ProduceRequest((batch(0, [b"%d" % pid], pid=pid),))))[0][0] == 0
        assert broker.log("t", 0).log_end_offset == 2
    (tmp_path / "producer_ids.sqlite").unlink()
    (tmp_path / "producer-id-floor").unlink()
    for _ in range(2):  # a refused start leaves no empty store behind: the retry is refused too
        with pytest.raises(IdemcoreError, match=r"producer_ids.sqlite and .*producer-id-floor are both missing, "
                                                r"but .* was used before"):
            Broker({"t": 1}, data_dir=tmp_path)
    assert not (tmp_path / "producer_ids.sqlite").exists()


def test_a_broker_serving_fewer_topics_keeps_the_written_ends_of_the_others(tmp_path):
    with Broker({"a": 1, "b": 1}, data_dir=tmp_path) as broker:
        for seq in range(3):
            broker.handle(ProduceRequest((batch(0, [b"r%d" % seq], seq=seq, topic="b"),)))
        broker.kill()  # b-0's end (3) is known only from the written ends
    Broker({"a": 1}, data_dir=tmp_path).close()
    path = tmp_path / "b-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF  # damage inside the last acknowledged frame
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError, match=r"b-0: .* the log ends at offset 2, but held 3"):
        Broker({"a": 1, "b": 1}, data_dir=tmp_path)


def test_a_locked_id_store_is_answered_and_the_next_request_gets_an_id(tmp_path):
    import sqlite3

    from idemcore.broker.producer_ids import ProducerIdManager, SqliteBlockStore

    store = SqliteBlockStore(tmp_path / "ids.sqlite", timeout_s=0.05)
    broker = Broker({"t": 1}, producer_ids=ProducerIdManager(0, store))
    other = sqlite3.connect(tmp_path / "ids.sqlite", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the store
    locked = broker.handle(InitProducerIdRequest())
    assert locked.error_code == ErrorCode.UNKNOWN_SERVER_ERROR and "database is locked" in locked.error_message
    other.execute("ROLLBACK")
    assert broker.handle(InitProducerIdRequest()).error_code == 0  # the store stayed open


def test_a_floor_file_that_cannot_be_written_is_answered_not_raised(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        (tmp_path / "producer-id-floor.partial").mkdir()  # the floor file's write fails
        answer = broker.handle(InitProducerIdRequest())
        assert answer.error_code == ErrorCode.UNKNOWN_SERVER_ERROR and "producer-id-floor" in answer.error_message


def test_a_batch_larger_than_the_segment_size_is_refused_as_kafka_does(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path, segment_bytes=100) as broker:
        answer = broker.handle(ProduceRequest((batch(0, [b"x" * 500]),))).responses[0]
        assert answer.error_code == ErrorCode.RECORD_LIST_TOO_LARGE
        assert "exceeds the maximum configured segment size of 100" in answer.error_message
        assert broker.log("t", 0).log_end_offset == 0
