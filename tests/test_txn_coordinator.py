"""The transaction coordinator: Kafka's TransactionCoordinatorTest cases (exact error codes, producer ids and
epochs), the EndTxn retry table, and durability (a failed write changes nothing; reloading the log gives the
same state; a reload finishes Prepare* with markers; timeouts mark with the bumped epoch).

Kafka's test mocks the state manager; here the same metadata is installed directly (``install``) and the log and
marker writers are fakes that record what was written."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import pytest

from idemcore.broker.coordinator import (
    IllegalTransitionError,
    TransactionCoordinator,
    TransactionDescription,
    TransactionMetadata,
    partition_for,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS
from idemcore.record.kafka_files.transaction_log import (
    TransactionLogFormatError,
    TransactionLogValue,
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

E = ErrorCode
S = TransactionState
NOW = 1_700_000_000_000
TXN = "known"  # Kafka's test's transactional id
PID = 10  # ... its producer id
EPOCH = 1  # ... its producer epoch
TP = ("topic1", 0)
MAX = 32767


class FakeClock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class FakeLog:
    """``__transaction_state``: durable records in order; ``failures`` answers the next appends with errors."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.failures: list[int] = []

    def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        if self.failures:
            return self.failures.pop(0)
        self.records.append((partition, key, value))
        return E.NONE

    def decoded(self) -> list[tuple[str | None, TransactionLogValue | None]]:
        return [(decode_key(key), decode_value(value)) for _, key, value in self.records]

    def last(self) -> TransactionLogValue | None:
        return self.decoded()[-1][1]


@dataclass(frozen=True)
class MarkerCall:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    answers: dict[tuple[str, int], int]


class FakeMarkers:
    """Answers each call from ``script`` (one error for all partitions, or per partition), else ``default``."""

    def __init__(self) -> None:
        self.calls: list[MarkerCall] = []
        self.script: list[int | dict[tuple[str, int], int]] = []
        self.default: int = E.NONE

    def write_markers(self, producer_id, producer_epoch, coordinator_epoch, committed, partitions):
        answer = self.script.pop(0) if self.script else self.default
        errors = {tp: answer if isinstance(answer, int) else answer.get(tp, E.NONE) for tp in partitions}
        self.calls.append(MarkerCall(producer_id, producer_epoch, coordinator_epoch, committed, errors))
        return errors

    def written(self) -> list[tuple[int, int, int, bool, tuple[str, int]]]:
        """(producer id, epoch, coordinator epoch, committed, partition) of every marker answered NONE."""
        return [(c.producer_id, c.producer_epoch, c.coordinator_epoch, c.committed, tp)
                for c in self.calls for tp, error in c.answers.items() if error == E.NONE]


@dataclass
class Harness:
    coordinator: TransactionCoordinator
    log: FakeLog
    markers: FakeMarkers
    clock: FakeClock
    ids: itertools.count = field(default_factory=itertools.count)

    def reload(self, coordinator_epoch: int, **config) -> Harness:
        """A new coordinator (a restarted broker) loading this harness's log; it goes on writing to it."""
        fresh = harness(first_producer_id=next(self.ids) + 100, load=False, clock=self.clock, log=self.log, **config)
        fresh.coordinator.load(list(self.log.records), coordinator_epoch)
        return fresh


def harness(first_producer_id: int = 0, load: bool = True, clock: FakeClock | None = None,
            log: FakeLog | None = None, **config) -> Harness:
    log, markers, clock = log or FakeLog(), FakeMarkers(), clock or FakeClock()
    ids = itertools.count(first_producer_id)
    coordinator = TransactionCoordinator(log, markers, lambda: next(ids), clock, **config)
    if load:
        coordinator.load([], 0)
    return Harness(coordinator, log, markers, clock, ids)


def meta(state: S, producer_id: int = PID, epoch: int = EPOCH, last_epoch: int = -1, previous: int = PID,
         partitions=(), timeout: int = 1, start: int = NOW, update: int = NOW, txn: str = TXN) -> TransactionMetadata:
    return TransactionMetadata(txn, producer_id, epoch, timeout, state, update, previous_producer_id=previous,
                               last_producer_epoch=last_epoch, topic_partitions=set(partitions),
                               txn_start_timestamp=start)


def install(h: Harness, metadata: TransactionMetadata) -> TransactionMetadata:
    """Put ``metadata`` in the coordinator's cache, as Kafka's test has its mocked state manager return it."""
    h.coordinator._metadata[metadata.transactional_id] = metadata
    return metadata


def init(h: Harness, txn: str | None = TXN, timeout: int = 1, expected: tuple[int, int] = (-1, -1)):
    r = h.coordinator.init_producer_id(txn, timeout, *expected)
    return r.error_code, r.producer_id, r.producer_epoch


def describe(h: Harness, txn: str = TXN):
    (d,) = h.coordinator.describe_transactions([txn])
    return d


# ================================================================== InitProducerId (Kafka's cases)


def test_should_return_invalid_request_when_transactional_id_is_empty():
    h = harness()
    assert init(h, "") == (E.INVALID_REQUEST, -1, -1)
    assert init(h, "") == (E.INVALID_REQUEST, -1, -1)


def test_should_accept_init_pid_and_return_next_pid_when_transactional_id_is_null():
    h = harness()
    assert init(h, None) == (E.NONE, 0, 0)
    assert init(h, None) == (E.NONE, 1, 0)
    assert h.log.records == []  # nothing is stored for an idempotent producer


def test_should_init_pid_with_epoch_zero_for_new_transactional_id():
    h = harness(first_producer_id=5)
    assert init(h) == (E.NONE, 5, 0)
    assert h.log.decoded() == [(TXN, TransactionLogValue(5, 0, 1, S.EMPTY, None, NOW, -1))]


def test_should_generate_new_producer_id_if_no_state_and_producer_id_and_epoch_provided():
    h = harness(first_producer_id=5)
    assert init(h, expected=(PID, EPOCH)) == (E.NONE, 5, 0)


