"""Where ACLs are kept durable: :class:`FileAclStore` (a broker alone: ``acls.json`` in its log directory),
:class:`ZkAclStore` (a broker of a cluster: ZooKeeper, under Kafka's paths, so every broker and Kafka's own tools
see the same ACLs), :class:`MemoryAclStore` (a broker without a log directory: none).

ZooKeeper holds them as Kafka's ``ZkAclStore`` does: one node per resource pattern, ``/kafka-acl/<Type>/<name>``
for literal patterns and ``/kafka-acl-extended/prefixed/<Type>/<name>`` for prefixed ones, each
``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}``,
changed by compare-and-set on its version (read again and retried on a conflict); after each change a sequential
notification (``/kafka-acl-changes/acl_changes_NNNNNNNNNN`` holding ``Topic:name``; ``/kafka-acl-extended-changes/
acl_changes_...`` holding Kafka's ``ExtendedAclChangeEvent`` JSON) tells every broker to read that resource again.
Notifications older than Kafka's 15 minutes are deleted as they are seen.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from idemcore.errors import IdemcoreError, one_line
from idemcore.protocol.acls import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    ResourcePattern,
)
from idemcore.record.kafka_files.writers import write_file_atomically

log = logging.getLogger(__name__)

Entries = frozenset[AccessControlEntry]
Change = Callable[[Entries], Entries]
#: Told that another broker changed a pattern's ACLs: ``changed(pattern, read)``, ``read()`` giving its entries as the
#: store has them now (called under the authorizer's lock, so a read and its use are not overtaken by another).
Changed = Callable[[ResourcePattern, Callable[[], Entries]], None]

#: The file a broker alone keeps its ACLs in, in its log directory.
ACL_FILE = "acls.json"
#: The version of the file's and of the ZooKeeper nodes' JSON.
ACL_JSON_VERSION = 1

LITERAL_ACL_PATH = "/kafka-acl"
PREFIXED_ACL_PATH = "/kafka-acl-extended/prefixed"
LITERAL_CHANGE_PATH = "/kafka-acl-changes"
EXTENDED_CHANGE_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
#: How long a change notification is kept (Kafka's ``ZkNodeChangeNotificationListener`` default).
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
#: How many times a resource's node is read again and rewritten after losing a compare-and-set (Kafka: 10).
MAX_UPDATE_RETRIES = 10


class AclStoreError(IdemcoreError):
    """The ACLs could not be read (a damaged file or node) or written; one line naming where."""


class AclStore(Protocol):
    """What :class:`~idemcore.broker.security.authorizer.AclAuthorizer` keeps its ACLs in."""

    #: Whether a write waits on another machine (ZooKeeper): the broker then makes it off its loop.
    remote: bool

    def load(self) -> dict[ResourcePattern, Entries]:
        """Every resource pattern that has ACLs, with them."""
        ...

    def update(self, changes: Mapping[ResourcePattern, Change]) -> dict[ResourcePattern, Entries | Exception]:
        """Apply each change (current entries -> new entries) durably; per pattern its entries now, or the
        exception that kept it from being written. A change may be called more than once (a lost race)."""
        ...

    def watch(self, changed: Changed) -> None:
        """Call ``changed(pattern, read)`` when another broker changes a resource's ACLs (on another thread)."""
        ...

    def close(self) -> None:
        ...


# ---------------------------------------------------------------- JSON, as Kafka's AclEntry writes it


def entries_to_json(entries: Entries) -> list[dict[str, str]]:
    return [{"principal": e.principal, "permissionType": e.permission.kafka_name, "operation": e.operation.kafka_name,
             "host": e.host} for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))]


def entries_from_json(acls: Any) -> Entries:
    """The entries of a node's or file's ``acls`` list; ValueError naming what is wrong."""
    if not isinstance(acls, list):
        raise ValueError(f"acls is not a list: {acls!r:.80}")
    entries = set()
    for acl in acls:
        if not isinstance(acl, dict) or not all(isinstance(acl.get(k), str)
                                                for k in ("principal", "permissionType", "operation", "host")):
            raise ValueError(f"an ACL is not principal, permissionType, operation and host strings: {acl!r:.120}")
        entry = AccessControlEntry(acl["principal"], acl["host"],
                                   AclOperation.from_kafka_name(acl["operation"]),  # type: ignore[arg-type]
                                   AclPermissionType.from_kafka_name(acl["permissionType"]))  # type: ignore[arg-type]
        problem = entry.problem()
        if problem is not None:
            raise ValueError(problem)
        entries.add(entry)
    return frozenset(entries)


