"""Group offsets through ``Broker.handle``, end to end: the transaction flow done by hand with requests
(InitProducerId -> AddOffsetsToTxn -> TxnOffsetCommit -> EndTxn) with OffsetFetch(require_stable) before and
after, the broker restarted from its data_dir at every step (closed, killed in process, or a SIGKILL'd child
process at points inside the flow), and each restart must answer what the broker answered before it."""

from __future__ import annotations

import json
import os
import signal
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from idemcore.broker import Broker
from idemcore.broker.coordinator import coordinator_partition
from idemcore.broker.group import OffsetCommitKey, decode_key
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    OffsetCommitRequest,
    OffsetEntry,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from idemcore.protocol.codes import ControlType, ErrorCode
from idemcore.record.batch import RecordBatch

E = ErrorCode
OFFSETS = "__consumer_offsets"
PARTITIONS = 5
GROUP = "etl"
P = coordinator_partition(GROUP, PARTITIONS)
T0 = 1_700_000_000_000


def open_broker(data_dir: Path) -> Broker:
    return Broker({"t": 2}, data_dir=data_dir, transaction_state_partitions=3, offsets_topic_partitions=PARTITIONS,
                  clock=lambda: T0)


def restart(broker: Broker, how: str) -> Broker:
    """The broker again from its data_dir, after a clean close or an in-process kill."""
    assert broker.data_dir is not None
    if how == "close":
        broker.close()
    else:
        broker.kill()
    return open_broker(broker.data_dir)


def view(broker: Broker, group: str = GROUP) -> dict[str, object]:
    """What a client sees of the group: every offset, stable and not, and the offsets partition's LSO."""
    answer = {}
    for stable in (True, False):
        response = broker.handle(OffsetFetchRequest(group, (("t", 0), ("t", 1)), stable))
        answer[f"stable={stable}"] = [response.error_code, *((f.offset, f.metadata, int(f.error_code))
                                                              for f in response.offsets)]
        whole = broker.handle(OffsetFetchRequest(group, None, stable))
        answer[f"all stable={stable}"] = [(f.topic, f.partition, f.offset, int(f.error_code)) for f in whole.offsets]
    log = broker.log(OFFSETS, P)
    answer["lso"] = (log.last_stable_offset, log.log_end_offset)
    return answer


def commit(broker: Broker, *offsets: tuple[int, int]) -> list[int]:
    response = broker.handle(OffsetCommitRequest(GROUP, tuple(OffsetEntry("t", p, o) for p, o in offsets)))
    return [r.error_code for r in response.results]


def txn_commit(broker: Broker, pid: int, epoch: int, *offsets: tuple[int, int]) -> list[int]:
    response = broker.handle(TxnOffsetCommitRequest("tx", GROUP, pid, epoch,
                                                    tuple(OffsetEntry("t", p, o, "m") for p, o in offsets)))
    return [r.error_code for r in response.results]


# ---------------------------------------------------------------- the flow, restarted at every step