def test_should_generate_new_producer_id_if_epochs_exhausted():
    h = harness(first_producer_id=11)
    install(h, meta(S.EMPTY, epoch=MAX - 1, last_epoch=MAX - 2))
    assert init(h) == (E.NONE, 11, 0)


def test_init_before_the_log_is_loaded_is_not_coordinator():
    h = harness(load=False)
    assert init(h) == (E.NOT_COORDINATOR, -1, -1)
    assert init(h, None) == (E.NONE, 0, 0)  # no partition involved


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_invalid_transaction_timeout(timeout):
    assert init(harness(), timeout=timeout) == (E.INVALID_TRANSACTION_TIMEOUT, -1, -1)


@pytest.mark.parametrize("expected", [(PID, -1), (-1, EPOCH)])
def test_half_an_expected_producer_is_an_invalid_request(expected):
    assert init(harness(), expected=expected) == (E.INVALID_REQUEST, -1, -1)


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT])
def test_should_increment_epoch_and_update_metadata_on_handle_init_pid(state):
    h = harness()
    metadata = install(h, meta(state, update=NOW - 5))
    assert init(h, timeout=10) == (E.NONE, PID, EPOCH + 1)
    assert (metadata.txn_timeout_ms, metadata.txn_last_update_timestamp) == (10, NOW)
    assert (metadata.producer_id, metadata.producer_epoch, metadata.state) == (PID, EPOCH + 1, S.EMPTY)


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_should_wait_for_commit_to_complete_on_handle_init_pid_in_prepare_state(state):
    h = harness()
    install(h, meta(state, producer_id=0, epoch=0, partitions=[("topic", 1)]))
    assert init(h, timeout=10) == (E.CONCURRENT_TRANSACTIONS, -1, -1)


def test_should_abort_transaction_on_handle_init_pid_when_existing_transaction_in_ongoing_state():
    h = harness()
    metadata = install(h, meta(S.ONGOING, last_epoch=EPOCH - 1, partitions=[TP]))
    assert init(h) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    # The fence became the abort: PrepareAbort with epoch + 1, ABORT markers with it, then CompleteAbort.
    prepare, complete = (value for _, value in h.log.decoded())
    assert prepare == TransactionLogValue(PID, EPOCH + 1, 1, S.PREPARE_ABORT, (("topic1", (0,)),), NOW, NOW)
    assert complete == TransactionLogValue(PID, EPOCH + 1, 1, S.COMPLETE_ABORT, (), NOW, NOW)
    assert h.markers.written() == [(PID, EPOCH + 1, 0, False, TP)]
    assert (metadata.state, metadata.pending_state, metadata.last_producer_epoch) == (S.COMPLETE_ABORT, None, -1)
    assert init(h) == (E.NONE, PID, EPOCH + 2)  # the client's retry: the fenced epoch is never handed out


def test_should_not_repeatedly_bump_epoch_due_to_init_pid_during_ongoing_txn_if_append_to_log_fails():
    h = harness()
    metadata = install(h, meta(S.ONGOING, partitions=[TP]))
    h.log.failures = [E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS]
    for _ in range(2):
        # Kafka's test feeds NOT_ENOUGH_REPLICAS to the callback directly; through the append it is mapped.
        assert init(h) == (E.COORDINATOR_NOT_AVAILABLE, -1, -1)
        assert (metadata.producer_epoch, metadata.has_failed_epoch_fence) == (EPOCH + 1, True)
        assert (metadata.state, metadata.pending_state) == (S.ONGOING, None)
    assert init(h) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert (metadata.producer_epoch, metadata.has_failed_epoch_fence) == (EPOCH + 1, False)
    assert [v.producer_epoch for _, v in h.log.decoded()] == [EPOCH + 1, EPOCH + 1]  # PrepareAbort, CompleteAbort


def test_should_use_last_epoch_to_fence_when_epochs_are_exhausted():
    h = harness(first_producer_id=11)
    metadata = install(h, meta(S.ONGOING, epoch=MAX - 1, last_epoch=MAX - 2, partitions=[TP]))
    assert metadata.is_producer_epoch_exhausted
    assert init(h) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert metadata.producer_epoch == MAX
    assert h.log.decoded()[0] == (TXN, TransactionLogValue(PID, MAX, 1, S.PREPARE_ABORT, (("topic1", (0,)),), NOW,
                                                           NOW))
    assert h.markers.written() == [(PID, MAX, 0, False, TP)]
    assert init(h) == (E.NONE, 11, 0)  # the retry finds the epoch exhausted and rotates the producer id


def test_init_producer_id_with_no_last_producer_data():
    h = harness()
    install(h, meta(S.EMPTY, epoch=EPOCH + 1, previous=-1, partitions=[TP]))
    assert init(h, expected=(PID, EPOCH)) == (E.PRODUCER_FENCED, -1, -1)


def test_fence_producer_when_mapping_exists_with_different_producer_id():
    h = harness()
    install(h, meta(S.EMPTY, producer_id=PID + 1, previous=PID, last_epoch=EPOCH - 1))
    assert init(h, expected=(PID, EPOCH)) == (E.PRODUCER_FENCED, -1, -1)


def test_init_producer_id_with_current_epoch_provided():
    h = harness()
    install(h, meta(S.EMPTY, epoch=10, last_epoch=9, partitions=[TP]))
    assert init(h, expected=(PID, 10)) == (E.NONE, PID, 11)
    assert init(h, expected=(PID, 10)) == (E.NONE, PID, 11)  # retry after a lost answer: the same again


def test_init_producer_id_stale_current_epoch_provided():
    h = harness()
    install(h, meta(S.EMPTY, epoch=10, last_epoch=9))
    assert init(h) == (E.NONE, PID, 11)  # a new producer instance: no retry can match any more
    assert init(h, expected=(PID, 10)) == (E.PRODUCER_FENCED, -1, -1)


