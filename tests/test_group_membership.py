"""Classic group membership in process (Kafka's JoinGroup / SyncGroup / Heartbeat / LeaveGroup): the member id
handshake, the initial rebalance delay, rebalances on joins, leaves, lapsed sessions and missing rejoins or syncs,
protocol selection, the errors of stale members, offset commits checked against membership, late answers through
the in-process transport, and a property test: clients that follow the protocol against a coordinator they cannot
see into, checked with a small model of what they must end up with."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.broker.group import GroupCoordinator
from idemcore.broker.group import membership_requests as mr
from idemcore.broker.group.membership import GroupState
from idemcore.net.membership import (
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import OffsetEntry, Pending
from idemcore.net.transport import InProcessTransport
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.stored import StoredBatch

E = ErrorCode
T0 = 1_700_000_000_000
PARTITIONS = 3
G = "group"
SESSION = 10_000
REBALANCE = 20_000
DELAY = 3_000
RANGE = (("range", b"subscription"),)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class FakeLog:
    """``__consumer_offsets`` in memory (the coordinator's appends)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[StoredBatch]] = defaultdict(list)

    def append(self, partition, records, producer_id, producer_epoch, transactional):
        stored = self.batches[partition]
        base = stored[-1].next_offset if stored else 0
        batch = RecordBatch("__consumer_offsets", partition, tuple(v for _, v in records),
                            tuple(k for k, _ in records), producer_id, producer_epoch, -1, T0, transactional)
        stored.append(StoredBatch(base, batch))
        return 0, base


def coordinator(clock: Clock, delay: int = DELAY, load: bool = True, **kwargs: Any) -> GroupCoordinator:
    gc = GroupCoordinator(FakeLog(), clock, offsets_partitions=PARTITIONS, initial_rebalance_delay_ms=delay,
                          min_session_timeout_ms=1_000, **kwargs)
    if load:
        for partition in range(PARTITIONS):
            gc.load(partition, [])
    return gc


def join(gc: GroupCoordinator, member_id: str = "", protocols=RANGE, *, rid: int = 0, group: str = G,
         session: int = SESSION, rebalance: int = REBALANCE, protocol_type: str = "consumer",
         required: bool = True, instance: str | None = None) -> JoinGroupResponse | Pending:
    return mr.join_group(gc, JoinGroupRequest(group, session, rebalance, protocol_type, protocols, member_id,
                                              instance, "client", required, request_id=rid))


def new_member(gc: GroupCoordinator, protocols=RANGE, **kwargs: Any) -> tuple[str, Pending]:
    """The v4+ handshake: MEMBER_ID_REQUIRED with an id, then the join with it (parked)."""
    first = join(gc, "", protocols, **kwargs)
    assert isinstance(first, JoinGroupResponse) and first.error_code == MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-")
    pending = join(gc, first.member_id, protocols, **kwargs)
    assert isinstance(pending, Pending) and not pending.done
    return first.member_id, pending


def answer(pending: JoinGroupResponse | SyncGroupResponse | Pending) -> Any:
    if isinstance(pending, Pending):
        assert pending.done, "the answer is still pending"
        return pending.response
    return pending


def sync(gc: GroupCoordinator, member_id: str, generation: int, assignments=(), rid: int = 0,
         **kwargs: Any) -> SyncGroupResponse | Pending:
    return mr.sync_group(gc, SyncGroupRequest(G, generation, member_id, tuple(assignments), request_id=rid,
                                              **kwargs))


def beat(gc: GroupCoordinator, member_id: str, generation: int) -> int:
    return mr.heartbeat(gc, HeartbeatRequest(G, generation, member_id)).error_code


def leave(gc: GroupCoordinator, *member_ids: str, group: str = G) -> LeaveGroupResponse:
    return mr.leave_group(gc, LeaveGroupRequest(group, tuple(LeavingMember(m) for m in member_ids)))


def state(gc: GroupCoordinator, group: str = G) -> GroupState:
    return gc.classic_groups.groups[group].state


def settle(gc: GroupCoordinator, clock: Clock, pending: Pending) -> None:
    """Let the initial rebalance's delay run (extended once per round that added members)."""
    for _ in range(REBALANCE // DELAY + 1):
        clock.now += DELAY
        gc.expire(clock.now)
        if pending.done:
            return
    raise AssertionError("the initial rebalance never completed")


def stable_group(gc: GroupCoordinator, clock: Clock, n: int) -> tuple[list[str], int]:
    """``n`` members in a Stable group (the first leads); their ids and the generation."""
    joined = [new_member(gc) for _ in range(n)]
    settle(gc, clock, joined[0][1])
    answers = [answer(p) for _, p in joined]
    generation = answers[0].generation_id
    ids = [m for m, _ in joined]
    leader = answers[0].leader
    assert leader == ids[0]
    followers = [sync(gc, m, generation) for m in ids[1:]]
    assert all(isinstance(f, Pending) and not f.done for f in followers)
    mine = answer(sync(gc, leader, generation, [(m, m.encode()) for m in ids]))
    assert mine.assignment == leader.encode()
    assert [answer(f).assignment for f in followers] == [m.encode() for m in ids[1:]]
    assert state(gc) is GroupState.STABLE
    return ids, generation


# ---------------------------------------------------------------- joining


def test_first_join_asks_for_a_member_id_then_the_initial_rebalance_waits_for_its_delay():
    clock = Clock()
    gc = coordinator(clock)
    first = join(gc, rid=7)
    assert first == JoinGroupResponse(MEMBER_ID_REQUIRED, member_id=first.member_id, request_id=7)
    # The id handed out is not a member yet: a heartbeat with it is refused.
    assert beat(gc, first.member_id, 0) == E.UNKNOWN_MEMBER_ID
    pending = join(gc, first.member_id, rid=8)
    assert isinstance(pending, Pending) and state(gc) is GroupState.PREPARING_REBALANCE
    clock.now += DELAY - 1
    gc.expire(clock.now)
    assert not pending.done  # all members joined, but the initial rebalance waits for its delay
    clock.now += 1
    gc.expire(clock.now)
    assert pending.response == JoinGroupResponse(E.NONE, 1, "consumer", "range", first.member_id, first.member_id,
                                                 ((first.member_id, None, b"subscription"),), request_id=8)
    assert state(gc) is GroupState.COMPLETING_REBALANCE


def test_old_join_versions_are_taken_in_at_once_without_the_handshake():
    clock = Clock()
    gc = coordinator(clock, delay=0)
    pending = join(gc, required=False)
    assert isinstance(pending, Pending)
    gc.expire(clock.now)
    response = pending.response
    assert response.error_code == E.NONE and response.member_id.startswith("client-")
    assert response.leader == response.member_id and response.generation_id == 1


def test_members_arriving_during_the_initial_delay_extend_it_up_to_the_rebalance_timeout():
    clock = Clock()
    gc = coordinator(clock)
    _, a = new_member(gc, rebalance=7_000)
    for _ in range(5):  # one new member per 2.9 s: each extends the delay, but only within 7 s
        clock.now += 2_900
        gc.expire(clock.now)
        if a.done:
            break
        new_member(gc, rebalance=7_000)
    assert a.done
    assert clock.now - T0 <= 7_000 + DELAY  # Kafka's bound: the delay never runs past the rebalance timeout
    assert len(a.response.members) >= 2


def test_a_member_joining_during_the_initial_delay_extends_it_once_more():
    clock = Clock()
    gc = coordinator(clock)
    _, a = new_member(gc, rebalance=7_000)
    clock.now += 1_000
    new_member(gc, rebalance=7_000)
    clock.now = T0 + DELAY
    gc.expire(clock.now)
    assert not a.done  # extended by another delay (the rebalance timeout leaves 4 s)
    clock.now = T0 + 2 * DELAY - 1
    gc.expire(clock.now)
    assert not a.done
    clock.now = T0 + 2 * DELAY
    gc.expire(clock.now)
    assert len(answer(a).members) == 2


def test_a_new_member_whose_join_waits_too_long_is_dropped_even_while_waiting():
    clock = Clock()
    gc = coordinator(clock)
    (a,), generation = stable_group(gc, clock, 1)
    b, b_join = new_member(gc, rebalance=600_000)  # the group now waits up to 10 min for a to rejoin
    deadline = clock.now + 300_000  # Kafka's new-member join timeout
    while clock.now < deadline - SESSION:
        clock.now += SESSION // 2
        assert beat(gc, a, generation) == REBALANCE_IN_PROGRESS  # a stays alive but never rejoins
        gc.expire(clock.now)
    assert not b_join.done
    clock.now = deadline
    gc.expire(clock.now)
    assert answer(b_join).error_code == E.UNKNOWN_MEMBER_ID  # a live client would join again
    assert beat(gc, b, generation) == E.UNKNOWN_MEMBER_ID


def test_a_second_member_joins_a_stable_group_and_everyone_rejoins():
    clock = Clock()
    gc = coordinator(clock)
    (a,), generation = stable_group(gc, clock, 1)
    b, b_join = new_member(gc)
    assert state(gc) is GroupState.PREPARING_REBALANCE
    assert beat(gc, a, generation) == REBALANCE_IN_PROGRESS  # tells a to rejoin
    assert answer(sync(gc, a, generation)).error_code == REBALANCE_IN_PROGRESS
    a_join = join(gc, a)
    # Everyone rejoined: the join phase completes at once (no delay: this is not the group's first rebalance).
    ra, rb = answer(a_join), answer(b_join)
    assert ra.generation_id == rb.generation_id == generation + 1
    assert ra.leader == rb.leader == a
    assert [m for m, _, _ in ra.members] == [a, b] and rb.members == ()
    assert beat(gc, a, generation) == E.ILLEGAL_GENERATION
    assert beat(gc, a, generation + 1) == E.NONE


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped():
    clock = Clock()
    gc = coordinator(clock)
    (a, b), generation = stable_group(gc, clock, 2)
    start = clock.now
    c, c_join = new_member(gc)
    a_join = join(gc, a)
    for step in range(REBALANCE // SESSION):  # b keeps heartbeating, yet never rejoins
        clock.now += SESSION - 1
        assert beat(gc, b, generation) == REBALANCE_IN_PROGRESS
        gc.expire(clock.now)
        assert not a_join.done, step
    clock.now = start + REBALANCE
    gc.expire(clock.now)
    ra, rc = answer(a_join), answer(c_join)
    assert ra.generation_id == rc.generation_id == generation + 1
    assert sorted(m for m, _, _ in ra.members) == sorted([a, c])
    assert beat(gc, b, generation) == E.UNKNOWN_MEMBER_ID


def test_the_leader_not_rejoining_hands_the_lead_to_one_that_did():
    clock = Clock()
    gc = coordinator(clock)
    (a, b), generation = stable_group(gc, clock, 2)
    b_join = join(gc, b)  # b's metadata is unchanged, but b is a follower in Stable: answered at once
    assert answer(b_join).generation_id == generation and answer(b_join).leader == a
    b_join = join(gc, b, (("range", b"new subscription"),))  # changed metadata: a rebalance
    clock.now += REBALANCE
    gc.expire(clock.now)
    rb = answer(b_join)
    assert rb.leader == b and [m for m, _, _ in rb.members] == [b]
    assert rb.members[0][2] == b"new subscription"


def test_session_expiry_removes_a_silent_member_and_rebalances():
    clock = Clock()
    gc = coordinator(clock)
    (a, b), generation = stable_group(gc, clock, 2)
    clock.now += SESSION - 1
    assert beat(gc, b, generation) == E.NONE
    gc.expire(clock.now)
    assert state(gc) is GroupState.STABLE
    clock.now += 1
    gc.expire(clock.now)  # a's session (from its SyncGroup answer) has lapsed, b's has not
    assert state(gc) is GroupState.PREPARING_REBALANCE
    assert beat(gc, a, generation) == E.UNKNOWN_MEMBER_ID
    assert beat(gc, b, generation) == REBALANCE_IN_PROGRESS
    rb = answer(join(gc, b))
    assert (rb.generation_id, rb.leader, [m for m, _, _ in rb.members]) == (generation + 1, b, [b])


def test_a_member_id_never_joined_with_lapses_after_a_session():
    clock = Clock()
    gc = coordinator(clock)
    (a,), generation = stable_group(gc, clock, 1)
    first = join(gc)
    assert first.error_code == MEMBER_ID_REQUIRED
    clock.now += SESSION
    assert beat(gc, a, generation) == E.NONE
    gc.expire(clock.now)
    assert answer(join(gc, first.member_id)).error_code == E.UNKNOWN_MEMBER_ID


def test_a_follower_that_never_syncs_is_removed_after_the_rebalance_timeout():
    clock = Clock()
    gc = coordinator(clock)
    a, pa = new_member(gc)
    b, _ = new_member(gc)
    settle(gc, clock, pa)
    generation = answer(pa).generation_id
    leader_sync = sync(gc, a, generation, [(a, b"A"), (b, b"B")])
    assert answer(leader_sync).assignment == b"A"
    start = clock.now
    while clock.now < start + REBALANCE - 1_000:  # both heartbeat, b never syncs
        clock.now += 1_000
        assert beat(gc, a, generation) == beat(gc, b, generation) == E.NONE
        gc.expire(clock.now)
    clock.now = start + REBALANCE - 1
    gc.expire(clock.now)
    assert state(gc) is GroupState.STABLE
    clock.now += 1
    gc.expire(clock.now)
    assert state(gc) is GroupState.PREPARING_REBALANCE
    assert beat(gc, b, generation) == E.UNKNOWN_MEMBER_ID
    assert beat(gc, a, generation) == REBALANCE_IN_PROGRESS


def test_leave_group_rebalances_and_answers_each_member():
    clock = Clock()
    gc = coordinator(clock)
    (a, b, c), generation = stable_group(gc, clock, 3)
    response = leave(gc, b, "stranger", "")
    assert response.members == (LeftMember(b), LeftMember("stranger", None, E.UNKNOWN_MEMBER_ID),
                                 LeftMember("", None, E.UNKNOWN_MEMBER_ID))
    assert response.error == E.UNKNOWN_MEMBER_ID  # what LeaveGroup v0-2 would carry
    assert state(gc) is GroupState.PREPARING_REBALANCE
    pa, pc = join(gc, a), join(gc, c)
    assert answer(pa).generation_id == answer(pc).generation_id == generation + 1
    assert [m for m, _, _ in answer(pa).members] == [a, c]
    # The last members leaving empty the group.
    assert leave(gc, a, c).error == E.NONE
    assert state(gc) is GroupState.PREPARING_REBALANCE or state(gc) is GroupState.EMPTY
    clock.now += REBALANCE
    gc.expire(clock.now)
    assert state(gc) is GroupState.EMPTY
    clock.now += gc.offsets_retention_check_interval_ms
    gc.expire(clock.now)
    assert G not in gc.classic_groups.groups  # Empty without offsets: deleted at Kafka's periodic cleanup
    assert leave(gc, a).members == (LeftMember(a, None, E.UNKNOWN_MEMBER_ID),)


def test_leaving_while_others_rejoin_completes_the_join_phase():
    clock = Clock()
    gc = coordinator(clock)
    (a, b), generation = stable_group(gc, clock, 2)
    pa = join(gc, a, (("range", b"changed"),))
    assert not pa.done
    leave(gc, b)
    assert answer(pa).generation_id == generation + 1 and answer(pa).members == ((a, None, b"changed"),)


def test_a_join_parked_when_its_member_leaves_is_answered_unknown_member():
    clock = Clock()
    gc = coordinator(clock)
    a, pa = new_member(gc)
    leave(gc, a)
    assert answer(pa) == JoinGroupResponse(E.UNKNOWN_MEMBER_ID)


# ---------------------------------------------------------------- protocols and errors


def test_protocol_selection_takes_the_most_voted_of_those_all_support():
    clock = Clock()
    gc = coordinator(clock)
    protocols = [(("range", b"r1"), ("roundrobin", b"o1"), ("sticky", b"s1")),
                 (("roundrobin", b"o2"), ("range", b"r2")),
                 (("sticky", b"s3"), ("roundrobin", b"o3"), ("range", b"r3"))]
    joined = [new_member(gc, p) for p in protocols]
    # A member with no protocol in common with all the others, or of another type, is refused.
    assert join(gc, "", (("sticky", b""),)).error_code == INCONSISTENT_GROUP_PROTOCOL
    assert join(gc, "", RANGE, protocol_type="connect").error_code == INCONSISTENT_GROUP_PROTOCOL
    settle(gc, clock, joined[0][1])
    leader = answer(joined[0][1])
    # sticky is not supported by all; range gets 1 vote, roundrobin 2.
    assert leader.protocol_name == "roundrobin"
    assert [meta for _, _, meta in leader.members] == [b"o1", b"o2", b"o3"]
    assert answer(sync(gc, joined[1][0], leader.generation_id, protocol_name="range")).error_code \
        == INCONSISTENT_GROUP_PROTOCOL


def test_request_level_errors():
    clock = Clock()
    gc = coordinator(clock)
    assert join(gc, group="").error_code == E.INVALID_GROUP_ID
    assert join(gc, session=999).error_code == INVALID_SESSION_TIMEOUT
    assert join(gc, "nobody").error_code == E.UNKNOWN_MEMBER_ID  # a member id for a group that does not exist
    assert join(gc, "someone", instance="static-1").error_code == E.UNKNOWN_MEMBER_ID  # an instance id not known
    assert join(gc, "", ()).error_code == INCONSISTENT_GROUP_PROTOCOL  # no protocols at all
    assert answer(sync(gc, "nobody", 1)).error_code == E.UNKNOWN_MEMBER_ID
    assert beat(gc, "nobody", 1) == E.UNKNOWN_MEMBER_ID
    unloaded = coordinator(clock, load=False)
    assert join(unloaded).error_code == E.NOT_COORDINATOR
    assert beat(unloaded, "m", 1) == E.NOT_COORDINATOR
    assert leave(unloaded, "m").error_code == E.NOT_COORDINATOR


@pytest.mark.parametrize("request_", [
    JoinGroupRequest(G, "10000", REBALANCE, "consumer", RANGE),  # type: ignore[arg-type]
    JoinGroupRequest(G, SESSION, REBALANCE, "consumer", (("range", "not bytes"),)),  # type: ignore[arg-type]
    JoinGroupRequest(G, SESSION, REBALANCE, "consumer", RANGE, None),  # type: ignore[arg-type]
    JoinGroupRequest(G, SESSION, REBALANCE, "consumer", RANGE, group_instance_id=5),  # type: ignore[arg-type]
    SyncGroupRequest(G, 1, "m", (("m", "text"),)),  # type: ignore[arg-type]
    SyncGroupRequest(G, 2**31, "m"),
    HeartbeatRequest(G, None, "m"),  # type: ignore[arg-type]
    HeartbeatRequest(7, 1, "m"),  # type: ignore[arg-type]
    LeaveGroupRequest(G, ("m",)),  # type: ignore[arg-type]
])
def test_a_malformed_field_is_answered_invalid_request(request_):
    gc = coordinator(Clock())
    handler = {JoinGroupRequest: mr.join_group, SyncGroupRequest: mr.sync_group, HeartbeatRequest: mr.heartbeat,
               LeaveGroupRequest: mr.leave_group}[type(request_)]
    response = handler(gc, request_)
    assert response.error_code == E.INVALID_REQUEST
    assert type(request_).__name__ in response.error_message


def test_a_reloaded_partition_forgets_membership_and_answers_waiting_joins_not_coordinator():
    clock = Clock()
    gc = coordinator(clock)
    a, pa = new_member(gc)
    gc.load(gc.partition_for(G), [])
    assert answer(pa) == JoinGroupResponse(E.NOT_COORDINATOR, member_id=a)
    assert join(gc, a).error_code == E.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------- offsets against membership


def commit(gc: GroupCoordinator, generation: int, member: str) -> int:
    (code,) = gc.offset_commit(G, (OffsetEntry("t", 0, 5),), generation, member).values()
    return int(code)


def test_offset_commits_are_checked_against_membership():
    clock = Clock()
    gc = coordinator(clock)
    a, pa = new_member(gc)
    clock.now += DELAY
    gc.expire(clock.now)
    generation = answer(pa).generation_id
    # CompletingRebalance: a current member still waits for its assignment.
    assert commit(gc, generation, a) == REBALANCE_IN_PROGRESS
    answer(sync(gc, a, generation, [(a, b"x")]))
    assert commit(gc, generation, a) == E.NONE
    assert commit(gc, generation - 1, a) == E.ILLEGAL_GENERATION
    assert commit(gc, generation, "stranger") == E.UNKNOWN_MEMBER_ID
    assert commit(gc, -1, "") == E.UNKNOWN_MEMBER_ID  # an anonymous commit into a group with members
    assert commit(gc, -1, a) == E.ILLEGAL_GENERATION  # a member id with no generation
    # A transactional commit without member or generation is accepted whatever the group's state.
    (code,) = gc.txn_offset_commit("tx", G, 9, 0, (OffsetEntry("t", 1, 3),)).values()
    assert code == E.NONE
    (code,) = gc.txn_offset_commit("tx", G, 9, 0, (OffsetEntry("t", 1, 3),), generation + 1, a).values()
    assert code == E.ILLEGAL_GENERATION
    # A rebalance starts: the old generation is refused, and after everyone leaves a simple commit is fine again.
    pb = new_member(gc)[1]
    assert commit(gc, generation, a) == E.NONE  # still a member of this generation while it prepares
    leave(gc, a)
    assert commit(gc, generation, a) == E.UNKNOWN_MEMBER_ID
    clock.now += REBALANCE
    gc.expire(clock.now)
    assert answer(pb).generation_id == generation + 1
    b = answer(pb).member_id
    leave(gc, b)
    clock.now += REBALANCE
    gc.expire(clock.now)
    assert state(gc) is GroupState.EMPTY  # kept: the group has offsets
    assert commit(gc, -1, "") == E.NONE
    assert commit(gc, generation + 1, b) == E.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------- late answers


class Handler:
    """A RequestHandler over the coordinator alone, as Broker.handle dispatches."""

    def __init__(self, gc: GroupCoordinator) -> None:
        self.gc = gc
        self.topics: dict[str, int] = {}

    def handle(self, request):
        return {JoinGroupRequest: mr.join_group, SyncGroupRequest: mr.sync_group, HeartbeatRequest: mr.heartbeat,
                LeaveGroupRequest: mr.leave_group}[type(request)](self.gc, request)


def test_the_transport_delivers_late_answers_in_completion_order_and_drops_them_after_a_disconnect():
    clock = Clock()
    gc = coordinator(clock, delay=0)
    transport = InProcessTransport(Handler(gc))
    requests = {}
    for client in ("a", "b", "c"):
        requests[client] = JoinGroupRequest(G, SESSION, REBALANCE, "consumer", RANGE, client_id=client,
                                            member_id_required=False, request_id=1)
        transport.send(client, requests[client])
        assert transport.poll(client) == []
    transport.disconnect("c")  # c's answer will be lost, as on a broken connection
    gc.expire(clock.now)
    (got_a,) = transport.poll("a")
    (got_b,) = transport.poll("b")
    assert transport.poll("c") == [] and transport.poll("a") == []
    assert got_a[0] is requests["a"] and got_a[1].request_id == 1
    leader, generation = got_a[1].leader, got_a[1].generation_id
    assert leader == got_a[1].member_id and got_b[1].leader == leader and len(got_a[1].members) == 3
    b = got_b[1].member_id
    transport.send("b", SyncGroupRequest(G, generation, b, request_id=2))
    assert transport.poll("b") == []  # waits for the leader
    transport.send("a", SyncGroupRequest(G, generation, leader, tuple((m, m.encode()) for m, _, _ in
                                                                      got_a[1].members), request_id=3))
    assert [(r.request_id, resp.assignment) for r, resp in transport.poll("b")] == [(2, b.encode())]
    assert [(r.request_id, resp.assignment) for r, resp in transport.poll("a")] == [(3, leader.encode())]
    # A plain answer is still delivered at once.
    transport.send("b", HeartbeatRequest(G, generation, b, request_id=4))
    assert [(r.request_id, resp) for r, resp in transport.poll("b")] == [(4, HeartbeatResponse(E.NONE, 4))]


def test_a_second_join_while_the_first_waits_answers_the_first():
    clock = Clock()
    gc = coordinator(clock)
    a, first = new_member(gc)
    second = join(gc, a, rid=9)
    assert answer(first).error_code == REBALANCE_IN_PROGRESS
    clock.now += DELAY
    gc.expire(clock.now)
    assert answer(second).request_id == 9 and answer(second).error_code == E.NONE


# ---------------------------------------------------------------- property: clients that follow the protocol


class Client:
    """A consumer as a client library drives the classic protocol (KIP-394 handshake, sync after join, rejoin
    on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID), seeing only answers."""

    def __init__(self, name: str, protocols: tuple[tuple[str, bytes], ...]) -> None:
        self.name = name
        self.protocols = protocols
        self.member_id = ""
        self.generation = -1
        self.waiting: Pending | None = None
        self.phase = "join"  # join -> sync -> stable
        self.assignment: bytes | None = None
        self.leader_members: tuple[str, ...] = ()

    def step(self, gc: GroupCoordinator) -> None:
        if self.waiting is not None:
            if not self.waiting.done:
                return
            response, self.waiting = self.waiting.response, None
            self.handle(response)
            return
        if self.phase == "join":
            self.handle(join(gc, self.member_id, self.protocols))
        elif self.phase == "sync":
            assignments = [(m, m.encode()) for m in self.leader_members]
            self.handle(sync(gc, self.member_id, self.generation, assignments))
        else:
            code = beat(gc, self.member_id, self.generation)
            if code != E.NONE:
                self.rejoin(code)

    def handle(self, response: Any) -> None:
        if isinstance(response, Pending):
            self.waiting = response
        elif isinstance(response, JoinGroupResponse):
            if response.error_code == MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
            elif response.error_code == E.NONE:
                self.generation, self.phase = response.generation_id, "sync"
                self.leader_members = tuple(m for m, _, _ in response.members)
            else:
                self.rejoin(response.error_code)
        elif response.error_code == E.NONE:
            self.phase, self.assignment = "stable", response.assignment
        else:
            self.rejoin(response.error_code)

    def rejoin(self, code: int) -> None:
        if code == E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.phase, self.assignment = "join", None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["step", "start", "crash", "leave", "tick"]), st.integers(0, 3),
                          st.integers(1, 4_000)), max_size=70))
