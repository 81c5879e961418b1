"""Real clients authenticating with PLAIN and SCRAM against idemcore's authenticator and SASL wire translations:
librdkafka (confluent-kafka), kafka-python and aiokafka. Until the server wires SASL into its listeners, a small
front in this test plays a SASL_PLAINTEXT listener: it answers ApiVersions (with the SASL APIs) and the SASL
exchange through :func:`idemcore.net.wire.sasl.answer`, then relays the authenticated connection to a PLAINTEXT
`idemcore serve` (which, in the produce/consume tests, advertises the front as its address)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

from kio.schema.errors import ErrorCode as WireError  # noqa: E402

from idemcore.broker.security.sasl_server import SaslAuthenticator  # noqa: E402
from idemcore.net import scram  # noqa: E402
from idemcore.net.tcp import parse_bootstrap  # noqa: E402
from idemcore.net.wire import sasl as wire  # noqa: E402
from idemcore.net.wire.apis import advertised  # noqa: E402
from idemcore.net.wire.frames import make, nested, peek_request, read_request, response_frame  # noqa: E402
from idemcore.net.wire.schema import load_response_schema  # noqa: E402

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Store:
    def __init__(self) -> None:
        self.credentials = {(("carol", m.name)): scram.make_credential(m, "carol-secret", 4096)
                            for m in scram.MECHANISMS.values()}

    def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        return self.credentials.get((user, mechanism))


def _exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


def _api_versions(version: int) -> object:
    cls = load_response_schema(18, version)
    entry = nested(cls, "ApiVersion")
    keys = tuple(make(entry, api_key=k, min_version=low, max_version=high)
                 for k, low, high in sorted([*advertised(), *wire.SASL_API_RANGES]))
    return make(cls, error_code=WireError(0), api_keys=keys, supported_features=(), finalized_features_epoch=-1,
                finalized_features=(), zk_migration_ready=False)


class SaslFront:
    def __init__(self, backend: tuple[str, int] | None = None) -> None:
        self.backend = backend
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.bootstrap = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.principals: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, peer = self.listener.accept()
                threading.Thread(target=self._serve, args=(conn, peer[0]), daemon=True).start()

    def _serve(self, conn: socket.socket, host: str) -> None:
        authenticator = SaslAuthenticator(MECHANISMS, {"dave": "dave-secret"}, Store(), host)
        try:
            while True:
                frame = _exactly(conn, int.from_bytes(_exactly(conn, 4), "big"))
                api_key, version, correlation_id = peek_request(frame)
                if api_key == 18:
                    conn.sendall(b"".join(response_frame(correlation_id, _api_versions(min(version, 4)))))
                    continue
                if api_key not in (17, 36):
                    return  # before authentication Kafka serves nothing else
                _, body = read_request(frame)
                answer = wire.answer(authenticator, api_key, version, body)
                conn.sendall(b"".join(response_frame(correlation_id, answer.response)))
                if answer.close:
                    return
                if answer.principal is not None:
                    self.principals.append(str(answer.principal))
                    break
            assert self.backend is not None
            backend = socket.create_connection(self.backend)
            threading.Thread(target=self._copy, args=(backend, conn), daemon=True).start()
            self._copy(conn, backend)
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()

    @staticmethod
    def _copy(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def front(kafka_server) -> Iterator[SaslFront]:
    made = SaslFront(parse_bootstrap(kafka_server.bootstrap)[0])
    yield made
    made.close()


@pytest.fixture
def fronted(tmp_path) -> Iterator[SaslFront]:
    """A front that is the broker's only advertised address: every connection of a client goes through it."""
    from idemcore.broker import Broker
    from idemcore.broker.server import Server

    made = SaslFront()
    port = int(made.bootstrap.rsplit(":", 1)[1])
    broker = Broker({}, data_dir=tmp_path / "logs", fsync=False)
    server = Server(broker, advertised_host="127.0.0.1", advertised_port=port).start()
    made.backend = parse_bootstrap(server.bootstrap)[0]
    yield made
    made.close()
    server.stop()
    broker.close()


def admin(front: SaslFront, mechanism: str, user: str, password: str, errors: list) -> object:
    return confluent_admin.AdminClient({
        "bootstrap.servers": front.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
        "sasl.username": user, "sasl.password": password, "error_cb": errors.append,
        "reconnect.backoff.max.ms": 1000, "log_level": 0})


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "dave", "dave-secret"), ("SCRAM-SHA-256", "carol", "carol-secret"),
    ("SCRAM-SHA-512", "carol", "carol-secret")])
def test_librdkafka_authenticates(front: SaslFront, mechanism: str, user: str, password: str) -> None:
    errors: list = []
    metadata = admin(front, mechanism, user, password, errors).list_topics(timeout=20)  # type: ignore[attr-defined]
    assert metadata.brokers
    assert f"User:{user}" in front.principals


@pytest.mark.parametrize(("mechanism", "user", "password", "says"), [
    ("PLAIN", "dave", "wrong", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "carol", "wrong", "Authentication failed during authentication due to invalid credentials "
                                        "with SASL mechanism SCRAM-SHA-256"),
    ("SCRAM-SHA-512", "nobody", "x", "invalid credentials with SASL mechanism SCRAM-SHA-512")])
def test_librdkafka_is_refused_with_kafkas_message(front: SaslFront, mechanism: str, user: str, password: str,
                                                   says: str) -> None:
    errors: list = []
    client = admin(front, mechanism, user, password, errors)
    with pytest.raises(confluent_kafka.KafkaException):
        client.list_topics(timeout=5)  # type: ignore[attr-defined]
    client.poll(1)  # type: ignore[attr-defined]  # error_cb is called from poll
    assert any(says in str(error) for error in errors), errors
    assert not front.principals


def test_librdkafka_produces_and_consumes_over_scram(fronted: SaslFront) -> None:
    common = {"bootstrap.servers": fronted.bootstrap, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": "carol-secret",
              "log_level": 0}
    producer = confluent_kafka.Producer({**common, "enable.idempotence": True})
    for n in range(20):
        producer.produce("sasl-topic", f"v{n}".encode())
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({**common, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["sasl-topic"])
    got: list[bytes] = []
    try:
        for _ in range(200):
            if len(got) == 20:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert got == [f"v{n}".encode() for n in range(20)]
    assert set(fronted.principals) == {"User:carol"}


def test_kafka_python_produces_and_consumes_over_scram(fronted: SaslFront) -> None:
    kafka = pytest.importorskip("kafka")
    common = {"bootstrap_servers": fronted.bootstrap, "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "carol",
              "sasl_plain_password": "carol-secret"}
    producer = kafka.KafkaProducer(**common)
    for n in range(5):
        producer.send("kp-topic", f"k{n}".encode())
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer("kp-topic", auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common)
    try:
        got = [message.value for _, message in zip(range(5), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == [f"k{n}".encode() for n in range(5)]
    assert "User:carol" in fronted.principals


def test_aiokafka_produces_over_plain(fronted: SaslFront) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=fronted.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
            sasl_plain_username="dave", sasl_plain_password="dave-secret")
        await producer.start()
        try:
            await producer.send_and_wait("aio-topic", b"hello")
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert "User:dave" in fronted.principals
