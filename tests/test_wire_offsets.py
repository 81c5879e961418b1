"""The group-offset APIs through kio and back (idemcore.net.wire.offsets), against a real Broker, each answer
decoded by kafka-python 3's codec (see tests/test_wire_transactions.py for the round trip)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema

from idemcore.broker import Broker
from idemcore.net.messages import OffsetFetchResponse
from idemcore.net.wire.frames import make
from idemcore.net.wire.offsets import OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT
from idemcore.net.wire.transactions import ADD_OFFSETS_TO_TXN, END_TXN
from idemcore.protocol.codes import ErrorCode as E
from tests.test_wire_transactions import NODE_ID, Wire, entity, init, versions


@pytest.fixture
def broker(tmp_path):
    with Broker({"t": 2}, data_dir=tmp_path, broker_id=NODE_ID, fsync=False, transaction_state_partitions=4,
                offsets_topic_partitions=4) as broker:
        yield broker


@pytest.fixture
def wire(broker):
    return Wire(broker)


def commit_topics(api, version: int, offsets: dict[tuple[str, int], tuple[int, str | None]]) -> tuple[Any, ...]:
    """The ``topics`` of an OffsetCommit or TxnOffsetCommit request: per topic, its partitions' offsets."""
    prefix = "OffsetCommitRequest" if api is OFFSET_COMMIT else "TxnOffsetCommitRequest"
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (offset, metadata) in offsets.items():
        by_topic.setdefault(topic, []).append(entity(
            api, version, f"{prefix}Partition", partition_index=partition, committed_offset=offset,
            committed_leader_epoch=7, committed_metadata=metadata))
    return tuple(entity(api, version, f"{prefix}Topic", name=name, partitions=tuple(partitions))
                 for name, partitions in by_topic.items())


def codes(topics: Any) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in topics]


def commit(wire: Wire, version: int, offsets: dict[tuple[str, int], tuple[int, str | None]], group: str = "g",
           generation: int = -1, member: str = "") -> Any:
    return wire.call(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=generation,
                     member_id=member, group_instance_id=None, retention_time=-1,
                     topics=commit_topics(OFFSET_COMMIT, version, offsets))


def fetched(topics: Any) -> dict[tuple[str, int], tuple[int, int, str | None, int]]:
    """``(committed offset, leader epoch, metadata, error code)`` per partition of an OffsetFetch answer."""
    return {(t.name, p.partition_index): (p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.metadata,
                                          p.error_code)
            for t in topics for p in t.partitions}


def fetch_topics(version: int, wanted: dict[str, tuple[int, ...]] | None) -> Any:
    if wanted is None:
        return None
    kind = "OffsetFetchRequestTopics" if version >= 8 else "OffsetFetchRequestTopic"
    return tuple(entity(OFFSET_FETCH, version, kind, name=name, partition_indexes=partitions)
                 for name, partitions in wanted.items())


def fetch(wire: Wire, version: int, wanted: dict[str, tuple[int, ...]] | None, group: str = "g",
          require_stable: bool = False) -> tuple[int, dict[tuple[str, int], tuple[int, int, str | None, int]]]:
    """``(group error code, offsets)`` of one group (v1: no group error code, answered 0)."""
    topics = fetch_topics(version, wanted)
    if version >= 8:
        answer = wire.call(OFFSET_FETCH, version, require_stable=require_stable, groups=(entity(
            OFFSET_FETCH, version, "OffsetFetchRequestGroup", group_id=group, member_id=None, member_epoch=-1,
            topics=topics),))
        (one,) = answer.groups
        assert one.group_id == group
        return one.error_code, fetched(one.topics)
    answer = wire.call(OFFSET_FETCH, version, group_id=group, topics=topics, require_stable=require_stable)
    return getattr(answer, "error_code", 0), fetched(answer.topics)


@pytest.mark.parametrize(("api", "key", "low", "high"), [
    (OFFSET_COMMIT, 8, 2, 9), (OFFSET_FETCH, 9, 1, 9), (TXN_OFFSET_COMMIT, 28, 0, 4)])
def test_served_versions_exist_in_kio(api, key, low, high):
    assert (api.key, api.min_version, api.max_version) == (key, low, high)
    for version in range(low, high + 1):
        assert load_request_schema(key, version).__version__ == version
        assert load_response_schema(key, version).__version__ == version


