"""The group-offset requests as the broker answers them: each unpacks its request, asks the group coordinator
and packs the answer, one result per offset of the request, in its order. A field of the wrong type is answered
INVALID_REQUEST with a message naming it, never raised out of ``Broker.handle``: a client's bad request must not
stop the broker."""

from __future__ import annotations

from collections.abc import Mapping

from idemcore.broker.group.coordinator import GroupCoordinator
from idemcore.broker.input_checks import checked
from idemcore.net.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetEntry,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import TopicPartition


def _results(offsets: object, answer: Mapping[TopicPartition, ErrorCode] | str) -> tuple[PartitionResult, ...]:
    """One result per offset entry of the request (INVALID_REQUEST for all when the request was refused)."""
    if not isinstance(offsets, tuple | list):
        return ()
    entries = [entry for entry in offsets if type(entry) is OffsetEntry]
    if isinstance(answer, str):
        return tuple(PartitionResult(e.topic, e.partition, int(ErrorCode.INVALID_REQUEST)) for e in entries)
    return tuple(PartitionResult(e.topic, e.partition, int(answer[(e.topic, e.partition)])) for e in entries)


def offset_commit(coordinator: GroupCoordinator, request: OffsetCommitRequest) -> OffsetCommitResponse:
    answer = checked(request, lambda: coordinator.offset_commit(request.group_id, request.offsets,
                                                                request.generation_id, request.member_id,
                                                                request.group_instance_id))
    return OffsetCommitResponse(_results(request.offsets, answer), request.request_id,
                                answer if isinstance(answer, str) else None)


def txn_offset_commit(coordinator: GroupCoordinator, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    answer = checked(request, lambda: coordinator.txn_offset_commit(
        request.transactional_id, request.group_id, request.producer_id, request.producer_epoch, request.offsets,
        request.generation_id, request.member_id, request.group_instance_id))
    return TxnOffsetCommitResponse(_results(request.offsets, answer), request.request_id,
                                   answer if isinstance(answer, str) else None)


def offset_fetch(coordinator: GroupCoordinator, request: OffsetFetchRequest) -> OffsetFetchResponse:
    answer = checked(request, lambda: coordinator.offset_fetch(request.group_id, request.partitions,
                                                               request.require_stable))
    if isinstance(answer, str):
        return OffsetFetchResponse((), int(ErrorCode.INVALID_REQUEST), request.request_id, answer)
    error, offsets = answer
    if request.partitions is None:
        fetched = tuple(offsets.values())
    else:  # the request's order; a partition asked twice is answered twice
        fetched = tuple(offsets[tp] for tp in request.partitions) if error is ErrorCode.NONE else ()
    return OffsetFetchResponse(fetched, int(error), request.request_id)
