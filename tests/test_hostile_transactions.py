"""A hostile user against the transactional producer, the read_committed consumer, group offsets, the broker's
transaction requests and ``idemcore simulate --transactional``: wrong types and values, calls out of order, reuse
after close, two instances of one transactional id, consumers reading across open/aborted/committed transactions,
huge and empty transactions, restarts between every pair of calls, SIGKILL mid-transaction, malformed requests
straight to ``Broker.handle``, odd simulation flags, and time passing under a fake clock.

Each test documents behaviour worth keeping; the bugs this pass found (named in the tests' docstrings and
asserts) are fixed, so every test here passes."""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import contextmanager

import pytest

from idemcore import Broker, Consumer, Producer
from idemcore.cli import main as cli_main
from idemcore.client import ConfigError, DeliveryError
from idemcore.client.consumer import ConsumerClosedError, ConsumerTimeoutError
from idemcore.client.producer import ProducerClosedError
from idemcore.client.transactions import (
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionManagerState,
    TransactionStateError,
    TransactionTimeoutError,
)
from idemcore.errors import IdemcoreError
from idemcore.net import messages as M
from idemcore.protocol.codes import ErrorCode
from idemcore.sim import Faults
from idemcore.sim.transactional import simulate_transactional

E = ErrorCode


# ---------------------------------------------------------------- helpers


def read_all(broker, topic: str, partitions, isolation: str = "read_committed", **settings) -> list[tuple]:
    """Everything a fresh consumer reads from the start: ``(partition, offset, value)`` in poll order."""
    consumer = Consumer(broker, isolation_level=isolation, **settings)
    consumer.assign([(topic, p) for p in partitions])
    out = []
    while True:
        records = consumer.poll(max_records=100_000)
        if not records:
            return out
        out += [(r.partition, r.offset, r.value) for r in records]


def values(rows) -> list[bytes]:
    return sorted(row[2] for row in rows)


def state_of(broker, transactional_id: str) -> str:
    return broker.txn_coordinator.describe_transactions([transactional_id])[0].state


class RestartingBroker:
    """A request handler over a broker on ``data_dir`` that ``restart()`` closes and opens again: clients built
    on it keep working across restarts, as a real client reconnects to a restarted broker."""

    def __init__(self, topics, data_dir, **settings) -> None:
        self.args = (topics, data_dir)
        self.settings = settings
        self.broker = Broker(topics, data_dir, **settings)

    @property
    def topics(self):
        return self.broker.topics

    def handle(self, request):
        return self.broker.handle(request)

    def restart(self) -> None:
        self.broker.close()
        self.broker = Broker(*self.args, **self.settings)


class _Deadline(BaseException):
    """Raised by the alarm: a BaseException, so no ``except Exception`` on the way swallows it."""


