"""ProducerStateManager: one stream's producer state, as a broker uses it (Kafka's class of that name).

Kafka's order, prepare then commit: :meth:`ProducerStateManager.prepare_update` checks a batch against the
state without changing it, the caller writes the log, :meth:`ProducerStateManager.update` commits.
:meth:`ProducerStateManager.append` does both. A thin object over the same kernel as
:func:`idemcore.validate`: each call packs one batch. Protocol outcomes come back as results; misuse
(wrong types, unknown origin) raises.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from idemcore.engine.table import ProducerStateTable
from idemcore.engine.validate import check, commit
from idemcore.engine.verdicts import Verdicts
from idemcore.errors import IdemcoreError
from idemcore.kernels import Backend, get_backend
from idemcore.kernels.columns import BatchColumns
from idemcore.protocol.codes import ControlType, ErrorCode, Origin, Status
from idemcore.protocol.constants import DEFAULT_PRODUCER_ID_EXPIRATION_MS, INT32_MAX
from idemcore.protocol.sequences import seq_sub


@dataclass(frozen=True)
class AppendResult:
    """Outcome of one data batch: offsets are the assigned ones, the original ones for a duplicate, -1 if rejected."""

    status: Status
    error_code: ErrorCode
    base_offset: int
    last_offset: int


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction ended by a marker: its first data offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True)
class MarkerResult:
    """Outcome of a COMMIT/ABORT marker."""

    error_code: ErrorCode
    offset: int
    completed_txn: CompletedTxn | None


@dataclass(frozen=True)
class BatchRecord:
    """One retained batch of an entry."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True)
