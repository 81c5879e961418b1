"""Broker: one kernel call per produce request, persisted logs, recovery by replay (SPEC §2)."""

from __future__ import annotations

import pytest

from idemcore.broker import Broker
from idemcore.client.partitioner import murmur2, partition_for_key
from idemcore.net.messages import InitProducerIdRequest, ProduceRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch


def batch(partition, values, pid=5, epoch=0, seq=0, topic="t"):
    return RecordBatch(topic, partition, values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def codes(response):
    return [(r.error_code, r.base_offset) for r in response.responses]


@pytest.mark.parametrize("text, expected", [("21", -973932308), ("foobar", -790332482),
                                            ("a-little-bit-long-string", -985981536),
                                            ("a-little-bit-longer-string", -1486304829)])
def test_murmur2_matches_kafka(text, expected):
    assert murmur2(text.encode()) == expected


def test_partition_for_key_is_positive_murmur2_modulo():
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_request_answers_per_partition_and_duplicates_get_original_offsets(backend):
    broker = Broker({"t": 2}, backend=backend)
    request = ProduceRequest((batch(0, [b"a", b"b"]), batch(1, [b"c"]), batch(9, [b"x"])))
    first = broker.handle(request)
    assert codes(first) == [(0, 0), (0, 0), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    again = broker.handle(request)
    assert codes(again) == codes(first)
    assert broker.log("t", 0).log_end_offset == 2 and broker.log("t", 1).log_end_offset == 1
    gap = broker.handle(ProduceRequest((batch(0, [b"z"], seq=5),)))
    assert codes(gap) == [(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)]
    assert broker.log("t", 0).log_end_offset == 2  # nothing written for a rejected batch


def test_malformed_batches_are_rejected_and_not_written():
    broker = Broker({"t": 1})
    response = broker.handle(ProduceRequest((batch(0, ["text"]),)))
    assert codes(response) == [(ErrorCode.CORRUPT_MESSAGE, -1)]
    response = broker.handle(ProduceRequest((batch(0, []),)))
    assert codes(response) == [(ErrorCode.INVALID_RECORD, -1)]
    response = broker.handle(ProduceRequest((batch(0, [b"a"]), batch(0, [b"b"], seq=1))))
    assert codes(response) == [(0, 0), (ErrorCode.INVALID_REQUEST, -1)]
    assert broker.log("t", 0).log_end_offset == 1


def test_restarted_broker_still_catches_retries(tmp_path):
    request = ProduceRequest((batch(0, [b"a", b"b"]),))
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert codes(broker.handle(request)) == [(0, 0)]
        first_id = broker.handle(InitProducerIdRequest()).producer_id
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert codes(broker.handle(request)) == [(0, 0)]  # a duplicate, answered with the original offset
        assert broker.log("t", 0).log_end_offset == 2
        assert [v for _, _, v, _ in broker.log("t", 0).records()] == [b"a", b"b"]
        assert broker.handle(InitProducerIdRequest()).producer_id >= first_id + 1000  # a fresh block after restart
        assert codes(broker.handle(ProduceRequest((batch(0, [b"c"], seq=2),)))) == [(0, 2)]


def test_torn_tail_is_truncated_on_recovery(tmp_path):
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        broker.handle(ProduceRequest((batch(0, [b"a"]),)))
        broker.handle(ProduceRequest((batch(0, [b"b"], seq=1),)))
    path = tmp_path / "t-0" / "log"
    path.write_bytes(path.read_bytes()[:-3])  # the last frame lost its end in a crash
    with Broker({"t": 1}, data_dir=tmp_path) as broker:
        assert broker.log("t", 0).log_end_offset == 1
        assert broker.log("t", 0).truncated_bytes > 0
        assert codes(broker.handle(ProduceRequest((batch(0, [b"b"], seq=1),)))) == [(0, 1)]


def test_expired_producers_are_forgotten():
    broker = Broker({"t": 1}, producer_id_expiration_ms=1000)
    broker.handle(ProduceRequest((RecordBatch("t", 0, [b"a"], None, 5, 0, 0, max_timestamp=10),)))
    assert broker.remove_expired_producers(500) == 0
    assert broker.remove_expired_producers(1010) == 1
    # unknown again: any sequence is accepted
    assert codes(broker.handle(ProduceRequest((batch(0, [b"b"], seq=40),)))) == [(0, 1)]


def test_bad_topics_and_acks_raise():
    with pytest.raises(ValueError):
        Broker({"t": 0})
    with pytest.raises(ValueError):
        Broker({"t": 1}).handle(ProduceRequest((batch(0, [b"a"]),), acks=2))
