"""idemcore's own Producer and Consumer over secured listeners (TcpTransport's TLS and SASL): SCRAM over SASL_SSL,
mutual TLS over SSL; a refusal (wrong password, untrusted broker certificate, no client certificate) is one clear
error, soon, with no endless reconnects; a broker that cuts the connection mid-handshake is a lost connection,
retried."""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from idemcore.client import Consumer, Producer
from idemcore.client.consumer import ConsumerRecord
from idemcore.net.client_security import ClientSecurity
from idemcore.net.tcp import AuthenticationError, TcpTransport, TransportTimeoutError, connection
from tests.secured import PLAIN_USERS, serving
from tests.tls_certs import Issued, TestCA

CAROL = {"carol": "carol-secret"}


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path)


@pytest.fixture
def broker_cert(ca: TestCA) -> Issued:
    return ca.issue("broker", server=True, O="idemcore tests", CN="localhost")


def _sasl_ssl(ca: TestCA, cert: Issued) -> dict[str, str]:
    return {"listeners": "SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore)}


def _mutual_tls(ca: TestCA, cert: Issued) -> dict[str, str]:
    return {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.path), "ssl.client.auth": "required"}


def _scram(ca: TestCA, password: str = "carol-secret", mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "sasl.username": "carol",
            "sasl.password": password, "ssl.ca.location": str(ca.path)}


def _topic(bootstrap: str, security: Any, partitions: int = 3) -> str:
    name = f"topic-{uuid.uuid4().hex[:8]}"
    with TcpTransport(bootstrap, security=security) as transport:
        assert transport.create_topics({name: partitions}) == {name: 0}
    return name


def _read(consumer: Consumer, count: int, timeout_s: float = 20.0) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(timeout_ms=200)
    return records


def _produce_and_consume_in_a_group(bootstrap: str, security: Any) -> None:
    """An idempotent and a transactional producer write; a consumer in a group reads it all and commits."""
    topic = _topic(bootstrap, security)
    idempotent = Producer(bootstrap, security=security, linger_ms=1)
    futures = [idempotent.send(topic, b"i-%d" % i, key=b"k%d" % (i % 5)) for i in range(200)]
    idempotent.flush()
    assert all(f.result().offset >= 0 for f in futures) and idempotent.metrics["failed_batches"] == 0
    idempotent.close()
    transactional = Producer(bootstrap, security=security, transactional_id=f"txn-{uuid.uuid4().hex[:6]}",
                             linger_ms=1)
    transactional.init_transactions()
    transactional.begin_transaction()
    for i in range(30):
        transactional.send(topic, b"t-%d" % i, partition=i % 3)
    transactional.commit_transaction()
    transactional.close()
    expected = {b"i-%d" % i for i in range(200)} | {b"t-%d" % i for i in range(30)}
    consumer = Consumer(bootstrap, group_id=f"group-{uuid.uuid4().hex[:6]}", security=security,
                        enable_auto_commit=False)
    try:
        consumer.subscribe([topic])
        records = _read(consumer, len(expected))
        assert {r.value for r in records} == expected and len(records) == len(expected)
        consumer.commit()
        positions = {(topic, p): consumer.position(topic, p) for p in range(3)}
        assert consumer.committed(list(positions)) == positions
    finally:
        consumer.close()


def test_producers_and_a_group_consumer_over_sasl_ssl_with_scram(tmp_path: Path, ca: TestCA,
                                                                  broker_cert: Issued) -> None:
    with serving(tmp_path, CAROL, **_sasl_ssl(ca, broker_cert)) as (server, sessions):
        _produce_and_consume_in_a_group(server.bootstrap, _scram(ca))
        assert {(str(s.principal), s.security_protocol) for s in sessions} == {("User:carol", "SASL_SSL")}
        # a ClientSecurity works as the properties do, and SCRAM-SHA-512 too
        security = ClientSecurity.from_properties(_scram(ca, mechanism="SCRAM-SHA-512"))
        with TcpTransport(server.bootstrap, security=security) as transport:
            assert transport.partition_count(_topic(server.bootstrap, security, 2)) == 2


