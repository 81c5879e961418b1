"""``idemcore users set|delete|list``: SCRAM credentials (what ``kafka-configs.sh --entity-type users
--alter --add-config 'SCRAM-SHA-256=[...]'`` does), over AlterUserScramCredentials / DescribeUserScramCredentials
(KIP-554) to a running broker (``--bootstrap-server``), or written into a stopped broker's log dir (``--log-dir``)
so the first user exists before any listener requires SASL. Both ways apply the broker's rules (iterations 4096 to
16384, ...). The password is read from a file (``-``: standard input), never from the command line, where other
users of the machine could read it; it is salted here and only the salted password travels."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from idemcore.cli.options import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security, positive
from idemcore.errors import IdemcoreError
from idemcore.net import scram
from idemcore.net.scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from idemcore.protocol.codes import error_name

#: Exit status when the broker refused a change or a user is unknown (printed with the user).
USER_FAILED = 1
#: kafka-configs.sh's default iterations.
DEFAULT_ITERATIONS = 4096


def _mechanism(text: str) -> scram.ScramMechanism:
    try:
        return scram.mechanism_named(text.upper())
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _password(path: str) -> str:
    """The first line of ``path`` (``-``: standard input), without its line end."""
    if path == "-":
        text = sys.stdin.readline()
    else:
        with open(path, encoding="utf-8") as file:
            text = file.readline()
    password = text.rstrip("\r\n")
    if not password:
        raise ValueError(f"the password file {path} is empty: its first line is the password")
    return password


def _call(args: argparse.Namespace, request: Any) -> Any:
    """``request`` answered by the broker at ``--bootstrap-server``, or by the stopped broker's ``--log-dir``."""
    if args.log_dir is not None:
        return _offline(args.log_dir, request)
    from idemcore.net.broker_channel import BlockingBrokerChannel
    from idemcore.net.tcp import parse_bootstrap

    security = command_config_security(args.command_config)
    host, port = parse_bootstrap(args.bootstrap_server)[0]
    channel = BlockingBrokerChannel(host, port, "idemcore-users", request_timeout_ms=args.timeout_ms,
                                    security=security)
    try:
        return channel.call(request)
    finally:
        channel.close()


def _offline(log_dir: str, request: Any) -> Any:
    """The request applied to the log dir's credential file with the broker's rules, holding the directory's lock
    (a running broker holds it: refused)."""
    from pathlib import Path

    from idemcore.broker.log_manager import _lock_data_dir
    from idemcore.broker.security import scram_requests
    from idemcore.broker.security.scram_credentials import FileScramCredentialStore

    directory = Path(log_dir)
    if not directory.is_dir():
        raise IdemcoreError(f"--log-dir {log_dir} is not a directory")
    try:
        lock = _lock_data_dir(directory)
    except IdemcoreError as error:
        raise IdemcoreError(f"{error}; stop it, or use --bootstrap-server to change a running broker's users") from None
    try:
        store = FileScramCredentialStore(directory)
        if isinstance(request, AlterUserScramCredentialsRequest):
            return scram_requests.alter(store, request)
        return scram_requests.describe(store, request)
    finally:
        os.close(lock)


def _altered(answer: Any, user: str, done: str) -> int:
    if not isinstance(answer, AlterUserScramCredentialsResponse):
        raise IdemcoreError(f"the broker answered with a {type(answer).__name__}")
    failed = False
    for result in answer.results:
        if result.error_code:
            failed = True
            print(f"user {result.user}: {error_name(result.error_code)}: {result.error_message or ''}".rstrip(": "))
        else:
            print(f"user {result.user}: {done}")
    return USER_FAILED if failed or not answer.results else 0


def run_set(args: argparse.Namespace) -> int:
    mechanism: scram.ScramMechanism = args.mechanism
    password = _password(args.password_file)
    salt = os.urandom(32)
    salted = scram.salted_password(mechanism, password, salt, args.iterations) \
        if mechanism.min_iterations <= args.iterations <= scram.MAX_ITERATIONS else b"-"  # the broker refuses it
    request = AlterUserScramCredentialsRequest(upsertions=(ScramCredentialUpsertion(
        args.user, mechanism.wire_type, args.iterations, salt, salted),))
    return _altered(_call(args, request), args.user, f"{mechanism.name} credential set ({args.iterations} iterations)")


