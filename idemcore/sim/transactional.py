"""simulate --transactional: a read-process-write application through the faulty network, then the checker.

Each application instance owns some partitions of the input topic: it consumes them read_committed, writes
one output record per input record (same partition) and commits its input offsets in the same transaction
(Kafka's exactly-once stream processing). Faults: the network's (lost, duplicated, reordered requests and
answers; broker crashes and restarts), and instances that die mid-transaction; the replacement uses the same
transactional id, which fences the dead one; the dead one (a zombie) keeps trying to write and commit.

Without transactions (``transactions=False``) the same application uses an idempotent producer and commits
its offsets after the output is acknowledged, as an at-least-once application does: an instance that dies
between the two re-processes its input, so the checker finds duplicates.

Every output value names its input record, the instance that wrote it and its transaction, so the checker can
tell, reading the output read_committed, which input records were lost or duplicated, which records of aborted
transactions are visible, which transactions are partly visible and which zombie writes were committed.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from idemcore.broker import Broker
from idemcore.client.batch import DeliveryError
from idemcore.client.consumer import Consumer
from idemcore.client.producer import Producer
from idemcore.client.transactions import TransactionAbortableError, TransactionError, TransactionFatalError
from idemcore.errors import IdemcoreError
from idemcore.net.transport import InProcessTransport
from idemcore.sim.network import Faults, NetworkStats, SimulatedNetwork
from idemcore.sim.run import BelowError

log = logging.getLogger(__name__)

INPUT = "input"
OUTPUT = "output"
GROUP = "processors"
#: How often a dead instance tries to write and commit again, at random later moments.
ZOMBIE_ATTEMPTS = 2


@dataclass(frozen=True)
class TransactionalCheck:
    """What the output, read read_committed, and the group's offsets say; every count but the first four
    must be 0 for exactly-once."""

    input_records: int
    output_records: int  # visible read_committed
    committed_transactions: int
    aborted_transactions: int
    lost: int  # input records with no committed output
    duplicates: int  # extra committed outputs of one input record
    aborted_reads: int  # records of aborted transactions visible read_committed
    torn_transactions: int  # transactions partly visible
    zombie_writes: int  # records a fenced instance wrote after its fence, visible
    offset_mismatches: int  # input records whose committed offset disagrees with their output being visible

    @property
    def exactly_once(self) -> bool:
        return not (self.lost or self.duplicates or self.aborted_reads or self.torn_transactions
                    or self.zombie_writes or self.offset_mismatches)


@dataclass(frozen=True)
class TransactionalReport:
    check: TransactionalCheck
    network: NetworkStats
    transactions: bool
    instance_crashes: int
    zombie_attempts: int
    virtual_ms: int
    seconds: float
    #: Transactions live instances aborted and processed again (the application's choice, or an abortable error).
    explicit_aborts: int = 0
    #: Instances replaced after a fatal error (a fence they did not expect); 0 unless something is wrong.
    fatal_errors: int = 0

    def to_dict(self) -> dict:
        return {**asdict(self.check), "exactly_once": self.check.exactly_once, "transactions": self.transactions,
                "instance_crashes": self.instance_crashes, "zombie_attempts": self.zombie_attempts,
                "explicit_aborts": self.explicit_aborts, "fatal_errors": self.fatal_errors,
                "crashes": self.network.crashes, "network": asdict(self.network), "virtual_ms": self.virtual_ms,
                "seconds": round(self.seconds, 3)}


@dataclass
class _Ledger:
    """What the instances did, as the checker needs it."""

    #: transaction name -> the input ids it processed (its output records, one each).
    sent: dict[bytes, list[int]] = field(default_factory=dict)
    committed: set[bytes] = field(default_factory=set)
    aborted: set[bytes] = field(default_factory=set)
    #: Output values a fenced instance sent after its fence.
    zombie_values: set[bytes] = field(default_factory=set)
    #: Transactions a live instance aborted (the application's choice, or after an abortable error).
    explicit_aborts: int = 0


def _output_value(input_id: int, txn: bytes) -> bytes:
    return b"%d|%s" % (input_id, txn)


def _input_id(value: bytes | None) -> int:
    if value is None or not value.startswith(b"in:"):
        raise IdemcoreError(f"an input record that the simulation did not write: {value!r:.60}")
    return int(value[3:])


def _parse_output(value: bytes) -> tuple[int, bytes]:
    input_id, txn = value.split(b"|", 1)
    return int(input_id), txn


class _ApplicationAbort(Exception):
    """The application decides to abort its transaction."""


class _Instance:
    """One run of the application for ``partitions`` of the input: a consumer and a (transactional) producer."""

    def __init__(self, network: SimulatedNetwork, app: int, generation: int, partitions: list[int],
                 transactions: bool, ledger: _Ledger, backend: str | None = None) -> None:
        self.name = f"app-{app}.{generation}"
        self.partitions = partitions
        self.transactions = transactions
        self.ledger = ledger
        self.txn_number = 0
        settings: dict[str, Any] = dict(client_id=f"{self.name}-producer", linger_ms=0, request_timeout_ms=200,
                        delivery_timeout_ms=600_000, retry_backoff_ms=5, max_block_ms=600_000, backend=backend)
        if transactions:
            settings.update(transactional_id=f"app-{app}", transaction_timeout_ms=60_000)
        self.producer = Producer(network, **settings)
        self.consumer = Consumer(network, group_id=GROUP,
                                 isolation_level="read_committed" if transactions else "read_uncommitted",
                                 client_id=f"{self.name}-consumer", request_timeout_ms=200)
        self.consumer.assign([(INPUT, p) for p in partitions])
        if transactions:
            self.producer.init_transactions()  # fences the instance before, aborting its open transaction

    def process(self, max_records: int, die: str | None, abort: bool = False) -> int:
        """Process up to ``max_records`` input records in one transaction; ``die``: where the instance dies
        ("after-send" or "after-offsets"), leaving everything as it is; ``abort``: the application aborts the
        transaction instead of committing it (as on a processing error) and processes the input again. Returns
        the records processed (0 when aborted)."""
        records = self.consumer.poll(max_records=max_records, timeout_ms=20)
        if not records:
            return 0
        self.txn_number += 1
        txn = b"%s.%d" % (self.name.encode(), self.txn_number)
        inputs = [_input_id(r.value) for r in records]
        self.ledger.sent[txn] = inputs
        if self.transactions:
            self.producer.begin_transaction()
        for record, input_id in zip(records, inputs, strict=True):
            self.producer.send(OUTPUT, _output_value(input_id, txn), partition=record.partition)
        if die == "after-send":
            return len(records)
        offsets = {(INPUT, p): self.consumer.position(INPUT, p) for p in {r.partition for r in records}}
        if self.transactions:
            try:
                self.producer.send_offsets_to_transaction(offsets, GROUP)
                if die == "after-offsets":
                    return len(records)
                if abort:
                    raise _ApplicationAbort("the application gave up on this transaction")
                self.producer.commit_transaction()
            except (TransactionAbortableError, _ApplicationAbort) as exc:
                log.info("%s: aborting (%s)", self.name, exc)
                self.producer.abort_transaction()
                self.ledger.aborted.add(txn)
                self.ledger.explicit_aborts += 1
                self.rewind()
                return 0
            self.ledger.committed.add(txn)
        else:
            self.producer.flush()
            if die == "after-offsets":
                return len(records)  # written, offsets never committed: the next instance writes them again
            self.consumer.commit(offsets)
            self.ledger.committed.add(txn)
        return len(records)

    def rewind(self) -> None:
        """Back to the group's committed offsets (after an abort, the input is processed again)."""
        committed = self.consumer.committed([(INPUT, p) for p in self.partitions])
        for (topic, partition), offset in committed.items():
            self.consumer.seek(topic, partition, 0 if offset is None else offset)

    def act_as_zombie(self, attempt: int) -> None:
        """A fenced instance that does not know it: it writes a record and tries to commit it."""
        value = _output_value(-1, b"zombie-%s.%d" % (self.name.encode(), attempt))
        self.ledger.zombie_values.add(value)
        try:
            if self.transactions:
                try:
                    self.producer.begin_transaction()
                except TransactionError:
                    pass  # still in its old transaction: it writes into that one
            self.producer.send(OUTPUT, value, partition=self.partitions[0])
            if self.transactions:
                self.producer.commit_transaction()
            else:
                self.producer.flush()
        except (TransactionError, DeliveryError) as exc:
            log.info("%s (fenced): %s", self.name, exc)