def _node_json(entries: Entries) -> bytes:
    return json.dumps({"version": ACL_JSON_VERSION, "acls": entries_to_json(entries)}).encode()


def _parse_node(data: bytes, where: str) -> Entries:
    try:
        body = json.loads(data) if data else {"acls": []}
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        return entries_from_json(body.get("acls", []))
    except (ValueError, UnicodeDecodeError) as error:
        raise AclStoreError(f"the ACLs of {where} cannot be read: {one_line(error)}") from None


# ---------------------------------------------------------------- in memory


class MemoryAclStore:
    """ACLs kept in memory only (a broker without a log directory): gone when the process ends."""

    #: Whether a write waits on another machine (then the broker makes it off its loop).
    remote = False

    def __init__(self) -> None:
        self._acls: dict[ResourcePattern, Entries] = {}

    def load(self) -> dict[ResourcePattern, Entries]:
        return dict(self._acls)

    def update(self, changes: Mapping[ResourcePattern, Change]) -> dict[ResourcePattern, Entries | Exception]:
        done: dict[ResourcePattern, Entries | Exception] = {}
        for pattern, change in changes.items():
            entries = change(self._acls.get(pattern, frozenset()))
            _put(self._acls, pattern, entries)
            done[pattern] = entries
        return done

    def watch(self, changed: Changed) -> None:
        pass  # nobody else changes them

    def close(self) -> None:
        pass


def _put(acls: dict[ResourcePattern, Entries], pattern: ResourcePattern, entries: Entries) -> None:
    if entries:
        acls[pattern] = entries
    else:
        acls.pop(pattern, None)


# ---------------------------------------------------------------- a file in the log directory


class FileAclStore(MemoryAclStore):
    """ACLs in ``<log dir>/acls.json``, rewritten whole (atomically, fsync'd) at each change:
    ``{"version":1,"resources":[{"resourceType":"Topic","name":"t","patternType":"LITERAL","acls":[...]}]}``.
    A file that cannot be read is refused at start (AclStoreError, one line) rather than taken as no ACLs,
    which would open or close every resource."""

    def __init__(self, directory: str | Path, fsync: bool = True) -> None:
        super().__init__()
        self.path = Path(directory) / ACL_FILE
        self.fsync = fsync
        if self.path.exists():
            self._acls = self._read()

    def _read(self) -> dict[ResourcePattern, Entries]:
        try:
            body = json.loads(self.path.read_bytes())
            if not isinstance(body, dict) or body.get("version") != ACL_JSON_VERSION:
                raise ValueError(f"not a version {ACL_JSON_VERSION} ACL file")
            acls: dict[ResourcePattern, Entries] = {}
            for resource in body["resources"]:
                pattern = ResourcePattern(
                    AclResourceType.from_kafka_name(resource["resourceType"]),  # type: ignore[arg-type]
                    resource["name"], PatternType.from_kafka_name(resource["patternType"]))  # type: ignore[arg-type]
                problem = pattern.problem()
                if problem is not None:
                    raise ValueError(problem)
                _put(acls, pattern, entries_from_json(resource["acls"]))
            return acls
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
            raise AclStoreError(f"{self.path} is damaged ({type(error).__name__}: {one_line(error)}); restore it "
                                "or move it away to start without ACLs") from None
        except OSError as error:
            raise AclStoreError(f"{self.path} cannot be read: {one_line(error)}") from None

    def update(self, changes: Mapping[ResourcePattern, Change]) -> dict[ResourcePattern, Entries | Exception]:
        before = dict(self._acls)
        done = super().update(changes)
        if self._acls == before:  # e.g. a delete that matched nothing
            return done
        resources = [{"resourceType": p.resource_type.kafka_name, "name": p.name, "patternType": p.pattern_type.name,
                      "acls": entries_to_json(entries)}
                     for p, entries in sorted(self._acls.items(), key=lambda item: str(item[0]))]
        try:
            write_file_atomically(self.path, json.dumps({"version": ACL_JSON_VERSION, "resources": resources},
                                                        indent=1).encode(), fsync=self.fsync)
        except OSError as error:
            self._acls = before
            failure = AclStoreError(f"{self.path} cannot be written: {one_line(error)}")
            return {pattern: failure for pattern in changes}
        return done


# ---------------------------------------------------------------- ZooKeeper


def resource_type_of(name: str) -> AclResourceType:
    return AclResourceType.from_kafka_name(name)  # type: ignore[return-value]


