"""Listeners with a security protocol and TLS by Kafka's PEM settings (KIP-651): several listeners on one broker,
real clients (librdkafka, kafka-python) over TLS, mutual TLS with the principal taken from the client
certificate's subject, and the settings refused in one line as Kafka's ``SslFactory`` refuses them."""

from __future__ import annotations

import ssl
import uuid
from typing import Any

import kafka
import pytest
from confluent_kafka import Consumer, Producer

from idemcore.broker.config import BrokerConfig
from idemcore.broker.security.listeners import PrincipalMapper, distinguished_name
from idemcore.errors import ConfigError
from idemcore.net.broker_channel import BlockingBrokerChannel
from idemcore.net.client_security import ClientSecurity
from idemcore.net.messages import MetadataRequest
from tests.secured import serving
from tests.tls_certs import TestCA


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker_cert(ca: TestCA) -> Any:
    return ca.issue("broker", server=True, O="idemcore tests", CN="localhost")


def _tls(ca: TestCA, cert: Any, listeners: str = "SSL://127.0.0.1:0", **more: str) -> dict[str, str]:
    return {"listeners": listeners, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.path), **more}


def _round_trip(bootstrap: str, **client: str) -> list[bytes]:
    """Produce three records with librdkafka over ``client``'s security and read them back."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **client})
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         **client})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
            if len(got) == 3:
                break
    finally:
        consumer.close()
    return got


def _undelivered(bootstrap: str, client: dict[str, str]) -> str:
    """Produce one record that must fail to be delivered; the errors librdkafka logged and reported."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3000, **client,
                         "error_cb": lambda error: errors.append(str(error))})
    producer.produce("t", b"x", on_delivery=lambda error, _: errors.append(f"delivery: {error}"))
    assert producer.flush(15) == 0
    assert errors and errors[-1].startswith("delivery: ") and errors[-1] != "delivery: None", errors
    return " ".join(errors)


def test_librdkafka_produces_and_consumes_over_a_tls_listener(tmp_path, ca, broker_cert):
    with serving(tmp_path, **_tls(ca, broker_cert)) as (server, sessions):
        got = _round_trip(server.bootstrap, **{"security.protocol": "SSL", "ssl.ca.location": str(ca.path)})
        assert got == [b"v0", b"v1", b"v2"]
        # no client certificate asked for: every request is ANONYMOUS's, on the SSL listener
        assert {(str(s.principal), s.listener, s.security_protocol) for s in sessions} == {
            ("User:ANONYMOUS", "SSL", "SSL")}


def test_a_client_that_does_not_trust_the_broker_is_refused_by_its_tls(tmp_path, ca, broker_cert):
    other = TestCA(tmp_path, "another CA")
    with serving(tmp_path, **_tls(ca, broker_cert)) as (server, sessions):
        client = {"security.protocol": "SSL", "ssl.ca.location": str(other.path)}
        assert "certificate verify failed" in _undelivered(server.bootstrap, client).lower()
        assert sessions == []  # nothing reached the broker


def test_several_listeners_each_send_clients_to_their_own_port(tmp_path, ca, broker_cert):
    settings = _tls(ca, broker_cert, "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                    **{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL"})
    with serving(tmp_path, **settings) as (server, sessions):
        addresses = server.addresses
        assert set(addresses) == {"PLAINTEXT", "SSL", "INTERNAL"} and len({p for _, p in addresses.values()}) == 3
        for name, protocol in (("PLAINTEXT", "PLAINTEXT"), ("SSL", "SSL"), ("INTERNAL", "SSL")):
            security = ClientSecurity(protocol, _trusting(ca) if protocol == "SSL" else None)
            host, port = addresses[name]
            channel = BlockingBrokerChannel(host, port, "test", security=security)
            try:
                answer = channel.call(MetadataRequest((), False))
            finally:
                channel.close()
            # Metadata names this broker at the port of the listener asked on (clients stay on their listener)
            assert [(b.host, b.port) for b in answer.brokers] in ([], [(host, port)])
            assert sessions[-1].listener == name and sessions[-1].security_protocol == protocol
        assert _round_trip(server.bootstrap_of("INTERNAL"), **{"security.protocol": "SSL",
                                                               "ssl.ca.location": str(ca.path)}) == [b"v0", b"v1",
                                                                                                     b"v2"]
        assert _round_trip(server.bootstrap_of("PLAINTEXT")) == [b"v0", b"v1", b"v2"]


