"""Faults over real sockets (librdkafka through confluent-kafka against ``idemcore serve``): lost responses,
dropped and cut connections, delays (a seeded :class:`~tests.fault_proxy.FaultProxy` between the client and
an in-process :class:`~idemcore.broker.server.Server`), and SIGKILL of an ``idemcore serve`` child process
mid-stream. Each run then reads everything back directly (not through the proxy) and checks what a client can
observe: every acknowledged record exactly once, in send order per partition; a record whose delivery failed
may be absent but never twice; transactions all or nothing, read_committed showing only committed ones.

The proxy listens on 127.0.0.2 on the server's own port and the server advertises 127.0.0.2: Metadata and
FindCoordinator send the client back through the proxy, so every connection the client makes is faulted."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from idemcore.broker import Broker
from idemcore.broker.server import Server
from tests.fault_proxy import FaultPlan, FaultProxy
from tests.peers import ServeProcess, free_port
from tests.real_client_helpers import read_confluent

TOPIC = "faults"
PARTITIONS = 3
#: Records produced by the idempotent run through the proxy.
IDEMPOTENT_RECORDS = 20_000
#: Records produced across the SIGKILLs.
KILL_RECORDS = 20_000
KILLS = 3
#: Records sent in one go just before each kill.
KILL_BURST = 300
TRANSACTIONS = 60
RECORDS_PER_TRANSACTION = 30
#: Every loop of a test ends by this many seconds.
RUN_TIMEOUT_S = 120

#: librdkafka's settings that keep a run bounded and make it send many small requests (each a chance of a fault).
FAST_CLIENT = {
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 200,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 200,
    "socket.connection.setup.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 2000,
    "log_level": 2,  # librdkafka: critical and worse (the refused connections of a restart are expected)
}


# ---------------------------------------------------------------- what a client observed


@dataclass
class Sent:
    """What a producer learnt: per partition, keys in send order; which were acknowledged (with offsets) and which
    failed."""

    order: dict[int, list[bytes]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    failed: dict[bytes, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked[msg.key()] = (msg.partition(), msg.offset())
            else:
                self.failed[msg.key()] = str(err)


def read_back(bootstrap: str, *, read_committed: bool = False, timeout: float = 60) -> dict[int, list[tuple[int,
                                                                                                         bytes]]]:
    """Every record of TOPIC, per partition: (offset, key), read from offset 0 to each partition's end (the last
    stable offset under read_committed) with confluent-kafka's assign()."""
    read = read_confluent(bootstrap, TOPIC, range(PARTITIONS),
                          "read_committed" if read_committed else "read_uncommitted", timeout)
    return {p: [(offset, key) for offset, key, _ in read.records[p]] for p in range(PARTITIONS)}


def check_idempotent(sent: Sent, records: dict[int, list[tuple[int, bytes]]]) -> None:
    """Every acknowledged record once, at its acknowledged offset; per partition, the keys in send order; nothing
    that was not sent; nothing twice."""
    for partition, got in records.items():
        keys = [key for _, key in got]
        assert len(keys) == len(set(keys)), f"partition {partition}: duplicated records " \
            f"{sorted({k for k in keys if keys.count(k) > 1})[:10]}"
        position = {key: index for index, key in enumerate(sent.order[partition])}
        unknown = [key for key in keys if key not in position]
        assert not unknown, f"partition {partition}: records never sent there: {unknown[:10]}"
        indexes = [position[key] for key in keys]
        assert indexes == sorted(indexes), f"partition {partition}: records out of send order"
        offsets = dict((key, offset) for offset, key in got)
        for key in sent.order[partition]:
            if key in sent.acked:
                assert key in offsets, f"partition {partition}: acknowledged record {key!r} is missing"
                assert sent.acked[key] == (partition, offsets[key]), \
                    f"{key!r} acknowledged at {sent.acked[key]}, read at {(partition, offsets[key])}"


# ---------------------------------------------------------------- servers


@contextlib.contextmanager
def proxied_server(tmp_path: Path, plan: FaultPlan, seed: int) -> Iterator[tuple[Broker, Server, FaultProxy]]:
    """A Broker with TOPIC, its Server on 127.0.0.1:S advertising the fault proxy's 127.0.0.1:P, so every
    connection a client opens (bootstrap and the ones Metadata names) goes through the proxy."""
    broker = Broker({TOPIC: PARTITIONS}, data_dir=tmp_path / "kafka-logs", fsync=False)
    server = proxy = None
    try:
        proxy_port = free_port()
        server = Server(broker, "127.0.0.1", 0, advertised_port=proxy_port).start()
        proxy = FaultProxy("127.0.0.1", server.address[1], plan, seed=seed, listen_port=proxy_port).start()
        yield broker, server, proxy
    finally:
        if proxy is not None:
            proxy.stop()
        if server is not None:
            server.stop()
        broker.close()


