"""Consumer.pause / resume (Kafka's flow control): a paused partition is neither fetched nor returned, its
position holds, what was fetched for it before is returned after resume, in order, nothing lost or repeated."""

from __future__ import annotations

import pytest

from idemcore import Broker, Consumer, Producer


def _fill(broker: Broker, partition: int, values: list[bytes]) -> None:
    with Producer(broker, linger_ms=0) as producer:
        for value in values:
            producer.send("t", value, partition=partition)


def _poll_all(consumer: Consumer, rounds: int = 20) -> list[tuple[int, bytes | None]]:
    got: list[tuple[int, bytes | None]] = []
    for _ in range(rounds):
        got += [(r.partition, r.value) for r in consumer.poll(max_records=3)]
    return got


def test_a_paused_partition_is_held_and_resumed_without_loss_or_repeat() -> None:
    broker = Broker({"t": 2})
    _fill(broker, 0, [b"a%d" % n for n in range(6)])
    _fill(broker, 1, [b"b%d" % n for n in range(6)])
    consumer = Consumer(broker, auto_offset_reset="earliest")
    consumer.assign([("t", 0), ("t", 1)])
    first = consumer.poll(max_records=3)  # partition 0's first fetch answered: the rest of it is now held
    assert {r.partition for r in first} == {0} and len(first) == 3
    consumer.pause([("t", 0)])
    assert consumer.paused() == {("t", 0)}
    _fill(broker, 0, [b"a%d" % n for n in range(6, 9)])
    while_paused = _poll_all(consumer)
    assert [v for p, v in while_paused] == [b"b%d" % n for n in range(6)]  # only partition 1
    assert consumer.position("t", 0) == 3  # held where it was
    consumer.resume([("t", 0)])
    assert consumer.paused() == set()
    after = _poll_all(consumer)
    assert [v for p, v in after] == [b"a%d" % n for n in range(3, 9)]
    assert consumer.position("t", 0) == 9


def test_pause_and_resume_name_a_partition_that_is_not_assigned() -> None:
    consumer = Consumer(Broker({"t": 2}))
    consumer.assign([("t", 0)])
    with pytest.raises(ValueError, match="t-1 is not assigned"):
        consumer.pause([("t", 1)])
    with pytest.raises(ValueError, match="t-1 is not assigned"):
        consumer.resume([("t", 1)])
    with pytest.raises(TypeError):
        consumer.pause([("t", "0")])  # type: ignore[list-item]
    assert consumer.paused() == set()


def test_a_partition_assigned_again_after_it_was_dropped_is_not_paused() -> None:
    consumer = Consumer(Broker({"t": 2}))
    consumer.assign([("t", 0), ("t", 1)])
    consumer.pause([("t", 0), ("t", 1)])
    consumer.assign([("t", 1)])  # kept: still paused; dropped: its state goes
    assert consumer.paused() == {("t", 1)}
    consumer.assign([("t", 0), ("t", 1)])
    assert consumer.paused() == {("t", 1)}
