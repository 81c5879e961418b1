"""The group coordinator on its own, over an in-memory ``__consumer_offsets``: Kafka's error codes for
OffsetCommit / TxnOffsetCommit / OffsetFetch of simple groups, transactional offsets pending until their marker,
Kafka's rule for which commit wins, the record codec against bytes built by hand from Kafka's schemas, loading
from the log, and a model check over random sequences of commits, markers and restarts. The broker's kernels
under COORDINATOR origin are checked at the end."""

from __future__ import annotations

import struct
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore import Status, validate
from idemcore.broker.coordinator import coordinator_partition
from idemcore.broker.group import (
    GroupCoordinator,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetLogFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_length,
)
from idemcore.broker.group.offsets_log import GroupMetadataKey
from idemcore.engine.table import ProducerStateTable
from idemcore.net.messages import FetchedOffset, OffsetEntry
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.stored import StoredBatch

from .helpers import batches, data, marker

E = ErrorCode
T0 = 1_700_000_000_000
PARTITIONS = 3
#: Groups on distinct partitions of a 3-partition __consumer_offsets (checked below).
G, H = "g", "h"


class FakeLog:
    """``__consumer_offsets`` in memory: the batches the coordinator appends, markers the test writes; ``fail``
    makes the next appends answer that error and write nothing."""

    def __init__(self) -> None:
        self.batches: dict[int, list[StoredBatch]] = defaultdict(list)
        self.fail: int | None = None
        self.raises: BaseException | None = None

    def end(self, partition: int) -> int:
        stored = self.batches[partition]
        return stored[-1].next_offset if stored else 0

    def append(self, partition, records, producer_id, producer_epoch, transactional):
        if self.raises is not None:
            raise self.raises
        if self.fail is not None:
            return self.fail, -1
        base = self.end(partition)
        batch = RecordBatch("__consumer_offsets", partition, tuple(v for _, v in records),
                            tuple(k for k, _ in records), producer_id, producer_epoch, -1, T0, transactional)
        self.batches[partition].append(StoredBatch(base, batch))
        return 0, base

    def write_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        batch = RecordBatch("__consumer_offsets", partition, (), None, producer_id, 0, -1, T0, True)
        self.batches[partition].append(StoredBatch(self.end(partition), batch, control=(int(committed), 0)))

    def write_raw(self, partition: int, records, producer_id: int = -1, transactional: bool = False) -> None:
        batch = RecordBatch("__consumer_offsets", partition, tuple(v for _, v in records),
                            tuple(k for k, _ in records), producer_id, 0 if producer_id >= 0 else -1, -1, T0,
                            transactional)
        self.batches[partition].append(StoredBatch(self.end(partition), batch))


def coordinator(fake: FakeLog, load: bool = True, **kwargs) -> GroupCoordinator:
    kwargs.setdefault("partition_exists", lambda topic, partition: topic == "t" and 0 <= partition < 4)
    made = GroupCoordinator(fake, lambda: T0, offsets_partitions=PARTITIONS, **kwargs)
    if load:
        for partition in range(PARTITIONS):
            made.load(partition, list(fake.batches[partition]))
    return made


def entries(*offsets: tuple[int, int] | tuple[int, int, str]) -> tuple[OffsetEntry, ...]:
    return tuple(OffsetEntry("t", *offset) for offset in offsets)


def fetched(gc: GroupCoordinator, group: str, *partitions: int, stable: bool = True) -> dict[int, tuple[int, int]]:
    """partition -> (offset, error) of ``group`` on topic t (every partition with an offset when none are named)."""
    error, answer = gc.offset_fetch(group, [("t", p) for p in partitions] if partitions else None, stable)
    assert error is E.NONE
    return {p: (f.offset, int(f.error_code)) for (_, p), f in answer.items()}


def test_the_groups_of_these_tests_sit_on_different_partitions():
    assert coordinator_partition(G, PARTITIONS) != coordinator_partition(H, PARTITIONS)


