"""The transactional producer (Kafka's TransactionManager on the client) end to end over a Broker:
commit and abort as the logs record them (markers, last stable offset, .txnindex), fencing, abortable errors,
calls out of order, lost and refused answers, Kafka's TransactionManagerTest scenarios, and a model of the
client's state machine driven by hypothesis.

The consumer is another module's: what read_committed would return is read here from the broker's logs
(data batches of a producer count once its COMMIT marker follows them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.broker import Broker
from idemcore.client import ConfigError, DeliveryError, Producer
from idemcore.client.transactions import (
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionManagerState,
    TransactionStateError,
    TransactionTimeoutError,
)
from idemcore.net.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetFetchRequest,
    PartitionResponse,
    PartitionResult,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.protocol.codes import ControlType, ErrorCode
from idemcore.record.kafka_files import read_txn_index

TOPIC = "t"


# ---------------------------------------------------------------- a transport with faults


@dataclass
class Fault:
    """What happens to the next ``times`` requests of type ``kind`` (matching ``where``): ``drop`` (the broker
    handles it, its answer is lost), ``error`` (answered ``code`` without reaching the broker) or ``hold`` (the
    broker handles it, its answer waits for ``release``)."""

    kind: type
    action: str
    code: int = ErrorCode.NONE
    times: int = 1
    where: Callable[[Any], bool] = lambda request: True


def error_response(request: Any, code: int) -> Any:
    """The answer ``code`` to ``request``, for every partition it names."""
    rid = request.request_id
    if isinstance(request, InitProducerIdRequest):
        return InitProducerIdResponse(code, request_id=rid)
    if isinstance(request, FindCoordinatorRequest):
        return FindCoordinatorResponse(code, request_id=rid)
    if isinstance(request, AddPartitionsToTxnRequest):
        return AddPartitionsToTxnResponse(tuple(PartitionResult(t, p, code) for t, p in request.partitions), rid)
    if isinstance(request, AddOffsetsToTxnRequest):
        return AddOffsetsToTxnResponse(code, rid)
    if isinstance(request, EndTxnRequest):
        return EndTxnResponse(code, rid)
    if isinstance(request, TxnOffsetCommitRequest):
        return TxnOffsetCommitResponse(tuple(PartitionResult(o.topic, o.partition, code) for o in request.offsets),
                                       rid)
    assert isinstance(request, ProduceRequest)
    return ProduceResponse(rid, tuple(PartitionResponse(b.topic, b.partition, code) for b in request.batches))


class FaultyTransport:
    """The in-process transport with a virtual clock (1 ms per tick) and the faults the test lists; records
    every request it was given, in order."""

    def __init__(self, broker: Broker, *faults: Fault) -> None:
        self.broker = broker
        self.faults = list(faults)
        self.now = 1_000
        self.sent: list[Any] = []
        self.sent_at: list[int] = []  # the clock when each request was sent
        self.inbox: list[tuple[Any, Any]] = []
        self.held: list[tuple[Any, Any]] = []
        self.disconnects = 0

    def add(self, *faults: Fault) -> None:
        self.faults += faults

    def now_ms(self) -> int:
        return self.now

    def partition_count(self, topic: str) -> int:
        return self.broker.topics[topic]

    def _fault(self, request: Any) -> Fault | None:
        for fault in self.faults:
            if isinstance(request, fault.kind) and fault.times > 0 and fault.where(request):
                fault.times -= 1
                return fault
        return None

    def send(self, client: str, request: Any) -> None:
        self.sent.append(request)
        self.sent_at.append(self.now)
        fault = self._fault(request)
        if fault is not None and fault.action == "error":
            self.inbox.append((request, error_response(request, fault.code)))
            return
        response = self.broker.handle(request)
        if response is None or (fault is not None and fault.action == "drop"):
            return
        (self.held if fault is not None and fault.action == "hold" else self.inbox).append((request, response))

    def release(self) -> None:
        self.inbox += self.held
        self.held = []

    def poll(self, client: str) -> list[tuple[Any, Any]]:
        inbox, self.inbox = self.inbox, []
        return inbox

    def disconnect(self, client: str) -> None:
        self.disconnects += 1
        self.inbox = []
        self.held = []  # answers on the broken connection never arrive

    def tick(self) -> None:
        self.now += 1

    def kinds(self) -> list[str]:
        """The requests sent, by name: "Produce", "EndTxn", ..."""
        return [type(r).__name__.removesuffix("Request").removesuffix("ToTxn") for r in self.sent]


# ---------------------------------------------------------------- reading the logs


def controls(broker: Broker, partition: int, topic: str = TOPIC) -> list[tuple[int, int, int]]:
    """``(offset, control type, producer epoch)`` of every marker in the partition."""
    return [(s.base_offset, s.control[0], s.batch.producer_epoch)
            for s in broker.log(topic, partition).batches if s.control is not None]


def read_committed(broker: Broker, partition: int, topic: str = TOPIC) -> list[bytes]:
    """The values a read_committed consumer gets: a producer's transactional records once its COMMIT follows,
    never those its ABORT ends; none at or past the last stable offset."""
    log = broker.log(topic, partition)
    visible: list[bytes] = []
    open_records: dict[int, list[bytes]] = {}
    for stored in log.batches:
        if stored.base_offset >= log.last_stable_offset:
            break
        pid = stored.batch.producer_id
        if stored.control is not None:
            records = open_records.pop(pid, [])
            if stored.control[0] == ControlType.COMMIT:
                visible += records
        elif stored.batch.is_transactional:
            open_records.setdefault(pid, []).extend(v for v in stored.batch.values if v is not None)
        else:
            visible += [v for v in stored.batch.values if v is not None]
    return visible


def all_values(broker: Broker, partition: int, topic: str = TOPIC) -> list[bytes]:
    """Every data record in the partition, committed, aborted or open (read_uncommitted)."""
    return [v for s in broker.log(topic, partition).batches if s.control is None for v in s.batch.values
            if v is not None]


def disk_broker(path: Any, partitions: int = 2, **settings: Any) -> Broker:
    """A broker writing to ``path``, with small internal topics (each of their partitions is a directory)."""
    return Broker({TOPIC: partitions}, data_dir=path, transaction_state_partitions=3, offsets_topic_partitions=3,
                  **settings)


def txn_producer(broker: Broker, *, transport: Any = None, transactional_id: str = "tx", **config: Any) -> Producer:
    settings = {"linger_ms": 1_000, "retry_backoff_ms": 5, **config}
    return Producer(transport if transport is not None else broker, transactional_id=transactional_id, **settings)


def faulty(broker: Broker, *faults: Fault, **config: Any) -> tuple[Producer, FaultyTransport]:
    transport = FaultyTransport(broker, *faults)
    config = {"request_timeout_ms": 50, "delivery_timeout_ms": 5_000, "max_block_ms": 10_000, **config}
    return txn_producer(broker, transport=transport, **config), transport


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize(("setting", "message"), [
    ({"enable_idempotence": False}, r"transactional_id='tx' requires idempotence, which is off "
                                    r"\(enable_idempotence=False\)"),
    ({"acks": 1}, r"transactional_id='tx' requires idempotence, which is off \(acks must be 'all' \(got 1\)\)"),
    ({"transaction_timeout_ms": 0}, "transaction_timeout_ms must be at least 1, got 0"),
])
def test_transactional_id_requires_idempotence_and_a_positive_timeout(setting, message):
    with pytest.raises(ConfigError, match=message):
        Producer(Broker({TOPIC: 1}), transactional_id="tx", **setting)


@pytest.mark.parametrize("bad", ["", 7])
def test_transactional_id_must_be_a_non_empty_string(bad):
    with pytest.raises(ConfigError, match="transactional_id must be a non-empty string"):
        Producer(Broker({TOPIC: 1}), transactional_id=bad)


def test_an_idempotent_producer_has_no_transactional_methods():
    producer = Producer(Broker({TOPIC: 1}))
    assert producer.transaction_state is None
    for call in (producer.init_transactions, producer.begin_transaction, producer.commit_transaction,
                 producer.abort_transaction, lambda: producer.send_offsets_to_transaction({(TOPIC, 0): 1}, "g")):
        with pytest.raises(TransactionStateError, match="needs a transactional producer: set transactional_id"):
            call()
    producer.send(TOPIC, b"still works").result()


# ---------------------------------------------------------------- commit and abort, end to end


def test_commit_makes_every_partition_visible_read_committed_at_once():
    broker = Broker({TOPIC: 3})
    producer = txn_producer(broker)
    producer.init_transactions()
    assert producer.transaction_state is TransactionManagerState.READY
    producer.begin_transaction()
    futures = [producer.send(TOPIC, b"v%d" % i, partition=i % 3) for i in range(9)]
    producer.flush()  # written, not committed: each partition's last stable offset stays at the first record
    for partition in range(3):
        log = broker.log(TOPIC, partition)
        assert all_values(broker, partition) == [b"v%d" % i for i in range(partition, 9, 3)]
        assert all(s.batch.is_transactional for s in log.batches)
        assert (log.last_stable_offset, log.log_end_offset) == (0, 3)
        assert read_committed(broker, partition) == []
    producer.commit_transaction()
    assert producer.transaction_state is TransactionManagerState.READY
    assert [f.result().offset for f in futures] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for partition in range(3):
        log = broker.log(TOPIC, partition)
        assert controls(broker, partition) == [(3, ControlType.COMMIT, 0)]  # one COMMIT marker, after the data
        assert log.last_stable_offset == log.log_end_offset == 4
        assert read_committed(broker, partition) == [b"v%d" % i for i in range(partition, 9, 3)]
    (described,) = broker.txn_coordinator.describe_transactions(["tx"])
    assert described.state == "CompleteCommit"


def test_abort_writes_abort_markers_and_a_txnindex_entry_and_the_next_transaction_commits(tmp_path):
    broker = disk_broker(tmp_path)
    producer = txn_producer(broker)
    producer.init_transactions()
    pid = producer.transactions.producer_id_and_epoch[0]
    producer.begin_transaction()
    for i in range(4):
        producer.send(TOPIC, b"a%d" % i, partition=i % 2)
    producer.flush()  # sent: the abort must be written to the logs
    producer.abort_transaction()
    for partition in range(2):
        log = broker.log(TOPIC, partition)
        assert controls(broker, partition) == [(2, ControlType.ABORT, 0)]
        assert log.last_stable_offset == 3
        assert log.aborted_transactions(0, 3) == [(pid, 0)]
        (entry,) = read_txn_index(tmp_path / f"{TOPIC}-{partition}" / "00000000000000000000.txnindex").entries
        assert (entry.producer_id, entry.first_offset, entry.last_offset) == (pid, 0, 2)
    producer.begin_transaction()
    producer.send(TOPIC, b"c0", partition=0)
    producer.commit_transaction()
    assert read_committed(broker, 0) == [b"c0"]
    assert read_committed(broker, 1) == []
    assert controls(broker, 0)[-1] == (4, ControlType.COMMIT, 0)
    # The aborted batch and the committed one share the epoch: sequences went on (no bump after a clean abort).
    assert [s.batch.base_sequence for s in broker.log(TOPIC, 0).batches if s.control is None] == [0, 2]
    broker.close()


def test_records_not_yet_sent_at_abort_never_reach_the_broker():
    """Kafka's testCancelUnsentAddPartitionsAndProduceOnAbort: the partition was never added, so no EndTxn."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker)
    producer.init_transactions()
    producer.begin_transaction()
    future = producer.send(TOPIC, b"never")
    producer.abort_transaction()
    with pytest.raises(DeliveryError, match="not sent: the transaction was aborted"):
        future.result()
    assert transport.kinds() == ["FindCoordinator", "InitProducerId"]
    assert broker.log(TOPIC, 0).log_end_offset == 0
    assert producer.transaction_state is TransactionManagerState.READY


