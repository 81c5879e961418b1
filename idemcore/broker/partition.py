"""One partition of this broker (Kafka's ``Partition``): its log, under the broker-wide stream its producers have in
the state table, and its part in replication.

A broker running alone leads every partition it has and its high watermark is the log end (``replicated`` is
False). In a cluster a partition is the leader or a follower as the controller's LeaderAndIsr says:

- the **leader** records each follower's log end offset and the last time it was caught up (Kafka's
  ``Replica.updateFetchState``); a follower joins the ISR once its log end reaches the high watermark and the start
  of the leader's current epoch, and leaves it after ``replica.lag.time.max.ms`` without catching up; the high
  watermark is the smallest log end over the ISR (leader included) and never moves back;
- a **follower** holds the high watermark its leader last sent, capped by its own log end.

ISR changes are proposed to ZooKeeper through ``alter_isr`` (compare-and-set on the partition state's version,
Kafka's ZooKeeper-era ``Partition.shrinkIsr/expandIsr``): while one is in flight, or after it failed, the ISR in
force stays what it was (Kafka's "maximal ISR" for the high watermark is the ISR with the added follower).

Nothing here does input or output beyond the log: the replica manager and the fetcher call these methods on the
broker's loop, and the simulation calls them with its virtual clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from idemcore.broker.log import PartitionLog


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""

    broker_id: int
    #: Its log end as its last fetch said (-1: not fetched since this broker became leader).
    log_end_offset: int = -1
    #: The last time its fetch offset reached the leader's log end at that time (or at the previous fetch).
    last_caught_up_ms: int = 0
    #: The leader's log end and the time at its previous fetch (Kafka's lastFetchLeaderLogEndOffset/TimeMs).
    last_fetch_leader_end: int = -1
    last_fetch_ms: int = 0


@dataclass(frozen=True, slots=True)
class LeaderAndIsrState:
    """The partition's state as the controller (or ZooKeeper) has it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    controller_epoch: int = 0


#: Proposes an ISR to ZooKeeper: ``(partition, new isr) -> the new zk version``, None when the compare-and-set lost
#: (the controller changed the state since; its LeaderAndIsr will come).
AlterIsr = Callable[["Partition", tuple[int, ...]], "int | None"]


