"""Asking the transaction coordinator: is an open transaction really hanging?

An audit of a log directory finds, per partition, the transactions still open when the log ends. Idle time alone
cannot tell a hanging transaction (one no marker will ever end) from one the coordinator still means to end: an
ongoing transaction it will abort at its timeout, or a decided one whose markers are still to be written. Kafka's
operators tell them apart with ``kafka-transactions.sh find-hanging``, which asks the coordinator. Where the log
directory holds the coordinator's own log, ``__transaction_state-N/``, this module rebuilds what the coordinator
would load from it and judges every candidate as that command does.

Reading the log (Kafka's ``TransactionStateManager.loadTransactionMetadata``, the project's
:meth:`~idemcore.broker.coordinator.TransactionCoordinator.load`): the segments of every ``__transaction_state``
partition in offset order, every record of every data batch; the last record of a transactional id wins and a
tombstone (null value) removes it. A key of an unknown version is skipped, as Kafka skips it. Anything else the
coordinator could not load (a record without a key, a key or value that does not decode, a state that is never
written, a corrupt batch, an id found in two partitions) refuses the whole read with one line naming the file and
the offset: verdicts drawn from a log read in part would be guesses presented as facts. A torn tail (a write cut
short by a crash, never acknowledged) is left out, as Kafka's recovery truncates it.

The rule, from Kafka's ``tools/src/main/java/org/apache/kafka/tools/TransactionsCommand.java``,
``FindHangingTransactionsCommand``:

1. ``collectCandidateOpenTransactions``: a candidate is a producer with a transaction open on a partition
   (``currentTransactionStartOffset`` present) whose last write there is more than the maximum transaction
   timeout before now (``currentTimeMs - lastTimestamp > maxTransactionTimeoutMs``): the report's idle rule,
   ``idle_ms > hanging_after_ms``.
2. ``lookupTransactionalIds``: ListTransactions filtered by the candidates' producer ids. The coordinator matches
   each id's *current* producer id (``TransactionStateManager.listTransactionStates``:
   ``filterProducerIds.contains(txnMetadata.producerId)``; Dead ids are left out).
3. ``filterHangingTransactions``: no transactional id for the producer id -> hanging; DescribeTransactions answers
   TRANSACTIONAL_ID_NOT_FOUND -> hanging (from a log, that is the same case: a removed id has no entry); otherwise
   hanging exactly when the partition is not among the described ``topicPartitions``. The described partitions
   are the id's in-memory ones (``TransactionCoordinator.handleDescribeTransactions``), which after a load are
   the record's: all of an Ongoing or Prepare* transaction's (a reloaded coordinator sends every Prepare* marker
   again), none for Empty (``readTxnRecordValue`` ignores them) or Complete* (written without any).

The producer epoch is not compared, as Kafka does not compare it: a marker with a higher epoch than the
partition's open transaction still ends it, so a partition the coordinator will mark is not hanging whatever the
epoch. Where the epochs differ the reason says so.
"""

from __future__ import annotations

import functools
import mmap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from idemcore.audit.columns import TOPIC
from idemcore.kernels import Backend
from idemcore.protocol.constants import TRANSACTION_STATE_TOPIC
from idemcore.record.kafka_files import STOP_BAD_LENGTH, STOP_BAD_MAGIC, PartitionFiles, scan_segment
from idemcore.record.kafka_files.transaction_log import (
    TransactionLogFormatError,
    TransactionState,
    decode_key,
    decode_value,
)
from idemcore.record.v2 import CorruptRecordError, decode_batch

#: ``verdict`` of an open transaction: a candidate the coordinator's log confirms hanging (find-hanging lists it).
HANGING = "hanging"
#: A candidate judged by idle time alone: there was no transaction log to ask (or it was ignored).
UNCONFIRMED = "hanging_unconfirmed"
#: A candidate the coordinator still tracks (it will write the marker): not hanging.
CLEARED = "cleared"
#: Not a candidate: idle at most the bound (find-hanging does not look at it).
RECENT = "recent"
#: The verdicts counted as hanging (the report's ``hanging`` column).
HANGING_VERDICTS = (HANGING, UNCONFIRMED)

