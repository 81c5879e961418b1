"""The admin requests, as the broker answers them. Those that find hanging transactions (KIP-664):
DescribeProducers reads the producer state of its partitions, DescribeTransactions and ListTransactions ask the
transaction coordinator. All three only read: none makes ``__transaction_state`` (a broker whose coordinator has
not started owns no transactional id yet, as a Kafka broker that leads no partition of it). DeleteRecords
(KIP-107) moves log start offsets up.

Kafka (core KafkaApis.handleDescribeProducersRequest / handleDescribeTransactionsRequest /
handleListTransactionsRequest / handleDeleteRecordsRequest, ReplicaManager.activeProducerState / deleteRecords,
Partition.deleteRecordsOnLeader, UnifiedLog.activeProducers / maybeIncrementLogStartOffset,
TransactionCoordinator.handleDescribeTransactions / handleListTransactions,
TransactionStateManager.listTransactionStates), without the authorisation checks (idemcore has no ACLs).

A request whose fields have the wrong types is answered INVALID_REQUEST with a message naming the value, never
raised out of ``Broker.handle``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idemcore.broker.coordinator import TransactionCoordinator
from idemcore.broker.input_checks import checked, illegal_topic_name
from idemcore.broker.log_manager import LogManager
from idemcore.broker.replica_manager import ReplicaManager
from idemcore.broker.topics import Topics
from idemcore.engine.snapshot import snapshot_entries
from idemcore.net.admin import (
    HIGH_WATERMARK,
    DeletedRecords,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribedTransaction,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
    PartitionProducers,
    ProducerState,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import INTERNAL_TOPICS
from idemcore.record.kafka_files.transaction_log import TransactionState


@dataclass(frozen=True)
class AdminSources:
    """What the admin requests read: the partitions and their producer state, the topic catalog, the broker's
    id, the transaction coordinator once it has started (None before: a read never starts it, as Kafka
    makes ``__transaction_state`` at FindCoordinator), and the log directory (DeleteRecords moves log starts)."""

    replicas: ReplicaManager
    topics: Topics
    broker_id: int
    txn_coordinator: Callable[[], TransactionCoordinator | None]
    log_manager: LogManager


__all__ = ["AdminSources", "admin_handlers", "delete_records", "describe_producers", "describe_transactions",
           "list_transactions"]

log = logging.getLogger(__name__)

#: Kafka's ``Topic.validate``: 1 to 249 ASCII alphanumerics, '.', '_' and '-', and neither "." nor "..".


def admin_handlers(broker: AdminSources) -> dict[type, Callable[[Any], Any]]:
    """The admin requests' handlers over what ``broker`` holds, to merge into its dispatch table."""
    return {
        DescribeProducersRequest: lambda request: describe_producers(broker, request),
        DescribeTransactionsRequest: lambda request: describe_transactions(broker, request),
        ListTransactionsRequest: lambda request: list_transactions(broker, request),
        DeleteRecordsRequest: lambda request: delete_records(broker, request),
    }


# ---------------------------------------------------------------- DescribeProducers


def describe_producers(broker: AdminSources, request: DescribeProducersRequest) -> DescribeProducersResponse:
    """Each requested partition's active producers: every producer with an entry in its producer state (those that
    wrote only markers too), as Kafka's ``UnifiedLog.activeProducers`` lists them."""
    pairs = request.partitions
    problem = _malformed_pairs(pairs)
    if problem is not None:
        return DescribeProducersResponse((), request.request_id, ErrorCode.INVALID_REQUEST,
                                         f"DescribeProducersRequest: {problem}")
    answers = tuple(_partition_producers(broker, topic, partition) for topic, partition in pairs)
    return DescribeProducersResponse(answers, request.request_id)


def _malformed_pairs(pairs: object) -> str | None:
    if not isinstance(pairs, tuple | list):
        return f"partitions must be a tuple of (topic, partition) pairs, got {pairs!r:.80}"
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and type(pair[0]) is str and type(pair[1]) is int):
            return f"partition {pair!r:.80} is not a (topic name, partition number) pair"
    return None