def test_send_batch_in_a_transaction():
    broker = Broker({TOPIC: 2})
    producer = txn_producer(broker, batch_size=64)
    producer.init_transactions()
    producer.begin_transaction()
    values = [b"%03d" % i for i in range(40)]
    future = producer.send_batch(TOPIC, values, keys=[b"k%d" % (i % 5) for i in range(40)])
    producer.commit_transaction()
    assert len(future.result()) == 40
    assert sorted(read_committed(broker, 0) + read_committed(broker, 1)) == values
    assert len(controls(broker, 0)) == len(controls(broker, 1)) == 1


def test_transactions_survive_a_broker_restart_and_an_open_one_is_aborted_by_the_next_instance(tmp_path):
    broker = disk_broker(tmp_path)
    producer = txn_producer(broker)
    producer.init_transactions()
    pid, epoch = producer.transactions.producer_id_and_epoch
    producer.begin_transaction()
    producer.send(TOPIC, b"committed", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(TOPIC, b"left open", partition=0)
    producer.send(TOPIC, b"left open", partition=1)
    producer.flush()
    broker.close()  # the producer's process dies with its transaction open

    broker = disk_broker(tmp_path)
    assert read_committed(broker, 0) == [b"committed"]
    assert broker.log(TOPIC, 0).last_stable_offset == 2  # the open transaction pins it, after the restart too
    successor = txn_producer(broker)
    successor.init_transactions()  # fences the old instance: its open transaction is aborted
    # The fence raises the epoch and aborts with it (CONCURRENT_TRANSACTIONS to the successor, which retries);
    # the retry raises it once more (Kafka's TransactionCoordinator.prepareInitProducerIdTransit).
    assert successor.transactions.producer_id_and_epoch == (pid, epoch + 2)
    assert controls(broker, 0) == [(1, ControlType.COMMIT, 0), (3, ControlType.ABORT, 1)]
    assert controls(broker, 1) == [(1, ControlType.ABORT, 1)]
    assert broker.log(TOPIC, 0).last_stable_offset == broker.log(TOPIC, 0).log_end_offset == 4
    successor.begin_transaction()
    successor.send(TOPIC, b"after restart", partition=0)
    successor.commit_transaction()
    assert read_committed(broker, 0) == [b"committed", b"after restart"]
    assert read_committed(broker, 1) == []
    broker.close()

    with disk_broker(tmp_path) as again:
        assert read_committed(again, 0) == [b"committed", b"after restart"]
        assert again.txn_coordinator.describe_transactions(["tx"])[0].state == "CompleteCommit"


# ---------------------------------------------------------------- fencing


def test_a_second_instance_fences_the_first_whose_open_transaction_is_aborted():
    """Also Kafka's testFailIfNotReadyForSendAfterFatalError / testNotReadyForSendAfterFatalError."""
    broker = Broker({TOPIC: 2})
    zombie = txn_producer(broker)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send(TOPIC, b"z0", partition=0)
    zombie.flush()
    successor = txn_producer(broker)
    successor.init_transactions()
    assert successor.transactions.producer_id_and_epoch[1] == 2  # the fence's epoch, then the retry's
    assert controls(broker, 0) == [(1, ControlType.ABORT, 1)]  # the fence aborted the zombie's transaction
    late = zombie.send(TOPIC, b"z1", partition=0)  # it does not know yet: queued
    with pytest.raises(ProducerFencedError, match="'tx' has been fenced by another producer"):
        zombie.commit_transaction()
    with pytest.raises(DeliveryError) as refused:
        late.result()
    assert refused.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert zombie.transaction_state is TransactionManagerState.FATAL_ERROR
    for call in (lambda: zombie.send(TOPIC, b"z2"), zombie.begin_transaction, zombie.commit_transaction,
                 zombie.abort_transaction, zombie.init_transactions,
                 lambda: zombie.send_batch(TOPIC, [b"z3"]),
                 lambda: zombie.send_offsets_to_transaction({(TOPIC, 0): 1}, "g")):
        with pytest.raises(ProducerFencedError):
            call()
    assert all_values(broker, 0) == [b"z0"] and read_committed(broker, 0) == []
    successor.begin_transaction()
    successor.send(TOPIC, b"s0", partition=0)
    successor.commit_transaction()
    assert read_committed(broker, 0) == [b"s0"]
    zombie.close()  # a fenced producer closes without trying to abort


def test_a_zombie_adding_a_new_partition_is_fenced_by_the_coordinator():
    """Kafka's testProducerFencedInAddPartitionToTxn, through a real coordinator."""
    broker = Broker({TOPIC: 2})
    zombie, transport = faulty(broker)
    zombie.init_transactions()
    txn_producer(broker).init_transactions()
    zombie.begin_transaction()  # no request: it cannot know
    future = zombie.send(TOPIC, b"z", partition=1)
    zombie.flush()
    assert isinstance(future.exception(), DeliveryError)
    assert zombie.transaction_state is TransactionManagerState.FATAL_ERROR
    assert transport.kinds()[-1] == "AddPartitions"  # nothing produced
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    assert broker.log(TOPIC, 1).log_end_offset == 0


def test_a_zombie_that_sent_nothing_commits_nothing_without_noticing():
    """No partition added: EndTxn is not needed, so nothing tells it (Kafka's nextRequest skips EndTxn)."""
    broker = Broker({TOPIC: 1})
    zombie, transport = faulty(broker)
    zombie.init_transactions()
    txn_producer(broker).init_transactions()
    zombie.begin_transaction()
    zombie.commit_transaction()
    assert transport.kinds() == ["FindCoordinator", "InitProducerId"]
    assert zombie.transaction_state is TransactionManagerState.READY


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator_which_fences_the_producer():
    """Kafka's TransactionCoordinator.abortTimedOutTransactions: the coordinator raises the epoch and aborts; at
    transaction version 0 the producer then learns it is fenced (Kafka: INVALID_PRODUCER_EPOCH makes it abortable,
    its abort's EndTxn PRODUCER_FENCED)."""
    now = [1_700_000_000_000]
    broker = Broker({TOPIC: 1}, clock=lambda: now[0])
    producer = txn_producer(broker, transaction_timeout_ms=1_000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"slow")
    producer.flush()
    now[0] += 1_001
    broker.run_housekeeping()
    assert controls(broker, 0) == [(1, ControlType.ABORT, 1)]
    producer.send(TOPIC, b"later")
    with pytest.raises(ProducerFencedError):
        producer.commit_transaction()
    assert read_committed(broker, 0) == []


# ---------------------------------------------------------------- abortable errors


def test_commit_after_a_failed_send_raises_and_abort_recovers_with_a_new_epoch():
    """Kafka's testDisallowCommitOnProduceFailure / testAllowAbortOnProduceFailure /
    testBumpTransactionalEpochOnAbortableError over a broker refusing a record too large for it."""
    broker = Broker({TOPIC: 2}, message_max_bytes=200)
    producer, transport = faulty(broker)
    producer.init_transactions()
    pid, epoch = producer.transactions.producer_id_and_epoch
    producer.begin_transaction()
    good = producer.send(TOPIC, b"good", partition=0)
    producer.flush()
    bad = producer.send(TOPIC, b"x" * 500, partition=1)
    producer.flush()
    assert bad.exception().error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert producer.transaction_state is TransactionManagerState.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError, match=r"a batch of the transaction failed with MESSAGE_TOO_LARGE: "
                                                        r".* larger than message_max_bytes=200"):
        producer.commit_transaction()
    for call in (lambda: producer.send(TOPIC, b"more"), producer.begin_transaction,
                 lambda: producer.send_offsets_to_transaction({(TOPIC, 0): 1}, "g")):
        with pytest.raises(TransactionAbortableError):
            call()
    assert good.result().offset == 0
    before = len(transport.sent)
    producer.abort_transaction()
    assert transport.kinds()[before:] == ["EndTxn", "InitProducerId"]  # the abort, then the epoch bump
    bump = transport.sent[-1]
    assert (bump.producer_id, bump.producer_epoch) == (pid, epoch)  # KIP-360: the current id and epoch
    assert producer.transactions.producer_id_and_epoch == (pid, epoch + 1)
    assert controls(broker, 0) == [(1, ControlType.ABORT, epoch)]
    producer.begin_transaction()
    for i in range(3):
        producer.send(TOPIC, b"after%d" % i, partition=i % 2)
    producer.commit_transaction()
    assert read_committed(broker, 0) == [b"after0", b"after2"]
    assert read_committed(broker, 1) == [b"after1"]
    # Sequences restarted at 0 under the new epoch on both partitions.
    new_epoch = [(s.batch.producer_epoch, s.batch.base_sequence) for p in range(2)
                 for s in broker.log(TOPIC, p).batches if s.control is None and s.batch.producer_epoch == epoch + 1]
    assert new_epoch == [(epoch + 1, 0), (epoch + 1, 0)]


