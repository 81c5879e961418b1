"""The controller when a ZooKeeper write fails in the middle of an election (a connection loss during the
commit, whose outcome is then unknown): the election is done again a moment later, and the brokers are told of
every state that reached ZooKeeper, the ones written before the failure and a write whose answer was lost.
Kafka's controller loses neither (``ZooKeeperClient`` retries through a connection loss, and
``PartitionStateMachine.electLeaderForPartitions`` retries the partitions whose write failed). Also: a controller
whose session was lost handles no queued event as controller (Kafka clears its queue for ``Expire``), and one
whose failover failed gives ``/controller`` back and is elected again (Kafka's ``triggerControllerMove``)."""

from __future__ import annotations

import threading

import pytest

from idemcore.broker.controller.controller import Controller
from idemcore.broker.controller.zk_client import ZkError
from idemcore.broker.controller.zk_data import LeaderIsr

from .controller_fakes import wait_until
from .test_controller import Cluster
from .zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def zookeeper():
    server = ZooKeeperServer(tick_ms=250)
    yield server
    server.stop()


@pytest.fixture
def cluster(zookeeper, request):
    made = Cluster(f"{zookeeper.hosts}/{request.node.name}")
    yield made
    made.close()


class FailingWrites:
    """Makes the controller's ``nth`` next partition-state write fail with a ZkError, as a connection loss during
    the commit does: before the write (``lands=False``) or after it reached ZooKeeper (``lands=True``)."""

    def __init__(self, controller: Controller, nth: int = 1, lands: bool = False) -> None:
        self.lock = threading.Lock()
        self.left = nth
        self.lands = lands
        self.failed = 0
        self._write = controller.zk.set_partition_state
        controller.zk.set_partition_state = self.set_partition_state  # type: ignore[method-assign]

    def set_partition_state(self, topic: str, partition: int, *args, **kwargs) -> int | None:
        with self.lock:
            self.left -= 1
            fail = self.left == 0
        if not fail:
            return self._write(topic, partition, *args, **kwargs)
        if self.lands:
            self._write(topic, partition, *args, **kwargs)
        self.failed += 1
        raise ZkError(f"ZooKeeper: transaction failed: ConnectionLoss (injected, writing {topic}-{partition})")


def told(cluster: Cluster, broker: int, topic: str, partition: int, leader: int, epoch: int) -> list:
    return [p for p in cluster.recorder.leader_and_isr(broker, topic, partition)
            if (p.leader, p.leader_epoch) == (leader, epoch)]


def start(cluster: Cluster, assignment: dict[int, list[int]]) -> Controller:
    for broker in (1, 2, 3):
        cluster.start_broker(broker)
    controller = cluster.controller(9)
    wait_until(lambda: controller.is_active, what="controller elected")
    cluster.admin.create_topic("t", assignment, {})
    for partition in assignment:
        cluster.wait_state("t", partition, lambda s: s.leader == 1, f"t-{partition} led by 1")
    return controller


def test_an_election_whose_write_failed_is_done_again_and_the_ones_before_it_are_announced(cluster):
    controller = start(cluster, {0: [1, 2], 1: [1, 3]})
    fault = FailingWrites(controller, nth=2)  # t-0's election is written, t-1's fails
    cluster.kill_broker(1)
    assert cluster.wait_state("t", 0, lambda s: s.leader != 1, "t-0 re-elected") == LeaderIsr(2, 1, (2,), 1)
    assert cluster.wait_state("t", 1, lambda s: s.leader != 1, "t-1 re-elected") == LeaderIsr(3, 1, (3,), 1)
    assert fault.failed == 1
    wait_until(lambda: told(cluster, 2, "t", 0, 2, 1), what="LeaderAndIsr t-0 leader 2 to broker 2")
    wait_until(lambda: told(cluster, 3, "t", 1, 3, 1), what="LeaderAndIsr t-1 leader 3 to broker 3")
    for broker in (2, 3):
        wait_until(lambda b=broker: [p for p in cluster.recorder.metadata(b, "t", 1) if p.leader == 3],
                   what=f"UpdateMetadata t-1 leader 3 to broker {broker}")


def test_an_election_written_though_its_answer_was_lost_is_announced_once(cluster):
    controller = start(cluster, {0: [1, 2, 3]})
    fault = FailingWrites(controller, nth=1, lands=True)
    cluster.kill_broker(1)
    assert cluster.wait_state("t", 0, lambda s: s.leader != 1, "t-0 re-elected") == LeaderIsr(2, 1, (2, 3), 1)
    for broker in (2, 3):
        wait_until(lambda b=broker: told(cluster, b, "t", 0, 2, 1), what=f"LeaderAndIsr t-0 leader 2 to {broker}")
    assert fault.failed == 1
    assert cluster.state("t", 0) == LeaderIsr(2, 1, (2, 3), 1)  # elected once: no second election on top


def expire_session(client) -> None:
    """End ``client``'s ZooKeeper session from the server's side, as a session timeout does: another connection
    takes the session over and closes it."""
    from kazoo.client import KazooClient

    thief = KazooClient(hosts=client.hosts, client_id=client._kazoo.client_id)
    thief.start(timeout=10)
    thief.stop()
    thief.close()


def test_a_controller_whose_session_was_lost_handles_no_queued_event_as_controller(cluster):
    controller = start(cluster, {0: [1, 2, 3]})
    old_session = controller.zk.session_id
    gate = threading.Event()
    controller._enqueue("Blocker", lambda: gate.wait(20))
    cluster.kill_broker(1)
    wait_until(lambda: controller._events.qsize() >= 1, what="the broker change queued")
    expire_session(controller.zk)
    wait_until(lambda: controller.zk.session_id not in (0, old_session), what="a new session")
    gate.set()
    # The broker change queued before the loss is not handled under the lost session's election: the
    # controller resigns first, is elected again (epoch 2), and elects from there.
    state = cluster.wait_state("t", 0, lambda s: s.leader != 1, "t-0 re-elected")
    assert state == LeaderIsr(2, 1, (2, 3), 2)
    wait_until(lambda: controller.is_active and controller.epoch == 2, what="elected again, once")
    wait_until(lambda: told(cluster, 3, "t", 0, 2, 1), what="LeaderAndIsr t-0 leader 2 to broker 3")


def test_a_failover_that_zookeeper_failed_gives_the_office_back_and_is_done_again(cluster):
    for broker in (1, 2, 3):
        cluster.start_broker(broker)
    cluster.admin.create_topic("t", {0: [1, 2, 3]}, {})  # no controller yet: no state
    controller = Controller(cluster.session(), 9, cluster.recorder.factory, auto_leader_rebalance=False)
    cluster.controllers.append(controller)
    read = controller.zk.partition_state
    failed: list[tuple[str, int]] = []

    def partition_state(topic: str, partition: int):
        if not failed:  # the first read, while the failover loads the context
            failed.append((topic, partition))
            raise ZkError("ZooKeeper: ConnectionLoss (injected)")
        return read(topic, partition)

    controller.zk.partition_state = partition_state  # type: ignore[method-assign]
    controller.start()
    assert cluster.wait_state("t", 0, lambda s: True, "t-0 online") == LeaderIsr(1, 0, (1, 2, 3), 2)
    assert failed == [("t", 0)]
    wait_until(lambda: controller.is_active and controller.epoch == 2, what="elected again, at epoch 2")
    sent = wait_until(lambda: told(cluster, 2, "t", 0, 1, 0), what="LeaderAndIsr t-0 to broker 2")
    assert sent[-1].controller_epoch == 2
