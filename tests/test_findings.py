"""Per-batch findings (docs/rules.md §5): each kind, and the value the batch contradicted, on every backend."""

from __future__ import annotations

import pytest

from idemcore import Finding
from idemcore.engine import validate

from .helpers import batches, data, marker

INT32_MAX = 2**31 - 1
WRITTEN = [data(7, 0, 0, 4), data(7, 0, 5, 9), data(7, 0, 10, 14), data(7, 0, 15, 19), data(7, 0, 20, 24),
           data(7, 0, 25, 29)]  # six batches: the first has left the five-batch window


def last_finding(backend, rows):
    verdicts = validate(batches(rows), backend=backend)
    return Finding(int(verdicts.finding[-1])).label, int(verdicts.expected[-1]), verdicts


@pytest.mark.parametrize(("late", "finding", "expected"), [
    (data(7, 0, 30, 34), "", -1),  # in sequence
    (data(7, 0, 25, 29), "duplicate", -1),  # newest retained batch
    (data(7, 0, 5, 9), "duplicate", -1),  # oldest retained batch
    (data(7, 0, 0, 4), "duplicate_beyond_window", 30),  # written, but older than the window
    (data(7, 0, 2, 3), "duplicate_beyond_window", 30),  # inside written sequences, another split
    (data(7, 0, 29, 29), "duplicate_beyond_window", 30),  # the last written sequence, alone
    (data(7, 0, 31, 35), "sequence_gap", 30),  # sequence 30 is missing
    (data(7, 0, 28, 33), "out_of_order", 30),  # straddles the last written sequence
    (data(7, 1, 3, 3), "sequence_gap", 0),  # a new epoch must start at 0
    (data(7, 1, 0, 0), "", -1),  # ... and may
])
def test_sequence_findings(backend, late, finding, expected):
    assert last_finding(backend, [*WRITTEN, late])[:2] == (finding, expected)


def test_sequence_findings_across_the_wrap(backend):
    rows = [data(7, 0, INT32_MAX - 9, INT32_MAX - 5), data(7, 0, INT32_MAX - 4, INT32_MAX),
            data(7, 0, 0, 4), data(7, 0, 5, 9), data(7, 0, 10, 14), data(7, 0, 15, 19)]
    assert last_finding(backend, [*rows, data(7, 0, INT32_MAX - 9, INT32_MAX - 5)])[:2] == (
        "duplicate_beyond_window", 20)
    assert last_finding(backend, [*rows, data(7, 0, 21, 21)])[:2] == ("sequence_gap", 20)
    assert last_finding(backend, [*rows[:2], data(7, 0, INT32_MAX, 3)])[:2] == ("out_of_order", 0)


def test_epoch_findings_name_the_current_epoch(backend):
    assert last_finding(backend, [data(7, 3, 0), data(7, 2, 1)])[:2] == ("epoch_regression", 3)
    assert last_finding(backend, [data(7, 3, 0, is_transactional=True),
                                  data(7, 2, 1, is_transactional=True)])[:2] == ("fenced", 3)
    assert last_finding(backend, [data(7, 3, 0), marker(7, 2)])[:2] == ("fenced", 3)
    assert last_finding(backend, [marker(7, 0, coordinator_epoch=5), marker(7, 0, coordinator_epoch=4)])[:2] == (
        "fenced", 5)


def test_transaction_and_record_findings(backend):
    rows = [data(7, 0, 0, base_offset=-1), data(8, 0, 0, is_transactional=True), data(8, 0, 1)]
    assert last_finding(backend, rows)[:2] == ("invalid_txn_state", 1)  # the open transaction starts at 1
    assert last_finding(backend, [data(7, 0, 0, record_count=0, last_sequence=-1)])[:2] == ("invalid_record", -1)


def test_finding_counts_by_name(backend):
    rows = [*WRITTEN, data(7, 0, 25, 29), data(7, 0, 0, 4), data(7, 0, 40, 44), data(7, 0, 30, 30)]
    verdicts = validate(batches(rows), backend=backend)
    assert verdicts.finding_counts() == {"duplicate": 1, "duplicate_beyond_window": 1, "sequence_gap": 1}


def test_finding_names_parse_back():
    assert [Finding.parse(f.label) for f in Finding if f is not Finding.NONE] == list(Finding)[1:]
    with pytest.raises(ValueError, match="unknown finding 'zombie'; expected one of duplicate"):
        Finding.parse("zombie")


def test_kernel_finding_codes_match_the_enum():
    from idemcore.kernels import rules_reference

    assert {f.name: int(f) for f in Finding if f is not Finding.HANGING_TRANSACTION} == {
        name[2:]: value for name, value in vars(rules_reference).items() if name.startswith("F_")}
