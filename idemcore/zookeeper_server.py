"""A standalone ZooKeeper server in a child process (Debian's ``zookeeper`` package, run by ``java``): for a local
cluster (``idemcore cluster``) and the tests that need one. Its own output goes to ``zookeeper.log`` in its data
directory, so a failed start can be read."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from idemcore.errors import IdemcoreError
from idemcore.interrupts import deferred_interrupts

#: Debian's zookeeper package: the server's jar (its manifest names the jars it needs).
JAR = Path("/usr/share/java/zookeeper.jar")
#: SLF4J's simple binding (Debian's libslf4j-java, which the zookeeper package pulls in): the server's log lines on
#: its standard error, hence in the log file; without a binding SLF4J drops them all.
LOG_BINDING = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
#: No AdminServer: it would take port 8080, which a second local ZooKeeper (or anything else) may hold, and a
#: ZooKeeper that cannot bind it exits.
JVM_OPTIONS = ("-Xmx256m", "-Dzookeeper.admin.enableServer=false")
#: How long the server may take to answer (a cold JVM on a busy machine takes seconds).
START_TIMEOUT_S = 60.0
#: How long a SIGTERM'd server may take to exit before it is SIGKILLed.
STOP_TIMEOUT_S = 10.0
LOG_NAME = "zookeeper.log"


class ZooKeeperUnavailable(IdemcoreError, RuntimeError):
    """ZooKeeper cannot run here (no java, no jar) or did not start."""


def missing_prerequisite() -> str | None:
    """What must be installed for :class:`ZooKeeperServer` to run, in one line; None when nothing is missing."""
    missing = [what for what, absent in (
        ("java (Java 17: apt-get install openjdk-17-jre-headless)", shutil.which("java") is None),
        (f"ZooKeeper's jar {JAR} (apt-get install zookeeper)", not JAR.exists())) if absent]
    if not missing:
        return None
    return f"ZooKeeper needs {' and '.join(missing)}: not found"


def _classpath() -> str:
    return ":".join(str(jar) for jar in (JAR, LOG_BINDING) if jar.exists())


def free_port() -> int:
    """A port free on the loopback interface now (another process may take it before it is bound again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int, timeout: float = 1.0) -> bool:
    """Whether a ZooKeeper server serves on 127.0.0.1:``port`` (its ``srvr`` four-letter command, which ZooKeeper
    3.5+ allows by default)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"srvr")
            return b"Mode" in conn.recv(1024)
    except OSError:
        return False


class ZooKeeperServer:
    """Start a standalone ZooKeeper on a free loopback port (or ``port``) over ``data_dir`` and return once it
    answers, within ``start_timeout_s``; :class:`ZooKeeperUnavailable` in one line otherwise. Without
    ``data_dir`` a temporary directory is used and removed by :meth:`stop`; a given one is kept (a local cluster
    started again finds its topics)."""

    def __init__(self, data_dir: Path | None = None, *, port: int | None = None,
                 start_timeout_s: float = START_TIMEOUT_S, tick_ms: int | None = None) -> None:
        missing = missing_prerequisite()
        if missing is not None:
            raise ZooKeeperUnavailable(missing)
        self._temporary = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="idemcore-zk-")) if data_dir is None else Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / LOG_NAME
        self.port = port if port is not None else free_port()
        self.process: subprocess.Popen[bytes] | None = None
        #: ZooKeeper's tickTime (default 3000 ms): sessions may last 2 to 20 ticks, so a test of session expiry
        #: wants short ticks.
        self.tick_ms = tick_ms
        try:
            self._start(start_timeout_s)
        except BaseException:  # an interrupt too: never leave the JVM behind
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        # An interrupt waits until the child is recorded, so stop() finds it.
        with open(self.log_path, "ab") as log, deferred_interrupts((signal.SIGINT, signal.SIGTERM)):
            # Its own session: a Ctrl-C at the terminal reaches whoever started it, who stops it last.
            self.process = subprocess.Popen(
                ["java", *JVM_OPTIONS, "-cp", _classpath(), MAIN_CLASS, str(self.port), str(self.data_dir),
                 *([str(self.tick_ms)] if self.tick_ms is not None else [])],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not answers(self.port):
            if self.process.poll() is not None:
                raise ZooKeeperUnavailable(f"ZooKeeper exited with status {self.process.returncode} before serving "
                                           f"on port {self.port}; see {self.log_path}")
            if time.monotonic() > deadline:
                raise ZooKeeperUnavailable(f"ZooKeeper did not answer on port {self.port} within {timeout:g} s; "
                                           f"see {self.log_path}")
            time.sleep(0.2)

    @property
    def hosts(self) -> str:
        """The connect string (``zookeeper.connect``)."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`; a temporary data directory is removed."""
        process, self.process = self.process, None
        if process is not None:
            process.send_signal(signal.SIGTERM)  # a no-op once reaped: never another process that got its pid
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