def test_producers_and_a_group_consumer_over_mutual_tls(tmp_path: Path, ca: TestCA, broker_cert: Issued) -> None:
    alice = ca.issue("alice", O="idemcore tests", CN="alice")
    with serving(tmp_path, **_mutual_tls(ca, broker_cert)) as (server, sessions):
        security = {"security.protocol": "SSL", "ssl.ca.location": str(ca.path),
                    "ssl.certificate.location": str(alice.cert_path), "ssl.key.location": str(alice.key_path)}
        _produce_and_consume_in_a_group(server.bootstrap, security)
        assert {(str(s.principal), s.security_protocol) for s in sessions} == {
            ("User:CN=alice,O=idemcore tests", "SSL")}


@contextmanager
def _refused() -> Iterator[list[str]]:
    """The block must raise AuthenticationError (a fatal error, not a retry until a timeout: the calls in it would
    otherwise wait out the transport's metadata timeout and raise TransportTimeoutError); yields a list that gets
    its message."""
    message: list[str] = []
    with pytest.raises(AuthenticationError) as caught:
        yield message
    message.append(str(caught.value))
    assert "\n" not in message[0]


def test_a_wrong_password_is_one_clear_error_soon(tmp_path: Path, ca: TestCA, broker_cert: Issued) -> None:
    with serving(tmp_path, CAROL, **_sasl_ssl(ca, broker_cert)) as (server, sessions):
        topic = _topic(server.bootstrap, _scram(ca))
        producer = Producer(server.bootstrap, security=_scram(ca, "not-her-password"), linger_ms=1)
        with _refused() as message:
            producer.send(topic, b"x")
        host, port = server.bootstrap.split(":")
        assert f"broker {host}:{port}" in message[0] and "SASL authentication of 'carol'" in message[0]
        assert "SCRAM-SHA-256" in message[0] and "not-her-password" not in message[0]
        before = len(sessions)
        with _refused():  # fatal: asked again, the same error, and no new connection
            producer.send(topic, b"x")
        producer.close()
        consumer = Consumer(server.bootstrap, security=_scram(ca, "wrong"), group_id="g")
        with _refused():  # assign asks for the topic's metadata
            consumer.assign([(topic, 0)])
            for _ in range(100):
                consumer.poll(timeout_ms=100)
        consumer.close()
        member = Consumer(server.bootstrap, security=_scram(ca, "wrong"), group_id="g")
        member.subscribe([topic])
        with _refused():
            for _ in range(100):
                member.poll(timeout_ms=100)
        member.close()  # closing after the refusal raises nothing more
        assert len(sessions) == before  # no request of theirs was ever served


def test_producer_and_consumer_over_sasl_plaintext_with_plain(tmp_path: Path) -> None:
    settings = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS}
    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                    'username="dave" password="dave-secret";'}
    with serving(tmp_path, **settings) as (server, sessions):
        topic = _topic(server.bootstrap, security, 1)
        producer = Producer(server.bootstrap, security=security, linger_ms=1)
        offsets = [producer.send(topic, b"p-%d" % i, partition=0) for i in range(50)]
        producer.flush()
        assert [f.result().offset for f in offsets] == list(range(50))
        producer.close()
        with Consumer(server.bootstrap, security=security) as consumer:
            consumer.assign([(topic, 0)])
            assert [r.value for r in _read(consumer, 50)] == [b"p-%d" % i for i in range(50)]
        assert {(str(s.principal), s.security_protocol) for s in sessions} == {("User:dave", "SASL_PLAINTEXT")}


