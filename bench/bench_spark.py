"""Spark side by side, one run, the same generated data (scripts/dev bench -k spark):

(a) ``idemcore.spark.validate`` on a DataFrame vs an identity ``mapInArrow`` over the same DataFrame: the default
    route (a plain Parquet scan: no shuffle, files replayed in the workers) and the shuffle route
    (``num_partitions`` given, what every other DataFrame takes);
(b) path-mode ``audit`` of the whole Parquet dataset in local[2] (batches/s, and per core), and its marginal
    rate between two dataset sizes ($IDEMCORE_BENCH_MARGINAL, default 10M and 40M batches), so Spark's start
    and the per-job costs cancel;
(c) the in-process kernel on the same data, one core: kernel alone, reading + replaying, and path mode's tasks as
    its workers run them (the driver's plan, each task's pieces read and replayed, its result row; CPU seconds);
(d) ``audit(df)`` vs an identity ``mapInArrow`` of the same DataFrame: the default route (a plain Parquet scan,
    audited in path mode on its files) and the rows route (the same rows behind a filter: shuffle, sort, Arrow).

The datasets (``idemcore generate``: 4 topics x 64 partitions, 1,000 producers, $IDEMCORE_BENCH_BATCHES
batches, default 20,000,000; and the marginal sizes) are generated once into bench/.data and reused.
"""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from idemcore import BatchColumns, Origin, get_backend
from idemcore.audit import StreamKeys, replay_table
from idemcore.audit.columns import TOPIC
from idemcore.audit.shards import ShardedState
from idemcore.audit.spark.plan import parquet_files
from idemcore.record.parquet_files import open_parquet
from idemcore.synth.dataset import DATA_DIR, generate

BATCHES = int(os.environ.get("IDEMCORE_BENCH_BATCHES", 20_000_000))
CORES = 2
FRAME_FILES = 2  # (a) runs over the first files: rows through the JVM-Python hop are the slow part


#: The two dataset sizes of the marginal path-mode rate (b).
MARGINAL = tuple(int(n) for n in os.environ.get("IDEMCORE_BENCH_MARGINAL", "10000000,40000000").split(","))


def _dataset(batches: int) -> Path:
    path = Path(__file__).parent / ".data" / f"spark-{batches}-seed1-crc"  # (-crc: page CRCs, as generate writes now)
    if not (path / "truth.json").exists():
        generate(path, topics=4, partitions=64, producers=1000, batches=batches, seed=1, overwrite=True)
    return path / DATA_DIR


@pytest.fixture(scope="session")
def dataset() -> Path:
    return _dataset(BATCHES)


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


def _rounds(jobs: dict, rounds: int = 3) -> dict[str, float]:
    """Each round runs the jobs back to back, so a noisy neighbour slows them alike; the best second of each."""
    times: dict[str, list[float]] = {label: [] for label in jobs}
    for job in jobs.values():  # start the Python workers (and the JIT of the JVM) outside the timing
        job()
    for _ in range(rounds):
        for label, job in jobs.items():
            started = time.perf_counter()
            job()
            times[label].append(time.perf_counter() - started)
    return {label: min(seconds) for label, seconds in times.items()}


def bench_spark_a_validate_beside_identity(benchmark, record_seconds, frame):
    from idemcore.audit.spark import validate as spark_validate
    from idemcore.audit.spark.frame import clustered

    df, rows = frame

    def _identity_batches(batches):  # local: pickled by value, the workers cannot import this module
        yield from batches
    jobs = {
        "spark (a) identity mapInArrow": df.mapInArrow(_identity_batches, df.schema),
        # What the shuffle route pays before its kernel runs: the shuffle by (topic, partition) and the sort.
        "spark (a) clustered identity": clustered(df, "seq_no", 2 * CORES).mapInArrow(_identity_batches, df.schema),
        "spark (a) validate": spark_validate(df),  # a plain Parquet scan: no shuffle
        "spark (a) validate via shuffle": spark_validate(df, num_partitions=2 * CORES),
    }
    best = benchmark.pedantic(_rounds, args=({label: partial(_noop_write, job) for label, job in jobs.items()},),
                              rounds=1, iterations=1)
    for label, seconds in best.items():
        record_seconds(label, seconds, rows)
    identity = best["spark (a) identity mapInArrow"]
    print(f"\n(a) {rows:,} batches, best of 3: " + ", ".join(f"{label.removeprefix('spark (a) ')} {seconds:.2f} s "
                                                         f"({identity / seconds:.2f} of identity)"
                                                         for label, seconds in best.items()))


