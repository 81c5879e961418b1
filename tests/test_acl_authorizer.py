"""AclAuthorizer against golden cases from Kafka's ``AclAuthorizerTest`` and ``BaseAuthorizerTest`` (the same ACLs,
sessions and expected answers), over the in-memory store; and the ACL model's checks."""

from __future__ import annotations

import uuid

import pytest

from idemcore.broker.security.authorizer import AclAuthorizer, authorizer_from_settings, parse_super_users
from idemcore.broker.security.session import KafkaPrincipal, Session
from idemcore.errors import ConfigError
from idemcore.protocol.acls import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
)
from idemcore.protocol.codes import ErrorCode

Op, P = AclOperation, AclPermissionType
Ace = AccessControlEntry
TOPIC, GROUP, CLUSTER, TXN = (AclResourceType.TOPIC, AclResourceType.GROUP, AclResourceType.CLUSTER,
                              AclResourceType.TRANSACTIONAL_ID)
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ANY_USER = "User:*"
ALLOW_READ = Ace(ANY_USER, WILDCARD_HOST, Op.READ, P.ALLOW)
ALLOW_WRITE = Ace(ANY_USER, WILDCARD_HOST, Op.WRITE, P.ALLOW)
DENY_READ = Ace(ANY_USER, WILDCARD_HOST, Op.READ, P.DENY)
WILDCARD_TOPIC = ResourcePattern(TOPIC, "*")
PREFIXED_FOO = ResourcePattern(TOPIC, "foo", PREFIXED)
CLUSTER_RESOURCE = ResourcePattern(CLUSTER, CLUSTER_NAME)
VALID_OPS = [op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY, Op.ALL, Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS)]


def session(name: str = "alice", host: str = "192.168.1.1") -> Session:
    return Session(KafkaPrincipal("User", name), host)


@pytest.fixture
def authorizer() -> AclAuthorizer:
    return AclAuthorizer(super_users=parse_super_users("User:superuser1; User:superuser2"))


@pytest.fixture
def resource() -> ResourcePattern:
    return ResourcePattern(TOPIC, f"foo-{uuid.uuid4()}")


def add(authorizer: AclAuthorizer, entries: set[AccessControlEntry], pattern: ResourcePattern) -> None:
    assert authorizer.create_acls([AclBinding(pattern, e) for e in entries]) == [None] * len(entries)


def remove(authorizer: AclAuthorizer, entries: set[AccessControlEntry], pattern: ResourcePattern) -> None:
    """Remove ``entries`` of the pattern, or all of its ACLs for an empty set (Kafka's ``removeAcls``)."""
    exact = ResourcePatternFilter(pattern.resource_type, pattern.name, pattern.pattern_type)
    filters = [AclBindingFilter(exact, AccessControlEntryFilter(e.principal, e.host, e.operation, e.permission))
               for e in entries] or [AclBindingFilter(exact)]
    authorizer.delete_acls(filters)


def entries_of(authorizer: AclAuthorizer, pattern: ResourcePattern | None = None,
               principal: str | None = None) -> set[AccessControlEntry]:
    pf = ResourcePatternFilter() if pattern is None else \
        ResourcePatternFilter(pattern.resource_type, pattern.name, pattern.pattern_type)
    return {b.entry for b in authorizer.acls(AclBindingFilter(pf, AccessControlEntryFilter(principal)))}


def allowed(authorizer: AclAuthorizer, who: Session, op: AclOperation, pattern: ResourcePattern) -> bool:
    return authorizer.authorize(who, op, pattern.resource_type, pattern.name)


def test_empty_resource_name_is_denied_until_a_wildcard_acl(authorizer):
    assert not allowed(authorizer, session(), Op.READ, ResourcePattern(GROUP, ""))
    add(authorizer, {ALLOW_READ}, ResourcePattern(GROUP, "*"))
    assert allowed(authorizer, session(), Op.READ, ResourcePattern(GROUP, ""))


