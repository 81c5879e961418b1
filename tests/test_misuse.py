"""What a careless or hostile user tries: user files are never destroyed, misuse is refused in one line."""

from __future__ import annotations

import os

import pytest

from idemcore import ConfigError, IdemcoreError, Producer, ProducerStateManager
from idemcore.broker import Broker
from idemcore.synth.dataset import generate

SMALL = {"topics": 1, "partitions": 2, "producers": 10, "batches": 3000, "partitions_per_file": 2, "progress": False}


def test_overwrite_never_replaces_a_directory_generate_did_not_write(tmp_path, monkeypatch):
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.txt").write_text("years of work")
    with pytest.raises(FileExistsError, match=r"is not a dataset written by generate \(it holds chapter1.txt\)"):
        generate(mine, overwrite=True, **SMALL)
    assert (mine / "chapter1.txt").read_text() == "years of work"
    generate(tmp_path / "ds", **SMALL)
    (tmp_path / "ds" / "data" / "notes.txt").write_text("mine too")
    with pytest.raises(FileExistsError, match=r"it holds data/notes.txt"):
        generate(tmp_path / "ds", overwrite=True, **SMALL)
    monkeypatch.chdir(tmp_path / "thesis")
    with pytest.raises(FileExistsError, match="is the working directory or holds it"):
        generate(tmp_path, overwrite=True, **SMALL)
    assert sorted(os.listdir(tmp_path)) == ["ds", "thesis"]


