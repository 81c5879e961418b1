"""A hostile client against a SASL listener: what it may not do before, during or after authentication
(each test was written against a weakness found by attacking the server, and fails without its fix)."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from idemcore.net.wire import sasl as wire
from idemcore.net.wire.frames import read_response, request_frame
from tests.secured import PLAIN_USERS, serving

SECURED = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
           "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS,
           "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}


def _received(sock: socket.socket, wait_s: float) -> tuple[bytes, bool]:
    """What arrives within ``wait_s`` and whether the server closed the connection."""
    sock.settimeout(0.1)
    data, deadline = b"", time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def _frames(data: bytes) -> list[bytes]:
    frames = []
    while len(data) >= 4:
        size = struct.unpack(">i", data[:4])[0]
        frames.append(data[4:4 + size])
        data = data[4 + size:]
    return frames


def test_a_client_that_does_not_authenticate_is_closed(tmp_path: Path) -> None:
    with serving(tmp_path, None, **SECURED) as (server, _):
        server.authentication_timeout_ms = 300
        silent = socket.create_connection(server.address)
        dribbling = socket.create_connection(server.address)
        dribbling.sendall(request_frame(17, 1, 1, "x", wire.handshake_request(1, "PLAIN"))[:6])  # never finished
        handshaken = socket.create_connection(server.address)
        handshaken.sendall(request_frame(17, 1, 1, "x", wire.handshake_request(1, "PLAIN")))
        try:
            for sock in (silent, dribbling, handshaken):
                _, closed = _received(sock, 3.0)
                assert closed
        finally:
            for sock in (silent, dribbling, handshaken):
                sock.close()
        assert server.stats["authentication_timeouts"] == 3


def test_an_authenticated_client_is_not_timed_out(tmp_path: Path) -> None:
    with serving(tmp_path, None, **SECURED) as (server, _):
        server.authentication_timeout_ms = 300
        with socket.create_connection(server.address) as sock:
            sock.sendall(request_frame(17, 1, 1, "x", wire.handshake_request(1, "PLAIN"))
                         + request_frame(36, 2, 2, "x", wire.authenticate_request(2, b"\0admin\0admin-secret")))
            data, closed = _received(sock, 0.8)
            assert not closed
            answers = _frames(data)
            assert len(answers) == 2 and read_response(36, 2, answers[1])[1].error_code == 0
            sock.sendall(request_frame(18, 0, 3, "x", _api_versions()))  # past the deadline: still served
            data, closed = _received(sock, 0.5)
            assert not closed and len(_frames(data)) == 1
        assert server.stats["authentication_timeouts"] == 0


def _api_versions() -> object:
    from idemcore.net.wire.frames import make
    from idemcore.net.wire.schema import load_request_schema

    return make(load_request_schema(18, 0))


def _logged_in(server: object, user: bytes = b"dave", password: bytes = b"dave-secret") -> socket.socket:
    sock = socket.create_connection(server.address)  # type: ignore[attr-defined]
    sock.sendall(request_frame(17, 1, 1, "x", wire.handshake_request(1, "PLAIN"))
                 + request_frame(36, 2, 2, "x", wire.authenticate_request(2, b"\0" + user + b"\0" + password)))
    answers = _frames(_received(sock, 0.5)[0])
    assert len(answers) == 2 and read_response(36, 2, answers[1])[1].error_code == 0
    return sock


@pytest.mark.parametrize("version", [10, 11, 12, 13])
def test_metadata_by_topic_id_does_not_name_a_topic_the_principal_may_not_describe(tmp_path: Path,
                                                                                    version: int) -> None:
    from idemcore.net.wire.api import topic_id_of
    from idemcore.net.wire.frames import make, nested
    from idemcore.net.wire.schema import load_request_schema

    cls = load_request_schema(3, version)
    with serving(tmp_path, None, **SECURED) as (server, _):
        server.broker.create_topic("secret-plans", 1)
        with _logged_in(server) as sock:
            answers = []
            for name in ("secret-plans", "no-such-topic"):
                asked = make(nested(cls, "MetadataRequestTopic"), topic_id=topic_id_of(name), name=None)
                sock.sendall(request_frame(3, version, 3, "x", make(
                    cls, topics=(asked,), allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
                (answer,) = read_response(3, version, _frames(_received(sock, 0.5)[0])[0])[1].topics
                assert answer.error_code == 29 and answer.topic_id == topic_id_of(name)
                answers.append(answer.name)
        # An existing topic and a missing one look the same: nothing says which exists, nor its name.
        assert answers[0] == answers[1] == (None if version >= 12 else "")


def _scram_attempt(server: object, user: str, password: str) -> tuple[bytes, tuple[int, str | None]]:
    """The server's first answer and its final (code, message) for a SCRAM-SHA-256 login."""
    from idemcore.broker.security.sasl_server import SaslAuthenticator
    from idemcore.net.sasl_client import sasl_client

    assert isinstance(server, SaslAuthenticator)
    client = sasl_client("SCRAM-SHA-256", user, password)
    assert server.handshake("SCRAM-SHA-256")[0] == 0
    first = server.authenticate(client.first())
    assert (first.error_code, first.error_message) == (0, None), first
    final = server.authenticate(client.respond(first.auth_bytes))
    return first.auth_bytes, (final.error_code, final.error_message)


