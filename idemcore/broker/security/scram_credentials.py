"""Where a broker keeps its users' SCRAM credentials (Kafka's ``CredentialCache`` over ``ScramCredentialUtils``).

Alone, a broker keeps them in one file of its log dir, ``scram-credentials.json``: ``{"version": 1, "users":
{"alice": {"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=4096"}}}`` written whole
(``write_file_atomically``, readable by its owner only); a damaged file stops the broker in one line naming it.

In a cluster they live in ZooKeeper where Kafka's ZooKeeper mode keeps them: ``/config/users/<user>`` holds
``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,..."}}`` (other keys there, such as quotas, are kept as they
are), and every change leaves ``/config/changes/config_change_NNNNNNNNNN`` ``{"version":2,"entity_path":
"users/<user>"}`` so every broker reloads that user (Kafka's ``ZkConfigManager``). Changes are made by
compare-and-set on the node's version, retried when another writer came first.

Every store answers ``get(user, mechanism)`` from memory: the authenticator asks it on the connection's path."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idemcore.errors import IdemcoreError
from idemcore.net.scram import MECHANISMS, ScramCredential
from idemcore.protocol.codes import ErrorCode
from idemcore.record.kafka_files.writers import write_file_atomically

if TYPE_CHECKING:
    from idemcore.broker.controller.zk_client import ZkClient

log = logging.getLogger(__name__)

FILE_NAME = "scram-credentials.json"
FILE_VERSION = 1
USERS = "users"
#: A user's credentials by mechanism name.
Credentials = dict[str, ScramCredential]
#: ``(error code, message)`` of a change refused, None when made.
Refusal = tuple[int, str] | None
_CAS_ATTEMPTS = 20
#: Kafka's ``ZkNodeChangeNotificationListener``: a notification older than this has been seen by every broker.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class ScramStoreError(IdemcoreError):
    """The credential store cannot be read (one line naming the file or node and what is wrong)."""


def _apply(current: Credentials, upserts: Mapping[str, ScramCredential],
           deletions: frozenset[str]) -> tuple[Credentials, Refusal]:
    """The user's credentials after the change, or the refusal (Kafka's: deleting a credential the user lacks)."""
    if any(mechanism not in current for mechanism in deletions):
        return current, (int(ErrorCode.RESOURCE_NOT_FOUND), "Attempt to delete a user credential that does not exist")
    changed = {m: c for m, c in current.items() if m not in deletions}
    changed.update(upserts)
    return changed, None


class ScramCredentialStore:
    """The credentials in memory (a store that keeps nothing durable: a broker made without a log dir)."""

    def __init__(self) -> None:
        self._users: dict[str, Credentials] = {}
        self._lock = threading.Lock()

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        credentials = self._users.get(user)
        return None if credentials is None else credentials.get(mechanism)

    def user(self, name: str) -> Credentials:
        return dict(self._users.get(name, {}))

    def users(self) -> dict[str, Credentials]:
        """Every user with at least one credential."""
        return {name: dict(credentials) for name, credentials in self._users.items() if credentials}

    def alter(self, user: str, upserts: Mapping[str, ScramCredential], deletions: frozenset[str] = frozenset()
              ) -> Refusal:
        """Make ``user``'s ``upserts`` and ``deletions`` together, durably, or none of them (the refusal)."""
        with self._lock:
            changed, refusal = _apply(self.user(user), upserts, deletions)
            if refusal is None:
                self._write(user, changed)
            return refusal

    def _write(self, user: str, credentials: Credentials) -> None:
        self._set(user, credentials)

    def _set(self, user: str, credentials: Credentials) -> None:
        users = dict(self._users)  # replaced whole: readers on other threads see one state or the other
        if credentials:
            users[user] = credentials
        else:
            users.pop(user, None)
        self._users = users

    def close(self) -> None:
        """Stop following changes (only a ZooKeeper store follows any)."""


# ---------------------------------------------------------------- alone: a file in the log dir


