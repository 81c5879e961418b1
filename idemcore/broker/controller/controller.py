"""Kafka's ZooKeeper-era controller (``KafkaController`` with its partition and replica state machines): one
broker, elected through ``/controller``, decides every partition's leader and ISR, writes them to ZooKeeper
fenced by its epoch, and tells the brokers (LeaderAndIsr to a partition's replicas, UpdateMetadata to all).

Everything happens on one event thread (Kafka's ``ControllerEventManager``): ZooKeeper watches, session
changes, ``elect_leaders`` calls and the periodic leader rebalance only enqueue an event; the thread handles
events one at a time in order, so the controller's view of the cluster (its context) needs no lock. Requests go
out through per-broker sender threads (:mod:`.channel_manager`).

What triggers what:
- elected: read brokers, topics, partition states; UpdateMetadata (everything) to every live broker;
  LeaderAndIsr to every live replica; partitions without state or without a live leader are elected.
- a topic (or partition) appears: its partitions come online: leader = first live replica, ISR = the live
  replicas, leader epoch 0.
- a broker's registration goes: partitions it led elect a new leader (:func:`.election.offline_leader`); it
  leaves every ISR (but stays as the last member, see :func:`.election.without_replica`); each change bumps the
  leader epoch. A partition no replica may lead gets leader -1 until one returns.
- a broker registers (or registers again with a new epoch): UpdateMetadata, LeaderAndIsr for its replicas, and
  offline partitions are elected again.
- a leader changed an ISR (``/isr_change_notification``): the states are read again and sent as UpdateMetadata.

When ZooKeeper fails an event (a connection loss during a state write, whose outcome is then unknown), what was
written before the failure is still sent, and a recovery runs a moment later (backing off, a bounded number of
times): the watch events that failed are handled again, the states of partitions whose write may or may not have
landed are read back and announced, partitions without a live leader are elected and dead replicas leave the
ISRs. Kafka's controller loses no election either: its ``ZooKeeperClient`` retries through a connection loss and
``PartitionStateMachine.electLeaderForPartitions`` retries the partitions whose write failed. A lost session
ends the controller's work at once: the ``Expire`` handling runs before any event still queued (Kafka's
``beforeInitializingSession`` clears the queue for it), and no state write starts after the loss is known.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from idemcore.broker.controller import election
from idemcore.broker.controller.channel_manager import ChannelFactory, ControllerChannelManager
from idemcore.broker.controller.config import ControllerConfig
from idemcore.broker.controller.zk_client import ControllerMovedError, ZkClient, ZkError
from idemcore.broker.controller.zk_data import LeaderIsr
from idemcore.errors import one_line
from idemcore.net.replication import (
    BrokerEndpoint,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    UpdateMetadataPartition,
    UpdateMetadataRequest,
)
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: ElectLeaders' election types (Kafka's ``ElectionType``).
PREFERRED = 0
UNCLEAN = 1
#: One ElectLeaders answer per partition: (topic, partition, error code, message).
ElectionResult = tuple[str, int, int, str | None]
_MAX_STATE_WRITE_ATTEMPTS = 10
#: Recoveries after a failed event: at most this many in a row, the delay doubling up to the cap.
_MAX_RECOVERY_ATTEMPTS = 10
_MAX_RECOVERY_DELAY_S = 5.0
#: Events that re-read ZooKeeper and reconcile the context with it: safe to handle again after a failure.
_RECONCILING = frozenset({"Startup", "ControllerChange", "Reelect", "BrokerChange", "TopicChange",
                          "IsrChangeNotification"})


class _Batch:
    """What one event tells the brokers (Kafka's ``ControllerBrokerRequestBatch``): partitions to send as
    LeaderAndIsr and UpdateMetadata per broker, built into requests from the context when sent."""

    def __init__(self) -> None:
        self.leader_and_isr: dict[int, dict[TopicPartition, bool]] = {}
        self.update_metadata: dict[int, set[TopicPartition]] = {}

    def add_leader_and_isr(self, brokers: Iterable[int], partition: TopicPartition, is_new: bool = False) -> None:
        for broker in brokers:
            self.leader_and_isr.setdefault(broker, {})[partition] = is_new

    def add_update_metadata(self, brokers: Iterable[int], partitions: Iterable[TopicPartition]) -> None:
        chosen = set(partitions)
        for broker in brokers:
            self.update_metadata.setdefault(broker, set()).update(chosen)


class Controller:
    """The controller candidate of broker ``broker_id`` on ZooKeeper session ``zk``.

    ``channel_factory(endpoint)`` opens a blocking channel to a broker. ``unclean_leader_election(topic)``
    says whether a topic may elect a replica outside the ISR (default: the topic's own
    ``unclean.leader.election.enable`` in ZooKeeper, else ``config``'s). ``auto_leader_rebalance`` overrides
    ``config.auto_leader_rebalance_enable``."""

    def __init__(self, zk: ZkClient, broker_id: int, channel_factory: ChannelFactory, *,
                 unclean_leader_election: Callable[[str], bool] | None = None,
                 auto_leader_rebalance: bool | None = None, config: ControllerConfig | None = None) -> None:
        config = config or ControllerConfig()
        if auto_leader_rebalance is not None:
            config = dataclasses.replace(config, auto_leader_rebalance_enable=auto_leader_rebalance)
        self.config = config
        self.zk = zk
        self.broker_id = broker_id
        self._unclean = unclean_leader_election or self._topic_allows_unclean
        self._channels = ControllerChannelManager(channel_factory, broker_id, config.retry_backoff_ms / 1000)
        self._events: queue.Queue[tuple[str, Callable[[], None]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"controller-event-thread-{broker_id}", daemon=True)
        self._started = False
        # The context: touched only on the event thread.
        self._active = False
        self.active_controller_id: int | None = None
        self.epoch = 0
        self._epoch_zk_version = -1
        self._brokers: dict[int, tuple[BrokerEndpoint, int]] = {}
        self._assignments: dict[TopicPartition, tuple[int, ...]] = {}
        self._states: dict[TopicPartition, tuple[LeaderIsr, int]] = {}
        self._next_rebalance = float("inf")
        # After a ZooKeeper failure: when the recovery runs, how many ran in a row, the events to handle again,
        # and the partitions whose state write failed without knowing whether it landed.
        self._recovery_at = float("inf")
        self._recovery_attempts = 0
        self._redo: dict[str, Callable[[], None]] = {}
        self._unsure: set[TopicPartition] = set()
        # Set on kazoo's thread when the session is lost; the event thread resigns before anything else.
        self._session_lost = threading.Event()
        # Watches are made once, so kazoo (which keeps a set per path) never holds two of the same.
        self._controller_watch = self._watch("ControllerChange", self._process_controller_change)
        self._brokers_watch = self._watch("BrokerChange", self._process_broker_change)
        self._topics_watch = self._watch("TopicChange", self._process_topic_change)
        self._isr_watch = self._watch("IsrChangeNotification", self._process_isr_change)
        zk.on_session_lost(self._on_session_lost)
        zk.on_new_session(lambda: self._enqueue("Reelect", self._process_reelect))

    # -- public ----------------------------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._active

    def start(self) -> None:
        """Start the event thread and run for election."""
        if self._started:
            return
        self._started = True
        self._thread.start()
        self._enqueue("Startup", self._process_startup)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Resign (giving up ``/controller`` if held) and end the event thread; waits up to ``timeout_s``."""
        if not self._started:
            return
        self._enqueue("Shutdown", self._process_shutdown)
        self._events.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def elect_leaders(self, partitions: Iterable[TopicPartition] | None, election_type: int = PREFERRED,
                      timeout_s: float = 30.0) -> list[ElectionResult]:
        """Kafka's ElectLeaders: a preferred (0) or unclean (1) election for ``partitions`` (None: all), run on
        the event thread; one result per partition."""
        if election_type not in (PREFERRED, UNCLEAN):
            raise ValueError(f"election type {election_type!r}: 0 (preferred) or 1 (unclean)")
        wanted = None if partitions is None else list(partitions)
        future: concurrent.futures.Future[list[ElectionResult]] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(self._process_elect_leaders(wanted, election_type))
            except ControllerMovedError:  # deposed while electing: the caller asks the new controller
                future.set_result([(t, p, ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is no longer the "
                                    "controller") for t, p in (wanted or [])])
                raise
            except BaseException as exc:
                future.set_exception(exc)
                raise

        self._enqueue("ElectLeaders", run)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            return [(t, p, ErrorCode.REQUEST_TIMED_OUT, f"no election within {timeout_s} s")
                    for t, p in (wanted or [])]

    # -- the event thread ------------------------------------------------------------------------------------

    def _watch(self, name: str, handler: Callable[[], None]) -> Callable[[Any], None]:
        return lambda _event: self._enqueue(name, handler)

    def _enqueue(self, name: str, handler: Callable[[], None]) -> None:
        self._events.put((name, handler))

    def _on_session_lost(self) -> None:
        """On kazoo's thread: flag the loss (the event thread acts on it before its next event) and queue it."""
        self._session_lost.set()
        self._enqueue("Expire", self._process_expire)

    def _timed_event(self) -> tuple[str, Callable[[], None]] | None:
        """The recovery or the periodic rebalance when one is due, else None."""
        now = time.monotonic()
        if self._recovery_at <= now:
            return "Recovery", self._process_recovery
        if self._active and self._next_rebalance <= now:
            return "AutoPreferredReplicaLeaderElection", self._process_auto_rebalance
        return None

    def _run(self) -> None:
        while True:
            due = min(self._recovery_at, self._next_rebalance if self._active else float("inf"))
            wait = None if due == float("inf") else max(0.0, due - time.monotonic())
            try:
                item = self._events.get(timeout=min(wait, 3600.0) if wait is not None else None)
            except queue.Empty:
                item = self._timed_event()
                if item is None:
                    continue
            if item is None:
                return
            name, handler = item
            if self._session_lost.is_set():  # before any event queued ahead of Expire
                self._process_expire()
            try:
                handler()
            except ControllerMovedError as exc:
                log.warning("controller %d: %s while handling %s: resigning", self.broker_id, exc, name)
                self._resign()
                self._enqueue("Reelect", self._process_reelect)
            except ZkError as exc:
                log.error("controller %d: %s failed: %s", self.broker_id, name, one_line(exc))
                self._schedule_recovery(name, handler)
            except Exception:
                log.exception("controller %d: %s failed", self.broker_id, name)

    def _schedule_recovery(self, name: str, handler: Callable[[], None]) -> None:
        """After ZooKeeper failed ``name``: run :meth:`_process_recovery` after a backoff, at most
        ``_MAX_RECOVERY_ATTEMPTS`` times in a row."""
        if name in _RECONCILING:
            self._redo[name] = handler
        if not self._active and not self._redo:
            return
        self._recovery_attempts += 1
        if self._recovery_attempts > _MAX_RECOVERY_ATTEMPTS:
            log.error("controller %d: ZooKeeper failed %d recoveries in a row: giving up until the next broker "
                      "change or controller failover (pending: %s; partitions of unknown state: %s)",
                      self.broker_id, _MAX_RECOVERY_ATTEMPTS, sorted(self._redo), sorted(self._unsure))
            self._recovery_attempts = 0
            self._redo.clear()
            self._recovery_at = float("inf")
            return
        delay = min(self.config.retry_backoff_ms / 1000 * 2 ** (self._recovery_attempts - 1), _MAX_RECOVERY_DELAY_S)
        self._recovery_at = min(self._recovery_at, time.monotonic() + delay)

    def _process_recovery(self) -> None:
        """Handle again the events ZooKeeper failed, then (when active) bring the partitions back in line:
        states that may have been written are read back and announced when they changed, partitions without a
        live leader elect one, dead replicas leave the ISRs. Every step is idempotent."""
        self._recovery_at = float("inf")
        for name, handler in list(self._redo.items()):
            handler()
            del self._redo[name]
        if self._active:
            with self._batching():
                self._read_back_unsure()
                self._bring_online(self._assignments)
                live = self._live()
                for partition, replicas in sorted(self._assignments.items()):
                    for replica in replicas:
                        if partition in self._states and replica not in live:
                            self._remove_replica(partition, replica)
        self._recovery_attempts = 0
        log.info("controller %d: recovered from the ZooKeeper failure", self.broker_id)

    def _read_back_unsure(self) -> None:
        """Partitions whose write failed without an answer: read their state; announce it when it moved."""
        for partition in sorted(self._unsure):
            if partition not in self._assignments:
                self._unsure.discard(partition)
                continue
            fresh = self.zk.partition_state(*partition)
            self._unsure.discard(partition)
            known = self._states.get(partition)
            if fresh is None or fresh == known:
                continue
            self._states[partition] = fresh
            if known is None or fresh[0].leader_epoch != known[0].leader_epoch:
                self._announce(partition, is_new=known is None)
            else:  # only the ISR moved (a leader's change): the metadata is what changed
                assert self._batch is not None
                self._batch.add_update_metadata(self._brokers, [partition])

    _batch: _Batch | None = None

    # -- election of the controller --------------------------------------------------------------------------

    def _process_startup(self) -> None:
        self._elect()

    def _process_controller_change(self) -> None:
        self._maybe_resign()
        if self.active_controller_id is None:
            self._elect()

    def _process_reelect(self) -> None:
        self._maybe_resign()
        self._elect()

    def _process_expire(self) -> None:
        if not self._session_lost.is_set():
            return  # handled already, ahead of the events queued before it
        self._session_lost.clear()
        self.active_controller_id = None
        if self._active:
            log.warning("controller %d: ZooKeeper session lost: resigning", self.broker_id)
            self._resign()

    def _process_shutdown(self) -> None:
        was_active = self._active
        self._resign()
        if was_active:
            self.zk.resign_controller(self.broker_id)

    def _maybe_resign(self) -> None:
        self.active_controller_id = self.zk.controller_id(watch=self._controller_watch)
        if self._active and self.active_controller_id != self.broker_id:
            log.info("controller %d: broker %s is the controller now: resigning", self.broker_id,
                     self.active_controller_id)
            self._resign()

    def _elect(self) -> None:
        self.active_controller_id = self.zk.controller_id(watch=self._controller_watch)
        if self.active_controller_id == self.broker_id and not self._active:
            # Held by this session without acting (a failover that failed): give it back; the watch brings an
            # election.
            self.zk.resign_controller(self.broker_id)
            return
        if self.active_controller_id is not None:
            return
        won = self.zk.register_controller(self.broker_id)
        # Watch again: the node now exists (ours or a rival's), and the next change must reach us.
        self.active_controller_id = self.zk.controller_id(watch=self._controller_watch)
        if won is None or self.active_controller_id != self.broker_id:
            return
        self.epoch, self._epoch_zk_version = won
        log.info("controller %d: elected, controller epoch %d", self.broker_id, self.epoch)
        try:
            self._on_failover()
        except ControllerMovedError:
            raise
        except ZkError as exc:  # a half-loaded context must not act: give the office back (Kafka's
            # triggerControllerMove); /controller's deletion fires the watch and an election follows
            log.error("controller %d: failover failed: %s: resigning", self.broker_id, one_line(exc))
            self._resign()
            self.zk.resign_controller(self.broker_id)

    def _on_failover(self) -> None:
        """Kafka's ``onControllerFailover``: load the context, tell every broker, bring partitions online."""
        self._active = True
        self._brokers = self.zk.broker_registrations(watch=self._brokers_watch)
        for endpoint, _ in self._brokers.values():
            self._channels.add_broker(endpoint)
        self._assignments, self._states = {}, {}
        self._load_topics()
        for partition in self._assignments:
            current = self.zk.partition_state(*partition)
            if current is not None:
                self._states[partition] = current
        # Notifications left from before: the states just read are newer than any of them.
        self.zk.read_isr_changes(self.zk.isr_change_notifications(watch=self._isr_watch))
        with self._batching() as batch:
            batch.add_update_metadata(self._brokers, self._assignments)
            for partition in self._states:
                batch.add_leader_and_isr(self._live_replicas(partition), partition)
            self._bring_online(self._assignments)
        self._next_rebalance = time.monotonic() + self.config.leader_imbalance_check_interval_s

    def _resign(self) -> None:
        """Kafka's ``onControllerResignation``: stop sending, forget the context."""
        if self._active:
            log.info("controller %d: resigning (epoch %d)", self.broker_id, self.epoch)
        self._active = False
        self._channels.shutdown()
        self._brokers, self._assignments, self._states = {}, {}, {}
        self._unsure.clear()
        self._next_rebalance = float("inf")

    # -- context ---------------------------------------------------------------------------------------------

    def _live(self) -> set[int]:
        return set(self._brokers)

    def _live_replicas(self, partition: TopicPartition) -> list[int]:
        return [r for r in self._assignments.get(partition, ()) if r in self._brokers]

    def _load_topics(self) -> set[TopicPartition]:
        """Read topics and assignments (watching both); the partitions not known before."""
        found: dict[TopicPartition, tuple[int, ...]] = {}
        for topic in self.zk.topic_names(watch=self._topics_watch):
            assignment = self.zk.topic_assignment(topic, watch=self._topics_watch)
            for partition, replicas in (assignment or {}).items():
                found[(topic, partition)] = tuple(replicas)
        new = set(found) - set(self._assignments)
        for gone in set(self._assignments) - set(found):  # deleted topics: no longer ours to lead
            self._states.pop(gone, None)
        self._assignments = found
        return new

    def _topic_allows_unclean(self, topic: str) -> bool:
        value = self.zk.topic_config(topic).get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    # -- requests --------------------------------------------------------------------------------------------

    class _Batching:
        def __init__(self, controller: Controller) -> None:
            self.controller = controller

        def __enter__(self) -> _Batch:
            batch = _Batch()
            self.controller._batch = batch
            return batch

        def __exit__(self, *exc: object) -> None:
            # What was written before a failure is sent all the same (the batch only holds confirmed states),
            # unless the controller was deposed meanwhile.
            batch, self.controller._batch = self.controller._batch, None
            moved = isinstance(exc[1], ControllerMovedError)
            if batch is not None and not moved and self.controller._active:
                self.controller._send(batch)

    def _batching(self) -> Controller._Batching:
        return Controller._Batching(self)

    def _send(self, batch: _Batch) -> None:
        live = [endpoint for endpoint, _ in self._brokers.values()]
        for broker, partitions in sorted(batch.leader_and_isr.items()):
            if broker not in self._brokers or not partitions:
                continue
            states = [self._leader_and_isr_partition(p, is_new) for p, is_new in sorted(partitions.items())
                      if p in self._states]
            leaders = {s.leader for s in states}
            request = LeaderAndIsrRequest(self.broker_id, self.epoch, self._brokers[broker][1], tuple(states),
                                          tuple(e for e in live if e.broker_id in leaders))
            self._channels.send(broker, request, self._on_response)
        for broker, chosen in sorted(batch.update_metadata.items()):
            if broker not in self._brokers:
                continue
            request_um = UpdateMetadataRequest(
                self.broker_id, self.epoch, self._brokers[broker][1],
                tuple(self._update_metadata_partition(p) for p in sorted(chosen) if p in self._states),
                tuple(sorted(live, key=lambda e: e.broker_id)))
            self._channels.send(broker, request_um, self._on_response)

    def _leader_and_isr_partition(self, partition: TopicPartition, is_new: bool) -> LeaderAndIsrPartition:
        state, version = self._states[partition]
        return LeaderAndIsrPartition(partition[0], partition[1], state.controller_epoch, state.leader,
                                     state.leader_epoch, state.isr, version, self._assignments[partition], is_new)

    def _update_metadata_partition(self, partition: TopicPartition) -> UpdateMetadataPartition:
        state, version = self._states[partition]
        replicas = self._assignments[partition]
        return UpdateMetadataPartition(partition[0], partition[1], state.controller_epoch, state.leader,
                                       state.leader_epoch, state.isr, version, replicas,
                                       tuple(r for r in replicas if r not in self._brokers))

    def _on_response(self, broker: int, request: Any, response: Any) -> None:
        """On a sender thread: only logged (Kafka uses LeaderAndIsr answers for failed log directories)."""
        error = getattr(response, "error_code", ErrorCode.NONE)
        if error != ErrorCode.NONE:
            log.warning("controller %d: broker %d answered %s with error %s", self.broker_id, broker,
                        type(request).__name__, error)

    # -- partition state changes -----------------------------------------------------------------------------

    def _change_state(self, partition: TopicPartition,
                      compute: Callable[[LeaderIsr], LeaderIsr | None]) -> LeaderIsr | None:
        """Write ``compute(current)`` at the cached version; when a leader moved the node meanwhile (an ISR change),
        read it again and recompute. None when ``compute`` declines."""
        for _ in range(_MAX_STATE_WRITE_ATTEMPTS):
            current, version = self._states[partition]
            if current.controller_epoch > self.epoch:
                raise ControllerMovedError(f"partition {partition[0]}-{partition[1]} was written by controller "
                                           f"epoch {current.controller_epoch}, above ours ({self.epoch})")
            new = compute(current)
            if new is None:
                return None
            written = self._write(partition, self.zk.set_partition_state, new, version)
            if written is not None:
                self._states[partition] = (new, written)
                return new
            fresh = self.zk.partition_state(*partition)
            if fresh is None:
                return None
            self._states[partition] = fresh
        raise ZkError(f"partition {partition[0]}-{partition[1]}: its state kept changing under "
                      f"{_MAX_STATE_WRITE_ATTEMPTS} attempts to write it")

    def _write(self, partition: TopicPartition, write: Callable[..., int | None], *args: Any) -> int | None:
        """``write(topic, partition, *args, epoch_zk_version)``, one state write fenced by the controller epoch; a
        failure without an answer leaves the partition to be read back by the recovery."""
        if self._session_lost.is_set():
            raise ZkError(f"ZooKeeper session of controller {self.broker_id} lost: partition "
                          f"{partition[0]}-{partition[1]} not written")
        try:
            return write(partition[0], partition[1], *args, self._epoch_zk_version)
        except ControllerMovedError:
            raise
        except ZkError:
            self._unsure.add(partition)
            raise

    def _announce(self, partition: TopicPartition, is_new: bool = False) -> None:
        assert self._batch is not None
        self._batch.add_leader_and_isr(self._live_replicas(partition), partition, is_new)
        self._batch.add_update_metadata(self._brokers, [partition])

    def _bring_online(self, partitions: Iterable[TopicPartition]) -> None:
        """Kafka's ``triggerOnlinePartitionStateChange``: new partitions get their first leader, partitions
        without a live leader an offline election."""
        live = self._live()
        for partition in sorted(partitions):
            replicas = self._assignments[partition]
            if partition not in self._states:
                self._initialize(partition, replicas, live)
            elif self._states[partition][0].leader not in live:
                self._elect_offline(partition, live)

    def _initialize(self, partition: TopicPartition, replicas: tuple[int, ...], live: set[int]) -> None:
        choice = election.new_partition_leader(replicas, live)
        if choice is None:
            log.warning("controller %d: new partition %s-%d has no live replica among %s", self.broker_id,
                        *partition, list(replicas))
            return
        state = LeaderIsr(choice[0], 0, choice[1], self.epoch)
        version = self._write(partition, self.zk.create_partition_state, state)
        if version is None:  # made by an earlier controller that died before telling anyone
            existing = self.zk.partition_state(*partition)
            if existing is None:
                return
            self._states[partition] = existing
            if existing[0].leader not in live:
                self._elect_offline(partition, live)
            else:
                self._announce(partition)
            return
        self._states[partition] = (state, version)
        self._announce(partition, is_new=True)

    def _elect_offline(self, partition: TopicPartition, live: set[int], force_unclean: bool = False) -> bool:
        replicas = self._assignments[partition]
        unclean: bool | None = True if force_unclean else None

        def compute(current: LeaderIsr) -> LeaderIsr | None:
            nonlocal unclean
            if current.leader in live:
                return None  # someone else fixed it meanwhile
            choice = election.offline_leader(replicas, current.isr, live, False)
            if choice is None:
                if unclean is None:
                    unclean = self._unclean(partition[0])
                if unclean:
                    choice = election.offline_leader(replicas, current.isr, live, True)
            if choice is None:
                return None
            return LeaderIsr(choice[0], current.leader_epoch + 1, choice[1], self.epoch)

        new = self._change_state(partition, compute)
        if new is None:
            return False
        log.info("controller %d: %s-%d: leader %d, epoch %d, ISR %s", self.broker_id, *partition, new.leader,
                 new.leader_epoch, list(new.isr))
        self._announce(partition)
        return True

    def _remove_replica(self, partition: TopicPartition, replica: int) -> None:
        """Kafka's OfflineReplica transition: ``replica`` leaves the partition's ISR (and its leadership)."""
        def compute(current: LeaderIsr) -> LeaderIsr | None:
            if replica not in current.isr and current.leader != replica:
                return None
            leader, isr = election.without_replica(current.leader, current.isr, replica)
            if (leader, isr) == (current.leader, current.isr):
                return None
            return LeaderIsr(leader, current.leader_epoch + 1, isr, self.epoch)

        if self._change_state(partition, compute) is not None:
            self._announce(partition)

    # -- events ----------------------------------------------------------------------------------------------

    def _process_broker_change(self) -> None:
        if not self._active:
            return
        current = self.zk.broker_registrations(watch=self._brokers_watch)
        bounced = {b for b in current if b in self._brokers and current[b][1] != self._brokers[b][1]}
        dead = (set(self._brokers) - set(current)) | bounced
        new = (set(current) - set(self._brokers)) | bounced
        if not dead and not new:
            return
        log.info("controller %d: brokers died %s, started %s", self.broker_id, sorted(dead), sorted(new))
        with self._batching():
            for broker in dead:
                del self._brokers[broker]
                self._channels.remove_broker(broker)
            if dead:
                self._on_broker_failure(dead)
        with self._batching() as batch:
            for broker in new:
                self._brokers[broker] = current[broker]
                self._channels.add_broker(current[broker][0])
            if new:
                self._on_broker_startup(new, batch)

    def _on_broker_failure(self, dead: set[int]) -> None:
        live = self._live()
        led = [p for p, (s, _) in sorted(self._states.items()) if s.leader in dead]
        for partition in led:
            self._elect_offline(partition, live)
        for partition, replicas in sorted(self._assignments.items()):
            if partition not in self._states:
                continue
            for replica in replicas:
                if replica in dead:
                    self._remove_replica(partition, replica)
        assert self._batch is not None
        self._batch.add_update_metadata(self._brokers, [])  # the live brokers changed

    def _on_broker_startup(self, new: set[int], batch: _Batch) -> None:
        batch.add_update_metadata(set(self._brokers) - new, [])
        batch.add_update_metadata(new, self._assignments)
        for partition in sorted(self._states):
            replicas = [r for r in self._assignments[partition] if r in new]
            batch.add_leader_and_isr(replicas, partition)
        self._bring_online(self._assignments)

    def _process_topic_change(self) -> None:
        if not self._active:
            return
        new = self._load_topics()
        if new:
            log.info("controller %d: new partitions %s", self.broker_id, sorted(new))
            with self._batching():
                self._bring_online(new)

    def _process_isr_change(self) -> None:
        if not self._active:
            return
        changed = self.zk.read_isr_changes(self.zk.isr_change_notifications(watch=self._isr_watch))
        known = sorted(p for p in changed if p in self._assignments)
        with self._batching() as batch:
            for n, partition in enumerate(known):
                try:
                    fresh = self.zk.partition_state(*partition)
                except ZkError:  # the notifications are gone: the recovery reads the rest back
                    self._unsure.update(known[n:])
                    raise
                if fresh is not None:
                    self._states[partition] = fresh
                if partition in self._states:
                    batch.add_update_metadata(self._brokers, [partition])

    def _process_elect_leaders(self, partitions: list[TopicPartition] | None,
                               election_type: int) -> list[ElectionResult]:
        chosen = sorted(self._assignments) if partitions is None else partitions
        if not self._active:
            return [(t, p, ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not the controller")
                    for t, p in chosen]
        results = []
        with self._batching():
            for partition in chosen:
                results.append(self._elect_one(partition, election_type))
        return results

    def _elect_one(self, partition: TopicPartition, election_type: int) -> ElectionResult:
        topic, number = partition
        if partition not in self._states:
            return topic, number, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {topic}-{number} is unknown"
        live = self._live()
        replicas = self._assignments[partition]
        current = self._states[partition][0]
        if election_type == UNCLEAN:
            if current.leader in live:
                return topic, number, ErrorCode.ELECTION_NOT_NEEDED, f"leader {current.leader} is live"
            if self._elect_offline(partition, live, force_unclean=True):
                return topic, number, ErrorCode.NONE, None
            return (topic, number, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                    f"no live replica among {list(replicas)}")
        if current.leader == replicas[0]:
            return topic, number, ErrorCode.ELECTION_NOT_NEEDED, f"the preferred replica {replicas[0]} leads"
        if self._elect_preferred(partition, live) is None:
            return (topic, number, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                    f"preferred replica {replicas[0]} is not live or not in the ISR {list(current.isr)}")
        return topic, number, ErrorCode.NONE, None

    def _elect_preferred(self, partition: TopicPartition, live: set[int]) -> LeaderIsr | None:
        replicas = self._assignments[partition]

        def compute(current: LeaderIsr) -> LeaderIsr | None:
            choice = election.preferred_leader(replicas, current.isr, live)
            if choice is None or choice[0] == current.leader:
                return None
            return LeaderIsr(choice[0], current.leader_epoch + 1, choice[1], self.epoch)

        new = self._change_state(partition, compute)
        if new is not None:
            log.info("controller %d: %s-%d: preferred leader %d, epoch %d", self.broker_id, *partition,
                     new.leader, new.leader_epoch)
            self._announce(partition)
        return new

    def _process_auto_rebalance(self) -> None:
        """Kafka's ``checkAndTriggerAutoLeaderRebalance``: a broker whose preferred partitions are led elsewhere
        beyond the allowed share gets them back, where it is live and in the ISR."""
        self._next_rebalance = time.monotonic() + self.config.leader_imbalance_check_interval_s
        if not self._active or not self.config.auto_leader_rebalance_enable:
            return
        preferred: dict[int, list[TopicPartition]] = {}
        for partition, replicas in self._assignments.items():
            if partition in self._states and replicas:
                preferred.setdefault(replicas[0], []).append(partition)
        live = self._live()
        with self._batching():
            for broker, partitions in sorted(preferred.items()):
                elsewhere = [p for p in sorted(partitions) if self._states[p][0].leader != broker]
                ratio = len(elsewhere) / len(partitions)
                if broker in live and ratio > self.config.leader_imbalance_per_broker_percentage / 100:
                    for partition in elsewhere:
                        self._elect_preferred(partition, live)