class ProducerEntry:
    """A producer's state on a stream (Kafka's ProducerStateEntry); sequences -1 when no batch is retained."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_timestamp: int
    current_txn_first_offset: int | None
    batches: tuple[BatchRecord, ...]

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


def _require_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return int(value)


def _require_optional_int(name: str, value: object, default: int) -> int:
    return default if value is None else _require_int(name, value)


def _require_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return bool(value)


@dataclass(frozen=True)
class PreparedAppend:
    """One batch checked against the state (Kafka's ProducerAppendInfo): its verdict, not yet committed."""

    batch: BatchColumns
    verdicts: Verdicts
    manager: ProducerStateManager = field(repr=False, compare=False)
    generation: int = field(repr=False, compare=False)  # the table's generation it was checked against

    @property
    def result(self) -> AppendResult:
        v = self.verdicts
        return AppendResult(Status(int(v.status[0])), ErrorCode(int(v.error_code[0])), int(v.base_offset[0]),
                            int(v.last_offset[0]))

    @property
    def marker_result(self) -> MarkerResult:
        v, txns = self.verdicts, self.verdicts.completed_txns
        completed = None
        if len(txns):
            completed = CompletedTxn(int(txns.producer_id[0]), int(txns.first_offset[0]), int(txns.last_offset[0]),
                                     bool(txns.aborted[0]))
        return MarkerResult(ErrorCode(int(v.error_code[0])), int(v.base_offset[0]), completed)


class ProducerStateManager:
    """Producer state of one stream: validates appends and markers, expires idle producers.

    ``table`` lets several managers (one per stream of a broker) share one
    :class:`ProducerStateTable`, so a whole produce request can be validated
    in one kernel call.
    """

    def __init__(
        self,
        stream: int = 0,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        backend: str | Backend | None = None,
        table: ProducerStateTable | None = None,
    ):
        self.stream = _require_int("stream", stream)
        if not 0 <= self.stream <= INT32_MAX:
            raise ValueError(f"stream must be in [0, {INT32_MAX}], got {self.stream}")
        self.producer_id_expiration_ms = _require_int("producer_id_expiration_ms", producer_id_expiration_ms)
        if self.producer_id_expiration_ms < 0:
            raise ValueError(f"producer_id_expiration_ms must be >= 0, got {self.producer_id_expiration_ms}")
        self.backend = get_backend(backend)
        if table is not None and not isinstance(table, ProducerStateTable):
            raise TypeError(f"table must be a ProducerStateTable, not {type(table).__name__}")
        self.table = table if table is not None else ProducerStateTable(row_capacity=64, stream_capacity=1)

    def __repr__(self) -> str:
        return f"ProducerStateManager(stream={self.stream}, backend={self.backend.name!r})"

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended batch gets."""
        return self.table.next_offset(self.stream)

    def _prepare(self, columns: dict, origin: Origin) -> PreparedAppend:
        single = {name: np.asarray([value]) for name, value in columns.items()}
        single["stream"] = np.asarray([self.stream], dtype=np.int32)
        packed = BatchColumns.coerce(single)
        verdicts = check(packed, self.table, origin=origin, backend=self.backend)
        return PreparedAppend(packed, verdicts, self, self.table.generation)

    def prepare_update(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_sequence: int,
        *,
        base_offset: int | None = None,
        record_count: int | None = None,
        timestamp: int = 0,
        is_transactional: bool = False,
        origin: str | Origin = "client",
    ) -> PreparedAppend:
        """Check one data batch against the state as it stands, changing nothing (Kafka's
        ``prepareUpdate``): write it to the log if ``result`` is APPENDED, then :meth:`update`."""
        first_seq = _require_int("base_sequence", base_sequence)
        last_seq = _require_int("last_sequence", last_sequence)
        if record_count is None:
            record_count = 1 if first_seq < 0 else seq_sub(last_seq, first_seq) + 1
        return self._prepare({
            "producer_id": _require_int("producer_id", producer_id),
            "producer_epoch": _require_int("producer_epoch", producer_epoch),
            "base_sequence": first_seq,
            "last_sequence": last_seq,
            "record_count": _require_int("record_count", record_count),
            "base_offset": _require_optional_int("base_offset", base_offset, -1),
            "max_timestamp": _require_int("timestamp", timestamp),
            "is_transactional": _require_bool("is_transactional", is_transactional),
        }, Origin.parse(origin))

    def prepare_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        base_offset: int | None = None,
        coordinator_epoch: int = 0,
        timestamp: int = 0,
    ) -> PreparedAppend:
        """Check a COMMIT (``commit=True``) or ABORT marker, changing nothing; then :meth:`update`."""
        control = ControlType.COMMIT if _require_bool("commit", commit) else ControlType.ABORT
        return self._prepare({
            "producer_id": _require_int("producer_id", producer_id),
            "producer_epoch": _require_int("producer_epoch", producer_epoch),
            "base_sequence": -1,
            "last_sequence": -1,
            "record_count": 1,
            "base_offset": _require_optional_int("base_offset", base_offset, -1),
            "max_timestamp": _require_int("timestamp", timestamp),
            "is_transactional": True,
            "is_control": True,
            "control_type": int(control),
            "coordinator_epoch": _require_int("coordinator_epoch", coordinator_epoch),
        }, Origin.COORDINATOR)

    def update(self, prepared: PreparedAppend) -> None:
        """Commit a prepared batch once it is in the log (Kafka's ``update``); a rejected or duplicate batch
        changes nothing. A batch checked before the state last changed (an update twice, two batches prepared
        together) raises IdemcoreError: check it again."""
        if not isinstance(prepared, PreparedAppend):
            raise TypeError(f"update takes a PreparedAppend, not {type(prepared).__name__}")
        if prepared.manager is not self:
            raise ValueError(f"the batch was prepared by the manager of stream {prepared.manager.stream}, "
                             f"not by this one (stream {self.stream})")
        if prepared.generation != self.table.generation:
            raise IdemcoreError(f"stream {self.stream}: the state changed since this batch was checked "
                                "(another update, or an expiry); check it again")
        if prepared.verdicts.status[0] == Status.APPENDED:
            commit(prepared.batch, prepared.verdicts, self.table, backend=self.backend)

    def append(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_sequence: int,
        *,
        base_offset: int | None = None,
        record_count: int | None = None,
        timestamp: int = 0,
        is_transactional: bool = False,
        origin: str | Origin = "client",
    ) -> AppendResult:
        """:meth:`prepare_update` and :meth:`update` in one: validate and (if accepted) record one data batch;
        ``base_offset`` None appends at the log end."""
        prepared = self.prepare_update(producer_id, producer_epoch, base_sequence, last_sequence,
                                       base_offset=base_offset, record_count=record_count, timestamp=timestamp,
                                       is_transactional=is_transactional, origin=origin)
        self.update(prepared)
        return prepared.result

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        base_offset: int | None = None,
        coordinator_epoch: int = 0,
        timestamp: int = 0,
    ) -> MarkerResult:
        """:meth:`prepare_marker` and :meth:`update` in one: write a COMMIT or ABORT marker; it ends the
        producer's open transaction, if any."""
        prepared = self.prepare_marker(producer_id, producer_epoch, commit, base_offset=base_offset,
                                       coordinator_epoch=coordinator_epoch, timestamp=timestamp)
        self.update(prepared)
        return prepared.marker_result

    def last_entry(self, producer_id: int) -> ProducerEntry | None:
        """The producer's entry on this stream, or None if it has none (never wrote, or expired)."""
        row = self.table.row_of(self.stream, _require_int("producer_id", producer_id))
        if row is None:
            return None
        t = self.table
        batches = tuple(
            BatchRecord(seq_sub(last_seq, delta), last_seq, last_offset - delta, last_offset, timestamp)
            for last_seq, delta, last_offset, timestamp in t.ring(row)
        )
        txn_first = int(t.row_txn_first_offset[row])
        return ProducerEntry(
            producer_id=int(t.row_producer_id[row]),
            producer_epoch=int(t.row_epoch[row]),
            coordinator_epoch=int(t.row_coordinator_epoch[row]),
            last_timestamp=int(t.row_last_timestamp[row]),
            current_txn_first_offset=txn_first if txn_first >= 0 else None,
            batches=batches,
        )

    def _rows(self) -> np.ndarray:
        n = self.table.n_producers
        return self.table.row_stream[:n] == self.stream

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers with no open transaction idle for ``producer_id_expiration_ms``; return how many."""
        now_ms = _require_int("now_ms", now_ms)
        expired = self._rows() & self.table.expired_rows(now_ms, self.producer_id_expiration_ms)
        return self.table.remove_rows(expired, self.backend) if expired.any() else 0

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction on this stream, None when none is open."""
        n = self.table.n_producers
        open_txn = self.table.row_txn_first_offset[:n][self._rows() & (self.table.row_txn_first_offset[:n] >= 0)]
        return int(open_txn.min()) if len(open_txn) else None

    def active_producers(self) -> list[int]:
        """Producer ids with an entry on this stream."""
        n = self.table.n_producers
        return sorted(int(pid) for pid in self.table.row_producer_id[:n][self._rows()])
