"""The broker's read path: Fetch (Kafka's byte limits, read_committed's last stable offset, the aborted
transactions of the range) and ListOffsets, and the log's in-memory aborted-transaction index, against a
brute-force model of transactional and plain writes (``TxnScenario``, shared with the consumer tests)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.broker import Broker
from idemcore.broker.log import LogSegment, PartitionLog
from idemcore.net.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ProduceRequest,
    TxnMarker,
    WriteTxnMarkersRequest,
)
from idemcore.protocol.codes import ControlType, ErrorCode
from idemcore.protocol.constants import READ_COMMITTED, READ_UNCOMMITTED
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import decode_stored_batches

NOW = 1_700_000_000_000
TOPIC = "t"
#: Small segments, so scenarios roll several and their ABORTs land in several .txnindex files.
SMALL_SEGMENTS = {"segment_bytes": 400, "index_interval_bytes": 0}
#: Transactional producers, idempotent ones and a plain one (no producer id).
TXN_PIDS = (1, 2, 3)
PLAIN_PIDS = (100, 101, -1)


@dataclass(frozen=True)
class ModelRecord:
    offset: int
    value: bytes
    producer_id: int
    txn: tuple[int, int] | None  # (producer id, its transaction number); None outside transactions


@dataclass
class TxnScenario:
    """Writes transactional and plain batches and markers to a broker (markers through WriteTxnMarkers, as the
    coordinator sends them) and keeps a brute-force model: every record, every transaction's outcome, every
    aborted transaction's (producer, first offset, marker offset) per partition."""

    open_broker: Callable[[], Broker]
    partitions: int = 2
    broker: Broker = field(init=False)
    records: dict[int, list[ModelRecord]] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    outcomes: dict[tuple[int, int], bool | None] = field(default_factory=dict)  # None: still open
    aborted: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    _open: dict[int, tuple[int, dict[int, int]]] = field(default_factory=dict)  # pid -> (txn, partition -> first)
    _txn_numbers: dict[int, itertools.count] = field(default_factory=dict)
    _sequences: dict[tuple[int, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.broker = self.open_broker()
        for partition in range(self.partitions):
            self.records[partition] = []
            self.ends[partition] = 0
            self.aborted[partition] = []

    def data(self, pid: int, partition: int, count: int) -> None:
        """``count`` records from ``pid``: in its open transaction (one is opened) for a transactional pid."""
        transactional = pid in TXN_PIDS
        txn = None
        if transactional:
            if pid not in self._open:
                self._open[pid] = (next(self._txn_numbers.setdefault(pid, itertools.count())), {})
                self.outcomes[(pid, self._open[pid][0])] = None
            number, firsts = self._open[pid]
            txn = (pid, number)
        sequence = self._sequences.get((pid, partition), 0) if pid >= 0 else -1
        values = [b"%d/%d/%d" % (pid, partition, self.ends[partition] + k) for k in range(count)]
        batch = RecordBatch(TOPIC, partition, values, None, pid, 0 if pid >= 0 else -1, sequence, NOW + len(values),
                            transactional)
        answer = self.broker.handle(ProduceRequest((batch,))).responses[0]
        assert answer.error_code == ErrorCode.NONE, answer
        assert answer.base_offset == self.ends[partition]
        if pid >= 0:
            self._sequences[(pid, partition)] = sequence + count
        if txn is not None:
            firsts.setdefault(partition, answer.base_offset)
        self.records[partition] += [ModelRecord(answer.base_offset + k, value, pid, txn)
                                    for k, value in enumerate(values)]
        self.ends[partition] += count

    def end(self, pid: int, commit: bool, extra_partition: int | None = None) -> None:
        """End ``pid``'s transaction with a marker on each partition it wrote to (and ``extra_partition``: a
        partition added to the transaction but never written, whose marker ends nothing)."""
        number, firsts = self._open.pop(pid, (None, {}))
        targets = sorted(set(firsts) | ({extra_partition} if extra_partition is not None else set()))
        if not targets:
            return
        if number is not None:
            self.outcomes[(pid, number)] = commit
        request = WriteTxnMarkersRequest((TxnMarker(pid, 0, commit, 0, tuple((TOPIC, p) for p in targets)),))
        (result,) = self.broker.handle(request).markers
        for partition, answer in zip(targets, result.responses, strict=True):
            assert answer.error_code == ErrorCode.NONE, answer
            assert answer.base_offset == self.ends[partition]
            if not commit and partition in firsts:
                self.aborted[partition].append((pid, firsts[partition], answer.base_offset))
            self.ends[partition] += 1

    def restart(self) -> None:
        self.broker.close()
        self.broker = self.open_broker()

    # --- what readers must see ------------------------------------------------------------------------------

    def last_stable_offset(self, partition: int) -> int:
        firsts = [f[partition] for _, f in self._open.values() if partition in f]
        return min(firsts, default=self.ends[partition])

    def visible(self, partition: int, read_committed: bool, start: int = 0) -> list[tuple[int, bytes]]:
        """``(offset, value)`` of what a reader from ``start`` must get: read_committed, the plain records and
        those of committed transactions below the last stable offset; read_uncommitted, every record."""
        stable = self.last_stable_offset(partition)
        return [(r.offset, r.value) for r in self.records[partition] if r.offset >= start and (
            not read_committed or (r.offset < stable and (r.txn is None or self.outcomes[r.txn] is True)))]

    def aborted_overlapping(self, partition: int, start: int, end: int) -> list[tuple[int, int]]:
        return [(pid, first) for pid, first, last in self.aborted[partition] if first < end and last >= start]


# (kind, producer, partition, count or commit)
operations = st.lists(st.one_of(
    st.tuples(st.just("data"), st.sampled_from(TXN_PIDS + PLAIN_PIDS), st.integers(0, 1), st.integers(1, 4)),
    st.tuples(st.just("end"), st.sampled_from(TXN_PIDS), st.sampled_from([None, 0, 1]), st.booleans()),
    st.tuples(st.just("restart"), st.just(0), st.just(0), st.just(0)),
), min_size=1, max_size=45)


def apply(scenario: TxnScenario, operation: tuple) -> None:
    kind, pid, partition, extra = operation
    if kind == "data":
        scenario.data(pid, partition, extra)
    elif kind == "end":
        scenario.end(pid, commit=extra, extra_partition=partition)
    else:
        scenario.restart()


def open_broker(data_dir: Path, partitions: int = 2, **settings: object) -> Callable[[], Broker]:
    return lambda: Broker({TOPIC: partitions}, data_dir=data_dir, clock=lambda: NOW, fsync=False,
                          **{**SMALL_SEGMENTS, **settings})  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    """fsync does nothing here: these tests restart brokers cleanly (durability is tested elsewhere), and small
    segments roll, each roll an fsync of every file of the segment."""
    monkeypatch.setattr("os.fsync", lambda fd: None)


HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                               HealthCheck.too_slow])


