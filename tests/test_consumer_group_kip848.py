"""The KIP-848 consumer group state machine (``ConsumerGroups``) under a controllable clock: joins, epochs,
incremental reconciliation (a partition moves only once its owner reported it revoked), leaves, session and
rebalance timeouts, fencing, subscription changes, partitions added to a subscribed topic, offset-commit checks,
describe/list/delete; and a property test against a small model of who may own what."""

from __future__ import annotations

import re
from collections.abc import Iterable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.broker.group.consumer_group import (
    ASSIGNING,
    EMPTY,
    RECONCILING,
    STABLE,
    STABLE_GROUP,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroups,
)
from idemcore.net.consumer_group import ConsumerGroupHeartbeatRequest as Hb
from idemcore.net.consumer_group import ConsumerGroupHeartbeatResponse
from idemcore.protocol.codes import ErrorCode as E

G = "g"
SESSION = 10_000
REBALANCE = 5_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make(topics: dict[str, int] | None = None, **kwargs: object) -> tuple[ConsumerGroups, Clock, dict[str, int]]:
    clock = Clock()
    counts = dict(topics if topics is not None else {"t": 4})
    groups = ConsumerGroups(clock, counts.get, session_timeout_ms=SESSION, heartbeat_interval_ms=500,
                            **kwargs)  # type: ignore[arg-type]
    return groups, clock, counts


def join(groups: ConsumerGroups, member: str, topics: Iterable[str] = ("t",), assignor: str | None = None,
         ) -> ConsumerGroupHeartbeatResponse:
    return groups.heartbeat(Hb(G, member, 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=tuple(topics),
                               server_assignor=assignor, owned_partitions=()))


def beat(groups: ConsumerGroups, member: str, epoch: int, owned: Iterable[tuple[str, int]] | None,
         **fields: object) -> ConsumerGroupHeartbeatResponse:
    return groups.heartbeat(Hb(G, member, epoch, owned_partitions=None if owned is None else tuple(owned),
                               **fields))  # type: ignore[arg-type]


def parts(response: ConsumerGroupHeartbeatResponse) -> set[int]:
    assert response.assignment is not None, response
    return {p for _, p in response.assignment}


def test_a_first_member_joins_and_gets_every_partition_at_the_group_epoch():
    groups, _, _ = make()
    answer = join(groups, "a")
    assert answer.error_code == E.NONE and answer.member_id == "a"
    assert answer.member_epoch == 1 and answer.heartbeat_interval_ms == 500
    assert parts(answer) == {0, 1, 2, 3}
    group = groups.groups[G]
    assert group.group_epoch == 1 == group.assignment_epoch and group.state == STABLE_GROUP
    # A heartbeat with nothing new: same epoch, no assignment sent again.
    again = beat(groups, "a", 1, [("t", p) for p in range(4)])
    assert again.error_code == E.NONE and again.member_epoch == 1 and again.assignment is None


def test_partitions_move_to_a_second_member_only_after_the_first_revoked_them():
    groups, _, _ = make()
    join(groups, "a")
    owned_a = [("t", p) for p in range(4)]
    b = join(groups, "b")
    assert b.member_epoch == 2 and parts(b) == set()  # its target is held by a until a revokes
    group = groups.groups[G]
    assert group.members["b"].state == UNRELEASED_PARTITIONS and group.state == RECONCILING
    target_b = set(group.target["b"]["t"])
    assert len(target_b) == 2
    # a learns it must give target_b up; it stays at epoch 1 until it says it did.
    a = beat(groups, "a", 1, owned_a)
    assert a.member_epoch == 1 and parts(a) == {0, 1, 2, 3} - target_b
    assert group.members["a"].state == UNREVOKED_PARTITIONS
    # Still owning them (a heartbeat reporting them): nothing moves.
    assert beat(groups, "a", 1, owned_a).assignment is None
    b = beat(groups, "b", 2, [])
    assert b.assignment is None and group.members["b"].state == UNRELEASED_PARTITIONS
    # a revokes: it reaches epoch 2, and then b gets the released partitions.
    kept = [("t", p) for p in sorted({0, 1, 2, 3} - target_b)]
    a = beat(groups, "a", 1, kept)
    assert a.member_epoch == 2 and group.members["a"].state == STABLE
    b = beat(groups, "b", 2, [])
    assert parts(b) == target_b and group.members["b"].state == STABLE and group.state == STABLE_GROUP


