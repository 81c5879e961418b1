"""Producer: Kafka's idempotent producer over a transport (a Broker used directly, or a simulated network)."""

from __future__ import annotations

import itertools
import logging
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from idemcore.client.accumulator import RecordAccumulator
from idemcore.client.batch import DeliveryError, ProducerBatch, RecordFuture, RecordMetadata
from idemcore.client.config import ProducerConfig
from idemcore.client.connecting import own_transport
from idemcore.client.group_metadata import ConsumerGroupMetadata
from idemcore.client.idempotence import IdempotenceManager
from idemcore.client.partitioner import Partitioner
from idemcore.client.partitions import PartitionArrays
from idemcore.client.sender import Sender
from idemcore.client.transactions import (
    GroupMember,
    TransactionalResult,
    TransactionError,
    TransactionManager,
    TransactionManagerState,
    TransactionStateError,
    TransactionTimeoutError,
)
from idemcore.errors import IdemcoreError
from idemcore.kernels import Backend, get_backend
from idemcore.net.messages import OffsetEntry
from idemcore.net.transport import RequestHandler, Transport
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NO_OFFSET
from idemcore.record.batch import RECORD_OVERHEAD, headers_size

if TYPE_CHECKING:
    from idemcore.net.client_security import ClientSecurity

_client_ids = itertools.count()
log = logging.getLogger(__name__)


class ProducerClosedError(IdemcoreError):
    """send() after close()."""


class RecordTooLargeError(IdemcoreError, ValueError):
    """Kafka's RecordTooLargeException at send: a record larger than ``max_request_size``."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


def _as_bytes(name: str, value: Any) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{name} must be bytes, got {type(value).__name__}")


class BatchSendFuture:
    """The outcome of ``send_batch``: ``result()`` returns every record's offset (int64, input order) and
    ``partitions()`` every record's partition."""

    def __init__(self, batches: list[tuple[ProducerBatch, np.ndarray]], count: int,
                 drive: Callable[[Callable[[], bool]], None]) -> None:
        self._batches = batches  # each batch with the input positions of its records, in batch order
        self._count = count
        self._drive = drive
        self._first_open = 0  # batches before this one are done (they finish roughly in order)

    def done(self) -> bool:
        batches = self._batches
        while self._first_open < len(batches):
            batch, positions = batches[self._first_open]
            if batch.parts is not None:  # split: its halves carry its records, in order
                first, second = batch.parts
                middle = len(first.values)
                batches[self._first_open:self._first_open + 1] = [(first, positions[:middle]),
                                                                  (second, positions[middle:])]
            elif batch.done:
                self._first_open += 1
            else:
                break
        return self._first_open == len(batches)

    def _wait(self) -> None:
        if not self.done():
            self._drive(self.done)

    def result(self) -> np.ndarray:
        """Offsets of the records in input order (-1 where the broker reported a duplicate). When some batch
        failed, raises :class:`BatchDeliveryError` carrying the offsets of those delivered and which failed,
        so only the failed records need sending again."""
        self._wait()
        offsets = np.full(self._count, NO_OFFSET, dtype=np.int64)
        failed = np.zeros(self._count, dtype=bool)
        first_error: DeliveryError | None = None
        for batch, positions in self._batches:
            if batch.error is not None:
                failed[positions] = True
                first_error = first_error or batch.error
            elif batch.base_offset >= 0:
                offsets[positions] = np.arange(batch.base_offset, batch.base_offset + batch.record_count)
        if first_error is not None:
            raise BatchDeliveryError(first_error, offsets, failed)
        return offsets

    def partitions(self) -> np.ndarray:
        """The partition of each record, in input order (int32)."""
        self._wait()
        partitions = np.empty(self._count, dtype=np.int32)
        for batch, positions in self._batches:
            partitions[positions] = batch.partition
        return partitions


class BatchDeliveryError(DeliveryError):
    """Some records of a ``send_batch`` were not delivered: ``failed`` marks them (input order), ``offsets``
    holds those of the others; the message is the first failure's."""

    def __init__(self, first: DeliveryError, offsets: np.ndarray, failed: np.ndarray) -> None:
        super().__init__(first.error_code, f"{int(failed.sum())} of {len(failed)} records not delivered: {first}")
        self.offsets = offsets
        self.failed = failed