def _fetch(broker: Broker, offset: int, isolation: int = READ_COMMITTED, partition: int = 0, max_bytes: int = 1 << 30,
           partition_max_bytes: int = 1 << 30):
    response = broker.handle(FetchRequest((FetchPartition(TOPIC, partition, offset, partition_max_bytes),),
                                          isolation, max_bytes))
    assert isinstance(response, FetchResponse) and response.error_code == ErrorCode.NONE
    (answer,) = response.partitions
    # The answer's fields, and its records decoded as a consumer decodes them.
    return SimpleNamespace(**{name: getattr(answer, name) for name in answer.__slots__},
                           batches=decode_stored_batches(TOPIC, partition, answer.records))


# ---------------------------------------------------------------- the aborted-transaction index


@HYPOTHESIS
@given(ops=operations, data=st.data())
def test_aborted_transactions_are_those_of_the_model_overlapping_the_range(tmp_path_factory, ops, data):
    scenario = TxnScenario(open_broker(tmp_path_factory.mktemp("aborted")))
    try:
        for operation in ops:
            apply(scenario, operation)
        for _ in range(2):  # as written, then as recovered from the segments
            for partition in range(2):
                log = scenario.broker.log(TOPIC, partition)
                end = scenario.ends[partition]
                for _ in range(6):
                    start = data.draw(st.integers(0, end + 1))
                    stop = data.draw(st.integers(start, end + 2))
                    found = log.aborted_transactions(start, stop)
                    assert found == scenario.aborted_overlapping(partition, start, stop)  # marker order too
            scenario.restart()
    finally:
        scenario.broker.close()


def test_aborted_transactions_come_from_the_index_not_a_scan_of_the_log(tmp_path):
    scenario = TxnScenario(open_broker(tmp_path), partitions=1)
    for round_ in range(200):
        pid = TXN_PIDS[round_ % 3]
        scenario.data(pid, 0, 1)
        scenario.end(pid, commit=round_ % 2 == 0)
    log = scenario.broker.log(TOPIC, 0)
    expected = scenario.aborted_overlapping(0, 150, 160)
    assert expected
    def untouchable(*args, **kwargs):
        raise AssertionError("aborted_transactions read the segment")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LogSegment, "read", untouchable)
        patch.setattr(LogSegment, "headers", untouchable)
        assert log.aborted_transactions(150, 160) == expected
    scenario.broker.kill()


