"""Static membership (KIP-345) in the classic coordinator, after Kafka's ``staticMember*`` tests of
``GroupMetadataManagerTest``: a static member joins without the member-id handshake, a returning instance takes a
new member id without a rebalance in Stable (its old assignment back, named a follower), a changed selected
protocol or a sync in flight rebalances, duplicates are fenced (FENCED_INSTANCE_ID for JoinGroup, SyncGroup,
Heartbeat, OffsetCommit, LeaveGroup), LeaveGroup by instance id, sessions lapse as any member's, the replacement
is durable (reloaded) or, failing to be, undone; DescribeGroups shows instance ids."""

from __future__ import annotations

from typing import Any

from idemcore.broker.group import GroupCoordinator
from idemcore.broker.group.membership import GroupState
from idemcore.broker.group.membership_requests import heartbeat, join_group, leave_group, sync_group
from idemcore.broker.group.requests import offset_commit, txn_offset_commit
from idemcore.net.membership import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    LeftMember,
    SyncGroupRequest,
)
from idemcore.net.messages import OffsetCommitRequest, OffsetEntry, Pending, TxnOffsetCommitRequest
from idemcore.protocol.codes import ErrorCode

from .test_group_admin_coordinator import FailingLog, make
from .test_group_membership import DELAY, RANGE, REBALANCE, SESSION, Clock, G, answer, settle

E = ErrorCode
LEADER, FOLLOWER = "leader-instance", "follower-instance"
ROUNDROBIN = (("roundrobin", b"rr"),)


def sjoin(gc: GroupCoordinator, instance: str | None, member_id: str = "", protocols=RANGE,
          **kwargs: Any) -> JoinGroupResponse | Pending:
    return join_group(gc, JoinGroupRequest(G, SESSION, REBALANCE, "consumer", protocols, member_id, instance,
                                           "client", **kwargs))


def ssync(gc: GroupCoordinator, member_id: str, generation: int, instance: str | None,
          assignments=()) -> Any:
    return sync_group(gc, SyncGroupRequest(G, generation, member_id, tuple(assignments), instance))


def sbeat(gc: GroupCoordinator, member_id: str, generation: int, instance: str | None) -> int:
    return heartbeat(gc, HeartbeatRequest(G, generation, member_id, instance)).error_code


def group(gc: GroupCoordinator) -> Any:
    return gc.classic_groups.groups[G]


def static_group(gc: GroupCoordinator, clock: Clock) -> tuple[str, str, int]:
    """Two static members, Stable: the leader's and the follower's member ids, the generation."""
    pl, pf = sjoin(gc, LEADER), sjoin(gc, FOLLOWER)
    assert isinstance(pl, Pending) and isinstance(pf, Pending)  # no MEMBER_ID_REQUIRED for static members
    settle(gc, clock, pl)
    leader, follower = answer(pl).member_id, answer(pf).member_id
    assert leader.startswith(LEADER + "-") and follower.startswith(FOLLOWER + "-")
    assert answer(pl).leader == leader
    assert [(m, i) for m, i, _ in answer(pl).members] == [(leader, LEADER), (follower, FOLLOWER)]
    generation = answer(pl).generation_id
    pending = ssync(gc, follower, generation, FOLLOWER)
    ssync(gc, leader, generation, LEADER, [(leader, b"L"), (follower, b"F")])
    assert answer(pending).assignment == b"F"
    assert group(gc).state is GroupState.STABLE
    return leader, follower, generation


def test_a_returning_follower_takes_a_new_member_id_without_a_rebalance_and_gets_its_assignment():
    clock = Clock()
    gc, log = make(clock)
    leader, follower, generation = static_group(gc, clock)
    back = sjoin(gc, FOLLOWER)
    assert isinstance(back, JoinGroupResponse)
    assert (back.error_code, back.generation_id, back.leader, back.protocol_name, back.members) == \
        (0, generation, leader, "range", ())
    new_id = back.member_id
    assert new_id != follower and new_id.startswith(FOLLOWER)
    assert group(gc).state is GroupState.STABLE and group(gc).generation_id == generation
    assert answer(ssync(gc, new_id, generation, FOLLOWER)).assignment == b"F"
    assert sbeat(gc, new_id, generation, FOLLOWER) == E.NONE
    # The old member id is fenced wherever it shows up with the instance id.
    assert sbeat(gc, follower, generation, FOLLOWER) == E.FENCED_INSTANCE_ID
    assert answer(ssync(gc, follower, generation, FOLLOWER)).error_code == E.FENCED_INSTANCE_ID
    assert answer(sjoin(gc, FOLLOWER, follower)).error_code == E.FENCED_INSTANCE_ID
    assert gc.offset_commit(G, [OffsetEntry("t", 0, 1)], generation, follower, FOLLOWER) == \
        {("t", 0): E.FENCED_INSTANCE_ID}
    assert gc.offset_commit(G, [OffsetEntry("t", 0, 1)], generation, new_id, FOLLOWER) == {("t", 0): E.NONE}
    assert gc.txn_offset_commit("tx", G, 5, 0, [OffsetEntry("t", 0, 2)], generation, follower, FOLLOWER) == \
        {("t", 0): E.FENCED_INSTANCE_ID}
    assert leave_group(gc, LeaveGroupRequest(G, (LeavingMember(follower, FOLLOWER),))).members == \
        (LeftMember(follower, FOLLOWER, E.FENCED_INSTANCE_ID),)
    # The replacement is durable: a coordinator loaded from the log knows the new id.
    again, _ = make(clock, log)
    assert again.classic_groups.groups[G].static_members == {LEADER: leader, FOLLOWER: new_id}
    assert sbeat(again, new_id, generation, FOLLOWER) == E.NONE