class Producer:
    """An idempotent (by default) Kafka producer. Settings as Kafka's, in snake_case; see ProducerConfig.

    ``transport``: a :class:`~idemcore.broker.Broker` (used directly), any
    :class:`~idemcore.transport.Transport`, or bootstrap servers (``"host:port[,...]"``): the producer then
    connects with a :class:`~idemcore.net.tcp.TcpTransport` of its own (closed by :meth:`close`), authenticating
    as ``security`` says (a :class:`~idemcore.net.client_security.ClientSecurity`, or Kafka's client properties:
    ``{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": ...,
    "sasl.password": ..., "ssl.ca.location": ...}``; a broker's refusal raises
    :class:`~idemcore.net.tcp.AuthenticationError`). There is no background thread:
    ``send`` runs a sender round when a batch fills, and ``result()``,
    ``flush()`` and ``poll()`` drive the sender until their work is done.

    With ``transactional_id`` it is Kafka's transactional producer: ``init_transactions()`` once, then per
    transaction ``begin_transaction()``, ``send``/``send_batch``, ``send_offsets_to_transaction``, and
    ``commit_transaction()`` or ``abort_transaction()``. These block (driving the sender) at most
    ``max_block_ms``; errors are :mod:`idemcore.client.transactions`' (TransactionStateError for a call out of
    order, TransactionAbortableError: only abort works, ProducerFencedError and TransactionFatalError: close).
    """

    def __init__(self, transport: Transport | RequestHandler | str, *, backend: str | Backend | None = None,
                 security: ClientSecurity | Mapping[str, str] | None = None, **config: Any) -> None:
        self.config = ProducerConfig.from_kwargs(**config)
        self.client_id = self.config.client_id or f"producer-{next(_client_ids)}"
        self.transport: Transport
        self.transport, self._owns_transport = own_transport(transport, self.client_id, security, "producer")
        self.partitions = PartitionArrays()
        settings = self.config
        #: The transaction bookkeeping (None without ``transactional_id``); its sequence bookkeeping is the
        #: producer's idempotence manager.
        self.transactions = None if settings.transactional_id is None else TransactionManager(
            settings.transactional_id, settings.transaction_timeout_ms, settings.retry_backoff_ms, self.partitions)
        self.idempotence: IdempotenceManager | None = None
        if self.transactions is not None:
            self.idempotence = self.transactions.sequences
        elif settings.enable_idempotence:
            self.idempotence = IdempotenceManager(self.partitions)
        self.accumulator = RecordAccumulator(settings, self.partitions, self.idempotence, get_backend(backend))
        self.sender = Sender(settings, self.accumulator, self.idempotence, self.transport, self.client_id)
        if self.transactions is not None:
            # Only partitions added to the transaction are drained; a new batch's partition is added first.
            self.accumulator.send_allowed = self.transactions.partitions_in_transaction
            self.accumulator.batch_created = self.transactions.maybe_add_partition
            self.transactions.on_partitions_changed = self.accumulator.mark_dirty
            self.sender.set_transactions(self.transactions)
        self.partitioner = Partitioner(settings.batch_size)
        self._partition_counts: dict[str, int] = {}
        self._closed = False
        # send() tests this one flag (no cost added for a producer without transactions): closed, or transactional.
        self._checked_send = self.transactions is not None

    # ------------------------------------------------------------ sending

    def _partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            if not isinstance(topic, str):
                raise TypeError(f"topic must be a string, got {type(topic).__name__}")
            count = self._partition_counts[topic] = self.transport.partition_count(topic)
        return count

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
             timestamp: int | None = None,
             headers: Sequence[tuple[str, bytes | None]] | None = None) -> RecordFuture:
        """Queue one record; the future's ``result()`` gives its :class:`RecordMetadata`.

        ``headers``: Kafka's record headers, ``(key, value)`` pairs, a ``str`` key and ``bytes`` or None as value
        (keys may repeat; order is kept). They count towards the record's size. ``value`` None: a null value,
        a tombstone on a compacted topic."""
        if self._checked_send:
            self._check_send("send")
        if value is not None:
            value = _as_bytes("value", value)
        if key is not None:
            key = _as_bytes("key", key)
        count = self._partition_count(topic)
        size = (0 if value is None else len(value)) + RECORD_OVERHEAD
        if headers is not None:
            headers = _headers(headers)  # a tuple of checked pairs, or None when empty
            if headers is not None:
                size += headers_size(headers)
        self._check_record_size(size + (len(key) if key is not None else 0))
        partition = self.partitioner.partition(topic, count, key, partition, size)
        now = self.transport.now_ms()
        batch, position = self.accumulator.append(topic, partition, key, value,
                                                  now if timestamp is None else _timestamp(timestamp), now, headers)
        if batch.size >= self.config.batch_size:
            self.sender.run_once()  # a full batch wakes the sender, as in Kafka
        return RecordFuture(batch, position, self._drive)

    def _check_send(self, method: str) -> None:
        """Closed, or a transactional producer outside a transaction: raise before anything is queued."""
        if self._closed:
            raise ProducerClosedError(f"{method}() on a closed producer")
        if self.transactions is not None:
            self.transactions.fail_if_not_ready_for_send()

    def _check_record_size(self, size: int) -> None:
        """Kafka's RecordTooLargeException, at send: a record no request could carry."""
        if size > self.config.max_request_size:
            raise RecordTooLargeError(f"a record of {size} bytes is larger than "
                                      f"max_request_size={self.config.max_request_size}")

    def send_batch(self, topic: str, values: Any, keys: Any = None, partition: int | None = None) -> BatchSendFuture:
        """Queue many records at once (a list, NumPy array or pyarrow array of bytes); records of one
        partition keep their input order. Keys pick partitions with murmur2; without keys and partition,
        records go to one partition per ``batch_size`` bytes, round-robin."""
        if self._checked_send:
            self._check_send("send_batch")
        values = _bytes_list("values", values)
        key_list = None if keys is None else _bytes_list("keys", keys, nulls=True)
        if key_list is not None and len(key_list) != len(values):
            raise ValueError(f"{len(key_list)} keys for {len(values)} values")
        if values:
            largest = max(map(len, values)) if key_list is None else \
                max(len(v) + (len(k) if k is not None else 0) for v, k in zip(values, key_list, strict=True))
            self._check_record_size(largest + RECORD_OVERHEAD)
        count = self._partition_count(topic)
        now = self.transport.now_ms()
        # (partition, values, keys, the records' input positions)
        targets: list[tuple[int, list[bytes], list[bytes | None] | None, np.ndarray]]
        if key_list is None:
            # One partition per chunk: explicit, or sticky (each full chunk moves to the next partition).
            targets = []
            start = 0
            for chunk_values, _ in _chunks(values, None, self.config.batch_size):
                target = self.partitioner.partition(topic, count, None, partition, self.config.batch_size)
                targets.append((target, chunk_values, None, np.arange(start, start + len(chunk_values))))
                start += len(chunk_values)
        else:
            chosen = np.fromiter((self.partitioner.partition(topic, count, k, partition) for k in key_list),
                                 np.int64, len(key_list))
            targets = []
            for p in np.unique(chosen):
                index = np.flatnonzero(chosen == p)
                part_values = [values[i] for i in index]
                part_keys: list[bytes | None] = [key_list[i] for i in index]
                start = 0
                for v, k in _chunks(part_values, part_keys, self.config.batch_size):
                    targets.append((int(p), v, k, index[start:start + len(v)]))
                    start += len(v)
        batches = [(self.accumulator.append_records(topic, target, chunk_values, chunk_keys, now), positions)
                   for target, chunk_values, chunk_keys, positions in targets]
        if len(batches) > 1:
            self.sender.run_once()
        return BatchSendFuture(batches, len(values), self._drive)

    # ------------------------------------------------------------ driving the sender

    def _drive(self, until: Callable[[], bool], deadline_ms: int | None = None) -> None:
        """Run sender rounds (treating everything as ready) until ``until()`` holds, or the transport's clock
        reaches ``deadline_ms`` (the caller then finds ``until()`` false)."""
        accumulator = self.accumulator
        accumulator.flushing = True
        try:
            while not until():
                if self.sender.fatal_error is not None and not self.sender.has_pending_work():
                    raise IdemcoreError(self.sender.fatal_error)
                self.sender.run_once()
                if until():
                    break
                if not self.sender.busy:  # waiting for answers or a backoff: let time pass
                    self.transport.tick()
                if deadline_ms is not None and self.transport.now_ms() >= deadline_ms:
                    break
        finally:
            accumulator.flushing = False

    def poll(self) -> None:
        """Run one sender round: send what is ready, handle responses that arrived."""
        self.sender.run_once()

    def flush(self) -> None:
        """Send everything queued and wait until each record is delivered or has failed."""
        self._drive(lambda: not self.sender.has_pending_work())

    def close(self) -> None:
        """Flush, then refuse further sends. A transaction still open is aborted (as Kafka's sender does at
        close); a failure to abort is logged, not raised."""
        if self._closed:
            return
        try:
            self.flush()
            txn = self.transactions
            if txn is not None and txn.has_ongoing_transaction and txn.fatal_error is None:
                try:
                    self._await(txn.begin_abort(), "abort_transaction")
                except TransactionError as exc:
                    log.warning("%s: the open transaction could not be aborted at close: %s", self.client_id, exc)
        finally:
            self._closed = True
            self._checked_send = True
            if self._owns_transport:
                self.transport.close()  # type: ignore[attr-defined]  # a TcpTransport

    # ------------------------------------------------------------ transactions

    def _transactional(self, method: str) -> TransactionManager:
        if self.transactions is None:
            raise TransactionStateError(f"{method}() needs a transactional producer: set transactional_id")
        if self._closed:
            raise ProducerClosedError(f"{method}() on a closed producer")
        return self.transactions

    def _await(self, result: TransactionalResult, method: str) -> None:
        """Drive the sender until the call's requests are done, at most ``max_block_ms``; raise their error."""
        if not result.done:
            self._drive(lambda: result.done, self.transport.now_ms() + self.config.max_block_ms)
        if not result.done:
            then = ("its requests stay queued ahead of the commit" if method == "send_offsets_to_transaction"
                    else f"call {method}() again to keep waiting")
            raise TransactionTimeoutError(f"{method}() did not complete within max_block_ms="
                                          f"{self.config.max_block_ms}; {then}")
        result.acked = True
        result.raise_error()

    def init_transactions(self) -> None:
        """Get the producer id and epoch of ``transactional_id`` from its coordinator: this fences every earlier
        producer with the same id and aborts the transaction it left open. Once per producer."""
        txn = self._transactional("init_transactions")
        self._await(txn.initialize_transactions(), "init_transactions")

    def begin_transaction(self) -> None:
        """Start a transaction (no request: the coordinator learns of it with its first partition)."""
        self._transactional("begin_transaction").begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int],
                                    group_metadata: str | ConsumerGroupMetadata) -> None:
        """Commit ``offsets`` (``(topic, partition) -> next offset to read``) for a consumer group as part of the
        transaction: visible to the group only if the transaction commits. ``group_metadata``: the consumer's
        ``consumer_group_metadata()`` (KIP-447: the coordinator refuses the offsets of a consumer that is no longer
        the group's member, a zombie, and the transaction must abort), or the group id alone (no such check)."""
        txn = self._transactional("send_offsets_to_transaction")
        group_id, member = _group_member(group_metadata)
        entries = _offset_entries(offsets)
        result = txn.send_offsets_to_transaction(entries, group_id, member) if entries else None
        if result is not None:
            self._await(result, "send_offsets_to_transaction")

    def commit_transaction(self) -> None:
        """Send every queued record, wait for all of them, then commit. If a record of the transaction failed,
        raises TransactionAbortableError: call abort_transaction()."""
        self._await(self._transactional("commit_transaction").begin_commit(), "commit_transaction")

    def abort_transaction(self) -> None:
        """Abort: records not yet sent fail, those sent are aborted (read_committed readers never see them)."""
        self._await(self._transactional("abort_transaction").begin_abort(), "abort_transaction")

    @property
    def transaction_state(self) -> TransactionManagerState | None:
        """The transaction state machine's state (None without ``transactional_id``)."""
        return None if self.transactions is None else self.transactions.state

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def metrics(self) -> dict[str, int]:
        stats = self.sender.stats
        return {"requests": stats.requests, "retries": stats.retries, "failed_batches": stats.failed_batches,
                "expired_batches": stats.expired_batches, "request_timeouts": stats.request_timeouts,
                "split_batches": stats.split_batches,
                "epoch_bumps": self.idempotence.epoch_bumps if self.idempotence else 0}


