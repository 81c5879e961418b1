"""StreamKeys: (topic, partition) pairs as dense int32 ids, the kernel's partition numbers within a task."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_PARTITION_BITS = 32
#: Largest (topics x partitions) lookup table built for interleaved rows; beyond it, a sort.
_MAX_TABLE = 1 << 22
#: Interleaved rows: the pairs of this many first rows are numbered before the rest is looked at.
_FIRST_ROWS = 1 << 16


#: A string topic chunk is run-length encoded when its first rows come in runs of this many on average.
_RUN_SAMPLE, _RUN_LENGTH = 4096, 64


class _Runs:
    """The topic codes of a chunk's rows as runs: ``codes[k]`` up to row ``ends[k]`` (exclusive)."""

    def __init__(self, ends: np.ndarray, codes: np.ndarray):
        self.ends, self.codes = ends.astype(np.int64), codes.astype(np.int32)

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def first_last(self) -> tuple[int, int]:
        return int(self.codes[0]), int(self.codes[-1])

    def changes(self) -> np.ndarray:
        """Rows ``i`` whose next row has another topic."""
        return self.ends[:-1][self.codes[1:] != self.codes[:-1]] - 1

    def take(self, rows: np.ndarray) -> np.ndarray:
        return self.codes[np.searchsorted(self.ends, rows, side="right")]

    def expand(self) -> np.ndarray:
        return np.repeat(self.codes, np.diff(self.ends, prepend=0))


def _codes_at(codes: list[np.ndarray] | list[np.ndarray | _Runs], rows: np.ndarray) -> np.ndarray:
    """The values (int64) at ``rows`` (ascending) of the chunks ``codes`` laid end to end."""
    out = np.empty(len(rows), np.int64)
    ends = np.cumsum([len(chunk) for chunk in codes])
    begin = 0
    for chunk, stop, end in zip(codes, np.searchsorted(rows, ends).tolist(), ends.tolist(), strict=True):
        if stop > begin:  # rows[begin:stop] fall in this chunk
            local = rows[begin:stop] - (end - len(chunk))
            out[begin:stop] = chunk[local] if isinstance(chunk, np.ndarray) else chunk.take(local)
        begin = stop
    return out


def _string_runs(topic: pa.Array) -> tuple[np.ndarray, list[str]] | None:
    """Run ends and values of a string array whose rows come in long runs (by a look at its first rows)."""
    if len(topic) >= 2 * _RUN_SAMPLE and len(pc.run_end_encode(topic[:_RUN_SAMPLE]).run_ends) > \
            _RUN_SAMPLE // _RUN_LENGTH:
        return None
    encoded = pc.run_end_encode(topic)
    if len(encoded.run_ends) > len(topic) // _RUN_LENGTH:
        return None
    return encoded.run_ends.to_numpy(), encoded.values.to_pylist()


