"""A local cluster for the tests (idemcore.cluster.LocalCluster), and what they check about its processes.

A test module gets one cluster for all its tests::

    cluster = cluster_fixture(3)          # a module-scoped fixture named ``cluster``

    def test_x(cluster): cluster.kill(1); ...; cluster.start(1)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest

from idemcore.cluster import LocalCluster

#: Whether readiness includes the /brokers/ids/N znode (brokers register in ZooKeeper).
WAIT_REGISTERED = True


def cluster_fixture(brokers: int, scope: Literal["session", "package", "module"] = "module",
                    overrides: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
    """A pytest fixture (assign it to a module-level name) yielding a started LocalCluster of ``brokers``, stopped
    after its scope; ``overrides`` over the recommended settings; ``kwargs`` to LocalCluster."""

    @pytest.fixture(scope=scope)
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
        kwargs.setdefault("wait_registered", WAIT_REGISTERED)
        with LocalCluster(brokers, tmp_path_factory.mktemp("cluster"), overrides=overrides,
                          **kwargs) as started:
            yield started

    return cluster


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def running_over(directory: Path) -> list[int]:
    """The live processes whose command line names ``directory`` (brokers over it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if any(str(directory) in arg for arg in cmdline(int(entry.name))) and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_gone(pids: list[int], seconds: float = 15) -> list[int]:
    """Those of ``pids`` still alive after at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while (living := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return living
