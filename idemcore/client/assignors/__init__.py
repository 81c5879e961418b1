"""Kafka's consumer partition assignors, by the protocol names of ``partition.assignment.strategy``: the group
leader runs one over every member's :class:`~idemcore.net.consumer_protocol.Subscription`."""

from __future__ import annotations

from collections.abc import Callable

from idemcore.client.assignors.base import COOPERATIVE, EAGER, Assignor, rebalance_protocol
from idemcore.client.assignors.cooperative_sticky import CooperativeStickyAssignor
from idemcore.client.assignors.range import RangeAssignor
from idemcore.client.assignors.roundrobin import RoundRobinAssignor
from idemcore.client.assignors.sticky import StickyAssignor

_FACTORIES: dict[str, Callable[[], Assignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
ASSIGNOR_NAMES: tuple[str, ...] = tuple(_FACTORIES)
#: Kafka's default ``partition.assignment.strategy``.
DEFAULT_STRATEGY: tuple[str, ...] = ("range", "cooperative-sticky")


def make_assignor(name: str) -> Assignor:
    """A new assignor (each keeps its own member's state) for the strategy ``name``."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown partition assignment strategy {name!r}: known are {', '.join(ASSIGNOR_NAMES)}")
    return factory()


__all__ = ["ASSIGNOR_NAMES", "COOPERATIVE", "DEFAULT_STRATEGY", "EAGER", "Assignor", "CooperativeStickyAssignor",
           "RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "make_assignor", "rebalance_protocol"]
