"""The idempotent producer against a hand-answered transport: Kafka's client cases (docs/rules.md §3)."""

from __future__ import annotations

import pytest

from idemcore.broker import Broker
from idemcore.client import ConfigError, DeliveryError, Producer
from idemcore.client.config import ProducerConfig
from idemcore.protocol.codes import ErrorCode

from .scripted import ScriptedTransport, sent_batches


def one_batch_per_record(transport, **config) -> Producer:
    # batch_size=1: every record fills a batch of its own; linger 0: sent as soon as possible.
    return Producer(transport, batch_size=1, linger_ms=0, retry_backoff_ms=0, **config)


def pump(producer: Producer, rounds: int = 10) -> None:
    for _ in range(rounds):
        producer.poll()


@pytest.mark.parametrize(("setting", "message"), [
    ({"acks": 1}, r"acks must be 'all' \(got 1\)"),
    ({"acks": 0}, r"acks must be 'all' \(got 0\)"),
    ({"retries": 0}, "retries must be greater than 0"),
    ({"max_in_flight_requests_per_connection": 6},
     r"max_in_flight_requests_per_connection must be at most 5 \(got 6\)"),
])
def test_explicit_idempotence_rejects_conflicting_settings(setting, message):
    with pytest.raises(ConfigError, match=f"^enable_idempotence=True requires: {message}$"):
        ProducerConfig.from_kwargs(enable_idempotence=True, **setting)


def test_implicit_idempotence_is_turned_off_by_conflicting_settings():
    assert ProducerConfig.from_kwargs(acks=1).enable_idempotence is False
    assert ProducerConfig.from_kwargs().enable_idempotence is True


@pytest.mark.parametrize(("setting", "message"), [
    ({"linger_ms": -1}, "linger_ms must be at least 0, got -1"),
    ({"acks": "two"}, "acks must be 'all', -1, 0 or 1, got 'two'"),
    ({"bogus": 1}, r"unknown producer setting\(s\): bogus"),
    ({"batch_size": 1.5}, r"batch_size must be an integer, got 1\.5"),
    ({"delivery_timeout_ms": 1000, "request_timeout_ms": 30_000},
     r"delivery_timeout_ms \(1000\) must be at least linger_ms \+ request_timeout_ms \(30005\)"),
])
def test_bad_settings_raise_config_error(setting, message):
    with pytest.raises(ConfigError, match=message):
        Producer(ScriptedTransport(), **setting)


def test_sequences_are_assigned_at_first_drain_and_five_in_flight_at_most():
    transport = ScriptedTransport()
    producer = one_batch_per_record(transport)
    futures = [producer.send("t", b"r%d" % i) for i in range(8)]
    pump(producer)
    # Beyond Kafka: until the broker has acknowledged a batch of this epoch, one at a time.
    assert sent_batches(transport) == [(0, 0, 1)]
    transport.reply(transport.produce_requests[0], base_offset=0)
    pump(producer)
    assert sent_batches(transport) == [(i, 0, 1) for i in range(6)]  # then five in flight, the rest wait
    for offset, request in enumerate(transport.produce_requests[1:], start=1):
        transport.reply(request, base_offset=offset)
    pump(producer)
    assert sent_batches(transport)[6:] == [(6, 0, 1), (7, 0, 1)]
    for offset, request in enumerate(transport.produce_requests[6:], start=6):
        transport.reply(request, base_offset=offset)
    pump(producer)
    assert [f.result().offset for f in futures] == list(range(8))


def acknowledged_start(transport, producer) -> None:
    """Send and acknowledge one record, so that the partition may have five batches in flight."""
    future = producer.send("t", b"start")
    pump(producer)
    transport.reply(transport.produce_requests[-1], base_offset=0)
    pump(producer)
    assert future.result().offset == 0
    transport.produce_requests.clear()


def records_in_flight(count: int, **config):
    """A producer past its first acknowledged record, with ``count`` more records sent one batch each."""
    transport = ScriptedTransport()
    producer = one_batch_per_record(transport, **config)
    acknowledged_start(transport, producer)
    futures = [producer.send("t", b"r%d" % i) for i in range(count)]
    pump(producer)
    return transport, producer, futures


