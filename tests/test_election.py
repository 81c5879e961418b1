"""Leader elections: Kafka's cases, and a property test against a small model written differently."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from idemcore.broker.controller import election


def test_kafkas_cases():
    # PartitionLeaderElectionAlgorithmsTest: offline election.
    assert election.offline_leader([2, 4], [4], {4}, False) == (4, (4,))
    assert election.offline_leader([2, 4], [2], {4}, False) is None
    assert election.offline_leader([2, 4], [2], {4}, True) == (4, (4,))
    assert election.offline_leader([2, 4], [], {4}, True) == (4, (4,))
    assert election.offline_leader([1, 2, 3], [3, 2, 1], {2, 3}, False) == (2, (3, 2))  # assignment order
    assert election.preferred_leader([2, 4], [2, 4], {2, 4}) == (2, (2, 4))
    assert election.preferred_leader([2, 4], [4], {2, 4}) is None
    assert election.preferred_leader([2, 4], [2, 4], {4}) is None
    assert election.new_partition_leader([3, 1, 2], {1, 2}) == (1, (1, 2))
    assert election.new_partition_leader([3], {1}) is None
    assert election.without_replica(1, (1, 2), 1) == (-1, (2,))
    assert election.without_replica(1, (1, 2), 2) == (1, (1,))
    assert election.without_replica(1, (1,), 1) == (-1, (1,))  # the last member stays


def model_offline(assignment, isr, live, unclean):
    """The rules as sentences: prefer a live in-sync replica, earliest in the assignment; else, if allowed, the
    earliest live replica alone; else nobody."""
    in_sync = [r for r in assignment if r in live and r in isr]
    if in_sync:
        return in_sync[0], tuple(r for r in isr if r in live)
    anyone = [r for r in assignment if r in live]
    return (anyone[0], (anyone[0],)) if unclean and anyone else None


@st.composite
def partitions(draw):
    assignment = draw(st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(assignment), unique=True))
    live = draw(st.sets(st.integers(0, 6)))
    return assignment, isr, live


@given(partitions(), st.booleans())
def test_offline_election_matches_the_model(partition, unclean):
    assignment, isr, live = partition
    result = election.offline_leader(assignment, isr, live, unclean)
    assert result == model_offline(assignment, isr, live, unclean)
    if result is not None:
        leader, new_isr = result
        assert leader in live and leader in new_isr and set(new_isr) <= live
        clean = election.offline_leader(assignment, isr, live, False)
        if clean is not None:  # an allowed unclean election never overrides a clean one
            assert clean == result
        else:
            assert unclean and new_isr == (leader,)


@given(partitions())
def test_preferred_election_moves_only_to_the_first_replica(partition):
    assignment, isr, live = partition
    result = election.preferred_leader(assignment, isr, live)
    expected = assignment[0] in live and assignment[0] in isr
    assert (result is not None) == expected
    if result is not None:
        assert result == (assignment[0], tuple(isr))
