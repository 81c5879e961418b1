"""ZkClient against a real ZooKeeper: Kafka's node shapes, registrations and their expiry, the controller's
election and fencing, a leader's compare-and-set of the ISR."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from idemcore.broker.controller import zk_data
from idemcore.broker.controller.zk_client import (
    BrokerIdInUseError,
    ControllerMovedError,
    TopicExistsError,
    ZkClient,
)
from idemcore.broker.controller.zk_data import LeaderIsr
from idemcore.net.wire.api import topic_id_of

from .controller_fakes import wait_until
from .zookeeper import ZooKeeperServer

SESSION_MS = 2_000


@pytest.fixture(scope="module")
def zookeeper():
    server = ZooKeeperServer(tick_ms=250)  # sessions of 0.5 to 5 s
    yield server
    server.stop()


@pytest.fixture
def hosts(zookeeper, request):
    return f"{zookeeper.hosts}/{request.node.name}"


@pytest.fixture
def clients(hosts):
    made: list[ZkClient] = []

    def make() -> ZkClient:
        client = ZkClient(hosts, session_timeout_ms=SESSION_MS, connection_timeout_ms=10_000)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def raw_get(client: ZkClient, path: str) -> tuple[bytes, object]:
    return client._kazoo.get(path)


def test_registration_is_kafkas_v5_json_and_the_epoch_is_its_czxid(clients):
    zk = clients()
    epoch = zk.register_broker(3, "127.0.0.1", 19092, rack="r1")
    data, stat = raw_get(zk, "/brokers/ids/3")
    fields = json.loads(data)
    assert fields["version"] == 5 and fields["host"] == "127.0.0.1" and fields["port"] == 19092
    assert fields["endpoints"] == ["PLAINTEXT://127.0.0.1:19092"]
    assert fields["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"} and fields["rack"] == "r1"
    assert epoch == stat.czxid and stat.ephemeralOwner == zk.session_id
    other = clients()
    assert other.live_brokers()[3].port == 19092 and other.broker_registrations()[3][1] == epoch


def test_a_closed_session_takes_its_registration_with_it(clients):
    first, watcher = clients(), clients()
    first.register_broker(1, "h", 1)
    assert set(watcher.live_brokers()) == {1}
    first.close()
    assert watcher.live_brokers() == {}


def test_a_live_session_keeps_its_id_and_the_second_registration_gives_up_after_the_session_timeout(clients):
    clients().register_broker(7, "h", 1)
    second = clients()
    started = time.monotonic()
    with pytest.raises(BrokerIdInUseError, match="broker id 7 is registered"):
        second.register_broker(7, "h", 2)
    assert SESSION_MS / 1000 <= time.monotonic() - started < SESSION_MS * 1.5 / 1000 + 3


def test_a_killed_brokers_registration_expires_and_the_restart_waits_for_it(hosts, clients, tmp_path: Path):
    ready = tmp_path / "registered"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from idemcore.broker.controller.zk_client import ZkClient
        zk = ZkClient({hosts!r}, session_timeout_ms={SESSION_MS})
        zk.register_broker(5, "old-host", 1)
        open({str(ready)!r}, "w").close()
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_until(ready.exists, 30, "the child's registration")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        restarted = clients()
        assert restarted.live_brokers()[5].host == "old-host"  # the dead session's node is still there
        started = time.monotonic()
        epoch = restarted.register_broker(5, "new-host", 2)
        waited = time.monotonic() - started
        assert 0.3 < waited < SESSION_MS * 1.5 / 1000 + 2
        assert restarted.live_brokers()[5].host == "new-host"
        assert restarted.broker_registrations()[5][1] == epoch
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_one_controller_wins_and_each_election_bumps_the_epoch(clients):
    a, b = clients(), clients()
    assert a.register_controller(1) == (1, 1)
    assert b.register_controller(2) is None
    assert b.controller_id() == 1
    assert json.loads(raw_get(a, "/controller")[0])["brokerid"] == 1
    assert raw_get(a, "/controller_epoch")[0] == b"1"
    a.close()
    assert b.register_controller(2) == (2, 2)
    assert b.controller_id() == 2


def test_a_deposed_controllers_writes_are_refused(clients):
    a, b, outsider = clients(), clients(), clients()
    _, a_version = a.register_controller(1)
    outsider.create_topic("t", {0: [1, 2]}, {})
    assert a.create_partition_state("t", 0, LeaderIsr(1, 0, (1, 2), 1), a_version) == 0
    outsider._kazoo.delete("/controller")  # A has not noticed yet
    epoch, b_version = b.register_controller(2)
    assert epoch == 2
    with pytest.raises(ControllerMovedError):
        a.set_partition_state("t", 0, LeaderIsr(2, 1, (2,), 1), 0, a_version)
    with pytest.raises(ControllerMovedError):
        a.create_partition_state("t", 1, LeaderIsr(1, 0, (1,), 1), a_version)
    assert outsider.partition_state("t", 0) == (LeaderIsr(1, 0, (1, 2), 1), 0)
    assert outsider.partition_state("t", 1) is None
    assert b.set_partition_state("t", 0, LeaderIsr(2, 1, (2,), 2), 0, b_version) == 1


def test_the_leaders_isr_change_is_a_compare_and_set_and_leaves_a_notification(clients):
    controller, leader = clients(), clients()
    _, version = controller.register_controller(1)
    controller.create_topic("t", {0: [1, 2]}, {})
    controller.create_partition_state("t", 0, LeaderIsr(1, 0, (1, 2), 1), version)
    assert leader.update_leader_isr("t", 0, LeaderIsr(1, 0, (1,), 1), 0) == 1
    assert leader.update_leader_isr("t", 0, LeaderIsr(1, 0, (1, 2), 1), 0) is None  # a stale version
    assert controller.partition_state("t", 0) == (LeaderIsr(1, 0, (1,), 1), 1)
    names = controller.isr_change_notifications()
    assert len(names) == 1 and names[0].startswith("isr_change_")
    data = json.loads(raw_get(controller, f"/isr_change_notification/{names[0]}")[0])
    assert data == {"version": 1, "partitions": [{"topic": "t", "partition": 0}]}
    assert controller.read_isr_changes(names) == {("t", 0)}
    assert controller.isr_change_notifications() == []


def test_topics_are_written_as_kafka_does_and_only_once(clients):
    zk = clients()
    topic_id = zk.create_topic("orders", {0: [1, 2], 1: [2, 1]}, {"cleanup.policy": "compact"})
    assert topic_id == topic_id_of("orders")
    fields = json.loads(raw_get(zk, "/brokers/topics/orders")[0])
    assert fields["version"] == 3 and fields["partitions"] == {"0": [1, 2], "1": [2, 1]}
    assert zk_data.parse_kafka_uuid(fields["topic_id"]) == topic_id and len(fields["topic_id"]) == 22
    assert json.loads(raw_get(zk, "/config/topics/orders")[0]) == {"version": 1,
                                                                   "config": {"cleanup.policy": "compact"}}
    assert zk.topics() == {"orders": {0: [1, 2], 1: [2, 1]}}
    assert zk.topic_config("orders") == {"cleanup.policy": "compact"}
    with pytest.raises(TopicExistsError, match="'orders' already exists"):
        zk.create_topic("orders", {0: [1]}, {})


def test_kafka_written_nodes_decode():
    legacy = b'{"version":4,"host":null,"port":-1,"jmx_port":-1,"timestamp":"1","endpoints":' \
             b'["SSL://h:9093","INTERNAL://h2:9094"],"listener_security_protocol_map":{"SSL":"SSL",' \
             b'"INTERNAL":"PLAINTEXT"},"rack":null}'
    endpoint = zk_data.decode_broker(4, legacy)
    assert (endpoint.host, endpoint.port) == ("h2", 9094)  # the PLAINTEXT listener
    assert zk_data.decode_state("t", 0, b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":5,'
                                b'"isr":[2,1]}') == LeaderIsr(2, 5, (2, 1), 3)
    with pytest.raises(zk_data.ZkDataError, match="not a partition state"):
        zk_data.decode_state("t", 0, b'{"leader":1}')
