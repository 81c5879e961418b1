"""DescribeProducers (v0), DescribeTransactions (v0) and ListTransactions (v0–1: v1 adds the duration filter,
KIP-994) on the wire: the KIP-664 admin APIs that find hanging transactions; and DeleteRecords (v0–2: v2 is
flexible); translated to and from :mod:`idemcore.net.admin`.

ListTransactions v2 (KIP-1152, Kafka 4.1: a transactional id regular expression) is not served: Kafka matches it
with a Java regular expression engine, whose syntax Python's ``re`` does not reproduce exactly. A client that
wants the pattern learns from ApiVersions that this broker lacks it; every other filter works at v1."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, cast

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.admin import (
    DeletedRecords,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribedTransaction,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    PartitionProducers,
)
from idemcore.net.wire.api import ToMessage, ToWire, WireApi, WireContext
from idemcore.net.wire.frames import make, millis, nested, response_class
from idemcore.protocol.codes import ErrorCode

DELETE_RECORDS_KEY = 21
DESCRIBE_PRODUCERS_KEY = 61
DESCRIBE_TRANSACTIONS_KEY = 65
LIST_TRANSACTIONS_KEY = 66

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_NO_THROTTLE = datetime.timedelta(0)


def wire_time(ms: int) -> datetime.datetime:
    """A time in ms since the epoch as kio's ``datetime`` (exact: no float seconds; -1 stays -1 on the wire)."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


# ---------------------------------------------------------------- DescribeProducers


def _producers_to_message(ctx: WireContext, version: int, correlation_id: int,
                          body: Any) -> tuple[DescribeProducersRequest, None]:
    pairs = tuple((str(topic.name), int(partition)) for topic in body.topics for partition in topic.partition_indexes)
    return DescribeProducersRequest(pairs, correlation_id), None


def _producers_to_wire(ctx: WireContext, version: int, body: Any, response: DescribeProducersResponse,
                       carry: None) -> Any:
    cls = response_class(body)
    topic_cls, partition_cls = nested(cls, "TopicResponse"), nested(cls, "PartitionResponse")
    state_cls = nested(cls, "ProducerState")
    answers = iter(response.partitions)  # one per requested pair, in the request's order
    topics = []
    for topic in body.topics:  # as Kafka: one entry per topic of the request, a name asked twice answered twice
        partitions = []
        for partition in topic.partition_indexes:
            answer = next(answers, None)
            if answer is None:  # only a malformed request (never one read from the wire) has no answers
                answer = PartitionProducers(str(topic.name), int(partition),
                                            response.error_code or ErrorCode.UNKNOWN_SERVER_ERROR,
                                            error_message=response.error_message)
            partitions.append(make(
                partition_cls, partition_index=int(partition), error_code=WireError(answer.error_code),
                error_message=answer.error_message, active_producers=tuple(
                    make(state_cls, producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                         last_sequence=p.last_sequence, last_timestamp=p.last_timestamp,
                         coordinator_epoch=p.coordinator_epoch, current_txn_start_offset=p.current_txn_start_offset)
                    for p in answer.active_producers)))
        topics.append(make(topic_cls, name=str(topic.name), partitions=tuple(partitions)))
    return make(cls, throttle_time=_NO_THROTTLE, topics=tuple(topics))


# ---------------------------------------------------------------- DescribeTransactions


def _describe_to_message(ctx: WireContext, version: int, correlation_id: int,
                         body: Any) -> tuple[DescribeTransactionsRequest, None]:
    return DescribeTransactionsRequest(tuple(str(i) for i in body.transactional_ids), correlation_id), None