def _offset_entries(offsets: Any) -> tuple[OffsetEntry, ...]:
    """``{(topic, partition): offset}`` as OffsetEntry values; TypeError/ValueError naming a bad entry."""
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must map (topic, partition) to an offset, not {type(offsets).__name__}")
    entries = []
    for key, offset in offsets.items():
        if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) and type(key[1]) is int):
            raise TypeError(f"offsets: key {_shown(key)} is not a (topic, partition) pair")
        if not isinstance(offset, numbers.Integral) or isinstance(offset, bool):
            raise TypeError(f"offsets: the offset of {key} must be an integer, not {type(offset).__name__}")
        value = int(offset)
        if value < 0:  # Kafka's OffsetAndMetadata refuses a negative offset
            raise ValueError(f"offsets: the offset of {key} is negative ({value})")
        if value >= 2**63:  # offsets are int64: the broker could not store it
            raise ValueError(f"offsets: the offset of {key} is beyond int64 ({value})")
        entries.append(OffsetEntry(key[0], key[1], value))
    return tuple(entries)


def _timestamp(value: Any) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"timestamp must be an integer (ms since the epoch), not {type(value).__name__}")
    stamp = int(value)
    # Refused at send, as Kafka's ProducerRecord does: in a batch it would fail the records beside it (and two
    # timestamps of 0 or more are always a timestamp delta apart that fits a varlong).
    if stamp < 0:
        raise ValueError(f"timestamp {stamp} is negative: a record's timestamp is 0 or more (ms since the epoch)")
    if stamp >= 2**63:
        raise ValueError(f"timestamp {stamp} is out of the int64 range")
    return stamp


