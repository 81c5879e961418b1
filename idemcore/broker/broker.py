"""Broker: partitions as logs, producer state checked by the kernel once per produce request (SPEC §2)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from idemcore.broker.log import LogCorruptionError, PartitionLog
from idemcore.broker.producer_ids import ProducerIdManager, ProducerIdsExhaustedError, SqliteBlockStore
from idemcore.errors import IdemcoreError
from idemcore.kernels import Backend, get_backend
from idemcore.net.messages import InitProducerIdResponse, PartitionResponse, ProduceRequest, ProduceResponse
from idemcore.protocol.codes import ErrorCode, Status
from idemcore.protocol.constants import DEFAULT_PRODUCER_ID_EXPIRATION_MS, INT16_MAX, INT32_MAX
from idemcore.record.batch import RecordBatch
from idemcore.state.table import ProducerStateTable
from idemcore.state.validate import validate

log = logging.getLogger(__name__)

_ACKS = (0, 1, -1)


def _malformed(batch: RecordBatch) -> tuple[int, str] | None:
    """Why a batch cannot be appended at all, or None. Checked before the producer-state rules."""
    values = batch.values
    if isinstance(values, np.ndarray):
        if values.dtype.kind != "S" and not (values.dtype == object and all(type(v) is bytes for v in values)):
            return ErrorCode.CORRUPT_MESSAGE, f"record values of dtype {values.dtype} are not bytes"
    elif not all(type(v) is bytes for v in values):
        return ErrorCode.CORRUPT_MESSAGE, "every record value must be bytes"
    if batch.keys is not None:
        if len(batch.keys) != len(values):
            return ErrorCode.CORRUPT_MESSAGE, f"{len(batch.keys)} keys for {len(values)} records"
        if not all(k is None or type(k) is bytes for k in batch.keys):
            return ErrorCode.CORRUPT_MESSAGE, "every record key must be bytes or None"
    if len(values) == 0 or len(values) > INT32_MAX:
        return ErrorCode.INVALID_RECORD, f"a batch must hold 1..{INT32_MAX} records, not {len(values)}"
    if not (-1 <= batch.producer_epoch <= INT16_MAX) or not (-1 <= batch.base_sequence <= INT32_MAX):
        return ErrorCode.INVALID_RECORD, (f"producer epoch {batch.producer_epoch} or base sequence "
                                          f"{batch.base_sequence} out of range")
    return None


class Broker:
    """A single broker leading every partition of ``topics`` (``{"name": partition_count}``).

    ``data_dir``: persist each partition to an append-only file (fsync'd per
    produce request with acks=all) and, on start, rebuild producer state by
    replaying the logs with REPLICATION origin. ``producer_ids``: the id
    allocator; by default one over a SQLite store in ``data_dir`` (or in memory).
    ``fsync=False`` keeps writes in the OS page cache only: they survive a
    crash of this process (what the simulation injects), not of the machine.
    """

    def __init__(
        self,
        topics: Mapping[str, int],
        data_dir: str | Path | None = None,
        broker_id: int = 0,
        *,
        producer_ids: ProducerIdManager | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        backend: str | Backend | None = None,
        fsync: bool = True,
    ) -> None:
        if not topics:
            raise ValueError("a broker needs at least one topic")
        for name, count in topics.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"topic names must be non-empty strings, got {name!r}")
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"topic {name!r} needs a positive partition count, got {count!r}")
        self.broker_id = broker_id
        self.topics = dict(topics)
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.backend = get_backend(backend)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.fsync = fsync
        if producer_ids is None:
            store_path = ":memory:" if self.data_dir is None else self.data_dir / "producer_ids.sqlite"
            if self.data_dir is not None:
                self.data_dir.mkdir(parents=True, exist_ok=True)
            producer_ids = ProducerIdManager(broker_id, SqliteBlockStore(store_path))
        self.producer_ids = producer_ids
        # Partitions of all topics share one state table under a broker-wide partition number.
        self._index: dict[tuple[str, int], int] = {}
        self._logs: list[PartitionLog] = []
        for name in sorted(self.topics):
            for partition in range(self.topics[name]):
                directory = None if self.data_dir is None else self.data_dir / f"{name}-{partition}"
                self._index[(name, partition)] = len(self._logs)
                self._logs.append(PartitionLog(name, partition, directory, fsync))
        self.state = ProducerStateTable()
        self._recover()

    # ------------------------------------------------------------ recovery

    def _recover(self) -> None:
        stored = [(number, base_offset, batch) for number, partition_log in enumerate(self._logs)
                  for base_offset, batch in partition_log.batches]
        if not stored:
            return
        columns = self._columns([(number, batch) for number, _, batch in stored])
        columns["base_offset"] = np.fromiter((base for _, base, _ in stored), np.int64, len(stored))
        verdicts = validate(columns, self.state, origin="replication", backend=self.backend)
        bad = np.flatnonzero(verdicts.status != Status.APPENDED)
        if len(bad):
            number, base_offset, _ = stored[int(bad[0])]
            reason = ErrorCode(int(verdicts.error_code[bad[0]])).name
            raise LogCorruptionError(f"{self._logs[number].topic}-{self._logs[number].partition}: the batch at "
                                     f"offset {base_offset} does not replay ({reason})")
        log.info("broker %d recovered %d batches from %s", self.broker_id, len(stored), self.data_dir)

    @staticmethod
    def _columns(batches: list[tuple[int, RecordBatch]]) -> dict[str, np.ndarray]:
        n = len(batches)
        return {
            "partition": np.fromiter((number for number, _ in batches), np.int32, n),
            "producer_id": np.fromiter((b.producer_id for _, b in batches), np.int64, n),
            "producer_epoch": np.fromiter((b.producer_epoch for _, b in batches), np.int16, n),
            "base_sequence": np.fromiter((b.base_sequence for _, b in batches), np.int32, n),
            "record_count": np.fromiter((b.record_count for _, b in batches), np.int32, n),
            "max_timestamp": np.fromiter((b.max_timestamp for _, b in batches), np.int64, n),
            "is_transactional": np.fromiter((b.is_transactional for _, b in batches), np.bool_, n),
        }

    # ------------------------------------------------------------ handlers

    def init_producer_id(self) -> InitProducerIdResponse:
        """A fresh producer id at epoch 0 for an idempotent producer."""
        try:
            return InitProducerIdResponse(ErrorCode.NONE, self.producer_ids.generate_producer_id(), 0)
        except ProducerIdsExhaustedError:
            log.exception("producer ids exhausted")
            return InitProducerIdResponse(ErrorCode.UNKNOWN_SERVER_ERROR)

    def produce(self, request: ProduceRequest) -> ProduceResponse | None:
        """Append a request's batches (one kernel call for all of them); None for acks=0."""
        if request.acks not in _ACKS:
            raise ValueError(f"acks must be one of {_ACKS}, got {request.acks!r}")
        answers: list[PartitionResponse | None] = [None] * len(request.batches)
        checked: list[tuple[int, RecordBatch]] = []
        positions: list[int] = []
        seen: set[int] = set()
        for position, batch in enumerate(request.batches):
            number = self._index.get((batch.topic, batch.partition))
            problem = None
            if number is None:
                problem = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {batch.topic}-{batch.partition}"
            elif number in seen:
                problem = ErrorCode.INVALID_REQUEST, f"a second batch for {batch.topic}-{batch.partition}"
            else:
                problem = _malformed(batch)
            if problem is not None:
                answers[position] = PartitionResponse(batch.topic, batch.partition, problem[0],
                                                      error_message=problem[1])
                continue
            seen.add(number)
            checked.append((number, batch))
            positions.append(position)
        if checked:
            verdicts = validate(self._columns(checked), self.state, origin="client", backend=self.backend)
            status, error_code, base_offset = verdicts.status, verdicts.error_code, verdicts.base_offset
            for k, (number, batch) in enumerate(checked):
                partition_log = self._logs[number]
                if status[k] == Status.APPENDED:
                    partition_log.append(int(base_offset[k]), batch)
                answers[positions[k]] = PartitionResponse(
                    batch.topic, batch.partition, int(error_code[k]), int(base_offset[k]),
                    log_start_offset=partition_log.log_start_offset)
            if request.acks == -1 and self.data_dir is not None:
                for number in seen:
                    self._logs[number].sync()
        if request.acks == 0:
            return None
        return ProduceResponse(request.request_id, tuple(answers))  # type: ignore[arg-type]

    # ------------------------------------------------------------ reading and housekeeping

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The log of one partition."""
        try:
            return self._logs[self._index[(topic, partition)]]
        except KeyError:
            raise IdemcoreError(f"broker {self.broker_id} has no partition {topic}-{partition}") from None

    def logs(self) -> list[PartitionLog]:
        return list(self._logs)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer_id_expiration_ms`` with no open transaction; return how many."""
        expired = self.state.expired_rows(now_ms, self.producer_id_expiration_ms)
        return self.state.remove_rows(expired, self.backend) if expired.any() else 0

    def close(self) -> None:
        for partition_log in self._logs:
            partition_log.close()
        close_store = getattr(self.producer_ids.store, "close", None)
        if close_store is not None:
            close_store()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