def node_path(pattern: ResourcePattern) -> str:
    """The node of a pattern's ACLs (Kafka's ``ZkAclStore.path``)."""
    root = LITERAL_ACL_PATH if pattern.pattern_type == PatternType.LITERAL else PREFIXED_ACL_PATH
    return f"{root}/{pattern.resource_type.kafka_name}/{pattern.name}"


def change_notification(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The sequential node's path prefix and data telling brokers that ``pattern``'s ACLs changed."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{LITERAL_CHANGE_PATH}/{CHANGE_PREFIX}", f"{pattern.resource_type.kafka_name}:{pattern.name}".encode()
    event = {"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
             "patternType": pattern.pattern_type.name}
    return f"{EXTENDED_CHANGE_PATH}/{CHANGE_PREFIX}", json.dumps(event).encode()


def pattern_of_notification(root: str, data: bytes) -> ResourcePattern:
    """The pattern a change notification under ``root`` names; ValueError for one that cannot be read."""
    text = data.decode()
    if root == LITERAL_CHANGE_PATH:
        kind, colon, name = text.partition(":")
        if not colon:
            raise ValueError(f"change notification {text!r:.80} is not Type:name")
        return ResourcePattern(resource_type_of(kind), name, PatternType.LITERAL)
    event = json.loads(text)
    return ResourcePattern(resource_type_of(event["resourceType"]), event["name"],
                           PatternType.from_kafka_name(event["patternType"]))  # type: ignore[arg-type]


class ZkAclStore:
    """ACLs in ZooKeeper ``hosts`` (which may end in a chroot, as ``zookeeper.connect``), over a session of their
    own as Kafka's AclAuthorizer has."""

    remote = True

    def __init__(self, hosts: str, *, session_timeout_ms: int = 18_000, connection_timeout_ms: int = 18_000,
                 clock: Callable[[], float] = time.time) -> None:
        from kazoo.client import KazooClient  # optional dependency: only a cluster imports it

        from idemcore.broker.controller.zk_client import ZkError, ensure_chroot

        self.hosts = hosts
        self._clock = clock
        try:
            ensure_chroot(hosts, connection_timeout_ms)
        except ZkError as error:
            raise AclStoreError(f"ACLs: {error}") from None
        self._kazoo = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000,
                                  command_retry={"max_tries": -1, "deadline": session_timeout_ms / 1000,
                                                 "max_delay": 1.0},
                                  connection_retry={"max_tries": -1, "max_delay": 1.0})
        try:
            self._kazoo.start(timeout=connection_timeout_ms / 1000)
        except Exception as error:  # a timeout, a bad host
            self._kazoo.close()
            raise AclStoreError(f"ZooKeeper {hosts} (ACLs) did not answer within {connection_timeout_ms} ms: "
                                f"{one_line(error)}") from None
        for path in (LITERAL_ACL_PATH, PREFIXED_ACL_PATH, LITERAL_CHANGE_PATH, EXTENDED_CHANGE_PATH):
            self._call(self._kazoo.ensure_path, path)
        self._watchers: list[Changed] = []
        self._last_seen: dict[str, int] = {LITERAL_CHANGE_PATH: -1, EXTENDED_CHANGE_PATH: -1}
        self._wakeups: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._session_lost = False
        self._kazoo.add_listener(self._on_state)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
        from kazoo.retry import RetryFailedError

        try:
            return self._kazoo.retry(fn, *args, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except (KazooException, RetryFailedError) as error:
            raise AclStoreError(f"ZooKeeper {self.hosts} (ACLs): {type(error).__name__} {one_line(error)}") from None

    def read(self, pattern: ResourcePattern) -> tuple[Entries, int]:
        """A pattern's entries and its node's version (-1: no node)."""
        from kazoo.exceptions import NoNodeError

        path = node_path(pattern)
        try:
            data, stat = self._call(self._kazoo.get, path)
        except NoNodeError:
            return frozenset(), -1
        return _parse_node(data, f"ZooKeeper node {path}"), stat.version

    def load(self) -> dict[ResourcePattern, Entries]:
        """Every pattern's ACLs (Kafka's ``loadAllAcls``); a resource type this broker does not know is skipped
        with a warning, a node it cannot read refused."""
        from kazoo.exceptions import NoNodeError

        acls: dict[ResourcePattern, Entries] = {}
        for root, pattern_type in ((LITERAL_ACL_PATH, PatternType.LITERAL), (PREFIXED_ACL_PATH, PatternType.PREFIXED)):
            for kind in self._call(self._kazoo.get_children, root):
                try:
                    resource_type = resource_type_of(kind)
                except ValueError:
                    log.warning("ignoring the ACLs of unknown resource type %s in ZooKeeper %s", kind, root)
                    continue
                try:
                    names = self._call(self._kazoo.get_children, f"{root}/{kind}")
                except NoNodeError:
                    continue
                for name in names:
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    _put(acls, pattern, self.read(pattern)[0])
        return acls

    def update(self, changes: Mapping[ResourcePattern, Change]) -> dict[ResourcePattern, Entries | Exception]:
        done: dict[ResourcePattern, Entries | Exception] = {}
        for pattern, change in changes.items():
            try:
                done[pattern] = self._update_one(pattern, change)
            except (AclStoreError, ValueError) as error:
                done[pattern] = error
        return done

    def _update_one(self, pattern: ResourcePattern, change: Change) -> Entries:
        """Compare-and-set the pattern's node (Kafka's ``updateResourceAcls``), then leave a change notification
        when its entries changed."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = node_path(pattern)
        current, version = self.read(pattern)
        for _ in range(MAX_UPDATE_RETRIES + 1):
            entries = change(current)
            try:
                if entries == current:
                    break
                if not entries:
                    self._call(self._kazoo.delete, path, version=version)
                elif version < 0:
                    self._call(self._kazoo.create, path, _node_json(entries), makepath=True)
                else:
                    self._call(self._kazoo.set, path, _node_json(entries), version=version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):  # another broker wrote it first
                time.sleep((100 + random.randrange(50)) / 1000)
                current, version = self.read(pattern)
        else:
            raise AclStoreError(f"the ACLs of {pattern} could not be written after {MAX_UPDATE_RETRIES} retries "
                                "(other brokers kept changing them)")
        if entries != current:
            prefix, data = change_notification(pattern)
            self._call(self._kazoo.create, prefix, data, sequence=True, makepath=True)
        return entries

    # -- change notifications --------------------------------------------------------------------------------

    def watch(self, changed: Changed) -> None:
        """Follow both change paths: each new notification makes ``changed`` see its resource as ZooKeeper has it
        now. kazoo's watches only wake a thread of this store's, which reads ZooKeeper."""
        self._watchers.append(changed)
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._follow, name="acl-changes", daemon=True)
        self._thread.start()
        for root in (LITERAL_CHANGE_PATH, EXTENDED_CHANGE_PATH):
            self._wakeups.put(root)

    def _watch_fired(self, event: Any) -> None:
        self._wakeups.put(event.path)

    def _on_state(self, state: str) -> None:
        """A new session after an expired one has no watches, and changes may have come meanwhile: read both change
        paths again (on kazoo's thread: only wakes the follower)."""
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost and self._thread is not None:
            self._session_lost = False
            for root in (LITERAL_CHANGE_PATH, EXTENDED_CHANGE_PATH):
                self._wakeups.put(root)

    def _follow(self) -> None:
        while True:
            root = self._wakeups.get()
            if root is None or self._closed:
                return
            try:
                self._process(root)
            except Exception as error:  # ZooKeeper gone for a while: the next wakeup (or a session's) tries again
                if self._closed:
                    return
                log.warning("could not read the ACL changes under %s: %s", root, one_line(error))
                time.sleep(1.0)
                self._wakeups.put(root)

    def _process(self, root: str) -> None:
        from kazoo.exceptions import NoNodeError

        children = self._call(self._kazoo.get_children, root, watch=self._watch_fired)
        now_ms = self._clock() * 1000
        for child in sorted(c for c in children if c.startswith(CHANGE_PREFIX) and c[len(CHANGE_PREFIX):].isdigit()):
            number = int(child[len(CHANGE_PREFIX):])
            path = f"{root}/{child}"
            try:
                data, stat = self._call(self._kazoo.get, path)
            except NoNodeError:
                continue
            if number > self._last_seen[root]:
                self._last_seen[root] = number
                try:
                    pattern = pattern_of_notification(root, data)
                except (ValueError, KeyError, UnicodeDecodeError) as error:
                    log.warning("ignoring ACL change notification %s: %s", path, one_line(error))
                    continue
                for changed in list(self._watchers):
                    changed(pattern, lambda pattern=pattern: self.read(pattern)[0])  # type: ignore[misc]
            if now_ms - stat.ctime > CHANGE_EXPIRATION_MS:  # old enough that every broker has seen it
                try:
                    self._call(self._kazoo.delete, path)
                except NoNodeError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._wakeups.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._kazoo.stop()
        self._kazoo.close()
