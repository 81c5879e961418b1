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


def test_a_cluster_of_a_million_brokers_and_a_session_of_no_time_are_refused_in_one_line(tmp_path):
    """Typos a hostile pass made: ``idemcore cluster --brokers 1000000`` ran for a minute starting nothing, and
    ``zookeeper.session.timeout.ms=0`` was answered 'did not answer within -1 ms'."""
    import subprocess
    import sys

    for argv, expected in ((["cluster", "--brokers", "1000000", "--data-dir", str(tmp_path / "c")],
                            "at most 64 brokers"),
                           (["serve", "--data-dir", str(tmp_path / "s"), "--override",
                             "zookeeper.session.timeout.ms=0"], "zookeeper.session.timeout.ms")):
        done = subprocess.run([sys.executable, "-m", "idemcore.cli", *argv], capture_output=True, text=True,
                              timeout=60)
        # One error line (argparse puts its usage lines before an option's), no traceback.
        *_, last = done.stderr.strip().splitlines()
        assert done.returncode == 2 and expected in last and "Traceback" not in done.stderr
    assert not (tmp_path / "c").exists() and not (tmp_path / "s").exists()
