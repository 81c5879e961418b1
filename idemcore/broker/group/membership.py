"""Kafka's classic group membership (the consumer-group protocol of JoinGroup, SyncGroup, Heartbeat and
LeaveGroup): members chosen by the coordinator, the assignment computed by a client leader.

The rules are Kafka's (``ClassicGroup``, ``ClassicGroupMember`` and the classic-group parts of
``GroupMetadataManager``), written here as one state machine per group:

- States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and back to PreparingRebalance on any
  change). A group is made by the first JoinGroup without a member id.
- JoinGroup without a member id (v4+): the coordinator makes one (``<client id>-<uuid>``), keeps it as pending for
  a session timeout and answers MEMBER_ID_REQUIRED with it; the client joins again with it.
- A join parks the request (a :class:`Pending`) until the join phase completes: when every member (and every
  pending member) has joined, else when the rebalance timeout (the members' largest) runs out; members that did
  not rejoin are then dropped. The first rebalance of an Empty group waits ``initial_rebalance_delay_ms`` more,
  extended while new members keep arriving (Kafka's ``group.initial.rebalance.delay.ms``), up to the rebalance
  timeout.
- Completing the join phase starts the next generation: the protocol every member supports with the most
  first-choice votes, the leader (the first member, or the first that rejoined) gets every member's metadata.
- SyncGroup from the leader sets every member's assignment (empty for a member it left out) and the group is
  Stable; followers' SyncGroups wait for it. Members that do not sync within the rebalance timeout are dropped
  and the group rebalances.
- Heartbeat: ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID for a stale member, REBALANCE_IN_PROGRESS while preparing a
  rebalance; each keeps the member alive for its session timeout. A member that misses it is removed
  (a member awaiting a join or sync answer counts as alive).
- LeaveGroup removes members (by member id, or a static member by its instance id) and starts a rebalance.
- Static membership (KIP-345, JoinGroup v5+ with a ``group_instance_id``): a new static member joins at once
  (no MEMBER_ID_REQUIRED), its member id ``<instance id>-<uuid>``. A known instance id joining without its
  member id (a restarted client) takes a new member id in place of the old one, whose parked join or sync is
  answered FENCED_INSTANCE_ID; in Stable with the selected protocol unchanged the group is stored and the member
  gets this generation back without a rebalance (named a follower, it syncs for its old assignment), otherwise
  the group rebalances (Kafka's ``updateStaticMemberThenRebalanceOrCompleteJoin``). A request naming an
  instance id with another member id is FENCED_INSTANCE_ID (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  OffsetCommit); an unknown instance id UNKNOWN_MEMBER_ID. A static member's session lapses like any other's.
- Durability: the group is stored as Kafka's GroupMetadata record (:mod:`.group_metadata_log`, through the
  ``store`` the coordinator gives) where Kafka's classic group stores it: after the leader's SyncGroup set the
  assignment, before any member is answered (a failed append answers the members the coordinator error, their
  assignments are cleared and the group rebalances: Kafka's ``resetAndPropagateAssignmentWithError``), when the
  group becomes Empty (a failure only logged, as Kafka), and on a static member's replacement (a failure
  restores the old member id and answers the join with the error). :meth:`ClassicGroups.restore` brings a
  group back from its record: Stable with every member's session restarted, or Empty.

Deliberately left out: the group size limit (``group.max.size``); consumer-protocol (KIP-848) groups; JoinGroup
v9's ``skip_assignment`` (a returning static leader is answered as before v9: as a follower). Where Kafka would
leave a parked request unanswered forever (a member's second JoinGroup or SyncGroup while the first waits; the
SyncGroup of a member removed while it waits), the first is answered REBALANCE_IN_PROGRESS (the removed member's
UNKNOWN_MEMBER_ID), so that no transport holds a connection on an answer that never comes. A new member id is
``<client id>-<uuid>`` as Kafka's, with the client id of the request header (the wire server puts it into the
JoinGroup: :func:`idemcore.net.wire.membership.with_client`).

Timers are deadlines checked by :meth:`ClassicGroups.expire`; requests read the coordinator's clock.
Not thread-safe: the caller serialises calls, as ``Broker.handle`` does.
"""

from __future__ import annotations

