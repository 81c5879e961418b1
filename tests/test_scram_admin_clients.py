"""confluent-kafka's AdminClient managing SCRAM credentials of an `idemcore serve` (PLAINTEXT), and the credential
it made verifying its password through the server's authenticator."""

from __future__ import annotations

import confluent_kafka.admin as confluent_admin
import pytest
from confluent_kafka import KafkaException

from idemcore.broker.security.sasl_server import SaslAuthenticator
from idemcore.net.sasl_client import sasl_client

ScramCredentialInfo = confluent_admin.ScramCredentialInfo
ScramMechanism = confluent_admin.ScramMechanism
UserScramCredentialDeletion = confluent_admin.UserScramCredentialDeletion
UserScramCredentialUpsertion = confluent_admin.UserScramCredentialUpsertion


def authenticates(store: object, mechanism: str, user: str, password: str) -> bool:
    server = SaslAuthenticator((mechanism,), {}, store, "127.0.0.1")  # type: ignore[arg-type]
    server.handshake(mechanism)
    client = sasl_client(mechanism, user, password)
    token = client.first()
    for _ in range(3):
        step = server.authenticate(token)
        if step.error_code:
            return False
        if step.complete:
            return True
        token = client.respond(step.auth_bytes)
    return False


def test_alter_and_describe_with_confluent_kafka(kafka_server) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": kafka_server.bootstrap})
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("alice", sha256, b"alice-secret"),
        UserScramCredentialUpsertion("alice", sha512, b"alice-secret"),
        UserScramCredentialUpsertion("bob", sha256, b"bob-secret", b"fixed-salt"),
    ], request_timeout=20)
    for future in futures.values():
        assert future.result() is None

    store = kafka_server.broker.scram_credentials
    assert authenticates(store, "SCRAM-SHA-512", "alice", "alice-secret")
    assert authenticates(store, "SCRAM-SHA-256", "bob", "bob-secret")
    assert not authenticates(store, "SCRAM-SHA-256", "bob", "alice-secret")

    everyone = admin.describe_user_scram_credentials(request_timeout=20).result()
    assert sorted(everyone) == ["alice", "bob"]
    infos = sorted((info.mechanism, info.iterations) for info in everyone["alice"].scram_credential_infos)
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]

    named = admin.describe_user_scram_credentials(["bob", "nobody"], request_timeout=20)
    assert [i.iterations for i in named["bob"].result().scram_credential_infos] == [4096]
    with pytest.raises(KafkaException) as missing:
        named["nobody"].result()
    assert missing.value.args[0].code() == 91  # RESOURCE_NOT_FOUND

    futures = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256),
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"x"),
    ], request_timeout=20)
    assert futures["alice"].result() is None
    with pytest.raises(KafkaException) as few:
        futures["carol"].result()
    assert few.value.args[0].code() == 93  # UNACCEPTABLE_CREDENTIAL
    assert store.get("alice", "SCRAM-SHA-256") is None and store.get("alice", "SCRAM-SHA-512") is not None
