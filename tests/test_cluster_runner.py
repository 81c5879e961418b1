"""The local cluster runner (idemcore.cluster.LocalCluster, ``idemcore cluster``): a real ZooKeeper and real
``idemcore serve`` children on loopback ports; one cluster for the module (the CLI tests use its ZooKeeper)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from idemcore.cluster import ClusterError, LocalCluster, answers_api_versions, recommended_settings
from idemcore.interrupts import deferred_interrupts

from .cluster_harness import (
    WAIT_REGISTERED,
    alive,
    children,
    cluster_fixture,
    cmdline,
    running_over,
    wait_gone,
)

CLI_TIMEOUT_S = 90

cluster = cluster_fixture(3)


def test_every_broker_answers_with_its_own_id_port_directory_and_the_cluster_settings(cluster):
    ports = [cluster.broker(n).port for n in range(3)]
    assert len(set(ports)) == 3
    assert cluster.bootstrap_servers == ",".join(f"127.0.0.1:{port}" for port in ports)
    settings = recommended_settings(3, 6000)
    assert recommended_settings(3, 6000)["default.replication.factor"] == "3"
    assert recommended_settings(2, 6000)["min.insync.replicas"] == "2"
    assert recommended_settings(1, 6000)["transaction.state.log.min.isr"] == "1"
    for n in range(3):
        info = cluster.broker(n)
        assert answers_api_versions(info.port)
        assert info.log_dir == cluster.data_dir / f"broker-{n}" and info.serve_log.parent == info.log_dir
        argv = cmdline(info.pid)
        assert argv[argv.index("--node-id") + 1] == str(n)
        assert argv[argv.index("--port") + 1] == str(info.port)
        assert argv[argv.index("--data-dir") + 1] == str(info.log_dir)
        overrides = {argv[i + 1] for i, arg in enumerate(argv) if arg == "--override"}
        assert f"zookeeper.connect={cluster.zookeeper_hosts}" in overrides
        assert {f"{key}={value}" for key, value in settings.items()} <= overrides
        assert f"listening on 127.0.0.1:{info.port}" in info.serve_log.read_text()
    assert cluster.exited() == {}


def test_kill_sigkills_that_broker_alone_and_start_brings_it_back_on_its_port(cluster):
    before = {n: cluster.broker(n).pid for n in range(3)}
    port = cluster.broker(2).port
    cluster.kill(2)
    assert not alive(before[2]) and cluster.broker(2).pid is None
    assert not answers_api_versions(port)
    log = cluster.broker(2).serve_log.read_text()
    assert "stopped; the logs are closed" not in log  # SIGKILL: no clean stop
    assert all(alive(before[n]) and cluster.broker(n).pid == before[n] and answers_api_versions(cluster.broker(n).port)
               for n in (0, 1))
    with pytest.raises(ValueError, match="broker 2 is not running"):
        cluster.kill(2)
    info = cluster.start(2)
    assert info.port == port and info.pid not in (None, before[2]) and answers_api_versions(port)
    assert info.serve_log.read_text().count("starting broker 2 on port") == 2  # one log, appended
    with pytest.raises(ValueError, match="broker 2 is running"):
        cluster.start(2)
    assert cluster.exited() == {}


def test_kill_with_sigterm_is_that_brokers_clean_stop(cluster):
    pid = cluster.broker(0).pid
    cluster.kill(0, signal=signal.SIGTERM)
    assert not alive(pid)
    assert cluster.broker(0).serve_log.read_text().endswith("idemcore serve: stopped; the logs are closed\n")
    assert answers_api_versions(cluster.start(0).port)


def test_a_broker_that_dies_unasked_is_reported_by_exited(cluster):
    pid = cluster.broker(1).pid
    os.kill(pid, signal.SIGKILL)  # as the OOM killer would: not through the cluster
    deadline = time.monotonic() + 10
    while not cluster.exited() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.exited() == {1: -signal.SIGKILL}
    cluster.start(1)
    assert cluster.exited() == {}


def test_registration_is_the_brokers_znode(cluster, tmp_path):
    from kazoo.client import KazooClient

    chroot = f"/registration-{os.getpid()}"
    other = LocalCluster(2, tmp_path, zookeeper_hosts=cluster.zookeeper_hosts + chroot)
    try:
        with pytest.raises(ClusterError, match=r"broker 1 did not register .*/brokers/ids/1\) within 0.3 s"):
            other.wait_until_registered(1, timeout_s=0.3)
        zk = KazooClient(hosts=cluster.zookeeper_hosts)
        zk.start(timeout=15)
        try:
            zk.create(f"{chroot}/brokers/ids/1", b"{}", makepath=True)
            other.wait_until_registered(1, timeout_s=5)
        finally:
            zk.stop()
            zk.close()
    finally:
        other.stop()


def test_settings_the_cluster_owns_are_not_overrides(tmp_path):
    with pytest.raises(ValueError, match=r"the cluster sets listeners, zookeeper\.connect itself"):
        LocalCluster(1, tmp_path, overrides={"zookeeper.connect": "zk:2181", "listeners": "PLAINTEXT://:1"})
    with pytest.raises(ValueError, match="no broker 3: the cluster has brokers 0 to 1"):
        LocalCluster(2, tmp_path).broker(3)


def test_sigterm_held_while_a_child_is_recorded_is_delivered_after():
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        with deferred_interrupts((signal.SIGINT, signal.SIGTERM)):
            signal.raise_signal(signal.SIGTERM)  # handled before it returns (it runs the pending handlers)
            assert received == []
        assert received == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------- the command


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "idemcore.cli", "cluster", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _registration() -> list[str]:
    return [] if WAIT_REGISTERED else ["--no-registration-check"]


def _read_until_table(process: subprocess.Popen[str], brokers: int) -> list[str]:
    """The command's first 3 + ``brokers`` lines (a thread reads, so the wait is bounded)."""
    lines: queue.Queue[str] = queue.Queue()
    stream = process.stdout
    assert stream is not None
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    read: list[str] = []
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while len(read) < 3 + brokers:
        try:
            read.append(lines.get(timeout=max(0.01, deadline - time.monotonic())).rstrip("\n"))
        except queue.Empty:
            raise AssertionError(f"no table within {CLI_TIMEOUT_S} s (exit status {process.poll()}): {read}") from None
    return read