def _headers(headers: Any) -> tuple[tuple[str, bytes | None], ...] | None:
    """``headers`` as a tuple of ``(str, bytes | None)`` pairs, None when there are none; TypeError (ValueError
    for a key UTF-8 cannot encode) naming the header and its value. A tuple of the caller's pairs, copied: a
    retry resends what was sent, whatever the caller changes after ``send``."""
    if type(headers) is not list and type(headers) is not tuple and (
            isinstance(headers, str | bytes | bytearray | memoryview | Mapping)
            or not isinstance(headers, Iterable)):
        raise TypeError(f"headers must be a sequence of (str, bytes | None) pairs, not {type(headers).__name__}"
                        f" ({_shown(headers)})")
    pairs = []
    for number, pair in enumerate(headers):
        # Type checks by identity first: a list of tuples of str and bytes, the usual case, takes no isinstance.
        if type(pair) is not tuple or len(pair) != 2:
            if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise TypeError(f"header {number}: expected a (str, bytes | None) pair, got {_shown(pair)}")
            pair = (pair[0], pair[1])
        name, value = pair
        if type(name) is not str:
            if not isinstance(name, str):
                raise TypeError(f"header {number}: key must be a str, not {type(name).__name__} ({_shown(name)})")
            name = str(name)  # a str subclass (a StrEnum member) as the plain str it stands for
            pair = (name, value)
        if not name.isascii():
            try:
                name.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raise ValueError(f"header {number}: key {_shown(name)} cannot be encoded as UTF-8 (a lone "
                                 "surrogate)") from None
        if type(value) is not bytes and value is not None:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise TypeError(f"header {number} ({name!r}): value must be bytes or None, not "
                                f"{type(value).__name__} ({_shown(value)})")
            pair = (name, bytes(value))
        pairs.append(pair)
    return tuple(pairs) if pairs else None


