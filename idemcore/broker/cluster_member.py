"""A broker's part in a ZooKeeper-coordinated cluster (what Kafka's ``KafkaServer`` adds in ZooKeeper mode): its
registration under ``/brokers/ids``, the controller it runs for election, the metadata cache the controller's
UpdateMetadata fills, the replica fetchers, ISR changes by compare-and-set, and the handlers of the requests only a
cluster has (LeaderAndIsr, UpdateMetadata, StopReplica, OffsetForLeaderEpoch, ElectLeaders) or answers differently
(Metadata, CreateTopics, FindCoordinator).

Everything runs on the broker's event loop except what blocks on ZooKeeper for long (registration, which may wait
for a previous session of this broker id to expire) and the controller, which has its own thread and talks to every
broker, this one included, over the wire as Kafka's controller does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from idemcore.broker.broker_view import MemberBroker
from idemcore.broker.cluster_config import ClusterConfig
from idemcore.broker.controller.assignment import AssignmentError, assign_replicas
from idemcore.broker.controller.controller import Controller
from idemcore.broker.controller.zk_client import TopicExistsError, ZkClient
from idemcore.broker.controller.zk_data import LeaderIsr
from idemcore.broker.coordinator.partitioning import coordinator_partition
from idemcore.broker.fetch import offset_for_leader_epoch
from idemcore.broker.metadata_cache import MetadataCache
from idemcore.broker.partition import Partition
from idemcore.broker.replica_fetcher import ReplicaFetcherManager
from idemcore.broker.security.inter_broker import inter_broker_security
from idemcore.broker.topic_config import InvalidTopicConfig
from idemcore.broker.topic_requests import new_topics, refused_new_topic, wire_configs
from idemcore.errors import IdemcoreError
from idemcore.net.broker_channel import BlockingBrokerChannel, BrokerChannel
from idemcore.net.messages import (
    TRANSACTION_KEY,
    CreatedTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    NewTopic,
    Pending,
    TopicMetadata,
)
from idemcore.net.replication import (
    BrokerEndpoint,
    ElectLeadersRequest,
    ElectLeadersResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ListenerAddress,
    OffsetForLeaderEpochRequest,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import (
    CONSUMER_OFFSETS_TOPIC,
    INTERNAL_TOPICS,
    TRANSACTION_STATE_TOPIC,
)

if TYPE_CHECKING:
    from idemcore.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)



class ClusterMember:
    """This broker's membership of the cluster (module docstring)."""

    def __init__(self, broker: MemberBroker, config: ClusterConfig) -> None:
        self.broker = broker
        self.config = config
        self.broker_id = broker.broker_id
        self.metadata = MetadataCache(broker.broker_id)
        self.zk: ZkClient | None = None
        self.controller: Controller | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.endpoint: BrokerEndpoint | None = None
        self.broker_epoch = -1
        #: How this broker's channels to the others authenticate (None: PLAINTEXT).
        self.channel_security = inter_broker_security(broker.settings)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timers: list[asyncio.TimerHandle] = []
        #: Answers waiting for the controller to elect leaders: (ready?, answer, deadline).
        self._waiting: list[_Waiting] = []
        broker.replicas.replica_lag_time_max_ms = config.replica_lag_time_max_ms
        #: Called with the partitions that became leader and those that became followers (the coordinators).
        self.on_leadership: list[Callable[[list[Partition], list[Partition]], None]] = []

    # --- life cycle -------------------------------------------------------------------------------------------

    async def start(self, listeners: tuple[tuple[str, str, int, str], ...], inter_broker_listener: str) -> None:
        """Join: connect to ZooKeeper, register every listener (``(name, advertised host, port, security
        protocol)``; waiting for a previous registration of this id to expire), start the fetchers, the timers
        and the controller's election. Brokers reach each other on ``inter_broker_listener``. Called on the loop
        once the server listens."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        addresses = tuple(ListenerAddress(*one) for one in listeners)
        inter_broker = next((one for one in addresses if one.name == inter_broker_listener), None)
        if inter_broker is None:
            raise IdemcoreError(f"broker {self.broker_id}: the inter-broker listener {inter_broker_listener} is not "
                                f"served ({', '.join(one.name for one in addresses)})")
        host, port = inter_broker.host, inter_broker.port
        self.endpoint = BrokerEndpoint(self.broker_id, host, port, None, addresses)
        config = self.config
        self.zk = await loop.run_in_executor(None, lambda: ZkClient(
            config.zookeeper_connect, session_timeout_ms=config.session_timeout_ms,
            connection_timeout_ms=config.connection_timeout_ms, listener=inter_broker_listener))
        replicas = self.broker.replicas
        replicas.alter_isr = self.alter_isr
        self.broker.delayed.replication = PartitionReplication(replicas)
        self.fetchers = ReplicaFetcherManager(
            config.fetcher, replicas,
            lambda endpoint: BrokerChannel(endpoint.host, endpoint.port, f"broker-{self.broker_id}-fetcher",
                                           request_timeout_ms=config.fetcher.max_wait_ms + 30_000,
                                           security=self.channel_security),
            on_progress=self._follower_progress)
        self.broker_epoch = await loop.run_in_executor(None, lambda: self.zk.register_broker(  # type: ignore[union-attr]
            self.broker_id, host, port, None, addresses))
        log.info("broker %d registered in ZooKeeper at %s:%d (broker epoch %d)", self.broker_id, host, port,
                 self.broker_epoch)
        # A session that expired (a pause longer than zookeeper.session.timeout.ms) took the registration with it:
        # register again in the new one, as Kafka's KafkaZkClient does; the controller sees a broker come back.
        def register_again() -> None:  # on kazoo's thread: only hands the work to the loop
            loop.call_soon_threadsafe(lambda: loop.create_task(self._register_again()))
        self.zk.on_new_session(register_again)
        self._every(config.replica_lag_time_max_ms / 2000, replicas.shrink_isrs)
        self._every(config.high_watermark_checkpoint_ms / 1000, self.write_high_watermarks)
        self.controller = Controller(
            self.zk, self.broker_id,
            lambda endpoint: BlockingBrokerChannel(endpoint.host, endpoint.port, f"controller-{self.broker_id}",
                                                   security=self.channel_security),
            unclean_leader_election=self._unclean_allowed, config=config.controller)
        self.controller.start()

    async def _register_again(self) -> None:
        if self.zk is None or self.endpoint is None:
            return
        zk, endpoint = self.zk, self.endpoint
        try:
            self.broker_epoch = await asyncio.get_running_loop().run_in_executor(
                None, lambda: zk.register_broker(self.broker_id, endpoint.host, endpoint.port, endpoint.rack,
                                                 endpoint.listeners))
            log.warning("broker %d registered again in a new ZooKeeper session (broker epoch %d)", self.broker_id,
                        self.broker_epoch)
        except Exception as exc:
            log.error("broker %d: registering again in ZooKeeper failed: %s", self.broker_id, exc)

    def _every(self, interval_s: float, work: Callable[[], Any]) -> None:
        assert self._loop is not None
        loop = self._loop

        def tick() -> None:
            try:
                work()
            except Exception:
                log.exception("broker %d: %s failed", self.broker_id, getattr(work, "__name__", work))
            self._timers.append(loop.call_later(interval_s, tick))
            if len(self._timers) > 64:
                self._timers = [t for t in self._timers if not t.cancelled()][-16:]
        self._timers.append(loop.call_later(interval_s, tick))

    async def stop(self) -> None:
        """Leave: the controller stops, fetchers stop, the high watermarks are written, the registration goes."""
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        loop = asyncio.get_running_loop()
        if self.broker.coordinator_leadership is not None:
            await self.broker.coordinator_leadership.close()
        if self.controller is not None:
            await loop.run_in_executor(None, self.controller.stop)
        if self.fetchers is not None:
            await self.fetchers.close()
        self.write_high_watermarks(in_place=True)
        if self.zk is not None:
            await loop.run_in_executor(None, self.zk.close)

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        """The requests this member answers, by message type (the broker's dispatch takes them over)."""
        return {
            LeaderAndIsrRequest: self.leader_and_isr,
            UpdateMetadataRequest: self.update_metadata,
            StopReplicaRequest: self.stop_replica,
            OffsetForLeaderEpochRequest: lambda r: offset_for_leader_epoch(self.broker.replicas.find_partition, r),
            ElectLeadersRequest: self.elect_leaders,
            MetadataRequest: self.metadata_response,
            CreateTopicsRequest: self.create_topics,
            FindCoordinatorRequest: self.find_coordinator,
        }

    # --- replication plumbing ---------------------------------------------------------------------------------

    def alter_isr(self, partition: Partition, new_isr: tuple[int, ...]) -> int | None:
        """Write ``partition``'s new ISR to ZooKeeper at the version this broker knows (Kafka's ZooKeeper-era
        ``Partition.updateIsr``); None when the controller changed the state since."""
        if self.zk is None:
            return None
        state = LeaderIsr(partition.leader_id, partition.leader_epoch, new_isr, partition.controller_epoch)
        try:
            version = self.zk.update_leader_isr(partition.topic, partition.partition, state, partition.zk_version)
        except Exception as exc:  # ZooKeeper unreachable: the ISR stays as it is, tried again at the next tick
            log.warning("%s: ISR change to %s not written: %s", partition.name, list(new_isr), exc)
            return None
        if version is None:
            log.info("%s: ISR change to %s refused: the partition state moved past version %d", partition.name,
                     list(new_isr), partition.zk_version)
        else:
            log.info("%s: ISR %s -> %s", partition.name, list(partition.isr), list(new_isr))
            self.metadata.note_leader(partition.topic, partition.partition, partition.leader_id, partition.leader_epoch,
                                      new_isr, partition.replicas)
        return version

    def _follower_progress(self, partition: Partition) -> None:
        self.broker.delayed.replicated(partition.topic, partition.partition)

    def write_high_watermarks(self, in_place: bool = False) -> None:
        """Kafka's ``checkpointHighWatermarks``: every replicated partition's high watermark to
        ``replication-offset-checkpoint``."""
        marks = {(p.topic, p.partition): p.high_watermark for p in self.broker.replicas.partitions if p.replicated}
        if not marks:
            return
        write = self.broker.log_manager.write_high_watermarks

        def written(_: object, error: BaseException | None) -> None:
            if error is not None:
                log.error("broker %d: writing the high watermarks failed: %s", self.broker_id, error)
        if not in_place and self.broker.delayed.running:
            self.broker.delayed.in_background(lambda: write(marks), written)  # an fsync: on the flusher thread
            return
        try:
            write(marks)
        except OSError as exc:
            written(None, exc)

    def _unclean_allowed(self, topic: str) -> bool:
        config = self.broker.topic_catalog.configs.get(topic)
        if config is not None:
            return bool(config.unclean_leader_election_enable)
        # A topic this broker holds no replica of: its overrides in ZooKeeper, as Kafka's controller reads them.
        value = self.zk.topic_config(topic).get("unclean.leader.election.enable") if self.zk is not None else None
        return self.config.unclean_leader_election if value is None else value.strip().lower() == "true"

    # --- controller requests ----------------------------------------------------------------------------------

    def leader_and_isr(self, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        for entry in request.partitions:
            self.metadata.note_leader(entry.topic, entry.partition, entry.leader, entry.leader_epoch, tuple(entry.isr),
                                      tuple(entry.replicas))
        response, leaders, followers = self.broker.replicas.become_leader_or_follower(request, self._open_replica)
        if self.fetchers is not None:
            self.fetchers.remove(leaders)
            self.fetchers.add(followers, {endpoint.broker_id: endpoint for endpoint in request.live_leaders})
        for partition in (*leaders, *followers):
            self.broker.delayed.replicated(partition.topic, partition.partition)
        for listener in self.on_leadership:
            listener(leaders, followers)
        self._check_waiting()
        return response

    def _open_replica(self, topic: str, partition: int) -> Partition:
        """Open a replica the controller assigned here: the topic's settings from ZooKeeper the first time."""
        catalog = self.broker.topic_catalog
        if topic not in catalog:
            assert self.zk is not None
            assignment = self.zk.topics().get(topic)
            count = len(assignment) if assignment else partition + 1
            catalog.adopt(topic, count, self.zk.topic_config(topic))
        return self.broker.replicas.open_partition(topic, partition, catalog.configs[topic],
                                                   new=not self.broker.log_manager.has_log(topic, partition))

    def update_metadata(self, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
        code = self.metadata.update(request)
        self._check_waiting()
        return UpdateMetadataResponse(code, request.request_id)

    def stop_replica(self, request: StopReplicaRequest) -> StopReplicaResponse:
        """Stop fetching the partitions named (Kafka's ``stopReplicas``); their files stay (deleting a replica's
        files is for topic deletion and reassignment, which this cluster does not do)."""
        if request.controller_epoch < self.broker.replicas.controller_epoch:
            return StopReplicaResponse(ErrorCode.STALE_CONTROLLER_EPOCH, (), request.request_id)
        results = []
        stopped = []
        for entry in request.partitions:
            partition = self.broker.replicas.find_partition(entry.topic, entry.partition)
            if partition is not None:
                stopped.append(partition)
            results.append((entry.topic, entry.partition, ErrorCode.NONE))
        if self.fetchers is not None:
            self.fetchers.remove(stopped)
        return StopReplicaResponse(ErrorCode.NONE, tuple(results), request.request_id)

    def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse | Pending:
        """ElectLeaders (KIP-460) on the controller: run on its thread, answered when it is done."""
        controller = self.controller
        if controller is None or not controller.is_active:
            return ElectLeadersResponse(ErrorCode.NOT_CONTROLLER, (), request.request_id)
        pending = Pending()
        assert self._loop is not None

        async def run() -> None:
            try:
                results = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: controller.elect_leaders(request.partitions, request.election_type))
                pending.complete(ElectLeadersResponse(ErrorCode.NONE, tuple(results), request.request_id))
            except Exception:
                log.exception("ElectLeaders failed")
                pending.complete(ElectLeadersResponse(ErrorCode.UNKNOWN_SERVER_ERROR, (), request.request_id))
        self._loop.create_task(run())
        return pending

    # --- client requests answered from the cluster --------------------------------------------------------------

    def metadata_response(self, request: MetadataRequest) -> MetadataResponse | Pending:
        """Metadata from the cache: every broker alive, the controller, each partition's leader and ISR; a topic
        not there is made when auto-creation is allowed (answered LEADER_NOT_AVAILABLE until it has leaders, as
        Kafka answers a topic it just made)."""
        names = request.topics
        if names is None:
            topics = tuple(self.metadata.topic_metadata(name) for name in self.metadata.topic_names())
        elif not isinstance(names, tuple | list):
            topics = ()
        else:
            answers = []
            for name in names:
                if type(name) is not str:
                    answers.append(TopicMetadata(str(name), ErrorCode.INVALID_TOPIC_EXCEPTION))
                elif self.metadata.has_topic(name):
                    answers.append(self.metadata.topic_metadata(name))
                elif (name not in INTERNAL_TOPICS and request.allow_auto_topic_creation is True
                      and self.broker.topic_catalog.auto_create):
                    made = self._create(NewTopic(name), validate_only=False)
                    code = ErrorCode.LEADER_NOT_AVAILABLE if made.error_code in (
                        ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS) else made.error_code
                    answers.append(TopicMetadata(name, code))
                else:
                    answers.append(TopicMetadata(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            topics = tuple(answers)
        brokers = tuple(sorted(self.metadata.brokers.values(), key=lambda b: b.broker_id))
        if not brokers and self.endpoint is not None:
            brokers = (self.endpoint,)
        return MetadataResponse(topics, request.request_id, brokers=brokers, controller_id=self.metadata.controller_id)

    def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse | Pending:
        """CreateTopics in a cluster (Kafka's ``AdminZkClient.createTopic`` then ``DelayedCreatePartitions``): the
        replicas assigned over the live brokers and written to ZooKeeper; the answer waits (up to the request's
        timeout) until the controller has elected every new partition's leader."""
        results: list[CreatedTopic] = []
        made: list[str] = []
        for topic in new_topics(request):
            if isinstance(topic, CreatedTopic):
                results.append(topic)
            else:
                result = self._create(topic, request.validate_only is True)
                results.append(result)
                if result.error_code == ErrorCode.NONE and request.validate_only is not True:
                    made.append(topic.name)
        response = CreateTopicsResponse(tuple(results), request.request_id)
        if not made:
            return response
        timeout = request.timeout_ms
        if type(timeout) is not int or timeout <= 0:
            return response
        def answer(ready: bool) -> CreateTopicsResponse:
            if ready:
                return response
            # Kafka's DelayedCreatePartitions at its deadline: made in ZooKeeper, not yet led everywhere.
            return CreateTopicsResponse(tuple(
                CreatedTopic(r.name, ErrorCode.REQUEST_TIMED_OUT, f"topic {r.name!r} was made; its partitions had "
                             f"no leader within {timeout} ms", r.partitions)
                if r.name in made and not self._has_leaders(r.name) else r for r in results), request.request_id)
        return self._wait_for(lambda: all(self._has_leaders(name) for name in made), answer, timeout)

    def _has_leaders(self, name: str) -> bool:
        count = self.metadata.partition_count(name)
        return count > 0 and all(self.metadata.leader(name, p) is not None for p in range(count))

    def _partition_count(self, topic: str) -> int | None:
        return self.metadata.partition_count(topic) if self.metadata.has_topic(topic) else None

    def _create(self, topic: NewTopic, validate_only: bool) -> CreatedTopic:
        name, count, factor = topic.name, topic.partitions, topic.replication_factor
        catalog = self.broker.topic_catalog
        given = dict(topic.assignments) if topic.assignments else None
        if given is not None:  # Kafka's ZkAdminManager: counts come from the assignment, which must be whole
            if count != -1 or factor != -1:
                return CreatedTopic(str(name), ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor "
                                    "and replicasAssignments were set. Both cannot be used at the same time.")
            count, factor = len(given), len(next(iter(given.values())))
        if count == -1:
            count = catalog.default_partitions
        if factor == -1:
            factor = self.config.default_replication_factor
        refused = refused_new_topic(name, count, self._partition_count)
        if refused is not None:
            return refused
        try:
            configs = dict(wire_configs(topic.configs))
            catalog.defaults.overridden(name, configs)  # checked as the topic will be served
        except InvalidTopicConfig as error:
            return CreatedTopic(name, ErrorCode.INVALID_CONFIG, error.reason)
        except ValueError as error:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION if "name" in str(error) else ErrorCode.INVALID_CONFIG
            return CreatedTopic(name, code, str(error))
        return self._make(name, count, factor, configs, validate_only, given)

    def _make(self, name: str, count: int, factor: object, configs: dict[str, str],
              validate_only: bool, given: dict[int, tuple[int, ...]] | None = None) -> CreatedTopic:
        try:  # the brokers registered now, as Kafka's AdminZkClient reads them (the cache may lag behind)
            live = sorted(self.zk.live_brokers()) if self.zk is not None else []
        except Exception as error:
            return CreatedTopic(name, ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r}: ZooKeeper unreachable: {error}")
        live = live or sorted(self.metadata.brokers) or [self.broker_id]
        if given is not None:
            problem = _assignment_problem(given, live)
            if problem is not None:
                return CreatedTopic(name, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
            assignment = {p: list(replicas) for p, replicas in given.items()}
        else:
            try:
                assignment = assign_replicas(live, count, factor)  # type: ignore[arg-type]
            except AssignmentError as error:
                return CreatedTopic(name, error.error_code, str(error))
        if validate_only:
            return CreatedTopic(name, ErrorCode.NONE, None, count)
        assert self.zk is not None
        try:
            self.zk.create_topic(name, assignment, configs)
        except TopicExistsError as error:
            return CreatedTopic(name, ErrorCode.TOPIC_ALREADY_EXISTS, str(error))
        except Exception as error:  # ZooKeeper unreachable
            return CreatedTopic(name, ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r} not written to ZooKeeper: {error}")
        log.info("topic %s created: %s", name, assignment)
        return CreatedTopic(name, ErrorCode.NONE, None, count)

    def find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse | Pending:
        """The leader of the coordinator's partition of ``__transaction_state`` or ``__consumer_offsets`` (made
        with its replication factor at the first request, as Kafka makes it); COORDINATOR_NOT_AVAILABLE while it
        has none."""
        transactional = request.key_type == TRANSACTION_KEY
        topic = TRANSACTION_STATE_TOPIC if transactional else CONSUMER_OFFSETS_TOPIC
        if not self.metadata.has_topic(topic):
            partitions, configs = self.broker.internal_topic_settings(topic)
            factor = (self.config.transaction_replication_factor if transactional
                      else self.config.offsets_replication_factor)
            live = len(self.metadata.brokers)
            if live < factor and self.zk is not None:
                live = len(self.zk.live_brokers())
            if live < factor:
                return FindCoordinatorResponse(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, request_id=request.request_id,
                    error_message=f"{topic} needs {factor} live brokers ({live} are): its replication factor")
            made = self._make(topic, partitions, factor, {k: str(v) for k, v in configs.items()}, False)
            if made.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, request_id=request.request_id,
                                               error_message=made.error_message)
            return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, request_id=request.request_id,
                                           error_message=f"{topic} is being made")
        # The topic's full partition count (as made), not how many partitions the cache has heard of yet: a key
        # hashed over fewer would name another partition's leader.
        count = self.broker.topics.get(topic) or self.config_partitions(topic)
        leader = self.metadata.leader(topic, coordinator_partition(request.key, count))
        log.debug("FindCoordinator %r: %s partition %d of %d, leader %s", request.key, topic,
                  coordinator_partition(request.key, count), count, leader)
        if leader is None:
            return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, request_id=request.request_id)
        return FindCoordinatorResponse(ErrorCode.NONE, leader.broker_id, leader.host, leader.port,
                                       request.request_id, listeners=leader.listeners)

    def config_partitions(self, topic: str) -> int:
        """The partition count the internal topic ``topic`` is made with."""
        return self.broker.internal_topic_settings(topic)[0]

    # --- answers waiting for the controller ---------------------------------------------------------------------

    def _wait_for(self, ready: Callable[[], bool], answer: Callable[[bool], Any], timeout_ms: int) -> Any:
        """``answer(True)`` once ``ready()`` (tried after every LeaderAndIsr and UpdateMetadata), or
        ``answer(False)`` at the deadline (Kafka's DelayedCreatePartitions)."""
        if ready() or self._loop is None:
            return answer(True)
        pending = Pending()
        waiting = _Waiting(ready, lambda ok: pending.complete(answer(ok)))
        self._waiting.append(waiting)

        def expire() -> None:
            if waiting in self._waiting:
                self._waiting.remove(waiting)
                waiting.complete(waiting.ready())
        waiting.timer = self._loop.call_later(timeout_ms / 1000, expire)
        return pending

    def _check_waiting(self) -> None:
        for waiting in [w for w in self._waiting if w.ready()]:
            self._waiting.remove(waiting)
            if waiting.timer is not None:
                waiting.timer.cancel()
            waiting.complete(True)


@dataclass(slots=True)
class _Waiting:
    """An answer waiting for the controller's word."""

    ready: Callable[[], bool]
    complete: Callable[[bool], None]
    timer: asyncio.TimerHandle | None = None


def _assignment_problem(given: dict[int, tuple[int, ...]], live: list[int]) -> str | None:
    """Why a client's replica assignment cannot be used (Kafka's ``AdminZkClient.validateTopicCreate``): partitions
    0..n-1, each with as many distinct replicas as the first, on registered brokers."""
    if sorted(given) != list(range(len(given))):
        return f"partitions {sorted(given)} are not numbered from 0 without gaps"
    factor = len(given[0])
    for partition, replicas in sorted(given.items()):
        if not replicas:
            return f"partition {partition} has no replicas"
        if len(replicas) != factor:
            return f"partition {partition} has {len(replicas)} replicas, partition 0 has {factor}"
        if len(set(replicas)) != len(replicas):
            return f"partition {partition} names a broker twice: {list(replicas)}"
        unknown = sorted(set(replicas) - set(live))
        if unknown:
            return f"partition {partition} names brokers {unknown}, which are not registered"
    return None


class PartitionReplication:
    """The delayed produce's view of replication (:class:`~idemcore.broker.delayed.ReplicationView`) over a
    broker's partitions (the simulated cluster uses it too)."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    def high_watermark(self, partition_log: Any) -> int | None:
        partition = self._replicas.find_partition(partition_log.topic, partition_log.partition)
        if partition is None or not partition.replicated:
            return None
        return partition.high_watermark

    def isr_short(self, partition_log: Any) -> str | None:
        partition = self._replicas.find_partition(partition_log.topic, partition_log.partition)
        return None if partition is None else self._replicas.isr_short(partition)

    def not_leader(self, partition_log: Any) -> str | None:
        partition = self._replicas.find_partition(partition_log.topic, partition_log.partition)
        if partition is None or not partition.replicated or partition.is_leader:
            return None
        return (f"broker {self._replicas.broker_id} is no longer the leader of {partition.name} (broker "
                f"{partition.leader_id} is, at epoch {partition.leader_epoch})")