def test_a_returning_leader_is_answered_as_a_follower_and_keeps_leading_under_its_new_id():
    clock = Clock()
    gc, _ = make(clock)
    leader, _, generation = static_group(gc, clock)
    back = answer(sjoin(gc, LEADER))
    assert (back.error_code, back.leader, back.members) == (0, leader, ())  # the old id: it does not reassign
    assert group(gc).leader == back.member_id and group(gc).state is GroupState.STABLE
    assert answer(ssync(gc, back.member_id, generation, LEADER)).assignment == b"L"


def test_a_returning_member_with_no_protocol_the_group_supports_is_refused_and_changes_nothing():
    clock = Clock()
    gc, _ = make(clock)
    _, follower, _generation = static_group(gc, clock)
    back = answer(sjoin(gc, FOLLOWER, protocols=ROUNDROBIN))
    assert back.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert group(gc).static_members[FOLLOWER] == follower and group(gc).state is GroupState.STABLE


def test_a_changed_subscription_under_the_same_protocol_is_taken_without_a_rebalance():
    clock = Clock()
    gc, _ = make(clock)
    _, _follower, _generation = static_group(gc, clock)
    back = answer(sjoin(gc, FOLLOWER, protocols=(("range", b"other topics"), ("roundrobin", b"rr"))))
    assert back.error_code == E.NONE and group(gc).state is GroupState.STABLE
    assert group(gc).members[back.member_id].metadata("range") == b"other topics"


def test_a_returning_member_that_prefers_another_protocol_all_support_rebalances():
    clock = Clock()
    gc, _ = make(clock)
    pl = sjoin(gc, LEADER, protocols=RANGE + ROUNDROBIN)
    pf = sjoin(gc, FOLLOWER, protocols=RANGE + ROUNDROBIN)
    settle(gc, clock, pl)
    generation = answer(pl).generation_id
    ssync(gc, answer(pf).member_id, generation, FOLLOWER)
    ssync(gc, answer(pl).member_id, generation, LEADER, [])
    assert group(gc).state is GroupState.STABLE and group(gc).protocol_name == "range"
    # One vote each: the tie goes to the first member's choice, range still, so no rebalance.
    back = sjoin(gc, FOLLOWER, protocols=ROUNDROBIN + RANGE)
    assert isinstance(back, JoinGroupResponse) and back.error_code == E.NONE
    assert group(gc).state is GroupState.STABLE and group(gc).generation_id == generation
    # Now the leader too prefers roundrobin: the selected protocol would change, so the group rebalances.
    again = sjoin(gc, LEADER, protocols=ROUNDROBIN + RANGE)
    assert isinstance(again, Pending) and group(gc).state is GroupState.PREPARING_REBALANCE


def test_a_replacement_while_the_old_member_awaits_its_assignment_fences_it_and_rebalances():
    clock = Clock()
    gc, _ = make(clock)
    leader, follower, generation = static_group(gc, clock)
    pl, pf = sjoin(gc, LEADER, leader), sjoin(gc, FOLLOWER, follower)
    assert group(gc).state is GroupState.COMPLETING_REBALANCE
    waiting = ssync(gc, answer(pf).member_id, generation + 1, FOLLOWER)
    assert isinstance(waiting, Pending) and not waiting.done
    duplicate = sjoin(gc, FOLLOWER)
    assert answer(waiting).error_code == E.FENCED_INSTANCE_ID
    assert isinstance(duplicate, Pending) and group(gc).state is GroupState.PREPARING_REBALANCE
    assert answer(pl).generation_id == generation + 1