@contextlib.contextmanager
def direct_server(broker: Broker) -> Iterator[Server]:
    """A second server over ``broker`` (after the first stopped), advertising itself: reads bypass the proxy."""
    server = Server(broker).start()
    try:
        yield server
    finally:
        server.stop()


def no_broker_errors(caplog: pytest.LogCaptureFixture, *servers: Server) -> None:
    logged = [r for r in caplog.records if r.name == "idemcore.broker.server" and r.levelno >= logging.ERROR]
    assert not logged, "the server logged failures:\n" + "\n".join(
        f"{r.getMessage()}\n{r.exc_text or ''}" for r in logged[:5])
    for server in servers:
        assert server.stats["broker_errors"] == 0, server.stats


def produce_numbered(producer: Producer, sent: Sent, i: int, deadline: float) -> None:
    """Record ``i`` (key ``%08d``) to partition ``i % PARTITIONS``, noted in ``sent``; polls while the queue is full."""
    partition = i % PARTITIONS
    key = b"%08d" % i
    sent.order[partition].append(key)
    while True:
        try:
            producer.produce(TOPIC, key=key, value=b"value-%d" % i, partition=partition, on_delivery=sent.on_delivery)
            return
        except BufferError:
            producer.poll(0.05)
            assert time.monotonic() < deadline, "the producer's queue did not drain"


def flush_bounded(producer: Producer, deadline: float) -> int:
    left = len(producer)
    while left and time.monotonic() < deadline:
        left = producer.flush(1)
    return left


# ---------------------------------------------------------------- 2. idempotent producer through the proxy


IDEMPOTENT_PLAN = FaultPlan(drop_request=0.01, cut_request=0.01, lose_response=0.03, cut_response=0.01,
                            delay=0.05, max_delay_ms=30, max_faults=400)


@pytest.mark.parametrize("seed", [11, 12])
def test_idempotent_producer_through_lost_responses_and_dropped_connections(tmp_path, caplog, seed):
    caplog.set_level(logging.INFO, logger="idemcore.broker.server")
    sent = Sent()
    with proxied_server(tmp_path, IDEMPOTENT_PLAN, seed) as (broker, server, proxy):
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 1, "batch.num.messages": 40, "max.in.flight.requests.per.connection": 5,
                             "message.timeout.ms": 60_000, "request.timeout.ms": 5000, **FAST_CLIENT})
        deadline = time.monotonic() + RUN_TIMEOUT_S
        for i in range(IDEMPOTENT_RECORDS):
            produce_numbered(producer, sent, i, deadline)
            if i % 100 == 0:
                producer.poll(0)
        left = flush_bounded(producer, deadline)
        assert left == 0, f"{left} records neither acknowledged nor failed in {RUN_TIMEOUT_S} s"
        del producer  # closes it: no reconnecting to the stopped proxy
        print(f"\nseed {seed}: proxy {proxy.counts}; acked {len(sent.acked)}, failed {len(sent.failed)}; "
              f"server {server.stats}")
        server.stop()
        proxy.stop()
        with direct_server(broker) as reader:
            records = read_back(reader.bootstrap)
        no_broker_errors(caplog, server, reader)
    assert proxy.faults > 20, f"the proxy injected too few faults to mean anything: {proxy.counts}"
    assert proxy.counts["lose_response"] > 5, proxy.counts
    check_idempotent(sent, records)
    # librdkafka retries until message.timeout.ms: with these faults every record gets through.
    assert not sent.failed, f"{len(sent.failed)} deliveries failed, e.g. {next(iter(sent.failed.items()))}"
    assert sum(map(len, records.values())) == IDEMPOTENT_RECORDS


# ---------------------------------------------------------------- 3. SIGKILL and restart mid-stream