#: ``transaction_log`` of a report: the coordinator's log was read / the audit held none / it was not read / (over
#: the wire) the cluster's coordinators would not say (ListTransactions refused, or not spoken).
LOG_READ, LOG_ABSENT, LOG_IGNORED, LOG_REFUSED = "read", "absent", "ignored", "refused"
#: The reason of an unconfirmed candidate, by ``transaction_log``.
NOT_CONFIRMED = {LOG_ABSENT: "not confirmed: no transaction log",
                 LOG_IGNORED: "not confirmed: transaction log not read (ignored)",
                 LOG_REFUSED: "not confirmed: the cluster's transaction coordinators could not be asked"}

#: The columns :func:`judge_open_txns` appends to the open transactions.
VERDICT_FIELDS = [
    pa.field("transactional_id", pa.string()), pa.field("coordinator_state", pa.string()),
    pa.field("coordinator_producer_id", pa.int64()), pa.field("coordinator_producer_epoch", pa.int16()),
    pa.field("verdict", pa.string()), pa.field("reason", pa.string()), pa.field("hanging", pa.bool_()),
]

_IDLE = (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)
_PREPARE = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
_NEVER_STORED = (TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE)


class TransactionLogError(TransactionLogFormatError):
    """A ``__transaction_state`` record the coordinator could not load; the message is one line naming the file
    and the offset."""

    def __init__(self, path: Path, offset: int | None, position: int | None, what: str):
        where = "" if offset is None else f"offset {offset}" + ("" if position is None else f" (position {position})")
        super().__init__(f"{path}: {where + ': ' if where else ''}{what}; the transaction coordinator's state "
                         "cannot be rebuilt from this log")
        self.path, self.offset, self.position = path, offset, position


