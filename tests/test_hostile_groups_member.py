"""A hostile pass over idemcore's Consumer in classic groups: misuse answered with one-line errors naming the
value; a rebalance listener that raises (Kafka finishes the rebalance, then surfaces the error from ``poll``,
once); close twice, close and commit in the middle of a rebalance, calls after close; a member whose join answer
is lost rejoins without two members owning one partition."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from idemcore.broker import Broker
from idemcore.client.consumer import Consumer, ConsumerClosedError, ConsumerError, IllegalStateError
from idemcore.client.group_member import FencedInstanceIdError
from idemcore.net.membership import JoinGroupRequest, SyncGroupRequest
from idemcore.net.messages import Request
from idemcore.protocol.constants import TopicPartition
from tests.test_consumer_group_member import (
    GROUP,
    MAX_TICKS,
    PARTITIONS,
    TOPIC,
    Clock,
    ClockedTransport,
    Recorder,
    every,
    exact_cover,
    member,
    run,
)


@pytest.fixture
def setup() -> Iterator[tuple[Broker, ClockedTransport]]:
    clock = Clock()
    broker = Broker({TOPIC: PARTITIONS}, clock=clock, offsets_topic_partitions=3)
    try:
        yield broker, ClockedTransport(broker, clock)
    finally:
        broker.close()


class Boom(Exception):
    pass


class Raising(Recorder):
    """A listener whose ``method`` raises the first ``times`` times it is called (after recording the call)."""

    def __init__(self, method: str, times: int = 1) -> None:
        super().__init__()
        self.method, self.times = method, times

    def _maybe_raise(self, kind: str) -> None:
        if kind == self.method and self.times > 0:
            self.times -= 1
            raise Boom(f"listener {kind} failed")

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        super().on_partitions_revoked(partitions)
        self._maybe_raise("revoked")

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        super().on_partitions_assigned(partitions)
        self._maybe_raise("assigned")

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        super().on_partitions_lost(partitions)
        self._maybe_raise("lost")


def poll_catching(consumers: list[Consumer], transport: ClockedTransport, done, errors: list[Exception]) -> None:
    for _ in range(MAX_TICKS):
        for consumer in consumers:
            try:
                consumer.poll(timeout_ms=0)
            except Boom as error:
                errors.append(error)
        if done():
            return
        transport.tick()
    raise AssertionError(f"not done: {[sorted(c.assignment()) for c in consumers]}")


def test_a_listener_raising_in_on_partitions_assigned_surfaces_once_from_poll_after_the_assignment(setup):
    _broker, transport = setup
    listener = Raising("assigned")
    consumer = member(transport, "c0")
    consumer.subscribe([TOPIC], listener)
    errors: list[Exception] = []
    poll_catching([consumer], transport, lambda: bool(errors), errors)
    assert consumer.assignment() == every(), "the assignment is taken before the listener's error is raised"
    assert len(errors) == 1 and "listener assigned failed" in str(errors[0])
    for _ in range(20):  # the error is raised once, the listener is not called again for the same assignment
        consumer.poll(timeout_ms=0)
        transport.tick()
    assert [k for k, _ in listener.events] == ["assigned"], listener.events
    consumer.close()


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_a_listener_raising_in_on_partitions_revoked_does_not_stall_the_rebalance(setup, strategy):
    _broker, transport = setup
    listener = Raising("revoked")
    first = member(transport, "c0", partition_assignment_strategy=[strategy])
    first.subscribe([TOPIC], listener)
    errors: list[Exception] = []
    poll_catching([first], transport, lambda: first.assignment() == every(), errors)
    second = member(transport, "c1", partition_assignment_strategy=[strategy])
    second.subscribe([TOPIC])
    both = [first, second]
    poll_catching(both, transport, lambda: exact_cover(both, every()) and bool(second.assignment())
                  and bool(first.assignment()), errors)
    assert len(errors) == 1 and "listener revoked failed" in str(errors[0])
    for consumer in both:
        consumer.close()


def test_misuse_is_refused_with_one_line_errors_naming_the_value(setup):
    _broker, transport = setup
    plain = Consumer(transport, client_id="nogroup")
    with pytest.raises(ConsumerError, match="nogroup"):
        plain.subscribe([TOPIC])
    consumer = member(transport, "c0")
    consumer.subscribe([TOPIC])
    with pytest.raises(IllegalStateError, match=r"\['t'\]"):
        consumer.assign([(TOPIC, 0)])

    class HalfListener:
        def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
            pass

    with pytest.raises(TypeError, match="on_partitions_assigned"):
        consumer.subscribe([TOPIC], HalfListener())  # type: ignore[arg-type]

    class NotCallable:
        on_partitions_revoked = on_partitions_assigned = 3
    with pytest.raises(TypeError, match="on_partitions_revoked"):
        consumer.subscribe([TOPIC], NotCallable())  # type: ignore[arg-type]
    class JunkLost(HalfListener):
        on_partitions_lost = "later"

        def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
            pass

    with pytest.raises(TypeError, match="on_partitions_lost must be callable or absent, got 'later'"):
        consumer.subscribe([TOPIC], JunkLost())  # type: ignore[arg-type]
    for bad in (b"t", {"t": 1}, 3, None):
        with pytest.raises(TypeError) as caught:
            consumer.subscribe(bad)  # type: ignore[arg-type]
        assert repr(bad)[:10] in str(caught.value) and "\n" not in str(caught.value)
    for bad_topic in ("", 3):
        with pytest.raises(ValueError, match="non-empty string"):
            consumer.subscribe([TOPIC, bad_topic])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"'\('"):
        consumer.subscribe("(")
    assert consumer.subscription() == {TOPIC}, "a refused subscribe changes nothing"
    consumer.close()
    plain.close()


def test_close_twice_and_calls_after_close(setup):
    _broker, transport = setup
    consumer = member(transport, "c0")
    consumer.subscribe([TOPIC])
    run(transport, [consumer], lambda: consumer.assignment() == every())
    consumer.close()
    consumer.close()
    for call in (lambda: consumer.poll(), lambda: consumer.subscribe([TOPIC]), consumer.unsubscribe,
                 consumer.subscription, lambda: consumer.commit(), consumer.consumer_group_metadata,
                 lambda: consumer.commit({(TOPIC, 0): 1}), lambda: consumer.committed([(TOPIC, 0)]),
                 lambda: consumer.assign([(TOPIC, 0)])):
        with pytest.raises(ConsumerClosedError, match="c0"):
            call()


class Holding(ClockedTransport):
    """Holds (never delivers) the answers to requests of a chosen kind while ``holding`` is set."""

    kinds: tuple[type, ...] = ()
    holding = False

    def send(self, client: str, request: Request) -> None:
        if self.holding and isinstance(request, self.kinds):
            return  # lost on the way: the member's request timeout gives it up
        super().send(client, request)


@pytest.mark.parametrize("kind", [JoinGroupRequest, SyncGroupRequest])
def test_a_lost_join_or_sync_is_given_up_and_the_member_rejoins_with_no_partition_owned_twice(setup, kind):
    broker, _ = setup
    transport = Holding(broker, _.clock)
    consumers = [member(transport, f"c{i}", request_timeout_ms=2_000) for i in range(2)]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    run(transport, consumers, lambda: exact_cover(consumers, every()))
    transport.kinds, transport.holding = (kind,), True
    third = member(transport, "c2", request_timeout_ms=2_000)
    third.subscribe([TOPIC])
    everyone = [*consumers, third]
    for _tick in range(300):  # the lost requests time out; nobody may own a partition another owns
        for consumer in everyone:
            consumer.poll(timeout_ms=0)
        owned = [c.assignment() for c in everyone]
        assert sum(map(len, owned)) == len(set().union(*owned)), owned
        transport.tick()
    transport.holding = False
    run(transport, everyone, lambda: exact_cover(everyone, every()) and all(c.assignment() for c in everyone))
    for consumer in everyone:
        consumer.close()


def test_close_and_commit_in_the_middle_of_a_rebalance(setup):
    _broker, transport = setup
    consumers = [member(transport, f"c{i}") for i in range(2)]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    run(transport, consumers, lambda: exact_cover(consumers, every()))
    third = member(transport, "c2")
    third.subscribe([TOPIC])
    for _tick in range(5):  # c2's join starts a rebalance; c0 and c1 hear of it at their heartbeats
        third.poll(timeout_ms=0)
        transport.tick()
    for _tick in range(MAX_TICKS):
        consumers[0].poll(timeout_ms=0)
        third.poll(timeout_ms=0)
        group = consumers[0]._group
        if group is not None and group.joining:
            break
        transport.tick()
    else:
        raise AssertionError("c0 never rejoined")
    consumers[0].commit()  # during the rebalance: no generation change is hidden, it just commits or fails cleanly
    consumers[0].close()
    rest = [consumers[1], third]
    run(transport, rest, lambda: exact_cover(rest, every()) and all(c.assignment() for c in rest))
    for consumer in rest:
        consumer.close()
    assert GROUP


class CommitsOnRevoke(Recorder):
    """Kafka's usual listener: commit what was read before giving the partitions up."""

    def __init__(self) -> None:
        super().__init__()
        self.consumer: Consumer | None = None
        self.commits = 0

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        super().on_partitions_revoked(partitions)
        assert self.consumer is not None
        self.consumer.commit({tp: 1 for tp in partitions})
        self.commits += 1


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_listener_that_commits_in_on_partitions_revoked_commits_and_the_group_settles(setup, strategy):
    _broker, transport = setup
    listener = CommitsOnRevoke()
    first = member(transport, "c0", partition_assignment_strategy=[strategy], enable_auto_commit=False)
    listener.consumer = first
    first.subscribe([TOPIC], listener)
    run(transport, [first], lambda: first.assignment() == every())
    second = member(transport, "c1", partition_assignment_strategy=[strategy], enable_auto_commit=False)
    second.subscribe([TOPIC])
    both = [first, second]
    run(transport, both, lambda: exact_cover(both, every()) and bool(second.assignment()))
    assert listener.commits >= 1
    revoked = listener.of("revoked")
    assert first.committed(sorted(revoked)) == {tp: 1 for tp in revoked}
    for consumer in both:
        consumer.close()