import enum
import itertools
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from idemcore.broker.group.group_metadata_log import GroupMetadataValue, MemberMetadata
from idemcore.checks import int_setting
from idemcore.net.consumer_protocol import CONSUMER_PROTOCOL_TYPE, ConsumerProtocolError, decode_subscription
from idemcore.net.membership import (
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from idemcore.net.messages import Pending
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

E = ErrorCode

#: Kafka's defaults (GroupCoordinatorConfig).
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 3000
DEFAULT_NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

#: Writes a group's GroupMetadata record (None: its tombstone) durably: the client-facing error code (NONE once
#: durable; the coordinator error Kafka maps a failed append to otherwise).
GroupStore = Callable[[str, GroupMetadataValue | None], int]

__all__ = [
    "DEFAULT_INITIAL_REBALANCE_DELAY_MS",
    "DEFAULT_NEW_MEMBER_JOIN_TIMEOUT_MS",
    "ClassicGroup",
    "ClassicGroups",
    "GroupState",
    "GroupStore",
    "Member",
]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


#: The states each state may be entered from (Kafka's ClassicGroupState.validPreviousStates).
_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
}

_timer_seq = itertools.count()
#: How many times one :meth:`ClassicGroups.expire` looks again for timers the ones it ran made due.
_MAX_ROUNDS = 16


@dataclass(eq=False, slots=True)
class _Timer:
    """One scheduled check; replacing it on its owner cancels it (Kafka's timer keys)."""

    deadline: int
    seq: int = field(default_factory=lambda: next(_timer_seq))
    #: Join timers: whether this is the initial (delayed) rebalance, its delay and the time left after it.
    initial: bool = False
    delay: int = 0
    remaining: int = 0
    #: Sync timers: the generation they watch.
    generation: int = -1


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    #: The parked JoinGroup / SyncGroup and their request ids.
    join: Pending | None = None
    join_request_id: int = 0
    sync: Pending | None = None
    sync_request_id: int = 0
    #: A member that has not yet had a join answer may be expired even while it awaits one.
    is_new: bool = False
    heartbeat: _Timer | None = None
    #: Its static instance id (KIP-345), None for a dynamic member.
    group_instance_id: str | None = None
    #: Where its JoinGroup came from (DescribeGroups shows it, Kafka's ``clientHost``).
    client_host: str = ""

    @property
    def protocol_names(self) -> list[str]:
        return list(dict.fromkeys(name for name, _ in self.protocols))

    def metadata(self, protocol: str | None) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")

    def vote(self, candidates: set[str]) -> str:
        """The member's first choice among ``candidates``."""
        return next(name for name in self.protocol_names if name in candidates)

    @property
    def has_satisfied_heartbeat(self) -> bool:
        return not self.is_new and (self.join is not None or self.sync is not None)


