"""Consumer groups of the next-generation protocol (KIP-848), as Kafka's group coordinator runs them
(``GroupMetadataManager.consumerGroupHeartbeat``, ``modern.consumer.ConsumerGroup``, ``CurrentAssignmentBuilder``).

Members heartbeat; the coordinator assigns. A member joins with epoch 0; a change of the members, of their
subscriptions or of the subscribed topics' partition counts bumps the *group epoch*, and the group's *target
assignment* is computed again by a server assignor (:mod:`idemcore.broker.group.server_assignors`) at that epoch.
Each member then moves to its target one step at a time, in its heartbeats (Kafka's ``CurrentAssignmentBuilder``):

- a member that must give partitions up is told to (its assignment without them) and stays at its epoch in
  ``UNREVOKED_PARTITIONS`` until a heartbeat reports it no longer owns them (or its rebalance timeout removes it);
- only then does it reach the target epoch and get new partitions, except those another member still holds
  (assigned or being revoked): those are held back (``UNRELEASED_PARTITIONS``) and given once released.

So no partition is ever owned by two members. Static members (an instance id) may leave for a while (epoch -2)
keeping their partitions until their session lapses, and come back under a new member id without a rebalance.
A heartbeat with an epoch the member does not have is
FENCED_MEMBER_EPOCH (the previous epoch is accepted when the member owns a subset of its assignment: the answer
that bumped it may have been lost), an unknown member UNKNOWN_MEMBER_ID; a member whose session lapses is removed.

A member may subscribe by a regular expression as well as by names (KIP-848's server-side regex): it matches whole
topic names (RE2, as Kafka's RE2/J: linear time, so no pattern can stall the broker; no backreferences or
lookarounds), internal topics
(``__`` names) excluded, resolved again at every heartbeat of the group, so a matching topic made later is
assigned; an expression that does not compile is INVALID_REGULAR_EXPRESSION.

What is left out, and said so: the membership is kept in memory only (Kafka writes it as ConsumerGroup* records in
``__consumer_offsets``; the committed offsets are durable as for any group), so a member whose group a restarted
broker forgot is told UNKNOWN_MEMBER_ID and rejoins (Kafka's GROUP_ID_NOT_FOUND would be fatal to librdkafka);
an empty group goes when the group coordinator's cleanup (``GroupCoordinator.cleanup_group_metadata``) finds
it without offsets, as Kafka's does; classic members in a consumer
group (a classic JoinGroup for a non-empty consumer group is refused: see
:mod:`idemcore.broker.group.consumer_group_requests`).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2

from idemcore.broker.group.server_assignors import (
    SERVER_ASSIGNOR_NAMES,
    MemberSpec,
    Partitions,
    ServerAssignor,
    make_server_assignor,
)
from idemcore.checks import int_arg, int_setting, str_arg, str_or_none_arg
from idemcore.net.consumer_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    UNCHANGED_TIMEOUT,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
)
from idemcore.net.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from idemcore.net.group_admin import CONSUMER, ListedGroup
from idemcore.protocol.codes import ErrorCode as E
from idemcore.protocol.constants import TopicPartition

log = logging.getLogger(__name__)

#: A member's reconciliation states (Kafka's ``MemberState``).
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = "STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"
#: A group's states (Kafka's ``ConsumerGroupState``), as ListGroups and ConsumerGroupDescribe name them.
EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP = "Empty", "Assigning", "Reconciling", "Stable"
#: Kafka's error code for a subscribed regex that does not compile (KIP-848).
INVALID_REGULAR_EXPRESSION = E.INVALID_REGULAR_EXPRESSION
#: RE2 reports a refused pattern in the exception, not on stderr.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
#: How many regexes' matches are kept at most (members may each send another one).
_MAX_CACHED_REGEXES = 1024

DEFAULT_SESSION_TIMEOUT_MS = 45_000  # Kafka's group.consumer.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000  # group.consumer.heartbeat.interval.ms


@dataclass(slots=True)
class ConsumerGroupMember:
    """One member: what it subscribes to, its epoch and reconciliation state, the partitions it may own
    (``assigned``) and those it was asked to give up (``revoking``)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 0
    assigned: Partitions = field(default_factory=dict)
    revoking: Partitions = field(default_factory=dict)
    session_deadline_ms: int = 0
    #: When a member still revoking partitions is removed (set while UNREVOKED_PARTITIONS).
    rebalance_deadline_ms: int | None = None


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    #: The epoch of ``target`` (Kafka's target assignment epoch).
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    #: Each member's target assignment.
    target: dict[str, Partitions] = field(default_factory=dict)
    #: The partition count of every existing topic some member subscribes to (Kafka's subscription metadata).
    topic_partitions: dict[str, int] = field(default_factory=dict)
    #: Each member's topics: its names and what its regex matched when last resolved.
    subscriptions: dict[str, frozenset[str]] = field(default_factory=dict)
    #: The union of ``subscriptions`` (kept with it: a heartbeat that changes neither does not recompute it).
    subscribed_topics: frozenset[str] = frozenset()
    #: The existing topics the regexes were matched against (None: no member has a regex).
    resolved_in: tuple[str, ...] | None = None
    assignor_name: str = ""

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if any(m.state != STABLE or m.member_epoch != self.assignment_epoch for m in self.members.values()):
            return RECONCILING
        return STABLE_GROUP

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def held(self, other_than: str) -> set[TopicPartition]:
        """The partitions members other than ``other_than`` own or are giving up (Kafka's partition epochs)."""
        return {(topic, p) for m in self.members.values() if m.member_id != other_than
                for owned in (m.assigned, m.revoking) for topic, parts in owned.items() for p in parts}


