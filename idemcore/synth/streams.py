"""Synthetic produce-attempt streams, generated vectorised (tens of millions of batches in seconds).

Each stream interleaves many idempotent producers over one or more
partitions. Sequences are what a correct producer assigns: per (partition,
producer) they start at ``first_sequence`` and advance by each batch's record
count, wrapping at 2147483647. A fraction of batches is sent twice in a row,
as a producer retrying after a lost response does.
"""

from __future__ import annotations

import numpy as np

from idemcore.kernels.columns import INPUT_COLUMNS
from idemcore.protocol.constants import INT32_MAX


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
    return {name: columns[name] for name in INPUT_COLUMNS}


#: What inject_anomalies() can plant, by the finding each must produce (names in docs/rules.md §5).
ANOMALIES = ("duplicate_beyond_window", "sequence_gap", "out_of_order", "epoch_regression", "fenced",
             "invalid_txn_state", "invalid_record", "hanging_transaction")
DEFAULT_MIX = dict.fromkeys(ANOMALIES, 3)
#: Findings the kernel can report that inject_anomalies() never plants, and why its data cannot hold them. (The
#: in-window ``duplicate`` is not planted either: it is the stream's own retries.)
CANNOT_OCCUR = {
    "offset_overflow": "produce attempts carry no offsets, so the replay assigns each partition's offsets from 0, "
                       "and a batch would have to reach offset 2**63 - 2",
}
#: How each planted invalid_record is malformed, in turn.
INVALID_RECORDS = ("a last sequence that is not base + count - 1", "a record count of 0",
                   "no sequence (-1) from an idempotent producer")
#: Timestamps start here and span ``duration_ms``.
START_TIMESTAMP = 1_700_000_000_000


