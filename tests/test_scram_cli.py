"""``idemcore users`` end to end: the first user written into a stopped broker's log dir and served after it
starts; users set, listed and deleted over the wire; refusals with exit status 1, mistakes with 2."""

from __future__ import annotations

import json
import subprocess
import sys

from idemcore.broker import Broker
from idemcore.cli import main
from idemcore.net import scram


def verifies(credential: scram.ScramCredential | None, mechanism: scram.ScramMechanism, password: str) -> bool:
    assert credential is not None
    salted = scram.salted_password(mechanism, password, credential.salt, credential.iterations)
    return scram.stored_key(mechanism, scram.client_key(mechanism, salted)) == credential.stored_key


def test_offline_first_user_then_the_broker_serves_it(tmp_path, capsys) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    password = tmp_path / "pw"
    password.write_text("first-secret\nignored second line\n")
    assert main(["users", "set", "admin", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
                 "--password-file", str(password), "--log-dir", str(logs)]) == 0
    assert capsys.readouterr().out == "user admin: SCRAM-SHA-512 credential set (8192 iterations)\n"
    assert main(["users", "list", "--json", "--log-dir", str(logs)]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"user": "admin", "error": None, "message": None,
         "credentials": [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]
    broker = Broker({}, data_dir=logs, fsync=False)
    try:
        assert verifies(broker.scram_credentials.get("admin", "SCRAM-SHA-512"), scram.SCRAM_SHA_512, "first-secret")
        # A running broker holds its log dir: an offline change is refused, naming the way that works.
        assert main(["users", "list", "--log-dir", str(logs)]) == 2
        assert "--bootstrap-server" in capsys.readouterr().err
    finally:
        broker.close()


def test_over_the_wire(kafka_server, tmp_path, capsys) -> None:
    password = tmp_path / "pw"
    password.write_text("wire-secret")
    where = ["--bootstrap-server", kafka_server.bootstrap]
    assert main(["users", "set", "alice", "--mechanism", "scram-sha-256", "--password-file", str(password),
                 *where]) == 0
    assert main(["users", "set", "alice", "--mechanism", "SCRAM-SHA-512", "--password-file", str(password),
                 *where]) == 0
    capsys.readouterr()
    store = kafka_server.broker.scram_credentials
    assert verifies(store.get("alice", "SCRAM-SHA-256"), scram.SCRAM_SHA_256, "wire-secret")
    assert main(["users", "list", *where]) == 0
    assert capsys.readouterr().out == "user alice: SCRAM-SHA-256 (4096 iterations), SCRAM-SHA-512 (4096 iterations)\n"
    assert main(["users", "set", "bob", "--mechanism", "SCRAM-SHA-256", "--iterations", "20000",
                 "--password-file", str(password), *where]) == 1
    assert capsys.readouterr().out == "user bob: UNACCEPTABLE_CREDENTIAL: Too many iterations\n"
    assert main(["users", "list", "alice", "nobody", *where]) == 1
    assert "user nobody: RESOURCE_NOT_FOUND: Attempt to describe a user credential that does not exist: nobody" \
        in capsys.readouterr().out
    assert main(["users", "delete", "alice", "--mechanism", "SCRAM-SHA-256", *where]) == 0
    assert store.get("alice", "SCRAM-SHA-256") is None and store.get("alice", "SCRAM-SHA-512") is not None


def test_mistakes_are_one_line_with_status_2(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    cases = [
        (["users", "set", "a", "--mechanism", "SCRAM-SHA-1", "--password-file", str(empty), "--log-dir",
          str(tmp_path)], "SCRAM-SHA-1"),
        (["users", "set", "a", "--mechanism", "SCRAM-SHA-256", "--password-file", str(empty), "--log-dir",
          str(tmp_path)], "is empty"),
        (["users", "list"], "one of the arguments --bootstrap-server --log-dir is required"),
        (["users", "list", "--bootstrap-server", "127.0.0.1:1"], "127.0.0.1:1"),
    ]
    for argv, says in cases:
        done = subprocess.run([sys.executable, "-m", "idemcore.cli", *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (argv, done.stderr)
        assert says in done.stderr and "Traceback" not in done.stderr, (argv, done.stderr)


def test_command_config_is_read(kafka_server, tmp_path, capsys) -> None:
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=PLAINTEXT\n")
    assert main(["users", "list", "--bootstrap-server", kafka_server.bootstrap, "--command-config", str(config)]) == 0
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n")
    assert main(["users", "list", "--bootstrap-server", kafka_server.bootstrap, "--command-config", str(config)]) == 2
    assert "GSSAPI" in capsys.readouterr().err
