"""The transaction APIs on the wire: InitProducerId, FindCoordinator, AddPartitionsToTxn, AddOffsetsToTxn and
EndTxn (TxnOffsetCommit is with the group offsets, :mod:`idemcore.net.wire.offsets`).

The versions served stop before transaction version 2 (KIP-890 part 2, KIP-939), which the broker does not
implement: InitProducerId v6 (2PC), EndTxn v5 (an epoch bump per transaction, answered with the new epoch) and
AddPartitionsToTxn v4+ (the brokers' batched and verify-only form; clients send v0–3)."""

from __future__ import annotations

import datetime
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.messages import (
    GROUP_KEY,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    Response,
)
from idemcore.net.wire.api import WireApi, WireContext
from idemcore.net.wire.frames import make, millis, nested, response_class
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

#: No throttling: every answer says so.
NO_THROTTLE = datetime.timedelta(0)

_Answer = TypeVar("_Answer")


def answer_of(response: Response, kind: type[_Answer]) -> _Answer:
    """``response`` as the ``kind`` of answer its request gets (a ToWire takes any Response: a server that pairs
    a request with another API's answer is a bug, named here)."""
    if not isinstance(response, kind):
        raise TypeError(f"expected a {kind.__name__}, got {type(response).__name__}")
    return response


def wire_error(code: int, version: int, fenced_since: int | None = None) -> WireError:
    """``code`` as kio's enum. PRODUCER_FENCED (KIP-588) is answered only from ``fenced_since`` on (the version
    that added it); an older client gets INVALID_PRODUCER_EPOCH, which it handles the same way (KafkaApis does the
    same for InitProducerId < v4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn < v2)."""
    if fenced_since is not None and version < fenced_since and code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return WireError(int(code))


# ---------------------------------------------------------------- InitProducerId (key 22)


def _init_producer_id_to_message(ctx: WireContext, version: int, correlation_id: int,
                                 body: Any) -> tuple[InitProducerIdRequest, None]:
    transactional_id = body.transactional_id
    request = InitProducerIdRequest(
        request_id=correlation_id,
        transactional_id=None if transactional_id is None else str(transactional_id),
        transaction_timeout_ms=millis(body.transaction_timeout),
        # v3+ (KIP-360): the producer's current id and epoch when it asks for a bump after an abortable error.
        producer_id=int(getattr(body, "producer_id", NO_PRODUCER_ID)),
        producer_epoch=int(getattr(body, "producer_epoch", NO_PRODUCER_EPOCH)))
    return request, None


def _init_producer_id_to_wire(ctx: WireContext, version: int, body: Any, answer: Response,
                              carry: None) -> Any:
    response = answer_of(answer, InitProducerIdResponse)
    return make(response_class(body), throttle_time=NO_THROTTLE,
                error_code=wire_error(response.error_code, version, fenced_since=4),
                producer_id=response.producer_id, producer_epoch=response.producer_epoch)


#: v0–5 (v3+ with the producer's id and epoch, v2+ flexible). v6 is KIP-939's two-phase commit, not implemented.
INIT_PRODUCER_ID = WireApi(22, "InitProducerId", 0, 5, _init_producer_id_to_message, _init_producer_id_to_wire)


# FindCoordinator v4+ (KIP-699) batches keys: each key is its own message through the broker (in a cluster each
# may have another coordinator), and the answers come back one per key, in order. A v4+ request with no keys is
# answered with no coordinators (the broker is still asked once, for its key type: it makes that coordinator's
# internal topic, as the first real request would).


def _find_coordinator_to_message(ctx: WireContext, version: int, correlation_id: int,
                                 body: Any) -> tuple[Any, tuple[str, ...] | None]:
    key_type = int(getattr(body, "key_type", GROUP_KEY))  # v0: groups only
    if version >= 4:
        keys = tuple(str(key) for key in body.coordinator_keys)
        if len(keys) <= 1:
            return FindCoordinatorRequest(keys[0] if keys else "", key_type, correlation_id), keys
        return tuple(FindCoordinatorRequest(key, key_type, correlation_id) for key in keys), keys
    return FindCoordinatorRequest(str(body.key), key_type, correlation_id), None


def _where(ctx: WireContext, response: FindCoordinatorResponse) -> dict[str, Any]:
    """The coordinator's node: the one the broker named (a cluster), else this node; Kafka answers an error with
    Node.noNode(): id -1, host "", port -1."""
    if response.error_code != ErrorCode.NONE:
        return {"node_id": -1, "host": "", "port": -1}
    for one in response.listeners:  # a cluster's coordinator, on the listener this client came in on
        if one.name == ctx.listener:
            return {"node_id": response.node_id, "host": one.host, "port": one.port}
    if response.node_id >= 0 and response.host and response.port >= 0:
        return {"node_id": response.node_id, "host": response.host, "port": response.port}
    return {"node_id": ctx.node_id, "host": ctx.host, "port": ctx.port}