def test_a_failure_during_commit_fails_the_commit_and_abort_works():
    broker = Broker({TOPIC: 1}, message_max_bytes=200)
    producer = txn_producer(broker)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"x" * 500)
    with pytest.raises(TransactionAbortableError):
        producer.commit_transaction()  # the batch fails while committing: EndTxn(commit) is never sent
    assert controls(broker, 0) == []
    producer.abort_transaction()
    assert producer.transaction_state is TransactionManagerState.READY
    producer.begin_transaction()
    producer.send(TOPIC, b"ok")
    producer.commit_transaction()
    assert read_committed(broker, 0) == [b"ok"]


def test_an_expired_batch_makes_the_transaction_abortable():
    """Kafka's testTransitionToAbortableErrorOnBatchExpiry: AddPartitionsToTxn keeps failing retriably."""
    broker = Broker({TOPIC: 1})
    loading = Fault(AddPartitionsToTxnRequest, "error", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, times=10_000)
    producer, transport = faulty(broker, loading, linger_ms=0, delivery_timeout_ms=300, max_block_ms=1_000)
    producer.init_transactions()
    producer.begin_transaction()
    future = producer.send(TOPIC, b"late")
    with pytest.raises(TransactionAbortableError, match="delivery timeout of 300 ms expired"):
        producer.commit_transaction()
    assert future.exception().error_code == ErrorCode.REQUEST_TIMED_OUT
    transport.faults.clear()
    producer.abort_transaction()
    assert producer.transaction_state is TransactionManagerState.READY


# ---------------------------------------------------------------- calls out of order


def _ready(producer: Producer) -> None:
    producer.init_transactions()


def _in_transaction(producer: Producer) -> None:
    producer.init_transactions()
    producer.begin_transaction()