def _credentials_of(config: Mapping[str, Any], where: str) -> Credentials:
    found: Credentials = {}
    for key, value in config.items():
        if key in MECHANISMS:
            if not isinstance(value, str):
                raise ScramStoreError(f"{where}: {key} is {type(value).__name__}, not Kafka's credential text")
            try:
                found[key] = ScramCredential.from_text(value)
            except ValueError as error:
                raise ScramStoreError(f"{where}: {key}: {error}") from None
    return found


class FileScramCredentialStore(ScramCredentialStore):
    """The credentials of a broker alone: ``<data_dir>/scram-credentials.json`` (module docstring)."""

    def __init__(self, data_dir: str | os.PathLike[str], fsync: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / FILE_NAME
        self.fsync = fsync
        self._users = self._read()

    def _read(self) -> dict[str, Credentials]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise ScramStoreError(f"{self.path}: cannot be read: {error.strerror}") from None
        try:
            document = json.loads(data)
        except ValueError as error:
            raise ScramStoreError(f"{self.path} is damaged (not JSON: {error}); restore it or remove it and set the "
                                  "users again") from None
        if not isinstance(document, dict) or document.get("version") != FILE_VERSION \
                or not isinstance(document.get(USERS), dict):
            raise ScramStoreError(f"{self.path} is not a version {FILE_VERSION} credential file "
                                  '({"version": 1, "users": {...}})')
        users: dict[str, Credentials] = {}
        for name, config in document[USERS].items():
            if not isinstance(config, dict):
                raise ScramStoreError(f"{self.path}: user {name!r} is not a mapping of mechanisms")
            users[name] = _credentials_of(config, f"{self.path}: user {name!r}")
        return users

    def _write(self, user: str, credentials: Credentials) -> None:
        users = dict(self._users)
        users[user] = credentials
        document = {"version": FILE_VERSION, USERS: {
            name: {m: c.to_text() for m, c in sorted(creds.items())} for name, creds in sorted(users.items()) if creds}}
        # The keys allow a dictionary attack on the passwords: owner only, from the first byte written (a chmod
        # after the rename left the new file readable by all meanwhile).
        write_file_atomically(self.path, json.dumps(document, indent=1).encode(), fsync=self.fsync, mode=0o600)
        self._set(user, credentials)


# ---------------------------------------------------------------- a cluster: ZooKeeper


def sanitized(user: str) -> str:
    """``user`` as a ZooKeeper node name (Kafka's ``Sanitizer.sanitize``: URL-encoded, ``*`` as ``%2A``)."""
    return urllib.parse.quote(user, safe="-_.").replace("*", "%2A")


def desanitized(name: str) -> str:
    return urllib.parse.unquote(name)


class ZkScramCredentialStore(ScramCredentialStore):
    """The credentials of a cluster, in ZooKeeper (module docstring). A thread follows ``/config/changes`` and
    reloads each user a notification names; :meth:`close` stops it."""

    def __init__(self, zk: ZkClient, follow: bool = True) -> None:
        """``follow=False``: read once and write, without following other writers' changes."""
        super().__init__()
        self.zk = zk
        self._changed = threading.Event()
        self._closed = False
        self._seen = ""
        if follow:  # the notifications first: a change made while the users load is followed, not missed
            self._seen = max(zk.config_changes(watch=self._on_change), default="")
        for node in zk.entity_names(USERS):
            self._reload(node)
        if follow:
            zk.on_new_session(self._changed.set)  # watches do not survive a new session: look again
            threading.Thread(target=self._follow, name="scram-credentials", daemon=True).start()

    def _on_change(self, _event: object) -> None:  # on kazoo's thread: only hands over
        self._changed.set()

    def _reload(self, node: str) -> None:
        found = self.zk.entity_config_node(USERS, node)
        try:
            config = {} if found is None else self._config(found[0], node)
            credentials = _credentials_of(config, f"/config/users/{node}")
        except ScramStoreError as error:  # one damaged user must not take the others' down
            log.warning("ignoring the SCRAM credentials of %s", error)
            credentials = {}
        self._set(desanitized(node), credentials)

    @staticmethod
    def _config(data: bytes, node: str) -> dict[str, Any]:
        try:
            document = json.loads(data or b"{}")
        except ValueError as error:
            raise ScramStoreError(f"/config/users/{node}: not JSON ({error})") from None
        config = document.get("config", {}) if isinstance(document, dict) else None
        if not isinstance(config, dict):
            raise ScramStoreError(f"/config/users/{node}: no config object")
        return config

    def _follow(self) -> None:
        failing = False
        while not self._closed:
            if not self._changed.wait(1.0):
                continue
            self._changed.clear()
            try:
                changes = self.zk.config_changes(watch=self._on_change)
                for change in changes:
                    if change <= self._seen:
                        continue
                    entity, made_ms = self.zk.config_change_entity(change)
                    kind, _, node = (entity or "").partition("/")
                    if kind == USERS and node and "/" not in node:
                        self._reload(node)
                    self._seen = change
                    if made_ms and time.time() * 1000 - made_ms > CHANGE_EXPIRATION_MS:
                        self.zk.delete_config_change(change)  # as Kafka's listener purges what all have seen
                failing = False
            except Exception as error:  # ZooKeeper away for longer than the session: try again later
                if self._closed:
                    return
                if not failing:  # said once per outage, not once a second
                    log.warning("SCRAM credentials not reloaded from ZooKeeper: %s", error)
                failing = True
                time.sleep(1.0)
                self._changed.set()

    def alter(self, user: str, upserts: Mapping[str, ScramCredential], deletions: frozenset[str] = frozenset()
              ) -> Refusal:
        node = sanitized(user)
        for _ in range(_CAS_ATTEMPTS):
            found = self.zk.entity_config_node(USERS, node)
            document: dict[str, Any] = {"version": 1, "config": {}}
            if found is not None and found[0]:
                document = {"version": 1, "config": self._config(found[0], node)}
            config: dict[str, Any] = document["config"]
            current = _credentials_of(config, f"/config/users/{node}")
            changed, refusal = _apply(current, upserts, deletions)
            if refusal is not None:
                return refusal
            for mechanism in MECHANISMS:
                config.pop(mechanism, None)
            config.update({m: c.to_text() for m, c in changed.items()})
            data = json.dumps(document, separators=(",", ":")).encode()
            if self.zk.set_entity_config_node(USERS, node, data, None if found is None else found[1]):
                self._set(user, changed)
                return None
        raise ScramStoreError(f"/config/users/{node}: changed by others {_CAS_ATTEMPTS} times while being written")

    def close(self) -> None:
        self._closed = True
        self._changed.set()


class ClusterScramCredentials:
    """A cluster member's store, made once the member has its ZooKeeper session (after it starts): until then
    nobody can authenticate with SCRAM and changes are refused."""

    def __init__(self, zk_of: Callable[[], ZkClient | None]) -> None:
        self._zk_of = zk_of
        self._store: ZkScramCredentialStore | None = None
        self._lock = threading.Lock()

    def _ready(self) -> ZkScramCredentialStore | None:
        if self._store is None:
            zk = self._zk_of()
            if zk is None:
                return None
            with self._lock:
                if self._store is None:
                    self._store = ZkScramCredentialStore(zk)
        return self._store

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        store = self._ready()
        return None if store is None else store.get(user, mechanism)

    def user(self, name: str) -> Credentials:
        store = self._ready()
        return {} if store is None else store.user(name)

    def users(self) -> dict[str, Credentials]:
        store = self._ready()
        return {} if store is None else store.users()

    def alter(self, user: str, upserts: Mapping[str, ScramCredential], deletions: frozenset[str] = frozenset()
              ) -> Refusal:
        store = self._ready()
        if store is None:
            raise ScramStoreError("this broker has not joined its cluster yet (no ZooKeeper session)")
        return store.alter(user, upserts, deletions)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def store_for(data_dir: str | os.PathLike[str] | None, cluster: Any, fsync: bool = True
              ) -> ScramCredentialStore | ClusterScramCredentials:
    """A broker's store: ZooKeeper for a cluster member (``cluster.zk`` once it has joined), the log dir's file for
    a broker alone, memory for a broker without a log dir."""
    if cluster is not None:
        return ClusterScramCredentials(lambda: cluster.zk)
    if data_dir is not None:
        return FileScramCredentialStore(data_dir, fsync)
    return ScramCredentialStore()