def test_a_parked_join_of_the_old_member_id_is_fenced_in_a_rebalance():
    clock = Clock()
    gc, _ = make(clock)
    leader, follower, generation = static_group(gc, clock)
    parked = sjoin(gc, FOLLOWER, follower, protocols=(("range", b"changed"),))  # changed metadata: a rebalance
    assert isinstance(parked, Pending) and group(gc).state is GroupState.PREPARING_REBALANCE
    duplicate = sjoin(gc, FOLLOWER)
    assert answer(parked).error_code == E.FENCED_INSTANCE_ID
    assert isinstance(duplicate, Pending)
    leader_back = sjoin(gc, LEADER, leader)
    response = answer(leader_back)
    assert response.generation_id == generation + 1
    assert {m for m, _, _ in response.members} == {leader, answer(duplicate).member_id}


def test_unknown_instance_ids_and_leaving_by_instance_id():
    clock = Clock()
    gc, _ = make(clock)
    _leader, follower, generation = static_group(gc, clock)
    assert answer(sjoin(gc, "stranger", follower)).error_code == E.UNKNOWN_MEMBER_ID
    assert sbeat(gc, follower, generation, "stranger") == E.UNKNOWN_MEMBER_ID
    response = leave_group(gc, LeaveGroupRequest(G, (LeavingMember("", FOLLOWER), LeavingMember("", "stranger"))))
    assert response.members == (LeftMember(follower, FOLLOWER, E.NONE), LeftMember("", "stranger", E.UNKNOWN_MEMBER_ID))
    assert follower not in group(gc).members and FOLLOWER not in group(gc).static_members
    assert group(gc).state is GroupState.PREPARING_REBALANCE


def test_a_static_members_session_lapses_like_any_other():
    clock = Clock()
    gc, _ = make(clock)
    leader, follower, generation = static_group(gc, clock)
    clock.now += SESSION // 2
    assert sbeat(gc, leader, generation, LEADER) == E.NONE
    gc.expire(clock.now)
    assert follower in group(gc).members
    clock.now += SESSION // 2
    gc.expire(clock.now)  # the follower sent nothing for a session (a static member's client sends no LeaveGroup)
    assert follower not in group(gc).members and FOLLOWER not in group(gc).static_members
    assert sbeat(gc, leader, generation, LEADER) == E.REBALANCE_IN_PROGRESS


def test_a_replacement_that_cannot_be_stored_is_undone():
    clock = Clock()
    log = FailingLog()
    gc, _ = make(clock, log)
    leader, follower, generation = static_group(gc, clock)
    log.fail = int(E.NOT_ENOUGH_REPLICAS)
    back = answer(sjoin(gc, FOLLOWER))
    assert (back.error_code, back.member_id, back.generation_id, back.leader) == \
        (E.COORDINATOR_NOT_AVAILABLE, "", generation, leader)
    assert group(gc).static_members[FOLLOWER] == follower
    assert sbeat(gc, follower, generation, FOLLOWER) == E.NONE


def test_describe_groups_shows_instance_ids():
    clock = Clock()
    gc, _ = make(clock)
    leader, follower, _ = static_group(gc, clock)
    (described,) = gc.describe_groups([G])
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in described.members] == \
        [(leader, LEADER, b"L"), (follower, FOLLOWER, b"F")]


def test_static_and_dynamic_members_share_a_group():
    clock = Clock()
    gc, _ = make(clock)
    ps = sjoin(gc, LEADER)
    first = sjoin(gc, None)
    assert answer(first).error_code == E.MEMBER_ID_REQUIRED  # dynamic members still need the handshake
    pd = sjoin(gc, None, answer(first).member_id)
    clock.now += DELAY
    settle(gc, clock, ps)
    assert answer(pd).generation_id == answer(ps).generation_id


def test_offset_commits_through_the_request_path_carry_the_instance_id():
    clock = Clock()
    gc, _ = make(clock)
    leader, follower, generation = static_group(gc, clock)
    entries = (OffsetEntry("t", 0, 3),)
    fenced = offset_commit(gc, OffsetCommitRequest(G, entries, generation, leader, group_instance_id=FOLLOWER))
    assert [r.error_code for r in fenced.results] == [E.FENCED_INSTANCE_ID]
    ok = offset_commit(gc, OffsetCommitRequest(G, entries, generation, follower, group_instance_id=FOLLOWER))
    assert [r.error_code for r in ok.results] == [E.NONE]
    txn = txn_offset_commit(gc, TxnOffsetCommitRequest("tx", G, 5, 0, entries, generation_id=generation,
                                                       member_id=leader, group_instance_id=FOLLOWER))
    assert [r.error_code for r in txn.results] == [E.FENCED_INSTANCE_ID]
