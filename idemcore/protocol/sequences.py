"""Sequence arithmetic: the one place that knows producer sequences are int32 and wrap to 0.

Sequences live in ``[0, 2147483647]``; the number after 2147483647 is 0. Every
module that adds, subtracts or compares sequences calls these (the kernels'
reference and Numba backends compile this very source; the Cython kernels
carry their own ``wrap_seq``, checked against these by the tests). Written in
the subset of Python that Numba compiles.
"""

from __future__ import annotations

import numpy as np

SEQUENCE_MAX = 2147483647
SEQUENCE_SPACE = 2147483648  # the count of valid sequences
HALF_SEQUENCE_SPACE = 1073741824  # a sequence less than this far ahead (wrapping) counts as "ahead"


def seq_add(seq, delta):
    """``seq + delta`` in the wrapping sequence space (``0 <= delta <= SEQUENCE_MAX``)."""
    s = seq + delta
    if s > SEQUENCE_MAX:
        s -= SEQUENCE_SPACE
    return s


def seq_sub(seq, delta):
    """``seq - delta`` in the wrapping sequence space (Kafka's decrementSequence); also the distance from
    ``delta`` forward to ``seq`` when both are sequences."""
    s = seq - delta
    if s < 0:
        s += SEQUENCE_SPACE
    return s


def in_sequence(last_seq, next_seq):
    """True when ``next_seq`` directly follows ``last_seq`` (wrapping at SEQUENCE_MAX)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQUENCE_MAX)


def seq_at_or_before(seq, reference):
    """True when ``seq`` is ``reference`` or lies less than half the sequence space behind it."""
    return seq_sub(reference, seq) < HALF_SEQUENCE_SPACE


def last_sequences(base, count):
    """Vectorised ``seq_add(base, count - 1)`` over NumPy arrays; -1 stays -1 (no sequence)."""
    last = (base.astype(np.int64) + count.astype(np.int64) - 1) % SEQUENCE_SPACE
    return np.where(base < 0, base, last).astype(np.int32)


def record_counts(base, last):
    """Vectorised count of sequences from ``base`` to ``last`` inclusive; 1 where there is no sequence."""
    count = (last.astype(np.int64) - base.astype(np.int64)) % SEQUENCE_SPACE + 1
    return np.where(base < 0, 1, count).astype(np.int32)
