"""``AclAuthorizer``: Kafka's ACL authorizer (``kafka.security.authorizer.AclAuthorizer``): whether a session may do
an operation on a resource, from the ACLs an :class:`~idemcore.broker.security.acl_store.AclStore` keeps durable.

The rules are Kafka's: a super user (``super.users``) may do anything; otherwise the ACLs that apply to a resource
are those of its literal name, of the wildcard ``*`` and of every prefix of its name (PREFIXED patterns); an entry
applies to the session when its principal is the session's or ``User:*``, its host the client's (IP addresses compared
in one form: ``::1`` is ``0:0:0:0:0:0:0:1``) or ``*``, and its
operation the one asked or ALL. A DENY that applies wins; else an ALLOW that applies grants (an ALLOW of READ,
WRITE, DELETE or ALTER grants DESCRIBE too, and ALTER_CONFIGS grants DESCRIBE_CONFIGS). A resource no ACL
applies to at all is allowed only with ``allow.everyone.if.no.acl.found``.

Checks sit on every request, so neither scans every ACL: :meth:`AclAuthorizer.authorize` looks up the resource's
literal name, the wildcard and the prefixes of lengths some PREFIXED pattern of the type has;
:meth:`~AclAuthorizer.authorize_by_resource_type` (KIP-679) reads an index from (principal, host, operation,
permission, resource type, pattern type) to resource names, as Kafka's ``resourceCache``. Both are read without a
lock (copy-on-write values; writers hold one), since a cluster's change notifications update them from another
thread.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idemcore.broker.security.acl_store import AclStore, Entries, FileAclStore, MemoryAclStore
from idemcore.broker.security.session import WILDCARD_PRINCIPAL, KafkaPrincipal, Session
from idemcore.errors import ConfigError
from idemcore.protocol.acls import (
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    ResourcePattern,
)
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

#: The class names ``authorizer.class.name`` may give (ZooKeeper-mode and KRaft-mode Kafka): both mean this one.
AUTHORIZER_CLASS_NAMES = ("kafka.security.authorizer.AclAuthorizer",
                          "org.apache.kafka.metadata.authorizer.StandardAuthorizer")

_WILDCARD_PRINCIPAL = str(WILDCARD_PRINCIPAL)

#: What an ALLOW of each operation grants besides itself (``AclOperation``'s implications).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset((AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER)),
    AclOperation.DESCRIBE_CONFIGS: frozenset((AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)),
}

_IndexKey = tuple[str, str, AclOperation, AclPermissionType, AclResourceType, PatternType]


@dataclass(frozen=True, slots=True)
class AclError:
    """Why one ACL could not be created or deleted: a Kafka error code and its message."""

    error_code: int
    message: str


def parse_super_users(text: str | None) -> frozenset[KafkaPrincipal]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``); ValueError naming a bad
    one."""
    if not text or not text.strip():
        return frozenset()
    principals = set()
    for part in text.split(";"):
        if part.strip():
            try:
                principals.add(KafkaPrincipal.parse(part.strip()))
            except ValueError as error:
                raise ValueError(f"super.users: {error}") from None
    return frozenset(principals)


def _check_action(operation: AclOperation, resource_type: AclResourceType) -> None:
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ValueError(f"cannot authorize operation {operation.name}: it is a filter's, not an action's")
    if resource_type in (AclResourceType.ANY, AclResourceType.UNKNOWN):
        raise ValueError(f"cannot authorize on resource type {resource_type.name}: it is a filter's")


