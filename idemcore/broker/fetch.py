"""The read path: Fetch and ListOffsets over a broker's partition logs (Kafka's ``ReplicaManager.fetchMessages``
and ``handleListOffsetRequest`` on a single broker, where the high watermark is the log end).

A fetch returns whole stored batches from the one holding ``fetch_offset`` on; read_committed stops before the
last stable offset and lists the aborted transactions overlapping what it returns, so the consumer can drop
their records (Kafka's ``collectAbortedTransactions``)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

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
from idemcore.record.stored import StoredBatch
from idemcore.record.v2 import decode_batch

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
        chosen, size = _read(partition_log.batches, offset, stable if committed else end,
                             min(limit_bytes, budget), min_one=not returned_any)
        budget = max(0, budget - size)
        returned_any = returned_any or bool(chosen)
        aborted = None
        if committed:
            # Those overlapping what is returned, from the fetch offset (a transaction whose ABORT marker is before
            # it cannot hold the batch it falls in) to the end of the last batch returned; none for an empty answer.
            aborted = () if not chosen else tuple(
                AbortedTransaction(producer_id, first_offset)
                for producer_id, first_offset in partition_log.aborted_transactions(offset, chosen[-1].next_offset))
        answers.append(FetchedPartition(wanted.topic, wanted.partition, ErrorCode.NONE, end, stable, start, aborted,
                                        tuple(chosen)))
    return FetchResponse(tuple(answers), ErrorCode.NONE, request.request_id)


def _read(batches: list[StoredBatch], offset: int, limit: int, max_bytes: int,
          min_one: bool) -> tuple[list[StoredBatch], int]:
    """The batches from the one holding ``offset`` on, below ``limit``, that fit in ``max_bytes`` (``min_one``:
    the first one whatever its size), and their size."""
    # The batch holding the offset, or the first after it (compaction may have emptied the batch that held it).
    k = max(bisect.bisect_right(batches, offset, key=lambda stored: stored.base_offset) - 1, 0)
    chosen: list[StoredBatch] = []
    size = 0
    while k < len(batches):
        stored = batches[k]
        k += 1
        if stored.base_offset >= limit:
            break
        if stored.next_offset <= offset:
            continue  # wholly before the fetch offset
        batch_size = stored.batch.size_in_bytes()
        if size + batch_size > max_bytes and (chosen or not min_one):
            break
        chosen.append(stored)
        size += batch_size
    return chosen, size


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
            found = _by_timestamp(partition_log.batches, timestamp)
            offset, at = found if found is not None and found[0] < limit else (NO_OFFSET, -1)
            results.append(ListedOffset(topic, partition, ErrorCode.NONE, offset, at))
    return ListOffsetsResponse(tuple(results), request.request_id)


def _record_times(stored: StoredBatch) -> Iterator[tuple[int, int]]:
    """``(offset, timestamp)`` of each record of a stored batch: from its bytes when the log has them (per-record
    timestamps as sent), else every record at the batch's max timestamp (as ``encode_record_batch`` writes it)."""
    if stored.raw is None:
        return ((offset, stored.batch.max_timestamp) for offset in stored.offsets())
    header, records = decode_batch(stored.raw, check_crc=False)
    return ((header.offset_of(r), header.timestamp_of(r)) for r in records)  # (LOG_APPEND_TIME: the max timestamp)


def _by_timestamp(batches: list[StoredBatch], timestamp: int) -> tuple[int, int] | None:
    """Kafka's ``UnifiedLog.fetchOffsetByTimestamp``: ``(offset, timestamp)`` of the first record whose timestamp is
    at least ``timestamp`` (in the first batch whose max timestamp is), or for MAX_TIMESTAMP the first record with
    the largest timestamp; None when there is none. Markers count, as in Kafka's segment scan."""
    if timestamp == MAX_TIMESTAMP:
        newest = max(batches, key=lambda stored: stored.batch.max_timestamp, default=None)
        if newest is None:
            return None
        top = newest.batch.max_timestamp
        return next(((offset, at) for offset, at in _record_times(newest) if at == top), None)
    for stored in batches:
        if stored.batch.max_timestamp >= timestamp:
            found = next(((offset, at) for offset, at in _record_times(stored) if at >= timestamp), None)
            if found is not None:
                return found
    return None


def _log(find_log: FindLog, topic: object, partition: object) -> PartitionLog | None:
    if type(topic) is not str or type(partition) is not int:
        return None
    return find_log(topic, partition)