@contextmanager
def deadline(seconds: float):
    """Fail the block if it runs longer than ``seconds`` (a hang must not stall the suite)."""

    def ring(signum, frame):
        raise _Deadline(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def _quiet():
    """The broker logs every refused request; a hostile test makes thousands."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def producer(broker, transactional_id: str = "T", **settings) -> Producer:
    settings.setdefault("linger_ms", 0)
    settings.setdefault("max_block_ms", 2_000)
    return Producer(broker, transactional_id=transactional_id, **settings)


# ---------------------------------------------------------------- wrong types, wrong order, reuse after close


def test_wrong_argument_types_and_values_are_one_line_errors_naming_the_value():
    broker = Broker({"in": 2, "out": 2})
    with pytest.raises(ConfigError, match="got 5"):
        Producer(broker, transactional_id=5)
    with pytest.raises(ConfigError, match="got ''"):
        Producer(broker, transactional_id="")
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    cases: list[tuple[Callable[[], object], type, str]] = [
        (lambda: p.send_offsets_to_transaction({("in", 0): 1}, None), ValueError, "None"),
        (lambda: p.send_offsets_to_transaction({("in", 0): 1}, ""), ValueError, "''"),
        (lambda: p.send_offsets_to_transaction([("in", 0)], "g"), TypeError, "list"),
        (lambda: p.send_offsets_to_transaction({("in", "0"): 1}, "g"), TypeError, r"\('in', '0'\)"),
        (lambda: p.send_offsets_to_transaction({("in", 0): True}, "g"), TypeError, "bool"),
        (lambda: p.send_offsets_to_transaction({("in", 0): 1.0}, "g"), TypeError, "float"),
        (lambda: p.send_offsets_to_transaction({("in", 0): -1}, "g"), ValueError, "-1"),
        (lambda: p.send("out", b"x", partition=7), ValueError, "7"),
        (lambda: p.send("out", b"x", partition=True), TypeError, "bool"),
        (lambda: p.send("out", "text"), TypeError, "str"),
        (lambda: p.send("nope", b"x"), IdemcoreError, "'nope'"),
        (lambda: Consumer(broker, group_id=5), TypeError, "5"),
        (lambda: Consumer(broker, group_id=""), ValueError, "''"),
        (lambda: Consumer(broker, isolation_level="READ_COMMITTED"), ValueError, "READ_COMMITTED"),
        (lambda: Consumer(broker, isolation_level=None), ValueError, "None"),
        (lambda: Consumer(broker, max_poll_records=True), TypeError, "True"),
    ]
    for call, kind, named in cases:
        with pytest.raises(kind, match=named) as caught:
            call()
        assert "\n" not in str(caught.value)
    consumer = Consumer(broker, group_id="g")
    for call, kind, named in [
        (lambda: consumer.assign("out"), TypeError, "'out'"),
        (lambda: consumer.assign([("out", 9)]), ValueError, "out-9"),
        (lambda: consumer.assign([("out", -1)]), ValueError, "-1"),
        (lambda: consumer.seek("out", 0, 0), ValueError, "not assigned"),
        (lambda: consumer.poll(max_records=0), ValueError, "0"),
        (lambda: consumer.poll(timeout_ms=1.5), TypeError, "1.5"),
        (lambda: consumer.commit({("in", 0): -1}), ValueError, "-1"),
        (lambda: consumer.commit({("in", 0): True}), TypeError, "True"),
        (lambda: consumer.committed([("in", 0)], require_stable="yes"), TypeError, "'yes'"),
    ]:
        with pytest.raises(kind, match=named):
            call()
    with pytest.raises(IdemcoreError, match="needs a group_id"):
        Consumer(broker).commit({("in", 0): 1})
    too_long = producer(broker, "long", transaction_timeout_ms=900_001)  # above transaction.max.timeout.ms
    with pytest.raises(TransactionFatalError, match="INVALID_TRANSACTION_TIMEOUT"):
        too_long.init_transactions()
    # None of it touched the transaction: it still commits.
    assert p.transaction_state is TransactionManagerState.IN_TRANSACTION
    p.send("out", b"ok", partition=0)
    p.commit_transaction()
    assert values(read_all(broker, "out", [0, 1])) == [b"ok"]


def test_calls_out_of_order_raise_state_errors_and_change_nothing():
    broker = Broker({"t": 2})
    p = producer(broker)
    for call in (p.begin_transaction, p.commit_transaction, p.abort_transaction,
                 lambda: p.send("t", b"x"), lambda: p.send_offsets_to_transaction({("t", 0): 1}, "g")):
        with pytest.raises(TransactionStateError):
            call()
    assert p.transaction_state is TransactionManagerState.UNINITIALIZED
    p.init_transactions()
    for call in (p.init_transactions, p.commit_transaction, p.abort_transaction, lambda: p.send("t", b"x"),
                 lambda: p.send_offsets_to_transaction({("t", 0): 1}, "g")):
        with pytest.raises(TransactionStateError):
            call()
    assert p.transaction_state is TransactionManagerState.READY
    p.begin_transaction()
    for call in (p.begin_transaction, p.init_transactions):
        with pytest.raises(TransactionStateError):
            call()
    assert p.transaction_state is TransactionManagerState.IN_TRANSACTION
    p.send("t", b"a", partition=0)
    p.commit_transaction()
    with pytest.raises(TransactionStateError):
        p.commit_transaction()  # twice
    plain = Producer(broker, linger_ms=0)
    for call in (plain.init_transactions, plain.begin_transaction, plain.commit_transaction):
        with pytest.raises(TransactionStateError, match="transactional_id"):
            call()
    assert values(read_all(broker, "t", [0, 1])) == [b"a"]


def test_empty_transactions_write_nothing():
    broker = Broker({"t": 1, "in": 1})
    p = producer(broker)
    p.init_transactions()
    ends = [(log.topic, log.partition, log.log_end_offset) for log in broker.logs()]
    for n in range(300):
        p.begin_transaction()
        p.send_offsets_to_transaction({}, "g")  # no offsets: no request
        (p.commit_transaction if n % 2 else p.abort_transaction)()
    assert state_of(broker, "T") == "Empty"
    assert [(log.topic, log.partition, log.log_end_offset) for log in broker.logs()] == ends


def test_reuse_after_close_raises_and_close_aborts_the_open_transaction():
    broker = Broker({"t": 2})
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"never", partition=0).result()
    p.close()
    p.close()  # twice is fine
    assert state_of(broker, "T") == "CompleteAbort"
    for call in (p.begin_transaction, p.commit_transaction, p.abort_transaction, p.init_transactions,
                 lambda: p.send("t", b"x"), lambda: p.send_offsets_to_transaction({("t", 0): 1}, "g")):
        with pytest.raises(ProducerClosedError):
            call()
    consumer = Consumer(broker, group_id="g")
    consumer.assign([("t", 0)])
    consumer.close()
    for call in (consumer.poll, lambda: consumer.position("t", 0), consumer.commit,
                 lambda: consumer.committed([("t", 0)])):
        with pytest.raises(ConsumerClosedError):
            call()
    assert read_all(broker, "t", [0, 1]) == []
    broker.close()
    with pytest.raises(IdemcoreError, match="closed"):
        broker.txn_coordinator  # noqa: B018
    with pytest.raises(IdemcoreError, match="closed"):
        broker.run_housekeeping()


# ---------------------------------------------------------------- two instances of one transactional id


def test_a_second_instance_fences_the_first_at_every_later_call():
    broker = Broker({"in": 2, "out": 4})
    p1 = producer(broker)
    p1.init_transactions()
    p1.begin_transaction()
    p1.send("out", b"p1-a", partition=0).result()
    p1.send_offsets_to_transaction({("in", 0): 1}, "G")
    p2 = producer(broker)
    p2.init_transactions()  # aborts p1's transaction
    p1.send("out", b"p1-b", partition=1)  # the client does not know yet (as Kafka's)
    for call in (p1.commit_transaction, p1.abort_transaction, p1.begin_transaction, p1.init_transactions,
                 lambda: p1.send_offsets_to_transaction({("in", 0): 1}, "G")):
        with pytest.raises(ProducerFencedError):
            call()
    assert p1.transaction_state is TransactionManagerState.FATAL_ERROR
    p1.close()
    p2.begin_transaction()
    p2.send("out", b"p2-a", partition=0)
    p2.send_offsets_to_transaction({("in", 0): 2}, "G")
    p2.commit_transaction()
    # p3 fences p2 while a record of p2 is queued, not yet sent.
    p2.begin_transaction()
    queued = p2.send("out", b"p2-b", partition=2)
    p3 = producer(broker)
    p3.init_transactions()
    with pytest.raises(ProducerFencedError):
        p2.commit_transaction()
    with pytest.raises(DeliveryError):
        queued.result()
    p3.begin_transaction()
    p3.send("out", b"p3-a", partition=3)
    p3.commit_transaction()
    assert values(read_all(broker, "out", range(4))) == [b"p2-a", b"p3-a"]
    assert b"p1-a" in values(read_all(broker, "out", range(4), "read_uncommitted"))
    assert Consumer(broker, group_id="G").committed([("in", 0)]) == {("in", 0): 2}


# ---------------------------------------------------------------- reading across transactions


@pytest.mark.parametrize("seed", range(6))
def test_read_committed_across_partitions_never_shows_open_or_aborted_records(seed):
    """Four transactional ids and an idempotent producer write to six partitions, committing and aborting at
    random; a read_committed consumer (fetch sizes from one batch to all) polls in between. It never sees a record
    not yet committed, and in the end sees every committed record once, in offset order per partition."""
    rng = random.Random(seed)
    partitions = 6
    broker = Broker({"t": partitions})
    producers = [producer(broker, f"x{i}") for i in range(4)]
    for p in producers:
        p.init_transactions()
    plain = Producer(broker, linger_ms=0)
    open_ = [False] * 4
    pending: list[list[bytes]] = [[] for _ in range(4)]
    committed: list[bytes] = []
    consumer = Consumer(broker, isolation_level="read_committed",
                        max_partition_fetch_bytes=rng.choice([1, 120, 1_048_576]))
    consumer.assign([("t", p) for p in range(partitions)])
    seen = []
    for n in range(150):
        op, i = rng.random(), rng.randrange(4)
        if op < 0.5:
            if not open_[i]:
                producers[i].begin_transaction()
                open_[i] = True
            producers[i].send("t", b"v%d" % n, partition=rng.randrange(partitions)).result()
            pending[i].append(b"v%d" % n)
        elif op < 0.62 and open_[i]:
            producers[i].commit_transaction()
            committed += pending[i]
            open_[i], pending[i] = False, []
        elif op < 0.74 and open_[i]:
            producers[i].abort_transaction()
            open_[i], pending[i] = False, []
        elif op < 0.84:
            plain.send("t", b"v%d" % n, partition=rng.randrange(partitions)).result()
            committed.append(b"v%d" % n)
        else:
            seen += consumer.poll(max_records=rng.randrange(1, 50))
            assert {r.value for r in seen} <= set(committed)
    for i in range(4):
        if open_[i]:
            producers[i].abort_transaction()
    while records := consumer.poll(max_records=1000):
        seen += records
    assert sorted(r.value for r in seen) == sorted(committed)
    for p in range(partitions):
        offsets = [r.offset for r in seen if r.partition == p]
        assert offsets == sorted(set(offsets))


def test_an_open_transaction_holds_back_later_commits_and_seek_to_end_is_the_lso():
    broker = Broker({"t": 1})
    plain = Producer(broker, linger_ms=0)
    plain.send("t", b"a", partition=0).result()
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"open", partition=0).result()
    plain.send("t", b"b", partition=0).result()
    committed = Consumer(broker, isolation_level="read_committed")
    committed.assign([("t", 0)])
    committed.seek_to_end()
    assert committed.position("t", 0) == 1
    uncommitted = Consumer(broker, isolation_level="read_uncommitted")
    uncommitted.assign([("t", 0)])
    uncommitted.seek_to_end()
    assert uncommitted.position("t", 0) == 3
    committed.seek("t", 0, 2)
    assert committed.poll(timeout_ms=10) == []
    p.commit_transaction()
    assert [r.value for r in committed.poll(timeout_ms=10)] == [b"b"]
    assert values(read_all(broker, "t", [0])) == [b"a", b"b", b"open"]


def test_huge_transactions_commit_and_abort(tmp_path):
    topics = {"t": 4, "wide": 400}
    broker = Broker(topics, tmp_path, fsync=False, segment_bytes=20_000)
    p = producer(broker, batch_size=2_000, max_block_ms=20_000)
    p.init_transactions()
    p.begin_transaction()
    for i in range(20_000):
        p.send("t", b"big-%d" % i, partition=i % 4)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(400):
        p.send("wide", b"w", partition=i)
    p.commit_transaction()
    p.begin_transaction()
    p.send_batch("t", [b"aborted"] * 20_000)
    p.flush()
    assert len(broker.log("t", 0).segment_bases) > 3  # the transactions span many segments
    p.abort_transaction()
    expected = sorted(b"big-%d" % i for i in range(20_000))
    assert values(read_all(broker, "t", range(4), max_partition_fetch_bytes=3_000)) == expected
    assert len(read_all(broker, "wide", range(400))) == 400
    broker.close()
    broker = Broker(topics, tmp_path, fsync=False, segment_bytes=20_000)  # the aborted one stays aborted
    assert values(read_all(broker, "t", range(4))) == expected


def test_a_failed_batch_makes_the_transaction_abortable_then_the_next_commits():
    broker = Broker({"t": 2}, message_max_bytes=2_000)
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    small = p.send("t", b"ok", partition=0)
    with pytest.raises(DeliveryError, match="message_max_bytes"):
        p.send("t", b"x" * 5_000, partition=1).result()
    with pytest.raises(TransactionAbortableError, match="MESSAGE_TOO_LARGE"):
        p.commit_transaction()
    small.result()  # written, then aborted
    p.abort_transaction()
    p.begin_transaction()
    p.send("t", b"next", partition=0)
    p.commit_transaction()
    # Abort also fails the records not yet sent.
    q = producer(broker, "U", linger_ms=50_000)
    q.init_transactions()
    q.begin_transaction()
    unsent = q.send("t", b"unsent", partition=0)
    q.abort_transaction()
    with pytest.raises(DeliveryError, match="aborted"):
        unsent.result()
    assert values(read_all(broker, "t", [0, 1])) == [b"next"]


def test_offsets_for_a_partition_that_does_not_exist_time_out_and_the_timeout_abort_recovers():
    """Kafka's client retries TxnOffsetCommit's UNKNOWN_TOPIC_OR_PARTITION until max.block.ms: the call times
    out, and so does the abort (the commit request keeps going first). The coordinator's timeout ends it."""
    now = [1_000_000]
    broker = Broker({"in": 1}, clock=lambda: now[0])
    p = producer(broker, max_block_ms=200)
    p.init_transactions()
    p.begin_transaction()
    with pytest.raises(TransactionTimeoutError, match="max_block_ms=200"):
        p.send_offsets_to_transaction({("in", 7): 1}, "G")
    with pytest.raises(TransactionTimeoutError):
        p.abort_transaction()
    assert state_of(broker, "T") == "Ongoing"
    now[0] += 60_001
    broker.run_housekeeping()
    assert state_of(broker, "T") == "CompleteAbort"
    p.close()  # logs that it could not abort; does not raise
    fresh = producer(broker)
    fresh.init_transactions()
    fresh.begin_transaction()
    fresh.send_offsets_to_transaction({("in", 0): 1}, "G")
    fresh.commit_transaction()
    assert Consumer(broker, group_id="G").committed([("in", 0)]) == {("in", 0): 1}


def test_which_commit_wins_between_a_plain_and_a_transactional_one_live_and_after_restart(tmp_path):
    """Kafka's rule: at the COMMIT marker a transaction's offset replaces the committed one only if it was
    appended later; an aborted transaction's offset never counts."""
    topics = {"in": 4}
    broker = Broker(topics, tmp_path)
    p = producer(broker)
    p.init_transactions()
    c = Consumer(broker, group_id="G", default_api_timeout_ms=200)
    p.begin_transaction()
    p.send_offsets_to_transaction({("in", 0): 5}, "G")
    with pytest.raises(ConsumerTimeoutError, match="UNSTABLE_OFFSET_COMMIT"):
        c.committed([("in", 0)])  # require_stable: waits for the transaction
    c.commit({("in", 0): 7})
    p.commit_transaction()
    c.commit({("in", 1): 7})
    p.begin_transaction()
    p.send_offsets_to_transaction({("in", 1): 5}, "G")
    p.commit_transaction()
    c.commit({("in", 2): 7})
    p.begin_transaction()
    p.send_offsets_to_transaction({("in", 2): 5}, "G")
    p.abort_transaction()
    expected = {("in", 0): 7, ("in", 1): 5, ("in", 2): 7, ("in", 3): None}
    assert c.committed(list(expected)) == expected
    broker.close()
    broker = Broker(topics, tmp_path)
    assert Consumer(broker, group_id="G").committed(list(expected)) == expected


# ---------------------------------------------------------------- restarts and kills


def test_a_restart_between_every_pair_of_calls_keeps_the_transactions(tmp_path):
    topics = {"in": 2, "out": 3}
    px = RestartingBroker(topics, tmp_path)
    with Producer(px.broker, linger_ms=0) as seeder:
        for i in range(6):
            seeder.send("in", b"i%d" % i, partition=i % 2)
    p = producer(px, max_block_ms=5_000)
    steps = [
        p.init_transactions,
        p.begin_transaction,
        lambda: p.send("out", b"a", partition=0),
        p.flush,
        lambda: p.send_offsets_to_transaction({("in", 0): 3}, "G"),
        lambda: p.send("out", b"b", partition=1),  # queued across a restart
        p.commit_transaction,
        p.begin_transaction,
        lambda: p.send("out", b"c", partition=2).result(),
        lambda: p.send_offsets_to_transaction({("in", 1): 3}, "G"),
        p.abort_transaction,
        p.begin_transaction,
        lambda: p.send("out", b"d", partition=2).result(),
        p.commit_transaction,
    ]
    for step in steps:
        step()
        px.restart()
    assert values(read_all(px.broker, "out", range(3))) == [b"a", b"b", b"d"]
    assert values(read_all(px.broker, "out", range(3), "read_uncommitted")) == [b"a", b"b", b"c", b"d"]
    assert Consumer(px.broker, group_id="G").committed([("in", 0), ("in", 1)]) == {("in", 0): 3, ("in", 1): None}
    assert state_of(px.broker, "T") == "CompleteCommit"


def test_new_clients_after_each_restart_abort_what_the_old_ones_left_open(tmp_path):
    topics = {"in": 1, "out": 2}

    def reopen(broker):
        broker.close()
        return Broker(topics, tmp_path)

    broker = Broker(topics, tmp_path)
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"lost-1", partition=0).result()
    p.send_offsets_to_transaction({("in", 0): 10}, "G")
    broker = reopen(broker)
    assert state_of(broker, "T") == "Ongoing"
    assert read_all(broker, "out", [0, 1]) == []
    consumer = Consumer(broker, group_id="G", default_api_timeout_ms=200)
    with pytest.raises(ConsumerTimeoutError, match="UNSTABLE_OFFSET_COMMIT"):
        consumer.committed([("in", 0)])
    p = producer(broker)
    p.init_transactions()  # aborts the transaction the old instance left
    assert state_of(broker, "T") == "Empty"
    broker = reopen(broker)
    assert Consumer(broker, group_id="G").committed([("in", 0)]) == {("in", 0): None}
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"kept", partition=1).result()
    p.send_offsets_to_transaction({("in", 0): 20}, "G")
    p.commit_transaction()
    broker = reopen(broker)
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"lost-2", partition=1).result()
    broker = reopen(broker)
    assert values(read_all(broker, "out", [0, 1])) == [b"kept"]
    assert Consumer(broker, group_id="G").committed([("in", 0)]) == {("in", 0): 20}
    assert broker.log("out", 1).last_stable_offset == 2  # the open transaction's first offset
    producer(broker).init_transactions()
    assert values(read_all(broker, "out", [0, 1])) == [b"kept"]
    assert broker.log("out", 1).last_stable_offset == broker.log("out", 1).log_end_offset


