"""Small builders shared by the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from idemcore.kernels.columns import INPUT_COLUMNS


def batches(rows: list[dict]) -> dict[str, np.ndarray]:
    """Packed columns from a list of per-batch dicts (missing fields take the library's defaults)."""
    names = sorted({key for row in rows for key in row})
    defaults = {"partition": 0, "base_offset": -1, "max_timestamp": 0, "is_transactional": False,
                "is_control": False, "control_type": -1, "coordinator_epoch": 0}
    out = {}
    for name in names:
        out[name] = np.array([row.get(name, defaults.get(name)) for row in rows], dtype=INPUT_COLUMNS[name])
    return out


def data(pid, epoch, first, last=None, **extra) -> dict:
    """One data batch; ``last`` defaults to ``first`` (one record)."""
    last = first if last is None else last
    count = 1 if first < 0 else (last - first) % 2147483648 + 1
    return {"producer_id": pid, "producer_epoch": epoch, "base_sequence": first, "last_sequence": last,
            "record_count": count, **extra}


def marker(pid, epoch, commit=True, coordinator_epoch=0, **extra) -> dict:
    """One COMMIT/ABORT control batch."""
    return {"producer_id": pid, "producer_epoch": epoch, "base_sequence": -1, "last_sequence": -1,
            "record_count": 1, "is_control": True, "is_transactional": True, "control_type": 1 if commit else 0,
            "coordinator_epoch": coordinator_epoch, **extra}


def forget_recovery_points(data_dir) -> None:
    """Remove a broker's recovery points and clean-shutdown marker, so that its next start scans every segment (as
    after a crash with nothing flushed): damage a clean start trusts is then found."""
    for name in ("recovery-point-offset-checkpoint", ".kafka_cleanshutdown", "written-log-ends"):
        (Path(data_dir) / name).unlink(missing_ok=True)


def set_recovery_point(data_dir, topic: str, partition: int, offset: int) -> None:
    """Make ``data_dir`` look as a broker that crashed after starting with ``topic-partition`` at ``offset``
    leaves it: that recovery point in Kafka's checkpoint, no clean-shutdown marker."""
    from idemcore.record.kafka_files import encode_offset_checkpoint, read_offset_checkpoint

    path = Path(data_dir) / "recovery-point-offset-checkpoint"
    points = {}
    if path.exists():
        points = {(e.topic, e.partition): e.offset for e in read_offset_checkpoint(path).entries}
    points[(topic, partition)] = offset
    path.write_bytes(encode_offset_checkpoint((t, p, o) for (t, p), o in sorted(points.items())))
    (Path(data_dir) / ".kafka_cleanshutdown").unlink(missing_ok=True)