@pytest.mark.parametrize("how", ["close", "kill"])
@pytest.mark.parametrize("committed", [True, False])
def test_the_transaction_flow_by_hand_with_a_restart_at_every_step(tmp_path, committed, how):
    broker = open_broker(tmp_path)
    found = broker.handle(FindCoordinatorRequest(GROUP, GROUP_KEY))
    assert (found.error_code, found.node_id) == (E.NONE, 0)
    assert broker.topics[OFFSETS] == PARTITIONS
    config = broker.topic_configs[OFFSETS]
    assert config.compacted and config.segment_bytes == 104_857_600
    assert commit(broker, (0, 5)) == [E.NONE]
    broker = restart(broker, how)
    init = broker.handle(InitProducerIdRequest(transactional_id="tx"))
    assert init.error_code == E.NONE
    pid, epoch = init.producer_id, init.producer_epoch
    broker = restart(broker, how)
    assert broker.handle(AddOffsetsToTxnRequest("tx", pid, epoch, GROUP)).error_code == E.NONE
    before = view(broker)
    broker = restart(broker, how)
    assert view(broker) == before
    assert txn_commit(broker, pid, epoch, (0, 10), (1, 11)) == [E.NONE, E.NONE]
    pending = view(broker)
    unstable = (-1, "", E.UNSTABLE_OFFSET_COMMIT)
    assert pending["stable=True"] == [E.NONE, unstable, unstable]
    assert pending["stable=False"] == [E.NONE, (5, "", 0), (-1, "", 0)]
    assert pending["all stable=True"] == [("t", 0, -1, E.UNSTABLE_OFFSET_COMMIT)]
    end = broker.log(OFFSETS, P).log_end_offset
    assert pending["lso"] == (end - 2, end)  # the transaction's batch holds the LSO
    broker = restart(broker, how)
    assert view(broker) == pending  # pending again after the restart (offsets and the partition's open txn)
    assert broker.handle(EndTxnRequest("tx", pid, epoch, committed)).error_code == E.NONE
    done = view(broker)
    expected = [E.NONE, (10, "m", 0), (11, "m", 0)] if committed else [E.NONE, (5, "", 0), (-1, "", 0)]
    assert done["stable=True"] == done["stable=False"] == expected
    assert done["lso"] == (end + 1, end + 1)  # the marker closed it
    controls = [s.control for s in broker.log(OFFSETS, P).batches if s.control is not None]
    assert controls == [(int(ControlType.COMMIT if committed else ControlType.ABORT), 0)]
    broker = restart(broker, how)
    assert view(broker) == done
    broker.close()


def test_a_plain_commit_between_the_txn_offset_commit_and_its_marker_wins(tmp_path):
    broker = open_broker(tmp_path)
    init = broker.handle(InitProducerIdRequest(transactional_id="tx"))
    pid, epoch = init.producer_id, init.producer_epoch
    broker.handle(AddOffsetsToTxnRequest("tx", pid, epoch, GROUP))
    assert txn_commit(broker, pid, epoch, (0, 10), (1, 11)) == [0, 0]
    assert commit(broker, (0, 7)) == [0]  # a plain write to the partition with an open transaction is allowed
    assert broker.handle(EndTxnRequest("tx", pid, epoch, True)).error_code == E.NONE
    answer = view(broker)
    assert answer["stable=True"] == [E.NONE, (7, "", 0), (11, "m", 0)]
    assert view(restart(broker, "kill")) == answer


def test_the_offsets_batch_on_disk_and_a_fenced_producers_commit(tmp_path):
    broker = open_broker(tmp_path)
    init = broker.handle(InitProducerIdRequest(transactional_id="tx"))
    pid, epoch = init.producer_id, init.producer_epoch
    broker.handle(AddOffsetsToTxnRequest("tx", pid, epoch, GROUP))
    txn_commit(broker, pid, epoch, (0, 10))
    broker.handle(EndTxnRequest("tx", pid, epoch, False))
    broker = restart(broker, "close")
    (data, control) = broker.log(OFFSETS, P).batches
    batch = data.batch
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == \
        (pid, epoch, -1, True)
    assert [decode_key(key) for key in batch.keys] == [OffsetCommitKey(GROUP, "t", 0)]
    assert control.control == (int(ControlType.ABORT), 0)
    assert broker.log(OFFSETS, P).aborted_transactions(0, 2) == [(pid, 0)]
    # The successor (epoch + 1) commits; the zombie's commit is refused by the partition and changes nothing.
    bumped = broker.handle(InitProducerIdRequest(transactional_id="tx"))
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)
    broker.handle(AddOffsetsToTxnRequest("tx", pid, epoch + 1, GROUP))
    assert txn_commit(broker, pid, epoch + 1, (0, 20)) == [E.NONE]
    assert txn_commit(broker, pid, epoch, (0, 99)) == [E.INVALID_PRODUCER_EPOCH]
    broker.handle(EndTxnRequest("tx", pid, epoch + 1, True))
    assert view(broker)["stable=True"][1] == (20, "m", 0)
    broker.close()