class AclAuthorizer:
    """Kafka's AclAuthorizer over ``store`` (default: in memory). ``super_users`` may do anything;
    ``allow_everyone_if_no_acl_found``: a resource without any ACL is open to all (Kafka's default: closed)."""

    def __init__(self, store: AclStore | None = None, *, super_users: Iterable[KafkaPrincipal] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store: AclStore = store if store is not None else MemoryAclStore()
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._lock = threading.RLock()
        self._acls: dict[ResourcePattern, Entries] = {}
        #: Per resource type, the lengths of its PREFIXED patterns' names (the prefixes worth looking up), and how
        #: many patterns have each.
        self._prefix_lengths: dict[AclResourceType, tuple[int, ...]] = {}
        self._prefix_counts: dict[AclResourceType, Counter[int]] = {}
        self._index: dict[_IndexKey, frozenset[str]] = {}
        # Changes made by other brokers (a cluster's notifications) come in before the load, so none is missed.
        self.store.watch(self._changed_elsewhere)
        with self._lock:
            for pattern, entries in self.store.load().items():
                self._changed(pattern, entries)

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------ checks

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return principal in self.super_users

    def authorize(self, session: Session, operation: AclOperation, resource_type: AclResourceType,
                  name: str) -> bool:
        """May ``session`` do ``operation`` on the resource ``resource_type`` ``name`` (Kafka's
        ``authorizeAction``)?"""
        _check_action(operation, resource_type)
        if session.principal in self.super_users:
            return True
        acls = self._acls  # read without the lock: writers replace its values (frozensets), never change them
        found = [entries for entries in (acls.get(ResourcePattern(resource_type, name)),
                                         acls.get(ResourcePattern(resource_type, WILDCARD_RESOURCE)))
                 if entries]
        for length in self._prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                entries = acls.get(ResourcePattern(resource_type, name[:length], PatternType.PREFIXED))
                if entries:
                    found.append(entries)
        if not found:
            return self.allow_everyone_if_no_acl_found
        principal, host = str(session.principal), canonical_host(session.client_host)
        denied = frozenset((operation,))
        if any(_applies(entry, AclPermissionType.DENY, denied, principal, host)
               for entries in found for entry in entries):
            return False
        allowing = _IMPLIED_BY.get(operation, denied)
        return any(_applies(entry, AclPermissionType.ALLOW, allowing, principal, host)
                   for entries in found for entry in entries)

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: AclResourceType) -> bool:
        """May ``session`` do ``operation`` on at least one resource of ``resource_type`` (KIP-679, Kafka's
        ``authorizeByResourceType``): no DENY on the wildcard, and an ALLOW (literal or prefixed) that no DENY
        on the same name or on a prefix of it overrides. The operation is matched as asked or ALL (no implied
        DESCRIBE here, as Kafka)."""
        _check_action(operation, resource_type)
        if session.principal in self.super_users:
            return True
        index = self._index
        principal, host = str(session.principal), canonical_host(session.client_host)

        def names(permission: AclPermissionType, pattern_type: PatternType) -> list[frozenset[str]]:
            return [found for p in {principal, _WILDCARD_PRINCIPAL} for h in {host, WILDCARD_HOST}
                    for o in {operation, AclOperation.ALL}
                    if (found := index.get((p, h, o, permission, resource_type, pattern_type)))]

        deny_literals = names(AclPermissionType.DENY, PatternType.LITERAL)
        if any(WILDCARD_RESOURCE in found for found in deny_literals):
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = names(AclPermissionType.DENY, PatternType.PREFIXED)
        allow_literals = names(AclPermissionType.ALLOW, PatternType.LITERAL)
        allow_prefixes = names(AclPermissionType.ALLOW, PatternType.PREFIXED)

        def denied_by_prefix(name: str) -> bool:
            return any(name[:length] in found for found in deny_prefixes for length in range(len(name) + 1))

        if any(not denied_by_prefix(prefix) for found in allow_prefixes for prefix in found):
            return True
        return any(literal == WILDCARD_RESOURCE
                   or (not any(literal in found for found in deny_literals) and not denied_by_prefix(literal))
                   for found in allow_literals for literal in found)

    # ------------------------------------------------------------ the ACL APIs

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Every ACL ``acl_filter`` matches (DescribeAcls), sorted by resource then entry."""
        found = [AclBinding(pattern, entry) for pattern, entries in list(self._acls.items())
                 if acl_filter.pattern.matches(pattern) for entry in entries if acl_filter.entry.matches(entry)]
        return sorted(found, key=_binding_order)

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Create ``bindings`` (CreateAcls): per binding None, or why not (INVALID_REQUEST for a binding Kafka
        refuses; the store's failure otherwise). Made durable before this returns; one already there is kept."""
        results: list[AclError | None] = [None] * len(bindings)
        wanted: dict[ResourcePattern, list[int]] = {}
        for index, binding in enumerate(bindings):
            problem = binding.problem()
            if problem is not None:
                results[index] = AclError(ErrorCode.INVALID_REQUEST, f"Failed to create ACL: {problem}")
            else:
                wanted.setdefault(binding.pattern, []).append(index)
        if not wanted:
            return results
        with self._lock:
            changes = {pattern: (lambda current, add=frozenset(bindings[i].entry for i in indexes): current | add)
                       for pattern, indexes in wanted.items()}
            outcome = self.store.update(changes)
            for pattern, indexes in wanted.items():
                done = outcome[pattern]
                if isinstance(done, BaseException):
                    for i in indexes:
                        results[i] = AclError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to create ACL: {done}")
                else:
                    self._changed(pattern, done)
        for binding, result in zip(bindings, results, strict=True):
            if result is None:
                log.info("ACL created: %s", binding)
        return results

    def delete_acls(self, filters: Sequence[AclBindingFilter]
                    ) -> list[tuple[AclError | None, list[tuple[AclBinding, AclError | None]]]]:
        """Delete the ACLs each filter matches (DeleteAcls): per filter, its error (an invalid filter) or the ACLs
        it deleted, each with the store's failure if its resource could not be written. An ACL two filters match
        is reported under the first."""
        results: list[tuple[AclError | None, list[tuple[AclBinding, AclError | None]]]] = [
            (None, []) for _ in filters]
        usable: list[tuple[int, AclBindingFilter]] = []
        for index, acl_filter in enumerate(filters):
            problem = acl_filter.problem()
            if problem is not None:
                results[index] = (AclError(ErrorCode.INVALID_REQUEST, problem), [])
            else:
                usable.append((index, acl_filter))
        with self._lock:
            resources = set(self._acls)
            for _, acl_filter in usable:  # an exact pattern this broker has not heard of yet is read from the store
                if acl_filter.pattern.matches_at_most_one():
                    p = acl_filter.pattern
                    assert p.name is not None
                    resources.add(ResourcePattern(p.resource_type, p.name, p.pattern_type))
            deleted: dict[AclBinding, int] = {}
            by_resource: dict[ResourcePattern, list[AclBinding]] = {}

            def change_of(pattern: ResourcePattern, matching: list[tuple[int, AclBindingFilter]]
                          ) -> Callable[[Entries], Entries]:
                def change(current: Entries) -> Entries:
                    gone = set()
                    for entry in current:
                        for index, acl_filter in matching:
                            if acl_filter.entry.matches(entry):
                                binding = AclBinding(pattern, entry)
                                deleted.setdefault(binding, index)
                                by_resource.setdefault(pattern, []).append(binding)
                                gone.add(entry)
                                break
                    return current - gone
                return change

            changes: dict[ResourcePattern, Callable[[Entries], Entries]] = {}
            for pattern in resources:
                matching = [(i, f) for i, f in usable if f.pattern.matches(pattern)]
                if matching:
                    changes[pattern] = change_of(pattern, matching)
            outcome = self.store.update(changes) if changes else {}
            failed: dict[AclBinding, AclError] = {}
            for pattern, done in outcome.items():
                if isinstance(done, BaseException):
                    for binding in by_resource.get(pattern, ()):
                        failed[binding] = AclError(ErrorCode.UNKNOWN_SERVER_ERROR, str(done))
                else:
                    self._changed(pattern, done)
        for binding, index in sorted(deleted.items(), key=lambda item: _binding_order(item[0])):
            results[index][1].append((binding, failed.get(binding)))
            if binding not in failed:
                log.info("ACL deleted: %s", binding)
        return results

    # ------------------------------------------------------------ the cache

    def _changed_elsewhere(self, pattern: ResourcePattern, read: Callable[[], Entries]) -> None:
        """Another broker changed ``pattern``'s ACLs: read them and take them in, under the lock (Kafka's
        ``processAclChangeNotification``)."""
        with self._lock:
            self._changed(pattern, read())

    def _changed(self, pattern: ResourcePattern, entries: Entries) -> None:
        """The resource ``pattern`` has ``entries`` now (written here, loaded, or changed by another broker):
        the cache and the index follow (Kafka's ``updateCache``)."""
        with self._lock:
            current = self._acls.get(pattern, frozenset())
            if entries == current:
                return
            for entry in entries - current:
                key = _key(entry, pattern)
                self._index[key] = self._index.get(key, frozenset()) | {pattern.name}
            for entry in current - entries:
                key = _key(entry, pattern)
                left = self._index.get(key, frozenset()) - {pattern.name}
                if left:
                    self._index[key] = left
                else:
                    self._index.pop(key, None)
            if entries:
                self._acls[pattern] = entries
            else:
                self._acls.pop(pattern, None)
            if pattern.pattern_type == PatternType.PREFIXED and bool(entries) != bool(current):
                counts = self._prefix_counts.setdefault(pattern.resource_type, Counter())
                counts[len(pattern.name)] += 1 if entries else -1
                self._prefix_lengths[pattern.resource_type] = tuple(sorted(n for n, c in counts.items() if c > 0))