def run_delete(args: argparse.Namespace) -> int:
    mechanism: scram.ScramMechanism = args.mechanism
    request = AlterUserScramCredentialsRequest(deletions=(ScramCredentialDeletion(args.user, mechanism.wire_type),))
    return _altered(_call(args, request), args.user, f"{mechanism.name} credential deleted")


def run_list(args: argparse.Namespace) -> int:
    answer = _call(args, DescribeUserScramCredentialsRequest(tuple(args.users) or None))
    if not isinstance(answer, DescribeUserScramCredentialsResponse):
        raise IdemcoreError(f"the broker answered with a {type(answer).__name__}")
    if answer.error_code:
        print(f"{error_name(answer.error_code)}: {answer.error_message or ''}".rstrip(": "))
        return USER_FAILED
    rows: list[dict[str, Any]] = []
    failed = False
    for result in answer.results:
        if result.error_code:
            failed = True
        rows.append({"user": result.user, "error": error_name(result.error_code) if result.error_code else None,
                     "message": result.error_message, "credentials": [
                         {"mechanism": scram.BY_WIRE_TYPE[c.mechanism].name if c.mechanism in scram.BY_WIRE_TYPE
                          else f"type {c.mechanism}", "iterations": c.iterations} for c in result.credentials]})
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            if row["error"]:
                print(f"user {row['user']}: {row['error']}: {row['message'] or ''}".rstrip(": "))
            else:
                print(f"user {row['user']}: " + ", ".join(f"{c['mechanism']} ({c['iterations']} iterations)"
                                                          for c in row["credentials"]))
    return USER_FAILED if failed else 0


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    users = commands.add_parser(
        "users", parents=[common], help="set, delete and list users' SCRAM credentials",
        description="SCRAM credentials of a running broker (--bootstrap-server, over AlterUserScramCredentials and "
                    "DescribeUserScramCredentials) or of a stopped broker's log dir (--log-dir: the first users, "
                    "before a listener requires SASL). Exit status 0; 1 when the broker refused a change or a user "
                    "is unknown (printed with the user); 2 for a bad option or a broker that cannot be reached.")
    actions = users.add_subparsers(dest="action", required=True, metavar="{set,delete,list}")

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, parents=[common], help=help_text, description=help_text)
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--bootstrap-server", type=bootstrap_servers, metavar="HOST:PORT",
                           help="a running broker (the first of a comma-separated list is used)")
        where.add_argument("--log-dir", metavar="DIR", help="a stopped broker's log dir (alone, not in a cluster)")
        parser.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
        parser.add_argument("--timeout-ms", type=positive, default=30_000,
                            help="how long the request may take (default 30000)")
        return parser

    setting = action("set", "set (add or replace) a user's credential for one SCRAM mechanism")
    setting.add_argument("user", metavar="NAME")
    setting.add_argument("--mechanism", type=_mechanism, required=True, metavar="MECHANISM",
                         help="SCRAM-SHA-256 or SCRAM-SHA-512")
    setting.add_argument("--iterations", type=positive, default=DEFAULT_ITERATIONS,
                         help=f"PBKDF2 iterations, {scram.SCRAM_SHA_256.min_iterations} to {scram.MAX_ITERATIONS} "
                              f"(default {DEFAULT_ITERATIONS})")
    setting.add_argument("--password-file", required=True, metavar="FILE",
                         help="a file whose first line is the password (- for standard input)")
    setting.set_defaults(run=run_set)

    deleting = action("delete", "delete a user's credential for one SCRAM mechanism")
    deleting.add_argument("user", metavar="NAME")
    deleting.add_argument("--mechanism", type=_mechanism, required=True, metavar="MECHANISM",
                          help="SCRAM-SHA-256 or SCRAM-SHA-512")
    deleting.set_defaults(run=run_delete)

    listing = action("list", "list users and their SCRAM mechanisms and iterations (never a secret)")
    listing.add_argument("users", nargs="*", metavar="NAME", help="only these users (default: every user)")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    listing.set_defaults(run=run_list)
