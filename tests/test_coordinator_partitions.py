"""The coordinators follow their partitions (Kafka's TransactionStateManager.loadTransactionsForTxnTopicPartition /
removeTransactionsForTxnTopicPartition, GroupCoordinator.onElection / onResignation): one partition loaded at a
coordinator epoch (its leader epoch) and unloaded, NOT_COORDINATOR for ids of partitions not owned, each
partition's epoch on its markers, Prepare* finished after a load, markers held until the Prepare* is replicated,
and a deposed coordinator's markers refused by the partition (the kernel checks coordinator epochs)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from idemcore.broker import Broker
from idemcore.broker.coordinator import TransactionCoordinator, partition_for
from idemcore.broker.coordinator.request_path_writers import HandledMarkers
from idemcore.broker.group import GroupCoordinator
from idemcore.net.messages import OffsetEntry, ProduceRequest
from idemcore.protocol.codes import ControlType, ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files.transaction_log import TransactionLogFormatError, TransactionState, decode_value

E = ErrorCode
S = TransactionState
PARTITIONS = 4
TP = ("data", 0)


def _ids_by_partition() -> dict[int, str]:
    """A transactional id for each partition of a 4-partition __transaction_state."""
    found: dict[int, str] = {}
    for n in itertools.count():
        found.setdefault(partition_for(f"txn-{n}", PARTITIONS), f"txn-{n}")
        if len(found) == PARTITIONS:
            return found
    raise AssertionError("unreachable")


IDS = _ids_by_partition()


class Log:
    """``__transaction_state`` in memory: records per partition in order."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []

    def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        self.records.append((partition, key, value))
        return E.NONE

    def of(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        return [(key, value) for p, key, value in self.records if p == partition]


class Markers:
    """Records every marker round; ``fail`` answers them all with that code."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, bool, tuple[tuple[str, int], ...]]] = []
        self.fail: int | None = None

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.calls.append((producer_id, producer_epoch, coordinator_epoch, committed, tuple(partitions)))
        return dict.fromkeys(partitions, E.NONE if self.fail is None else self.fail)


def _coordinator(log: Log | None = None, markers: Markers | None = None) -> TransactionCoordinator:
    ids = itertools.count(100)
    return TransactionCoordinator(log or Log(), markers or Markers(), lambda: next(ids), lambda: 1_000,
                                  transaction_state_partitions=PARTITIONS)


def _open_txn(coordinator: TransactionCoordinator, txn_id: str) -> tuple[int, int]:
    result = coordinator.init_producer_id(txn_id, 60_000)
    assert result.error_code is E.NONE
    assert coordinator.add_partitions_to_txn(txn_id, result.producer_id, result.producer_epoch, [TP]) == {TP: E.NONE}
    return result.producer_id, result.producer_epoch


def test_an_id_of_a_partition_not_owned_is_answered_not_coordinator() -> None:
    coordinator = _coordinator()
    coordinator.load_partition(1, [], coordinator_epoch=3)
    assert coordinator.owns(1) and not coordinator.owns(0)
    assert coordinator.owned_partitions == {1: 3}
    assert coordinator.init_producer_id(IDS[1], 60_000).error_code is E.NONE
    assert coordinator.init_producer_id(IDS[0], 60_000).error_code is E.NOT_COORDINATOR
    # Kafka's order: an invalid timeout is answered before ownership is looked at.
    assert coordinator.init_producer_id(IDS[0], 0).error_code is E.INVALID_TRANSACTION_TIMEOUT
    assert coordinator.add_partitions_to_txn(IDS[0], 7, 0, [TP]) == {TP: E.NOT_COORDINATOR}
    assert coordinator.end_txn(IDS[0], 7, 0, True) is E.NOT_COORDINATOR
    assert coordinator.add_offsets_to_txn(IDS[2], 7, 0, "group") is E.NOT_COORDINATOR
    assert coordinator.describe_transactions([IDS[3]])[0].error_code is E.NOT_COORDINATOR


def test_unloading_drops_the_partitions_ids_and_answers_not_coordinator_for_them() -> None:
    coordinator = _coordinator()
    coordinator.load_partition(0, [], 1)
    coordinator.load_partition(2, [], 1)
    pid0, epoch0 = _open_txn(coordinator, IDS[0])
    pid2, epoch2 = _open_txn(coordinator, IDS[2])
    assert coordinator.unload_partition(0) == 1
    assert coordinator.metadata(IDS[0]) is None and not coordinator.owns(0)
    assert coordinator.end_txn(IDS[0], pid0, epoch0, True) is E.NOT_COORDINATOR
    assert coordinator.list_transactions().transaction_states[0].transactional_id == IDS[2]
    assert coordinator.end_txn(IDS[2], pid2, epoch2, True) is E.NONE  # the other partition is untouched
    assert coordinator.unload_partition(0) == 0  # twice: nothing more
    with pytest.raises(ValueError, match=r"partition must be an int in 0\.\.3"):
        coordinator.unload_partition(PARTITIONS)


def test_each_partitions_coordinator_epoch_is_stamped_on_its_markers() -> None:
    markers = Markers()
    coordinator = _coordinator(markers=markers)
    coordinator.load_partition(0, [], coordinator_epoch=4)
    coordinator.load_partition(3, [], coordinator_epoch=9)
    for partition in (0, 3):
        pid, epoch = _open_txn(coordinator, IDS[partition])
        assert coordinator.end_txn(IDS[partition], pid, epoch, True) is E.NONE
    assert [(call[2], call[3]) for call in markers.calls] == [(4, True), (9, True)]
    assert coordinator.coordinator_epoch_of(3) == 9 and coordinator.coordinator_epoch_of(1) is None


def test_a_load_finishes_the_partitions_prepare_with_the_new_epoch() -> None:
    log, old_markers = Log(), Markers()
    old = _coordinator(log, old_markers)
    old.load_partition(1, [], 2)
    old_markers.fail = E.NOT_LEADER_OR_FOLLOWER  # the leaders cannot be reached: the Prepare* stays pending
    pid, epoch = _open_txn(old, IDS[1])
    assert old.end_txn(IDS[1], pid, epoch, False) is E.NONE
    assert old.pending_completions == (IDS[1],)

    markers = Markers()
    new = _coordinator(log, markers)
    new.load_partition(1, log.of(1), coordinator_epoch=3)
    assert markers.calls == [(pid, epoch, 3, False, (TP,))]
    assert decode_value(log.records[-1][2]).state is S.COMPLETE_ABORT  # type: ignore[union-attr]
    assert new.metadata(IDS[1]).state is S.COMPLETE_ABORT  # type: ignore[union-attr]
    assert new.pending_completions == ()


def test_a_reload_replaces_the_partition_and_unload_abandons_its_completions() -> None:
    log, markers = Log(), Markers()
    coordinator = _coordinator(log, markers)
    coordinator.load_partition(2, [], 1)
    markers.fail = E.NOT_LEADER_OR_FOLLOWER
    pid, epoch = _open_txn(coordinator, IDS[2])
    assert coordinator.end_txn(IDS[2], pid, epoch, True) is E.NONE
    rounds = len(markers.calls)
    coordinator.unload_partition(2)
    assert coordinator.pending_completions == ()
    assert coordinator.retry_pending_markers() == 0
    assert len(markers.calls) == rounds  # nothing is sent for a partition this coordinator left
    # Leading it again at a newer epoch: the PrepareCommit read back and finished with that epoch.
    markers.fail = None
    coordinator.load_partition(2, log.of(2), 5)
    assert markers.calls[-1] == (pid, epoch, 5, True, (TP,))
    assert coordinator.metadata(IDS[2]).state is S.COMPLETE_COMMIT  # type: ignore[union-attr]


def test_a_record_of_another_partition_refuses_the_load_and_changes_nothing() -> None:
    log = Log()
    coordinator = _coordinator(log)
    coordinator.load_partition(0, [], 1)
    _open_txn(coordinator, IDS[0])
    with pytest.raises(TransactionLogFormatError, match="belongs to partition 0"):
        coordinator.load_partition(1, log.of(0), 2)
    assert not coordinator.owns(1) and coordinator.metadata(IDS[0]) is not None


def test_the_whole_topic_load_owns_every_partition_at_its_epoch() -> None:
    coordinator = _coordinator()
    coordinator.load([], coordinator_epoch=0)
    assert coordinator.owned_partitions == dict.fromkeys(range(PARTITIONS), 0)
    assert coordinator.coordinator_epoch == 0
    coordinator.unload_partition(1)
    assert coordinator.init_producer_id(IDS[1], 60_000).error_code is E.NOT_COORDINATOR
    assert coordinator.init_producer_id(IDS[0], 60_000).error_code is E.NONE


class Replication:
    """The coordinator's view of its log's replication: log ends and high watermarks set by the test."""

    def __init__(self) -> None:
        self.end = 0
        self.hw = 0

    def log_end(self, partition: int) -> int:
        return self.end

    def high_watermark(self, partition: int) -> int:
        return self.hw


def test_markers_wait_until_the_prepare_record_is_replicated() -> None:
    log, markers = Log(), Markers()
    coordinator = _coordinator(log, markers)
    replication = Replication()
    coordinator.replication = replication
    coordinator.load_partition(0, [], 1)
    pid, epoch = _open_txn(coordinator, IDS[0])
    replication.end = 5  # the PrepareCommit ends the log at 5; followers hold 3
    replication.hw = 3
    assert coordinator.end_txn(IDS[0], pid, epoch, True) is E.NONE
    assert markers.calls == [] and coordinator.pending_completions == (IDS[0],)
    assert coordinator.retry_pending_markers() == 1 and markers.calls == []
    assert coordinator.end_txn(IDS[0], pid, epoch, True) is E.CONCURRENT_TRANSACTIONS
    replication.hw = 4
    assert coordinator.partition_replicated(0) == 1 and markers.calls == []
    replication.hw = 5
    assert coordinator.partition_replicated(0) == 0
    assert markers.calls == [(pid, epoch, 1, True, (TP,))]
    assert coordinator.metadata(IDS[0]).state is S.COMPLETE_COMMIT  # type: ignore[union-attr]


def test_a_deposed_coordinators_markers_are_fenced_by_the_partition() -> None:
    """Two coordinators of one partition, as during a leadership change: the new one (epoch 6) commits; the
    deposed one (epoch 5) then aborts and its marker is refused TRANSACTION_COORDINATOR_FENCED by the data
    partition's producer state, so it gives up and the partition holds the one COMMIT."""
    with Broker({"data": 1}) as broker:
        log = Log()
        deposed = TransactionCoordinator(log, HandledMarkers(broker.handle), broker.producer_ids.generate_producer_id,
                                         broker.clock, transaction_state_partitions=PARTITIONS)
        deposed.load_partition(0, [], 5)
        pid, epoch = _open_txn(deposed, IDS[0])
        batch = RecordBatch("data", 0, (b"v",), None, pid, epoch, 0, broker.clock(), True)
        produced = broker.handle(ProduceRequest((batch,), acks=-1))
        assert produced.responses[0].error_code == E.NONE  # type: ignore[union-attr]

        leader = TransactionCoordinator(log, HandledMarkers(broker.handle), broker.producer_ids.generate_producer_id,
                                        broker.clock, transaction_state_partitions=PARTITIONS)
        leader.load_partition(0, log.of(0), 6)
        assert leader.end_txn(IDS[0], pid, epoch, True) is E.NONE
        assert leader.pending_completions == ()

        assert deposed.end_txn(IDS[0], pid, epoch, False) is E.NONE  # its own log write is not the question here
        assert deposed.pending_completions == (IDS[0],)  # given up: fenced, left to the partition's leader
        assert deposed.retry_pending_markers() == 1
        markers = [(stored.control[0], stored.control[1]) for stored in broker.log("data", 0).batches
                   if stored.control is not None]
        assert markers == [(ControlType.COMMIT, 6)]


def test_the_group_coordinator_loads_and_unloads_one_partition() -> None:
    appended: list[int] = []

    class OffsetsLog:
        def append(self, partition: int, records: object, producer_id: int, producer_epoch: int,
                   transactional: bool) -> tuple[int, int]:
            appended.append(partition)
            return E.NONE, len(appended) - 1

    groups = GroupCoordinator(OffsetsLog(), lambda: 1_000, offsets_partitions=PARTITIONS)
    group = IDS[2]  # the same hash picks the group's partition
    offsets = [OffsetEntry("t", 0, 42)]
    assert groups.offset_commit(group, offsets) == {("t", 0): E.NOT_COORDINATOR}
    groups.load_partition(2, [], coordinator_epoch=8)
    assert groups.owns(2) and groups.coordinator_epoch_of(2) == 8
    assert groups.offset_commit(group, offsets) == {("t", 0): E.NONE}
    assert groups.offset_fetch(group, [("t", 0)])[1][("t", 0)].offset == 42
    assert groups.unload_partition(2) is True
    assert not groups.owns(2) and groups.coordinator_epoch_of(2) is None
    assert groups.offset_fetch(group, [("t", 0)]) == (E.NOT_COORDINATOR, {})
    assert groups.offset_commit(group, offsets) == {("t", 0): E.NOT_COORDINATOR}
    assert groups.unload_partition(2) is False
