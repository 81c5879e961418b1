"""The controller against a real ZooKeeper, with fake channels recording what each broker was told: new topics,
broker deaths and returns, clean and unclean elections, offline partitions, ISR changes, preferred elections,
failover between controllers and a deposed controller's refused writes."""

from __future__ import annotations

import threading

import pytest

from idemcore.broker.controller.config import ControllerConfig
from idemcore.broker.controller.controller import PREFERRED, UNCLEAN, Controller
from idemcore.broker.controller.zk_client import ZkClient
from idemcore.broker.controller.zk_data import LeaderIsr
from idemcore.net.replication import LeaderAndIsrRequest, UpdateMetadataRequest
from idemcore.protocol.codes import ErrorCode

from .controller_fakes import Recorder, wait_until
from .zookeeper import ZooKeeperServer

SESSION_MS = 2_000


@pytest.fixture(scope="module")
def zookeeper():
    server = ZooKeeperServer(tick_ms=250)
    yield server
    server.stop()


class Cluster:
    """Brokers are registrations on their own sessions (closing one is the broker's death); controllers run on
    sessions of their own."""

    def __init__(self, hosts: str) -> None:
        self.hosts = hosts
        self.recorder = Recorder()
        self.sessions: list[ZkClient] = []
        self.brokers: dict[int, ZkClient] = {}
        self.controllers: list[Controller] = []
        self.admin = self.session()

    def session(self) -> ZkClient:
        client = ZkClient(self.hosts, session_timeout_ms=SESSION_MS, connection_timeout_ms=10_000)
        self.sessions.append(client)
        return client

    def start_broker(self, broker_id: int) -> None:
        zk = self.session()
        zk.register_broker(broker_id, "127.0.0.1", 9000 + broker_id)
        self.brokers[broker_id] = zk

    def kill_broker(self, broker_id: int) -> None:
        self.brokers.pop(broker_id).close()

    def controller(self, broker_id: int, **kwargs) -> Controller:
        kwargs.setdefault("auto_leader_rebalance", False)
        controller = Controller(self.session(), broker_id, self.recorder.factory, **kwargs)
        self.controllers.append(controller)
        controller.start()
        return controller

    def state(self, topic: str, partition: int) -> LeaderIsr | None:
        found = self.admin.partition_state(topic, partition)
        return None if found is None else found[0]

    def wait_state(self, topic: str, partition: int, check, what: str) -> LeaderIsr:
        return wait_until(lambda: (s := self.state(topic, partition)) is not None and check(s) and s, what=what)

    def close(self) -> None:
        self.recorder.release.set()
        for controller in self.controllers:
            controller.stop(5)
        for session in self.sessions:
            session.close()


@pytest.fixture
def cluster(zookeeper, request):
    made = Cluster(f"{zookeeper.hosts}/{request.node.name}")
    yield made
    made.close()


def test_a_new_topic_gets_leaders_and_every_broker_hears_of_it(cluster):
    for broker in (1, 2, 3):
        cluster.start_broker(broker)
    controller = cluster.controller(1)
    wait_until(lambda: controller.is_active, what="controller elected")
    cluster.admin.create_topic("t", {0: [2, 3], 1: [3, 1]}, {})
    assert cluster.wait_state("t", 0, lambda s: True, "state of t-0") == LeaderIsr(2, 0, (2, 3), 1)
    assert cluster.wait_state("t", 1, lambda s: True, "state of t-1") == LeaderIsr(3, 0, (3, 1), 1)
    sent = wait_until(lambda: cluster.recorder.leader_and_isr(3, "t", 0), what="LeaderAndIsr to broker 3")
    assert (sent[0].leader, sent[0].leader_epoch, sent[0].isr, sent[0].replicas) == (2, 0, (2, 3), (2, 3))
    assert sent[0].is_new and sent[0].controller_epoch == 1 and sent[0].zk_version == 0
    request = next(r for r in cluster.recorder.requests(3, LeaderAndIsrRequest)
                   if any(p.topic == "t" for p in r.partitions))
    assert request.controller_id == 1 and request.controller_epoch == 1
    assert request.broker_epoch == cluster.admin.broker_registrations()[3][1]
    assert {e.broker_id for e in request.live_leaders} == {2, 3}
    assert not cluster.recorder.leader_and_isr(1, "t", 0)  # broker 1 holds no replica of t-0
    for broker in (1, 2, 3):  # UpdateMetadata to every live broker
        wait_until(lambda b=broker: cluster.recorder.metadata(b, "t", 1), what=f"UpdateMetadata to {broker}")
    update = cluster.recorder.requests(1, UpdateMetadataRequest)[-1]
    assert {(e.broker_id, e.port) for e in update.live_brokers} == {(1, 9001), (2, 9002), (3, 9003)}


