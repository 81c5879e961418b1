"""The server's SASL authenticator: PLAIN and SCRAM exchanges with idemcore's client mechanisms and with
kafka-python's independent SCRAM client; every refusal answered as Kafka answers it and logged without secrets."""

from __future__ import annotations

import base64
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.broker.security.sasl_server import SaslAuthenticator, SaslStep
from idemcore.net import scram
from idemcore.net.sasl_client import SaslClientError, ScramClient, sasl_client
from idemcore.protocol.codes import ErrorCode

ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


class Store:
    def __init__(self) -> None:
        self.credentials: dict[tuple[str, str], scram.ScramCredential] = {}

    def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        return self.credentials.get((user, mechanism))


@pytest.fixture
def store() -> Store:
    made = Store()
    for mechanism in scram.MECHANISMS.values():
        made.credentials[("alice", mechanism.name)] = scram.make_credential(mechanism, "alice-secret", 4096)
    return made


def server(store: Store, mechanism: str) -> SaslAuthenticator:
    made = SaslAuthenticator(ALL, {"alice": "alice-secret", "bob": "bob-secret"}, store, "10.0.0.7")
    assert made.handshake(mechanism) == (0, ALL)
    return made


def run(authenticator: SaslAuthenticator, client: object) -> SaslStep:
    """The exchange to its end: the last step (complete, or the refusal)."""
    token = client.first()  # type: ignore[attr-defined]
    for _ in range(4):
        step = authenticator.authenticate(token)
        if step.error_code or step.complete:
            if step.complete and not client.complete:  # type: ignore[attr-defined]
                client.respond(step.auth_bytes)  # type: ignore[attr-defined]
            return step
        token = client.respond(step.auth_bytes)  # type: ignore[attr-defined]
    raise AssertionError("the exchange did not end")


@pytest.mark.parametrize("mechanism", ALL)
def test_own_client_and_server_agree(store: Store, mechanism: str) -> None:
    client = sasl_client(mechanism, "alice", "alice-secret")
    authenticator = server(store, mechanism)
    step = run(authenticator, client)
    assert (step.error_code, step.complete, str(step.principal)) == (0, True, "User:alice")
    assert client.complete and authenticator.complete
    again = authenticator.authenticate(b"x")
    assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert again.error_message == "SaslAuthenticate request received after successful authentication"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_pythons_scram_client_is_accepted(store: Store, mechanism: str) -> None:
    from kafka.net.sasl.scram import ScramClient as PeerClient

    peer = PeerClient("alice", "alice-secret", mechanism)
    authenticator = server(store, mechanism)
    first = authenticator.authenticate(peer.first_message())
    assert first.error_code == 0 and not first.complete
    peer.process_server_first_message(first.auth_bytes)
    final = authenticator.authenticate(peer.final_message())
    assert final.complete and str(final.principal) == "User:alice"
    peer.process_server_final_message(final.auth_bytes)  # raises on a wrong server signature


def test_kafka_pythons_client_with_a_wrong_password_is_refused(store: Store) -> None:
    from kafka.net.sasl.scram import ScramClient as PeerClient

    peer = PeerClient("alice", "wrong", "SCRAM-SHA-256")
    authenticator = server(store, "SCRAM-SHA-256")
    peer.process_server_first_message(authenticator.authenticate(peer.first_message()).auth_bytes)
    step = authenticator.authenticate(peer.final_message())
    assert (step.error_code, step.error_message) == (58, GENERIC.format("SCRAM-SHA-256"))


@pytest.mark.parametrize(("mechanism", "user", "password", "message"), [
    ("PLAIN", "alice", "wrong", "Authentication failed: Invalid username or password"),
    ("PLAIN", "nobody", "alice-secret", "Authentication failed: Invalid username or password"),
    ("PLAIN", "", "x", "Authentication failed: username not specified"),
    ("PLAIN", "alice", "", "Authentication failed: password not specified"),
    ("SCRAM-SHA-256", "alice", "wrong", GENERIC.format("SCRAM-SHA-256")),
    ("SCRAM-SHA-512", "nobody", "alice-secret", GENERIC.format("SCRAM-SHA-512")),
    ("SCRAM-SHA-512", "bob", "bob-secret", GENERIC.format("SCRAM-SHA-512")),  # a PLAIN user has no SCRAM credential
])
def test_refusals_answer_kafkas_message_and_log_no_secret(store: Store, caplog: pytest.LogCaptureFixture,
                                                          mechanism: str, user: str, password: str,
                                                          message: str) -> None:
    authenticator = server(store, mechanism)
    with caplog.at_level(logging.INFO, "idemcore.broker.security.sasl_server"):
        step = run(authenticator, sasl_client(mechanism, user, password))
    assert (step.error_code, step.error_message, step.auth_bytes, step.complete) == (58, message, b"", False)
    logged = caplog.text
    assert "10.0.0.7" in logged and mechanism in logged and (not user or repr(user) in logged)
    assert (not password or password not in logged) and "alice-secret" not in logged
    assert authenticator.authenticate(b"again").error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_plain_authzid_must_be_the_user(store: Store) -> None:
    assert server(store, "PLAIN").authenticate(b"alice\0alice\0alice-secret").complete
    step = server(store, "PLAIN").authenticate(b"admin\0alice\0alice-secret")
    assert step.error_message == ("Authentication failed: Client requested an authorization id that is different "
                                  "from username")
    step = server(store, "PLAIN").authenticate(b"alice\0alice-secret")
    assert (step.error_code, step.error_message) == (58, GENERIC.format("PLAIN"))