_CHILD = textwrap.dedent("""
    import os, signal, sys
    from idemcore import Broker, Producer
    import idemcore.broker.log as log_module
    topics, data_dir, mode = eval(sys.argv[1]), sys.argv[2], sys.argv[3]
    broker = Broker(topics, data_dir)
    p = Producer(broker, transactional_id="T", linger_ms=0)
    p.init_transactions()
    p.begin_transaction()
    for i in range(3):
        p.send("out", b"x%d" % i, partition=i)
    p.flush()
    p.send_offsets_to_transaction({("in", 0): 3}, "G")
    if mode == "between-markers":
        append_marker = log_module.PartitionLog.append_marker
        written = []
        def append_then_die(self, *args, **kwargs):
            answer = append_marker(self, *args, **kwargs)
            written.append(self.name)
            if len(written) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return answer
        log_module.PartitionLog.append_marker = append_then_die
        p.commit_transaction()
    print("ready", flush=True)
    sys.stdin.read()
""")


def _run_and_kill(topics, data_dir, mode: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, repr(topics), str(data_dir), mode],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()


def test_sigkill_mid_transaction_leaves_it_open_until_the_next_instance_aborts_it(tmp_path):
    topics = {"in": 1, "out": 3}
    _run_and_kill(topics, tmp_path, "open")
    broker = Broker(topics, tmp_path)
    assert state_of(broker, "T") == "Ongoing"
    assert read_all(broker, "out", range(3)) == []
    assert values(read_all(broker, "out", range(3), "read_uncommitted")) == [b"x0", b"x1", b"x2"]
    consumer = Consumer(broker, group_id="G", default_api_timeout_ms=200)
    with pytest.raises(ConsumerTimeoutError, match="UNSTABLE_OFFSET_COMMIT"):
        consumer.committed([("in", 0)])
    producer(broker).init_transactions()
    assert state_of(broker, "T") == "Empty"
    assert read_all(broker, "out", range(3)) == []
    assert consumer.committed([("in", 0)]) == {("in", 0): None}
    assert all(broker.log("out", p).last_stable_offset == broker.log("out", p).log_end_offset for p in range(3))


