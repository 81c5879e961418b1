"""The registry of findings: what an audit can say about a batch.

Each finding has one entry here: its kernel code (the ``Finding`` value the
kernels write into ``out_finding``), its name in reports, what it means, what
the verdict's ``expected`` column holds for it, and the report section that
shows it. Adding a finding is this entry, one branch in each kernel twin
(``kernels/rules_reference.py``, ``kernels/cython_rules.pyx``), one planter in
``synth/streams.py`` (``inject_anomalies``) and one rule in the test oracle (``tests/oracle.py``). The rules behind each
finding are in ``docs/rules.md`` ("What an audit reports").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Finding(enum.IntEnum):
    """Kernel codes of the findings; ``NONE`` for a batch simply appended (see :data:`FINDINGS`)."""

    NONE = 0
    DUPLICATE = 1
    DUPLICATE_BEYOND_WINDOW = 2
    SEQUENCE_GAP = 3
    OUT_OF_ORDER = 4
    EPOCH_REGRESSION = 5
    FENCED = 6
    INVALID_TXN_STATE = 7
    INVALID_RECORD = 8
    HANGING_TRANSACTION = 9
    OFFSET_OVERFLOW = 10

    @property
    def label(self) -> str:
        """The report name: ``"duplicate_beyond_window"``; ``""`` for NONE."""
        return "" if self is Finding.NONE else self.name.lower()

    @property
    def info(self) -> FindingInfo:
        """This finding's registry entry."""
        return FINDINGS[self]

    @classmethod
    def parse(cls, label: str) -> Finding:
        """The finding called ``label`` (``"sequence_gap"``)."""
        try:
            finding = cls[label.strip().upper()]
        except KeyError:
            finding = cls.NONE
        if finding is cls.NONE:
            names = ", ".join(f.label for f in cls if f is not cls.NONE)
            raise ValueError(f"unknown finding {label!r}; expected one of {names}")
        return finding


@dataclass(frozen=True)
class FindingInfo:
    """One finding: meaning, what ``expected`` holds, where a report shows it, who finds it."""

    finding: Finding
    meaning: str
    expected: str  # what the verdict's `expected` column holds for this finding ("" when nothing)
    view: str = ""  # the report section beyond the counts table: "gaps", "zombie_writes", "hanging", or ""
    per_batch: bool = True  # found by the kernel on one batch; False: found at the end of a stream

    @property
    def label(self) -> str:
        return self.finding.label


_ENTRIES = (
    FindingInfo(Finding.DUPLICATE, "a retry caught within the five-batch window; answered with the original "
                "offsets, nothing written", ""),
    FindingInfo(Finding.DUPLICATE_BEYOND_WINDOW, "same epoch, a sequence range wholly at or before the last "
                "written sequence that is not one of the five batches retained (a retry older than the window, or "
                "a partial overlap); Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER", "the expected first sequence"),
    FindingInfo(Finding.SEQUENCE_GAP, "sequences missing before this batch: data lost between two writes of one "
                "producer epoch, or a new epoch not starting at 0", "the expected first sequence", "gaps"),
    FindingInfo(Finding.OUT_OF_ORDER, "a sequence range straddling the last written sequence",
                "the expected first sequence"),
    FindingInfo(Finding.EPOCH_REGRESSION, "an idempotent zombie writing with an older epoch",
                "the current producer epoch", "zombie_writes"),
    FindingInfo(Finding.FENCED, "a transactional zombie, or a marker with an old producer or coordinator epoch",
                "the current producer epoch (or coordinator epoch for a marker)", "zombie_writes"),
    FindingInfo(Finding.INVALID_TXN_STATE, "a non-transactional write while the producer has a transaction open "
                "on the partition", "the open transaction's first offset"),
    FindingInfo(Finding.INVALID_RECORD, "metadata no real batch can carry (count < 1, a last sequence that does "
                "not match base + count - 1, ...)", ""),
    FindingInfo(Finding.HANGING_TRANSACTION, "a transaction still open longer than the bound when the stream ends: "
                "it pins the last stable offset", "", "hanging", per_batch=False),
    FindingInfo(Finding.OFFSET_OVERFLOW, "a batch whose last offset would leave no int64 log end offset after it "
                "(past 2**63 - 2): refused with UNKNOWN_SERVER_ERROR, never wrapped; Kafka never gets there",
                "the first offset the batch would have taken"),
)
#: Every finding but NONE, by kernel code.
FINDINGS: dict[Finding, FindingInfo] = {entry.finding: entry for entry in _ENTRIES}
#: Findings the kernels set per batch (the others are found at the end of a stream by the audit).
PER_BATCH = tuple(f for f, entry in FINDINGS.items() if entry.per_batch)
