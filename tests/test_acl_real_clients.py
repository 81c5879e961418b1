"""confluent-kafka's (librdkafka's) AdminClient and kafka-python's KafkaAdminClient create, describe and delete
ACLs against :class:`~idemcore.broker.server.Server` with Kafka's AclAuthorizer on (CreateAcls, DescribeAcls,
DeleteAcls over the wire): with the connection's principal (ANONYMOUS on PLAINTEXT) in ``super.users``; with
``allow.everyone.if.no.acl.found`` and no ACL on the cluster; refused CLUSTER_AUTHORIZATION_FAILED until granted
ALTER on the cluster; bindings Kafka refuses (a cluster ACL not on ``kafka-cluster``) answered one by one; a
broker without an authorizer answering SECURITY_DISABLED."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from idemcore.broker import Broker
from idemcore.broker.config import BrokerConfig
from idemcore.broker.server import Server
from idemcore.protocol.acls import ANY_ACL


def _required(module: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} is missing ({exc}): pip install '{package}' (a test dependency in pyproject.toml)")


_required("confluent_kafka", "confluent-kafka>=2.3")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

TIMEOUT_S = 30
ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)
READ_T = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                    AclPermissionType.ALLOW)
DENY_LOGS = AclBinding(ResourceType.TOPIC, "logs-", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                       AclOperation.WRITE, AclPermissionType.DENY)
GROUP_G = AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:*", "*", AclOperation.ALL,
                     AclPermissionType.ALLOW)


def served(tmp_path: Any, **settings: str) -> Iterator[tuple[Server, AdminClient]]:
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **settings})
    broker = Broker({}, settings=config, **config.broker_kwargs())
    try:
        with Server(broker) as server:
            host, port = server.address
            yield server, AdminClient({"bootstrap.servers": f"{host}:{port}", "socket.timeout.ms": 10_000})
    finally:
        broker.close()


@pytest.fixture
def super_user_admin(tmp_path) -> Iterator[tuple[Server, AdminClient]]:
    yield from served(tmp_path, **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                   "super.users": "User:ANONYMOUS"})


def create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        assert future.result(timeout=TIMEOUT_S) is None


def described(admin: AdminClient, acl_filter: AclBindingFilter = ANY_FILTER) -> set[AclBinding]:
    return set(admin.describe_acls(acl_filter, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S))


def test_create_describe_delete_as_a_super_user(super_user_admin):
    server, admin = super_user_admin
    create(admin, [READ_T, DENY_LOGS, GROUP_G])
    assert described(admin) == {READ_T, DENY_LOGS, GROUP_G}
    topics = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)
    assert described(admin, topics) == {READ_T, DENY_LOGS}
    # MATCH: every ACL that applies to the topic logs-2024 (the prefixed one, not the literal t).
    matching = AclBindingFilter(ResourceType.TOPIC, "logs-2024", ResourcePatternType.MATCH, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert described(admin, matching) == {DENY_LOGS}
    only_bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
                                AclPermissionType.ANY)
    [deleted] = admin.delete_acls([only_bob], request_timeout=TIMEOUT_S).values()
    assert set(deleted.result(timeout=TIMEOUT_S)) == {DENY_LOGS}
    assert described(admin) == {READ_T, GROUP_G}
    assert server.broker.authorizer is not None  # the broker's own view agrees
    assert {b.pattern.name for b in server.broker.authorizer.acls(ANY_ACL)} == {"t", "g"}
    [everything] = admin.delete_acls([ANY_FILTER], request_timeout=TIMEOUT_S).values()
    assert set(everything.result(timeout=TIMEOUT_S)) == {READ_T, GROUP_G}
    assert described(admin) == set()


def test_a_binding_kafka_refuses_is_refused_alone(super_user_admin):
    _, admin = super_user_admin
    bad = AclBinding(ResourceType.BROKER, "other-cluster", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    futures = admin.create_acls([READ_T, bad], request_timeout=TIMEOUT_S)
    assert futures[READ_T].result(timeout=TIMEOUT_S) is None
    with pytest.raises(KafkaException) as refused:
        futures[bad].result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "kafka-cluster" in refused.value.args[0].str()
    assert described(admin) == {READ_T}


def test_allowed_by_allow_everyone_if_no_acl_found(tmp_path):
    standard = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    for _, admin in served(tmp_path, **{"authorizer.class.name": standard, "allow.everyone.if.no.acl.found": "true"}):
        create(admin, [READ_T, GROUP_G])
        assert described(admin) == {READ_T, GROUP_G}
        [deleted] = admin.delete_acls([ANY_FILTER], request_timeout=TIMEOUT_S).values()
        assert set(deleted.result(timeout=TIMEOUT_S)) == {READ_T, GROUP_G}


def test_without_an_authorizer_the_admin_gets_security_disabled(tmp_path):
    kafka_admin = _required("kafka.admin", "kafka-python>=3.0")
    for server, admin in served(tmp_path):
        [future] = admin.create_acls([READ_T], request_timeout=TIMEOUT_S).values()
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
        # librdkafka drops DescribeAcls' top-level error (its result is an empty list); kafka-python reads it.
        host, port = server.address
        client = kafka_admin.KafkaAdminClient(bootstrap_servers=f"{host}:{port}")
        try:
            with pytest.raises(Exception, match="No Authorizer is configured on the broker") as raised:
                client.describe_acls(kafka_admin.ACLFilter(
                    principal=None, host="*", operation=kafka_admin.ACLOperation.ANY,
                    permission_type=kafka_admin.ACLPermissionType.ANY,
                    resource_pattern=kafka_admin.ResourcePatternFilter(kafka_admin.ResourceType.ANY, None,
                                                                       kafka_admin.ACLResourcePatternType.ANY)))
            assert type(raised.value).__name__ == "SecurityDisabledError"
        finally:
            client.close()


def test_the_acl_apis_need_alter_and_describe_on_the_cluster(tmp_path):
    from idemcore.protocol import acls as model

    for server, admin in served(tmp_path, **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}):
        [future] = admin.create_acls([READ_T], request_timeout=TIMEOUT_S).values()
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        [deleting] = admin.delete_acls([ANY_FILTER], request_timeout=TIMEOUT_S).values()
        with pytest.raises(KafkaException) as refused:
            deleting.result(timeout=TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        # An operator grants this client (ANONYMOUS on PLAINTEXT) ALTER on the cluster, in process.
        authorizer = server.broker.authorizer
        assert authorizer is not None
        cluster = model.ResourcePattern(model.AclResourceType.CLUSTER, model.CLUSTER_NAME)
        grant = model.AclBinding(cluster, model.AccessControlEntry("User:ANONYMOUS", "*", model.AclOperation.ALTER,
                                                                   model.AclPermissionType.ALLOW))
        assert authorizer.create_acls([grant]) == [None]
        create(admin, [READ_T])  # ALTER also implies the DESCRIBE that DescribeAcls needs
        assert described(admin) == {READ_T, AclBinding(ResourceType.BROKER, "kafka-cluster",
                                                       ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                                                       AclOperation.ALTER, AclPermissionType.ALLOW)}


def test_kafka_python_creates_describes_and_deletes(super_user_admin):
    k = _required("kafka.admin", "kafka-python>=3.0")
    server, _ = super_user_admin
    host, port = server.address
    client = k.KafkaAdminClient(bootstrap_servers=f"{host}:{port}")
    try:
        topic = k.ResourcePattern(k.ResourceType.TOPIC, "payments", k.ACLResourcePatternType.PREFIXED)
        grant = k.ACL("User:carol", "*", k.ACLOperation.WRITE, k.ACLPermissionType.ALLOW, topic)
        bad = k.ACL("User:carol", "*", k.ACLOperation.ALTER, k.ACLPermissionType.ALLOW,
                    k.ResourcePattern(k.ResourceType.CLUSTER, "elsewhere"))
        result = client.create_acls([grant, bad])
        errors = _required("kafka.errors", "kafka-python>=3.0")
        assert result == {"succeeded": [grant], "failed": [errors.InvalidRequestError]}  # the cluster's name
        any_filter = k.ACLFilter(principal=None, host=None, operation=k.ACLOperation.ANY,
                                 permission_type=k.ACLPermissionType.ANY, resource_pattern=k.ResourcePatternFilter(
                                     k.ResourceType.ANY, None, k.ACLResourcePatternType.ANY))
        acls, error = client.describe_acls(any_filter)
        assert error is errors.NoError
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in acls] == [
            ("User:carol", k.ACLOperation.WRITE, "payments")]
        [(_, deleted, error)] = client.delete_acls([any_filter])
        assert [a.principal for a in deleted] == ["User:carol"] and error is errors.NoError
        assert client.describe_acls(any_filter)[0] == []
    finally:
        client.close()
