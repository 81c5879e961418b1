"""The group admin requests through ``Broker.handle``: answers in the request's order, a broker without
``__consumer_offsets`` answering "no such group" without making the topic, offsets deleted per partition and per
group (tombstones that survive a restart), and every malformed field answered INVALID_REQUEST with a message naming
it, never raised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from idemcore.broker import Broker
from idemcore.net.group_admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from idemcore.net.messages import OffsetCommitRequest, OffsetEntry, OffsetFetchRequest
from idemcore.protocol.codes import ErrorCode

E = ErrorCode
OFFSETS = "__consumer_offsets"
T0 = 1_700_000_000_000


def open_broker(data_dir: Path) -> Broker:
    return Broker({"t": 2, "u": 1}, data_dir=data_dir, transaction_state_partitions=1, offsets_topic_partitions=3,
                  clock=lambda: T0)


@pytest.fixture
def broker(tmp_path: Path):
    b = open_broker(tmp_path)
    yield b
    b.close()


def commit(broker: Broker, group: str, *entries: tuple[str, int, int]) -> None:
    answer = broker.handle(OffsetCommitRequest(group, tuple(OffsetEntry(t, p, o) for t, p, o in entries)))
    assert [r.error_code for r in answer.results] == [0] * len(entries)  # type: ignore[union-attr]


def fetched(broker: Broker, group: str) -> dict[tuple[str, int], int]:
    answer: Any = broker.handle(OffsetFetchRequest(group))
    return {(o.topic, o.partition): o.offset for o in answer.offsets}


def test_a_broker_without_the_offsets_topic_has_no_groups_and_does_not_make_it(broker):
    assert broker.handle(ListGroupsRequest(request_id=1)) == ListGroupsResponse(0, (), 1)
    described: Any = broker.handle(DescribeGroupsRequest(("a", "b"), request_id=2))
    assert [(g.group_id, g.state, g.members) for g in described.groups] == [("a", "Dead", ()), ("b", "Dead", ())]
    assert broker.handle(DeleteGroupsRequest(("a",), 3)) == DeleteGroupsResponse((("a", E.GROUP_ID_NOT_FOUND),), 3)
    assert broker.handle(OffsetDeleteRequest("a", (("t", 0),), 4)).error_code == E.GROUP_ID_NOT_FOUND  # type: ignore
    assert OFFSETS not in broker.topics


def test_offsets_only_groups_are_listed_described_and_deleted_durably(broker, tmp_path):
    commit(broker, "etl", ("t", 0, 10), ("t", 1, 11), ("u", 0, 5))
    commit(broker, "other", ("t", 0, 3))
    listed: Any = broker.handle(ListGroupsRequest(request_id=5))
    assert sorted(listed.groups, key=lambda g: g.group_id) == [
        ListedGroup("etl", "", "Empty"), ListedGroup("other", "", "Empty")]
    assert broker.handle(ListGroupsRequest(("stable",))).groups == ()  # type: ignore[union-attr]
    assert len(broker.handle(ListGroupsRequest((" EMPTY ",))).groups) == 2  # type: ignore[union-attr]
    assert broker.handle(ListGroupsRequest(types_filter=("consumer",))).groups == ()  # type: ignore[union-attr]
    described: Any = broker.handle(DescribeGroupsRequest(("other", "nobody", "etl"), request_id=6))
    assert [(g.group_id, g.error_code, g.state) for g in described.groups] == [
        ("other", 0, "Empty"), ("nobody", 0, "Dead"), ("etl", 0, "Empty")]

    # OffsetDelete: one partition's offset goes, an unknown partition is named, the rest stays.
    answer: Any = broker.handle(OffsetDeleteRequest("etl", (("t", 1), ("nope", 0), ("t", 7)), 7))
    assert answer == OffsetDeleteResponse(0, (("t", 1, 0), ("nope", 0, E.UNKNOWN_TOPIC_OR_PARTITION),
                                              ("t", 7, E.UNKNOWN_TOPIC_OR_PARTITION)), 7)
    assert fetched(broker, "etl") == {("t", 0): 10, ("u", 0): 5}

    # DeleteGroups in the request's order, a group asked twice answered twice.
    deleted = broker.handle(DeleteGroupsRequest(("etl", "missing", "etl"), 8))
    assert deleted == DeleteGroupsResponse((("etl", 0), ("missing", E.GROUP_ID_NOT_FOUND), ("etl", 0)), 8)
    assert fetched(broker, "etl") == {}
    assert [g.group_id for g in broker.handle(ListGroupsRequest()).groups] == ["other"]  # type: ignore[union-attr]
    assert broker.handle(DeleteGroupsRequest(("etl",))).results == (("etl", E.GROUP_ID_NOT_FOUND),)  # type: ignore

    broker.close()
    again = open_broker(tmp_path)
    try:  # the tombstones are in the log: the restarted coordinator loads neither deleted offsets nor the group
        assert fetched(again, "etl") == {}
        assert fetched(again, "other") == {("t", 0): 3}
        assert [g.group_id for g in again.handle(ListGroupsRequest()).groups] == ["other"]  # type: ignore
    finally:
        again.close()


MALFORMED = [
    (DescribeGroupsRequest(None), "group_ids must be a tuple of strings, not NoneType"),  # type: ignore[arg-type]
    (DescribeGroupsRequest(("a", 3)), "group_ids must hold strings, not int"),  # type: ignore[arg-type]
    (DescribeGroupsRequest(("a",), "yes"), "include_authorized_operations must be a bool"),  # type: ignore
    (ListGroupsRequest("Stable"), "states_filter must be a tuple of strings, not str"),  # type: ignore[arg-type]
    (ListGroupsRequest((), (None,)), "types_filter must hold strings, not NoneType"),  # type: ignore[arg-type]
    (DeleteGroupsRequest("etl"), "group_ids must be a tuple of strings, not str"),  # type: ignore[arg-type]
    (OffsetDeleteRequest(7, ()), "group_id must be a string, not int"),  # type: ignore[arg-type]
    (OffsetDeleteRequest("g", None), "partitions must be a tuple of TopicPartition"),  # type: ignore[arg-type]
    (OffsetDeleteRequest("g", (("t",),)), "partitions must hold (topic, partition) pairs"),  # type: ignore
    (OffsetDeleteRequest("g", ((1, 0),)), "a partition's topic must be a string, not int"),  # type: ignore
    (OffsetDeleteRequest("g", (("t", "0"),)), "partition of topic 't' must be an integer, not str"),  # type: ignore
    (OffsetDeleteRequest("g", (("t", -1),)), "partition -1 of topic 't' is out of range"),
    (OffsetDeleteRequest("g", (("t", 2**31),)), "partition 2147483648 of topic 't' is out of range"),
]


@pytest.mark.parametrize(("request_", "named"), MALFORMED, ids=lambda v: repr(v)[:60])
def test_a_malformed_field_is_answered_invalid_request_naming_it(broker, request_, named):
    commit(broker, "g", ("t", 0, 1))  # a coordinator exists: the check is the handler's or the coordinator's
    answer: Any = broker.handle(request_)
    assert named in answer.error_message
    assert answer.error_message.startswith(type(request_).__name__)
    if isinstance(answer, DescribeGroupsResponse):
        assert all(g.error_code == E.INVALID_REQUEST for g in answer.groups)
        assert [g.group_id for g in answer.groups] == [g for g in (request_.group_ids or ()) if type(g) is str]
    elif isinstance(answer, DeleteGroupsResponse):
        assert answer.results == ()
    else:
        assert answer.error_code == E.INVALID_REQUEST
    assert fetched(broker, "g") == {("t", 0): 1}  # nothing deleted by a refused request


def test_malformed_fields_are_refused_before_a_coordinator_exists_too(broker):
    assert broker.handle(ListGroupsRequest("Stable")).error_code == E.INVALID_REQUEST  # type: ignore
    assert broker.handle(OffsetDeleteRequest("g", (("t", -1),))).error_code == E.INVALID_REQUEST  # type: ignore
    assert OFFSETS not in broker.topics


def test_a_cluster_holds_deletes_until_replicated_and_maps_a_failed_replication():
    """In a cluster DeleteGroups and OffsetDelete wait on the replication gate like offset commits: only answers
    that wrote something wait, and a failed replication replaces each success with the coordinator's error."""
    from idemcore.broker.coordinator_gate import succeeded, with_error

    deleted = DeleteGroupsResponse((("a", 0), ("b", E.NON_EMPTY_GROUP)), 4)
    assert succeeded(deleted) and not succeeded(DeleteGroupsResponse((("b", E.NON_EMPTY_GROUP),)))
    assert with_error(deleted, E.NOT_COORDINATOR) == DeleteGroupsResponse(
        (("a", E.NOT_COORDINATOR), ("b", E.NON_EMPTY_GROUP)), 4)
    offsets = OffsetDeleteResponse(0, (("t", 0, 0), ("t", 1, E.GROUP_SUBSCRIBED_TO_TOPIC)), 5)
    assert succeeded(offsets) and not succeeded(OffsetDeleteResponse(int(E.GROUP_ID_NOT_FOUND)))
    assert with_error(offsets, E.REQUEST_TIMED_OUT) == OffsetDeleteResponse(int(E.REQUEST_TIMED_OUT), (), 5)


def test_an_empty_group_id_is_invalid_with_or_without_a_coordinator(broker):
    for _ in range(2):  # before __consumer_offsets exists, then after
        assert broker.handle(DeleteGroupsRequest(("",))).results == (("", E.INVALID_GROUP_ID),)  # type: ignore
        assert broker.handle(DescribeGroupsRequest(("",))).groups[0].error_code == E.INVALID_GROUP_ID  # type: ignore
        assert broker.handle(OffsetDeleteRequest("", ())).error_code == E.INVALID_GROUP_ID  # type: ignore
        commit(broker, "g", ("t", 0, 1))
