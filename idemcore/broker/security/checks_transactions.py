"""The checks of the transaction APIs (KafkaApis' InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
FindCoordinator, DescribeTransactions and ListTransactions handlers): WRITE or DESCRIBE on the transactional id."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from idemcore.broker.security.request_context import (
    CLUSTER_DENIED,
    GROUP,
    GROUP_DENIED,
    TOPIC,
    TOPIC_DENIED,
    TXN,
    TXN_DENIED,
    Handle,
    Op,
    RequestContext,
    check,
    pick,
    split,
    then,
)
from idemcore.net.admin import (
    DescribedTransaction,
    DescribeTransactionsResponse,
)
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    FindCoordinatorResponse,
    InitProducerIdResponse,
    PartitionResult,
)
from idemcore.protocol.acls import CLUSTER_NAME
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import INTERNAL_TOPICS

log = logging.getLogger(__name__)

@check("InitProducerIdRequest")
def _init_producer_id(c: RequestContext, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster or WRITE on some topic
    (KIP-679's ``authorizeByResourceType``), else CLUSTER_AUTHORIZATION_FAILED."""
    if r.transactional_id is not None:
        if not c.allowed(Op.WRITE, TXN, r.transactional_id):
            return InitProducerIdResponse(TXN_DENIED, request_id=r.request_id)
    elif not c.cluster(Op.IDEMPOTENT_WRITE, log_denied=False) \
            and not c.authorizer.authorize_by_resource_type(c.session, Op.WRITE, TOPIC):
        log.info("Principal = %s is Denied Operation = IdempotentWrite from host = %s on resource = Cluster:LITERAL:"
                 "%s nor Write on any topic for request = %s", c.session.principal, c.session.client_host,
                 CLUSTER_NAME, c.request_name)
        return InitProducerIdResponse(CLUSTER_DENIED, request_id=r.request_id)
    return handle(r)


@check("AddPartitionsToTxnRequest")
def _add_partitions_to_txn(c: RequestContext, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id (every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise), then
    WRITE on each topic (an internal topic never): any refused or unknown partition fails the whole request, the
    others answered OPERATION_NOT_ATTEMPTED."""
    parts = tuple(r.partitions)
    if not c.allowed(Op.WRITE, TXN, r.transactional_id):
        return AddPartitionsToTxnResponse(tuple(PartitionResult(t, p, TXN_DENIED) for t, p in parts), r.request_id)
    denied = {t for t, _ in parts if t in INTERNAL_TOPICS}
    denied |= c.denied(Op.WRITE, TOPIC, (t for t, _ in parts if t not in INTERNAL_TOPICS))
    missing = {(t, p) for t, p in parts if t not in denied and not c.topic_exists(t, p)}
    if not denied and not missing:
        return handle(r)
    return AddPartitionsToTxnResponse(tuple(
        PartitionResult(t, p, TOPIC_DENIED if t in denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        if (t, p) in missing else ErrorCode.OPERATION_NOT_ATTEMPTED) for t, p in parts), r.request_id)


@check("AddOffsetsToTxnRequest")
def _add_offsets_to_txn(c: RequestContext, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id, then READ on the group."""
    if not c.allowed(Op.WRITE, TXN, r.transactional_id):
        return AddOffsetsToTxnResponse(TXN_DENIED, r.request_id)
    if not c.allowed(Op.READ, GROUP, r.group_id):
        return AddOffsetsToTxnResponse(GROUP_DENIED, r.request_id)
    return handle(r)


@check("EndTxnRequest")
def _end_txn(c: RequestContext, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id."""
    if not c.allowed(Op.WRITE, TXN, r.transactional_id):
        return EndTxnResponse(TXN_DENIED, r.request_id)
    return handle(r)




@check("FindCoordinatorRequest")
def _find_coordinator(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DESCRIBE on the group, or on the transactional id."""
    if r.key_type == GROUP_KEY and not c.allowed(Op.DESCRIBE, GROUP, r.key):
        return FindCoordinatorResponse(GROUP_DENIED, request_id=r.request_id)
    if r.key_type == TRANSACTION_KEY and not c.allowed(Op.DESCRIBE, TXN, r.key):
        return FindCoordinatorResponse(TXN_DENIED, request_id=r.request_id)
    return handle(r)




@check("DescribeTransactionsRequest")
def _describe_transactions(c: RequestContext, handle: Handle, r: Any) -> Any:
    """DESCRIBE on each transactional id; of a transaction's partitions only those of topics the principal may
    DESCRIBE."""
    ids = tuple(r.transactional_ids)
    denied = c.denied(Op.DESCRIBE, TXN, ids)
    refusals = [DescribedTransaction(i, TXN_DENIED) if i in denied else None for i in ids]

    def visible(response: Any) -> Any:
        return dataclasses.replace(response, transactions=tuple(dataclasses.replace(
            txn, topic_partitions=tuple(tp for tp in txn.topic_partitions if c.allowed(Op.DESCRIBE, TOPIC, tp[0])))
            for txn in response.transactions))
    key = lambda item: getattr(item, "transactional_id", item)  # noqa: E731
    answer = split(handle, r, ids, refusals, lambda kept: dataclasses.replace(r, transactional_ids=pick(ids, kept)),
                    "transactions", DescribeTransactionsResponse((), r.request_id), key, key)
    return then(answer, visible)


@check("ListTransactionsRequest")
def _list_transactions(c: RequestContext, handle: Handle, r: Any) -> Any:
    """Only the transactional ids the principal may DESCRIBE."""
    return then(handle(r), lambda response: dataclasses.replace(response, transactions=tuple(
        txn for txn in response.transactions if c.allowed(Op.DESCRIBE, TXN, txn.transactional_id))))