def _shown(value: object) -> str:
    """``repr(value)``, cut to keep a message on one short line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bytes_list(name: str, values: Any, nulls: bool = False) -> list[Any]:
    """``values`` as a list of bytes (``nulls``: None allowed too, as for keys); TypeError otherwise."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind != "S" and values.dtype != object:
            raise TypeError(f"{name} must hold bytes, got a NumPy array of {values.dtype}")
        values = values.tolist()
    elif hasattr(values, "to_pylist"):  # pyarrow Array / ChunkedArray of binary
        values = values.to_pylist()
    elif not isinstance(values, list):
        values = list(values)
    allowed = (bytes, type(None)) if nulls else (bytes,)
    if not all(type(v) in allowed for v in values):
        raise TypeError(f"every element of {name} must be bytes{' or None' if nulls else ''}")
    return values


def _chunks(values: list[bytes], keys: list[bytes | None] | None,
            batch_size: int) -> Iterator[tuple[list[bytes], list[bytes | None] | None]]:
    """Split records into runs of at most ``batch_size`` bytes (at least one record each)."""
    start, size = 0, 0
    for index, value in enumerate(values):
        record = len(value) + RECORD_OVERHEAD
        if index > start and size + record > batch_size:
            yield values[start:index], None if keys is None else keys[start:index]
            start, size = index, 0
        size += record
    if start < len(values):
        yield values[start:], None if keys is None else keys[start:]


__all__ = ["BatchSendFuture", "DeliveryError", "Producer", "ProducerClosedError", "RecordMetadata"]


def _group_member(group_metadata: object) -> tuple[str, GroupMember]:
    """The group id and the member of ``group_metadata`` (a group id, or a consumer's ConsumerGroupMetadata)."""
    if group_metadata is None or isinstance(group_metadata, str):
        if not group_metadata:
            raise ValueError(f"group_id must be a non-empty string, got {group_metadata!r}")
        return group_metadata, (-1, "", None)
    if not isinstance(group_metadata, ConsumerGroupMetadata):
        raise TypeError("group_metadata must be a group id or a Consumer's consumer_group_metadata(), got "
                        f"{group_metadata!r:.80}")
    return group_metadata.group_id, (group_metadata.generation_id, group_metadata.member_id,
                                     group_metadata.group_instance_id)