def test_idempotent_producer_across_sigkill_and_restart(tmp_path):
    sent = Sent()
    serve = ServeProcess(tmp_path / "data", "--topics", f"{TOPIC}:{PARTITIONS}", "--quiet")
    serve.start()
    producer = None
    try:
        producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 2, "batch.num.messages": 100, "message.timeout.ms": 90_000,
                             "request.timeout.ms": 5000, **FAST_CLIENT})
        deadline = time.monotonic() + RUN_TIMEOUT_S
        kill_at = [KILL_RECORDS * (k + 1) // (KILLS + 1) for k in range(KILLS)]
        kills = 0
        in_flight: list[int] = []  # records not yet acknowledged at each kill
        for i in range(KILL_RECORDS):
            produce_numbered(producer, sent, i, deadline)
            if kills < KILLS and i == kill_at[kills]:
                # Wait until part of what was sent is acknowledged, so that the kill has acked records behind it,
                # then send a burst (below) and kill in its middle: unacknowledged records in flight.
                while len(sent.acked) + len(sent.failed) < i // 2 and time.monotonic() < deadline:
                    producer.poll(0.01)
            if kills < KILLS and i == kill_at[kills] + KILL_BURST:
                in_flight.append(len(producer))
                serve.kill()
                kills += 1
                time.sleep(0.2)
                serve.start()
            elif i % 50 == 0 and not (kills < KILLS and kill_at[kills] <= i < kill_at[kills] + KILL_BURST):
                producer.poll(0)
                time.sleep(0.002)  # a stream, not one burst: the kills land mid-stream
        left = flush_bounded(producer, deadline)
        assert left == 0, f"{left} records neither acknowledged nor failed"
        assert kills == KILLS
        assert all(in_flight), f"a kill found nothing in flight: {in_flight}"
        serve.kill()  # a last crash before reading: what was acknowledged must survive it
        serve.start()
        records = read_back(serve.bootstrap)
        print(f"\nkills {kills}, unacknowledged at each {in_flight}; acked {len(sent.acked)}, failed "
              f"{len(sent.failed)}; read {sum(map(len, records.values()))}")
    finally:
        if producer is not None:
            producer.purge()
        serve.stop()
    output = serve.output()
    assert "Traceback" not in output, output[-3000:]
    check_idempotent(sent, records)
    assert len(sent.acked) > KILL_RECORDS // 2, f"only {len(sent.acked)} acknowledged; failed e.g. " \
        f"{list(sent.failed.items())[:3]}"


# ---------------------------------------------------------------- 4. transactions with faults


@dataclass
class Outcomes:
    committed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)
    #: A commit that raised a fatal error or timed out: committed or not, but all or nothing.
    unknown: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def run_transactions(bootstrap: str, outcomes: Outcomes, between=None, mid=None, *,
                     transactional_id: str = "fault-tx", deadline: float) -> None:
    """TRANSACTIONS transactions of RECORDS_PER_TRANSACTION records over the partitions, every 5th aborted; errors
    handled as an application would: retriable -> retry the call; abortable -> abort_transaction; fatal -> a new
    producer (init_transactions fences the old one). ``between(n)`` runs after transaction n."""

    def new_producer() -> Producer:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                             "enable.idempotence": True, "acks": "all", "linger.ms": 1,
                             "batch.num.messages": 10, "transaction.timeout.ms": 30_000,
                             "message.timeout.ms": 20_000, "request.timeout.ms": 5000, **FAST_CLIENT})
        retry(lambda: producer.init_transactions(10), producer)
        return producer

    def retry(call, producer) -> None:
        for _ in range(50):
            assert time.monotonic() < deadline, "transactions timed out"
            try:
                call()
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.retriable() and not error.fatal() and not error.txn_requires_abort():
                    outcomes.errors.append(f"retry: {error}")
                    time.sleep(0.05)
                    continue
                raise
        raise AssertionError("a call kept failing with retriable errors")

    state = {"producer": new_producer()}

    def call(method: str, *args) -> None:
        """``method`` of the current producer, retried while its error is retriable."""
        retry(lambda: getattr(state["producer"], method)(*args), state["producer"])

    try:
        for n in range(TRANSACTIONS):
            assert time.monotonic() < deadline, "transactions timed out"
            abort = n % 5 == 4
            ending = False  # commit_transaction was called: from then on the outcome is the coordinator's
            try:
                call("begin_transaction")
                for j in range(RECORDS_PER_TRANSACTION):
                    state["producer"].produce(TOPIC, key=b"%04d:%04d" % (n, j), value=b"x", partition=j % PARTITIONS)
                    state["producer"].poll(0)
                if mid is not None:
                    mid(n)
                if abort:
                    call("abort_transaction", 15)
                    outcomes.aborted.add(n)
                else:
                    ending = True
                    call("commit_transaction", 15)
                    outcomes.committed.add(n)
            except KafkaException as exc:
                error = exc.args[0]
                outcomes.errors.append(f"txn {n}: {error} (fatal={error.fatal()}, "
                                       f"abortable={error.txn_requires_abort()})")
                if error.txn_requires_abort() and not error.fatal():
                    try:
                        call("abort_transaction", 15)
                    except KafkaException as again:
                        outcomes.errors.append(f"txn {n}: abort failed: {again.args[0]}")
                        state["producer"] = new_producer()
                else:  # fatal: a new producer, whose init_transactions fences this one and aborts what is open
                    state["producer"] = new_producer()
                # never committed unless commit_transaction was called (it may have reached the coordinator)
                (outcomes.unknown if ending else outcomes.aborted).add(n)
            if between is not None:
                between(n)
    finally:
        state["producer"].purge()
        with contextlib.suppress(Exception):
            state["producer"].flush(1)


