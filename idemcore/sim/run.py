"""simulate(): producers writing through a faulty simulated network to one broker, then the checker."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from idemcore.broker import Broker
from idemcore.client import Producer
from idemcore.client.batch import RecordFuture
from idemcore.errors import IdemcoreError
from idemcore.sim.checker import CheckReport, SentRecord, check, encode_value
from idemcore.sim.network import Faults, NetworkStats, SimulatedNetwork

TOPIC = "events"


@dataclass(frozen=True)
class SimulationReport:
    check: CheckReport
    network: NetworkStats
    retries: int
    epoch_bumps: int
    failed_records: int
    virtual_ms: int
    seconds: float
    #: Whether acknowledged records were promised to survive the crashes injected: always for process crashes,
    #: for machine crashes only when the broker fsyncs.
    acks_durable: bool = True

    @property
    def promise_kept(self) -> bool:
        """Exactly once where acks promise it: no duplicate, reordering or wrong offset ever, and no
        acknowledged record lost unless a machine crash took back what was never fsync'd."""
        c = self.check
        return c.exactly_once or (not self.acks_durable and not (c.duplicates or c.out_of_order or c.wrong_offsets))

    @property
    def records_per_s(self) -> float:
        return self.check.sent / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self.check), "retries": self.retries, "epoch_bumps": self.epoch_bumps,
                "failed_records": self.failed_records, "crashes": self.network.crashes,
                "network": asdict(self.network), "virtual_ms": self.virtual_ms,
                "seconds": round(self.seconds, 3), "records_per_s": round(self.records_per_s, 1),
                "exactly_once": self.check.exactly_once, "acks_durable": self.acks_durable,
                "promise_kept": self.promise_kept}


def simulate(
    producers: int = 8,
    partitions: int = 16,
    records: int = 100_000,
    faults: Faults | None = None,
    seed: int = 7,
    idempotence: bool = True,
    records_per_tick: int = 32,
    backend: str | None = None,
    progress: Callable[[int], None] | None = None,
    fsync: bool = False,
) -> SimulationReport:
    """Run ``producers`` producers sending ``records`` records in all, then check the logs.

    With ``idempotence=False`` the producers keep 5 requests in flight without
    sequence numbers, so the same faults show duplicates and reordering.
    ``progress`` is called with the number of records newly resolved.
    ``fsync``: the broker fsyncs every acks=all request. Without it, a process
    crash loses no acknowledged record, but a machine crash
    (``faults.crash_kind="machine"``) may: one broker without fsync keeps acks=all
    records in the page cache only (Kafka relies on replicas there).
    """
    if producers < 1 or partitions < 1 or records < 1:
        raise ValueError("producers, partitions and records must be at least 1")
    faults = faults or Faults()
    # The torn tails the crashes leave are counted in the report, not logged once per restart.
    broker_log = logging.getLogger("idemcore.broker.log")
    quiet = BelowError()
    broker_log.addFilter(quiet)
    data_dir = Path(tempfile.mkdtemp(prefix="idemcore-sim-")) if faults.crash_every else None
    started = time.perf_counter()
    try:
        clock: list[SimulatedNetwork] = []  # the broker's time is the network's virtual time, once it exists
        network = SimulatedNetwork(
            lambda: Broker({TOPIC: partitions}, data_dir=data_dir, backend=backend, fsync=fsync,
                           clock=lambda: clock[0].now if clock else 0), faults, seed)
        clock.append(network)
        clients = [Producer(network, backend=backend, client_id=f"producer-{i}", enable_idempotence=idempotence,
                            max_in_flight_requests_per_connection=5, linger_ms=2, batch_size=2048,
                            request_timeout_ms=100, delivery_timeout_ms=600_000, retry_backoff_ms=5)
                   for i in range(producers)]
        quota = [records // producers + (1 if i < records % producers else 0) for i in range(producers)]
        futures: list[list[RecordFuture]] = [[] for _ in range(producers)]
        resolved = [0] * producers
        # Every crash must let some records through: far more crashes than that means none get through.
        max_crashes = 100 + 10 * records // max(faults.crash_every, 1)
        while True:
            busy = False
            for i, client in enumerate(clients):
                mine = futures[i]
                for _ in range(min(records_per_tick, quota[i] - len(mine))):
                    mine.append(client.send(TOPIC, encode_value(i, len(mine))))
                client.poll()
                before = resolved[i]
                while resolved[i] < len(mine) and mine[resolved[i]].done():
                    resolved[i] += 1
                if progress is not None and resolved[i] > before:
                    progress(resolved[i] - before)
                busy = busy or len(mine) < quota[i] or client.sender.has_pending_work()
            if not busy:
                break
            if network.stats.crashes > max_crashes:
                raise IdemcoreError(
                    f"no progress: the broker crashed {network.stats.crashes} times for {records} records; with "
                    f"crash_every={faults.crash_every} a request's records are rewritten after every crash "
                    f"({'raise crash_every' if idempotence else 'raise crash_every, or turn idempotence on'})")
            network.tick()
        sent = {i: [_outcome(f) for f in futures[i]] for i in range(producers)}
        while network.broker is None:  # the run may end while the broker restarts
            network.tick()
        report = check(sent, network.broker)
        failed = sum(1 for outcomes in sent.values() for s in outcomes if s.offset is None)
        result = SimulationReport(report, network.stats, sum(c.metrics["retries"] for c in clients),
                                  sum(c.metrics["epoch_bumps"] for c in clients), failed, network.now,
                                  time.perf_counter() - started,
                                  acks_durable=fsync or not faults.crash_every or faults.crash_kind == "process")
        network.close()
        return result
    finally:
        broker_log.removeFilter(quiet)
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


class BelowError(logging.Filter):
    """Only errors through: a simulation's expected warnings (torn tails after crashes) are counted, not logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def _outcome(future: RecordFuture) -> SentRecord:
    # Every future is done here; a failed record counts as not acknowledged.
    if future.exception() is not None:
        return SentRecord("", None)
    metadata = future.result()
    return SentRecord(f"{metadata.topic}-{metadata.partition}", metadata.offset)