def is_retry_copy(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Rows that repeat the row before exactly (same partition, producer, epoch and sequence range)."""
    copy = np.zeros(len(columns["producer_id"]), dtype=bool)
    same = np.ones(max(len(copy) - 1, 0), dtype=bool)
    for name in ("partition", "producer_id", "producer_epoch", "base_sequence", "last_sequence"):
        same &= columns[name][1:] == columns[name][:-1]
    copy[1:] = same
    return copy


def parse_mix(text: str) -> dict[str, int]:
    """``"sequence_gap=3,fenced=1"`` -> counts; unnamed anomalies are 0. ``"none"`` plants nothing."""
    mix = dict.fromkeys(ANOMALIES, 0)
    if text.strip().lower() in ("", "none"):
        return mix
    for item in text.split(","):
        name, sep, count = item.partition("=")
        name = name.strip()
        if name not in mix:
            raise ValueError(f"unknown anomaly {name!r}; expected one of {', '.join(ANOMALIES)}")
        if not sep or not count.strip().isdigit():
            raise ValueError(f"anomaly {name!r} needs a count: {name}=N")
        mix[name] = int(count)
    return mix


def inject_anomalies(
    columns: dict[str, np.ndarray], mix: dict[str, int] | None = None, *, transactions: int = 10,
    open_recent: int = 1, duration_ms: int = 3_600_000, seed: int = 0,
) -> tuple[dict[str, np.ndarray], dict[str, int], list[dict]]:
    """Plant anomalies into a :func:`synthetic_stream` stream; return the stream, the ground truth
    (finding name -> count) and one record per planted anomaly (its batch's partition, producer id,
    position in the new stream and finding).

    Each anomaly of the data stream uses its own (partition, producer) stream
    so it yields exactly one finding: a *sequence gap* sends a batch ten
    sequences ahead; a *duplicate beyond window* resends a batch after six
    newer ones; *out of order* sends a range straddling the last written
    sequence; an *epoch regression* bumps a producer's epoch halfway (its later
    batches restart at 0) and then writes once more with the old epoch. An
    *invalid record* is a batch of an idempotent stream sent again with its
    metadata malformed (in turn, :data:`INVALID_RECORDS`): refused before any
    state is read, so its stream goes on undisturbed.
    Transactional producers (fresh ids) add ``transactions`` committed or
    aborted transactions; a *fenced* one commits at epoch 0 and 1, then its
    epoch-0 zombie writes again; an *invalid txn state* producer opens a
    transaction, writes its next sequence without the transactional flag while
    the transaction is open, then commits; a *hanging transaction* opens in the first
    tenth of the stream and never ends; ``open_recent`` transactions open in
    the last hundredth and are not (yet) hanging. The in-window duplicates
    are the retries already in the stream. Timestamps span ``duration_ms``.
    """
    mix = {**dict.fromkeys(ANOMALIES, 0), **(DEFAULT_MIX if mix is None else mix)}
    unknown = set(mix) - set(ANOMALIES)
    if unknown:
        raise ValueError(f"unknown anomalies {sorted(unknown)}; expected some of {', '.join(ANOMALIES)}")
    rng = np.random.default_rng(seed)
    columns = {name: column.copy() for name, column in columns.items()}
    n = len(columns["partition"])
    pair = columns["producer_id"].astype(np.uint64) * np.uint64(1_000_003) + columns["partition"].astype(np.uint64)
    copies = is_retry_copy(columns)
    originals = ~copies
    keys, counts = np.unique(pair[originals], return_counts=True)
    data_kinds = ("sequence_gap", "duplicate_beyond_window", "out_of_order", "epoch_regression")
    wanted = sum(mix[kind] for kind in data_kinds)
    candidates = keys[counts >= 9]  # a duplicate beyond the window needs six newer batches after it
    if len(candidates) < wanted:
        raise ValueError(f"the stream has {len(candidates)} (partition, producer) streams of 9+ batches; {wanted} are "
                         "needed to plant the anomalies: use more batches, fewer producers or fewer anomalies")
    planted_streams = rng.choice(candidates, size=wanted, replace=False)
    chosen = iter(planted_streams)
    inserts: list[tuple[int, dict, str]] = []  # (position in the old stream, row, finding or "")

    def after(i: int) -> int:  # just after row i and its retry copy, so the copy stays an in-window duplicate
        return i + 1 + int(i + 1 < n and copies[i + 1])

    def row_at(i: int, **changes) -> dict:
        return {**{name: column[i] for name, column in columns.items()}, **changes}

    def rows_of(key) -> np.ndarray:
        return np.flatnonzero((pair == key) & originals)

    def seq(value: int) -> int:
        return value % (INT32_MAX + 1)

    for _ in range(mix["sequence_gap"]):
        rows = rows_of(next(chosen))
        j = int(rows[rng.integers(0, len(rows) - 1)])
        ahead, count = seq(int(columns["last_sequence"][j]) + 11), int(columns["record_count"][j])
        inserts.append((after(j), row_at(j, base_sequence=ahead, last_sequence=seq(ahead + count - 1)),
                        "sequence_gap"))
    for _ in range(mix["duplicate_beyond_window"]):
        rows = rows_of(next(chosen))
        j = int(rng.integers(0, len(rows) - 8))
        inserts.append((after(int(rows[j + 7])), row_at(int(rows[j])), "duplicate_beyond_window"))
    for _ in range(mix["out_of_order"]):
        rows = rows_of(next(chosen))
        j = int(rows[rng.integers(0, len(rows) - 1)])
        last = int(columns["last_sequence"][j])
        inserts.append((after(j), row_at(j, base_sequence=last, last_sequence=seq(last + 1), record_count=2),
                        "out_of_order"))
    for _ in range(mix["epoch_regression"]):
        rows = rows_of(next(chosen))
        cut = rows[len(rows) // 2]
        later = np.flatnonzero((pair == pair[cut]) & (np.arange(n) >= cut))
        restart = int(columns["base_sequence"][cut])
        columns["producer_epoch"][later] += 1
        for name in ("base_sequence", "last_sequence"):
            columns[name][later] = (columns[name][later].astype(np.int64) - restart) % (INT32_MAX + 1)
        zombie = row_at(int(cut), producer_epoch=columns["producer_epoch"][cut] - 1, base_sequence=restart,
                        last_sequence=seq(restart + int(columns["record_count"][cut]) - 1))
        inserts.append((after(int(rows[-1])), zombie, "epoch_regression"))
    # Malformed copies of batches of streams no other planter uses (refused before any state is read).
    untouched = np.flatnonzero(originals & ~np.isin(pair, planted_streams))
    if len(untouched) < mix["invalid_record"]:
        raise ValueError(f"the stream has {len(untouched)} batches to copy as invalid records; "
                         f"{mix['invalid_record']} are needed: use more batches or fewer anomalies")
    for k, j in enumerate(np.sort(rng.choice(untouched, size=mix["invalid_record"], replace=False))):
        j, base, count = int(j), int(columns["base_sequence"][j]), int(columns["record_count"][j])
        malformed = [{"last_sequence": seq(base + count)},  # one past base + count - 1
                     {"record_count": 0, "last_sequence": seq(base - 1)},
                     {"base_sequence": -1, "last_sequence": -1}][k % len(INVALID_RECORDS)]
        inserts.append((after(j), row_at(j, **malformed), "invalid_record"))

    # Transactional producers: fresh ids, each on one partition, positions spread over a window of the stream.
    # A generator of its own: seeded like the stream's, it would draw the stream's producer ids again.
    id_rng = np.random.default_rng([seed, 1])
    fresh = iter(np.setdiff1d(random_producer_ids(transactions + mix["fenced"] + mix["invalid_txn_state"]
                                                  + mix["hanging_transaction"] + open_recent + 8, id_rng),
                              columns["producer_id"]))
    n_partitions = int(columns["partition"].max()) + 1 if n else 1

    def txn_rows(pid, partition, epoch, first_seq, batches, marker, coordinator_epoch=0) -> list[dict]:
        out = [{**row_at(0), "partition": partition, "producer_id": pid, "producer_epoch": epoch,
                "base_sequence": first_seq + k, "last_sequence": first_seq + k, "record_count": 1,
                "is_transactional": True, "is_control": False, "control_type": -1, "coordinator_epoch": 0}
               for k in range(batches)]
        if marker is not None:
            out.append({**row_at(0), "partition": partition, "producer_id": pid, "producer_epoch": epoch,
                        "base_sequence": -1, "last_sequence": -1, "record_count": 1, "is_transactional": True,
                        "is_control": True, "control_type": marker, "coordinator_epoch": coordinator_epoch})
        return out

    def place(rows: list[dict], low: float, high: float, findings: list[str] | None = None) -> None:
        positions = np.sort(rng.integers(int(low * n), max(int(high * n), int(low * n) + 1), size=len(rows)))
        for position, row, finding in zip(positions, rows, findings or [""] * len(rows), strict=True):
            inserts.append((int(position), row, finding))

    for k in range(transactions):
        pid, partition = int(next(fresh)), int(rng.integers(0, n_partitions))
        place(txn_rows(pid, partition, 0, 0, 3, 1 if k % 3 else 0), 0.0, 1.0)
    for _ in range(mix["fenced"]):
        pid, partition = int(next(fresh)), int(rng.integers(0, n_partitions))
        fenced = [*txn_rows(pid, partition, 0, 0, 2, 1), *txn_rows(pid, partition, 1, 0, 1, 1),
                  *txn_rows(pid, partition, 0, 2, 1, None)]
        place(fenced, 0.2, 0.9, [""] * (len(fenced) - 1) + ["fenced"])
    for _ in range(mix["invalid_txn_state"]):
        pid, partition = int(next(fresh)), int(rng.integers(0, n_partitions))
        misuse = txn_rows(pid, partition, 0, 0, 3, 1)  # sequences 0, 1, 2, then a commit marker
        misuse[2]["is_transactional"] = False  # the next sequence, without the flag, inside the transaction
        place(misuse, 0.1, 0.9, ["", "", "invalid_txn_state", ""])
    for _ in range(mix["hanging_transaction"]):
        pid, partition = int(next(fresh)), int(rng.integers(0, n_partitions))
        place(txn_rows(pid, partition, 0, 0, 2, None), 0.0, 0.1, ["hanging_transaction", ""])
    for _ in range(open_recent):
        pid, partition = int(next(fresh)), int(rng.integers(0, n_partitions))
        place(txn_rows(pid, partition, 0, 0, 2, None), 0.99, 1.0)

    # Never between a batch and its retry copy: the copy must stay right after it (an in-window duplicate).
    inserts = [(position + int(position < n and copies[position]), row, finding) for position, row, finding in inserts]
    order = sorted(range(len(inserts)), key=lambda k: inserts[k][0])  # stable: rows at one position keep order
    positions = np.array([inserts[k][0] for k in order], dtype=np.int64)
    for name in columns:
        values = np.array([inserts[k][1][name] for k in order], dtype=columns[name].dtype)
        columns[name] = np.insert(columns[name], positions, values)
    total = len(columns["partition"])
    columns["max_timestamp"] = START_TIMESTAMP + (np.arange(total, dtype=np.int64) * duration_ms) // max(total, 1)
    new_positions = positions + np.arange(len(positions))  # each earlier insert shifts later rows by one
    planted = [{"partition": int(inserts[k][1]["partition"]), "producer_id": int(inserts[k][1]["producer_id"]),
                "position": int(new_positions[i]), "finding": inserts[k][2]}
               for i, k in enumerate(order) if inserts[k][2]]
    truth = {"duplicate": int(np.count_nonzero(is_retry_copy(columns)))}
    truth.update({name: mix[name] for name in ANOMALIES if mix[name]})
    return columns, truth, planted
