"""SaslHandshake and SaslAuthenticate through Kafka's frames, every version: a client's requests read by the server
side, the authenticator's answers read by the client side."""

from __future__ import annotations

import pytest

from idemcore.broker.security import sasl_answers
from idemcore.broker.security.sasl_server import SaslAuthenticator
from idemcore.net import scram
from idemcore.net.sasl_client import sasl_client
from idemcore.net.wire import sasl as wire
from idemcore.net.wire.frames import read_request, read_response, request_frame, response_frame


class Store:
    def __init__(self) -> None:
        self.credential = scram.make_credential(scram.SCRAM_SHA_512, "pw", 4096)

    def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        return self.credential if (user, mechanism) == ("carol", "SCRAM-SHA-512") else None



def _response(version, step):
    return wire.authenticate_response(version, step.error_code, step.error_message, step.auth_bytes)

def roundtrip_response(api_key: int, version: int, response: object) -> object:
    frame = b"".join(response_frame(7, response))
    correlation_id, body = read_response(api_key, version, frame[4:])
    assert correlation_id == 7
    return body


@pytest.mark.parametrize("handshake_version", [0, 1])
@pytest.mark.parametrize("auth_version", [0, 1, 2])
@pytest.mark.parametrize(("mechanism", "user", "password"), [("PLAIN", "dave", "pw2"),
                                                              ("SCRAM-SHA-512", "carol", "pw")])
def test_a_whole_exchange_through_frames(handshake_version: int, auth_version: int, mechanism: str, user: str,
                                         password: str) -> None:
    server = SaslAuthenticator(("PLAIN", "SCRAM-SHA-512"), {"dave": "pw2"}, Store(), "127.0.0.1")
    client = sasl_client(mechanism, user, password)
    _, body = read_request(request_frame(17, handshake_version, 1, "c", wire.handshake_request(
        handshake_version, client.mechanism))[4:])
    code, enabled = server.handshake(wire.handshake_mechanism(body))
    answer = roundtrip_response(17, handshake_version, wire.handshake_response(handshake_version, code, enabled))
    assert wire.read_handshake_response(answer) == (0, ("PLAIN", "SCRAM-SHA-512"))
    token = client.first()
    for _ in range(3):
        _, body = read_request(request_frame(36, auth_version, 2, "c", wire.authenticate_request(
            auth_version, token))[4:])
        step = server.authenticate(wire.authenticate_bytes(body))
        answer = roundtrip_response(36, auth_version, _response(auth_version, step))
        code, message, server_token = wire.read_authenticate_response(answer)
        assert (code, message) == (0, None)
        if step.complete:
            if not client.complete:
                client.respond(server_token)
            break
        token = client.respond(server_token)
    assert client.complete and str(server.principal) == f"User:{user}"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_refusal_carries_the_code_and_message(version: int) -> None:
    server = SaslAuthenticator(("PLAIN",), {"dave": "pw2"}, None, "127.0.0.1")
    answer = roundtrip_response(17, 1, wire.handshake_response(1, *server.handshake("SCRAM-SHA-256")))
    assert wire.read_handshake_response(answer) == (33, ("PLAIN",))
    server = SaslAuthenticator(("PLAIN",), {"dave": "pw2"}, None, "127.0.0.1")
    server.handshake("PLAIN")
    step = server.authenticate(b"\0dave\0nope")
    answer = roundtrip_response(36, version, _response(version, step))
    assert wire.read_authenticate_response(answer) == (
        58, "Authentication failed: Invalid username or password", b"")


def test_advertised_ranges_have_kio_schemas() -> None:
    from idemcore.net.wire.apis import SASL_API_RANGES
    from idemcore.net.wire.schema import load_request_schema, load_response_schema

    for key, low, high in SASL_API_RANGES:
        for version in range(low, high + 1):
            assert load_request_schema(key, version) and load_response_schema(key, version)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
@pytest.mark.parametrize("password", ["pw", "pw2", "wrong"])
def test_the_client_exchange_drives_a_whole_authentication(mechanism: str, password: str) -> None:
    user = "dave" if mechanism == "PLAIN" else "carol"
    right = {"PLAIN": "pw2", "SCRAM-SHA-512": "pw"}[mechanism]
    server = SaslAuthenticator(("PLAIN", "SCRAM-SHA-512"), {"dave": "pw2"}, Store(), "127.0.0.1")
    exchange = wire.ClientExchange(sasl_client(mechanism, user, password), authenticate_version=1)
    request: tuple | None = exchange.first()
    sent = 0
    try:
        while request is not None and sent < 5:
            api_key, version, body = request
            _, read = read_request(request_frame(api_key, version, sent, "c", body)[4:])
            reply = sasl_answers.answer(server, api_key, version, read)
            request = exchange.on_response(api_key, roundtrip_response(api_key, version, reply.response))
            sent += 1
    except wire.SaslAuthenticationError as refused:
        assert password != right and refused.code == 58
        return
    assert password == right and str(server.principal) == f"User:{user}" and exchange.client.complete


def test_the_client_exchange_names_the_enabled_mechanisms() -> None:
    server = SaslAuthenticator(("PLAIN",), {}, None, "h")
    exchange = wire.ClientExchange(sasl_client("SCRAM-SHA-256", "a", "b"))
    api_key, version, body = exchange.first()
    read = read_request(request_frame(api_key, version, 1, "c", body)[4:])[1]
    reply = sasl_answers.answer(server, api_key, version, read)
    assert reply.close
    with pytest.raises(wire.SaslAuthenticationError, match=r"does not enable SASL mechanism SCRAM-SHA-256 \(it "
                                                           r"enables: PLAIN\)"):
        exchange.on_response(api_key, roundtrip_response(api_key, version, reply.response))
