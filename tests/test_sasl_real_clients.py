"""Real clients authenticating with PLAIN and SCRAM to `idemcore`'s SASL listeners (KIP-152): librdkafka
(confluent-kafka), kafka-python and aiokafka log in, are refused with Kafka's messages, and produce and consume;
requests before authentication close the connection; a SASL_SSL listener serves SCRAM over TLS."""

from __future__ import annotations

import asyncio
import socket
import struct
import uuid
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient

from idemcore.net.wire.client import api_versions_request
from idemcore.net.wire.frames import SIZE, read_response, request_frame
from tests.secured import PLAIN_USERS, serving
from tests.tls_certs import TestCA

MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
SASL = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": MECHANISMS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS}
CAROL = {"carol": "carol-secret"}


def _client(server: Any, mechanism: str, user: str, password: str, **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": server.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, "log_level": 0, **more}


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "dave", "dave-secret"), ("SCRAM-SHA-256", "carol", "carol-secret"),
    ("SCRAM-SHA-512", "carol", "carol-secret")])
def test_librdkafka_authenticates(tmp_path, mechanism, user, password):
    with serving(tmp_path, CAROL, **SASL) as (server, sessions):
        metadata = AdminClient(_client(server, mechanism, user, password)).list_topics(timeout=20)
        assert metadata.brokers
        assert {str(s.principal) for s in sessions} == {f"User:{user}"}
        assert {s.security_protocol for s in sessions} == {"SASL_PLAINTEXT"}
        assert server.stats["authentication_failures"] == 0


@pytest.mark.parametrize(("mechanism", "user", "password", "says"), [
    ("PLAIN", "dave", "wrong", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "carol", "wrong", "Authentication failed during authentication due to invalid credentials "
                                        "with SASL mechanism SCRAM-SHA-256"),
    ("SCRAM-SHA-512", "nobody", "x", "invalid credentials with SASL mechanism SCRAM-SHA-512")])
def test_librdkafka_is_refused_with_kafkas_message(tmp_path, caplog, mechanism, user, password, says):
    caplog.set_level("INFO", logger="idemcore.broker.security.sasl_server")
    with serving(tmp_path, CAROL, **SASL) as (server, sessions):
        errors: list[Any] = []
        client = AdminClient(_client(server, mechanism, user, password, error_cb=errors.append,
                                     **{"reconnect.backoff.max.ms": 1000}))
        with pytest.raises(confluent_kafka.KafkaException):
            client.list_topics(timeout=5)
        client.poll(1)  # error_cb is called from poll
        assert any(says in str(error) for error in errors), errors
        assert sessions == [] and server.stats["authentication_failures"] >= 1
        logged = " ".join(record.getMessage() for record in caplog.records)
        assert "127.0.0.1" in logged and repr(user) in logged and password not in logged


def test_a_mechanism_not_enabled_is_refused(tmp_path):
    settings = {**SASL, "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    settings.pop("listener.name.sasl_plaintext.plain.sasl.jaas.config")
    with serving(tmp_path, CAROL, **settings) as (server, sessions):
        errors: list[Any] = []
        client = AdminClient(_client(server, "SCRAM-SHA-256", "carol", "carol-secret", error_cb=errors.append))
        with pytest.raises(confluent_kafka.KafkaException):
            client.list_topics(timeout=5)
        client.poll(1)
        assert any("SCRAM-SHA-256" in str(error) and "SCRAM-SHA-512" in str(error) for error in errors), errors
        assert sessions == []


def _frame_exchange(address: tuple[str, int], frames: list[bytes]) -> list[bytes | None]:
    """Send each frame and read its answer (None: the connection closed instead)."""
    answers: list[bytes | None] = []
    with socket.create_connection(address, timeout=10) as conn:
        for frame in frames:
            conn.sendall(frame)
            head = conn.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                answers.append(None)
                break
            size = SIZE.unpack(head)[0]
            answers.append(conn.recv(size, socket.MSG_WAITALL))
    return answers


def test_requests_before_authentication_close_the_connection(tmp_path):
    with serving(tmp_path, CAROL, **SASL) as (server, sessions):
        versions = request_frame(18, 3, 1, "raw", api_versions_request(3))
        header = struct.pack(">hhih", 3, 1, 2, -1)  # Metadata v1's header (the body is never read)
        metadata = SIZE.pack(len(header) + 4) + header + struct.pack(">i", -1)
        answers = _frame_exchange(server.address, [versions, metadata])
        # ApiVersions is answered (and lists the SASL APIs); Metadata before SASL closes the connection
        assert answers[0] is not None and answers[1:] == [None]
        _, body = read_response(18, 3, answers[0])
        keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2)
        assert sessions == [] and server.stats["unauthenticated"] == 1


def _round_trip(common: dict[str, Any], count: int = 20) -> list[bytes]:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer({**common, "enable.idempotence": True})
    for n in range(count):
        producer.produce(topic, f"v{n}".encode())
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({**common, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(200):
            if len(got) == count:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_librdkafka_produces_and_consumes_over_scram(tmp_path):
    with serving(tmp_path, CAROL, **SASL) as (server, sessions):
        got = _round_trip(_client(server, "SCRAM-SHA-512", "carol", "carol-secret"))
        assert got == [f"v{n}".encode() for n in range(20)]
        assert {str(s.principal) for s in sessions} == {"User:carol"}


def test_librdkafka_over_sasl_ssl(tmp_path):
    ca = TestCA(tmp_path)
    cert = ca.issue("broker", server=True, CN="localhost")
    settings = {**SASL, "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(cert.keystore),
                "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_USERS}
    settings.pop("listener.name.sasl_plaintext.plain.sasl.jaas.config")
    with serving(tmp_path, CAROL, **settings) as (server, sessions):
        common = {**_client(server, "SCRAM-SHA-256", "carol", "carol-secret"), "security.protocol": "SASL_SSL",
                  "ssl.ca.location": str(ca.path)}
        assert _round_trip(common, 5) == [f"v{n}".encode() for n in range(5)]
        assert {(str(s.principal), s.security_protocol) for s in sessions} == {("User:carol", "SASL_SSL")}


def test_kafka_python_produces_and_consumes_over_scram(tmp_path):
    with serving(tmp_path, CAROL, **SASL) as (server, sessions):
        common = {"bootstrap_servers": server.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                  "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "carol",
                  "sasl_plain_password": "carol-secret"}
        producer = kafka.KafkaProducer(**common)
        for n in range(5):
            producer.send("kp-topic", f"k{n}".encode())
        producer.flush(30)
        producer.close()
        consumer = kafka.KafkaConsumer("kp-topic", auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                                       **common)
        try:
            got = [message.value for _, message in zip(range(5), consumer, strict=False)]
        finally:
            consumer.close()
        assert got == [f"k{n}".encode() for n in range(5)]
        assert {str(s.principal) for s in sessions} == {"User:carol"}


def test_aiokafka_produces_over_plain(tmp_path):
    with serving(tmp_path, CAROL, **SASL) as (server, sessions):
        async def run() -> None:
            producer = aiokafka.AIOKafkaProducer(
                bootstrap_servers=server.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                sasl_plain_username="dave", sasl_plain_password="dave-secret")
            await producer.start()
            try:
                await producer.send_and_wait("aio-topic", b"hello")
            finally:
                await producer.stop()

        asyncio.run(asyncio.wait_for(run(), 60))
        assert {str(s.principal) for s in sessions} == {"User:dave"}
