"""A broker with SASL and ACLs as a user runs one: the admin (a super user) makes a SCRAM user and grants it ACLs
with `idemcore users` and `idemcore acls` over the SASL listener (``--command-config``), and librdkafka, logged in
as that user, may do what the ACLs allow and is refused the rest with Kafka's errors."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from idemcore.cli import main
from idemcore.net.broker_channel import BlockingBrokerChannel
from idemcore.net.client_security import ClientSecurity
from idemcore.net.messages import MetadataRequest
from tests.secured import PLAIN_USERS, serving

SECURED = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
           "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS,
           "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}


def _properties(path: Path, mechanism: str, user: str, password: str) -> str:
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                    f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="{user}" password="{password}";\n')
    return str(path)


def _carol(server: Any, **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": server.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "carol-secret",
            "log_level": 0, **more}


def test_the_admin_makes_a_user_and_grants_it_a_topic(tmp_path, capsys):
    with serving(tmp_path, **SECURED) as (server, sessions):
        admin = _properties(tmp_path / "admin.properties", "PLAIN", "admin", "admin-secret")
        password = tmp_path / "carol.password"
        password.write_text("carol-secret\n")
        assert main(["users", "set", "carol", "--mechanism", "SCRAM-SHA-256", "--password-file", str(password),
                     "--bootstrap-server", server.bootstrap, "--command-config", admin]) == 0
        allowed, denied = f"ok-{uuid.uuid4().hex[:6]}", f"no-{uuid.uuid4().hex[:6]}"
        boss = AdminClient({**_carol(server), "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                            "sasl.password": "admin-secret"})
        for topic in (allowed, denied):  # the admin makes both topics
            assert boss.create_topics([confluent_kafka.admin.NewTopic(topic, 1)])[topic].result(30) is None
        for operation in ("Write", "Describe"):
            assert main(["acls", "--bootstrap-server", server.bootstrap, "--command-config", admin, "--add",
                         "--allow-principal", "User:carol", "--operation", operation, "--topic", allowed]) == 0
        assert main(["acls", "--bootstrap-server", server.bootstrap, "--command-config", admin, "--add",
                     "--allow-principal", "User:carol", "--operation", "IdempotentWrite", "--cluster"]) == 0
        capsys.readouterr()

        # carol sees only the topic she may describe, and may write it
        metadata = AdminClient(_carol(server)).list_topics(timeout=20)
        assert allowed in metadata.topics and denied not in metadata.topics
        outcomes: dict[str, Any] = {}
        producer = confluent_kafka.Producer({**_carol(server), "enable.idempotence": True,
                                             "message.timeout.ms": 5000})
        for topic in (allowed, denied):
            producer.produce(topic, b"x", on_delivery=lambda error, message: outcomes.__setitem__(
                message.topic(), error))
        producer.flush(20)
        assert outcomes[allowed] is None
        assert outcomes[denied] is not None and outcomes[denied].code() == \
            confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
        # reading needs READ on the topic and the group: not granted
        consumer = confluent_kafka.Consumer({**_carol(server), "group.id": "carol-group",
                                             "auto.offset.reset": "earliest"})
        consumer.subscribe([allowed])
        codes = set()
        for _ in range(20):
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                codes.add(message.error().code())
                break
        consumer.close()
        assert codes & {confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED,
                        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}
        assert {str(s.principal) for s in sessions} == {"User:admin", "User:carol"}


def test_a_client_with_a_wrong_password_gets_one_line(tmp_path, capsys):
    with serving(tmp_path, **SECURED) as (server, _):
        wrong = _properties(tmp_path / "wrong.properties", "PLAIN", "admin", "guess")
        status = main(["acls", "--bootstrap-server", server.bootstrap, "--command-config", wrong, "--list"])
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(err) == 1
        assert "SASL authentication as PLAIN failed" in err[0] and "guess" not in err[0]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_broker_channels_authenticate(tmp_path, mechanism):
    users = {"admin": "admin-secret"}
    with serving(tmp_path, users, **SECURED) as (server, sessions):
        host, port = server.address
        channel = BlockingBrokerChannel(host, port, "test", security=ClientSecurity(
            "SASL_PLAINTEXT", None, mechanism, "admin", "admin-secret"))
        try:
            assert channel.call(MetadataRequest((), False)).brokers
        finally:
            channel.close()
        assert {str(s.principal) for s in sessions} == {"User:admin"}
        refused = BlockingBrokerChannel(host, port, "test", security=ClientSecurity(
            "SASL_PLAINTEXT", None, mechanism, "admin", "nope"))
        with pytest.raises(ConnectionError, match=f"SASL authentication as {mechanism} failed"):
            refused.call(MetadataRequest((), False))


def test_the_readmes_security_settings_serve_as_it_says(tmp_path):
    """The README's server.properties of its Security section, with a real key store and free ports: the first
    SCRAM user made into the log directory before the start (as the README shows) logs in over SASL_SSL, and
    PLAIN's admin too."""
    from tests.tls_certs import TestCA

    readme = (Path(__file__).parent.parent / "docs" / "security.md").read_text()  # the README's Security section
    section = readme[readme.index("## Security"):]
    block = section[section.index("    listeners="):section.index("\n\n- **Listeners**")]
    text = "\n".join(line[4:] for line in block.splitlines())
    from idemcore.net.properties import read_properties

    (tmp_path / "server.properties").write_text(text)
    settings = read_properties(tmp_path / "server.properties")
    ca = TestCA(tmp_path)
    cert = ca.issue("broker", server=True, CN="localhost")
    settings.update({"ssl.keystore.location": str(cert.keystore), "listeners": "SASL_SSL://127.0.0.1:0,"
                     "INTERNAL://127.0.0.1:0", "advertised.listeners": "SASL_SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0"})
    logs = tmp_path / "logs"
    logs.mkdir()
    password = tmp_path / "carol.password"
    password.write_text("carol-secret\n")
    assert main(["users", "set", "carol", "--mechanism", "SCRAM-SHA-512", "--password-file", str(password),
                 "--log-dir", str(logs)]) == 0
    with serving(tmp_path, **settings) as (server, sessions):
        secure = {"bootstrap.servers": server.bootstrap_of("SASL_SSL"), "security.protocol": "SASL_SSL",
                  "ssl.ca.location": str(ca.path), "log_level": 0}
        for mechanism, user, secret in (("SCRAM-SHA-512", "carol", "carol-secret"), ("PLAIN", "admin",
                                                                                    "admin-secret")):
            client = AdminClient({**secure, "sasl.mechanism": mechanism, "sasl.username": user,
                                  "sasl.password": secret})
            assert client.list_topics(timeout=20).brokers
        assert {str(s.principal) for s in sessions} == {"User:carol", "User:admin"}


def test_a_client_without_the_listeners_sasl_is_told_what_to_give(tmp_path, capsys):
    with serving(tmp_path, **SECURED) as (server, sessions):
        status = main(["acls", "--bootstrap-server", server.bootstrap, "--list"])
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(err) == 1 and "if its listener requires SASL" in err[0]
        assert sessions == [] and server.stats["unauthenticated"] == 1
