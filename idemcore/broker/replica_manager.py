"""The partitions this broker leads and the one append path (Kafka's ``ReplicaManager.appendRecords`` over
``UnifiedLog.append``): produce requests and transaction markers alike are admitted, checked by the kernel
against the producer state as it stands (prepare), written to their logs, made durable when asked, committed to
the state only where the write succeeded, and answered. A failed write leaves the state as it was, so the
producer's retry is appended once. A marker is appended as the control batch it is, through the same path
(origin COORDINATOR), as Kafka's ``appendAsLeader`` does."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from idemcore.broker.delayed import DelayedOperations
from idemcore.broker.input_checks import malformed_batch, well_formed_marker
from idemcore.broker.log import PartitionLog
from idemcore.broker.log_manager import LogManager
from idemcore.broker.partition import AlterIsr, LeaderAndIsrState, Partition
from idemcore.broker.producer_ids import ProducerIdManager
from idemcore.broker.recovery import recover_producer_state, reload_partition_state
from idemcore.broker.topic_config import TopicConfig
from idemcore.engine.explain import rejection_message
from idemcore.engine.snapshot import snapshot_entries
from idemcore.engine.table import ProducerStateTable
from idemcore.engine.validate import BoundChecks, validate_into
from idemcore.engine.verdicts import Verdicts
from idemcore.errors import IdemcoreError
from idemcore.kernels import Backend
from idemcore.kernels.abi import CommitVerdicts, TxnColumns, VerdictColumns
from idemcore.kernels.columns import BatchColumns
from idemcore.net.messages import (
    PartitionResponse,
    Pending,
    ProduceRequest,
    ProduceResponse,
    TxnMarker,
    TxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.net.replication import LeaderAndIsrRequest, LeaderAndIsrResponse
from idemcore.protocol.codes import ControlType, ErrorCode, Origin, Status
from idemcore.protocol.constants import DEFAULT_PRODUCER_ID_EXPIRATION_MS, INT16_MAX, INT32_MAX, INTERNAL_TOPICS
from idemcore.protocol.sequences import seq_add
from idemcore.record.batch import RecordBatch
from idemcore.record.kafka_files import encode_snapshot

log = logging.getLogger(__name__)

# Plain ints for the per-request path: an enum member looked up on its class costs a Python call in 3.11.
_APPENDED = int(Status.APPENDED)
_REJECTED = int(Status.REJECTED)


class RequestColumns:
    """Batch metadata, verdict and transaction columns for one append, allocated once per broker and filled in
    place: a request packs its metadata once, straight into the arrays the kernel reads."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.batch = BatchColumns.allocate(capacity)
        self.verdicts = Verdicts.allocate(capacity)
        self.txns = TxnColumns(np.zeros(capacity, np.int32), np.zeros(capacity, np.int64), np.zeros(capacity, np.int64),
                               np.zeros(capacity, np.int64), np.zeros(capacity, np.uint8),
                               np.zeros(capacity, np.int64))
        self.commit = CommitVerdicts(self.verdicts.out_status, self.verdicts.out_base_offset,
                                     self.verdicts.out_last_offset)
        #: check_into and commit_into bound to these arrays once, not at every append.
        self.kernels = BoundChecks(self.batch, self.verdicts, self.txns, self.commit)

    def put(self, k: int, stream: int, batch: RecordBatch, count: int | None = None,
            control: tuple[int, int] | None = None) -> None:
        """Row ``k``: the metadata of ``batch`` on the broker's partition of stream ``stream``; ``count``: the
        records it spans when compaction removed some (its sequences and offsets still cover them); ``control``: a
        marker's (control type, coordinator epoch)."""
        b = self.batch
        if count is None:
            count = len(batch.values)
        if control is None:
            b.is_control[k], b.control_type[k], b.coordinator_epoch[k] = 0, -1, 0
        else:
            b.is_control[k], (b.control_type[k], b.coordinator_epoch[k]) = 1, control
            count = 1
        b.stream[k] = stream
        b.producer_id[k] = batch.producer_id
        b.producer_epoch[k] = batch.producer_epoch
        b.base_sequence[k] = batch.base_sequence
        b.last_sequence[k] = seq_add(batch.base_sequence, count - 1) if batch.base_sequence >= 0 else -1
        b.record_count[k] = count
        b.max_timestamp[k] = batch.max_timestamp
        b.is_transactional[k] = batch.is_transactional

    def packed(self, k: int) -> BatchColumns:
        """Rows ``0..k-1`` (views)."""
        return self.batch.slice(0, k)


