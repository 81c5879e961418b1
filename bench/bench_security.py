"""What security costs a producer, side by side in one run: librdkafka producing 50,000 idempotent records
(acks=all, 100-byte values) to an in-process ``idemcore`` server over PLAINTEXT, over TLS, over SASL_SSL with
SCRAM-SHA-512, and over SASL_SSL with the ACL authorizer on (1,000 ACLs besides the user's). The ratios to
PLAINTEXT are what TLS, SASL and the per-request checks add; SASL itself costs once per connection.

Also: one ``AclAuthorizer.authorize`` call among 100,000 ACLs (the check every request makes per resource).

Run: scripts/dev bench -k security
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from idemcore.broker.security.authorizer import AclAuthorizer
from idemcore.broker.security.session import KafkaPrincipal, Session
from idemcore.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    ResourcePattern,
)
from tests.secured import serving
from tests.tls_certs import TestCA

RECORDS, VALUE = 50_000, b"v" * 100
SCRAM = {"carol": "carol-secret"}


def _settings(tmp: Path, ca: TestCA, kind: str) -> dict[str, str]:
    if kind == "plaintext":
        return {"listeners": "PLAINTEXT://127.0.0.1:0"}
    cert = ca.issue(f"broker-{kind}", server=True, CN="localhost")
    tls = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore)}
    if kind == "ssl":
        return {"listeners": "SSL://127.0.0.1:0", **tls}
    sasl = {"listeners": "SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-512", **tls}
    if kind == "sasl_ssl":
        return sasl
    return {**sasl, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}


def _client(server: Any, ca: TestCA, kind: str) -> dict[str, Any]:
    common = {"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
              "log_level": 0}
    if kind == "plaintext":
        return common
    common.update({"security.protocol": "SSL", "ssl.ca.location": str(ca.path)})
    if kind == "ssl":
        return common
    return {**common, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
            "sasl.password": "carol-secret"}


def _grant(authorizer: AclAuthorizer, topic: str) -> None:
    """carol may create and write ``topic`` idempotently, among 1,000 ACLs of other users on other topics."""
    def allow(resource_type: AclResourceType, name: str, principal: str, operation: AclOperation) -> AclBinding:
        return AclBinding(ResourcePattern(resource_type, name, PatternType.LITERAL),
                          AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW))
    others = [allow(AclResourceType.TOPIC, f"other-{n}", f"User:u{n}", AclOperation.WRITE) for n in range(1_000)]
    authorizer.create_acls([*others, allow(AclResourceType.TOPIC, topic, "User:carol", AclOperation.WRITE),
                            allow(AclResourceType.TOPIC, topic, "User:carol", AclOperation.CREATE),
                            allow(AclResourceType.CLUSTER, "kafka-cluster", "User:carol",
                                  AclOperation.IDEMPOTENT_WRITE)])


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("bench-ca"))


@pytest.mark.parametrize("kind", ["plaintext", "ssl", "sasl_ssl", "sasl_ssl_acls"])
def bench_produce_secured(benchmark, tmp_path, ca, kind):
    with serving(tmp_path, SCRAM if kind.startswith("sasl") else None, **_settings(tmp_path, ca, kind)) as (
            server, _):
        def run() -> None:
            topic = f"t-{uuid.uuid4().hex[:8]}"
            if server.broker.authorizer is not None:
                _grant(server.broker.authorizer, topic)
            producer = Producer(_client(server, ca, kind))
            for _ in range(RECORDS):
                while True:
                    try:
                        producer.produce(topic, VALUE)
                        break
                    except BufferError:
                        producer.poll(0.01)
            assert producer.flush(120) == 0

        benchmark.pedantic(run, rounds=3, iterations=1)
        benchmark.extra_info["records_per_s"] = round(RECORDS / benchmark.stats.stats.median)


@pytest.fixture(scope="module")
def crowded() -> Iterator[AclAuthorizer]:
    authorizer = AclAuthorizer(super_users=(), allow_everyone_if_no_acl_found=False)
    bindings = [AclBinding(ResourcePattern(AclResourceType.TOPIC, f"topic-{n}", PatternType.LITERAL),
                           AccessControlEntry(f"User:u{n % 500}", "*", AclOperation.READ, AclPermissionType.ALLOW))
                for n in range(99_000)]
    bindings += [AclBinding(ResourcePattern(AclResourceType.TOPIC, f"prefix-{n}-", PatternType.PREFIXED),
                            AccessControlEntry("User:*", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW))
                 for n in range(1_000)]
    authorizer.create_acls(bindings)
    yield authorizer
    authorizer.close()


def bench_authorize_among_100k_acls(benchmark, crowded):
    session = Session(KafkaPrincipal("User", "u7"), "10.0.0.1")
    allowed = benchmark(crowded.authorize, session, AclOperation.READ, AclResourceType.TOPIC, "topic-507")
    assert allowed
