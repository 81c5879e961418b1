"""A consumer's membership of a classic consumer group: the client side of JoinGroup, SyncGroup, Heartbeat and
LeaveGroup, as Kafka's ``AbstractCoordinator`` and ``ConsumerCoordinator`` run it.

- Joining: FindCoordinator (group key), then JoinGroup offering every assignor of
  ``partition_assignment_strategy`` in order, each with the member's subscription as Kafka's ConsumerProtocol
  bytes (its topics, the partitions it owns, its generation). A first join is answered MEMBER_ID_REQUIRED with the
  id to join with. The leader (the coordinator names it) asks Metadata for every topic the group subscribes to,
  runs the chosen assignor over the members' subscriptions and sends each member's assignment in its SyncGroup;
  every member gets its own in the SyncGroup answer.
- The rebalance protocol is COOPERATIVE when every configured assignor supports it, else EAGER (Kafka's rule).
  EAGER: everything owned is revoked (after a synchronous commit of the positions when auto commit is on)
  before joining. COOPERATIVE (KIP-429): only the partitions the new assignment takes away are revoked, after the
  sync, and the member rejoins at once when it revoked any, so they can go to their new owner.
- Heartbeats every ``heartbeat_interval_ms`` while the group is stable: REBALANCE_IN_PROGRESS asks for a rejoin;
  ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID mean the member's generation is gone, its partitions are lost
  (``on_partitions_lost``, no commit) and it joins again as a new member; FENCED_INSTANCE_ID (a second static
  member with the same instance id) is fatal; NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE send the member back
  to FindCoordinator, and no successful heartbeat for ``session_timeout_ms`` too: the member then goes on in its
  generation if the coordinator (moved, or restarted with the group's metadata) still has it, without a rejoin.
- ``max_poll_interval_ms``: a member whose user has not called ``poll`` in time leaves the group (LeaveGroup,
  except a static member) as Kafka's heartbeat thread makes it; the next ``poll`` joins it again.
- Rejoins also follow a subscription change, a pattern subscription matching another set of topics, and (the
  leader) a change in the partition count of a topic the group subscribes to, checked at each metadata refresh
  (``metadata_max_age_ms``).
- Listener callbacks (revoked, assigned, lost) run in ``poll``, in the user's thread, as Kafka calls them.

Threads: a transport that says ``thread_safe`` (``TcpTransport``) gets a daemon heartbeat thread, which sends the
heartbeats (under the transport's ``lock``, with its own client name) and applies the poll timeout while the user
does not poll; otherwise heartbeats go from ``poll`` and the consumer's blocking calls. The member's own state is
guarded by one lock shared with that thread, let go while a listener or a synchronous commit runs (so a slow one
does not stop the heartbeats).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import NamedTuple, Protocol, cast

from idemcore.client.assignors import COOPERATIVE, EAGER, Assignor, make_assignor
from idemcore.client.group_metadata import ConsumerGroupMetadata
from idemcore.errors import IdemcoreError
from idemcore.net.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from idemcore.net.membership import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import (
    GROUP_KEY,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    Request,
    Response,
)
from idemcore.net.transport import Transport, connection_broke
from idemcore.protocol.codes import ErrorCode, error_name
from idemcore.protocol.constants import TopicPartition

log = logging.getLogger(__name__)

E = ErrorCode
#: How often the heartbeat thread wakes (at most; a shorter heartbeat interval wakes it more often).
_THREAD_PERIOD_MS = 100
#: How long ``close`` waits for the LeaveGroup answer (Kafka bounds it by the close timeout).
_LEAVE_WAIT_MS = 5_000
_MAX_LEAVE_ROUNDS = 1_000_000  # a bound on that wait's loop besides its clock (a transport's time may stand still)
#: Answers that send the member back to FindCoordinator (Kafka's ``markCoordinatorUnknown``).
_COORDINATOR_GONE = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE})
#: Answers that end the member's generation: its partitions are lost and it joins as a new member.
_GENERATION_GONE = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION})


class GroupMemberError(IdemcoreError):
    """The group refused this member in a way rejoining cannot fix (an inconsistent protocol, a bad session
    timeout, a fenced static member); the message names the group and the error."""


class FencedInstanceIdError(GroupMemberError):
    """Another member joined with this member's ``group_instance_id`` (KIP-345): this one is fenced for good."""