def _find_coordinator_to_wire(ctx: WireContext, version: int, body: Any, answer: Any,
                              keys: tuple[str, ...] | None) -> Any:
    answers = answer if type(answer) is tuple else (answer,)
    responses = [answer_of(one, FindCoordinatorResponse) for one in answers]
    cls = response_class(body)
    if keys is None:
        response = responses[0]
        found = response.error_code == ErrorCode.NONE
        return make(cls, throttle_time=NO_THROTTLE, error_code=wire_error(response.error_code, version),
                    error_message=None if found else response.error_message, **_where(ctx, response))
    coordinator_cls = nested(cls, "Coordinator")
    if len(responses) < len(keys):  # one message asked for every key (at most one key)
        responses = responses * len(keys)
    return make(cls, throttle_time=NO_THROTTLE, coordinators=tuple(
        make(coordinator_cls, key=key, error_code=wire_error(response.error_code, version),
             error_message=None if response.error_code == ErrorCode.NONE else response.error_message,
             **_where(ctx, response))
        for key, response in zip(keys, responses, strict=False)))


#: v0–6 (v1+ key type and error message, v3+ flexible, v4+ batched keys).
FIND_COORDINATOR = WireApi(10, "FindCoordinator", 0, 6, _find_coordinator_to_message, _find_coordinator_to_wire)


# ---------------------------------------------------------------- AddPartitionsToTxn (key 24)


def _add_partitions_to_message(ctx: WireContext, version: int, correlation_id: int,
                               body: Any) -> tuple[AddPartitionsToTxnRequest, list[tuple[str, int]]]:
    # Each partition once, in the request's order: Kafka answers from a map, one result per partition.
    wanted = list(dict.fromkeys((str(topic.name), int(partition))
                                for topic in body.v3_and_below_topics for partition in topic.partitions))
    request = AddPartitionsToTxnRequest(str(body.v3_and_below_transactional_id), int(body.v3_and_below_producer_id),
                                        int(body.v3_and_below_producer_epoch), tuple(wanted), correlation_id)
    return request, wanted


def _add_partitions_to_wire(ctx: WireContext, version: int, body: Any, answer: Response,
                            wanted: list[tuple[str, int]]) -> Any:
    response = answer_of(answer, AddPartitionsToTxnResponse)
    cls = response_class(body)
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")
    partition_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
    codes = {(result.topic, result.partition): result.error_code for result in response.results}
    by_topic: dict[str, list[Any]] = {}
    for topic, partition in wanted:
        code = codes.get((topic, partition), ErrorCode.UNKNOWN_SERVER_ERROR)
        by_topic.setdefault(topic, []).append(make(
            partition_cls, partition_index=partition, partition_error_code=wire_error(code, version, fenced_since=2)))
    return make(cls, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=tuple(
        make(topic_cls, name=name, results_by_partition=tuple(results)) for name, results in by_topic.items()))


#: v0–3, the clients' form (v3 flexible). v4+ is the brokers' (batched transactions, verify-only: KIP-890).
ADD_PARTITIONS_TO_TXN = WireApi(24, "AddPartitionsToTxn", 0, 3, _add_partitions_to_message, _add_partitions_to_wire)


# ---------------------------------------------------------------- AddOffsetsToTxn (key 25)


def _add_offsets_to_message(ctx: WireContext, version: int, correlation_id: int,
                            body: Any) -> tuple[AddOffsetsToTxnRequest, None]:
    return AddOffsetsToTxnRequest(str(body.transactional_id), int(body.producer_id), int(body.producer_epoch),
                                  str(body.group_id), correlation_id), None


def _add_offsets_to_wire(ctx: WireContext, version: int, body: Any, answer: Response,
                         carry: None) -> Any:
    response = answer_of(answer, AddOffsetsToTxnResponse)
    return make(response_class(body), throttle_time=NO_THROTTLE,
                error_code=wire_error(response.error_code, version, fenced_since=2))


#: v0–4 (v3+ flexible; v4 only allows TRANSACTION_ABORTABLE, which this broker never answers).
ADD_OFFSETS_TO_TXN = WireApi(25, "AddOffsetsToTxn", 0, 4, _add_offsets_to_message, _add_offsets_to_wire)


# ---------------------------------------------------------------- EndTxn (key 26)


def _end_txn_to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[EndTxnRequest, None]:
    return EndTxnRequest(str(body.transactional_id), int(body.producer_id), int(body.producer_epoch),
                         bool(body.committed), correlation_id), None


def _end_txn_to_wire(ctx: WireContext, version: int, body: Any, answer: Response, carry: None) -> Any:
    response = answer_of(answer, EndTxnResponse)
    return make(response_class(body), throttle_time=NO_THROTTLE,
                error_code=wire_error(response.error_code, version, fenced_since=2))


#: v0–4 (v3+ flexible). v5 is transaction version 2: the epoch bumps at every EndTxn, which this broker lacks.
END_TXN = WireApi(26, "EndTxn", 0, 4, _end_txn_to_message, _end_txn_to_wire)
