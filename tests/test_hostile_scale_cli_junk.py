"""`idemcore groups` pointed at something that is not a Kafka broker: one line naming the address (exit status 2),
never a bare decoding error (it printed "an int32: 4 bytes where 2 are left", naming neither the broker nor what
it was reading) nor the address twice."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

TIMEOUT_S = 40


@pytest.fixture(params=[b"\x00\x00\x00\x08garbage!", b"\x00\x00\x00\x06\x00\x00\x00\x01\x00\x00"],
                ids=["garbage", "short-body"])
def junk_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A loopback server answering every connection with ``request.param`` (a well-framed answer that is no
    ApiVersions answer), then holding it open."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    done = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)
            try:
                conn.recv(4096)
                conn.sendall(request.param)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("action", [["list"], ["describe", "g"], ["delete", "g"]])
def test_a_server_that_is_not_kafka_is_one_line_naming_it(junk_port, action):
    where = f"127.0.0.1:{junk_port}"
    answer = subprocess.run([sys.executable, "-m", "idemcore.cli", "groups", *action, "--bootstrap", where,
                             "--timeout-ms", "3000"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert answer.returncode == 2 and answer.stdout == "", answer
    (line,) = answer.stderr.splitlines()
    assert line.startswith(f"idemcore: error: broker at {where}: unreadable ApiVersions answer: "), line
    assert line.count(where) == 1, line
