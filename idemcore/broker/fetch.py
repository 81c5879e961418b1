"""The read path: Fetch and ListOffsets over a broker's partitions (Kafka's ``ReplicaManager.fetchMessages`` and
``handleListOffsetRequest``).

A fetch returns the stored bytes of whole batches from the one holding ``fetch_offset`` on, as the segment file
holds them (read through its offset index, never decoded). A consumer reads below the high watermark
(read_committed: below the last stable offset, with the aborted transactions overlapping what it returns, so it can
drop their records: Kafka's ``collectAbortedTransactions``); a follower (``replica_id`` >= 0) reads up to the log
end, and its fetch offset tells the leader how far it is (Kafka's ``updateFollowerFetchState``). Only the leader
answers; a request carrying a leader epoch other than the leader's is fenced (KIP-320), and a follower whose last
fetched epoch disagrees with the leader's history is told where it diverges (KIP-595's DivergingEpoch, Fetch v12+).
On a broker running alone every partition is led here and the high watermark is the log end.
"""

from __future__ import annotations

from collections.abc import Callable

from idemcore.broker.partition import Partition
from idemcore.net.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AbortedTransaction,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListedOffset,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from idemcore.net.replication import EpochEndOffset, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_OFFSET, READ_COMMITTED, READ_UNCOMMITTED

#: Finds a partition, None when the broker has no such partition.
#: A broker's partition lookup (:meth:`ReplicaManager.find_partition`), None for a malformed (topic, partition).
FindPartition = Callable[[object, object], Partition | None]
#: Called on the leader with each follower fetch: ``(partition, replica id, fetch offset)``.
FollowerFetched = Callable[[Partition, int, int], None]


def _isolation(level: object) -> bool | None:
    """True for read_committed, False for read_uncommitted, None for anything else."""
    if type(level) is int and level in (READ_UNCOMMITTED, READ_COMMITTED):
        return level == READ_COMMITTED
    return None


def leader_problem(partition: Partition | None, current_leader_epoch: object) -> ErrorCode | None:
    """Why this broker may not answer for ``partition`` as its leader (Kafka's ``getPartitionOrError`` and
    ``checkCurrentLeaderEpoch``): unknown, not the leader, or an epoch not the leader's; None when it may."""
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not partition.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return epoch_problem(partition, current_leader_epoch)


def epoch_problem(partition: Partition, current_leader_epoch: object) -> ErrorCode | None:
    if type(current_leader_epoch) is not int or current_leader_epoch < 0 or not partition.replicated:
        return None  # -1: the client does not check (Kafka's NO_PARTITION_LEADER_EPOCH)
    if current_leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return None


def fetch(find_partition: FindPartition, request: FetchRequest,
          follower_fetched: FollowerFetched | None = None) -> FetchResponse:
    """Kafka's ``ReplicaManager.readFromLog``: the partitions in request order, each read up to
    ``min(partition_max_bytes, what is left of max_bytes)`` in whole batches, except that the first non-empty
    partition's first batch is returned whatever its size (KIP-74's ``minOneMessage``: a consumer never stalls on
    a batch larger than its limits). Kafka returns bytes and may cut the last batch short; the consumer drops a
    partial batch, so whole batches that fit are what it sees either way."""
    committed = _isolation(request.isolation_level)
    partitions = request.partitions
    replica_id = request.replica_id
    if (committed is None or type(request.max_bytes) is not int or request.max_bytes < 0 or type(replica_id) is not int
            or not isinstance(partitions, tuple | list) or not all(type(p) is FetchPartition for p in partitions)):
        return FetchResponse((), ErrorCode.INVALID_REQUEST, request.request_id)
    follower = replica_id >= 0
    budget = request.max_bytes
    answers = []
    returned_any = False
    for wanted in partitions:
        partition = find_partition(wanted.topic, wanted.partition)
        problem = leader_problem(partition, wanted.current_leader_epoch)
        if problem is not None:
            answers.append(FetchedPartition(wanted.topic, wanted.partition, problem))
            continue
        assert partition is not None
        partition_log = partition.log
        end, start = partition_log.log_end_offset, partition_log.log_start_offset
        high_watermark, stable = partition.high_watermark, partition.last_stable_offset
        offset, limit_bytes = wanted.fetch_offset, wanted.partition_max_bytes
        if type(limit_bytes) is not int or limit_bytes < 0:
            answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.INVALID_REQUEST, high_watermark,
                                            stable, start, error_message=f"partition_max_bytes {limit_bytes!r} is not "
                                                                         "a non-negative integer"))
            continue
        if follower:
            diverging = _diverging(partition, offset, wanted.last_fetched_epoch)
            if diverging is not None:  # nothing read: the follower truncates first (Kafka's Partition.fetchRecords)
                answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.NONE, high_watermark, stable,
                                                start, diverging_epoch=diverging))
                continue
        if type(offset) is not int or not start <= offset <= end:
            answers.append(FetchedPartition(
                wanted.topic, wanted.partition, ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark, stable, start,
                error_message=f"fetch offset {offset!r} is outside {partition_log.name}'s log, which holds "
                              f"[{start}, {end})"))
            continue
        if follower and follower_fetched is not None:
            follower_fetched(partition, replica_id, offset)
            high_watermark, stable = partition.high_watermark, partition.last_stable_offset
        # A follower reads to the log end; a consumer below the high watermark (read_committed: the last stable
        # offset; between it and the log end the answer is empty, never OFFSET_OUT_OF_RANGE).
        limit = end if follower else (stable if committed else high_watermark)
        records, after = partition_log.read(offset, limit, min(limit_bytes, budget), min_one=not returned_any)
        budget = max(0, budget - len(records))
        returned_any = returned_any or bool(records)
        aborted = None
        if committed and not follower:
            # Those overlapping what is returned, from the fetch offset (a transaction whose ABORT marker is before
            # it cannot hold the batch it falls in) to the end of the last batch returned; none for an empty answer.
            aborted = () if not records else tuple(
                AbortedTransaction(producer_id, first_offset)
                for producer_id, first_offset in partition_log.aborted_transactions(offset, after))
        answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.NONE, high_watermark, stable, start,
                                        aborted, records))
    return FetchResponse(tuple(answers), ErrorCode.NONE, request.request_id)


