"""The controller's settings, by Kafka's names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ControllerConfig:
    #: ``unclean.leader.election.enable``: the cluster default; a topic's own setting in ``/config/topics/T`` wins.
    unclean_leader_election_enable: bool = False
    #: ``auto.leader.rebalance.enable``: move leadership back to preferred replicas every check interval.
    auto_leader_rebalance_enable: bool = True
    #: ``leader.imbalance.check.interval.seconds``.
    leader_imbalance_check_interval_s: float = 300.0
    #: ``leader.imbalance.per.broker.percentage``: a broker is rebalanced when more than this share of the
    #: partitions it prefers are led elsewhere.
    leader_imbalance_per_broker_percentage: int = 10
    #: ``zookeeper.session.timeout.ms``.
    session_timeout_ms: int = 18_000
    #: Pause between attempts to send a request to a broker that does not answer.
    retry_backoff_ms: int = 100

    def __post_init__(self) -> None:
        if self.leader_imbalance_check_interval_s <= 0:
            raise ValueError(f"leader.imbalance.check.interval.seconds must be positive, got "
                             f"{self.leader_imbalance_check_interval_s}")
        if not 0 <= self.leader_imbalance_per_broker_percentage <= 100:
            raise ValueError(f"leader.imbalance.per.broker.percentage must be 0 to 100, got "
                             f"{self.leader_imbalance_per_broker_percentage}")

    @classmethod
    def from_settings(cls, values: Mapping[str, Any]) -> ControllerConfig:
        """From checked broker settings (``BrokerConfig.values``); names absent keep Kafka's defaults."""
        default = cls()
        return cls(
            unclean_leader_election_enable=bool(values.get("unclean.leader.election.enable",
                                                           default.unclean_leader_election_enable)),
            auto_leader_rebalance_enable=bool(values.get("auto.leader.rebalance.enable",
                                                         default.auto_leader_rebalance_enable)),
            leader_imbalance_check_interval_s=float(values.get("leader.imbalance.check.interval.seconds",
                                                               default.leader_imbalance_check_interval_s)),
            leader_imbalance_per_broker_percentage=int(values.get("leader.imbalance.per.broker.percentage",
                                                                  default.leader_imbalance_per_broker_percentage)),
            session_timeout_ms=int(values.get("zookeeper.session.timeout.ms", default.session_timeout_ms)))
