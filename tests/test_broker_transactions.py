"""The transaction coordinator behind a broker: its records produced to __transaction_state, its markers written
through WriteTxnMarkers, its state loaded again at start (Prepare* finished), timeouts fencing a producer."""

from __future__ import annotations

import pytest

from idemcore.broker import Broker
from idemcore.net.messages import ProduceRequest, WriteTxnMarkersRequest, WriteTxnMarkersResponse
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import read_txn_index

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _broker(tmp_path, clock) -> Broker:
    return Broker({"t": 2}, data_dir=tmp_path, clock=clock, transaction_state_partitions=3)


def _produce(broker: Broker, pid: int, epoch: int, seq: int, partition: int = 0) -> tuple[int, int]:
    batch = RecordBatch("t", partition, [b"v%d" % seq], None, pid, epoch, seq, T0, True)
    answer = broker.handle(ProduceRequest((batch,))).responses[0]
    return answer.error_code, answer.base_offset


def _controls(broker: Broker, partition: int) -> list[tuple[int, tuple[int, int]]]:
    return [(s.batch.producer_epoch, s.control) for s in broker.log("t", partition).batches if s.control]


def test_a_committed_transaction_end_to_end_and_after_a_restart(tmp_path):
    clock = Clock()
    with _broker(tmp_path, clock) as broker:
        coordinator = broker.txn_coordinator
        init = coordinator.init_producer_id("tx", 60_000)
        assert init.error_code == 0 and init.producer_epoch == 0
        pid = init.producer_id
        assert coordinator.add_partitions_to_txn("tx", pid, 0, [("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): 0}
        assert _produce(broker, pid, 0, 0, 0) == (0, 0)
        assert _produce(broker, pid, 0, 0, 1) == (0, 0)
        assert broker.log("t", 0).last_stable_offset == 0
        assert coordinator.end_txn("tx", pid, 0, committed=True) == ErrorCode.NONE
        assert _controls(broker, 0) == _controls(broker, 1) == [(0, (1, 0))]  # COMMIT, coordinator epoch 0
        assert broker.log("t", 0).last_stable_offset == broker.log("t", 0).log_end_offset == 2
        (described,) = coordinator.describe_transactions(["tx"])
        assert described.state == "CompleteCommit"
        records = sum(len(list(broker.log("__transaction_state", p).records())) for p in range(3))
        assert records >= 4  # Empty, Ongoing, PrepareCommit, CompleteCommit
    with _broker(tmp_path, clock) as again:  # __transaction_state is served again and loaded at start
        assert again.txn_coordinator.describe_transactions(["tx"]) == [described]
        bumped = again.txn_coordinator.init_producer_id("tx", 60_000)
        assert (bumped.producer_id, bumped.producer_epoch) == (pid, 1)
        # The old instance is fenced at the coordinator (the partitions learn epoch 1 from its successor's writes
        # or markers; Kafka's partition verification, KIP-890, is not built).
        assert again.txn_coordinator.add_partitions_to_txn("tx", pid, 0, [("t", 0)]) == {("t", 0):
                                                                                        ErrorCode.PRODUCER_FENCED}


def test_a_decision_whose_markers_did_not_go_out_is_finished_at_the_next_start(tmp_path, monkeypatch):
    clock = Clock()
    broker = _broker(tmp_path, clock)
    coordinator = broker.txn_coordinator
    pid = coordinator.init_producer_id("tx", 60_000).producer_id
    coordinator.add_partitions_to_txn("tx", pid, 0, [("t", 1)])
    _produce(broker, pid, 0, 0, 1)

    def unavailable(request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        from idemcore.net.messages import PartitionResponse, TxnMarkerResult

        return WriteTxnMarkersResponse(request.request_id, tuple(
            TxnMarkerResult(m.producer_id, tuple(PartitionResponse(t, p, ErrorCode.KAFKA_STORAGE_ERROR)
                                                 for t, p in m.partitions)) for m in request.markers))

    monkeypatch.setitem(broker._handlers, WriteTxnMarkersRequest, unavailable)
    assert coordinator.end_txn("tx", pid, 0, committed=False) == ErrorCode.NONE  # the decision is durable
    assert _controls(broker, 1) == []  # but no marker reached the partition
    broker.kill()
    with _broker(tmp_path, clock) as again:
        assert _controls(again, 1) == [(0, (0, 0))]  # the ABORT, sent by the load
        (entry,) = read_txn_index(tmp_path / "t-1" / "00000000000000000000.txnindex").entries
        assert (entry.producer_id, entry.first_offset, entry.last_offset) == (pid, 0, 1)
        assert again.txn_coordinator.describe_transactions(["tx"])[0].state == "CompleteAbort"


def test_a_timed_out_transaction_is_aborted_with_a_bumped_epoch_that_fences_its_producer(tmp_path):
    clock = Clock()
    with _broker(tmp_path, clock) as broker:
        coordinator = broker.txn_coordinator
        pid = coordinator.init_producer_id("slow", 1_000).producer_id
        coordinator.add_partitions_to_txn("slow", pid, 0, [("t", 0)])
        assert _produce(broker, pid, 0, 0) == (0, 0)
        clock.now += 999
        broker.run_housekeeping()
        assert _controls(broker, 0) == []  # not yet: start + timeout < now is strict
        clock.now += 2
        broker.run_housekeeping()
        assert _controls(broker, 0) == [(1, (0, 0))]  # ABORT with epoch 0 + 1
        assert _produce(broker, pid, 0, 1) == (ErrorCode.INVALID_PRODUCER_EPOCH, -1)
        assert coordinator.end_txn("slow", pid, 0, committed=True) == ErrorCode.PRODUCER_FENCED


@pytest.mark.parametrize("partitions, says", [(0, "positive partition count"), (True, "positive partition count")])
def test_bad_transaction_state_partitions_are_named(tmp_path, partitions, says):
    with pytest.raises(ValueError, match=says):
        Broker({"t": 1}, data_dir=tmp_path, transaction_state_partitions=partitions)


# --- found by a hostile review -----------------------------------------------------------------------------------


def test_clients_cannot_write_internal_topics_nor_name_them(tmp_path):
    clock = Clock()
    with _broker(tmp_path, clock) as broker:
        assert broker.txn_coordinator is not None  # makes __transaction_state
        batch = RecordBatch("__transaction_state", 0, [b"hello"], [b"k"], -1, -1, -1, T0)
        answer = broker.handle(ProduceRequest((batch,))).responses[0]
        assert answer.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert answer.error_message == "Cannot append to internal topic __transaction_state"
        with pytest.raises(ValueError, match="is an internal topic"):
            broker.create_topic("__consumer_offsets", 1)
    with pytest.raises(ValueError, match="is an internal topic"):
        Broker({"__transaction_state": 3}, data_dir=tmp_path / "other")
    with _broker(tmp_path, clock) as again:  # the log it keeps loads
        assert again.txn_coordinator.list_transactions().transaction_states == ()


def test_an_abort_that_ends_no_transaction_adds_no_txnindex_entry(tmp_path):
    clock = Clock()
    with _broker(tmp_path, clock) as broker:
        coordinator = broker.txn_coordinator
        pid = coordinator.init_producer_id("tx", 60_000).producer_id
        coordinator.add_partitions_to_txn("tx", pid, 0, [("t", 0)])  # added, never written to
        assert coordinator.end_txn("tx", pid, 0, committed=False) == ErrorCode.NONE
        assert _controls(broker, 0) == [(0, (0, 0))]
    assert not (tmp_path / "t-0" / "00000000000000000000.txnindex").exists()  # Kafka: no CompletedTxn


def test_a_bad_partition_in_add_partitions_does_not_wedge_the_transaction(tmp_path):
    clock = Clock()
    with _broker(tmp_path, clock) as broker:
        coordinator = broker.txn_coordinator
        pid = coordinator.init_producer_id("tx", 60_000).producer_id
        bad = ("t", 2**31)
        assert coordinator.add_partitions_to_txn("tx", pid, 0, [bad, ("t", 0)]) == {
            bad: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED}  # as KafkaApis
        assert coordinator.add_partitions_to_txn("tx", pid, 0, [("t", 0)]) == {("t", 0): ErrorCode.NONE}
        assert coordinator.end_txn("tx", pid, 0, committed=True) == ErrorCode.NONE  # never wedged
        assert coordinator.describe_transactions(["tx"])[0].state == "CompleteCommit"


def test_wrong_types_raise_without_leaving_anything_behind(tmp_path):
    clock = Clock()
    with _broker(tmp_path, clock) as broker:
        coordinator = broker.txn_coordinator
        with pytest.raises(TypeError, match="transactional_id must be a str, got 5"):
            coordinator.init_producer_id(5, 60_000)  # type: ignore[arg-type]
        pid = coordinator.init_producer_id("tx", 60_000).producer_id
        with pytest.raises(TypeError, match="committed must be a bool, got 'no'"):
            coordinator.end_txn("tx", pid, 0, "no")  # type: ignore[arg-type]
        assert [listing.transactional_id for listing in coordinator.list_transactions().transaction_states] == ["tx"]
        broker.run_housekeeping()


def test_create_topic_refuses_a_directory_left_by_an_earlier_topic(tmp_path):
    with Broker({"t": 1, "u": 1}, data_dir=tmp_path) as broker:
        broker.handle(ProduceRequest((RecordBatch("u", 0, [b"v"], None, 1, 0, 0, T0),)))
    with Broker({"t": 1}, data_dir=tmp_path) as smaller:
        with pytest.raises(Exception, match="u-0 exists"):
            smaller.create_topic("u", 1)
        assert "u" not in smaller.topics


def test_complete_transactions_later_answers_end_txn_before_the_markers_and_close_writes_them(tmp_path):
    """A broker running on a loop completes transactions later (Broker.complete_transactions_later): EndTxn answers
    once PrepareCommit is durable, the markers follow in the scheduled call; a close writes what is still owed."""
    clock = Clock()
    scheduled: list = []
    with _broker(tmp_path, clock) as broker:
        broker.complete_transactions_later(scheduled.append)
        coordinator = broker.txn_coordinator  # made after the call: it completes later too
        pid = coordinator.init_producer_id("tx", 60_000).producer_id
        coordinator.add_partitions_to_txn("tx", pid, 0, [("t", 0)])
        assert _produce(broker, pid, 0, 0) == (0, 0)
        assert coordinator.end_txn("tx", pid, 0, committed=True) == ErrorCode.NONE
        assert _controls(broker, 0) == [] and broker.log("t", 0).last_stable_offset == 0
        scheduled.pop()()
        assert _controls(broker, 0) == [(0, (1, 0))] and broker.log("t", 0).last_stable_offset == 2
        coordinator.add_partitions_to_txn("tx", pid, 0, [("t", 1)])
        assert _produce(broker, pid, 0, 0, 1) == (0, 0)
        assert coordinator.end_txn("tx", pid, 0, committed=False) == ErrorCode.NONE
        assert _controls(broker, 1) == [] and len(scheduled) == 1
    assert coordinator.metadata("tx").state.kafka_name == "CompleteAbort"  # written by the close
    with _broker(tmp_path, clock) as again:
        assert _controls(again, 1) == [(0, (0, 0))]
        assert again.txn_coordinator.describe_transactions(["tx"])[0].state == "CompleteAbort"
