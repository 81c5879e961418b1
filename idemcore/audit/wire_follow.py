"""The continuous audit of a live cluster: ``idemcore audit --follow kafka://HOST:PORT``.

:class:`ClusterFollower` is :class:`~idemcore.audit.follow.Follower`'s counterpart for a cluster: each round asks
the metadata again (a new topic or partition joins the follow, from ``--from``), fetches every partition from the
next offset it has not read up to the high watermark (:class:`~idemcore.audit.wire.WireAuditor`: the same scan and
replay as the one-shot ``audit kafka://``), writes the round's new findings to ``OUT/findings-<round>.parquet``
and replaces the checkpoint. The checkpoint holds, as a log directory's does, what was read (per partition the
next offset) and the whole replay state, so a restart (even after ``kill -9``) reports no finding twice and misses
none: the files of rounds after the checkpoint are deleted and read again from the checkpointed offsets.

Hanging transactions are judged by idle time at each round (against the newest batch read so far); the
coordinators are not asked every round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from idemcore.audit import checkpoint as ckpt
from idemcore.audit.follow import (
    CHECKPOINT_FILE,
    DEFAULT_INTERVAL_MS,
    FINDINGS_PREFIX,
    RoundResult,
    _lock,
    _write_atomically,
    drop_later_rounds,
    end_round,
    run_rounds,
)
from idemcore.audit.logdir import LogReplayer, LogState
from idemcore.audit.report import DEFAULT_HANGING_AFTER_MS
from idemcore.audit.wire import PartitionProgress, WireAuditor, plan_ranges
from idemcore.audit.wire_fetch import FETCH_BYTES, ClusterReader, PartitionRange, Position, parse_bootstrap
from idemcore.kernels import Backend, get_backend
from idemcore.net.client_security import ClientSecurity

#: ``kind`` of a cluster's checkpoint (a log directory's is ``logdir``).
CLUSTER = "cluster"
#: Version of a cluster checkpoint's contents.
CLUSTER_CHECKPOINT_VERSION = 1


class ClusterFollower:
    """:meth:`poll` runs one round (module docstring); resumes from ``checkpoint`` if it holds one. ``start``:
    where a partition met for the first time starts (``--from``). ``out``/``checkpoint``: as a log directory's
    follow (None: no findings files / no restart)."""

    def __init__(self, url: str, out: str | Path | None = None, checkpoint: str | Path | None = None, *,
                 topics: Sequence[str] | None = None, start: Position | str = "earliest",
                 security: ClientSecurity | None = None, backend: str | Backend | None = None,
                 hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS, max_bytes: int = FETCH_BYTES,
                 fsync: bool = True):
        self.url = url
        self.reader = ClusterReader(parse_bootstrap(url), security=security)
        self.source = self.reader.describe()
        self.topics = list(topics) if topics is not None else None
        self.start = start if isinstance(start, Position) else Position.parse(start)
        self.out = Path(out) if out is not None else None
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.backend = get_backend(backend)
        self.hanging_after_ms = hanging_after_ms
        self.max_bytes = max_bytes
        self.fsync = fsync
        self.round = 0
        self.positions: dict[str, tuple[str, int, int]] = {}  # "topic-partition" -> (topic, partition, next offset)
        self.auditor = WireAuditor(self.backend)
        self.resumed = False
        self._failed = False
        for name, where in (("out", self.out), ("checkpoint", self.checkpoint)):
            if where is not None and where.exists() and not where.is_dir():
                raise ValueError(f"{name} {where} is a file, not a directory: give a directory (new or its own)")
        self._locks: list[int | None] = []
        try:
            for where in dict.fromkeys((self.out, self.checkpoint)):
                self._locks.append(_lock(where))
            if self.out is not None:
                for partial in self.out.glob(f".{FINDINGS_PREFIX}*.partial"):
                    partial.unlink()
            self._load()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        import os

        for descriptor in self._locks:
            if descriptor is not None:
                os.close(descriptor)
        self._locks = []
        self.reader.close()

    # ------------------------------------------------------------ checkpoint

    def _checkpoint_path(self) -> Path | None:
        return self.checkpoint / CHECKPOINT_FILE if self.checkpoint is not None else None

    def _load(self) -> None:
        path = self._checkpoint_path()
        if path is not None and path.exists():
            saved, arrays = ckpt.decode(path.read_bytes(), CLUSTER_CHECKPOINT_VERSION, path)
            if saved.get("kind") != CLUSTER or saved.get("source") != self.source:
                raise ValueError(f"{path} is the checkpoint of following {saved.get('source')} "
                                 f"({saved.get('kind')}), not {self.source}")
            out = str(self.out.resolve()) if self.out is not None else None
            if self.out is not None and saved.get("out") != out:
                raise ValueError(f"{path} is the checkpoint of a follow writing its findings to {saved.get('out')}, "
                                 f"not {out}: give that --out, or another checkpoint directory")
            ckpt.restore(path, lambda: self._restore(saved, arrays))
            self.resumed = True
        drop_later_rounds(self.out, self.round, self.resumed, path)

    def _save(self) -> None:
        path = self._checkpoint_path()
        if path is None:
            return
        replayer = self.auditor.replayer
        replay, arrays = replayer.to_checkpoint()
        assert isinstance(replayer.state, LogState)
        replay["committed_gaps"] = int(replayer.state.committed_gaps)
        arrays["log_end"] = replayer.state._log_end
        values = {"kind": CLUSTER, "source": self.source, "out": str(self.out.resolve()) if self.out else None,
                  "round": self.round, "positions": {k: list(v) for k, v in self.positions.items()},
                  "replayer": replay}
        data = ckpt.encode(values, {f"replayer.{name}": value for name, value in arrays.items()},
                           CLUSTER_CHECKPOINT_VERSION)

        _write_atomically(path, lambda partial: partial.write_bytes(data), self.fsync)

    def _restore(self, saved: dict[str, Any], arrays: dict[str, Any]) -> None:
        prefix = "replayer."
        mine = {name[len(prefix):]: value for name, value in arrays.items() if name.startswith(prefix)}
        replay = saved["replayer"]
        replayer = LogReplayer(self.backend)
        state = replayer.state
        assert isinstance(state, LogState)
        state.committed_gaps, state._log_end = int(replay["committed_gaps"]), mine["log_end"].astype(np.int64)
        replayer.restore_checkpoint(replay, mine)
        positions = {str(k): (str(v[0]), int(v[1]), int(v[2])) for k, v in saved["positions"].items()}
        auditor = WireAuditor(self.backend, replayer)
        auditor.last_offsets = {(topic, partition): offset - 1 for topic, partition, offset in positions.values()}
        self.round, self.positions, self.auditor = int(saved["round"]), positions, auditor

    # ------------------------------------------------------------ a round

    def _partitions(self) -> list[PartitionRange]:
        """Every partition to follow, from where it stands: the known ones from their next offset, the new ones
        from ``start``."""
        known = {(topic, partition) for topic, partition, _ in self.positions.values()}
        pairs = self.reader.partitions(self.topics)
        new = [pair for pair in pairs if pair not in known]
        ranges = {}
        if new:
            planned = plan_ranges(self.reader, [t for t in dict.fromkeys(t for t, _ in new)], self.start,
                                  Position("latest"))
            wanted = set(new)
            ranges = {(r.topic, r.partition): r for r in planned if (r.topic, r.partition) in wanted}
        out = []
        for topic, partition in pairs:
            if (topic, partition) in ranges:
                out.append(ranges[(topic, partition)])
            else:
                _, _, offset = self.positions[f"{topic}-{partition}"]
                out.append(PartitionRange(topic, partition, offset, offset, -1, -1))
        return out

    def poll(self) -> RoundResult:
        """Fetch what is new, replay it, write its findings, checkpoint; the round's result."""
        if self._failed:
            raise RuntimeError("an earlier round of this follower failed half-way: make a new one (it resumes from "
                               "the checkpoint)")
        self._failed = True
        started = time.perf_counter()
        replayer = self.auditor.replayer
        replayer._findings.clear()
        self.auditor.located.clear()
        self.auditor.problems.clear()
        before = replayer.batches
        read = []
        parts = self._partitions()
        # One Fetch per leader says which partitions grew: an idle one costs no fetch (and no wait) of its own.
        ends = self.reader.high_watermarks({(part.topic, part.partition): part.start for part in parts})
        for part in parts:
            replayer.keys.encode(pa.array([part.topic]), np.array([part.partition]))  # listed: in the report
            if ends.get((part.topic, part.partition), part.start + 1) <= part.start:
                self.positions.setdefault(f"{part.topic}-{part.partition}", (part.topic, part.partition, part.start))
                continue
            progress = PartitionProgress(part.start)
            self.auditor.audit_range(self.reader, part, progress, backend=self.backend, max_bytes=self.max_bytes,
                                     follow_end=True)
            self.positions[f"{part.topic}-{part.partition}"] = (part.topic, part.partition, progress.next_offset)
            if progress.batches:
                read.append(f"{part.topic}-{part.partition}")
        result = replayer.finish()
        findings = result.findings
        if self.auditor.located:
            located = pa.concat_tables(self.auditor.located)
            findings = findings.append_column("leader", located.column("leader"))
        else:
            findings = findings.append_column("leader", pa.array([], pa.int32()))
        return end_round(self, result, findings, started=started, order_by="base_offset", source=self.source,
                         batches_before=before, batches=replayer.batches, read=read, waiting=[],
                         problems=list(self.auditor.problems))


def follow_cluster(url: str, out: str | Path | None = None, checkpoint: str | Path | None = None, *,
                   topics: Sequence[str] | None = None, start: Position | str = "earliest",
                   security: ClientSecurity | None = None, interval_ms: int = DEFAULT_INTERVAL_MS,
                   rounds: int | None = None, stop: Callable[[], bool] | None = None,
                   on_round: Callable[[RoundResult], None] | None = None, keep: bool = True,
                   backend: str | Backend | None = None, hanging_after_ms: int = DEFAULT_HANGING_AFTER_MS,
                   max_bytes: int = FETCH_BYTES, fsync: bool = True) -> list[RoundResult]:
    """Follow the cluster at ``url`` (module docstring), as :func:`idemcore.audit.follow.follow` follows a
    directory: a round every ``interval_ms`` until ``rounds`` ran or ``stop()``; ``on_round`` with each result."""
    follower = ClusterFollower(url, out, checkpoint, topics=topics, start=start, security=security, backend=backend,
                               hanging_after_ms=hanging_after_ms, max_bytes=max_bytes, fsync=fsync)
    return run_rounds(follower, interval_ms=interval_ms, rounds=rounds, stop=stop, on_round=on_round, keep=keep)