def test_overwrite_replaces_a_generated_dataset(tmp_path):
    first = generate(tmp_path / "ds", seed=1, **SMALL)
    second = generate(tmp_path / "ds", overwrite=True, seed=2, **SMALL)
    assert first["planted"] != second["planted"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no staging or old copies left behind


def test_a_prepared_batch_is_committed_at_most_once_and_only_by_its_manager():
    manager, other = ProducerStateManager(stream=0), ProducerStateManager(stream=3)
    prepared = manager.prepare_update(7, 0, 0, 0)
    with pytest.raises(ValueError, match="prepared by the manager of stream 0, not by this one"):
        other.update(prepared)
    manager.update(prepared)
    with pytest.raises(IdemcoreError, match="the state changed since this batch was checked"):
        manager.update(prepared)
    first, second = manager.prepare_update(7, 0, 1, 1), manager.prepare_update(7, 0, 2, 2)
    manager.update(first)
    with pytest.raises(IdemcoreError, match="check it again"):
        manager.update(second)
    assert [b.last_seq for b in manager.last_entry(7).batches] == [0, 1]
    with pytest.raises(ValueError, match=r"stream must be in \[0, 2147483647\], got 1099511627776"):
        ProducerStateManager(stream=2**40)


@pytest.mark.parametrize("setting, message", [
    ({"enable_idempotence": "no"}, "enable_idempotence must be True, False, 'true' or 'false', got 'no'"),
    ({"enable_idempotence": 1}, "enable_idempotence must be True, False, 'true' or 'false', got 1"),
    ({"acks": 1.0}, "acks must be 'all', -1, 0 or 1, got 1.0"),
    ({"client_id": 5}, "client_id must be a string, got 5"),
])
def test_producer_settings_of_the_wrong_type_are_refused(setting, message):
    with pytest.raises(ConfigError, match=message):
        Producer(Broker({"t": 1}), **setting)


@pytest.mark.parametrize("text, expected", [("false", False), ("FALSE", False), ("true", True), (" True ", True)])
def test_boolean_settings_parse_true_and_false_strings_as_kafka_does(text, expected):
    # The string "false" is truthy in Python: it must still turn idempotence off.
    assert Producer(Broker({"t": 1}), enable_idempotence=text).config.enable_idempotence is expected


def test_an_empty_send_batch_gives_no_offsets():
    assert Producer(Broker({"t": 1})).send_batch("t", []).result().tolist() == []


def test_audit_out_is_checked_before_any_job(tmp_path):
    from idemcore.audit.spark import audit

    generate(tmp_path / "ds", **SMALL)
    with pytest.raises(ValueError, match=r"is inside the audited path .*: the next audit would read its findings"):
        audit(tmp_path / "ds", out=tmp_path / "ds" / "data" / "report", spark=object())
    (tmp_path / "afile").write_text("")
    with pytest.raises(FileExistsError, match="exists and is not a directory"):
        audit(tmp_path / "ds", out=tmp_path / "afile", spark=object())


def test_a_simulation_that_cannot_progress_stops_with_a_reason():
    from idemcore.sim import Faults, simulate

    with pytest.raises(IdemcoreError, match=r"no progress: the broker crashed \d+ times for 50 records"):
        simulate(producers=1, partitions=1, records=50, faults=Faults(crash_every=10), idempotence=False)


def test_two_managers_sharing_a_table_cannot_both_commit_a_stale_check():
    from idemcore import ProducerStateTable

    table = ProducerStateTable()
    first, second = ProducerStateManager(0, table=table), ProducerStateManager(0, table=table)
    a, b = first.prepare_update(1, 0, 0, 0), second.prepare_update(2, 0, 0, 0)
    assert a.result.base_offset == b.result.base_offset == 0  # both checked against the same log end
    first.update(a)
    with pytest.raises(IdemcoreError, match="the state changed since this batch was checked"):
        second.update(b)
    assert first.log_end_offset == 1


def test_producer_misuse_is_refused_at_the_call():
    broker = Broker({"t": 2})
    with pytest.raises(TypeError, match=r"transport must be a Broker or a Transport, not NoneType"):
        Producer(None)
    producer = Producer(broker, max_request_size=100)
    with pytest.raises(ValueError, match="a record of 210 bytes is larger than max_request_size=100"):
        producer.send("t", b"x" * 200)
    with pytest.raises(ValueError, match="larger than max_request_size=100"):
        producer.send_batch("t", [b"ok", b"x" * 200])
    with pytest.raises(TypeError, match="timestamp must be an integer"):
        producer.send("t", b"v", timestamp=1.7)
    with pytest.raises(TypeError, match="partition must be an integer, not str"):
        producer.send("t", b"v", partition="0")
    import numpy as np

    assert producer.send("t", b"v", partition=np.int64(1)).result().partition == 1


def test_the_broker_keeps_its_own_copy_of_a_request_s_records(tmp_path):
    from idemcore.net.messages import ProduceRequest
    from idemcore.record.batch import RecordBatch

    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        values = [b"original"]
        broker.handle(ProduceRequest((RecordBatch("t", 0, values, None, 5, 0, 0),)))
        values[0] = b"changed"
        values.append(b"extra")
        assert [v for _, _, v, _ in broker.log("t", 0).records()] == [b"original"]
        assert broker.handle(ProduceRequest((RecordBatch("t", 0, [b"next"], None, 5, 0, 1),))).responses[0] \
            .base_offset == 1
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert broker.log("t", 0).log_end_offset == 2


@pytest.mark.parametrize("request_batches, message", [
    (None, "ProduceRequest.batches must be a tuple of RecordBatch"),
    (({"topic": "t"},), "ProduceRequest.batches must be a tuple of RecordBatch"),
])
def test_a_malformed_request_is_refused_by_type(request_batches, message):
    from idemcore.net.messages import ProduceRequest

    with pytest.raises(TypeError, match=message):
        Broker({"t": 1}).handle(ProduceRequest(request_batches))
    with pytest.raises(ValueError, match="acks must be one of"):
        Broker({"t": 1}).handle(ProduceRequest((), acks=True))


def test_overwrite_looks_at_what_the_entries_are_not_only_their_names(tmp_path):
    generate(tmp_path / "ds", **SMALL)
    (tmp_path / "ds" / "truth.json").unlink()
    (tmp_path / "ds" / "truth.json").mkdir()
    (tmp_path / "ds" / "truth.json" / "user.txt").write_text("keep")
    with pytest.raises(FileExistsError, match=r"it holds truth.json/"):
        generate(tmp_path / "ds", overwrite=True, **SMALL)
    assert (tmp_path / "ds" / "truth.json" / "user.txt").read_text() == "keep"


def test_overwrite_needs_generate_s_own_truth_file_listing_every_data_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    user = tmp_path / "user"
    (user / "data").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), user / "data" / "precious.parquet")  # Parquet alone is anyone's
    with pytest.raises(FileExistsError, match=r"no truth\.json written by generate"):
        generate(user, overwrite=True, **SMALL)
    assert (user / "data" / "precious.parquet").exists()
    ours = tmp_path / "ours"
    generate(ours, **SMALL)
    pq.write_table(pa.table({"x": [1]}), ours / "data" / "added-later.parquet")  # not listed in truth.json
    with pytest.raises(FileExistsError, match=r"data/added-later\.parquet"):
        generate(ours, overwrite=True, **SMALL)


