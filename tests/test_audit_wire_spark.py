"""`idemcore audit kafka://... --spark`: each Spark task fetches its own partitions over the wire; the report equals
the in-process one (one Spark job for the planted cluster, one for the command line)."""

from __future__ import annotations

import json

import pytest

from idemcore.audit.spark import audit_cluster_spark
from idemcore.audit.spark.cluster_job import plan_tasks, split_ranges
from idemcore.audit.wire import audit_cluster
from idemcore.audit.wire_fetch import PartitionRange
from idemcore.broker import Broker
from idemcore.broker.server import Server
from idemcore.synth.dataset import generate


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A log directory with every kind planted (3 topics x 3 partitions), served by `idemcore serve` in process."""
    out = tmp_path_factory.mktemp("wire-spark") / "ds"
    truth = generate(out, topics=3, partitions=3, producers=30, batches=6000, seed=11, format="kafka")
    broker = Broker({f"topic-00{k}": 3 for k in range(3)}, data_dir=out / "logs", fsync=False, retention_ms=-1)
    server = Server(broker).start()
    yield server.bootstrap, truth
    server.stop()
    broker.close()


def test_plan_tasks_packs_ranges_by_offsets_to_read():
    ranges = [PartitionRange("t", p, 0, size, 0, size) for p, size in enumerate([100, 10, 60, 50, 0])]
    assert plan_tasks(ranges, 2) == [[0, 1, 4], [2, 3]]  # 100+10+0 and 60+50
    assert len(plan_tasks(ranges, 9)) == 5
    with pytest.raises(ValueError, match="at least 1"):
        plan_tasks(ranges, 0)


def test_split_ranges_cuts_large_partitions_into_pieces():
    whole = PartitionRange("t", 0, 10, 35, 0, 35, to_log_end=True)
    pieces = split_ranges([whole, PartitionRange("t", 1, 5, 5, 5, 5)], 10)
    assert [(n, p.partition, p.start, p.end, p.from_batch_start, p.to_log_end) for n, p in pieces] == [
        (0, 0, 10, 20, False, False), (1, 0, 20, 30, True, False), (2, 0, 30, 35, True, True),
        (0, 1, 5, 5, False, False)]


def test_spark_tasks_fetch_their_own_partitions_and_the_report_is_the_in_process_one(spark, served):
    bootstrap, truth = served
    in_process = audit_cluster("kafka://" + bootstrap)
    # Pieces of 700 offsets: every partition is fetched by several tasks and replayed by one, in order.
    with_spark = audit_cluster_spark("kafka://" + bootstrap, spark=spark, tasks=4, range_offsets=700,
                                     max_bytes=8 << 10)
    assert with_spark.finding_counts() == in_process.finding_counts() == truth["findings"]
    assert with_spark.findings.equals(in_process.findings)
    assert with_spark.partitions.equals(in_process.partitions)
    assert with_spark.open_txns.drop_columns(["reason"]).equals(in_process.open_txns.drop_columns(["reason"]))
    assert with_spark.located_findings.equals(in_process.located_findings)
    assert with_spark.ranges.select(["topic", "partition", "start", "end", "next_offset"]).equals(
        in_process.ranges.select(["topic", "partition", "start", "end", "next_offset"]))
    assert with_spark.fetched_bytes >= in_process.fetched_bytes  # (pieces fetch again across their boundaries)
    assert with_spark.hanging_check()["transaction_log"] == "read"


def test_the_command_line_with_spark(spark, served, capsys):
    from idemcore.cli import main

    bootstrap, _ = served
    assert main(["audit", f"kafka://{bootstrap}", "--json", "-q", "--topics", "topic-001"]) == 0
    in_process = json.loads(capsys.readouterr().out)
    # --master local[2] is the running session's: the command reuses it rather than starting one.
    assert main(["audit", f"kafka://{bootstrap}", "--spark", "--master", "local[2]", "--tasks", "3", "--json",
                 "-q", "--topics", "topic-001"]) == 0
    with_spark = json.loads(capsys.readouterr().out)
    for key in ("batches", "findings", "transactions", "hanging_check", "fetched_bytes", "located_findings"):
        assert with_spark[key] == in_process[key], key
    assert in_process["findings"] and in_process["batches"] > 0
