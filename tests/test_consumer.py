"""The consumer: read_committed and read_uncommitted against the brute-force model of ``tests.test_fetch``
(interleaved transactional and plain writes, commits, aborts, broker restarts), Kafka's CompletedFetch rules
on hand-made answers, positions and seeks, OFFSET_OUT_OF_RANGE, small fetch sizes, compaction gaps, and lost,
doubled, late and reordered answers (a scripted transport, and the simulated network)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemcore.broker import Broker
from idemcore.client.consumer import (
    CommitFailedError,
    Consumer,
    ConsumerClosedError,
    ConsumerError,
    ConsumerRecord,
    ConsumerTimeoutError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    fetched_steps,
)
from idemcore.net.messages import (
    AbortedTransaction,
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    FetchedPartition,
    FetchRequest,
    FetchResponse,
    InitProducerIdRequest,
    OffsetCommitResponse,
    OffsetEntry,
    PartitionResult,
    ProduceRequest,
    Request,
    Response,
    TxnOffsetCommitRequest,
)
from idemcore.net.transport import InProcessTransport, partition_count
from idemcore.protocol.codes import ControlType, ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.stored import StoredBatch
from idemcore.sim.network import Faults, SimulatedNetwork
from tests.test_fetch import (
    HYPOTHESIS,
    NOW,
    TOPIC,
    TxnScenario,
    _no_fsync,  # noqa: F401  # the autouse fixture, here too
    apply,
    open_broker,
    operations,
)

T0, T1 = (TOPIC, 0), (TOPIC, 1)


class _CurrentBroker:
    """What an in-process transport delivers to: whichever broker the scenario runs now (it restarts them)."""

    def __init__(self, scenario: TxnScenario) -> None:
        self.scenario = scenario

    @property
    def topics(self) -> dict[str, int]:
        return self.scenario.broker.topics

    def handle(self, request: Request) -> Response | None:
        return self.scenario.broker.handle(request)


def _consumer(scenario: TxnScenario, isolation: str = "read_committed", **settings) -> Consumer:
    consumer = Consumer(InProcessTransport(_CurrentBroker(scenario)), isolation_level=isolation, **settings)
    consumer.assign([T0, T1][:scenario.partitions])
    return consumer


def _drain(consumer: Consumer, max_records: int | None = None) -> list[ConsumerRecord]:
    """Poll until a poll returns nothing (an in-process transport answers at once: nothing more is there)."""
    records: list[ConsumerRecord] = []
    while batch := consumer.poll(max_records):
        records += batch
    return records


def _seen(records: list[ConsumerRecord], partition: int) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in records if r.partition == partition]


def _offsets_by_partition(records: list[ConsumerRecord]) -> tuple[list[int], list[int]]:
    """Offsets read from partitions 0 and 1 (the order across partitions is the answers' order: not checked)."""
    return [r.offset for r in records if r.partition == 0], [r.offset for r in records if r.partition == 1]


TEN_AND_TWO = (list(range(10)), [0, 1])


# ---------------------------------------------------------------- Kafka's CompletedFetch on hand-made answers


def _data(base: int, pid: int, count: int, transactional: bool = True, deltas: tuple[int, ...] | None = None,
          last_delta: int | None = None) -> StoredBatch:
    values = [b"%d" % (base + (deltas[k] if deltas else k)) for k in range(count)]
    batch = RecordBatch(TOPIC, 0, values, None, pid, 0, 0, NOW, transactional)
    return StoredBatch(base, batch, deltas, last_delta)


def _marker(offset: int, pid: int, commit: bool) -> StoredBatch:
    batch = RecordBatch(TOPIC, 0, (), None, pid, 0, -1, NOW, True)
    return StoredBatch(offset, batch, None, None, (int(ControlType.COMMIT if commit else ControlType.ABORT), 0))


def _answer(batches: list[StoredBatch], aborted: list[tuple[int, int]] = (),
            stable: int = 1000) -> tuple[FetchedPartition, tuple[StoredBatch, ...]]:
    """A fetch answer and its batches as the consumer decodes them from its records."""
    return FetchedPartition(TOPIC, 0, ErrorCode.NONE, 1000, stable, 0,
                            tuple(AbortedTransaction(pid, first) for pid, first in aborted)), tuple(batches)


def _steps(answer: tuple[FetchedPartition, tuple[StoredBatch, ...]], offset: int, read_committed: bool):
    return fetched_steps(answer[0], answer[1], offset, read_committed)


def _offsets(steps) -> tuple[list[int], int]:
    return [record.offset for _, record in steps if record is not None], steps[-1][0]


def test_an_aborted_range_ends_at_its_producers_abort_marker():
    # 0-1 p1 (aborted) · 2 p2 (committed) · 3 p1 (aborted) · 4 ABORT p1 · 5-6 p1 again (committed) · 7 COMMIT p2
    # 8 p3 plain batch with an aborted producer id: only transactional batches are dropped · 9 COMMIT p1
    batches = [_data(0, 1, 2), _data(2, 2, 1), _data(3, 1, 1), _marker(4, 1, False), _data(5, 1, 2),
               _marker(7, 2, True), _data(8, 3, 1, transactional=False), _marker(9, 1, True)]
    steps = _steps(_answer(batches, aborted=[(3, 8), (1, 0)]), 0, read_committed=True)
    assert _offsets(steps) == ([2, 5, 6, 8], 10)
    assert [position for position, record in steps if record is None] == [2, 4, 5, 8, 10]  # skips move on
    uncommitted = _steps(_answer(batches, aborted=[(1, 0)]), 0, read_committed=False)
    assert _offsets(uncommitted) == ([0, 1, 2, 3, 5, 6, 8], 10)  # every data record, never a marker


def test_records_before_the_fetch_offset_and_markers_behind_it_are_skipped():
    batches = [_data(0, 1, 4, transactional=False), _marker(4, 1, True), _data(5, 1, 2, transactional=False)]
    assert _offsets(_steps(_answer(batches), 2, True)) == ([2, 3, 5, 6], 7)
    assert _offsets(_steps(_answer(batches[1:]), 5, True)) == ([5, 6], 7)  # a marker before: no step back
    assert _steps(_answer(batches[1:]), 5, True)[0][0] == 6


def test_compaction_gaps_give_each_record_its_offset_and_the_position_the_batch_end():
    # Base 10, records left at deltas 1 and 4 of 0..6; then a batch compaction emptied (base 17, deltas 0..2).
    batches = [_data(10, 5, 2, transactional=False, deltas=(1, 4), last_delta=6),
               StoredBatch(17, RecordBatch(TOPIC, 0, (), None, 5, 0, 7, NOW), (), 2)]
    steps = _steps(_answer(batches), 10, True)
    assert _offsets(steps) == ([11, 14], 20)
    assert [r.value for _, r in steps if r is not None] == [b"11", b"14"]


def test_nothing_at_or_past_the_answers_last_stable_offset_is_used():
    batches = [_data(0, 100, 2, transactional=False), _data(2, 1, 2), _data(4, 100, 1, transactional=False)]
    assert _offsets(_steps(_answer(batches, stable=2), 0, True)) == ([0, 1], 2)
    assert _offsets(_steps(_answer(batches, stable=2), 0, False)) == ([0, 1, 2, 3, 4], 5)  # uncommitted: all


def test_records_carry_key_headers_and_the_batch_timestamp():
    batch = RecordBatch(TOPIC, 0, [b"v0", None], [b"k0", None], 4, 0, 0, 1234, False,
                        [[("h", b"x"), ("h", None)], []])
    ((_, first), (_, second)) = _steps(_answer([StoredBatch(7, batch)]), 7, True)
    assert first == ConsumerRecord(TOPIC, 0, 7, b"k0", b"v0", (("h", b"x"), ("h", None)), 1234)
    assert second == ConsumerRecord(TOPIC, 0, 8, None, None, (), 1234)


# ---------------------------------------------------------------- against the model


@HYPOTHESIS
@given(ops=operations, data=st.data())
def test_consumers_read_what_the_model_says_while_the_log_grows_and_restarts(tmp_path_factory, ops, data):
    scenario = TxnScenario(open_broker(tmp_path_factory.mktemp("consume")))
    try:
        readers = {}
        for isolation in ("read_committed", "read_uncommitted"):
            readers[isolation] = _consumer(
                scenario, isolation, max_partition_fetch_bytes=data.draw(st.sampled_from([1, 150, 1 << 20])),
                fetch_max_bytes=data.draw(st.sampled_from([1, 300, 1 << 26])))
        seen: dict[str, list[ConsumerRecord]] = {isolation: [] for isolation in readers}
        for operation in ops:
            apply(scenario, operation)
            for isolation, consumer in readers.items():
                if data.draw(st.booleans()):
                    seen[isolation] += consumer.poll(data.draw(st.sampled_from([1, 2, 3, None])))
        for isolation, consumer in readers.items():
            seen[isolation] += _drain(consumer, data.draw(st.sampled_from([1, 7, None])))
            committed = isolation == "read_committed"
            for partition in range(2):
                assert _seen(seen[isolation], partition) == scenario.visible(partition, committed)
                # All read: at the last stable offset (read_committed; past an aborted tail or a marker) or the end.
                end = scenario.last_stable_offset(partition) if committed else scenario.ends[partition]
                assert consumer.position(TOPIC, partition) == end
        for partition in range(2):  # from anywhere: the same, from there (mid-batch, mid-transaction too)
            start = data.draw(st.integers(0, scenario.ends[partition]))
            consumer = readers["read_committed"]
            consumer.seek(TOPIC, partition, start)
            got = _seen(_drain(consumer, data.draw(st.sampled_from([1, None]))), partition)
            assert got == scenario.visible(partition, True, start)
    finally:
        scenario.broker.close()


def test_a_transaction_through_the_coordinator_is_read_once_committed(tmp_path):
    with Broker({TOPIC: 1}, data_dir=tmp_path, transaction_state_partitions=1) as broker:
        coordinator = broker.txn_coordinator
        reader = Consumer(broker)
        reader.assign([T0])
        everything = Consumer(broker, isolation_level="read_uncommitted")
        everything.assign([T0])
        read = []
        for round_, commit in enumerate((False, True, False)):
            init = coordinator.init_producer_id("app", 60_000)
            pid, epoch = init.producer_id, init.producer_epoch
            assert coordinator.add_partitions_to_txn("app", pid, epoch, [T0]) == {T0: ErrorCode.NONE}
            for seq in (0, 2):
                values = [b"%d-%d" % (round_, seq), b"%d-%d" % (round_, seq + 1)]
                batch = RecordBatch(TOPIC, 0, values, None, pid, epoch, seq, NOW, True)
                assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == ErrorCode.NONE
                read += reader.poll()
                assert reader.position(TOPIC, 0) == broker.log(TOPIC, 0).last_stable_offset  # not past the open one
            assert coordinator.end_txn("app", pid, epoch, committed=commit) == ErrorCode.NONE
        read += reader.poll()
        assert [r.value for r in read] == [b"1-0", b"1-1", b"1-2", b"1-3"]
        assert reader.position(TOPIC, 0) == broker.log(TOPIC, 0).log_end_offset == 15
        assert reader.poll() == []
        assert len(_drain(everything)) == 12


# ---------------------------------------------------------------- positions, seeks, out of range


@pytest.fixture
def log_of_ten(tmp_path) -> TxnScenario:
    """Partition 0: offsets 0-9 plain, 10-11 producer 1's open transaction; partition 1: 0-1 plain."""
    scenario = TxnScenario(open_broker(tmp_path, segment_bytes=150))
    for _ in range(5):
        scenario.data(100, 0, 2)
    scenario.data(1, 0, 2)
    scenario.data(101, 1, 2)
    yield scenario
    scenario.broker.close()


def test_missing_positions_follow_auto_offset_reset_and_seek_to_end_is_the_lso(log_of_ten):
    assert _consumer(log_of_ten).position(TOPIC, 0) == 0
    assert _consumer(log_of_ten, auto_offset_reset="latest").position(TOPIC, 0) == 10  # read_committed: the LSO
    latest = _consumer(log_of_ten, "read_uncommitted", auto_offset_reset="latest")
    assert latest.position(TOPIC, 0) == 12
    assert latest.poll() == []
    with pytest.raises(NoOffsetForPartitionError, match=r"t-0 has no position.*'none'"):
        _consumer(log_of_ten, auto_offset_reset="none").position(TOPIC, 0)
    with pytest.raises(NoOffsetForPartitionError):
        _consumer(log_of_ten, auto_offset_reset="none").poll()
    consumer = _consumer(log_of_ten)
    assert len(consumer.poll(3)) == 3 and consumer.position(TOPIC, 0) == 3
    consumer.seek_to_end([T0])
    assert consumer.position(TOPIC, 0) == 10
    consumer.seek_to_beginning()
    assert consumer.position(TOPIC, 0) == consumer.position(TOPIC, 1) == 0
    consumer.seek(TOPIC, 0, 7)
    assert [r.offset for r in _drain(consumer) if r.partition == 0] == [7, 8, 9]
    assert consumer.position(TOPIC, 0) == 10


def test_a_seek_drops_what_was_fetched_for_the_old_position(log_of_ten):
    consumer = _consumer(log_of_ten)
    assert [r.offset for r in consumer.poll(2)] == [0, 1]  # partition 0's answer holds more, kept for later
    consumer.seek(TOPIC, 0, 5)
    assert _offsets_by_partition(_drain(consumer)) == ([5, 6, 7, 8, 9], [0, 1])


@pytest.mark.parametrize(("policy", "expected"), [("earliest", 2), ("latest", 10)])
def test_out_of_range_resets_per_policy(log_of_ten, policy, expected):
    log = log_of_ten.broker.log(TOPIC, 0)
    consumer = _consumer(log_of_ten, auto_offset_reset=policy)
    consumer.assign([T0])
    consumer.seek(TOPIC, 0, 1)
    log_of_ten.broker.increment_log_start_offsets({(TOPIC, 0): log.segment_bases[1]})  # the log starts at 2
    assert log.log_start_offset == 2
    records = _drain(consumer)
    assert [r.offset for r in records] == list(range(expected, 10))
    consumer.seek(TOPIC, 0, 50)  # past the end
    assert [r.offset for r in _drain(consumer)] == list(range(expected, 10))


def test_out_of_range_with_no_reset_policy_raises_and_keeps_the_position(log_of_ten):
    consumer = _consumer(log_of_ten, auto_offset_reset="none")
    consumer.seek(TOPIC, 0, 50)
    consumer.seek(TOPIC, 1, 0)
    with pytest.raises(OffsetOutOfRangeError, match=r"fetch position 50 is out of range for partition t-0"):
        consumer.poll()
    assert consumer.position(TOPIC, 0) == 50
    consumer.seek(TOPIC, 0, 9)
    assert _offsets_by_partition(_drain(consumer)) == ([9], [0, 1])


def test_tiny_fetch_sizes_still_read_one_batch_at_a_time(log_of_ten):
    consumer = _consumer(log_of_ten, max_partition_fetch_bytes=1, fetch_max_bytes=1)
    sent: list[FetchRequest] = []
    send = consumer.transport.send
    consumer.transport.send = lambda client, request: (sent.append(request), send(client, request))[1]
    records = _drain(consumer, 1)
    assert _offsets_by_partition(records) == TEN_AND_TWO
    assert len([r for r in sent if isinstance(r, FetchRequest)]) >= 6  # 5 batches below the LSO, then partition 1


def test_compacted_topic_reads_give_the_offsets_compaction_left(tmp_path):
    topic_configs = {"c": {"cleanup.policy": "compact", "segment.bytes": 300}}
    with Broker({"c": 1}, data_dir=tmp_path, topic_configs=topic_configs) as broker:
        for seq in range(20):
            keys = [b"k%d" % (seq % 3), b"k%d" % (seq % 4)]
            batch = RecordBatch("c", 0, [b"%d" % seq, b"%d!" % seq], keys, 9, 0, 2 * seq, NOW + seq)
            assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == ErrorCode.NONE
        assert broker.clean_logs() > 0
        log = broker.log("c", 0)
        assert any(stored.offset_deltas is not None for stored in log.batches)
        expected = [(offset, value) for offset, _, value, _ in log.records()]
        for max_records in (1, None):
            consumer = Consumer(broker, max_partition_fetch_bytes=200)
            consumer.assign([("c", 0)])
            assert [(r.offset, r.value) for r in _drain(consumer, max_records)] == expected
            assert consumer.position("c", 0) == log.log_end_offset == 40


# ---------------------------------------------------------------- lost, doubled and late answers


def _deliver(request: Request, response: Response) -> str:
    return "deliver"


class ScriptedTransport:
    """In process, on a virtual clock; ``fate(request, response)`` decides each answer: "deliver", "lose",
    "twice" (delivered two times) or "late" (held ``late_ms``); ``rewrite`` may change it first. A disconnect
    loses the client's held answers. ``on_tick(now)`` runs as time passes (another client acting meanwhile)."""

    def __init__(self, broker: Broker, fate: Callable[[Request, Response], str] = _deliver, late_ms: int = 5,
                 rewrite: Callable[[Request, Response], Response] | None = None,
                 on_tick: Callable[[int], None] | None = None) -> None:
        self.broker = broker
        self.fate = fate
        self.late_ms = late_ms
        self.rewrite = rewrite
        self.on_tick = on_tick
        self.now = 0
        self.queue: list[tuple[int, str, Request, Response]] = []
        self.disconnects = 0
        self.sent: list[Request] = []

    def now_ms(self) -> int:
        return self.now

    def partition_count(self, topic: str) -> int:
        return partition_count(self.broker.topics, topic)

    def send(self, client: str, request: Request) -> None:
        self.sent.append(request)
        response = self.broker.handle(request)
        if self.rewrite is not None:
            response = self.rewrite(request, response)
        fate = self.fate(request, response)
        if fate != "lose":
            due = self.now + (self.late_ms if fate == "late" else 0)
            self.queue += [(due, client, request, response)] * (2 if fate == "twice" else 1)

    def poll(self, client: str) -> list[tuple[Request, Response]]:
        ready = [item for item in self.queue if item[1] == client and item[0] <= self.now]
        self.queue = [item for item in self.queue if item not in ready]
        return [(request, response) for _, _, request, response in ready]

    def disconnect(self, client: str) -> None:
        self.disconnects += 1
        self.queue = [item for item in self.queue if item[1] != client]

    def tick(self) -> None:
        self.now += 1
        if self.on_tick is not None:
            self.on_tick(self.now)


def _fetches_only(rule: Callable[[int], str]) -> Callable[[Request, Response], str]:
    """A fate for fetch answers by their number (0, 1, ...); every other answer is delivered."""
    count = [0]

    def fate(request: Request, response: Response) -> str:
        if not isinstance(response, FetchResponse):
            return "deliver"
        count[0] += 1
        return rule(count[0] - 1)

    return fate


def test_a_lost_fetch_answer_is_asked_again_after_the_request_timeout(log_of_ten):
    transport = ScriptedTransport(log_of_ten.broker, _fetches_only(lambda n: "lose" if n == 0 else "deliver"))
    consumer = Consumer(transport, request_timeout_ms=40)
    consumer.assign([T0, T1])
    assert consumer.poll(timeout_ms=10) == []  # nothing yet: the answer is lost
    records = consumer.poll(timeout_ms=100)
    assert transport.disconnects == 1 and 40 <= transport.now <= 41
    records += _drain(consumer)
    assert _offsets_by_partition(records) == TEN_AND_TWO


@pytest.mark.parametrize("fate", ["twice", "late"])
def test_doubled_or_late_answers_give_each_record_once(log_of_ten, fate):
    transport = ScriptedTransport(log_of_ten.broker, lambda request, response: fate)
    consumer = Consumer(transport, max_poll_records=3, max_partition_fetch_bytes=1)
    consumer.assign([T0, T1])
    records = []
    while transport.now < 200:
        records += consumer.poll(timeout_ms=1)
    assert _offsets_by_partition(records) == TEN_AND_TWO
    assert consumer.position(TOPIC, 0) == 10


def test_an_answer_from_before_a_seek_is_ignored(log_of_ten):
    transport = ScriptedTransport(log_of_ten.broker, _fetches_only(lambda n: "late" if n == 0 else "deliver"),
                                  late_ms=20)
    consumer = Consumer(transport)
    consumer.assign([T0])
    assert consumer.poll() == []  # the fetch from 0 is on its way
    consumer.seek(TOPIC, 0, 6)
    records = []
    while transport.now < 60:
        records += consumer.poll(timeout_ms=1)
    assert [r.offset for r in records] == [6, 7, 8, 9]


def _fetch_error_once(code: ErrorCode) -> Callable[[Request, Response], Response]:
    """Rewrite the first fetch answer: partition 0 answered ``code`` (and no batches)."""
    done = [False]

    def rewrite(request: Request, response: Response) -> Response:
        if not isinstance(response, FetchResponse) or done[0]:
            return response
        done[0] = True
        return FetchResponse(tuple(FetchedPartition(p.topic, p.partition, code) if p.partition == 0 else p
                                   for p in response.partitions), response.error_code, response.request_id)

    return rewrite


def test_a_retriable_fetch_error_is_fetched_again_after_the_backoff(log_of_ten):
    transport = ScriptedTransport(log_of_ten.broker, rewrite=_fetch_error_once(ErrorCode.NOT_LEADER_OR_FOLLOWER))
    consumer = Consumer(transport, retry_backoff_ms=25)
    consumer.assign([T0, T1])
    records = consumer.poll()
    assert _offsets_by_partition(records) == ([], [0, 1])  # partition 1's answer is used meanwhile
    records += consumer.poll(timeout_ms=100)
    assert transport.now == 25
    records += _drain(consumer)
    assert _offsets_by_partition(records) == TEN_AND_TWO


def test_a_fetch_error_that_retrying_cannot_fix_is_raised_naming_the_partition(log_of_ten):
    transport = ScriptedTransport(log_of_ten.broker, rewrite=_fetch_error_once(ErrorCode.INVALID_RECORD))
    consumer = Consumer(transport, retry_backoff_ms=0)
    consumer.assign([T0, T1])
    with pytest.raises(ConsumerError, match=r"^fetching partition t-0 at offset 0 failed: INVALID_RECORD$"):
        consumer.poll()
    assert _offsets_by_partition(_drain(consumer)) == TEN_AND_TWO  # nothing lost by the error


@pytest.mark.parametrize("seed", range(5))
def test_every_committed_record_exactly_once_over_a_faulty_network(tmp_path, seed):
    """Lost requests and answers, duplicated and reordered requests, while transactions go on: each record of
    a committed transaction (and each plain one) once, in order, none of an aborted one."""
    scenario = TxnScenario(open_broker(tmp_path))
    faults = Faults(drop_request=0.1, drop_response=0.2, duplicate=0.2, reorder=0.2, latency_ms=2)
    network = SimulatedNetwork(lambda: scenario.broker, faults, seed=seed)
    consumer = Consumer(network, request_timeout_ms=30, max_poll_records=4, max_partition_fetch_bytes=1)
    consumer.assign([T0, T1])
    records: list[ConsumerRecord] = []
    script = [("data", 1, 0, 3), ("data", 100, 1, 2), ("data", 2, 0, 2), ("data", 1, 1, 1), ("end", 1, None, False),
              ("data", -1, 0, 2), ("end", 2, 1, True), ("data", 3, 1, 3), ("data", 101, 0, 1), ("end", 3, None, True),
              ("data", 1, 0, 2), ("data", 2, 1, 2), ("end", 1, None, True), ("end", 2, None, False)] * 6
    for operation in script:
        apply(scenario, operation)
        records += consumer.poll(timeout_ms=3)
    while network.now < 200_000 and any(consumer.position(TOPIC, p) < scenario.last_stable_offset(p) for p in (0, 1)):
        records += consumer.poll(timeout_ms=5)
    for partition in (0, 1):
        assert _seen(records, partition) == scenario.visible(partition, True)
    stats = network.stats
    assert stats.dropped_responses >= 3 and stats.duplicated >= 3 and stats.dropped_requests >= 3


# ---------------------------------------------------------------- the group's offsets

GROUP = "readers"


def _group_broker(tmp_path: Path) -> Broker:
    broker = Broker({TOPIC: 2}, data_dir=tmp_path, transaction_state_partitions=1, offsets_topic_partitions=3,
                    fsync=False)
    for partition in (0, 1):
        for seq in range(3):
            batch = RecordBatch(TOPIC, partition, [b"%d-%d" % (partition, seq)], None, 50, 0, seq, NOW)
            assert broker.handle(ProduceRequest((batch,))).responses[0].error_code == ErrorCode.NONE
    return broker


def test_committed_positions_are_where_the_group_starts_again(tmp_path):
    with _group_broker(tmp_path) as broker:
        first = Consumer(broker, GROUP)
        first.assign([T0, T1])
        assert first.committed([T0, T1]) == {T0: None, T1: None}
        assert [r.offset for r in first.poll(2)] == [0, 1]
        first.commit()  # the positions: t-0 at 2; t-1 has one only once a poll or position() gave it
        assert first.committed([T1, T0]) == {T1: first.position(TOPIC, 1), T0: 2}
        first.commit({T1: 1})
        first.commit({})  # nothing to commit: no request
        second = Consumer(broker, GROUP, auto_offset_reset="latest")
        second.assign([T0, T1])
        assert (second.position(TOPIC, 0), second.position(TOPIC, 1)) == (2, 1)
        assert [(r.partition, r.offset) for r in _drain(second)] in (
            [(0, 2), (1, 1), (1, 2)], [(1, 1), (1, 2), (0, 2)])
        other = Consumer(broker, "another", auto_offset_reset="latest")
        other.assign([T0])
        assert other.position(TOPIC, 0) == 3  # no offsets in that group: the policy
    with Broker({TOPIC: 2}, data_dir=tmp_path, transaction_state_partitions=1, offsets_topic_partitions=3) as again:
        assert Consumer(again, GROUP).committed([T0, T1]) == {T0: 2, T1: 1}  # durable


def test_a_refused_commit_names_the_group_and_the_partition(tmp_path):
    def refuse(request: Request, response: Response) -> Response:
        if isinstance(response, OffsetCommitResponse):
            return OffsetCommitResponse(tuple(PartitionResult(r.topic, r.partition, ErrorCode.ILLEGAL_GENERATION
                                                              if r.partition == 1 else r.error_code)
                                              for r in response.results), response.request_id)
        return response

    with _group_broker(tmp_path) as broker:
        consumer = Consumer(ScriptedTransport(broker, rewrite=refuse), GROUP)
        consumer.assign([T0, T1])
        with pytest.raises(CommitFailedError, match=r"^committing offset 5 for group readers partition t-1 failed: "
                                                    r"ILLEGAL_GENERATION$"):
            consumer.commit({T0: 1, T1: 5})


def test_retriable_commit_errors_and_lost_answers_are_retried(tmp_path):
    commits: list[Request] = []  # the first is answered COORDINATOR_LOAD_IN_PROGRESS, the second's answer lost

    def busy_first(request: Request, response: Response) -> Response:
        if not isinstance(response, OffsetCommitResponse):
            return response
        commits.append(request)
        if len(commits) > 1:
            return response
        return OffsetCommitResponse(tuple(PartitionResult(r.topic, r.partition, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                                          for r in response.results), response.request_id)

    def lose_second(request: Request, response: Response) -> str:
        return "lose" if isinstance(response, OffsetCommitResponse) and len(commits) == 2 else "deliver"

    with _group_broker(tmp_path) as broker:
        transport = ScriptedTransport(broker, lose_second, rewrite=busy_first)
        consumer = Consumer(transport, GROUP, request_timeout_ms=50, retry_backoff_ms=10)
        consumer.commit({T0: 3})
        assert len(commits) == 3 and transport.disconnects == 1  # backoff, then a timeout, then an answer
        assert 60 <= transport.now <= 62
        assert consumer.committed([T0]) == {T0: 3}


def _pending_transactional_offset(broker: Broker, offset: int) -> tuple[int, int]:
    """Producer "app" commits ``offset`` of t-0 for the group inside an open transaction."""
    init = broker.handle(InitProducerIdRequest(transactional_id="app"))
    pid, epoch = init.producer_id, init.producer_epoch
    assert broker.handle(AddOffsetsToTxnRequest("app", pid, epoch, GROUP)).error_code == ErrorCode.NONE
    answer = broker.handle(TxnOffsetCommitRequest("app", GROUP, pid, epoch, (OffsetEntry(TOPIC, 0, offset),)))
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE]
    return pid, epoch


def test_committed_waits_for_a_pending_transactional_offset(tmp_path):
    with _group_broker(tmp_path) as broker:
        Consumer(broker, GROUP).commit({T0: 1})
        pid, epoch = _pending_transactional_offset(broker, 2)

        def end_at(tick: int) -> Callable[[int], None]:
            def on_tick(now: int) -> None:
                if now == tick:
                    assert broker.handle(EndTxnRequest("app", pid, epoch, True)).error_code == ErrorCode.NONE
            return on_tick

        waiting = Consumer(ScriptedTransport(broker), GROUP, default_api_timeout_ms=300, retry_backoff_ms=20)
        assert waiting.committed([T0], require_stable=False) == {T0: 1}  # the last stable one
        with pytest.raises(ConsumerTimeoutError, match=r"readers.*UNSTABLE_OFFSET_COMMIT"):
            waiting.committed([T0])
        transport = ScriptedTransport(broker, on_tick=end_at(70))
        reader = Consumer(transport, GROUP, retry_backoff_ms=20)
        reader.assign([T0])
        assert reader.position(TOPIC, 0) == 2  # KIP-447: read_committed waits until the offset is stable
        assert 70 <= transport.now <= 90
        assert Consumer(broker, GROUP).committed([T0]) == {T0: 2}


# ---------------------------------------------------------------- misuse


def test_bad_arguments_are_named(log_of_ten):
    broker = log_of_ten.broker
    for kwargs, error, says in [
            ({"isolation_level": "committed"}, ValueError, "'committed'"),
            ({"auto_offset_reset": "smallest"}, ValueError, "'smallest'"),
            ({"max_poll_records": 0}, ValueError, "max_poll_records must be at least 1, got 0"),
            ({"request_timeout_ms": 1.5}, TypeError, "request_timeout_ms must be an integer, got 1.5"),
            ({"group_id": ""}, ValueError, "group_id"),
            ({"group_id": 5}, TypeError, "group_id"),
            ({"client_id": b"x"}, TypeError, "client_id")]:
        with pytest.raises(error, match=says):
            Consumer(broker, **kwargs)
    with pytest.raises(TypeError, match="transport must be a Broker or a Transport, not int"):
        Consumer(5)  # type: ignore[arg-type]
    consumer = Consumer(broker)
    with pytest.raises(TypeError, match=r"a partition is a \(str, int\) pair, got \('t', '0'\)"):
        consumer.assign([(TOPIC, "0")])
    with pytest.raises(TypeError, match="list of"):
        consumer.assign("t")
    with pytest.raises(ValueError, match="t-5 does not exist: 't' has 2 partitions"):
        consumer.assign([(TOPIC, 5)])
    with pytest.raises(KeyError, match="unknown topic 'nope'"):
        consumer.assign([("nope", 0)])
    consumer.assign([T0])
    with pytest.raises(ValueError, match=r"t-1 is not assigned"):
        consumer.seek(TOPIC, 1, 0)
    with pytest.raises(ValueError, match="offset must be at least 0, got -1"):
        consumer.seek(TOPIC, 0, -1)
    with pytest.raises(TypeError, match="max_records must be an integer"):
        consumer.poll("10")
    with pytest.raises(ValueError, match="timeout_ms must be at least 0"):
        consumer.poll(timeout_ms=-1)
    with pytest.raises(ConsumerError, match="commit\\(\\) needs a group_id"):
        consumer.commit()
    with pytest.raises(ConsumerError, match="committed\\(\\) needs a group_id"):
        consumer.committed([T0])
    consumer.close()
    with pytest.raises(ConsumerClosedError, match="is closed"):
        consumer.poll()


def test_an_empty_poll_over_a_broker_waits_instead_of_spinning():
    """In process the broker answers an empty fetch at once (no max_wait_ms there): the transport's tick waits,
    so a poll with a timeout sends about one fetch per millisecond, not thousands."""
    broker = Broker({TOPIC: 1})
    fetches = []
    handle = broker.handle

    def counting(request):
        fetches.append(request)
        return handle(request)

    broker.handle = counting  # type: ignore[method-assign]
    consumer = Consumer(broker)
    consumer.assign([(TOPIC, 0)])
    assert consumer.poll(timeout_ms=200) == []
    assert 10 <= len(fetches) <= 400
