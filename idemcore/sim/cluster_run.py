"""simulate_cluster(): idempotent (or acks=1) producers and consumers against a simulated replicated cluster under
faults (:mod:`idemcore.sim.cluster`), then the clients' checker (:mod:`idemcore.sim.cluster_checker`)."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

from idemcore.client import Producer
from idemcore.client.batch import RecordFuture
from idemcore.errors import IdemcoreError
from idemcore.sim.checker import encode_value
from idemcore.sim.cluster import TOPIC, ClusterFaults, ClusterSim, ClusterStats
from idemcore.sim.cluster_checker import ClusterCheck, Position, Record, check_cluster

#: How long (virtual ms) the healed cluster may take to agree before the run is called unsettled.
SETTLE_MS = 30_000


@dataclass(frozen=True)
class ClusterReport:
    seed: int
    faults: ClusterFaults
    check: ClusterCheck
    stats: ClusterStats
    failed_records: int  # not acknowledged (gave up: delivery timeout, or a non-retriable answer)
    settled: bool  # the replicas agreed after the faults healed (else the final read is of whatever leads)
    virtual_ms: int
    seconds: float

    def to_dict(self) -> dict:
        return {"seed": self.seed, **asdict(self.check), "anomalies": self.check.anomalies,
                "failed_records": self.failed_records, "settled": self.settled, **asdict(self.stats),
                "virtual_ms": self.virtual_ms, "seconds": round(self.seconds, 3)}


def simulate_cluster(seed: int = 0, faults: ClusterFaults | None = None, *, producers: int = 3, partitions: int = 3,
                     records: int = 1_500, send_interval_ms: int = 6, backend: str | None = None) -> ClusterReport:
    """Run ``producers`` producers sending ``records`` records in all (each one record every
    ``send_interval_ms``, so the faults meet a steady stream for a few virtual seconds), heal the faults, let the
    replicas agree, read every partition, and check what the clients saw. Producers are idempotent with acks=all;
    with ``faults.acks == 1`` they cannot be (Kafka requires acks=all for idempotence) and retry without
    sequences, so duplicates and reordering are theirs, not the cluster's."""
    faults = faults or ClusterFaults()
    if producers < 1 or partitions < 1 or records < 1 or send_interval_ms < 1:
        raise ValueError("producers, partitions, records and send_interval_ms must be at least 1")
    # Crashes, truncations and torn tails are counted in the report, not logged by the thousand.
    quiet = logging.getLogger("idemcore")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    started = time.perf_counter()
    sim = ClusterSim(partitions, faults, seed, backend=backend)
    try:
        idempotent = faults.acks == -1
        clients = [Producer(sim, backend=backend, client_id=f"producer-{i}", enable_idempotence=idempotent,
                            acks=faults.acks, max_in_flight_requests_per_connection=5, linger_ms=2, batch_size=1024,
                            request_timeout_ms=300, delivery_timeout_ms=120_000, retry_backoff_ms=10)
                   for i in range(producers)]
        quota = [records // producers + (1 if i < records % producers else 0) for i in range(producers)]
        futures: list[list[RecordFuture]] = [[] for _ in range(producers)]
        for _ in range(10_000_000):
            busy = False
            for i, client in enumerate(clients):
                mine = futures[i]
                if len(mine) < quota[i] and (sim.now + i) % send_interval_ms == 0:
                    mine.append(client.send(TOPIC, encode_value(i, len(mine))))
                client.poll()
                busy = busy or len(mine) < quota[i] or client.sender.has_pending_work()
            if not busy:
                break
            sim.tick()
        else:
            raise IdemcoreError(f"seed {seed}: the producers never finished")
        sim.heal()
        deadline = sim.now + SETTLE_MS
        while not sim.settled() and sim.now < deadline:
            sim.tick()
        settled = sim.settled()
        acked: dict[Record, Position | None] = {}
        failed = 0
        for i, mine in enumerate(futures):
            for number, future in enumerate(mine):
                if future.exception() is not None:
                    failed += 1
                    continue
                metadata = future.result()
                acked[(i, number)] = (f"{metadata.topic}-{metadata.partition}", metadata.offset)
        final = sim.final_read() if settled else {}
        check = check_cluster(records, acked, sim.reads, final)
        return ClusterReport(seed, faults, check, sim.stats, failed, settled, sim.now, time.perf_counter() - started)
    finally:
        sim.close()
        quiet.setLevel(level)


__all__ = ["ClusterReport", "simulate_cluster"]