def test_sigkill_between_commit_markers_finishes_the_commit_at_restart(tmp_path):
    topics = {"in": 1, "out": 3}
    _run_and_kill(topics, tmp_path, "between-markers")
    broker = Broker(topics, tmp_path)
    assert state_of(broker, "T") == "CompleteCommit"
    assert values(read_all(broker, "out", range(3))) == [b"x0", b"x1", b"x2"]
    assert Consumer(broker, group_id="G").committed([("in", 0)]) == {("in", 0): 3}


# ---------------------------------------------------------------- time


def test_the_transaction_timeout_aborts_an_idle_producer_counted_from_its_first_partition():
    now = [1_000_000]
    broker = Broker({"t": 3, "in": 1}, clock=lambda: now[0])
    p = producer(broker, transaction_timeout_ms=10_000)
    p.init_transactions()
    p.begin_transaction()
    now[0] += 50_000  # idle before the first send: no transaction at the coordinator yet
    broker.run_housekeeping()
    p.send("t", b"a", partition=0).result()
    now[0] += 6_000
    p.send("t", b"b", partition=1).result()  # a later partition does not restart the clock
    now[0] += 4_000
    broker.run_housekeeping()
    assert state_of(broker, "T") == "Ongoing"  # exactly the timeout: not yet (Kafka's strict <)
    now[0] += 1
    broker.run_housekeeping()
    assert state_of(broker, "T") == "CompleteAbort"
    assert read_all(broker, "t", range(3)) == []
    with pytest.raises(DeliveryError, match="PRODUCER_FENCED"):
        p.send("t", b"late", partition=2).result()
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    q = producer(broker, transaction_timeout_ms=10_000)
    q.init_transactions()
    q.begin_transaction()
    q.send_offsets_to_transaction({("in", 0): 1}, "G")  # an offsets-only transaction times out too
    now[0] += 10_001
    broker.run_housekeeping()
    assert state_of(broker, "T") == "CompleteAbort"
    assert Consumer(broker, group_id="G").committed([("in", 0)]) == {("in", 0): None}
    with pytest.raises(ProducerFencedError):
        q.commit_transaction()