def test_a_leaving_member_gives_its_partitions_to_the_others():
    groups, _, _ = make()
    join(groups, "a")
    join(groups, "b")
    settle(groups, ["a", "b"])
    left = groups.heartbeat(Hb(G, "b", -1))
    assert left.error_code == E.NONE and left.member_epoch == -1
    group = groups.groups[G]
    assert set(group.members) == {"a"} and group.state == ASSIGNING
    a = beat(groups, "a", group.members["a"].member_epoch, owned(groups, "a"))
    assert parts(a) == {0, 1, 2, 3} and group.state == STABLE_GROUP
    # Leaving again: the member is unknown now.
    assert groups.heartbeat(Hb(G, "b", -1)).error_code == E.UNKNOWN_MEMBER_ID


def test_a_member_whose_session_lapses_is_removed_and_one_slow_to_revoke_by_its_rebalance_timeout():
    groups, clock, _ = make()
    join(groups, "a")
    clock.now += SESSION - 1
    groups.expire(clock.now)
    assert "a" in groups.groups[G].members
    join(groups, "b")  # b heartbeats, a does not
    clock.now += 1
    groups.expire(clock.now)
    assert set(groups.groups[G].members) == {"b"}
    b = beat(groups, "b", 2, [])
    assert parts(b) == {0, 1, 2, 3} and b.member_epoch == 3
    # A member asked to revoke that keeps heartbeating without revoking is removed at its rebalance timeout.
    join(groups, "c")
    owned_b = [("t", p) for p in range(4)]
    assert groups.groups[G].members["b"].state == STABLE
    beat(groups, "b", 3, owned_b)
    assert groups.groups[G].members["b"].state == UNREVOKED_PARTITIONS
    clock.now += REBALANCE - 1
    beat(groups, "b", 3, owned_b)
    beat(groups, "c", 4, [])
    groups.expire(clock.now)
    assert "b" in groups.groups[G].members
    clock.now += 1
    groups.expire(clock.now)
    assert set(groups.groups[G].members) == {"c"}


def test_stale_or_future_epochs_are_fenced_and_unknown_members_refused():
    groups, _, _ = make()
    for member in ("a", "b", "c"):
        join(groups, member)
    settle(groups, ["a", "b", "c"])
    epoch = groups.groups[G].members["a"].member_epoch
    previous = groups.groups[G].members["a"].previous_member_epoch
    assert epoch == 3 and 0 < previous < epoch
    assert beat(groups, "a", epoch + 1, []).error_code == E.FENCED_MEMBER_EPOCH
    stale = next(e for e in range(1, epoch) if e != previous)
    assert beat(groups, "a", stale, []).error_code == E.FENCED_MEMBER_EPOCH
    # The previous epoch with a subset of the assignment is accepted (the answer that bumped it was lost).
    assert beat(groups, "a", previous, owned(groups, "a")[:1]).error_code == E.NONE
    assert beat(groups, "a", previous, [("t", p) for p in range(4)]).error_code == E.FENCED_MEMBER_EPOCH
    assert beat(groups, "zz", epoch, []).error_code == E.UNKNOWN_MEMBER_ID
    # A group the coordinator lacks (a restarted broker's: membership is in memory): the member rejoins.
    assert groups.heartbeat(Hb("other", "a", 3, owned_partitions=())).error_code == E.UNKNOWN_MEMBER_ID
    # A fenced member rejoins with epoch 0 and its id, and gets its partitions back.
    rejoined = join(groups, "a")
    assert rejoined.error_code == E.NONE and rejoined.member_epoch == epoch


def test_a_subscription_change_bumps_the_epoch_and_reassigns():
    groups, _, _ = make({"t": 4, "u": 2})
    join(groups, "a")
    join(groups, "b")
    settle(groups, ["a", "b"])
    epoch = groups.groups[G].group_epoch
    answer = beat(groups, "b", groups.groups[G].members["b"].member_epoch, owned(groups, "b"),
                  subscribed_topic_names=("u",))
    assert answer.error_code == E.NONE and groups.groups[G].group_epoch == epoch + 1
    settle(groups, ["a", "b"])
    assert assigned(groups, "a") == {("t", p) for p in range(4)}
    assert assigned(groups, "b") == {("u", 0), ("u", 1)}


def test_partitions_added_to_a_subscribed_topic_are_assigned():
    groups, _, counts = make()
    join(groups, "a")
    join(groups, "b")
    settle(groups, ["a", "b"])
    epoch = groups.groups[G].group_epoch
    counts["t"] = 6
    settle(groups, ["a", "b"])
    assert groups.groups[G].group_epoch == epoch + 1
    assert assigned(groups, "a") | assigned(groups, "b") == {("t", p) for p in range(6)}
    assert len(assigned(groups, "a")) == len(assigned(groups, "b")) == 3


