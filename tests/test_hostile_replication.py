"""A hostile user's checks of a real cluster (ZooKeeper and three ``idemcore serve`` processes, one per module)."""

from __future__ import annotations

import socket
import struct

from idemcore.broker.cluster_member import _assignment_problem
from idemcore.cluster import LocalCluster
from tests.cluster_harness import cluster_fixture

cluster = cluster_fixture(3)

_INIT_PRODUCER_ID = 22


def init_producer_id(port: int) -> tuple[int, int, int]:
    """(error code, producer id, epoch) as the broker on ``port`` answers InitProducerId v0 for an idempotent
    producer (no transactional id)."""
    client_id = b"hostile"
    body = struct.pack(">hhih", _INIT_PRODUCER_ID, 0, 7, len(client_id)) + client_id + struct.pack(">hi", -1, 60_000)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = conn.recv(4096)
            assert chunk, "the broker closed the connection mid-answer"
            data += chunk
        data = data[4:]
    correlation_id, _throttle, error, producer_id, epoch = struct.unpack(">iihqh", data)
    assert correlation_id == 7
    return error, producer_id, epoch


def test_every_broker_hands_out_its_own_producer_ids(cluster: LocalCluster) -> None:
    # Each broker of a cluster answers InitProducerId: with a store of its own per broker, all three handed out
    # id 0, and a second idempotent producer's first batch to a partition was answered as a duplicate of the
    # first producer's (acknowledged, never written).
    answers = [init_producer_id(cluster.broker(n).port) for n in cluster.broker_ids for _ in range(2)]
    assert all(error == 0 for error, _, _ in answers), answers
    ids = [producer_id for _, producer_id, _ in answers]
    assert len(set(ids)) == len(ids), f"producer ids handed out twice: {ids}"


def test_an_empty_replica_list_is_named_as_such() -> None:
    # It read "partition 0 has 0 replicas, partition 0 has 0".
    assert _assignment_problem({0: ()}, [0, 1, 2]) == "partition 0 has no replicas"
    assert _assignment_problem({0: (0, 1), 1: ()}, [0, 1, 2]) == "partition 1 has no replicas"
