"""Consumer-group administration from idemcore's side (what ``kafka-consumer-groups`` does): list the groups of
every broker, describe groups and their committed offsets, delete groups and a group's offsets, each asked of the
group's coordinator as Kafka's admin clients do (FindCoordinator first; NOT_COORDINATOR and a loading coordinator
found again, a bounded number of times). Blocking, one connection per broker
(:class:`~idemcore.net.broker_channel.BlockingBrokerChannel`)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from idemcore.errors import IdemcoreError
from idemcore.net.broker_channel import BrokerChannels
from idemcore.net.client_security import ClientSecurity
from idemcore.net.group_admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from idemcore.net.messages import (
    FetchedOffset,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from idemcore.net.tcp import parse_bootstrap
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.codes import error_name as _error_name
from idemcore.protocol.constants import TopicPartition

#: Answers after which the coordinator is looked up again (it moved, or is loading its partition).
_FIND_AGAIN = frozenset((ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
#: A response type (the group admin messages are not in messages.Request/Response: the channel takes them as any).
T = TypeVar("T")
#: How many times a group's request is sent before its last answer stands, and the pause between tries.
ATTEMPTS = 10
RETRY_BACKOFF_S = 0.2


class GroupAdminError(IdemcoreError, RuntimeError):
    """A broker could not be reached or refused the request as a whole; one line naming what."""


#: How an answer's error code is named in a message: its ErrorCode name, else ``error N``.
error_name = functools.partial(_error_name, unknown="error ")


class GroupAdmin(BrokerChannels):
    """Group administration over the cluster that ``bootstrap`` (``HOST:PORT``) belongs to."""

    def __init__(self, bootstrap: str, *, client_id: str = "idemcore-groups", request_timeout_ms: int = 30_000,
                 attempts: int = ATTEMPTS, security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)[0]  # the first broker is asked
        super().__init__(client_id, security=security, request_timeout_ms=request_timeout_ms)
        self.attempts = attempts

    # ------------------------------------------------------------ the calls

    def brokers(self) -> dict[int, tuple[str, int]]:
        """Every broker of the cluster, by id, as the bootstrap broker's metadata lists them."""
        answer = self._call(self.bootstrap, MetadataRequest((), allow_auto_topic_creation=False), MetadataResponse)
        return {b.broker_id: (b.host, b.port) for b in answer.brokers} or {-1: self.bootstrap}

    def list_groups(self, states: Sequence[str] = (), types: Sequence[str] = ()) -> list[tuple[int, ListedGroup]]:
        """``(coordinator id, group)`` of every group of every broker (each lists the groups it coordinates),
        only those in one of ``states`` and of one of ``types`` when given; sorted by group id."""
        listed: list[tuple[int, ListedGroup]] = []
        for node, address in sorted(self.brokers().items()):
            answer = self._call(address, ListGroupsRequest(tuple(states), tuple(types)), ListGroupsResponse)
            if answer.error_code != ErrorCode.NONE:
                raise GroupAdminError(f"broker {node} at {_where(address)} answered ListGroups with "
                                      f"{error_name(answer.error_code)}")
            listed += [(node, group) for group in answer.groups]
        return sorted(listed, key=lambda item: item[1].group_id)

    def describe_groups(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        """Each group as its coordinator describes it, in order (its ``error_code`` says why not)."""
        described = []
        for group_id in group_ids:
            answer = self._at_coordinator(group_id, DescribeGroupsRequest((group_id,)), DescribeGroupsResponse,
                                          lambda a: a.groups[0].error_code if a.groups else 0)
            described.append(answer.groups[0] if answer.groups else DescribedGroup(group_id, int(ErrorCode.NONE)))
        return described

    def committed_offsets(self, group_id: str) -> tuple[int, tuple[FetchedOffset, ...]]:
        """``(error code, committed offsets)`` of the group (OffsetFetch of every partition), sorted."""
        answer = self._at_coordinator(group_id, OffsetFetchRequest(group_id), OffsetFetchResponse,
                                      lambda a: a.error_code)
        return answer.error_code, tuple(sorted(answer.offsets, key=lambda o: (o.topic, o.partition)))

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """Each group deleted at its coordinator: an error code per group (NON_EMPTY_GROUP while it has members,
        GROUP_ID_NOT_FOUND for none)."""
        results = {}
        for group_id in dict.fromkeys(group_ids):
            answer = self._at_coordinator(group_id, DeleteGroupsRequest((group_id,)), DeleteGroupsResponse,
                                          lambda a: a.results[0][1] if a.results else 0)
            results[group_id] = answer.results[0][1] if answer.results else int(ErrorCode.UNKNOWN_SERVER_ERROR)
        return results

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]) -> OffsetDeleteResponse:
        """The group's committed offsets of ``partitions`` deleted (OffsetDelete): a group-wide error, or one per
        partition (GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to its topic)."""
        return self._at_coordinator(group_id, OffsetDeleteRequest(group_id, tuple(partitions)),
                                    OffsetDeleteResponse, lambda a: a.error_code)

    # ------------------------------------------------------------ plumbing

    def _at_coordinator(self, group_id: str, request: Any, kind: type[T],
                        error_of: Callable[[Any], int]) -> T:
        """``request`` sent to the group's coordinator, found again after an answer saying it moved or loads."""
        answer: T | None = None
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(RETRY_BACKOFF_S)
            found = self._call(self.bootstrap, FindCoordinatorRequest(group_id), FindCoordinatorResponse)
            if found.error_code in _FIND_AGAIN:
                continue
            if found.error_code != ErrorCode.NONE:
                raise GroupAdminError(f"no coordinator for group {group_id!r}: {error_name(found.error_code)}"
                                      + (f" ({found.error_message})" if found.error_message else ""))
            answer = self._call((found.host, found.port), request, kind)
            if error_of(answer) not in _FIND_AGAIN:
                return answer
        if answer is None:
            raise GroupAdminError(f"no coordinator for group {group_id!r} after {self.attempts} tries")
        return answer

    def _call(self, address: tuple[str, int], request: Any, kind: type[T]) -> T:
        try:
            answer = self.channel(address).call(request)
        except (ConnectionError, TimeoutError) as exc:
            said = str(exc).removeprefix(f"broker {_where(address)}: ")  # the channel names the broker too
            raise GroupAdminError(f"broker at {_where(address)}: {said}") from None
        if not isinstance(answer, kind):
            raise GroupAdminError(f"broker at {_where(address)} answered a {type(request).__name__} with a "
                                  f"{type(answer).__name__}")
        return answer


def _where(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"