def test_a_broker_down_longer_than_the_timeout_aborts_the_open_transaction_at_its_first_housekeeping(tmp_path):
    now = [5_000_000]
    topics = {"t": 2}

    def reopen(broker=None):
        if broker is not None:
            broker.close()
        return Broker(topics, tmp_path, clock=lambda: now[0])

    broker = reopen()
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"x", partition=0).result()
    p.send_offsets_to_transaction({("t", 1): 1}, "G")
    now[0] += 59_000
    broker = reopen(broker)
    broker.run_housekeeping()
    assert state_of(broker, "T") == "Ongoing"  # the start time survived the restart
    now[0] += 2_000
    broker = reopen(broker)
    broker.run_housekeeping()
    assert state_of(broker, "T") == "CompleteAbort"
    assert broker.log("t", 0).last_stable_offset == broker.log("t", 0).log_end_offset
    assert read_all(broker, "t", [0, 1]) == []
    assert Consumer(broker, group_id="G").committed([("t", 1)]) == {("t", 1): None}
    broker = reopen(broker)
    fresh = producer(broker)
    fresh.init_transactions()
    assert fresh.transactions.producer_id_and_epoch[1] == 2  # the timeout's fence took epoch 1


def test_an_expired_transactional_id_recovers_by_abort_and_the_next_transaction_commits():
    now = [1_000_000]
    broker = Broker({"t": 1}, clock=lambda: now[0])
    p = producer(broker, "E")
    p.init_transactions()
    now[0] += 8 * 86_400_000  # past transactional.id.expiration.ms (7 days)
    broker.run_housekeeping()
    assert broker.txn_coordinator.describe_transactions(["E"])[0].error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    p.begin_transaction()
    with pytest.raises(DeliveryError, match="INVALID_PRODUCER_ID_MAPPING"):
        p.send("t", b"e1", partition=0).result()
    with pytest.raises(TransactionAbortableError):
        p.commit_transaction()
    p.abort_transaction()  # KIP-360: the abort gets a new producer id
    p.begin_transaction()
    p.send("t", b"e2", partition=0)
    p.commit_transaction()
    assert values(read_all(broker, "t", [0])) == [b"e2"]