@pytest.mark.parametrize(("setup", "call", "message"), [
    (None, lambda p: p.begin_transaction(), "invalid transition from UNINITIALIZED to IN_TRANSACTION"),
    (None, lambda p: p.send(TOPIC, b"v"), r"cannot send before init_transactions\(\) has completed"),
    (None, lambda p: p.commit_transaction(), "invalid transition from UNINITIALIZED to COMMITTING_TRANSACTION"),
    (None, lambda p: p.abort_transaction(), "invalid transition from UNINITIALIZED to ABORTING_TRANSACTION"),
    (_ready, lambda p: p.init_transactions(), "invalid transition from READY to INITIALIZING"),
    (_ready, lambda p: p.send(TOPIC, b"v"), r"cannot send in state READY: call begin_transaction\(\) first"),
    (_ready, lambda p: p.send_batch(TOPIC, [b"v"]), "cannot send in state READY"),
    (_ready, lambda p: p.commit_transaction(), "invalid transition from READY to COMMITTING_TRANSACTION"),
    (_ready, lambda p: p.abort_transaction(), "invalid transition from READY to ABORTING_TRANSACTION"),
    (_ready, lambda p: p.send_offsets_to_transaction({(TOPIC, 0): 3}, "g"),
     "cannot send offsets to a transaction in state READY"),
    (_in_transaction, lambda p: p.begin_transaction(), "invalid transition from IN_TRANSACTION to IN_TRANSACTION"),
    (_in_transaction, lambda p: p.init_transactions(), "invalid transition from IN_TRANSACTION to INITIALIZING"),
])
def test_calls_out_of_order_raise_and_change_nothing(setup, call, message):
    """Kafka's testInitializeTransactionsTwiceRaisesError, testNotReadyForSendBeforeInitTransactions,
    testNotReadyForSendBeforeBeginTransaction, testFailIfNotReadyForSendNoOngoingTransaction and
    testForegroundInvalidStateTransitionIsRecoverable."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker)
    if setup is not None:
        setup(producer)
    state, sent = producer.transaction_state, len(transport.sent)
    with pytest.raises(TransactionStateError, match=message):
        call(producer)
    assert producer.transaction_state is state  # Kafka: a wrong call from the application is recoverable
    assert len(transport.sent) == sent and broker.log(TOPIC, 0).log_end_offset == 0
    if state is TransactionManagerState.IN_TRANSACTION:
        producer.send(TOPIC, b"fine")
        producer.commit_transaction()
        assert read_committed(broker, 0) == [b"fine"]


def test_a_closed_transactional_producer_refuses_everything():
    producer = txn_producer(Broker({TOPIC: 1}))
    producer.init_transactions()
    producer.close()
    with pytest.raises(Exception, match="closed producer"):
        producer.begin_transaction()


def test_close_aborts_an_open_transaction():
    broker = Broker({TOPIC: 1})
    producer = txn_producer(broker)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"open")
    producer.close()  # flushes, then aborts what is open (Kafka's sender at close)
    assert controls(broker, 0) == [(1, ControlType.ABORT, 0)]
    assert read_committed(broker, 0) == []


def test_offsets_are_checked_before_anything_is_sent():
    producer = txn_producer(Broker({TOPIC: 1}))
    _in_transaction(producer)
    with pytest.raises(ValueError, match="group_id must be a non-empty string"):
        producer.send_offsets_to_transaction({(TOPIC, 0): 1}, "")
    with pytest.raises(TypeError, match="is not a \\(topic, partition\\) pair"):
        producer.send_offsets_to_transaction({TOPIC: 1}, "g")  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="the offset of \\('t', 0\\) is negative \\(-1\\)"):
        producer.send_offsets_to_transaction({(TOPIC, 0): -1}, "g")
    producer.send_offsets_to_transaction({}, "g")  # nothing to send: no request (Kafka)
    assert producer.transaction_state is TransactionManagerState.IN_TRANSACTION


# ---------------------------------------------------------------- lost and refused answers


def _commit_two_partitions(producer: Producer) -> None:
    producer.begin_transaction()
    producer.send(TOPIC, b"a", partition=0)
    producer.send(TOPIC, b"b", partition=1)
    producer.commit_transaction()


@pytest.mark.parametrize("kind", [FindCoordinatorRequest, InitProducerIdRequest, AddPartitionsToTxnRequest,
                                  ProduceRequest, EndTxnRequest])
def test_a_lost_answer_is_retried_and_the_transaction_commits_exactly_once(kind):
    """Kafka's testDisconnectAndRetry / testLookupCoordinatorOnDisconnectAfterSend, with a real coordinator behind:
    the broker handled the request but its answer never came: after request_timeout_ms the connection is
    dropped and the request sent again (after finding the coordinator again). The coordinator answers the
    retries as Kafka's does: AddPartitionsToTxn adds nothing twice, EndTxn finds the transaction CompleteCommit
    and answers NONE, the produce retry is a duplicate the broker recognises."""
    broker = Broker({TOPIC: 2})
    producer, transport = faulty(broker, Fault(kind, "drop"))
    producer.init_transactions()
    _commit_two_partitions(producer)
    assert transport.disconnects == 1
    assert producer.sender.stats.request_timeouts == 1
    for partition, value in ((0, b"a"), (1, b"b")):
        assert all_values(broker, partition) == [value]  # written once
        assert read_committed(broker, partition) == [value]
        assert [c[1] for c in controls(broker, partition)] == [ControlType.COMMIT]  # one marker
    kinds = transport.kinds()
    name = kind.__name__.removesuffix("Request").removesuffix("ToTxn")
    assert kinds.count(name) == 2  # lost, then sent again
    if name not in ("Produce", "FindCoordinator"):  # a lost coordinator request is preceded by a fresh lookup
        again = len(kinds) - 1 - kinds[::-1].index(name)
        assert kinds[again - 1] == "FindCoordinator"
    producer.begin_transaction()  # and the producer goes on
    producer.send(TOPIC, b"c", partition=0)
    producer.commit_transaction()
    assert read_committed(broker, 0) == [b"a", b"c"]


def test_a_lost_abort_answer_is_retried_and_aborts_once():
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(EndTxnRequest, "drop"))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"a")
    producer.flush()
    producer.abort_transaction()
    assert transport.kinds()[-3:] == ["EndTxn", "FindCoordinator", "EndTxn"]
    assert controls(broker, 0) == [(1, ControlType.ABORT, 0)]
    assert producer.transaction_state is TransactionManagerState.READY


def test_the_retried_end_txn_after_a_lost_answer_is_answered_by_the_completed_transaction():
    """The coordinator's side of a lost EndTxn answer, as the client relies on it: the same outcome again is
    NONE (never a second commit), the opposite outcome INVALID_TXN_STATE (fatal: the client never sends it)."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(EndTxnRequest, "drop"))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"a")
    producer.commit_transaction()
    first, retry = [r for r in transport.sent if isinstance(r, EndTxnRequest)]
    assert (first.producer_id, first.producer_epoch, first.committed) == \
        (retry.producer_id, retry.producer_epoch, retry.committed)
    opposite = EndTxnRequest("tx", first.producer_id, first.producer_epoch, False, 999)
    assert broker.handle(opposite).error_code == ErrorCode.INVALID_TXN_STATE
    assert broker.handle(retry).error_code == ErrorCode.NONE
    assert len(controls(broker, 0)) == 1