def test_scram_does_not_tell_which_users_exist() -> None:
    """RFC 5802 section 5.1: an unknown user gets a salt and iterations as a known one does, the same salt each
    time, and is refused at the proof with a wrong password's answer."""
    from idemcore.broker.security.sasl_server import SaslAuthenticator
    from idemcore.net import scram

    credential = scram.make_credential(scram.SCRAM_SHA_256, "right", 4096)

    class Store:
        def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
            return credential if user == "carol" else None

    def login(user: str, password: str) -> tuple[bytes, tuple[int, str | None]]:
        return _scram_attempt(SaslAuthenticator(("SCRAM-SHA-256",), {}, Store(), "10.0.0.9"), user, password)

    def salt_and_iterations(server_first: bytes) -> tuple[bytes, int]:
        parsed = scram.ServerFirst.parse(server_first)
        return parsed.salt, parsed.iterations

    _, known_final = login("carol", "wrong")
    unknown_first, unknown_final = login("mallory", "wrong")
    assert unknown_final == known_final and known_final[0] == 58
    salt, iterations = salt_and_iterations(unknown_first)
    assert iterations == 4096 and len(salt) == len(credential.salt)
    assert salt_and_iterations(login("mallory", "other")[0]) == (salt, 4096)  # not a fresh one per attempt
    assert salt_and_iterations(login("trudy", "wrong")[0])[0] != salt
    assert login("carol", "right")[1] == (0, None)


@pytest.mark.parametrize("handshake_version", [0, 1])
def test_a_refused_login_is_answered_after_the_failed_authentication_delay(tmp_path: Path,
                                                                           handshake_version: int) -> None:
    """As Kafka's connection.failed.authentication.delay.ms: a password guesser waits for each refusal."""
    with serving(tmp_path, None, **SECURED) as (server, _):
        assert server.failed_authentication_delay_ms == 100
        server.failed_authentication_delay_ms = 600
        with socket.create_connection(server.address) as sock:
            sock.sendall(request_frame(17, handshake_version, 1, "x",
                                       wire.handshake_request(handshake_version, "PLAIN")))
            assert len(_frames(_received(sock, 0.3)[0])) == 1
            guess = b"\0admin\0guess"
            started = time.monotonic()
            sock.sendall(request_frame(36, 2, 2, "x", wire.authenticate_request(2, guess)) if handshake_version
                         else struct.pack(">i", len(guess)) + guess)
            sock.settimeout(5)
            first = sock.recv(65536)  # the refusal (v1), or the close with no answer (v0)
            elapsed = time.monotonic() - started
            assert elapsed >= 0.55, elapsed
            assert bool(first) == bool(handshake_version)
        with _logged_in(server, b"admin", b"admin-secret"):  # a right password is not delayed
            pass


def test_plain_compares_passwords_of_one_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """compare_digest answers at once for inputs of different lengths: what PLAIN compares must not be the
    passwords themselves, else the time taken tells the length of a user's password."""
    from idemcore.broker.security import sasl_server

    compared: list[tuple[int, int]] = []
    real = sasl_server.hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return real(a, b)
    monkeypatch.setattr(sasl_server.hmac, "compare_digest", recording)
    for user, password in (("dave", "x"), ("dave", "a much longer guess than the password"), ("nobody", "x"),
                           ("dave", "dave-secret")):
        server = sasl_server.SaslAuthenticator(("PLAIN",), {"dave": "dave-secret"}, None, "10.0.0.9")
        server.handshake("PLAIN")
        step = server.authenticate(f"\0{user}\0{password}".encode())
        assert step.complete == (password == "dave-secret")
    assert len(compared) == 4 and len(set(compared)) == 1 and compared[0][0] == compared[0][1]


