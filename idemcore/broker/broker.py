"""Broker: the front of a single broker (Kafka's ``KafkaApis`` and ``KafkaServer`` on one machine): every request
through one ``handle``, dispatched to its handler, and the broker's lifecycle (start, clean close, death).

The work is done by the parts Kafka has: :class:`~idemcore.broker.log_manager.LogManager` (the log directory, its
checkpoints, retention and compaction), :class:`~idemcore.broker.topics.Topics` (the catalog the Metadata and
CreateTopics handlers use), :class:`~idemcore.broker.replica_manager.ReplicaManager` (the partitions and the one
append path for produce requests and transaction markers), :mod:`~idemcore.broker.recovery` (producer state at
start), and the coordinators (``coordinator/``, ``group/``) over their internal topics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idemcore.broker import topic_requests, txn_requests
from idemcore.broker.admin_requests import AdminSources, admin_handlers
from idemcore.broker.cluster_config import cluster_config_of
from idemcore.broker.config_requests import config_handlers, described_topic_configs
from idemcore.broker.coordinator import TransactionCoordinator
from idemcore.broker.coordinator.request_path_writers import HandledMarkers, HandledTransactionLog
from idemcore.broker.delayed import DEFAULT_RECOVERY_POINT_CHECKPOINT_MS, DelayedOperations
from idemcore.broker.fetch import fetch, list_offsets, offset_for_leader_epoch
from idemcore.broker.group import GroupCoordinator, HandledOffsetLog
from idemcore.broker.group import requests as group_requests
from idemcore.broker.group.admin_requests import group_admin_handlers
from idemcore.broker.group.consumer_group import ConsumerGroups
from idemcore.broker.group.consumer_group_requests import consumer_group_handlers
from idemcore.broker.group.membership_requests import membership_handlers
from idemcore.broker.input_checks import check_topic
from idemcore.broker.internal_topics import BackgroundTopics
from idemcore.broker.log import PartitionLog
from idemcore.broker.log_manager import RECOVERY_POINT_CHECKPOINT, LogManager
from idemcore.broker.partition import Partition
from idemcore.broker.producer_ids import BlockStoreError, ProducerIdManager, ProducerIdsExhaustedError
from idemcore.broker.purgatory import EventLoop
from idemcore.broker.replica_manager import ReplicaManager
from idemcore.broker.security import scram_credentials
from idemcore.broker.security.request_authorization import authorized_handle
from idemcore.broker.security.scram_requests import scram_credential_handlers
from idemcore.broker.topic_config import NEVER_FLUSH, TopicConfig, broker_topic_defaults
from idemcore.broker.topics import TopicExistsError, Topics
from idemcore.checks import bool_setting, int_setting
from idemcore.clock import wall_clock_ms
from idemcore.engine.table import ProducerStateTable
from idemcore.errors import IdemcoreError
from idemcore.kernels import Backend, get_backend
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    EndTxnRequest,
    FetchRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    Pending,
    ProduceRequest,
    Request,
    Response,
    TxnMarker,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from idemcore.net.replication import OffsetForLeaderEpochRequest
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import (
    CONSUMER_OFFSETS_TOPIC,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_MESSAGE_MAX_BYTES,
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    DEFAULT_RETENTION_MS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_MS,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    DEFAULT_TRANSACTION_STATE_PARTITIONS,
    MAX_PARTITIONS_PER_TOPIC,
    OFFSETS_TOPIC_SEGMENT_BYTES,
    TRANSACTION_STATE_SEGMENT_BYTES,
    TRANSACTION_STATE_TOPIC,
)

if TYPE_CHECKING:
    from idemcore.broker.cluster_member import ClusterMember
    from idemcore.broker.config import BrokerConfig
    from idemcore.broker.coordinator_leadership import CoordinatorLeadership
    from idemcore.broker.security.authorizer import AclAuthorizer
    from idemcore.broker.security.session import Session

log = logging.getLogger(__name__)

__all__ = ["Broker", "TopicExistsError"]

#: While the broker runs on a loop, how long after an EndTxn answer its markers and Complete* record are written
#: (unless a coordinator request comes first, which writes them at once). Not at once: the loop would hold the CPU
#: the client needs to read the answer (confluent-kafka's next transaction began ~75 us later on 2 cores; 0.5 ms
#: later, ~15 us).
TXN_COMPLETION_DELAY_S = 0.0005


class Broker:
    """A single broker leading every partition of ``topics`` (``{"name": partition_count}``).

    Every request goes through :meth:`handle`. ``data_dir``: a Kafka log
    directory: each partition in ``<topic>-<partition>/`` as Kafka's segments
    and indexes (``broker.log``; acks=all fsync'd before its answer: in place,
    or while running on a loop by the flusher thread, one fsync for every request
    waiting on a partition; rolled at ``segment_bytes`` / ``segment_ms``, an
    offset-index entry every ``index_interval_bytes``); on start, producer state is rebuilt by
    replaying the logs with REPLICATION origin. ``producer_ids``: the id allocator; by default one over
    a SQLite store in ``data_dir`` (or in memory). ``fsync=False`` keeps the
    writes of acks=all requests in the OS page cache too: they survive a crash of
    this process, not of the machine (the logs are still fsync'd at start and
    close, before their recovery points are written). ``message_max_bytes``:
    the largest batch accepted (Kafka's ``message.max.bytes``); a larger one is
    answered MESSAGE_TOO_LARGE. ``retention_ms`` / ``retention_bytes``:
    Kafka's ``retention.ms`` (7 days) / ``retention.bytes`` (-1: none), applied
    by :meth:`delete_old_segments`. ``topic_configs``: per topic, Kafka's
    topic configs over those defaults (``cleanup.policy`` ``compact``:
    :meth:`clean_logs` compacts it, and records without a key are refused;
    :meth:`set_topic_configs` changes them later). ``settings``: the
    :class:`~idemcore.broker.config.BrokerConfig` the other arguments came
    from; it gives the defaults of the topic configs no argument sets
    (``log.cleanup.policy``, ``min.insync.replicas``, ...) and what
    DescribeConfigs reports of the broker. ``flush_messages`` / ``flush_ms``:
    Kafka's ``log.flush.interval.messages`` / ``.ms`` (a flush once that many
    records or ms are past the last one); ``flush_scheduler_interval_ms``:
    ``log.flush.scheduler.interval.ms``, how often ``flush_ms`` is checked;
    ``recovery_point_checkpoint_ms``: ``log.flush.offset.checkpoint.interval.ms``,
    how often the flushed ends are written to ``recovery-point-offset-checkpoint``
    (these act while the broker runs on a loop). ``clock``: the time in ms (wall
    clock by default; a simulation passes its virtual one). ``authorizer``: who may do what (Kafka's ACLs); by
    default the one ``settings`` name (``authorizer.class.name``), its ACLs in ZooKeeper in a cluster, else in
    ``data_dir``; none without settings (the ACL requests are then answered SECURITY_DISABLED).
    """

    def __init__(
        self,
        topics: Mapping[str, int],
        data_dir: str | Path | None = None,
        broker_id: int = 0,
        *,
        producer_ids: ProducerIdManager | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        backend: str | Backend | None = None,
        fsync: bool = True,
        message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        segment_ms: int = DEFAULT_SEGMENT_MS,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        clock: Callable[[], int] | None = None,
        retention_ms: int = DEFAULT_RETENTION_MS,
        retention_bytes: int = -1,
        topic_configs: Mapping[str, Mapping[str, Any]] | None = None,
        transaction_state_partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS,
        transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
        offsets_topic_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS,
        auto_create_topics: bool = True,
        default_partitions: int = 1,
        settings: BrokerConfig | None = None,
        flush_messages: int = NEVER_FLUSH,
        flush_ms: int = NEVER_FLUSH,
        flush_scheduler_interval_ms: int = NEVER_FLUSH,
        recovery_point_checkpoint_ms: int = DEFAULT_RECOVERY_POINT_CHECKPOINT_MS,
        authorizer: AclAuthorizer | None = None,
    ) -> None:
        if not isinstance(topics, Mapping):
            raise TypeError(f"topics must map each topic name to its partition count, got {topics!r:.80}")
        bool_setting("auto_create_topics", auto_create_topics)
        int_setting("default_partitions", default_partitions, 1, MAX_PARTITIONS_PER_TOPIC)
        if data_dir is not None and not str(data_dir):
            raise ValueError("data_dir is an empty path (it would mean the current directory); name a directory")
        bool_setting("fsync", fsync)
        int_setting("producer_id_expiration_ms", producer_id_expiration_ms, 1)
        int_setting("message_max_bytes", message_max_bytes, 1)
        self.message_max_bytes = message_max_bytes
        self.broker_id = broker_id
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.backend = get_backend(backend)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.clock: Callable[[], int] = clock if clock is not None else wall_clock_ms
        now = self.clock() if callable(self.clock) else None
        if type(now) is not int:  # e.g. time.time: seconds as a float, where every timeout counts milliseconds
            raise TypeError(f"clock must be a callable returning the time in ms as an int, got {clock!r:.80}"
                            + (f" returning {now!r:.40}" if callable(clock) else ""))
        # Bad settings are refused before the directory is touched.
        defaults = TopicConfig(retention_ms=retention_ms, retention_bytes=retention_bytes,
                               segment_bytes=segment_bytes, segment_ms=segment_ms,
                               index_interval_bytes=index_interval_bytes, max_message_bytes=message_max_bytes,
                               flush_messages=flush_messages, flush_ms=flush_ms)
        if settings is not None:
            defaults = defaults.with_defaults(broker_topic_defaults(settings))
        #: The broker's settings by Kafka's names, when it was built from them (DescribeConfigs reports them).
        self.settings = settings
        #: This broker's part in a cluster (``zookeeper.connect`` set), None for a broker running alone.
        self.cluster: ClusterMember | None = None
        #: Who may do what (Kafka's ACLs; ``authorizer.class.name``), None: everyone may do anything.
        self.authorizer: AclAuthorizer | None = None
        self._own_authorizer = False
        #: In a cluster, the coordinators following their partitions' leadership (None for a broker running alone).
        self.coordinator_leadership: CoordinatorLeadership | None = None
        #: The topics served, their partition counts and settings (the handlers' catalog).
        self.topic_catalog = Topics(topics, defaults, topic_configs, self.data_dir, auto_create=auto_create_topics,
                                    default_partitions=default_partitions, broker_id=broker_id)
        check_topic(TRANSACTION_STATE_TOPIC, transaction_state_partitions)
        int_setting("transaction_max_timeout_ms", transaction_max_timeout_ms, 1)
        self.transaction_state_partitions = transaction_state_partitions
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self._txn_coordinator: TransactionCoordinator | None = None
        self._txn_completion_schedule: Callable[[Callable[[], None]], object] | None = None
        check_topic(CONSUMER_OFFSETS_TOPIC, offsets_topic_partitions)
        #: Kafka's ``offsets.topic.num.partitions``: used when ``__consumer_offsets`` is made (a data_dir that has
        #: it keeps the count it was made with).
        self.offsets_topic_partitions = offsets_topic_partitions
        self._group_coordinator: GroupCoordinator | None = None
        self._closed = False
        #: Fetches and acks=all produces that wait, and the flusher (only while running on a loop). Its settings
        #: are checked here, before the directory is touched.
        self.delayed = DelayedOperations(
            lambda topic, partition: self.replicas.find_partition(topic, partition),
            lambda r: fetch(self.replicas.find_partition, r, self.replicas.follower_fetched), self.clock,
            checkpoint_path=None if self.data_dir is None else self.data_dir / RECOVERY_POINT_CHECKPOINT,
            checkpoint_entries=lambda: self.log_manager.recovery_points(),
            scheduler_interval_ms=flush_scheduler_interval_ms, checkpoint_interval_ms=recovery_point_checkpoint_ms,
            on_log_failure=lambda why: self.log_manager.dir_failed(why))
        self.log_manager = LogManager(self.data_dir, fsync, self.clock)
        self.log_manager.on_offline.append(self.delayed.log_dir_failed)
        self.replicas = ReplicaManager(self.log_manager, self.topic_catalog.configs, self.backend, self.clock,
                                       broker_id)
        self.replicas.on_marker = self._marker_written
        self.replicas.delayed = self.delayed
        self.replicas.on_open = self._partition_opened
        self._background_topics = BackgroundTopics(
            self.topic_catalog.check_new, self.log_manager.new_log,
            lambda name, partitions, configs, logs: self.topic_catalog.create(name, partitions, configs,
                                                                              internal=True, made=logs),
            self.delayed.in_background)
        self.topic_catalog.open_partitions = self.replicas.open_topic
        if settings is not None:
            cluster_config = cluster_config_of(settings)
            if cluster_config is not None:
                from idemcore.broker.cluster_member import ClusterMember  # imports kazoo: only for a cluster

                self.cluster = ClusterMember(self, cluster_config)
        #: What the admin requests read and move.
        self.admin_sources = AdminSources(self.replicas, self.topic_catalog, broker_id,
                                          lambda: self._txn_coordinator, self.log_manager)
        try:
            # Imported here: the ACL messages import the security model, whose package import runs this module.
            from idemcore.broker.security.acl_requests import acl_handlers, authorizer_of

            # Before the logs are replayed: a damaged ACL file or a bad authorizer setting is refused at once.
            self.authorizer, self._own_authorizer = authorizer_of(self, authorizer)
            self.producer_ids = producer_ids if producer_ids is not None else \
                self.log_manager.own_producer_ids(broker_id, None if self.cluster is None
                                                  else self.cluster.config.producer_id_store())
            self.topic_catalog.load_created()
            for name in sorted(self.topic_catalog.counts):
                for partition in range(self.topic_catalog.counts[name]):
                    # In a cluster this broker holds only the replicas assigned to it: those it has files of.
                    if self.cluster is None or self.log_manager.has_log(name, partition):
                        self.replicas.open_partition(name, partition, self.topic_catalog.configs[name])
            replayed = self.replicas.start(self.producer_ids, now_ms=self.clock(),
                                           expiration_ms=producer_id_expiration_ms)
            if self.cluster is not None:
                marks = self.log_manager.high_watermarks()
                for opened in self.replicas.partitions:
                    opened.replicated = True  # no role until the controller's LeaderAndIsr
                    opened.restore_high_watermark(marks.get((opened.topic, opened.partition), 0))
            log.info("broker %d recovered %s: %d batches replayed after the snapshots", broker_id, self.data_dir,
                     replayed)
            #: Users' SCRAM credentials: ZooKeeper in a cluster, a file in the log dir alone.
            self.scram_credentials = scram_credentials.store_for(self.data_dir, self.cluster, fsync)
            self._handlers: dict[type, Callable] = {
                ProduceRequest: self.replicas.produce,
                InitProducerIdRequest: self._init_producer_id,
                WriteTxnMarkersRequest: self.replicas.write_txn_markers,
                FindCoordinatorRequest: self._find_coordinator,
                AddPartitionsToTxnRequest: lambda r: txn_requests.add_partitions_to_txn(self.txn_coordinator, r),
                AddOffsetsToTxnRequest: self._add_offsets_to_txn,
                EndTxnRequest: lambda r: txn_requests.end_txn(self.txn_coordinator, r),
                FetchRequest: self.delayed.fetch,
                ListOffsetsRequest: lambda r: list_offsets(self.replicas.find_partition, r),
                # Consumers validate their positions with it after a reconnect (KIP-320), a broker alone too.
                OffsetForLeaderEpochRequest: lambda r: offset_for_leader_epoch(self.replicas.find_partition, r),
                OffsetCommitRequest: lambda r: group_requests.offset_commit(self.group_coordinator, r),
                TxnOffsetCommitRequest: lambda r: group_requests.txn_offset_commit(self.group_coordinator, r),
                OffsetFetchRequest: lambda r: group_requests.offset_fetch(self.group_coordinator, r),
                MetadataRequest: lambda r: topic_requests.metadata(self.topic_catalog, r),
                CreateTopicsRequest: lambda r: topic_requests.create_topics(
                    self.topic_catalog, r, lambda config: described_topic_configs(self, config)),
                **admin_handlers(self.admin_sources),
                **config_handlers(self),
                **membership_handlers(lambda: self.group_coordinator),
                # None before __consumer_offsets exists: no groups, and an admin's look does not make it.
                **group_admin_handlers(lambda: self._group_coordinator),
                **consumer_group_handlers(lambda: self.group_coordinator, lambda: self.consumer_groups),
                **acl_handlers(lambda: self.authorizer),
                **scram_credential_handlers(lambda: self.scram_credentials),
            }
            if self.cluster is not None:
                from idemcore.broker.coordinator_leadership import CoordinatorLeadership

                self._handlers.update(self.cluster.handlers())
                self.coordinator_leadership = CoordinatorLeadership(self, self.cluster)
            self.log_manager.started()
            self.log_manager.warn_unserved()
            if CONSUMER_OFFSETS_TOPIC in self.topic_catalog:  # before the coordinator below re-sends markers there
                self._start_group_coordinator()
            if TRANSACTION_STATE_TOPIC in self.topic_catalog:  # finish what the last run decided (Prepare* markers)
                self._start_txn_coordinator()
        except BaseException:
            self.close()  # release the logs and the directory's lock
            raise

    # ------------------------------------------------------------ the one request path

    def handle(self, request: Request) -> Response | Pending | None:
        """Answer one request (every transport calls this); None for a produce request with acks=0; a
        :class:`Pending` for an answer given later (JoinGroup, SyncGroup; while running on a loop also a Fetch
        waiting for data and an acks=all Produce waiting for its fsync)."""
        self._check_open()
        handler = self._handlers.get(type(request))
        if handler is None:
            raise TypeError(f"broker {self.broker_id} cannot handle a {type(request).__name__}")
        return handler(request)

    def handle_from(self, session: Session, request: Request) -> Response | Pending | None:
        """:meth:`handle` for a request from ``session``: with an authorizer, checked first as Kafka's KafkaApis
        checks it (the parts refused answered with Kafka's authorization errors; RequestRefused when the
        connection is to be closed)."""
        authorizer = getattr(self, "authorizer", None)
        if authorizer is None:
            return self.handle(request)
        return authorized_handle(self.handle, authorizer, session, request, partitions_of=self._partition_count,
                                 auto_create_topics=self.auto_create_topics)

    def _partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has as this broker's metadata knows it; None for a topic it does not."""
        if self.cluster is not None:
            return self.cluster.metadata.partition_count(topic) if self.cluster.metadata.has_topic(topic) else None
        return self.topic_catalog.get(topic)

    def serve(self, handlers: Mapping[type, Callable[[Any], Any]]) -> None:
        """Answer the request types in ``handlers`` with them from now on (the simulated cluster's member of
        :mod:`idemcore.sim.cluster` answers LeaderAndIsr and UpdateMetadata this way, as ClusterMember does)."""
        self._check_open()
        self._handlers.update(handlers)

    # ------------------------------------------------------------ topics and partitions

    @property
    def topics(self) -> dict[str, int]:
        """Each served topic's partition count."""
        return self.topic_catalog.counts

    @property
    def topic_configs(self) -> dict[str, TopicConfig]:
        """Each served topic's settings (Kafka's topic configs over the broker's defaults)."""
        return self.topic_catalog.configs

    @property
    def topic_configs_default(self) -> TopicConfig:
        return self.topic_catalog.defaults

    @property
    def auto_create_topics(self) -> bool:
        return self.topic_catalog.auto_create

    @property
    def default_partitions(self) -> int:
        return self.topic_catalog.default_partitions

    @property
    def state(self) -> ProducerStateTable:
        """The producer state of every partition (rows by broker-wide partition number)."""
        return self.replicas.state

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, Any] | None = None) -> None:
        """Add a topic of ``partitions`` partitions with Kafka's topic ``configs`` (as ``topic_configs``), served
        from now on and after a restart (recorded in ``topics.json`` once its partitions exist).
        TopicExistsError when the broker has it; ValueError for a bad name, count or setting."""
        self._check_open()
        self.topic_catalog.create(name, partitions, configs)

    def set_topic_configs(self, name: str, overrides: Mapping[str, Any], validate_only: bool = False) -> TopicConfig:
        """Replace the configs set on topic ``name`` by ``overrides`` (Kafka's names; the others take the broker's
        defaults), as Kafka's AlterConfigs does: checked, recorded in ``topics.json`` (atomically), then in force on
        its live partitions (segment settings at once, retention and cleanup at the next housekeeping). Returns
        the topic's settings; ``validate_only``: only check. KeyError for a topic the broker lacks; ValueError
        (:class:`~idemcore.broker.topic_config.InvalidTopicConfig`) for a bad name or value."""
        self._check_open()
        config = self.topic_catalog.set_configs(name, overrides, validate_only)
        if not validate_only:
            for partition in self.replicas.partitions:
                if partition.topic == name:
                    for attribute, value in config.log_settings().items():
                        setattr(partition.log, attribute, value)
        return config

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The log of one partition."""
        found = self.replicas.find_partition(topic, partition)
        if found is None:
            raise IdemcoreError(f"broker {self.broker_id} has no partition {topic}-{partition}")
        return found.log

    def logs(self) -> list[PartitionLog]:
        return [partition.log for partition in self.replicas.partitions]

    def _serves(self, topic: str, partition: int) -> bool:
        return self.replicas.find_partition(topic, partition) is not None

    def _check_open(self) -> None:
        if self._closed:
            raise IdemcoreError(f"broker {self.broker_id} is closed")

    # ------------------------------------------------------------ coordinators

    @property
    def started_txn_coordinator(self) -> TransactionCoordinator | None:
        """The transaction coordinator if it has started; unlike :attr:`txn_coordinator` a read that never makes
        ``__transaction_state``."""
        return self._txn_coordinator

    @property
    def txn_coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator (Kafka's handlers: ``init_producer_id``, ``add_partitions_to_txn``,
        ``end_txn``, ...), its state in the compacted ``__transaction_state`` topic, made at first use with
        ``transaction_state_partitions`` partitions (Kafka makes it at the first FindCoordinator)."""
        self._check_open()
        if self._txn_coordinator is None:
            self._internal_topic(TRANSACTION_STATE_TOPIC)
            self._start_txn_coordinator()
        assert self._txn_coordinator is not None
        return self._txn_coordinator

    def internal_topic_settings(self, name: str) -> tuple[int, dict[str, Any]]:
        """The partition count and topic configs the internal topic ``name`` is made with."""
        if name == TRANSACTION_STATE_TOPIC:
            configs: dict[str, Any] = {"cleanup.policy": "compact", "segment.bytes": TRANSACTION_STATE_SEGMENT_BYTES}
            if self.settings is not None and self.cluster is not None:  # Kafka's TransactionLog.enforcedMinIsr
                configs["min.insync.replicas"] = self.settings.values["transaction.state.log.min.isr"]
            return self.transaction_state_partitions, configs
        return self.offsets_topic_partitions, {"cleanup.policy": "compact",
                                               "segment.bytes": OFFSETS_TOPIC_SEGMENT_BYTES}

    def _internal_topic(self, name: str) -> None:
        """Make the internal topic ``name`` now unless the broker has it (one being made off the loop is waited
        for rather than made twice)."""
        self._background_topics.wait(name)
        if name not in self.topics:
            partitions, configs = self.internal_topic_settings(name)
            self.topic_catalog.create(name, partitions, configs, internal=True)

    def _start_txn_coordinator(self) -> None:
        """Make the coordinator over this broker's request path and load ``__transaction_state`` into it."""
        if self.coordinator_leadership is not None:  # made already; partitions load as leadership comes
            return
        partitions = self.topics[TRANSACTION_STATE_TOPIC]
        coordinator = TransactionCoordinator(
            HandledTransactionLog(self.handle, self.clock), HandledMarkers(self.handle),
            self.producer_ids.generate_producer_id, self.clock,
            transaction_max_timeout_ms=self.transaction_max_timeout_ms, transaction_state_partitions=partitions,
            offsets_partitions=self.topics.get(CONSUMER_OFFSETS_TOPIC, self.offsets_topic_partitions),
            partition_exists=self._serves)
        records = [(partition, key, value) for partition in range(partitions)
                   for _, key, value, _ in self.log(TRANSACTION_STATE_TOPIC, partition).records()
                   if key is not None]
        self._txn_coordinator = coordinator
        # One broker leads every partition for its whole life: the coordinator epoch never needs to fence another.
        coordinator.load(records, coordinator_epoch=0)
        coordinator.complete_later(self._txn_completion_schedule)

    def complete_transactions_later(self, schedule: Callable[[Callable[[], None]], object] | None) -> None:
        """Answer EndTxn once its Prepare* record is durable and write its markers and Complete* record in the call
        ``schedule`` is given, as Kafka's coordinator does on its marker thread (:meth:`start_background` runs it
        TXN_COMPLETION_DELAY_S after the answer); None: before the answer again, and what is owed is written now
        (:meth:`TransactionCoordinator.complete_later`)."""
        self._txn_completion_schedule = schedule
        if self._txn_coordinator is not None and not self._closed:
            self._txn_coordinator.complete_later(schedule)

    @property
    def group_coordinator(self) -> GroupCoordinator:
        """The group coordinator (``offset_commit``, ``txn_offset_commit``, ``offset_fetch``), its state in the
        compacted ``__consumer_offsets`` topic, made at first use with ``offsets_topic_partitions`` partitions
        (Kafka makes it at the first FindCoordinator for a group)."""
        self._check_open()
        if self._group_coordinator is None:
            self._internal_topic(CONSUMER_OFFSETS_TOPIC)
            self._start_group_coordinator()
        assert self._group_coordinator is not None
        return self._group_coordinator

    def group_coordinator_settings(self) -> dict[str, Any]:
        """The group coordinator's settings (``group.*``, ``offsets.retention.*``...) from the broker's
        ``settings``; none (Kafka's defaults) for a broker made without them."""
        return {} if self.settings is None else self.settings.group_coordinator_kwargs()

    def consumer_groups_settings(self) -> dict[str, Any]:
        """The KIP-848 groups' settings (``group.consumer.*``) from the broker's ``settings``; none (Kafka's
        defaults) for a broker made without them."""
        return {} if self.settings is None else self.settings.consumer_groups_kwargs()

    @property
    def consumer_groups(self) -> ConsumerGroups:
        """The consumer-protocol groups (KIP-848), held by the group coordinator (alone or in a cluster), which
        lists, deletes, expires and unloads them with its classic groups; made at the first use."""
        coordinator = self.group_coordinator
        if coordinator.consumer_groups is None:
            coordinator.consumer_groups = ConsumerGroups(
                self.clock, lambda topic: self.topic_catalog.counts.get(topic),
                topic_names=lambda: list(self.topic_catalog.counts), **self.consumer_groups_settings())
        return coordinator.consumer_groups

    def _start_group_coordinator(self) -> None:
        """Make the group coordinator over this broker's request path and load every ``__consumer_offsets``
        partition into it (this broker leads them all)."""
        if self.coordinator_leadership is not None:  # made already; partitions load as leadership comes
            return
        partitions = self.topics[CONSUMER_OFFSETS_TOPIC]
        coordinator = GroupCoordinator(HandledOffsetLog(self.handle, self.clock), self.clock,
                                       offsets_partitions=partitions,
                                       partition_exists=self._serves, **self.group_coordinator_settings())
        for partition in range(partitions):
            coordinator.load(partition, self.log(CONSUMER_OFFSETS_TOPIC, partition).batches, skip_damaged=True)
        self._group_coordinator = coordinator

    def _partition_opened(self, partition: Partition, config: TopicConfig) -> None:
        """A partition is served: its appends wake the delayed operations watching it, and the flusher tracks it."""
        partition.log.on_append = self.delayed.appended
        self.delayed.track(partition.log, config)

    def _marker_written(self, partition: Partition, marker: TxnMarker) -> None:
        """A marker landed on a partition: on ``__consumer_offsets`` its pending offsets commit or go (not loaded
        yet: the load replays this marker)."""
        if partition.topic == CONSUMER_OFFSETS_TOPIC and self._group_coordinator is not None:
            self._group_coordinator.complete_transaction(partition.partition, marker.producer_id, marker.committed)

    # ------------------------------------------------------------ handlers

    def _init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        """A fresh producer id at epoch 0 for an idempotent producer; the transaction coordinator's answer for a
        transactional id, or for an idempotent producer's epoch bump (KIP-360: its current id and epoch)."""
        if request.transactional_id is not None or not (type(request.producer_id) is int and request.producer_id == -1):
            return txn_requests.init_producer_id(self.txn_coordinator, request)
        try:
            return InitProducerIdResponse(ErrorCode.NONE, self.producer_ids.generate_producer_id(), 0,
                                          request_id=request.request_id)
        except (ProducerIdsExhaustedError, BlockStoreError, OSError) as exc:  # OSError: the floor file's write
            log.error("no producer id: %s", exc)
            return InitProducerIdResponse(ErrorCode.UNKNOWN_SERVER_ERROR, request_id=request.request_id,
                                          error_message=str(exc))

    def _find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse | Pending:
        """This broker coordinates every group and transactional id; the coordinator's internal topic is made
        at the first request for it, as Kafka makes it."""
        if type(request.key) is not str or type(request.key_type) is not int \
                or request.key_type not in (GROUP_KEY, TRANSACTION_KEY):
            return FindCoordinatorResponse(ErrorCode.INVALID_REQUEST, request_id=request.request_id,
                                           error_message=f"key {request.key!r:.80} of key type {request.key_type!r}")
        topic = TRANSACTION_STATE_TOPIC if request.key_type == TRANSACTION_KEY else CONSUMER_OFFSETS_TOPIC
        if topic not in self.topics and self.delayed.running:  # made off the loop; answered once it is served
            return self._find_coordinator_later(request, topic)
        if request.key_type == TRANSACTION_KEY:
            self.txn_coordinator  # noqa: B018  # made and loaded now, not at the producer's first transaction
        else:
            self.group_coordinator  # noqa: B018  # likewise, at a consumer's or producer's first group request
        return FindCoordinatorResponse(ErrorCode.NONE, self.broker_id, request_id=request.request_id)

    def _find_coordinator_later(self, request: FindCoordinatorRequest, topic: str) -> Pending:
        """FindCoordinator while ``topic`` is made on the flusher thread: the answer once it is served (a failure
        is COORDINATOR_NOT_AVAILABLE, which clients retry)."""
        pending = Pending()

        def ready(error: BaseException | None) -> None:
            try:
                if error is not None:
                    raise error
                answer = self._find_coordinator(request)
                assert isinstance(answer, FindCoordinatorResponse)  # the topic is served now
            except Exception as exc:  # answered, never raised into the flusher's callbacks
                log.error("could not make %s: %s", topic, exc)
                answer = FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, request_id=request.request_id,
                                                 error_message=f"could not make {topic}: {exc}")
            pending.complete(answer)
        try:
            self._background_topics.make(topic, *self.internal_topic_settings(topic), ready)
        except Exception as exc:  # refused before anything was made (its directories left without topics.json)
            ready(exc)
        return pending

    def _add_offsets_to_txn(self, request: AddOffsetsToTxnRequest) -> Response:
        """AddOffsetsToTxn, with ``__consumer_offsets`` made first: the transaction's markers must find its
        partition (markers to a partition the broker lacks are retried forever)."""
        self.group_coordinator  # noqa: B018
        return txn_requests.add_offsets_to_txn(self.txn_coordinator, request)

    # ------------------------------------------------------------ housekeeping and lifecycle

    def run_housekeeping(self, now_ms: int | None = None) -> None:
        """What Kafka's brokers run on timers: abort timed-out transactions, expire idle transactional ids and
        retry unfinished markers (at the broker's clock), apply retention and compaction (at ``now_ms``, default
        the clock). The server calls it periodically; a program using the broker in process when it likes."""
        if self._txn_coordinator is not None:
            self._txn_coordinator.abort_timed_out_transactions()
            self._txn_coordinator.expire_transactional_ids()
            self._txn_coordinator.retry_pending_markers()
        if self._group_coordinator is not None:  # session and rebalance timeouts (classic and KIP-848 groups)
            self._group_coordinator.expire(self.clock())
        self.delete_old_segments(now_ms)
        self.clean_logs(now_ms)

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention (each topic's ``retention.ms``, ``retention.bytes``) at ``now_ms`` (default: the clock):
        delete the whole segments that are due and advance their log start offsets, recorded in
        ``log-start-offset-checkpoint`` before any file goes (Kafka's ``deleteOldSegments``). Producer state is
        kept (producers whose batches are gone still have their sequence until they expire). Returns how many
        partitions moved their start."""
        self._check_open()
        return self.log_manager.delete_old_segments(self.topic_configs, self.clock() if now_ms is None else now_ms)

    def clean_logs(self, now_ms: int | None = None) -> int:
        """Compact the partitions of topics whose ``cleanup.policy`` includes ``compact`` (Kafka's log cleaner;
        :func:`~idemcore.broker.log.cleaner.clean_log`) at ``now_ms`` (default: the clock), after recording in
        ``cleaner-offset-checkpoint`` how far each will be cleaned. Returns the bytes removed."""
        self._check_open()
        return self.log_manager.clean_logs(self.topic_configs, self.clock() if now_ms is None else now_ms)

    def increment_log_start_offsets(self, starts: Mapping[tuple[str, int], int]) -> None:
        """Raise log start offsets (DeleteRecords): :meth:`LogManager.increment_log_start_offsets`."""
        self._check_open()
        self.log_manager.increment_log_start_offsets(starts)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer_id_expiration_ms`` with no open transaction; return how many."""
        return self.replicas.remove_expired_producers(now_ms, self.producer_id_expiration_ms)

    def start_background(self, loop: EventLoop) -> None:
        """Run on ``loop`` from now on (called on its thread; the TCP server calls it with its asyncio loop): fetches
        and acks=all produces wait in the broker's purgatories, a flusher thread fsyncs, rolls and writes the
        recovery points, internal topics are made off the loop (:mod:`.delayed`)."""
        self._check_open()
        self.delayed.start(loop, [(p.log, self.topic_configs[p.topic]) for p in self.replicas.partitions],
                           self.log_manager.recovery_points())
        # EndTxn is answered once its Prepare* is durable; its markers are written just after (their appends wake
        # the fetches waiting for them).
        self.complete_transactions_later(lambda complete: loop.call_later(TXN_COMPLETION_DELAY_S, complete))

    def stop_background(self) -> None:
        """Stop running on a loop (on its thread): the markers answered EndTxn requests owe are written, what is
        queued is flushed and what waits is answered; requests are answered in place again."""
        self.complete_transactions_later(None)
        self.delayed.stop()

    def close(self) -> None:
        """Write what answered EndTxn requests still owe, sync and close the logs, write the clean-shutdown
        checkpoint (none when the log directory failed: closed as by :meth:`kill`), release the directory; then
        every request raises."""
        if self._txn_coordinator is not None and not self._closed and self.log_manager.offline is None:
            self._txn_coordinator.complete_queued()
        self._closed = True
        try:
            self.delayed.stop()
            self.log_manager.close(self.replicas.write_snapshot)
        finally:
            self._release()

    def _release(self) -> None:
        """Close the id store and the authorizer it made, then release the log directory (written ends, lock)."""
        ids = getattr(self, "producer_ids", None)  # absent when the constructor failed before making it
        close_store = getattr(getattr(ids, "store", None), "close", None)
        credentials = getattr(self, "scram_credentials", None)
        if credentials is not None:
            credentials.close()
        try:
            if self._own_authorizer and self.authorizer is not None:
                self._own_authorizer = False
                self.authorizer.close()
            if close_store is not None:
                close_store()
        finally:
            self.log_manager.release()

    def kill(self) -> None:
        """Stop as a killed process does (for simulations and fault tests): the files are closed without a
        flush and without the shutdown checkpoint, and the directory's lock is released; nothing else."""
        self._closed = True
        self.delayed.abandon()
        self.log_manager.kill()
        self._release()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
