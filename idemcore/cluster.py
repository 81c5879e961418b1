"""A local cluster: a ZooKeeper (started here, or given) and N ``idemcore serve`` brokers as child processes on
loopback ports, each over its own log directory, with the settings a cluster on one machine wants. Used by
``idemcore cluster``, the tests and the benchmarks; it signals only the processes it started, by their pid."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from pathlib import Path
from signal import SIGCONT, SIGINT, SIGKILL, SIGTERM
from typing import Any

from idemcore.errors import IdemcoreError
from idemcore.interrupts import deferred_interrupts
from idemcore.zookeeper_server import ZooKeeperServer, free_port

#: How long a broker may take to answer ApiVersions (and register) after it is started.
START_TIMEOUT_S = 60.0
#: The local ZooKeeper's tickTime (its default is 3000 ms); sessions may last 2 to 20 ticks.
ZOOKEEPER_TICK_MS = 500
#: How long a SIGTERM'd broker may take to close its logs before it is SIGKILLed.
STOP_TIMEOUT_S = 30.0
#: A follower that has not caught up for this long leaves the ISR (Kafka's default is 30 s; a local cluster whose
#: brokers are killed on purpose wants the ISR to shrink sooner, yet a loaded two-core machine needs slack).
REPLICA_LAG_TIME_MAX_MS = 10_000
#: Settings the cluster sets per broker itself: an override of one is refused.
OWN_SETTINGS = frozenset({"broker.id", "node.id", "log.dirs", "log.dir", "listeners", "zookeeper.connect"})
#: A broker started on a port someone took in between says so; it is started again on another port this often.
PORT_RETRIES = 3
_API_VERSIONS_KEY = 18


class ClusterError(IdemcoreError, RuntimeError):
    """A broker of a local cluster did not start, or ZooKeeper could not be reached."""


def recommended_settings(brokers: int, session_timeout_ms: int) -> dict[str, str]:
    """The settings every broker of an ``brokers``-broker cluster on one machine gets (docs/cluster.md lists them):
    ZooKeeper notices a dead broker within ``session_timeout_ms``; topics, the offsets topic and the transaction
    log get up to 3 replicas, and acks=all needs up to 2 in sync."""
    factor, isr = str(min(3, brokers)), str(min(2, brokers))
    return {
        "zookeeper.session.timeout.ms": str(session_timeout_ms),
        "replica.lag.time.max.ms": str(REPLICA_LAG_TIME_MAX_MS),
        "default.replication.factor": factor,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": factor,
        "transaction.state.log.replication.factor": factor,
        "transaction.state.log.min.isr": isr,
    }


def answers_api_versions(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    """Whether a Kafka broker on ``host:port`` answers ApiVersions (v0, which every broker serves) without error."""
    client_id = b"idemcore-cluster"
    body = struct.pack(">hhih", _API_VERSIONS_KEY, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", _read(conn, 4))[0]
            answer = _read(conn, size)
    except (OSError, struct.error, ConnectionError):
        return False
    correlation_id, error_code = struct.unpack_from(">ih", answer)
    return correlation_id == 1 and error_code == 0


def _read(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed mid-answer")
        data += chunk
    return bytes(data)


#: The line the runner writes to a broker's serve.log before each start of it.
_START_MARK = "--- idemcore cluster: starting broker"


def log_tail(path: Path, lines: int = 3) -> str:
    """The last non-empty ``lines`` a broker wrote to its log file since its last start, joined by " | " (a
    one-line error's quote)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    since = text[text.rfind(_START_MARK):].splitlines()[1:] if _START_MARK in text else text.splitlines()
    return " | ".join([line.strip() for line in since if line.strip()][-lines:])


def _signals_held() -> AbstractContextManager[None]:
    """SIGINT and SIGTERM wait while a child is started and recorded, so an interrupt never leaves one that
    :meth:`LocalCluster.stop` does not know. (Handlers, not the signal mask, which a child would inherit.)"""
    return deferred_interrupts((SIGINT, SIGTERM))


@dataclass(frozen=True)
class BrokerInfo:
    """One broker of the cluster: its id, port, process id (None while it is down), log directory and the file its
    standard output and error go to."""

    broker_id: int
    port: int
    pid: int | None
    log_dir: Path
    serve_log: Path


class _Broker:
    def __init__(self, broker_id: int, log_dir: Path, extra_listeners: tuple[str, ...] = ()) -> None:
        self.broker_id = broker_id
        self.log_dir = log_dir
        self.port = free_port()
        #: The port of each extra listener, by name.
        self.extra_ports = {name: free_port() for name in extra_listeners}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def serve_log(self) -> Path:
        return self.log_dir / "serve.log"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class LocalCluster:
    """``brokers`` brokers with ids 0 to brokers-1 over ``data_dir``/broker-N, registered with ZooKeeper at
    ``zookeeper_hosts`` (None: a ZooKeeper started here over ``data_dir``/zookeeper and stopped with the
    cluster). Every broker gets :func:`recommended_settings`, then ``overrides`` over them (Kafka's names; the
    settings in :data:`OWN_SETTINGS` are the cluster's own). A broker is ready when its port answers ApiVersions
    and, with ``wait_registered``, its ``/brokers/ids/N`` znode exists. :meth:`start_all` (or ``with``) starts
    them; :meth:`stop` stops them all.

    ``listeners``: more listeners besides PLAINTEXT (name -> security protocol, e.g. ``{"SECURE": "SASL_SSL"}``),
    each on its own free port (:meth:`bootstrap_of`); their TLS and SASL settings go in ``overrides`` by Kafka's
    names (``listener.name.secure.ssl.keystore.location``, ``inter.broker.listener.name=SECURE``...). Readiness
    is asked on the PLAINTEXT listener."""

    def __init__(self, brokers: int, data_dir: Path, *, zookeeper_hosts: str | None = None,
                 overrides: Mapping[str, str] | None = None, session_timeout_ms: int = 6000,
                 wait_registered: bool = True, start_timeout_s: float = START_TIMEOUT_S,
                 stop_timeout_s: float = STOP_TIMEOUT_S, listeners: Mapping[str, str] | None = None) -> None:
        if brokers < 1:
            raise ValueError(f"a cluster needs at least 1 broker, got {brokers}")
        owned = sorted(OWN_SETTINGS.intersection(overrides or {}))
        if owned:
            raise ValueError(f"the cluster sets {', '.join(owned)} itself: not an override")
        self.data_dir = Path(data_dir).absolute()  # the paths printed and given to the children
        self.settings = {**recommended_settings(brokers, session_timeout_ms), **(overrides or {})}
        self.wait_registered = wait_registered
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._zookeeper_hosts = zookeeper_hosts
        self.zookeeper: ZooKeeperServer | None = None
        self.listeners = {name.upper(): protocol for name, protocol in (listeners or {}).items()}
        if "PLAINTEXT" in self.listeners:
            raise ValueError("the cluster's PLAINTEXT listener is its own: name the extra listeners otherwise")
        self._brokers = [_Broker(n, self.data_dir / f"broker-{n}", tuple(self.listeners)) for n in range(brokers)]
        self._zk_client: Any = None

    # ------------------------------------------------------------ what it is

    @property
    def zookeeper_hosts(self) -> str:
        if self._zookeeper_hosts is not None:
            return self._zookeeper_hosts
        if self.zookeeper is None:
            raise ClusterError("the cluster's ZooKeeper is not started")
        return self.zookeeper.hosts

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every broker (Kafka's ``bootstrap.servers``)."""
        return ",".join(f"127.0.0.1:{b.port}" for b in self._brokers)

    def bootstrap_of(self, listener: str) -> str:
        """``host:port,...`` of every broker's extra listener ``listener``."""
        name = listener.upper()
        if name == "PLAINTEXT":
            return self.bootstrap_servers
        if name not in self.listeners:
            raise ValueError(f"no listener {listener!r} (extra listeners: {', '.join(self.listeners) or 'none'})")
        return ",".join(f"127.0.0.1:{b.extra_ports[name]}" for b in self._brokers)

    @property
    def broker_ids(self) -> list[int]:
        return [b.broker_id for b in self._brokers]

    def broker(self, n: int) -> BrokerInfo:
        b = self._get(n)
        return BrokerInfo(b.broker_id, b.port, b.process.pid if b.running() and b.process else None, b.log_dir,
                          b.serve_log)

    def _get(self, n: int) -> _Broker:
        if not 0 <= n < len(self._brokers):
            raise ValueError(f"no broker {n}: the cluster has brokers 0 to {len(self._brokers) - 1}")
        return self._brokers[n]

    def exited(self) -> dict[int, int]:
        """The brokers whose process has exited and was not stopped by :meth:`kill` or :meth:`stop`: id -> exit
        status."""
        return {b.broker_id: code for b in self._brokers
                if b.process is not None and (code := b.process.poll()) is not None}

    # ------------------------------------------------------------ starting

    def start_all(self) -> LocalCluster:
        """ZooKeeper (unless given), then every broker at once; return when all are ready. On any failure (or an
        interrupt) everything started is stopped and the error raised."""
        try:
            if self._zookeeper_hosts is None and self.zookeeper is None:
                # ZooKeeperServer stops its own JVM if its start fails or is interrupted.
                # A 500 ms tick: ZooKeeper expires sessions in ticks, so a dead broker is noticed within
                # zookeeper.session.timeout.ms + 0.5 s, not + 3 s with its default tick (failover 5.6 s, not 7.4).
                self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper", tick_ms=ZOOKEEPER_TICK_MS)
            for b in self._brokers:
                if not b.running():
                    self._spawn(b)
            for b in self._brokers:
                self._wait_ready(b)
        except BaseException:
            self.stop()
            raise
        return self

    def start(self, n: int) -> BrokerInfo:
        """Start broker ``n`` again (after :meth:`kill`) on the same port and log directory; return once ready."""
        b = self._get(n)
        if b.running():
            raise ValueError(f"broker {n} is running (pid {b.process.pid if b.process else '?'})")
        self._spawn(b)
        self._wait_ready(b, retry_port=False)
        return self.broker(n)

    def _command(self, b: _Broker) -> list[str]:
        # -v: each broker's serve.log tells what it leads and follows, elections and ISR changes.
        command = [sys.executable, "-m", "idemcore.cli", "serve", "-v", "--data-dir", str(b.log_dir),
                   "--node-id", str(b.broker_id), "--override", f"zookeeper.connect={self.zookeeper_hosts}"]
        if self.listeners:
            listeners = [f"PLAINTEXT://127.0.0.1:{b.port}"] + [f"{name}://127.0.0.1:{port}"
                                                              for name, port in b.extra_ports.items()]
            protocols = ["PLAINTEXT:PLAINTEXT"] + [f"{name}:{p}" for name, p in self.listeners.items()]
            command += ["--override", f"listeners={','.join(listeners)}",
                        "--override", f"listener.security.protocol.map={','.join(protocols)}"]
        else:
            command += ["--host", "127.0.0.1", "--port", str(b.port)]
        for key, value in self.settings.items():
            command += ["--override", f"{key}={value}"]
        return command

    def _spawn(self, b: _Broker) -> None:
        b.log_dir.mkdir(parents=True, exist_ok=True)
        with open(b.serve_log, "ab") as log, _signals_held():
            log.write(f"{_START_MARK} {b.broker_id} on port {b.port}\n".encode())
            log.flush()
            # Its own session: a Ctrl-C at the terminal reaches the runner alone, which stops the brokers first.
            b.process = subprocess.Popen(
                self._command(b), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)

    def _wait_ready(self, b: _Broker, retry_port: bool = True) -> None:
        retries = PORT_RETRIES if retry_port else 0
        deadline = time.monotonic() + self.start_timeout_s
        while not answers_api_versions(b.port):
            assert b.process is not None
            if b.process.poll() is not None:
                if retries and "cannot listen on" in log_tail(b.serve_log, 1):  # the port was taken meanwhile
                    retries -= 1
                    b.port = free_port()
                    self._spawn(b)
                    continue
                raise ClusterError(f"broker {b.broker_id} exited with status {b.process.returncode} while starting: "
                                   f"{log_tail(b.serve_log)} (log: {b.serve_log})")
            if time.monotonic() > deadline:
                raise ClusterError(f"broker {b.broker_id} did not answer ApiVersions on port {b.port} within "
                                   f"{self.start_timeout_s:g} s (log: {b.serve_log})")
            time.sleep(0.1)
        if self.wait_registered:
            self.wait_until_registered(b.broker_id, max(1.0, deadline - time.monotonic()))

    def wait_until_registered(self, n: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return once ``/brokers/ids/n`` exists in ZooKeeper (the broker registered); ClusterError after
        ``timeout_s`` or if the broker's process exits first."""
        b = self._get(n)
        zk = self._zk()
        deadline = time.monotonic() + timeout_s
        while zk.exists(f"/brokers/ids/{n}") is None:
            if b.process is not None and b.process.poll() is not None:
                raise ClusterError(f"broker {n} exited with status {b.process.returncode} before registering in "
                                   f"ZooKeeper: {log_tail(b.serve_log)} (log: {b.serve_log})")
            if time.monotonic() > deadline:
                raise ClusterError(f"broker {n} did not register in ZooKeeper ({self.zookeeper_hosts}, "
                                   f"/brokers/ids/{n}) within {timeout_s:g} s (log: {b.serve_log})")
            time.sleep(0.1)

    def _zk(self) -> Any:
        if self._zk_client is None:
            try:
                from kazoo.client import KazooClient  # optional dependency, imported when used
            except ImportError:
                raise ClusterError("waiting for brokers to register in ZooKeeper needs kazoo: "
                                   "pip install 'idemcore[zookeeper]'") from None
            client = KazooClient(hosts=self.zookeeper_hosts)
            try:
                with warnings.catch_warnings():  # a chroot not made yet: the first broker to register makes it
                    warnings.filterwarnings("ignore", "No chroot path exists", UserWarning)
                    client.start(timeout=15)
            except Exception as error:
                client.close()
                raise ClusterError(f"cannot reach ZooKeeper at {self.zookeeper_hosts}: {error}") from None
            self._zk_client = client
        return self._zk_client

    # ------------------------------------------------------------ stopping

    def kill(self, n: int, signal: int = SIGKILL) -> None:
        """Send ``signal`` to broker ``n``'s process (by its pid, nothing else). For SIGKILL, SIGTERM and SIGINT wait
        until it exits (a SIGTERM'd broker is SIGKILLed after the stop timeout); another signal (SIGSTOP,
        SIGCONT) is only sent."""
        b = self._get(n)
        if not b.running() or b.process is None:
            raise ValueError(f"broker {n} is not running")
        b.process.send_signal(signal)  # Popen's: a no-op once the child is reaped, so never a stranger reusing the pid
        if signal in (SIGKILL, SIGTERM, SIGINT):
            self._reap(b)

    def _reap(self, b: _Broker) -> None:
        assert b.process is not None
        try:
            b.process.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            b.process.kill()
            b.process.wait()
        b.process = None

    def stop(self) -> None:
        """SIGTERM every running broker (a clean stop: logs closed), SIGKILL those still running after the stop
        timeout, then close the ZooKeeper client and stop the ZooKeeper started here. Safe to call twice."""
        live = [b for b in self._brokers if b.process is not None]
        for b in live:
            assert b.process is not None
            b.process.send_signal(SIGCONT)  # a SIGSTOP'd broker must run to act on SIGTERM
            b.process.send_signal(SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for b in live:
            assert b.process is not None
            try:
                b.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                b.process.kill()
                b.process.wait()
            b.process = None
        if self._zk_client is not None:
            client, self._zk_client = self._zk_client, None
            with suppress(Exception):  # a lost ZooKeeper must not cut the stop short
                client.stop()
                client.close()
        if self.zookeeper is not None:
            zookeeper, self.zookeeper = self.zookeeper, None
            zookeeper.stop()

    def __enter__(self) -> LocalCluster:
        return self.start_all()

    def __exit__(self, *exc: object) -> None:
        self.stop()
