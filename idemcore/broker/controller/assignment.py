"""Where the replicas of a new topic go: Kafka's rack-unaware ``AdminUtils.assignReplicasToBrokers``.

Brokers are taken in id order. Partition p's first replica is broker ``(p + start_index) mod n``; its other
replicas follow at a distance ``1 + (shift + j) mod (n - 1)`` from the first, and ``shift`` grows by one each
time the partitions have gone round the brokers once, so followers spread over the cluster and no two replicas
of a partition share a broker. Kafka picks ``start_index`` and the initial shift at random (both the same number
when fixed); so do we, unless the caller fixes them.
"""

from __future__ import annotations

import random

from idemcore.errors import IdemcoreError
from idemcore.protocol.codes import ErrorCode


class AssignmentError(IdemcoreError):
    """A topic's replicas cannot be placed; ``error_code`` is Kafka's answer for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int, *,
                    start_index: int | None = None, start_partition_id: int = 0,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """Replicas for partitions ``start_partition_id .. + partitions - 1`` over ``brokers`` (the live ones).

    ``start_index``: the broker index of partition 0's first replica and the initial shift (Kafka's
    ``fixedStartIndex``); None: random, from ``rng``."""
    if partitions <= 0:
        raise AssignmentError(ErrorCode.INVALID_PARTITIONS,
                              f"number of partitions must be larger than 0, got {partitions}")
    if replication_factor <= 0:
        raise AssignmentError(ErrorCode.INVALID_REPLICATION_FACTOR,
                              f"replication factor must be larger than 0, got {replication_factor}")
    if replication_factor > len(brokers):
        raise AssignmentError(ErrorCode.INVALID_REPLICATION_FACTOR,
                              f"replication factor: {replication_factor} larger than available brokers: "
                              f"{len(brokers)}")
    ordered = sorted(brokers)
    count = len(ordered)
    if len(set(ordered)) != count:
        raise AssignmentError(ErrorCode.INVALID_REQUEST, f"broker ids repeat in {brokers}")
    chooser = rng or random.Random()
    first_index = start_index if start_index is not None and start_index >= 0 else chooser.randrange(count)
    shift = start_index if start_index is not None and start_index >= 0 else chooser.randrange(count)
    assignment: dict[int, list[int]] = {}
    partition = max(0, start_partition_id)
    for _ in range(partitions):
        if partition > 0 and partition % count == 0:
            shift += 1  # one more round of the brokers: move the followers one step further from the leader
        first = (partition + first_index) % count
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            distance = 1 + (shift + j) % (count - 1)
            replicas.append(ordered[(first + distance) % count])
        assignment[partition] = replicas
        partition += 1
    return assignment