@pytest.mark.parametrize(("kind", "code"), [
    (FindCoordinatorRequest, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (InitProducerIdRequest, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
    (InitProducerIdRequest, ErrorCode.CONCURRENT_TRANSACTIONS),
    (InitProducerIdRequest, ErrorCode.NOT_COORDINATOR),
    (AddPartitionsToTxnRequest, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (AddPartitionsToTxnRequest, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (AddPartitionsToTxnRequest, ErrorCode.CONCURRENT_TRANSACTIONS),
    (EndTxnRequest, ErrorCode.CONCURRENT_TRANSACTIONS),
    (EndTxnRequest, ErrorCode.NOT_COORDINATOR),
    (EndTxnRequest, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
    (ProduceRequest, ErrorCode.NOT_LEADER_OR_FOLLOWER),
])
def test_retriable_coordinator_errors_are_retried(kind, code):
    """Kafka's testRetriableErrors / testCoordinatorNotAvailable / testLookupCoordinatorOnNotCoordinatorError /
    testHandlingOfUnknownTopicPartitionErrorOnAddPartitions: the request is sent again (NOT_COORDINATOR and
    COORDINATOR_NOT_AVAILABLE after a new FindCoordinator), after retry_backoff_ms."""
    broker = Broker({TOPIC: 2})
    producer, transport = faulty(broker, Fault(kind, "error", code, times=2), retry_backoff_ms=30)
    producer.init_transactions()
    _commit_two_partitions(producer)
    assert read_committed(broker, 0) == [b"a"] and read_committed(broker, 1) == [b"b"]
    kinds = transport.kinds()
    name = kind.__name__.removesuffix("Request").removesuffix("ToTxn")
    sent = [k for k, n in enumerate(kinds) if n == name]
    assert len(sent) == 3  # refused twice, then answered
    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE) and name != "FindCoordinator":
        assert kinds[sent[1] - 1] == kinds[sent[2] - 1] == "FindCoordinator"
    at = transport.sent_at
    # Retried after the backoff (a produce retry too: the accumulator's own backoff); the first AddPartitions of
    # a transaction refused with CONCURRENT_TRANSACTIONS waits 20 ms (Kafka).
    backoff = 20 if (name, code) == ("AddPartitions", ErrorCode.CONCURRENT_TRANSACTIONS) else 30
    assert backoff <= at[sent[1]] - at[sent[0]] <= backoff + 2
    assert transport.disconnects == 0


@pytest.mark.parametrize(("already_added", "backoff"), [(False, 20), (True, 100)])
def test_concurrent_transactions_on_the_first_add_partitions_retries_sooner(already_added, backoff):
    """Kafka's testAddPartitionToTransactionOverridesRetryBackoffForConcurrentTransactions and
    ...RetainsRetryBackoffWhenPartitionsAlreadyAdded: 20 ms while the previous transaction completes."""
    broker = Broker({TOPIC: 2})
    producer, transport = faulty(broker, retry_backoff_ms=100)
    producer.init_transactions()
    producer.begin_transaction()
    if already_added:
        producer.send(TOPIC, b"first", partition=0)
        producer.flush()
    transport.add(Fault(AddPartitionsToTxnRequest, "error", ErrorCode.CONCURRENT_TRANSACTIONS))
    producer.send(TOPIC, b"second", partition=1)
    producer.commit_transaction()
    sent = [k for k, r in enumerate(transport.sent) if isinstance(r, AddPartitionsToTxnRequest)][-2:]
    # The answer is read at the next round, a tick later.
    assert backoff <= transport.sent_at[sent[1]] - transport.sent_at[sent[0]] <= backoff + 2


@pytest.mark.parametrize(("kind", "code", "error"), [
    (InitProducerIdRequest, ErrorCode.PRODUCER_FENCED, ProducerFencedError),
    (InitProducerIdRequest, ErrorCode.INVALID_PRODUCER_EPOCH, ProducerFencedError),
    (InitProducerIdRequest, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TransactionFatalError),
    (InitProducerIdRequest, ErrorCode.INVALID_TRANSACTION_TIMEOUT, TransactionFatalError),
    (FindCoordinatorRequest, ErrorCode.INVALID_REQUEST, TransactionFatalError),
])
def test_init_transactions_fails_fatally(kind, code, error):
    """Kafka's testProducerFencedExceptionInInitProducerId, testInvalidProducerEpochConvertToProducerFenced
    InInitProducerId, testTransactionalIdAuthorizationFailureInInitProducerId."""
    producer, _ = faulty(Broker({TOPIC: 1}), Fault(kind, "error", code))
    with pytest.raises(error) as raised:
        producer.init_transactions()
    assert raised.value.error_code == code or error is ProducerFencedError
    assert producer.transaction_state is TransactionManagerState.FATAL_ERROR
    with pytest.raises(error):
        producer.begin_transaction()


@pytest.mark.parametrize(("kind", "code", "error"), [
    (AddPartitionsToTxnRequest, ErrorCode.INVALID_TXN_STATE, TransactionFatalError),
    (AddPartitionsToTxnRequest, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TransactionFatalError),
    (AddPartitionsToTxnRequest, ErrorCode.INVALID_PRODUCER_EPOCH, ProducerFencedError),
    (AddPartitionsToTxnRequest, ErrorCode.PRODUCER_FENCED, ProducerFencedError),
    (EndTxnRequest, ErrorCode.INVALID_PRODUCER_EPOCH, ProducerFencedError),
    (EndTxnRequest, ErrorCode.INVALID_TXN_STATE, TransactionFatalError),
    (ProduceRequest, ErrorCode.INVALID_PRODUCER_EPOCH, ProducerFencedError),
    (ProduceRequest, ErrorCode.PRODUCER_FENCED, ProducerFencedError),
])
def test_fatal_answers_fail_the_commit_and_every_later_call(kind, code, error):
    """Kafka's testInvalidTxnStateInAddPartitions, testInvalidProducerEpochConvertToProducerFencedInAddPartition
    ToTxn / ...InEndTxn, testProducerFencedInAddPartitionToTxn. INVALID_PRODUCER_EPOCH on a produce is fenced at
    once here (Kafka, KIP-588: abortable, then PRODUCER_FENCED at the abort's EndTxn)."""
    broker = Broker({TOPIC: 2})
    producer, transport = faulty(broker, Fault(kind, "error", code))
    producer.init_transactions()
    producer.begin_transaction()
    future = producer.send(TOPIC, b"a", partition=0)
    with pytest.raises(error):
        producer.commit_transaction()
    assert producer.transaction_state is TransactionManagerState.FATAL_ERROR
    if kind is not EndTxnRequest:
        assert future.exception() is not None and "EndTxn" not in transport.kinds()
    sent = len(transport.sent)
    for call in (producer.abort_transaction, producer.begin_transaction, lambda: producer.send(TOPIC, b"b")):
        with pytest.raises(error):
            call()
    producer.flush()
    assert len(transport.sent) == sent  # a fatal producer sends nothing more
    assert read_committed(broker, 0) == []


@pytest.mark.parametrize(("kind", "code", "bump"), [
    (AddPartitionsToTxnRequest, ErrorCode.TRANSACTION_ABORTABLE, False),
    (AddPartitionsToTxnRequest, ErrorCode.OPERATION_NOT_ATTEMPTED, False),
    (AddPartitionsToTxnRequest, ErrorCode.UNKNOWN_PRODUCER_ID, True),
    # The coordinator does not know the producer: the abort skips EndTxn (it would be refused) and only bumps.
    (AddPartitionsToTxnRequest, ErrorCode.INVALID_PRODUCER_ID_MAPPING, True),
    (EndTxnRequest, ErrorCode.TRANSACTION_ABORTABLE, False),
    (EndTxnRequest, ErrorCode.UNKNOWN_PRODUCER_ID, True),
    # Failed while committing: no epoch bump (Kafka's maybeTransitionToErrorState); see the test above for one.
    (ProduceRequest, ErrorCode.INVALID_RECORD, False),
])
def test_abortable_answers_fail_the_commit_and_abort_recovers(kind, code, bump):
    """Kafka's testTransactionAbortableExceptionInAddPartitions / ...InEndTxn,
    testBumpTransactionalEpochOnRecoverableAddPartitionRequestError, testRecoveryFromAbortableErrorTransaction
    NotStarted (the failed AddPartitionsToTxn leaves nothing to end: no EndTxn) and ...Started; with
    UNKNOWN_PRODUCER_ID or INVALID_PRODUCER_ID_MAPPING the abort asks for the next epoch (KIP-360)."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(kind, "error", code))
    producer.init_transactions()
    pid, epoch = producer.transactions.producer_id_and_epoch
    producer.begin_transaction()
    producer.send(TOPIC, b"a")
    with pytest.raises(TransactionAbortableError) as raised:
        producer.commit_transaction()
    assert raised.value.error_code == code
    assert producer.transaction_state is TransactionManagerState.ABORTABLE_ERROR
    before = len(transport.sent)
    producer.abort_transaction()
    started = kind is not AddPartitionsToTxnRequest
    expected = (["EndTxn"] if started else []) + (["InitProducerId"] if bump else [])
    assert transport.kinds()[before:] == expected
    assert producer.transactions.producer_id_and_epoch == (pid, epoch + bump)
    producer.begin_transaction()
    producer.send(TOPIC, b"b")
    producer.commit_transaction()
    assert read_committed(broker, 0) == [b"b"]


# ---------------------------------------------------------------- Kafka's TransactionManagerTest scenarios


def test_no_produce_until_add_partitions_is_answered_and_one_request_adds_every_new_partition():
    """testNoDrainWhenPartitionsPending, testMultipleAddPartitionsPerForOneProduce, testMaybeAddPartition
    ToTransaction: partitions of one round go in one AddPartitionsToTxn; nothing is drained before its answer."""
    broker = Broker({TOPIC: 4})
    producer, transport = faulty(broker, Fault(AddPartitionsToTxnRequest, "hold"))
    producer.init_transactions()
    producer.begin_transaction()
    for partition in range(3):
        producer.send(TOPIC, b"v%d" % partition, partition=partition)
    for _ in range(5):
        producer.poll()
    (add,) = [r for r in transport.sent if isinstance(r, AddPartitionsToTxnRequest)]
    assert add.partitions == ((TOPIC, 0), (TOPIC, 1), (TOPIC, 2))
    assert "Produce" not in transport.kinds()
    transport.release()
    producer.flush()
    (produce,) = [r for r in transport.sent if isinstance(r, ProduceRequest)]
    assert sorted(b.partition for b in produce.batches) == [0, 1, 2]
    assert all(b.is_transactional for b in produce.batches)
    producer.send(TOPIC, b"v3", partition=3)
    producer.send(TOPIC, b"again", partition=0)  # already in the transaction
    producer.commit_transaction()
    adds = [r.partitions for r in transport.sent if isinstance(r, AddPartitionsToTxnRequest)]
    assert adds == [((TOPIC, 0), (TOPIC, 1), (TOPIC, 2)), ((TOPIC, 3),)]
    assert transport.kinds()[-1] == "EndTxn"


def test_partitions_already_added_are_drained_while_a_new_one_waits_for_its_retry():
    """While AddPartitionsToTxn backs off before a retry, the drain kernel skips the partition not yet added
    (the accumulator shows it no head) and takes the others; Kafka's sender sleeps through the backoff and its
    drain stops the whole round at such a partition."""
    broker = Broker({TOPIC: 2})
    producer, transport = faulty(broker, retry_backoff_ms=100, linger_ms=0)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"a0", partition=0)
    producer.flush()
    transport.add(Fault(AddPartitionsToTxnRequest, "error", ErrorCode.CONCURRENT_TRANSACTIONS))
    producer.send(TOPIC, b"b0", partition=1)
    producer.send(TOPIC, b"a1", partition=0)
    for _ in range(4):
        producer.poll()  # no tick: the clock stands still, the retry waits
    produces = [r for r in transport.sent if isinstance(r, ProduceRequest)]
    assert [[(b.partition, b.values) for b in r.batches] for r in produces] == [[(0, (b"a0",))], [(0, (b"a1",))]]
    transport.release()
    producer.commit_transaction()
    assert read_committed(broker, 1) == [b"b0"]


def test_end_txn_waits_for_batches_in_flight_and_a_timed_out_commit_must_be_retried():
    """testEndTxnNotSentIfIncompleteBatches, testCommitTransactionWithInFlightProduceRequest,
    testRetryCommitTransactionAfterTimeout, testRetryAbortTransactionAfterCommitTimeout."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(ProduceRequest, "hold"), max_block_ms=20)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"a")
    with pytest.raises(TransactionTimeoutError, match=r"commit_transaction\(\) did not complete within "
                                                      "max_block_ms=20"):
        producer.commit_transaction()
    assert "EndTxn" not in transport.kinds()  # the batch is still in flight
    assert producer.transaction_state is TransactionManagerState.COMMITTING_TRANSACTION
    for call in (producer.abort_transaction, producer.begin_transaction, lambda: producer.send(TOPIC, b"b")):
        with pytest.raises(TransactionStateError, match="the previous call to commit_transaction timed out"):
            call()
    transport.release()
    producer.commit_transaction()  # the same commit, going on
    assert transport.kinds()[-2:] == ["Produce", "EndTxn"] or transport.kinds()[-1] == "EndTxn"
    assert transport.kinds().count("EndTxn") == 1
    assert read_committed(broker, 0) == [b"a"]
    producer.begin_transaction()  # acknowledged: other calls are allowed again


def test_a_timed_out_init_transactions_is_called_again():
    """testRetryInitTransactionsAfterTimeout."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(InitProducerIdRequest, "hold"), max_block_ms=10)
    with pytest.raises(TransactionTimeoutError):
        producer.init_transactions()
    with pytest.raises(TransactionStateError, match="previous call to init_transactions timed out"):
        producer.begin_transaction()
    transport.release()
    producer.init_transactions()
    assert transport.kinds().count("InitProducerId") == 1
    assert producer.transaction_state is TransactionManagerState.READY


def test_a_timed_out_abort_is_called_again():
    """testRetryAbortTransactionAfterTimeout."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, max_block_ms=10)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"a")
    producer.flush()
    transport.add(Fault(EndTxnRequest, "hold"))
    with pytest.raises(TransactionTimeoutError):
        producer.abort_transaction()
    with pytest.raises(TransactionStateError, match="previous call to abort_transaction timed out"):
        producer.commit_transaction()
    transport.release()
    producer.abort_transaction()
    assert controls(broker, 0) == [(1, ControlType.ABORT, 0)]


def test_abort_resends_a_batch_in_retry_until_its_outcome_is_known():
    """testAbortResendsProduceRequestIfRetried: a batch already sent is not dropped at the abort (the broker
    may have it): it is sent again, then EndTxn(abort) goes out."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(ProduceRequest, "error", ErrorCode.NOT_LEADER_OR_FOLLOWER),
                                 retry_backoff_ms=50, linger_ms=0)
    producer.init_transactions()
    producer.begin_transaction()
    future = producer.send(TOPIC, b"a")
    producer.poll()
    producer.poll()  # sent, refused, waiting out its backoff
    producer.abort_transaction()
    assert transport.kinds()[-3:] == ["Produce", "Produce", "EndTxn"]
    assert future.result().offset == 0  # written, then aborted
    assert controls(broker, 0) == [(1, ControlType.ABORT, 0)]


def test_unresolved_sequences_after_expiry_make_the_transaction_abortable_and_the_abort_bumps():
    """testBumpTransactionalEpochOnTimeout: a batch expired after it was sent (its answer lost, nothing acked
    since): its sequences are unresolved, so the transaction must abort and bump the epoch."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(ProduceRequest, "drop", times=100), linger_ms=0,
                                 request_timeout_ms=40, delivery_timeout_ms=100)
    producer.init_transactions()
    pid, epoch = producer.transactions.producer_id_and_epoch
    producer.begin_transaction()
    future = producer.send(TOPIC, b"a")
    with pytest.raises(TransactionAbortableError):
        producer.commit_transaction()
    assert future.exception().error_code == ErrorCode.REQUEST_TIMED_OUT
    transport.faults.clear()
    producer.abort_transaction()
    assert transport.kinds()[-2:] == ["EndTxn", "InitProducerId"]
    assert producer.transactions.producer_id_and_epoch == (pid, epoch + 1)
    producer.begin_transaction()
    producer.send(TOPIC, b"b")
    producer.commit_transaction()
    assert read_committed(broker, 0) == [b"b"]


# ---------------------------------------------------------------- offsets in the transaction


def committed_offset(broker: Broker, group: str, partition: int, require_stable: bool = False) -> tuple[int, int]:
    """``(offset, error code)`` the group coordinator answers for ``(TOPIC, partition)``."""
    answer = broker.handle(OffsetFetchRequest(group, ((TOPIC, partition),), require_stable=require_stable))
    (fetched,) = answer.offsets
    return fetched.offset, fetched.error_code


def test_offsets_sent_to_the_transaction_become_the_groups_only_at_commit():
    broker = Broker({TOPIC: 2})
    producer, transport = faulty(broker)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"out", partition=1)
    producer.send_offsets_to_transaction({(TOPIC, 0): 42}, "group")
    # (the record is sent meanwhile: a blocking call drives the sender as flush() does)
    assert [k for k in transport.kinds() if k not in ("Produce", "AddPartitions")][-3:] == \
        ["AddOffsets", "FindCoordinator", "TxnOffsetCommit"]
    lookup = next(r for r in reversed(transport.sent) if isinstance(r, FindCoordinatorRequest))
    assert (lookup.key, lookup.key_type) == ("group", 0)  # the group's coordinator
    assert committed_offset(broker, "group", 0) == (-1, ErrorCode.NONE)  # pending: not the group's yet
    assert committed_offset(broker, "group", 0, require_stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    producer.commit_transaction()
    assert committed_offset(broker, "group", 0) == (42, ErrorCode.NONE)
    assert read_committed(broker, 1) == [b"out"]

    producer.begin_transaction()
    producer.send_offsets_to_transaction({(TOPIC, 0): 50, (TOPIC, 1): 7}, "group")
    producer.abort_transaction()  # offsets only: the transaction still has the offsets partition to end
    assert transport.kinds()[-1] == "EndTxn"
    assert committed_offset(broker, "group", 0) == (42, ErrorCode.NONE)
    assert committed_offset(broker, "group", 1) == (-1, ErrorCode.NONE)


@pytest.mark.parametrize("kind", [AddOffsetsToTxnRequest, TxnOffsetCommitRequest])
def test_a_lost_offsets_answer_is_retried(kind):
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(kind, "drop"))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({(TOPIC, 0): 9}, "group")
    producer.commit_transaction()
    assert committed_offset(broker, "group", 0) == (9, ErrorCode.NONE)
    assert transport.disconnects == 1


@pytest.mark.parametrize(("kind", "code", "error"), [
    (AddOffsetsToTxnRequest, ErrorCode.CONCURRENT_TRANSACTIONS, None),
    (TxnOffsetCommitRequest, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None),
    (TxnOffsetCommitRequest, ErrorCode.NOT_COORDINATOR, None),
    (TxnOffsetCommitRequest, ErrorCode.REQUEST_TIMED_OUT, None),
    (AddOffsetsToTxnRequest, ErrorCode.PRODUCER_FENCED, ProducerFencedError),
    (AddOffsetsToTxnRequest, ErrorCode.INVALID_TXN_STATE, TransactionFatalError),
    (TxnOffsetCommitRequest, ErrorCode.INVALID_PRODUCER_EPOCH, ProducerFencedError),
    (TxnOffsetCommitRequest, ErrorCode.ILLEGAL_GENERATION, TransactionAbortableError),
    (TxnOffsetCommitRequest, ErrorCode.UNKNOWN_MEMBER_ID, TransactionAbortableError),
    (AddOffsetsToTxnRequest, ErrorCode.UNKNOWN_PRODUCER_ID, TransactionAbortableError),
])
def test_offsets_answers(kind, code, error):
    """Kafka's testHandlingOf...OnTxnOffsetCommit (unknown topic, coordinator loading, network, fenced, epoch),
    testUnknownMemberIdInTxnOffsetCommitByGroupMetadata / testIllegalGenerationInTxnOffsetCommitByGroupMetadata,
    testProducerFencedInAddOffSetsToTxn, testInvalidTxnStateFailureInAddOffsetsToTxn."""
    broker = Broker({TOPIC: 1})
    producer, _ = faulty(broker, Fault(kind, "error", code))
    producer.init_transactions()
    producer.begin_transaction()
    if error is None:
        producer.send_offsets_to_transaction({(TOPIC, 0): 9}, "group")
        producer.commit_transaction()
        assert committed_offset(broker, "group", 0) == (9, ErrorCode.NONE)
        return
    with pytest.raises(error):
        producer.send_offsets_to_transaction({(TOPIC, 0): 9}, "group")
    if error is TransactionAbortableError:
        producer.abort_transaction()
        assert producer.transaction_state is TransactionManagerState.READY
    else:
        assert producer.transaction_state is TransactionManagerState.FATAL_ERROR
    assert committed_offset(broker, "group", 0) == (-1, ErrorCode.NONE)


# ---------------------------------------------------------------- the state machine against a model


class PoisonTransport(FaultyTransport):
    """Refuses batches holding b"poison" with INVALID_RECORD without writing them (the rest of the request is
    written), as long as the batch carries the producer's current epoch: a batch of a fenced epoch goes to the
    broker, which refuses it for its epoch (so "fenced" always wins, as the model expects)."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.current_epoch = -1  # a successor's epoch, once one fenced the producer
        #: The producer's own epoch now (an abort after an abortable error bumps it, KIP-360).
        self.own_epoch: Callable[[], int] = lambda: -1

    def send(self, client: str, request: Any) -> None:
        current = max(self.current_epoch, self.own_epoch())
        if not isinstance(request, ProduceRequest) or not any(
                b"poison" in b.values and b.producer_epoch == current for b in request.batches):
            super().send(client, request)
            return
        self.sent.append(request)
        self.sent_at.append(self.now)
        keep = tuple(b for b in request.batches if not (b"poison" in b.values and b.producer_epoch == current))
        written = {} if not keep else {(a.topic, a.partition): a for a in self.broker.handle(
            ProduceRequest(keep, request.acks, request.timeout_ms, request.request_id)).responses}
        answers = tuple(written.get((b.topic, b.partition), PartitionResponse(b.topic, b.partition,
                                                                              ErrorCode.INVALID_RECORD))
                        for b in request.batches)
        self.inbox.append((request, ProduceResponse(request.request_id, answers)))


S = TransactionManagerState


@dataclass
class Model:
    """What the client's state machine must do, call by call (Kafka's TransactionManager)."""

    state: TransactionManagerState = S.UNINITIALIZED
    fenced: bool = False  # a newer instance initialised since ours did
    queued: list[tuple[int, bytes]] = field(default_factory=list)  # sent to the producer, not yet to the broker
    written: list[tuple[int, bytes]] = field(default_factory=list)  # reached the broker in this transaction
    committed: dict[int, list[bytes]] = field(default_factory=dict)

    def error_for_call(self) -> type[Exception] | None:
        """Every call of an errored producer raises its error first."""
        if self.state is S.FATAL_ERROR:
            return ProducerFencedError
        if self.state is S.ABORTABLE_ERROR:
            return TransactionAbortableError
        return None

    def _requests(self) -> type[Exception] | None:
        """Something goes to the broker: a fenced producer learns it now."""
        if self.fenced:
            self.state = S.FATAL_ERROR
            self.queued.clear()
            return ProducerFencedError
        return None

    def init(self) -> type[Exception] | None:
        if (error := self.error_for_call()) is not None:
            return error
        if self.state is not S.UNINITIALIZED:
            return TransactionStateError
        self.state = S.READY
        self.fenced = False
        return None

    def begin(self) -> type[Exception] | None:
        if (error := self.error_for_call()) is not None:
            return error
        if self.state is not S.READY:
            return TransactionStateError
        self.state = S.IN_TRANSACTION
        return None

    def send(self, partition: int, value: bytes) -> type[Exception] | None:
        if (error := self.error_for_call()) is not None:
            return error
        if self.state is not S.IN_TRANSACTION:
            return TransactionStateError
        self.queued.append((partition, value))
        return None

    def flush(self) -> None:
        if self.state is S.FATAL_ERROR or not self.queued:
            return
        if self._requests() is not None:
            return
        self.written += self.queued
        poisoned = any(value == b"poison" for _, value in self.queued)
        self.queued.clear()
        if poisoned:
            self.state = S.ABORTABLE_ERROR

    def commit(self) -> type[Exception] | None:
        if (error := self.error_for_call()) is not None:
            return error
        if self.state is not S.IN_TRANSACTION:
            return TransactionStateError
        if self.queued or self.written:
            if self._requests() is not None:
                return ProducerFencedError
            records = self.written + self.queued
            self.queued.clear()
            if any(value == b"poison" for _, value in records):
                self.written = records
                self.state = S.ABORTABLE_ERROR
                return TransactionAbortableError
            for partition, value in records:
                self.committed.setdefault(partition, []).append(value)
        self.written = []
        self.state = S.READY
        return None

    def abort(self) -> type[Exception] | None:
        if self.state is S.FATAL_ERROR:
            return ProducerFencedError
        if self.state not in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
            return TransactionStateError
        self.queued.clear()  # never sent: failed on the client
        if self.written and self._requests() is not None:  # EndTxn (and maybe the epoch bump) goes out
            return ProducerFencedError
        self.written = []
        self.state = S.READY
        return None


#: Calls weighted towards whole transactions (a uniform mix rarely gets past init and begin); most sequences
#: start with init_transactions, some do not. A send is poisoned one time in eight.
ACTIONS = st.tuples(st.booleans(), st.lists(st.one_of(
    st.sampled_from([("begin",)] * 3 + [("commit",)] * 3 + [("abort",)] * 2 + [("flush",)] * 2 + [("init",),
                                                                                                   ("fence",)]),
    st.tuples(st.just("send"), st.integers(0, 2), st.integers(0, 7).map(lambda n: n == 0)),
    st.tuples(st.just("send"), st.integers(0, 2), st.just(False)),
), max_size=30)).map(lambda drawn: ([("init",)] if drawn[0] else []) + drawn[1])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=ACTIONS)
def test_random_call_sequences_follow_the_model(actions):
    broker = Broker({TOPIC: 3})
    transport = PoisonTransport(broker)
    producer = txn_producer(broker, transport=transport, request_timeout_ms=50, delivery_timeout_ms=5_000,
                            max_block_ms=10_000)
    transport.own_epoch = lambda: producer.transactions.producer_id_and_epoch[1]
    model = Model()
    successors: list[Producer] = []
    number = 0
    calls: dict[str, Callable[[], Any]] = {"init": producer.init_transactions, "begin": producer.begin_transaction,
                                           "commit": producer.commit_transaction,
                                           "abort": producer.abort_transaction}
    for action in actions:
        name = action[0]
        if name == "fence":
            if model.state is not S.UNINITIALIZED:  # before our init there is nobody to fence
                successor = txn_producer(broker)
                successor.init_transactions()  # aborts our open transaction at the coordinator, if any
                successors.append(successor)
                transport.current_epoch = successor.transactions.producer_id_and_epoch[1]
                model.fenced = model.state is not S.FATAL_ERROR or model.fenced
            continue
        if name == "flush":
            producer.flush()
            model.flush()
        else:
            if name == "send":
                number += 1
                value = b"poison" if action[2] else b"%d" % number
                expected = model.send(action[1], value)
                call: Callable[[], Any] = partial(producer.send, TOPIC, value, partition=action[1])
            else:
                expected = getattr(model, name)()
                call = calls[name]
            try:
                call()
                raised = None
            except Exception as exc:  # the exception's class is what is compared
                raised = type(exc)
            assert raised is expected, (action, producer.transaction_state)
        assert producer.transaction_state is model.state, action
    for partition in range(3):
        assert read_committed(broker, partition) == model.committed.get(partition, [])
    assert broker.txn_coordinator.describe_transactions(["tx"])[0].state != "Ongoing" or \
        model.state in (S.IN_TRANSACTION, S.ABORTABLE_ERROR) or model.fenced or successors


def test_sequences_found_unresolved_while_aborting_still_get_their_epoch_bump():
    """A batch sent before the abort expires during it (its answers lost): the bump it needs was not known when
    the abort began, so it follows the abort's EndTxn, and abort_transaction() returns once it is done."""
    broker = Broker({TOPIC: 1})
    producer, transport = faulty(broker, Fault(ProduceRequest, "drop", times=100), linger_ms=0,
                                 request_timeout_ms=40, delivery_timeout_ms=100)
    producer.init_transactions()
    pid, epoch = producer.transactions.producer_id_and_epoch
    producer.begin_transaction()
    future = producer.send(TOPIC, b"a")
    producer.poll()
    producer.poll()  # AddPartitionsToTxn answered, the batch sent: its answer will be lost
    producer.abort_transaction()
    assert future.exception().error_code == ErrorCode.REQUEST_TIMED_OUT
    assert transport.kinds()[-2:] == ["EndTxn", "InitProducerId"]
    assert producer.transaction_state is TransactionManagerState.READY
    assert producer.transactions.producer_id_and_epoch == (pid, epoch + 1)
    transport.faults.clear()
    producer.begin_transaction()
    producer.send(TOPIC, b"b")
    producer.commit_transaction()
    assert read_committed(broker, 0) == [b"b"]


def test_a_transaction_with_a_broker_in_process_never_waits_on_the_transport():
    """Every answer is there at once in process: the producer lets time pass (transport.tick, a 1 ms sleep)
    only when a round moved nothing, so FindCoordinator, InitProducerId, AddPartitionsToTxn, the batches and
    EndTxn run back to back."""
    from idemcore.net.transport import InProcessTransport

    class CountingTicks(InProcessTransport):
        ticks = 0

        def tick(self) -> None:
            CountingTicks.ticks += 1
            super().tick()

    broker = Broker({TOPIC: 3})
    producer = txn_producer(broker, transport=CountingTicks(broker))
    producer.init_transactions()
    producer.begin_transaction()
    for partition in range(3):
        producer.send(TOPIC, b"v", partition=partition)
    producer.commit_transaction()
    assert CountingTicks.ticks == 0
    assert all(stored.control is not None for p in range(3) for stored in broker.log(TOPIC, p).batches[-1:])