# ---------------------------------------------------------------- malformed requests straight to Broker.handle


_BAD = [None, True, -1, 2**63, 70_000, 1.5, math.nan, "", "x", "\ud800", b"x", (), [], object(), {"a": 1},
        ("t", 0), (("t", 0),), (("t", "0"),), (("t", 0, 1),), ((1, 0),), (("t", -1),), (("t", True),), (None,),
        "y" * 40_000]
_BAD_ENTRIES = [M.OffsetEntry("in", 0, -5), M.OffsetEntry("in", 0, 2**63), M.OffsetEntry(5, 0, 1),
                M.OffsetEntry("in", "0", 1), M.OffsetEntry("in", 0, "1"), M.OffsetEntry("in", 0, 1, None),
                M.OffsetEntry("in", 0, 1, 5), M.OffsetEntry("in", 0, 1, "m" * 5_000),
                M.OffsetEntry("in", 0, 1, "\ud800"), M.OffsetEntry("in", 0, True), M.OffsetEntry("nope", 0, 1),
                M.OffsetEntry("in", 0, 1.5)]


def _fuzzed(base, field: str) -> list:
    pool = list(_BAD)
    if field == "offsets":
        pool += [(entry,) for entry in _BAD_ENTRIES] + [("x",), _BAD_ENTRIES[0]]
    if isinstance(base, M.FetchRequest) and field == "partitions":
        pool += [(M.FetchPartition("t", 0, v),) for v in _BAD] + [(M.FetchPartition("t", 0, 0, v),) for v in _BAD]
    if isinstance(base, M.ListOffsetsRequest) and field == "partitions":
        pool += [(("t", 0, v),) for v in _BAD] + [(("t", v, -1),) for v in _BAD]
    return [dataclasses.replace(base, **{field: value}) for value in pool]


