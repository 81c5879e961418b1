"""The read path: Fetch and ListOffsets over a broker's partition logs (Kafka's ``ReplicaManager.fetchMessages``
and ``handleListOffsetRequest`` on a single broker, where the high watermark is the log end).

A fetch returns the stored bytes of whole batches from the one holding ``fetch_offset`` on, as the segment file
holds them (read through its offset index, never decoded); read_committed stops before the
last stable offset and lists the aborted transactions overlapping what it returns, so the consumer can drop
their records (Kafka's ``collectAbortedTransactions``)."""

from __future__ import annotations

from collections.abc import Callable

from idemcore.broker.log import PartitionLog
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
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_OFFSET, READ_COMMITTED, READ_UNCOMMITTED

#: Finds a partition's log, None when the broker has no such partition.
FindLog = Callable[[str, int], PartitionLog | None]


def _isolation(level: object) -> bool | None:
    """True for read_committed, False for read_uncommitted, None for anything else."""
    if type(level) is int and level in (READ_UNCOMMITTED, READ_COMMITTED):
        return level == READ_COMMITTED
    return None


def fetch(find_log: FindLog, request: FetchRequest) -> FetchResponse:
    """Kafka's ``ReplicaManager.readFromLog``: the partitions in request order, each read up to
    ``min(partition_max_bytes, what is left of max_bytes)`` in whole batches, except that the first non-empty
    partition's first batch is returned whatever its size (KIP-74's ``minOneMessage``: a consumer never stalls on
    a batch larger than its limits). Kafka returns bytes and may cut the last batch short; the consumer drops a
    partial batch, so whole batches that fit are what it sees either way."""
    committed = _isolation(request.isolation_level)
    partitions = request.partitions
    if (committed is None or type(request.max_bytes) is not int or request.max_bytes < 0
            or not isinstance(partitions, tuple | list) or not all(type(p) is FetchPartition for p in partitions)):
        return FetchResponse((), ErrorCode.INVALID_REQUEST, request.request_id)
    budget = request.max_bytes
    answers = []
    returned_any = False
    for wanted in partitions:
        partition_log = _log(find_log, wanted.topic, wanted.partition)
        if partition_log is None:
            answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        end, stable, start = (partition_log.log_end_offset, partition_log.last_stable_offset,
                              partition_log.log_start_offset)
        offset, limit_bytes = wanted.fetch_offset, wanted.partition_max_bytes
        if type(limit_bytes) is not int or limit_bytes < 0:
            answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.INVALID_REQUEST, end, stable,
                                            start, error_message=f"partition_max_bytes {limit_bytes!r} is not a "
                                                                 "non-negative integer"))
            continue
        if type(offset) is not int or not start <= offset <= end:
            answers.append(FetchedPartition(
                wanted.topic, wanted.partition, ErrorCode.OFFSET_OUT_OF_RANGE, end, stable, start,
                error_message=f"fetch offset {offset!r} is outside {partition_log.name}'s log, which holds "
                              f"[{start}, {end})"))
            continue
        # read_committed reads below the last stable offset; at or past it the answer is empty (Kafka's
        # TXN_COMMITTED isolation, which never answers OFFSET_OUT_OF_RANGE between the LSO and the log end).
        records, after = partition_log.read(offset, stable if committed else end, min(limit_bytes, budget),
                                            min_one=not returned_any)
        budget = max(0, budget - len(records))
        returned_any = returned_any or bool(records)
        aborted = None
        if committed:
            # Those overlapping what is returned, from the fetch offset (a transaction whose ABORT marker is before
            # it cannot hold the batch it falls in) to the end of the last batch returned; none for an empty answer.
            aborted = () if not records else tuple(
                AbortedTransaction(producer_id, first_offset)
                for producer_id, first_offset in partition_log.aborted_transactions(offset, after))
        answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.NONE, end, stable, start, aborted,
                                        records))
    return FetchResponse(tuple(answers), ErrorCode.NONE, request.request_id)


def list_offsets(find_log: FindLog, request: ListOffsetsRequest) -> ListOffsetsResponse:
    committed = _isolation(request.isolation_level)
    results: list[ListedOffset] = []
    if not isinstance(request.partitions, tuple | list):
        return ListOffsetsResponse((), request.request_id)
    for entry in request.partitions:
        if not isinstance(entry, tuple) or len(entry) != 3:
            results.append(ListedOffset(str(entry)[:80], -1, ErrorCode.INVALID_REQUEST))
            continue
        topic, partition, timestamp = entry
        partition_log = _log(find_log, topic, partition)
        if partition_log is None:
            results.append(ListedOffset(topic, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        elif committed is None or type(timestamp) is not int or not (
                timestamp >= 0 or timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP)):
            results.append(ListedOffset(topic, partition, ErrorCode.INVALID_REQUEST))
        elif timestamp == EARLIEST_TIMESTAMP:
            results.append(ListedOffset(topic, partition, ErrorCode.NONE, partition_log.log_start_offset))
        else:
            # What the isolation level may read: the last stable offset for read_committed, else the log end.
            limit = partition_log.last_stable_offset if committed else partition_log.log_end_offset
            if timestamp == LATEST_TIMESTAMP:
                results.append(ListedOffset(topic, partition, ErrorCode.NONE, limit))
                continue
            # Kafka's Partition.fetchOffsetForTimestamp: a record found at or past that limit is not answered
            # (offset and timestamp -1).
            found = partition_log.offset_for_timestamp(timestamp, max_timestamp=timestamp == MAX_TIMESTAMP)
            offset, at = found if found is not None and found[0] < limit else (NO_OFFSET, -1)
            results.append(ListedOffset(topic, partition, ErrorCode.NONE, offset, at))
    return ListOffsetsResponse(tuple(results), request.request_id)


def _log(find_log: FindLog, topic: object, partition: object) -> PartitionLog | None:
    if type(topic) is not str or type(partition) is not int:
        return None
    return find_log(topic, partition)
