"""What a broker in a cluster knows of the cluster (Kafka's ZooKeeper-era ``MetadataCache``): the live brokers, the
controller, and every partition's leader, leader epoch, replicas and ISR, as the controller's UpdateMetadata
requests said. Metadata and FindCoordinator answers come from here, so every broker answers clients alike."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.net.messages import PartitionMetadata, TopicMetadata
from idemcore.net.replication import BrokerEndpoint, UpdateMetadataRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import INTERNAL_TOPICS

#: Kafka's ``LeaderAndIsr.NoLeader``: a partition without a leader.
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int


class MetadataCache:
    """The cluster as the controller last described it (module docstring)."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.partitions: dict[str, dict[int, PartitionInfo]] = {}
        self.controller_id = -1
        self.controller_epoch = -1

    def update(self, request: UpdateMetadataRequest) -> ErrorCode:
        """Take an UpdateMetadata request (Kafka's ``updateMetadata``): a deposed controller's is refused."""
        if request.controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        self.controller_epoch = request.controller_epoch
        self.controller_id = request.controller_id
        self.brokers = {endpoint.broker_id: endpoint for endpoint in request.live_brokers}
        for entry in request.partitions:
            self.partitions.setdefault(entry.topic, {})[entry.partition] = PartitionInfo(
                entry.leader, entry.leader_epoch, tuple(entry.isr), tuple(entry.replicas),
                tuple(entry.offline_replicas), entry.zk_version, entry.controller_epoch)
        return ErrorCode.NONE

    def note_leader(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: tuple[int, ...],
                    replicas: tuple[int, ...]) -> None:
        """What a LeaderAndIsr said of a partition, until the UpdateMetadata that follows it (Kafka sends both;
        a client asking between them must not be sent to the old leader)."""
        known = self.partitions.get(topic, {}).get(partition)
        if known is not None and known.leader_epoch > leader_epoch:
            return
        self.partitions.setdefault(topic, {})[partition] = PartitionInfo(
            leader, leader_epoch, isr, replicas, () if known is None else known.offline_replicas,
            -1 if known is None else known.zk_version, -1 if known is None else known.controller_epoch)

    def topic_names(self) -> list[str]:
        return sorted(self.partitions)

    def has_topic(self, name: str) -> bool:
        return name in self.partitions

    def partition_count(self, name: str) -> int:
        return len(self.partitions.get(name, {}))

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        return self.partitions.get(topic, {}).get(partition)

    def leader(self, topic: str, partition: int) -> BrokerEndpoint | None:
        """The endpoint of the partition's leader, None when it has none or the leader is not alive."""
        info = self.partition(topic, partition)
        if info is None or info.leader == NO_LEADER:
            return None
        return self.brokers.get(info.leader)

    def topic_metadata(self, name: str) -> TopicMetadata:
        """A topic as Metadata answers it: each partition's leader (LEADER_NOT_AVAILABLE without one), epoch,
        replicas, ISR and the replicas on brokers that are not alive."""
        partitions = self.partitions.get(name)
        if not partitions:
            return TopicMetadata(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        states = []
        for number in sorted(partitions):
            info = partitions[number]
            alive = info.leader != NO_LEADER and info.leader in self.brokers
            offline = tuple(sorted(set(info.offline_replicas)
                                   | {r for r in info.replicas if r not in self.brokers}))
            states.append(PartitionMetadata(number, ErrorCode.NONE if alive else ErrorCode.LEADER_NOT_AVAILABLE,
                                            info.leader if alive else NO_LEADER, info.leader_epoch, info.replicas,
                                            info.isr, offline))
        return TopicMetadata(name, ErrorCode.NONE, len(partitions), name in INTERNAL_TOPICS, tuple(states))
