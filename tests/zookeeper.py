"""Start a throwaway ZooKeeper server (Debian's zookeeper package) for the tests that need one."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
JAR = Path("/usr/share/java/zookeeper.jar")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"srvr")
            return b"Mode" in conn.recv(1024)
    except OSError:
        return False


class ZooKeeperServer:
    def __init__(self, tick_ms: int | None = None) -> None:
        """``tick_ms``: ZooKeeper's tickTime (default 3000); sessions may last 2 to 20 ticks, so tests of session
        expiry pass a small one."""
        if not JAR.exists() or shutil.which("java") is None:
            raise RuntimeError("ZooKeeper tests need Debian's zookeeper package and java "
                               "(scripts/dev test installs them: apt-get install zookeeper)")
        self.port = _free_port()
        self.data_dir = tempfile.mkdtemp(prefix="idemcore-zk-")
        self.process = subprocess.Popen(
            ["java", "-cp", CLASSPATH, "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.port),
             self.data_dir, *([str(tick_ms)] if tick_ms is not None else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not _answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not start on port {self.port}")
            time.sleep(0.2)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)
