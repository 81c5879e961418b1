"""A deterministic simulation of a replicated cluster: real :class:`~idemcore.broker.Broker` objects in one
process, each over its own data directory, a simulated ZooKeeper and controller (:mod:`idemcore.sim.zookeeper`),
replica fetching driven by the simulation, idempotent producers, consumers, and faults; all decided by one seeded
RNG on a virtual clock, so a seed reproduces a run exactly.

- **Brokers** take the controller's LeaderAndIsr and UpdateMetadata requests through their ``handle`` (a small
  member, :class:`_Member`, answers them as :class:`~idemcore.broker.cluster_member.ClusterMember` does) and
  propose ISR changes to ZooKeeper by compare-and-set. A crash is a process death (:func:`crash_broker`): what
  reached the OS stays, a write in progress is torn; the broker restarts from its directory and registers again
  once its old session has expired.
- **Replication**: each tick every follower fetches from the broker it believes leads (a Fetch with its replica
  id through the leader's ``handle``, one in flight per leader) and applies the answer with the follower's rules of
  :mod:`idemcore.broker.replica_fetcher` (:func:`process_fetched`); leaders shrink their ISR every half
  ``replica.lag.time.max.ms``.
- **Producers** are idemcore's own :class:`~idemcore.client.Producer` over this module's transport, which routes
  each batch to the partition's leader as the client's metadata says (refreshed from a broker's metadata cache
  after an error or a timeout) and answers acks=all only once the leader's high watermark passes the batch (Kafka's
  DelayedProduce: :class:`~idemcore.broker.purgatory.DelayedProduce` over the leader's partitions, so
  NOT_ENOUGH_REPLICAS_AFTER_APPEND and REQUEST_TIMED_OUT come from the broker's own code).
- **Faults**: a leader crash (mid-write when a produce comes first); a follower falling behind (its fetches lost);
  a broker cut off from ZooKeeper and from its peers but not from clients (its session expires if the cut lasts:
  the controller elects others while it still believes it leads, until it reconnects and learns otherwise);
  unclean election when the topic allows it. Requests and answers between clients and brokers are also lost now and
  then.
"""

from __future__ import annotations

import heapq
import itertools
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from idemcore.broker import Broker
from idemcore.broker.cluster_member import PartitionReplication
from idemcore.broker.controller.zk_data import LeaderIsr
from idemcore.broker.metadata_cache import MetadataCache
from idemcore.broker.partition import Partition
from idemcore.broker.producer_ids import ProducerIdManager, SqliteBlockStore
from idemcore.broker.purgatory import DelayedProduce
from idemcore.broker.replica_fetcher import fetch_partition, process_fetched
from idemcore.errors import IdemcoreError
from idemcore.net.messages import (
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    InitProducerIdRequest,
    PartitionResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
)
from idemcore.net.replication import (
    BrokerEndpoint,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from idemcore.net.transport import partition_count
from idemcore.protocol.codes import ErrorCode
from idemcore.record.v2 import decode_stored_batches
from idemcore.sim.checker import decode_value
from idemcore.sim.network import crash_broker
from idemcore.sim.zookeeper import SimController, SimZooKeeper, TopicPartition

TOPIC = "events"
FAULT_KINDS = ("leader_crash", "follower_lag", "isolate")
#: Answers after which a client asks a broker for metadata again (Kafka's producer marks its metadata stale).
_STALE_METADATA = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                             ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
                             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             ErrorCode.FENCED_LEADER_EPOCH})
_FETCH_BACKOFF_MS = 20  # replica.fetch.backoff.ms, scaled to the simulation's clock
_FETCH_TIMEOUT_MS = 50  # a follower's fetch unanswered this long is given up (its connection broke)
_HEARTBEAT_MS = 20
_HW_CHECKPOINT_MS = 100