def scram_first(authenticator: SaslAuthenticator, client: ScramClient) -> bytes:
    step = authenticator.authenticate(client.first())
    assert step.error_code == 0
    return client.respond(step.auth_bytes)


def test_scram_bad_nonce_is_refused(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    authenticator = server(store, "SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    final = scram_first(authenticator, client).decode()
    binding, nonce, proof = final.split(",")
    with caplog.at_level(logging.INFO):
        step = authenticator.authenticate(f"{binding},{nonce}X,{proof}".encode())
    assert (step.error_code, step.error_message) == (58, GENERIC.format("SCRAM-SHA-256"))
    assert "Invalid client nonce" in caplog.text


def test_scram_tampered_proof_is_refused(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    authenticator = server(store, "SCRAM-SHA-512")
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    head, proof = scram_first(authenticator, client).decode().split(",p=")
    raw = bytearray(base64.b64decode(proof))
    raw[0] ^= 1
    with caplog.at_level(logging.INFO):
        step = authenticator.authenticate(f"{head},p={base64.b64encode(bytes(raw)).decode()}".encode())
    assert step.error_code == 58 and "Invalid client credentials" in caplog.text
    assert proof not in caplog.text


def test_a_malformed_final_message_is_not_logged(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    authenticator = server(store, "SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    final = scram_first(authenticator, client).decode()
    with caplog.at_level(logging.INFO):
        step = authenticator.authenticate((final + ",junk").encode())
    assert step.error_code == 58 and "client final message" in caplog.text
    assert final.split(",p=")[1] not in caplog.text


def test_scram_wrong_channel_binding_is_refused(store: Store) -> None:
    authenticator = server(store, "SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    final = scram_first(authenticator, client).decode()
    assert authenticator.authenticate(final.replace("c=biws", "c=eSws").encode()).error_code == 58


def test_scram_tokenauth_is_refused(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    authenticator = server(store, "SCRAM-SHA-256")
    with caplog.at_level(logging.INFO):
        step = authenticator.authenticate(b"n,,n=alice,r=abcdef,tokenauth=true")
    assert (step.error_code, step.error_message) == (58, GENERIC.format("SCRAM-SHA-256"))
    assert "tokenauth" in caplog.text


def test_scram_other_extensions_are_ignored(store: Store) -> None:
    step = server(store, "SCRAM-SHA-256").authenticate(b"n,,n=alice,r=abcdef,foo=bar")
    assert step.error_code == 0 and step.auth_bytes.startswith(b"r=abcdef")


def test_scram_too_few_iterations_stored_is_refused(store: Store) -> None:
    store.credentials[("weak", "SCRAM-SHA-256")] = scram.make_credential(scram.SCRAM_SHA_256, "x", 1000)
    step = server(store, "SCRAM-SHA-256").authenticate(b"n,,n=weak,r=abcdef")
    assert step.error_code == 58


def test_scram_server_first_nonce_extends_the_clients(store: Store) -> None:
    one = server(store, "SCRAM-SHA-256").authenticate(b"n,,n=alice,r=abcdef").auth_bytes.decode()
    two = server(store, "SCRAM-SHA-256").authenticate(b"n,,n=alice,r=abcdef").auth_bytes.decode()
    assert one.startswith("r=abcdef") and one.split(",")[0] != two.split(",")[0]


def test_client_refuses_a_server_without_the_credential(store: Store) -> None:
    # A server that answers the first message but signs with another key: the client must not accept it.
    impostor = Store()
    impostor.credentials[("alice", "SCRAM-SHA-256")] = scram.make_credential(scram.SCRAM_SHA_256, "other", 4096)
    authenticator = server(impostor, "SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", "alice", "other")
    final = scram_first(authenticator, client)
    signed = authenticator.authenticate(final)
    assert signed.complete
    honest = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    first = server(store, "SCRAM-SHA-256").authenticate(honest.first())
    honest.respond(first.auth_bytes)
    with pytest.raises(SaslClientError, match="signature is wrong"):
        honest.respond(signed.auth_bytes)


def test_handshake_rules() -> None:
    authenticator = SaslAuthenticator(("SCRAM-SHA-256",), {}, None, "h")
    assert authenticator.authenticate(b"x").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert authenticator.handshake("PLAIN") == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, ("SCRAM-SHA-256",))
    fresh = SaslAuthenticator(("SCRAM-SHA-256",), {}, None, "h")
    assert fresh.handshake("SCRAM-SHA-256")[0] == 0
    assert fresh.handshake("SCRAM-SHA-256")[0] == ErrorCode.ILLEGAL_SASL_STATE
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslAuthenticator(("GSSAPI",), {}, None, "h")


@settings(max_examples=300, deadline=None)
@given(mechanism=st.sampled_from(ALL), payloads=st.lists(st.binary(max_size=200), min_size=1, max_size=3))
def test_any_payload_is_answered_without_raising(mechanism: str, payloads: list[bytes]) -> None:
    store = Store()
    store.credentials[("a", "SCRAM-SHA-256")] = scram.make_credential(scram.SCRAM_SHA_256, "x", 4096, b"salt")
    authenticator = SaslAuthenticator(ALL, {"a": "x"}, store, "h")
    authenticator.handshake(mechanism)
    for payload in payloads:
        step = authenticator.authenticate(payload)
        assert step.error_code in (0, 58, 34)
        assert not step.complete or step.principal is not None


_names = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF), min_size=1, max_size=12)
_passwords = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=16)


@settings(max_examples=40, deadline=None)
@given(mechanism=st.sampled_from(ALL), user=_names, password=_passwords, other=_passwords)
def test_any_user_and_password_round_trip_and_only_the_right_one(mechanism: str, user: str, password: str,
                                                                 other: str) -> None:
    store = Store()
    if mechanism != "PLAIN":
        store.credentials[(user, mechanism)] = scram.make_credential(scram.MECHANISMS[mechanism], password, 4096)
    authenticator = SaslAuthenticator(ALL, {user: password}, store, "h")
    authenticator.handshake(mechanism)
    step = run(authenticator, sasl_client(mechanism, user, password))
    assert step.complete and step.principal is not None and step.principal.name == user
    wrong = SaslAuthenticator(ALL, {user: password}, store, "h")
    wrong.handshake(mechanism)
    assert run(wrong, sasl_client(mechanism, user, other)).complete == (other == password)


# Kafka's PlainSaslServerTest and ScramSaslServerTest cases.


@pytest.mark.parametrize(("token", "message"), [
    (b"\0\0", "Authentication failed: username not specified"),
    (b"\0u\0", "Authentication failed: password not specified"),
    (b"a\0\0p", "Authentication failed: username not specified"),
    (b"\0\0\0", GENERIC.format("PLAIN")),  # four tokens
    (b"", GENERIC.format("PLAIN")),
    (b"\xff\0alice\0alice-secret", GENERIC.format("PLAIN")),
])
def test_plain_empty_tokens(store: Store, token: bytes, message: str) -> None:
    step = server(store, "PLAIN").authenticate(token)
    assert (step.error_code, step.error_message) == (58, message)


@pytest.mark.parametrize(("first", "accepted"), [
    (b"n,,n=alice,r=abc", True),  # no authorization id
    (b"n,a=alice,n=alice,r=abc", True),  # the authorization id is the user
    (b"n,a=admin,n=alice,r=abc", False),  # another: refused with Kafka's own message
])
def test_scram_authorization_id(store: Store, first: bytes, accepted: bool) -> None:
    step = server(store, "SCRAM-SHA-256").authenticate(first)
    if accepted:
        assert step.error_code == 0 and step.auth_bytes.startswith(b"r=abc")
    else:
        assert (step.error_code, step.error_message) == (
            58, "Authentication failed: Client requested an authorization id that is different from username")


def test_scram_with_an_authorization_id_completes_with_its_channel_binding(store: Store) -> None:
    authenticator = server(store, "SCRAM-SHA-256")
    mechanism = scram.SCRAM_SHA_256
    first_bare = "n=alice,r=abc"
    server_first = authenticator.authenticate(b"n,a=alice," + first_bare.encode()).auth_bytes.decode()
    parsed = scram.ServerFirst.parse(server_first.encode())
    without_proof = f"c={base64.b64encode(b'n,a=alice,').decode()},r={parsed.nonce}"
    salted = scram.salted_password(mechanism, "alice-secret", parsed.salt, parsed.iterations)
    proof = scram.client_proof(mechanism, salted, scram.auth_message(first_bare, server_first, without_proof))
    step = authenticator.authenticate(scram.ClientFinal.build(without_proof, proof))
    assert step.complete and str(step.principal) == "User:alice"