def test_an_untrusted_broker_certificate_is_one_clear_error(tmp_path: Path, ca: TestCA, broker_cert: Issued) -> None:
    other = TestCA(tmp_path, "another CA")
    with serving(tmp_path, CAROL, **_sasl_ssl(ca, broker_cert)) as (server, sessions):
        consumer = Consumer(server.bootstrap, security={**_scram(ca), "ssl.ca.location": str(other.path)})
        with _refused() as message:
            consumer.assign([("t", 0)])
            for _ in range(100):
                consumer.poll(timeout_ms=100)
        consumer.close()
        assert f"broker {server.bootstrap}: TLS handshake failed: the broker's certificate failed verification" \
            in message[0]
        assert sessions == []


def test_mutual_tls_without_a_client_certificate_is_refused(tmp_path: Path, ca: TestCA,
                                                            broker_cert: Issued) -> None:
    """The broker's asyncio TLS closes without sending its alert after a TLS 1.3 handshake, so the client cannot
    tell a refusal from a cut: it retries as for a lost connection, and says what it saw when it gives up."""
    with serving(tmp_path, **_mutual_tls(ca, broker_cert)) as (server, sessions):
        transport = TcpTransport(server.bootstrap, metadata_timeout_ms=1_500,
                                 security={"security.protocol": "SSL", "ssl.ca.location": str(ca.path)})
        with transport, pytest.raises((TransportTimeoutError, AuthenticationError)) as caught:
            transport.partition_count("t")
        assert f"broker {server.bootstrap}" in str(caught.value)
        if isinstance(caught.value, TransportTimeoutError):
            assert "did it refuse this one?" in str(caught.value)
        assert sessions == []


def test_sasl_against_a_listener_without_sasl_is_refused(tmp_path: Path, ca: TestCA, broker_cert: Issued) -> None:
    settings = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(broker_cert.keystore)}
    with serving(tmp_path, **settings) as (server, _), TcpTransport(server.bootstrap, security=_scram(ca)) as transport:
        with _refused() as message:
            transport.partition_count("t")
        assert "the broker does not enable SASL mechanism SCRAM-SHA-256" in message[0]


