"""Replica placement: Kafka's AdminUtils golden cases and its invariants."""

from __future__ import annotations

import random

import pytest

from idemcore.broker.controller.assignment import AssignmentError, assign_replicas
from idemcore.protocol.codes import ErrorCode


def test_kafkas_golden_assignment():
    # AdminZkClientTest.testReplicaAssignment: brokers 0-4, 10 partitions, 3 replicas, fixed start index 0.
    assert assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_ids_are_sorted_first_and_start_partition_continues_the_pattern():
    assert assign_replicas([4, 2, 0, 3, 1], 10, 3, start_index=0) == assign_replicas([0, 1, 2, 3, 4], 10, 3,
                                                                                     start_index=0)
    # Adding partitions (Kafka's addPartitions): first replicas keep going round from the start index; the shift
    # grows once per round crossed from the first new partition (at 10: shift 2 -> 3, so the followers of the
    # broker at index i are at i + 1 + (3 mod 4) and i + 1 + (4 mod 4)).
    assert assign_replicas([0, 1, 2, 3, 4], 5, 3, start_index=2, start_partition_id=10) == {
        10: [2, 1, 3], 11: [3, 2, 4], 12: [4, 3, 0], 13: [0, 4, 1], 14: [1, 0, 2]}


@pytest.mark.parametrize(("partitions", "rf", "code"), [(10, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
                                                        (10, 6, ErrorCode.INVALID_REPLICATION_FACTOR),
                                                        (0, 3, ErrorCode.INVALID_PARTITIONS)])
def test_refusals_name_the_values(partitions, rf, code):
    with pytest.raises(AssignmentError) as caught:
        assign_replicas([0, 1, 2, 3, 4], partitions, rf)
    assert caught.value.error_code == code
    assert "\n" not in str(caught.value)
    if rf == 6:
        assert str(caught.value) == "replication factor: 6 larger than available brokers: 5"


def test_random_starts_keep_replicas_distinct_and_leaders_even():
    rng = random.Random(7)
    for _ in range(200):
        brokers = rng.sample(range(100), rng.randint(1, 8))
        rf = rng.randint(1, len(brokers))
        count = rng.randint(1, 40)
        assignment = assign_replicas(brokers, count, rf, rng=rng)
        assert sorted(assignment) == list(range(count))
        for replicas in assignment.values():
            assert len(replicas) == rf == len(set(replicas)) and set(replicas) <= set(brokers)
        leaders = [replicas[0] for replicas in assignment.values()]
        counts = [leaders.count(b) for b in brokers]
        assert max(counts) - min(counts) <= 1  # first replicas go round the brokers
