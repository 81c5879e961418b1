"""`idemcore audit kafka://...`: the audit of a live cluster over the wire, against `idemcore serve` (in process)
and tansu, with the log-directory audit of the same broker's files as the oracle."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from idemcore.audit.find_hanging import CLEARED, HANGING, LOG_READ, LOG_REFUSED, UNCONFIRMED
from idemcore.audit.logdir import audit_log_dir
from idemcore.audit.wire import WIRE_LOCATED_SCHEMA, audit_cluster
from idemcore.audit.wire_fetch import Position, parse_bootstrap
from idemcore.broker import Broker
from idemcore.broker.server import Server
from idemcore.cli import main
from idemcore.errors import IdemcoreError
from idemcore.net.broker_channel import BlockingBrokerChannel
from idemcore.net.messages import FetchPartition, FetchRequest, InitProducerIdRequest, ProduceRequest
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import decode_stored_batches
from idemcore.synth.dataset import generate
from idemcore.synth.ground_truth import check_against_truth
from idemcore.synth.streams import parse_mix
from tests.peers import TansuProcess
from tests.secured import serving


def _produce(bootstrap: str, topic: str, count: int, partitions: int = 3, **config: Any) -> None:
    """``count`` records from confluent-kafka's idempotent producer, small batches, spread over the partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **{k: v for k, v in config.items() if "." in k}})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(20)
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                              "batch.size": 1500, "log_level": 0, **config})
    for i in range(count):
        producer.produce(topic, value=b"v" * 80, key=str(i).encode(), partition=i % partitions)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _batches_by_decoding(bootstrap: str, topic: str, partitions: int) -> int:
    """The batches of ``topic`` counted another way: every record decoded by idemcore's v2 decoder."""
    host, port = parse_bootstrap("kafka://" + bootstrap)[0]
    channel = BlockingBrokerChannel(host, port, "count")
    total = 0
    try:
        for partition in range(partitions):
            offset = 0
            for _ in range(10_000):  # bounded
                answer = channel.call(FetchRequest((FetchPartition(topic, partition, offset, 1 << 20),),
                                                   max_wait_ms=100))
                mine = answer.partitions  # type: ignore[union-attr]
                stored = decode_stored_batches(topic, partition, mine[0].records) if mine else ()
                if not stored:
                    break
                total += len(stored)
                offset = stored[-1].next_offset
    finally:
        channel.close()
    return total


