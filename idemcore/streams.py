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


#: The anomalies inject_anomalies() plants, and the verdict each one must get (client origin).
ANOMALY_VERDICTS = {
    "retry_in_window": "duplicate",
    "zombie_epoch": "INVALID_PRODUCER_EPOCH",
    "duplicate_beyond_window": "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "sequence_gap": "OUT_OF_ORDER_SEQUENCE_NUMBER",
}


def _is_retry_copy(columns: dict[str, np.ndarray]) -> np.ndarray:
    pid, base = columns["producer_id"], columns["base_sequence"]
    part = columns["partition"]
    copy = np.zeros(len(pid), dtype=bool)
    copy[1:] = (pid[1:] == pid[:-1]) & (base[1:] == base[:-1]) & (part[1:] == part[:-1])
    return copy


def inject_anomalies(
    columns: dict[str, np.ndarray], *, zombies: int = 3, beyond_window: int = 3, gaps: int = 3, seed: int = 0
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Plant anomalies into a :func:`synthetic_stream` stream (single epoch, one partition per producer pair).

    Each anomaly touches its own (partition, producer) stream, so each yields
    exactly one rejection: a *zombie* bumps the producer's epoch halfway (its
    later batches restart at sequence 0) and then writes once more with the old
    epoch; a *duplicate beyond window* resends a batch after six newer ones; a
    *sequence gap* sends a batch ten sequences ahead. The retries already in
    the stream are the in-window duplicates. Returns the new columns and the
    ground truth: how many of each anomaly were planted.
    """
    rng = np.random.default_rng(seed)
    columns = {name: column.copy() for name, column in columns.items()}
    pair = columns["producer_id"].astype(np.uint64) * np.uint64(1_000_003) + columns["partition"].astype(np.uint64)
    originals = ~_is_retry_copy(columns)
    # Streams long enough to plant in, each used once.
    keys, counts = np.unique(pair[originals], return_counts=True)
    wanted = zombies + beyond_window + gaps
    candidates = keys[counts >= 16]
    if len(candidates) < wanted:
        raise ValueError(f"the stream has {len(candidates)} producer streams of 16+ batches; {wanted} are needed")
    chosen = rng.choice(candidates, size=wanted, replace=False)
    inserts: list[tuple[int, dict]] = []

    def row_at(i: int, **changes) -> dict:
        return {**{name: column[i] for name, column in columns.items()}, **changes}

    for key in chosen[:zombies]:
        rows = np.flatnonzero((pair == key) & originals)
        cut = rows[len(rows) // 2]
        later = np.flatnonzero((pair == key) & (np.arange(len(pair)) >= cut))
        restart = int(columns["base_sequence"][cut])
        columns["producer_epoch"][later] += 1
        for name in ("base_sequence", "last_sequence"):
            columns[name][later] = (columns[name][later].astype(np.int64) - restart) % (INT32_MAX + 1)
        inserts.append((int(rows[-1]) + 1, row_at(int(cut), producer_epoch=columns["producer_epoch"][cut] - 1,
                                                  base_sequence=restart,
                                                  last_sequence=restart + int(columns["record_count"][cut]) - 1)))
    for key in chosen[zombies:zombies + beyond_window]:
        rows = np.flatnonzero((pair == key) & originals)
        j = int(rng.integers(0, len(rows) - 8))
        inserts.append((int(rows[j + 7]) + 1, row_at(int(rows[j]))))
    for key in chosen[zombies + beyond_window:]:
        rows = np.flatnonzero((pair == key) & originals)
        j = int(rng.integers(0, len(rows) - 1))
        ahead = (int(columns["last_sequence"][rows[j]]) + 11) % (INT32_MAX + 1)
        count = int(columns["record_count"][rows[j]])
        inserts.append((int(rows[j]) + 1, row_at(int(rows[j]), base_sequence=ahead,
                                                 last_sequence=(ahead + count - 1) % (INT32_MAX + 1))))

    inserts.sort(key=lambda item: item[0])
    positions = [position for position, _ in inserts]
    for name in columns:
        values = np.array([row[name] for _, row in inserts], dtype=columns[name].dtype)
        columns[name] = np.insert(columns[name], positions, values)
    n = len(columns["partition"])
    columns["max_timestamp"] = 1_700_000_000_000 + np.arange(n, dtype=np.int64)
    truth = {
        "retry_in_window": int(np.count_nonzero(_is_retry_copy(columns))),
        "zombie_epoch": zombies,
        "duplicate_beyond_window": beyond_window,
        "sequence_gap": gaps,
    }
    return columns, truth
