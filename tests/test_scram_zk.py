"""SCRAM credentials in ZooKeeper as Kafka's ZooKeeper mode keeps them: ``/config/users/<user>`` and a
``/config/changes`` notification that another broker's store follows."""

from __future__ import annotations

import json

import pytest

from idemcore.broker.controller.zk_client import ZkClient
from idemcore.broker.security.scram_credentials import ClusterScramCredentials, ZkScramCredentialStore
from idemcore.net import scram

from .controller_fakes import wait_until
from .zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def zookeeper():
    server = ZooKeeperServer(tick_ms=250)  # scripts/dev test installs Debian's zookeeper: none is a failure
    yield server
    server.stop()


@pytest.fixture
def clients(zookeeper, request):
    made: list[ZkClient] = []

    def make() -> ZkClient:
        client = ZkClient(f"{zookeeper.hosts}/{request.node.name}", session_timeout_ms=4_000,
                          connection_timeout_ms=10_000)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_a_change_on_one_broker_is_seen_by_another(clients) -> None:
    one_zk, two_zk = clients(), clients()
    one, two = ZkScramCredentialStore(one_zk), ZkScramCredentialStore(two_zk)
    try:
        credential = scram.make_credential(scram.SCRAM_SHA_256, "pw", 4096)
        assert one.alter("alice", {"SCRAM-SHA-256": credential}) is None
        assert one.get("alice", "SCRAM-SHA-256") == credential  # at once on the broker that wrote it
        wait_until(lambda: two.get("alice", "SCRAM-SHA-256") == credential, what="the other store reloaded alice")

        data, _ = one_zk._kazoo.get("/config/users/alice")
        assert json.loads(data) == {"version": 1, "config": {"SCRAM-SHA-256": credential.to_text()}}
        changes = sorted(one_zk._kazoo.get_children("/config/changes"))
        assert changes[-1].startswith("config_change_") and len(changes[-1]) == len("config_change_") + 10
        notice, _ = one_zk._kazoo.get(f"/config/changes/{changes[-1]}")
        assert json.loads(notice) == {"version": 2, "entity_path": "users/alice"}

        assert two.alter("alice", {}, frozenset({"SCRAM-SHA-256"})) is None
        wait_until(lambda: one.get("alice", "SCRAM-SHA-256") is None, what="the deletion reached the first store")
        assert one.alter("alice", {}, frozenset({"SCRAM-SHA-256"}))[0] == 91  # type: ignore[index]
    finally:
        one.close()
        two.close()


def test_other_keys_of_the_user_node_are_kept_and_a_new_store_loads_all(clients) -> None:
    zk = clients()
    # A quota set by kafka-configs.sh lives in the same node.
    zk._kazoo.create("/config/users/bob", b'{"version":1,"config":{"producer_byte_rate":"1024"}}', makepath=True)
    store = ZkScramCredentialStore(zk)
    credential = scram.make_credential(scram.SCRAM_SHA_512, "pw", 4096)
    try:
        assert store.alter("bob", {"SCRAM-SHA-512": credential}) is None
        assert store.alter("b c", {"SCRAM-SHA-512": credential}) is None
    finally:
        store.close()
    data, _ = zk._kazoo.get("/config/users/bob")
    assert json.loads(data)["config"] == {"producer_byte_rate": "1024", "SCRAM-SHA-512": credential.to_text()}
    assert zk._kazoo.exists("/config/users/b%20c")
    fresh = ZkScramCredentialStore(clients())
    try:
        assert fresh.users() == {"bob": {"SCRAM-SHA-512": credential}, "b c": {"SCRAM-SHA-512": credential}}
    finally:
        fresh.close()


def test_a_cluster_member_before_its_session_refuses_changes(clients) -> None:
    zk: list[ZkClient] = []
    lazy = ClusterScramCredentials(lambda: zk[0] if zk else None)
    assert lazy.get("alice", "SCRAM-SHA-256") is None and lazy.users() == {}
    with pytest.raises(Exception, match="not joined"):
        lazy.alter("alice", {})
    zk.append(clients())
    try:
        assert lazy.alter("alice", {"SCRAM-SHA-256": scram.make_credential(scram.SCRAM_SHA_256, "x", 4096)}) is None
        assert lazy.get("alice", "SCRAM-SHA-256") is not None
    finally:
        lazy.close()


def test_a_cluster_members_store_is_zookeepers(clients, tmp_path) -> None:
    from types import SimpleNamespace

    from idemcore.broker.security.scram_credentials import FileScramCredentialStore, store_for

    member = SimpleNamespace(zk=None)
    store = store_for(tmp_path, member)  # a cluster member: ZooKeeper, never the log dir's file
    assert isinstance(store, ClusterScramCredentials)
    member.zk = clients()
    try:
        assert store.alter("erin", {"SCRAM-SHA-256": scram.make_credential(scram.SCRAM_SHA_256, "x", 4096)}) is None
        assert member.zk._kazoo.exists("/config/users/erin") and not (tmp_path / "scram-credentials.json").exists()
    finally:
        store.close()
    assert isinstance(store_for(tmp_path, None), FileScramCredentialStore)


def test_old_notifications_are_purged_once_followed(clients, monkeypatch) -> None:
    from idemcore.broker.security import scram_credentials

    monkeypatch.setattr(scram_credentials, "CHANGE_EXPIRATION_MS", -1)  # every notification is old
    writer_zk, follower_zk = clients(), clients()
    follower = ZkScramCredentialStore(follower_zk)
    writer = ZkScramCredentialStore(writer_zk, follow=False)  # only the follower purges: no race between two
    try:
        credential = scram.make_credential(scram.SCRAM_SHA_256, "pw", 4096)
        assert writer.alter("frank", {"SCRAM-SHA-256": credential}) is None
        wait_until(lambda: follower.get("frank", "SCRAM-SHA-256") == credential, what="the follower reloaded frank")
        wait_until(lambda: not follower_zk._kazoo.get_children("/config/changes"), what="the notification purged")
    finally:
        follower.close()
