"""`idemcore groups list` given a state or type no group can have: refused as a bad option naming it (exit status
2, no traceback), as kafka-consumer-groups.sh refuses an "Invalid state list", instead of listing nothing with
status 0 while groups exist (a typo then reads as "no such groups")."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from idemcore import Broker
from idemcore.broker.server import Server

TIMEOUT_S = 40


@pytest.fixture
def server() -> Iterator[Server]:
    broker = Broker({"t": 1}, offsets_topic_partitions=3)
    try:
        with Server(broker, housekeeping_ms=100) as served:
            yield served
    finally:
        broker.close()


def groups(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "idemcore.cli", "groups", "list", "--bootstrap", server.bootstrap,
                           "--timeout-ms", "5000", *args], capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.parametrize(("flag", "value"), [("--state", "stabel"), ("--state", ""), ("--type", "kip848"),
                                             ("--state", "Stable,bogus")])
def test_an_unknown_state_or_type_is_a_bad_option_naming_it(server, flag, value):
    answer = groups(server, flag, value)
    assert answer.returncode == 2 and answer.stdout == "", answer
    assert "Traceback" not in answer.stderr
    last = answer.stderr.splitlines()[-1]
    bad = value.split(",")[-1]
    assert f"no {flag[2:]} {bad!r}" in last and "valid" in last, last


def test_known_states_and_types_in_any_case_and_as_a_comma_list_are_accepted(server):
    answer = groups(server, "--state", "stable,EMPTY", "--state", "assigning", "--type", "CLASSIC,consumer", "--json")
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout) == []
