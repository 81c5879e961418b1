"""Properties of AclAuthorizer against a small independent model: every answer of ``authorize`` is what a scan of
all ACLs gives by Kafka's rules; ``authorize_by_resource_type`` is true exactly when some resource of the type
would be authorized (for operations without implied ones, as KIP-679 defines it); a MATCH filter lists exactly the
ACLs that apply to a resource; random creates and deletes leave exactly the ACLs a set model keeps, and a file
store reloads them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.broker.security.acl_store import FileAclStore
from idemcore.broker.security.authorizer import AclAuthorizer
from idemcore.broker.security.session import KafkaPrincipal, Session
from idemcore.protocol.acls import (
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

OPS = [AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALTER,
       AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS]
TYPES = [AclResourceType.TOPIC, AclResourceType.GROUP]
# Names over a small alphabet, so that prefixes, literals and the wildcard collide often.
names = st.text(alphabet="ab*", min_size=1, max_size=3)
bindings = st.builds(
    lambda kind, name, pattern_type, principal, host, op, permission: AclBinding(
        ResourcePattern(kind, name, pattern_type), AccessControlEntry(principal, host, op, permission)),
    st.sampled_from(TYPES), names, st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]), st.sampled_from(["10.0.0.1", "10.0.0.2", "*"]),
    st.sampled_from(OPS), st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]))
sessions = st.builds(lambda name, host: Session(KafkaPrincipal("User", name), host),
                     st.sampled_from(["alice", "bob", "carol"]), st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"]))
ASKED = [op for op in OPS if op != AclOperation.ALL]


def applies_to(binding: AclBinding, kind: AclResourceType, name: str) -> bool:
    p = binding.pattern
    if p.resource_type != kind:
        return False
    if p.pattern_type == PatternType.LITERAL:
        return p.name == name or p.name == "*"
    return name.startswith(p.name)


def grants(op_in_acl: AclOperation, asked: AclOperation, implied: bool) -> bool:
    if op_in_acl in (AclOperation.ALL, asked):
        return True
    if not implied:
        return False
    if asked == AclOperation.DESCRIBE:
        return op_in_acl in (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER)
    return asked == AclOperation.DESCRIBE_CONFIGS and op_in_acl == AclOperation.ALTER_CONFIGS


def model(acls: set[AclBinding], who: Session, op: AclOperation, kind: AclResourceType, name: str,
          allow_everyone: bool = False, implied: bool = True) -> bool:
    applicable = [b for b in acls if applies_to(b, kind, name)]
    if not applicable:
        return allow_everyone

    def matching(b: AclBinding) -> bool:
        e = b.entry
        return e.principal in (str(who.principal), "User:*") and e.host in (who.client_host, "*")

    if any(matching(b) and b.entry.permission == AclPermissionType.DENY and grants(b.entry.operation, op, False)
           for b in applicable):
        return False
    return any(matching(b) and b.entry.permission == AclPermissionType.ALLOW and grants(b.entry.operation, op, implied)
               for b in applicable)


def authorizer_with(acls: set[AclBinding], **kwargs: bool) -> AclAuthorizer:
    authorizer = AclAuthorizer(**kwargs)
    assert authorizer.create_acls(sorted(acls, key=str)) == [None] * len(acls)
    return authorizer


@settings(max_examples=300, deadline=None)
@given(st.sets(bindings, max_size=12), sessions, st.sampled_from(ASKED), st.sampled_from(TYPES), names,
       st.booleans())
def test_authorize_is_the_scan_of_every_acl(acls, who, op, kind, name, allow_everyone):
    authorizer = authorizer_with(acls, allow_everyone_if_no_acl_found=allow_everyone)
    assert authorizer.authorize(who, op, kind, name) == model(acls, who, op, kind, name, allow_everyone)


@settings(max_examples=300, deadline=None)
@given(st.sets(bindings, max_size=12), sessions,
       st.sampled_from([AclOperation.READ, AclOperation.WRITE, AclOperation.ALTER]), st.sampled_from(TYPES))
def test_by_resource_type_is_some_resource_authorized(acls, who, op, kind):
    authorizer = authorizer_with(acls)
    # Every name that could decide it: those of the ACLs, each followed by a character no ACL uses, and one fresh.
    candidates = {b.pattern.name for b in acls} | {b.pattern.name + "~" for b in acls} | {"~fresh"}
    expected = any(model(acls, who, op, kind, name, implied=False) for name in candidates)
    assert authorizer.authorize_by_resource_type(who, op, kind) == expected


@settings(max_examples=200, deadline=None)
@given(st.sets(bindings, max_size=12), st.sampled_from(TYPES), names)
def test_a_match_filter_lists_the_acls_that_apply(acls, kind, name):
    authorizer = authorizer_with(acls)
    found = authorizer.acls(AclBindingFilter(ResourcePatternFilter(kind, name, PatternType.MATCH)))
    assert set(found) == {b for b in acls if applies_to(b, kind, name)}
    assert len(found) == len(set(found))


operations = st.lists(st.one_of(
    st.tuples(st.just("create"), st.lists(bindings, max_size=4)),
    st.tuples(st.just("delete"), st.builds(
        lambda kind, name, pattern_type, principal, op: AclBindingFilter(
            ResourcePatternFilter(kind, name, pattern_type), AccessControlEntryFilter(principal, None, op)),
        st.sampled_from([*TYPES, AclResourceType.ANY]), st.one_of(st.none(), names),
        st.sampled_from(list(PatternType)[1:]), st.sampled_from([None, "User:alice", "User:*"]),
        st.sampled_from([AclOperation.ANY, *OPS])))), max_size=12)


def filter_model(f: AclBindingFilter, b: AclBinding) -> bool:
    p, e = f.pattern, f.entry
    if p.resource_type not in (AclResourceType.ANY, b.pattern.resource_type):
        return False
    if p.pattern_type == PatternType.MATCH:
        name_ok = p.name is None or applies_to(b, b.pattern.resource_type, p.name)
    else:
        name_ok = p.pattern_type in (PatternType.ANY, b.pattern.pattern_type) and p.name in (None, b.pattern.name)
    return name_ok and e.principal in (None, b.entry.principal) and e.operation in (AclOperation.ANY, b.entry.operation)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_creates_and_deletes_keep_what_a_set_keeps_and_a_file_reloads_it(tmp_path_factory, steps):
    directory = tmp_path_factory.mktemp("acls")
    authorizer = AclAuthorizer(FileAclStore(directory, fsync=False))
    kept: set[AclBinding] = set()
    for action, argument in steps:
        if action == "create":
            assert authorizer.create_acls(argument) == [None] * len(argument)
            kept |= set(argument)
        else:
            [(error, deleted)] = authorizer.delete_acls([argument])
            gone = {b for b in kept if filter_model(argument, b)}
            assert error is None and {b for b, _ in deleted} == gone
            kept -= gone
        assert set(authorizer.acls(AclBindingFilter())) == kept
    assert set(AclAuthorizer(FileAclStore(directory)).acls(AclBindingFilter())) == kept