def test_a_dead_leader_is_replaced_from_the_isr_and_leaves_every_isr(cluster):
    for broker in (1, 2, 3):
        cluster.start_broker(broker)
    controller = cluster.controller(1)
    cluster.admin.create_topic("t", {0: [2, 3, 1], 1: [3, 2]}, {})
    cluster.wait_state("t", 1, lambda s: True, "t-1 online")
    wait_until(lambda: controller.is_active)
    cluster.kill_broker(2)
    assert cluster.wait_state("t", 0, lambda s: s.leader != 2, "t-0 re-elected") == LeaderIsr(3, 1, (3, 1), 1)
    # Broker 2 only followed t-1: it leaves the ISR, and the leader epoch moves on.
    assert cluster.wait_state("t", 1, lambda s: 2 not in s.isr, "2 out of t-1's ISR") == LeaderIsr(3, 1, (3,), 1)
    told = wait_until(lambda: [p for p in cluster.recorder.leader_and_isr(1, "t", 0) if p.leader_epoch == 1],
                      what="LeaderAndIsr epoch 1 to broker 1")
    assert (told[-1].leader, told[-1].isr) == (3, (3, 1))
    offline = wait_until(lambda: [p for p in cluster.recorder.metadata(3, "t", 0) if p.leader == 3])
    assert offline[-1].offline_replicas == (2,)


def test_a_partition_nobody_may_lead_goes_offline_until_its_isr_returns(cluster):
    for broker in (1, 2):
        cluster.start_broker(broker)
    cluster.controller(9)
    cluster.admin.create_topic("t", {0: [1, 2]}, {})
    cluster.wait_state("t", 0, lambda s: True, "t-0 online")
    cluster.brokers[1].update_leader_isr("t", 0, LeaderIsr(1, 0, (1,), 1), 0)  # 2 fell behind
    cluster.kill_broker(1)
    offline = cluster.wait_state("t", 0, lambda s: s.leader == -1, "t-0 offline")
    assert offline == LeaderIsr(-1, 1, (1,), 1)  # the last ISR member stays, for a clean election later
    told = wait_until(lambda: [p for p in cluster.recorder.leader_and_isr(2, "t", 0) if p.leader == -1])
    assert told[-1].leader_epoch == 1
    cluster.start_broker(1)
    assert cluster.wait_state("t", 0, lambda s: s.leader == 1, "t-0 back") == LeaderIsr(1, 2, (1,), 1)
    wait_until(lambda: [p for p in cluster.recorder.leader_and_isr(1, "t", 0) if p.leader_epoch == 2])


@pytest.mark.parametrize("unclean", [False, True])
def test_an_unclean_election_happens_only_when_allowed(cluster, unclean):
    for broker in (1, 2):
        cluster.start_broker(broker)
    cluster.controller(9, unclean_leader_election=lambda topic: unclean and topic == "t")
    cluster.admin.create_topic("t", {0: [1, 2]}, {})
    cluster.wait_state("t", 0, lambda s: True, "t-0 online")
    cluster.brokers[1].update_leader_isr("t", 0, LeaderIsr(1, 0, (1,), 1), 0)
    cluster.kill_broker(1)
    if unclean:
        assert cluster.wait_state("t", 0, lambda s: s.leader == 2, "unclean") == LeaderIsr(2, 1, (2,), 1)
    else:
        assert cluster.wait_state("t", 0, lambda s: s.leader == -1, "offline") == LeaderIsr(-1, 1, (1,), 1)


