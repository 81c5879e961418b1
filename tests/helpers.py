"""Small builders shared by the tests."""

from __future__ import annotations

import numpy as np

from idemcore.record.columns import COLUMNS


def batches(rows: list[dict]) -> dict[str, np.ndarray]:
    """Packed columns from a list of per-batch dicts (missing fields take the library's defaults)."""
    names = sorted({key for row in rows for key in row})
    defaults = {"partition": 0, "base_offset": -1, "max_timestamp": 0, "is_transactional": False,
                "is_control": False, "control_type": -1, "coordinator_epoch": 0}
    out = {}
    for name in names:
        out[name] = np.array([row.get(name, defaults.get(name)) for row in rows], dtype=COLUMNS[name])
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
