"""StreamKeys: (topic, partition) pairs as dense int32 ids, the kernel's partition numbers within a task."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_PARTITION_BITS = 32
#: Largest (topics x partitions) lookup table built for interleaved rows; beyond it, a sort.
_MAX_TABLE = 1 << 22


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
        codes = self._topic_codes_of(topic)
        partition = np.asarray(partition)
        n = len(partition)
        if n == 0:
            return np.empty(0, dtype=np.int32)
        low, high = int(partition.min()), int(partition.max())
        if low < 0 or high > np.iinfo(np.int32).max:
            raise ValueError(f"column 'partition' has values outside [0, 2147483647]: [{low}, {high}]")
        # Runs of equal (topic, partition), found on the narrow columns: no 64-bit key per row.
        starts = np.flatnonzero((codes[1:] != codes[:-1]) | (partition[1:] != partition[:-1])) + 1
        if len(starts) < n // 8:  # long runs (sorted or clustered input): look up each run once
            starts = np.r_[0, starts]
            keys = (codes[starts].astype(np.int64) << _PARTITION_BITS) | partition[starts].astype(np.int64)
            ids = np.array([self._id_of(int(k)) for k in keys], dtype=np.int32)
            return np.repeat(ids, np.diff(np.r_[starts, n]))
        width = high + 1
        if len(self.topics) * width <= _MAX_TABLE:  # interleaved, few (topic, partition) pairs: a lookup table
            flat = codes.astype(np.int64) * width + partition
            first = np.full(len(self.topics) * width, n, dtype=np.int64)
            first[flat[::-1]] = np.arange(n - 1, -1, -1)  # the last write wins: each pair's first row
            present = np.flatnonzero(first < n)
            table = np.empty(len(first), dtype=np.int32)
            for pair in present[np.argsort(first[present], kind="stable")].tolist():  # ids in order of first sight
                code, part = divmod(pair, width)
                table[pair] = self._id_of((code << _PARTITION_BITS) | part)
            return table[flat]
        key = (codes.astype(np.int64) << _PARTITION_BITS) | partition.astype(np.int64)
        unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        ids = np.empty(len(unique), dtype=np.int32)
        for k in np.argsort(first, kind="stable"):  # new keys get ids in order of first sight
            ids[k] = self._id_of(int(unique[k]))
        return ids[inverse.ravel()]

    def _topic_codes_of(self, topic: Any) -> np.ndarray:
        if isinstance(topic, pa.ChunkedArray):  # chunks may carry different dictionaries: one at a time
            parts = [self._topic_codes_of(chunk) for chunk in topic.chunks]
            return np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)
        if not isinstance(topic, pa.Array):
            topic = pa.array(topic, type=pa.string())
        if topic.null_count:
            raise ValueError(f"column 'topic' contains {topic.null_count} null value(s)")
        if not pa.types.is_dictionary(topic.type):
            if not (pa.types.is_string(topic.type) or pa.types.is_large_string(topic.type)):
                raise ValueError(f"column 'topic' must be a string; got {topic.type}")
            topic = pc.dictionary_encode(topic)
        names = topic.dictionary.to_pylist()
        mapping = np.array([self._topic_code(name) for name in names], dtype=np.int32)
        return mapping[topic.indices.to_numpy(zero_copy_only=False)]

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
        topic_names = np.array(self.topics, dtype=object)
        codes = np.asarray(self.topic_code, dtype=np.int64)
        topics = pa.array(topic_names[codes[ids]] if len(ids) else [], type=pa.string())
        return topics, np.asarray(self.partition, dtype=np.int32)[ids]
