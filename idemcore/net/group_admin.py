"""The consumer-group admin requests and responses (Kafka's DescribeGroups, ListGroups, DeleteGroups and
OffsetDelete), with the fields idemcore's group coordinator answers. Like :mod:`idemcore.net.messages`, every
response carries its request's ``request_id``; a request refused for a malformed field is answered
INVALID_REQUEST with an ``error_message`` naming it."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.protocol.constants import TopicPartition

#: The state DescribeGroups gives a group the coordinator does not know (Kafka's ``ClassicGroupState.DEAD``).
DEAD = "Dead"
#: ListGroups' group types (KIP-848).
CLASSIC, CONSUMER = "classic", "consumer"


@dataclass(slots=True, frozen=True)
class DescribedMember:
    """One member as DescribeGroups shows it: its metadata (subscription) and assignment bytes are the group
    protocol's, as the members sent them."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True, frozen=True)
class DescribedGroup:
    """A group's state (``Empty``, ``PreparingRebalance``, ``CompletingRebalance``, ``Stable``; ``Dead`` with no
    members for a group the coordinator does not have), its protocol type and selected protocol, its members."""

    group_id: str
    error_code: int
    state: str = DEAD
    protocol_type: str = ""
    protocol_name: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(slots=True, frozen=True)
class DescribeGroupsRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC


@dataclass(slots=True, frozen=True)
class ListGroupsRequest:
    """Empty filters list every group; else only groups in one of ``states_filter`` (ListGroups v4+, KIP-518)
    and of one of ``types_filter`` (v5+, KIP-848), matched without regard to case as Kafka does."""

    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class ListGroupsResponse:
    error_code: int
    groups: tuple[ListedGroup, ...] = ()
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class DeleteGroupsRequest:
    group_ids: tuple[str, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class DeleteGroupsResponse:
    """``(group_id, error_code)`` per group asked, in the request's order."""

    results: tuple[tuple[str, int], ...]
    request_id: int = 0
    error_message: str | None = None


@dataclass(slots=True, frozen=True)
class OffsetDeleteRequest:
    group_id: str
    partitions: tuple[TopicPartition, ...]
    request_id: int = 0


@dataclass(slots=True, frozen=True)
class OffsetDeleteResponse:
    """A group-wide ``error_code`` (GROUP_ID_NOT_FOUND, NOT_COORDINATOR, NON_EMPTY_GROUP...) or one
    ``(topic, partition, error_code)`` per partition asked (GROUP_SUBSCRIBED_TO_TOPIC for a topic a member of the
    group subscribes to)."""

    error_code: int
    results: tuple[tuple[str, int, int], ...] = ()
    request_id: int = 0
    error_message: str | None = None


GroupAdminRequest = DescribeGroupsRequest | ListGroupsRequest | DeleteGroupsRequest | OffsetDeleteRequest
GroupAdminResponse = DescribeGroupsResponse | ListGroupsResponse | DeleteGroupsResponse | OffsetDeleteResponse
