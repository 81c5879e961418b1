"""Broker.create_topic: topics added while running, recorded in topics.json before their partitions exist,
served again after a restart with their settings, and covered by the written ends like the others."""

from __future__ import annotations

import json

import pytest

from idemcore.broker import Broker, LogCorruptionError, TopicExistsError
from idemcore.client import Producer
from idemcore.net.messages import ProduceRequest
from idemcore.record.batch import RecordBatch

NOW = 1_700_000_000_000


def test_a_created_topic_is_served_and_comes_back_after_a_restart(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        broker.create_topic("orders", 3, {"cleanup.policy": "compact"})
        producer = Producer(broker)
        offsets = [producer.send("orders", b"v%d" % i, key=b"k%d" % i, partition=2).result().offset for i in range(3)]
        assert offsets == [0, 1, 2]
        keyless = broker.handle(ProduceRequest((RecordBatch("orders", 0, [b"v"], None, -1, -1, -1, NOW),)))
        assert keyless.responses[0].error_code != 0  # compacted: a key is required
    with Broker({"t": 1}, data_dir=tmp_path) as again:  # the caller names only "t"
        assert again.topics == {"t": 1, "orders": 3}
        assert again.topic_configs["orders"].compacted
        assert [value for _, _, value, _ in again.log("orders", 2).records()] == [b"v0", b"v1", b"v2"]


def test_create_topic_refuses_what_kafka_refuses_and_writes_nothing(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        with pytest.raises(TopicExistsError, match="topic 't' already exists with 1 partitions"):
            broker.create_topic("t", 2)
        with pytest.raises(ValueError, match="topic name 'a/b' is not legal"):
            broker.create_topic("a/b", 1)
        with pytest.raises(ValueError, match="needs a positive partition count, got 0"):
            broker.create_topic("z", 0)
        with pytest.raises(ValueError, match=r"Unknown topic config name: retention.hours"):
            broker.create_topic("z", 1, {"retention.hours": 1})
    assert not (tmp_path / "topics.json").exists() and not (tmp_path / "z-0").exists()


def test_a_topic_recorded_before_its_partitions_were_made_is_made_at_start(tmp_path):
    Broker({"t": 1}, data_dir=tmp_path).close()
    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": {"late": {"partitions": 2,
                                                                                       "configs": {}}}}))
    with Broker({"t": 1}, data_dir=tmp_path) as broker:  # as if killed between the record and the directories
        assert broker.log("late", 1).log_end_offset == 0
        assert (tmp_path / "late-1").is_dir()


@pytest.mark.parametrize("content, says", [
    ("{", "topics.json is damaged"),
    ('{"version": 1, "topics": {"t": {"partitions": 4, "configs": {}}}}', "created with 4 partitions, the broker is "
                                                                           "given 1"),
])
def test_a_damaged_or_conflicting_topics_file_is_named(tmp_path, content, says):
    Broker({"t": 1}, data_dir=tmp_path).close()
    (tmp_path / "topics.json").write_text(content)
    with pytest.raises(LogCorruptionError, match=says):
        Broker({"t": 1}, data_dir=tmp_path)


def test_the_written_ends_cover_a_created_topic(tmp_path):
    broker = Broker({"t": 1}, data_dir=tmp_path)
    broker.create_topic("new", 1)
    producer = Producer(broker)
    for i in range(3):
        producer.send("new", b"v%d" % i, partition=0).result()
    broker.kill()  # no checkpoint: only the written ends know new-0 reached offset 3
    segment = tmp_path / "new-0" / "00000000000000000000.log"
    segment.write_bytes(segment.read_bytes()[:-5])  # the last acknowledged batch damaged
    with pytest.raises(LogCorruptionError, match=r"new-0: .* the log ends at offset 2, but held 3"):
        Broker({"t": 1}, data_dir=tmp_path)


def test_a_broker_without_fsync_makes_its_internal_topics_without_syncing_each_partition(tmp_path, monkeypatch):
    """fsync=False is the page cache for every file a new partition writes (a served broker makes
    __consumer_offsets' 50 partitions on its one event loop: a sync per file stalled every connection)."""
    import os

    broker = Broker({}, data_dir=tmp_path, fsync=False)
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    try:
        broker.group_coordinator  # noqa: B018  # made on first use
        assert broker.topics["__consumer_offsets"] == 50
        assert len(calls) <= 4, f"{len(calls)} fsyncs"
    finally:
        broker.close()


def test_a_topic_of_more_partitions_than_the_limit_is_refused_at_once(tmp_path):
    from idemcore.net.messages import CreateTopicsRequest, NewTopic
    from idemcore.protocol.codes import ErrorCode

    broker = Broker({}, data_dir=tmp_path, fsync=False)
    try:
        [result] = broker.handle(CreateTopicsRequest((NewTopic("huge", 2_000_000_000),))).results
        assert result.error_code == ErrorCode.INVALID_PARTITIONS and "10,000" in result.error_message
        with pytest.raises(ValueError, match="more than the 10,000"):
            broker.create_topic("huge", 10_001)
        assert "huge" not in broker.topics
    finally:
        broker.close()


def test_a_creation_failing_partway_leaves_no_directory_and_can_be_made_again(tmp_path, monkeypatch):
    """Descriptors run out while the fourth partition's directory is loaded: it and the three made before are
    removed, so the same creation afterwards is not refused over them (they would read as an older topic's)."""
    import errno

    from idemcore.broker.log import partition_log

    real = partition_log.load_segments

    def out_of_descriptors(name, directory, **kwargs):
        if name == "n-3":
            raise OSError(errno.EMFILE, "Too many open files")
        return real(name, directory, **kwargs)
    with Broker({}, data_dir=tmp_path) as broker:
        monkeypatch.setattr(partition_log, "load_segments", out_of_descriptors)
        with pytest.raises(OSError, match="Too many open files"):
            broker.create_topic("n", 5)
        assert "n" not in broker.topics and not list(tmp_path.glob("n-*"))
        monkeypatch.undo()
        broker.create_topic("n", 5)
        assert broker.topics["n"] == 5
    with Broker({}, data_dir=tmp_path) as again:
        assert again.topics["n"] == 5
