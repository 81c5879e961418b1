"""Transactions in process: transactions per second (10 records each, on 1 partition and spread over 16), and a
transactional producer's records/s beside an idempotent one's on the same records, in one run.

Every transaction is a full round: AddPartitionsToTxn, the batches, EndTxn with its PrepareCommit record,
one COMMIT marker per partition and the CompleteCommit record (the broker fsyncs each: ``fsync=False`` here
keeps the page cache, as the producer benchmark's in-memory broker does).

Run: scripts/dev bench -k transactions
"""

from __future__ import annotations

import pytest

from idemcore.broker import Broker
from idemcore.client import Producer

TRANSACTIONS = 500
RECORDS_PER_TRANSACTION = 10
#: For records/s: the same records, 1,000 to a transaction.
RECORDS = 100_000
BIG_TRANSACTION = 1_000
VALUES = [b"%0100d" % i for i in range(RECORDS)]  # 100-byte records


def run_transactions(partitions: int, tmp_path) -> None:
    broker = Broker({"bench": partitions}, data_dir=tmp_path / f"txn-{partitions}", fsync=False)
    producer = Producer(broker, transactional_id="bench", linger_ms=0)
    producer.init_transactions()
    n = 0
    for _ in range(TRANSACTIONS):
        producer.begin_transaction()
        for _ in range(RECORDS_PER_TRANSACTION):
            producer.send("bench", VALUES[n % RECORDS], partition=n % partitions)
            n += 1
        producer.commit_transaction()
    producer.close()
    broker.close()


def transactional_records(tmp_path) -> None:
    broker = Broker({"bench": 1}, data_dir=tmp_path / "records-txn", fsync=False)
    producer = Producer(broker, transactional_id="bench", batch_size=1_000_000, linger_ms=5)
    producer.init_transactions()
    for start in range(0, RECORDS, BIG_TRANSACTION):
        producer.begin_transaction()
        for value in VALUES[start:start + BIG_TRANSACTION]:
            producer.send("bench", value)
        producer.commit_transaction()
    producer.close()
    assert broker.log("bench", 0).last_stable_offset == RECORDS + RECORDS // BIG_TRANSACTION  # data + markers
    broker.close()


def idempotent_records(tmp_path) -> None:
    broker = Broker({"bench": 1}, data_dir=tmp_path / "records-idem", fsync=False)
    producer = Producer(broker, batch_size=1_000_000, linger_ms=5)
    for value in VALUES:
        producer.send("bench", value)
    producer.close()
    assert broker.log("bench", 0).log_end_offset == RECORDS
    broker.close()


@pytest.mark.parametrize("partitions", [1, 16])
def bench_transactions_per_second(benchmark, record, tmp_path_factory, partitions):
    def run():
        run_transactions(partitions, tmp_path_factory.mktemp("txn"))
    benchmark.pedantic(run, rounds=3, iterations=1)
    record(f"transactions of 10 records {partitions}-partition", benchmark, TRANSACTIONS)


@pytest.mark.parametrize("name, run", [("transactional", transactional_records), ("idempotent", idempotent_records)])
def bench_transactional_records(benchmark, record, tmp_path_factory, name, run):
    benchmark.pedantic(lambda: run(tmp_path_factory.mktemp("records")), rounds=3, iterations=1)
    record(f"records {name} producer", benchmark, RECORDS)
