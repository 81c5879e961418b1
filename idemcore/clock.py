"""The wall clock in milliseconds, as Kafka counts time (brokers and clients take a clock to swap in a virtual
one in simulations)."""

import time


def wall_clock_ms() -> int:
    """Milliseconds since the epoch."""
    return time.time_ns() // 1_000_000
