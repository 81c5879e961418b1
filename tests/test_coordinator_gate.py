"""Coordinator answers held until their records are replicated (ReplicationGate; Kafka's coordinators append with
acks=all and answer from the append's callback): at once when the high watermark is there, later when a follower
brings it there, an error when the leader is deposed, the ISR fell below min.insync.replicas or the deadline
passed, each rewritten into the error the request's client expects."""

from __future__ import annotations

from collections.abc import Sequence

from idemcore.broker.coordinator_gate import (
    ReplicationGate,
    Rewrite,
    offset_commit_error,
    transaction_error,
    with_error,
)
from idemcore.broker.log import PartitionLog
from idemcore.broker.partition import LeaderAndIsrState, Partition
from idemcore.net.messages import (
    EndTxnResponse,
    InitProducerIdResponse,
    OffsetCommitResponse,
    PartitionResult,
    Pending,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch

E = ErrorCode


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _leader(isr: tuple[int, ...] = (1, 2)) -> Partition:
    partition = Partition("__transaction_state", 0, 0, PartitionLog("__transaction_state", 0), local_id=1)
    partition.make_leader(LeaderAndIsrState(1, 3, isr, 0, (1, 2)), 0)
    return partition


def _write(partition: Partition) -> int:
    end = partition.log.log_end_offset
    partition.log.append(end, RecordBatch(partition.topic, 0, (b"v",), (b"k",), max_timestamp=end))
    return partition.log.log_end_offset


def _gate(clock: Clock, short: bool = False) -> ReplicationGate:
    return ReplicationGate(clock, isr_short=lambda p: "ISR too small" if short else None)


def _rewrite(response: object) -> Rewrite:
    return lambda codes: with_error(response, transaction_error(max(codes)))


def test_an_answer_waits_for_the_follower_then_goes_out() -> None:
    partition, clock = _leader(), Clock()
    gate = _gate(clock)
    end = _write(partition)
    answer = EndTxnResponse(E.NONE, 7)
    held = gate.answer(answer, [(partition, end)], _rewrite(answer))
    assert isinstance(held, Pending) and not held.done and gate.waiting == 1
    partition.update_follower(2, 0, 0, None)  # the follower has nothing yet
    assert gate.replicated(partition.topic, 0) == 0 and not held.done
    partition.update_follower(2, end, 0, None)
    assert gate.replicated(partition.topic, 0) == 1
    assert held.response == answer and gate.waiting == 0


def test_a_replicated_end_or_a_lone_leader_is_answered_at_once() -> None:
    clock = Clock()
    gate = _gate(clock)
    alone = _leader(isr=(1,))
    answer = InitProducerIdResponse(E.NONE, 5, 0, 1)
    # The leader alone in the ISR: the high watermark moves with its log end.
    assert gate.answer(answer, [(alone, _write(alone))], _rewrite(answer)) == answer
    partition = _leader()
    end = _write(partition)
    partition.update_follower(2, end, 0, None)
    assert gate.answer(answer, [(partition, end)], _rewrite(answer)) == answer


def test_a_deposed_leader_answers_not_coordinator() -> None:
    partition, clock = _leader(), Clock()
    gate = _gate(clock)
    answer = InitProducerIdResponse(E.NONE, 5, 0, 1)
    held = gate.answer(answer, [(partition, _write(partition))], _rewrite(answer))
    partition.make_follower(LeaderAndIsrState(2, 4, (2,), 1, (1, 2)))
    gate.replicated(partition.topic, 0)
    assert held.response == InitProducerIdResponse(E.NOT_COORDINATOR, request_id=1)  # id and epoch withheld


def test_a_shrunken_isr_and_a_deadline_are_coordinator_not_available() -> None:
    clock = Clock()
    partition = _leader()
    end = _write(partition)
    gate = _gate(clock, short=True)
    answer = EndTxnResponse(E.NONE, 3)
    held = gate.answer(answer, [(partition, end)], _rewrite(answer))
    partition.update_follower(2, end, 0, None)
    gate.replicated(partition.topic, 0)
    assert held.response == EndTxnResponse(E.COORDINATOR_NOT_AVAILABLE, 3)  # NOT_ENOUGH_REPLICAS_AFTER_APPEND

    waiting = _gate(clock)
    late = waiting.answer(answer, [(partition, _write(partition))], _rewrite(answer), timeout_ms=5_000)
    clock.now = 4_999
    assert waiting.expire() == 0 and not late.done
    clock.now = 5_000
    assert waiting.expire() == 1
    assert late.response == EndTxnResponse(E.COORDINATOR_NOT_AVAILABLE, 3)  # REQUEST_TIMED_OUT for a transaction
    assert waiting.waiting == 0


def test_offset_commits_keep_their_own_errors_and_map_the_append_error() -> None:
    clock = Clock()
    partition = _leader()
    gate = _gate(clock)
    answer = OffsetCommitResponse(
        (PartitionResult("t", 0, E.NONE), PartitionResult("t", 1, E.OFFSET_METADATA_TOO_LARGE)), 9)
    held = gate.answer(answer, [(partition, _write(partition))],
                       lambda codes: with_error(answer, offset_commit_error(max(codes))), timeout_ms=10)
    clock.now = 10
    gate.expire()
    assert held.response == OffsetCommitResponse((PartitionResult("t", 0, E.REQUEST_TIMED_OUT),
                                                  PartitionResult("t", 1, E.OFFSET_METADATA_TOO_LARGE)), 9)
    assert offset_commit_error(E.NOT_LEADER_OR_FOLLOWER) is E.NOT_COORDINATOR
    assert transaction_error(E.REQUEST_TIMED_OUT) is E.COORDINATOR_NOT_AVAILABLE


def test_an_answer_over_two_partitions_waits_for_both() -> None:
    clock = Clock()
    first, second = _leader(), _leader()
    first_end, second_end = _write(first), _write(second)
    gate = _gate(clock)
    answer = EndTxnResponse(E.NONE, 1)
    seen: list[list[int]] = []

    def rewrite(codes: Sequence[int]) -> EndTxnResponse:
        seen.append(list(codes))
        return EndTxnResponse(E.UNKNOWN_SERVER_ERROR, 1)
    held = gate.answer(answer, [(first, first_end), (second, second_end)], rewrite)
    first.update_follower(2, first_end, 0, None)
    gate.replicated(first.topic, 0)
    assert not held.done
    second.make_follower(LeaderAndIsrState(2, 4, (2,), 1, (1, 2)))
    gate.replicated(second.topic, 0)
    assert held.response == EndTxnResponse(E.UNKNOWN_SERVER_ERROR, 1)
    assert seen == [[E.NONE, E.NOT_LEADER_OR_FOLLOWER]]
