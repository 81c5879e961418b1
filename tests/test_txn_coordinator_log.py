"""The ``__transaction_state`` record format and the partition of an id (Kafka's TransactionLog and
``Utils.abs(hashCode) % partitions``): golden bytes laid out by hand from TransactionLogKey.json and
TransactionLogValue.json, round trips, and hash vectors (Java's ``String.hashCode`` of each id, and the partition
Kafka's ``TransactionStateManager.partitionFor`` gives it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.broker.coordinator import coordinator_partition, java_abs, java_string_hash, partition_for
from idemcore.record.kafka_files.transaction_log import (
    TransactionLogFormatError,
    TransactionLogValue,
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    group_by_topic,
)

S = TransactionState

# ------------------------------------------------------------------ partition_for


@pytest.mark.parametrize(("text", "hash_code", "partition"), [
    ("a", 97, 47), ("b", 98, 48), ("one", 110182, 32), ("two", 115276, 26), ("my-txn", -1061187895, 45),
    ("polygenelubricants", -2147483648, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    ("transactional-id-0", 1051133890, 40), ("my-group", -1906497762, 12),
    ("txn-😀", -858070106, 6),  # outside the BMP: hashed as two UTF-16 surrogates
    ("groupé", -1237460406, 6), ("", 0, 0),
])
def test_java_string_hash_and_partition_vectors(text, hash_code, partition):
    assert java_string_hash(text) == hash_code
    assert partition_for(text) == partition
    assert coordinator_partition(text, 50) == partition


def test_utils_abs_is_not_to_positive():
    assert java_abs(-(2**31)) == 0
    assert java_abs(-5) == 5  # toPositive(-5), the producer partitioner's, would be 2147483643
    assert partition_for("polygenelubricants", 7) == 0


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        partition_for("a", 0)


# ------------------------------------------------------------------ golden bytes

KEY_MY_TXN = bytes.fromhex("0000" "0006" "6d792d74786e")  # version 0, length 6, "my-txn"

ONGOING = TransactionLogValue(
    producer_id=1000, producer_epoch=3, transaction_timeout_ms=60_000, state=S.ONGOING,
    partitions=(("t", (0, 2)), ("u", (1,))), last_update_timestamp_ms=1_700_000_000_123,
    start_timestamp_ms=1_700_000_000_000)
ONGOING_BYTES = bytes.fromhex(
    "0000"  # value version 0
    "00000000000003e8"  # producer id 1000
    "0003"  # epoch 3
    "0000ea60"  # timeout 60000
    "01"  # state Ongoing
    "00000002"  # 2 topics
    "0001" "74" "00000002" "00000000" "00000002"  # "t": [0, 2]
    "0001" "75" "00000001" "00000001"  # "u": [1]
    "0000018bcfe5687b"  # last update 1700000000123
    "0000018bcfe56800")  # start 1700000000000

EMPTY = TransactionLogValue(producer_id=7, producer_epoch=0, transaction_timeout_ms=1, state=S.EMPTY, partitions=None,
                            last_update_timestamp_ms=5, start_timestamp_ms=-1)
EMPTY_BYTES = bytes.fromhex("0000" "0000000000000007" "0000" "00000001" "00" "ffffffff" "0000000000000005"
                            "ffffffffffffffff")


def test_golden_key():
    assert encode_key("my-txn") == KEY_MY_TXN
    assert decode_key(KEY_MY_TXN) == "my-txn"


def test_golden_ongoing_value():
    assert encode_value(ONGOING) == ONGOING_BYTES
    assert decode_value(ONGOING_BYTES) == ONGOING


def test_golden_empty_value_has_null_partitions():
    assert encode_value(EMPTY) == EMPTY_BYTES
    assert decode_value(EMPTY_BYTES) == EMPTY


def test_complete_state_is_written_with_an_empty_array_not_null():
    value = TransactionLogValue(7, 0, 1, S.COMPLETE_COMMIT, (), 5, 4)
    assert encode_value(value)[17:21] == bytes(4)  # topic count 0
    assert decode_value(encode_value(value)) == value


def test_version_1_is_read_with_its_tagged_fields():
    data = bytes.fromhex(
        "0001" "00000000000003e8" "0003" "0000ea60" "02"
        "02"  # compact array of 1 topic
        "02" "74" "02" "00000005" "00"  # "t" [5], no tagged fields
        "0000018bcfe5687b" "0000018bcfe56800"
        "02"  # 2 tagged fields
        "00" "08" "00000000000003e7"  # tag 0: previous producer id 999
        "02" "02" "0002")  # tag 2: client transaction version 2
    assert decode_value(data) == TransactionLogValue(
        1000, 3, 60_000, S.PREPARE_COMMIT, (("t", (5,)),), 1_700_000_000_123, 1_700_000_000_000,
        previous_producer_id=999, next_producer_id=-1, client_transaction_version=2, version=1)


def test_tombstone_and_unknown_versions():
    assert decode_value(None) is None
    assert decode_key(bytes.fromhex("0001" "0001" "61")) is None  # Kafka skips unknown key versions
    with pytest.raises(TransactionLogFormatError, match="value version 2"):
        decode_value(bytes.fromhex("0002") + ONGOING_BYTES[2:])


@pytest.mark.parametrize("cut", [1, 2, 9, 20, 30, len(ONGOING_BYTES) - 1])
def test_truncated_values_name_the_field(cut):
    with pytest.raises(TransactionLogFormatError, match="record ends inside"):
        decode_value(ONGOING_BYTES[:cut])


def test_unknown_state_byte_is_refused():
    data = bytearray(EMPTY_BYTES)
    data[16] = 9
    with pytest.raises(TransactionLogFormatError, match="state 9"):
        decode_value(bytes(data))


def test_empty_with_partitions_and_version_1_fields_are_not_written():
    with pytest.raises(ValueError, match="Empty transaction has no partitions"):
        encode_value(TransactionLogValue(7, 0, 1, S.EMPTY, (("t", (0,)),), 5, -1))
    with pytest.raises(ValueError, match="version 0 cannot hold"):
        encode_value(TransactionLogValue(7, 0, 1, S.EMPTY, None, 5, -1, previous_producer_id=3))
    with pytest.raises(ValueError, match="out of range"):
        encode_value(TransactionLogValue(7, 40_000, 1, S.EMPTY, None, 5, -1))


def test_group_by_topic_sorts():
    assert group_by_topic([("u", 1), ("t", 2), ("t", 0)]) == (("t", (0, 2)), ("u", (1,)))


# ------------------------------------------------------------------ round trips

_ints = {"i16": st.integers(-(2**15), 2**15 - 1), "i32": st.integers(-(2**31), 2**31 - 1),
         "i64": st.integers(-(2**63), 2**63 - 1)}
_topics = st.text(min_size=0, max_size=12)
_partitions = st.dictionaries(_topics, st.frozensets(_ints["i32"], min_size=1, max_size=4), max_size=4)


@st.composite
def log_values(draw):
    state = draw(st.sampled_from(list(S)))
    groups = None if state is S.EMPTY else group_by_topic(
        (topic, p) for topic, ids in draw(_partitions).items() for p in ids)
    return TransactionLogValue(draw(_ints["i64"]), draw(_ints["i16"]), draw(_ints["i32"]), state, groups,
                               draw(_ints["i64"]), draw(_ints["i64"]))


@settings(max_examples=300, deadline=None)
@given(log_values())
def test_value_round_trip(value):
    assert decode_value(encode_value(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_key_round_trip(transactional_id):
    try:
        key = encode_key(transactional_id)
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form
        return
    assert decode_key(key) == transactional_id


@settings(max_examples=300, deadline=None)
@given(state=st.sampled_from([s for s in S if s not in (S.DEAD, S.PREPARE_EPOCH_FENCE)]), partitions=_partitions,
       producer_id=st.integers(0, 2**63 - 1), epoch=st.integers(0, 2**15 - 1), timeout=st.integers(1, 2**31 - 1),
       start=_ints["i64"], update=_ints["i64"])
def test_a_transition_is_written_as_its_log_value_is(state, partitions, producer_id, epoch, timeout, start, update):
    """The coordinator writes TxnTransitMetadata.log_value_bytes(): the bytes of encode_value(to_log_value())."""
    from idemcore.broker.coordinator import TxnTransitMetadata

    pairs = frozenset((topic, p) for topic, ids in partitions.items() for p in ids) if state is not S.EMPTY \
        else frozenset()
    transit = TxnTransitMetadata(producer_id, producer_id, epoch, -1, timeout, state, pairs, start, update)
    assert transit.log_value_bytes() == encode_value(transit.to_log_value())
    assert decode_value(transit.log_value_bytes()) == transit.to_log_value()
