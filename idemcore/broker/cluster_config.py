"""The settings of a broker in a ZooKeeper-coordinated cluster, by Kafka's names (read from
:class:`~idemcore.broker.config.BrokerConfig`; kept apart from the cluster code so a broker running alone never
imports ZooKeeper's client)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from idemcore.broker.controller.config import ControllerConfig
from idemcore.broker.producer_ids import BlockStore, ZooKeeperBlockStore

if TYPE_CHECKING:
    from idemcore.broker.config import BrokerConfig


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """Kafka's ``replica.fetch.*`` settings."""

    broker_id: int
    max_bytes: int = 1_048_576  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    backoff_ms: int = 1_000  # replica.fetch.backoff.ms


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The settings of a broker in a cluster, by Kafka's names (read from :class:`BrokerConfig`)."""

    zookeeper_connect: str
    session_timeout_ms: int
    connection_timeout_ms: int
    replica_lag_time_max_ms: int
    fetcher: FetcherSettings
    high_watermark_checkpoint_ms: int
    default_replication_factor: int
    offsets_replication_factor: int
    transaction_replication_factor: int
    unclean_leader_election: bool
    controller: ControllerConfig

    def producer_id_store(self) -> BlockStore:
        """The cluster's producer-id block node in ZooKeeper (Kafka's ``/latest_producer_id_block``): every broker
        claims its blocks there by compare-and-set, so no two brokers hand out one id."""
        from idemcore.broker.controller.zk_client import ensure_chroot  # kazoo: only for a cluster

        ensure_chroot(self.zookeeper_connect, self.connection_timeout_ms)
        return ZooKeeperBlockStore(self.zookeeper_connect, timeout_s=self.connection_timeout_ms / 1000)


def cluster_config_of(settings: BrokerConfig) -> ClusterConfig | None:
    """The cluster settings of ``settings``; None without ``zookeeper.connect`` (a broker running alone)."""
    v = settings.values
    connect = v["zookeeper.connect"]
    if not connect:
        return None
    session = v["zookeeper.session.timeout.ms"]
    return ClusterConfig(
        zookeeper_connect=connect, session_timeout_ms=session,
        connection_timeout_ms=v["zookeeper.connection.timeout.ms"] or session,
        replica_lag_time_max_ms=v["replica.lag.time.max.ms"],
        fetcher=FetcherSettings(settings.broker_id, v["replica.fetch.max.bytes"],
                                v["replica.fetch.response.max.bytes"], v["replica.fetch.min.bytes"],
                                v["replica.fetch.wait.max.ms"], v["replica.fetch.backoff.ms"]),
        high_watermark_checkpoint_ms=v["replica.high.watermark.checkpoint.interval.ms"],
        default_replication_factor=v["default.replication.factor"],
        offsets_replication_factor=v["offsets.topic.replication.factor"],
        transaction_replication_factor=v["transaction.state.log.replication.factor"],
        unclean_leader_election=v["unclean.leader.election.enable"],
        controller=ControllerConfig.from_settings(v))
