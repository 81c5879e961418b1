"""SCRAM credentials kept durably (a log-dir file alone, ZooKeeper in a cluster) and the KIP-554 handlers' rules."""

from __future__ import annotations

import json
import os

import pytest

from idemcore.broker import Broker
from idemcore.broker.security.scram_credentials import (
    FILE_NAME,
    FileScramCredentialStore,
    ScramCredentialStore,
    ScramStoreError,
    sanitized,
)
from idemcore.broker.security.scram_requests import alter, describe
from idemcore.net import scram
from idemcore.net.scram_credentials import (
    AlteredUser,
    AlterUserScramCredentialsRequest,
    CredentialInfo,
    DescribedUser,
    DescribeUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)

SHA256, SHA512 = scram.SCRAM_SHA_256, scram.SCRAM_SHA_512


def upsert(user: str, mechanism: scram.ScramMechanism = SHA256, password: str = "pw",
           iterations: int = 4096) -> ScramCredentialUpsertion:
    salt = os.urandom(16)
    return ScramCredentialUpsertion(user, mechanism.wire_type, iterations, salt,
                                    scram.salted_password(mechanism, password, salt, iterations))


def verifies(credential: scram.ScramCredential | None, mechanism: scram.ScramMechanism, password: str) -> bool:
    """Does ``password`` give this credential's stored key (what an authentication checks)?"""
    assert credential is not None
    salted = scram.salted_password(mechanism, password, credential.salt, credential.iterations)
    return scram.stored_key(mechanism, scram.client_key(mechanism, salted)) == credential.stored_key


# ---------------------------------------------------------------- the handlers' rules


def test_alter_then_describe() -> None:
    store = ScramCredentialStore()
    answer = alter(store, AlterUserScramCredentialsRequest(upsertions=(
        upsert("alice"), upsert("alice", SHA512, iterations=8192), upsert("bob")), request_id=3))
    assert answer.results == (AlteredUser("alice", 0), AlteredUser("bob", 0)) and answer.request_id == 3
    assert verifies(store.get("alice", "SCRAM-SHA-512"), SHA512, "pw")
    described = describe(store, DescribeUserScramCredentialsRequest(None))
    assert described.results == (
        DescribedUser("alice", 0, None, (CredentialInfo(1, 4096), CredentialInfo(2, 8192))),
        DescribedUser("bob", 0, None, (CredentialInfo(1, 4096),)))


def test_describe_errors_are_kafkas() -> None:
    store = ScramCredentialStore()
    alter(store, AlterUserScramCredentialsRequest(upsertions=(upsert("alice"),)))
    described = describe(store, DescribeUserScramCredentialsRequest(("alice", "nobody", "dup", "dup", "")))
    assert described.error_code == 0
    assert described.results == (
        DescribedUser("alice", 0, None, (CredentialInfo(1, 4096),)),
        DescribedUser("nobody", 91, "Attempt to describe a user credential that does not exist: nobody"),
        DescribedUser("dup", 92, "Cannot describe SCRAM credentials for the same user twice in a single request: dup"),
        DescribedUser("", 91, "Username must not be empty"))


def test_alter_errors_are_kafkas_and_each_user_all_or_nothing() -> None:
    store = ScramCredentialStore()
    answer = alter(store, AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion("carol", 2), ScramCredentialDeletion("dave", 1)),
        upsertions=(upsert("carol"), upsert("dave"), upsert("dave"), upsert("few", iterations=4095),
                    upsert("many", SHA512, iterations=16385), upsert("ok", iterations=16384),
                    ScramCredentialUpsertion("weird", 7, 4096, b"s", b"p"), upsert(""))))
    assert answer.results == (
        AlteredUser("carol", 91, "Attempt to delete a user credential that does not exist"),
        AlteredUser("dave", 92, "A user credential cannot be altered twice in the same request"),
        AlteredUser("few", 93, "Too few iterations"),
        AlteredUser("many", 93, "Too many iterations"),
        AlteredUser("ok", 0),
        AlteredUser("weird", 33, "Unknown SCRAM mechanism"),
        AlteredUser("", 93, "Username must not be empty"))
    assert store.users().keys() == {"ok"}  # carol's upsertion was not made: her deletion failed


def test_delete_removes_the_user_once_nothing_is_left() -> None:
    store = ScramCredentialStore()
    alter(store, AlterUserScramCredentialsRequest(upsertions=(upsert("alice"), upsert("alice", SHA512))))
    alter(store, AlterUserScramCredentialsRequest(deletions=(ScramCredentialDeletion("alice", 1),)))
    assert store.get("alice", "SCRAM-SHA-256") is None and store.get("alice", "SCRAM-SHA-512") is not None
    alter(store, AlterUserScramCredentialsRequest(deletions=(ScramCredentialDeletion("alice", 2),)))
    assert store.users() == {}


