"""The transaction requests as the broker answers them: each unpacks its request, asks the transaction
coordinator, and packs the answer. A field of the wrong type is answered INVALID_REQUEST with a message naming
it, never raised out of ``Broker.handle`` (a client's bad request must not stop the broker)."""

from __future__ import annotations

from idemcore.broker.coordinator import TransactionCoordinator
from idemcore.broker.input_checks import checked
from idemcore.net.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    PartitionResult,
)
from idemcore.protocol.codes import ErrorCode


def init_producer_id(coordinator: TransactionCoordinator, request: InitProducerIdRequest) -> InitProducerIdResponse:
    result = checked(request, lambda: coordinator.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, request.producer_id, request.producer_epoch))
    if isinstance(result, str):
        return InitProducerIdResponse(ErrorCode.INVALID_REQUEST, request_id=request.request_id, error_message=result)
    return InitProducerIdResponse(result.error_code, result.producer_id, result.producer_epoch, request.request_id)


def add_partitions_to_txn(coordinator: TransactionCoordinator,
                          request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    partitions = request.partitions
    if not isinstance(partitions, tuple | list):
        return AddPartitionsToTxnResponse((), request.request_id)
    answer = checked(request, lambda: coordinator.add_partitions_to_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, partitions))
    if isinstance(answer, str):  # every well-formed pair answered; a malformed one cannot be named in a result
        answer = {tp: ErrorCode.INVALID_REQUEST for tp in partitions
                  if isinstance(tp, tuple) and len(tp) == 2 and type(tp[0]) is str and type(tp[1]) is int}
    return AddPartitionsToTxnResponse(tuple(PartitionResult(topic, partition, int(code))
                                            for (topic, partition), code in answer.items()), request.request_id)


def add_offsets_to_txn(coordinator: TransactionCoordinator,
                       request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if type(request.group_id) is not str or not request.group_id:
        return AddOffsetsToTxnResponse(ErrorCode.INVALID_GROUP_ID, request.request_id)
    code = checked(request, lambda: coordinator.add_offsets_to_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id))
    return AddOffsetsToTxnResponse(ErrorCode.INVALID_REQUEST if isinstance(code, str) else int(code),
                                   request.request_id)


def end_txn(coordinator: TransactionCoordinator, request: EndTxnRequest) -> EndTxnResponse:
    if type(request.committed) is not bool:
        return EndTxnResponse(ErrorCode.INVALID_REQUEST, request.request_id)
    code = checked(request, lambda: coordinator.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed))
    return EndTxnResponse(ErrorCode.INVALID_REQUEST if isinstance(code, str) else int(code), request.request_id)
