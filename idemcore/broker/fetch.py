"""The read path: Fetch and ListOffsets over a broker's partition logs (Kafka's ``ReplicaManager.fetchMessages``
and ``handleListOffsetRequest`` on a single broker, where the high watermark is the log end).

A fetch returns whole stored batches from the one holding ``fetch_offset`` on; read_committed stops before the
last stable offset and lists the aborted transactions overlapping what it returns, so the consumer can drop
their records (Kafka's ``collectAbortedTransactions``)."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from idemcore.broker.log import PartitionLog
from idemcore.net.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AbortedTransaction,
    FetchedPartition,
    FetchRequest,
    FetchResponse,
    ListedOffset,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import READ_COMMITTED, READ_UNCOMMITTED
from idemcore.record.stored import StoredBatch

#: Finds a partition's log, None when the broker has no such partition.
FindLog = Callable[[str, int], PartitionLog | None]


def _isolation(level: object) -> bool | None:
    """True for read_committed, False for read_uncommitted, None for anything else."""
    if type(level) is int and level in (READ_UNCOMMITTED, READ_COMMITTED):
        return level == READ_COMMITTED
    return None


def fetch(find_log: FindLog, request: FetchRequest) -> FetchResponse:
    committed = _isolation(request.isolation_level)
    if committed is None or type(request.max_bytes) is not int or not isinstance(request.partitions, tuple | list):
        return FetchResponse((), ErrorCode.INVALID_REQUEST, request.request_id)
    budget = request.max_bytes
    answers = []
    returned_any = False
    for wanted in request.partitions:
        partition_log = _log(find_log, wanted.topic, wanted.partition)
        if partition_log is None:
            answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        end, stable, start = (partition_log.log_end_offset, partition_log.last_stable_offset,
                              partition_log.log_start_offset)
        offset = wanted.fetch_offset
        if type(offset) is not int or not start <= offset <= end:
            answers.append(FetchedPartition(
                wanted.topic, wanted.partition, ErrorCode.OFFSET_OUT_OF_RANGE, end, stable, start,
                error_message=f"fetch offset {offset!r} is outside {partition_log.name}'s log, which holds "
                              f"[{start}, {end})"))
            continue
        limit = stable if committed else end
        batches = partition_log.batches
        first = max(bisect.bisect_right(batches, offset, key=lambda stored: stored.base_offset) - 1, 0)
        chosen: list[StoredBatch] = []
        size = 0
        partition_budget = min(wanted.partition_max_bytes, budget)
        for stored in batches[first:]:
            if stored.base_offset >= limit:
                break
            if stored.next_offset <= offset:
                continue  # wholly before the fetch offset (compaction can leave such a batch at the bisect point)
            batch_size = stored.batch.size_in_bytes()
            if size + batch_size > partition_budget and (chosen or returned_any):
                break  # the first batch goes out whatever its size, so a consumer never stalls on a large one
            chosen.append(stored)
            size += batch_size
        budget -= size
        returned_any = returned_any or bool(chosen)
        aborted = None
        if committed:
            upper = chosen[-1].next_offset if chosen else offset
            aborted = tuple(AbortedTransaction(producer_id, first_offset)
                            for producer_id, first_offset in partition_log.aborted_transactions(offset, upper))
        answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.NONE, end, stable, start, aborted,
                                        tuple(chosen)))
    return FetchResponse(tuple(answers), ErrorCode.NONE, request.request_id)


def list_offsets(find_log: FindLog, request: ListOffsetsRequest) -> ListOffsetsResponse:
    committed = _isolation(request.isolation_level)
    results = []
    for topic, partition, timestamp in request.partitions:
        partition_log = _log(find_log, topic, partition)
        if partition_log is None:
            results.append(ListedOffset(topic, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        elif committed is None or timestamp not in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
            results.append(ListedOffset(topic, partition, ErrorCode.INVALID_REQUEST))
        elif timestamp == EARLIEST_TIMESTAMP:
            results.append(ListedOffset(topic, partition, ErrorCode.NONE, partition_log.log_start_offset))
        else:
            latest = partition_log.last_stable_offset if committed else partition_log.log_end_offset
            results.append(ListedOffset(topic, partition, ErrorCode.NONE, latest))
    return ListOffsetsResponse(tuple(results), request.request_id)


def _log(find_log: FindLog, topic: object, partition: object) -> PartitionLog | None:
    if type(topic) is not str or type(partition) is not int:
        return None
    return find_log(topic, partition)
