"""``idemcore groups list|describe|delete`` end to end: the command in a child process against
:class:`~idemcore.broker.server.Server` on a free loopback port, over a live group of one confluent-kafka
(librdkafka) consumer; what it prints and its exit status for each answer, and one line for a broker it cannot
reach."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from idemcore import Broker
from idemcore.broker.server import Server

from .peers import free_port

try:
    confluent_kafka = importlib.import_module("confluent_kafka")
except ImportError as exc:  # these tests never skip
    pytest.fail(f"confluent_kafka is missing ({exc}): pip install 'confluent-kafka>=2.3' (a test dependency)")

GROUP = "cli-group"
TIMEOUT_S = 40


@pytest.fixture
def server() -> Iterator[Server]:
    broker = Broker({"t": 2, "u": 1}, offsets_topic_partitions=3)
    try:
        with Server(broker, housekeeping_ms=100) as served:
            yield served
    finally:
        broker.close()


def groups(server: Server | None, *args: str, port: int | None = None) -> subprocess.CompletedProcess[str]:
    bootstrap = server.bootstrap if server is not None else f"127.0.0.1:{port}"
    return subprocess.run([sys.executable, "-m", "idemcore.cli", "groups", args[0], "--bootstrap", bootstrap,
                           *args[1:]], capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture
def member(server: Server) -> Iterator[Any]:
    """A librdkafka consumer of GROUP holding both partitions of t, with offsets committed of t-0 and u-0."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": server.bootstrap, "group.id": GROUP, "client.id": "cli-member",
        "session.timeout.ms": 6_000, "heartbeat.interval.ms": 300, "enable.auto.commit": False})
    consumer.subscribe(["t"])
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "the consumer was not assigned t's partitions"
            consumer.poll(0.05)
        consumer.commit(offsets=[confluent_kafka.TopicPartition("t", 0, 4),
                                 confluent_kafka.TopicPartition("u", 0, 9)], asynchronous=False)
        yield consumer
    finally:
        try:
            consumer.close()
        except RuntimeError:  # closed by the test
            pass


def test_list_describe_and_delete_a_live_group_then_an_empty_one(server, member):
    listed = groups(server, "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["GROUP", "TYPE", "PROTOCOL-TYPE", "STATE", "COORDINATOR"]
    assert row.split() == [GROUP, "classic", "consumer", "Stable", str(server.broker.broker_id)]
    assert json.loads(groups(server, "list", "--state", "empty", "--json").stdout) == []
    assert [g["group_id"] for g in json.loads(groups(server, "list", "--state", "STABLE", "--type", "classic",
                                                     "--json").stdout)] == [GROUP]

    described = groups(server, "describe", GROUP, "--json")
    assert described.returncode == 0, described.stderr
    (view,) = json.loads(described.stdout)
    assert (view["state"], view["protocol_type"], view["protocol"], view["error"]) == (
        "Stable", "consumer", "range", None)
    (one,) = view["members"]
    assert (one["assignment"], one["client_id"]) == ("t-0,t-1", "cli-member")
    assert one["member_id"].startswith("cli-member-")
    assert [(o["topic"], o["partition"], o["offset"]) for o in view["offsets"]] == [("t", 0, 4), ("u", 0, 9)]
    table = groups(server, "describe", GROUP).stdout
    assert f"group {GROUP}: Stable, protocol type consumer, protocol range, 1 member(s)" in table
    assert "t-0,t-1" in table and "COMMITTED-OFFSET" in table

    refused = groups(server, "delete", GROUP)
    assert (refused.returncode, refused.stdout) == (1, f"group {GROUP}: NON_EMPTY_GROUP\n")
    subscribed = groups(server, "delete", GROUP, "--topic", "t")
    assert (subscribed.returncode, subscribed.stdout) == (1, f"group {GROUP}: t-0 GROUP_SUBSCRIBED_TO_TOPIC\n")
    other = groups(server, "delete", GROUP, "--topic", "u")
    assert (other.returncode, other.stdout) == (0, f"group {GROUP}: u-0 offset deleted\n")
    assert [o["topic"] for o in json.loads(groups(server, "describe", GROUP, "--json").stdout)[0]["offsets"]] == ["t"]

    member.close()  # LeaveGroup: the group is Empty, with t-0's offset
    deadline = time.monotonic() + TIMEOUT_S
    while "Empty" not in groups(server, "list").stdout:
        assert time.monotonic() < deadline, "the group did not become Empty"
        time.sleep(0.1)
    deleted = groups(server, "delete", GROUP, "nobody")
    assert (deleted.returncode, deleted.stdout) == (1, f"group {GROUP}: deleted\ngroup nobody: GROUP_ID_NOT_FOUND\n")
    assert groups(server, "list").stdout == ""
    gone = groups(server, "describe", GROUP)
    assert (gone.returncode, gone.stdout) == (1, f"group {GROUP}: GROUP_ID_NOT_FOUND\n")


def test_an_unreachable_broker_is_one_line_and_status_2():
    answer = groups(None, "list", "--timeout-ms", "2000", port=free_port())
    assert answer.returncode == 2 and answer.stdout == ""
    (line,) = answer.stderr.splitlines()
    assert line.startswith("idemcore: error: broker at 127.0.0.1:"), line
