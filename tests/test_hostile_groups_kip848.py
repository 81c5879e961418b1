"""A hostile pass over KIP-848 consumer groups: a member that reports owning partitions it was never given gets
none of them and holds nobody up; two members with one instance id (the second is refused
UNRELEASED_INSTANCE_ID); a regex that would match ``__consumer_offsets`` does not (an explicit name does, as
Kafka's); the regex is RE2's (Kafka's RE2/J): refused patterns answered INVALID_REGULAR_EXPRESSION, never raised, and no
pattern stalls the broker."""

from __future__ import annotations

import threading

from idemcore.broker import Broker
from idemcore.broker.group.consumer_group import INVALID_REGULAR_EXPRESSION
from idemcore.net.consumer_group import ConsumerGroupHeartbeatRequest as Hb
from idemcore.protocol.codes import ErrorCode as E
from tests.test_consumer_group_kip848 import G, assigned, beat, join, make, owned, settle, static_join


def test_claiming_partitions_never_given_takes_none_and_blocks_no_other_member():
    groups, _, _ = make({"t": 4})
    for member in ("a", "b"):
        join(groups, member)
    settle(groups, ["a", "b"])
    mine = assigned(groups, "a")
    epoch = groups.groups[G].members["a"].member_epoch
    everything = [("t", p) for p in range(4)] + [("nope", 0), ("t", 99)]
    answer = beat(groups, "a", epoch, everything)
    assert answer.error_code == E.NONE and assigned(groups, "a") == mine
    join(groups, "c")
    for _ in range(10):  # a keeps lying; b and c reconcile honestly
        for member in ("a", "b", "c"):
            m = groups.groups[G].members[member]
            beat(groups, member, m.member_epoch, everything if member == "a" else owned(groups, member))
    held = [assigned(groups, m) for m in ("a", "b", "c")]
    assert sum(map(len, held)) == 4 and set().union(*held) == {("t", p) for p in range(4)}, held
    assert all(held), held
    assert all(tp[0] == "t" and tp[1] < 4 for tp in assigned(groups, "a"))


def test_a_second_member_with_a_live_members_instance_id_is_refused():
    groups, _, _ = make({"t": 4})
    first = static_join(groups, "s1", "box")
    assert first.error_code == E.NONE
    second = static_join(groups, "s2", "box")
    assert second.error_code == E.UNRELEASED_INSTANCE_ID and "box" in (second.error_message or "")
    assert set(groups.groups[G].members) == {"s1"}
    assert beat(groups, "s1", first.member_epoch, owned(groups, "s1")).error_code == E.NONE


def test_a_regex_never_matches_internal_topics_and_a_huge_one_is_refused():
    broker = Broker({"t": 2}, offsets_topic_partitions=3)
    try:
        every = broker.handle(Hb("g", "r", 0, rebalance_timeout_ms=5_000, subscribed_topic_regex=".*",
                                 owned_partitions=()))
        assert every.assignment == (("t", 0), ("t", 1)), every  # type: ignore[union-attr]
        internal = broker.handle(Hb("h", "r", 0, rebalance_timeout_ms=5_000,
                                    subscribed_topic_regex="__consumer_offsets", owned_partitions=()))
        assert internal.error_code == E.NONE and internal.assignment == (), internal  # type: ignore[union-attr]
        for refused in ("a{1001}", "(a)\\1", "(?=t)t", "orders("):  # RE2's limits, as Kafka's RE2/J
            answer = broker.handle(Hb("k", "r", 0, rebalance_timeout_ms=5_000, subscribed_topic_regex=refused,
                                      owned_partitions=()))
            assert answer.error_code == INVALID_REGULAR_EXPRESSION, (refused, answer)  # type: ignore[union-attr]
            message = answer.error_message or ""  # type: ignore[union-attr]
            assert refused in message and "\n" not in message
        huge = broker.handle(Hb("k", "r", 0, rebalance_timeout_ms=5_000, subscribed_topic_regex="a{99999999999}",
                                owned_partitions=()))  # Python's re raised OverflowError out of Broker.handle
        assert huge.error_code in (E.NONE, INVALID_REGULAR_EXPRESSION), huge  # type: ignore[union-attr]
    finally:
        broker.close()


def test_a_catastrophically_backtracking_regex_cannot_stall_the_broker():
    """``(a+)+b`` against a name of 40 ``a``: Python's ``re`` backtracks for hours; RE2 answers at once. The
    heartbeat runs in a thread so that a regression fails the test (after a generous bound) instead of hanging it."""
    broker = Broker({"a" * 40: 1}, offsets_topic_partitions=3)
    answers: list[object] = []
    try:
        worker = threading.Thread(target=lambda: answers.append(broker.handle(
            Hb("g", "r", 0, rebalance_timeout_ms=5_000, subscribed_topic_regex="(a+)+b", owned_partitions=()))),
            daemon=True)
        worker.start()
        worker.join(timeout=120)
        assert answers, "the broker was stuck matching the regex"
        assert answers[0].error_code == E.NONE and answers[0].assignment == ()  # type: ignore[attr-defined]
    finally:
        broker.close()
