"""SCRAM's formulas and messages against RFC 5802's (SHA-1) and RFC 7677's (SHA-256) worked examples, and
Kafka's credential text form."""

from __future__ import annotations

import base64

import pytest

from idemcore.broker.security.sasl_server import SaslAuthenticator
from idemcore.net import scram
from idemcore.net.sasl_client import ScramClient

SHA_1 = scram.ScramMechanism("SCRAM-SHA-1", "sha1", 0)

# (mechanism, client nonce, server nonce part, salt, client first, server first, client final, server final)
RFC_5802 = (SHA_1, "fyko+d2lbbFgONRv9qkxdawL", "3rfcNHYJY1ZVvWVs7j", "QSXCR+Q6sek8bf92",
            "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
            "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
            "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")
RFC_7677 = (scram.SCRAM_SHA_256, "rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", "W22ZaJ0SNY7soEsUEjb6gQ==",
            "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
            "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.parametrize("vector", [RFC_5802, RFC_7677], ids=["rfc5802", "rfc7677"])
def test_the_formulas_give_the_rfc_proof_and_signature(vector: tuple) -> None:
    mechanism, _client_nonce, _server_part, salt64, first, server_first, final, server_final = vector
    salted = scram.salted_password(mechanism, "pencil", base64.b64decode(salt64), 4096)
    without_proof = final.rsplit(",p=", 1)[0]
    message = scram.auth_message(first[3:], server_first, without_proof)
    assert scram.ClientFinal.build(without_proof, scram.client_proof(mechanism, salted, message)).decode() == final
    signature = scram.server_signature(mechanism, scram.server_key(mechanism, salted), message)
    assert scram.ServerFinal.build(signature).decode() == server_final


@pytest.mark.parametrize("vector", [RFC_5802, RFC_7677], ids=["rfc5802", "rfc7677"])
def test_the_client_sends_the_rfc_messages(vector: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    mechanism, client_nonce, _server_part, _salt64, first, server_first, final, server_final = vector
    monkeypatch.setitem(scram.MECHANISMS, mechanism.name, mechanism)
    client = ScramClient(mechanism.name, "user", "pencil", client_nonce)
    assert client.first().decode() == first
    assert client.respond(server_first.encode()).decode() == final
    assert client.respond(server_final.encode()) == b"" and client.complete


@pytest.mark.parametrize("vector", [RFC_5802, RFC_7677], ids=["rfc5802", "rfc7677"])
def test_the_server_answers_the_rfc_messages(vector: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    mechanism, _client_nonce, server_part, salt64, first, server_first, final, server_final = vector
    monkeypatch.setitem(scram.MECHANISMS, mechanism.name, mechanism)
    monkeypatch.setattr("idemcore.broker.security.sasl_server.SUPPORTED_MECHANISMS", (mechanism.name,))
    monkeypatch.setattr(scram, "nonce", lambda: server_part)
    credential = scram.make_credential(mechanism, "pencil", 4096, base64.b64decode(salt64))
    store = {("user", mechanism.name): credential}
    server = SaslAuthenticator([mechanism.name], {}, _Store(store), "127.0.0.1")
    assert server.handshake(mechanism.name) == (0, (mechanism.name,))
    step = server.authenticate(first.encode())
    assert (step.error_code, step.auth_bytes.decode(), step.complete) == (0, server_first, False)
    step = server.authenticate(final.encode())
    assert (step.error_code, step.auth_bytes.decode(), step.complete) == (0, server_final, True)
    assert str(step.principal) == "User:user"


class _Store:
    def __init__(self, credentials: dict) -> None:
        self.credentials = credentials

    def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        return self.credentials.get((user, mechanism))


def test_kafka_text_form_round_trips_and_names_what_is_wrong() -> None:
    credential = scram.make_credential(scram.SCRAM_SHA_512, "secret", 4096)
    text = credential.to_text()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=4096")
    assert scram.ScramCredential.from_text(text) == credential
    assert len(credential.stored_key) == len(credential.server_key) == 64
    for bad, says in (("salt=AA==,stored_key=AA==,server_key=AA==", "keys"),
                      ("salt=AA==,stored_key=AA==,server_key=AA==,iterations=x", "invalid literal"),
                      ("salt=@@,stored_key=AA==,server_key=AA==,iterations=4096", "not base64"),
                      ("garbage", "not one key=value")):
        with pytest.raises(ValueError, match=says):
            scram.ScramCredential.from_text(bad)


def test_kafka_credential_text_is_read() -> None:
    # What kafka-configs.sh --add-config 'SCRAM-SHA-256=[iterations=4096,password=pencil]' leaves in ZooKeeper has
    # this shape; one computed by the RFC 7677 salt is checked against its keys.
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = scram.salted_password(scram.SCRAM_SHA_256, "pencil", salt, 4096)
    credential = scram.credential_of_salted(scram.SCRAM_SHA_256, salted, salt, 4096)
    text = (f"salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key={base64.b64encode(credential.stored_key).decode()},"
            f"server_key={base64.b64encode(credential.server_key).decode()},iterations=4096")
    assert scram.ScramCredential.from_text(text) == credential


def test_sasl_names_escape_comma_and_equals() -> None:
    assert scram.sasl_name("a,b=c") == "a=2Cb=3Dc"
    assert scram.username_of("a=2Cb=3Dc") == "a,b=c"
    with pytest.raises(scram.ScramFormatError, match="not escaped"):
        scram.username_of("a=b")
    first = scram.ClientFirst.parse(scram.ClientFirst.build("x,y", "abc")[0])
    assert (first.username, first.nonce, first.header) == ("x,y", "abc", "n,,")


def test_mechanism_named_refuses_others() -> None:
    assert scram.mechanism_named("SCRAM-SHA-512") is scram.SCRAM_SHA_512
    with pytest.raises(ValueError, match="SCRAM-SHA-1"):
        scram.mechanism_named("SCRAM-SHA-1")
