"""Per-partition arrays of one producer: the queue heads and sequence bookkeeping the drain kernel reads."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_FIELDS = {
    # head batch of each partition's queue (refreshed by the accumulator)
    "head_queued": (np.uint8, 0),
    "head_sequence": (np.int32, -1),
    "head_record_count": (np.int32, 0),
    "head_attempts": (np.int32, 0),
    "head_last_attempt_ms": (np.int64, 0),
    "head_size": (np.int64, 0),
    # sequence bookkeeping (Kafka's TxnPartitionEntry)
    "next_sequence": (np.int32, 0),
    "last_acked_sequence": (np.int32, -1),
    "partition_producer_id": (np.int64, -1),
    "partition_epoch": (np.int16, -1),
    "inflight_count": (np.int32, 0),
    "first_inflight_sequence": (np.int32, -1),
    "unresolved": (np.uint8, 0),
}
HEAD_FIELDS = tuple(name for name in _FIELDS if name.startswith("head_"))
BOOKKEEPING_FIELDS = tuple(name for name in _FIELDS if not name.startswith("head_"))


class PartitionArrays:
    """One array per field over the producer's partitions, indexed by the producer's own stream of each
    (topic, partition): 0..n-1 in order of first use."""

    # Set by name (setattr) in _grow, dtypes as in _FIELDS; declared here for the type checker only.
    head_queued: npt.NDArray[np.uint8]
    head_sequence: npt.NDArray[np.int32]
    head_record_count: npt.NDArray[np.int32]
    head_attempts: npt.NDArray[np.int32]
    head_last_attempt_ms: npt.NDArray[np.int64]
    head_size: npt.NDArray[np.int64]
    next_sequence: npt.NDArray[np.int32]
    last_acked_sequence: npt.NDArray[np.int32]
    partition_producer_id: npt.NDArray[np.int64]
    partition_epoch: npt.NDArray[np.int16]
    inflight_count: npt.NDArray[np.int32]
    first_inflight_sequence: npt.NDArray[np.int32]
    unresolved: npt.NDArray[np.uint8]

    def __init__(self, capacity: int = 16) -> None:
        self.streams: dict[tuple[str, int], int] = {}
        self.names: list[tuple[str, int]] = []
        self._capacity = 0
        self._grow(capacity)

    def _grow(self, capacity: int) -> None:
        for name, (dtype, default) in _FIELDS.items():
            array = np.full(capacity, default, dtype=dtype)
            if self._capacity:
                array[:self._capacity] = getattr(self, name)
            setattr(self, name, array)
        self._capacity = capacity

    def __len__(self) -> int:
        return len(self.names)

    def stream_of(self, topic: str, partition: int) -> int:
        """The stream of (topic, partition), assigning the next one on first use."""
        key = (topic, partition)
        stream = self.streams.get(key)
        if stream is None:
            stream = len(self.names)
            if stream == self._capacity:
                self._grow(2 * self._capacity)
            self.streams[key] = stream
            self.names.append(key)
        return stream

    def kernel_view(self, names: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """The named arrays cut to the partitions in use (views: the kernel's writes land here)."""
        n = len(self.names)
        return tuple(getattr(self, name)[:n] for name in names)
