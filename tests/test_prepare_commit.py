"""check (prepare) then commit, as a broker uses them, against validate over what was really written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore import ProducerStateTable, Status, check, commit, validate
from idemcore.record.columns import BatchMetadata
from idemcore.synth.streams import synthetic_stream


def requests(packed: BatchMetadata) -> list[np.ndarray]:
    """Consecutive batches grouped into requests of at most one batch per partition, in order."""
    groups, current, seen = [], [], set()
    for i, partition in enumerate(packed["partition"].tolist()):
        if partition in seen:
            groups.append(np.array(current))
            current, seen = [], set()
        current.append(i)
        seen.add(partition)
    if current:
        groups.append(np.array(current))
    return groups


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), fail_rate=st.sampled_from([0.0, 0.1, 0.5]),
       first_sequence=st.sampled_from([0, 2147483640]))
def test_check_and_commit_equal_validate_over_the_batches_written(backend, seed, fail_rate, first_sequence):
    packed = BatchMetadata.coerce(synthetic_stream(200, n_producers=4, n_partitions=3, retry_fraction=0.2,
                                                   first_sequence=first_sequence, seed=seed))
    rng = np.random.default_rng(seed)
    state = ProducerStateTable(row_capacity=1, partition_capacity=1)  # small: commit must grow it
    kept, verdict_rows = [], []
    for rows in requests(packed):
        batch = packed.take(rows)
        verdicts = check(batch, state, backend=backend)
        written = (verdicts.status == Status.APPENDED) & (rng.random(len(rows)) >= fail_rate)
        failed = (verdicts.status == Status.APPENDED) & ~written
        commit(batch, verdicts, state, written=written, backend=backend)
        kept += rows[~failed].tolist()  # a failed write is as if the batch never arrived
        verdict_rows += [(int(verdicts.status[k]), int(verdicts.error_code[k]), int(verdicts.base_offset[k]),
                          int(verdicts.finding[k])) for k in np.flatnonzero(~failed)]
    expected_state = ProducerStateTable()
    expected = validate(packed.take(np.array(kept, dtype=np.int64)), expected_state, backend=backend)
    assert verdict_rows == list(zip(expected.status.tolist(), expected.error_code.tolist(),
                                    expected.base_offset.tolist(), expected.finding.tolist(), strict=True))
    mine, theirs = state.canonical(), expected_state.canonical()
    assert mine.keys() == theirs.keys()
    for name in mine:
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)


def test_check_changes_no_state_and_refuses_two_batches_for_one_partition(backend):
    state = ProducerStateTable()
    batches = {"partition": [0, 1], "producer_id": [7, 7], "producer_epoch": [0, 0], "base_sequence": [0, 0],
               "record_count": [2, 1], "is_transactional": [True, False]}
    before = {name: array.copy() for name, array in state.canonical().items()}
    verdicts = check(batches, state, backend=backend)
    assert verdicts.status.tolist() == [Status.APPENDED] * 2 and verdicts.last_offset.tolist() == [1, 0]
    after = state.canonical()
    assert all(np.array_equal(before[name], after[name]) for name in before)
    commit(batches, verdicts, state, written=[False, True], backend=backend)
    assert state.row_of(0, 7) is None and state.row_of(1, 7) is not None and state.next_offset(1) == 1
    with pytest.raises(ValueError, match="at most one batch per partition"):
        check({**batches, "partition": [2, 2]}, state, backend=backend)
    with pytest.raises(ValueError, match="written must have one flag per batch"):
        commit(batches, verdicts, state, written=[True], backend=backend)