def test_add_offsets_to_txn_makes_the_offsets_topic_so_the_markers_land(tmp_path):
    broker = open_broker(tmp_path)
    init = broker.handle(InitProducerIdRequest(transactional_id="tx"))  # the txn coordinator, no group one
    assert OFFSETS not in broker.topics
    pid, epoch = init.producer_id, init.producer_epoch
    assert broker.handle(AddOffsetsToTxnRequest("tx", pid, epoch, GROUP)).error_code == E.NONE
    assert broker.topics[OFFSETS] == PARTITIONS
    assert broker.handle(EndTxnRequest("tx", pid, epoch, True)).error_code == E.NONE
    assert broker.txn_coordinator.pending_completions == ()
    assert [s.control for s in broker.log(OFFSETS, P).batches] == [(int(ControlType.COMMIT), 0)]
    broker.close()


def test_a_marker_written_before_the_group_coordinator_is_loaded_is_replayed_by_its_load(tmp_path):
    broker = open_broker(tmp_path)
    init = broker.handle(InitProducerIdRequest(transactional_id="tx"))
    pid, epoch = init.producer_id, init.producer_epoch
    broker.handle(AddOffsetsToTxnRequest("tx", pid, epoch, GROUP))
    txn_commit(broker, pid, epoch, (0, 10))
    broker._group_coordinator = None  # as if not loaded yet: the marker is only in the log
    assert broker.handle(EndTxnRequest("tx", pid, epoch, True)).error_code == E.NONE
    assert view(broker)["stable=True"] == [E.NONE, (10, "m", 0), (-1, "", 0)]  # loaded now, from the log
    broker.close()


def test_offsets_partitions_keep_the_count_the_topic_was_made_with(tmp_path):
    open_broker(tmp_path).close()
    with open_broker(tmp_path) as first:
        first.handle(FindCoordinatorRequest(GROUP, GROUP_KEY))
        assert commit(first, (0, 5)) == [0]
    with Broker({"t": 2}, data_dir=tmp_path, offsets_topic_partitions=7) as again:
        assert again.topics[OFFSETS] == PARTITIONS
        assert again.group_coordinator.offsets_partitions == PARTITIONS
        assert again.txn_coordinator.offsets_partitions == PARTITIONS  # AddOffsetsToTxn picks the same partition
        assert view(again)["stable=True"][1] == (5, "", 0)
    with pytest.raises(ValueError):
        Broker({"t": 1}, offsets_topic_partitions=0)


# ---------------------------------------------------------------- the handlers' answers


def test_find_coordinator_answers_groups_and_transactional_ids():
    broker = Broker({"t": 1})
    assert broker.handle(FindCoordinatorRequest("g", GROUP_KEY)).error_code == E.NONE
    assert OFFSETS in broker.topics and "__transaction_state" not in broker.topics
    assert broker.handle(FindCoordinatorRequest("tx", TRANSACTION_KEY)).error_code == E.NONE
    for bad in (FindCoordinatorRequest("g", 2), FindCoordinatorRequest(7, GROUP_KEY),  # type: ignore[arg-type]
                FindCoordinatorRequest("g", "0")):  # type: ignore[arg-type]
        answer = broker.handle(bad)
        assert answer.error_code == E.INVALID_REQUEST and answer.error_message


