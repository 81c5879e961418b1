"""Transaction markers written by the broker (WriteTxnMarkers, COORDINATOR origin): control batches in the
segments, the last stable offset, and the aborted-transaction index (.txnindex) as Kafka writes it."""

from __future__ import annotations

import os

import pytest
from kafka.record.default_records import DefaultRecordBatch

from idemcore.audit.logdir import audit_log_dir
from idemcore.broker import Broker
from idemcore.broker.written_ends import rewind_written_end
from idemcore.net.messages import ProduceRequest, TxnMarker, WriteTxnMarkersRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import read_txn_index
from idemcore.record.v2 import iter_batches

NOW = 1_700_000_000_000


def _data(broker: Broker, pid: int, seq: int, partition: int = 0, epoch: int = 0, txn: bool = True) -> int:
    batch = RecordBatch("t", partition, [b"v%d-%d" % (pid, seq)], None, pid, epoch, seq, NOW, txn)
    answer = broker.handle(ProduceRequest((batch,))).responses[0]
    assert answer.error_code == 0, answer
    return answer.base_offset


def _marker(broker: Broker, pid: int, committed: bool, partitions=(("t", 0),), epoch: int = 0,
            coordinator_epoch: int = 0):
    request = WriteTxnMarkersRequest((TxnMarker(pid, epoch, committed, coordinator_epoch, tuple(partitions)),))
    (result,) = broker.handle(request).markers
    assert result.producer_id == pid
    return result.responses


def test_a_commit_marker_ends_the_transaction_and_moves_the_last_stable_offset(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path, clock=lambda: NOW) as broker:
        log = broker.log("t", 0)
        first = _data(broker, 7, 0)
        _data(broker, 7, 1)
        assert log.last_stable_offset == first
        (answer,) = _marker(broker, 7, committed=True)
        assert (answer.error_code, answer.base_offset) == (0, 2)
        assert log.last_stable_offset == log.log_end_offset == 3
        assert [offset for offset, *_ in log.records()] == [0, 1]  # the marker is not a record
        assert not list((tmp_path / "t-0").glob("*.txnindex"))  # only aborts are indexed
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    batches = list(iter_batches(data))
    assert [h.is_control for _, h in batches] == [False, False, True]
    control = DefaultRecordBatch(bytearray(data[batches[2][0]:]))  # an independent reader agrees
    assert control.is_control_batch and control.validate_crc() and control.producer_id == 7