def test_clients_that_follow_the_protocol_end_up_in_one_stable_generation(ops):
    """Whatever happens (starts, crashes, leaves, time passing), once the surviving clients keep stepping and
    heartbeating, they end up in one Stable generation holding exactly them, each with the assignment its leader
    gave it. The model: the set of live clients."""
    clock = Clock()
    gc = coordinator(clock, delay=1_000)
    names = ["c0", "c1", "c2", "c3"]
    protocol_choices = [RANGE, (("roundrobin", b"o"), ("range", b"r")), RANGE, (("range", b"r"),)]
    live: dict[str, Client] = {}
    for kind, who, ms in ops:
        name = names[who]
        if kind == "start" and name not in live:
            live[name] = Client(name, protocol_choices[who])
        elif kind == "crash":
            live.pop(name, None)  # gone without a word: its session must lapse
        elif kind == "leave" and name in live:
            client = live.pop(name)
            if client.member_id:
                leave(gc, client.member_id)
        elif kind == "tick":
            clock.now += ms
            gc.expire(clock.now)
        elif name in live:
            live[name].step(gc)
    # Quiesce: every live client steps each 1 s (well within its session) until nothing changes for long.
    for _ in range(200):
        for client in list(live.values()):
            client.step(gc)
        clock.now += 1_000
        gc.expire(clock.now)
    group = gc.classic_groups.groups.get(G)
    if not live:
        assert group is None or not group.members
        return
    assert group is not None and group.state is GroupState.STABLE
    assert set(group.members) == {c.member_id for c in live.values()}
    assert {c.generation for c in live.values()} == {group.generation_id}
    assert all(c.phase == "stable" and c.assignment == c.member_id.encode() for c in live.values())
