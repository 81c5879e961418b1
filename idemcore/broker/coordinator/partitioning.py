"""Which partition of a coordinator's log owns a key: Kafka's ``Utils.abs(key.hashCode) % partitions``.

Both coordinators use it: a transactional id picks its ``__transaction_state`` partition, a group id its
``__consumer_offsets`` partition. The hash is Java's ``String.hashCode`` over UTF-16 code units (a character
outside the BMP counts as its two surrogates), and the absolute value is ``Utils.abs``, which maps
``Integer.MIN_VALUE`` to 0 (not ``Utils.toPositive``, the producer partitioner's ``n & 0x7fffffff``).
"""

from __future__ import annotations

from functools import lru_cache

from idemcore.checks import int_setting
from idemcore.protocol.constants import DEFAULT_TRANSACTION_STATE_PARTITIONS

_INT32_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``h = 31 * h + unit`` over the UTF-16 code units, wrapping as a signed int32."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``|n|``, except that ``Integer.MIN_VALUE`` (whose negation overflows) gives 0."""
    return 0 if n == _INT32_MIN else abs(n)


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of a coordinator log with ``partitions`` partitions that owns ``key``."""
    int_setting("partitions", partitions, 1)
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    return _partition(key, partitions)


def partition_for(transactional_id: str, partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS) -> int:
    """The ``__transaction_state`` partition that owns ``transactional_id`` (Kafka's
    ``TransactionStateManager.partitionFor``)."""
    return coordinator_partition(transactional_id, partitions)


@lru_cache(maxsize=4096)
def _partition(key: str, partitions: int) -> int:
    # Every record a coordinator writes asks this of its id: the hash runs in Python, one code unit at a time.
    return java_abs(java_string_hash(key)) % partitions