def _diverging(partition: Partition, fetch_offset: object, last_fetched_epoch: object) -> tuple[int, int] | None:
    """Where a follower's log leaves the leader's history (Kafka's ``Partition.fetchRecords`` with a last fetched
    epoch): the leader's end for that epoch, when it is below the fetch offset or the leader has no such epoch."""
    if type(last_fetched_epoch) is not int or last_fetched_epoch < 0 or type(fetch_offset) is not int:
        return None
    epoch, end_offset = partition.log.epochs.end_offset_for(last_fetched_epoch, partition.log.log_end_offset)
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


def list_offsets(find_partition: FindPartition, request: ListOffsetsRequest) -> ListOffsetsResponse:
    committed = _isolation(request.isolation_level)
    results: list[ListedOffset] = []
    if not isinstance(request.partitions, tuple | list):
        return ListOffsetsResponse((), request.request_id)
    epochs = request.current_leader_epochs
    if epochs is not None and (not isinstance(epochs, tuple | list) or len(epochs) != len(request.partitions)):
        epochs = None
    for position, entry in enumerate(request.partitions):
        if not isinstance(entry, tuple) or len(entry) != 3:
            results.append(ListedOffset(str(entry)[:80], -1, ErrorCode.INVALID_REQUEST))
            continue
        topic, partition_number, timestamp = entry
        partition = find_partition(topic, partition_number)
        problem = leader_problem(partition, -1 if epochs is None else epochs[position])
        if problem is not None:
            results.append(ListedOffset(topic, partition_number, problem))
            continue
        assert partition is not None
        partition_log = partition.log
        epoch = partition.leader_epoch if partition.replicated else 0
        if committed is None or type(timestamp) is not int or not (
                timestamp >= 0 or timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP)):
            results.append(ListedOffset(topic, partition_number, ErrorCode.INVALID_REQUEST))
        elif timestamp == EARLIEST_TIMESTAMP:
            results.append(ListedOffset(topic, partition_number, ErrorCode.NONE, partition_log.log_start_offset,
                                        leader_epoch=epoch))
        elif partition.replicated and partition.high_watermark < partition.epoch_start_offset:
            # Kafka's fetchOffsetForTimestamp: a new leader whose high watermark has not reached the start of its
            # epoch may not have every acknowledged record yet.
            results.append(ListedOffset(topic, partition_number, ErrorCode.OFFSET_NOT_AVAILABLE))
        else:
            # What the isolation level may read: the last stable offset for read_committed, else the high watermark.
            limit = partition.last_stable_offset if committed else partition.high_watermark
            if timestamp == LATEST_TIMESTAMP:
                results.append(ListedOffset(topic, partition_number, ErrorCode.NONE, limit, leader_epoch=epoch))
                continue
            # Kafka's Partition.fetchOffsetForTimestamp: a record found at or past that limit is not answered
            # (offset and timestamp -1).
            found = partition_log.offset_for_timestamp(timestamp, max_timestamp=timestamp == MAX_TIMESTAMP)
            offset, at = found if found is not None and found[0] < limit else (NO_OFFSET, -1)
            results.append(ListedOffset(topic, partition_number, ErrorCode.NONE, offset, at,
                                        leader_epoch=epoch if offset != NO_OFFSET else -1))
    return ListOffsetsResponse(tuple(results), request.request_id)


def offset_for_leader_epoch(find_partition: FindPartition,
                            request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    """Kafka's ``lastOffsetForLeaderEpoch``: for each partition led here, the end of the largest epoch at or below
    the one asked (the log end for the current epoch); (-1, -1) for an epoch before the log's first. Followers ask
    it after a leader change (KIP-101), consumers to validate their position after a reconnect (KIP-320)."""
    answers = []
    for query in request.partitions:
        partition = find_partition(query.topic, query.partition)
        problem = leader_problem(partition, query.current_leader_epoch)
        if problem is not None:
            answers.append(EpochEndOffset(query.topic, query.partition, problem, -1, -1))
            continue
        assert partition is not None
        epoch, end = partition.log.epochs.end_offset_for(query.leader_epoch, partition.log.log_end_offset)
        answers.append(EpochEndOffset(query.topic, query.partition, ErrorCode.NONE, epoch, end))
    return OffsetForLeaderEpochResponse(tuple(answers), request.request_id)
