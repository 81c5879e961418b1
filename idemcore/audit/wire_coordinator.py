"""Asking a live cluster's transaction coordinators whether an open transaction is hanging.

A log directory's audit rebuilds the coordinators' state from ``__transaction_state``
(:mod:`idemcore.audit.find_hanging`); over the wire the audit asks them, as ``kafka-transactions.sh
find-hanging`` does (``FindHangingTransactionsCommand``): ListTransactions of every broker filtered by the open
transactions' producer ids (``lookupTransactionalIds``), then DescribeTransactions of each id found, at its
coordinator (FindCoordinator), for the partitions of its transaction. The answers become a
:class:`~idemcore.audit.find_hanging.TransactionLog`, so every open transaction is judged by the same
``filterHangingTransactions`` rule (:meth:`TransactionLog.judge`): ``hanging``, ``cleared``, or, where the cluster
would not answer (ListTransactions refused or not spoken, an id the principal may not describe),
``hanging_unconfirmed``. A principal that may not describe every transactional id (FindCoordinator of an id
nobody holds is refused) sees only its own in ListTransactions: a producer id none of them holds is then left
unconfirmed rather than confirmed hanging.

Only ids in a state with partitions (Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence) are described: an
Empty or Complete* id describes no partition, which ListTransactions' state already says.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from idemcore.audit.find_hanging import LOG_REFUSED, UNCONFIRMED, CoordinatorTxn, Judgement, TransactionLog
from idemcore.audit.wire_fetch import ClusterReader
from idemcore.errors import IdemcoreError
from idemcore.net.admin import (
    DescribedTransaction,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from idemcore.net.messages import TRANSACTION_KEY, FindCoordinatorRequest, FindCoordinatorResponse
from idemcore.protocol.codes import ErrorCode, error_name
from idemcore.record.kafka_files.transaction_log import TransactionState

log = logging.getLogger(__name__)

_BY_NAME = {state.kafka_name: state for state in TransactionState}
#: The states whose transaction holds partitions (DescribeTransactions lists them).
_WITH_PARTITIONS = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


@dataclass(frozen=True)
class CoordinatorAnswers(TransactionLog):
    """The coordinators' state of the transactional ids holding the open transactions' producer ids, as they
    answered ListTransactions and DescribeTransactions (``brokers``: who was asked). ``sees_every_id``: whether the
    principal may describe any transactional id; if not, ListTransactions left out the ids it may not describe, so
    a producer id no listed id holds is not confirmed hanging but left unconfirmed."""

    brokers: tuple[str, ...] = ()
    sees_every_id: bool = True

    def describe(self) -> str:
        return (f"ListTransactions and DescribeTransactions of {len(self.brokers)} broker(s): "
                f"{len(self.transactions):,} transactional id(s) hold the open transactions' producer ids"
                + ("" if self.sees_every_id else " (of the ids this principal may describe)"))

    def judge(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
              now_ms: int | None = None) -> Judgement:
        if not self.sees_every_id and not self.holders(producer_id):
            return Judgement(UNCONFIRMED, f"no transactional id this principal may describe has producer id "
                                          f"{producer_id} (ListTransactions lists only those): not confirmed", None)
        return super().judge(topic, partition, producer_id, producer_epoch, now_ms)


class Refused(Exception):
    """The cluster would not say (one line why)."""


def ask_coordinators(reader: ClusterReader, open_txns: pa.Table) -> tuple[TransactionLog | None, str | None]:
    """The coordinators' view of the producers of ``open_txns`` and the report's ``transaction_log`` status: the
    answers and None (read), or None and ``refused`` where the cluster would not say (logged, one line). No open
    transaction: nothing asked, (None, None)."""
    producer_ids = sorted(set(open_txns.column("producer_id").to_pylist()))
    if not producer_ids:
        return None, None
    try:
        listed, brokers = _list(reader, producer_ids)
        described = _describe(reader, [t for t in listed if t.state in _WITH_PARTITIONS])
        sees_every_id = _sees_every_id(reader)
    except Refused as why:
        log.warning("hanging transactions not confirmed: %s", why)
        return None, LOG_REFUSED
    transactions = {}
    for txn in listed:
        state = _BY_NAME.get(txn.state)
        if state is None:
            log.warning("hanging transactions: %r has state %r, which idemcore does not know; left out",
                        txn.transactional_id, txn.state)
            continue
        answer = described.get(txn.transactional_id)
        if txn.state in _WITH_PARTITIONS and answer is None:
            continue  # gone between the two requests: as an id with no entry
        transactions[txn.transactional_id] = CoordinatorTxn(
            txn.transactional_id, answer.producer_id if answer else txn.producer_id,
            answer.producer_epoch if answer else -1, state,
            frozenset(answer.topic_partitions) if answer else frozenset(),
            answer.transaction_timeout_ms if answer else 0, answer.transaction_start_ms if answer else -1, -1,
            Path(), -1)
    return CoordinatorAnswers((), transactions, records=len(listed), brokers=tuple(brokers),
                              sees_every_id=sees_every_id), None


def _call(reader: ClusterReader, address: tuple[str, int], request: object) -> object:
    try:
        return reader.channel(address).call(request)  # type: ignore[arg-type]
    except (ConnectionError, TimeoutError, IdemcoreError, ValueError) as error:
        raise Refused(f"{type(request).__name__} at {address[0]}:{address[1]}: {error}") from None


def _list(reader: ClusterReader, producer_ids: list[int]) -> tuple[list[ListedTransaction], list[str]]:
    """ListTransactions of every broker (each coordinator answers for its own ids), filtered by producer id."""
    if not reader.brokers:
        reader.refresh()
    addresses = sorted(set(reader.brokers.values())) or list(reader.bootstrap[:1])
    found: dict[str, ListedTransaction] = {}
    for address in addresses:
        answer = _call(reader, address, ListTransactionsRequest(producer_id_filters=tuple(producer_ids)))
        assert isinstance(answer, ListTransactionsResponse)
        if answer.error_code != ErrorCode.NONE:
            raise Refused(f"ListTransactions at {address[0]}:{address[1]}: {error_name(answer.error_code)}")
        for txn in answer.transactions:
            found[txn.transactional_id] = txn
    return [found[name] for name in sorted(found)], [f"{host}:{port}" for host, port in addresses]


def _sees_every_id(reader: ClusterReader) -> bool:
    """Whether the principal may describe a transactional id it was given no ACL for by name: FindCoordinator of
    an id nobody uses (Kafka checks DESCRIBE on the id first); refused means ListTransactions hides some ids."""
    probe = f"idemcore-audit-probe-{uuid.uuid4().hex}"
    answer = _call(reader, _first_broker(reader), FindCoordinatorRequest(probe, TRANSACTION_KEY))
    assert isinstance(answer, FindCoordinatorResponse)
    return answer.error_code != ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _first_broker(reader: ClusterReader) -> tuple[str, int]:
    return sorted(set(reader.brokers.values()))[0] if reader.brokers else reader.bootstrap[0]


def _describe(reader: ClusterReader, listed: list[ListedTransaction]) -> dict[str, DescribedTransaction]:
    """DescribeTransactions of each id at its coordinator; an id described with an error other than
    TRANSACTIONAL_ID_NOT_FOUND (gone since) refuses the whole confirmation."""
    by_coordinator: dict[tuple[str, int], list[str]] = {}
    for txn in listed:
        answer = _call(reader, _first_broker(reader), FindCoordinatorRequest(txn.transactional_id, TRANSACTION_KEY))
        assert isinstance(answer, FindCoordinatorResponse)
        if answer.error_code != ErrorCode.NONE:
            raise Refused(f"FindCoordinator of {txn.transactional_id!r}: {error_name(answer.error_code)}")
        by_coordinator.setdefault((answer.host, answer.port), []).append(txn.transactional_id)
    out: dict[str, DescribedTransaction] = {}
    for address, ids in by_coordinator.items():
        answer = _call(reader, address, DescribeTransactionsRequest(tuple(ids)))
        assert isinstance(answer, DescribeTransactionsResponse)
        for described in answer.transactions:
            if described.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                continue
            if described.error_code != ErrorCode.NONE:
                raise Refused(f"DescribeTransactions of {described.transactional_id!r}: "
                              f"{error_name(described.error_code)}")
            out[described.transactional_id] = described
    return out