@pytest.fixture(params=["serve", "tansu"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """``(name, bootstrap, log dir or None)`` of `idemcore serve` (in process) and of tansu."""
    if request.param == "serve":
        broker = Broker({}, data_dir=tmp_path / "kafka-logs", fsync=False)
        server = Server(broker).start()
        try:
            yield "serve", server.bootstrap, tmp_path / "kafka-logs"
        finally:
            server.stop()
            broker.close()
    else:
        with TansuProcess() as tansu:
            yield "tansu", tansu.bootstrap, None


def _user_topics(table: pa.Table, topics: set[str]) -> pa.Table:
    return table.filter(pa.compute.is_in(table.column("topic"), pa.array(sorted(topics))))


def test_clean_topics_have_no_finding_and_every_batch_is_counted(cluster):
    _, bootstrap, log_dir = cluster
    _produce(bootstrap, "clean", 3000)
    report = audit_cluster("kafka://" + bootstrap)
    assert report.finding_counts() == {}
    assert report.problems == ()
    assert report.open_txns.num_rows == 0
    assert sorted(report.partitions.column("partition").to_pylist()) == [0, 1, 2]
    assert sum(report.partitions.column("records").to_pylist()) == 3000
    assert report.batches == _batches_by_decoding(bootstrap, "clean", 3) > 30
    assert report.fetched_bytes > 3000 * 80
    if log_dir is not None:  # the broker's own files, audited as a log directory, say the same
        files = audit_log_dir(log_dir)
        assert _user_topics(files.partitions, {"clean"}).equals(report.partitions)
        assert files.batches == report.batches


def _raw_producer(server: Server) -> tuple[BlockingBrokerChannel, int, int]:
    host, port = server.bootstrap.rsplit(":", 1)
    channel = BlockingBrokerChannel(host, int(port), "crafted")
    answer = channel.call(InitProducerIdRequest())
    return channel, answer.producer_id, answer.producer_epoch  # type: ignore[union-attr]


def test_anomalies_planted_by_a_raw_client_are_found_at_their_offsets(tmp_path):
    """Batches crafted by idemcore's wire client, which the broker accepts because it forgot the producer in
    between (producer.id.expiration.ms: Kafka accepts any sequence and epoch from a producer it has no state
    for), while the log keeps every batch: the audit, replaying the whole log, finds each at its offset."""
    broker = Broker({"plant": 1}, data_dir=tmp_path / "kafka-logs", fsync=False)
    server = Server(broker).start()
    try:
        channel, pid, epoch = _raw_producer(server)

        def send(sequence: int, producer_epoch: int = epoch) -> int:
            batch = RecordBatch("plant", 0, [b"v"] * 5, producer_id=pid, producer_epoch=producer_epoch,
                                base_sequence=sequence, max_timestamp=int(time.time() * 1000))
            (answer,) = channel.call(ProduceRequest((batch,))).responses  # type: ignore[union-attr]
            assert answer.error_code == 0, answer
            return answer.base_offset

        def forget() -> None:
            assert broker.remove_expired_producers(int(time.time() * 1000) + 10 ** 10) == 1

        for sequence in range(0, 30, 5):
            send(sequence)
        forget()
        beyond_window = send(0)
        forget()
        gap = send(60)
        send(0, epoch + 3)
        forget()
        regression = send(0, epoch + 1)
        channel.close()
        report = audit_cluster("kafka://" + server.bootstrap)
        found = report.located_findings.select(["base_offset", "base_sequence", "producer_epoch", "finding"])
        assert found.to_pylist() == [
            {"base_offset": beyond_window, "base_sequence": 0, "producer_epoch": epoch,
             "finding": "duplicate_beyond_window"},
            {"base_offset": gap, "base_sequence": 60, "producer_epoch": epoch, "finding": "sequence_gap"},
            {"base_offset": regression, "base_sequence": 0, "producer_epoch": epoch + 1,
             "finding": "epoch_regression"}]
        assert report.located_findings.schema == WIRE_LOCATED_SCHEMA
        assert set(report.located_findings.column("leader").to_pylist()) == {broker.broker_id}
        files = audit_log_dir(tmp_path / "kafka-logs" / "plant-0")
        # (a log directory's findings also say where each batch lies: file, segment, position)
        assert files.findings.select(report.findings.column_names).equals(report.findings)
        assert files.partitions.equals(report.partitions)
    finally:
        server.stop()
        broker.close()


def test_a_served_log_with_every_kind_planted_gives_the_log_dir_report_and_the_ground_truth(tmp_path):
    """A Kafka log directory written with planted anomalies of every kind the format holds, served by `idemcore
    serve`: the report over the wire equals the log directory's (findings, partitions, open transactions), matches
    the ground truth batch by batch, and its hanging transactions are confirmed by asking the coordinator."""
    truth = generate(tmp_path / "ds", topics=2, partitions=3, producers=20, batches=3000, seed=3, format="kafka",
                     segment_bytes=64 << 10)
    logs = tmp_path / "ds" / "logs"
    files = audit_log_dir(logs)
    # (retention off: the generated batches are older than a week, and the server's housekeeping would delete them)
    broker = Broker({"topic-000": 3, "topic-001": 3}, data_dir=logs, fsync=False, retention_ms=-1)
    server = Server(broker).start()
    try:
        report = audit_cluster("kafka://" + server.bootstrap, max_bytes=16 << 10)  # many fetches per partition
        unasked = audit_cluster("kafka://" + server.bootstrap, confirm_hanging=False)
    finally:
        server.stop()
        broker.close()
    assert set(report.located_open_txns.column("leader").to_pylist()) == {broker.broker_id}
    assert unasked.hanging_check()["transaction_log"] == "ignored"
    assert set(unasked.hanging_transactions().column("verdict").to_pylist()) == {UNCONFIRMED}
    assert check_against_truth(report, truth).ok
    assert report.finding_counts() == files.finding_counts() == truth["findings"]
    assert report.findings.equals(files.findings.select(report.findings.column_names))
    assert report.partitions.equals(files.partitions)
    keep = ["topic", "partition", "producer_id", "producer_epoch", "first_offset", "idle_ms"]
    assert report.open_txns.select(keep).equals(files.open_txns.select(keep))
    located = files.located_findings.select(["topic", "partition", "base_offset", "finding"])
    assert report.located_findings.select(located.column_names).equals(located)
    # The coordinator was asked (it knows none of the generated producers): each candidate confirmed hanging.
    assert report.transaction_log_status == LOG_READ
    assert set(report.hanging_transactions().column("verdict").to_pylist()) == {HANGING}
    assert report.hanging_transactions().num_rows == truth["findings"]["hanging_transaction"]


_KILLED = """
import os, signal, sys
from confluent_kafka import Producer
bootstrap, txn_id, timeout_ms, topic = sys.argv[1:5]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 1,
                     "transaction.timeout.ms": int(timeout_ms), "log_level": 0})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(20):
    producer.produce(topic, value=b"never committed", partition=0)
assert producer.flush(30) == 0
os.kill(os.getpid(), signal.SIGKILL)
"""


def _kill_mid_transaction(bootstrap: str, topic: str, timeout_ms: int) -> None:
    done = subprocess.run([sys.executable, "-c", _KILLED, bootstrap, f"killed-{uuid.uuid4().hex[:6]}",
                           str(timeout_ms), topic], timeout=60, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def test_a_producer_sigkilled_mid_transaction_hangs_only_where_no_broker_aborts_it(cluster):
    """idemcore serve aborts the transaction at its timeout (an ABORT marker, nothing open); tansu keeps it open,
    so the audit reports it hanging."""
    name, bootstrap, _ = cluster
    _produce(bootstrap, "txn", 50, partitions=1)
    _kill_mid_transaction(bootstrap, "txn", 1500)
    deadline = time.monotonic() + 20
    report = None
    while time.monotonic() < deadline:  # bounded: the timeout, then the broker's next housekeeping round
        time.sleep(1)
        report = audit_cluster("kafka://" + bootstrap, hanging_after_ms=1000, now_ms=int(time.time() * 1000))
        if name == "tansu" or report.open_txns.num_rows == 0:
            break
    assert report is not None
    if name == "serve":
        assert report.open_txns.num_rows == 0
        assert report.transactions()["aborted"] == 1
        assert report.transactions()["aborted_records"] == 20
    else:
        (hanging,) = report.hanging_transactions().to_pylist()
        assert (hanging["topic"], hanging["partition"]) == ("txn", 0)
        # tansu speaks no ListTransactions (measured): the candidate stays unconfirmed, the reason says why.
        assert hanging["verdict"] == UNCONFIRMED
        assert report.hanging_check()["transaction_log"] == LOG_REFUSED
        assert report.transactions()["aborted"] == 0
    assert report.finding_counts().get("hanging_transaction", 0) == (0 if name == "serve" else 1)


def test_an_open_transaction_the_coordinator_will_end_is_cleared(kafka_server):
    """A live transaction idle past the bound: ListTransactions/DescribeTransactions show the coordinator has the
    partition in its transaction, so it is cleared, not hanging."""
    from idemcore.client import Producer
    from idemcore.net.tcp import TcpTransport

    _produce(kafka_server.bootstrap, "live", 10, partitions=1)
    with TcpTransport(kafka_server.bootstrap) as transport:
        producer = Producer(transport, transactional_id="still-going", linger_ms=1, transaction_timeout_ms=60_000)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("live", b"open", partition=0)
        producer.flush()
        report = audit_cluster("kafka://" + kafka_server.bootstrap, hanging_after_ms=0,
                               now_ms=int(time.time() * 1000) + 5_000)
        producer.abort_transaction()
    (txn,) = report.open_txns.to_pylist()
    assert (txn["verdict"], txn["transactional_id"], txn["coordinator_state"]) == (CLEARED, "still-going",
                                                                                   "Ongoing")
    assert report.hanging_check()["transaction_log"] == LOG_READ


def test_from_and_to(kafka_server):
    bootstrap = kafka_server.bootstrap
    _produce(bootstrap, "ranged", 600, partitions=1)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    _produce_more(bootstrap, "ranged", 400)
    whole = audit_cluster("kafka://" + bootstrap, topics=["ranged"])
    assert whole.partitions.column("records").to_pylist() == [1000]
    later = audit_cluster("kafka://" + bootstrap, topics=["ranged"], start=str(middle))
    assert later.partitions.column("records").to_pylist() == [400]
    earlier = audit_cluster("kafka://" + bootstrap, topics=["ranged"], end=str(middle))
    assert earlier.partitions.column("records").to_pylist() == [600]
    assert later.batches + earlier.batches == whole.batches
    tail = audit_cluster("kafka://" + bootstrap, topics=["ranged"], start="latest-1")  # its last batch
    assert tail.batches == 1
    assert tail.ranges.column("end").to_pylist() == [1000]
    nothing = audit_cluster("kafka://" + bootstrap, topics=["ranged"], start="latest")
    assert nothing.batches == 0
    part = audit_cluster("kafka://" + bootstrap, topics=["ranged"], start="offset:600", end="offset:600")
    assert part.batches == 0


def _produce_more(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                              "batch.size": 1500, "log_level": 0})
    for _ in range(count):
        producer.produce(topic, value=b"w" * 80, partition=0)
    assert producer.flush(30) == 0


def test_positions_and_addresses_are_parsed_or_refused_in_one_line():
    assert Position.parse("earliest") == Position("earliest")
    assert Position.parse("latest-25") == Position("latest", 25)
    assert Position.parse("offset:7") == Position("offset", 7)
    assert Position.parse("1700000000000") == Position("timestamp", 1_700_000_000_000)
    assert Position.parse("2023-11-14T22:13:20Z") == Position("timestamp", 1_700_000_000_000)
    with pytest.raises(IdemcoreError, match="time zone"):
        Position.parse("2023-11-14T22:13:20")
    with pytest.raises(IdemcoreError, match="'yesterday' is not earliest"):
        Position.parse("yesterday")
    assert parse_bootstrap("kafka://a:9092,[::1]:9093") == [("a", 9092), ("::1", 9093)]
    for bad in ("kafka://", "kafka://host", "kafka://h:0", "http://h:1"):
        with pytest.raises(IdemcoreError):
            parse_bootstrap(bad)


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_the_command_line_over_sasl_with_a_client_properties_file(tmp_path, capsys, protocol):
    from tests.tls_certs import TestCA

    settings = {"listeners": f"{protocol}://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    client = {"security.protocol": protocol, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
              "sasl.password": "carol-secret"}
    trust = ""
    if protocol == "SASL_SSL":
        ca = TestCA(tmp_path)
        cert = ca.issue("broker", server=True, CN="localhost")
        settings.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore)})
        client["ssl.ca.location"] = str(ca.path)
        trust = f"ssl.truststore.type=PEM\nssl.truststore.location={ca.path}\n"
    with serving(tmp_path, {"carol": "carol-secret"}, **settings) as (server, sessions):
        _produce(server.bootstrap, "secured", 500, partitions=2, **client)
        properties = tmp_path / "client.properties"
        properties.write_text(f"security.protocol={protocol}\nsasl.mechanism=SCRAM-SHA-256\n{trust}"
                              'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                              'username="carol" password="carol-secret";\n')
        capsys.readouterr()
        assert main(["audit", f"kafka://{server.bootstrap}", "--config", str(properties), "--json",
                     "--topics", "secured", "--out", str(tmp_path / "report")]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["findings"] == {} and summary["batches"] > 10
        assert summary["fetched_bytes"] > 500 * 80
        assert json.loads((tmp_path / "report" / "summary.json").read_text())["bootstrap"].startswith("kafka://")
        assert {str(s.principal) for s in sessions} >= {"User:carol"}
        assert {s.security_protocol for s in sessions} == {protocol}
        # Without the properties the broker is not reached: one line naming it.
        assert main(["audit", f"kafka://{server.bootstrap}", "--topics", "secured"]) == 2
        assert "idemcore: error:" in capsys.readouterr().err


def test_the_command_line_text_report_locates_findings_by_offset(tmp_path, capsys):
    truth = generate(tmp_path / "ds", topics=1, partitions=2, producers=8, batches=800, seed=5, format="kafka")
    broker = Broker({"topic-000": 2}, data_dir=tmp_path / "ds" / "logs", fsync=False, retention_ms=-1)
    server = Server(broker).start()
    try:
        capsys.readouterr()
        assert main(["audit", f"kafka://{server.bootstrap}", "--html", str(tmp_path / "r.html")]) == 0
        out = capsys.readouterr().out
    finally:
        server.stop()
        broker.close()
    assert "findings by offset" in out and f"from kafka://{server.bootstrap}" in out
    for name, count in truth["findings"].items():
        assert any(line.split() == [name, str(count)] for line in out.splitlines()), name
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_options_of_a_cluster_are_refused_elsewhere_and_an_unreachable_cluster_is_one_line(tmp_path, capsys):
    assert main(["audit", str(tmp_path), "--topics", "a"]) == 2
    assert "--topics goes with a cluster" in capsys.readouterr().err
    assert main(["audit", "kafka://127.0.0.1:1"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("idemcore: error: no broker of kafka://127.0.0.1:1 answered")



def test_follow_a_cluster_reports_each_finding_once_across_a_restart(tmp_path):
    """`audit --follow kafka://`: each round fetches on from where the last stopped; a crafted gap is one finding
    in one round's file; a follower restarted from the checkpoint reads on without reporting it again."""
    from idemcore.audit.follow import read_findings
    from idemcore.audit.wire_follow import follow_cluster

    broker = Broker({}, data_dir=tmp_path / "kafka-logs", fsync=False)
    server = Server(broker).start()
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    url = "kafka://" + server.bootstrap
    try:
        _produce_more_to(server.bootstrap, "followed", 300, partitions=2)
        (first,) = follow_cluster(url, out, checkpoint, rounds=1, fsync=False)
        assert first.findings.num_rows == 0 and first.batches > 0
        channel, pid, epoch = _raw_producer(server)
        batch = RecordBatch("followed", 1, [b"v"] * 3, producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            max_timestamp=int(time.time() * 1000))
        assert channel.call(ProduceRequest((batch,))).responses[0].error_code == 0  # type: ignore[union-attr]
        broker.remove_expired_producers(int(time.time() * 1000) + 10 ** 10)
        gap = dataclasses.replace(batch, base_sequence=10)
        (answer,) = channel.call(ProduceRequest((gap,))).responses  # type: ignore[union-attr]
        assert answer.error_code == 0
        channel.close()
        second, third = follow_cluster(url, out, checkpoint, rounds=2, interval_ms=10, fsync=False)
        assert second.batches == 2 and third.batches == 0
        assert second.findings.select(["topic", "partition", "base_offset", "finding"]).to_pylist() == [
            {"topic": "followed", "partition": 1, "base_offset": answer.base_offset, "finding": "sequence_gap"}]
        assert third.findings.num_rows == 0
        _produce_more_to(server.bootstrap, "followed", 100, partitions=2, create=False)
        (fourth,) = follow_cluster(url, out, checkpoint, rounds=1, fsync=False)  # a restart: from the checkpoint
        assert fourth.round == 4 and fourth.findings.num_rows == 0 and fourth.batches > 0
        assert fourth.total_batches == first.batches + 2 + fourth.batches
        assert read_findings(out).column("finding").to_pylist() == ["sequence_gap"]
        assert sum(fourth.report.partitions.column("log_end_offset").to_pylist()) == 300 + 6 + 100
    finally:
        server.stop()
        broker.close()


def _produce_more_to(bootstrap: str, topic: str, count: int, partitions: int, create: bool = True) -> None:
    if create:
        _produce(bootstrap, topic, count, partitions=partitions)
        return
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                              "batch.size": 1500, "log_level": 0})
    for i in range(count):
        producer.produce(topic, value=b"x" * 80, partition=i % partitions)
    assert producer.flush(30) == 0


def test_follow_on_the_command_line_prints_a_line_per_round_and_stops_on_sigint(tmp_path):
    import signal

    truth = generate(tmp_path / "ds", topics=1, partitions=1, producers=5, batches=300, seed=2, format="kafka",
                     anomalies=parse_mix("sequence_gap=1"))
    broker = Broker({"topic-000": 1}, data_dir=tmp_path / "ds" / "logs", fsync=False, retention_ms=-1)
    server = Server(broker).start()
    try:
        follower = subprocess.Popen([sys.executable, "-m", "idemcore.cli", "audit", "--follow",
                                     f"kafka://{server.bootstrap}", "--out", str(tmp_path / "out"),
                                     "--interval-ms", "100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines = []
        deadline = time.monotonic() + 60
        assert follower.stdout is not None
        while time.monotonic() < deadline:  # bounded: until the first round that read something
            line = follower.stdout.readline()
            lines.append(line)
            if not line or " batches (" in line:
                break
        follower.send_signal(signal.SIGINT)
        rest, errors = follower.communicate(timeout=60)
    finally:
        server.stop()
        broker.close()
    assert follower.returncode == 0, errors
    (found,) = [line for line in lines if "sequence_gap" in line]
    (planted,) = [p for p in truth["planted"] if p["finding"] == "sequence_gap"]
    assert f"base_offset {planted['base_offset']}" in found and "topic-000-0" in found
    assert f"round 1: {truth['batches']:,} batches" in "".join(lines)
    assert "stopped after" in rest and "1 sequence_gap" in rest


def test_a_principal_that_may_describe_only_some_ids_confirms_only_those(tmp_path):
    """ListTransactions shows a principal only the ids it may describe: a transaction of an id it may describe is
    judged (cleared: the coordinator tracks it); one whose id it cannot see is left unconfirmed, not confirmed
    hanging (an id nobody uses is refused too, so some ids are hidden)."""
    from idemcore.client import Producer
    from idemcore.net.tcp import TcpTransport
    from idemcore.protocol.acls import AclOperation as Op
    from idemcore.protocol.acls import AclResourceType as Kind
    from tests.authz_model import AllowSet

    broker = Broker({"guarded": 2}, data_dir=tmp_path / "kafka-logs", fsync=False)
    server = Server(broker).start()
    try:
        with TcpTransport(server.bootstrap) as transport:
            producers = []
            for partition, transactional_id in enumerate(("visible", "hidden")):
                producer = Producer(transport, transactional_id=transactional_id, linger_ms=1,
                                    transaction_timeout_ms=60_000)
                producer.init_transactions()
                producer.begin_transaction()
                producer.send("guarded", b"open", partition=partition)
                producer.flush()
                producers.append(producer)
            anonymous = "User:ANONYMOUS"
            broker.authorizer = AllowSet().allow(Op.READ, Kind.TOPIC, "guarded", principal=anonymous).allow(
                Op.DESCRIBE, Kind.TOPIC, "guarded", principal=anonymous).allow(
                Op.DESCRIBE, Kind.TRANSACTIONAL_ID, "visible", principal=anonymous)
            report = audit_cluster("kafka://" + server.bootstrap, topics=["guarded"], hanging_after_ms=0,
                                   now_ms=int(time.time() * 1000) + 5_000)
            broker.authorizer = None
            for producer in producers:
                producer.abort_transaction()
    finally:
        server.stop()
        broker.close()
    verdicts = {row["partition"]: (row["verdict"], row["transactional_id"]) for row in report.open_txns.to_pylist()}
    assert verdicts == {0: (CLEARED, "visible"), 1: (UNCONFIRMED, None)}
    assert "may describe" in report.hanging_check()["read"]


def test_follow_reads_on_as_topics_grow(cluster, tmp_path):
    """On both peers: a round reads what was written since the last one, every batch once."""
    from idemcore.audit.wire_follow import ClusterFollower

    _, bootstrap, _ = cluster
    _produce(bootstrap, "growing", 400, partitions=2)
    follower = ClusterFollower("kafka://" + bootstrap, checkpoint=tmp_path / "ckpt", topics=["growing"],
                               fsync=False)
    try:
        first = follower.poll()
        assert follower.poll().batches == 0
        _produce_more_to(bootstrap, "growing", 200, partitions=2, create=False)
        third = follower.poll()
    finally:
        follower.close()
    assert first.batches > 0 and third.batches > 0
    assert third.total_batches == first.batches + third.batches == _batches_by_decoding(bootstrap, "growing", 2)
    assert third.findings.num_rows == 0


def test_a_corrupt_batch_tansu_accepted_is_reported_at_its_offset_and_not_replayed():
    """tansu stores a produced batch whose CRC does not match (Kafka refuses it: CORRUPT_MESSAGE) and serves it:
    the audit names it by offset and replays the batches around it."""
    from idemcore.net.messages import CreateTopicsRequest, NewTopic
    from idemcore.record.v2 import encode_record_batch

    with TansuProcess() as tansu:
        host, port = parse_bootstrap("kafka://" + tansu.bootstrap)[0]
        channel = BlockingBrokerChannel(host, port, "crafted")
        channel.call(CreateTopicsRequest((NewTopic("corrupt", 1),)))
        good = RecordBatch("corrupt", 0, [b"value-%d" % i for i in range(5)], max_timestamp=int(time.time() * 1000))
        damaged = bytearray(encode_record_batch(good, 0))
        damaged[-2] ^= 0xFF  # a record's byte: the header reads, the CRC-32C does not match
        offsets = []
        for batch in (good, dataclasses.replace(good, wire=bytes(damaged)), good):
            (answer,) = channel.call(ProduceRequest((batch,))).responses  # type: ignore[union-attr]
            assert answer.error_code == 0
            offsets.append(answer.base_offset)
        channel.close()
        report = audit_cluster("kafka://" + tansu.bootstrap, topics=["corrupt"])
    assert [(p.offset, p.kind) for p in report.problems] == [(offsets[1], "crc_mismatch")]
    assert report.batches == 2 and report.finding_counts() == {}