def test_assignors_are_chosen_by_the_members_and_an_unknown_one_is_refused():
    groups, _, _ = make(assignors=("uniform", "range"))
    answer = join(groups, "a", assignor="sticky")
    assert answer.error_code == E.UNSUPPORTED_ASSIGNOR and "uniform, range" in (answer.error_message or "")
    join(groups, "a")
    assert groups.groups[G].assignor_name == "uniform"
    join(groups, "b", assignor="range")
    assert groups.groups[G].assignor_name == "range"


def test_malformed_heartbeats_are_answered_invalid_request_with_kafkas_messages():
    groups, _, _ = make()
    cases = {
        Hb("", "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned_partitions=()): "GroupId",
        Hb(G, "", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned_partitions=()): "MemberId",
        Hb(G, "a", 0, subscribed_topic_names=("t",), owned_partitions=()): "RebalanceTimeoutMs",
        Hb(G, "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",)): "TopicPartitions",
        Hb(G, "a", 0, rebalance_timeout_ms=1, owned_partitions=()): "SubscribedTopicNames",
        Hb(G, "a", -3): "MemberEpoch",
        Hb(G, "a", -2): "InstanceId",
    }
    for request, field in cases.items():
        answer = groups.heartbeat(request)
        assert answer.error_code == E.INVALID_REQUEST and field in (answer.error_message or ""), request
    assert not groups.groups
    # v0: an empty member id on joining asks the coordinator for one.
    made = groups.heartbeat(Hb(G, "", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned_partitions=(),
                               member_id_from_client=False))
    assert made.error_code == E.NONE and made.member_id


def test_a_regex_subscription_matches_whole_names_and_topics_made_later():
    clock = Clock()
    counts = {"orders": 2, "orders-eu": 2, "other": 1, "__consumer_offsets": 3}
    groups = ConsumerGroups(clock, counts.get, topic_names=lambda: list(counts))
    bad = groups.heartbeat(Hb(G, "a", 0, rebalance_timeout_ms=1, subscribed_topic_regex="orders(", owned_partitions=()))
    assert bad.error_code == 128 and "orders(" in (bad.error_message or "")  # INVALID_REGULAR_EXPRESSION
    answer = groups.heartbeat(Hb(G, "a", 0, rebalance_timeout_ms=1, subscribed_topic_regex="orders.*|__.*|oth",
                                 owned_partitions=()))
    assert answer.error_code == E.NONE
    assert set(answer.assignment or ()) == {("orders", 0), ("orders", 1), ("orders-eu", 0), ("orders-eu", 1)}
    counts["orders-us"] = 1  # a matching topic made later is assigned at the next heartbeat
    again = beat(groups, "a", answer.member_epoch, answer.assignment)
    assert again.member_epoch == answer.member_epoch + 1 and ("orders-us", 0) in set(again.assignment or ())
    (described,) = groups.describe([G])
    assert described.members[0].subscribed_topic_regex == "orders.*|__.*|oth"
    # An empty regex clears it (librdkafka sends one with its names).
    names = beat(groups, "a", again.member_epoch, again.assignment, subscribed_topic_names=("other",),
                 subscribed_topic_regex="")
    settle(groups, ["a"])
    assert names.error_code == E.NONE and assigned(groups, "a") == {("other", 0)}


def test_steady_heartbeats_keep_every_members_topics_as_a_full_resolution_gives():
    """The subscriptions a heartbeat does not re-resolve (a member whose subscription did not change, the same
    existing topics) equal what matching every member's regex against every topic again gives, as topics appear
    and members change their subscriptions."""
    clock = Clock()
    counts = {"orders": 2, "other": 1}
    groups = ConsumerGroups(clock, counts.get, topic_names=lambda: list(counts))
    regexes = {"a": "orders.*", "b": "orders.*", "c": None}
    names = {"a": (), "b": ("other",), "c": ("other", "later")}

    sent = dict(regexes)  # the regex each member last heartbeated with

    def expected() -> dict[str, frozenset[str]]:
        return {m: frozenset(names[m]) | frozenset(t for t in counts if not t.startswith("__") and sent[m]
                                                   and re.fullmatch(sent[m], t)) for m in regexes}

    epochs = {m: groups.heartbeat(Hb(G, m, 0, rebalance_timeout_ms=1_000, subscribed_topic_names=names[m],
                                     subscribed_topic_regex=regexes[m] or "", owned_partitions=())).member_epoch
              for m in regexes}
    steps = [lambda: counts.update({"orders-eu": 3}), lambda: None, lambda: counts.update({"later": 2}),
             lambda: regexes.update({"b": "oth.*"}), lambda: counts.update({"orders": 4}), lambda: None]
    for step in steps:
        step()
        for m in regexes:
            answer = beat(groups, m, epochs[m], None, subscribed_topic_regex=regexes[m] or "")
            assert answer.error_code == E.NONE, answer
            epochs[m], sent[m] = answer.member_epoch, regexes[m]
            group = groups.groups[G]
            assert group.subscriptions == expected()
            assert group.subscribed_topics == frozenset().union(*expected().values())
            assert group.topic_partitions == {t: counts[t] for t in group.subscribed_topics if t in counts}