def test_a_long_aborted_transaction_is_found_past_later_short_ones(tmp_path):
    """Entries are ordered by marker; a transaction begun long before and aborted after others still overlaps
    a range before their markers (the scan stops on the last stable offset, not the first offset)."""
    scenario = TxnScenario(open_broker(tmp_path), partitions=1)
    scenario.data(1, 0, 1)          # producer 1's transaction from offset 0, aborted last
    for pid in (2, 3, 2, 3):
        scenario.data(pid, 0, 1)
        scenario.end(pid, commit=False)
    scenario.end(1, commit=False)
    log = scenario.broker.log(TOPIC, 0)
    assert log.aborted_transactions(0, 1) == [(1, 0)]
    assert log.aborted_transactions(3, 4) == scenario.aborted_overlapping(0, 3, 4) == [(3, 3), (1, 0)]
    scenario.broker.kill()


def test_rolling_back_an_abort_marker_takes_its_entry_back(tmp_path):
    log = PartitionLog(TOPIC, 0, tmp_path / "t-0")
    log.append(0, RecordBatch(TOPIC, 0, [b"a", b"b"], None, 7, 0, 0, NOW, True))
    log.append_marker(2, 7, 0, ControlType.ABORT, 0, NOW)
    assert log.aborted_transactions(0, 3) == [(7, 0)] and log.last_stable_offset == 3
    log.rollback_last()  # its sync failed: the marker is gone, the transaction open again
    assert log.aborted_transactions(0, 3) == [] and log.last_stable_offset == 0
    log.append_marker(2, 7, 0, ControlType.COMMIT, 0, NOW)
    assert log.aborted_transactions(0, 3) == [] and log.last_stable_offset == 3
    log.close()
    again = PartitionLog(TOPIC, 0, tmp_path / "t-0", recovery_point=3)
    assert again.aborted_transactions(0, 3) == []
    again.close()


def test_retention_drops_the_entries_whose_marker_went_with_the_segments(tmp_path):
    scenario = TxnScenario(open_broker(tmp_path, partitions=1, segment_bytes=200), partitions=1)
    scenario.data(1, 0, 1)  # offset 0: producer 1's transaction, aborted only at the end
    for _ in range(12):
        scenario.data(2, 0, 2)
        scenario.end(2, commit=False)
    scenario.end(1, commit=False)
    log = scenario.broker.log(TOPIC, 0)
    start = log.segment_bases[3]
    scenario.broker.increment_log_start_offsets({(TOPIC, 0): start})
    end = scenario.ends[0]
    kept = [(pid, first) for pid, first, last in scenario.aborted[0] if last >= start]
    assert log.aborted_transactions(start, end) == kept
    assert kept[-1] == (1, 0)  # begun below the new log start, ended above it: kept with its first offset
    assert sum(len(segment.aborted()) for segment in log.segments) == len(kept)  # the others went with their files
    scenario.broker.kill()


# ---------------------------------------------------------------- fetch


@HYPOTHESIS
@given(ops=operations, data=st.data())
def test_a_fetch_returns_whole_batches_from_the_offset_below_its_limit(tmp_path_factory, ops, data):
    scenario = TxnScenario(open_broker(tmp_path_factory.mktemp("fetch")))
    try:
        for operation in ops:
            apply(scenario, operation)
        for partition in range(2):
            log = scenario.broker.log(TOPIC, partition)
            for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
                offset = data.draw(st.integers(0, scenario.ends[partition]))
                max_bytes = data.draw(st.sampled_from([0, 1, 90, 200, 1 << 20]))
                answer = _fetch(scenario.broker, offset, isolation, partition, max_bytes)
                limit = scenario.last_stable_offset(partition) if isolation == READ_COMMITTED else log.log_end_offset
                assert (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) == (
                    log.log_end_offset, scenario.last_stable_offset(partition), 0)
                batches = answer.batches
                every = [b for b in log.batches if b.next_offset > offset and b.base_offset < limit]
                assert list(batches) == every[:len(batches)]  # a prefix of what lies in [offset, limit)
                sizes = [len(b.raw) for b in batches]
                if every:
                    assert batches  # at least one batch whatever max_bytes
                    assert sum(sizes) <= max_bytes or len(batches) == 1
                    if len(batches) < len(every):  # stopped by the limit, not short of it
                        assert sum(sizes) + every[len(batches)].batch.size_in_bytes() > max_bytes
                if isolation == READ_UNCOMMITTED:
                    assert answer.aborted_transactions is None
                else:
                    upper = batches[-1].next_offset if batches else offset
                    expected = scenario.aborted_overlapping(partition, offset, upper) if batches else []
                    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == expected
    finally:
        scenario.broker.close()