def test_the_topic_config_enables_unclean_election_by_default(cluster):
    for broker in (1, 2):
        cluster.start_broker(broker)
    cluster.controller(9)  # no callable: the topic's /config/topics entry decides
    cluster.admin.create_topic("t", {0: [1, 2]}, {"unclean.leader.election.enable": "true"})
    cluster.wait_state("t", 0, lambda s: True, "t-0 online")
    cluster.brokers[1].update_leader_isr("t", 0, LeaderIsr(1, 0, (1,), 1), 0)
    cluster.kill_broker(1)
    assert cluster.wait_state("t", 0, lambda s: s.leader == 2, "unclean") == LeaderIsr(2, 1, (2,), 1)


def test_isr_changes_by_a_leader_reach_every_broker_and_a_stale_leader_is_refused(cluster):
    for broker in (1, 2, 3):
        cluster.start_broker(broker)
    cluster.controller(1)
    cluster.admin.create_topic("t", {0: [1, 2, 3]}, {})
    cluster.wait_state("t", 0, lambda s: True, "t-0 online")
    assert cluster.brokers[1].update_leader_isr("t", 0, LeaderIsr(1, 0, (1, 2), 1), 0) == 1
    for broker in (1, 2, 3):
        wait_until(lambda b=broker: [p for p in cluster.recorder.metadata(b, "t", 0) if p.isr == (1, 2)],
                   what=f"new ISR to {broker}")
    cluster.kill_broker(1)  # the controller elects 2 at epoch 1 (version 2)
    cluster.wait_state("t", 0, lambda s: s.leader == 2, "2 leads")
    stale = ZkClient(cluster.hosts, session_timeout_ms=SESSION_MS)
    cluster.sessions.append(stale)
    assert stale.update_leader_isr("t", 0, LeaderIsr(1, 0, (1,), 1), 1) is None
    assert cluster.state("t", 0) == LeaderIsr(2, 1, (2,), 1)


def test_controller_failover_picks_one_successor_with_the_next_epoch(cluster):
    for broker in (1, 2, 3):
        cluster.start_broker(broker)
    controllers = [cluster.controller(b) for b in (1, 2, 3)]
    first = wait_until(lambda: [c for c in controllers if c.is_active], what="one controller")
    assert len(first) == 1 and first[0].epoch == 1
    cluster.admin.create_topic("t", {0: [1, 2, 3]}, {})
    cluster.wait_state("t", 0, lambda s: True, "t-0 online")
    first[0].zk.close()  # its session ends: /controller goes
    rest = [c for c in controllers if c is not first[0]]
    second = wait_until(lambda: [c for c in rest if c.is_active], what="a successor")
    assert len(second) == 1 and second[0].epoch == 2
    wait_until(lambda: not first[0].is_active, what="the old controller resigned")
    assert all(c.active_controller_id == second[0].broker_id for c in rest)
    # The successor told every live broker what it leads and follows, at its epoch.
    for broker in (1, 2, 3):
        wait_until(lambda b=broker: [r for r in cluster.recorder.requests(b, LeaderAndIsrRequest)
                                     if r.controller_epoch == 2], what=f"epoch-2 LeaderAndIsr to {broker}")


def test_a_deposed_controller_cannot_elect(cluster):
    for broker in (1, 2):
        cluster.start_broker(broker)
    a = cluster.controller(1)
    wait_until(lambda: a.is_active)
    b = cluster.controller(2)
    cluster.admin.create_topic("t", {0: [1, 2]}, {})
    cluster.wait_state("t", 0, lambda s: True, "t-0 online")
    cluster.kill_broker(1)
    cluster.wait_state("t", 0, lambda s: s.leader == 2, "2 leads")
    cluster.start_broker(1)
    cluster.brokers[2].update_leader_isr("t", 0, LeaderIsr(2, 1, (2, 1), 1), 1)  # 1 caught up
    wait_until(lambda: any(p.isr == (2, 1) for p in cluster.recorder.metadata(2, "t", 0)), what="ISR news")
    # Hold A's event thread, queue a preferred election behind it, and depose A meanwhile.
    gate = threading.Event()
    a._enqueue("Blocker", lambda: gate.wait(20))
    results: list = []
    asker = threading.Thread(target=lambda: results.extend(a.elect_leaders([("t", 0)], PREFERRED)))
    asker.start()
    wait_until(lambda: a._events.qsize() >= 1, what="the election queued")
    cluster.admin._kazoo.delete("/controller")
    wait_until(lambda: b.is_active and b.epoch == 2, what="B elected")
    gate.set()
    asker.join(20)
    assert results == [("t", 0, ErrorCode.NOT_CONTROLLER, "broker 1 is no longer the controller")]
    assert cluster.state("t", 0) == LeaderIsr(2, 1, (2, 1), 1)  # A's write was refused
    wait_until(lambda: not a.is_active, what="A resigned")
    assert b.elect_leaders([("t", 0)], PREFERRED) == [("t", 0, ErrorCode.NONE, None)]
    assert cluster.state("t", 0) == LeaderIsr(1, 2, (2, 1), 2)