class StreamKeys:
    """Gives every (topic, partition) seen by one task a dense id 0, 1, 2, ... in order of first sight.

    Ids are stable across calls, so kernel state carried across Arrow batches
    keeps meaning the same stream. Sorted input costs one pass (runs of equal
    keys); interleaved input costs a sort of the batch.
    """

    def __init__(self) -> None:
        self._topic_codes: dict[str, int] = {}
        self._ids: dict[int, int] = {}
        self.topics: list[str] = []  # by topic code
        self.topic_code: list[int] = []  # by id
        self.partition: list[int] = []  # by id

    def __len__(self) -> int:
        return len(self.partition)

    def encode(self, topic: Any, partition: np.ndarray) -> np.ndarray:
        """Dense ids (int32) for rows with these topics (Arrow string or dictionary array) and partitions."""
        return self.encode_chunks(topic, [np.asarray(partition)])

    def encode_chunks(self, topic: Any, partition: list[np.ndarray]) -> np.ndarray:
        """:meth:`encode` with the partitions given as consecutive arrays (an Arrow column's chunks, uncopied)."""
        codes = self._topic_codes_of(topic)
        partition = [part for part in partition if len(part)]
        n = sum(len(part) for part in partition)
        if sum(len(chunk) for chunk in codes) != n:
            raise ValueError("columns 'topic' and 'partition' differ in length")
        if n == 0:
            return np.empty(0, dtype=np.int32)
        low, high = min(int(part.min()) for part in partition), max(int(part.max()) for part in partition)
        if low < 0 or high > np.iinfo(np.int32).max:
            raise ValueError(f"column 'partition' has values outside [0, 2147483647]: [{low}, {high}]")
        # Runs of equal (topic, partition), found on the narrow columns: no 64-bit key per row. A chunk whose
        # topics come in runs (the usual: a file per topic) adds only its runs' edges, no topic code per row.
        change = np.empty(n - 1, bool)  # change[i]: row i + 1 starts a run
        offset = 0
        for k, part in enumerate(partition):
            np.not_equal(part[1:], part[:-1], out=change[offset:offset + len(part) - 1])
            if k:
                change[offset - 1] = part[0] != partition[k - 1][-1]
            offset += len(part)
        offset, previous = 0, -1
        for chunk in codes:
            if not len(chunk):
                continue
            if isinstance(chunk, np.ndarray):
                change[offset:offset + len(chunk) - 1] |= chunk[1:] != chunk[:-1]
                first, last = int(chunk[0]), int(chunk[-1])
            else:
                change[offset + chunk.changes()] = True
                first, last = chunk.first_last()
            if offset and first != previous:
                change[offset - 1] = True
            offset, previous = offset + len(chunk), last
        if np.count_nonzero(change) < n // 8:  # long runs (sorted or clustered input): look up each run once
            starts = np.r_[0, np.flatnonzero(change) + 1]
            keys = (_codes_at(codes, starts) << _PARTITION_BITS) | _codes_at(partition, starts)
            ids = np.array([self._id_of(int(k)) for k in keys], dtype=np.int32)
            return np.repeat(ids, np.diff(np.r_[starts, n]))
        every = np.concatenate([chunk if isinstance(chunk, np.ndarray) else chunk.expand() for chunk in codes])
        return self._encode_interleaved(every, np.concatenate(partition) if len(partition) > 1 else partition[0],
                                        high)

    def _encode_interleaved(self, codes: np.ndarray, partition: np.ndarray, high: int) -> np.ndarray:
        width = high + 1
        if len(self.topics) * width <= _MAX_TABLE:  # interleaved, few (topic, partition) pairs: a lookup table
            flat = codes.astype(np.int32)  # pair numbers < _MAX_TABLE: 32 bits are enough
            flat *= width
            flat += partition
            table = np.full(len(self.topics) * width, -1, dtype=np.int32)
            # Ids in order of first sight: the pairs of the first rows (usually all of them), then of the rows
            # left without an id, and so on.
            self._number_pairs(flat[:_FIRST_ROWS], table, width)
            ids = table[flat]
            missing = np.flatnonzero(ids < 0)
            if len(missing):
                self._number_pairs(flat[missing], table, width)
                ids[missing] = table[flat[missing]]
            return ids
        key = (codes.astype(np.int64) << _PARTITION_BITS) | partition.astype(np.int64)
        unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        ids = np.empty(len(unique), dtype=np.int32)
        for k in np.argsort(first, kind="stable"):  # new keys get ids in order of first sight
            ids[k] = self._id_of(int(unique[k]))
        return ids[inverse.ravel()]

    def _number_pairs(self, flat: np.ndarray, table: np.ndarray, width: int) -> None:
        """Ids for the pairs (``code * width + partition``) of ``flat`` that ``table`` lacks, in order of first
        sight in ``flat``."""
        n = len(flat)
        first = np.full(len(table), n, dtype=np.int64)
        first[flat[::-1]] = np.arange(n - 1, -1, -1)  # the last write wins: each pair's first row
        present = np.flatnonzero((first < n) & (table < 0))
        for pair in present[np.argsort(first[present], kind="stable")].tolist():
            code, part = divmod(pair, width)
            table[pair] = self._id_of((code << _PARTITION_BITS) | part)

    def _topic_codes_of(self, topic: Any) -> list[np.ndarray | _Runs]:
        """Per chunk of ``topic``: its rows' topic codes, as an array or as runs."""
        if isinstance(topic, pa.ChunkedArray):  # chunks may carry different dictionaries: one at a time
            return [part for chunk in topic.chunks for part in self._topic_codes_of(chunk)]
        if not isinstance(topic, pa.Array):
            topic = pa.array(topic, type=pa.string())
        if topic.null_count:
            raise ValueError(f"column 'topic' contains {topic.null_count} null value(s)")
        if not pa.types.is_dictionary(topic.type):
            if not (pa.types.is_string(topic.type) or pa.types.is_large_string(topic.type)):
                raise ValueError(f"column 'topic' must be a string; got {topic.type}")
            runs = _string_runs(topic)
            if runs is not None:  # run ends and values: cheaper than hashing every row
                ends, values = runs
                return [_Runs(ends, np.array([self._topic_code(name) for name in values], dtype=np.int32))]
            topic = pc.dictionary_encode(topic)
        names = topic.dictionary.to_pylist()
        mapping = np.array([self._topic_code(name) for name in names], dtype=np.int32)
        if len(mapping) and (mapping == mapping[0]).all():  # one topic (a file per topic): no code per row
            return [_Runs(np.array([len(topic)]), mapping[:1])]
        return [mapping[topic.indices.to_numpy(zero_copy_only=False)]]

    def _topic_code(self, name: str) -> int:
        code = self._topic_codes.get(name)
        if code is None:
            code = self._topic_codes[name] = len(self.topics)
            self.topics.append(name)
        return code

    def _id_of(self, key: int) -> int:
        dense = self._ids.get(key)
        if dense is None:
            dense = self._ids[key] = len(self.partition)
            self.topic_code.append(key >> _PARTITION_BITS)
            self.partition.append(key & ((1 << _PARTITION_BITS) - 1))
        return dense

    def decode(self, ids: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        """Topic (Arrow string array) and partition (int32) of each id."""
        ids = np.asarray(ids, dtype=np.int64)
        codes = np.asarray(self.topic_code, dtype=np.int64)
        # Arrow's take builds the strings' buffers directly (no Python string per row).
        topics = pa.array(self.topics, type=pa.string()).take(pa.array(codes[ids]))
        return topics, np.asarray(self.partition, dtype=np.int32)[ids]