@dataclass
class _Entry:
    """One row of an append: the partition, and the data batch or the marker to write there."""

    partition: Partition
    batch: RecordBatch
    marker: TxnMarker | None = None


class ReplicaManager:
    """The partitions of this broker by ``(topic, partition)``, numbered in the order they were opened (their
    rows of the producer-state table), and the append path. ``configs``: each topic's settings (read at every
    append: a change applies to the next batch; ``max.message.bytes`` defaults to the broker's
    ``message.max.bytes``)."""

    def __init__(self, log_manager: LogManager, configs: dict[str, TopicConfig], backend: Backend,
                 clock: Callable[[], int], broker_id: int) -> None:
        self.log_manager = log_manager
        self.configs = configs
        self.backend = backend
        self.clock = clock
        self.broker_id = broker_id
        self.partitions: list[Partition] = []
        self._index: dict[tuple[str, int], Partition] = {}
        self.state = ProducerStateTable(stream_capacity=16)
        self._columns = RequestColumns(8)
        #: Called with each marker written to a partition (the group coordinator completes its offsets).
        self.on_marker: Callable[[Partition, TxnMarker], None] | None = None
        #: Called with each partition opened and its topic's settings (the broker's delayed operations watch it).
        self.on_open: Callable[[Partition, TopicConfig], None] | None = None
        #: The broker's delayed operations: acks=all produces wait there for the flusher while it runs.
        self.delayed: DelayedOperations | None = None
        #: Replication (a broker in a cluster): the newest controller epoch seen, how ISR changes reach ZooKeeper,
        #: how long a follower may lag (``replica.lag.time.max.ms``), producer expiry for state reloads.
        self.controller_epoch = -1
        self.alter_isr: AlterIsr | None = None
        self.replica_lag_time_max_ms = 30_000
        self.producer_id_expiration_ms = DEFAULT_PRODUCER_ID_EXPIRATION_MS

    # --- partitions ------------------------------------------------------------------------------------------

    def open_partition(self, topic: str, partition: int, config: TopicConfig, *, new: bool = False,
                       made: PartitionLog | None = None) -> Partition:
        """Open one partition's log under the next broker-wide stream (``made``: a new partition's log, made
        already off the loop)."""
        partition_log = self.log_manager.open_log(topic, partition, config, new=new) if made is None \
            else self.log_manager.adopt(made)
        opened = Partition(topic, partition, len(self.partitions), partition_log, local_id=self.broker_id)
        # At a roll the state holds exactly the batches before the new segment: a request has one batch per
        # partition, committed after the writes.
        partition_log.on_roll = self.write_snapshot
        self.partitions.append(opened)
        self._index[(topic, partition)] = opened
        if self.on_open is not None:
            self.on_open(opened, config)
        return opened

    def open_topic(self, name: str, partitions: int, config: TopicConfig,
                   made: list[PartitionLog] | None = None) -> Callable[[], None]:
        """Open the partitions of a new topic (all or none; ``made``: their logs, made already off the loop);
        returns how to take them back."""
        first = len(self.partitions)

        def undo() -> None:
            opened = self.partitions[first:]
            for partition in opened:
                del self._index[(partition.topic, partition.partition)]
            del self.partitions[first:]
            self.log_manager.forget(p.log for p in opened)
            self.log_manager.partitions_added()

        try:
            for partition in range(partitions):
                self.open_partition(name, partition, config, new=True, made=None if made is None else made[partition])
        except BaseException:
            undo()
            for partition_log in (made or [])[len(self.partitions) - first:]:  # made but never served
                partition_log.discard()
            raise
        self.log_manager.partitions_added()
        return undo

    def start(self, producer_ids: ProducerIdManager, *, now_ms: int, expiration_ms: int) -> int:
        """Size the state for the partitions opened so far and rebuild it from their logs; the batches
        replayed."""
        self.state = ProducerStateTable(stream_capacity=max(16, len(self.partitions)))
        self._columns = RequestColumns(max(8, min(len(self.partitions), 1024)))
        self.producer_id_expiration_ms = expiration_ms
        return recover_producer_state(self.partitions, self.state, self.backend, producer_ids, now_ms=now_ms,
                                      expiration_ms=expiration_ms)

    def find_partition(self, topic: object, partition: object) -> Partition | None:
        """The partition a request names, None if the broker has none by that name (or the name is not a (str,
        int) pair: True would find partition 1); every handler looks partitions up here, so none re-checks."""
        if type(topic) is not str or type(partition) is not int:
            return None
        return self._index.get((topic, partition))

    def find_log(self, topic: str, partition: int) -> PartitionLog | None:
        found = self._index.get((topic, partition))
        return None if found is None else found.log

    def write_snapshot(self, partition_log: PartitionLog, offset: int) -> None:
        """The producer state of ``partition_log``'s partition, as its snapshot at ``offset``."""
        stream = self._index[(partition_log.topic, partition_log.partition)].stream
        data = encode_snapshot(snapshot_entries(self.state, stream))
        if self.delayed is None or not self.delayed.running:
            partition_log.write_snapshot(offset, data)
            return

        def written(_: object, error: BaseException | None) -> None:
            if isinstance(error, OSError):  # Kafka's roll takes the log directory offline on it too
                self.log_manager.dir_failed(f"{partition_log.name}: writing the snapshot at offset {offset} failed: "
                                            f"{error}")
            elif error is not None:
                log.error("%s: writing the snapshot at offset %d failed: %s", partition_log.name, offset, error)
        # On the flusher while running on a loop: a snapshot only shortens the replay at the next start.
        self.delayed.in_background(lambda: partition_log.write_snapshot(offset, data), written)

    # --- the append path -------------------------------------------------------------------------------------

    def _columns_for(self, count: int) -> RequestColumns:
        if count > self._columns.capacity:
            self._columns = RequestColumns(2 * count)
        return self._columns

    def _append(self, entries: Sequence[_Entry], origin: Origin, sync: bool) -> tuple[VerdictColumns, dict[int, str]]:
        """Check, write, make durable (``sync``), commit: the verdicts of ``entries`` (their rows in
        ``self._columns``, already packed) and the rows whose write failed, with why. A failed partition's log
        is left as it was before this append."""
        columns = self._columns
        k = len(entries)
        verdicts = columns.verdicts
        columns.kernels.check(self.backend, origin, 0, k, self.state)
        status = verdicts.out_status
        appended = [j for j, verdict in enumerate(status[:k].tolist()) if verdict == _APPENDED]
        written: list[int] = []
        failed: dict[int, str] = {}
        try:
            for j in appended:
                entry = entries[j]
                partition_log = entry.partition.log
                offset = int(verdicts.out_base_offset[j])
                offline = self._offline()
                if offline is not None:  # an earlier write of this request failed
                    failed[j] = offline[1]
                    continue
                try:
                    if entry.marker is None:
                        partition_log.append(offset, entry.batch)
                    else:
                        marker = entry.marker
                        partition_log.append_marker(offset, marker.producer_id, marker.producer_epoch,
                                                    int(columns.batch.control_type[j]), marker.coordinator_epoch,
                                                    entry.batch.max_timestamp)
                except (OSError, IdemcoreError) as exc:  # IdemcoreError: the log refused (never expected)
                    failed[j] = f"writing {partition_log.name} at offset {offset} failed: {exc}"
                    log.error("%s", failed[j])
                    if isinstance(exc, OSError):
                        self.log_manager.dir_failed(failed[j])
                    continue
                written.append(j)
            if sync and self.log_manager.data_dir is not None:
                for j in list(written):
                    partition_log = entries[j].partition.log
                    try:
                        partition_log.sync()
                    except OSError as exc:
                        partition_log.rollback_last()
                        written.remove(j)
                        failed[j] = f"syncing {partition_log.name} failed: {exc}"
                        self.log_manager.dir_failed(failed[j])
            for j in written:
                partition = entries[j].partition
                self.log_manager.wrote(partition.log)
                # Kafka's appendRecordsToLeader: a leader alone in its ISR moves the high watermark itself.
                if partition.replicated and partition.maybe_increment_high_watermark() and self.delayed is not None:
                    self.delayed.replicated(partition.topic, partition.partition)
        finally:  # whatever happened, the state records exactly the batches that are in the logs
            for j in set(appended).difference(written):
                status[j] = _REJECTED  # not written: not committed, the retry will be appended
            columns.kernels.commit(self.backend, 0, k, self.state)
        return verdicts, failed

    def _offline(self) -> tuple[ErrorCode, str] | None:
        """Kafka's answer for a partition whose log directory failed: KAFKA_STORAGE_ERROR, nothing appended."""
        why = self.log_manager.offline
        return None if why is None else (ErrorCode.KAFKA_STORAGE_ERROR, f"the log directory is offline: {why}")

    def produce(self, request: ProduceRequest) -> ProduceResponse | Pending | None:
        """Admit each batch (its partition, the internal topics, one batch per partition, its form and its topic's
        settings), then append the admitted ones; None for acks=0."""
        batches = request.batches  # acks, batches and timeout_ms: checked by the request's constructor
        answers: list[PartitionResponse | None] = [None] * len(batches)
        columns = self._columns_for(len(batches))
        entries: list[_Entry] = []
        positions: list[int] = []
        seen: set[int] = set()
        waits: list[tuple[int, PartitionLog, int]] = []
        offline = self._offline()  # once per request: every batch of it is refused alike
        for position, batch in enumerate(batches):
            partition_number = batch.partition
            known = type(partition_number) is int or (isinstance(partition_number, np.integer)
                                                      and not isinstance(partition_number, np.bool_))
            target = self.find_partition(batch.topic, int(partition_number)) if known else None
            problem: tuple[ErrorCode, str] | None
            if target is None:
                problem = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {batch.topic}-{batch.partition}"
            elif not target.is_leader:
                problem = ErrorCode.NOT_LEADER_OR_FOLLOWER, (f"broker {self.broker_id} is not the leader of "
                                                             f"{target.name} (broker {target.leader_id} is)")
            elif batch.topic in INTERNAL_TOPICS and not request.internal:
                problem = ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {batch.topic}"
            elif target.stream in seen:
                problem = ErrorCode.INVALID_REQUEST, f"a second batch for {batch.topic}-{batch.partition}"
            else:
                problem = (offline or self._below_min_isr(target, request.acks) or malformed_batch(batch)
                           or self._refused(batch))
                if problem is None:
                    columns.put(len(entries), target.stream, batch)
                    seen.add(target.stream)
                    entries.append(_Entry(target, batch))
                    positions.append(position)
                    continue
            answers[position] = PartitionResponse(batch.topic, batch.partition, problem[0], error_message=problem[1])
        if entries:
            # The coordinators' own appends are Kafka's AppendOrigin.COORDINATOR: the producer's epoch is checked,
            # not its sequence (a TxnOffsetCommit batch has none, and opens the transaction on the partition).
            origin = Origin.COORDINATOR if request.internal else Origin.CLIENT
            # acks=all waits for the flusher on a loop (the coordinators' own writes are answered in place), and in a
            # cluster for its followers (the high watermark).
            running = not request.internal and self.delayed is not None and self.delayed.waits_for_flush
            flushed = (request.acks == -1 and self.log_manager.fsync and self.log_manager.data_dir is not None
                       and running)
            delayed = flushed or (request.acks == -1 and running and any(e.partition.replicated for e in entries))
            verdicts, failed = self._append(entries, origin, request.acks == -1 and not flushed)
            k = len(entries)
            errors, offsets = verdicts.out_error_code[:k].tolist(), verdicts.out_base_offset[:k].tolist()
            for j, (position, error, offset) in enumerate(zip(positions, errors, offsets, strict=True)):
                batch = batches[position]
                log_start = entries[j].partition.log.log_start_offset
                if j in failed:
                    answers[position] = PartitionResponse(batch.topic, batch.partition, ErrorCode.KAFKA_STORAGE_ERROR,
                                                          log_start_offset=log_start, error_message=failed[j])
                elif error:
                    answers[position] = PartitionResponse(batch.topic, batch.partition, error, offset, -1, log_start,
                                                          self._explain(j, f"{batch.topic}-{batch.partition}"))
                else:
                    answers[position] = PartitionResponse(batch.topic, batch.partition, 0, offset, -1, log_start)
                    if delayed:  # a duplicate too: the batch it repeats may not be durable yet
                        partition_log = entries[j].partition.log
                        waits.append((position, partition_log, partition_log.log_end_offset))
        if request.acks == 0:
            return None
        response = ProduceResponse(request.request_id, tuple(answers))  # type: ignore[arg-type]  # all answered
        if waits:
            assert self.delayed is not None
            return self.delayed.produce(response, waits, request.timeout_ms, flushed=flushed)
        return response

    def write_txn_markers(self, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        """Write each marker to its partitions through the append path (COORDINATOR origin: the kernel checks the
        producer's epoch and the coordinator's), one marker at a time, as Kafka's partition leaders append them;
        durable before the answer (the coordinator completes the transaction only after every answer)."""
        results: list[TxnMarkerResult] = []
        if not isinstance(request.markers, tuple | list):
            return WriteTxnMarkersResponse(request.request_id, ())
        for marker in request.markers:
            if not well_formed_marker(marker):  # answered with no partition written, never raised
                producer_id = getattr(marker, "producer_id", -1)
                results.append(TxnMarkerResult(producer_id if type(producer_id) is int else -1, ()))
                continue
            results.append(TxnMarkerResult(marker.producer_id, self._write_marker(marker)))
        return WriteTxnMarkersResponse(request.request_id, tuple(results))

    def _write_marker(self, marker: TxnMarker) -> tuple[PartitionResponse, ...]:
        answers: dict[int, PartitionResponse] = {}
        columns = self._columns_for(len(marker.partitions))
        entries: list[_Entry] = []
        positions: list[int] = []
        control_type = int(ControlType.COMMIT if marker.committed else ControlType.ABORT)
        now = self.clock()
        fields_fit = (type(marker.producer_id) is int and 0 <= marker.producer_id < 2**63
                      and type(marker.producer_epoch) is int and 0 <= marker.producer_epoch <= INT16_MAX
                      and type(marker.coordinator_epoch) is int and 0 <= marker.coordinator_epoch <= INT32_MAX
                      and type(marker.committed) is bool)
        seen: set[int] = set()
        offline = self._offline()
        for position, (topic, partition_number) in enumerate(marker.partitions):
            target = self.find_partition(topic, partition_number)
            if offline is not None and target is not None:  # the coordinator retries it, as against Kafka
                answers[position] = PartitionResponse(topic, partition_number, offline[0], error_message=offline[1])
                continue
            if target is not None and not target.is_leader:
                answers[position] = PartitionResponse(topic, partition_number, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            if target is None or target.stream in seen or not fields_fit:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if target is None and fields_fit \
                    else ErrorCode.INVALID_REQUEST
                answers[position] = PartitionResponse(topic, partition_number, code, error_message=(
                    None if fields_fit else f"marker fields out of range or of the wrong type: {marker!r:.200}"))
                continue
            # The marker's producer metadata, as the control batch carries it.
            batch = RecordBatch(topic, partition_number, (), None, marker.producer_id, marker.producer_epoch, -1, now,
                                True)
            columns.put(len(entries), target.stream, batch, control=(control_type, marker.coordinator_epoch))
            seen.add(target.stream)
            entries.append(_Entry(target, batch, marker))
            positions.append(position)
        if entries:
            verdicts, failed = self._append(entries, Origin.COORDINATOR, sync=True)
            for j, position in enumerate(positions):
                topic, partition_number = marker.partitions[position]
                error = ErrorCode.KAFKA_STORAGE_ERROR if j in failed else int(verdicts.out_error_code[j])
                answers[position] = PartitionResponse(
                    topic, partition_number, error, int(verdicts.out_base_offset[j]) if not error else -1,
                    error_message=failed.get(j) or (self._explain(j, f"{topic}-{partition_number}") if error else None))
                if not error and self.on_marker is not None:
                    self.on_marker(entries[j].partition, marker)
        return tuple(answers[p] for p in range(len(marker.partitions)))

    def _below_min_isr(self, partition: Partition, acks: int) -> tuple[ErrorCode, str] | None:
        """NOT_ENOUGH_REPLICAS for acks=all when the ISR is smaller than the topic's min.insync.replicas (Kafka's
        Partition.appendRecordsToLeader checks it before anything else: nothing is written)."""
        if acks != -1:
            return None
        short = self.isr_short(partition)
        return None if short is None else (ErrorCode.NOT_ENOUGH_REPLICAS, short)

    def isr_short(self, partition: Partition) -> str | None:
        """Why ``partition``'s ISR is below its topic's ``min.insync.replicas`` now (Kafka's message), or None."""
        needed = self.configs[partition.topic].min_insync_replicas
        isr = partition.isr if partition.replicated else (self.broker_id,)
        if len(isr) >= needed:
            return None
        return (f"The size of the current ISR Set({', '.join(map(str, isr))}) is insufficient to satisfy the min.isr "
                f"requirement of {needed} for partition {partition.name}")

    def _refused(self, batch: RecordBatch) -> tuple[ErrorCode, str] | None:
        """Why the topic's settings refuse a well-formed batch, in Kafka's order (LogValidator, then the segment
        size in UnifiedLog.append), or None."""
        config = self.configs[batch.topic]
        if config.compacted and (batch.keys is None or None in batch.keys):  # Kafka's LogValidator.validateKey
            return ErrorCode.INVALID_RECORD, ("Compacted topic cannot accept message without key in topic partition "
                                              f"{batch.topic}-{batch.partition}")
        size = batch.size_in_bytes()
        if size > config.max_message_bytes:
            limit = (f"max.message.bytes={config.max_message_bytes} of topic {batch.topic}"
                     if "max.message.bytes" in config.overrides else f"message_max_bytes={config.max_message_bytes}")
            return ErrorCode.MESSAGE_TOO_LARGE, f"a batch of {size} bytes is larger than {limit}"
        if size > config.segment_bytes:  # Kafka's RecordBatchTooLargeException
            return ErrorCode.RECORD_LIST_TOO_LARGE, (f"a batch of {size} bytes exceeds the maximum configured segment "
                                                     f"size of {config.segment_bytes}")
        return None

    def _explain(self, j: int, name: str) -> str:
        """Why row ``j`` of this append was rejected, for the partition ``name``."""
        b, v = self._columns.batch, self._columns.verdicts
        return rejection_message(name, int(b.producer_id[j]),
                                 int(b.producer_epoch[j]), int(b.base_sequence[j]), int(b.last_sequence[j]),
                                 int(b.record_count[j]), int(b.coordinator_epoch[j]), bool(b.is_control[j]),
                                 int(v.out_error_code[j]), int(v.out_finding[j]), int(v.out_expected[j]))

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` with no open transaction; how many."""
        expired = self.state.expired_rows(now_ms, expiration_ms)
        return self.state.remove_rows(expired, self.backend) if expired.any() else 0

    # --- replication ------------------------------------------------------------------------------------------

    def append_as_follower(self, partition: Partition, records: bytes | memoryview) -> int:
        """Append the batches a follower fetched, exactly as its leader stored them (Kafka's ``appendAsFollower``),
        and apply them to the producer state with REPLICATION origin (no sequence check, no duplicate search: the
        leader did both), so a retry that reaches this broker once it leads is answered as the duplicate it is.
        Returns the batches appended: the log stops before a batch that rolls a segment unless it is the first, so
        the roll's snapshot holds the state of every batch below it (the rest is fetched again)."""
        partition_log = partition.log
        packed = partition_log.append_replicated(records, partition.stream)
        count = len(packed)
        if count:
            verdicts = validate_into(packed, self.state, Origin.REPLICATION, self.backend, Verdicts.allocate(count))
            refused = np.flatnonzero(verdicts.status != _APPENDED)
            if len(refused):  # Kafka only logs what a follower's producer state finds odd
                row = int(refused[0])
                log.warning("%s: replicated batch at offset %d of producer %d: %s", partition.name,
                            int(packed["base_offset"][row]), int(packed["producer_id"][row]),
                            ErrorCode(int(verdicts.error_code[row])).name)
            self.state.set_next_offset(partition.stream, partition_log.log_end_offset, self.backend)
            self.log_manager.wrote(partition_log)
        return count

    def truncate(self, partition: Partition, offset: int) -> bool:
        """Cut ``partition``'s log back to ``offset`` (a follower whose log left its leader's history: KIP-101,
        KIP-279) and rebuild its producer state from its snapshots and what is left; True when anything went."""
        if not partition.log.truncate_to(offset):
            return False
        log.info("%s: truncated to offset %d (leader %d, epoch %d)", partition.name, offset, partition.leader_id,
                 partition.leader_epoch)
        reload_partition_state(partition, self.state, self.backend, now_ms=self.clock(),
                               expiration_ms=self.producer_id_expiration_ms)
        partition.truncated()
        return True

    def start_at(self, partition: Partition, offset: int) -> None:
        """Empty ``partition``'s log and start it at ``offset`` (a follower behind its leader's log start: Kafka's
        ``truncateFullyAndStartAt``)."""
        partition.log.truncate_fully_and_start_at(offset)
        reload_partition_state(partition, self.state, self.backend, now_ms=self.clock(),
                               expiration_ms=self.producer_id_expiration_ms)
        partition.truncated()

    def become_leader_or_follower(self, request: LeaderAndIsrRequest, open_replica: Callable[[str, int], Partition]
                                  ) -> tuple[LeaderAndIsrResponse, list[Partition], list[Partition]]:
        """Kafka's ``ReplicaManager.becomeLeaderOrFollower``: a request from a deposed controller is refused
        (STALE_CONTROLLER_EPOCH); each partition whose leader epoch is newer than this broker's becomes leader or
        follower (``open_replica`` opens one this broker does not have yet). Returns the answer, the partitions
        that became leader and those whose leader changed (their fetchers start again)."""
        if request.controller_epoch < self.controller_epoch:
            return LeaderAndIsrResponse(ErrorCode.STALE_CONTROLLER_EPOCH, (), request.request_id), [], []
        self.controller_epoch = request.controller_epoch
        now = self.clock()
        results: list[tuple[str, int, int]] = []
        leaders: list[Partition] = []
        followers: list[Partition] = []
        opened = len(self.partitions)
        for entry in request.partitions:
            if self.broker_id not in entry.replicas:
                results.append((entry.topic, entry.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partition = self.find_partition(entry.topic, entry.partition)
            if partition is None:
                try:
                    partition = open_replica(entry.topic, entry.partition)
                except (OSError, IdemcoreError, ValueError) as exc:
                    log.error("%s-%d: cannot open the replica: %s", entry.topic, entry.partition, exc)
                    results.append((entry.topic, entry.partition, ErrorCode.KAFKA_STORAGE_ERROR))
                    continue
            if partition.replicated and (entry.leader_epoch < partition.leader_epoch or (
                    entry.leader_epoch == partition.leader_epoch and entry.zk_version <= partition.zk_version)):
                log.info("%s: LeaderAndIsr at leader epoch %d ignored: this broker has epoch %d", partition.name,
                         entry.leader_epoch, partition.leader_epoch)
                results.append((entry.topic, entry.partition, ErrorCode.STALE_CONTROLLER_EPOCH))
                continue
            state = LeaderAndIsrState(entry.leader, entry.leader_epoch, tuple(entry.isr), entry.zk_version,
                                      tuple(entry.replicas), entry.controller_epoch)
            if entry.leader == self.broker_id:
                partition.make_leader(state, now)
                leaders.append(partition)
                log.info("%s: leader at epoch %d, ISR %s, from offset %d", partition.name, entry.leader_epoch,
                         list(entry.isr), partition.log.log_end_offset)
            else:
                partition.make_follower(state)
                followers.append(partition)
                log.info("%s: follower of broker %d at epoch %d", partition.name, entry.leader, entry.leader_epoch)
            results.append((entry.topic, entry.partition, ErrorCode.NONE))
        if len(self.partitions) > opened:  # new replicas get their slots in the written ends, once per request
            self.log_manager.partitions_added()
        return LeaderAndIsrResponse(ErrorCode.NONE, tuple(results), request.request_id), leaders, followers

    def follower_fetched(self, partition: Partition, replica_id: int, fetch_offset: int) -> None:
        """On the leader: a follower's fetch from ``fetch_offset``; the waiting produces and fetches are tried when
        the high watermark moved."""
        if partition.update_follower(replica_id, fetch_offset, self.clock(), self.alter_isr) \
                and self.delayed is not None:
            self.delayed.replicated(partition.topic, partition.partition)

    def shrink_isrs(self) -> int:
        """Kafka's ``maybeShrinkIsr`` on every partition this broker leads; how many ISRs shrank."""
        if self.alter_isr is None:
            return 0
        now = self.clock()
        shrunk = 0
        for partition in self.partitions:
            if partition.replicated and partition.is_leader \
                    and partition.maybe_shrink_isr(now, self.replica_lag_time_max_ms, self.alter_isr):
                shrunk += 1
                log.info("%s: ISR shrank to %s", partition.name, list(partition.isr))
                if self.delayed is not None:
                    self.delayed.replicated(partition.topic, partition.partition)
        return shrunk
