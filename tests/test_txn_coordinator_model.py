"""Random request sequences against a small model of Kafka's transaction coordinator tables (InitProducerId,
AddPartitionsToTxn/AddOffsetsToTxn, EndTxn, timeouts, expiry), with a fake clock, log writes that fail, markers
that fail, and restarts that reload the log.

The model is written from Kafka's rules (``TransactionMetadata``'s transitions, ``TransactionCoordinator``'s
handlers; distilled in docs/research/kafka-transaction-coordinator.md), not from the coordinator: plain records
per id, the last record written per id (what a reload sees), and the transactions whose markers are
outstanding. After every step
the coordinator's DescribeTransactions and ListTransactions must equal the model's, the markers written must be
the ones the model expects, and loading the log written so far must give the model's durable view."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from idemcore.broker.coordinator import (
    TransactionCoordinator,
    TransactionDescription,
    coordinator_partition,
    partition_for,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS
from idemcore.record.kafka_files.transaction_log import TransactionLogValue, TransactionState, encode_key, encode_value

from .test_txn_coordinator import FakeClock, FakeLog, FakeMarkers

E = ErrorCode
IDS = ("a", "b", "c")
TOPIC_PARTITIONS = (("t", 0), ("t", 1), ("u", 0))
GROUPS = ("g1", "g2")
MAX_TIMEOUT = 900_000
EXPIRY = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS
IDLE = ("Empty", "CompleteCommit", "CompleteAbort")
# What a failed log append is answered as (Kafka's TransactionStateManager.appendTransactionToLog).
APPEND_FAILURES = {E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE, E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
                   E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR}
SEEDED_PID = 10_000  # the producer id seeded straight into the log, far from the allocator's


@dataclass
class Rec:
    pid: int
    epoch: int
    last: int  # last epoch, for the retry of a bump; not stored in the log
    prev: int  # producer id before the last Empty record; not stored (version 0)
    state: str
    parts: frozenset
    start: int
    update: int
    timeout: int
    failed_fence: bool = False


class Model:
    def __init__(self) -> None:
        self.recs: dict[str, Rec] = {}
        self.durable: dict[str, Rec] = {}  # the last record per id, as a reload reads it back
        self.pending: dict[str, tuple[str, int]] = {}  # id -> (Complete* state, its update time)
        self.next_pid = 0
        self.fail_next: int | None = None  # the raw error the next append answers
        self.markers_fail = False
        self.coordinator_epoch = 0
        self.markers: list[tuple] = []

    def alloc(self) -> int:
        self.next_pid += 1
        return self.next_pid - 1

    def write(self, txn: str, rec: Rec | None) -> E:
        if self.fail_next is not None:
            error, self.fail_next = APPEND_FAILURES[self.fail_next], None
            return error
        if rec is None:
            self.durable.pop(txn, None)
        else:
            self.durable[txn] = dataclasses.replace(rec, last=-1, prev=-1, failed_fence=False)
        return E.NONE

    # -------------------------------------------------------------- InitProducerId

    def init(self, txn: str, timeout: int, expected: tuple[int, int], now: int) -> tuple[E, int, int]:
        if (expected[0] == -1) != (expected[1] == -1):
            return E.INVALID_REQUEST, -1, -1
        exp = None if expected[0] == -1 else expected
        if not 0 < timeout <= MAX_TIMEOUT:
            return E.INVALID_TRANSACTION_TIMEOUT, -1, -1
        created = txn not in self.recs
        if created:
            self.recs[txn] = Rec(self.alloc(), -1, -1, -1, "Empty", frozenset(), -1, now, timeout)
        answer = self._init(txn, self.recs[txn], timeout, exp, now)
        if created and answer[0] != E.NONE:
            del self.recs[txn]
        return answer

    def _init(self, txn: str, rec: Rec, timeout: int, exp: tuple[int, int] | None, now: int) -> tuple[E, int, int]:
        if txn in self.pending:
            return E.CONCURRENT_TRANSACTIONS, -1, -1
        if exp and not (rec.epoch == -1 or exp[0] == rec.pid or (exp[0] == rec.prev and exp[1] >= 32766)):
            return E.PRODUCER_FENCED, -1, -1
        if rec.state in IDLE:
            if rec.epoch >= 32766:
                if exp and exp[1] != rec.epoch:
                    return E.UNKNOWN_SERVER_ERROR, -1, -1
                pid, epoch, last = self.alloc(), 0, rec.epoch if exp else -1
            elif exp is None:
                pid, epoch, last = rec.pid, rec.epoch + 1, -1
            elif rec.epoch == -1 or exp[1] == rec.epoch:
                pid, epoch, last = rec.pid, rec.epoch + 1, rec.epoch
            elif exp[1] == rec.last:
                pid, epoch, last = rec.pid, rec.epoch, rec.last
            else:
                return E.PRODUCER_FENCED, -1, -1
            new = Rec(pid, epoch, last, rec.pid, "Empty", frozenset(), -1, now, timeout)
            error = self.write(txn, new)
            if error != E.NONE:
                return error, -1, -1
            self.recs[txn] = new
            return E.NONE, pid, epoch
        assert rec.state == "Ongoing"  # Prepare* is always pending here
        error = self._fence_and_abort(txn, rec, now)
        return (E.CONCURRENT_TRANSACTIONS if error == E.NONE else error), -1, -1

    def _fence_and_abort(self, txn: str, rec: Rec, now: int) -> E:
        epoch = rec.epoch if rec.failed_fence else rec.epoch + 1
        if epoch > 32767:
            return E.UNKNOWN_SERVER_ERROR
        rec.epoch, rec.last = epoch, -1  # raised in memory before the write, as Kafka does
        prepared = dataclasses.replace(rec, state="PrepareAbort", update=now)
        error = self.write(txn, prepared)
        if error != E.NONE:
            rec.failed_fence = True
            return error
        self._complete(txn, prepared, now)
        return E.NONE

    # -------------------------------------------------------------- the rest

    def _complete(self, txn: str, prepared: Rec, now: int) -> None:
        prepared.failed_fence = False
        self.recs[txn] = prepared
        done = "CompleteCommit" if prepared.state == "PrepareCommit" else "CompleteAbort"
        if self.markers_fail and prepared.parts:
            self.pending[txn] = (done, now)
        else:
            self._finish(txn, done, now)

    def _finish(self, txn: str, done: str, update: int) -> None:
        prepared = self.recs[txn]
        self.markers += [(prepared.pid, prepared.epoch, self.coordinator_epoch, done == "CompleteCommit", tp)
                         for tp in sorted(prepared.parts)]
        final = dataclasses.replace(prepared, state=done, parts=frozenset(), update=update)
        while self.write(txn, final) != E.NONE:  # retried inline; at most one failure is queued
            pass
        self.recs[txn] = final

    def add(self, txn: str, pid: int, epoch: int, parts: frozenset, now: int) -> E:
        rec = self.recs.get(txn)
        if rec is None or rec.pid != pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if rec.epoch != epoch:
            return E.PRODUCER_FENCED
        if txn in self.pending:
            return E.CONCURRENT_TRANSACTIONS
        if rec.state == "Ongoing" and parts <= rec.parts:
            return E.NONE
        new = dataclasses.replace(rec, state="Ongoing", parts=rec.parts | parts,
                                  start=now if rec.state in IDLE else rec.start, update=now)
        error = self.write(txn, new)
        if error == E.NONE:
            self.recs[txn] = new
        return error

    def end(self, txn: str, pid: int, epoch: int, committed: bool, now: int) -> E:
        rec = self.recs.get(txn)
        if rec is None or rec.pid != pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if rec.epoch != epoch:
            return E.PRODUCER_FENCED
        if txn in self.pending:
            return E.CONCURRENT_TRANSACTIONS
        if rec.state == "Ongoing":
            prepared = dataclasses.replace(rec, state="PrepareCommit" if committed else "PrepareAbort", update=now)
            error = self.write(txn, prepared)
            if error == E.NONE:
                self._complete(txn, prepared, now)
            return error
        if rec.state in ("CompleteCommit", "CompleteAbort"):
            return E.NONE if committed == (rec.state == "CompleteCommit") else E.INVALID_TXN_STATE
        return E.INVALID_TXN_STATE  # Empty

    def timeouts(self, now: int) -> dict[str, E]:
        return {txn: self._fence_and_abort(txn, rec, now) for txn, rec in sorted(self.recs.items())
                if txn not in self.pending and rec.state == "Ongoing" and rec.start + rec.timeout < now}

    def expire(self, now: int) -> list[str]:
        removed = []
        for txn, rec in sorted(self.recs.items()):
            if txn not in self.pending and rec.state in IDLE and rec.update <= now - EXPIRY:
                if self.write(txn, None) == E.NONE:
                    del self.recs[txn]
                    removed.append(txn)
        return removed

    def retry(self) -> None:
        for txn in sorted(self.pending):
            done, update = self.pending.pop(txn)
            self._finish(txn, done, update)

    def reload(self, now: int) -> None:
        self.coordinator_epoch += 1
        self.recs = {txn: dataclasses.replace(rec) for txn, rec in self.durable.items()}
        self.pending = {}
        for txn in sorted(self.recs):
            if self.recs[txn].state in ("PrepareCommit", "PrepareAbort"):
                self._complete(txn, self.recs[txn], now)

    def describe(self, recs: dict[str, Rec], txn: str) -> TransactionDescription:
        rec = recs.get(txn)
        if rec is None:
            return TransactionDescription(txn, E.TRANSACTIONAL_ID_NOT_FOUND)
        return TransactionDescription(txn, E.NONE, rec.state, rec.pid, rec.epoch, rec.timeout, rec.start,
                                      tuple(sorted(rec.parts)))


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock, self.log, self.markers = FakeClock(), FakeLog(), FakeMarkers()
        self.model = Model()
        self.next_pid = 0
        self.last_init: tuple[str, int, tuple[int, int]] | None = None
        self.coordinator = self._coordinator()
        self.coordinator.load([], 0)

    def _coordinator(self, log=None, markers=None, attempts: int = 2) -> TransactionCoordinator:
        return TransactionCoordinator(log or self.log, markers or self.markers, self._allocate, self.clock,
                                      marker_attempts=attempts)

    def _allocate(self) -> int:
        self.next_pid += 1
        return self.next_pid - 1

    def _arm(self, fail: int | None, markers_fail: bool = False) -> None:
        self.log.failures = [] if fail is None else [fail]
        self.model.fail_next = fail
        self.markers.default = E.NOT_LEADER_OR_FOLLOWER if markers_fail else E.NONE
        self.model.markers_fail = markers_fail

    def _disarm(self) -> None:
        assert bool(self.log.failures) == (self.model.fail_next is not None)  # both consumed the failure, or neither
        self._arm(None)

    def _producer(self, txn: str, kind: str) -> tuple[int, int]:
        rec = self.model.recs.get(txn)
        if rec is None:
            return 0, 0
        return {"current": (rec.pid, rec.epoch), "stale": (rec.pid, rec.epoch - 1), "next": (rec.pid, rec.epoch + 1),
                "last": (rec.pid, rec.last), "previous": (rec.prev, 32766), "other": (rec.pid + 1, rec.epoch)}[kind]

    # -------------------------------------------------------------- rules

    @rule(ms=st.sampled_from([1, 999, 1000, 1001, 5000, 60_001, EXPIRY - 1, EXPIRY]))
    def advance(self, ms):
        self.clock.advance(ms)

    @rule(txn=st.sampled_from(IDS), timeout=st.sampled_from([1000, 5000, 5000, 5000, 0, MAX_TIMEOUT + 1]),
          kind=st.sampled_from(["none", "none", "current", "current", "last", "stale", "previous", "other"]),
          fail=st.sampled_from([None, None, None, None, *APPEND_FAILURES]), markers_fail=st.booleans())
    def init_producer_id(self, txn, timeout, kind, fail, markers_fail):
        expected = (-1, -1) if kind == "none" or txn not in self.model.recs else self._producer(txn, kind)
        self._init(txn, timeout, expected, fail, markers_fail)

    @precondition(lambda self: self.last_init is not None)
    @rule()
    def retry_init_producer_id(self):
        """The same InitProducerId again, as a client does when the answer was lost (KIP-360 retries)."""
        self._init(*self.last_init, None, False)

    def _init(self, txn, timeout, expected, fail, markers_fail):
        self.last_init = (txn, timeout, expected)
        self._arm(fail, markers_fail)
        r = self.coordinator.init_producer_id(txn, timeout, *expected)
        assert (r.error_code, r.producer_id, r.producer_epoch) == self.model.init(txn, timeout, expected,
                                                                                   self.clock.now)
        self._disarm()

    @rule(txn=st.sampled_from(IDS), kind=st.sampled_from(["current", "current", "current", "stale", "other"]),
          parts=st.sets(st.sampled_from(TOPIC_PARTITIONS), min_size=1),
          fail=st.sampled_from([None, None, *APPEND_FAILURES]))
    def add_partitions(self, txn, kind, parts, fail):
        pid, epoch = self._producer(txn, kind)
        self._arm(fail)
        answer = self.coordinator.add_partitions_to_txn(txn, pid, epoch, sorted(parts))
        expected = self.model.add(txn, pid, epoch, frozenset(parts), self.clock.now)
        assert answer == dict.fromkeys(sorted(parts), expected)
        self._disarm()

    @rule(txn=st.sampled_from(IDS), group=st.sampled_from(GROUPS),
          fail=st.sampled_from([None, None, None, E.NOT_ENOUGH_REPLICAS]))
    def add_offsets(self, txn, group, fail):
        pid, epoch = self._producer(txn, "current")
        self._arm(fail)
        partition = ("__consumer_offsets", coordinator_partition(group, 50))
        assert self.coordinator.add_offsets_to_txn(txn, pid, epoch, group) == self.model.add(
            txn, pid, epoch, frozenset([partition]), self.clock.now)
        self._disarm()

    @rule(txn=st.sampled_from(IDS), kind=st.sampled_from(["current", "current", "current", "stale", "next", "other"]),
          committed=st.booleans(), fail=st.sampled_from([None, None, None, *APPEND_FAILURES]),
          markers_fail=st.booleans())
    def end_txn(self, txn, kind, committed, fail, markers_fail):
        pid, epoch = self._producer(txn, kind)
        self._arm(fail, markers_fail)
        assert self.coordinator.end_txn(txn, pid, epoch, committed) == self.model.end(txn, pid, epoch, committed,
                                                                                     self.clock.now)
        self._disarm()

    @rule(fail=st.sampled_from([None, None, E.NOT_ENOUGH_REPLICAS]), markers_fail=st.booleans())
    def abort_timed_out_transactions(self, fail, markers_fail):
        self._arm(fail, markers_fail)
        assert self.coordinator.abort_timed_out_transactions() == self.model.timeouts(self.clock.now)
        self._disarm()

    @rule(fail=st.sampled_from([None, None, E.NOT_ENOUGH_REPLICAS]))
    def expire_transactional_ids(self, fail):
        self._arm(fail)
        assert self.coordinator.expire_transactional_ids() == self.model.expire(self.clock.now)
        self._disarm()

    @rule(fail=st.sampled_from([None, E.NOT_ENOUGH_REPLICAS]))
    def retry_pending_markers(self, fail):
        self._arm(fail)
        assert self.coordinator.retry_pending_markers() == 0
        self.model.retry()
        self._disarm()

    @rule()
    def restart(self):
        """A new coordinator loads the log (the broker restarted, or the partitions moved) at a higher epoch."""
        self.coordinator = self._coordinator()
        self.coordinator.load(list(self.log.records), self.model.coordinator_epoch + 1)
        self.model.reload(self.clock.now)

    @initialize(epoch=st.sampled_from([None, 32765, 32766]), ongoing=st.booleans())
    def seed_near_exhaustion(self, epoch, ongoing):
        """Most runs start with "c" written straight into the log with its epochs (nearly) used up, then
        loaded, so that rotations and the last fence are reached."""
        if epoch is None:
            return
        now = self.clock.now
        parts = frozenset([("t", 0)]) if ongoing else frozenset()
        state = TransactionState.ONGOING if ongoing else TransactionState.EMPTY
        start = now if ongoing else -1
        value = TransactionLogValue(SEEDED_PID, epoch, 5000, state, (("t", (0,)),) if ongoing else None, now, start)
        self.log.records.append((partition_for("c"), encode_key("c"), encode_value(value)))
        self.model.durable["c"] = Rec(SEEDED_PID, epoch, -1, -1, state.kafka_name, parts, start, now, 5000)
        self.restart()

    # -------------------------------------------------------------- invariants

    @invariant()
    def describe_and_list_match_the_model(self):
        assert self.coordinator.describe_transactions(IDS) == [self.model.describe(self.model.recs, t) for t in IDS]
        listed = [(t.transactional_id, t.producer_id, t.state)
                  for t in self.coordinator.list_transactions().transaction_states]
        assert listed == [(t, r.pid, r.state) for t, r in sorted(self.model.recs.items())]
        assert self.coordinator.pending_completions == tuple(sorted(self.model.pending))

    @invariant()
    def markers_match_the_model(self):
        assert self.markers.written() == self.model.markers

    @invariant()
    def the_log_reloads_to_the_durable_view(self):
        # Markers that never succeed keep each Prepare* as it was written, partitions and all.
        stuck = FakeMarkers()
        stuck.default = E.NOT_LEADER_OR_FOLLOWER
        scratch = TransactionCoordinator(FakeLog(), stuck, lambda: 10**9, self.clock, marker_attempts=1)
        scratch.load(list(self.log.records), 99)
        assert scratch.describe_transactions(IDS) == [self.model.describe(self.model.durable, t) for t in IDS]


CoordinatorMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestCoordinatorAgainstModel = CoordinatorMachine.TestCase