def test_an_acl_on_an_empty_name_is_refused(authorizer):
    [error] = authorizer.create_acls([AclBinding(ResourcePattern(GROUP, ""), ALLOW_READ)])
    assert error is not None and error.error_code == ErrorCode.INVALID_REQUEST


def test_topic_acl(authorizer, resource):
    user1, user2, user3 = "User:alice", "User:rob", "User:batman"
    host1, host2 = "192.168.1.1", "192.168.1.2"
    add(authorizer, {Ace(user1, host1, Op.READ, P.ALLOW), Ace(user1, host2, Op.READ, P.ALLOW),
                     Ace(user1, host1, Op.READ, P.DENY), Ace(user1, host1, Op.WRITE, P.ALLOW),
                     Ace(user1, "*", Op.DESCRIBE, P.ALLOW), Ace(user2, "*", Op.READ, P.ALLOW),
                     Ace(user3, "*", Op.WRITE, P.ALLOW)}, resource)
    h1, h2 = session("alice", host1), session("alice", host2)
    assert allowed(authorizer, h2, Op.READ, resource)
    assert not allowed(authorizer, h1, Op.READ, resource)  # the deny wins
    assert allowed(authorizer, h1, Op.WRITE, resource)
    assert not allowed(authorizer, h2, Op.WRITE, resource)
    assert allowed(authorizer, h1, Op.DESCRIBE, resource) and allowed(authorizer, h2, Op.DESCRIBE, resource)
    assert not allowed(authorizer, h1, Op.ALTER, resource) and not allowed(authorizer, h2, Op.ALTER, resource)
    rob, batman = session("rob", host1), session("batman", host1)
    assert allowed(authorizer, rob, Op.DESCRIBE, resource) and allowed(authorizer, batman, Op.DESCRIBE, resource)
    assert allowed(authorizer, rob, Op.READ, resource) and allowed(authorizer, batman, Op.WRITE, resource)


def test_deny_takes_precedence(authorizer, resource):
    who = session("alice", "192.168.2.1")
    add(authorizer, {Ace(ANY_USER, "*", Op.ALL, P.ALLOW),
                     Ace("User:alice", "192.168.2.1", Op.ALL, P.DENY)}, resource)
    assert not allowed(authorizer, who, Op.READ, resource)


def test_allow_all_access(authorizer, resource):
    add(authorizer, {Ace(ANY_USER, "*", Op.ALL, P.ALLOW)}, resource)
    assert allowed(authorizer, session("random", "192.0.4.4"), Op.READ, resource)


def test_super_users_have_access_whatever_the_acls(authorizer, resource):
    add(authorizer, {Ace(ANY_USER, "*", Op.ALL, P.DENY)}, resource)
    for name in ("superuser1", "superuser2"):
        assert allowed(authorizer, session(name, "192.0.4.4"), Op.READ, resource)
    assert not allowed(authorizer, session("superuser3", "192.0.4.4"), Op.READ, resource)


def test_wildcard_acls(authorizer, resource):
    assert not allowed(authorizer, session(), Op.READ, resource)  # no ACLs: closed
    host1 = session("alice", "192.168.3.1")
    add(authorizer, {Ace("User:alice", "192.168.3.1", Op.READ, P.ALLOW)}, WILDCARD_TOPIC)
    assert allowed(authorizer, host1, Op.READ, resource)
    add(authorizer, {Ace("User:alice", "192.168.3.1", Op.WRITE, P.ALLOW)}, resource)
    add(authorizer, {Ace("User:alice", "192.168.3.1", Op.WRITE, P.DENY)}, WILDCARD_TOPIC)
    assert not allowed(authorizer, host1, Op.WRITE, resource)


def test_no_acl_found_override(resource):
    assert AclAuthorizer(allow_everyone_if_no_acl_found=True).authorize(session(), Op.READ, TOPIC, resource.name)
    assert not AclAuthorizer().authorize(session(), Op.READ, TOPIC, resource.name)