def bench_spark_d_audit_frame_beside_identity(benchmark, record_seconds, spark, frame):
    from pyspark.sql import functions as F

    from idemcore.audit.spark import audit

    df, rows = frame

    def _identity_batches(batches):  # local: pickled by value, the workers cannot import this module
        yield from batches
    rows_route = df.filter(F.col("seq_no") >= 0)  # the same rows, not a plain scan: shuffle, sort, Arrow
    identity = df.mapInArrow(_identity_batches, df.schema)
    jobs = {
        "spark (d) identity mapInArrow": partial(_noop_write, identity),
        "spark (d) audit(df)": partial(audit, df, spark=spark),
        "spark (d) audit(df) rows route": partial(audit, rows_route, spark=spark),
    }
    reports = {label: job() for label, job in jobs.items() if "audit" in label}
    first, second = reports.values()
    assert first.findings.equals(second.findings) and first.partitions.equals(second.partitions)
    best = benchmark.pedantic(_rounds, args=(jobs,), rounds=1, iterations=1)
    for label, seconds in best.items():
        record_seconds(label, seconds, rows)
    print(f"\n(d) {rows:,} batches, best of 3: " + ", ".join(f"{label.removeprefix('spark (d) ')} {seconds:.2f} s "
                                                         f"({rows / seconds / 1e6:.2f} M/s)"
                                                         for label, seconds in best.items())
          + f"; audit(df) / rows route: {best['spark (d) audit(df) rows route'] / best['spark (d) audit(df)']:.2f}x")


def bench_spark_b_path_mode_audit(benchmark, record, spark, dataset):
    from idemcore.audit.spark import audit

    audit(dataset, spark=spark)  # start and warm the Python workers outside the timing
    report = benchmark.pedantic(audit, args=(dataset,), kwargs={"spark": spark}, rounds=3, iterations=1)
    assert report.finding_counts()["sequence_gap"] == 3
    record("spark (b) path-mode audit", benchmark, report.batches)


def bench_spark_b_path_mode_marginal(benchmark, record_seconds, spark):
    """Path-mode audit at two sizes, rounds interleaved: (n2 - n1) / (t2 - t1) / cores, Spark's start cancels."""
    from idemcore.audit.spark import audit

    small, large = (_dataset(n) for n in MARGINAL)
    best = benchmark.pedantic(_rounds, args=({"small": partial(audit, small, spark=spark),
                                              "large": partial(audit, large, spark=spark)},),
                              rounds=1, iterations=1)
    sizes = [sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_files(path)) for path in (small, large)]
    batches, seconds = sizes[1] - sizes[0], best["large"] - best["small"]
    record_seconds("spark (b) marginal path-mode audit", seconds, batches)
    print(f"\n(b) path-mode audit {sizes[0]:,} batches {best['small']:.2f} s, {sizes[1]:,} batches "
          f"{best['large']:.2f} s: marginal {batches / seconds / 1e6:.2f} M batches/s = "
          f"{batches / seconds / 1e6 / CORES:.2f} per core (aim >= 20 per core)")


@pytest.fixture(scope="session")
def tables(dataset):
    return [pq.read_table(f, use_threads=False) for f in parquet_files(dataset)]