def check_transactions(outcomes: Outcomes, records: dict[int, list[tuple[int, bytes]]]) -> None:
    keys = [key for got in records.values() for _, key in got]
    assert len(keys) == len(set(keys)), "a committed record was read twice"
    by_txn: dict[int, set[bytes]] = {}
    for key in keys:
        by_txn.setdefault(int(key.split(b":")[0]), set()).add(key)
    seen = set(by_txn)
    assert not seen & outcomes.aborted, f"aborted transactions read: {sorted(seen & outcomes.aborted)}"
    missing = outcomes.committed - seen
    assert not missing, f"committed transactions missing: {sorted(missing)}"
    unexplained = seen - outcomes.committed - outcomes.unknown
    assert not unexplained, f"transactions read but neither committed nor unknown: {sorted(unexplained)}"
    for n, got in by_txn.items():
        assert len(got) == RECORDS_PER_TRANSACTION, f"transaction {n}: {len(got)} of {RECORDS_PER_TRANSACTION} read"
    for partition, got in records.items():  # within a partition, transactions in the order they ran
        order = [(int(k.split(b":")[0]), int(k.split(b":")[1])) for _, k in got]
        assert order == sorted(order), f"partition {partition}: transactional records out of order"


TRANSACTIONAL_PLAN = FaultPlan(drop_request=0.01, cut_request=0.01, lose_response=0.03, cut_response=0.01,
                               delay=0.05, max_delay_ms=30, max_faults=150)


@pytest.mark.parametrize("seed", [21, 22])
def test_transactions_through_lost_responses_and_dropped_connections(tmp_path, caplog, seed):
    caplog.set_level(logging.INFO, logger="idemcore.broker.server")
    outcomes = Outcomes()
    with proxied_server(tmp_path, TRANSACTIONAL_PLAN, seed) as (broker, server, proxy):
        run_transactions(proxy.bootstrap, outcomes, deadline=time.monotonic() + RUN_TIMEOUT_S)
        print(f"\nseed {seed}: proxy {proxy.counts}; faulted APIs "
              f"{sorted({key for key, _ in proxy.fault_log})}; committed {len(outcomes.committed)}, aborted "
              f"{len(outcomes.aborted)}, unknown {sorted(outcomes.unknown)}; errors {outcomes.errors[:10]}")
        server.stop()
        proxy.stop()
        with direct_server(broker) as reader:
            records = read_back(reader.bootstrap, read_committed=True)
        no_broker_errors(caplog, server, reader)
    assert proxy.faults > 10, proxy.counts
    check_transactions(outcomes, records)
    assert len(outcomes.committed) >= TRANSACTIONS // 2, outcomes


def test_transactions_across_sigkill_between_and_inside_transactions(tmp_path):
    outcomes = Outcomes()
    serve = ServeProcess(tmp_path / "data", "--topics", f"{TOPIC}:{PARTITIONS}", "--quiet")
    serve.start()
    kills = []

    def kill(n: int, when: str) -> None:
        serve.kill()
        kills.append((n, when))
        serve.start()

    def between(n: int) -> None:
        if n % 20 == 9:  # three kills between transactions over 60 transactions
            kill(n, "after")

    def mid(n: int) -> None:
        if n % 20 in (2, 14):  # and six inside one, its records sent (maybe not all acknowledged), before its end
            kill(n, "inside")

    try:
        run_transactions(serve.bootstrap, outcomes, between, mid, deadline=time.monotonic() + RUN_TIMEOUT_S)
        serve.kill()
        serve.start()
        records = read_back(serve.bootstrap, read_committed=True)
        print(f"\nkills after {kills}; committed {len(outcomes.committed)}, aborted {len(outcomes.aborted)}, "
              f"unknown {sorted(outcomes.unknown)}; errors {outcomes.errors[:10]}")
    finally:
        serve.stop()
    assert "Traceback" not in serve.output(), serve.output()[-3000:]
    assert len(kills) == 9
    check_transactions(outcomes, records)
    assert len(outcomes.committed) >= TRANSACTIONS // 2, outcomes


