"""The inter-broker requests and responses of ZooKeeper-era replication (Kafka 2.x/3.x): what the controller
sends a broker (LeaderAndIsr, UpdateMetadata, StopReplica), what a follower asks its leader besides Fetch
(OffsetForLeaderEpoch), and ElectLeaders (an admin's request to the controller). Like
:mod:`idemcore.net.messages`, each response carries its request's ``request_id``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from idemcore.protocol.codes import ErrorCode

#: Kafka's ``SecurityProtocol`` ids (UpdateMetadata endpoints).
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class ListenerAddress(NamedTuple):
    """One listener of a broker as it registers it: name, advertised host and port, security protocol."""

    name: str
    host: str
    port: int
    protocol: str


@dataclass(slots=True, frozen=True)
class BrokerEndpoint:
    """A live broker's id and address (Kafka's LiveLeader / UpdateMetadataBroker): ``host``/``port`` are where
    brokers reach it (its inter-broker listener); ``listeners`` every listener it registered (empty: one
    PLAINTEXT listener at host/port)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[ListenerAddress, ...] = ()

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where a client of ``listener`` reaches this broker; None when it has no such listener (a broker that
        registered no listener list is reached at host/port on any)."""
        if not self.listeners:
            return self.host, self.port
        for one in self.listeners:
            if one.name == listener:
                return one.host, one.port
        return None


# ---------------------------------------------------------------- LeaderAndIsr (key 4)


@dataclass(slots=True, frozen=True)
class LeaderAndIsrPartition:
    """One partition's state as the controller decided it (Kafka's LeaderAndIsrPartitionState):
    ``zk_version`` is the version of its state znode (the leader's ISR updates are conditional on it);
    ``is_new``: the replica is being created, so a missing log is not an offline directory."""

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
    """Become leader or follower of ``partitions``; ``live_leaders``: the addresses of their leaders."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[LeaderAndIsrPartition, ...]
    live_leaders: tuple[BrokerEndpoint, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class LeaderAndIsrResponse:
    """``partitions``: ``(topic, partition, error code)`` each."""

    error_code: int
    partitions: tuple[tuple[str, int, int], ...] = ()
    request_id: int = 0


# ---------------------------------------------------------------- UpdateMetadata (key 6)


@dataclass(slots=True, frozen=True)
class UpdateMetadataPartition:
    """One partition's state for a broker's metadata cache (Kafka's UpdateMetadataPartitionState)."""

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


# ---------------------------------------------------------------- StopReplica (key 5)


@dataclass(slots=True, frozen=True)
class StopReplicaPartition:
    """Stop replicating ``topic``-``partition`` (and delete its log when ``delete``); ``leader_epoch`` -1: no
    epoch check, -2: a topic being deleted (Kafka's EpochDuringDelete)."""

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
    """``partitions``: ``(topic, partition, error code)`` each."""

    error_code: int
    partitions: tuple[tuple[str, int, int], ...] = ()
    request_id: int = 0


# ---------------------------------------------------------------- OffsetForLeaderEpoch (key 23)

#: The replica id an OffsetForLeaderEpoch before v3 is read with (the field's default in Kafka's JSON).
NO_REPLICA_ID = -2


@dataclass(slots=True, frozen=True)
class EpochQuery:
    """Where does ``leader_epoch`` end on ``topic``-``partition``? ``current_leader_epoch``: the asker's view of
    the leader's epoch (-1: no check; otherwise FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when it differs)."""

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
    """The largest epoch at most the one asked for, and its end offset (-1, -1: unknown)."""

    topic: str
    partition: int
    error_code: int = ErrorCode.NONE
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(slots=True, frozen=True)
class OffsetForLeaderEpochResponse:
    partitions: tuple[EpochEndOffset, ...]
    request_id: int = 0


# ---------------------------------------------------------------- ElectLeaders (key 43)

#: ElectLeaders' election types (Kafka's ElectionType).
PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1


@dataclass(slots=True, frozen=True)
class ElectLeadersRequest:
    """Elect leaders of ``partitions`` (None: every partition) by ``election_type``."""

    election_type: int
    partitions: tuple[tuple[str, int], ...] | None
    timeout_ms: int = 60_000
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ElectLeadersResponse:
    """``results``: ``(topic, partition, error code, error message)`` each."""

    error_code: int
    results: tuple[tuple[str, int, int, str | None], ...] = ()
    request_id: int = 0