def _partition_producers(broker: AdminSources, topic: str, partition: int) -> PartitionProducers:
    # Kafka checks the name first (INVALID_TOPIC_EXCEPTION), then whether the topic, then the partition, exists.
    illegal = illegal_topic_name(topic)
    if illegal is not None:
        return PartitionProducers(topic, partition, ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=illegal)
    found = broker.replicas.find_partition(topic, partition)
    if found is None:
        where = "topic" if topic not in broker.topics else "partition"
        return PartitionProducers(topic, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  error_message=f"broker {broker.broker_id} has no {where} {topic}-{partition}")
    # The snapshot view is Kafka's ProducerStateEntry per producer: lastSeq of the newest retained batch (-1 when
    # none), lastTimestamp, coordinatorEpoch, currentTxnFirstOffset (-1 when no transaction is open).
    return PartitionProducers(topic, partition, ErrorCode.NONE, tuple(
        ProducerState(entry.producer_id, entry.producer_epoch, entry.last_sequence, entry.timestamp,
                      entry.coordinator_epoch, entry.current_txn_first_offset)
        for entry in snapshot_entries(broker.replicas.state, found.stream)))


# ---------------------------------------------------------------- DescribeTransactions / ListTransactions


def describe_transactions(broker: AdminSources, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    """Each requested id's state: NOT_COORDINATOR while the coordinator has not started (no partition of
    ``__transaction_state`` is loaded), INVALID_REQUEST for "", TRANSACTIONAL_ID_NOT_FOUND for an unknown id."""
    ids = request.transactional_ids
    if not isinstance(ids, tuple | list):
        return DescribeTransactionsResponse((), request.request_id, ErrorCode.INVALID_REQUEST,
                                            f"DescribeTransactionsRequest: transactional_ids must be a tuple of "
                                            f"strings, got {ids!r:.80}")
    bad = [transactional_id for transactional_id in ids if type(transactional_id) is not str]
    if bad:
        return DescribeTransactionsResponse((), request.request_id, ErrorCode.INVALID_REQUEST,
                                            f"DescribeTransactionsRequest: transactional id {bad[0]!r:.80} is not a "
                                            "string")
    coordinator = broker.txn_coordinator()  # a read never makes __transaction_state
    if coordinator is None:
        return DescribeTransactionsResponse(tuple(
            DescribedTransaction(transactional_id, ErrorCode.INVALID_REQUEST if transactional_id == ""
                                 else ErrorCode.NOT_COORDINATOR) for transactional_id in ids), request.request_id)
    answer = checked(request, lambda: coordinator.describe_transactions(ids))
    if isinstance(answer, str):
        return DescribeTransactionsResponse((), request.request_id, ErrorCode.INVALID_REQUEST, answer)
    return DescribeTransactionsResponse(tuple(
        DescribedTransaction(d.transactional_id, ErrorCode(d.error_code), d.state, d.producer_id, d.producer_epoch,
                             d.transaction_timeout_ms, d.transaction_start_ms, d.topic_partitions)
        for d in answer), request.request_id)


def list_transactions(broker: AdminSources, request: ListTransactionsRequest) -> ListTransactionsResponse:
    """The ids the coordinator knows (none before it has started), filtered by state names, producer ids and how
    long their transaction has run; state filters that name no state come back in ``unknown_state_filters``."""
    states, producer_ids, duration = request.state_filters, request.producer_id_filters, request.duration_filter_ms
    problem = None
    if not isinstance(states, tuple | list) or any(type(name) is not str for name in states):
        problem = f"state_filters must be a tuple of state names, got {states!r:.80}"
    elif not isinstance(producer_ids, tuple | list) or any(type(pid) is not int for pid in producer_ids):
        problem = f"producer_id_filters must be a tuple of producer ids, got {producer_ids!r:.80}"
    elif type(duration) is not int:
        problem = f"duration_filter_ms must be an int (negative: no filter), got {duration!r:.80}"
    if problem is not None:
        return ListTransactionsResponse(ErrorCode.INVALID_REQUEST, request_id=request.request_id,
                                        error_message=f"ListTransactionsRequest: {problem}")
    names = tuple(dict.fromkeys(states))  # Kafka takes the filters as a set: an unknown name is echoed once
    coordinator = broker.txn_coordinator()  # a read never makes __transaction_state
    if coordinator is None:
        return ListTransactionsResponse(ErrorCode.NONE, (), tuple(
            name for name in names if TransactionState.from_name(name) is None), request.request_id)
    result = checked(request, lambda: coordinator.list_transactions(names, producer_ids, duration))
    if isinstance(result, str):
        return ListTransactionsResponse(ErrorCode.INVALID_REQUEST, request_id=request.request_id,
                                        error_message=result)
    return ListTransactionsResponse(ErrorCode(result.error_code), tuple(
        ListedTransaction(listing.transactional_id, listing.producer_id, listing.state)
        for listing in result.transaction_states), result.unknown_state_filters, request.request_id)


# ---------------------------------------------------------------- DeleteRecords


def delete_records(broker: AdminSources, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    """Move each requested partition's log start offset up to the offset asked for (Kafka's
    ``ReplicaManager.deleteRecords`` on one broker, where the high watermark is the log end, so nothing waits for a
    follower): UNKNOWN_TOPIC_OR_PARTITION for a partition the broker lacks, INVALID_TOPIC_EXCEPTION for an internal
    topic, POLICY_VIOLATION when the topic's ``cleanup.policy`` lacks ``delete``, OFFSET_OUT_OF_RANGE for an offset
    below 0 (other than -1, the high watermark) or past the high watermark; an offset at or below the log start
    changes nothing. Every answer's low watermark is the partition's log start offset afterwards (-1 with an
    error). The new starts are recorded in one checkpoint write before any segment goes
    (:meth:`LogManager.increment_log_start_offsets`)."""
    triples = request.partitions
    problem = _malformed_triples(triples)
    if problem is None and type(request.timeout_ms) is not int:
        problem = f"timeout_ms must be an int, got {request.timeout_ms!r:.80}"
    if problem is not None:
        return DeleteRecordsResponse((), request.request_id, ErrorCode.INVALID_REQUEST,
                                     f"DeleteRecordsRequest: {problem}")
    refused: dict[int, tuple[ErrorCode, str]] = {}
    targets: dict[tuple[str, int], int] = {}
    for k, (topic, partition, offset) in enumerate(triples):
        answer = _deletion_target(broker, topic, partition, offset)
        if isinstance(answer, tuple):
            refused[k] = answer
        else:  # a partition asked twice moves to the larger offset, as asking twice in turn would
            targets[(topic, partition)] = max(answer, targets.get((topic, partition), answer))
    failure = None
    try:
        broker.log_manager.increment_log_start_offsets(targets)
    except OSError as exc:  # Kafka answers KAFKA_STORAGE_ERROR for a log dir that failed
        log.exception("DeleteRecordsRequest: the log start offsets could not be moved")
        failure = f"the log start offsets could not be moved: {exc}"
    answers = []
    for k, (topic, partition, _) in enumerate(triples):
        if k in refused:
            code, message = refused[k]
            answers.append(DeletedRecords(topic, partition, code, error_message=message))
            continue
        found = broker.replicas.find_partition(topic, partition)
        assert found is not None  # not refused: it exists
        start = found.log.log_start_offset
        if failure is not None and start < targets[(topic, partition)]:
            answers.append(DeletedRecords(topic, partition, ErrorCode.KAFKA_STORAGE_ERROR, error_message=failure))
        else:
            answers.append(DeletedRecords(topic, partition, ErrorCode.NONE, start))
    return DeleteRecordsResponse(tuple(answers), request.request_id)


def _malformed_triples(triples: object) -> str | None:
    if not isinstance(triples, tuple | list):
        return f"partitions must be a tuple of (topic, partition, offset) triples, got {triples!r:.80}"
    for triple in triples:
        if not (isinstance(triple, tuple) and len(triple) == 3 and type(triple[0]) is str
                and type(triple[1]) is int and type(triple[2]) is int):
            return f"partition {triple!r:.80} is not a (topic name, partition number, offset) triple"
    return None


def _deletion_target(broker: AdminSources, topic: str, partition: int, offset: int) -> int | tuple[ErrorCode, str]:
    """The offset ``topic-partition``'s log start moves to, or the refusal (Kafka's order of checks)."""
    found = broker.replicas.find_partition(topic, partition)
    if found is None:
        where = "topic" if topic not in broker.topics else "partition"
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"broker {broker.broker_id} has no {where} {topic}-{partition}"
    if topic in INTERNAL_TOPICS:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {topic}"
    if not broker.topics.configs[topic].deletes:
        return ErrorCode.POLICY_VIOLATION, (f"Records of partition {topic}-{partition} can not be deleted due to "
                                            "the configured policy (cleanup.policy without delete)")
    high_watermark = found.high_watermark
    target = high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        return ErrorCode.OFFSET_OUT_OF_RANGE, f"The offset {target} for partition {topic}-{partition} is not valid"
    if target > high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE, (f"Cannot increment the log start offset to {target} of partition "
                                               f"{topic}-{partition} since it is larger than the high watermark "
                                               f"{high_watermark}")
    return target