def test_an_abort_is_indexed_with_kafkas_last_stable_offset(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path, clock=lambda: NOW) as broker:
        a_first = _data(broker, 1, 0)  # producer 1's transaction from offset 0
        b_first = _data(broker, 2, 0)  # producer 2's from offset 1, still open when 1 aborts
        _data(broker, 1, 1)
        (answer,) = _marker(broker, 1, committed=False)
        assert answer.error_code == 0 and answer.base_offset == 3
        assert broker.log("t", 0).last_stable_offset == b_first
        (answer,) = _marker(broker, 2, committed=False)
        assert answer.base_offset == 4
    entries = read_txn_index(tmp_path / "t-0" / "00000000000000000000.txnindex")
    assert entries.problems == []
    assert [(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries.entries] == [
        (1, a_first, 3, b_first),  # the LSO after the abort: producer 2's open transaction
        (2, b_first, 4, 5)]        # none open: the marker's offset + 1
    report = audit_log_dir(tmp_path)  # the log-directory audit cross-checks the index against the markers
    assert report.problems == ()


@pytest.mark.parametrize("torn", ["inside the marker", "before the marker"])
def test_an_abort_entry_whose_marker_a_crash_tore_is_cut(tmp_path, torn):
    """The .txnindex entry is written (and fsync'd) before its ABORT marker, so a crash between the two leaves an
    entry past the log end: loading cuts it, and no read_committed reader is told of an abort that is not there."""
    broker = Broker({"t": 1}, data_dir=tmp_path, clock=lambda: NOW)
    _data(broker, 1, 0)
    marker_at = broker.log("t", 0).log_end_offset
    _marker(broker, 1, committed=False)
    path = broker.log("t", 0).path
    position = broker.log("t", 0).last_append_position
    broker.kill()
    index = path.with_suffix(".txnindex")
    assert len(index.read_bytes()) == 34
    os.truncate(path, position + (20 if torn == "inside the marker" else 0))
    rewind_written_end(tmp_path, "t-0", marker_at)  # killed before the marker's end was recorded
    with Broker({"t": 1}, data_dir=tmp_path, clock=lambda: NOW) as again:
        log = again.log("t", 0)
        assert log.log_end_offset == marker_at
        assert log.aborted_transactions(0, marker_at + 1) == []
        assert log.last_stable_offset == 0  # the transaction is open again: its marker is gone
    assert not index.exists()


def test_open_transactions_survive_a_restart_and_a_kill(tmp_path):
    broker = Broker({"t": 2}, data_dir=tmp_path, clock=lambda: NOW)
    first = _data(broker, 3, 0, partition=1)
    _data(broker, 4, 0, partition=1, txn=False)
    broker.kill()
    with Broker({"t": 2}, data_dir=tmp_path, clock=lambda: NOW) as again:
        assert again.log("t", 1).last_stable_offset == first
        (answer,) = _marker(again, 3, committed=False, partitions=[("t", 1)])
        assert answer.error_code == 0 and again.log("t", 1).last_stable_offset == 3
    with Broker({"t": 2}, data_dir=tmp_path, clock=lambda: NOW) as third:  # from the shutdown snapshot
        assert third.log("t", 1).last_stable_offset == 3
        assert [(e.first_offset, e.last_offset) for e in
                read_txn_index(tmp_path / "t-1" / "00000000000000000000.txnindex").entries] == [(0, 2)]


def test_markers_are_checked_like_kafka_and_refused_markers_write_nothing(tmp_path):
    with Broker({"t": 2}, data_dir=tmp_path, clock=lambda: NOW) as broker:
        _data(broker, 5, 0, epoch=3)
        (stale,) = _marker(broker, 5, committed=True, epoch=2)  # an older producer epoch: a zombie's marker
        assert stale.error_code == ErrorCode.INVALID_PRODUCER_EPOCH and stale.error_message
        (ok,) = _marker(broker, 5, committed=True, epoch=3, coordinator_epoch=4)
        assert ok.error_code == 0
        _data(broker, 5, 1, epoch=3)
        (fenced,) = _marker(broker, 5, committed=True, epoch=3, coordinator_epoch=2)  # an older coordinator
        assert fenced.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        unknown, aborted = _marker(broker, 5, committed=False, epoch=3, coordinator_epoch=4,
                                   partitions=[("nope", 0), ("t", 0)])
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and aborted.error_code == 0
        assert [s.control for s in broker.log("t", 0).batches if s.control] == [(1, 4), (0, 4)]


@pytest.mark.parametrize("field, value", [("producer_epoch", 40_000), ("coordinator_epoch", 2**31),
                                          ("producer_id", 2**63), ("producer_epoch", -1)])
def test_a_marker_with_fields_out_of_range_is_answered_invalid_request(tmp_path, field, value):
    with Broker({"t": 1}, data_dir=tmp_path, clock=lambda: NOW) as broker:
        fields = {"producer_id": 1, "producer_epoch": 0, "coordinator_epoch": 0, **{field: value}}
        marker = TxnMarker(fields["producer_id"], fields["producer_epoch"], True, fields["coordinator_epoch"],
                           (("t", 0),))
        (answer,) = broker.handle(WriteTxnMarkersRequest((marker,))).markers[0].responses
        assert answer.error_code == ErrorCode.INVALID_REQUEST
        assert broker.log("t", 0).log_end_offset == 0