class ClassicGroup:
    """One classic group's state; :class:`ClassicGroups` drives it."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}  # in joining order: the next leader is the first left
        #: Member ids handed out with MEMBER_ID_REQUIRED, not yet joined with, and when they lapse.
        self.pending_members: dict[str, _Timer] = {}
        self.pending_sync: set[str] = set()
        self.new_member_added = False
        self.join_timer: _Timer | None = None
        self.sync_timer: _Timer | None = None
        #: Static members: member id by instance id (Kafka's ``staticMembers``).
        self.static_members: dict[str, str] = {}
        #: When the group entered its current state (Kafka's ``currentStateTimestamp``); None before any.
        self.state_timestamp: int | None = None
        #: The topics the members subscribe to, decoded at each generation (Kafka's ``subscribedTopics``);
        #: None when unknown (not the consumer protocol, no protocol yet, or undecodable metadata).
        self.subscribed_topics: frozenset[str] | None = None

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state.value}, generation {self.generation_id}, "
                f"members {list(self.members)})")

    def transition(self, state: GroupState, now: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id!r}: no transition {self.state.value} -> {state.value}")
        log.info("group %r: %s -> %s (generation %d)", self.group_id, self.state.value, state.value,
                 self.generation_id)
        self.previous_state, self.state = self.state, state
        self.state_timestamp = now

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join is not None for m in self.members.values())

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member of ``protocol_type`` with ``names`` may join: any type and protocols into an Empty
        group, else the group's type and at least one protocol every member supports."""
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and bool(names)
        return protocol_type == self.protocol_type and any(name in self._candidates() for name in names)

    def _candidates(self) -> set[str]:
        counts: dict[str, int] = {}
        for member in self.members.values():
            for name in member.protocol_names:
                counts[name] = counts.get(name, 0) + 1
        return {name for name, count in counts.items() if count == len(self.members)}

    def select_protocol(self) -> str:
        """The protocol with the most first-choice votes among those all members support (ties: first voted)."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader is None:
            self.leader = member.member_id
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        if member is not None and member.group_instance_id is not None \
                and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Kafka's ``replaceStaticMember``: the member of ``instance_id`` takes ``new_id`` (same place, same
        assignment, leader if it led); a join or sync the old id still awaits is answered FENCED_INSTANCE_ID."""
        old = self.members[old_id]
        if old.join is not None:
            _complete(old.join, JoinGroupResponse(int(E.FENCED_INSTANCE_ID), member_id=old_id,
                                                  request_id=old.join_request_id))
            old.join = None
        if old.sync is not None:
            _complete(old.sync, SyncGroupResponse(int(E.FENCED_INSTANCE_ID), request_id=old.sync_request_id))
            old.sync = None
        new = Member(new_id, old.client_id, old.session_timeout_ms, old.rebalance_timeout_ms, old.protocol_type,
                     old.protocols, old.assignment, group_instance_id=instance_id, client_host=old.client_host)
        self.members = {new_id if k == old_id else k: new if k == old_id else m for k, m in self.members.items()}
        if self.leader == old_id:
            self.leader = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static_members[instance_id] = new_id
        return new

    def member_error(self, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's ``validateMember``: with an instance id, UNKNOWN_MEMBER_ID if no member has it and
        FENCED_INSTANCE_ID if another member id has it; without, UNKNOWN_MEMBER_ID for a member id the group does
        not have."""
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is None:
                return int(E.UNKNOWN_MEMBER_ID)
            return int(E.NONE) if known == member_id else int(E.FENCED_INSTANCE_ID)
        if member_id not in self.members:
            return int(E.UNKNOWN_MEMBER_ID)
        return int(E.NONE)

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Kafka's ``ClassicGroup.computeSubscribedTopics``: the union of the members' subscriptions under the
        selected protocol, for a ``consumer`` group; None when that is not known."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(decode_subscription(member.metadata(self.protocol_name)).topics)
        except ConsumerProtocolError as exc:
            log.warning("group %r: cannot read the subscriptions of protocol %r: %s", self.group_id,
                        self.protocol_name, exc)
            return None
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Kafka's ``ClassicGroup.isSubscribedToTopic``: when unknown, a consumer group counts as subscribed."""
        if self.subscribed_topics is None:
            return self.protocol_type == CONSUMER_PROTOCOL_TYPE
        return topic in self.subscribed_topics

    def join_members(self) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())

    def stored(self) -> GroupMetadataValue:
        """The group as its GroupMetadata record stores it (Kafka's ``newGroupMetadataRecord``)."""
        return GroupMetadataValue(
            self.protocol_type or "", self.generation_id, self.protocol_name, self.leader,
            -1 if self.state_timestamp is None else self.state_timestamp,
            tuple(MemberMetadata(m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                                 m.metadata(self.protocol_name), m.assignment, m.rebalance_timeout_ms,
                                 m.group_instance_id) for m in self.members.values()))