# ---------------------------------------------------------------- OffsetCommit


@pytest.mark.parametrize("version", versions(OFFSET_COMMIT))
def test_offset_commit(wire, version):
    answer = commit(wire, version, {("t", 1): (7, None), ("t", 0): (5, "meta"), ("nope", 0): (1, "")})
    assert codes(answer.topics) == [("t", [(1, E.NONE), (0, E.NONE)]), ("nope", [(0, E.UNKNOWN_TOPIC_OR_PARTITION)])]
    error, offsets = fetch(wire, 7, {"t": (0, 1)})
    # Null metadata is stored as "", and no leader epoch is kept.
    assert (error, offsets) == (E.NONE, {("t", 0): (5, -1, "meta", E.NONE), ("t", 1): (7, -1, "", E.NONE)})


@pytest.mark.parametrize("version", versions(OFFSET_COMMIT))
def test_offset_commit_generation_reaches_the_group(wire, version):
    """A commit naming a generation of a group that has no members: ILLEGAL_GENERATION for each partition."""
    answer = commit(wire, version, {("t", 0): (5, "")}, generation=3, member="member-1")
    assert codes(answer.topics) == [("t", [(0, E.ILLEGAL_GENERATION)])]
    assert fetch(wire, 7, {"t": (0,)})[1] == {("t", 0): (-1, -1, "", E.NONE)}


# ---------------------------------------------------------------- OffsetFetch


@pytest.mark.parametrize("version", versions(OFFSET_FETCH))
def test_offset_fetch(wire, version):
    commit(wire, 8, {("t", 0): (11, "m0")})
    error, offsets = fetch(wire, version, {"t": (1, 0), "other": (3,)})
    assert error == E.NONE
    assert offsets == {("t", 1): (-1, -1, "", E.NONE), ("t", 0): (11, -1, "m0", E.NONE),
                       ("other", 3): (-1, -1, "", E.NONE)}
    if version >= 2:  # null topics: every partition the group has an offset for
        commit(wire, 8, {("t", 1): (4, None)})
        assert fetch(wire, version, None) == (E.NONE, {("t", 0): (11, -1, "m0", E.NONE),
                                                       ("t", 1): (4, -1, "", E.NONE)})


@pytest.mark.parametrize("version", [8, 9])
def test_offset_fetch_several_groups(wire, version):
    """v8+ with several groups: each group answered from its own request to the broker, in the request's order."""
    commit(wire, 8, {("t", 0): (3, "a")}, group="a")
    commit(wire, 8, {("t", 0): (4, "b")}, group="b")
    groups = tuple(entity(OFFSET_FETCH, version, "OffsetFetchRequestGroup", group_id=group, topics=None)
                   for group in ("b", "c", "a"))
    answer = wire.call(OFFSET_FETCH, version, groups=groups, require_stable=True)
    assert [(g.group_id, g.error_code, fetched(g.topics)) for g in answer.groups] == [
        ("b", E.NONE, {("t", 0): (4, -1, "b", E.NONE)}), ("c", E.NONE, {}),
        ("a", E.NONE, {("t", 0): (3, -1, "a", E.NONE)})]
    assert wire.call(OFFSET_FETCH, version, groups=(), require_stable=False).groups == []


@pytest.mark.parametrize("version", versions(OFFSET_FETCH))
def test_offset_fetch_group_error(wire, version):
    """A group-level error: per group (v8+), top level (v2–7), or, before v2, in each partition asked for."""
    topics = fetch_topics(version, {"t": (0, 1)})
    if version >= 8:
        body = make(load_request_schema(9, version), groups=(entity(
            OFFSET_FETCH, version, "OffsetFetchRequestGroup", group_id="g", topics=topics),))
    else:
        body = make(load_request_schema(9, version), group_id="g", topics=topics)
    message, carry = OFFSET_FETCH.to_message(wire.ctx, version, 5, body)
    error = OffsetFetchResponse((), E.NOT_COORDINATOR, 5)
    if version >= 8:  # one message per group
        [message], error = message, (error,)
    assert (message.group_id, message.partitions, message.request_id) == ("g", (("t", 0), ("t", 1)), 5)
    answer = OFFSET_FETCH.to_wire(wire.ctx, version, body, error, carry)
    if version >= 8:
        assert [(g.group_id, g.error_code, g.topics) for g in answer.groups] == [("g", E.NOT_COORDINATOR, ())]
    elif version >= 2:
        assert (answer.error_code, answer.topics) == (E.NOT_COORDINATOR, ())
    else:
        assert [(t.name, [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions])
                for t in answer.topics] == [("t", [(0, -1, E.NOT_COORDINATOR), (1, -1, E.NOT_COORDINATOR)])]


