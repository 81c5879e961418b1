"""``idemcore acls`` end to end against ``idemcore serve`` in a child process with Kafka's AclAuthorizer on:
kafka-acls.sh's options add, list and remove ACLs over the wire; they survive the broker's restart; a broker
without an authorizer, a bad option and an unreachable broker each end in one line and their exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from idemcore.cli import main

from .peers import ServeProcess, free_port

AUTHORIZER = "--override=authorizer.class.name=kafka.security.authorizer.AclAuthorizer"


def acls(capsys: pytest.CaptureFixture[str], bootstrap: str, *args: str) -> tuple[int, str, str]:
    status = main(["acls", "--bootstrap-server", bootstrap, *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_add_list_remove_and_restart(tmp_path, capsys):
    with ServeProcess(tmp_path / "data", AUTHORIZER, "--override=super.users=User:ANONYMOUS") as served:
        bootstrap = served.bootstrap
        # One call as a user runs it: the installed entry point in its own process.
        added = subprocess.run([sys.executable, "-m", "idemcore.cli", "acls", "--bootstrap-server", bootstrap, "--add",
                                "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
                                "--topic", "orders", "--group", "billing"], capture_output=True, text=True,
                               timeout=60, env=os.environ.copy())
        assert added.returncode == 0, added.stderr
        assert "Added ACLs for Topic 'orders' (LITERAL):" in added.stdout
        assert "User:alice has Allow permission for operation Read from host *" in added.stdout

        status, out, _ = acls(capsys, bootstrap, "--add", "--deny-principal", "User:mallory", "--deny-host",
                              "10.0.0.66", "--transactional-id", "orders-", "--resource-pattern-type", "prefixed")
        assert status == 0 and "Deny permission for operation All from host 10.0.0.66" in out

        status, out, _ = acls(capsys, bootstrap, "--list", "--json")
        assert status == 0
        listed = json.loads(out)
        assert len(listed) == 5
        assert {"resource_type": "TransactionalId", "name": "orders-", "pattern_type": "PREFIXED",
                "principal": "User:mallory", "host": "10.0.0.66", "operation": "All", "permission": "Deny"} in listed

        status, out, _ = acls(capsys, bootstrap, "--list", "--topic", "orders")
        assert status == 0 and "Current ACLs for Topic 'orders' (LITERAL):" in out and "billing" not in out
        # MATCH: the ACLs that apply to the transactional id orders-42 (the prefixed orders- one).
        status, out, _ = acls(capsys, bootstrap, "--list", "--transactional-id", "orders-42",
                              "--resource-pattern-type", "match")
        assert status == 0 and "TransactionalId 'orders-' (PREFIXED)" in out and "User:mallory" in out

        status, out, _ = acls(capsys, bootstrap, "--remove", "--topic", "orders", "--operation", "Describe")
        assert status == 0 and "Removed ACLs for Topic 'orders'" in out and "Describe" in out and "Read" not in out
        status, out, _ = acls(capsys, bootstrap, "--remove", "--group", "billing")  # every ACL of the group
        assert status == 0 and out.count("User:alice has Allow") == 2
        status, out, _ = acls(capsys, bootstrap, "--remove", "--group", "billing")
        assert status == 0 and "no ACL matched" in out

        status, out, _ = acls(capsys, bootstrap, "--add", "--allow-principal", "User:alice", "--topic", "a/b")
        assert status == 1 and "not added" in out and "INVALID_REQUEST" in out

        served.stop()
        served.start()
        status, out, _ = acls(capsys, bootstrap, "--list", "--json")
        assert status == 0
        assert sorted((a["name"], a["operation"]) for a in json.loads(out)) == [("orders", "Read"), ("orders-", "All")]


def test_a_broker_without_an_authorizer_and_bad_options(tmp_path, capsys):
    with ServeProcess(tmp_path / "data") as served:
        status, out, _ = acls(capsys, served.bootstrap, "--list")
        assert status == 1 and "SECURITY_DISABLED" in out and "No Authorizer is configured" in out
        status, out, _ = acls(capsys, served.bootstrap, "--add", "--allow-principal", "User:a", "--cluster")
        assert status == 1 and "SECURITY_DISABLED" in out
        status, _, err = acls(capsys, served.bootstrap, "--add", "--topic", "t")
        assert status == 2 and err.count("\n") == 1 and "--allow-principal" in err
    with pytest.raises(SystemExit) as exited:
        main(["acls", "--bootstrap-server", "127.0.0.1:1", "--add", "--allow-principal", "alice", "--topic", "t"])
    assert exited.value.code == 2 and "type:name" in capsys.readouterr().err
    status, _, err = acls(capsys, f"127.0.0.1:{free_port()}", "--list", "--timeout-ms", "2000")
    assert status == 2 and err.count("\n") == 1 and "127.0.0.1" in err