def test_allow_everyone_does_not_open_a_resource_that_has_acls(resource):
    authorizer = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    add(authorizer, {Ace("User:bob", "*", Op.READ, P.ALLOW)}, resource)
    assert not authorizer.authorize(session(), Op.READ, TOPIC, resource.name)
    assert authorizer.authorize(session(), Op.READ, TOPIC, "another")


def test_acl_management(authorizer, resource):
    user1, user2 = "User:alice", "User:bob"
    acl1, acl2 = Ace(user1, "host1", Op.READ, P.ALLOW), Ace(user1, "host1", Op.WRITE, P.ALLOW)
    acl3, acl4 = Ace(user2, "host2", Op.READ, P.ALLOW), Ace(user2, "host2", Op.WRITE, P.ALLOW)
    add(authorizer, {acl1, acl2, acl3, acl4}, resource)
    acl5 = Ace(user2, "*", Op.READ, P.ALLOW)
    add(authorizer, {acl5}, resource)  # additive
    assert entries_of(authorizer, resource) == {acl1, acl2, acl3, acl4, acl5}
    assert entries_of(authorizer, principal=user1) == {acl1, acl2}
    assert entries_of(authorizer, principal=user2) == {acl3, acl4, acl5}
    remove(authorizer, {acl1, acl5}, resource)
    assert entries_of(authorizer, resource) == {acl2, acl3, acl4}
    remove(authorizer, set(), resource)  # every ACL of the resource
    assert entries_of(authorizer, resource) == set()


def test_acl_inheritance(authorizer):
    who = session("alice", "192.168.3.1")

    def check_allow(parent: AclOperation, implied: set[AclOperation]) -> None:
        acl = Ace("User:alice", "*", parent, P.ALLOW)
        add(authorizer, {acl}, CLUSTER_RESOURCE)
        for op in VALID_OPS:
            assert allowed(authorizer, who, op, CLUSTER_RESOURCE) == (op in implied or op == parent), (parent, op)
        remove(authorizer, {acl}, CLUSTER_RESOURCE)

    def check_deny(parent: AclOperation, denied: set[AclOperation]) -> None:
        acls = {Ace("User:alice", "*", parent, P.DENY), Ace("User:alice", "*", Op.ALL, P.ALLOW)}
        add(authorizer, acls, CLUSTER_RESOURCE)
        for op in VALID_OPS:
            assert allowed(authorizer, who, op, CLUSTER_RESOURCE) != (op in denied or op == parent), (parent, op)
        remove(authorizer, acls, CLUSTER_RESOURCE)

    every = set(VALID_OPS)
    check_allow(Op.ALL, every)
    check_deny(Op.ALL, every)
    for parent in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        check_allow(parent, {Op.DESCRIBE})
    check_deny(Op.DESCRIBE, set())
    check_allow(Op.ALTER_CONFIGS, {Op.DESCRIBE_CONFIGS})
    check_deny(Op.DESCRIBE_CONFIGS, set())


def test_wildcard_and_prefixed_resources(authorizer, resource):
    add(authorizer, {ALLOW_READ}, WILDCARD_TOPIC)
    assert allowed(authorizer, session(), Op.READ, resource)
    other = AclAuthorizer()
    add(other, {ALLOW_READ}, PREFIXED_FOO)
    assert allowed(other, session(), Op.READ, resource)


def test_delete_on_wildcard_and_prefixed_resources(authorizer):
    for pattern in (WILDCARD_TOPIC, PREFIXED_FOO):
        add(authorizer, {ALLOW_READ, ALLOW_WRITE}, pattern)
        remove(authorizer, {ALLOW_READ}, pattern)
        assert entries_of(authorizer, pattern) == {ALLOW_WRITE}
        remove(authorizer, set(), pattern)
        assert entries_of(authorizer) == set()