class ConsumerGroups:
    """Every consumer-protocol group of one coordinator. ``clock`` gives the time of a heartbeat in ms,
    ``partitions_of`` a topic's partition count (None: no such topic); ``assignors``: the server assignors served,
    the first the default (Kafka's ``group.consumer.assignors``); ``topic_names`` lists the topics a subscribed
    regex is matched against (None: none); ``max_size`` bounds the members of a group."""

    def __init__(self, clock: Callable[[], int], partitions_of: Callable[[str], int | None], *,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 assignors: Sequence[str] = SERVER_ASSIGNOR_NAMES,
                 topic_names: Callable[[], Iterable[str]] | None = None, max_size: int | None = None) -> None:
        int_setting("session_timeout_ms", session_timeout_ms, 1)
        int_setting("heartbeat_interval_ms", heartbeat_interval_ms, 1)
        if max_size is not None:
            int_setting("max_size", max_size, 1)
        if isinstance(assignors, str) or not assignors:
            raise ValueError(f"assignors must be a non-empty sequence of names, got {assignors!r}")
        self._assignors: dict[str, ServerAssignor] = {name: make_server_assignor(name) for name in assignors}
        self._clock = clock
        self._partitions_of = partitions_of
        self._topic_names = topic_names
        #: Kafka's ``group.consumer.max.size`` (None: no limit).
        self.max_size = max_size
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.groups: dict[str, ConsumerGroup] = {}
        #: The topics each regex matched among ``_matched_in`` (the existing topics when they were matched).
        self._matched: dict[str, frozenset[str]] = {}
        self._matched_in: tuple[str, ...] | None = None

    # ------------------------------------------------------------ ConsumerGroupHeartbeat

    def heartbeat(self, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        """Kafka's ConsumerGroupHeartbeat: join (epoch 0), heartbeat, or leave (epoch -1 / -2). A field of the
        wrong type raises TypeError naming it; a request Kafka refuses is answered with its error."""
        check_heartbeat(request)
        rid = request.request_id
        message = _invalid(request)
        if message is not None:
            log.info("ConsumerGroupHeartbeat of member %r answered INVALID_REQUEST: %s", request.member_id, message)
            return ConsumerGroupHeartbeatResponse(E.INVALID_REQUEST, request_id=rid, error_message=message)
        if request.server_assignor is not None and request.server_assignor not in self._assignors:
            return ConsumerGroupHeartbeatResponse(
                E.UNSUPPORTED_ASSIGNOR, request_id=rid,
                error_message=f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                              f"{', '.join(self._assignors)}.")
        if request.subscribed_topic_regex:
            try:
                compile_regex(request.subscribed_topic_regex)
            except ValueError as exc:
                regex = request.subscribed_topic_regex
                return _error(INVALID_REGULAR_EXPRESSION, rid,
                              f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.")
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(request)
        group_id = request.group_id
        group = self.groups.get(group_id)
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                return _unknown_group(request)
            group = ConsumerGroup(group_id)
        if self.max_size is not None and len(group.members) >= self.max_size \
                and request.member_id not in group.members:
            return _error(E.GROUP_MAX_SIZE_REACHED, rid,
                          f"The consumer group has reached its maximum capacity of {self.max_size} members.")
        resolved = _member(group, request)
        if isinstance(resolved, ConsumerGroupHeartbeatResponse):
            return resolved
        member, joined = resolved
        member_id = member.member_id
        now = self._clock()
        before = (frozenset(member.subscribed_topic_names), member.subscribed_topic_regex, member.server_assignor)
        _update(member, request)
        bump = joined or (frozenset(member.subscribed_topic_names), member.subscribed_topic_regex,
                          member.server_assignor) != before
        group.members[member_id] = member
        self.groups[group_id] = group
        metadata = self._subscription_metadata(group, member_id if not bump else None)
        if metadata != group.topic_partitions:  # a subscribed topic appeared, went, or grew
            group.topic_partitions = metadata
            bump = True
        if bump:
            group.group_epoch += 1
            log.info("consumer group %s: epoch %d", group_id, group.group_epoch)
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        assigned_before = dict(member.assigned)
        _reconcile(group, member, request.owned_partitions, now)
        member.session_deadline_ms = now + self.session_timeout_ms
        full = request.member_epoch == JOIN_EPOCH or (
            request.rebalance_timeout_ms != UNCHANGED_TIMEOUT and request.subscribed_topic_names is not None
            and request.owned_partitions is not None)
        assignment = _flat(member.assigned) if full or member.assigned != assigned_before else None
        return ConsumerGroupHeartbeatResponse(E.NONE, member_id, member.member_epoch, self.heartbeat_interval_ms,
                                              assignment, rid)

    def _leave(self, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        """Epoch -1: the member goes. Epoch -2 (a static member): it stays, with its partitions, until its
        session lapses or its instance rejoins (Kafka's ``consumerGroupStaticMemberGroupLeave``)."""
        rid = request.request_id
        group = self.groups.get(request.group_id)
        if group is None:
            return _unknown_group(request)
        if request.instance_id is None:
            if request.member_id not in group.members:
                return _error(E.UNKNOWN_MEMBER_ID, rid,
                              f"Member {request.member_id} is not a member of group {request.group_id}.")
        else:
            static = group.static_member(request.instance_id)
            if static is None:
                return _error(E.UNKNOWN_MEMBER_ID, rid, f"Instance id {request.instance_id} is unknown.")
            if static.member_id != request.member_id:
                return _error(E.FENCED_INSTANCE_ID, rid, _fenced_instance(request, static))
            if request.member_epoch == STATIC_LEAVE_EPOCH:
                _set_epoch(static, STATIC_LEAVE_EPOCH)
                static.state, static.revoking, static.rebalance_deadline_ms = STABLE, {}, None
                static.session_deadline_ms = self._clock() + self.session_timeout_ms
                log.info("consumer group %s: static member %s (instance %s) left for a while", group.group_id,
                         static.member_id, request.instance_id)
                return ConsumerGroupHeartbeatResponse(E.NONE, request.member_id, STATIC_LEAVE_EPOCH, request_id=rid)
        self._remove(group, request.member_id, "left")
        return ConsumerGroupHeartbeatResponse(E.NONE, request.member_id, request.member_epoch, request_id=rid)

    def _remove(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        """The member goes with its partitions; the others are assigned again at the next epoch."""
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1
        group.topic_partitions = self._subscription_metadata(group)
        log.info("consumer group %s: member %s %s, epoch %d", group.group_id, member_id, why, group.group_epoch)

    def _subscription_metadata(self, group: ConsumerGroup, unchanged: str | None = None) -> dict[str, int]:
        """The subscribed topics' partition counts. Every member's subscription is resolved again, except on a
        heartbeat of member ``unchanged`` whose subscription did not change while the existing topics did not
        either: then only the members' partition counts are looked up (a steady heartbeat must not match every
        member's regex against every topic)."""
        existing: tuple[str, ...] | None = None
        if self._topic_names is not None and any(m.subscribed_topic_regex for m in group.members.values()):
            existing = tuple(sorted(t for t in self._topic_names() if not t.startswith("__")))
        if unchanged is None or existing != group.resolved_in or group.subscriptions.keys() != group.members.keys():
            group.subscriptions = {m.member_id: self._topics(m, existing) for m in group.members.values()}
            group.subscribed_topics = frozenset().union(*group.subscriptions.values())
            group.resolved_in = existing
        counts = {t: self._partitions_of(t) for t in sorted(group.subscribed_topics)}
        return {t: n for t, n in counts.items() if n is not None and n > 0}

    def _topics(self, member: ConsumerGroupMember, existing: tuple[str, ...] | None) -> frozenset[str]:
        """The member's topics: its names, and the existing topics its regex matches whole (the matches kept per
        regex while the existing topics stay the same: the members of a group mostly share one)."""
        names = frozenset(member.subscribed_topic_names)
        regex = member.subscribed_topic_regex
        if not regex or existing is None:
            return names
        if existing != self._matched_in or len(self._matched) >= _MAX_CACHED_REGEXES:
            self._matched, self._matched_in = {}, existing
        matched = self._matched.get(regex)
        if matched is None:
            pattern = compile_regex(regex)
            matched = self._matched[regex] = frozenset(t for t in existing if pattern.fullmatch(t))
        return names | matched

    def _assign(self, group: ConsumerGroup) -> None:
        """The target assignment at the group epoch, by the assignor most members ask for (Kafka's
        ``computePreferredServerAssignor``; none asked: the first configured)."""
        wanted = Counter(m.server_assignor for m in group.members.values() if m.server_assignor is not None)
        names = list(self._assignors)
        name = min(wanted, key=lambda n: (-wanted[n], names.index(n))) if wanted else names[0]
        specs = [MemberSpec(m.member_id, group.subscriptions.get(m.member_id, frozenset()), m.instance_id,
                            group.target.get(m.member_id, {})) for m in group.members.values()]
        group.target = self._assignors[name].assign(specs, group.topic_partitions)
        group.assignor_name = name
        group.assignment_epoch = group.group_epoch

    # ------------------------------------------------------------ timers, offsets, admin

    def expire(self, now_ms: int) -> None:
        """Remove the members whose session lapsed at ``now_ms``, and those still holding partitions they were
        asked to revoke past their rebalance timeout (Kafka fences both)."""
        int_arg("now_ms", now_ms)
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if now_ms >= member.session_deadline_ms:
                    self._remove(group, member.member_id, "timed out (session)")
                elif member.rebalance_deadline_ms is not None and now_ms >= member.rebalance_deadline_ms:
                    self._remove(group, member.member_id, "timed out revoking its partitions (rebalance)")

    def offset_commit_error(self, group_id: str, member_epoch: int, member_id: str) -> int | None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit`` (the member epoch stands for the generation): NONE,
        UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH; None when no consumer group has that id."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:  # an admin's or a simple consumer's commit
            return int(E.NONE)
        member = group.members.get(member_id)
        if member is None:
            return int(E.UNKNOWN_MEMBER_ID)
        return int(E.NONE if member_epoch == member.member_epoch else E.STALE_MEMBER_EPOCH)

    def describe(self, group_ids: Sequence[str]) -> tuple[DescribedConsumerGroup, ...]:
        described = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                described.append(DescribedConsumerGroup(group_id, E.GROUP_ID_NOT_FOUND,
                                                        f"Group {group_id} not found."))
                continue
            members = tuple(DescribedConsumerMember(
                m.member_id, m.member_epoch, m.instance_id, m.rack_id, m.client_id, m.client_host,
                tuple(sorted(m.subscribed_topic_names)), m.subscribed_topic_regex, _flat(m.assigned),
                _flat(group.target.get(m.member_id, {}))) for m in group.members.values())
            described.append(DescribedConsumerGroup(group_id, E.NONE, None, group.state, group.group_epoch,
                                                    group.assignment_epoch,
                                                    group.assignor_name or next(iter(self._assignors)), members))
        return tuple(described)

    def listed(self) -> tuple[ListedGroup, ...]:
        return tuple(ListedGroup(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state, CONSUMER) for g in self.groups.values())

    def delete(self, group_id: str) -> int:
        """DeleteGroups of one group: NONE, NON_EMPTY_GROUP (it has members) or GROUP_ID_NOT_FOUND."""
        group = self.groups.get(group_id)
        if group is None:
            return int(E.GROUP_ID_NOT_FOUND)
        if group.members:
            return int(E.NON_EMPTY_GROUP)
        del self.groups[group_id]
        return int(E.NONE)

    def unload(self, keep: Callable[[str], bool]) -> None:
        """Forget the groups ``keep`` refuses (their ``__consumer_offsets`` partition moved away)."""
        for group_id in [g for g in self.groups if not keep(g)]:
            del self.groups[group_id]


# ---------------------------------------------------------------- members


def _member(group: ConsumerGroup, request: ConsumerGroupHeartbeatRequest,
            ) -> tuple[ConsumerGroupMember, bool] | ConsumerGroupHeartbeatResponse:
    """Kafka's ``getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember``: the member a heartbeat is from and
    whether it is new to the group, or the error refusing it. A static member (instance id) rejoining after a
    temporary leave (epoch -2) replaces its instance's last member under its new id, with its assignment (no
    rebalance); while that member has not left, the instance id is UNRELEASED_INSTANCE_ID to a joining member and
    FENCED_INSTANCE_ID to any other."""
    rid, group_id = request.request_id, group.group_id
    member_id = request.member_id or str(uuid.uuid4())  # v0: an empty id asks the coordinator for one
    joining = request.member_epoch == JOIN_EPOCH
    instance = request.instance_id
    static = None if instance is None else group.static_member(instance)
    if instance is not None and static is None and not joining:
        return _error(E.UNKNOWN_MEMBER_ID, rid, f"Instance id {instance} is unknown.")
    if static is not None and static.member_id != member_id:
        if not joining:
            return _error(E.FENCED_INSTANCE_ID, rid, _fenced_instance(request, static))
        if static.member_epoch != STATIC_LEAVE_EPOCH:
            return _error(E.UNRELEASED_INSTANCE_ID, rid,
                          f"Static member {member_id} with instance id {instance} cannot join the group because the "
                          f"instance id is owned by {static.member_id} member.")
        del group.members[static.member_id]
        target = group.target.pop(static.member_id, None)
        if target is not None:
            group.target[member_id] = target
        replacing = dataclasses.replace(static, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        log.info("consumer group %s: static member %s (instance %s) replaces %s", group_id, member_id, instance,
                 static.member_id)
        return replacing, False
    member = group.members.get(member_id)
    if member is None:
        if not joining:
            return _error(E.UNKNOWN_MEMBER_ID, rid, f"Member {member_id} is not a member of group {group_id}.")
        return ConsumerGroupMember(member_id), True
    if not joining:  # a known member rejoining with epoch 0 is taken back as it is
        fenced = _fenced(member, request.member_epoch, request.owned_partitions)
        if fenced is not None:
            return _error(E.FENCED_MEMBER_EPOCH, rid, fenced)
    return member, False


def _unknown_group(request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    """A member's heartbeat for a group this coordinator does not have. Kafka answers GROUP_ID_NOT_FOUND, which
    librdkafka takes as fatal; Kafka's members are durable, so only a bad client meets it there. Here membership
    is in memory and a restarted broker has forgotten the group, so the member is told it is unknown
    (UNKNOWN_MEMBER_ID) and rejoins with epoch 0."""
    return _error(E.UNKNOWN_MEMBER_ID, request.request_id,
                  f"Member {request.member_id} is not a member of group {request.group_id}: the coordinator has no "
                  "such consumer group (its membership is kept in memory).")


def _fenced_instance(request: ConsumerGroupHeartbeatRequest, static: ConsumerGroupMember) -> str:
    return (f"Static member {request.member_id} with instance id {request.instance_id} was fenced by member "
            f"{static.member_id}.")


# ---------------------------------------------------------------- reconciliation (CurrentAssignmentBuilder)


def _reconcile(group: ConsumerGroup, member: ConsumerGroupMember, owned: tuple[TopicPartition, ...] | None,
               now: int) -> None:
    """Move the member one step towards its target assignment."""
    epoch = group.assignment_epoch
    if member.state == STABLE and member.member_epoch == epoch:
        return
    before = (member.state, member.member_epoch)
    if member.state == UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.revoking):
            return  # still giving them up
        _next_assignment(group, member, member.member_epoch + 1, owned)
    else:
        _next_assignment(group, member, member.member_epoch, owned)
    if member.state == UNREVOKED_PARTITIONS:
        if (member.state, member.member_epoch) != before:
            member.rebalance_deadline_ms = now + member.rebalance_timeout_ms
    else:
        member.rebalance_deadline_ms = None


def _next_assignment(group: ConsumerGroup, member: ConsumerGroupMember, revoking_epoch: int,
                     owned: tuple[TopicPartition, ...] | None) -> None:
    target = group.target.get(member.member_id, {})
    held = group.held(member.member_id)
    kept: Partitions = {}
    revoking: Partitions = {}
    new: dict[str, set[int]] = {}
    unreleased = False
    for topic in set(target) | set(member.assigned):
        wanted = target.get(topic, frozenset())
        current = member.assigned.get(topic, frozenset())
        if current & wanted:
            kept[topic] = current & wanted
        if current - wanted:
            revoking[topic] = current - wanted
        for p in wanted - current:
            if (topic, p) in held:
                unreleased = True  # another member still owns it
            else:
                new.setdefault(topic, set()).add(p)
    if revoking and _owns_any(owned, revoking):
        _set_epoch(member, revoking_epoch)
        member.state, member.assigned, member.revoking = UNREVOKED_PARTITIONS, kept, revoking
        return
    for topic, parts in new.items():
        kept[topic] = kept.get(topic, frozenset()) | parts
    _set_epoch(member, group.assignment_epoch)
    member.state = UNRELEASED_PARTITIONS if unreleased else STABLE
    member.assigned, member.revoking = kept, {}


def _set_epoch(member: ConsumerGroupMember, epoch: int) -> None:
    if epoch != member.member_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = epoch


def _owns_any(owned: tuple[TopicPartition, ...] | None, partitions: Mapping[str, frozenset[int]]) -> bool:
    """Whether the member reports owning one of ``partitions`` (not reporting counts as owning them)."""
    if owned is None:
        return True
    return any(p in partitions.get(topic, ()) for topic, p in owned)


def _fenced(member: ConsumerGroupMember, epoch: int, owned: tuple[TopicPartition, ...] | None) -> str | None:
    """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``: the message of FENCED_MEMBER_EPOCH, or None."""
    if epoch > member.member_epoch:
        which = "greater"
    elif epoch < member.member_epoch and not (
            epoch == member.previous_member_epoch and owned is not None
            and all(p in member.assigned.get(topic, ()) for topic, p in owned)):
        which = "smaller"
    else:
        return None
    return (f"The consumer group member has a {which} member epoch ({epoch}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")


# ---------------------------------------------------------------- requests


def compile_regex(regex: str) -> Any:
    """``regex`` compiled with RE2 (Kafka's RE2/J): matching takes time linear in the name, whatever the pattern.
    ValueError, one line naming why, for one RE2 refuses."""
    try:
        return re2.compile(regex, options=_RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        raise ValueError(why.decode(errors="replace") if isinstance(why, bytes) else str(why)) from None
    except UnicodeError as exc:  # a lone surrogate: not text RE2 can read
        raise ValueError(str(exc)) from None


def _update(member: ConsumerGroupMember, request: ConsumerGroupHeartbeatRequest) -> None:
    """The fields a heartbeat sets (None / -1: unchanged)."""
    if request.instance_id is not None:
        member.instance_id = request.instance_id
    if request.rack_id is not None:
        member.rack_id = request.rack_id
    if request.rebalance_timeout_ms != UNCHANGED_TIMEOUT:
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
    if request.server_assignor is not None:
        member.server_assignor = request.server_assignor
    if request.subscribed_topic_names is not None:
        member.subscribed_topic_names = tuple(dict.fromkeys(request.subscribed_topic_names))
    if request.subscribed_topic_regex is not None:  # "": none (librdkafka sends it with the names)
        member.subscribed_topic_regex = request.subscribed_topic_regex or None
    if request.member_epoch == JOIN_EPOCH:  # kept from the (re)joining heartbeat: an in-process call has none
        member.client_id, member.client_host = request.client_id, request.client_host


def _invalid(request: ConsumerGroupHeartbeatRequest) -> str | None:
    """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``: the message of INVALID_REQUEST, or None."""
    if request.group_id == "":
        return "GroupId can't be empty."
    if request.instance_id == "":
        return "InstanceId can't be empty."
    if request.rack_id == "":
        return "RackId can't be empty."
    if request.member_id == "" and (request.member_id_from_client or request.member_epoch != JOIN_EPOCH):
        return "MemberId can't be empty."
    if request.rebalance_timeout_ms < UNCHANGED_TIMEOUT:
        return f"RebalanceTimeoutMs {request.rebalance_timeout_ms} is invalid."
    if request.member_epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms == UNCHANGED_TIMEOUT:
            return "RebalanceTimeoutMs must be provided in first request."
        if request.owned_partitions is None or request.owned_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
        return "InstanceId can't be null."
    elif request.member_epoch < STATIC_LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    return None


def check_heartbeat(request: object) -> None:
    """TypeError naming the first field of the wrong type."""
    if type(request) is not ConsumerGroupHeartbeatRequest:
        raise TypeError(f"expected a ConsumerGroupHeartbeatRequest, got {type(request).__name__}")
    for name in ("group_id", "member_id", "client_id", "client_host"):
        str_arg(name, getattr(request, name))
    for name in ("instance_id", "rack_id", "subscribed_topic_regex", "server_assignor"):
        str_or_none_arg(name, getattr(request, name))
    for name in ("member_epoch", "rebalance_timeout_ms"):
        int_arg(name, getattr(request, name))
    names = request.subscribed_topic_names
    if names is not None and (not isinstance(names, tuple | list) or not all(type(t) is str for t in names)):
        raise TypeError(f"subscribed_topic_names must be a sequence of str or None, got {names!r:.80}")
    owned = request.owned_partitions
    if owned is not None and (not isinstance(owned, tuple | list) or not all(
            isinstance(tp, tuple) and len(tp) == 2 and type(tp[0]) is str and type(tp[1]) is int for tp in owned)):
        raise TypeError(f"owned_partitions must be (topic, partition) pairs or None, got {owned!r:.80}")


def _error(code: int, request_id: int, message: str) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(code, request_id=request_id, error_message=message)


def _flat(assignment: Mapping[str, frozenset[int]]) -> tuple[TopicPartition, ...]:
    return tuple((topic, p) for topic in sorted(assignment) for p in sorted(assignment[topic]))
