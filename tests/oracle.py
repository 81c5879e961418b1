"""A deliberately different model of the rules of docs/rules.md §2: objects, dicts and a deque(maxlen=5).

It shares no code with the kernels; the property tests check the reference
kernel against it, then every backend against the reference.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

SEQ_SPACE = 2**31
APPENDED, DUPLICATE, REJECTED = 0, 1, 2
# Findings, by their names (docs/rules.md §5).
FINDING = {name: code for code, name in enumerate(
    ["", "duplicate", "duplicate_beyond_window", "sequence_gap", "out_of_order", "epoch_regression", "fenced",
     "invalid_txn_state", "invalid_record"])}


def _relative(seq: int, origin: int) -> int:
    """``seq`` minus ``origin`` as a signed distance on the sequence circle, in [-2**30, 2**30)."""
    return (seq - origin + SEQ_SPACE // 2) % SEQ_SPACE - SEQ_SPACE // 2
CLIENT, COORDINATOR, REPLICATION = 0, 1, 2


@dataclass
class Entry:
    epoch: int = -1
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int = -1
    batches: deque = field(default_factory=lambda: deque(maxlen=5))  # (first_seq, last_seq, first_off, last_off, ts)


class OracleLog:
    def __init__(self):
        self.entries: dict[tuple[int, int], Entry] = {}
        self.log_end: dict[int, int] = {}

    def _malformed(self, b, origin) -> bool:
        if b["record_count"] < 1 or b["partition"] < 0 or b["producer_id"] < -1 or b["producer_epoch"] < -1:
            return True
        if b["base_offset"] < -1:
            return True
        if b["producer_id"] == -1 and (b["is_transactional"] or b["is_control"]):
            return True
        if b["is_control"]:
            return b["control_type"] not in (0, 1)
        first, last = b["base_sequence"], b["last_sequence"]
        if first == -1:
            return last != -1 or (b["producer_id"] >= 0 and origin == CLIENT)
        if not 0 <= first < SEQ_SPACE:
            return True
        return last != (first + b["record_count"] - 1) % SEQ_SPACE

    def append(self, b: dict, origin: int):
        """Returns (status, error_code, base_offset, last_offset, finding, expected, completed_txn_or_None)."""
        if self._malformed(b, origin):
            return REJECTED, 87, -1, -1, FINDING["invalid_record"], -1, None
        key = (b["partition"], b["producer_id"])
        entry = self.entries.get(key)
        current = entry or Entry()
        epoch, first, last = b["producer_epoch"], b["base_sequence"], b["last_sequence"]
        error, finding, expected = 0, "", -1
        if b["is_control"]:
            if epoch < current.epoch:
                error, finding, expected = 47, "fenced", current.epoch
            elif b["coordinator_epoch"] < current.coordinator_epoch:
                error, finding, expected = 52, "fenced", current.coordinator_epoch
        elif b["producer_id"] >= 0:
            if origin == CLIENT and entry is not None and epoch == entry.epoch:
                for kept in entry.batches:
                    if kept[0] == first and kept[1] == last:
                        return DUPLICATE, 0, kept[2], kept[3], FINDING["duplicate"], -1, None
            if epoch < current.epoch and origin != REPLICATION:
                error, expected = 47, current.epoch
                finding = "fenced" if b["is_transactional"] else "epoch_regression"
            elif origin == CLIENT:
                if epoch != current.epoch:
                    if first != 0 and current.epoch != -1:
                        error = 45
                elif current.epoch != -1:
                    previous = current.batches[-1][1] if current.batches else -1
                    if first != (previous + 1) % SEQ_SPACE or (previous == -1 and first != 0):
                        error = 45
                if error == 45:
                    finding, expected = self._sequence_finding(current, epoch, first, last)
            if not error and current.txn_first_offset != -1 and not b["is_transactional"]:
                error, finding, expected = 48, "invalid_txn_state", current.txn_first_offset
        if error:
            return REJECTED, error, -1, -1, FINDING[finding], expected, None

        end = self.log_end.get(b["partition"], 0)
        base = b["base_offset"] if b["base_offset"] >= 0 else end
        last_offset = base + b["record_count"] - 1
        self.log_end[b["partition"]] = max(end, last_offset + 1)
        if b["producer_id"] < 0:
            return APPENDED, 0, base, last_offset, 0, -1, None
        if entry is None:
            entry = self.entries[key] = Entry()
        if epoch != entry.epoch:
            entry.batches.clear()
        entry.epoch = epoch
        entry.last_timestamp = b["max_timestamp"]
        completed = None
        if b["is_control"]:
            if entry.txn_first_offset != -1:
                completed = (b["partition"], b["producer_id"], entry.txn_first_offset, base, b["control_type"] == 0)
            entry.coordinator_epoch = b["coordinator_epoch"]
            entry.txn_first_offset = -1
        else:
            entry.batches.append((first, last, base, last_offset, b["max_timestamp"]))
            if b["is_transactional"] and entry.txn_first_offset == -1:
                entry.txn_first_offset = base
        return APPENDED, 0, base, last_offset, 0, -1, completed

    @staticmethod
    def _sequence_finding(entry: Entry, epoch: int, first: int, last: int) -> tuple[str, int]:
        if epoch != entry.epoch or not entry.batches:
            return "sequence_gap", 0
        expected = (entry.batches[-1][1] + 1) % SEQ_SPACE
        if _relative(first, expected) > 0:
            return "sequence_gap", expected
        if _relative(last, expected) < 0:
            return "duplicate_beyond_window", expected
        return "out_of_order", expected