def test_retry_init_producer_id_after_producer_id_rotation():
    h = harness(first_producer_id=PID + 1)
    install(h, meta(S.EMPTY, epoch=MAX - 1, last_epoch=MAX - 2))
    assert init(h, expected=(PID, MAX - 1)) == (E.NONE, PID + 1, 0)
    assert init(h, expected=(PID, MAX - 1)) == (E.NONE, PID + 1, 0)


def test_init_producer_id_with_invalid_epoch_after_producer_id_rotation():
    h = harness(first_producer_id=PID + 1)
    install(h, meta(S.EMPTY, epoch=MAX - 1, last_epoch=MAX - 2))
    assert init(h, expected=(PID, MAX - 1)) == (E.NONE, PID + 1, 0)
    assert init(h, expected=(PID, MAX - 2)) == (E.PRODUCER_FENCED, -1, -1)


def test_exhausted_epoch_with_another_expected_epoch_is_kafkas_unknown_server_error():
    h = harness()
    install(h, meta(S.EMPTY, epoch=MAX - 1, last_epoch=MAX - 2))
    assert init(h, expected=(PID, MAX - 2)) == (E.UNKNOWN_SERVER_ERROR, -1, -1)


def test_should_not_bump_epoch_with_pending_transaction():
    h = harness()
    metadata = install(h, meta(S.ONGOING, partitions=[TP]))
    metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    assert init(h, expected=(PID, 10)) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert h.log.records == []


def test_the_retry_of_a_bump_is_forgotten_on_reload_as_in_kafka():
    h = harness(first_producer_id=PID)
    init(h)
    assert init(h, expected=(PID, 0)) == (E.NONE, PID, 1)
    h2 = h.reload(1)
    assert h2.coordinator.metadata(TXN).last_producer_epoch == -1  # not stored in version 0 records
    assert init(h2, expected=(PID, 0)) == (E.PRODUCER_FENCED, -1, -1)


# ================================================================== AddPartitionsToTxn / AddOffsetsToTxn


def add(h: Harness, partitions=(TP,), producer_id: int = PID, epoch: int = EPOCH, txn: str | None = TXN):
    answer = h.coordinator.add_partitions_to_txn(txn, producer_id, epoch, list(partitions))
    assert set(answer) == set(partitions) and len(set(answer.values())) <= 1
    return next(iter(answer.values()))


def test_add_partitions_without_a_transactional_id_is_an_invalid_request():
    h = harness()
    assert add(h, txn="", producer_id=0) == E.INVALID_REQUEST
    assert add(h, txn=None, producer_id=0) == E.INVALID_REQUEST


def test_add_partitions_with_unknown_id_is_invalid_producer_id_mapping():
    assert add(harness(), producer_id=0) == E.INVALID_PRODUCER_ID_MAPPING


def test_add_partitions_before_the_log_is_loaded_is_not_coordinator():
    assert add(harness(load=False)) == E.NOT_COORDINATOR


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_add_partitions_in_prepare_state_is_concurrent_transactions(state):
    h = harness()
    install(h, meta(state, producer_id=0, epoch=0))
    assert add(h, producer_id=0, epoch=0) == E.CONCURRENT_TRANSACTIONS


def test_add_partitions_with_different_epochs_is_producer_fenced():
    h = harness()
    install(h, meta(S.PREPARE_COMMIT, producer_id=0, epoch=10, last_epoch=9))
    assert add(h, producer_id=0, epoch=0) == E.PRODUCER_FENCED  # the epoch is checked before the state


def test_add_partitions_with_other_producer_id_is_invalid_producer_id_mapping():
    h = harness()
    install(h, meta(S.ONGOING))
    assert add(h, producer_id=PID + 1) == E.INVALID_PRODUCER_ID_MAPPING


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_add_partitions_appends_ongoing(state):
    h = harness()
    ongoing = state is S.ONGOING
    install(h, meta(state, start=NOW - 50 if ongoing else -1, partitions=[("other", 3)] if ongoing else []))
    h.clock.advance(7)
    assert add(h) == E.NONE
    (_, value), = h.log.decoded()
    start = NOW - 50 if ongoing else NOW + 7  # a new transaction starts its clock now
    expected = (("other", (3,)), ("topic1", (0,))) if ongoing else (("topic1", (0,)),)
    assert value == TransactionLogValue(PID, EPOCH, 1, S.ONGOING, expected, NOW + 7, start)


def test_add_partitions_already_in_the_transaction_answers_none_without_a_write():
    h = harness()
    install(h, meta(S.ONGOING, partitions=[TP, ("t", 1)]))
    assert add(h, partitions=[TP]) == E.NONE
    assert h.log.records == []


def test_add_offsets_adds_the_groups_consumer_offsets_partition():
    h = harness()
    install(h, meta(S.EMPTY))
    assert h.coordinator.add_offsets_to_txn(TXN, PID, EPOCH, "my-group") == E.NONE
    assert describe(h).topic_partitions == (("__consumer_offsets", 12),)  # abs("my-group".hashCode) % 50
    assert h.coordinator.add_offsets_to_txn(TXN, PID, EPOCH + 1, "my-group") == E.PRODUCER_FENCED


# ================================================================== EndTxn


def end(h: Harness, committed: bool, producer_id: int = PID, epoch: int = EPOCH, txn: str | None = TXN):
    return h.coordinator.end_txn(txn, producer_id, epoch, committed)


C, A = True, False  # commit, abort

# Kafka's endTransaction table (transaction version 0), with no transition pending.
END_TXN_TABLE = [
    (S.COMPLETE_COMMIT, C, E.NONE), (S.COMPLETE_COMMIT, A, E.INVALID_TXN_STATE),
    (S.COMPLETE_ABORT, A, E.NONE), (S.COMPLETE_ABORT, C, E.INVALID_TXN_STATE),
    (S.PREPARE_COMMIT, C, E.CONCURRENT_TRANSACTIONS), (S.PREPARE_COMMIT, A, E.INVALID_TXN_STATE),
    (S.PREPARE_ABORT, A, E.CONCURRENT_TRANSACTIONS), (S.PREPARE_ABORT, C, E.INVALID_TXN_STATE),
    (S.EMPTY, C, E.INVALID_TXN_STATE), (S.EMPTY, A, E.INVALID_TXN_STATE),
]