def _snapshot(broker) -> tuple:
    coordinator = broker.txn_coordinator
    ids = [listing.transactional_id for listing in coordinator.list_transactions().transaction_states]
    described = [(d.transactional_id, d.state, d.producer_id, d.producer_epoch, d.topic_partitions)
                 for d in coordinator.describe_transactions(sorted(ids))]
    groups = {g: broker.group_coordinator.offset_fetch(g, None, require_stable=False) for g in ("g", "sane")}
    return described, groups, read_all(broker, "t", [0, 1]), read_all(broker, "t", [0, 1], "read_uncommitted")


def test_malformed_new_requests_are_answered_never_raised_and_leave_the_broker_consistent(tmp_path):
    topics = {"t": 2, "in": 1}
    broker = Broker(topics, tmp_path, fsync=False)
    victim = producer(broker, "victim")
    victim.init_transactions()
    pid, epoch = victim.transactions.producer_id_and_epoch
    bases = [
        M.FindCoordinatorRequest("victim", M.TRANSACTION_KEY, 1),
        M.InitProducerIdRequest(2, "victim", 60_000, pid, epoch),
        M.AddPartitionsToTxnRequest("victim", pid, epoch, (("t", 0),), 3),
        M.AddOffsetsToTxnRequest("victim", pid, epoch, "g", 4),
        M.EndTxnRequest("victim", pid, epoch, False, 5),
        M.TxnOffsetCommitRequest("victim", "g", pid, epoch, (M.OffsetEntry("in", 0, 1),), request_id=6),
        M.OffsetCommitRequest("g", (M.OffsetEntry("in", 0, 1),), request_id=7),
        M.OffsetFetchRequest("g", (("in", 0),), request_id=8),
        M.ListOffsetsRequest((("t", 0, M.LATEST_TIMESTAMP),), request_id=9),
        M.FetchRequest((M.FetchPartition("t", 0, 0),), request_id=10),
    ]
    sent = 0
    for base in bases:
        answer_type = getattr(M, type(base).__name__.replace("Request", "Response"))
        for field in dataclasses.fields(base):
            for request in _fuzzed(base, field.name):
                answer = broker.handle(request)
                sent += 1
                assert type(answer) is answer_type, request
                if field.name != "request_id":
                    assert answer.request_id == base.request_id
    assert sent > 1_000
    # A well-behaved producer is unaffected; the broker restarts into exactly the state it had.
    sane = producer(broker, "sane")
    sane.init_transactions()
    sane.begin_transaction()
    sane.send("t", b"sane", partition=1).result()
    sane.send_offsets_to_transaction({("in", 0): 1}, "sane")
    sane.commit_transaction()
    before = _snapshot(broker)
    assert before[1]["sane"][1][("in", 0)].offset == 1
    broker.close()
    broker = Broker(topics, tmp_path, fsync=False)
    assert _snapshot(broker) == before


# ---------------------------------------------------------------- simulate --transactional


