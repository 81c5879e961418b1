"""A path-mode task's replay around the kernel: stream keys, stream order, counts, timeline, findings.

StreamReplayer fed (feed_in_order) and finished on 4M batches held in memory as an Arrow table of 256 streams
(4 topics x 64 partitions), with the anomalies and transactions of the synthetic dataset: clustered by stream
(as the dataset's Parquet files hold them; topic a dictionary or a plain string) and in arrival order (streams
interleaved row by row).

Run: scripts/dev bench -k replay
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from idemcore.audit.replayer import StreamReplayer, feed_in_order
from idemcore.synth.streams import inject_anomalies, synthetic_stream

BATCHES = 4_000_000
TOPICS, PARTITIONS = 4, 64
LAYOUTS = ["clustered-dictionary", "clustered-string", "interleaved"]


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    columns = synthetic_stream(BATCHES, n_producers=1000, n_partitions=TOPICS * PARTITIONS, seed=1)
    columns, _, _ = inject_anomalies(columns, seed=1)
    columns["seq_no"] = np.arange(len(columns["partition"]), dtype=np.int64)
    stream = columns.pop("partition").astype(np.int32)
    names = pa.array([f"topic-{k:03d}" for k in range(TOPICS)])
    topic = pa.DictionaryArray.from_arrays(pa.array(stream // PARTITIONS), names)
    arrival = pa.table({"topic": topic, "partition": stream % PARTITIONS, **columns})
    clustered = arrival.take(np.argsort(stream, kind="stable"))  # a stream's rows together, in arrival order
    return {"clustered-dictionary": clustered,
            "clustered-string": clustered.set_column(0, "topic", clustered.column("topic").cast(pa.string())),
            "interleaved": arrival}


@pytest.mark.parametrize("layout", LAYOUTS)
def bench_replay_counts(benchmark, tables, record, layout):
    table = tables[layout]

    def replay():
        replayer = StreamReplayer()
        feed_in_order(table, replayer)
        return replayer.finish()

    result = benchmark.pedantic(replay, rounds=3, iterations=1, warmup_rounds=1)
    assert result.batches == table.num_rows and result.findings.num_rows > 0
    record(f"replay {layout}", benchmark, table.num_rows)