@pytest.mark.parametrize(("state", "committed", "error"), END_TXN_TABLE)
def test_end_txn_retry_table(state, committed, error):
    h = harness()
    metadata = install(h, meta(state, last_epoch=EPOCH - 1))
    assert end(h, committed) == error
    assert h.log.records == [] and h.markers.calls == []
    assert (metadata.state, metadata.pending_state) == (state, None)


@pytest.mark.parametrize("committed", [C, A])
def test_end_txn_on_ongoing_prepares_marks_and_completes(committed):
    h = harness()
    metadata = install(h, meta(S.ONGOING, partitions=[TP, ("t", 2)], start=NOW - 3))
    h.clock.advance(4)
    assert end(h, committed) == E.NONE
    prepare = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
    complete = S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT
    assert [v for _, v in h.log.decoded()] == [
        TransactionLogValue(PID, EPOCH, 1, prepare, (("t", (2,)), ("topic1", (0,))), NOW + 4, NOW - 3),
        TransactionLogValue(PID, EPOCH, 1, complete, (), NOW + 4, NOW - 3)]
    assert h.markers.written() == [(PID, EPOCH, 0, committed, ("t", 2)), (PID, EPOCH, 0, committed, TP)]
    assert (metadata.state, metadata.pending_state, metadata.topic_partitions) == (complete, None, set())
    assert end(h, committed) == E.NONE  # the client's retry
    assert end(h, not committed) == E.INVALID_TXN_STATE


def test_end_txn_when_transaction_id_does_not_exist():
    assert end(harness(), C, producer_id=0, epoch=0) == E.INVALID_PRODUCER_ID_MAPPING


def test_end_txn_when_producer_id_does_not_match():
    h = harness()
    install(h, meta(S.ONGOING, producer_id=10, epoch=0, timeout=0))
    assert end(h, C, producer_id=0, epoch=0) == E.INVALID_PRODUCER_ID_MAPPING


def test_end_txn_when_epoch_is_not_the_transactions():
    h = harness()
    install(h, meta(S.ONGOING, last_epoch=EPOCH - 1))
    assert end(h, C, epoch=0) == E.PRODUCER_FENCED


@pytest.mark.parametrize(("stored", "requested"), [(1, 2), (2, 1)], ids=["larger", "smaller"])
def test_should_return_invalid_epoch_on_end_txn_when_epoch_is_larger_or_smaller(stored, requested):
    h = harness()
    install(h, meta(S.COMPLETE_COMMIT, epoch=stored, last_epoch=1))
    assert end(h, C, epoch=requested) == E.PRODUCER_FENCED


def test_end_txn_without_a_transactional_id_or_before_loading():
    assert end(harness(), C, txn=None) == E.INVALID_REQUEST
    assert end(harness(), C, txn="") == E.INVALID_REQUEST
    assert end(harness(load=False), C) == E.NOT_COORDINATOR


def test_end_txn_checks_in_kafkas_order():
    """Kafka's order: id, producer id, epoch, pending, state."""
    h = harness()
    metadata = install(h, meta(S.ONGOING, partitions=[TP]))
    metadata.pending_state = S.ONGOING
    assert end(h, C, producer_id=PID + 1) == E.INVALID_PRODUCER_ID_MAPPING
    assert end(h, C, epoch=EPOCH + 1) == E.PRODUCER_FENCED
    assert end(h, C) == E.CONCURRENT_TRANSACTIONS


# ================================================================== timeouts and expiry


def test_should_abort_expired_transactions_in_ongoing_state_and_bump_epoch():
    h = harness()
    install(h, meta(S.ONGOING, partitions=[TP]))
    h.clock.advance(10_000)
    assert h.coordinator.abort_timed_out_transactions() == {TXN: E.NONE}
    prepare, complete = (v for _, v in h.log.decoded())
    assert prepare == TransactionLogValue(PID, EPOCH + 1, 1, S.PREPARE_ABORT, (("topic1", (0,)),), NOW + 10_000, NOW)
    assert complete.state is S.COMPLETE_ABORT and complete.producer_epoch == EPOCH + 1
    assert h.markers.written() == [(PID, EPOCH + 1, 0, False, TP)]  # the bumped epoch fences the producer
    assert add(h) == E.PRODUCER_FENCED
    assert end(h, C) == E.PRODUCER_FENCED


def test_timeout_is_strictly_after_start_plus_timeout():
    h = harness()
    install(h, meta(S.ONGOING, partitions=[TP], timeout=1000))
    h.clock.advance(1000)
    assert h.coordinator.abort_timed_out_transactions() == {}
    h.clock.advance(1)
    assert h.coordinator.abort_timed_out_transactions() == {TXN: E.NONE}


def test_should_not_abort_expired_transactions_that_have_a_pending_state_transition():
    h = harness()
    metadata = install(h, meta(S.ONGOING, partitions=[TP]))
    metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    h.clock.advance(10_000)
    assert h.coordinator.abort_timed_out_transactions() == {}
    assert h.log.records == []


def test_should_not_bump_epoch_when_aborting_expired_transaction_if_append_to_log_fails():
    h = harness()
    metadata = install(h, meta(S.ONGOING, partitions=[TP]))
    h.clock.advance(10_000)
    h.log.failures = [E.NOT_ENOUGH_REPLICAS]
    assert h.coordinator.abort_timed_out_transactions() == {TXN: E.COORDINATOR_NOT_AVAILABLE}
    assert (metadata.producer_epoch, metadata.has_failed_epoch_fence, metadata.state) == (EPOCH + 1, True, S.ONGOING)
    assert h.markers.calls == []
    assert h.coordinator.abort_timed_out_transactions() == {TXN: E.NONE}
    assert h.log.decoded()[0][1].producer_epoch == EPOCH + 1  # raised once, not twice
    assert h.markers.written() == [(PID, EPOCH + 1, 0, False, TP)]


