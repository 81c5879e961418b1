"""Synthetic produce-attempt streams, generated vectorised (tens of millions of batches in seconds).

Each stream interleaves many idempotent producers over one or more
partitions. Sequences are what a correct producer assigns: per (partition,
producer) they start at ``first_sequence`` and advance by each batch's record
count, wrapping at 2147483647. A fraction of batches is sent twice in a row,
as a producer retrying after a lost response does.
"""

from __future__ import annotations

import numpy as np

from .batches import COLUMNS
from .constants import INT32_MAX


def random_producer_ids(count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct random non-negative 64-bit producer ids."""
    ids = np.unique(rng.integers(0, np.iinfo(np.int64).max, size=count, dtype=np.int64))
    while len(ids) < count:  # collisions are astronomically rare; top up if one happens
        ids = np.unique(np.concatenate([ids, rng.integers(0, np.iinfo(np.int64).max, count - len(ids))]))
    return rng.permutation(ids)


def exclusive_group_cumsum(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each position, the sum of ``values`` at earlier positions of the same group."""
    order = np.argsort(group, kind="stable")
    sorted_values = values[order].astype(np.int64)
    running = np.cumsum(sorted_values) - sorted_values
    sorted_group = group[order]
    starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
    lengths = np.diff(np.r_[starts, len(group)])
    running -= np.repeat(running[starts], lengths)
    result = np.empty_like(running)
    result[order] = running
    return result


def synthetic_stream(
    n_batches: int,
    *,
    n_producers: int = 10_000,
    n_partitions: int = 1,
    retry_fraction: float = 0.01,
    max_records: int = 10,
    first_sequence: int = 0,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """About ``n_batches`` produce attempts (originals plus retries) as packed columns.

    Producers and partitions are drawn at random for every batch, so streams
    interleave. With ``first_sequence`` near 2147483647 the sequences wrap.
    """
    if n_batches < 1 or n_producers < 1 or n_partitions < 1 or max_records < 1:
        raise ValueError("n_batches, n_producers, n_partitions and max_records must be at least 1")
    if not 0.0 <= retry_fraction < 1.0:
        raise ValueError(f"retry_fraction must be in [0, 1), got {retry_fraction}")
    rng = np.random.default_rng(seed)
    n_original = max(1, round(n_batches / (1.0 + retry_fraction)))
    pids = random_producer_ids(n_producers, rng)
    producer = rng.integers(0, n_producers, size=n_original, dtype=np.int32)
    partition = rng.integers(0, n_partitions, size=n_original, dtype=np.int32)
    count = rng.integers(1, max_records + 1, size=n_original, dtype=np.int32)
    pair = producer.astype(np.int64) * n_partitions + partition
    base = (exclusive_group_cumsum(pair, count) + first_sequence) % (INT32_MAX + 1)

    # A retry is sent right after its original: the same batch twice.
    repeats = np.where(rng.random(n_original) < retry_fraction, 2, 1)
    columns = {
        "partition": np.repeat(partition, repeats),
        "producer_id": np.repeat(pids[producer], repeats),
        "base_sequence": np.repeat(base.astype(np.int32), repeats),
        "record_count": np.repeat(count, repeats),
    }
    n = len(columns["partition"])
    columns["last_sequence"] = ((columns["base_sequence"].astype(np.int64) + columns["record_count"] - 1)
                                % (INT32_MAX + 1)).astype(np.int32)
    columns["producer_epoch"] = np.zeros(n, np.int16)
    columns["base_offset"] = np.full(n, -1, np.int64)
    columns["max_timestamp"] = 1_700_000_000_000 + np.arange(n, dtype=np.int64)
    columns["is_transactional"] = np.zeros(n, np.bool_)
    columns["is_control"] = np.zeros(n, np.bool_)
    columns["control_type"] = np.full(n, -1, np.int8)
    columns["coordinator_epoch"] = np.zeros(n, np.int32)
    return {name: columns[name] for name in COLUMNS}