@pytest.mark.parametrize(("acl_host", "peer"), [("0:0:0:0:0:0:0:1", "::1"), ("FE80::1", "fe80::1"),
                                                ("::ffff:10.0.0.5", "10.0.0.5"), ("10.0.0.5", "::ffff:10.0.0.5"),
                                                ("2001:db8:0:0::7", "2001:db8::7")])
def test_a_deny_acl_applies_to_its_host_however_the_address_is_written(acl_host: str, peer: str) -> None:
    """A DENY naming the client's address in another form than the peer's was ignored: the ALLOW beside it won."""
    from idemcore.broker.security.authorizer import AclAuthorizer
    from idemcore.broker.security.session import KafkaPrincipal, Session
    from idemcore.protocol.acls import (
        WILDCARD_HOST,
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        AclResourceType,
        ResourcePattern,
    )

    authorizer = AclAuthorizer()
    topic = ResourcePattern(AclResourceType.TOPIC, "payroll")
    assert authorizer.create_acls([
        AclBinding(topic, AccessControlEntry("User:eve", WILDCARD_HOST, AclOperation.READ, AclPermissionType.ALLOW)),
        AclBinding(topic, AccessControlEntry("User:eve", acl_host, AclOperation.READ, AclPermissionType.DENY)),
        AclBinding(ResourcePattern(AclResourceType.GROUP, "g"), AccessControlEntry(
            "User:eve", acl_host, AclOperation.READ, AclPermissionType.ALLOW))]) == [None] * 3
    eve = Session(KafkaPrincipal("User", "eve"), peer)
    assert not authorizer.authorize(eve, AclOperation.READ, AclResourceType.TOPIC, "payroll")
    assert authorizer.authorize(Session(KafkaPrincipal("User", "eve"), "192.0.2.1"), AclOperation.READ,
                                AclResourceType.TOPIC, "payroll")
    # The index of authorize_by_resource_type reads the host in the same form.
    assert authorizer.authorize_by_resource_type(eve, AclOperation.READ, AclResourceType.GROUP)


def test_a_client_cannot_forge_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    """Names a client chooses reach the log: before authentication the mechanism asked for, after it a group or
    transactional id refused; a line break in them would start a line the client wrote."""
    import logging

    from idemcore.broker.security.authorizer import AclAuthorizer
    from idemcore.broker.security.request_authorization import authorized_handle
    from idemcore.broker.security.sasl_server import SaslAuthenticator
    from idemcore.broker.security.session import KafkaPrincipal, Session
    from idemcore.net.membership import HeartbeatRequest

    forged = "x\nINFO Principal = User:admin is Allowed Operation = All\r"
    caplog.set_level(logging.INFO, logger="idemcore.broker.security")
    SaslAuthenticator(("PLAIN",), {}, None, "10.0.0.9").handshake(forged)
    authorized_handle(lambda r: None, AclAuthorizer(), Session(KafkaPrincipal("User", "eve"), "10.0.0.9"),
                      HeartbeatRequest(forged, 1, "m"))
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2 and all("x\\nINFO" in m and "\n" not in m and "\r" not in m for m in messages)


def test_the_scram_credentials_file_is_never_readable_by_others(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Its keys allow a dictionary attack on the passwords: owner only from its first byte, not chmod'ed after the
    rename (a reader polling the log dir caught it meanwhile), and not a crash's partial file's mode either."""
    import os

    from idemcore.broker.security.scram_credentials import FileScramCredentialStore
    from idemcore.net import scram
    from idemcore.record.kafka_files import writers

    modes: list[int] = []
    replace = os.replace

    def seen_at_rename(source: str, target: str) -> None:
        modes.append(os.stat(source).st_mode & 0o777)
        replace(source, target)
    monkeypatch.setattr(writers.os, "replace", seen_at_rename)
    store = FileScramCredentialStore(tmp_path, fsync=False)
    (tmp_path / (store.path.name + writers.TEMPORARY_SUFFIX)).write_text("left by a crash")
    os.chmod(tmp_path / (store.path.name + writers.TEMPORARY_SUFFIX), 0o644)
    assert store.alter("carol", {"SCRAM-SHA-256": scram.make_credential(scram.SCRAM_SHA_256, "pw", 4096)}) is None
    assert modes == [0o600] and os.stat(store.path).st_mode & 0o777 == 0o600
