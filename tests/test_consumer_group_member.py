"""idemcore's Consumer in classic consumer groups, over an in-process Broker on a controlled clock (each tick of the
transport moves it and runs the broker's timers): two and three members share a topic exactly, with every
assignor; a member that leaves (also in its first join) or dies hands its partitions over; a pattern that matches a
new topic and a changed subscription rebalance; the leader rebalances when a subscribed topic gets partitions;
eager revokes everything, cooperative-sticky only what must move; positions are committed before a rebalance; auto
commit lets a restarted member resume with no duplicate and no gap; a coordinator that moves or restarts is found
again without a rebalance; a stale member's commit fails; a transactional producer's offsets are fenced for a
zombie member (KIP-447); assign and subscribe are exclusive; and a property test against a model of the group's
members (any joins, closes, deaths and subscription changes settle on an exact assignment)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.broker import Broker
from idemcore.client import Producer, TransactionAbortableError
from idemcore.client.assignors import ASSIGNOR_NAMES
from idemcore.client.consumer import CommitFailedError, Consumer, ConsumerError, ConsumerRecord, IllegalStateError
from idemcore.client.group_member import ConsumerGroupMetadata
from idemcore.net.membership import HeartbeatRequest, HeartbeatResponse
from idemcore.net.messages import FindCoordinatorRequest, ProduceRequest, ProduceResponse, Request
from idemcore.net.transport import InProcessTransport
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import TopicPartition
from idemcore.record.batch import RecordBatch

TOPIC = "t"
PARTITIONS = 6
GROUP = "g"
STEP_MS = 50
#: Ticks any scenario may take (the initial rebalance delay of 3 s and a session timeout are a few hundred).
MAX_TICKS = 4_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class ClockedTransport(InProcessTransport):
    """The in-process transport on the broker's clock: waiting moves it and runs the broker's timers."""

    def __init__(self, broker: Broker, clock: Clock) -> None:
        super().__init__(broker)
        self.broker = broker
        self.clock = clock

    def now_ms(self) -> int:
        return self.clock.now

    def tick(self) -> None:
        self.clock.now += STEP_MS
        self.broker.run_housekeeping()


@pytest.fixture
def setup() -> Iterable[tuple[Broker, ClockedTransport]]:
    clock = Clock()
    broker = Broker({TOPIC: PARTITIONS}, clock=clock, offsets_topic_partitions=3)
    try:
        yield broker, ClockedTransport(broker, clock)
    finally:
        broker.close()


def produce(broker: Broker, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    for partition in range(partitions):
        values = [f"{topic}-{partition}-{i}".encode() for i in range(start, start + per_partition)]
        batch = RecordBatch(topic, partition, values, None, -1, -1, -1, 1, False)
        answer = broker.handle(ProduceRequest((batch,)))
        assert isinstance(answer, ProduceResponse)
        assert all(r.error_code == ErrorCode.NONE for r in answer.responses), answer


def member(transport: ClockedTransport, name: str, **settings: object) -> Consumer:
    settings.setdefault("session_timeout_ms", 6_000)
    settings.setdefault("heartbeat_interval_ms", 500)
    settings.setdefault("max_poll_interval_ms", 20_000)
    return Consumer(transport, group_id=GROUP, client_id=name, **settings)  # type: ignore[arg-type]


class Recorder:
    """A rebalance listener that keeps what it heard, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("revoked", partitions))

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("assigned", partitions))

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("lost", partitions))

    def of(self, kind: str) -> set[TopicPartition]:
        return {tp for k, parts in self.events if k == kind for tp in parts}


def run(transport: ClockedTransport, consumers: list[Consumer], done: Callable[[], bool],
        received: list[ConsumerRecord] | None = None) -> None:
    """Poll every consumer once per tick until ``done()``; fails after MAX_TICKS."""
    for _ in range(MAX_TICKS):
        for consumer in consumers:
            records = consumer.poll(timeout_ms=0)
            if received is not None:
                received.extend(records)
        if done():
            return
        transport.tick()
    raise AssertionError(f"not done in {MAX_TICKS} ticks: assignments "
                         f"{[sorted(c.assignment()) for c in consumers]}")


def every(topic: str = TOPIC, partitions: int = PARTITIONS) -> set[TopicPartition]:
    return {(topic, p) for p in range(partitions)}


def exact_cover(consumers: list[Consumer], wanted: set[TopicPartition]) -> bool:
    owned = [c.assignment() for c in consumers]
    return sum(len(o) for o in owned) == len(wanted) and set().union(*owned) == wanted


