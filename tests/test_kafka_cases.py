"""Golden cases from Kafka's own ProducerStateManager/UnifiedLog tests, at log level (duplicates caught first)."""

from __future__ import annotations

import pytest

from idemcore import CompletedTxn, ErrorCode, ProducerStateManager, Status

E = ErrorCode
PID = 1


@pytest.fixture
def manager(backend):
    return ProducerStateManager(stream=0, producer_id_expiration_ms=60 * 60 * 1000, backend=backend)


def test_basic_idempotence(manager):
    first = manager.append(PID, 0, 0, 0)
    assert (first.status, first.base_offset) == (Status.APPENDED, 0)
    assert manager.append(PID, 0, 1, 1).base_offset == 1
    dup = manager.append(PID, 0, 1, 1)
    assert (dup.status, dup.error_code, dup.base_offset, dup.last_offset) == (Status.DUPLICATE, E.NONE, 1, 1)
    assert manager.append(PID, 0, 5, 5).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    bumped = manager.append(PID, 1, 0, 0)
    assert (bumped.status, bumped.base_offset) == (Status.APPENDED, 2)
    zombie = manager.append(PID, 0, 0, 0)
    assert (zombie.status, zombie.error_code, zombie.base_offset) == (Status.REJECTED, E.INVALID_PRODUCER_EPOCH, -1)
    assert manager.log_end_offset == 3


def test_commit_marker_for_unknown_producer_sets_epoch(manager):
    result = manager.append_end_txn_marker(PID, 2, commit=True)
    assert result.error_code == E.NONE and result.completed_txn is None
    entry = manager.last_entry(PID)
    assert (entry.producer_epoch, entry.last_seq) == (2, -1)
    assert manager.append(PID, 0, 0, 0).error_code == E.INVALID_PRODUCER_EPOCH
    assert manager.append(PID, 2, 17, 17).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert manager.append(PID, 2, 0, 0).status == Status.APPENDED


def test_sequence_wraps_after_replication_append(manager):
    assert manager.append(PID, 15, 2147483647, 2147483647, origin="replication").status == Status.APPENDED
    assert manager.append(PID, 15, 0, 0).status == Status.APPENDED
    assert manager.last_entry(PID).last_seq == 0


def test_sequence_does_not_wrap_to_one(manager):
    manager.append(PID, 15, 2147483647, 2147483647, origin="replication")
    assert manager.append(PID, 15, 1, 1).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_replication_with_no_prior_state_accepts_any_sequence(manager):
    assert manager.append(PID, 0, 16, 16, origin="replication").status == Status.APPENDED
    assert manager.last_entry(PID).last_seq == 16


def test_abort_marker_with_new_epoch_clears_sequences(manager):
    manager.append(PID, 0, 0, 0)
    assert manager.append_end_txn_marker(PID, 1, commit=False).error_code == E.NONE
    entry = manager.last_entry(PID)
    assert (entry.producer_epoch, entry.last_seq, entry.batches) == (1, -1, ())
    assert manager.append(PID, 1, 0, 0).status == Status.APPENDED


def test_after_marker_bump_nonzero_sequences_are_out_of_order(manager):
    manager.append(PID, 0, 0, 0)
    manager.append_end_txn_marker(PID, 1, commit=False)
    assert manager.append(PID, 1, 2, 2).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert manager.append(PID, 2, 2, 2).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_non_transactional_write_inside_transaction(manager):
    assert manager.append(PID, 0, 0, 0, is_transactional=True).status == Status.APPENDED
    assert manager.append(PID, 0, 1, 1).error_code == E.INVALID_TXN_STATE


def test_rejected_append_leaves_state_then_replication_accepts(manager):
    manager.append(PID, 0, 0, 0)
    assert manager.append(PID, 0, 3, 3).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert manager.last_entry(PID).last_seq == 0
    assert manager.append(PID, 0, 3, 3, origin="replication").status == Status.APPENDED
    assert manager.last_entry(PID).last_seq == 3


def test_idle_producer_expires_then_any_sequence_is_accepted(backend):
    manager = ProducerStateManager(producer_id_expiration_ms=1000, backend=backend)
    manager.append(PID, 0, 0, 0, timestamp=100)
    assert manager.remove_expired_producers(1099) == 0
    assert manager.remove_expired_producers(1100) == 1
    assert manager.last_entry(PID) is None
    assert manager.append(PID, 0, 1, 1, timestamp=1200).status == Status.APPENDED