def static_join(groups: ConsumerGroups, member: str, instance: str) -> ConsumerGroupHeartbeatResponse:
    return groups.heartbeat(Hb(G, member, 0, instance_id=instance, rebalance_timeout_ms=REBALANCE,
                               subscribed_topic_names=("t",), owned_partitions=()))


def test_a_static_member_leaves_for_a_while_and_comes_back_without_a_rebalance():
    groups, clock, _ = make()
    static_join(groups, "s1", "box-1")
    join(groups, "d")
    settle(groups, ["s1", "d"])
    mine = assigned(groups, "s1")
    epoch = groups.groups[G].group_epoch
    # The instance id is held: another member can neither join with it nor heartbeat with it.
    refused = static_join(groups, "s2", "box-1")
    assert refused.error_code == E.UNRELEASED_INSTANCE_ID and "owned by s1" in (refused.error_message or "")
    fenced = groups.heartbeat(Hb(G, "s2", 3, instance_id="box-1", owned_partitions=()))
    assert fenced.error_code == E.FENCED_INSTANCE_ID
    assert groups.heartbeat(Hb(G, "s2", -2, instance_id="box-9")).error_code == E.UNKNOWN_MEMBER_ID
    # A temporary leave keeps its partitions (nobody else gets them) and the group epoch.
    left = groups.heartbeat(Hb(G, "s1", -2, instance_id="box-1"))
    assert left.error_code == E.NONE and left.member_epoch == -2
    settle_d = beat(groups, "d", groups.groups[G].members["d"].member_epoch, owned(groups, "d"))
    assert settle_d.error_code == E.NONE and groups.groups[G].group_epoch == epoch
    assert not assigned(groups, "d") & mine
    # It comes back under a new member id within its session: same partitions, no new group epoch.
    clock.now += SESSION - 1
    back = static_join(groups, "s2", "box-1")
    assert back.error_code == E.NONE and back.member_id == "s2" and set(back.assignment or ()) == mine
    group = groups.groups[G]
    assert set(group.members) == {"s2", "d"} and group.group_epoch == epoch and group.state == STABLE_GROUP
    # Gone for longer than its session: removed, and its partitions go to the others.
    assert groups.heartbeat(Hb(G, "s2", -2, instance_id="box-1")).error_code == E.NONE
    clock.now += SESSION
    beat(groups, "d", groups.groups[G].members["d"].member_epoch, owned(groups, "d"))
    groups.expire(clock.now)
    assert set(groups.groups[G].members) == {"d"}
    settle(groups, ["d"])
    assert assigned(groups, "d") == {("t", p) for p in range(4)}


def test_a_full_group_refuses_new_members_but_not_its_own():
    groups, _, _ = make(max_size=2)
    join(groups, "a")
    join(groups, "b")
    full = join(groups, "c")
    assert full.error_code == E.GROUP_MAX_SIZE_REACHED and "capacity of 2" in (full.error_message or "")
    assert join(groups, "a").error_code == E.NONE  # a member rejoining is not new


def test_offset_commits_describe_list_and_delete():
    groups, _, _ = make()
    assert groups.offset_commit_error(G, 1, "a") is None  # no consumer group of that id
    join(groups, "a")
    assert groups.offset_commit_error(G, 1, "a") == E.NONE
    assert groups.offset_commit_error(G, 0, "a") == E.STALE_MEMBER_EPOCH
    assert groups.offset_commit_error(G, 1, "b") == E.UNKNOWN_MEMBER_ID
    assert groups.offset_commit_error(G, -1, "") == E.UNKNOWN_MEMBER_ID  # a simple commit to a group with members
    assert groups.delete(G) == E.NON_EMPTY_GROUP
    (described,) = groups.describe([G])
    assert described.state == STABLE_GROUP and described.group_epoch == 1 and described.assignor_name == "uniform"
    (member,) = described.members
    assert member.member_id == "a" and member.assignment == member.target_assignment == tuple(
        ("t", p) for p in range(4))
    (listed,) = groups.listed()
    assert (listed.group_id, listed.state, listed.group_type, listed.protocol_type) == (G, "Stable", "consumer",
                                                                                        "consumer")
    groups.heartbeat(Hb(G, "a", -1))
    assert groups.groups[G].state == EMPTY and groups.offset_commit_error(G, -1, "") == E.NONE
    assert groups.delete(G) == E.NONE and groups.delete(G) == E.GROUP_ID_NOT_FOUND
    assert groups.describe([G])[0].error_code == E.GROUP_ID_NOT_FOUND


