"""The client direction of ListTransactions and DescribeTransactions (what `audit kafka://` asks the
coordinators): each request idemcore's channel writes is read back by the server's translation as the same message,
and each answer the server writes is read back by the client as the same response; through real frames (kio)."""

from __future__ import annotations

import pytest

from idemcore.net.admin import (
    DescribedTransaction,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from idemcore.net.wire.admin import DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS
from idemcore.net.wire.api import WireContext
from idemcore.net.wire.broker_client import broker_api_of
from idemcore.net.wire.frames import read_request, read_response, request_frame, response_frame

CTX = WireContext(node_id=0, host="127.0.0.1", port=9092, cluster_id="idemcore", topics=lambda: {"t": 2})


def _round_trip(server_api, request, response, version):
    """``request`` written by the client, read by the server; ``response`` written by the server, read by the
    client: what each side reads."""
    client_api = broker_api_of(request)  # what BlockingBrokerChannel uses
    frame = request_frame(client_api.key, version, 7, "audit", client_api.encode(request, version))
    header, body = read_request(frame[4:])
    read, carry = server_api.to_message(CTX, version, header.correlation_id, body)
    answer = b"".join(response_frame(7, server_api.to_wire(CTX, version, body, response, carry)))
    correlation, answered = read_response(client_api.key, version, answer[4:])
    assert correlation == 7
    return read, client_api.decode(request, version, answered)


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions_both_ways(version):
    request = ListTransactionsRequest(producer_id_filters=(4, 9), duration_filter_ms=-1 if version == 0 else 60_000)
    response = ListTransactionsResponse(transactions=(ListedTransaction("b", 9, "Ongoing"),
                                                      ListedTransaction("a", 4, "CompleteCommit")))
    read, answer = _round_trip(LIST_TRANSACTIONS, request, response, version)
    assert (read.producer_id_filters, read.duration_filter_ms) == ((4, 9), request.duration_filter_ms)
    assert answer.transactions == (ListedTransaction("a", 4, "CompleteCommit"), ListedTransaction("b", 9, "Ongoing"))


def test_list_transactions_v0_refuses_a_duration_filter_rather_than_drop_it():
    with pytest.raises(ValueError, match="no duration filter"):
        broker_api_of(ListTransactionsRequest(duration_filter_ms=5)).encode(ListTransactionsRequest(
            duration_filter_ms=5), 0)


def test_describe_transactions_both_ways():
    request = DescribeTransactionsRequest(("tx", "gone"))
    response = DescribeTransactionsResponse((
        DescribedTransaction("tx", 0, "Ongoing", 12, 3, 60_000, 1_700_000_000_123, (("t", 0), ("t", 1))),
        DescribedTransaction("gone", 105)))
    read, answer = _round_trip(DESCRIBE_TRANSACTIONS, request, response, 0)
    assert read.transactional_ids == ("tx", "gone")
    assert answer.transactions[0] == response.transactions[0]
    assert (answer.transactions[1].transactional_id, answer.transactions[1].error_code) == ("gone", 105)
