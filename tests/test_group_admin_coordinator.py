"""The group coordinator's admin calls on their own (Kafka's DescribeGroups, ListGroups, DeleteGroups,
OffsetDelete as ``GroupMetadataManager`` / ``OffsetMetadataManager`` answer them): states and members shown,
filters, the per-group and per-partition errors, tombstones written in one batch before memory changes, a failed
append changing nothing, and a reload from the log agreeing."""

from __future__ import annotations

from typing import Any

from idemcore.broker.group import GroupCoordinator
from idemcore.broker.group.group_metadata_log import encode_group_key
from idemcore.broker.group.membership import GroupState
from idemcore.broker.group.offsets_log import decode_key, encode_key
from idemcore.net.consumer_protocol import Subscription, encode_subscription
from idemcore.net.group_admin import DEAD, DescribedGroup, ListedGroup
from idemcore.net.messages import OffsetEntry
from idemcore.protocol.codes import ErrorCode

from .test_group_membership import PARTITIONS, Clock, FakeLog, join, leave, new_member, settle, sync

E = ErrorCode
G = "group"  # the group test_group_membership's helpers use
SIMPLE = "simple"
SUB_T = encode_subscription(Subscription(("t",)))


class FailingLog(FakeLog):
    def __init__(self) -> None:
        super().__init__()
        self.fail: int | None = None
        self.appends: list[tuple[int, list[tuple[bytes, bytes | None]]]] = []

    def append(self, partition, records, producer_id, producer_epoch, transactional):
        if self.fail is not None:
            return self.fail, -1
        self.appends.append((partition, list(records)))
        return super().append(partition, records, producer_id, producer_epoch, transactional)


def make(clock: Clock, log: FailingLog | None = None, **kwargs: Any) -> tuple[GroupCoordinator, FailingLog]:
    log = log or FailingLog()
    gc = GroupCoordinator(log, clock, offsets_partitions=PARTITIONS, initial_rebalance_delay_ms=3000,
                          min_session_timeout_ms=1_000, partition_exists=lambda t, p: t in ("t", "u") and p < 4,
                          **kwargs)
    for partition in range(PARTITIONS):
        gc.load(partition, log.batches.get(partition, []))
    return gc, log


def commit(gc: GroupCoordinator, group: str, *tps: tuple[str, int], generation: int = -1, member: str = "") -> None:
    answers = gc.offset_commit(group, [OffsetEntry(t, p, 5) for t, p in tps], generation, member)
    assert set(answers.values()) == {E.NONE}


def stable(gc: GroupCoordinator, clock: Clock, protocols=(("range", SUB_T),)) -> tuple[list[str], int]:
    a, pa = new_member(gc, protocols)
    b, _ = new_member(gc, protocols)
    settle(gc, clock, pa)
    generation = pa.response.generation_id
    sync(gc, pa.response.leader, generation, [(a, b"A"), (b, b"B")])
    assert gc.classic_groups.groups[G].state is GroupState.STABLE
    return [a, b], generation


# ---------------------------------------------------------------- DescribeGroups, ListGroups