def test_adds_stay_on_their_own_pattern(authorizer, resource):
    for pattern in (resource, WILDCARD_TOPIC, PREFIXED_FOO):
        mine = AclAuthorizer()
        add(mine, {ALLOW_READ, ALLOW_WRITE}, pattern)
        add(mine, {ALLOW_WRITE, DENY_READ}, pattern)
        assert entries_of(mine, pattern) == {ALLOW_READ, ALLOW_WRITE, DENY_READ}
        for elsewhere in {resource, WILDCARD_TOPIC, PREFIXED_FOO} - {pattern}:
            assert entries_of(mine, elsewhere) == set()


def test_authorize_with_many_prefixed_resources(authorizer, resource):
    for name, kind in (("a_other", LITERAL), ("a_other", PREFIXED), (f"foo-{uuid.uuid4()}", PREFIXED),
                       (f"foo-{uuid.uuid4()}", PREFIXED), (f"foo-{uuid.uuid4()}-zzz", PREFIXED),
                       (f"fooo-{uuid.uuid4()}", PREFIXED), (f"fo-{uuid.uuid4()}", PREFIXED),
                       (f"fop-{uuid.uuid4()}", PREFIXED), (f"fon-{uuid.uuid4()}", PREFIXED), ("fon-", PREFIXED),
                       ("z_other", PREFIXED), ("z_other", LITERAL)):
        add(authorizer, {DENY_READ}, ResourcePattern(TOPIC, name, kind))
    add(authorizer, {ALLOW_READ}, PREFIXED_FOO)
    assert allowed(authorizer, session(), Op.READ, resource)


def test_single_character_resource_acls(authorizer):
    add(authorizer, {ALLOW_READ}, ResourcePattern(TOPIC, "f"))
    assert allowed(authorizer, session(), Op.READ, ResourcePattern(TOPIC, "f"))
    assert not allowed(authorizer, session(), Op.READ, ResourcePattern(TOPIC, "foo"))
    add(authorizer, {ALLOW_READ}, ResourcePattern(TOPIC, "_", PREFIXED))
    assert allowed(authorizer, session(), Op.READ, ResourcePattern(TOPIC, "_foo"))
    assert allowed(authorizer, session(), Op.READ, ResourcePattern(TOPIC, "_"))
    assert not allowed(authorizer, session(), Op.READ, ResourcePattern(TOPIC, "foo_"))


def test_get_acls_by_principal(authorizer, resource):
    add(authorizer, {Ace("User:alice", "*", Op.WRITE, P.ALLOW)}, resource)
    assert len(entries_of(authorizer, principal=ANY_USER)) == 0
    assert len(entries_of(authorizer, principal="User:alice")) == 1
    remove(authorizer, set(), resource)
    add(authorizer, {Ace(ANY_USER, "*", Op.WRITE, P.ALLOW)}, resource)
    assert len(entries_of(authorizer, principal=ANY_USER)) == 1
    assert len(entries_of(authorizer, principal="User:alice")) == 0


