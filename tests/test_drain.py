"""The drain kernel: every backend takes the same batches and assigns the same sequences (docs/rules.md §3)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from idemcore.client.partitions import BOOKKEEPING_FIELDS, HEAD_FIELDS, PartitionArrays
from idemcore.kernels import drain_reference, load_backend, rules_reference


def test_sequence_increments_wrap():
    # The drain kernel advances sequences with the validation kernel's wrapping addition.
    assert drain_reference.seq_add is rules_reference.seq_add
    assert drain_reference.seq_add(0, 2147483647) == 2147483647
    assert drain_reference.seq_add(2147483647, 100) == 99


@st.composite
def drain_states(draw):
    n = draw(st.integers(0, 12))
    arrays = PartitionArrays(capacity=max(n, 1))
    for i in range(n):
        arrays.stream_of("t", i)
    ints = lambda lo, hi: st.lists(st.integers(lo, hi), min_size=n, max_size=n)  # noqa: E731
    arrays.head_queued[:n] = draw(ints(0, 1))
    arrays.head_sequence[:n] = draw(ints(-1, 20))
    arrays.head_record_count[:n] = draw(ints(1, 5))
    arrays.head_attempts[:n] = draw(ints(0, 2))
    arrays.head_last_attempt_ms[:n] = draw(ints(0, 100))
    arrays.head_size[:n] = draw(ints(1, 400))
    arrays.next_sequence[:n] = draw(ints(0, 2147483647))
    arrays.last_acked_sequence[:n] = draw(ints(-1, 20))
    arrays.partition_producer_id[:n] = draw(ints(-1, 2))
    arrays.partition_epoch[:n] = draw(ints(-1, 2))
    arrays.inflight_count[:n] = draw(ints(0, 5))
    arrays.first_inflight_sequence[:n] = draw(ints(-1, 20))
    arrays.unresolved[:n] = draw(ints(0, 1))
    scalars = (draw(st.booleans()), draw(st.integers(-1, 2)), draw(st.integers(-1, 2)), draw(st.integers(0, 200)),
               draw(st.integers(0, 50)), draw(st.integers(1, 1500)))
    return arrays, scalars, draw(st.integers(0, 20))


def run(backend_name, arrays, scalars, cursor_start):
    state = {name: getattr(arrays, name)[:len(arrays)].copy() for name in HEAD_FIELDS + BOOKKEEPING_FIELDS}
    n = len(arrays)
    cursor = np.array([cursor_start], np.int64)
    out = (np.full(n, -9, np.int32), np.full(n, -9, np.int32), np.zeros(n, np.uint8))
    taken = load_backend(backend_name).drain_partitions(
        *(state[name] for name in HEAD_FIELDS), *(state[name] for name in BOOKKEEPING_FIELDS),
        *scalars, cursor, *out)
    return taken, int(cursor[0]), [a[:taken].tolist() for a in out], {k: v.tolist() for k, v in state.items()}


@settings(max_examples=300, deadline=None)
@given(drain_states())
def test_backends_agree_with_the_reference(case):
    arrays, scalars, cursor = case
    expected = run("python", arrays, scalars, cursor)
    for name in ("numba", "cython"):
        assert run(name, arrays, scalars, cursor) == expected


def test_gating_only_the_oldest_in_flight_batch_is_resent():
    arrays = PartitionArrays(2)
    for i in range(2):
        arrays.stream_of("t", i)
    arrays.head_queued[:2] = 1
    arrays.head_sequence[:2] = [5, -1]  # partition 0 retries seq 5 while seq 3 is still in flight
    arrays.inflight_count[:2] = [2, 0]
    arrays.first_inflight_sequence[:2] = [3, -1]
    arrays.partition_producer_id[:2] = 7
    arrays.partition_epoch[:2] = 0
    arrays.head_record_count[:2] = 1
    arrays.head_size[:2] = 10
    taken, _, _, _ = run("python", arrays, (True, 7, 0, 0, 0, 10_000), 0)
    assert taken == 0  # the round stops at partition 0, as Kafka's drain does
    taken, _, (partitions, sequences, _), _ = run("python", arrays, (True, 7, 0, 0, 0, 10_000), 1)
    assert partitions == [1] and sequences == [0]