@dataclass(frozen=True)
class CoordinatorTxn:
    """One transactional id as the coordinator holds it after loading its log (the last record of the id)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TransactionState
    #: The partitions DescribeTransactions would answer: the record's, none for Empty (Kafka ignores them).
    partitions: frozenset[tuple[str, int]]
    timeout_ms: int
    start_timestamp_ms: int
    last_update_timestamp_ms: int
    #: Where the record is: the segment and the record's offset.
    file: Path
    offset: int

    @property
    def state_name(self) -> str:
        return self.state.kafka_name


@dataclass(frozen=True)
class Judgement:
    """What find-hanging + describe would say of one open transaction (``txn``: the transactional id consulted)."""

    verdict: str
    reason: str
    txn: CoordinatorTxn | None


@dataclass(frozen=True)
class TransactionLog:
    """The coordinator's state rebuilt from ``__transaction_state``: every live transactional id.

    ``partitions``: the ``__transaction_state`` partitions read. ``records``: the records read (tombstones and
    skipped ones included); ``tombstones``: of them, removals; ``unknown_keys``: skipped for their key version.
    """

    partitions: tuple[int, ...]
    transactions: Mapping[str, CoordinatorTxn]
    records: int = 0
    tombstones: int = 0
    unknown_keys: int = 0

    @functools.cached_property
    def _by_producer_id(self) -> dict[int, list[CoordinatorTxn]]:
        index: dict[int, list[CoordinatorTxn]] = {}
        for transactional_id in sorted(self.transactions):
            txn = self.transactions[transactional_id]
            index.setdefault(txn.producer_id, []).append(txn)
        return index

    def holders(self, producer_id: int) -> list[CoordinatorTxn]:
        """The ids whose current producer id is ``producer_id`` (ListTransactions' ``filterProducerIds``), sorted."""
        return list(self._by_producer_id.get(producer_id, ()))

    def judge(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
              now_ms: int | None = None) -> Judgement:
        """``filterHangingTransactions`` for one candidate: HANGING or CLEARED, with a one-line reason
        (``now_ms``: to say when an ongoing transaction is past its timeout)."""
        where = f"{topic}-{partition}"
        holders = self.holders(producer_id)
        if not holders:
            return Judgement(HANGING, f"no transactional id in the transaction log has producer id {producer_id}: "
                                      "no coordinator will write a marker here", None)
        # Kafka keeps one id per producer id (a HashMap, the last listed wins); a producer id is one id's, unless
        # the log is odd. Deterministic here: an id whose transaction includes the partition, else the first.
        txn = next((t for t in holders if (topic, partition) in t.partitions), holders[0])
        said = f"{txn.transactional_id!r} is {txn.state_name} (producer {txn.producer_id} epoch {txn.producer_epoch})"
        epoch = "" if txn.producer_epoch == producer_epoch else \
            f"; the partition's transaction has epoch {producer_epoch}"
        if (topic, partition) in txn.partitions:
            if txn.state in _PREPARE:
                marker = "COMMIT" if txn.state is TransactionState.PREPARE_COMMIT else "ABORT"
                why = f": its {marker} marker for {where} is pending (a coordinator sends it again when it loads)"
            else:
                why = (f" with {where} in its transaction: EndTxn, or an abort at its {txn.timeout_ms:,} ms timeout, "
                       "will write the marker")
                overdue = None if now_ms is None else now_ms - txn.start_timestamp_ms - txn.timeout_ms
                if overdue is not None and overdue > 0:  # Kafka aborts it at its next timeout check
                    why += f" (its timeout passed {overdue:,} ms ago: the abort is due)"
            return Judgement(CLEARED, f"{said}{why}{epoch}", txn)
        if txn.state in _IDLE:
            why = f": no transaction in progress, so no marker will come for {where}"
        else:
            others = ", ".join(f"{t}-{p}" for t, p in sorted(txn.partitions)) or "no partition"
            why = f" with {others} but not {where}: no marker will come for {where}"
        return Judgement(HANGING, f"{said}{why}{epoch}", txn)

    def describe(self) -> str:
        """One line: which partitions were read and how many ids they hold."""
        return (f"{TRANSACTION_STATE_TOPIC} partition(s) {_ranges(self.partitions)}: {len(self.transactions):,} "
                f"transactional id(s) from {self.records:,} record(s)")


def _ranges(numbers: Sequence[int]) -> str:
    """``0-2, 5`` for ``(0, 1, 2, 5)``."""
    out: list[str] = []
    start = previous = None
    for n in sorted(numbers):
        if previous is not None and n == previous + 1:
            previous = n
            continue
        if start is not None:
            out.append(f"{start}" if start == previous else f"{start}-{previous}")
        start = previous = n
    if start is not None:
        out.append(f"{start}" if start == previous else f"{start}-{previous}")
    return ", ".join(out) or "none"


# --- Reading the log ------------------------------------------------------------------------------------------------

def transaction_state_partitions(partitions: Iterable[PartitionFiles]) -> list[PartitionFiles]:
    """The ``__transaction_state`` partitions of a listing, by partition number."""
    return sorted((p for p in partitions if p.topic == TRANSACTION_STATE_TOPIC), key=lambda p: p.partition)


def read_transaction_log(partitions: Iterable[PartitionFiles], *,
                         backend: str | Backend | None = None) -> TransactionLog | None:
    """The coordinator's state from the ``__transaction_state`` partitions among ``partitions`` (others are
    passed over); None when there is none. Raises :class:`TransactionLogError` (one line: file, offset, what)
    for a log the coordinator could not load (see the module docstring)."""
    mine = transaction_state_partitions(partitions)
    if not mine:
        return None
    latest: dict[str, CoordinatorTxn | None] = {}
    home: dict[str, tuple[int, Path, int]] = {}  # id -> (partition, file, offset) where first seen
    records = tombstones = unknown = 0
    for files in mine:
        for segment in files.segments:
            for offset, position, key, raw in _records(segment.log, backend):
                records += 1
                if key is None:  # Kafka: require(record.hasKey, "Transaction state log's key should not be null")
                    raise TransactionLogError(segment.log, offset, position, "a record without a key")
                try:
                    transactional_id = decode_key(key)
                except TransactionLogFormatError as exc:
                    raise TransactionLogError(segment.log, offset, position, f"key: {exc}") from None
                if transactional_id is None:  # a key version this reader does not know: skipped, as Kafka does
                    unknown += 1
                    continue
                first = home.setdefault(transactional_id, (files.partition, segment.log, offset))
                if first[0] != files.partition:  # one id, one partition: else the partition count changed
                    raise TransactionLogError(segment.log, offset, position,
                                              f"transactional id {transactional_id!r} is also in partition "
                                              f"{first[0]} ({first[1]}, offset {first[2]})")
                try:
                    value = decode_value(raw)
                except TransactionLogFormatError as exc:
                    raise TransactionLogError(segment.log, offset, position,
                                              f"value of {transactional_id!r}: {exc}") from None
                if value is None:
                    tombstones += 1
                    latest[transactional_id] = None
                    continue
                if value.state in _NEVER_STORED:  # as the broker's own load refuses them
                    raise TransactionLogError(segment.log, offset, position,
                                              f"{transactional_id!r} has state {value.state.kafka_name}, which is "
                                              "never written to the log")
                partitions_held = frozenset() if value.state is TransactionState.EMPTY else value.topic_partitions()
                latest[transactional_id] = CoordinatorTxn(
                    transactional_id, value.producer_id, value.producer_epoch, value.state, partitions_held,
                    value.transaction_timeout_ms, value.start_timestamp_ms, value.last_update_timestamp_ms,
                    segment.log, offset)
    live = {txn_id: txn for txn_id, txn in sorted(latest.items()) if txn is not None}
    return TransactionLog(tuple(p.partition for p in mine), live, records, tombstones, unknown)


def _records(path: Path, backend: str | Backend | None) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """``(offset, batch position, key, value)`` of every record of every data batch of a segment, in order.

    The native header scan finds the batches and checks their CRCs; each batch is then decoded whole."""
    scan = scan_segment(path, backend=backend, verify_crc=True)
    bad = scan.crc_failures()
    if len(bad):
        row = int(bad[0])
        raise TransactionLogError(path, int(scan["base_offset"][row]), int(scan["position"][row]),
                                  "CRC mismatch: the batch is corrupt")
    if scan.stop in (STOP_BAD_MAGIC, STOP_BAD_LENGTH):  # not a torn tail: something unreadable before the end
        raise TransactionLogError(path, None, scan.stop_position, f"position {scan.stop_position}: "
                                                                 f"{scan.stop_detail}")
    if not len(scan):
        return
    rows = np.flatnonzero(scan["is_control"] == 0)  # control batches hold markers, never coordinator records
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        for row in rows.tolist():
            position = int(scan["position"][row])
            try:
                header, decoded = decode_batch(mapped, position, check_crc=False)  # (checked by the scan)
            except CorruptRecordError as exc:
                raise TransactionLogError(path, int(scan["base_offset"][row]), position, str(exc)) from None
            for record in decoded:
                yield header.offset_of(record), position, record.key, record.value


# --- Judging the open transactions ----------------------------------------------------------------------------------

def judge_open_txns(open_txns: pa.Table, hanging_after_ms: int, transaction_log: TransactionLog | None,
                    status: str, now_ms: int | None = None) -> pa.Table:
    """``open_txns`` (with ``idle_ms``) with :data:`VERDICT_FIELDS` appended: per open transaction the
    coordinator's transactional id, state, producer id and epoch (null where no id has the producer id, or
    without a log), the verdict (:data:`HANGING`, :data:`UNCONFIRMED`, :data:`CLEARED`, :data:`RECENT`), a
    one-line reason, and ``hanging`` (HANGING or UNCONFIRMED). ``status``: ``transaction_log`` of the report
    (:data:`LOG_READ`, :data:`LOG_ABSENT`, :data:`LOG_IGNORED`)."""
    columns: dict[str, list[object]] = {field.name: [] for field in VERDICT_FIELDS}
    names = (TOPIC, "partition", "producer_id", "producer_epoch", "idle_ms")
    for topic, partition, producer_id, epoch, idle in zip(*(open_txns.column(n).to_pylist() for n in names),
                                                          strict=True):
        judged = transaction_log.judge(topic, partition, producer_id, epoch, now_ms) if transaction_log else None
        if idle <= hanging_after_ms:  # find-hanging's candidates only: transactionDurationMs > maxTimeoutMs
            verdict = RECENT
            reason = f"idle {idle:,} ms, not more than {hanging_after_ms:,} ms: not a find-hanging candidate yet"
            if judged is not None and judged.verdict == HANGING:
                reason += "; the coordinator does not track it, so it will hang"
        elif judged is None:
            verdict, reason = UNCONFIRMED, NOT_CONFIRMED[status]
        else:
            verdict, reason = judged.verdict, judged.reason
        txn = judged.txn if judged is not None else None
        for name, value in (("transactional_id", txn and txn.transactional_id),
                            ("coordinator_state", txn and txn.state_name),
                            ("coordinator_producer_id", txn and txn.producer_id),
                            ("coordinator_producer_epoch", txn and txn.producer_epoch),
                            ("verdict", verdict), ("reason", reason), ("hanging", verdict in HANGING_VERDICTS)):
            columns[name].append(value)
    for field in VERDICT_FIELDS:
        open_txns = open_txns.append_column(field, pa.array(columns[field.name], field.type))
    return open_txns