@pytest.mark.parametrize(("request_", "expected"), [
    (OffsetCommitRequest(None, (OffsetEntry("t", 0, 1),)), [E.INVALID_GROUP_ID]),  # type: ignore[arg-type]
    (OffsetCommitRequest("", (OffsetEntry("t", 0, 1),)), [E.NONE]),
    (OffsetCommitRequest("g", (OffsetEntry("t", 0, 1), OffsetEntry("t", 5, 1), OffsetEntry("x", 0, 1))),
     [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION]),
    (OffsetCommitRequest("g", (OffsetEntry("t", 0, 1, "m" * 4097),)), [E.OFFSET_METADATA_TOO_LARGE]),
    (OffsetCommitRequest("g", (OffsetEntry("t", 0, 1),), 2, "member"), [E.ILLEGAL_GENERATION]),
    (OffsetCommitRequest("g", (OffsetEntry("t", 0, 1),), -1, "member"), [E.NONE]),
    (OffsetCommitRequest("g", (OffsetEntry("t", "0", 1),)), [E.INVALID_REQUEST]),  # type: ignore[arg-type]
    (OffsetCommitRequest("g", (OffsetEntry("t", 0, 2**64),)), [E.INVALID_REQUEST]),
    (OffsetCommitRequest(["g"], (OffsetEntry("t", 0, 1),)), [E.INVALID_REQUEST]),  # type: ignore[arg-type]
    (OffsetCommitRequest("g", (OffsetEntry("t", 0, 1),), None), [E.INVALID_REQUEST]),  # type: ignore[arg-type]
    (OffsetCommitRequest("g", "t-0"), []),  # type: ignore[arg-type]
    (TxnOffsetCommitRequest("tx", "", 1, 0, (OffsetEntry("t", 0, 1),)), [E.INVALID_GROUP_ID]),
    (TxnOffsetCommitRequest("tx", "g", 1, 0, (OffsetEntry("t", 0, 1),), 3, "m"), [E.ILLEGAL_GENERATION]),
    (TxnOffsetCommitRequest("tx", "g", -1, -1, (OffsetEntry("t", 0, 1),)), [E.INVALID_RECORD]),  # no producer
    (TxnOffsetCommitRequest("tx", "g", "1", 0, (OffsetEntry("t", 0, 1),)), [E.INVALID_REQUEST]),  # type: ignore
    (TxnOffsetCommitRequest(None, "g", 1, 0, (OffsetEntry("t", 0, 1),)), [E.INVALID_REQUEST]),  # type: ignore
    (TxnOffsetCommitRequest("tx", "g", 1, 0, [("t", 0, 1)]), []),  # type: ignore[arg-type]
])
def test_commit_requests_are_answered_with_kafkas_codes_and_never_raise(request_, expected):
    broker = Broker({"t": 2})
    response = broker.handle(request_)
    assert [r.error_code for r in response.results] == expected
    # A refused request says why, naming the request; an answered one has nothing to explain.
    refused = E.INVALID_REQUEST in expected or not expected
    assert (response.error_message is not None) == refused, response.error_message


@pytest.mark.parametrize(("request_", "expected"), [
    (OffsetFetchRequest(None), E.INVALID_GROUP_ID),  # type: ignore[arg-type]
    (OffsetFetchRequest(7), E.INVALID_REQUEST),  # type: ignore[arg-type]
    (OffsetFetchRequest("g", ("t", 0)), E.INVALID_REQUEST),  # type: ignore[arg-type]
    (OffsetFetchRequest("g", None, "yes"), E.INVALID_REQUEST),  # type: ignore[arg-type]
])
def test_fetch_requests_with_bad_fields_are_answered_not_raised(request_, expected):
    response = Broker({"t": 2}).handle(request_)
    assert (response.error_code, response.offsets) == (expected, ())
    assert (response.error_message is not None) == (expected == E.INVALID_REQUEST)


def test_fetch_answers_in_the_requests_order_and_none_where_nothing_is_committed():
    broker = Broker({"t": 2})
    commit(broker, (1, 4))
    response = broker.handle(OffsetFetchRequest(GROUP, (("t", 1), ("t", 0), ("t", 1), ("zz", 3)), True, 9))
    assert response.request_id == 9
    assert [(f.topic, f.partition, f.offset) for f in response.offsets] == [("t", 1, 4), ("t", 0, -1), ("t", 1, 4),
                                                                           ("zz", 3, -1)]
    assert broker.handle(OffsetFetchRequest("nobody")).offsets == ()