def test_idle_ids_expire_after_seven_days_with_a_tombstone():
    h = harness()
    assert init(h, "idle") == (E.NONE, 0, 0)
    install(h, meta(S.ONGOING, txn="busy", partitions=[TP], timeout=900_000))
    h.clock.advance(DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS - 1)
    assert h.coordinator.expire_transactional_ids() == []
    h.clock.advance(1)
    assert h.coordinator.expire_transactional_ids() == ["idle"]  # Ongoing never expires (it times out)
    assert h.log.records[-1] == (partition_for("idle"), encode_key("idle"), None)
    assert describe(h, "idle").error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    assert init(h, "idle") == (E.NONE, 1, 0)  # a new producer id, epoch 0
    assert describe(h.reload(1), "idle").producer_id == 1


def test_a_failed_tombstone_keeps_the_id():
    h = harness()
    init(h, "idle")
    h.clock.advance(DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS)
    h.log.failures = [E.NOT_ENOUGH_REPLICAS]
    assert h.coordinator.expire_transactional_ids() == []
    assert h.coordinator.metadata("idle").pending_state is None
    assert h.coordinator.expire_transactional_ids() == ["idle"]


# ================================================================== Describe / List


def test_describe_transactions():
    h = harness()
    install(h, meta(S.ONGOING, partitions=[TP, ("a", 1)]))
    assert h.coordinator.describe_transactions(["", TXN, "unknown"]) == [
        TransactionDescription("", E.INVALID_REQUEST),
        TransactionDescription(TXN, E.NONE, "Ongoing", PID, EPOCH, 1, NOW, (("a", 1), TP)),
        TransactionDescription("unknown", E.TRANSACTIONAL_ID_NOT_FOUND),
    ]


def test_describe_transactions_with_expiring_transactional_id():
    h = harness()
    install(h, meta(S.DEAD))
    assert describe(h).error_code == E.TRANSACTIONAL_ID_NOT_FOUND


def test_list_transactions_filters():
    h = harness()
    install(h, meta(S.ONGOING, txn="a", producer_id=1, start=NOW - 100))
    install(h, meta(S.EMPTY, txn="b", producer_id=2, start=-1))
    install(h, meta(S.DEAD, txn="c", producer_id=3))
    listed = h.coordinator.list_transactions()
    assert [(t.transactional_id, t.producer_id, t.state) for t in listed.transaction_states] == [
        ("a", 1, "Ongoing"), ("b", 2, "Empty")]  # Dead is never listed
    only = h.coordinator.list_transactions(states=["Ongoing", "Bogus"])
    assert [t.transactional_id for t in only.transaction_states] == ["a"]
    assert only.unknown_state_filters == ("Bogus",)
    assert h.coordinator.list_transactions(states=["Bogus"]).transaction_states == ()
    assert [t.transactional_id for t in h.coordinator.list_transactions(producer_ids=[2]).transaction_states] == ["b"]
    assert [t.transactional_id for t in h.coordinator.list_transactions(duration_ms=99).transaction_states] == [
        "a", "b"]  # b has no start (-1): now - (-1) is large, as in Kafka
    assert [t.transactional_id for t in h.coordinator.list_transactions(duration_ms=100).transaction_states] == ["b"]


# ================================================================== durability


def lifecycle(h: Harness, txn: str = TXN) -> None:
    """One producer: init, a committed transaction, an aborted one, a third left ongoing."""
    error, pid, epoch = init(h, txn, timeout=60_000)
    assert error == E.NONE
    for committed in (True, False):
        assert h.coordinator.add_partitions_to_txn(txn, pid, epoch, [("t", 0), ("t", 1)]) == {("t", 0): E.NONE,
                                                                                              ("t", 1): E.NONE}
        assert h.coordinator.add_offsets_to_txn(txn, pid, epoch, "g") == E.NONE
        assert end(h, committed, pid, epoch, txn) == E.NONE
        h.clock.advance(10)
    assert h.coordinator.add_partitions_to_txn(txn, pid, epoch, [("u", 0)]) == {("u", 0): E.NONE}


def all_described(h: Harness, ids):
    return h.coordinator.describe_transactions(sorted(ids))


def test_a_reload_of_the_records_written_gives_the_same_describe_output():
    h = harness()
    for txn in ("a", "b", "c"):
        lifecycle(h, txn)
    init(h, "b", timeout=5)  # fences b's ongoing transaction
    init(h, "b", timeout=5)
    assert all_described(h.reload(1), "abc") == all_described(h, "abc")
    assert h.coordinator.list_transactions() == h.reload(2).coordinator.list_transactions()


@pytest.mark.parametrize("step", ["init existing", "init new", "add", "add offsets", "end", "fence"])
def test_a_failed_write_leaves_the_metadata_unchanged(step):
    h = harness()
    _, pid, epoch = init(h, TXN, timeout=60_000)
    h.coordinator.add_partitions_to_txn(TXN, pid, epoch, [TP])  # TXN is Ongoing
    _, other_pid, other_epoch = init(h, "other", timeout=60_000)  # "other" is Empty
    ids = [TXN, "other", "new"]
    before = all_described(h, ids)
    records = list(h.log.records)
    h.log.failures = [E.NOT_ENOUGH_REPLICAS]
    answer = {
        "init existing": lambda: init(h, "other", timeout=5, expected=(other_pid, other_epoch))[0],
        "init new": lambda: init(h, "new")[0],
        "add": lambda: add(h, [("t", 9)], pid, epoch),
        "add offsets": lambda: h.coordinator.add_offsets_to_txn(TXN, pid, epoch, "g"),
        "end": lambda: end(h, C, pid, epoch),
        "fence": lambda: init(h, TXN, timeout=60_000)[0],
    }[step]()
    assert answer == E.COORDINATOR_NOT_AVAILABLE  # NOT_ENOUGH_REPLICAS as the coordinator reports it
    assert h.log.records == records and h.markers.calls == []
    assert all(h.coordinator.metadata(txn).pending_state is None for txn in ids[:2])
    after = all_described(h, ids)
    if step == "fence":  # Kafka's exception: the raised epoch stays in memory, so the producer stays fenced
        assert after == [dataclasses.replace(before[0], producer_epoch=epoch + 1), *before[1:]]
        assert h.coordinator.metadata(TXN).has_failed_epoch_fence
    else:
        assert after == before
        assert all_described(h.reload(1), ids) == after


