"""ZooKeeper and the controller of the simulated cluster (:mod:`idemcore.sim.cluster`), in memory and on the
simulation's virtual clock.

:class:`SimZooKeeper` keeps what Kafka's ZooKeeper-era cluster keeps there: each broker's registration under a
session that expires ``session_timeout_ms`` after the broker last reached it (a crash or a cut), and each
partition's ``state`` (leader, leader epoch, ISR, controller epoch) under a version that every write must name
(compare-and-set, as ``KafkaZkClient.updateLeaderAndIsr`` writes it).

:class:`SimController` is Kafka's controller reduced to what replication needs, with the election rules of
:mod:`idemcore.broker.controller.election` (the same functions the real controller calls): a broker whose session
expired leaves every ISR (the last member stays) and the partitions it led elect a leader (clean, or unclean when
allowed); a broker that registers gets the partitions' states and leaderless partitions elect again. Each change
bumps the leader epoch and goes to the replicas as a LeaderAndIsr request and to every live broker as an
UpdateMetadata request, through ``send`` (the simulation delivers them later, or never to a dead broker). The
controller itself never fails: controller fail-over is the real controller's business, tested there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from idemcore.broker.controller import election
from idemcore.broker.controller.zk_data import LeaderIsr
from idemcore.net.replication import (
    BrokerEndpoint,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    UpdateMetadataPartition,
    UpdateMetadataRequest,
)

TopicPartition = tuple[str, int]
CONTROLLER_ID = 1000
CONTROLLER_EPOCH = 1


@dataclass
class SimZooKeeper:
    """Broker sessions and partition states (module docstring)."""

    session_timeout_ms: int
    #: broker id -> (broker epoch: the registration's czxid, the last time the broker reached ZooKeeper).
    sessions: dict[int, tuple[int, int]] = field(default_factory=dict)
    states: dict[TopicPartition, tuple[LeaderIsr, int]] = field(default_factory=dict)
    _zxid: int = 0

    def register(self, broker_id: int, now_ms: int) -> int:
        """A new session and registration for ``broker_id`` (its old one must have expired); its broker epoch."""
        if broker_id in self.sessions:
            raise ValueError(f"broker {broker_id} is still registered")
        self._zxid += 1
        self.sessions[broker_id] = (self._zxid, now_ms)
        return self._zxid

    def heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> bool:
        """The broker reached ZooKeeper; False when its session is gone (it must register again)."""
        session = self.sessions.get(broker_id)
        if session is None or session[0] != broker_epoch:
            return False
        self.sessions[broker_id] = (broker_epoch, now_ms)
        return True

    def expire(self, now_ms: int) -> list[int]:
        """End the sessions not heard of for ``session_timeout_ms``; their brokers, in id order."""
        dead = sorted(b for b, (_, heard) in self.sessions.items() if now_ms - heard > self.session_timeout_ms)
        for broker_id in dead:
            del self.sessions[broker_id]
        return dead

    def live(self) -> set[int]:
        return set(self.sessions)

    def create_state(self, partition: TopicPartition, state: LeaderIsr) -> int:
        self.states[partition] = (state, 0)
        return 0

    def set_state(self, partition: TopicPartition, state: LeaderIsr, expected_version: int) -> int | None:
        """Write ``state`` if the node is still at ``expected_version``; its new version, None when it moved."""
        current = self.states.get(partition)
        if current is None or current[1] != expected_version:
            return None
        self.states[partition] = (state, expected_version + 1)
        return expected_version + 1


@dataclass
class SimController:
    """Kafka's controller over :class:`SimZooKeeper` (module docstring). ``send(broker id, broker epoch,
    request)`` puts a request on its way to a broker's registration; ``unclean``: whether an out-of-sync replica
    may lead when no replica in sync is alive."""

    zk: SimZooKeeper
    assignments: dict[TopicPartition, tuple[int, ...]]
    send: Callable[[int, int, object], None]
    unclean: bool = False
    endpoints: dict[int, BrokerEndpoint] = field(default_factory=dict)
    #: Elections made: clean and unclean (an unclean one may lose acknowledged records).
    clean_elections: int = 0
    unclean_elections: int = 0

    def start(self, brokers: list[int]) -> None:
        """The first leaders: every live replica in the ISR (Kafka's ``initializeLeaderAndIsrForPartitions``)."""
        live = self.zk.live()
        for partition, replicas in sorted(self.assignments.items()):
            choice = election.new_partition_leader(replicas, live)
            if choice is not None:
                self.zk.create_state(partition, LeaderIsr(choice[0], 0, choice[1], CONTROLLER_EPOCH))
        self._announce(sorted(self.assignments), live, metadata_to=live)

    def on_tick(self, now_ms: int) -> list[int]:
        """Sessions that expired now: their brokers' failure handled. Returns them."""
        dead = self.zk.expire(now_ms)
        if dead:
            self._on_broker_failure(set(dead))
        return dead

    def on_broker_startup(self, broker_id: int) -> None:
        """Kafka's ``onBrokerStartup``: the new broker learns every partition it holds, then partitions without a
        live leader elect one (it may be the newcomer)."""
        live = self.zk.live()
        mine = [p for p, replicas in sorted(self.assignments.items()) if broker_id in replicas]
        self._send_leader_and_isr({broker_id: mine}, live)
        self.send_metadata(sorted(self.assignments), live)
        changed = [p for p in sorted(self.assignments) if self._leader(p) not in live and self._elect(p, live)]
        self._announce(changed, live, metadata_to=live)

    def _on_broker_failure(self, dead: set[int]) -> None:
        live = self.zk.live()
        changed: list[TopicPartition] = []
        for partition in sorted(self.assignments):
            if self._leader(partition) in dead and self._elect(partition, live):
                changed.append(partition)
        for partition, replicas in sorted(self.assignments.items()):
            for replica in replicas:
                if replica in dead and self._remove_replica(partition, replica) and partition not in changed:
                    changed.append(partition)
        self._announce(changed, live, metadata_to=live)

    def _leader(self, partition: TopicPartition) -> int:
        return self.zk.states[partition][0].leader

    def _elect(self, partition: TopicPartition, live: set[int]) -> bool:
        current, version = self.zk.states[partition]
        replicas = self.assignments[partition]
        choice = election.offline_leader(replicas, current.isr, live, False)
        unclean = False
        if choice is None and self.unclean:
            choice = election.offline_leader(replicas, current.isr, live, True)
            unclean = choice is not None
        if choice is None:  # offline until a replica that may lead returns (the leader leaves below)
            return False
        if self.zk.set_state(partition, LeaderIsr(choice[0], current.leader_epoch + 1, choice[1], CONTROLLER_EPOCH),
                             version) is None:
            return False
        if unclean:
            self.unclean_elections += 1
        else:
            self.clean_elections += 1
        return True

    def _remove_replica(self, partition: TopicPartition, replica: int) -> bool:
        current, version = self.zk.states[partition]
        if replica not in current.isr and current.leader != replica:
            return False
        leader, isr = election.without_replica(current.leader, current.isr, replica)
        if (leader, isr) == (current.leader, current.isr):
            return False
        return self.zk.set_state(partition, LeaderIsr(leader, current.leader_epoch + 1, isr, CONTROLLER_EPOCH),
                                 version) is not None

    def _announce(self, partitions: list[TopicPartition], live: set[int], *, metadata_to: set[int]) -> None:
        if not partitions:
            return
        by_broker: dict[int, list[TopicPartition]] = {}
        for partition in partitions:
            for replica in self.assignments[partition]:
                if replica in live:
                    by_broker.setdefault(replica, []).append(partition)
        self._send_leader_and_isr(by_broker, live)
        self.send_metadata(partitions, metadata_to)

    def _send_leader_and_isr(self, by_broker: dict[int, list[TopicPartition]], live: set[int]) -> None:
        leaders = tuple(self.endpoints[b] for b in sorted(live) if b in self.endpoints)
        for broker_id, partitions in sorted(by_broker.items()):
            states = []
            for partition in partitions:
                state, version = self.zk.states[partition]
                states.append(LeaderAndIsrPartition(partition[0], partition[1], state.controller_epoch, state.leader,
                                                    state.leader_epoch, tuple(state.isr), version,
                                                    self.assignments[partition]))
            self.send(broker_id, self.zk.sessions[broker_id][0],
                      LeaderAndIsrRequest(CONTROLLER_ID, CONTROLLER_EPOCH, self.zk.sessions[broker_id][0],
                                          tuple(states), leaders))

    def send_metadata(self, partitions: list[TopicPartition], to: set[int]) -> None:
        """UpdateMetadata with ``partitions``' states to the brokers ``to`` (also after a leader's ISR change:
        Kafka's ``isr_change_notification`` path)."""
        live = self.zk.live()
        entries = []
        for partition in partitions:
            state, version = self.zk.states[partition]
            replicas = self.assignments[partition]
            entries.append(UpdateMetadataPartition(partition[0], partition[1], state.controller_epoch, state.leader,
                                                   state.leader_epoch, tuple(state.isr), version, replicas,
                                                   tuple(r for r in replicas if r not in live)))
        brokers = tuple(self.endpoints[b] for b in sorted(live) if b in self.endpoints)
        for broker_id in sorted(to):
            if broker_id in self.zk.sessions:
                epoch = self.zk.sessions[broker_id][0]
                self.send(broker_id, epoch, UpdateMetadataRequest(CONTROLLER_ID, CONTROLLER_EPOCH, epoch,
                                                                  tuple(entries), brokers))