def test_simulate_transactional_odd_flags_are_refused_in_one_line(capsys):
    assert cli_main(["simulate", "--no-transactions"]) == 2
    assert "--no-transactions goes with --transactional" in capsys.readouterr().err
    assert cli_main(["simulate", "--transactional", "--producers", "5", "--partitions", "2", "--records", "3",
                     "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "partitions >= apps" in err and len(err.splitlines()) == 1
    for flags in (["--records", "0"], ["--records-per-transaction", "0"], ["--instance-crash", "1.0"],
                  ["--drop-request", "5"]):
        with pytest.raises(SystemExit) as exited:
            cli_main(["simulate", "--transactional", *flags])
        assert exited.value.code == 2
        assert flags[1] in capsys.readouterr().err


def test_simulate_transactional_small_runs_hold_exactly_once():
    # One record, one partition; more records per transaction than records; instances crashing almost always.
    for kwargs in (dict(apps=1, partitions=1, records=1), dict(apps=2, partitions=2, records=20,
                                                               records_per_transaction=1_000_000),
                   dict(apps=2, partitions=2, records=6, instance_crash=0.9, records_per_transaction=1)):
        report = simulate_transactional(faults=Faults(), seed=3, **kwargs)
        assert report.check.exactly_once, (kwargs, report.check)


def test_simulate_transactional_with_requests_almost_always_lost_ends_with_a_timeout():
    with pytest.raises(TransactionTimeoutError, match="init_transactions"):
        simulate_transactional(apps=1, partitions=1, records=5, faults=Faults(drop_request=0.99), seed=1)


# ---------------------------------------------------------------- bugs (each fails now)


def test_an_offset_beyond_int64_is_refused_at_the_call_not_by_killing_the_producer():
    broker = Broker({"in": 1, "out": 1})
    p = producer(broker)
    p.init_transactions()
    p.begin_transaction()
    try:
        with pytest.raises(ValueError, match=str(2**63)):
            p.send_offsets_to_transaction({("in", 0): 2**63}, "G")
    finally:
        # Whatever happened, the bad argument must leave the transaction usable.
        assert p.transaction_state is TransactionManagerState.IN_TRANSACTION
    p.send("out", b"ok", partition=0)
    p.commit_transaction()


def test_internal_topics_cannot_join_a_transaction():
    broker = Broker({"t": 1})
    p = producer(broker)
    p.init_transactions()
    pid, epoch = p.transactions.producer_id_and_epoch
    broker.group_coordinator  # noqa: B018  # both internal topics exist
    internal = (("__transaction_state", 0), ("__consumer_offsets", 0))
    answer = broker.handle(M.AddPartitionsToTxnRequest("T", pid, epoch, internal))
    broker.handle(M.EndTxnRequest("T", pid, epoch, False))
    markers = [b for name, part in internal for b in broker.log(name, part).batches if b.control is not None]
    assert markers == []
    assert all(result.error_code != E.NONE for result in answer.results)


@pytest.mark.parametrize("partitions", [None, 5, 1.5])
def test_list_offsets_with_partitions_not_a_sequence_is_answered(partitions):
    broker = Broker({"t": 1})
    answer = broker.handle(M.ListOffsetsRequest(partitions, request_id=4))
    assert isinstance(answer, M.ListOffsetsResponse) and answer.request_id == 4


@pytest.mark.parametrize("partitions", [((["t"], 0),), (("t", [0]),), (("t", 0), ("t", {}))])
def test_add_partitions_with_an_unhashable_partition_is_answered(partitions):
    broker = Broker({"t": 1})
    p = producer(broker)
    p.init_transactions()
    pid, epoch = p.transactions.producer_id_and_epoch
    answer = broker.handle(M.AddPartitionsToTxnRequest("T", pid, epoch, partitions, 3))
    assert isinstance(answer, M.AddPartitionsToTxnResponse) and answer.request_id == 3


@pytest.mark.parametrize("markers", [None, 5, ("x",), (M.TxnMarker(0, 0, False, 0, None),),
                                     (M.TxnMarker(0, 0, False, 0, "ab"),)])
def test_write_txn_markers_with_malformed_markers_is_answered(markers):
    broker = Broker({"t": 1})
    answer = broker.handle(M.WriteTxnMarkersRequest(markers, request_id=2))
    assert isinstance(answer, M.WriteTxnMarkersResponse) and answer.request_id == 2


def test_an_unhashable_isolation_level_is_named():
    broker = Broker({"t": 1})
    with pytest.raises((TypeError, ValueError), match="isolation_level"):
        Consumer(broker, isolation_level=["read_committed"])


def test_seek_beyond_int64_is_refused():
    broker = Broker({"t": 1})
    consumer = Consumer(broker)
    consumer.assign([("t", 0)])
    with pytest.raises(ValueError, match=str(2**64)):
        consumer.seek("t", 0, 2**64)


def test_a_clock_that_does_not_give_int_milliseconds_is_refused_at_construction():
    with pytest.raises((TypeError, ValueError), match="clock"):
        Broker({"t": 1}, clock=time.time)


#: A hang guard, not a timing: these take about 1 s alone, and over 5 s on a loaded CI machine (log fsyncs).
HANG = 120


def test_simulate_transactional_that_cannot_progress_stops_quickly():
    # "Quickly": once the broker has crashed more times than the simulation allows, not by the clock.
    with deadline(HANG), pytest.raises(IdemcoreError, match=r"no progress: the broker crashed 31 times"):
        simulate_transactional(apps=1, partitions=1, records=1, faults=Faults(crash_every=1), seed=1)


def test_simulate_transactional_with_fewer_records_than_partitions_finishes():
    with deadline(HANG):
        report = simulate_transactional(apps=1, partitions=2, records=1, faults=Faults(), seed=1)
    assert report.check.exactly_once


def test_the_lso_survives_a_restart_when_retention_took_an_open_transactions_batches(tmp_path):
    topics = {"t": 1}
    broker = Broker(topics, tmp_path, segment_bytes=100)
    old = int(time.time() * 1000) - 8 * 86_400_000  # older than retention.ms (7 days)
    p = producer(broker, "backfill")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"old", partition=0, timestamp=old).result()
    Producer(broker, linger_ms=0).send("t", b"live", partition=0).result()  # in the next segment
    broker.run_housekeeping()  # retention deletes the first segment
    assert broker.log("t", 0).log_start_offset == 1
    assert broker.log("t", 0).last_stable_offset == 1
    assert read_all(broker, "t", [0]) == []
    broker.close()
    broker = Broker(topics, tmp_path, segment_bytes=100)
    assert state_of(broker, "backfill") == "Ongoing"
    assert broker.log("t", 0).last_stable_offset == 1
    assert read_all(broker, "t", [0]) == []
