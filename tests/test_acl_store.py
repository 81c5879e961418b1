"""Durable ACLs: a broker alone keeps them in ``acls.json`` in its log directory (kept across a restart; a damaged
file refused in one line, by the broker and by ``idemcore serve``); brokers of a cluster keep them in ZooKeeper
under Kafka's paths and JSON, and each sees the others' changes through Kafka's change notifications; a broker
without an authorizer answers the ACL requests SECURITY_DISABLED."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from idemcore.broker import Broker
from idemcore.broker.config import BrokerConfig
from idemcore.broker.security.acl_store import ACL_FILE, AclStoreError, ZkAclStore
from idemcore.broker.security.authorizer import AclAuthorizer
from idemcore.broker.security.session import KafkaPrincipal, Session
from idemcore.cli import main
from idemcore.net.acls import (
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DescribeAclsRequest,
)
from idemcore.net.messages import Pending
from idemcore.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    ResourcePattern,
)
from idemcore.protocol.codes import ErrorCode

from .zookeeper import ZooKeeperServer

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
READ_T = AclBinding(ResourcePattern(AclResourceType.TOPIC, "t"),
                    AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
WRITE_PREFIXED = AclBinding(ResourcePattern(AclResourceType.TOPIC, "logs-", PatternType.PREFIXED),
                            AccessControlEntry("User:bob", "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY))
ALICE = Session(KafkaPrincipal("User", "alice"), "10.0.0.9")


def settings_of(directory: Path, **more: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(directory), "authorizer.class.name": ACL_AUTHORIZER,
                                         **more})


def broker_of(settings: BrokerConfig) -> Broker:
    return Broker({}, settings=settings, **settings.broker_kwargs())


def listed(broker: Broker) -> set[AclBinding]:
    answer = broker.handle(DescribeAclsRequest(AclBindingFilter()))
    assert answer.error_code == ErrorCode.NONE, answer
    return set(answer.bindings)


def wait_until(done: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not {what} within {timeout_s} s"
        time.sleep(0.05)


# ---------------------------------------------------------------- alone: the log directory


def test_acls_survive_a_restart(tmp_path):
    with broker_of(settings_of(tmp_path)) as broker:
        answer = broker.handle(CreateAclsRequest((READ_T, WRITE_PREFIXED), request_id=7))
        assert [r.error_code for r in answer.results] == [0, 0] and answer.request_id == 7
        assert broker.authorizer is not None and broker.authorizer.authorize(ALICE, AclOperation.READ,
                                                                             AclResourceType.TOPIC, "t")
    written = json.loads((tmp_path / ACL_FILE).read_text())
    assert written["version"] == 1
    assert {"resourceType": "Topic", "name": "logs-", "patternType": "PREFIXED", "acls": [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}]} \
        in written["resources"]
    with broker_of(settings_of(tmp_path)) as again:
        assert listed(again) == {READ_T, WRITE_PREFIXED}
        assert again.authorizer is not None
        assert again.authorizer.authorize(ALICE, AclOperation.DESCRIBE, AclResourceType.TOPIC, "t")
        assert not again.authorizer.authorize(ALICE, AclOperation.WRITE, AclResourceType.TOPIC, "t")
        again.handle(DeleteAclsRequest((AclBindingFilter(),)))
    with broker_of(settings_of(tmp_path)) as third:
        assert listed(third) == set()


@pytest.mark.parametrize("damage", ["torn", "garbage", "bad operation", "wrong version"])
def test_a_damaged_acl_file_is_refused_in_one_line(tmp_path, capsys, damage):
    with broker_of(settings_of(tmp_path)) as broker:
        broker.handle(CreateAclsRequest((READ_T,)))
    path = tmp_path / ACL_FILE
    text = path.read_text()
    path.write_text({"torn": text[: len(text) // 2], "garbage": "\x00\x01",
                     "bad operation": text.replace('"Read"', '"Reed"'),
                     "wrong version": text.replace('"version": 1', '"version": 9')}[damage])
    with pytest.raises(AclStoreError) as refused:
        broker_of(settings_of(tmp_path))
    message = str(refused.value)
    assert "\n" not in message and str(path) in message and "damaged" in message
    # The same refusal from `idemcore serve`: one line, exit status 2, the directory released (no lock left).
    assert main(["serve", "--data-dir", str(tmp_path), "--port", "0",
                 "--override", f"authorizer.class.name={ACL_AUTHORIZER}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "damaged" in err and ACL_FILE in err
    path.write_text(text)  # repaired: the broker starts with its ACLs
    with broker_of(settings_of(tmp_path)) as broker:
        assert listed(broker) == {READ_T}


def test_without_an_authorizer_the_acl_requests_are_security_disabled(tmp_path):
    with Broker({}, tmp_path) as broker:
        assert broker.authorizer is None
        created = broker.handle(CreateAclsRequest((READ_T, WRITE_PREFIXED)))
        assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED] * 2
        described = broker.handle(DescribeAclsRequest(AclBindingFilter()))
        assert described.error_code == ErrorCode.SECURITY_DISABLED and described.error_message
        deleted = broker.handle(DeleteAclsRequest((AclBindingFilter(),)))
        assert [r.error_code for r in deleted.results] == [ErrorCode.SECURITY_DISABLED]
    assert not (tmp_path / ACL_FILE).exists()


def test_an_explicit_authorizer_is_used_and_left_open(tmp_path):
    mine = AclAuthorizer()
    with Broker({}, tmp_path, authorizer=mine) as broker:
        broker.handle(CreateAclsRequest((READ_T,)))
    assert set(mine.acls(AclBindingFilter())) == {READ_T}


def test_unknown_authorizer_class_is_a_one_line_config_error(tmp_path):
    with pytest.raises(ValueError, match=r"authorizer\.class\.name=com\.example\.Custom") as refused:
        broker_of(settings_of(tmp_path, **{"authorizer.class.name": "com.example.Custom"}))
    assert "\n" not in str(refused.value)
    # the directory was released: a broker opens it at once
    with Broker({}, tmp_path):
        pass


# ---------------------------------------------------------------- a cluster: ZooKeeper


async def on_a_loop(broker: Broker, request: object) -> object:
    answer = broker.handle(request)  # type: ignore[arg-type]
    assert isinstance(answer, Pending)
    done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    answer.add_done_callback(done.set_result)
    return await asyncio.wait_for(done, 20)


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer()
    yield server
    server.stop()


def test_brokers_of_a_cluster_share_acls_through_zookeeper(zookeeper, tmp_path, request):
    from kazoo.client import KazooClient

    hosts = f"{zookeeper.hosts}/{request.node.name}"
    brokers = []
    try:
        for n in range(2):
            settings = BrokerConfig.from_properties({
                "broker.id": str(n), "log.dirs": str(tmp_path / f"b{n}"), "zookeeper.connect": hosts,
                "authorizer.class.name": ACL_AUTHORIZER, "super.users": "User:admin"})
            brokers.append(broker_of(settings))
        first, second = brokers
        assert [r.error_code for r in first.handle(CreateAclsRequest((READ_T, WRITE_PREFIXED))).results] == [0, 0]
        wait_until(lambda: listed(second) == {READ_T, WRITE_PREFIXED}, "seen by the second broker")
        assert second.authorizer is not None
        assert second.authorizer.authorize(ALICE, AclOperation.READ, AclResourceType.TOPIC, "t")
        assert not (tmp_path / "b0" / ACL_FILE).exists()

        # Kafka's nodes and JSON, as kafka-acls.sh --authorizer-properties zookeeper.connect=... reads them.
        kazoo = KazooClient(hosts=hosts)
        kazoo.start(timeout=10)
        try:
            literal = json.loads(kazoo.get("/kafka-acl/Topic/t")[0])
            assert literal == {"version": 1, "acls": [
                {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
            prefixed = json.loads(kazoo.get("/kafka-acl-extended/prefixed/Topic/logs-")[0])
            assert prefixed["acls"] == [
                {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}]
            changes = [kazoo.get(f"/kafka-acl-changes/{c}")[0] for c in kazoo.get_children("/kafka-acl-changes")]
            assert b"Topic:t" in changes
            extended = [json.loads(kazoo.get(f"/kafka-acl-extended-changes/{c}")[0])
                        for c in kazoo.get_children("/kafka-acl-extended-changes")]
            assert {"version": 1, "resourceType": "TOPIC", "name": "logs-", "patternType": "PREFIXED"} in extended
            assert all(c.startswith("acl_changes_") for c in kazoo.get_children("/kafka-acl-changes"))
        finally:
            kazoo.stop()
            kazoo.close()

        # Both change the same resource (compare-and-set on its node): each keeps the other's ACL.
        extra = [AclBinding(READ_T.pattern, AccessControlEntry(f"User:u{n}", "*", AclOperation.WRITE,
                                                                AclPermissionType.ALLOW)) for n in range(2)]
        first.handle(CreateAclsRequest((extra[0],)))
        second.handle(CreateAclsRequest((extra[1],)))
        for broker in brokers:
            wait_until(lambda b=broker: listed(b) == {READ_T, WRITE_PREFIXED, *extra}, "both updates everywhere")
        # A delete on one broker reaches the other.
        deleted = second.handle(DeleteAclsRequest((AclBindingFilter(),)))
        assert {d.binding for d in deleted.results[0].deleted} == {READ_T, WRITE_PREFIXED, *extra}
        wait_until(lambda: listed(first) == set(), "the delete seen by the first broker")
        # Behind the server (on a running loop) a write to ZooKeeper is made off the loop: answered later.
        assert asyncio.run(on_a_loop(first, CreateAclsRequest((READ_T,), request_id=3))) == \
            CreateAclsResponse((AclCreationResult(),), 3)
        assert listed(first) == {READ_T}
    finally:
        for broker in brokers:
            broker.close()
    # A broker started later loads them from ZooKeeper.
    store = ZkAclStore(hosts)
    try:
        assert set(AclAuthorizer(store).acls(AclBindingFilter())) == {READ_T}
    finally:
        store.close()


def test_old_change_notifications_are_deleted_once_followed(zookeeper, request):
    """Kafka keeps a change notification 15 minutes: a broker that follows them later deletes older ones after
    taking them in (here its clock runs 16 minutes ahead)."""
    from kazoo.client import KazooClient

    hosts = f"{zookeeper.hosts}/{request.node.name}"
    writer = AclAuthorizer(ZkAclStore(hosts))
    later = ZkAclStore(hosts, clock=lambda: time.time() + 16 * 60)
    try:
        assert writer.create_acls([READ_T, WRITE_PREFIXED]) == [None, None]
        follower = AclAuthorizer(later)
        wait_until(lambda: set(follower.acls(AclBindingFilter())) == {READ_T, WRITE_PREFIXED}, "loaded")
        kazoo = KazooClient(hosts=hosts)
        kazoo.start(timeout=10)
        try:
            wait_until(lambda: not kazoo.get_children("/kafka-acl-changes")
                       and not kazoo.get_children("/kafka-acl-extended-changes"), "the notifications deleted")
            kazoo.create("/kafka-acl-changes/not-a-notification", b"")  # skipped, never stops the follower
            assert writer.create_acls([AclBinding(ResourcePattern(AclResourceType.GROUP, "g"), READ_T.entry)]) == [None]
            wait_until(lambda: len(follower.acls(AclBindingFilter())) == 3, "a later change followed")
        finally:
            kazoo.stop()
            kazoo.close()
    finally:
        writer.close()
        later.close()
