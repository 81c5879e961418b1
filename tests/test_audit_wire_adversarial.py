"""The audit over the wire against a cluster that answers wrongly: every answer it cannot use is a problem of its
partition at its offset (never a silent end of the partition, never the end of the whole audit), and every wait is
bounded. The answers of `idemcore serve` (in process) are altered on their way to the audit."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import idemcore.audit.wire_fetch as wire_fetch
from idemcore.audit import wire
from idemcore.audit.wire_fetch import ClusterReader, Position, parse_bootstrap
from idemcore.broker import Broker
from idemcore.broker.server import Server
from idemcore.net.broker_channel import BlockingBrokerChannel
from idemcore.net.messages import FetchResponse, InitProducerIdRequest, ProduceRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch

Hook = Callable[[Any, Any], Any]


class _Altering:
    """A broker channel whose answers go through ``hook(request, answer)``."""

    def __init__(self, inner: BlockingBrokerChannel, hook: Hook):
        self.inner, self.hook = inner, hook

    def call(self, request: Any) -> Any:
        return self.hook(request, self.inner.call(request))

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, Callable[[Hook], None]]]:
    """`idemcore serve` with topic ``t`` (2 partitions, 10 batches of 3 records each), and ``alter(hook)``: the
    audits that follow read it through ``hook``. Retries are few, so a refused answer is said quickly."""
    monkeypatch.setattr(wire_fetch, "ATTEMPTS", 3)
    monkeypatch.setattr(wire_fetch, "EMPTY_TRIES", 2, raising=False)
    broker = Broker({"t": 2}, data_dir=tmp_path / "logs", fsync=False)
    server = Server(broker).start()
    host, port = server.bootstrap.rsplit(":", 1)
    channel = BlockingBrokerChannel(host, int(port), "planter")
    for i in range(20):
        batch = RecordBatch("t", i % 2, [b"x" * 100] * 3, max_timestamp=int(time.time() * 1000))
        assert channel.call(ProduceRequest((batch,))).responses[0].error_code == 0  # type: ignore[union-attr]
    channel.close()

    def alter(hook: Hook) -> None:
        class Altered(ClusterReader):
            def channel(self, address: tuple[str, int]) -> Any:
                return _Altering(super().channel(address), hook)
        monkeypatch.setattr(wire, "ClusterReader", Altered)

    try:
        yield server, alter
    finally:
        server.stop()
        broker.close()


def _fetches(change: Callable[[Any], Any], after: int = 0) -> Hook:
    """A hook changing each partition of every Fetch answer after the first ``after`` ones."""
    seen = [0]

    def hook(request: Any, answer: Any) -> Any:
        if not isinstance(answer, FetchResponse):
            return answer
        seen[0] += 1
        if seen[0] <= after:
            return answer
        return dataclasses.replace(answer, partitions=tuple(change(p) for p in answer.partitions))
    return hook


def _audit(server: Server, **options: Any) -> Any:
    return wire.audit_cluster("kafka://" + server.bootstrap, topics=["t"], **options)


def _problems(report: Any) -> list[tuple[int, int, str]]:
    return [(p.partition, p.offset, p.kind) for p in report.problems]


def test_an_answer_for_another_partition_is_a_problem_not_an_empty_partition(served):
    server, alter = served
    alter(_fetches(lambda p: dataclasses.replace(p, partition=1 - p.partition)))
    report = _audit(server)
    assert report.batches == 0
    assert _problems(report) == [(0, 0, "fetch_error"), (1, 0, "fetch_error")]
    assert "named t-1, not this partition" in report.problems[0].message


def test_a_topic_deleted_mid_audit_is_a_problem_at_the_offset_reached_and_the_audit_goes_on(served):
    server, alter = served
    gone = _fetches(lambda p: dataclasses.replace(p, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, records=b""),
                    after=2)
    alter(gone)
    report = _audit(server, max_bytes=200)  # one batch per fetch: partition 0 is read up to offset 6
    assert report.batches == 2
    assert _problems(report) == [(0, 6, "fetch_error"), (1, 0, "fetch_error")]
    assert "UNKNOWN_TOPIC_OR_PARTITION" in report.problems[0].message


def test_the_principals_refusal_still_stops_the_audit_in_one_line(served):
    from idemcore.errors import IdemcoreError

    server, alter = served
    alter(_fetches(lambda p: dataclasses.replace(p, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, records=b"")))
    with pytest.raises(IdemcoreError, match="Fetch of t-0 at offset 0: TOPIC_AUTHORIZATION_FAILED"):
        _audit(server)


def test_a_log_truncated_under_the_audit_is_a_problem(served):
    server, alter = served
    alter(_fetches(lambda p: dataclasses.replace(p, error_code=ErrorCode.OFFSET_OUT_OF_RANGE, records=b"")
                   if p.partition == 0 else p, after=1))
    report = _audit(server, max_bytes=200)
    assert _problems(report) == [(0, 3, "truncated")]
    assert "beyond the log end 30" in report.problems[0].message
    assert report.ranges.column("next_offset").to_pylist() == [3, 30]


def test_empty_answers_below_the_high_watermark_are_a_problem_after_a_bounded_wait(served):
    server, alter = served
    alter(_fetches(lambda p: dataclasses.replace(p, records=b"")))
    started = time.monotonic()
    report = _audit(server)
    assert time.monotonic() - started < 10
    assert _problems(report) == [(0, 0, "unserved"), (1, 0, "unserved")]
    assert "high watermark 30" in report.problems[0].message


def test_answers_cut_mid_batch_at_the_byte_limit_are_fetched_on(served):
    """A broker that cuts its answer at the byte limit (no whole batch first, as before KIP-74): the limit grows
    until a whole batch comes; every batch is read once, nothing reported."""
    server, alter = served
    alter(lambda request, answer: dataclasses.replace(answer, partitions=tuple(
        dataclasses.replace(p, records=p.records[:request.max_bytes]) for p in answer.partitions))
        if isinstance(answer, FetchResponse) else answer)
    for limit in (50, 500):
        report = _audit(server, max_bytes=limit)
        assert (report.batches, report.problems) == (20, ())


def test_a_partition_without_a_leader_the_whole_time_is_one_clear_line_after_a_bounded_wait(served):
    from idemcore.errors import IdemcoreError
    from idemcore.net.messages import ListOffsetsResponse, MetadataResponse, PartitionMetadata

    server, alter = served

    def offline(request: Any, answer: Any) -> Any:
        if isinstance(answer, MetadataResponse):  # partition 0 of t: leader -1
            return dataclasses.replace(answer, topics=tuple(
                dataclasses.replace(topic, partition_states=(
                    PartitionMetadata(0, ErrorCode.LEADER_NOT_AVAILABLE, -1), PartitionMetadata(1, leader=1)))
                if topic.name == "t" else topic for topic in answer.topics))
        if isinstance(answer, ListOffsetsResponse):  # and the broker asked is not its leader
            return dataclasses.replace(answer, results=tuple(
                dataclasses.replace(r, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER) if r.partition == 0 else r
                for r in answer.results))
        return answer
    alter(offline)
    started = time.monotonic()
    with pytest.raises(IdemcoreError, match=r"ListOffsets of t-0: NOT_LEADER_OR_FOLLOWER \(the partition has no "
                                            r"leader, it is offline: none was elected in \d+\.\d s\)"):
        _audit(server)
    assert time.monotonic() - started < 5


def test_a_leader_that_takes_fetches_and_never_answers_costs_the_api_timeout_not_every_try(served, monkeypatch):
    """Each Fetch times out: the audit gives up on the partition after API_TIMEOUT_MS, as Kafka's consumer does
    after default.api.timeout.ms, not after ATTEMPTS request timeouts and pauses."""
    from idemcore.errors import IdemcoreError
    from idemcore.net.messages import FetchRequest

    server, alter = served
    monkeypatch.setattr(wire_fetch, "ATTEMPTS", 20)
    monkeypatch.setattr(wire_fetch, "API_TIMEOUT_MS", 1000, raising=False)

    def hung(request: Any, answer: Any) -> Any:
        if isinstance(request, FetchRequest):
            time.sleep(0.2)  # the request timeout, shortened
            raise TimeoutError("127.0.0.1: no answer within request_timeout_ms=200")
        return answer
    alter(hung)
    started = time.monotonic()
    with pytest.raises(IdemcoreError, match=r"Fetch of t-0 at .*: 127\.0\.0\.1: no answer within"):
        _audit(server)
    assert time.monotonic() - started < 6


def test_many_idle_partitions_cost_one_fetch_per_leader_not_one_wait_each(tmp_path):
    """300 partitions, one of which grows: a follow's idle round and a one-shot audit of nothing new take one
    Fetch per leader to learn the high watermarks, not a Fetch (and its wait) per partition; what grew is read."""
    from idemcore.audit.wire_follow import ClusterFollower

    broker = Broker({"wide": 300}, data_dir=tmp_path / "logs", fsync=False)
    server = Server(broker).start()
    host, port = server.bootstrap.rsplit(":", 1)
    channel = BlockingBrokerChannel(host, int(port), "planter")

    def produce(partition: int) -> None:
        batch = RecordBatch("wide", partition, [b"x"] * 2, max_timestamp=int(time.time() * 1000))
        assert channel.call(ProduceRequest((batch,))).responses[0].error_code == 0

    follower = ClusterFollower("kafka://" + server.bootstrap, topics=["wide"], fsync=False)
    try:
        for partition in range(0, 300, 3):
            produce(partition)
        assert follower.poll().batches == 100
        started = time.perf_counter()
        idle = follower.poll()
        idle_seconds = time.perf_counter() - started
        produce(7)
        grown = follower.poll()
        started = time.perf_counter()
        nothing = wire.audit_cluster("kafka://" + server.bootstrap, start="latest")
        nothing_seconds = time.perf_counter() - started
    finally:
        follower.close()
        channel.close()
        server.stop()
        broker.close()
    assert idle.batches == 0 and grown.batches == 1 and grown.total_batches == 101
    assert nothing.batches == 0 and nothing.ranges.num_rows == 300
    assert idle_seconds < 1.0 and nothing_seconds < 1.0, (idle_seconds, nothing_seconds)  # 300 waits: 3 s and more


def test_records_deleted_under_the_audit_are_a_problem_and_the_rest_is_read(tmp_path):
    """DeleteRecords while the audit reads a partition: the offsets deleted before they were read are a problem
    at the offset reached, the batches after them are read, and the problem says that the producer's next batch
    may be a sequence_gap because of it (the batches between were never seen)."""
    broker = Broker({"d": 1}, data_dir=tmp_path / "logs", fsync=False)
    server = Server(broker).start()
    host, port = server.bootstrap.rsplit(":", 1)
    channel = BlockingBrokerChannel(host, int(port), "planter")
    pid = channel.call(InitProducerIdRequest()).producer_id
    for sequence in range(0, 120, 3):
        batch = RecordBatch("d", 0, [b"x"] * 3, producer_id=pid, producer_epoch=0, base_sequence=sequence,
                            max_timestamp=int(time.time() * 1000))
        assert channel.call(ProduceRequest((batch,))).responses[0].error_code == 0
    channel.close()
    fetched = [0]

    class Deleting(ClusterReader):
        def fetch(self, *args: Any, **kwargs: Any) -> Any:
            fetched[0] += 1
            if fetched[0] == 3:  # after two batches: the log start moves to offset 60
                broker.increment_log_start_offsets({("d", 0): 60})
            return super().fetch(*args, **kwargs)

    try:
        with Deleting(parse_bootstrap("kafka://" + server.bootstrap)) as reader:
            task, ranges = wire.audit_ranges(reader, wire.plan_ranges(reader, ["d"], Position("earliest"),
                                                                      Position("latest")), max_bytes=100)
    finally:
        server.stop()
        broker.close()
    (problem,) = task.problems.to_pylist()
    assert (problem["offset"], problem["kind"]) == (6, "deleted")
    assert "offsets 6..59 were deleted" in problem["message"] and "sequence_gap" in problem["message"]
    assert task.result.batches == 2 + 20
    assert ranges.column("next_offset").to_pylist() == [120]


@pytest.mark.parametrize(("start", "end"), [("offset:5", "offset:2"), ("1700000000001", "1700000000000"),
                                            ("latest", "latest-5"), ("latest-5", "earliest"),
                                            ("2024-01-02T00:00Z", "2024-01-01T00:00Z")])
def test_a_start_after_the_end_is_refused_in_one_line_before_any_connection(capsys, start, end):
    from idemcore.cli import main

    assert main(["audit", "kafka://127.0.0.1:1", "--from", start, "--to", end]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("idemcore: error: --from ") and line.endswith("comes after --to " + str(
        Position.parse(end)) + ": nothing to audit")


def test_a_start_not_after_the_end_is_not_refused():
    for start, end in [("offset:5", "offset:5"), ("earliest", "earliest"), ("latest-5", "latest"),
                       ("offset:5", "latest"), ("1700000000000", "offset:2")]:
        Position.parse(start).check_before(Position.parse(end))


def test_a_topic_named_twice_is_audited_once(served):
    server, _ = served
    report = wire.audit_cluster("kafka://" + server.bootstrap, topics=["t", "t"])
    assert (report.batches, report.problems, report.ranges.num_rows) == (20, (), 2)


def test_a_leader_serving_again_what_was_read_is_a_problem_not_a_loop(served):
    """Every Fetch of a partition answered with its first batch, whatever the offset asked: the walk stops at
    the first answer that does not move it on (it looped forever, each answer one more problem)."""
    server, alter = served
    first: dict[int, Any] = {}

    def stale(request: Any, answer: Any) -> Any:
        if not isinstance(answer, FetchResponse):
            return answer
        for mine in answer.partitions:
            if mine.records:
                first.setdefault(mine.partition, mine)
        return dataclasses.replace(answer, partitions=tuple(first.get(p.partition, p) for p in answer.partitions))
    alter(stale)
    report = _audit(server, max_bytes=200)
    assert report.batches == 2
    assert _problems(report) == [(0, 3, "stale"), (1, 3, "stale")]


def test_a_follow_round_ends_at_the_end_it_found_while_the_log_grows(served):
    """A batch written to partition 0 at each Fetch (a log written as fast as it is read): a follow's round reads
    up to the high watermark of its first answer and ends; the next round reads on."""
    from idemcore.audit.wire_follow import ClusterFollower

    server, _ = served
    host, port = server.bootstrap.rsplit(":", 1)
    writer = BlockingBrokerChannel(host, int(port), "writer")
    written = [0]

    class Growing(ClusterReader):
        def fetch(self, *args: Any, **kwargs: Any) -> Any:
            if written[0] < 500:  # bounded: a round that chased the end would read all of them
                written[0] += 1
                batch = RecordBatch("t", 0, [b"y"], max_timestamp=int(time.time() * 1000))
                assert writer.call(ProduceRequest((batch,))).responses[0].error_code == 0
            return super().fetch(*args, **kwargs)

    follower = ClusterFollower("kafka://" + server.bootstrap, topics=["t"], fsync=False, max_bytes=100)
    follower.reader.close()
    follower.reader = Growing(parse_bootstrap("kafka://" + server.bootstrap))
    try:
        first = follower.poll()
        second = follower.poll()
    finally:
        follower.close()
        writer.close()
    assert first.batches < 40  # the 20 there, and those written before its first answers
    assert second.batches > 0 and first.total_batches + second.batches == second.total_batches


def test_a_sasl_refusal_and_a_bad_client_properties_file_are_one_line_and_exit_2(tmp_path, capsys):
    from idemcore.cli import main
    from tests.secured import serving

    properties = tmp_path / "client.properties"
    with serving(tmp_path, {"carol": "carol-secret"}, listeners="SASL_PLAINTEXT://127.0.0.1:0",
                 **{"sasl.enabled.mechanisms": "SCRAM-SHA-256"}) as (server, _):
        cases = {"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=carol\n"
                 "sasl.password=wrong\n": "SASL authentication as SCRAM-SHA-256 failed",
                 "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n": "needs a user name and password",
                 "security.protocol=BOGUS\n": "'BOGUS' is not one of"}
        for text, said in cases.items():
            properties.write_text(text)
            for follow in ([], ["--follow", "--interval-ms", "10"]):
                capsys.readouterr()
                assert main(["audit", f"kafka://{server.bootstrap}", "--config", str(properties), *follow]) == 2
                (line,) = capsys.readouterr().err.splitlines()
                assert line.startswith("idemcore: error: ") and said in line, line
        capsys.readouterr()
        assert main(["audit", f"kafka://{server.bootstrap}", "--config", str(tmp_path / "missing.properties")]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert "cannot read the properties file" in line and "missing.properties" in line


def test_out_over_files_an_audit_did_not_write_is_refused_before_any_connection(tmp_path, capsys):
    from idemcore.cli import main

    out = tmp_path / "mine"
    out.mkdir()
    (out / "summary.json").write_text("my own notes\n")
    assert main(["audit", "kafka://127.0.0.1:1", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "an audit did not write; refusing to replace them" in line
    assert (out / "summary.json").read_text() == "my own notes\n"


def test_a_leader_moving_mid_partition_is_followed_and_nothing_is_read_twice(served):
    """After two answers, partition 0's leader says twice it no longer leads: new metadata, the same fetch
    again, and the partition read on from where it was, every batch once."""
    server, alter = served
    moved: list[int] = []

    def not_leader(mine: Any) -> Any:
        if mine.partition != 0 or len(moved) == 2:
            return mine
        moved.append(1)
        return dataclasses.replace(mine, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, records=b"")
    alter(_fetches(not_leader, after=2))
    report = _audit(server, max_bytes=200)
    assert len(moved) == 2
    assert (report.batches, report.problems, report.finding_counts()) == (20, (), {})