@functools.lru_cache(maxsize=4096)
def canonical_host(host: str) -> str:
    """An IP address in one form (``::1`` for ``0:0:0:0:0:0:0:1``, ``10.0.0.5`` for ``::ffff:10.0.0.5``, lower
    case), so an ACL's host matches the client's address however either is written: else a DENY written in another
    form than the peer's address would not apply. Any other text (``*``, a name) as it is."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _applies(entry: AccessControlEntry, permission: AclPermissionType, operations: frozenset[AclOperation],
             principal: str, host: str) -> bool:
    return entry.permission == permission \
        and (entry.operation in operations or entry.operation == AclOperation.ALL) \
        and entry.principal in (principal, _WILDCARD_PRINCIPAL) \
        and canonical_host(entry.host) in (host, WILDCARD_HOST)


def _key(entry: AccessControlEntry, pattern: ResourcePattern) -> _IndexKey:
    return (entry.principal, canonical_host(entry.host), entry.operation, entry.permission, pattern.resource_type,
            pattern.pattern_type)


def _binding_order(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    p, e = binding.pattern, binding.entry
    return (p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission)


def authorizer_from_settings(settings: Any, data_dir: Path | None, *, fsync: bool = True,
                             zookeeper: tuple[str, int, int] | None = None) -> AclAuthorizer | None:
    """The authorizer a broker's ``settings`` ask for (``authorizer.class.name``; empty: none), keeping its ACLs
    in ZooKeeper (``zookeeper``: ``(zookeeper.connect, session timeout ms, connection timeout ms)``, a broker of
    a cluster), else in ``data_dir`` (alone), else in memory. ConfigError (one line) for another class name or a
    bad ``super.users``."""
    class_name = (settings["authorizer.class.name"] or "").strip()
    if not class_name:
        return None
    if class_name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(f"authorizer.class.name={class_name} is not an authorizer idemcore has (one of "
                          f"{', '.join(AUTHORIZER_CLASS_NAMES)}; empty for none)")
    try:
        super_users = parse_super_users(settings["super.users"])
    except ValueError as error:
        raise ConfigError(str(error)) from None
    store: AclStore
    if zookeeper is not None:
        from idemcore.broker.security.acl_store import ZkAclStore

        hosts, session_ms, connection_ms = zookeeper
        store = ZkAclStore(hosts, session_timeout_ms=session_ms, connection_timeout_ms=connection_ms)
    elif data_dir is not None:
        store = FileAclStore(data_dir, fsync=fsync)
    else:
        store = MemoryAclStore()
    try:
        return AclAuthorizer(store, super_users=super_users,
                             allow_everyone_if_no_acl_found=bool(settings["allow.everyone.if.no.acl.found"]))
    except BaseException:
        store.close()
        raise