def test_acls_filter_and_delete_by_filters(authorizer):
    principal = "User:alice"
    resource1, resource2 = ResourcePattern(TOPIC, f"foo-{uuid.uuid4()}"), ResourcePattern(TOPIC, f"bar-{uuid.uuid4()}")
    bar = ResourcePattern(TOPIC, "bar-", PREFIXED)
    acl1 = AclBinding(resource1, Ace(principal, "*", Op.READ, P.ALLOW))
    acl2 = AclBinding(resource1, Ace(principal, "192.168.0.1", Op.WRITE, P.ALLOW))
    acl3 = AclBinding(resource2, Ace(principal, "*", Op.DESCRIBE, P.ALLOW))
    acl4 = AclBinding(bar, Ace(ANY_USER, "*", Op.READ, P.ALLOW))
    assert authorizer.create_acls([acl1, acl2, acl3, acl4]) == [None] * 4

    def exact(p: ResourcePattern) -> ResourcePatternFilter:
        return ResourcePatternFilter(p.resource_type, p.name, p.pattern_type)

    assert set(authorizer.acls(AclBindingFilter())) == {acl1, acl2, acl3, acl4}
    assert set(authorizer.acls(AclBindingFilter(exact(resource1)))) == {acl1, acl2}
    assert set(authorizer.acls(AclBindingFilter(exact(bar)))) == {acl4}
    matching = AclBindingFilter(ResourcePatternFilter(AclResourceType.ANY, resource2.name, PatternType.MATCH))
    assert set(authorizer.acls(matching)) == {acl3, acl4}
    e1 = acl1.entry
    results = authorizer.delete_acls([
        matching, AclBindingFilter(exact(resource1), AccessControlEntryFilter(e1.principal, e1.host, e1.operation,
                                                                              e1.permission)),
        AclBindingFilter(exact(resource2)), AclBindingFilter(ResourcePatternFilter(TOPIC, "baz", PatternType.ANY))])
    assert all(error is None and all(failure is None for _, failure in deleted) for error, deleted in results)
    assert [{b for b, _ in deleted} for _, deleted in results] == [{acl3, acl4}, {acl1}, set(), set()]
    assert set(authorizer.acls(AclBindingFilter())) == {acl2}


# ---------------------------------------------------------------- authorize_by_resource_type (KIP-679)


def by_type(authorizer: AclAuthorizer, who: Session, op: AclOperation, kind: AclResourceType) -> bool:
    return authorizer.authorize_by_resource_type(who, op, kind)


def test_by_resource_type_follows_allow_and_deny(authorizer):
    u1h1 = session("user1", "192.168.1.1")
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}")
    allow = Ace("User:user1", "192.168.1.1", Op.READ, P.ALLOW)
    deny = Ace("User:user1", "192.168.1.1", Op.READ, P.DENY)
    for _ in range(3):
        assert not by_type(authorizer, u1h1, Op.READ, TOPIC)
        add(authorizer, {allow}, resource1)
        assert by_type(authorizer, u1h1, Op.READ, TOPIC)
        for _ in range(3):
            add(authorizer, {deny}, resource1)
            assert not by_type(authorizer, u1h1, Op.READ, TOPIC)
            remove(authorizer, {deny}, resource1)
            add(authorizer, {allow}, resource1)
            assert by_type(authorizer, u1h1, Op.READ, TOPIC)
        remove(authorizer, {allow}, resource1)
        assert not by_type(authorizer, u1h1, Op.READ, TOPIC)


def test_by_resource_type_unrelated_deny_does_not_dominate_allow(authorizer):
    h1, h2 = "192.168.1.1", "192.168.1.2"
    u1, u2 = "User:user1", "User:user2"
    add(authorizer, {Ace(u1, h1, Op.READ, P.DENY), Ace(u2, h1, Op.READ, P.DENY),
                     Ace(u1, h2, Op.WRITE, P.DENY), Ace(u2, h2, Op.READ, P.DENY),
                     Ace(u1, h2, Op.READ, P.ALLOW)}, ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}"))
    add(authorizer, {Ace(u1, h2, Op.READ, P.DENY)}, ResourcePattern(TOPIC, f"sb2{uuid.uuid4()}"))
    add(authorizer, {Ace(u1, h2, Op.READ, P.DENY)}, ResourcePattern(GROUP, "s", PREFIXED))
    u1h1, u1h2 = session("user1", h1), session("user1", h2)
    for kind in (TOPIC, GROUP, TXN, CLUSTER):
        assert not by_type(authorizer, u1h1, Op.READ, kind)
    assert by_type(authorizer, u1h2, Op.READ, TOPIC)


def test_by_resource_type_deny_takes_precedence(authorizer):
    u1h1 = session("user1", "192.168.1.1")
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}")
    add(authorizer, {Ace("User:user1", "192.168.1.1", Op.WRITE, P.ALLOW)}, resource1)
    assert by_type(authorizer, u1h1, Op.WRITE, TOPIC)
    add(authorizer, {Ace("User:user1", "192.168.1.1", Op.WRITE, P.DENY)}, resource1)
    assert not by_type(authorizer, u1h1, Op.WRITE, TOPIC)