def simulate_transactional(
    apps: int = 4,
    partitions: int = 8,
    records: int = 10_000,
    faults: Faults | None = None,
    seed: int = 7,
    transactions: bool = True,
    records_per_transaction: int = 10,
    instance_crash: float = 0.02,
    abort_rate: float = 0.02,
    progress: Callable[[int], None] | None = None,
    fsync: bool = False,
    backend: str | None = None,
) -> TransactionalReport:
    """Process ``records`` input records with ``apps`` instances through ``faults``, then check the output.
    ``instance_crash``: the chance an instance dies in a transaction (it comes back as a new instance with the
    same transactional id; the dead one acts as a zombie). ``abort_rate``: the chance the application aborts a
    transaction and processes its input again (transactions only). A machine crash (``faults.crash_kind``)
    needs ``fsync``: without it one broker loses coordinator records it acknowledged, which no client can
    make up for (Kafka relies on replicas there)."""
    if apps < 1 or partitions < apps or records < 1 or records_per_transaction < 1:
        raise ValueError(f"need apps >= 1, partitions >= apps, records >= 1 and records_per_transaction >= 1; got "
                         f"apps={apps}, partitions={partitions}, records={records}, "
                         f"records_per_transaction={records_per_transaction}")
    for name, value in (("instance_crash", instance_crash), ("abort_rate", abort_rate)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1), got {value}")
    faults = faults or Faults()
    if faults.crash_every and faults.crash_kind == "machine" and not fsync:
        raise ValueError("a machine crash without fsync takes back transaction-log records and markers the broker "
                         "acknowledged (one broker, no replicas): exactly-once cannot hold; add fsync (--fsync)")
    rng = np.random.default_rng(seed + 1)
    data_dir = Path(tempfile.mkdtemp(prefix="idemcore-txn-sim-"))
    started = time.perf_counter()
    broker_log = logging.getLogger("idemcore.broker")
    quiet = BelowError()
    broker_log.addFilter(quiet)
    try:
        topics = {INPUT: partitions, OUTPUT: partitions}
        with Broker(topics, data_dir=data_dir, fsync=fsync, backend=backend) as seeding:
            _write_input(seeding, records, partitions)
        clock: list[SimulatedNetwork] = []
        # Every broker crash must let some transactions through: far more crashes than that means none get through.
        network = SimulatedNetwork(
            lambda: Broker(topics, data_dir=data_dir, fsync=fsync, backend=backend,
                           clock=lambda: clock[0].now if clock else 0),
            faults, seed, max_crashes=20 + 10 * records // max(faults.crash_every, 1))
        clock.append(network)
        ledger = _Ledger()
        owned = [[p for p in range(partitions) if p % apps == a] for a in range(apps)]
        generations = [0] * apps
        instances = [_Instance(network, a, 0, owned[a], transactions, ledger, backend) for a in range(apps)]
        crashes = zombie_attempts = fatal = 0
        zombies: list[_Instance] = []  # dead instances that still try, now and then, up to ZOMBIE_ATTEMPTS times
        done = 0
        max_steps = 50 * records // records_per_transaction + 10_000
        for _step in range(max_steps):
            if done >= records and _all_committed(instances, records, partitions):
                break
            for a, instance in enumerate(instances):
                die = None
                if rng.random() < instance_crash:
                    die = "after-send" if rng.random() < 0.5 else "after-offsets"
                abort = transactions and rng.random() < abort_rate
                try:
                    processed = instance.process(records_per_transaction, die, abort)
                except TransactionFatalError as exc:  # e.g. fenced: the instance cannot go on, a new one takes over
                    log.warning("%s: %s; replacing it", instance.name, exc)
                    fatal += 1
                    processed, die = 0, "fatal"
                if die is None or (processed == 0 and die != "fatal"):
                    done += processed
                    if progress is not None and processed:
                        progress(processed)
                    continue
                crashes += 1
                if die != "fatal" and instance.transactions:
                    txn = b"%s.%d" % (instance.name.encode(), instance.txn_number)
                    ledger.aborted.add(txn)  # the replacement's InitProducerId aborts it
                generations[a] += 1
                instances[a] = _Instance(network, a, generations[a], owned[a], transactions, ledger, backend)
                zombies += [instance] * ZOMBIE_ATTEMPTS
            if zombies and rng.random() < 0.3:
                zombie = zombies.pop(int(rng.integers(len(zombies))))
                zombie_attempts += 1
                zombie.act_as_zombie(zombie_attempts)
            network.tick()
        else:
            raise IdemcoreError(f"no progress after {max_steps} rounds: {done} of {records} input records processed")
        while network.broker is None:
            network.tick()
        broker = network.broker
        broker.run_housekeeping()
        check = check_output(broker, ledger, records, partitions)
        report = TransactionalReport(check, network.stats, transactions, crashes, zombie_attempts, network.now,
                                     time.perf_counter() - started, ledger.explicit_aborts, fatal)
        network.close()
        return report
    finally:
        broker_log.removeFilter(quiet)
        shutil.rmtree(data_dir, ignore_errors=True)


def _write_input(broker: Broker, records: int, partitions: int) -> None:
    with Producer(broker, linger_ms=0) as producer:
        for n in range(records):
            producer.send(INPUT, b"in:%d" % n, partition=n % partitions)


def _all_committed(instances: list[_Instance], records: int, partitions: int) -> bool:
    """Has the group committed the end of every input partition (all processed)?"""
    consumer = instances[0].consumer
    committed = consumer.committed([(INPUT, p) for p in range(partitions)])
    ends = [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]
    return all((committed[(INPUT, p)] or 0) == ends[p] for p in range(partitions))  # None: nothing committed


def check_output(broker: Broker, ledger: _Ledger, records: int, partitions: int) -> TransactionalCheck:
    """Read the output read_committed and the group's offsets from ``broker`` and judge them against ``ledger``."""
    transport = InProcessTransport(broker)
    reader = Consumer(transport, isolation_level="read_committed", client_id="checker")
    reader.assign([(OUTPUT, p) for p in range(partitions)])
    reader.seek_to_beginning()
    visible: list[bytes] = []
    while True:
        batch = reader.poll(max_records=100_000)
        if not batch:
            break
        visible += [r.value for r in batch if r.value is not None]  # the application never writes null values
    per_input: Counter[int] = Counter()
    per_txn: Counter[bytes] = Counter()
    aborted_reads = zombie_writes = 0
    for value in visible:
        if value in ledger.zombie_values:
            zombie_writes += 1
            continue
        input_id, txn = _parse_output(value)
        per_input[input_id] += 1
        per_txn[txn] += 1
        if txn in ledger.aborted:
            aborted_reads += 1
    torn = sum(1 for txn, ids in ledger.sent.items() if 0 < per_txn[txn] < len(ids))
    lost = sum(1 for n in range(records) if per_input[n] == 0)
    duplicates = sum(count - 1 for count in per_input.values() if count > 1)
    groups = broker.group_coordinator.offset_fetch(GROUP, [(INPUT, p) for p in range(partitions)],
                                                   require_stable=True)[1]
    mismatches = 0
    by_partition: dict[int, list[int]] = defaultdict(list)
    for n in range(records):
        by_partition[n % partitions].append(n)
    for p, ids in by_partition.items():
        committed = groups[(INPUT, p)].offset
        committed = 0 if committed < 0 else committed
        for offset, n in enumerate(ids):  # the input was written in order, one partition per n % partitions
            if (offset < committed) != (per_input[n] > 0):
                mismatches += 1
    return TransactionalCheck(records, len(visible), len(ledger.committed), len(ledger.aborted), lost, duplicates,
                              aborted_reads, torn, zombie_writes, mismatches)


__all__ = ["TransactionalCheck", "TransactionalReport", "check_output", "simulate_transactional"]