class ConsumerRebalanceListener(Protocol):
    """Kafka's ``ConsumerRebalanceListener``, called from ``poll``. ``on_partitions_lost``: the partitions went
    with the member's generation (another member may own them already: do not commit them)."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None: ...

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None: ...


class GroupOwner(Protocol):
    """What a :class:`GroupMember` drives of its consumer (:class:`~idemcore.client.consumer.Consumer`): the
    member sets the consumer's partitions and commits its positions; typed here so the member needs no import of
    the consumer, which imports the member."""

    client_id: str
    enable_auto_commit: bool

    @property
    def transport(self) -> Transport: ...

    def assignment(self) -> set[TopicPartition]: ...

    def _assign_from_group(self, partitions: Iterable[TopicPartition]) -> None: ...

    def _commit_positions_sync(self, partitions: set[TopicPartition] | None = None) -> None: ...


def rebalance_protocol(assignors: Sequence[Assignor]) -> str:
    """COOPERATIVE when every assignor supports it, else EAGER (Kafka's ``ConsumerCoordinator``)."""
    return COOPERATIVE if all(COOPERATIVE in a.supported_protocols for a in assignors) else EAGER


class _Sent(NamedTuple):
    """A request in flight on a channel: when it went, its timeout, what runs on its answer or its loss."""

    request: Request
    sent_ms: int
    timeout_ms: int
    on_answer: Callable[[Response], None]
    on_lost: Callable[[], None]


class _Channel:
    """Requests of one client name on the transport: sent, answered, or given up after their timeout (the
    connection is then dropped, so no late answer arrives)."""

    def __init__(self, transport: Transport, client: str, lock: contextlib.AbstractContextManager[object]) -> None:
        self.transport = transport
        self.client = client
        self.lock = lock
        self.ids = itertools.count(1)
        self.inflight: dict[int, _Sent] = {}

    def send(self, build: Callable[[int], object], timeout_ms: int, on_answer: Callable[[Response], None],
             on_lost: Callable[[], None]) -> None:
        # The membership requests travel like any other (the transports carry them to ``handle``).
        request = cast(Request, build(next(self.ids)))
        with self.lock:
            if not self.inflight:  # a break while idle (receive did not ask) lost nothing of this request's
                connection_broke(self.transport, self.client)
            self.inflight[request.request_id] = _Sent(request, self.transport.now_ms(), timeout_ms, on_answer, on_lost)
            try:
                self.transport.send(self.client, request)
            except BaseException:
                del self.inflight[request.request_id]
                raise

    def receive(self) -> None:
        if not self.inflight:  # nothing to answer or lose: the transport is not asked (every poll comes here)
            return
        with self.lock:
            answers = self.transport.poll(self.client)
            now = self.transport.now_ms()
            broke = connection_broke(self.transport, self.client)
        for request, response in answers:
            sent = self.inflight.get(request.request_id)
            if sent is None or sent.request is not request:
                continue
            del self.inflight[request.request_id]
            sent.on_answer(response)
        if broke or any(now - sent.sent_ms >= sent.timeout_ms for sent in self.inflight.values()):
            self.drop()

    def drop(self) -> None:
        """Give up everything in flight (their ``on_lost`` run)."""
        with self.lock:
            self.transport.disconnect(self.client)
        lost = list(self.inflight.values())
        self.inflight.clear()
        for sent in lost:
            sent.on_lost()

    def busy(self, kind: type) -> bool:
        return any(isinstance(sent.request, kind) for sent in self.inflight.values())


class GroupMember:
    """One consumer's membership of ``group_id`` (module docstring). The consumer calls :meth:`poll` from its
    ``poll`` and :meth:`drive` from its blocking calls; it owns the assigned partitions, which this sets through
    ``consumer._assign_from_group``."""

    def __init__(self, consumer: GroupOwner, group_id: str, *, assignors: Sequence[str],
                 session_timeout_ms: int, heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 group_instance_id: str | None, metadata_max_age_ms: int, retry_backoff_ms: int,
                 request_timeout_ms: int) -> None:
        names = list(assignors)
        if not names:
            raise ValueError("partition_assignment_strategy must name at least one assignor, got none")
        if len(set(names)) != len(names):
            raise ValueError(f"partition_assignment_strategy names an assignor twice: {names}")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be below session_timeout_ms "
                             f"({session_timeout_ms})")
        self.consumer = consumer
        self.transport = consumer.transport
        self.group_id = group_id
        self.assignors = [make_assignor(name) for name in names]
        self.protocol = rebalance_protocol(self.assignors)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.group_instance_id = group_instance_id
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        thread_safe = bool(getattr(self.transport, "thread_safe", False))
        transport_lock = getattr(self.transport, "lock", None) if thread_safe else None
        self.lock = threading.RLock()  # the member's state, shared with the heartbeat thread
        io_lock: contextlib.AbstractContextManager[object] = (
            transport_lock if transport_lock is not None else contextlib.nullcontext())
        self.channel = _Channel(self.transport, f"{consumer.client_id}-group", io_lock)
        self.heartbeats = _Channel(self.transport, f"{consumer.client_id}-heartbeat", io_lock) \
            if thread_safe else self.channel
        # Subscription.
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.listener: ConsumerRebalanceListener | None = None
        self.matched: frozenset[str] = frozenset()  # the topics subscribed (the pattern's matches)
        self.pattern_unresolved = False  # a new pattern not yet matched against the cluster's topics
        # Membership.
        self.generation_id = NO_GENERATION
        self.member_id = UNKNOWN_MEMBER_ID
        self.protocol_name: str | None = None
        self.leader = False
        self.coordinator_known = False
        self.need_rejoin = True
        self.rejoin_reason = "the first join"
        self.joining = False  # JoinGroup or SyncGroup in flight, or the leader's metadata
        self.join_prepared = False
        self.joined_topics: frozenset[str] = frozenset()
        # The leader's partition count of every member's topic at its assignment (what it watches for changes).
        self.assigned_counts: dict[str, int] = {}
        self.lost_pending = False  # the generation went: the partitions are lost at the next poll
        self.left_for_poll_timeout = False
        self.synced: tuple[int, str, bytes] | None = None  # (generation, protocol, assignment) to apply in poll
        self.fatal: GroupMemberError | None = None
        self.listener_error: Exception | None = None  # the first a listener raised, raised from poll
        now = self.transport.now_ms()
        self.last_poll_ms = now
        self.next_heartbeat_ms = now
        self.last_heartbeat_ok_ms = now
        self.next_metadata_ms = now
        self.not_before_ms = 0
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        if thread_safe:
            self.thread = threading.Thread(target=self._run_thread, name=f"{consumer.client_id}-heartbeat",
                                           daemon=True)
            self.thread.start()

    # ------------------------------------------------------------ subscription

    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    def subscribe(self, topics: frozenset[str], pattern: re.Pattern[str] | None,
                  listener: ConsumerRebalanceListener | None) -> None:
        with self.lock:
            self.topics, self.pattern, self.listener = topics, pattern, listener
            if pattern is None:
                self.pattern_unresolved = False
                self._set_matched(topics, "the subscription changed")
            else:
                self.next_metadata_ms = 0  # match the pattern at the next poll, and join with its matches
                self.pattern_unresolved = True

    def subscription(self) -> set[str]:
        return set(self.matched)

    def _set_matched(self, topics: frozenset[str], reason: str) -> None:
        if topics != self.matched:
            self.matched = topics
            if topics != self.joined_topics or self.generation_id == NO_GENERATION:
                self.request_rejoin(reason)

    def request_rejoin(self, reason: str) -> None:
        if not self.need_rejoin:
            log.info("%s: group %s: rejoining: %s", self.consumer.client_id, self.group_id, reason)
        self.need_rejoin = True
        self.rejoin_reason = reason

    def commit_refused(self, codes: Iterable[int]) -> None:
        """An OffsetCommit refused for the member's generation: it is gone (Kafka's ``resetGeneration``), or the
        group is rebalancing (rejoin)."""
        with self.lock:
            refused = set(codes)
            if refused & _GENERATION_GONE:
                self._reset_generation()
            elif E.REBALANCE_IN_PROGRESS in refused:
                self.request_rejoin("a commit found the group rebalancing")

    def metadata(self) -> ConsumerGroupMetadata:
        with self.lock:
            return ConsumerGroupMetadata(self.group_id, self.generation_id, self.member_id, self.group_instance_id)

    # ------------------------------------------------------------ driving

    def poll(self) -> bool:
        """One step of the user's ``poll``: answers, heartbeats, metadata, joining; listener callbacks. True when
        the member is in a stable generation (its assignment is current). A listener that raised is raised from
        here once the step is done (Kafka's ``onJoinComplete`` finishes the rebalance, then throws)."""
        with self.lock:
            try:
                return self._poll_step()
            finally:
                self.raise_listener_error()

    def raise_listener_error(self) -> None:
        """Raise (once) the first error a listener raised since the last call."""
        error, self.listener_error = self.listener_error, None
        if error is not None:
            raise error

    def _poll_step(self) -> bool:  # under self.lock (poll)
        self.last_poll_ms = self.transport.now_ms()
        self.left_for_poll_timeout = False
        self.drive()
        self._raise_fatal()
        if self.lost_pending:
            self.lost_pending = False
            self._lose("the member's generation is gone")
        if not self.subscribed:
            return False
        self._refresh_metadata()
        if self.synced is not None:
            self._complete_join(*self.synced)
            self.synced = None
        if not self.coordinator_known:
            self._find_coordinator()
        elif self.need_rejoin and not self.joining and not self.pattern_unresolved:
            self._join()
        self.drive()
        self._raise_fatal()
        return not self.need_rejoin and not self.joining and self.generation_id != NO_GENERATION

    def drive(self) -> None:
        """Handle answers, send a heartbeat when due (without a heartbeat thread), check the session and (without
        a thread) nothing else: safe from the consumer's blocking calls."""
        with self.lock:
            self.channel.receive()
            if self.thread is None:
                self._heartbeat_step(self.transport.now_ms())

    def _raise_fatal(self) -> None:
        if self.fatal is not None:
            raise self.fatal

    # ------------------------------------------------------------ coordinator and joining

    def _find_coordinator(self) -> None:
        """FindCoordinator (group key); the transport routes the group's requests by its answer. A coordinator
        found again does not by itself rejoin: a generation it still knows goes on (Kafka's
        ``markCoordinatorUnknown``)."""
        if self.transport.now_ms() >= self.not_before_ms and not self.channel.busy(FindCoordinatorRequest):
            self.channel.send(lambda rid: FindCoordinatorRequest(self.group_id, GROUP_KEY, request_id=rid),
                              self.request_timeout_ms, self._on_coordinator, self._backoff)

    def _join(self) -> None:
        if self.transport.now_ms() < self.not_before_ms:
            return
        if not self.coordinator_known:
            self._find_coordinator()
            return
        if not self.join_prepared:
            self._prepare_join()
            self.join_prepared = True
        self._send_join()

    def _on_coordinator(self, response: Response) -> None:
        if isinstance(response, FindCoordinatorResponse) and response.error_code == E.NONE:
            self.coordinator_known = True
            self.last_heartbeat_ok_ms = self.transport.now_ms()
            return
        log.info("%s: FindCoordinator for group %s: %s", self.consumer.client_id, self.group_id,
                 _code_of(response))
        self._backoff()

    def _backoff(self) -> None:
        self.not_before_ms = self.transport.now_ms() + self.retry_backoff_ms

    def _prepare_join(self) -> None:
        """Kafka's ``onJoinPrepare``: commit the positions (auto commit) while the generation stands; EAGER: revoke
        everything; COOPERATIVE: revoke the partitions of topics no longer subscribed."""
        owned = self.consumer.assignment()
        if self.generation_id == NO_GENERATION or self.lost_pending:
            self.lost_pending = False
            if owned:
                self._lose("the member's generation is gone")
            return
        if self.consumer.enable_auto_commit and owned:
            self._commit_before_revoke()
        if self.protocol == EAGER:
            revoked = owned
        else:
            revoked = {tp for tp in owned if tp[0] not in self.matched}
        if revoked:
            self.consumer._assign_from_group(owned - revoked)
            self._call_listener("on_partitions_revoked", revoked)

    def _commit_before_revoke(self, partitions: set[TopicPartition] | None = None) -> None:
        try:
            with self._let_go():
                self.consumer._commit_positions_sync(partitions)
        except IdemcoreError as error:  # Kafka logs it and goes on joining: the partitions may have moved already
            log.warning("%s: group %s: committing before the rebalance failed: %s", self.consumer.client_id,
                        self.group_id, error)

    def _subscription_bytes(self, assignor: Assignor) -> bytes:
        subscription = Subscription(tuple(sorted(self.matched)), assignor.subscription_user_data(self.matched),
                                    tuple(sorted(self.consumer.assignment())), self.generation_id,
                                    None, self.group_instance_id)
        return encode_subscription(subscription)

    def _send_join(self) -> None:
        if self.channel.busy(JoinGroupRequest):
            return
        self.joining = True
        self.need_rejoin = False
        self.joined_topics = self.matched
        protocols = tuple((a.name, self._subscription_bytes(a)) for a in self.assignors)
        reason = self.rejoin_reason
        # A JoinGroup may wait the whole rebalance timeout (Kafka: its request timeout is the rebalance timeout
        # plus five seconds).
        self.channel.send(lambda rid: JoinGroupRequest(
            self.group_id, self.session_timeout_ms, self.max_poll_interval_ms, CONSUMER_PROTOCOL_TYPE, protocols,
            member_id=self.member_id, group_instance_id=self.group_instance_id, client_id=self.consumer.client_id,
            member_id_required=True, reason=reason, request_id=rid),
            max(self.request_timeout_ms, self.max_poll_interval_ms + 5000), self._on_join, self._join_lost)

    def _join_lost(self) -> None:
        self.joining = False
        self.coordinator_known = False
        self.request_rejoin("the join's answer was lost")
        self._backoff()

    def _on_join(self, response: Response) -> None:
        self.joining = False
        if not self.subscribed:  # unsubscribed while it waited: the coordinator drops the member in time
            return
        if not isinstance(response, JoinGroupResponse):
            self._join_failed(f"JoinGroup answered with a {type(response).__name__}")
            return
        code = response.error_code
        if code == E.NONE:
            self.generation_id = response.generation_id
            self.member_id = response.member_id
            self.protocol_name = response.protocol_name
            self.leader = response.leader == response.member_id
            self.last_heartbeat_ok_ms = self.transport.now_ms()
            self.joining = True
            if self.leader:
                self._lead(response)
            else:
                self._send_sync(())
            return
        if code == E.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self.request_rejoin("the coordinator gave the member its id")
            self._send_join()
            return
        self._rebalance_error("JoinGroup", code, response.error_message,
                              (E.REBALANCE_IN_PROGRESS, E.COORDINATOR_LOAD_IN_PROGRESS))

    def _rebalance_error(self, api: str, code: int, message: str | None, retriable: tuple[int, ...]) -> None:
        """An error answer to JoinGroup or SyncGroup: the coordinator is found again, or the generation is reset,
        and the member joins again after the backoff (``retriable`` as they are); anything else is fatal."""
        if code in _COORDINATOR_GONE:
            self.coordinator_known = False
        elif code in _GENERATION_GONE:
            self._reset_generation()
        elif code == E.FENCED_INSTANCE_ID:
            self.fatal = self._fenced()
            return
        elif code not in retriable:
            self.fatal = GroupMemberError(f"group {self.group_id}: {api} failed: {_code_name(code)}{_why(message)}")
            return
        self._join_failed(f"{api} answered {_code_name(code)}")

    def _fenced(self) -> FencedInstanceIdError:
        return FencedInstanceIdError(
            f"group {self.group_id}: group_instance_id {self.group_instance_id!r} was taken by another member")

    def _join_failed(self, why: str) -> None:
        log.info("%s: group %s: %s", self.consumer.client_id, self.group_id, why)
        self.joining = False
        self.request_rejoin(why)
        self._backoff()

    def _lead(self, response: JoinGroupResponse) -> None:
        """Kafka's ``onLeaderElected``: the members' subscriptions, then Metadata for their topics, then assign."""
        assignor = next((a for a in self.assignors if a.name == response.protocol_name), None)
        if assignor is None:
            self.fatal = GroupMemberError(f"group {self.group_id}: the coordinator chose protocol "
                                          f"{response.protocol_name!r}, not one of {[a.name for a in self.assignors]}")
            return
        subscriptions: dict[str, Subscription] = {}
        try:
            for member_id, instance_id, metadata in response.members:
                subscription = decode_subscription(metadata)
                subscriptions[member_id] = replace(subscription, group_instance_id=instance_id)
        except ConsumerProtocolError as error:
            self.fatal = GroupMemberError(f"group {self.group_id}: a member's subscription: {error}")
            return
        topics = frozenset(t for s in subscriptions.values() for t in s.topics)
        generation = response.generation_id

        def answered(metadata: Response) -> None:
            if generation != self.generation_id:
                return
            if not isinstance(metadata, MetadataResponse):
                self._join_failed(f"Metadata answered with a {type(metadata).__name__}")
                return
            counts = {t.name: t.partitions for t in metadata.topics if t.error_code == E.NONE and t.partitions > 0}
            assignments = assignor.assign(counts, subscriptions)
            self.assigned_counts = {t: counts.get(t, 0) for t in topics}
            encoded = tuple((member_id, encode_assignment(assignments.get(member_id, Assignment(()))))
                            for member_id in subscriptions)
            log.info("%s: group %s generation %d: leader assigned with %s: %s", self.consumer.client_id,
                     self.group_id, generation, assignor.name,
                     {m: sorted(a.partitions) for m, a in assignments.items()})
            self._send_sync(encoded)

        def lost() -> None:
            if generation == self.generation_id:
                self._join_failed("the leader's Metadata was lost")

        self.channel.send(lambda rid: MetadataRequest(tuple(sorted(topics)), False, request_id=rid),
                          self.request_timeout_ms, answered, lost)

    def _send_sync(self, assignments: tuple[tuple[str, bytes], ...]) -> None:
        generation = self.generation_id
        self.joining = True
        self.channel.send(lambda rid: SyncGroupRequest(
            self.group_id, generation, self.member_id, assignments, group_instance_id=self.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=self.protocol_name, request_id=rid),
            max(self.request_timeout_ms, self.max_poll_interval_ms + 5000),
            lambda response: self._on_sync(generation, response), self._join_lost)

    def _on_sync(self, generation: int, response: Response) -> None:
        self.joining = False
        if not self.subscribed:
            return
        if not isinstance(response, SyncGroupResponse):
            self._join_failed(f"SyncGroup answered with a {type(response).__name__}")
            return
        code = response.error_code
        if code == E.NONE:
            if generation == self.generation_id:
                self.synced = (generation, self.protocol_name or "", response.assignment)
                self.next_heartbeat_ms = self.transport.now_ms() + self.heartbeat_interval_ms
                self.last_heartbeat_ok_ms = self.transport.now_ms()
            return
        self._rebalance_error("SyncGroup", code, response.error_message, (E.REBALANCE_IN_PROGRESS,))

    def _complete_join(self, generation: int, protocol: str, data: bytes) -> None:
        """Kafka's ``onJoinComplete``: take the assignment; COOPERATIVE revokes what it lost and rejoins."""
        self.join_prepared = False
        try:
            assignment = decode_assignment(data)
        except ConsumerProtocolError as error:
            self.fatal = GroupMemberError(f"group {self.group_id}: the assignment of generation {generation}: "
                                          f"{error}")
            return
        assignor = next((a for a in self.assignors if a.name == protocol), None)
        if assignor is not None:
            assignor.on_assignment(assignment, generation)
        assigned = set(assignment.partitions)
        owned = self.consumer.assignment()
        log.info("%s: group %s generation %d (%s): assigned %s", self.consumer.client_id, self.group_id,
                 generation, "leader" if self.leader else "follower", sorted(assigned))
        if any(tp[0] not in self.matched for tp in assigned):
            self.request_rejoin("the assignment has topics the member does not subscribe to")
        revoked = owned - assigned
        if revoked:  # EAGER revoked everything before joining: only COOPERATIVE gets here with some
            if self.consumer.enable_auto_commit:  # what was read since the commit before the join, too
                self._commit_before_revoke(revoked)
            self.consumer._assign_from_group(owned - revoked)
            self._call_listener("on_partitions_revoked", revoked)
            self.request_rejoin("partitions were revoked: they go to their new owners in the next generation")
        self.consumer._assign_from_group(assigned)
        self._call_listener("on_partitions_assigned", assigned - owned)

    def _reset_generation(self) -> None:
        """The member's generation is gone: its partitions are lost (at the next poll) and it joins as new."""
        if self.generation_id != NO_GENERATION or self.member_id:
            log.info("%s: group %s: generation %d of member %s is gone", self.consumer.client_id, self.group_id,
                     self.generation_id, self.member_id)
        self.generation_id = NO_GENERATION
        self.member_id = UNKNOWN_MEMBER_ID
        self.protocol_name = None
        self.leader = False
        self.lost_pending = True
        self.request_rejoin("the member's generation is gone")

    def _lose(self, why: str) -> None:
        owned = self.consumer.assignment()
        self.join_prepared = False
        if owned:
            log.info("%s: group %s: partitions lost (%s): %s", self.consumer.client_id, self.group_id, why,
                     sorted(owned))
            self.consumer._assign_from_group(set())
            self._call_listener("on_partitions_lost", owned)

    def _call_listener(self, method: str, partitions: set[TopicPartition]) -> None:
        listener = self.listener
        if listener is None:
            return
        call = getattr(listener, method, None)
        if call is None and method == "on_partitions_lost":  # Kafka's default: treat them as revoked
            call = getattr(listener, "on_partitions_revoked", None)
        if call is None:
            return
        try:
            with self._let_go():
                call(set(partitions))
        except Exception as error:  # the user's code: finish the rebalance, raise it after (Kafka)
            log.warning("%s: group %s: the rebalance listener's %s raised %r", self.consumer.client_id,
                        self.group_id, method, error)
            if self.listener_error is None:
                self.listener_error = error

    @contextlib.contextmanager
    def _let_go(self) -> Iterator[None]:
        """The member lock let go (by the user's thread, which holds it once: ``poll``, ``unsubscribe``, ``close``)
        while the user's listener or a synchronous commit runs, however long: the heartbeat thread goes on
        heartbeating meanwhile (Kafka's ``joinGroupIfNeeded`` calls them outside the coordinator's lock too)."""
        self.lock.release()
        try:
            yield
        finally:
            self.lock.acquire()

    # ------------------------------------------------------------ metadata

    def _refresh_metadata(self) -> None:
        """At each metadata refresh: the pattern's matches, and (the leader) the group's partition counts."""
        now = self.transport.now_ms()
        if now < self.next_metadata_ms or self.channel.busy(MetadataRequest):
            return
        self.next_metadata_ms = now + self.metadata_max_age_ms
        # Only a pattern's matches and the leader's counts of the group's topics decide anything here.
        wanted: tuple[str, ...] | None = None if self.pattern is not None else \
            tuple(sorted(self.assigned_counts)) if self.leader else ()
        if wanted == ():
            return

        def retry() -> None:  # asked again after the backoff, not after a whole metadata_max_age_ms
            self.next_metadata_ms = self.transport.now_ms() + self.retry_backoff_ms

        def answered(response: Response) -> None:
            if not isinstance(response, MetadataResponse):
                retry()
                return
            counts = {t.name: t.partitions for t in response.topics if t.error_code == E.NONE and t.partitions > 0}
            if self.pattern is not None:
                pattern = self.pattern
                self.pattern_unresolved = False
                internal = {t.name for t in response.topics if t.is_internal}
                matched = frozenset(t for t in counts if t not in internal and pattern.fullmatch(t))
                self._set_matched(matched, f"the pattern {pattern.pattern!r} matches {sorted(matched)}")
            if self.leader and self.generation_id != NO_GENERATION and not self.joining:
                changed = sorted(t for t, n in self.assigned_counts.items() if counts.get(t, n) != n)
                if changed:
                    self.request_rejoin(f"the partition count of {changed} changed")

        self.channel.send(lambda rid: MetadataRequest(wanted, False, request_id=rid), self.request_timeout_ms,
                          answered, retry)

    # ------------------------------------------------------------ heartbeats

    def _heartbeat_step(self, now: int) -> None:
        # As Kafka's heartbeat thread: nothing while the member has no generation or is joining (a JoinGroup may
        # wait the rebalance timeout, longer than a session), so neither the session nor the poll timeout lapses.
        if self.generation_id == NO_GENERATION or not self.coordinator_known or self.joining:
            return
        if now - self.last_poll_ms > self.max_poll_interval_ms and not self.left_for_poll_timeout:
            log.warning("%s: group %s: poll was not called within max_poll_interval_ms=%d: leaving the group",
                        self.consumer.client_id, self.group_id, self.max_poll_interval_ms)
            self.left_for_poll_timeout = True
            self._leave("consumer poll timeout has expired")
            return
        if now - self.last_heartbeat_ok_ms > self.session_timeout_ms:
            log.info("%s: group %s: no heartbeat answer within session_timeout_ms=%d: finding the coordinator "
                     "again", self.consumer.client_id, self.group_id, self.session_timeout_ms)
            self.coordinator_known = False
            self.last_heartbeat_ok_ms = now
            return
        if self.need_rejoin or now < self.next_heartbeat_ms or self.heartbeats.busy(HeartbeatRequest):
            return
        self.next_heartbeat_ms = now + self.heartbeat_interval_ms
        generation, member_id = self.generation_id, self.member_id
        self.heartbeats.send(lambda rid: HeartbeatRequest(self.group_id, generation, member_id,
                                                          group_instance_id=self.group_instance_id, request_id=rid),
                             self.request_timeout_ms, lambda response: self._on_heartbeat(generation, response),
                             lambda: None)

    def _on_heartbeat(self, generation: int, response: Response) -> None:
        if generation != self.generation_id:
            return
        code = response.error_code if isinstance(response, HeartbeatResponse) else E.UNKNOWN_SERVER_ERROR
        if code == E.NONE:
            self.last_heartbeat_ok_ms = self.transport.now_ms()
        elif code == E.REBALANCE_IN_PROGRESS:
            self.last_heartbeat_ok_ms = self.transport.now_ms()
            self.request_rejoin("the group is rebalancing")
        elif code in _GENERATION_GONE:
            self._reset_generation()
        elif code in _COORDINATOR_GONE:  # found again, the member goes on in its generation if it still stands
            self.coordinator_known = False
        elif code == E.FENCED_INSTANCE_ID:
            self.fatal = self._fenced()
        else:
            log.warning("%s: group %s: heartbeat answered %s", self.consumer.client_id, self.group_id,
                        _code_name(code))

    def _run_thread(self) -> None:
        """The heartbeat thread: heartbeats and the poll timeout while the user is away from ``poll``."""
        period = min(_THREAD_PERIOD_MS, max(1, self.heartbeat_interval_ms // 4)) / 1000
        while not self.stop.wait(period):
            try:
                with self.lock:
                    self.heartbeats.receive()
                    if self.heartbeats is not self.channel:  # join answers, the coordinator's: state only
                        self.channel.receive()
                    if not self.coordinator_known and self.generation_id != NO_GENERATION and not self.joining:
                        self._find_coordinator()  # a coordinator that moved, found between polls
                    self._heartbeat_step(self.transport.now_ms())
            except Exception:  # the thread must not die silently: the user's poll sees the state it left
                log.exception("%s: heartbeat thread", self.consumer.client_id)

    # ------------------------------------------------------------ leaving

    def _leave(self, reason: str) -> None:
        """Kafka's ``maybeLeaveGroup``: a dynamic member with a member id (joined, or in its first join) sends
        LeaveGroup; either way the generation is reset."""
        if self.group_instance_id is None and self.coordinator_known and self.member_id:
            member = LeavingMember(self.member_id, None, reason)
            self.channel.send(lambda rid: LeaveGroupRequest(self.group_id, (member,), request_id=rid),
                              self.request_timeout_ms,
                              _ignore, lambda: None)
        self._reset_generation()

    def unsubscribe(self) -> None:
        """Kafka's ``onLeavePrepare`` then ``maybeLeaveGroup``: revoke (or lose) what is owned, leave."""
        with self.lock:
            self._leave_prepare()
            self._leave("the consumer unsubscribed")
            self.lost_pending = False
            self.topics, self.pattern, self.matched, self.joined_topics = frozenset(), None, frozenset(), frozenset()
            self.synced = None
            self.raise_listener_error()

    def _leave_prepare(self) -> None:
        owned = self.consumer.assignment()
        if not owned:
            return
        if self.generation_id == NO_GENERATION or self.lost_pending:
            self._lose("the member's generation is gone")
            return
        self.consumer._assign_from_group(set())
        self._call_listener("on_partitions_revoked", owned)

    def close(self) -> None:
        """Revoke, leave (a dynamic member), wait a bounded time for the LeaveGroup to be sent, stop the thread
        (whatever failed before: the thread never outlives the close); then raise what a listener raised."""
        try:
            with self.lock:
                if self.subscribed:
                    if self.consumer.enable_auto_commit and self.generation_id != NO_GENERATION \
                            and self.consumer.assignment():
                        self._commit_before_revoke()
                    self._leave_prepare()
                    self._leave("the consumer is closing")
                    deadline = self.transport.now_ms() + min(_LEAVE_WAIT_MS, self.request_timeout_ms)
                    for _ in range(_MAX_LEAVE_ROUNDS):
                        if not self.channel.busy(LeaveGroupRequest) or self.transport.now_ms() >= deadline:
                            break
                        self.transport.tick()
                        self.channel.receive()
        finally:
            self.stop.set()
            if self.thread is not None and self.thread is not threading.current_thread():
                self.thread.join(timeout=5)
            with self.lock:
                self.channel.drop()
                if self.heartbeats is not self.channel:
                    self.heartbeats.drop()
        self.raise_listener_error()


def _ignore(response: Response) -> None:
    pass


def _code_of(response: Response) -> str:
    code = getattr(response, "error_code", None)
    return type(response).__name__ if code is None else _code_name(code)


def _code_name(code: int) -> str:
    return error_name(code, unknown="error ")


def _why(message: str | None) -> str:
    return f" ({message})" if message else ""


__all__ = ["ConsumerGroupMetadata", "ConsumerRebalanceListener", "FencedInstanceIdError", "GroupMember",
           "GroupMemberError", "rebalance_protocol"]
