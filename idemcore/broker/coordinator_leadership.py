"""The coordinators of a broker in a cluster: each moves with the leadership of its internal partitions.

What Kafka's ``KafkaApis.handleLeaderAndIsrRequest`` does after ``becomeLeaderOrFollower`` (its ``onLeadershipChange``
callback): for every partition of ``__consumer_offsets`` and ``__transaction_state`` that became leader here, the
group or transaction coordinator loads it from the local log with the partition's leader epoch as coordinator
epoch (``GroupCoordinator.onElection``, ``TransactionCoordinator.onElection``); for every one that became a
follower it unloads it (``onResignation``), so requests for its ids are answered NOT_COORDINATOR and the clients
find the new leader. Groups load before transactions: a loaded Prepare* may write markers to a
``__consumer_offsets`` partition led here, whose offsets must be loaded to take them.

Installed by the broker when it is in a cluster (:class:`CoordinatorLeadership`), which also

- makes both coordinators at once (their partitions come from the controller, not from the first request that
  needs them, so no internal topic is made locally by a broker running alone's rules);
- gives the transaction coordinator a :class:`~idemcore.broker.coordinator.marker_channel.ClusterMarkerWriter`
  (markers through the partitions' leaders) and a view of its log's replication (markers wait for the Prepare*
  record to be replicated);
- holds the coordinators' answers, and a leader's WriteTxnMarkers answers, until their records are replicated
  (:class:`~idemcore.broker.coordinator_gate.ReplicationGate`);
- answers "does the partition exist" from the cluster's metadata (AddPartitionsToTxn, offset commits), as Kafka's
  KafkaApis does from its metadata cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from idemcore.broker.broker_view import LeadershipBroker
from idemcore.broker.cluster_member import ClusterMember
from idemcore.broker.coordinator import TransactionCoordinator
from idemcore.broker.coordinator.marker_channel import ClusterMarkerWriter, broker_channel
from idemcore.broker.coordinator.request_path_writers import HandledTransactionLog
from idemcore.broker.coordinator_gate import (
    DEFAULT_APPEND_TIMEOUT_MS,
    DEFAULT_OFFSET_COMMIT_TIMEOUT_MS,
    ReplicationGate,
    offset_commit_error,
    succeeded,
    transaction_error,
    with_error,
)
from idemcore.broker.group import GroupCoordinator, HandledOffsetLog
from idemcore.broker.partition import Partition
from idemcore.net.group_admin import DeleteGroupsRequest, OffsetDeleteRequest
from idemcore.net.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    OffsetCommitRequest,
    PartitionResponse,
    TxnMarkerResult,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)


class CoordinatorLeadership:
    """The coordinators of ``broker``, a member of a cluster through ``cluster``, following their partitions'
    leadership (module docstring). Installing it registers its listeners and replaces the coordinators' handlers
    with gated ones."""

    def __init__(self, broker: LeadershipBroker, cluster: ClusterMember) -> None:
        self.broker = broker
        self._metadata = cluster.metadata
        self._retry_scheduled = False
        self.gate = ReplicationGate(broker.clock, isr_short=broker.replicas.isr_short, schedule=self._later,
                                    moved=self._moved)
        self.marker_writer = ClusterMarkerWriter(
            broker.broker_id, broker.handle, self._leads_here, cluster.metadata,
            broker_channel(f"broker-{broker.broker_id}-txn-markers", cluster.channel_security), loop=_running_loop,
            on_answer=self._retry_soon)
        self.txn_coordinator = self._make_txn_coordinator()
        self.group_coordinator = GroupCoordinator(
            HandledOffsetLog(broker.handle, broker.clock), broker.clock,
            offsets_partitions=broker.topics.get(CONSUMER_OFFSETS_TOPIC, broker.offsets_topic_partitions),
            partition_exists=self._exists, **broker.group_coordinator_settings())
        broker._txn_coordinator = self.txn_coordinator
        broker._group_coordinator = self.group_coordinator
        cluster.on_leadership.append(self.on_leadership)
        broker.delayed.on_replicated.append(self.replicated)
        self._gate_handlers()
        # Partitions led already (a coordinator made after a LeaderAndIsr): loaded now.
        self.on_leadership([p for p in broker.replicas.partitions if p.replicated and p.is_leader], [])

    def _make_txn_coordinator(self) -> TransactionCoordinator:
        broker = self.broker
        coordinator = TransactionCoordinator(
            HandledTransactionLog(broker.handle, broker.clock), self.marker_writer,
            broker.producer_ids.generate_producer_id, broker.clock,
            transaction_max_timeout_ms=broker.transaction_max_timeout_ms,
            transaction_state_partitions=broker.topics.get(TRANSACTION_STATE_TOPIC,
                                                           broker.transaction_state_partitions),
            offsets_partitions=broker.topics.get(CONSUMER_OFFSETS_TOPIC, broker.offsets_topic_partitions),
            partition_exists=self._exists)
        coordinator.replication = _LogView(self, TRANSACTION_STATE_TOPIC)
        return coordinator

    # --- leadership ---------------------------------------------------------------------------------------------

    def on_leadership(self, leaders: Sequence[Partition], followers: Sequence[Partition]) -> None:
        """:attr:`ClusterMember.on_leadership`'s listener: load the internal partitions that became leader here,
        unload those that became followers."""
        for partition in followers:
            if partition.topic == CONSUMER_OFFSETS_TOPIC and self._fits(partition, self.group_coordinator):
                self.group_coordinator.unload_partition(partition.partition)
            elif partition.topic == TRANSACTION_STATE_TOPIC and self._fits(partition, self.txn_coordinator):
                self.txn_coordinator.unload_partition(partition.partition)
        for partition in leaders:  # groups first: a transaction's load may write markers to their partitions
            if partition.topic == CONSUMER_OFFSETS_TOPIC and self._fits(partition, self.group_coordinator):
                self.group_coordinator.load_partition(partition.partition, partition.log.batches,
                                                      partition.leader_epoch, skip_damaged=True)
        for partition in leaders:
            if partition.topic == TRANSACTION_STATE_TOPIC and self._fits(partition, self.txn_coordinator):
                records = [(key, value) for _, key, value, _ in partition.log.records() if key is not None]
                self.txn_coordinator.load_partition(partition.partition, records, partition.leader_epoch)

    def _fits(self, partition: Partition, coordinator: TransactionCoordinator | GroupCoordinator) -> bool:
        """Whether the coordinator was made for as many partitions as the topic has (Kafka refuses to load when
        the count changed: keys would hash to other partitions)."""
        count = (coordinator.transaction_state_partitions if isinstance(coordinator, TransactionCoordinator)
                 else coordinator.offsets_partitions)
        actual = self.broker.topics.get(partition.topic, count)
        if actual != count or partition.partition >= count:
            log.error("%s: the coordinator was made for %d partitions, the topic has %d: not loaded", partition.name,
                      count, actual)
            return False
        return True

    def replicated(self, topic: str, partition: int) -> None:
        """``DelayedOperations.on_replicated``'s listener: held answers are checked now, a transaction's markers
        waiting for their Prepare* are sent just after (never inside the fetch that moved the high watermark)."""
        self.gate.replicated(topic, partition)
        if topic == TRANSACTION_STATE_TOPIC and self.txn_coordinator.owns(partition):
            loop = _running_loop()
            if loop is not None:
                loop.call_soon(self._finish_replicated, partition)

    def _finish_replicated(self, partition: int) -> None:
        if not self.broker._closed and self.txn_coordinator.owns(partition):
            self.txn_coordinator.partition_replicated(partition)

    def _retry_soon(self) -> None:
        """Marker answers arrived: the coordinator's retry runs once, soon, on the loop."""
        loop = _running_loop()
        if loop is None or self._retry_scheduled:
            return
        self._retry_scheduled = True
        loop.call_soon(self._retry)

    def _retry(self) -> None:
        self._retry_scheduled = False
        if not self.broker._closed:
            self.txn_coordinator.retry_pending_markers()

    async def close(self) -> None:
        """Close the marker channels (the cluster member's stop calls this)."""
        await self.marker_writer.close()

    # --- plumbing -------------------------------------------------------------------------------------------------

    def _leads_here(self, topic: str, partition: int) -> bool:
        found = self.broker.replicas.find_partition(topic, partition)
        return found is not None and found.replicated and found.is_leader

    def _exists(self, topic: str, partition: int) -> bool:
        return (self._metadata.partition(topic, partition) is not None
                or self.broker.replicas.find_partition(topic, partition) is not None)

    def high_watermark(self, partition: Partition) -> int:
        """The high watermark of a partition led here, moved first if the ISR allows (-1: not led here)."""
        if not partition.is_leader:
            return -1
        if partition.maybe_increment_high_watermark():
            self._moved(partition)
        return partition.high_watermark

    def _moved(self, partition: Partition) -> None:
        """A check moved a high watermark: what waits on it hears, after the current call."""
        loop = _running_loop()
        if loop is not None:
            loop.call_soon(self.broker.delayed.replicated, partition.topic, partition.partition)

    def _later(self, delay_s: float, call: Callable[[], None]) -> None:
        loop = _running_loop()
        if loop is not None:
            loop.call_later(delay_s, call)

    # --- answers held until replicated ------------------------------------------------------------------------

    def _gate_handlers(self) -> None:
        handlers = self.broker._handlers
        txn = self.txn_coordinator
        for txn_request in (InitProducerIdRequest, AddPartitionsToTxnRequest, AddOffsetsToTxnRequest,
                            EndTxnRequest):
            handlers[txn_request] = self._held(handlers[txn_request], TRANSACTION_STATE_TOPIC,
                                                lambda r: r.transactional_id, txn.partition_for,
                                                transaction_error, DEFAULT_APPEND_TIMEOUT_MS)
        # DeleteGroups and OffsetDelete write tombstones: answered once replicated, as offset commits are.
        for offsets_request in (OffsetCommitRequest, TxnOffsetCommitRequest, OffsetDeleteRequest, DeleteGroupsRequest):
            handlers[offsets_request] = self._held(handlers[offsets_request], CONSUMER_OFFSETS_TOPIC,
                                                   _group_ids, self.group_coordinator.partition_for,
                                                   offset_commit_error, DEFAULT_OFFSET_COMMIT_TIMEOUT_MS)
        write_markers = handlers[WriteTxnMarkersRequest]
        handlers[WriteTxnMarkersRequest] = lambda request: self._markers_held(write_markers(request))

    def _held(self, handler: Callable[[Any], Any], topic: str, key_of: Callable[[Any], object],
              partition_for: Callable[[str], int], mapped: Callable[[int], ErrorCode],
              timeout_ms: int) -> Callable[[Any], Any]:
        def held(request: Any) -> Any:
            response = handler(request)
            key = key_of(request)
            keys = key if type(key) is tuple else (key,)  # DeleteGroups: several groups
            if not keys or not all(isinstance(k, str) for k in keys) or not succeeded(response):
                return response  # an idempotent producer's id, or an error: nothing written to wait for
            waits: dict[int, tuple[Partition, int]] = {}
            for one in keys:
                partition = self.broker.replicas.find_partition(topic, partition_for(one))
                if partition is not None and partition.replicated and partition.is_leader:
                    waits[partition.partition] = (partition, partition.log.log_end_offset)
            if not waits:
                return response
            return self.gate.answer(response, list(waits.values()),
                                    lambda codes: with_error(response, mapped(max(codes))), timeout_ms)
        return held

    def _markers_held(self, response: Any) -> Any:
        """A leader's WriteTxnMarkers answer, held until each marker written is replicated."""
        if not isinstance(response, WriteTxnMarkersResponse):
            return response
        waits: list[tuple[Partition, int]] = []
        positions: list[tuple[int, int]] = []
        for m, result in enumerate(response.markers):
            for k, answer in enumerate(result.responses):
                partition = self.broker.replicas.find_partition(answer.topic, answer.partition)
                if answer.error_code == ErrorCode.NONE and partition is not None and partition.replicated:
                    waits.append((partition, partition.log.log_end_offset))
                    positions.append((m, k))
        if not waits:
            return response

        def rewrite(codes: Sequence[int]) -> WriteTxnMarkersResponse:
            failed = {position: code for position, code in zip(positions, codes, strict=True) if code}
            return replace(response, markers=tuple(
                TxnMarkerResult(result.producer_id, tuple(
                    _failed(answer, failed[(m, k)]) if (m, k) in failed else answer
                    for k, answer in enumerate(result.responses)))
                for m, result in enumerate(response.markers)))
        return self.gate.answer(response, waits, rewrite, DEFAULT_APPEND_TIMEOUT_MS)


def _failed(answer: PartitionResponse, code: int) -> PartitionResponse:
    return replace(answer, error_code=code, base_offset=-1)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _LogView:
    """The transaction coordinator's :class:`~idemcore.broker.coordinator.LogReplication` over its topic's
    partitions on this broker."""

    def __init__(self, leadership: CoordinatorLeadership, topic: str) -> None:
        self._leadership = leadership
        self._topic = topic

    def _partition(self, number: int) -> Partition | None:
        return self._leadership.broker.replicas.find_partition(self._topic, number)

    def log_end(self, partition: int) -> int:
        found = self._partition(partition)
        return 0 if found is None else found.log.log_end_offset

    def high_watermark(self, partition: int) -> int:
        found = self._partition(partition)
        return -1 if found is None else self._leadership.high_watermark(found)


def _group_ids(request: Any) -> object:
    """The group (or DeleteGroups' groups) whose ``__consumer_offsets`` partitions a request writes."""
    return request.group_ids if isinstance(request, DeleteGroupsRequest) else request.group_id