def _trusting(ca: TestCA) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca.path))
    return context


def test_mutual_tls_takes_the_principal_from_the_client_certificate(tmp_path, ca, broker_cert):
    alice = ca.issue("alice", OU="eng", O="Example, Inc.", CN="alice")
    with serving(tmp_path, **_tls(ca, broker_cert, **{"ssl.client.auth": "required"})) as (server, sessions):
        client = {"security.protocol": "SSL", "ssl.ca.location": str(ca.path),
                  "ssl.certificate.location": str(alice.cert_path), "ssl.key.location": str(alice.key_path)}
        assert _round_trip(server.bootstrap, **client) == [b"v0", b"v1", b"v2"]
        # RFC 2253 as Java's X500Principal writes it: last RDN first, the comma in O escaped
        assert {str(s.principal) for s in sessions} == {"User:CN=alice,O=Example\\, Inc.,OU=eng"}
        count = len(sessions)
        _undelivered(server.bootstrap, {"security.protocol": "SSL", "ssl.ca.location": str(ca.path)})
        assert len(sessions) == count  # no certificate: the handshake fails, nothing is served


def test_requested_client_auth_serves_clients_without_a_certificate_as_anonymous(tmp_path, ca, broker_cert):
    bob = ca.issue("bob", CN="bob")
    rules = "RULE:^CN=([a-z]+)$/$1/U,DEFAULT"
    with serving(tmp_path, **_tls(ca, broker_cert, **{"ssl.client.auth": "requested",
                                                      "ssl.principal.mapping.rules": rules})) as (server, sessions):
        plain = {"security.protocol": "SSL", "ssl.ca.location": str(ca.path)}
        assert _round_trip(server.bootstrap, **plain) == [b"v0", b"v1", b"v2"]
        assert {str(s.principal) for s in sessions} == {"User:ANONYMOUS"}
        sessions.clear()
        with_cert = {**plain, "ssl.certificate.location": str(bob.cert_path), "ssl.key.location": str(bob.key_path)}
        assert _round_trip(server.bootstrap, **with_cert) == [b"v0", b"v1", b"v2"]
        assert {str(s.principal) for s in sessions} == {"User:BOB"}  # the rule's /U


def test_kafka_python_speaks_to_the_tls_listener(tmp_path, ca, broker_cert):
    with serving(tmp_path, **_tls(ca, broker_cert)) as (server, _):
        producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap, security_protocol="SSL",
                                       ssl_cafile=str(ca.path), ssl_check_hostname=True)
        producer.send("kp", b"hello").get(timeout=30)
        producer.close()
        consumer = kafka.KafkaConsumer("kp", bootstrap_servers=server.bootstrap, security_protocol="SSL",
                                       ssl_cafile=str(ca.path), auto_offset_reset="earliest",
                                       consumer_timeout_ms=10_000)
        assert [m.value for m in consumer] == [b"hello"]
        consumer.close()


def test_an_encrypted_key_and_an_inline_key_store(tmp_path, ca):
    locked = ca.issue("locked", server=True, password="s3cret", CN="localhost")
    with serving(tmp_path, **_tls(ca, locked, **{"ssl.key.password": "s3cret"})) as (server, _):
        assert _round_trip(server.bootstrap, **{"security.protocol": "SSL",
                                                "ssl.ca.location": str(ca.path)}) == [b"v0", b"v1", b"v2"]
    plain = ca.issue("inline", server=True, CN="localhost")
    inline = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
              "ssl.keystore.key": plain.key_pem.decode(),
              "ssl.keystore.certificate.chain": (plain.cert_pem + ca.cert_pem).decode()}
    with serving(tmp_path / "inline", **inline) as (server, _):
        assert _round_trip(server.bootstrap, **{"security.protocol": "SSL",
                                                "ssl.ca.location": str(ca.path)}) == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize(("extra", "needle"), [
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type (or ssl.keystore.type)=JKS: idemcore reads PEM key stores"),
    ({"ssl.keystore.password": "x"}, "a PEM key store takes no store password"),
    ({"ssl.keystore.location": "/nonexistent/k.pem"}, "cannot load the key store /nonexistent/k.pem of listener SSL"),
    ({"ssl.key.password": "wrong"}, "the private key does not decrypt with ssl.key.password"),
    ({"ssl.key.password": None}, "the private key is encrypted: set ssl.key.password"),
    ({"ssl.client.auth": "required", "ssl.truststore.location": None}, "needs a trust store"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "'TLSv1.1' is not served"),
    ({"listener.name.ssl.ssl.keystore.type": "PKCS12"}, "listener.name.ssl.ssl.keystore.type"),
    ({"ssl.principal.mapping.rules": "RULE:oops"}, "expected DEFAULT or RULE:pattern/replacement/[LU]"),
])
def test_tls_settings_refused_in_one_line(tmp_path, ca, extra, needle):
    locked = ca.issue("refused", server=True, password="pw", CN="localhost")
    settings = _tls(ca, locked, **{"ssl.key.password": "pw"})
    for key, value in extra.items():
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_properties({"log.dirs": str(tmp_path), **settings})
    assert needle in str(caught.value) and "\n" not in str(caught.value) and "pw" not in str(caught.value).split(
        "ssl.key.password")[0][-5:]