def test_unknown_producer_id_bumps_epoch_and_resends_from_sequence_zero():
    transport, producer, futures = records_in_flight(4)  # batch 0 of Kafka's case acknowledged, 1..4 in flight
    in_flight = list(transport.produce_requests)
    assert sent_batches(transport) == [(i, 0, 1) for i in range(1, 5)]
    transport.reply(in_flight[0], ErrorCode.UNKNOWN_PRODUCER_ID)
    pump(producer, 1)
    for request in in_flight[1:]:
        transport.reply(request, ErrorCode.UNKNOWN_PRODUCER_ID)
    resent = []
    for offset in range(1, 5):  # retries go one at a time, oldest first
        pump(producer, 3)
        request = transport.produce_requests[-1]
        resent.append((request.batches[0].base_sequence, request.batches[0].producer_epoch))
        transport.reply(request, base_offset=offset)
    pump(producer, 3)
    assert resent == [(0, 1), (1, 1), (2, 1), (3, 1)]  # batches 2..5 of the case as sequences 0..3, epoch 1
    assert producer.idempotence.producer_epoch == 1
    assert [f.result().offset for f in futures] == [1, 2, 3, 4]


def send_one_answered(error_code: int):
    """A fresh producer's first record, answered with ``error_code``: its future."""
    transport = ScriptedTransport()
    producer = one_batch_per_record(transport)
    future = producer.send("t", b"x")
    pump(producer)
    transport.reply(transport.produce_requests[0], error_code)
    pump(producer)
    return future


def test_duplicate_sequence_number_is_success_without_offset():
    assert send_one_answered(ErrorCode.DUPLICATE_SEQUENCE_NUMBER).result().offset == -1