# ---------------------------------------------------------------- error tables


@pytest.mark.parametrize(("group", "generation", "member", "known", "expected"), [
    ("g", -1, "", False, E.NONE),               # a simple commit makes the group
    ("g", -1, "consumer-1", False, E.NONE),     # Empty group, negative generation: any member id (ClassicGroup)
    ("g", -7, "", True, E.NONE),
    ("g", 0, "", False, E.ILLEGAL_GENERATION),  # a generation for a group Kafka does not know
    ("g", 5, "consumer-1", False, E.ILLEGAL_GENERATION),
    ("g", 0, "", True, E.UNKNOWN_MEMBER_ID),    # a known group has no members
    ("g", 5, "consumer-1", True, E.UNKNOWN_MEMBER_ID),
    (None, -1, "", False, E.INVALID_GROUP_ID),
    ("", -1, "", False, E.NONE),                # OffsetCommit accepts the empty group id (backward compatibility)
])
def test_offset_commit_group_checks(group, generation, member, known, expected):
    fake = FakeLog()
    gc = coordinator(fake)
    if known:
        assert gc.offset_commit(group, entries((3, 1))) == {("t", 3): E.NONE}
    answer = gc.offset_commit(group, entries((0, 10), (1, 11)), generation, member)
    assert answer == {("t", 0): expected, ("t", 1): expected}
    if group is not None:
        committed = fetched(gc, group, 0, 1)
        assert committed == ({0: (10, 0), 1: (11, 0)} if expected is E.NONE else {0: (-1, 0), 1: (-1, 0)})


@pytest.mark.parametrize(("group", "generation", "member", "known", "expected"), [
    ("g", -1, "", False, E.NONE),
    ("g", -1, "m", True, E.NONE),
    ("g", 1, "", False, E.ILLEGAL_GENERATION),
    ("g", 1, "m", True, E.UNKNOWN_MEMBER_ID),
    ("", -1, "", False, E.INVALID_GROUP_ID),    # TxnOffsetCommit refuses the empty group id
    (None, -1, "", False, E.INVALID_GROUP_ID),
])
def test_txn_offset_commit_group_checks(group, generation, member, known, expected):
    fake = FakeLog()
    gc = coordinator(fake)
    if known:
        gc.offset_commit(group, entries((3, 1)))
    written = sum(map(len, fake.batches.values()))
    answer = gc.txn_offset_commit("tx", group, 42, 0, entries((0, 10)), generation, member)
    assert answer == {("t", 0): expected}
    assert sum(map(len, fake.batches.values())) == written + (expected is E.NONE)


