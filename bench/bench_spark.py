"""Spark side by side, one run, the same generated data (scripts/dev bench -k spark):

(a) ``idemcore.spark.validate`` on a DataFrame vs an identity ``mapInArrow`` over the same DataFrame;
(b) path-mode ``audit`` of the whole Parquet dataset in local[2] (batches/s, and per core);
(c) the in-process kernel on the same data, one core: kernel alone, and reading + replaying.

The dataset (``idemcore generate``: 4 topics x 64 partitions, 1,000 producers, $IDEMCORE_BENCH_BATCHES
batches, default 20,000,000) is generated once into bench/.data and reused.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from idemcore import BatchMetadata, Origin, get_backend
from idemcore.audit import StreamKeys, replay_table
from idemcore.audit.shards import ShardedState
from idemcore.audit.spark.plan import parquet_files
from idemcore.synth.dataset import DATA_DIR, generate

BATCHES = int(os.environ.get("IDEMCORE_BENCH_BATCHES", 20_000_000))
CORES = 2
FRAME_FILES = 2  # (a) runs over the first files: rows through the JVM-Python hop are the slow part


@pytest.fixture(scope="session")
def dataset() -> Path:
    path = Path(__file__).parent / ".data" / f"spark-{BATCHES}-seed1"
    if not (path / "truth.json").exists():
        generate(path, topics=4, partitions=64, producers=1000, batches=BATCHES, seed=1, overwrite=True)
    return path / DATA_DIR


@pytest.fixture(scope="session")
def spark():
    from idemcore.audit.spark import get_session

    session = get_session(f"local[{CORES}]")
    yield session
    session.stop()


def _noop_write(frame) -> None:
    frame.write.format("noop").mode("overwrite").save()


@pytest.fixture(scope="session")
def frame(spark, dataset):
    files = parquet_files(dataset)[:FRAME_FILES]
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return spark.read.parquet(*files), rows


def bench_spark_a_validate_beside_identity(benchmark, record_seconds, frame):
    """Each round runs the three jobs back to back, so a noisy neighbour slows all three alike."""
    from idemcore.audit.spark import validate as spark_validate
    from idemcore.audit.spark.frame import clustered

    df, rows = frame

    def identity_batches(batches):  # local: pickled by value, the workers cannot import this module
        yield from batches
    jobs = {
        "spark (a) identity mapInArrow": df.mapInArrow(identity_batches, df.schema),
        # What validate pays before its kernel runs: the shuffle by (topic, partition) and the sort by seq_no.
        "spark (a) clustered identity": clustered(df, "seq_no", 2 * CORES).mapInArrow(identity_batches, df.schema),
        "spark (a) validate": spark_validate(df, num_partitions=2 * CORES),
    }
    times: dict[str, list[float]] = {label: [] for label in jobs}

    def one_round() -> None:
        for label, job in jobs.items():
            started = time.perf_counter()
            _noop_write(job)
            times[label].append(time.perf_counter() - started)
    one_round()  # start the Python workers outside the timing
    for seconds in times.values():
        seconds.clear()
    benchmark.pedantic(one_round, rounds=3, iterations=1)
    for label, seconds in times.items():
        record_seconds(label, min(seconds), rows)


def bench_spark_b_path_mode_audit(benchmark, record, spark, dataset):
    from idemcore.audit.spark import audit

    audit(dataset, spark=spark)  # start and warm the Python workers outside the timing
    report = benchmark.pedantic(audit, args=(dataset,), kwargs={"spark": spark}, rounds=3, iterations=1)
    assert report.finding_counts()["sequence_gap"] == 3
    record("spark (b) path-mode audit", benchmark, report.batches)


@pytest.fixture(scope="session")
def tables(dataset):
    return [pq.read_table(f, use_threads=False) for f in parquet_files(dataset)]


def bench_spark_c_in_process_kernel(benchmark, record, tables):
    # The kernel alone, as a worker's replayer runs it (state per stream); each file's columns packed once.
    packed = []
    for table in tables:
        columns = {name: table.column(name).to_numpy() for name in table.schema.names if name != "topic"}
        columns["partition"] = StreamKeys().encode(table.column("topic"), columns["partition"])
        packed.append(BatchMetadata.coerce(columns))

    def run():
        return [ShardedState(Origin.CLIENT, get_backend()).validate(p) for p in packed]
    verdicts = benchmark.pedantic(run, rounds=3, iterations=1)
    assert sum(v.finding_counts().get("sequence_gap", 0) for v in verdicts) == 3
    record("spark (c) in-process kernel", benchmark, sum(t.num_rows for t in tables))


def bench_spark_c_in_process_read_and_replay(benchmark, record, dataset):
    files = parquet_files(dataset)

    def run():
        return [replay_table(pq.read_table(f, use_threads=False)) for f in files]
    results = benchmark.pedantic(run, rounds=3, iterations=1)
    batches = sum(r.batches for r in results)
    assert batches == sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    assert np.sum([r.findings.num_rows for r in results]) > 0
    record("spark (c) in-process read+replay", benchmark, batches)