def test_by_resource_type_prefixed_deny_dominates(authorizer):
    u1h1 = session("user1", "192.168.1.1")
    allow = Ace("User:user1", "192.168.1.1", Op.READ, P.ALLOW)
    deny = Ace("User:user1", "192.168.1.1", Op.READ, P.DENY)
    steps = [(allow, "abcde", True), (deny, "abcd", False), (allow, "abc", True), (deny, "a", False),
             (allow, "ab", False)]
    for entry, name, expected in steps:
        add(authorizer, {entry}, ResourcePattern(GROUP, name, PREFIXED))
        assert by_type(authorizer, u1h1, Op.READ, GROUP) == expected, name


def test_by_resource_type_wildcard_deny_dominates(authorizer):
    u1h1 = session("user1", "192.168.1.1")
    allow = Ace("User:user1", "192.168.1.1", Op.WRITE, P.ALLOW)
    deny = Ace("User:user1", "192.168.1.1", Op.WRITE, P.DENY)
    add(authorizer, {allow}, ResourcePattern(GROUP, "hello", PREFIXED))
    assert by_type(authorizer, u1h1, Op.WRITE, GROUP)
    add(authorizer, {deny}, ResourcePattern(GROUP, "*"))
    assert not by_type(authorizer, u1h1, Op.WRITE, GROUP)
    add(authorizer, {allow}, ResourcePattern(GROUP, "*"))
    assert not by_type(authorizer, u1h1, Op.WRITE, GROUP)
    add(authorizer, {allow}, ResourcePattern(GROUP, "aloha"))
    assert not by_type(authorizer, u1h1, Op.WRITE, GROUP)


def test_by_resource_type_with_all_operation(authorizer):
    u1h1 = session("user1", "192.168.1.1")
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}")
    assert not by_type(authorizer, u1h1, Op.READ, TOPIC)
    add(authorizer, {Ace("User:user1", "192.168.1.1", Op.WRITE, P.DENY),
                     Ace("User:user1", "192.168.1.1", Op.ALL, P.ALLOW)}, resource1)
    assert by_type(authorizer, u1h1, Op.READ, TOPIC)
    add(authorizer, {Ace("User:user1", "192.168.1.1", Op.ALL, P.DENY)}, resource1)
    assert not by_type(authorizer, u1h1, Op.READ, TOPIC)


@pytest.mark.parametrize("wildcard_on", ["host", "principal"])
def test_by_resource_type_with_wildcard_host_or_principal(authorizer, wildcard_on):
    first, second = (session("user1", "192.168.1.1"), session("user1", "192.168.1.2")) if wildcard_on == "host" \
        else (session("user1", "192.168.1.1"), session("user2", "192.168.1.1"))

    def entry(permission: AclPermissionType, wildcard: bool) -> AccessControlEntry:
        if wildcard_on == "host":
            return Ace("User:user1", "*" if wildcard else "192.168.1.1", Op.READ, permission)
        return Ace("User:*" if wildcard else "User:user1", "192.168.1.1", Op.READ, permission)

    r1, r2 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}"), ResourcePattern(TOPIC, f"sb2{uuid.uuid4()}")
    assert not by_type(authorizer, first, Op.READ, TOPIC)
    add(authorizer, {entry(P.ALLOW, False)}, r1)
    assert by_type(authorizer, first, Op.READ, TOPIC)
    add(authorizer, {entry(P.DENY, True)}, r1)
    assert not by_type(authorizer, first, Op.READ, TOPIC)
    add(authorizer, {entry(P.DENY, False)}, r2)
    assert not by_type(authorizer, first, Op.READ, TOPIC)
    assert not by_type(authorizer, second, Op.READ, TOPIC)
    add(authorizer, {entry(P.ALLOW, True)}, r2)
    assert by_type(authorizer, second, Op.READ, TOPIC)
    add(authorizer, {entry(P.DENY, True)}, r2)
    assert not by_type(authorizer, second, Op.READ, TOPIC)


