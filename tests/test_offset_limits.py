"""Offsets near 2**63 - 1: a batch whose offsets would pass the int64 space is refused in every backend, never
wrapped and never an OverflowError (docs/rules.md §2, step 5; finding ``offset_overflow``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore import (
    FINDINGS,
    Broker,
    DeliveryError,
    ErrorCode,
    Finding,
    Producer,
    ProducerStateManager,
    ProducerStateTable,
    Status,
    check,
    commit,
    validate,
)
from idemcore.engine.explain import rejection_message
from idemcore.net.messages import ProduceRequest
from idemcore.record.batch import RecordBatch

from .conftest import EXPECTED
from .helpers import batches, data, marker

INT64_MAX = 2**63 - 1
#: The last offset a batch may take: the log end offset after it (last + 1) must still be an int64.
LAST = INT64_MAX - 1
OVERFLOW = (Status.REJECTED, ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1, Finding.OFFSET_OVERFLOW)


def verdict(verdicts, i=0) -> tuple:
    return (Status(int(verdicts.status[i])), ErrorCode(int(verdicts.error_code[i])), int(verdicts.base_offset[i]),
            int(verdicts.last_offset[i]), Finding(int(verdicts.finding[i])))


def rows_of(verdicts) -> list[tuple]:
    return [(*verdict(verdicts, i), int(verdicts.expected[i])) for i in range(len(verdicts))]


def same_state(a: ProducerStateTable, b: ProducerStateTable) -> None:
    ca, cb = a.canonical(), b.canonical()
    assert ca.keys() == cb.keys()
    for name in ca:
        np.testing.assert_array_equal(ca[name], cb[name], err_msg=name)


def state_ending_at(log_end: int, backend: str, partition: int = 0) -> ProducerStateTable:
    """A table whose partition's log end offset is ``log_end``: one replicated plain batch ends just before it
    (how a replayed log with high offsets leaves a partition; no 2**63 records written)."""
    state = ProducerStateTable()
    replayed = validate(batches([data(-1, -1, -1, base_offset=log_end - 1, partition=partition)]), state,
                        origin="replication", backend=backend)
    assert verdict(replayed)[:4] == (Status.APPENDED, ErrorCode.NONE, log_end - 1, log_end - 1)
    assert state.next_offset(partition) == log_end
    return state


def test_client_batches_fill_the_partition_to_the_last_offset_and_no_further(backend):
    state = state_ending_at(LAST - 4, backend)  # room for exactly five offsets: LAST - 4 .. LAST
    filling = validate(batches([data(7, 0, 0, 4)]), state, backend=backend)
    assert verdict(filling) == (Status.APPENDED, ErrorCode.NONE, LAST - 4, LAST, Finding.NONE)
    assert state.next_offset(0) == INT64_MAX
    before = state.copy()
    rows = [data(7, 0, 5), data(8, 0, 0), data(-1, -1, -1), data(7, 0, 0, 4)]  # next, new producer, plain, retry
    verdicts = validate(batches(rows), state, backend=backend)
    assert rows_of(verdicts)[:3] == [(*OVERFLOW, INT64_MAX)] * 3  # each would take offset 2**63 - 1
    assert rows_of(verdicts)[3] == (Status.DUPLICATE, ErrorCode.NONE, LAST - 4, LAST, Finding.DUPLICATE, -1)
    same_state(state, before)  # nothing appended, no wrapped log end, no new producer entry
    assert state.row_of(0, 8) is None


def test_a_batch_straddling_the_limit_is_refused_whole(backend):
    state = state_ending_at(LAST - 2, backend)
    before = state.copy()
    verdicts = validate(batches([data(7, 0, 0, 3)]), state, backend=backend)  # LAST - 2 .. LAST + 1
    assert rows_of(verdicts) == [(*OVERFLOW, LAST - 2)]
    same_state(state, before)
    fits = validate(batches([data(7, 0, 0, 2)]), state, backend=backend)  # the same producer, three records: fits
    assert verdict(fits) == (Status.APPENDED, ErrorCode.NONE, LAST - 2, LAST, Finding.NONE)


#: (given base offset, record count, fits): the last offset may be 2**63 - 2, never 2**63 - 1 or beyond.
REPLAYED = [(LAST, 1, True), (LAST - 1, 2, True), (INT64_MAX - 2147483647, 2147483647, True),
            (INT64_MAX, 1, False), (LAST, 2, False), (INT64_MAX - 2147483646, 2147483647, False)]


def test_replayed_batches_keep_their_offsets_up_to_the_limit(backend):
    for base_offset, count, fits in REPLAYED:
        row = {"producer_id": 9, "producer_epoch": 0, "base_sequence": 0, "last_sequence": count - 1,
               "record_count": count, "base_offset": base_offset}
        state = ProducerStateTable()
        verdicts = validate(batches([row]), state, origin="replication", backend=backend)
        if fits:
            assert verdict(verdicts) == (Status.APPENDED, ErrorCode.NONE, base_offset, base_offset + count - 1,
                                         Finding.NONE)
            assert state.next_offset(0) == base_offset + count
        else:
            assert rows_of(verdicts) == [(*OVERFLOW, base_offset)], (base_offset, count)
            assert state.n_streams == state.n_producers == 0


def test_check_then_commit_near_the_limit(backend):
    state = state_ending_at(LAST - 1, backend, partition=0)
    extend = validate(batches([data(-1, -1, -1, base_offset=99, partition=1)]), state, origin="replication",
                      backend=backend)
    assert verdict(extend)[0] is Status.APPENDED
    request = batches([data(7, 0, 0, 2, partition=0), data(8, 0, 0, 1, partition=1)])
    before = state.copy()
    verdicts = check(request, state, backend=backend)
    assert rows_of(verdicts) == [(*OVERFLOW, LAST - 1),
                                 (Status.APPENDED, ErrorCode.NONE, 100, 101, Finding.NONE, -1)]
    same_state(state, before)
    commit(request, verdicts, state, backend=backend)
    assert state.next_offset(0) == LAST - 1 and state.next_offset(1) == 102
    assert state.row_of(0, 7) is None and state.row_of(1, 8) is not None
    again = check(batches([data(7, 0, 0, 1)]), state, backend=backend)  # two records fit: LAST - 1 .. LAST
    assert verdict(again) == (Status.APPENDED, ErrorCode.NONE, LAST - 1, LAST, Finding.NONE)
    commit(batches([data(7, 0, 0, 1)]), again, state, backend=backend)
    assert state.next_offset(0) == INT64_MAX


def test_a_marker_needs_an_offset_too(backend):
    state = state_ending_at(LAST - 1, backend)
    opened = validate(batches([data(5, 0, 0, is_transactional=True)]), state, backend=backend)
    assert verdict(opened) == (Status.APPENDED, ErrorCode.NONE, LAST - 1, LAST - 1, Finding.NONE)
    two = validate(batches([data(-1, -1, -1, record_count=2)]), state, backend=backend)
    assert rows_of(two) == [(*OVERFLOW, LAST)]
    closing = validate(batches([marker(5, 0)]), state, origin="coordinator", backend=backend)
    assert verdict(closing) == (Status.APPENDED, ErrorCode.NONE, LAST, LAST, Finding.NONE)
    done = closing.completed_txns
    assert len(done) == 1 and (int(done.first_offset[0]), int(done.last_offset[0])) == (LAST - 1, LAST)
    assert state.next_offset(0) == INT64_MAX

    state = state_ending_at(LAST - 1, backend)
    filled = validate(batches([data(5, 0, 0, 1, is_transactional=True)]), state, backend=backend)
    assert verdict(filled) == (Status.APPENDED, ErrorCode.NONE, LAST - 1, LAST, Finding.NONE)
    before = state.copy()
    refused = validate(batches([marker(5, 0, commit=False)]), state, origin="coordinator", backend=backend)
    assert rows_of(refused) == [(*OVERFLOW, INT64_MAX)]
    assert len(refused.completed_txns) == 0
    same_state(state, before)  # the transaction is still open at LAST - 1
    assert int(state.row_txn_first_offset[state.row_of(0, 5)]) == LAST - 1


def test_the_state_manager_answers_with_the_verdict(backend):
    manager = ProducerStateManager(0, backend=backend)
    result = manager.append(3, 0, 0, 1, base_offset=LAST, origin="replication")  # would take LAST .. LAST + 1
    assert (result.status, result.error_code, result.base_offset, result.last_offset) == \
        (Status.REJECTED, ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1)
    assert manager.last_entry(3) is None and manager.log_end_offset == 0
    assert manager.append(3, 0, 0, 0, base_offset=LAST, origin="replication").last_offset == LAST
    assert manager.log_end_offset == INT64_MAX
    marker_result = manager.append_end_txn_marker(3, 0, commit=True)
    assert (marker_result.error_code, marker_result.offset) == (ErrorCode.UNKNOWN_SERVER_ERROR, -1)


def test_the_broker_answers_through_its_produce_path(backend):
    broker = Broker({"t": 2}, backend=backend)
    # The broker's own logs start at 0 and stay contiguous, so a log end near 2**63 cannot be reached by
    # writing; move partition t-0's log end in its state table (broker-wide partition number 0) instead.
    validate(batches([data(-1, -1, -1, base_offset=LAST - 3)]), broker.state, origin="replication",
             backend=broker.backend)

    def send(seq, values, partition=0):
        request = ProduceRequest((RecordBatch("t", partition, values, producer_id=4, producer_epoch=0,
                                              base_sequence=seq),))
        return broker.handle(request).responses[0]

    first = send(0, [b"a", b"b"])
    assert (first.error_code, first.base_offset) == (ErrorCode.NONE, LAST - 2)
    before = broker.state.copy()
    refused = send(2, [b"c", b"d"])  # would take LAST .. LAST + 1
    assert (refused.error_code, refused.base_offset) == (ErrorCode.UNKNOWN_SERVER_ERROR, -1)
    assert refused.error_message == (
        f"UNKNOWN_SERVER_ERROR: producer 4 epoch 0 on t-0: 2 record(s) from offset {LAST} would end at offset "
        f"{INT64_MAX}, past the last offset a partition can assign, {LAST} (its log end offset must stay an int64) "
        "(offset_overflow)")
    same_state(broker.state, before)
    assert [stored.base_offset for stored in broker.log("t", 0).batches] == [LAST - 2]
    retry = send(0, [b"a", b"b"])  # the first batch's retry is still a duplicate
    assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, LAST - 2)
    last = send(2, [b"c"])
    assert (last.error_code, last.base_offset) == (ErrorCode.NONE, LAST)
    other = send(0, [b"x"], partition=1)  # other partitions are untouched
    assert (other.error_code, other.base_offset) == (ErrorCode.NONE, 0)
    assert [stored.base_offset for stored in broker.log("t", 0).batches] == [LAST - 2, LAST]
    broker.close()


def test_a_producer_gets_the_error_once_and_does_not_retry(backend):
    broker = Broker({"t": 1}, backend=backend)
    validate(batches([data(-1, -1, -1, base_offset=LAST - 1)]), broker.state, origin="replication",
             backend=broker.backend)  # log end LAST: room for one record
    producer = Producer(broker, backend=backend, linger_ms=0)
    assert producer.send("t", b"last", partition=0).result().offset == LAST
    with pytest.raises(DeliveryError, match=rf"from offset {INT64_MAX} would end at offset {INT64_MAX}, past the "
                                            rf"last offset a partition can assign, {LAST}") as raised:
        producer.send("t", b"one too many", partition=0).result()
    assert raised.value.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert producer.metrics["retries"] == 0
    assert [stored.base_offset for stored in broker.log("t", 0).batches] == [LAST]
    broker.close()


def test_the_finding_is_registered_and_explained():
    info = FINDINGS[Finding.OFFSET_OVERFLOW]
    assert info.per_batch and info.label == "offset_overflow" and info.view == ""
    assert info.expected == "the first offset the batch would have taken"
    message = rejection_message("events-3", 42, 1, 7, 9, 3, 0, False, ErrorCode.UNKNOWN_SERVER_ERROR,
                                Finding.OFFSET_OVERFLOW, LAST - 1)
    assert message == (f"UNKNOWN_SERVER_ERROR: producer 42 epoch 1 on events-3: 3 record(s) from offset {LAST - 1} "
                       f"would end at offset {INT64_MAX}, past the last offset a partition can assign, {LAST} "
                       "(its log end offset must stay an int64) (offset_overflow)")


def test_the_kernel_twins_share_the_codes():
    from idemcore.kernels import cython_rules
    from idemcore.kernels import rules_reference as rules

    assert rules.F_OFFSET_OVERFLOW == cython_rules.KERNEL_CODES["F_OFFSET_OVERFLOW"] == Finding.OFFSET_OVERFLOW
    assert rules.INT64_MAX == cython_rules.KERNEL_CODES["INT64_MAX"] == INT64_MAX


# ---------------------------------------------------------------- the backends agree near the limit

near_limit = st.one_of(st.integers(INT64_MAX - 16, INT64_MAX), st.integers(INT64_MAX - 2**32, INT64_MAX),
                       st.integers(0, 10))


@st.composite
def streams_near_the_limit(draw):
    """Batches taking the log end or (as a replayed log would) given offsets near 2**63; each producer's
    sequences follow on, so client batches are refused only for their offsets (or after such a refusal)."""
    rows, next_seq = [], {}
    for _ in range(draw(st.integers(1, 8))):
        partition = draw(st.integers(0, 2))
        count = draw(st.one_of(st.integers(1, 4), st.sampled_from([2**31 - 1, 2**20])))
        pid = draw(st.sampled_from([-1, 1, 2]))
        given = draw(st.one_of(st.just(-1), near_limit))
        seq = -1
        if pid >= 0:
            seq = next_seq.get((partition, pid), 0)
            next_seq[(partition, pid)] = (seq + count) % 2**31
        rows.append({"partition": partition, "producer_id": pid, "producer_epoch": -1 if pid < 0 else 0,
                     "base_sequence": seq, "last_sequence": -1 if pid < 0 else (seq + count - 1) % 2**31,
                     "record_count": count, "base_offset": given})
    return rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=near_limit, rows=streams_near_the_limit(), origin=st.sampled_from(["client", "replication"]))
def test_backends_agree_near_the_limit(start, rows, origin):
    results = {}
    for name in EXPECTED:
        state = state_ending_at(max(start, 1), name)
        verdicts = validate(batches(rows), state, origin=origin, backend=name)
        results[name] = (rows_of(verdicts), state.canonical())
        for (status, error, base, last, finding, expected), row in zip(rows_of(verdicts), rows, strict=True):
            if finding is Finding.OFFSET_OVERFLOW:
                assert (status, error, base, last) == OVERFLOW[:4]
                assert expected + row["record_count"] - 1 > LAST
            elif status is Status.APPENDED:
                assert 0 <= base <= last <= LAST and last == base + row["record_count"] - 1
    reference_rows, reference_state = results[EXPECTED[0]]
    for name in EXPECTED[1:]:
        assert results[name][0] == reference_rows, name
        for column in reference_state:
            np.testing.assert_array_equal(results[name][1][column], reference_state[column], err_msg=column)