@dataclass(frozen=True)
class ClusterFaults:
    """The cluster's settings and the faults injected (times in virtual ms)."""

    brokers: int = 3
    acks: int = -1  # -1 (all) or 1
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False
    kinds: tuple[str, ...] = FAULT_KINDS
    fault_every_ms: int = 300  # mean gap between the starts of two faults
    max_concurrent: int = 2  # faults in force at once (a crashed broker counts until it restarts)
    restart_ms: tuple[int, int] = (50, 500)
    fault_ms: tuple[int, int] = (100, 1500)  # how long a follower lags or a broker stays cut off
    torn_writes: bool = True  # a crash that meets a produce cuts its write short
    drop: float = 0.01  # loss of a client's request or its answer
    latency_ms: int = 1
    session_timeout_ms: int = 300  # zookeeper.session.timeout.ms
    replica_lag_time_max_ms: int = 500  # replica.lag.time.max.ms

    def __post_init__(self) -> None:
        if self.brokers < 2:
            raise ValueError(f"brokers must be at least 2 (a replicated cluster), got {self.brokers}")
        if self.acks not in (-1, 1):
            raise ValueError(f"acks must be -1 (all) or 1, got {self.acks}")
        if not 1 <= self.min_insync_replicas <= self.brokers:
            raise ValueError(f"min_insync_replicas must be from 1 to brokers={self.brokers}, got "
                             f"{self.min_insync_replicas}")
        unknown = [k for k in self.kinds if k not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
        if not 0.0 <= self.drop < 1.0:
            raise ValueError(f"drop must be a probability in [0, 1), got {self.drop}")
        for name in ("fault_every_ms", "max_concurrent", "latency_ms", "session_timeout_ms",
                     "replica_lag_time_max_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


@dataclass
class ClusterStats:
    leader_crashes: int = 0
    torn_writes: int = 0
    follower_lags: int = 0
    isolations: int = 0
    session_expiries: int = 0
    registrations: int = 0
    isr_changes: int = 0
    clean_elections: int = 0
    unclean_elections: int = 0
    truncations: int = 0
    fetch_errors: int = 0  # follower fetch answers whose processing raised
    dropped: int = 0  # client requests or answers lost
    metadata_refreshes: int = 0


class _Member:
    """A broker's part in the simulated cluster (what ClusterMember does in a real one): LeaderAndIsr and
    UpdateMetadata through the broker's ``handle``, ISR changes to ZooKeeper by compare-and-set."""

    def __init__(self, sim: ClusterSim, node: _Node, broker: Broker) -> None:
        self.sim = sim
        self.node = node
        self.broker = broker
        self.metadata = MetadataCache(broker.broker_id)
        broker.replicas.alter_isr = self.alter_isr
        broker.replicas.replica_lag_time_max_ms = sim.faults.replica_lag_time_max_ms
        broker.serve({LeaderAndIsrRequest: self.leader_and_isr, UpdateMetadataRequest: self.update_metadata})
        self.replication = PartitionReplication(broker.replicas)

    def leader_and_isr(self, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        for entry in request.partitions:
            self.metadata.note_leader(entry.topic, entry.partition, entry.leader, entry.leader_epoch,
                                      tuple(entry.isr), tuple(entry.replicas))
        response, _leaders, followers = self.broker.replicas.become_leader_or_follower(request, self._no_replica)
        for partition in followers:
            self.node.backoff.pop((partition.topic, partition.partition), None)
        return response

    @staticmethod
    def _no_replica(topic: str, partition: int) -> Partition:
        raise IdemcoreError(f"every broker holds every partition here; {topic}-{partition} is unknown")

    def update_metadata(self, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
        return UpdateMetadataResponse(self.metadata.update(request), request.request_id)

    def alter_isr(self, partition: Partition, new_isr: tuple[int, ...]) -> int | None:
        sim = self.sim
        if self.node.cut(sim.now):
            return None  # ZooKeeper is out of reach: the ISR stays as it is
        key = (partition.topic, partition.partition)
        version = sim.zk.set_state(key, LeaderIsr(partition.leader_id, partition.leader_epoch, new_isr,
                                                  partition.controller_epoch), partition.zk_version)
        if version is not None:
            sim.stats.isr_changes += 1
            self.metadata.note_leader(partition.topic, partition.partition, partition.leader_id,
                                      partition.leader_epoch, new_isr, partition.replicas)
            # Kafka's isr_change_notification: the controller tells every broker.
            sim.after(sim.faults.latency_ms, lambda: sim.controller.send_metadata([key], sim.zk.live()))
        return version

    def write_high_watermarks(self) -> None:
        marks = {(p.topic, p.partition): p.high_watermark for p in self.broker.replicas.partitions if p.replicated}
        self.broker.log_manager.write_high_watermarks(marks)


@dataclass
class _Node:
    broker_id: int
    data_dir: Path
    broker: Broker | None = None
    member: _Member | None = None
    incarnation: int = 0
    broker_epoch: int = -1  # its ZooKeeper registration (-1: none)
    restart_at: int | None = None
    crash_by: int | None = None  # crash at the next produce it writes, or at this time
    cut_until: int = 0  # cut off from ZooKeeper and its peers until
    lag_until: int = 0  # its fetches are lost until
    fetching: dict[int, int] = field(default_factory=dict)  # leader -> when its fetch went out
    backoff: dict[TopicPartition, int] = field(default_factory=dict)

    def cut(self, now: int) -> bool:
        return now < self.cut_until

    def faulty(self, now: int) -> bool:
        return self.broker is None or self.cut(now) or now < self.lag_until or self.crash_by is not None


@dataclass
class _Waiting:
    """An acks=all answer held by a leader until its high watermark passes the batches (Kafka's DelayedProduce)."""

    node: _Node
    incarnation: int
    operation: DelayedProduce
    deadline: int
    reply: Callable[[Response], None]


@dataclass
class _Gather:
    """A client's produce request split over the leaders: answered when every part is."""

    client: str
    connection: int
    request: ProduceRequest
    parts: int
    answers: dict[int, PartitionResponse] = field(default_factory=dict)
    received: int = 0


class ClusterSim:
    """The simulated cluster and the transport its clients use (module docstring)."""

    def __init__(self, partitions: int, faults: ClusterFaults, seed: int, *, backend: str | None = None,
                 root: Path | None = None) -> None:
        self.faults = faults
        self.partitions = partitions
        self.rng = np.random.default_rng(seed)
        self.backend = backend
        self.now = 0
        self.stats = ClusterStats()
        self._owned_root = root is None
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="idemcore-cluster-sim-"))
        self.topics = {TOPIC: partitions}
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.zk = SimZooKeeper(faults.session_timeout_ms)
        ids = list(range(faults.brokers))
        # Partition p's replicas start at broker p mod n, the leaders spread as Kafka's assignment spreads them.
        assignments = {(TOPIC, p): tuple(ids[(p + j) % len(ids)] for j in range(len(ids)))
                       for p in range(partitions)}
        self.controller = SimController(self.zk, assignments, self._controller_send,
                                        unclean=faults.unclean_leader_election,
                                        endpoints={b: BrokerEndpoint(b, "sim", 9092 + b) for b in ids})
        self.nodes = [_Node(b, self.root / f"broker-{b}") for b in ids]
        for node in self.nodes:
            self._start(node)
            node.broker_epoch = self.zk.register(node.broker_id, self.now)
        self.controller.start(ids)
        # Clients: their inboxes, connections (bumped by disconnect), metadata views.
        self._inbox: dict[str, list[tuple[Request, Response]]] = defaultdict(list)
        self._connection: dict[str, int] = defaultdict(int)
        #: Each client's metadata: per partition the leader and its epoch.
        self._views: dict[str, dict[TopicPartition, tuple[int, int]]] = {}
        self._next_fault = self._fault_gap()
        self.faults_active = True
        #: What consumers read while the simulation ran: ((partition name, offset), record).
        self.reads: list[tuple[tuple[str, int], tuple[int, int]]] = []
        self._read_positions: dict[int, int] = defaultdict(int)
        self._waiting: list[_Waiting] = []
        self._deliver_events()

    # ------------------------------------------------------------ transport interface (for the producers)

    def now_ms(self) -> int:
        return self.now

    def partition_count(self, topic: str) -> int:
        return partition_count(self.topics, topic)

    def send(self, client: str, request: Request) -> None:
        connection = self._connection[client]
        if isinstance(request, InitProducerIdRequest):
            live = self._any_live_node()
            if live is None or self._lost():
                return
            self.after(self.faults.latency_ms, lambda: self._deliver(live, request, lambda answer: self._answer(
                client, connection, request, answer)))
            return
        if not isinstance(request, ProduceRequest):
            raise IdemcoreError(f"the simulated cluster carries produce and InitProducerId requests, not "
                                f"{type(request).__name__}")
        view = self._view(client)
        by_leader: dict[int, list[int]] = defaultdict(list)
        for position, batch in enumerate(request.batches):
            by_leader[view.get((batch.topic, batch.partition), (-1, -1))[0]].append(position)
        gather = _Gather(client, connection, request, len(by_leader))
        for leader, positions in sorted(by_leader.items()):
            part = ProduceRequest(tuple(request.batches[p] for p in positions), request.acks, request.timeout_ms,
                                  request.request_id)

            def reply(answer: Response, positions: list[int] = positions) -> None:
                self._gathered(gather, positions, answer)
            if leader < 0:  # the client knows no leader: it would wait for metadata; answered as Kafka's client
                self.after(self.faults.latency_ms, lambda reply=reply, part=part: reply(ProduceResponse(  # type: ignore[misc]
                    part.request_id, tuple(PartitionResponse(b.topic, b.partition, ErrorCode.LEADER_NOT_AVAILABLE)
                                           for b in part.batches))))
                continue
            if self._lost():
                continue
            node = self.nodes[leader]
            self.after(self.faults.latency_ms, lambda node=node, part=part, reply=reply: self._deliver(  # type: ignore[misc]
                node, part, reply))

    def poll(self, client: str) -> list[tuple[Request, Response]]:
        return self._inbox.pop(client, None) or []

    def disconnect(self, client: str) -> None:
        self._connection[client] += 1
        self._inbox.pop(client, None)
        self._refresh_view(client)

    def tick(self) -> None:
        """Advance the clock by 1 ms: deliver what is due, fetch, shrink ISRs, inject and heal faults."""
        self.now += 1
        now = self.now
        if self.faults_active and now >= self._next_fault:
            self._inject_fault()
            self._next_fault = now + self._fault_gap()
        for node in self.nodes:
            self._node_tick(node)
        for dead in self.controller.on_tick(now):
            self.stats.session_expiries += 1
            self.nodes[dead].broker_epoch = -1  # it registers again once it reaches ZooKeeper
        self._deliver_events()
        for node in self.nodes:
            self._fetch(node)
        self._check_waiting()
        if now % 25 == 0:
            self._consumer_read()
        self.stats.clean_elections = self.controller.clean_elections
        self.stats.unclean_elections = self.controller.unclean_elections

    # ------------------------------------------------------------ scheduling

    def after(self, delay_ms: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (self.now + delay_ms, next(self._order), action))

    def _deliver_events(self) -> None:
        while self._events and self._events[0][0] <= self.now:
            heapq.heappop(self._events)[2]()

    def _lost(self) -> bool:
        if self.faults.drop and self.rng.random() < self.faults.drop:
            self.stats.dropped += 1
            return True
        return False

    # ------------------------------------------------------------ brokers

    def _start(self, node: _Node) -> None:
        """(Re)start a broker from its directory: every partition replicated, with no role until the controller's
        LeaderAndIsr, its high watermark from ``replication-offset-checkpoint`` (as Broker does in a cluster)."""
        faults = self.faults
        ids = ProducerIdManager(node.broker_id, SqliteBlockStore(self.root / "producer-ids.sqlite"))
        broker = Broker(self.topics, data_dir=node.data_dir, broker_id=node.broker_id, producer_ids=ids,
                        backend=self.backend, fsync=False, clock=self.now_ms,
                        topic_configs={TOPIC: {"min.insync.replicas": faults.min_insync_replicas,
                                               "unclean.leader.election.enable": faults.unclean_leader_election}})
        marks = broker.log_manager.high_watermarks()
        for partition in broker.replicas.partitions:
            partition.replicated = True
            partition.restore_high_watermark(marks.get((partition.topic, partition.partition), 0))
        node.broker = broker
        node.member = _Member(self, node, broker)
        node.incarnation += 1
        node.fetching.clear()
        node.backoff.clear()

    def _crash(self, node: _Node, torn: int | None = None, torn_from: int = 0) -> None:
        assert node.broker is not None
        torn_writes, _ = crash_broker(node.broker, self.rng, torn, torn_from)
        self.stats.torn_writes += torn_writes
        self.stats.leader_crashes += 1
        node.broker = node.member = None
        node.broker_epoch = -1  # its session lingers in ZooKeeper until it expires
        node.crash_by = None
        low, high = self.faults.restart_ms
        node.restart_at = self.now + int(self.rng.integers(low, high + 1))
        self._waiting = [w for w in self._waiting if w.node is not node]

    def _node_tick(self, node: _Node) -> None:
        now = self.now
        if node.broker is None:
            if node.restart_at is not None and now >= node.restart_at:
                node.restart_at = None
                self._start(node)
            return
        if node.crash_by is not None and now >= node.crash_by:
            self._crash(node)
            return
        member = node.member
        assert member is not None
        if not node.cut(now):
            if node.broker_epoch >= 0 and now % _HEARTBEAT_MS == node.broker_id % _HEARTBEAT_MS:
                if not self.zk.heartbeat(node.broker_id, node.broker_epoch, now):
                    node.broker_epoch = -1  # the session expired while cut off: register again
            if node.broker_epoch < 0 and node.broker_id not in self.zk.sessions:
                node.broker_epoch = self.zk.register(node.broker_id, now)
                self.stats.registrations += 1
                self.controller.on_broker_startup(node.broker_id)
        half_lag = max(1, self.faults.replica_lag_time_max_ms // 2)
        if now % half_lag == node.broker_id % half_lag:
            node.broker.replicas.shrink_isrs()
        if now % _HW_CHECKPOINT_MS == 0:
            member.write_high_watermarks()

    def _deliver(self, node: _Node, request: Request, reply: Callable[[Response], None]) -> None:
        """A client's request reaches ``node``: handled (a produce may crash the broker mid-write); the answer goes
        back, or waits for replication (acks=all)."""
        broker = node.broker
        if broker is None:
            return
        before = [p.log.log_end_offset for p in broker.replicas.partitions]
        answer = broker.handle(request)
        if isinstance(request, ProduceRequest) and node.crash_by is not None:
            after = [p.log.log_end_offset for p in broker.replicas.partitions]
            grown = [k for k, (old, new) in enumerate(zip(before, after, strict=True)) if new > old]
            if grown:  # the process dies while writing this request: no answer goes out
                k = grown[-1]
                self._crash(node, k if self.faults.torn_writes else None, before[k])
                return
        if answer is None:
            return
        if isinstance(request, ProduceRequest) and isinstance(answer, ProduceResponse) and request.acks == -1:
            waits = []
            for position, entry in enumerate(answer.responses):
                partition = broker.replicas.find_partition(entry.topic, entry.partition)
                if entry.error_code == ErrorCode.NONE and partition is not None and partition.replicated:
                    waits.append((position, partition.log, partition.log.log_end_offset))
            if waits:
                view = node.member.replication if node.member is not None else None
                assert view is not None
                operation = DelayedProduce(answer, waits, request.timeout_ms, None, lambda _log: None,
                                           view.high_watermark, view.isr_short, view.not_leader)
                done = operation.try_complete()
                if done is None:
                    self._waiting.append(_Waiting(node, node.incarnation, operation, self.now + request.timeout_ms,
                                                  reply))
                    return
                answer = done
        self._reply(reply, answer)  # type: ignore[arg-type]

    def _reply(self, reply: Callable[[Response], None], answer: Response) -> None:
        if self._lost():
            return
        self.after(self.faults.latency_ms, lambda: reply(answer))

    def _check_waiting(self) -> None:
        still = []
        for waiting in self._waiting:
            if waiting.node.incarnation != waiting.incarnation or waiting.node.broker is None:
                continue
            answer = waiting.operation.try_complete()
            if answer is None and self.now >= waiting.deadline:
                answer = waiting.operation.expired()
            if answer is None:
                still.append(waiting)
            else:
                self._reply(waiting.reply, answer)
        self._waiting = still

    def _controller_send(self, broker_id: int, broker_epoch: int, request: Any) -> None:
        """The controller's requests go to a broker's registration; held while it is cut off (the controller's
        channel keeps trying), dropped once that registration is gone."""
        node = self.nodes[broker_id]

        def deliver() -> None:
            if node.broker is None or node.broker_epoch != broker_epoch:
                return
            if node.cut(self.now):
                self.after(10, deliver)
                return
            node.broker.handle(request)
        self.after(self.faults.latency_ms, deliver)

    # ------------------------------------------------------------ replication

    def _fetch(self, node: _Node) -> None:
        """Each follower's fetch from each broker it follows (one in flight per leader)."""
        broker = node.broker
        if broker is None:
            return
        now = self.now
        by_leader: dict[int, list[Partition]] = defaultdict(list)
        for partition in broker.replicas.partitions:
            if (partition.replicated and not partition.is_leader and partition.leader_id >= 0
                    and node.backoff.get((partition.topic, partition.partition), 0) <= now):
                by_leader[partition.leader_id].append(partition)
        for leader_id, partitions in sorted(by_leader.items()):
            sent = node.fetching.get(leader_id)
            if sent is not None and now - sent < _FETCH_TIMEOUT_MS:
                continue
            node.fetching[leader_id] = now
            asked = {(p.topic, p.partition): (p.leader_epoch, p.log.log_end_offset) for p in partitions}
            request = FetchRequest(tuple(fetch_partition(p, 1_048_576) for p in partitions), max_wait_ms=0,
                                   replica_id=node.broker_id)
            leader = self.nodes[leader_id]
            if now < node.lag_until or node.cut(now) or leader.cut(now):
                continue  # lost: the follower falls behind (or the link is cut)
            incarnation = node.incarnation
            self.after(self.faults.latency_ms, lambda leader=leader, request=request, asked=asked,  # type: ignore[misc]
                       incarnation=incarnation: self._leader_answers(node, incarnation, leader, request, asked))

    def _leader_answers(self, node: _Node, incarnation: int, leader: _Node, request: FetchRequest,
                        asked: dict[TopicPartition, tuple[int, int]]) -> None:
        if leader.broker is None or leader.cut(self.now):
            return
        response = leader.broker.handle(request)
        assert isinstance(response, FetchResponse)

        def apply() -> None:
            if node.incarnation != incarnation or node.broker is None or node.cut(self.now) or leader.cut(self.now):
                return
            node.fetching.pop(leader.broker_id, None)
            self._apply_fetched(node, leader.broker_id, response, asked)
        self.after(self.faults.latency_ms, apply)

    def _apply_fetched(self, node: _Node, leader_id: int, response: FetchResponse,
                       asked: dict[TopicPartition, tuple[int, int]]) -> None:
        broker = node.broker
        assert broker is not None
        for answer in response.partitions:
            key = (answer.topic, answer.partition)
            partition = broker.replicas.find_partition(*key)
            # As the fetcher: an answer for a partition that moved or changed since the request is dropped.
            if partition is None or partition.is_leader or partition.leader_id != leader_id \
                    or asked.get(key) != (partition.leader_epoch, partition.log.log_end_offset):
                continue
            end = partition.log.log_end_offset
            try:
                outcome = process_fetched(broker.replicas, partition, answer, leader_id)
            except Exception:  # as the fetcher: one partition's failure backs it off, counted
                self.stats.fetch_errors += 1
                node.backoff[key] = self.now + _FETCH_BACKOFF_MS
                continue
            if partition.log.log_end_offset < end:
                self.stats.truncations += 1
            if outcome.back_off:
                node.backoff[key] = self.now + _FETCH_BACKOFF_MS

    # ------------------------------------------------------------ clients

    def _any_live_node(self) -> _Node | None:
        live = [n for n in self.nodes if n.broker is not None]
        return live[int(self.rng.integers(len(live)))] if live else None

    def _view(self, client: str) -> dict[TopicPartition, tuple[int, int]]:
        view = self._views.get(client)
        if view is None:
            view = self._views[client] = {p: (s.leader, s.leader_epoch) for p, (s, _) in self.zk.states.items()}
        return view

    def _refresh_view(self, client: str) -> None:
        """Metadata from a live broker's cache (Kafka's producer asks the least loaded node): possibly stale, even
        naming a leader that lost its leadership while cut off. As Kafka's client (KIP-320), a partition's
        metadata at an older leader epoch than the client knows is ignored."""
        node = self._any_live_node()
        if node is None or node.member is None:
            return
        self.stats.metadata_refreshes += 1
        cache = node.member.metadata
        view = self._view(client)
        for key, (_, known_epoch) in list(view.items()):
            info = cache.partition(*key)
            if info is not None and info.leader_epoch >= known_epoch:
                view[key] = (info.leader, info.leader_epoch)

    def _answer(self, client: str, connection: int, request: Request, answer: Response) -> None:
        if self._connection[client] != connection:
            return
        if isinstance(answer, ProduceResponse) and any(r.error_code in _STALE_METADATA for r in answer.responses):
            self._refresh_view(client)
        self._inbox[client].append((request, answer))

    def _gathered(self, gather: _Gather, positions: list[int], answer: Response) -> None:
        assert isinstance(answer, ProduceResponse)
        for position, entry in zip(positions, answer.responses, strict=True):
            gather.answers[position] = entry
        gather.received += 1
        if gather.received == gather.parts:
            request = gather.request
            self._answer(gather.client, gather.connection, request, ProduceResponse(
                request.request_id, tuple(gather.answers[p] for p in range(len(request.batches)))))

    def _consumer_read(self) -> None:
        """A consumer reads one partition from the leader its metadata names, from where it got to or from an
        earlier offset (so a record read from two leaders over time can be compared)."""
        partition = int(self.rng.integers(self.partitions))
        leader = self._view("consumer").get((TOPIC, partition), (-1, -1))[0]
        node = self.nodes[leader] if leader >= 0 else None
        position = self._read_positions[partition]
        offset = position if self.rng.random() < 0.5 else int(self.rng.integers(position + 1))
        if node is None or node.broker is None:
            self._refresh_view("consumer")
            return
        answer = node.broker.handle(FetchRequest((FetchPartition(TOPIC, partition, offset, 4096),), max_wait_ms=0))
        assert isinstance(answer, FetchResponse)
        fetched = answer.partitions[0]
        if fetched.error_code != ErrorCode.NONE:
            self._refresh_view("consumer")
            return
        for read_offset, record in _records(fetched, offset):
            self.reads.append(((f"{TOPIC}-{partition}", read_offset), record))
            self._read_positions[partition] = max(self._read_positions[partition], read_offset + 1)

    # ------------------------------------------------------------ faults

    def _fault_gap(self) -> int:
        every = self.faults.fault_every_ms
        return int(self.rng.integers(max(1, every // 2), every + every // 2 + 1))

    def _inject_fault(self) -> None:
        now = self.now
        if sum(1 for n in self.nodes if n.faulty(now)) >= self.faults.max_concurrent:
            return
        kind = self.faults.kinds[int(self.rng.integers(len(self.faults.kinds)))]
        low, high = self.faults.fault_ms
        duration = int(self.rng.integers(low, high + 1))
        healthy = [n for n in self.nodes if not n.faulty(now)]
        if not healthy:
            return
        if kind == "leader_crash":
            leaders = [n for n in healthy if n.broker is not None and any(
                p.replicated and p.is_leader for p in n.broker.replicas.partitions)]
            target = (leaders or healthy)[int(self.rng.integers(len(leaders or healthy)))]
            target.crash_by = now + 20  # at its next produce write, else in 20 ms
        elif kind == "follower_lag":
            target = healthy[int(self.rng.integers(len(healthy)))]
            target.lag_until = now + duration
            self.stats.follower_lags += 1
        else:
            target = healthy[int(self.rng.integers(len(healthy)))]
            target.cut_until = now + duration
            self.stats.isolations += 1

    def heal(self) -> None:
        """No more faults: cuts and lags end now; crashed brokers restart as scheduled."""
        self.faults_active = False
        for node in self.nodes:
            node.cut_until = min(node.cut_until, self.now)
            node.lag_until = min(node.lag_until, self.now)

    def settled(self) -> bool:
        """Every broker registered, every partition led with its full ISR and its high watermark at its log end,
        every replica at its leader's end and high watermark."""
        if any(n.broker is None or n.broker_epoch < 0 for n in self.nodes):
            return False
        for key, (state, _) in self.zk.states.items():
            if state.leader < 0 or len(state.isr) != len(self.nodes):
                return False
            leader = self.nodes[state.leader].broker
            assert leader is not None
            lead = leader.replicas.find_partition(*key)
            if lead is None or not lead.is_leader or lead.leader_epoch != state.leader_epoch \
                    or lead.high_watermark != lead.log.log_end_offset:
                return False
            for node in self.nodes:
                assert node.broker is not None
                replica = node.broker.replicas.find_partition(*key)
                if replica is None or replica.log.log_end_offset != lead.log.log_end_offset \
                        or replica.high_watermark != lead.high_watermark:
                    return False
        return True

    def final_read(self) -> dict[str, list[tuple[int, tuple[int, int]]]]:
        """A consumer reads every partition from its leader, from the log start to the high watermark."""
        result: dict[str, list[tuple[int, tuple[int, int]]]] = {}
        for key, (state, _) in sorted(self.zk.states.items()):
            broker = self.nodes[state.leader].broker
            assert broker is not None
            records: list[tuple[int, tuple[int, int]]] = []
            offset = 0
            for _ in range(1_000_000):
                answer = broker.handle(FetchRequest((FetchPartition(key[0], key[1], offset, 1_048_576),),
                                                    max_wait_ms=0))
                assert isinstance(answer, FetchResponse)
                fetched = answer.partitions[0]
                if fetched.error_code != ErrorCode.NONE:
                    raise IdemcoreError(f"the final read of {key[0]}-{key[1]} at offset {offset} failed: "
                                        f"{ErrorCode(fetched.error_code).name}")
                got = _records(fetched, offset)
                if not got:
                    break
                records.extend(got)
                offset = got[-1][0] + 1
            result[f"{key[0]}-{key[1]}"] = records
        return result

    def close(self) -> None:
        for node in self.nodes:
            if node.broker is not None:
                node.broker.close()
                node.broker = None
        if self._owned_root:
            shutil.rmtree(self.root, ignore_errors=True)


def _records(fetched: FetchedPartition, fetch_offset: int) -> list[tuple[int, tuple[int, int]]]:
    """The data records of a fetched answer from ``fetch_offset`` on, decoded as the simulation's values."""
    out = []
    for stored in decode_stored_batches(fetched.topic, fetched.partition, fetched.records):
        if stored.control is not None:
            continue
        for offset, value in zip(stored.offsets(), stored.batch.values, strict=True):
            if offset >= fetch_offset and value is not None:
                out.append((offset, decode_value(value)))
    return out


__all__ = ["FAULT_KINDS", "TOPIC", "ClusterFaults", "ClusterSim", "ClusterStats"]