def test_clients_cannot_write_the_offsets_topic_themselves():
    broker = Broker({"t": 1})
    broker.handle(FindCoordinatorRequest("g", GROUP_KEY))
    batch = RecordBatch(OFFSETS, 0, (b"v",), (b"k",))
    assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == E.INVALID_TOPIC_EXCEPTION


# ---------------------------------------------------------------- SIGKILL'd mid-flow

#: Where the child dies: right after TxnOffsetCommit was answered; in EndTxn, once PrepareCommit/Abort is
#: durable but before any marker is written; or right after the markers were written (before CompleteCommit).
KILL_POINTS = ("after-txn-offset-commit", "before-markers", "after-markers")


def _child(data_dir: Path, point: str, committed: bool, report: Callable[[dict], None]) -> None:
    broker = open_broker(data_dir)
    commit(broker, (0, 5))
    init = broker.handle(InitProducerIdRequest(transactional_id="tx"))
    report({"pid": init.producer_id, "epoch": init.producer_epoch})
    broker.handle(AddOffsetsToTxnRequest("tx", init.producer_id, init.producer_epoch, GROUP))
    txn_commit(broker, init.producer_id, init.producer_epoch, (0, 10), (1, 11))
    report({"view": view(broker)})
    if point == "after-txn-offset-commit":
        os.kill(os.getpid(), signal.SIGKILL)
    write_markers = broker._handlers[WriteTxnMarkersRequest]

    def dying(request: WriteTxnMarkersRequest) -> object:
        if point == "after-markers":
            write_markers(request)
        os.kill(os.getpid(), signal.SIGKILL)

    broker._handlers[WriteTxnMarkersRequest] = dying
    broker.handle(EndTxnRequest("tx", init.producer_id, init.producer_epoch, committed))
    report({"error": "EndTxn returned"})


def _killed_run(data_dir: Path, point: str, committed: bool) -> dict:
    """Run the flow in a forked child that SIGKILLs itself at ``point``; what it reported."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        try:
            os.close(read_end)
            _child(data_dir, point, committed, lambda m: os.write(write_end, (json.dumps(m) + "\n").encode()))
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(3)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as lines:
        reported: dict = {}
        for line in lines:
            reported.update(json.loads(line))
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (status, reported)
    return reported


def _jsonable(answer: dict) -> dict:
    return json.loads(json.dumps(answer))


@pytest.mark.parametrize("committed", [True, False])
@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_broker_killed_mid_flow_answers_after_its_restart_as_the_flow_decided(tmp_path, point, committed):
    reported = _killed_run(tmp_path, point, committed)
    assert "error" not in reported
    pid, epoch = reported["pid"], reported["epoch"]
    broker = open_broker(tmp_path)
    decided = [E.NONE, (10, "m", 0), (11, "m", 0)] if committed else [E.NONE, (5, "", 0), (-1, "", 0)]
    if point == "after-txn-offset-commit":
        assert _jsonable(view(broker)) == reported["view"]  # still pending: the restart answers the same
        assert broker.handle(EndTxnRequest("tx", pid, epoch, committed)).error_code == E.NONE
    else:  # the decision was durable: the coordinator's load finishes it (markers sent again)
        assert broker.txn_coordinator.pending_completions == ()
        state = "CompleteCommit" if committed else "CompleteAbort"
        assert broker.txn_coordinator.describe_transactions(["tx"])[0].state == state
    answer = view(broker)
    assert answer["stable=True"] == answer["stable=False"] == decided
    end = broker.log(OFFSETS, P).log_end_offset
    assert answer["lso"] == (end, end)
    broker.kill()
    assert view(open_broker(tmp_path)) == answer