def _counts(response: FetchResponse) -> list[int]:
    """How many batches each partition's answer holds."""
    return [len(decode_stored_batches(p.topic, p.partition, p.records)) for p in response.partitions]


def test_the_request_byte_limit_is_shared_by_the_partitions_in_order(tmp_path):
    scenario = TxnScenario(open_broker(tmp_path))
    for partition in (0, 1):
        for _ in range(3):
            scenario.data(100, partition, 2)
    size = len(scenario.broker.log(TOPIC, 0).batches[0].raw)
    request = FetchRequest((FetchPartition(TOPIC, 0, 0), FetchPartition(TOPIC, 1, 0)), READ_UNCOMMITTED,
                           max_bytes=2 * size + 1)
    first, second = _counts(scenario.broker.handle(request))
    assert [first, second] == [2, 0]  # 1 byte left: not a whole batch
    request = FetchRequest((FetchPartition(TOPIC, 0, 0, partition_max_bytes=size), FetchPartition(TOPIC, 1, 0)),
                           READ_UNCOMMITTED, max_bytes=3 * size)
    first, second = _counts(scenario.broker.handle(request))
    assert [first, second] == [1, 2]  # the partition limit, then what is left
    # Only the first non-empty partition may go over: a later one gets nothing rather than an oversized batch.
    request = FetchRequest((FetchPartition(TOPIC, 0, 6), FetchPartition(TOPIC, 1, 0, partition_max_bytes=1)),
                           READ_UNCOMMITTED, max_bytes=1)
    first, second = _counts(scenario.broker.handle(request))
    assert (first, second) == (0, 1)  # partition 0 is at its end: 1 still goes first
    request = FetchRequest((FetchPartition(TOPIC, 0, 0), FetchPartition(TOPIC, 1, 0)), READ_UNCOMMITTED, max_bytes=1)
    first, second = _counts(scenario.broker.handle(request))
    assert (first, second) == (1, 0)
    scenario.broker.kill()


def test_read_committed_stops_at_the_last_stable_offset_without_out_of_range(tmp_path):
    scenario = TxnScenario(open_broker(tmp_path, partitions=1), partitions=1)
    scenario.data(100, 0, 2)  # 0-1 plain
    scenario.data(1, 0, 2)    # 2-3 producer 1, open: the LSO is 2
    scenario.data(2, 0, 1)    # 4 producer 2
    scenario.end(2, commit=False)  # 5
    broker = scenario.broker
    answer = _fetch(broker, 0)
    assert [b.base_offset for b in answer.batches] == [0] and answer.last_stable_offset == 2
    for offset in (2, 3, 6):  # at the LSO, between it and the end, at the end: empty, no error
        answer = _fetch(broker, offset)
        assert answer.error_code == ErrorCode.NONE and answer.batches == () and answer.aborted_transactions == ()
    assert [b.base_offset for b in _fetch(broker, 3, READ_UNCOMMITTED).batches] == [2, 4, 5]
    scenario.end(1, commit=False)  # 6: the LSO moves to the end
    answer = _fetch(broker, 3)
    assert [b.base_offset for b in answer.batches] == [2, 4, 5, 6]  # from the batch holding offset 3
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(2, 4), (1, 2)]
    answer = _fetch(broker, 5)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(2, 4), (1, 2)]
    answer = _fetch(broker, 6)  # only producer 1's abort overlaps [6, 7)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(1, 2)]
    scenario.broker.kill()


@pytest.mark.parametrize("offset", [-1, 4, "0", None])
def test_a_fetch_outside_the_log_is_out_of_range_and_named(tmp_path, offset):
    scenario = TxnScenario(open_broker(tmp_path, partitions=1), partitions=1)
    scenario.data(100, 0, 3)
    answer = _fetch(scenario.broker, offset)
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and answer.batches == ()
    assert (answer.log_start_offset, answer.high_watermark) == (0, 3)
    assert repr(offset) in answer.error_message and "[0, 3)" in answer.error_message
    assert _fetch(scenario.broker, 3).batches == ()  # the end itself is in range: nothing yet
    scenario.broker.kill()