def test_the_upsertion_repr_holds_no_secret() -> None:
    made = upsert("alice")
    assert made.salted_password.hex() not in repr(made) and str(made.salted_password) not in repr(made)


# ---------------------------------------------------------------- alone: the log dir


def test_the_file_survives_a_restart_through_the_broker(tmp_path) -> None:
    broker = Broker({}, data_dir=tmp_path, fsync=False)
    answer = broker.handle(AlterUserScramCredentialsRequest(upsertions=(upsert("alice", SHA512, "secret"),)))
    assert answer.results == (AlteredUser("alice", 0),)
    broker.close()
    assert oct((tmp_path / FILE_NAME).stat().st_mode & 0o777) == "0o600"
    document = json.loads((tmp_path / FILE_NAME).read_text())
    text = document["users"]["alice"]["SCRAM-SHA-512"]
    assert text.startswith("salt=") and "secret" not in (tmp_path / FILE_NAME).read_text()
    again = Broker({}, data_dir=tmp_path, fsync=False)
    try:
        assert verifies(again.scram_credentials.get("alice", "SCRAM-SHA-512"), SHA512, "secret")
        described = again.handle(DescribeUserScramCredentialsRequest(("alice",)))
        assert described.results == (DescribedUser("alice", 0, None, (CredentialInfo(2, 4096),)),)
    finally:
        again.close()


@pytest.mark.parametrize(("content", "says"), [
    (b"{not json", "is damaged \\(not JSON"),
    (b'{"version": 2, "users": {}}', "not a version 1 credential file"),
    (b'{"version": 1, "users": {"a": {"SCRAM-SHA-256": "salt=xx"}}}', "user 'a': SCRAM-SHA-256: SCRAM credential"),
    (b'{"version": 1, "users": {"a": 3}}', "not a mapping"),
])
def test_a_damaged_file_is_refused_in_one_line(tmp_path, content: bytes, says: str) -> None:
    (tmp_path / FILE_NAME).write_bytes(content)
    with pytest.raises(ScramStoreError, match=says) as caught:
        FileScramCredentialStore(tmp_path)
    assert "\n" not in str(caught.value) and FILE_NAME in str(caught.value)
    with pytest.raises(ScramStoreError):
        Broker({}, data_dir=tmp_path, fsync=False)
    (tmp_path / FILE_NAME).unlink()
    Broker({}, data_dir=tmp_path, fsync=False).close()  # the refusal released the directory's lock


def test_sanitized_names_are_kafkas() -> None:
    assert sanitized("alice") == "alice"
    assert sanitized("a b/c*") == "a%20b%2Fc%2A"


class _Allow:
    """An authorizer allowing only what ``allowed`` names: (operation name, resource type name)."""

    def __init__(self, *allowed: tuple[str, str]) -> None:
        self.allowed = set(allowed)

    def authorize(self, session, operation, resource_type, name) -> bool:  # type: ignore[no-untyped-def]
        return (operation.name, resource_type.name) in self.allowed

    def authorize_by_resource_type(self, session, operation, resource_type) -> bool:  # type: ignore[no-untyped-def]
        return (operation.name, resource_type.name) in self.allowed


def test_the_credential_apis_need_alter_and_describe_on_the_cluster() -> None:
    from idemcore.broker.security.request_authorization import authorized_handle
    from idemcore.broker.security.session import KafkaPrincipal, Session

    store = ScramCredentialStore()
    session = Session(KafkaPrincipal("User", "mallory"), "10.0.0.9")
    handle = {AlterUserScramCredentialsRequest: lambda r: alter(store, r),
              DescribeUserScramCredentialsRequest: lambda r: describe(store, r)}
    request = AlterUserScramCredentialsRequest(deletions=(ScramCredentialDeletion("bob", 1),),
                                               upsertions=(upsert("alice"), upsert("bob", SHA512)), request_id=5)
    denied = authorized_handle(lambda r: handle[type(r)](r), _Allow(("DESCRIBE", "CLUSTER")), session, request)
    assert denied.results == (AlteredUser("bob", 31), AlteredUser("alice", 31)) and denied.request_id == 5
    assert store.users() == {}
    described = authorized_handle(lambda r: handle[type(r)](r), _Allow(("ALTER", "CLUSTER")), session,
                                  DescribeUserScramCredentialsRequest(None, 6))
    assert (described.error_code, described.results, described.request_id) == (31, (), 6)
    allowed = authorized_handle(lambda r: handle[type(r)](r), _Allow(("ALTER", "CLUSTER")), session,
                                AlterUserScramCredentialsRequest(upsertions=(upsert("alice"),)))
    assert allowed.results == (AlteredUser("alice", 0),)