def _describe_to_wire(ctx: WireContext, version: int, body: Any, response: DescribeTransactionsResponse,
                      carry: None) -> Any:
    cls = response_class(body)
    state_cls, topic_cls = nested(cls, "TransactionState"), nested(cls, "TopicData")
    answers = list(response.transactions)
    if not answers and response.error_code != ErrorCode.NONE:  # in process only: a malformed request
        answers = [DescribedTransaction(str(i), response.error_code) for i in body.transactional_ids]
    states = []
    for answer in answers:
        if answer.error_code != ErrorCode.NONE:
            # Kafka sets only the id and the code: the other fields keep its message's defaults (0 and "").
            states.append(make(state_cls, error_code=WireError(answer.error_code),
                               transactional_id=answer.transactional_id, transaction_state="",
                               transaction_timeout=datetime.timedelta(0), transaction_start_time=_EPOCH,
                               producer_id=0, producer_epoch=0, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in answer.topic_partitions:
            by_topic.setdefault(topic, []).append(partition)
        states.append(make(
            state_cls, error_code=WireError(ErrorCode.NONE), transactional_id=answer.transactional_id,
            transaction_state=answer.state,
            transaction_timeout=datetime.timedelta(milliseconds=answer.transaction_timeout_ms),
            transaction_start_time=wire_time(answer.transaction_start_ms), producer_id=answer.producer_id,
            producer_epoch=answer.producer_epoch,
            topics=tuple(make(topic_cls, topic=topic, partitions=tuple(partitions))
                         for topic, partitions in by_topic.items())))
    return make(cls, throttle_time=_NO_THROTTLE, transaction_states=tuple(states))


# ---------------------------------------------------------------- ListTransactions


def _list_to_message(ctx: WireContext, version: int, correlation_id: int,
                     body: Any) -> tuple[ListTransactionsRequest, None]:
    return ListTransactionsRequest(tuple(str(name) for name in body.state_filters),
                                   tuple(int(pid) for pid in body.producer_id_filters),
                                   int(getattr(body, "duration_filter", -1)),  # v0 has none: no filter
                                   correlation_id), None


def _list_to_wire(ctx: WireContext, version: int, body: Any, response: ListTransactionsResponse,
                  carry: None) -> Any:
    cls = response_class(body)
    state_cls = nested(cls, "TransactionState")
    return make(cls, throttle_time=_NO_THROTTLE, error_code=WireError(response.error_code),
                unknown_state_filters=tuple(response.unknown_state_filters),
                transaction_states=tuple(make(state_cls, transactional_id=t.transactional_id,
                                              producer_id=t.producer_id, transaction_state=t.state)
                                         for t in response.transactions))


# ---------------------------------------------------------------- DeleteRecords


def _delete_to_message(ctx: WireContext, version: int, correlation_id: int,
                       body: Any) -> tuple[DeleteRecordsRequest, None]:
    # Kafka reads the partitions into a map: a partition asked twice is deleted to its last offset, answered once.
    offsets = {(str(topic.name), int(p.partition_index)): int(p.offset)
               for topic in body.topics for p in topic.partitions}
    return DeleteRecordsRequest(tuple((topic, partition, offset) for (topic, partition), offset in offsets.items()),
                                millis(body.timeout), correlation_id), None


def _delete_to_wire(ctx: WireContext, version: int, body: Any, response: DeleteRecordsResponse, carry: None) -> Any:
    cls = response_class(body)
    topic_cls, partition_cls = nested(cls, "DeleteRecordsTopicResult"), nested(cls, "DeleteRecordsPartitionResult")
    answers = list(response.partitions)
    if not answers and response.error_code != ErrorCode.NONE:  # in process only: a malformed request
        answers = [DeletedRecords(str(topic.name), int(p.partition_index), response.error_code)
                   for topic in body.topics for p in topic.partitions]
    by_topic: dict[str, list[Any]] = {}
    for answer in answers:
        by_topic.setdefault(answer.topic, []).append(make(
            partition_cls, partition_index=answer.partition, low_watermark=answer.low_watermark,
            error_code=WireError(answer.error_code)))
    return make(cls, throttle_time=_NO_THROTTLE, topics=tuple(
        make(topic_cls, name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items()))


def _api(key: int, name: str, low: int, high: int, to_message: Callable[..., Any],
         to_wire: Callable[..., Any]) -> WireApi:
    # Each translation takes and gives its own message types, a member of the Request/Response unions.
    return WireApi(key, name, low, high, cast(ToMessage, to_message), cast(ToWire, to_wire))


DESCRIBE_PRODUCERS = _api(DESCRIBE_PRODUCERS_KEY, "DescribeProducers", 0, 0,
                          _producers_to_message, _producers_to_wire)
DESCRIBE_TRANSACTIONS = _api(DESCRIBE_TRANSACTIONS_KEY, "DescribeTransactions", 0, 0,
                             _describe_to_message, _describe_to_wire)
LIST_TRANSACTIONS = _api(LIST_TRANSACTIONS_KEY, "ListTransactions", 0, 1, _list_to_message, _list_to_wire)
DELETE_RECORDS = _api(DELETE_RECORDS_KEY, "DeleteRecords", 0, 2, _delete_to_message, _delete_to_wire)
#: The four, for the server's table of APIs (``apis.APIS``).
ADMIN_APIS = (DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS, DELETE_RECORDS)
