"""The messages brokers exchange to replicate (Kafka's LeaderAndIsr, UpdateMetadata, StopReplica,
OffsetForLeaderEpoch and ElectLeaders), with the fields idemcore's controller, replica manager and fetchers use.
Requests and responses carry ``request_id`` last, as the messages of :mod:`idemcore.net.messages` do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class BrokerEndpoint:
    """Where broker ``broker_id`` listens (its ``/brokers/ids/N`` registration)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True, frozen=True)
class LeaderAndIsrPartition:
    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    is_new: bool = False


@dataclass(slots=True, frozen=True)
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[LeaderAndIsrPartition, ...]
    live_leaders: tuple[BrokerEndpoint, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class LeaderAndIsrResponse:
    error_code: int
    partitions: tuple[tuple[str, int, int], ...]  # (topic, partition, error code)
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class UpdateMetadataPartition:
    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(slots=True, frozen=True)
class UpdateMetadataRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[UpdateMetadataPartition, ...]
    live_brokers: tuple[BrokerEndpoint, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class UpdateMetadataResponse:
    error_code: int
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class StopReplicaPartition:
    topic: str
    partition: int
    leader_epoch: int
    delete: bool


@dataclass(slots=True, frozen=True)
class StopReplicaRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[StopReplicaPartition, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class StopReplicaResponse:
    error_code: int
    partitions: tuple[tuple[str, int, int], ...]  # (topic, partition, error code)
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class EpochQuery:
    topic: str
    partition: int
    current_leader_epoch: int
    leader_epoch: int


@dataclass(slots=True, frozen=True)
class OffsetForLeaderEpochRequest:
    replica_id: int
    partitions: tuple[EpochQuery, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class EpochEndOffset:
    topic: str
    partition: int
    error_code: int
    leader_epoch: int
    end_offset: int


@dataclass(slots=True, frozen=True)
class OffsetForLeaderEpochResponse:
    partitions: tuple[EpochEndOffset, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ElectLeadersRequest:
    election_type: int  # 0 preferred, 1 unclean (Kafka's ElectionType)
    partitions: tuple[tuple[str, int], ...] | None  # None: every partition
    timeout_ms: int
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ElectLeadersResponse:
    error_code: int
    results: tuple[tuple[str, int, int, str | None], ...]  # (topic, partition, error code, message)
    request_id: int = 0
