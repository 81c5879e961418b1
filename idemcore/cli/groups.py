"""``idemcore groups list|describe|delete``: consumer-group administration of a running broker or cluster (what
Kafka's ``kafka-consumer-groups.sh`` does), over :class:`idemcore.client.group_admin.GroupAdmin`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from idemcore.cli.options import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security, positive

#: Exit status when a group's answer was an error (a missing group, a group that still has members).
GROUP_FAILED = 1


#: The states and types ListGroups filters by (Kafka's GroupState and GroupType, but UNKNOWN): a filter naming
#: anything else matches no group, so a typo is refused here instead of listing nothing, as kafka-consumer-groups.sh
#: refuses an "Invalid state list".
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
TYPES = ("classic", "consumer")


def _choices(kind: str, valid: tuple[str, ...]) -> Any:
    """An argparse type: a comma-separated list of ``valid`` names in any case, each given as ``valid`` spells it."""
    by_lower = {name.lower(): name for name in valid}

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",")]
        unknown = [name for name in names if name.lower() not in by_lower]
        if unknown:
            raise argparse.ArgumentTypeError(f"no {kind} {unknown[0]!r}: valid {kind}s are {', '.join(valid)}")
        return [by_lower[name.lower()] for name in names]

    return parse


def _admin(args: argparse.Namespace) -> Any:
    from idemcore.client.group_admin import GroupAdmin

    return GroupAdmin(args.bootstrap, request_timeout_ms=args.timeout_ms,
                      security=command_config_security(args.command_config))


def _table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def run_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        listed = admin.list_groups(args.state, args.type)
    if args.json:
        print(json.dumps([{"group_id": g.group_id, "type": g.group_type, "protocol_type": g.protocol_type,
                           "state": g.state, "coordinator": node} for node, g in listed]))
    elif listed:
        _table([(g.group_id, g.group_type, g.protocol_type or "-", g.state, node) for node, g in listed],
               ("GROUP", "TYPE", "PROTOCOL-TYPE", "STATE", "COORDINATOR"))
    return 0


def _assignment(protocol_type: str, data: bytes) -> str:
    """A member's assignment as ``topic-partition,...`` when it is the consumer protocol's, else its size."""
    from idemcore.net.consumer_protocol import CONSUMER_PROTOCOL_TYPE, ConsumerProtocolError, decode_assignment

    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return f"{len(data)} bytes"
    try:
        partitions = decode_assignment(data).partitions
    except ConsumerProtocolError as error:
        return f"undecodable: {error}"
    return ",".join(f"{topic}-{partition}" for topic, partition in sorted(partitions)) or "-"


def run_describe(args: argparse.Namespace) -> int:
    from idemcore.client.group_admin import error_name
    from idemcore.protocol.codes import ErrorCode

    failed = False
    described: list[dict[str, Any]] = []
    with _admin(args) as admin:
        for group in admin.describe_groups(args.groups):
            offsets_error, offsets = admin.committed_offsets(group.group_id)
            error = group.error_code or offsets_error
            failed |= error != ErrorCode.NONE
            described.append({
                "group_id": group.group_id, "error": None if error == ErrorCode.NONE else error_name(error),
                "state": group.state, "protocol_type": group.protocol_type, "protocol": group.protocol_name,
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "assignment": _assignment(group.protocol_type, m.assignment)} for m in group.members],
                "offsets": [{"topic": o.topic, "partition": o.partition, "offset": o.offset, "metadata": o.metadata}
                            for o in offsets if o.offset >= 0]})
    if args.json:
        print(json.dumps(described))
        return GROUP_FAILED if failed else 0
    for n, group_view in enumerate(described):
        if n:
            print()
        if group_view["error"] is not None:
            print(f"group {group_view['group_id']}: {group_view['error']}")
            continue
        print(f"group {group_view['group_id']}: {group_view['state']}, protocol type "
              f"{group_view['protocol_type'] or '-'}, protocol {group_view['protocol'] or '-'}, "
              f"{len(group_view['members'])} member(s)")
        if group_view["members"]:
            _table([(m["member_id"], m["group_instance_id"] or "-", m["client_id"] or "-", m["client_host"] or "-",
                     m["assignment"]) for m in group_view["members"]],
                   ("MEMBER", "INSTANCE", "CLIENT", "HOST", "ASSIGNMENT"))
        if group_view["offsets"]:
            _table([(o["topic"], o["partition"], o["offset"]) for o in group_view["offsets"]],
                   ("TOPIC", "PARTITION", "COMMITTED-OFFSET"))
    return GROUP_FAILED if failed else 0


def run_delete(args: argparse.Namespace) -> int:
    from idemcore.client.group_admin import error_name
    from idemcore.protocol.codes import ErrorCode

    failed = False
    with _admin(args) as admin:
        if not args.topic:
            for group_id, code in admin.delete_groups(args.groups).items():
                failed |= code != ErrorCode.NONE
                print(f"group {group_id}: " + ("deleted" if code == ErrorCode.NONE else error_name(code)))
            return GROUP_FAILED if failed else 0
        for group_id in dict.fromkeys(args.groups):
            error, offsets = admin.committed_offsets(group_id)
            partitions = [(o.topic, o.partition) for o in offsets if o.topic in args.topic and o.offset >= 0]
            if error == ErrorCode.NONE and not partitions:
                print(f"group {group_id}: no committed offsets of {', '.join(args.topic)}")
                continue
            answer = admin.delete_offsets(group_id, partitions) if error == ErrorCode.NONE else None
            error = error if answer is None else answer.error_code
            if answer is None or error != ErrorCode.NONE:
                failed = True
                print(f"group {group_id}: {error_name(error)}")
                continue
            for topic, partition, code in answer.results:
                failed |= code != ErrorCode.NONE
                print(f"group {group_id}: {topic}-{partition} "
                      + ("offset deleted" if code == ErrorCode.NONE else error_name(code)))
    return GROUP_FAILED if failed else 0


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    groups = commands.add_parser(
        "groups", parents=[common], help="list, describe and delete consumer groups of a running broker or cluster",
        description="Consumer-group administration over Kafka's protocol (as kafka-consumer-groups.sh): each "
                    "request goes to the group's coordinator (found with FindCoordinator), ListGroups to every "
                    "broker of the cluster. Exit status 0; 1 when a group's answer is an error (printed with the "
                    "group); 2 for a bad option or a broker that cannot be reached (one line).")
    actions = groups.add_subparsers(dest="action", required=True, metavar="{list,describe,delete}")

    def action(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, parents=[common], help=help_text, description=description)
        parser.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
        parser.add_argument("--bootstrap", type=bootstrap_servers, required=True, metavar="HOST:PORT",
                            help="a broker of the cluster (the first of a comma-separated list is used)")
        parser.add_argument("--timeout-ms", type=positive, default=30_000,
                            help="how long each request may take (default 30000)")
        return parser

    listing = action("list", "list the groups of every broker",
                     "One line per group: its id, type (classic or consumer), protocol type (- for a group that "
                     "only has committed offsets), state, and the broker coordinating it.")
    listing.add_argument("--state", type=_choices("state", STATES), action="extend", default=[], metavar="STATE",
                         help=f"only groups in this state ({', '.join(STATES)}; any case; comma-separated or "
                              "repeated; needs ListGroups v4)")
    listing.add_argument("--type", type=_choices("type", TYPES), action="extend", default=[], metavar="TYPE",
                         help="only groups of this type (classic or consumer; comma-separated or repeated; needs "
                              "ListGroups v5)")
    listing.add_argument("--json", action="store_true", help="print one JSON array instead of a table")
    listing.set_defaults(run=run_list)

    describe = action("describe", "describe groups: members, assignments, committed offsets",
                      "Per group: its state, protocol type and protocol, each member (id, instance id, client id, "
                      "host, assigned partitions decoded from the consumer protocol) and the group's committed "
                      "offsets. A group the coordinator does not have is answered GROUP_ID_NOT_FOUND (exit status 1).")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    describe.add_argument("--json", action="store_true", help="print one JSON array instead of tables")
    describe.set_defaults(run=run_describe)

    delete = action("delete", "delete groups (or, with --topic, a group's offsets of topics)",
                    "Delete each group with its committed offsets (DeleteGroups): refused NON_EMPTY_GROUP while it "
                    "has members, GROUP_ID_NOT_FOUND for none. With --topic, delete only the group's committed "
                    "offsets of those topics (OffsetDelete), refused GROUP_SUBSCRIBED_TO_TOPIC for a topic a member "
                    "subscribes to.")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    delete.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                        help="delete the group's committed offsets of TOPIC instead of the group (repeatable)")
    delete.set_defaults(run=run_delete)