def test_audit_out_never_replaces_report_files_an_audit_did_not_write(tmp_path):
    from idemcore.audit.spark import audit

    generate(tmp_path / "ds", **SMALL)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.json").write_text('{"my": "precious"}')
    with pytest.raises(FileExistsError, match=r"holds summary.json that an audit did not write"):
        audit(tmp_path / "ds", out=mine, spark=object())  # refused before any Spark use
    assert (mine / "summary.json").read_text() == '{"my": "precious"}'
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "findings.parquet").write_text("not ours")
    with pytest.raises(FileExistsError, match=r"holds findings\.parquet"):
        audit(tmp_path / "ds", out=tmp_path / "other", spark=object())


@pytest.mark.parametrize("kwargs, error, says", [
    ({"topics": ["events"]}, TypeError, "topics must map each topic name to its partition count"),
    ({"topic_configs": ["t"]}, TypeError, "topic_configs must map topic names to their settings"),
    ({"topic_configs": {"t": "compact"}}, TypeError, "topic 't': settings must map Kafka's config names"),
    ({"topic_configs": {"t": {"cleanup.policy": 5}}}, ValueError, "Invalid value 5 for configuration cleanup.policy"),
    ({"data_dir": ""}, ValueError, "data_dir is an empty path"),
    ({"fsync": "no"}, TypeError, "fsync must be True or False, got 'no'"),
    ({"producer_id_expiration_ms": "x"}, ValueError, "producer_id_expiration_ms must be a positive integer"),
])
def test_broker_settings_of_the_wrong_kind_are_named(kwargs, error, says):
    from idemcore.broker import Broker

    arguments = {"topics": {"t": 1}, **kwargs}
    with pytest.raises(error, match=says):
        Broker(**arguments)


def test_a_timestamp_out_of_range_is_refused_at_send_not_in_its_batch():
    from idemcore.broker import Broker
    from idemcore.client import Producer

    producer = Producer(Broker({"t": 1}), linger_ms=1000)
    good = producer.send("t", b"good1", partition=0)
    with pytest.raises(ValueError, match="timestamp 18446744073709551616 is out of the int64 range"):
        producer.send("t", b"bad", partition=0, timestamp=2**64)
    assert good.result().offset == 0  # its neighbour is delivered


def test_two_dimensional_values_are_answered_corrupt_message():
    import numpy as np

    from idemcore.broker import Broker
    from idemcore.net.messages import ProduceRequest
    from idemcore.record.batch import RecordBatch

    broker = Broker({"t": 1})
    batch = RecordBatch("t", 0, np.array([[b"a"], [b"b"]]), None, 1, 0, 0, 0)
    answer = broker.handle(ProduceRequest((batch,))).responses[0]
    assert answer.error_code == 2 and "one-dimensional" in answer.error_message