def test_describe_shows_a_stable_group_with_metadata_and_assignments_and_others_without():
    clock = Clock()
    gc, _ = make(clock)
    ids, _ = stable(gc, clock)
    commit(gc, SIMPLE, ("t", 0))
    described = gc.describe_groups([G, SIMPLE, "nobody", ""])
    group = described[0]
    assert (group.group_id, group.error_code, group.state, group.protocol_type, group.protocol_name) == \
        (G, 0, "Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.metadata, m.assignment) for m in group.members] == \
        [(ids[0], "client", SUB_T, b"A"), (ids[1], "client", SUB_T, b"B")]
    assert described[1] == DescribedGroup(SIMPLE, 0, "Empty", "", "", ())
    assert described[2] == DescribedGroup("nobody", 0, DEAD)
    assert described[3].error_code == E.INVALID_GROUP_ID
    # A rebalance in progress: members without metadata or assignment, no protocol shown.
    join(gc, ids[0], (("range", SUB_T),))  # the leader rejoining forces a rebalance
    during = gc.describe_groups([G])[0]
    assert during.state == "PreparingRebalance" and during.protocol_name == ""
    assert [(m.metadata, m.assignment) for m in during.members] == [(b"", b""), (b"", b"")]


def test_describe_of_a_group_not_served_is_not_coordinator():
    clock = Clock()
    gc, _ = make(clock)
    gc.unload_partition(gc.partition_for(G))
    assert gc.describe_groups([G])[0].error_code == E.NOT_COORDINATOR
    assert gc.list_groups() == ()


def test_list_groups_with_state_and_type_filters_matched_without_case():
    clock = Clock()
    gc, _ = make(clock)
    stable(gc, clock)
    commit(gc, SIMPLE, ("t", 0))
    everything = set(gc.list_groups())
    assert everything == {ListedGroup(G, "consumer", "Stable"), ListedGroup(SIMPLE, "", "Empty")}
    assert gc.list_groups(["STABLE "]) == (ListedGroup(G, "consumer", "Stable"),)
    assert gc.list_groups(["empty"]) == (ListedGroup(SIMPLE, "", "Empty"),)
    assert gc.list_groups(["Dead"]) == ()
    assert set(gc.list_groups((), ["Classic"])) == everything
    assert gc.list_groups((), ["consumer"]) == ()


# ---------------------------------------------------------------- DeleteGroups


def test_delete_groups_answers_each_group_and_tombstones_an_empty_one():
    clock = Clock()
    gc, log = make(clock)
    stable(gc, clock)
    commit(gc, SIMPLE, ("t", 0), ("t", 1))
    before = len(log.appends)
    results = gc.delete_groups([G, SIMPLE, "nobody"])
    assert results == {G: E.NON_EMPTY_GROUP, SIMPLE: E.NONE, "nobody": E.GROUP_ID_NOT_FOUND}
    (partition, records), = log.appends[before:]
    assert partition == gc.partition_for(SIMPLE)
    assert sorted(records) == sorted([(encode_key(SIMPLE, "t", 0), None), (encode_key(SIMPLE, "t", 1), None),
                                      (encode_group_key(SIMPLE), None)])
    assert gc.offset_fetch(SIMPLE)[1] == {}
    assert gc.describe_groups([SIMPLE])[0].state == DEAD
    # The log agrees: a coordinator loaded from it has no such group either (the classic one is durable).
    again, _ = make(clock, log)
    assert again.offset_fetch(SIMPLE)[1] == {}
    assert again.list_groups() == (ListedGroup(G, "consumer", "Stable"),)


def test_a_group_named_twice_is_deleted_once():
    clock = Clock()
    gc, log = make(clock)
    commit(gc, SIMPLE, ("t", 0))
    before = len(log.appends)
    assert gc.delete_groups([SIMPLE, "nobody", SIMPLE, "nobody"]) == {SIMPLE: E.NONE, "nobody": E.GROUP_ID_NOT_FOUND}
    (_, records), = log.appends[before:]
    assert sorted(records) == sorted([(encode_key(SIMPLE, "t", 0), None), (encode_group_key(SIMPLE), None)])


def test_delete_groups_of_an_emptied_classic_group_forgets_it_and_its_offsets():
    clock = Clock()
    gc, _ = make(clock)
    ids, generation = stable(gc, clock)
    commit(gc, G, ("t", 0), generation=generation, member=ids[0])
    leave(gc, *ids)
    assert gc.classic_groups.groups[G].state is GroupState.EMPTY
    assert gc.delete_groups([G]) == {G: E.NONE}
    assert G not in gc.classic_groups.groups and gc.offset_fetch(G)[1] == {}


def test_a_failed_delete_answers_the_coordinator_error_and_changes_nothing():
    clock = Clock()
    gc, log = make(clock)
    commit(gc, SIMPLE, ("t", 0))
    log.fail = int(E.NOT_LEADER_OR_FOLLOWER)
    assert gc.delete_groups([SIMPLE]) == {SIMPLE: E.NOT_COORDINATOR}
    assert gc.offset_fetch(SIMPLE)[1][("t", 0)].offset == 5
    gc.unload_partition(gc.partition_for(SIMPLE))
    assert gc.delete_groups([SIMPLE]) == {SIMPLE: E.NOT_COORDINATOR}


# ---------------------------------------------------------------- OffsetDelete


def test_offset_delete_refuses_subscribed_topics_and_tombstones_the_rest():
    clock = Clock()
    gc, log = make(clock)
    ids, generation = stable(gc, clock)
    commit(gc, G, ("t", 0), ("u", 0), generation=generation, member=ids[0])
    before = len(log.appends)
    error, answers = gc.offset_delete(G, [("t", 0), ("u", 0), ("u", 1), ("nope", 0)])
    assert error == E.NONE
    assert answers == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE, ("u", 1): E.NONE,
                       ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    (_, records), = log.appends[before:]
    assert [decode_key(k) for k, _ in records] == [decode_key(encode_key(G, "u", 0))]
    assert set(gc.offset_fetch(G)[1]) == {("t", 0)}


def test_offset_delete_group_level_errors():
    clock = Clock()
    gc, log = make(clock)
    assert gc.offset_delete("nobody", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, {})
    # A group with members of another protocol type cannot have its offsets deleted.
    _, pa = new_member(gc, protocol_type="connect")
    settle(gc, clock, pa)
    assert gc.offset_delete(G, [("t", 0)]) == (E.NON_EMPTY_GROUP, {})
    commit(gc, SIMPLE, ("t", 0))
    log.fail = int(E.NOT_ENOUGH_REPLICAS)  # Kafka maps it to COORDINATOR_NOT_AVAILABLE
    assert gc.offset_delete(SIMPLE, [("t", 0)]) == (E.COORDINATOR_NOT_AVAILABLE, {})
    assert gc.offset_fetch(SIMPLE)[1][("t", 0)].offset == 5
    log.fail = None
    assert gc.offset_delete(SIMPLE, [("t", 0)]) == (E.NONE, {("t", 0): E.NONE})
    assert gc.offset_fetch(SIMPLE)[1] == {}
    gc.unload_partition(gc.partition_for(SIMPLE))
    assert gc.offset_delete(SIMPLE, [("t", 0)]) == (E.NOT_COORDINATOR, {})


def test_a_consumer_group_whose_subscriptions_cannot_be_read_counts_as_subscribed():
    clock = Clock()
    gc, _ = make(clock)
    stable(gc, clock, protocols=(("range", b"\x00\x00\xff"),))
    assert gc.offset_delete(G, [("u", 0)]) == (E.NONE, {("u", 0): E.GROUP_SUBSCRIBED_TO_TOPIC})