def test_by_resource_type_super_user_and_allow_everyone(authorizer):
    deny_all = Ace(ANY_USER, "*", Op.ALL, P.DENY)
    for kind in (TOPIC, GROUP, TXN):
        add(authorizer, {deny_all}, ResourcePattern(kind, "*"))
    for kind in (TOPIC, GROUP, TXN, CLUSTER):
        assert by_type(authorizer, session("superuser1", "192.0.4.4"), Op.READ, kind)
    everyone = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    assert by_type(everyone, session(), Op.READ, TOPIC) and by_type(everyone, session(), Op.WRITE, TOPIC)


def test_filters_are_refused_as_actions(authorizer):
    with pytest.raises(ValueError, match="ANY"):
        authorizer.authorize(session(), Op.ANY, TOPIC, "t")
    with pytest.raises(ValueError, match="ANY"):
        authorizer.authorize_by_resource_type(session(), Op.READ, AclResourceType.ANY)


# ---------------------------------------------------------------- the model's checks, settings


@pytest.mark.parametrize(("binding", "why"), [
    (AclBinding(ResourcePattern(CLUSTER, "other"), ALLOW_READ), "kafka-cluster"),
    (AclBinding(ResourcePattern(TOPIC, "a/b"), ALLOW_READ), "invalid resource name"),
    (AclBinding(ResourcePattern(AclResourceType.ANY, "t"), ALLOW_READ), "resource type ANY"),
    (AclBinding(ResourcePattern(TOPIC, "t", PatternType.MATCH), ALLOW_READ), "pattern type MATCH"),
    (AclBinding(ResourcePattern(TOPIC, "t"), Ace("alice", "*", Op.READ, P.ALLOW)), "type:name"),
    (AclBinding(ResourcePattern(TOPIC, "t"), Ace(ANY_USER, "*", Op.ANY, P.ALLOW)), "operation ANY"),
    (AclBinding(ResourcePattern(TOPIC, "t"), Ace(ANY_USER, "*", Op.READ, P.UNKNOWN)), "UNKNOWN"),
])
def test_bindings_kafka_refuses_are_refused_one_by_one(authorizer, binding, why):
    good = AclBinding(ResourcePattern(TOPIC, "t"), ALLOW_READ)
    results = authorizer.create_acls([binding, good])
    assert results[1] is None
    assert results[0] is not None and results[0].error_code == ErrorCode.INVALID_REQUEST and why in results[0].message
    assert set(authorizer.acls(AclBindingFilter())) == {good}


def test_a_filter_with_unknown_parts_is_refused(authorizer):
    [(error, deleted)] = authorizer.delete_acls([AclBindingFilter(ResourcePatternFilter(AclResourceType.UNKNOWN))])
    assert error is not None and error.error_code == ErrorCode.INVALID_REQUEST and deleted == []


class _Settings(dict):
    def __getitem__(self, key):
        return self.get(key)


def test_settings_choose_the_authorizer(tmp_path):
    assert authorizer_from_settings(_Settings({"authorizer.class.name": ""}), tmp_path) is None
    made = authorizer_from_settings(_Settings({
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:broker", "allow.everyone.if.no.acl.found": True}), tmp_path)
    assert made is not None and made.allow_everyone_if_no_acl_found
    assert made.super_users == {KafkaPrincipal("User", "admin"), KafkaPrincipal("User", "broker")}
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name=com\.example\.Mine"):
        authorizer_from_settings(_Settings({"authorizer.class.name": "com.example.Mine"}), tmp_path)
    with pytest.raises(ConfigError, match=r"super\.users"):
        authorizer_from_settings(_Settings({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                            "super.users": "admin"}), tmp_path)