@dataclass(eq=False)
class Partition:
    topic: str
    partition: int
    #: The partition's stream: its id in the producer-state table (the kernel's ``stream`` column).
    stream: int
    log: PartitionLog
    #: Whether this partition is replicated (a broker in a cluster): False for a broker running alone.
    replicated: bool = False
    #: This broker's id.
    local_id: int = 0
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()
    zk_version: int = -1
    controller_epoch: int = -1
    followers: dict[int, FollowerState] = field(default_factory=dict)
    _high_watermark: int = 0
    #: The log end when this broker became leader of the current epoch (Kafka's leaderEpochStartOffset).
    epoch_start_offset: int = 0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def is_leader(self) -> bool:
        return not self.replicated or self.leader_id == self.local_id

    @property
    def high_watermark(self) -> int:
        """The offset below which every replica in sync holds the log; alone, the log end."""
        if not self.replicated:
            return self.log.log_end_offset
        return min(self._high_watermark, self.log.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, capped by the high watermark."""
        return min(self.log.last_stable_offset, self.high_watermark)

    # --- becoming leader or follower -------------------------------------------------------------------------

    def restore_high_watermark(self, offset: int) -> None:
        """At start: the high watermark from ``replication-offset-checkpoint`` (capped by the log end)."""
        self._high_watermark = max(self.log.log_start_offset, min(offset, self.log.log_end_offset))

    def make_leader(self, state: LeaderAndIsrState, now_ms: int) -> bool:
        """Become (or stay) the leader at ``state``'s epoch (Kafka's ``Partition.makeLeader``): the epoch starts at
        the log end, followers in the ISR count as caught up now, the others as never. True when this broker was
        not the leader before."""
        was_leader = self.replicated and self.leader_id == self.local_id
        new_epoch = state.leader_epoch != self.leader_epoch or not was_leader
        self._take(state)
        if new_epoch:
            self.epoch_start_offset = self.log.log_end_offset
            self.log.leader_epoch = state.leader_epoch
            self.log.epochs.assign(state.leader_epoch, self.log.log_end_offset)
        followers: dict[int, FollowerState] = {}
        for replica in state.replicas:
            if replica == self.local_id:
                continue
            old = self.followers.get(replica) if not new_epoch else None
            if old is not None:
                followers[replica] = old
                continue
            in_sync = replica in state.isr
            followers[replica] = FollowerState(replica, -1, now_ms if in_sync else 0, -1, now_ms if in_sync else 0)
        self.followers = followers
        self.maybe_increment_high_watermark()
        return not was_leader

    def make_follower(self, state: LeaderAndIsrState) -> bool:
        """Follow ``state.leader`` (Kafka's ``Partition.makeFollower``); True when the leader or epoch changed (the
        fetcher must start again from this log's end)."""
        changed = (not self.replicated or state.leader != self.leader_id or state.leader_epoch != self.leader_epoch)
        self._take(state)
        self.followers = {}
        return changed

    def _take(self, state: LeaderAndIsrState) -> None:
        self.replicated = True
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.isr = tuple(state.isr)
        self.replicas = tuple(state.replicas)
        self.zk_version = state.zk_version
        self.controller_epoch = state.controller_epoch

    # --- the leader's view of its followers ------------------------------------------------------------------

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int, alter_isr: AlterIsr | None) -> bool:
        """A follower fetched from ``fetch_offset`` (Kafka's ``updateFollowerFetchState``): its log end is that
        offset; it is caught up when the offset reaches the leader's log end now or at its previous fetch. It may
        join the ISR; the high watermark may move. True when the high watermark moved."""
        follower = self.followers.get(replica_id)
        if follower is None:
            return False
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_end = leader_end
        follower.last_fetch_ms = now_ms
        if replica_id not in self.isr and self._may_join(follower) and alter_isr is not None:
            self._alter(alter_isr, tuple(sorted((*self.isr, replica_id), key=self._assignment_order)))
        return self.maybe_increment_high_watermark()

    def _may_join(self, follower: FollowerState) -> bool:
        """Kafka's ``isFollowerInSync`` for an ISR expansion: caught up to the high watermark and to the start of
        the current epoch (so it holds this leader's history)."""
        return (follower.log_end_offset >= self._high_watermark
                and follower.log_end_offset >= self.epoch_start_offset)

    def _assignment_order(self, broker_id: int) -> int:
        return self.replicas.index(broker_id) if broker_id in self.replicas else len(self.replicas)

    def out_of_sync(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...]:
        """The followers in the ISR that were not caught up within ``max_lag_ms`` (Kafka's
        ``getOutOfSyncReplicas``)."""
        return tuple(replica for replica in self.isr if replica != self.local_id
                     and (replica not in self.followers
                          or now_ms - self.followers[replica].last_caught_up_ms > max_lag_ms))

    def maybe_shrink_isr(self, now_ms: int, max_lag_ms: int, alter_isr: AlterIsr) -> bool:
        """Leave the lagging followers out of the ISR (Kafka's ``maybeShrinkIsr``); True when the ISR changed."""
        if not self.is_leader or not self.replicated:
            return False
        lagging = self.out_of_sync(now_ms, max_lag_ms)
        if not lagging:
            return False
        return self._alter(alter_isr, tuple(r for r in self.isr if r not in lagging))

    def _alter(self, alter_isr: AlterIsr, new_isr: tuple[int, ...]) -> bool:
        version = alter_isr(self, new_isr)
        if version is None:
            return False
        self.isr, self.zk_version = new_isr, version
        self.maybe_increment_high_watermark()
        return True

    def maybe_increment_high_watermark(self) -> bool:
        """The smallest log end over the ISR, leader included (Kafka's ``maybeIncrementLeaderHW``); a follower in
        the ISR that has not fetched since this broker became leader holds it where it is. Never moves back."""
        if not self.replicated or not self.is_leader:
            return False
        end = self.log.log_end_offset
        for replica in self.isr:
            if replica == self.local_id:
                continue
            follower = self.followers.get(replica)
            if follower is None or follower.log_end_offset < 0:
                return False
            end = min(end, follower.log_end_offset)
        if end > self._high_watermark:
            self._high_watermark = end
            return True
        return False

    # --- the follower's side ---------------------------------------------------------------------------------

    def follower_high_watermark(self, leader_high_watermark: int) -> None:
        """The high watermark the leader sent, capped by this log's end (Kafka's follower ``updateHighWatermark``)."""
        self._high_watermark = max(self.log.log_start_offset, min(leader_high_watermark, self.log.log_end_offset))

    def truncated(self) -> None:
        """After a truncation of the log: the high watermark is at most its end."""
        self._high_watermark = min(self._high_watermark, self.log.log_end_offset)