def test_producer_with_open_transaction_never_expires(backend):
    manager = ProducerStateManager(producer_id_expiration_ms=1000, backend=backend)
    manager.append(PID, 0, 0, 0, timestamp=100, is_transactional=True)
    assert manager.remove_expired_producers(10**12) == 0
    assert manager.last_entry(PID).current_txn_first_offset == 0
    assert manager.first_unstable_offset() == 0


def test_marker_with_older_epoch_is_rejected(manager):
    manager.append(PID, 3, 0, 0, is_transactional=True)
    assert manager.append_end_txn_marker(PID, 2, commit=True).error_code == E.INVALID_PRODUCER_EPOCH
    assert manager.first_unstable_offset() == 0  # the transaction is still open


def test_coordinator_epoch_fencing(manager):
    for coordinator_epoch in (1, 1, 2):
        result = manager.append_end_txn_marker(PID, 0, commit=True, coordinator_epoch=coordinator_epoch)
        assert result.error_code == E.NONE
    fenced = manager.append_end_txn_marker(PID, 0, commit=True, coordinator_epoch=1)
    assert fenced.error_code == E.TRANSACTION_COORDINATOR_FENCED
    assert manager.last_entry(PID).coordinator_epoch == 2


def test_only_last_five_batches_are_deduplicated(manager):
    for seq in range(6):
        assert manager.append(PID, 0, seq, seq).base_offset == seq
    assert (manager.append(PID, 0, 6, 8).base_offset, manager.log_end_offset) == (6, 9)
    dup = manager.append(PID, 0, 6, 8)
    assert (dup.status, dup.base_offset, dup.last_offset) == (Status.DUPLICATE, 6, 8)
    assert manager.log_end_offset == 9  # nothing written
    assert manager.append(PID, 0, 7, 8).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    dup2 = manager.append(PID, 0, 2, 2)
    assert (dup2.status, dup2.base_offset, dup2.last_offset) == (Status.DUPLICATE, 2, 2)
    assert manager.append(PID, 0, 1, 1).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_unknown_transactional_producer_may_start_anywhere(manager):
    result = manager.append(23, 1, 3, 3, is_transactional=True)
    assert result.status == Status.APPENDED
    assert manager.last_entry(23).current_txn_first_offset == 0


def test_commit_yields_completed_transaction(manager):
    manager.append(PID, 0, 0, 1, is_transactional=True)
    manager.append(PID, 0, 2, 2, is_transactional=True)
    result = manager.append_end_txn_marker(PID, 0, commit=False, coordinator_epoch=3)
    txn = result.completed_txn
    assert (txn.producer_id, txn.first_offset, txn.last_offset, txn.aborted) == (PID, 0, 3, True)
    assert result.offset == 3
    assert manager.first_unstable_offset() is None
    assert manager.last_entry(PID).batches[-1].last_seq == 2  # same epoch: retained batches stay


def test_prepared_update_changes_nothing_until_committed(manager):
    """Kafka's prepareUpdate / log append / update: a batch checked but never written leaves no trace."""
    manager.append(1, 0, 0, 0)
    prepared = manager.prepare_update(1, 0, 1, 1)
    assert prepared.result.status == Status.APPENDED and prepared.result.base_offset == 1
    assert manager.last_entry(1).last_seq == 0 and manager.log_end_offset == 1  # the write failed: no update
    again = manager.prepare_update(1, 0, 1, 1)  # the producer's retry is checked afresh, not as a duplicate
    assert again.result.status == Status.APPENDED and again.result.base_offset == 1
    manager.update(again)
    assert manager.last_entry(1).last_seq == 1 and manager.log_end_offset == 2
    assert manager.append(1, 0, 1, 1).status == Status.DUPLICATE  # and now it is one


def test_prepared_marker_closes_the_transaction_only_when_committed(manager):
    manager.append(1, 0, 0, 0, is_transactional=True)
    prepared = manager.prepare_marker(1, 0, commit=False)
    assert prepared.marker_result.completed_txn == CompletedTxn(1, 0, 1, True)
    assert manager.first_unstable_offset() == 0  # still open: the marker is not in the log yet
    manager.update(prepared)
    assert manager.first_unstable_offset() is None
    with pytest.raises(TypeError, match="update takes a PreparedAppend, not AppendResult"):
        manager.update(manager.append(1, 0, 1, 1))