def bench_spark_c_in_process_kernel(benchmark, record, tables):
    # The kernel alone, as a worker's replayer runs it (state per stream); each file's columns packed once.
    packed = []
    for table in tables:
        columns = {name: table.column(name).to_numpy() for name in table.schema.names if name != "topic"}
        columns["stream"] = StreamKeys().encode(table.column("topic"), columns.pop("partition"))
        packed.append(BatchColumns.coerce(columns))

    def run():
        return [ShardedState(Origin.CLIENT, get_backend()).validate(p) for p in packed]
    verdicts = benchmark.pedantic(run, rounds=3, iterations=1)
    assert sum(v.finding_counts().get("sequence_gap", 0) for v in verdicts) == 3
    record("spark (c) in-process kernel", benchmark, sum(t.num_rows for t in tables))


def bench_spark_c_in_process_read_and_replay(benchmark, record, dataset):
    files = parquet_files(dataset)

    def run():
        return [replay_table(open_parquet(f, read_dictionary=[TOPIC]).read(use_threads=False)) for f in files]
    results = benchmark.pedantic(run, rounds=3, iterations=1)
    batches = sum(r.batches for r in results)
    assert batches == sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    assert np.sum([r.findings.num_rows for r in results]) > 0
    record("spark (c) in-process read+replay", benchmark, batches)


def bench_spark_c_in_process_path_tasks(benchmark, record_seconds, dataset):
    """What path mode's Python workers do, in this process: plan the tasks as the driver does, then per task read
    its pieces, replay them, build its result row. CPU seconds (``process_time``): other jobs' load cancels. The
    kernel's share of the replay is timed around the engine's call per table span."""
    from idemcore.audit import shards
    from idemcore.audit.replayer import StreamReplayer, feed_in_order
    from idemcore.audit.spark.plan import WATCHED, plan_row_groups, read_footers, read_pieces
    from idemcore.audit.spark.schema import check_arrow_schemas
    from idemcore.audit.spark.task_rows import result_batch
    from idemcore.engine.validate import validate_into

    footers = read_footers(dataset, WATCHED)
    target, order = check_arrow_schemas(((f.path, f.schema) for f in footers), None)
    plans = plan_row_groups([group for footer in footers for group in footer.groups], 2 * CORES)

    kernel = [0.0]

    def timed_kernel(*args, **kwargs):  # the engine's call per table span, timed (256 calls per 10M batches)
        started = time.process_time()
        try:
            return validate_into(*args, **kwargs)
        finally:
            kernel[0] += time.process_time() - started

    def run() -> dict[str, float]:
        stages = {"read": 0.0, "replay": 0.0, "result": 0.0}
        kernel[0] = 0.0
        for plan in plans:
            replayer = StreamReplayer(Origin.CLIENT, order)
            started = time.process_time()
            for piece in read_pieces(plan, target):
                read = time.process_time()
                stages["read"] += read - started
                feed_in_order(piece, replayer)
                started = time.process_time()
                stages["replay"] += started - read
            result_batch(replayer.finish().to_row())
            stages["result"] += time.process_time() - started
        return {**stages, "of which kernel": kernel[0]}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shards, "validate_into", timed_kernel)
        rounds = [run() for _ in range(3)]
    best = min(rounds, key=lambda stages: stages["read"] + stages["replay"] + stages["result"])
    kernel_seconds = best.pop("of which kernel")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    batches = sum(group.rows for footer in footers for group in footer.groups)
    record_seconds("spark (c) in-process path tasks", sum(best.values()), batches)
    print(f"\n(c) path tasks, {batches:,} batches, best of 3 in CPU s: " +
          ", ".join(f"{stage} {seconds:.2f}" for stage, seconds in best.items()) +
          f" (of which the kernel {kernel_seconds:.2f}) = {batches / sum(best.values()) / 1e6:.2f} M batches/s per "
          f"core; per batch: " + ", ".join(f"{stage} {seconds / batches * 1e9:.1f} ns" for stage, seconds in
                                           best.items()) + f", kernel {kernel_seconds / batches * 1e9:.1f} ns")