@pytest.mark.parametrize("version", versions(OFFSET_FETCH))
def test_offset_fetch_require_stable(wire, version):
    """A transaction's pending offset: UNSTABLE_OFFSET_COMMIT where the client asked for stable offsets (v7+);
    before v7 there is no such request (nor error), and the last committed offset is answered."""
    commit(wire, 8, {("t", 0): (2, "")})
    producer_id, epoch = init(wire)
    assert wire.call(ADD_OFFSETS_TO_TXN, 0, transactional_id="tx", producer_id=producer_id, producer_epoch=epoch,
                     group_id="g").error_code == E.NONE
    pending = wire.call(TXN_OFFSET_COMMIT, 0, transactional_id="tx", group_id="g", producer_id=producer_id,
                        producer_epoch=epoch, topics=commit_topics(TXN_OFFSET_COMMIT, 0, {("t", 0): (8, "x")}))
    assert codes(pending.topics) == [("t", [(0, E.NONE)])]
    stable = fetch(wire, version, {"t": (0,)}, require_stable=True)
    if version >= 7:
        assert stable == (E.NONE, {("t", 0): (-1, -1, "", E.UNSTABLE_OFFSET_COMMIT)})
    else:
        assert stable == (E.NONE, {("t", 0): (2, -1, "", E.NONE)})
    assert fetch(wire, version, {"t": (0,)}, require_stable=False) == (E.NONE, {("t", 0): (2, -1, "", E.NONE)})


# ---------------------------------------------------------------- TxnOffsetCommit


@pytest.mark.parametrize("version", versions(TXN_OFFSET_COMMIT))
def test_txn_offset_commit(wire, version):
    producer_id, epoch = init(wire)
    assert wire.call(ADD_OFFSETS_TO_TXN, 3, transactional_id="tx", producer_id=producer_id, producer_epoch=epoch,
                     group_id="g").error_code == E.NONE
    answer = wire.call(TXN_OFFSET_COMMIT, version, transactional_id="tx", group_id="g", producer_id=producer_id,
                       producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
                       topics=commit_topics(TXN_OFFSET_COMMIT, version,
                                            {("t", 1): (6, None), ("t", 0): (9, "m"), ("nope", 2): (1, None)}))
    assert codes(answer.topics) == [("t", [(1, E.NONE), (0, E.NONE)]), ("nope", [(2, E.UNKNOWN_TOPIC_OR_PARTITION)])]
    assert wire.call(END_TXN, 3, transactional_id="tx", producer_id=producer_id, producer_epoch=epoch,
                     committed=True).error_code == E.NONE
    assert fetch(wire, 7, {"t": (0, 1)}) == (E.NONE, {("t", 0): (9, -1, "m", E.NONE), ("t", 1): (6, -1, "", E.NONE)})


@pytest.mark.parametrize("version", [v for v in versions(TXN_OFFSET_COMMIT) if v >= 3])
def test_txn_offset_commit_generation_reaches_the_group(wire, version):
    """v3+ (KIP-447): the consumer's generation is checked as OffsetCommit checks it."""
    producer_id, epoch = init(wire)
    wire.call(ADD_OFFSETS_TO_TXN, 3, transactional_id="tx", producer_id=producer_id, producer_epoch=epoch,
              group_id="g")
    answer = wire.call(TXN_OFFSET_COMMIT, version, transactional_id="tx", group_id="g", producer_id=producer_id,
                       producer_epoch=epoch, generation_id=4, member_id="member-1", group_instance_id=None,
                       topics=commit_topics(TXN_OFFSET_COMMIT, version, {("t", 0): (9, None)}))
    assert codes(answer.topics) == [("t", [(0, E.ILLEGAL_GENERATION)])]
