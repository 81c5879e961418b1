"""``idemcore acls --add|--remove|--list``: ACLs of a running broker or cluster, as Kafka's ``kafka-acls.sh``
manages them (its option names), over :class:`idemcore.client.acl_admin.AclAdmin`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from idemcore.cli.options import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security, positive

#: Exit status when the broker refused an ACL or a filter (printed with it).
ACL_FAILED = 1


def _operation(text: str) -> Any:
    from idemcore.protocol.acls import AclOperation

    try:
        operation = AclOperation.from_kafka_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise argparse.ArgumentTypeError(f"operation {text!r} is not one an ACL may name")
    return operation


def _pattern_type(text: str) -> Any:
    from idemcore.protocol.acls import PatternType

    try:
        pattern_type = PatternType.from_kafka_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if pattern_type == PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError("the resource pattern type may be literal, prefixed, any or match")
    return pattern_type


def _principal(text: str) -> str:
    from idemcore.broker.security.session import KafkaPrincipal

    try:
        return str(KafkaPrincipal.parse(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _resources(args: argparse.Namespace) -> list[tuple[Any, str]]:
    """``(resource type, name)`` of every resource the options name."""
    from idemcore.protocol.acls import CLUSTER_NAME, AclResourceType

    named = [(AclResourceType.TOPIC, t) for t in args.topic] + [(AclResourceType.GROUP, g) for g in args.group]
    named += [(AclResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        named.append((AclResourceType.CLUSTER, CLUSTER_NAME))
    return named


def _entries(args: argparse.Namespace) -> list[Any]:
    """The entries ``--allow-principal`` / ``--deny-principal`` with their hosts and ``--operation`` describe."""
    from idemcore.protocol.acls import WILDCARD_HOST, AccessControlEntry, AclOperation, AclPermissionType

    operations = args.operation or [AclOperation.ALL]
    entries = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            for host in hosts or [WILDCARD_HOST]:
                entries += [AccessControlEntry(principal, host, operation, permission) for operation in operations]
    return list(dict.fromkeys(entries))


def _describe(binding: Any) -> dict[str, str]:
    p, e = binding.pattern, binding.entry
    return {"resource_type": p.resource_type.kafka_name, "name": p.name, "pattern_type": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.kafka_name,
            "permission": e.permission.kafka_name}


def _line(binding: Any) -> str:
    e = binding.entry
    return (f"  {e.principal} has {e.permission.kafka_name} permission for operation {e.operation.kafka_name} "
            f"from host {e.host}")


def _print_by_resource(bindings: list[Any], heading: str) -> None:
    by_resource: dict[Any, list[Any]] = {}
    for binding in bindings:
        by_resource.setdefault(binding.pattern, []).append(binding)
    for pattern, found in by_resource.items():
        print(f"{heading} {pattern.resource_type.kafka_name} {pattern.name!r} ({pattern.pattern_type.name}):")
        for binding in found:
            print(_line(binding))


def _error(code: int, message: str | None) -> str:
    from idemcore.client.group_admin import error_name

    return error_name(code) + (f" ({message})" if message else "")


def run(args: argparse.Namespace) -> int:
    from idemcore.client.acl_admin import AclAdmin

    if args.add + args.remove + args.list != 1:
        raise ValueError("give exactly one of --add, --remove and --list")
    with AclAdmin(args.bootstrap_server, request_timeout_ms=args.timeout_ms,
                  security=command_config_security(args.command_config)) as admin:
        if args.add:
            return _add(args, admin)
        if args.remove:
            return _remove(args, admin)
        return _list(args, admin)


def _add(args: argparse.Namespace, admin: Any) -> int:
    from idemcore.protocol.acls import AclBinding, PatternType, ResourcePattern

    pattern_type = args.resource_pattern_type or PatternType.LITERAL
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(f"--add needs --resource-pattern-type literal or prefixed, not {pattern_type.name.lower()}")
    resources, entries = _resources(args), _entries(args)
    if not resources:
        raise ValueError("--add needs a resource: --topic, --group, --transactional-id or --cluster")
    if not entries:
        raise ValueError("--add needs --allow-principal or --deny-principal")
    bindings = [AclBinding(ResourcePattern(kind, name, pattern_type), entry)
                for kind, name in resources for entry in entries]
    results = admin.create_acls(bindings)
    failed = [(b, r) for b, r in zip(bindings, results, strict=True) if r.error_code]
    if args.json:
        print(json.dumps([{**_describe(b), "error": _error(r.error_code, r.error_message) if r.error_code else None}
                          for b, r in zip(bindings, results, strict=True)]))
    else:
        _print_by_resource([b for b, r in zip(bindings, results, strict=True) if not r.error_code], "Added ACLs for")
        for binding, result in failed:
            print(f"not added: {binding}: {_error(result.error_code, result.error_message)}")
    return ACL_FAILED if failed else 0


def _filters(args: argparse.Namespace, default_pattern: Any) -> list[Any]:
    """The filters the options describe: per resource (or every resource when none is named) and per principal
    and operation given (any when none)."""
    from idemcore.protocol.acls import (
        AccessControlEntryFilter,
        AclBindingFilter,
        AclPermissionType,
        AclResourceType,
        ResourcePatternFilter,
    )

    pattern_type = args.resource_pattern_type or default_pattern
    resources: list[tuple[Any, str | None]] = list(_resources(args)) or [(AclResourceType.ANY, None)]
    if not args.resource_pattern_type and resources[0][1] is None:
        from idemcore.protocol.acls import PatternType

        pattern_type = PatternType.ANY
    who: list[tuple[str | None, Any, list[str]]] = \
        [(p, AclPermissionType.ALLOW, args.allow_host) for p in args.allow_principal] \
        + [(p, AclPermissionType.DENY, args.deny_host) for p in args.deny_principal] \
        + [(p, AclPermissionType.ANY, []) for p in args.principal]
    if not who:
        who = [(None, AclPermissionType.ANY, [])]
    from idemcore.protocol.acls import AclOperation

    filters = []
    for kind, name in resources:
        for principal, permission, hosts in who:
            hosts_or_any: list[str | None] = list(hosts) or [None]
            for host in hosts_or_any:
                for operation in args.operation or [AclOperation.ANY]:
                    filters.append(AclBindingFilter(ResourcePatternFilter(kind, name, pattern_type),
                                                    AccessControlEntryFilter(principal, host, operation, permission)))
    return list(dict.fromkeys(filters))


def _remove(args: argparse.Namespace, admin: Any) -> int:
    from idemcore.protocol.acls import PatternType

    if not _resources(args):
        raise ValueError("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
    results = admin.delete_acls(_filters(args, PatternType.LITERAL))
    failed = False
    removed = []
    for result in results:
        if result.error_code:
            failed = True
            print(f"not removed: {_error(result.error_code, result.error_message)}")
            continue
        for deleted in result.deleted:
            if deleted.error_code:
                failed = True
                print(f"not removed: {deleted.binding}: {_error(deleted.error_code, deleted.error_message)}")
            else:
                removed.append(deleted.binding)
    if args.json:
        print(json.dumps([_describe(b) for b in removed]))
    elif removed:
        _print_by_resource(removed, "Removed ACLs for")
    else:
        print("no ACL matched")
    return ACL_FAILED if failed else 0


def _list(args: argparse.Namespace, admin: Any) -> int:
    from idemcore.protocol.acls import PatternType

    found: list[Any] = []
    for acl_filter in _filters(args, PatternType.LITERAL):
        answer = admin.describe_acls(acl_filter)
        if answer.error_code:
            print(f"cannot list ACLs: {_error(answer.error_code, answer.error_message)}")
            return ACL_FAILED
        found += [b for b in answer.bindings if b not in found]
    if args.json:
        print(json.dumps([_describe(b) for b in found]))
    else:
        _print_by_resource(found, "Current ACLs for")
    return 0


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    acls = commands.add_parser(
        "acls", parents=[common], help="add, remove and list the ACLs of a running broker or cluster",
        description="ACL administration over Kafka's protocol (CreateAcls, DescribeAcls, DeleteAcls), with "
                    "kafka-acls.sh's options. --add: each principal given (with its hosts, default *) gets each "
                    "--operation (default All) on each resource named. --remove: the ACLs of each resource matching "
                    "the principals, hosts and operations given (all of them when none is). --list: the ACLs of "
                    "the resources named (all when none is). Exit status 0; 1 when the broker refused an ACL or "
                    "a filter (SECURITY_DISABLED: the broker has no authorizer.class.name); 2 for a bad option or "
                    "a broker that cannot be reached (one line).")
    action = acls.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="create ACLs")
    action.add_argument("--remove", action="store_true", help="delete ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    acls.add_argument("--bootstrap-server", type=bootstrap_servers, required=True, metavar="HOST:PORT",
                      help="a broker of the cluster (the first of a comma-separated list is asked)")
    acls.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    acls.add_argument("--topic", action="append", default=[], metavar="TOPIC", help="a topic (repeatable)")
    acls.add_argument("--group", action="append", default=[], metavar="GROUP", help="a consumer group (repeatable)")
    acls.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                      help="a transactional id (repeatable)")
    acls.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    acls.add_argument("--resource-pattern-type", type=_pattern_type, default=None, metavar="TYPE",
                      help="literal (the default) or prefixed; --list and --remove also take any and match")
    acls.add_argument("--allow-principal", type=_principal, action="append", default=[], metavar="TYPE:NAME",
                      help="a principal the ACLs allow, as User:alice or User:* (repeatable)")
    acls.add_argument("--deny-principal", type=_principal, action="append", default=[], metavar="TYPE:NAME",
                      help="a principal the ACLs deny (repeatable)")
    acls.add_argument("--principal", type=_principal, action="append", default=[], metavar="TYPE:NAME",
                      help="with --list or --remove: only ACLs of this principal, allow or deny (repeatable)")
    acls.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                      help="an IP address the allowed principals may come from (default *; repeatable)")
    acls.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                      help="an IP address the denied principals are denied from (default *; repeatable)")
    acls.add_argument("--operation", type=_operation, action="append", default=[], metavar="OPERATION",
                      help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                           "AlterConfigs, IdempotentWrite or All (repeatable; default All for --add)")
    acls.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh's sake (nothing is asked)")
    acls.add_argument("--timeout-ms", type=positive, default=30_000,
                      help="how long each request may take (default 30000)")
    acls.add_argument("--json", action="store_true", help="print one JSON array instead of text")
    acls.set_defaults(run=run)
