"""What a broker's cluster parts use of the :class:`~idemcore.broker.broker.Broker` that holds them, as Protocols:
the broker makes its :class:`~idemcore.broker.cluster_member.ClusterMember` and its
:class:`~idemcore.broker.coordinator_leadership.CoordinatorLeadership`, so they see it through these views
instead of importing it (an import each way would be a circle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from idemcore.broker.coordinator import TransactionCoordinator
from idemcore.broker.delayed import DelayedOperations
from idemcore.broker.group import GroupCoordinator
from idemcore.broker.log_manager import LogManager
from idemcore.broker.producer_ids import ProducerIdManager
from idemcore.broker.replica_manager import ReplicaManager
from idemcore.broker.topics import Topics
from idemcore.net.messages import Pending, Request, Response

if TYPE_CHECKING:
    from idemcore.broker.config import BrokerConfig


class Closing(Protocol):
    """A part the cluster member closes before its own connections (the coordinators' leadership)."""

    async def close(self) -> None: ...


class _Served(Protocol):
    """What both views read: the broker's id, its clock, its partitions and its delayed operations."""

    @property
    def broker_id(self) -> int: ...

    @property
    def clock(self) -> Callable[[], int]: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def delayed(self) -> DelayedOperations: ...

    @property
    def topics(self) -> dict[str, int]: ...


class MemberBroker(_Served, Protocol):
    """The broker as its :class:`~idemcore.broker.cluster_member.ClusterMember` sees it."""

    @property
    def settings(self) -> BrokerConfig | None: ...

    @property
    def log_manager(self) -> LogManager: ...

    @property
    def topic_catalog(self) -> Topics: ...

    @property
    def coordinator_leadership(self) -> Closing | None: ...

    def internal_topic_settings(self, name: str) -> tuple[int, dict[str, Any]]: ...


class LeadershipBroker(_Served, Protocol):
    """The broker as its :class:`~idemcore.broker.coordinator_leadership.CoordinatorLeadership` sees it: the
    leadership makes the coordinators, installs them on the broker and gates the broker's handlers."""

    _txn_coordinator: TransactionCoordinator | None
    _group_coordinator: GroupCoordinator | None

    @property
    def _closed(self) -> bool: ...

    @property
    def _handlers(self) -> dict[type, Callable]: ...

    @property
    def producer_ids(self) -> ProducerIdManager: ...

    @property
    def transaction_max_timeout_ms(self) -> int: ...

    @property
    def transaction_state_partitions(self) -> int: ...

    @property
    def offsets_topic_partitions(self) -> int: ...

    def handle(self, request: Request) -> Response | Pending | None: ...

    def group_coordinator_settings(self) -> dict[str, Any]: ...
