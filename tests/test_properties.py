"""Differential property tests: reference == oracle; every backend == reference; chunked == whole."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import idemcore
from idemcore import ProducerStateTable
from idemcore.engine import validate
from idemcore.kernels.columns import COLUMNS
from idemcore.synth.streams import synthetic_stream

from .helpers import batches
from .oracle import OracleLog

INT32_MAX = 2**31 - 1
PIDS = [0, 1, 7, 2**40 + 3, 2**62 + 11, 123456789]
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def streams(draw):
    """Produce attempts of a few producers: in-order sends, retries, gaps, epoch bumps, zombies,
    markers, non-idempotent writes and arbitrary (possibly malformed) metadata."""
    partitions = draw(st.integers(1, 3))
    pids = draw(st.lists(st.sampled_from(PIDS), min_size=1, max_size=4, unique=True))
    start = draw(st.sampled_from([0, 5, INT32_MAX - 3]))
    producers = {(p, pid): {"next": start, "epoch": 0, "sent": []} for p in range(partitions) for pid in pids}
    keys = list(producers)
    rows = []
    kinds = st.sampled_from(["send"] * 6 + ["retry"] * 3 + ["gap", "bump", "zombie", "marker", "plain", "raw"])
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(kinds)
        key = keys[draw(st.integers(0, len(keys) - 1))]
        p = producers[key]
        part, pid = key
        ts = len(rows) * 10
        if kind in ("send", "gap"):
            if kind == "gap":
                p["next"] = (p["next"] + draw(st.integers(1, 3))) % (INT32_MAX + 1)
            count = draw(st.integers(1, 3))
            row = {"partition": part, "producer_id": pid, "producer_epoch": p["epoch"], "base_sequence": p["next"],
                   "last_sequence": (p["next"] + count - 1) % (INT32_MAX + 1), "record_count": count,
                   "is_transactional": draw(st.booleans()), "max_timestamp": ts}
            p["next"] = (p["next"] + count) % (INT32_MAX + 1)
            p["sent"].append(row)
        elif kind == "retry" and p["sent"]:
            row = dict(p["sent"][-draw(st.integers(1, min(8, len(p["sent"]))))], max_timestamp=ts)
        elif kind == "bump":
            p["epoch"] += 1
            p["next"] = 0
            continue
        elif kind == "zombie" and p["epoch"] > 0:
            row = {"partition": part, "producer_id": pid, "producer_epoch": p["epoch"] - 1, "base_sequence": 0,
                   "last_sequence": 0, "record_count": 1, "max_timestamp": ts}
        elif kind == "marker":
            row = {"partition": part, "producer_id": pid, "producer_epoch": p["epoch"] + draw(st.integers(-1, 1)),
                   "base_sequence": -1, "last_sequence": -1, "record_count": 1, "is_control": True,
                   "is_transactional": True, "control_type": draw(st.integers(0, 1)),
                   "coordinator_epoch": draw(st.integers(0, 2)), "max_timestamp": ts}
        elif kind == "plain":
            row = {"partition": part, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1,
                   "last_sequence": -1, "record_count": draw(st.integers(1, 3)), "max_timestamp": ts}
        elif kind == "raw":
            row = {"partition": draw(st.integers(-1, partitions)),
                   "producer_id": draw(st.sampled_from([-2, -1, *pids])),
                   "producer_epoch": draw(st.integers(-2, 2)), "base_sequence": draw(st.integers(-2, 6)),
                   "last_sequence": draw(st.integers(-2, 8)), "record_count": draw(st.integers(0, 3)),
                   "base_offset": draw(st.sampled_from([-2, -1, 1000])), "is_transactional": draw(st.booleans()),
                   "is_control": draw(st.booleans()), "control_type": draw(st.integers(-1, 2)),
                   "coordinator_epoch": draw(st.integers(0, 2)), "max_timestamp": ts}
        else:
            continue
        rows.append(row)
    if not rows:
        rows.append({"producer_id": pids[0], "producer_epoch": 0, "base_sequence": 0, "last_sequence": 0,
                     "record_count": 1})
    full = [{"partition": 0, "base_offset": -1, "max_timestamp": 0, "is_transactional": False, "is_control": False,
             "control_type": -1, "coordinator_epoch": 0, **row} for row in rows]
    return full


origins = st.sampled_from(["client", "coordinator", "replication"])


def _oracle_run(rows, origin):
    log = OracleLog()
    code = {"client": 0, "coordinator": 1, "replication": 2}[origin]
    results = [log.append(row, code) for row in rows]
    completed = [r[6] for r in results if r[6] is not None]
    return [r[:6] for r in results], completed


def _verdict_rows(v):
    return list(zip(v.status.tolist(), v.error_code.tolist(), v.base_offset.tolist(), v.last_offset.tolist(),
                    v.finding.tolist(), v.expected.tolist(), strict=True))


def _txn_rows(v):
    t = v.completed_txns
    return list(zip(t.stream.tolist(), t.producer_id.tolist(), t.first_offset.tolist(), t.last_offset.tolist(),
                    t.aborted.tolist(), strict=True))


def assert_same_state(a: ProducerStateTable, b: ProducerStateTable):
    ca, cb = a.canonical(), b.canonical()
    assert ca.keys() == cb.keys()
    for name in ca:
        np.testing.assert_array_equal(ca[name], cb[name], err_msg=name)


@SETTINGS
@given(rows=streams(), origin=origins)
def test_reference_matches_oracle(rows, origin):
    verdicts = validate(batches(rows), origin=origin, backend="python")
    expected, completed = _oracle_run(rows, origin)
    assert _verdict_rows(verdicts) == expected
    assert _txn_rows(verdicts) == completed


@SETTINGS
@given(rows=streams(), origin=origins)
def test_backends_agree_on_every_column_and_state(backend, rows, origin):
    ref_state, state = ProducerStateTable(), ProducerStateTable(row_capacity=1, stream_capacity=1)
    reference = validate(batches(rows), ref_state, origin=origin, backend="python")
    result = validate(batches(rows), state, origin=origin, backend=backend)
    assert result.backend == backend
    for name, column in reference.to_dict().items():
        np.testing.assert_array_equal(getattr(result, name), column, err_msg=name)
    assert _txn_rows(result) == _txn_rows(reference)
    assert_same_state(state, ref_state)


@SETTINGS
@given(rows=streams(), origin=origins, cuts=st.lists(st.integers(0, 60), max_size=5))
def test_chunked_equals_whole(backend, rows, origin, cuts):
    whole_state = ProducerStateTable()
    whole = validate(batches(rows), whole_state, origin=origin, backend=backend)
    packed = idemcore.BatchColumns.coerce(batches(rows))
    bounds = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    state = ProducerStateTable(row_capacity=1, stream_capacity=1)
    parts = [validate(packed.slice(a, b), state, origin=origin, backend=backend) for a, b in itertools.pairwise(bounds)]
    for name, column in whole.to_dict().items():
        np.testing.assert_array_equal(np.concatenate([getattr(p, name) for p in parts]), column, err_msg=name)
    assert [txn for p in parts for txn in _txn_rows(p)] == _txn_rows(whole)
    assert_same_state(state, whole_state)


def chaotic_stream(n: int, seed: int, producers: int = 300) -> dict[str, np.ndarray]:
    """A synthetic stream of many producers, then scrambled: swapped neighbours, epoch changes, wrap-around."""
    rng = np.random.default_rng(seed)
    columns = synthetic_stream(n, n_producers=producers, n_partitions=5, retry_fraction=0.05,
                               first_sequence=INT32_MAX - 40, seed=seed)
    swap = np.flatnonzero(rng.random(len(columns["partition"]) - 1) < 0.02)
    for column in columns.values():
        column[swap], column[swap + 1] = column[swap + 1].copy(), column[swap].copy()
    bump = rng.random(len(columns["partition"])) < 0.01
    columns["producer_epoch"][bump] += rng.integers(-1, 2, bump.sum()).astype(np.int16)
    columns["is_transactional"][:] = rng.random(len(columns["partition"])) < 0.1
    return columns


@pytest.mark.parametrize("origin", ["client", "replication"])
def test_backends_agree_on_large_chaotic_stream(backend, origin):
    columns = chaotic_stream(20_000, seed=3)
    ref_state, state = ProducerStateTable(), ProducerStateTable(row_capacity=2, stream_capacity=1)
    reference = validate(columns, ref_state, origin=origin, backend="python")
    result = validate(columns, state, origin=origin, backend=backend)
    counts = reference.counts()
    if origin == "client":  # the stream really exercises duplicates and every kind of rejection
        assert counts["duplicate"] > 100 and counts["OUT_OF_ORDER_SEQUENCE_NUMBER"] > 100
        assert counts["INVALID_PRODUCER_EPOCH"] > 0 and counts["INVALID_TXN_STATE"] > 0
        assert {"duplicate", "sequence_gap", "epoch_regression", "fenced", "invalid_txn_state"} <= set(
            reference.finding_counts())
    else:  # replication never deduplicates nor checks sequences
        assert counts["duplicate"] == 0 and "OUT_OF_ORDER_SEQUENCE_NUMBER" not in counts
    for name, column in reference.to_dict().items():
        np.testing.assert_array_equal(getattr(result, name), column, err_msg=name)
    assert_same_state(state, ref_state)


def test_every_column_of_the_contract_is_exercised():
    # Guard for the strategy above: every column of the contract (a new one too) must take more than one value
    # in the metadata the generated streams pass to the kernel, else the properties above never vary it.
    seen: dict[str, set] = {name: set() for name in COLUMNS}

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(rows=streams())
    def collect(rows):
        packed = idemcore.BatchColumns.coerce(batches(rows))
        for name in COLUMNS:
            seen[name].update(packed[name].tolist())

    collect()
    assert {name: sorted(values) for name, values in seen.items() if len(values) < 2} == {}
    assert {-1, 0, 1} <= seen["control_type"] and {-2, -1} <= seen["base_offset"]  # markers and raw metadata