def test_markers_retried_then_left_pending_answer_concurrent_transactions_until_retried():
    h = harness(marker_attempts=2)
    _, pid, epoch = init(h)
    h.coordinator.add_partitions_to_txn(TXN, pid, epoch, [("t", 0), ("t", 1)])
    h.markers.script = [{("t", 1): E.NOT_LEADER_OR_FOLLOWER}, E.REQUEST_TIMED_OUT]
    assert end(h, C, pid, epoch) == E.NONE  # answered once PrepareCommit is durable
    assert describe(h).state == "PrepareCommit" and describe(h).topic_partitions == (("t", 1),)
    assert h.coordinator.pending_completions == (TXN,)
    assert end(h, C, pid, epoch) == E.CONCURRENT_TRANSACTIONS  # the Complete* transition is pending
    assert end(h, A, pid, epoch) == E.CONCURRENT_TRANSACTIONS
    assert add(h, [("t", 5)], pid, epoch) == E.CONCURRENT_TRANSACTIONS
    assert init(h) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert h.coordinator.expire_transactional_ids() == [] and h.coordinator.abort_timed_out_transactions() == {}
    assert h.coordinator.retry_pending_markers() == 0
    assert [c.answers for c in h.markers.calls][-1] == {("t", 1): E.NONE}  # only the missing partition again
    assert describe(h).state == "CompleteCommit"
    assert end(h, C, pid, epoch) == E.NONE


def test_a_failed_complete_write_stays_pending_and_is_retried():
    h = harness(marker_attempts=2)
    _, pid, epoch = init(h)
    h.coordinator.add_partitions_to_txn(TXN, pid, epoch, [TP])
    h.log.failures = [E.NONE, E.NOT_ENOUGH_REPLICAS, E.KAFKA_STORAGE_ERROR]  # PrepareCommit ok, Complete twice not
    assert end(h, C, pid, epoch) == E.NONE
    assert describe(h).state == "PrepareCommit"
    assert h.coordinator.metadata(TXN).pending_state is S.COMPLETE_COMMIT
    assert h.coordinator.retry_pending_markers() == 0
    assert describe(h).state == "CompleteCommit"
    assert len(h.markers.calls) == 1  # markers were done: only the record was retried