@pytest.mark.parametrize(("settings", "needle"), [
    ({"listeners": "SSL://:9093"}, "listener SSL uses TLS and has no key store"),
    ({"listeners": "INTERNAL://:9093"}, "no security protocol for the listener name 'INTERNAL'"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "the listener name PLAINTEXT is given twice"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "port 9092 is given twice"),
    ({"listener.security.protocol.map": "A:TLS"}, "'TLS' is not a security protocol"),
    ({"listeners": "SASL_PLAINTEXT://:9092"}, "GSSAPI is not served by idemcore"),
    ({"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "PLAIN"}, "enables PLAIN and has no users"),
    ({"listener.name.plaintext.log.retention.ms": "5"}, "not a per-listener setting"),
    ({"inter.broker.listener.name": "NOPE"}, "no such listener"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"}, "both set"),
    ({"advertised.listeners": "SSL://h:1"}, "SSL is not a listener in listeners"),
])
def test_listener_settings_refused_in_one_line(tmp_path, settings, needle):
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_properties({"log.dirs": str(tmp_path), **settings})
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_channel_that_does_not_trust_the_broker_raises_connection_error(tmp_path, ca, broker_cert):
    other = TestCA(tmp_path, "untrusted CA")
    with serving(tmp_path, **_tls(ca, broker_cert)) as (server, _):
        host, port = server.address
        channel = BlockingBrokerChannel(host, port, "test", security=ClientSecurity("SSL", _trusting(other)))
        with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            channel.call(MetadataRequest((), False))


def test_distinguished_names_as_java_writes_them():
    subject = ((("countryName", "US"),), (("organizationName", "A+B"),),
               (("organizationalUnitName", " lead"), ("commonName", "x")), (("commonName", "#1;2 "),))
    assert distinguished_name(subject) == "CN=\\#1\\;2\\ ,OU=\\ lead+CN=x,O=A\\+B,C=US"
    mapper = PrincipalMapper.parse("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, RULE:^CN=([^,]*).*$/$1/, DEFAULT")
    assert mapper.name_of("CN=Alice,OU=Eng,O=Ex") == "alice@eng"
    assert mapper.name_of("CN=Bob,O=Ex") == "Bob"
    assert mapper.name_of("O=Ex") == "O=Ex"  # no rule matches: DEFAULT
    assert PrincipalMapper.parse("DEFAULT").name_of("CN=x") == "CN=x"
    with pytest.raises(ConfigError, match=r"pattern '\(': missing \)"):
        PrincipalMapper.parse("RULE:(/x/")


def test_describe_configs_names_the_secrets_and_never_gives_them(tmp_path, ca):
    from confluent_kafka.admin import AdminClient, ConfigResource

    locked = ca.issue("described", server=True, password="hunter2", CN="localhost")
    with serving(tmp_path, **_tls(ca, locked, **{"ssl.key.password": "hunter2"})) as (server, _):
        admin = AdminClient({"bootstrap.servers": server.bootstrap, "security.protocol": "SSL",
                             "ssl.ca.location": str(ca.path)})
        resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        entries = admin.describe_configs([resource])[resource].result(30)
        secret = entries["ssl.key.password"]
        assert secret.value is None and secret.is_sensitive
        assert entries["ssl.keystore.location"].value == str(locked.keystore)
        assert not entries["ssl.keystore.location"].is_sensitive
        assert all("hunter2" not in str(entry.value) for entry in entries.values())