# ---------------------------------------------------------------- the checkers can fail


def test_the_checkers_catch_duplicates_losses_reordering_and_aborted_reads():
    sent = Sent()
    for i in range(6):
        sent.order[i % PARTITIONS].append(b"%08d" % i)
    sent.acked = {b"%08d" % i: (i % PARTITIONS, i // PARTITIONS) for i in range(6)}
    good = {p: [(n, b"%08d" % (p + PARTITIONS * n)) for n in range(2)] for p in range(PARTITIONS)}
    check_idempotent(sent, good)
    for broken in ({**good, 0: good[0] + [(2, good[0][0][1])]},  # a duplicate
                   {**good, 1: good[1][:1]},  # an acknowledged record lost
                   {**good, 2: good[2][::-1]},  # out of send order
                   {**good, 0: [(0, good[0][0][1]), (1, b"zzz")]}):  # a record never sent
        with pytest.raises(AssertionError):
            check_idempotent(sent, broken)
    del sent.acked[b"%08d" % 4]  # not acknowledged: may be absent
    check_idempotent(sent, {**good, 1: good[1][:1]})

    def txn(n: int) -> dict[int, list[tuple[int, bytes]]]:
        return {p: [(j, b"%04d:%04d" % (n, j)) for j in range(RECORDS_PER_TRANSACTION) if j % PARTITIONS == p]
                for p in range(PARTITIONS)}

    check_transactions(Outcomes(committed={0}), txn(0))
    with pytest.raises(AssertionError):
        check_transactions(Outcomes(committed={1}, aborted={0}), txn(0))  # an aborted one read
    with pytest.raises(AssertionError):
        check_transactions(Outcomes(committed={0, 1}), txn(0))  # a committed one missing
    partial = txn(0)
    partial[0] = partial[0][1:]
    with pytest.raises(AssertionError):
        check_transactions(Outcomes(unknown={0}), partial)  # not all or nothing


def test_a_failed_write_halts_serve_and_the_restart_keeps_every_acknowledged_record(tmp_path):
    """A write the disk refuses (the child's RLIMIT_FSIZE: EFBIG once a segment reaches it) takes the log directory
    offline: ``idemcore serve`` halts with status 1 as Kafka's broker halts when its last log directory fails,
    leaving no clean-shutdown marker; the restart (no limit) recovers, and every acknowledged record is there."""
    sent = Sent()
    settings = ("--topics", f"{TOPIC}:{PARTITIONS}", "--quiet", "--fsync",
                "--override", "log.index.size.max.bytes=4096")
    serve = ServeProcess(tmp_path / "data", *settings, file_size_limit=64 * 1024)
    serve.start()
    producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 2, "batch.size": 4096, "message.timeout.ms": 10_000, "request.timeout.ms": 3000,
                         **FAST_CLIENT})
    try:
        deadline = time.monotonic() + 60
        for i in range(20_000):  # far more than 64 KiB per partition holds
            produce_numbered(producer, sent, i, deadline)
            if i % 50 == 0:
                producer.poll(0.005)
                if serve.process is not None and serve.process.poll() is not None:
                    break
        assert serve.process is not None
        status = serve.process.wait(30)
        serve.process = None
        left = flush_bounded(producer, deadline)
        output = serve.output()
        assert status == 1 and left == 0, (status, left, output[-2000:])
        assert "the log directory failed" in output and "Traceback" not in output, output[-2000:]
        assert not (tmp_path / "data" / ".kafka_cleanshutdown").exists()
        assert sent.acked and sent.failed, (len(sent.acked), len(sent.failed))
        serve.file_size_limit = None
        serve.start()
        records = read_back(serve.bootstrap)
    finally:
        producer.purge()
        serve.stop()
    check_idempotent(sent, records)