def test_the_command_prints_bootstrap_servers_and_stops_every_child_on_sigterm(cluster, tmp_path):
    hosts = f"{cluster.zookeeper_hosts}/cli-{os.getpid()}"
    process = _cli("--brokers", "2", "--data-dir", str(tmp_path), "--zookeeper", hosts,
                   *_registration())
    try:
        lines = _read_until_table(process, 2)
        assert lines[0].startswith("bootstrap.servers=") and lines[1] == f"zookeeper.connect={hosts}"
        bootstrap = lines[0].removeprefix("bootstrap.servers=").split(",")
        ports = [int(server.removeprefix("127.0.0.1:")) for server in bootstrap]
        assert len(ports) == 2 and all(answers_api_versions(port) for port in ports)
        rows = [line.split() for line in lines[3:]]
        assert [row[0] for row in rows] == ["0", "1"] and [int(row[1]) for row in rows] == ports
        assert [row[3] for row in rows] == [str(tmp_path / f"broker-{n}" / "serve.log") for n in (0, 1)]
        spawned = children(process.pid)
        assert sorted(spawned) == sorted(int(row[2]) for row in rows)  # its ZooKeeper is given: brokers only
        process.send_signal(signal.SIGTERM)
        assert process.wait(CLI_TIMEOUT_S) == 0
        assert wait_gone(spawned) == [] and running_over(tmp_path) == []
        for n in (0, 1):
            assert (tmp_path / f"broker-{n}" / "serve.log").read_text().endswith(
                "idemcore serve: stopped; the logs are closed\n")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_signal_while_starting_stops_what_was_started(cluster, tmp_path):
    process = _cli("--brokers", "2", "--data-dir", str(tmp_path), "--zookeeper", cluster.zookeeper_hosts,
                   *_registration())
    try:
        deadline = time.monotonic() + CLI_TIMEOUT_S  # its handlers are set before the first broker starts
        while not (tmp_path / "broker-0" / "serve.log").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=CLI_TIMEOUT_S)
        assert process.returncode == 0 and "bootstrap.servers" not in out, err
        assert err.endswith("idemcore cluster: stopped; every broker's logs are closed\n")
        assert wait_gone(running_over(tmp_path)) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_broker_dying_while_starting_is_one_line_naming_its_log_and_exit_1(cluster, tmp_path):
    process = _cli("--brokers", "2", "--data-dir", str(tmp_path), "--zookeeper", cluster.zookeeper_hosts,
                   "--override", "log.segment.bytes=1", *_registration())
    out, err = process.communicate(timeout=CLI_TIMEOUT_S)
    assert process.returncode == 1 and out == ""
    assert len(err.splitlines()) == 1, err
    assert "exited with status 2 while starting" in err and "log.segment.bytes" in err
    assert str(tmp_path / "broker-") in err and "serve.log" in err
    assert wait_gone(running_over(tmp_path)) == []  # the broker that started was stopped


def test_without_java_the_command_says_what_to_install(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # java nowhere on it (the interpreter is named by its path)
    process = _cli("--data-dir", str(tmp_path / "cluster"), env=env)
    out, err = process.communicate(timeout=CLI_TIMEOUT_S)
    assert process.returncode == 1 and out == ""
    assert err == "idemcore: error: ZooKeeper needs java (Java 17: apt-get install openjdk-17-jre-headless): " \
                  "not found\n"