def test_unknown_partitions_are_retried_not_dropped():
    """A broker started without a topic answers UNKNOWN_TOPIC_OR_PARTITION while the partition is still on disk:
    the marker is retried (as Kafka retries it), never counted done, or that partition's transaction stays open."""
    h = harness()
    _, pid, epoch = init(h)
    h.coordinator.add_partitions_to_txn(TXN, pid, epoch, [("gone", 0), TP])
    h.markers.script = [{("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION}]
    assert end(h, A, pid, epoch) == E.NONE
    assert describe(h).state == "CompleteAbort" and len(h.markers.calls) == 2  # answered on the second try


def test_a_newer_epoch_on_a_partition_abandons_the_markers_until_a_reload():
    h = harness()
    _, pid, epoch = init(h)
    h.coordinator.add_partitions_to_txn(TXN, pid, epoch, [TP])
    h.markers.default = E.TRANSACTION_COORDINATOR_FENCED
    assert end(h, C, pid, epoch) == E.NONE
    assert h.coordinator.retry_pending_markers() == 1 and len(h.markers.calls) == 1  # not sent again
    h2 = h.reload(5)
    assert describe(h2).state == "CompleteCommit"
    assert h2.markers.written() == [(pid, epoch, 5, True, TP)]


def test_a_reload_with_prepare_commit_last_sends_commit_markers_and_writes_complete_commit():
    h = harness(load=False)
    prepare = TransactionLogValue(42, 7, 60_000, S.PREPARE_COMMIT, (("t", (0, 3)), ("u", (1,))), NOW - 5, NOW - 9)
    records = [(partition_for(TXN), encode_key(TXN), encode_value(TransactionLogValue(
                   42, 7, 60_000, S.ONGOING, (("t", (0, 3)),), NOW - 9, NOW - 9))),
               (partition_for(TXN), encode_key(TXN), encode_value(prepare))]
    h.log.records = list(records)
    h.coordinator.load(records, coordinator_epoch=3)
    assert h.markers.written() == [(42, 7, 3, True, ("t", 0)), (42, 7, 3, True, ("t", 3)), (42, 7, 3, True, ("u", 1))]
    assert h.log.last() == TransactionLogValue(42, 7, 60_000, S.COMPLETE_COMMIT, (), NOW, NOW - 9)
    assert describe(h) == TransactionDescription(TXN, E.NONE, "CompleteCommit", 42, 7, 60_000, NOW - 9, ())


def test_a_reload_leaves_ongoing_transactions_to_time_out():
    h = harness()
    lifecycle(h)
    h2 = h.reload(1)
    assert describe(h2).state == "Ongoing" and h2.markers.calls == []
    h2.clock.advance(60_001)
    assert h2.coordinator.abort_timed_out_transactions() == {TXN: E.NONE}
    assert h2.markers.written()[0][:4] == (0, 1, 1, False)  # producer 0, bumped epoch 1, coordinator epoch 1


def test_reload_after_a_crash_at_every_step_of_a_commit():
    """Cut the log after each record of a producer's life and reload: every Prepare* is finished with the right
    markers, the state is the last record's (Complete* for a Prepare*), and the producer can go on."""
    full = harness()
    lifecycle(full)
    full_records = list(full.log.records)
    for cut in range(len(full_records) + 1):
        h = harness(load=False)
        h.log.records = full_records[:cut]
        h.coordinator.load(list(h.log.records), coordinator_epoch=1)
        last = h.log.decoded()[cut - 1][1] if cut else None
        if last is None:
            assert describe(h).error_code == E.TRANSACTIONAL_ID_NOT_FOUND
            continue
        expected_state = {S.PREPARE_COMMIT: S.COMPLETE_COMMIT, S.PREPARE_ABORT: S.COMPLETE_ABORT}.get(
            last.state, last.state)
        assert describe(h).state == expected_state.kafka_name
        if last.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            committed = last.state is S.PREPARE_COMMIT
            assert h.markers.written() == [(last.producer_id, last.producer_epoch, 1, committed, tp)
                                           for tp in sorted(last.topic_partitions())]
            assert h.log.last().state is expected_state
        else:
            assert h.markers.calls == [] and len(h.log.records) == cut
        # The producer (which may have crashed too) starts again and fences whatever is left open.
        error, pid, _ = init(h, timeout=60_000)
        if error == E.CONCURRENT_TRANSACTIONS:
            error, pid, _ = init(h, timeout=60_000)
        assert (error, pid) == (E.NONE, 0)
        assert describe(h).state == "Empty"


def test_load_refuses_a_record_in_the_wrong_partition_and_keeps_the_state():
    h = harness()
    init(h)
    before = all_described(h, [TXN])
    bad = [((partition_for(TXN) + 1) % 50, encode_key(TXN), None)]
    with pytest.raises(TransactionLogFormatError, match="belongs to partition"):
        h.coordinator.load(bad, 1)
    assert all_described(h, [TXN]) == before and h.coordinator.coordinator_epoch == 0


def test_load_skips_unknown_keys_and_applies_tombstones():
    h = harness(load=False)
    value = encode_value(TransactionLogValue(3, 0, 10, S.EMPTY, None, NOW, -1))
    records = [(partition_for("x"), encode_key("x"), value), (0, bytes.fromhex("0005"), b"junk"),
               (partition_for("y"), encode_key("y"), value), (partition_for("x"), encode_key("x"), None)]
    h.coordinator.load(records, 0)
    assert [d.error_code for d in h.coordinator.describe_transactions(["x", "y"])] == [
        E.TRANSACTIONAL_ID_NOT_FOUND, E.NONE]


def test_load_refuses_states_that_are_only_ever_pending():
    h = harness()
    for state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        value = encode_value(TransactionLogValue(3, 0, 10, state, (), NOW, NOW))
        with pytest.raises(TransactionLogFormatError, match="never written"):
            h.coordinator.load([(partition_for("x"), encode_key("x"), value)], 1)


def test_a_version_1_record_keeps_the_previous_producer_id_across_a_reload():
    """Kafka writes version 1 values from transaction.version 1 on; their previous producer id is read back
    (version 0, which this coordinator writes, has none)."""
    rotated = bytes.fromhex("0001" "000000000000000b" "0000" "00000001" "00" "00"  # producer 11, epoch 0, Empty
                            "0000018bcfe56800" "ffffffffffffffff" "01" "00" "08" "000000000000000a")  # previous: 10
    h = harness(load=False)
    h.coordinator.load([(partition_for(TXN), encode_key(TXN), rotated)], 1)
    assert h.coordinator.metadata(TXN).previous_producer_id == PID
    # The old producer id passes the producer check, but the last epoch is never stored, so the retry of the
    # rotation is still fenced after a reload, as in Kafka.
    assert init(h, expected=(PID, MAX - 1)) == (E.PRODUCER_FENCED, -1, -1)
    assert init(h, expected=(PID + 1, 0)) == (E.NONE, PID + 1, 1)


def test_a_log_writer_that_raises_is_a_storage_error():
    class Broken:
        def append(self, partition, key, value):
            raise OSError(5, "Input/output error")

    coordinator = TransactionCoordinator(Broken(), FakeMarkers(), lambda: 0, FakeClock())
    coordinator.load([], 0)
    assert coordinator.init_producer_id(TXN, 1).error_code == E.NOT_COORDINATOR  # KAFKA_STORAGE_ERROR, mapped
    assert coordinator.describe_transactions([TXN])[0].error_code == E.TRANSACTIONAL_ID_NOT_FOUND


def test_a_marker_writer_that_raises_leaves_the_markers_to_retry():
    h = harness(marker_attempts=1)
    _, pid, epoch = init(h)
    h.coordinator.add_partitions_to_txn(TXN, pid, epoch, [TP])

    def unreachable(*args):
        raise ConnectionResetError(104, "Connection reset by peer")

    write_markers = h.markers.write_markers
    h.markers.write_markers = unreachable
    assert end(h, C, pid, epoch) == E.NONE
    assert describe(h).state == "PrepareCommit"
    h.markers.write_markers = write_markers
    assert h.coordinator.retry_pending_markers() == 0 and describe(h).state == "CompleteCommit"


def test_state_ids_names_and_transitions_are_kafkas():
    assert [(s.value, s.kafka_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    idle = {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert {s: set(s.valid_previous_states) for s in S} == {
        S.EMPTY: idle, S.ONGOING: idle | {S.ONGOING}, S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE}, S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT}, S.DEAD: idle, S.PREPARE_EPOCH_FENCE: {S.ONGOING}}
    assert {s for s in S if s.expiration_allowed} == idle
    assert S.from_name("PrepareEpochFence") is S.PREPARE_EPOCH_FENCE and S.from_name("prepareCommit") is None


def test_prepare_checks_the_transition_and_the_pending_state():
    metadata = meta(S.EMPTY)
    with pytest.raises(IllegalTransitionError, match="Empty cannot move to PrepareCommit"):
        metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    metadata.prepare_add_partitions([TP], NOW)
    with pytest.raises(IllegalTransitionError, match="while Ongoing is pending"):
        metadata.prepare_add_partitions([TP], NOW)


# ================================================================== completing after the answer (complete_later)


def _scheduled(h: Harness) -> list:
    """Have ``h``'s coordinator queue EndTxn's completions; returns the list the scheduled calls go to."""
    calls: list = []
    h.coordinator.complete_later(calls.append)
    return calls


def test_complete_later_answers_end_txn_once_prepare_is_durable_and_writes_markers_in_the_scheduled_call():
    h = harness()
    calls = _scheduled(h)
    _, pid, epoch = init(h, timeout=60_000)
    add(h, [("t", 0), ("t", 1)], pid, epoch)
    assert end(h, C, pid, epoch) == E.NONE
    # Answered: PrepareCommit is in the log, the markers and CompleteCommit are not yet.
    assert h.log.last().state is S.PREPARE_COMMIT and h.markers.calls == []
    assert h.coordinator.metadata(TXN).pending_state is S.COMPLETE_COMMIT
    assert h.coordinator.pending_completions == (TXN,) and len(calls) == 1
    calls.pop()()  # the server's loop runs it after the answer went out
    assert h.markers.written() == [(pid, epoch, 0, True, ("t", 0)), (pid, epoch, 0, True, ("t", 1))]
    assert h.log.last().state is S.COMPLETE_COMMIT and describe(h).state == "CompleteCommit"
    assert h.coordinator.pending_completions == () and calls == []


def test_a_request_before_the_scheduled_call_finishes_the_queued_completion_first():
    """Every coordinator request answers what it answers inline: no CONCURRENT_TRANSACTIONS from the queue."""
    h = harness()
    calls = _scheduled(h)
    _, pid, epoch = init(h, timeout=60_000)
    for committed in (C, A, C):
        add(h, [TP], pid, epoch)
        assert end(h, committed, pid, epoch) == E.NONE
    assert add(h, [("t", 7)], pid, epoch) == E.NONE  # the third transaction's markers were written first
    assert [m[3] for m in h.markers.written()] == [C, A, C]
    assert describe(h).state == "Ongoing" and describe(h).topic_partitions == (("t", 7),)
    assert end(h, A, pid, epoch) == E.NONE
    assert init(h, timeout=60_000, expected=(pid, epoch)) == (E.NONE, pid, epoch + 1)
    assert [m[3] for m in h.markers.written()] == [C, A, C, A]
    for call in calls:  # the scheduled calls that come late find nothing left to do
        call()
    assert len(h.markers.calls) == 4 and h.coordinator.pending_completions == ()


@pytest.mark.parametrize("ask", ["end", "add offsets", "describe", "list", "retry", "timeouts", "expire",
                                 "complete_later(None)"])
def test_every_coordinator_entry_finishes_what_is_queued(ask):
    h = harness()
    _scheduled(h)
    _, pid, epoch = init(h, timeout=60_000)
    add(h, [TP], pid, epoch)
    assert end(h, C, pid, epoch) == E.NONE and h.markers.calls == []
    coordinator = h.coordinator
    {"end": lambda: end(h, C, pid, epoch), "add offsets": lambda: coordinator.add_offsets_to_txn(TXN, pid, epoch, "g"),
     "describe": lambda: describe(h), "list": coordinator.list_transactions, "retry": coordinator.retry_pending_markers,
     "timeouts": coordinator.abort_timed_out_transactions, "expire": coordinator.expire_transactional_ids,
     "complete_later(None)": lambda: coordinator.complete_later(None)}[ask]()
    assert h.markers.written() == [(pid, epoch, 0, True, TP)]
    assert h.coordinator.pending_completions == ()


def test_queued_markers_that_fail_stay_pending_as_inline_and_are_retried():
    h = harness(marker_attempts=2)
    calls = _scheduled(h)
    _, pid, epoch = init(h)
    add(h, [TP], pid, epoch)
    h.markers.script = [E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT]
    assert end(h, C, pid, epoch) == E.NONE
    calls.pop()()
    assert describe(h).state == "PrepareCommit" and h.coordinator.pending_completions == (TXN,)
    assert end(h, C, pid, epoch) == E.CONCURRENT_TRANSACTIONS  # as inline: the Complete* transition is pending
    assert h.coordinator.retry_pending_markers() == 0
    assert describe(h).state == "CompleteCommit" and calls == []


def test_fences_and_timeouts_complete_inline_even_with_a_scheduler():
    """Only a client's EndTxn is answered early; the coordinator's own aborts write their markers before
    returning, as before."""
    h = harness()
    calls = _scheduled(h)
    _, pid, epoch = init(h, timeout=60_000)
    add(h, [TP], pid, epoch)
    assert init(h, timeout=60_000) == (E.CONCURRENT_TRANSACTIONS, -1, -1)  # fences the ongoing transaction
    assert h.markers.written() == [(pid, epoch + 1, 0, False, TP)] and calls == []
    _, pid, epoch = init(h, timeout=1)
    add(h, [TP], pid, epoch)
    h.clock.advance(10)
    assert h.coordinator.abort_timed_out_transactions() == {TXN: E.NONE}
    assert h.markers.written()[-1] == (pid, epoch + 1, 0, False, TP) and calls == []


def test_a_reload_drops_what_was_queued_and_finishes_it_from_the_log():
    h = harness()
    calls = _scheduled(h)
    _, pid, epoch = init(h)
    add(h, [TP], pid, epoch)
    assert end(h, C, pid, epoch) == E.NONE
    h.coordinator.load(list(h.log.records), 1)  # PrepareCommit is the id's last record: its markers are sent
    assert h.markers.written() == [(pid, epoch, 1, True, TP)] and describe(h).state == "CompleteCommit"
    calls.pop()()
    assert len(h.markers.calls) == 1
