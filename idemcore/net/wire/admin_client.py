"""The client direction of the transaction admin APIs (messages in :mod:`idemcore.net.admin`): how idemcore writes
ListTransactions v0–1 and DescribeTransactions v0 and reads the answers, so an audit over the wire can ask a
cluster's coordinators what ``kafka-transactions.sh find-hanging`` asks. :mod:`idemcore.net.wire.client` registers
these entries in its table (``ADMIN_CLIENT_APIS``: plain tuples, as the group admin APIs do).

ListTransactions' duration filter exists from v1 (KIP-994): asked of a broker that speaks only v0 it is refused
(ValueError naming the filter), never silently dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idemcore.net.admin import (
    DescribedTransaction,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from idemcore.net.wire.frames import make, millis
from idemcore.net.wire.schema import load_request_schema

#: The first ListTransactions version with the duration filter (KIP-994).
DURATION_FILTER_SINCE = 1


def _encode_describe(request: DescribeTransactionsRequest, version: int) -> Any:
    return make(load_request_schema(65, version), transactional_ids=tuple(request.transactional_ids))


def _epoch_ms(value: Any) -> int:
    """A kio timestamp (``datetime``) as ms since the epoch."""
    if value is None:
        return -1
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1000)


def _decode_describe(request: DescribeTransactionsRequest, version: int, body: Any) -> DescribeTransactionsResponse:
    return DescribeTransactionsResponse(tuple(DescribedTransaction(
        str(s.transactional_id), int(s.error_code), str(s.transaction_state), int(s.producer_id),
        int(s.producer_epoch), millis(s.transaction_timeout), _epoch_ms(s.transaction_start_time),
        tuple(sorted((str(t.topic), int(p)) for t in s.topics for p in t.partitions)))
        for s in body.transaction_states), request.request_id)


def _encode_list(request: ListTransactionsRequest, version: int) -> Any:
    if request.duration_filter_ms >= 0 and version < DURATION_FILTER_SINCE:
        raise ValueError(f"the broker's ListTransactions v{version} has no duration filter "
                         f"(v{DURATION_FILTER_SINCE}+): cannot filter by {request.duration_filter_ms} ms")
    fields: dict[str, Any] = {"state_filters": tuple(request.state_filters),
                              "producer_id_filters": tuple(request.producer_id_filters)}
    if version >= DURATION_FILTER_SINCE:
        fields["duration_filter"] = request.duration_filter_ms
    return make(load_request_schema(66, version), **fields)


def _decode_list(request: ListTransactionsRequest, version: int, body: Any) -> ListTransactionsResponse:
    return ListTransactionsResponse(int(body.error_code), tuple(sorted(
        (ListedTransaction(str(s.transactional_id), int(s.producer_id), str(s.transaction_state))
         for s in body.transaction_states), key=lambda t: t.transactional_id)),
        tuple(str(name) for name in body.unknown_state_filters), request.request_id)


Encode = Callable[[Any, int], Any]
Decode = Callable[[Any, int, Any], Any]

#: ``(request class, key, name, min version, max version, encode, decode)`` of each API.
ADMIN_CLIENT_APIS: tuple[tuple[type, int, str, int, int, Encode, Decode], ...] = (
    (DescribeTransactionsRequest, 65, "DescribeTransactions", 0, 0, _encode_describe, _decode_describe),
    (ListTransactionsRequest, 66, "ListTransactions", 0, 1, _encode_list, _decode_list),
)