def test_partitions_the_broker_lacks_are_answered_before_the_group_and_the_rest_go_on():
    fake = FakeLog()
    gc = coordinator(fake)
    answer = gc.offset_commit(G, (OffsetEntry("t", 0, 1), OffsetEntry("t", 9, 2), OffsetEntry("nope", 0, 3)))
    assert answer == {("t", 0): E.NONE, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
                      ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    # Only unknown partitions: no group check (even a null group), no write.
    assert gc.offset_commit(None, entries((9, 1))) == {("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert gc.txn_offset_commit("tx", "", 1, 0, entries((9, 1))) == {("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert sum(map(len, fake.batches.values())) == 1


def test_metadata_longer_than_the_limit_is_refused_for_its_partition_only():
    fake = FakeLog()
    gc = coordinator(fake)
    astral = "\U0001F600"  # two UTF-16 units: Kafka counts String.length()
    assert java_length(astral * 2048) == 4096
    answer = gc.offset_commit(G, entries((0, 1, "x" * 4096), (1, 2, "x" * 4097), (2, 3, astral * 2048),
                                         (3, 4, astral * 2049)))
    assert answer == {("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE, ("t", 2): E.NONE,
                      ("t", 3): E.OFFSET_METADATA_TOO_LARGE}
    error, got = gc.offset_fetch(G, [("t", 0), ("t", 1), ("t", 2)])
    assert error is E.NONE
    assert (got[("t", 0)].metadata, got[("t", 1)].offset, got[("t", 2)].metadata) == ("x" * 4096, -1, astral * 2048)
    # A limit of its own; only refused partitions: nothing is written.
    small = coordinator(FakeLog(), offset_metadata_max_bytes=2)
    assert small.txn_offset_commit("tx", G, 1, 0, entries((0, 1, "abc"))) == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}
    assert not small.has_pending_offsets(G, "t", 0)


def test_negative_offsets_are_stored_as_given_and_null_metadata_is_empty():
    gc = coordinator(FakeLog())
    assert gc.offset_commit(G, (OffsetEntry("t", 0, -5, None),)) == {("t", 0): E.NONE}  # type: ignore[arg-type]
    assert gc.offset_fetch(G, [("t", 0)]) == (E.NONE, {("t", 0): FetchedOffset("t", 0, -5, "")})


def test_before_its_partition_is_loaded_a_group_is_not_coordinated_here():
    fake = FakeLog()
    gc = coordinator(fake, load=False)
    gc.load(coordinator_partition(H, PARTITIONS), [])
    assert gc.offset_commit(G, entries((0, 1))) == {("t", 0): E.NOT_COORDINATOR}
    assert gc.txn_offset_commit("tx", G, 1, 0, entries((0, 1))) == {("t", 0): E.NOT_COORDINATOR}
    assert gc.offset_fetch(G) == (E.NOT_COORDINATOR, {})
    assert gc.offset_commit(H, entries((0, 1))) == {("t", 0): E.NONE}
    assert gc.offset_fetch(None) == (E.INVALID_GROUP_ID, {})
    assert gc.loaded_partitions == {coordinator_partition(H, PARTITIONS)}


@pytest.mark.parametrize(("append_error", "expected"), [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.INVALID_PRODUCER_EPOCH, E.INVALID_PRODUCER_EPOCH),  # a fenced producer's TxnOffsetCommit
])
def test_a_failed_append_answers_the_coordinator_error_and_changes_nothing(append_error, expected):
    fake = FakeLog()
    gc = coordinator(fake)
    gc.offset_commit(G, entries((0, 1)))
    fake.fail = int(append_error)
    # Every partition that reached the coordinator gets the error, the too-large one too (Kafka replaces the
    # whole answer); the unknown partition keeps its own.
    plain = gc.offset_commit(G, entries((0, 2), (1, 3, "x" * 5000), (9, 1)))
    assert plain == {("t", 0): expected, ("t", 1): expected, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert gc.txn_offset_commit("tx", G, 7, 0, entries((0, 4))) == {("t", 0): expected}
    assert fetched(gc, G, 0, 1) == {0: (1, 0), 1: (-1, 0)}
    assert not gc.has_pending_offsets(G, "t", 0)


def test_a_writer_that_raises_is_a_storage_error():
    fake = FakeLog()
    gc = coordinator(fake)
    fake.raises = OSError("disk gone")
    assert gc.offset_commit(G, entries((0, 1))) == {("t", 0): E.NOT_COORDINATOR}
    assert fetched(gc, G) == {}


@pytest.mark.parametrize("call", [
    lambda gc: gc.offset_commit(G, [("t", 0, 1)]),
    lambda gc: gc.offset_commit(G, "t0"),
    lambda gc: gc.offset_commit(G, entries((0, 1)), "1"),
    lambda gc: gc.offset_commit(G, entries((0, 1)), -1, None),
    lambda gc: gc.offset_commit(7, entries((0, 1))),
    lambda gc: gc.offset_commit(G, (OffsetEntry("t", True, 1),)),
    lambda gc: gc.offset_commit(G, (OffsetEntry("t", 0, 1.5),)),
    lambda gc: gc.offset_commit(G, (OffsetEntry("t", 0, 1, b"m"),)),
    lambda gc: gc.offset_commit(G, (OffsetEntry("t", 0, 2**63),)),
    lambda gc: gc.offset_commit("\ud800", entries((0, 1))),
    lambda gc: gc.offset_commit("g" * 40000, entries((0, 1))),
    lambda gc: gc.txn_offset_commit(None, G, 1, 0, entries((0, 1))),
    lambda gc: gc.txn_offset_commit("tx", G, "1", 0, entries((0, 1))),
    lambda gc: gc.offset_fetch(G, [("t", "0")]),
    lambda gc: gc.offset_fetch(G, ("t", 0)),
    lambda gc: gc.offset_fetch(G, None, 1),
    lambda gc: gc.complete_transaction(0, 1, 1),
])
def test_arguments_of_the_wrong_type_raise_before_anything_changes(call):
    fake = FakeLog()
    gc = coordinator(fake)
    with pytest.raises((TypeError, ValueError)):
        call(gc)
    assert not fake.batches or not any(fake.batches.values())


# ---------------------------------------------------------------- transactional offsets


def test_a_txn_offset_commit_is_one_transactional_batch_with_the_producers_id_and_epoch():
    fake = FakeLog()
    gc = coordinator(fake)
    assert gc.txn_offset_commit("tx", G, 42, 3, entries((0, 10, "a"), (1, 11))) == {("t", 0): 0, ("t", 1): 0}
    (stored,) = fake.batches[coordinator_partition(G, PARTITIONS)]
    batch = stored.batch
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (42, 3, -1, True)
    assert [decode_key(k) for k in batch.keys] == [OffsetCommitKey(G, "t", 0), OffsetCommitKey(G, "t", 1)]
    assert [decode_value(v) for v in batch.values] == [OffsetCommitValue(10, "a", T0), OffsetCommitValue(11, "", T0)]
    gc.offset_commit(G, entries((2, 5)))
    plain = fake.batches[coordinator_partition(G, PARTITIONS)][-1].batch
    assert (plain.producer_id, plain.producer_epoch, plain.is_transactional) == (-1, -1, False)


@pytest.mark.parametrize("committed", [True, False])
def test_transactional_offsets_are_pending_until_the_marker(committed):
    fake = FakeLog()
    gc = coordinator(fake)
    p = coordinator_partition(G, PARTITIONS)
    gc.offset_commit(G, entries((0, 5)))
    gc.txn_offset_commit("tx", G, 42, 0, entries((0, 10), (1, 11)))
    assert fetched(gc, G, 0, 1) == {0: (-1, E.UNSTABLE_OFFSET_COMMIT), 1: (-1, E.UNSTABLE_OFFSET_COMMIT)}
    assert fetched(gc, G, 0, 1, stable=False) == {0: (5, 0), 1: (-1, 0)}
    assert fetched(gc, G) == {0: (-1, E.UNSTABLE_OFFSET_COMMIT)}  # all: only partitions with a committed offset
    assert fetched(gc, G, stable=False) == {0: (5, 0)}
    gc.complete_transaction(p, 41, True)  # another producer
    gc.complete_transaction((p + 1) % PARTITIONS, 42, True)  # another partition
    assert gc.has_pending_offsets(G, "t", 0) and gc.has_pending_offsets(G, "t", 1)
    fake.write_marker(p, 42, committed)
    gc.complete_transaction(p, 42, committed)
    after = {0: (10, 0), 1: (11, 0)} if committed else {0: (5, 0), 1: (-1, 0)}
    assert fetched(gc, G, 0, 1) == fetched(gc, G, 0, 1, stable=False) == after
    assert fetched(coordinator(fake), G, 0, 1) == after  # the log says the same
    gc.complete_transaction(p, 42, not committed)  # a second marker finds nothing pending
    assert fetched(gc, G, 0, 1) == after


def test_a_plain_commit_written_after_a_transactional_one_wins_at_its_commit():
    fake = FakeLog()
    gc = coordinator(fake)
    p = coordinator_partition(G, PARTITIONS)
    gc.offset_commit(G, entries((0, 5), (1, 5)))
    gc.txn_offset_commit("tx", G, 42, 0, entries((0, 10), (1, 10)))
    gc.offset_commit(G, entries((0, 7)))  # newer in the log than the transaction's offset for t-0
    assert fetched(gc, G, 0, 1, stable=False) == {0: (7, 0), 1: (5, 0)}
    fake.write_marker(p, 42, True)
    gc.complete_transaction(p, 42, True)
    assert fetched(gc, G, 0, 1) == {0: (7, 0), 1: (10, 0)}
    assert fetched(coordinator(fake), G, 0, 1) == {0: (7, 0), 1: (10, 0)}


def test_of_two_committed_transactions_the_later_record_wins_whatever_the_marker_order():
    for order in ((1, 2), (2, 1)):
        fake = FakeLog()
        gc = coordinator(fake)
        p = coordinator_partition(G, PARTITIONS)
        gc.txn_offset_commit("a", G, 1, 0, entries((0, 100)))
        gc.txn_offset_commit("b", G, 2, 0, entries((0, 200)))
        for pid in order:
            fake.write_marker(p, pid, True)
            gc.complete_transaction(p, pid, True)
        assert fetched(gc, G, 0) == fetched(coordinator(fake), G, 0) == {0: (200, 0)}


def test_a_group_known_only_through_its_open_transaction():
    fake = FakeLog()
    gc = coordinator(fake)
    p = coordinator_partition(G, PARTITIONS)
    gc.txn_offset_commit("tx", G, 42, 0, entries((0, 10)))
    assert gc.offset_commit(G, entries((1, 1)), 3, "m") == {("t", 1): E.UNKNOWN_MEMBER_ID}
    gc.complete_transaction(p, 42, False)  # aborted: nothing left of the group
    assert gc.offset_commit(G, entries((1, 1)), 3, "m") == {("t", 1): E.ILLEGAL_GENERATION}


# ---------------------------------------------------------------- the record codec


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


# Built field by field from OffsetCommitKey.json / OffsetCommitValue.json (big-endian, int16-length strings).
KEY_V1 = bytes.fromhex("0001" "0005") + b"group" + bytes.fromhex("0005") + b"topic" + bytes.fromhex("00000007")
VALUE_V3 = (bytes.fromhex("0003" "000000000000002a" "ffffffff" "0002") + b"md"
            + bytes.fromhex("0000018bcfe56800"))


def test_the_codec_writes_kafkas_bytes():
    assert encode_key("group", "topic", 7) == KEY_V1
    assert encode_value(OffsetCommitValue(42, "md", 1_700_000_000_000)) == VALUE_V3
    assert decode_key(KEY_V1) == OffsetCommitKey("group", "topic", 7)
    assert decode_value(VALUE_V3) == OffsetCommitValue(42, "md", 1_700_000_000_000)
    assert decode_value(None) is None
    wide = encode_key("gr\u00fcn", "t", 0)
    assert wide == bytes.fromhex("0001" "0005") + "gr\u00fcn".encode() + _s("t") + bytes(4)


@pytest.mark.parametrize(("data", "expected"), [
    (struct.pack(">hq", 0, 9) + _s("m") + struct.pack(">q", 5), OffsetCommitValue(9, "m", 5, version=0)),
    (struct.pack(">hq", 1, 9) + _s("m") + struct.pack(">qq", 5, 77), OffsetCommitValue(9, "m", 5, -1, 77, 1)),
    (struct.pack(">hq", 2, 9) + _s("") + struct.pack(">q", 5), OffsetCommitValue(9, "", 5, version=2)),
    (struct.pack(">hqi", 3, -3, 4) + _s("m") + struct.pack(">q", 5), OffsetCommitValue(-3, "m", 5, 4)),
    # Flexible: compact string (length + 1), then tagged fields (one unknown tag 5 of 2 bytes, skipped).
    (struct.pack(">hqi", 4, 9, 4) + b"\x02m" + struct.pack(">q", 5) + b"\x01\x05\x02zz",
     OffsetCommitValue(9, "m", 5, 4, version=4)),
    (VALUE_V3 + b"trailing", OffsetCommitValue(42, "md", 1_700_000_000_000)),  # ignored, as Kafka's reader does
])
def test_the_codec_reads_every_value_version(data, expected):
    assert decode_value(data) == expected


def test_key_versions_that_are_not_offset_commits_or_group_metadata_are_skipped():
    assert decode_key(struct.pack(">h", 0) + _s("g") + _s("t") + struct.pack(">i", 1)) == OffsetCommitKey("g", "t", 1)
    assert decode_key(struct.pack(">h", 2) + _s("g")) == GroupMetadataKey("g")  # read by group_metadata_log
    assert decode_key(struct.pack(">h", 3) + _s("g")) is None  # a KIP-848 record


@pytest.mark.parametrize("data", [
    b"\x00",
    KEY_V1[:-1],
    bytes.fromhex("0001" "0005") + b"gr",
    bytes.fromhex("0001" "ffff") + _s("t") + bytes(4),  # a null group
    bytes.fromhex("0001" "0002") + b"\xff\xfe" + _s("t") + bytes(4),
])
def test_damaged_keys_are_refused_with_one_line(data):
    with pytest.raises(OffsetLogFormatError) as raised:
        decode_key(data)
    assert "\n" not in str(raised.value) and str(raised.value)


@pytest.mark.parametrize("data", [
    b"",
    struct.pack(">h", 5) + bytes(30),
    VALUE_V3[:20],
    struct.pack(">hqi", 3, 1, -1) + struct.pack(">h", -1) + bytes(8),  # null metadata
    struct.pack(">hqi", 4, 9, 4) + b"\x00" + bytes(9),  # null compact metadata
    struct.pack(">hqi", 4, 9, 4) + b"\x01" + bytes(8),  # no tagged-field section
    struct.pack(">hqi", 4, 9, 4) + b"\x01" + bytes(8) + b"\xff\xff\xff\xff\xff\x01",
])
def test_damaged_values_are_refused_with_one_line(data):
    with pytest.raises(OffsetLogFormatError) as raised:
        decode_value(data)
    assert "\n" not in str(raised.value) and str(raised.value)


@pytest.mark.parametrize("value", [OffsetCommitValue(2**63, "", 0), OffsetCommitValue(1, "", 0, leader_epoch=2**31),
                                   OffsetCommitValue(1, "", 0, version=1), OffsetCommitValue(1, "", 0, 0, 5)])
def test_values_a_record_cannot_hold_are_refused(value):
    with pytest.raises(ValueError):
        encode_value(value)


# ---------------------------------------------------------------- loading


def test_load_replays_tombstones_other_record_types_and_markers():
    fake = FakeLog()
    p = coordinator_partition(G, PARTITIONS)
    value = encode_value(OffsetCommitValue(10, "", T0))
    fake.write_raw(p, [(struct.pack(">h", 3) + _s(G), b"a KIP-848 record, skipped"), (encode_key(G, "t", 0), value),
                       (encode_key(G, "t", 1), value)])
    fake.write_raw(p, [(encode_key(G, "t", 2), value), (encode_key(G, "t", 3), value)], producer_id=9,
                   transactional=True)
    fake.write_raw(p, [(encode_key(G, "t", 1), None), (encode_key(G, "t", 3), None)])  # tombstones
    gc = coordinator(fake)
    assert fetched(gc, G, 0, 1, 2, 3) == {0: (10, 0), 1: (-1, 0), 2: (-1, E.UNSTABLE_OFFSET_COMMIT), 3: (-1, 0)}
    fake.write_marker(p, 9, True)
    assert fetched(coordinator(fake), G, 0, 1, 2, 3) == {0: (10, 0), 1: (-1, 0), 2: (10, 0), 3: (-1, 0)}


def test_a_damaged_record_fails_the_load_and_leaves_the_partition_as_it_was():
    fake = FakeLog()
    gc = coordinator(fake)
    gc.offset_commit(G, entries((0, 3)))
    p = coordinator_partition(G, PARTITIONS)
    good = list(fake.batches[p])
    fake.write_raw(p, [(encode_key(G, "t", 1), b"\x00\x03\x00")])
    with pytest.raises(OffsetLogFormatError, match=rf"__consumer_offsets-{p} at offset 1: .*offset") as raised:
        gc.load(p, fake.batches[p])
    assert "\n" not in str(raised.value)
    assert fetched(gc, G, 0) == {0: (3, 0)}
    keyless = [StoredBatch(1, RecordBatch("__consumer_offsets", p, (b"x",), None))]
    with pytest.raises(OffsetLogFormatError, match="without a key"):
        gc.load(p, good + keyless)
    with pytest.raises(ValueError):
        gc.load(PARTITIONS, [])


# ---------------------------------------------------------------- the model check

#: "h" and "k" share a partition (a marker there ends both groups' pending offsets), "g" has its own.
GROUPS = ("g", "h", "k")
TPS = (0, 1)
PIDS = (1, 2)
_group = st.sampled_from(("g", "g", "g", "h", "k"))  # mostly one group: its commits interleave
_commit = st.tuples(st.just("commit"), _group, st.sampled_from(TPS), st.integers(-2, 50))
_txn = st.tuples(st.just("txn"), st.sampled_from(PIDS), _group, st.sampled_from(TPS), st.integers(0, 50))
_marker = st.tuples(st.just("marker"), st.sampled_from(PIDS), _group, st.booleans())
_ops = st.one_of(
    _commit, _txn, _marker, _commit, _txn, _marker,  # the interleavings that matter, twice as often
    st.tuples(st.just("restart")),
    st.tuples(st.just("fail"), st.sampled_from([E.NOT_ENOUGH_REPLICAS, E.KAFKA_STORAGE_ERROR])),
    st.tuples(st.just("member"), st.sampled_from(GROUPS)),
)


class Model:
    """What Kafka's rule says, read off each partition's history directly: a record counts once it is plain or
    its producer's next marker after it is a COMMIT; a group's offset is its last counting record in log order;
    a record whose producer has no marker after it is pending."""

    def __init__(self) -> None:
        self.history: dict[int, list[tuple]] = defaultdict(list)

    def view(self, group: str) -> tuple[dict[int, int], set[int]]:
        history = self.history[coordinator_partition(group, PARTITIONS)]
        committed: dict[int, int] = {}
        pending: set[int] = set()
        for i, event in enumerate(history):
            if event[0] != "record" or event[2] != group:
                continue
            _, pid, _, tp, offset = event
            if pid is None:
                committed[tp] = offset
                continue
            outcome = next((e[2] for e in history[i + 1:] if e[0] == "marker" and e[1] == pid), None)
            if outcome is None:
                pending.add(tp)
            elif outcome:
                committed[tp] = offset
        return committed, pending


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_ops, min_size=12, max_size=40))
def test_random_commits_markers_and_restarts_agree_with_the_model(ops):
    fake = FakeLog()
    gc = coordinator(fake, partition_exists=None)
    model = Model()
    for op in ops:
        kind = op[0]
        if kind == "restart":
            gc = coordinator(fake, partition_exists=None)
        elif kind == "fail":
            fake.fail = int(op[1])
        elif kind == "commit":
            _, group, tp, offset = op
            answer = gc.offset_commit(group, entries((tp, offset)))
            if fake.fail is None:
                assert answer == {("t", tp): E.NONE}
                model.history[coordinator_partition(group, PARTITIONS)].append(("record", None, group, tp, offset))
            else:
                assert answer[("t", tp)] in (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR)
            fake.fail = None
        elif kind == "txn":
            _, pid, group, tp, offset = op
            answer = gc.txn_offset_commit(f"tx{pid}", group, pid, 0, entries((tp, offset)))
            if fake.fail is None:
                assert answer == {("t", tp): E.NONE}
                model.history[coordinator_partition(group, PARTITIONS)].append(("record", pid, group, tp, offset))
            fake.fail = None
        elif kind == "marker":  # as the broker does: written to the group's partition, then the coordinator told
            _, pid, group, committed = op
            partition = coordinator_partition(group, PARTITIONS)
            fake.write_marker(partition, pid, committed)
            model.history[partition].append(("marker", pid, committed))
            gc.complete_transaction(partition, pid, committed)
        else:  # a generation: which error tells whether the group is known
            (_, group) = op
            committed, pending = model.view(group)
            known = bool(committed or pending)
            assert gc.offset_commit(group, entries((0, 1)), 1, "m") == {
                ("t", 0): E.UNKNOWN_MEMBER_ID if known else E.ILLEGAL_GENERATION}
        for group in GROUPS:
            committed, pending = model.view(group)
            assert fetched(gc, group, *TPS, stable=False) == {tp: (committed.get(tp, -1), 0) for tp in TPS}
            assert fetched(gc, group, *TPS) == {
                tp: (-1, E.UNSTABLE_OFFSET_COMMIT) if tp in pending else (committed.get(tp, -1), 0) for tp in TPS}
            assert fetched(gc, group, stable=False) == {tp: (committed[tp], 0) for tp in sorted(committed)}
    for group in GROUPS:  # and a final restart answers the same
        assert fetched(coordinator(fake, partition_exists=None), group, *TPS) == fetched(gc, group, *TPS)


# ---------------------------------------------------------------- the kernels under COORDINATOR origin


def test_a_coordinator_batch_without_a_sequence_opens_the_transaction_in_every_backend(backend):
    state = ProducerStateTable()
    opened = validate(batches([data(7, 2, -1, is_transactional=True, record_count=3)]), state,
                      origin="coordinator", backend=backend)
    assert (int(opened.status[0]), int(opened.error_code[0]), int(opened.base_offset[0]),
            int(opened.last_offset[0])) == (Status.APPENDED, 0, 0, 2)
    assert int(state.row_txn_first_offset[state.row_of(0, 7)]) == 0  # the marker closes it; the LSO holds here
    again = validate(batches([data(7, 2, -1, is_transactional=True)]), state, origin="coordinator", backend=backend)
    assert int(again.status[0]) == Status.APPENDED and int(again.base_offset[0]) == 3  # no sequence: no duplicate
    stale = validate(batches([data(7, 1, -1, is_transactional=True)]), state, origin="coordinator", backend=backend)
    assert (int(stale.status[0]), int(stale.error_code[0])) == (Status.REJECTED, E.INVALID_PRODUCER_EPOCH)
    plain = validate(batches([data(7, 2, -1)]), state, origin="coordinator", backend=backend)
    assert int(plain.error_code[0]) == E.INVALID_TXN_STATE  # the transaction is open
    closed = validate(batches([marker(7, 2)]), state, origin="coordinator", backend=backend)
    assert len(closed.completed_txns) == 1 and int(closed.completed_txns.first_offset[0]) == 0
    assert int(state.row_txn_first_offset[state.row_of(0, 7)]) == -1
    # A client may not leave the sequence out.
    client = validate(batches([data(8, 0, -1, is_transactional=True)]), state, origin="client", backend=backend)
    assert (int(client.status[0]), int(client.error_code[0])) == (Status.REJECTED, E.INVALID_RECORD)
