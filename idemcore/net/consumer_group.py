"""The consumer group protocol of KIP-848 (Kafka's ConsumerGroupHeartbeat and ConsumerGroupDescribe), with the
fields idemcore's coordinator uses. Partitions are named by topic name here; the wire translation maps them to and
from the broker's topic ids. Like :mod:`idemcore.net.messages`, every response carries its request's
``request_id``; a request refused for a malformed field is answered INVALID_REQUEST with an ``error_message``
naming it."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.protocol.constants import TopicPartition

#: ``member_epoch`` of a heartbeat joining the group, leaving it, and a static member leaving for a while.
JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
#: ``rebalance_timeout_ms`` of a heartbeat that does not change it.
UNCHANGED_TIMEOUT = -1


@dataclass(slots=True, frozen=True)
class ConsumerGroupHeartbeatRequest:
    """A member's heartbeat. A field left None (``rebalance_timeout_ms`` -1) did not change since the last one;
    ``owned_partitions`` are the partitions the member owns now. ``member_id_from_client``: the member made its
    own id (v1+, KIP-1082); at v0 an empty id asks the coordinator for one."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = UNCHANGED_TIMEOUT
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_partitions: tuple[TopicPartition, ...] | None = None
    client_id: str = ""
    client_host: str = ""
    member_id_from_client: bool = True
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ConsumerGroupHeartbeatResponse:
    """``assignment``: the partitions the member may own now (None: unchanged since the last answer)."""

    error_code: int
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartition, ...] | None = None
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class DescribedConsumerMember:
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    assignment: tuple[TopicPartition, ...] = ()
    target_assignment: tuple[TopicPartition, ...] = ()


@dataclass(slots=True, frozen=True)
class DescribedConsumerGroup:
    """A group's state (``Empty``, ``Assigning``, ``Reconciling``, ``Stable``), epochs, assignor and members;
    GROUP_ID_NOT_FOUND with a message for a group the coordinator does not have as a consumer group."""

    group_id: str
    error_code: int
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()


@dataclass(slots=True, frozen=True)
class ConsumerGroupDescribeRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ConsumerGroupDescribeResponse:
    groups: tuple[DescribedConsumerGroup, ...]
    request_id: int = 0
    error_message: str | None = None