class ClassicGroups:
    """Every classic group of one coordinator. ``clock`` gives the time of requests in ms; :meth:`expire` runs
    the timers that are due."""

    def __init__(self, clock: Callable[[], int], *,
                 initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS,
                 new_member_join_timeout_ms: int = DEFAULT_NEW_MEMBER_JOIN_TIMEOUT_MS,
                 store: GroupStore | None = None) -> None:
        int_setting("initial_rebalance_delay_ms", initial_rebalance_delay_ms, 0)
        int_setting("new_member_join_timeout_ms", new_member_join_timeout_ms, 0)
        self._clock = clock
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.new_member_join_timeout_ms = new_member_join_timeout_ms
        self.groups: dict[str, ClassicGroup] = {}
        self._expiring_at: int | None = None
        #: Writes a group's record (None: its tombstone) durably; answers the client-facing error code.
        self._store: GroupStore = store or (lambda group_id, value: int(E.NONE))

    def _now(self) -> int:
        """The time of the request being handled, or of the timers being run."""
        return self._clock() if self._expiring_at is None else self._expiring_at

    # ------------------------------------------------------------ JoinGroup

    def join(self, request: JoinGroupRequest) -> JoinGroupResponse | Pending:
        """A checked JoinGroup (group id, coordinator and session timeout already answered)."""
        rid = request.request_id
        instance = request.group_instance_id
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id != UNKNOWN_MEMBER_ID:  # a member of a group that is gone
                return JoinGroupResponse(int(E.UNKNOWN_MEMBER_ID), member_id=request.member_id, request_id=rid)
            group = self.groups[request.group_id] = ClassicGroup(request.group_id)
        names = list(dict.fromkeys(name for name, _ in request.protocols))
        if request.member_id == UNKNOWN_MEMBER_ID:
            if not group.supports(request.protocol_type, names):
                return JoinGroupResponse(INCONSISTENT_GROUP_PROTOCOL, request_id=rid)
            # Kafka's generateMemberId: a static member's id starts with its instance id.
            member_id = f"{request.client_id if instance is None else instance}-{uuid.uuid4()}"
            if instance is not None:
                existing = group.static_members.get(instance)
                if existing is not None:
                    return self._replace_static_member(group, existing, member_id, request)
                log.info("group %r: static member %r joins as %s", group.group_id, instance, member_id)
                return self._add_member(group, member_id, request)
            if request.member_id_required:
                group.pending_members[member_id] = _Timer(self._now() + request.session_timeout_ms)
                log.info("group %r: new member id %s, asked to join with it", group.group_id, member_id)
                return JoinGroupResponse(MEMBER_ID_REQUIRED, member_id=member_id, request_id=rid)
            return self._add_member(group, member_id, request)
        member_id = request.member_id
        if not group.supports(request.protocol_type, names):
            return JoinGroupResponse(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id, request_id=rid)
        if member_id in group.pending_members and instance is None:  # pending members are never static
            return self._add_member(group, member_id, request)
        error = group.member_error(member_id, instance)
        if error != E.NONE:
            return JoinGroupResponse(error, member_id=member_id, request_id=rid)
        member = group.members[member_id]
        same = member.protocols == request.protocols
        if group.state is GroupState.PREPARING_REBALANCE \
                or (group.state is GroupState.COMPLETING_REBALANCE and not same) \
                or (group.state is GroupState.STABLE and (group.leader == member_id or not same)):
            # The leader's rejoin in Stable forces a rebalance: its assignment may depend on more than metadata.
            return self._update_member(group, member, request)
        if group.state is GroupState.EMPTY:  # no member of an Empty group is known: rejoin from scratch
            return JoinGroupResponse(int(E.UNKNOWN_MEMBER_ID), member_id=member_id, request_id=rid)
        # The same metadata (a lost answer): this generation's answer again.
        return self._join_answer(group, member, rid)

    def _join_answer(self, group: ClassicGroup, member: Member, request_id: int) -> JoinGroupResponse:
        return JoinGroupResponse(
            int(E.NONE), group.generation_id, group.protocol_type, group.protocol_name, group.leader or "",
            member.member_id, group.join_members() if group.leader == member.member_id else (), request_id)

    def _add_member(self, group: ClassicGroup, member_id: str, request: JoinGroupRequest) -> Pending:
        member = Member(member_id, request.client_id, request.session_timeout_ms, request.rebalance_timeout_ms,
                        request.protocol_type, request.protocols, is_new=True,
                        group_instance_id=request.group_instance_id, client_host=request.client_host)
        if group.state is GroupState.PREPARING_REBALANCE and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True  # lets the initial rebalance wait longer
        pending = Pending()
        member.join, member.join_request_id = pending, request.request_id
        group.add(member)
        # A new member cannot heartbeat while its join waits; it lapses if the join is never answered.
        member.heartbeat = _Timer(self._now() + self.new_member_join_timeout_ms)
        log.info("group %r: member %s joins in %s", group.group_id, member_id, group.state.value)
        self._rebalance_or_complete_join(group)
        return pending

    def _replace_static_member(self, group: ClassicGroup, old_id: str, new_id: str,
                               request: JoinGroupRequest) -> JoinGroupResponse | Pending:
        """Kafka's ``updateStaticMemberThenRebalanceOrCompleteJoin``: a known instance id joins without its
        member id (a restarted static member). Stable with the selected protocol unchanged: the group is stored
        with the new id and the member gets this generation back, without a rebalance (as a follower: the leader
        named is the one before, so it syncs for its assignment instead of computing one); otherwise the group
        rebalances."""
        instance = request.group_instance_id
        assert instance is not None
        log.info("group %r: static member %r rejoins in %s, member id %s replaces %s", group.group_id, instance,
                 group.state.value, new_id, old_id)
        leader_before = group.leader
        member = group.replace_static_member(instance, old_id, new_id)
        member.heartbeat = _Timer(self._now() + member.session_timeout_ms)
        old_settings = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            error = self._store(group.group_id, group.stored())
            if error != E.NONE:  # not durable: the old member id stands
                log.warning("group %r: storing static member %r as %s failed (%d), %s stays", group.group_id,
                            instance, new_id, error, old_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = old_settings
                restored = group.replace_static_member(instance, new_id, old_id)
                restored.heartbeat = _Timer(self._now() + restored.session_timeout_ms)
                return JoinGroupResponse(error, group.generation_id, group.protocol_type, group.protocol_name,
                                         leader_before or "", UNKNOWN_MEMBER_ID, request_id=request.request_id)
            group.subscribed_topics = group.compute_subscribed_topics()
            return JoinGroupResponse(int(E.NONE), group.generation_id, group.protocol_type, group.protocol_name,
                                     leader_before or "", new_id, request_id=request.request_id)
        pending = Pending()
        member.join, member.join_request_id = pending, request.request_id
        if group.state is GroupState.STABLE:  # the selected protocol would change
            self._prepare_rebalance(group)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old id: rebalance so that the new one gets an assignment.
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)
        return pending

    def _update_member(self, group: ClassicGroup, member: Member, request: JoinGroupRequest) -> Pending:
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        pending = Pending()
        if member.join is not None:
            _complete(member.join, JoinGroupResponse(REBALANCE_IN_PROGRESS, member_id=member.member_id,
                                                     request_id=member.join_request_id))
        member.join, member.join_request_id = pending, request.request_id
        self._rebalance_or_complete_join(group)
        return pending

    def _rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]:
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:  # members awaiting their assignment rejoin instead
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        group.sync_timer = None
        initial = group.state is GroupState.EMPTY
        if initial:
            delay = self.initial_rebalance_delay_ms
            group.join_timer = _Timer(self._now() + delay, initial=True, delay=delay,
                                      remaining=max(group.rebalance_timeout_ms - delay, 0))
        group.transition(GroupState.PREPARING_REBALANCE, self._now())
        if not initial:
            if group.all_members_joined:
                self._complete_join(group)
            else:
                group.join_timer = _Timer(self._now() + group.rebalance_timeout_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        # The initial rebalance completes only by its timer, so that members starting together join one generation.
        if group.state is GroupState.PREPARING_REBALANCE and group.previous_state is not GroupState.EMPTY \
                and group.all_members_joined:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        group.join_timer = None
        missing = [m for m in group.members.values() if m.join is None]
        for member in missing:
            self._remove(group, member.member_id)
        if missing:
            log.info("group %r: removed members that did not rejoin: %s", group.group_id,
                     [m.member_id for m in missing])
        if group.members and not self._elect_joined_leader(group):
            # Nobody rejoined (cannot happen once the missing are removed, kept for Kafka's rule): wait again.
            group.join_timer = _Timer(self._now() + group.rebalance_timeout_ms)
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
            group.transition(GroupState.EMPTY, self._now())
            error = self._store(group.group_id, group.stored())
            if error != E.NONE:  # as Kafka: only logged, the group is Empty either way
                log.warning("group %r: storing it Empty failed (%d)", group.group_id, error)
            return
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        group.transition(GroupState.COMPLETING_REBALANCE, self._now())
        now = self._now()
        for member in group.members.values():
            assert member.join is not None
            pending, member.join = member.join, None
            _complete(pending, self._join_answer(group, member, member.join_request_id))
            member.heartbeat = _Timer(now + member.session_timeout_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_timer = _Timer(now + group.rebalance_timeout_ms, generation=group.generation_id)

    def _elect_joined_leader(self, group: ClassicGroup) -> bool:
        if group.leader is None:
            return False
        if group.members[group.leader].join is not None:
            return True
        joined = next((m.member_id for m in group.members.values() if m.join is not None), None)
        if joined is None:
            return False
        log.info("group %r: leader %s did not rejoin, %s leads", group.group_id, group.leader, joined)
        group.leader = joined
        return True

    # ------------------------------------------------------------ SyncGroup

    def sync(self, request: SyncGroupRequest) -> SyncGroupResponse | Pending:
        rid = request.request_id
        group = self.groups.get(request.group_id)
        if group is None or group.state is GroupState.EMPTY:
            return SyncGroupResponse(int(E.UNKNOWN_MEMBER_ID), request_id=rid)
        error = group.member_error(request.member_id, request.group_instance_id)
        if error == E.NONE and request.generation_id != group.generation_id:
            error = int(E.ILLEGAL_GENERATION)
        if error == E.NONE and (_inconsistent(request.protocol_type, group.protocol_type)
                                or _inconsistent(request.protocol_name, group.protocol_name)):
            error = INCONSISTENT_GROUP_PROTOCOL
        if error == E.NONE and group.state is GroupState.PREPARING_REBALANCE:
            error = REBALANCE_IN_PROGRESS
        if error != E.NONE:
            return SyncGroupResponse(error, request_id=rid)
        member = group.members[request.member_id]
        self._synced(group, member.member_id)
        if group.state is GroupState.STABLE:
            return SyncGroupResponse(int(E.NONE), member.assignment, group.protocol_type, group.protocol_name, rid)
        pending = Pending()  # CompletingRebalance: wait for the leader's assignment
        if member.sync is not None:
            _complete(member.sync, SyncGroupResponse(REBALANCE_IN_PROGRESS, request_id=member.sync_request_id))
        member.sync, member.sync_request_id = pending, rid
        if group.leader == member.member_id:
            assignment = dict(request.assignments)
            missing = [m for m in group.members if m not in assignment]
            if missing:
                log.warning("group %r generation %d: empty assignments for %s", group.group_id,
                            group.generation_id, missing)
            for m in group.members.values():
                m.assignment = assignment.get(m.member_id, b"")
            # Kafka's storeGroup: the assignment is durable before any member gets it.
            error = self._store(group.group_id, group.stored())
            if error != E.NONE:
                log.warning("group %r generation %d: storing the assignment failed (%d)", group.group_id,
                            group.generation_id, error)
                for m in group.members.values():
                    m.assignment = b""
                # Kafka's resetAndPropagateAssignmentWithError, then a new rebalance.
                self._propagate_assignment(group, error)
                self._rebalance_or_complete_join(group)
                return pending
            self._propagate_assignment(group, int(E.NONE))
            group.transition(GroupState.STABLE, self._now())
        return pending

    def _synced(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_timer = None

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        ok = error == E.NONE
        now = self._now()
        for member in group.members.values():
            if member.sync is None:
                continue
            pending, member.sync = member.sync, None
            _complete(pending, SyncGroupResponse(error, member.assignment, group.protocol_type if ok else None,
                                                 group.protocol_name if ok else None, member.sync_request_id))
            member.heartbeat = _Timer(now + member.session_timeout_ms)

    # ------------------------------------------------------------ Heartbeat, LeaveGroup

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        rid = request.request_id
        group = self.groups.get(request.group_id)
        if group is None:
            return HeartbeatResponse(int(E.UNKNOWN_MEMBER_ID), rid)
        error = group.member_error(request.member_id, request.group_instance_id)
        if error == E.NONE and request.generation_id != group.generation_id:
            error = int(E.ILLEGAL_GENERATION)
        if error != E.NONE:
            return HeartbeatResponse(error, rid)
        if group.state is GroupState.EMPTY:
            return HeartbeatResponse(int(E.UNKNOWN_MEMBER_ID), rid)
        member = group.members[request.member_id]
        member.heartbeat = _Timer(self._now() + member.session_timeout_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return HeartbeatResponse(REBALANCE_IN_PROGRESS, rid)
        return HeartbeatResponse(int(E.NONE), rid)

    def leave(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        group = self.groups.get(request.group_id)
        if group is None:
            return LeaveGroupResponse(int(E.NONE), tuple(
                LeftMember(m.member_id, m.group_instance_id, int(E.UNKNOWN_MEMBER_ID)) for m in request.members),
                request.request_id)
        answers: list[LeftMember] = []
        for leaving in request.members:
            member_id = leaving.member_id
            if member_id == UNKNOWN_MEMBER_ID:  # KIP-345: a static member leaves by its instance id
                known = None if leaving.group_instance_id is None \
                    else group.static_members.get(leaving.group_instance_id)
                error = int(E.UNKNOWN_MEMBER_ID) if known is None else int(E.NONE)
                member_id = known or member_id
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                answers.append(LeftMember(member_id, leaving.group_instance_id, int(E.NONE)))
                continue
            else:
                error = group.member_error(member_id, leaving.group_instance_id)
            if error == E.NONE:
                log.info("group %r: member %s (instance %r) leaves (reason: %s)", group.group_id, member_id,
                         leaving.group_instance_id, leaving.reason)
                self._remove(group, member_id)
            answers.append(LeftMember(member_id, leaving.group_instance_id, error))
        if any(a.error_code == E.NONE for a in answers):
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._rebalance_or_complete_join(group)
            elif group.state is GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join_phase(group)
        return LeaveGroupResponse(int(E.NONE), tuple(answers), request.request_id)

    def _remove(self, group: ClassicGroup, member_id: str) -> None:
        """Remove a member; a join it still awaits is answered UNKNOWN_MEMBER_ID, so a live client rejoins."""
        member = group.remove(member_id)
        if member is None:
            return
        if member.join is not None:
            _complete(member.join, JoinGroupResponse(int(E.UNKNOWN_MEMBER_ID), request_id=member.join_request_id))
            member.join = None
        if member.sync is not None:
            _complete(member.sync, SyncGroupResponse(int(E.UNKNOWN_MEMBER_ID), request_id=member.sync_request_id))
            member.sync = None

    # ------------------------------------------------------------ offsets

    def offset_commit_error(self, group_id: str, generation_id: int, member_id: str,
                            transactional: bool, group_instance_id: str | None = None) -> int | None:
        """Kafka's ``ClassicGroup.validateOffsetCommit`` for a group with membership state; None for a group
        this has no state of (the offsets alone decide)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return int(E.NONE)  # a simple commit, or an admin's
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = group.member_error(member_id, group_instance_id)
            if error != E.NONE:
                return error
            if generation_id != group.generation_id:
                return int(E.ILLEGAL_GENERATION)
        elif not transactional and group.state is not GroupState.EMPTY:
            return int(E.UNKNOWN_MEMBER_ID)  # an anonymous commit into a group with members
        if not transactional and group.state is GroupState.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS  # a member that has its generation but not yet its assignment
        return int(E.NONE)

    # ------------------------------------------------------------ time, unloading

    def expire(self, now_ms: int) -> None:
        """Run every timer due at ``now_ms``, earliest first: lapsed sessions and member ids, overdue joins and
        syncs, the initial rebalance's delay, and the timers these set that are due too."""
        self._expiring_at = now_ms
        try:
            for _ in range(_MAX_ROUNDS):  # bounded: a timeout of 0 must not loop forever
                due = sorted(self._due(now_ms), key=lambda item: (item[0].deadline, item[0].seq))
                if not due:
                    break
                self._run(due)
        finally:
            self._expiring_at = None

    def _run(self, due: list[tuple[_Timer, ClassicGroup, str, str]]) -> None:
        for timer, group, kind, member_id in due:
            if self.groups.get(group.group_id) is not group:
                continue
            if kind == "join" and group.join_timer is timer:
                group.join_timer = None
                self._join_timer_fired(group, timer)
            elif kind == "sync" and group.sync_timer is timer:
                group.sync_timer = None
                self._sync_expired(group, timer.generation)
            elif kind == "pending" and group.pending_members.get(member_id) is timer:
                log.info("group %r: member id %s was never joined with", group.group_id, member_id)
                del group.pending_members[member_id]
                if group.state is GroupState.PREPARING_REBALANCE and group.all_members_joined:
                    self._complete_join(group)
            elif kind == "session":
                member = group.members.get(member_id)
                if member is None or member.heartbeat is not timer:
                    continue
                member.heartbeat = None
                if member.has_satisfied_heartbeat:
                    continue
                log.info("group %r: member %s missed its session timeout of %d ms", group.group_id, member_id,
                         member.session_timeout_ms)
                self._remove(group, member_id)
                if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                    self._rebalance_or_complete_join(group)
                elif group.state is GroupState.PREPARING_REBALANCE and group.all_members_joined:
                    self._complete_join(group)

    def _due(self, now_ms: int) -> Iterator[tuple[_Timer, ClassicGroup, str, str]]:
        for group in self.groups.values():
            if group.join_timer is not None and group.join_timer.deadline <= now_ms:
                yield group.join_timer, group, "join", ""
            if group.sync_timer is not None and group.sync_timer.deadline <= now_ms:
                yield group.sync_timer, group, "sync", ""
            for member_id, timer in group.pending_members.items():
                if timer.deadline <= now_ms:
                    yield timer, group, "pending", member_id
            for member in group.members.values():
                if member.heartbeat is not None and member.heartbeat.deadline <= now_ms:
                    yield member.heartbeat, group, "session", member.member_id

    def _join_timer_fired(self, group: ClassicGroup, timer: _Timer) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if timer.initial and group.new_member_added and timer.remaining != 0:
            # New members arrived during the delay: wait once more, within the rebalance timeout.
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, timer.remaining)
            group.join_timer = _Timer(timer.deadline + delay, initial=True, delay=delay,
                                      remaining=max(timer.remaining - timer.delay, 0))
            return
        self._complete_join(group)

    def _sync_expired(self, group: ClassicGroup, generation: int) -> None:
        if generation != group.generation_id or group.state not in (GroupState.COMPLETING_REBALANCE,
                                                                   GroupState.STABLE):
            return
        if group.pending_sync:
            late = sorted(group.pending_sync)
            for member_id in late:
                self._remove(group, member_id)
            log.info("group %r: removed members that did not sync: %s", group.group_id, late)
            self._prepare_rebalance(group)

    def restore(self, group_id: str, value: GroupMetadataValue, now: int) -> None:
        """Install a group as its last GroupMetadata record left it (Kafka's ``ClassicGroup.fromRecord`` and
        ``onLoaded``): Stable with every member's session restarted at ``now`` when it has members, else Empty."""
        group = ClassicGroup(group_id)
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.state_timestamp = None if value.current_state_timestamp < 0 else value.current_state_timestamp
        for stored in value.members:
            member = Member(stored.member_id, stored.client_id, stored.session_timeout, stored.rebalance_timeout,
                            value.protocol_type, ((value.protocol or "", stored.subscription),), stored.assignment,
                            group_instance_id=stored.group_instance_id, client_host=stored.client_host)
            member.heartbeat = _Timer(now + member.session_timeout_ms)
            group.add(member)
        group.leader = value.leader if value.leader in group.members else next(iter(group.members), None)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[group_id] = group

    def unload(self, keep: Callable[[str], bool]) -> None:
        """Forget the groups ``keep`` refuses (their ``__consumer_offsets`` partition is being reloaded or moved):
        their parked requests are answered NOT_COORDINATOR, so clients look for the coordinator again."""
        for group_id in [g for g in self.groups if not keep(g)]:
            group = self.groups.pop(group_id)
            for member in group.members.values():
                if member.join is not None:
                    _complete(member.join, JoinGroupResponse(int(E.NOT_COORDINATOR), member_id=member.member_id,
                                                             request_id=member.join_request_id))
                if member.sync is not None:
                    _complete(member.sync, SyncGroupResponse(int(E.NOT_COORDINATOR),
                                                             request_id=member.sync_request_id))


def _inconsistent(asked: str | None, actual: str | None) -> bool:
    return asked is not None and actual is not None and asked != actual


def _complete(pending: Pending, response: JoinGroupResponse | SyncGroupResponse) -> None:
    # Pending is typed with messages.Response, which may not list the membership responses.
    pending.complete(cast(Any, response))