@contextmanager
def _cutting_listener(read_first: bool) -> Iterator[tuple[str, list[int]]]:
    """A listener that accepts and closes each connection (after reading what came first, if ``read_first``):
    its bootstrap and the count of connections it took."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    accepted = [0]
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted[0] += 1
            if read_first:
                conn.settimeout(1)
                try:
                    conn.recv(64)
                except OSError:
                    pass
            conn.close()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.mark.parametrize("read_first", [False, True], ids=["closed-at-once", "closed-after-hello"])
@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_a_broker_that_closes_mid_handshake_is_a_lost_connection(ca: TestCA, protocol: str,
                                                                  read_first: bool) -> None:
    security = {**_scram(ca), "security.protocol": protocol}
    with _cutting_listener(read_first) as (bootstrap, accepted), \
            TcpTransport(bootstrap, security=security, metadata_timeout_ms=1_500, reconnect_backoff_ms=50) as transport:
        with pytest.raises(TransportTimeoutError):  # not an AuthenticationError: retried until the timeout
            transport.partition_count("t")
        assert accepted[0] >= 3  # it reconnected


def test_security_goes_to_a_transport_the_client_builds(ca: TestCA) -> None:
    with TcpTransport("127.0.0.1:9", security=_scram(ca)) as transport:
        with pytest.raises(TypeError, match="security= is for a producer given bootstrap servers"):
            Producer(transport, security=_scram(ca))
        with pytest.raises(TypeError, match="security= is for a consumer given bootstrap servers"):
            Consumer(transport, security=_scram(ca))
    with pytest.raises(TypeError, match="security must be a ClientSecurity"):
        TcpTransport("127.0.0.1:9", security="SASL_SSL")  # type: ignore[arg-type]


@pytest.mark.parametrize("small_reads", [False, True], ids=["reads-as-shipped", "reads-of-1000-bytes"])
def test_large_answers_over_tls_arrive_whole(tmp_path: Path, ca: TestCA, broker_cert: Issued,
                                             monkeypatch: pytest.MonkeyPatch, small_reads: bool) -> None:
    """Fetch answers of megabytes span hundreds of TLS records: every byte reaches the consumer. With reads of
    1000 bytes, two per readiness event, most of each record stays decrypted inside the SSL object, where the
    selector cannot see it: the transport must go back for it unasked."""
    if small_reads:
        monkeypatch.setattr(connection, "_RECV_BYTES", 1000)
        monkeypatch.setattr(connection, "_MAX_READS", 2)
        pending = [0]
        real_pending = ssl.SSLSocket.pending

        def counted(self: ssl.SSLSocket) -> int:
            left = real_pending(self)
            pending[0] += left > 0
            return left
        monkeypatch.setattr(ssl.SSLSocket, "pending", counted)
    settings = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(broker_cert.keystore)}
    security = {"security.protocol": "SSL", "ssl.ca.location": str(ca.path)}
    with serving(tmp_path, **settings) as (server, _):
        topic = _topic(server.bootstrap, security, 1)
        values = [bytes([i % 251]) * (40_000 + i) for i in range(120)]
        producer = Producer(server.bootstrap, security=security, linger_ms=5, batch_size=1 << 20,
                            max_request_size=8 << 20)
        for value in values:
            producer.send(topic, value, partition=0)
        producer.flush()
        producer.close()
        with Consumer(server.bootstrap, security=security, max_partition_fetch_bytes=8 << 20) as consumer:
            consumer.assign([(topic, 0)])
            assert [r.value for r in _read(consumer, len(values))] == values
    if small_reads:
        assert pending[0] > 100  # the case was met


@contextmanager
def _tls_front(ca: TestCA, cert: Issued, backend: str) -> Iterator[str]:
    """A TLS listener in front of the PLAINTEXT broker at ``backend`` that passes requests on and writes each
    answer frame back in one TLS write (one record): its bootstrap."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert.keystore))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def relay(front: ssl.SSLSocket, back: socket.socket) -> None:
        answers = bytearray()
        while not stop.is_set():
            ready, _, _ = select.select([front, back], [], [], 0.05)
            if front in ready or front.pending():
                data = front.recv(1 << 16)
                if not data:
                    return
                back.sendall(data)
            if back in ready:
                data = back.recv(1 << 16)
                if not data:
                    return
                answers += data
                while len(answers) >= 4 and len(answers) >= 4 + int.from_bytes(answers[:4], "big"):
                    size = 4 + int.from_bytes(answers[:4], "big")
                    front.sendall(bytes(answers[:size]))  # under 16 KiB: one record
                    del answers[:size]

    def run() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            host, port = backend.split(":")
            with context.wrap_socket(raw, server_side=True) as front, \
                    socket.create_connection((host, int(port))) as back:
                try:
                    relay(front, back)
                except OSError:
                    pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_bytes_held_inside_the_ssl_object_are_read_unasked(tmp_path: Path, ca: TestCA, broker_cert: Issued,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each answer comes in one TLS record and the transport reads 100 bytes per readiness event: the rest of the
    record sits decrypted inside the SSL object and no more bytes come to the socket (nothing else is asked on the
    connection), so a transport that waits on the selector alone never sees the ApiVersions answer whole."""
    with serving(tmp_path) as (server, _), _tls_front(ca, broker_cert, server.bootstrap) as bootstrap:
        with TcpTransport(server.bootstrap) as plain:
            assert plain.create_topics({"held": 5}) == {"held": 0}
        monkeypatch.setattr(connection, "_RECV_BYTES", 100)
        monkeypatch.setattr(connection, "_MAX_READS", 1)
        security = {"security.protocol": "SSL", "ssl.ca.location": str(ca.path)}
        with TcpTransport(bootstrap, security=security, metadata_timeout_ms=3_000) as transport:
            assert transport.partition_count("held") == 5