# ---------------------------------------------------------------- helpers and the model


def assigned(groups: ConsumerGroups, member: str) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in groups.groups[G].members[member].assigned.items() for p in ps}


def owned(groups: ConsumerGroups, member: str) -> list[tuple[str, int]]:
    return sorted(assigned(groups, member))


def settle(groups: ConsumerGroups, members: list[str], rounds: int = 10) -> None:
    """Every member heartbeats, owning what it was last told it may own, until the group is stable."""
    for _ in range(rounds):
        for member in members:
            m = groups.groups[G].members[member]
            assert beat(groups, member, m.member_epoch, owned(groups, member)).error_code == E.NONE
        if groups.groups[G].state == STABLE_GROUP:
            return
    raise AssertionError(f"not stable after {rounds} rounds: {groups.groups[G]}")


OPS = st.lists(st.tuples(st.sampled_from(["join", "beat", "leave", "expire", "grow", "lag"]),
                         st.integers(0, 3)), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, assignor=st.sampled_from(["uniform", "range"]))
def test_no_partition_is_ever_owned_by_two_members_and_the_group_settles(ops, assignor):
    """The model: each client owns what the coordinator last told it, giving up at once what it must and
    taking the rest at once or (lagging) at a later heartbeat. Whatever the members do, no partition is ever in two
    clients' hands, and once all heartbeat the group is stable with every partition owned exactly once."""
    groups, clock, counts = make({"t": 3, "u": 2})
    clients: dict[str, tuple[int, set[tuple[str, int]]]] = {}  # member -> (epoch, owned)
    told: dict[str, set[tuple[str, int]]] = {}  # member -> the assignment it was last sent
    for op, k in ops:
        name = f"m{k}"
        if op == "join" and name not in clients:
            answer = join(groups, name, ("t", "u") if k % 2 else ("t",), assignor)
            assert answer.error_code == E.NONE
            told[name] = {tuple(tp) for tp in answer.assignment or ()}  # type: ignore[misc]
            clients[name] = (answer.member_epoch, set(told[name]))
        elif op in ("beat", "lag") and name in clients:
            epoch, held = clients[name]
            answer = beat(groups, name, epoch, sorted(held))
            if answer.error_code != E.NONE:  # removed by a timeout: the client loses its partitions
                assert answer.error_code == E.UNKNOWN_MEMBER_ID, answer
                del clients[name]
                continue
            if answer.assignment is not None:
                told[name] = {tuple(tp) for tp in answer.assignment}  # type: ignore[misc]
            # A lagging client gives up at once what it must, and takes the rest at a later heartbeat.
            held = set(told[name]) if op == "beat" else held & told[name]
            clients[name] = (answer.member_epoch, held)
        elif op == "leave" and name in clients:
            assert groups.heartbeat(Hb(G, name, -1)).error_code == E.NONE
            del clients[name]
        elif op == "expire":
            clock.now += SESSION
            groups.expire(clock.now)
            live = set(groups.groups[G].members) if G in groups.groups else set()
            clients = {n: c for n, c in clients.items() if n in live}
        elif op == "grow":
            counts["t"] += 1
        every = [tp for _, held in clients.values() for tp in held]
        assert len(every) == len(set(every)), clients
    if not clients:
        return
    for _ in range(12):  # bounded: every member heartbeats as the model says until stable
        for name in sorted(clients):
            epoch, held = clients[name]
            answer = beat(groups, name, epoch, sorted(held))
            assert answer.error_code == E.NONE, answer
            if answer.assignment is not None:
                told[name] = {tuple(tp) for tp in answer.assignment}  # type: ignore[misc]
            clients[name] = (answer.member_epoch, set(told[name]))
        if groups.groups[G].state == STABLE_GROUP:
            break
    assert groups.groups[G].state == STABLE_GROUP
    every = sorted(tp for _, held in clients.values() for tp in held)
    wanted = {"t"} | ({"u"} if any(int(n[1:]) % 2 for n in clients) else set())
    assert every == sorted((t, p) for t in wanted for p in range(counts[t]))
