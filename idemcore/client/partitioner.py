"""Kafka's default partitioning of keyed records: murmur2 of the key bytes (docs/rules.md §3)."""

from __future__ import annotations

import numbers
import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):  # little-endian 4-byte words
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Partitioner:
    """Explicit partition wins; a key picks by murmur2; otherwise sticky: one partition until
    ``sticky_bytes`` were sent to it, then the next (Kafka's built-in partitioner, without load weighting)."""

    def __init__(self, sticky_bytes: int = 16_384) -> None:
        self.sticky_bytes = max(1, sticky_bytes)
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes sent to it]

    def partition(self, topic: str, num_partitions: int, key: bytes | None, partition: int | None,
                  size: int = 0) -> int:
        if partition is not None:
            if not isinstance(partition, numbers.Integral) or isinstance(partition, bool):
                raise TypeError(f"partition must be an integer, not {type(partition).__name__}")
            if not 0 <= partition < num_partitions:
                raise ValueError(f"partition {partition} out of range for topic {topic!r} "
                                 f"with {num_partitions} partitions")
            return int(partition)
        if key is not None:
            return partition_for_key(key, num_partitions)
        sticky = self._sticky.get(topic)
        if sticky is None:
            sticky = self._sticky[topic] = [0, 0]
        if sticky[1] >= self.sticky_bytes:
            sticky[0] = (sticky[0] + 1) % num_partitions
            sticky[1] = 0
        sticky[1] += size
        return sticky[0] % num_partitions