def keys(records: list[ConsumerRecord]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


@pytest.mark.parametrize("strategy", ASSIGNOR_NAMES)
@pytest.mark.parametrize("count", [2, 3])
def test_members_share_a_topic_each_partition_once_and_read_every_record_once(setup, strategy, count):
    broker, transport = setup
    produce(broker, TOPIC, PARTITIONS, 5)
    consumers = [member(transport, f"c{i}", partition_assignment_strategy=[strategy]) for i in range(count)]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    received: list[ConsumerRecord] = []
    run(transport, consumers, lambda: exact_cover(consumers, every()) and len(received) >= PARTITIONS * 5,
        received)
    assert sorted(keys(received)) == [(p, o) for p in range(PARTITIONS) for o in range(5)]
    assert all(c.assignment() for c in consumers), "every member gets partitions (6 partitions, <= 3 members)"
    metadata = [c.consumer_group_metadata() for c in consumers]
    assert len({m.generation_id for m in metadata}) == 1 and metadata[0].generation_id >= 1
    assert len({m.member_id for m in metadata}) == count and all(m.member_id.startswith(f"c{i}-")
                                                                  for i, m in enumerate(metadata))
    for consumer in consumers:
        consumer.close()


def test_a_member_that_closes_hands_its_partitions_to_the_rest_with_no_record_twice(setup):
    broker, transport = setup
    produce(broker, TOPIC, PARTITIONS, 4)
    consumers = [member(transport, f"c{i}") for i in range(3)]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    received: list[ConsumerRecord] = []
    run(transport, consumers, lambda: exact_cover(consumers, every()) and len(received) >= 24, received)
    generation = consumers[0].consumer_group_metadata().generation_id
    consumers[2].close()  # commits its positions, revokes, LeaveGroup
    rest = consumers[:2]
    produce(broker, TOPIC, PARTITIONS, 4, start=4)
    run(transport, rest, lambda: exact_cover(rest, every()) and len(received) >= 48, received)
    assert sorted(keys(received)) == [(p, o) for p in range(PARTITIONS) for o in range(8)]
    assert rest[0].consumer_group_metadata().generation_id > generation


def test_a_member_that_stops_heartbeating_is_replaced_after_its_session_and_later_finds_its_partitions_lost(setup):
    _broker, transport = setup
    consumers = [member(transport, f"c{i}") for i in range(3)]
    listener = Recorder()
    for consumer in consumers:
        consumer.subscribe([TOPIC], listener if consumer is consumers[2] else None)
    run(transport, consumers, lambda: exact_cover(consumers, every()))
    dead = consumers[2]
    held = dead.assignment()
    start = transport.now_ms()
    rest = consumers[:2]
    run(transport, rest, lambda: exact_cover(rest, every()))
    assert transport.now_ms() - start >= 6_000, "taken over only after the dead member's session timeout"
    listener.events.clear()
    run(transport, consumers, lambda: exact_cover(consumers, every()))  # it comes back: lost, then a new member
    assert listener.events[0] == ("lost", held)
    assert listener.of("revoked") == set()


def test_a_pattern_subscription_takes_a_new_matching_topic_at_the_metadata_refresh(setup):
    broker, transport = setup
    broker.create_topic("p-1", 2)
    broker.create_topic("other", 2)
    consumers = [member(transport, f"c{i}", metadata_max_age_ms=1_000) for i in range(2)]
    for consumer in consumers:
        consumer.subscribe(re.compile(r"p-\d"))
    run(transport, consumers, lambda: exact_cover(consumers, every("p-1", 2)))
    assert consumers[0].subscription() == {"p-1"}
    generation = consumers[0].consumer_group_metadata().generation_id
    broker.create_topic("p-2", 4)
    run(transport, consumers, lambda: exact_cover(consumers, every("p-1", 2) | every("p-2", 4)))
    assert consumers[1].subscription() == {"p-1", "p-2"}
    assert consumers[0].consumer_group_metadata().generation_id > generation


def test_a_changed_subscription_rebalances_the_group(setup):
    broker, transport = setup
    broker.create_topic("b", 3)
    consumers = [member(transport, f"c{i}", partition_assignment_strategy=["roundrobin"]) for i in range(2)]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    run(transport, consumers, lambda: exact_cover(consumers, every()))
    consumers[1].subscribe([TOPIC, "b"])
    run(transport, consumers, lambda: exact_cover(consumers, every() | every("b", 3))
        and every("b", 3) <= consumers[1].assignment())
    assert not any(tp[0] == "b" for tp in consumers[0].assignment())


def test_cooperative_sticky_moves_only_the_partitions_that_must_move(setup):
    _broker, transport = setup
    recorders = [Recorder() for _ in range(3)]
    consumers = [member(transport, f"c{i}", partition_assignment_strategy=["cooperative-sticky"])
                 for i in range(3)]
    for consumer, recorder in zip(consumers[:2], recorders, strict=False):
        consumer.subscribe([TOPIC], recorder)
    run(transport, consumers[:2], lambda: exact_cover(consumers[:2], every()))
    before = [c.assignment() for c in consumers[:2]]
    assert [len(b) for b in before] == [3, 3]
    for recorder in recorders:
        recorder.events.clear()
    consumers[2].subscribe([TOPIC], recorders[2])
    run(transport, consumers, lambda: exact_cover(consumers, every()) and all(len(c.assignment()) == 2
                                                                              for c in consumers))
    for old, recorder, consumer in zip(before, recorders, consumers, strict=False):
        revoked = recorder.of("revoked")
        assert len(revoked) == 1 and revoked <= old, recorder.events  # one each to the newcomer, nothing else
        assert consumer.assignment() == old - revoked
        assert recorder.of("lost") == set() and recorder.of("assigned") == set()
    assert recorders[2].of("assigned") == consumers[2].assignment()
    assert consumers[2].assignment() == set().union(*(r.of("revoked") for r in recorders[:2]))


def test_eager_revokes_everything_before_the_rebalance(setup):
    _broker, transport = setup
    recorder = Recorder()
    first = member(transport, "c0", partition_assignment_strategy=["range"])
    first.subscribe([TOPIC], recorder)
    run(transport, [first], lambda: first.assignment() == every())
    recorder.events.clear()
    second = member(transport, "c1", partition_assignment_strategy=["range"])
    second.subscribe([TOPIC])
    run(transport, [first, second], lambda: exact_cover([first, second], every()) and bool(second.assignment()))
    assert recorder.events[0] == ("revoked", every())
    assert recorder.events[1] == ("assigned", first.assignment())


def test_auto_commit_lets_a_restarted_member_resume_with_no_duplicate_and_no_gap(setup):
    broker, transport = setup
    produce(broker, TOPIC, PARTITIONS, 5)
    first = member(transport, "c0", auto_commit_interval_ms=1_000, max_poll_interval_ms=8_000)
    first.subscribe([TOPIC])
    received: list[ConsumerRecord] = []
    run(transport, [first], lambda: len(received) >= 30, received)
    ticks = 0
    checker = Consumer(transport, group_id=GROUP, client_id="checker")

    def committed_all() -> bool:
        nonlocal ticks
        ticks += 1
        return checker.committed(sorted(every())) == {tp: 5 for tp in every()}

    run(transport, [first], committed_all)  # auto commit, not close: the member is then abandoned
    assert ticks * STEP_MS <= 2_000
    produce(broker, TOPIC, PARTITIONS, 5, start=5)
    second = member(transport, "c1", max_poll_interval_ms=8_000)
    second.subscribe([TOPIC])
    run(transport, [second], lambda: len(received) >= 60, received)  # after the abandoned one is dropped
    assert sorted(keys(received)) == [(p, o) for p in range(PARTITIONS) for o in range(10)]


def test_a_stale_members_commit_fails_and_it_rejoins(setup):
    broker, transport = setup
    produce(broker, TOPIC, PARTITIONS, 1)
    consumers = [member(transport, f"c{i}", enable_auto_commit=False) for i in range(2)]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    run(transport, consumers, lambda: exact_cover(consumers, every()))
    stale = consumers[0]
    owned = sorted(stale.assignment())
    run(transport, consumers[1:], lambda: consumers[1].assignment() == every())  # stale's session lapses
    with pytest.raises(CommitFailedError, match="rebalanced"):
        stale.commit({owned[0]: 1})
    run(transport, consumers, lambda: exact_cover(consumers, every()) and bool(stale.assignment()))


def test_assign_and_subscribe_are_exclusive_and_a_group_is_needed(setup):
    _broker, transport = setup
    consumer = member(transport, "c0")
    consumer.assign([(TOPIC, 0)])
    with pytest.raises(IllegalStateError, match="exclusive"):
        consumer.subscribe([TOPIC])
    consumer.assign([])
    consumer.subscribe([TOPIC])
    with pytest.raises(IllegalStateError, match="exclusive"):
        consumer.assign([(TOPIC, 0)])
    assert consumer.subscription() == {TOPIC}
    consumer.unsubscribe()
    consumer.assign([(TOPIC, 1)])
    assert consumer.assignment() == {(TOPIC, 1)}
    with pytest.raises(ConsumerError, match="needs a group_id"):
        Consumer(transport).subscribe([TOPIC])
    with pytest.raises(ValueError, match="unknown partition assignment strategy"):
        member(transport, "c1", partition_assignment_strategy=["nope"]).subscribe([TOPIC])
    assert Consumer(transport, group_id="x").consumer_group_metadata() == ConsumerGroupMetadata("x")


def test_the_leader_rebalances_when_a_subscribed_topic_gets_partitions(setup):
    broker, transport = setup
    consumers = [member(transport, f"c{i}", metadata_max_age_ms=1_000) for i in range(2)]
    for consumer in consumers:
        consumer.subscribe(["late"])
    run(transport, consumers, lambda: all(c.consumer_group_metadata().generation_id >= 1 for c in consumers))
    assert all(not c.assignment() for c in consumers)  # the topic has no partitions yet
    broker.create_topic("late", 4)
    run(transport, consumers, lambda: exact_cover(consumers, every("late", 4)) and all(c.assignment()
                                                                                     for c in consumers))


OTHER = "u"  # a second topic some members subscribe to
SUBSCRIPTIONS = ((TOPIC,), (OTHER,), (TOPIC, OTHER))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(strategy=st.sampled_from(ASSIGNOR_NAMES),
       steps=st.lists(st.tuples(st.sampled_from(["join", "close", "kill", "resubscribe"]),
                                st.integers(0, 7), st.sampled_from(SUBSCRIPTIONS)), min_size=1, max_size=7))
def test_the_group_settles_to_what_a_model_of_its_members_says_after_any_joins_leaves_deaths_and_changes(
        strategy, steps):
    """The model: the live members and their subscriptions. After each change the group settles (one generation
    for all, nobody rejoining) on an assignment that gives each partition of a topic someone subscribes to to
    exactly one live member subscribed to it."""
    clock = Clock()
    broker = Broker({TOPIC: PARTITIONS, OTHER: 3}, clock=clock, offsets_topic_partitions=3)
    transport = ClockedTransport(broker, clock)
    live: dict[str, tuple[Consumer, tuple[str, ...]]] = {}
    made = 0
    try:
        for action, pick, topics in steps:
            names = sorted(live)
            if action == "join" or not names:
                name = f"m{made}"
                made += 1
                consumer = member(transport, name, partition_assignment_strategy=[strategy])
                consumer.subscribe(list(topics))
                live[name] = (consumer, topics)
            else:
                name = names[pick % len(names)]
                consumer, _ = live[name]
                if action == "close":
                    consumer.close()
                    del live[name]
                elif action == "kill":
                    del live[name]  # never polled again: only its session timeout removes it
                else:
                    consumer.subscribe(list(topics))
                    live[name] = (consumer, topics)
            consumers = [c for c, _ in live.values()]

            def settled(consumers: list[Consumer] = consumers) -> bool:
                if not consumers:
                    return True
                groups = [c._group for c in consumers]
                if any(g is None or g.need_rejoin or g.joining or g.synced is not None for g in groups):
                    return False
                if len({c.consumer_group_metadata().generation_id for c in consumers}) != 1:
                    return False
                wanted = {tp for _, topics in live.values() for t in topics
                          for tp in every(t, PARTITIONS if t == TOPIC else 3)}
                return exact_cover(consumers, wanted) and all(
                    all(tp[0] in topics for tp in c.assignment()) for c, topics in live.values())

            run(transport, consumers, settled)
    finally:
        broker.close()


class Rediscovering(ClockedTransport):
    """Answers the next ``refuse`` heartbeats NOT_COORDINATOR and counts FindCoordinator requests."""

    def __init__(self, broker: Broker, clock: Clock) -> None:
        super().__init__(broker, clock)
        self.refuse = 0
        self.lookups = 0

    def send(self, client: str, request: Request) -> None:
        if isinstance(request, FindCoordinatorRequest):
            self.lookups += 1
        if isinstance(request, HeartbeatRequest) and self.refuse > 0:
            self.refuse -= 1
            self._responses[client].append((request, HeartbeatResponse(ErrorCode.NOT_COORDINATOR,
                                                                       request.request_id)))
            return
        super().send(client, request)


def test_a_coordinator_that_moves_or_restarts_is_found_again_without_a_rebalance(tmp_path):
    clock = Clock()
    broker = Broker({TOPIC: PARTITIONS}, data_dir=tmp_path, fsync=False, clock=clock, offsets_topic_partitions=3)
    transport = Rediscovering(broker, clock)
    consumers = [member(transport, f"c{i}") for i in range(2)]
    try:
        for consumer in consumers:
            consumer.subscribe([TOPIC])
        run(transport, consumers, lambda: exact_cover(consumers, every()))
        before = [(c.consumer_group_metadata(), c.assignment()) for c in consumers]
        lookups = transport.lookups
        transport.refuse = 2
        run(transport, consumers, lambda: transport.lookups >= lookups + 2 and transport.refuse == 0)
        broker.close()  # the coordinator restarts: the group's metadata is loaded from __consumer_offsets
        broker = Broker({TOPIC: PARTITIONS}, data_dir=tmp_path, fsync=False, clock=clock, offsets_topic_partitions=3)
        transport.handler = transport.broker = broker
        end = clock.now + 3 * 6_000  # three sessions of heartbeats to the restarted coordinator
        run(transport, consumers, lambda: clock.now >= end)
        assert [(c.consumer_group_metadata(), c.assignment()) for c in consumers] == before
    finally:
        for consumer in consumers:
            consumer.close()
        broker.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_positions_are_committed_before_a_rebalance_so_the_new_owner_reads_no_record_twice(setup, strategy):
    broker, transport = setup
    produce(broker, TOPIC, PARTITIONS, 5)
    # An auto commit interval longer than the test: only the commit before the rebalance can commit.
    first = member(transport, "c0", partition_assignment_strategy=[strategy], auto_commit_interval_ms=10**9)
    first.subscribe([TOPIC])
    received: list[ConsumerRecord] = []
    run(transport, [first], lambda: len(received) >= 30, received)
    checker = Consumer(transport, group_id=GROUP, client_id="checker")
    assert set(checker.committed(sorted(every())).values()) == {None}, "nothing committed yet"
    second = member(transport, "c1", partition_assignment_strategy=[strategy], auto_commit_interval_ms=10**9)
    second.subscribe([TOPIC])
    produce(broker, TOPIC, PARTITIONS, 1, start=5)  # cooperative: read by the first during the rebalance
    run(transport, [first, second], lambda: exact_cover([first, second], every()) and bool(second.assignment())
        and len(received) >= 36, received)
    for _ in range(50):  # a record read twice would show by now
        for consumer in (first, second):
            received.extend(consumer.poll(timeout_ms=0))
        transport.tick()
    assert sorted(keys(received)) == [(p, o) for p in range(PARTITIONS) for o in range(6)]


def test_a_member_that_closes_during_its_first_join_leaves_at_once(setup):
    _broker, transport = setup
    first = member(transport, "c0")
    first.subscribe([TOPIC])
    run(transport, [first], lambda: first.assignment() == every())
    second = member(transport, "c1")
    second.subscribe([TOPIC])
    for _ in range(3):  # FindCoordinator, then JoinGroup (MEMBER_ID_REQUIRED, again with the id): parked
        second.poll(timeout_ms=0)
    assert second._group is not None and second._group.member_id and second._group.joining
    start = transport.now_ms()
    second.close()  # LeaveGroup with its member id
    generation = first.consumer_group_metadata().generation_id
    run(transport, [first], lambda: first.consumer_group_metadata().generation_id > generation
        and first.assignment() == every())
    assert transport.now_ms() - start < 6_000  # the test's clock: before its session timeout could remove it


def test_a_transactional_producer_commits_for_the_live_member_and_is_fenced_for_a_zombie(setup):
    _broker, transport = setup
    consumers = [member(transport, f"c{i}", enable_auto_commit=False) for i in range(2)]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    run(transport, consumers, lambda: exact_cover(consumers, every()))
    zombie, live = consumers
    stale = zombie.consumer_group_metadata()
    run(transport, [live], lambda: live.assignment() == every())  # the zombie's session lapsed
    producer = Producer(transport, transactional_id="tx", linger_ms=0, retry_backoff_ms=5)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        with pytest.raises(TransactionAbortableError, match=r"ILLEGAL_GENERATION|UNKNOWN_MEMBER_ID"):
            producer.send_offsets_to_transaction({(TOPIC, 0): 7}, stale)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(TOPIC, 0): 9}, live.consumer_group_metadata())
        producer.commit_transaction()
    finally:
        producer.close()
    assert live.committed([(TOPIC, 0)]) == {(TOPIC, 0): 9}