def test_bad_fetch_requests_are_answered_invalid_request(tmp_path):
    scenario = TxnScenario(open_broker(tmp_path, partitions=1), partitions=1)
    scenario.data(100, 0, 1)
    broker = scenario.broker
    for request in (FetchRequest((FetchPartition(TOPIC, 0, 0),), isolation_level=2),
                    FetchRequest((FetchPartition(TOPIC, 0, 0),), max_bytes=-1),
                    FetchRequest((FetchPartition(TOPIC, 0, 0),), max_bytes=1.5),  # type: ignore[arg-type]
                    FetchRequest(((TOPIC, 0, 0),))):  # type: ignore[arg-type]
        assert broker.handle(request).error_code == ErrorCode.INVALID_REQUEST
    (answer,) = broker.handle(FetchRequest((FetchPartition(TOPIC, 0, 0, -5),))).partitions
    assert answer.error_code == ErrorCode.INVALID_REQUEST and "-5" in answer.error_message
    (answer,) = broker.handle(FetchRequest((FetchPartition("nope", 0, 0),))).partitions
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    scenario.broker.kill()


def test_list_offsets_gives_the_log_start_and_the_end_per_isolation(tmp_path):
    scenario = TxnScenario(open_broker(tmp_path, partitions=1, segment_bytes=150), partitions=1)
    for _ in range(5):
        scenario.data(100, 0, 2)
    scenario.data(1, 0, 1)  # open: the LSO is 10
    scenario.data(100, 0, 1)
    broker = scenario.broker
    log = broker.log(TOPIC, 0)
    broker.increment_log_start_offsets({(TOPIC, 0): log.segment_bases[1]})
    start = log.log_start_offset
    assert start > 0

    def listed(timestamp: int, isolation: int):
        (result,) = broker.handle(ListOffsetsRequest(((TOPIC, 0, timestamp),), isolation)).results
        return result.error_code, result.offset

    assert listed(EARLIEST_TIMESTAMP, READ_COMMITTED) == listed(EARLIEST_TIMESTAMP, READ_UNCOMMITTED) == (0, start)
    assert listed(LATEST_TIMESTAMP, READ_COMMITTED) == (0, 10)
    assert listed(LATEST_TIMESTAMP, READ_UNCOMMITTED) == (0, 12)
    assert listed(-7, READ_COMMITTED)[0] == ErrorCode.INVALID_REQUEST  # no such special timestamp
    assert listed(LATEST_TIMESTAMP, 7)[0] == ErrorCode.INVALID_REQUEST
    (bad, unknown) = broker.handle(ListOffsetsRequest(((TOPIC, 0), ("nope", 0, LATEST_TIMESTAMP)))).results  # type: ignore[arg-type]
    assert bad.error_code == ErrorCode.INVALID_REQUEST and unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    scenario.broker.kill()


def test_list_offsets_by_timestamp_reads_record_timestamps_and_respects_isolation(tmp_path):
    """Kafka's fetchOffsetForTimestamp: the first record whose timestamp is at least the target (per-record
    timestamps of a batch stored as sent), the first with the largest for MAX_TIMESTAMP (-3), -1 when none or
    when it lies at or past what the isolation level reads."""
    from idemcore.net.messages import ListOffsetsRequest, ProduceRequest
    from idemcore.record.v2 import decode_wire_batch, encode_batch
    from idemcore.record.v2.codec import Record

    sent = encode_batch([Record(k, 10 * k, b"k", b"v") for k in range(5)], base_offset=0, base_timestamp=1_000,
                        max_timestamp=1_040)
    broker = Broker({"t": 1}, data_dir=tmp_path, fsync=False)
    try:
        broker.handle(ProduceRequest((decode_wire_batch("t", 0, bytes(sent)),)))
        broker.handle(ProduceRequest((RecordBatch("t", 0, [b"w"], producer_id=9, producer_epoch=0, base_sequence=0,
                                                  max_timestamp=2_000, is_transactional=True),)))
        broker.log("t", 0).note_open_transaction(9, 5)

        def at(timestamp: int, level: int = READ_UNCOMMITTED) -> tuple[int, int]:
            [result] = broker.handle(ListOffsetsRequest((("t", 0, timestamp),), level)).results
            assert result.error_code == ErrorCode.NONE
            return result.offset, result.timestamp

        assert at(0) == (0, 1_000)
        assert at(1_015) == (2, 1_020)  # inside the batch: record 2 is the first at or after it
        assert at(1_040) == (4, 1_040)
        assert at(1_500) == (5, 2_000)  # the open transaction's record, readable uncommitted
        assert at(1_500, READ_COMMITTED) == (-1, -1)  # past the last stable offset (5)
        assert at(3_000) == (-1, -1)
        assert at(-3) == (5, 2_000)  # MAX_TIMESTAMP
        [bad] = broker.handle(ListOffsetsRequest((("t", 0, -7),))).results
        assert bad.error_code == ErrorCode.INVALID_REQUEST
    finally:
        broker.close()