def test_elect_leaders_answers_per_partition(cluster):
    for broker in (1, 2):
        cluster.start_broker(broker)
    controller = cluster.controller(1)
    cluster.admin.create_topic("t", {0: [1, 2], 1: [2, 1]}, {})
    cluster.wait_state("t", 1, lambda s: True, "online")
    assert controller.elect_leaders([("t", 0), ("u", 0)], PREFERRED) == [
        ("t", 0, ErrorCode.ELECTION_NOT_NEEDED, "the preferred replica 1 leads"),
        ("u", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "partition u-0 is unknown")]
    cluster.brokers[1].update_leader_isr("t", 0, LeaderIsr(1, 0, (1,), 1), 0)
    cluster.kill_broker(1)
    cluster.wait_state("t", 1, lambda s: 1 not in s.isr, "1 gone")
    assert controller.elect_leaders([("t", 1)], PREFERRED)[0][2] == ErrorCode.ELECTION_NOT_NEEDED
    assert controller.elect_leaders([("t", 0)], UNCLEAN) == [("t", 0, ErrorCode.NONE, None)]
    assert cluster.state("t", 0) == LeaderIsr(2, 2, (2,), 1)
    other = cluster.controller(5)
    assert other.elect_leaders(None, PREFERRED) == []  # not the controller: knows no partition
    assert other.elect_leaders([("t", 0)], PREFERRED)[0][2] == ErrorCode.NOT_CONTROLLER


def test_auto_rebalance_moves_leadership_back_to_preferred_replicas(cluster):
    for broker in (1, 2):
        cluster.start_broker(broker)
    config = ControllerConfig(leader_imbalance_check_interval_s=0.3)
    cluster.controller(1, auto_leader_rebalance=True, config=config)
    cluster.admin.create_topic("t", {0: [1, 2], 1: [2, 1]}, {})
    cluster.wait_state("t", 1, lambda s: True, "online")
    cluster.kill_broker(1)
    cluster.wait_state("t", 0, lambda s: s.leader == 2, "2 leads t-0")
    cluster.start_broker(1)
    cluster.brokers[2].update_leader_isr("t", 0, LeaderIsr(2, 1, (2, 1), 1), 1)
    assert cluster.wait_state("t", 0, lambda s: s.leader == 1, "rebalanced").leader_epoch == 2


def test_a_broker_that_never_answers_does_not_hold_up_the_others(cluster):
    cluster.recorder.blocked.add(3)
    for broker in (1, 2, 3):
        cluster.start_broker(broker)
    cluster.controller(1)
    for index in range(3):
        cluster.admin.create_topic(f"t{index}", {0: [1, 2, 3]}, {})
        wait_until(lambda i=index: cluster.recorder.leader_and_isr(2, f"t{i}", 0), what=f"t{index} to broker 2")
    assert cluster.recorder.requests(3) == []


def test_a_stopped_controller_hands_over_at_once(cluster):
    cluster.start_broker(1)
    a = cluster.controller(1)
    wait_until(lambda: a.is_active)
    b = cluster.controller(2)
    wait_until(lambda: b.active_controller_id == 1, what="B sees A")
    a.stop()
    assert not a.is_active
    wait_until(lambda: b.is_active, timeout_s=SESSION_MS / 1000 / 2, what="B elected before A's session could end")
    assert b.epoch == 2