class ClosesOnAssign(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.consumer: Consumer | None = None

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        super().on_partitions_assigned(partitions)
        assert self.consumer is not None
        self.consumer.close()


def test_a_listener_that_closes_the_consumer_leaves_it_closed_with_nothing_assigned(setup):
    _broker, transport = setup
    listener = ClosesOnAssign()
    consumer = member(transport, "c0")
    listener.consumer = consumer
    consumer.subscribe([TOPIC], listener)
    for _tick in range(MAX_TICKS):
        try:
            consumer.poll(timeout_ms=0)
        except ConsumerClosedError:
            break
        if listener.events:
            break
        transport.tick()
    assert listener.events, "never assigned"
    assert consumer.assignment() == set()
    with pytest.raises(ConsumerClosedError):
        consumer.poll(timeout_ms=0)
    other = member(transport, "c1")  # the closed member left: the other takes everything
    other.subscribe([TOPIC])
    run(transport, [other], lambda: other.assignment() == every())
    other.close()


def test_two_consumers_with_one_instance_id_the_first_is_fenced_and_no_partition_is_owned_twice(setup):
    _broker, transport = setup
    first = member(transport, "c0", group_instance_id="box")
    first.subscribe([TOPIC])
    run(transport, [first], lambda: first.assignment() == every())
    second = member(transport, "c1", group_instance_id="box")
    second.subscribe([TOPIC])
    fenced: list[Exception] = []
    for _tick in range(MAX_TICKS):
        for consumer in (second, first):
            if consumer is first and fenced:
                continue
            try:
                consumer.poll(timeout_ms=0)
            except FencedInstanceIdError as error:
                fenced.append(error)
        if fenced and second.assignment() == every():
            break
        transport.tick()
    else:
        raise AssertionError(f"not settled: {sorted(first.assignment())} {sorted(second.assignment())} {fenced}")
    assert "'box'" in str(fenced[0]) and "\n" not in str(fenced[0])
    with pytest.raises(FencedInstanceIdError):
        first.poll(timeout_ms=0)  # fatal: raised again, never a silent rejoin
    assert first.consumer_group_metadata().member_id != second.consumer_group_metadata().member_id
    second.close()
    first.close()