def test_out_of_order_for_a_batch_after_a_failed_one_is_retried_without_bump():
    transport, producer, futures = records_in_flight(2)
    first, second = transport.produce_requests
    transport.reply(first, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    transport.reply(second, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    pump(producer, 3)
    assert sent_batches(transport)[2] == (1, 0, 1)  # the failed one first, same sequence and epoch
    transport.reply(transport.produce_requests[2], base_offset=1)
    pump(producer, 3)
    assert sent_batches(transport)[3] == (2, 0, 1)
    transport.reply(transport.produce_requests[3], base_offset=2)
    pump(producer)
    assert producer.idempotence.epoch_bumps == 0
    assert [f.result().offset for f in futures] == [1, 2]


def test_expiry_of_every_sent_batch_leaves_sequences_unresolved_then_bumps_the_epoch():
    transport, producer, futures = records_in_flight(3, delivery_timeout_ms=1000, request_timeout_ms=900)
    assert sent_batches(transport) == [(1, 0, 1), (2, 0, 1), (3, 0, 1)]
    transport.now = 1000  # past the delivery timeout, no answer ever came
    pump(producer, 2)
    for future in futures:
        expected = r"^t-0: no answer within request_timeout_ms=900 \(NETWORK_EXCEPTION\)$"
        with pytest.raises(DeliveryError, match=expected):
            future.result()
    assert producer.idempotence.epoch_bumps == 1
    later = producer.send("t", b"later")
    pump(producer)
    assert sent_batches(transport)[-1] == (0, 1, 1)  # new epoch, sequence 0
    transport.reply(transport.produce_requests[-1], base_offset=4)
    pump(producer)
    assert later.result().offset == 4


def test_non_retriable_error_fails_the_record():
    future = send_one_answered(ErrorCode.INVALID_RECORD)
    with pytest.raises(DeliveryError, match=r"^t-0: .*\(INVALID_RECORD\)$") as raised:
        future.result()
    assert raised.value.error_code == ErrorCode.INVALID_RECORD


def test_producer_against_broker_keyed_records_keep_order_per_partition():
    broker = Broker({"t": 4})
    producer = Producer(broker, batch_size=64)
    keys = [b"k%d" % (i % 10) for i in range(500)]
    futures = [producer.send("t", b"v%d" % i, key=k) for i, k in enumerate(keys)]
    producer.flush()
    results = [f.result() for f in futures]
    from idemcore.client.partitioner import partition_for_key
    assert [r.partition for r in results] == [partition_for_key(k, 4) for k in keys]
    for partition_log in broker.logs():
        values = [int(v[1:]) for _, _, v, _ in partition_log.records()]
        assert values == sorted(values)
    assert sum(log.log_end_offset for log in broker.logs()) == 500


def test_send_batch_offsets_match_the_log():
    broker = Broker({"t": 3})
    producer = Producer(broker, batch_size=100)
    values = [b"%05d" % i for i in range(1000)]
    offsets = producer.send_batch("t", values, keys=values).result()
    assert len(offsets) == 1000 and (offsets >= 0).all()
    stored = {v: (p.partition, o) for p in broker.logs() for o, _, v, _ in p.records()}
    assert len(stored) == 1000


def test_send_rejects_non_bytes_and_unknown_topics():
    producer = Producer(Broker({"t": 1}))
    with pytest.raises(TypeError, match="value must be bytes, got str"):
        producer.send("t", "text")
    with pytest.raises(KeyError, match=r"unknown topic 'nope'; the broker has \['t'\]"):
        producer.send("nope", b"x")
    with pytest.raises(ValueError, match="partition 3 out of range for topic 't' with 1 partitions"):
        producer.send("t", b"x", partition=3)


def test_out_of_order_for_a_sequence_already_passed_counts_as_delivered():
    # Batch 1's answer is lost; batch 2 is acknowledged; batch 1's retry has left the broker's window.
    transport, producer, futures = records_in_flight(2)
    first, second = transport.produce_requests
    transport.reply(second, base_offset=2)
    transport.reply(first, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    pump(producer)
    assert futures[0].result().offset == -1  # delivered, offset unknown
    assert futures[1].result().offset == 2
    assert producer.idempotence.epoch_bumps == 0 and len(transport.produce_requests) == 2  # nothing resent


def test_a_record_sent_after_a_split_starts_a_new_batch_and_is_written():
    """A split half has fixed sequences: a record appended to it would reuse the next batch's sequence."""
    broker = Broker({"t": 1}, message_max_bytes=300)
    producer = Producer(broker, linger_ms=60_000)
    futures = [producer.send("t", letter * 100, partition=0) for letter in (b"A", b"B", b"C")]
    while producer.metrics["split_batches"] == 0:  # one round: the 3-record batch is refused and split
        producer.accumulator.flushing = True
        producer.poll()
        producer.accumulator.flushing = False
    futures.append(producer.send("t", b"D" * 10, partition=0))
    producer.flush()
    futures.append(producer.send("t", b"E" * 10, partition=0))
    producer.flush()
    assert [f.result().offset for f in futures] == [0, 1, 2, 3, 4]
    assert [v[:1] for _, _, v, _ in broker.log("t", 0).records()] == [b"A", b"B", b"C", b"D", b"E"]


def test_send_batch_answers_in_input_order_and_takes_no_later_records():
    broker = Broker({"t": 2})
    producer = Producer(broker, linger_ms=60_000)
    keys = [b"k%d" % i for i in range(8)]
    first = producer.send_batch("t", [b"v%d" % i for i in range(8)], keys)
    later = producer.send("t", b"later", partition=0)  # must not join first's batch for partition 0
    offsets, partitions = first.result(), first.partitions()
    assert later.result().offset == int((partitions == 0).sum())
    for i in range(8):
        assert broker.log("t", int(partitions[i])).batches  # each record at its own partition and offset
        stored = {offset: value for offset, _, value, _ in broker.log("t", int(partitions[i])).records()}
        assert stored[int(offsets[i])] == b"v%d" % i
    assert len(first.result()) == 8


def test_a_partly_failed_send_batch_says_which_records_to_send_again():
    from idemcore.client import BatchDeliveryError

    broker = Broker({"t": 2}, message_max_bytes=100)
    producer = Producer(broker)
    values = [b"small", b"x" * 80, b"tiny"]  # the 80-byte record alone is above the broker's limit
    future = producer.send_batch("t", values, [b"a", b"b", b"c"], partition=None)
    with pytest.raises(BatchDeliveryError, match=r"^1 of 3 records not delivered: .*message_max_bytes=100") as caught:
        future.result()
    assert caught.value.failed.tolist() == [False, True, False]
    delivered = caught.value.offsets[~caught.value.failed]
    assert (delivered >= 0).all() and caught.value.offsets[1] == -1


def test_send_batch_takes_none_keys_as_send_does():
    broker = Broker({"t": 3})
    producer = Producer(broker)
    keys = [b"a", None, b"b", None]
    future = producer.send_batch("t", [b"0", b"1", b"2", b"3"], keys)
    offsets, partitions = future.result(), future.partitions()
    for i, key in enumerate(keys):
        stored = {o: (k, v) for o, k, v, _ in broker.log("t", int(partitions[i])).records()}
        assert stored[int(offsets[i])] == (key, b"%d" % i)
    with pytest.raises(TypeError, match="every element of keys must be bytes or None"):
        producer.send_batch("t", [b"x"], ["text"])
