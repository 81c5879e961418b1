"""The synthetic produce attempts as a Kafka log directory: what a partition leader would have written.

``generate(OUT, format="kafka")`` writes ``OUT/logs/<topic>-<partition>/`` with ``<20-digit base offset>.log``
segments (rolled at ``segment.bytes``), their ``.index`` and ``.timeindex`` (an entry every
``index.interval.bytes``), a ``.txnindex`` where an ABORT marker ended a transaction, ``leader-epoch-checkpoint``
and ``partition.metadata``, as a broker leaves them after a clean shutdown (indexes trimmed, the last time-index
entry appended on close). Snapshots (``.snapshot``) are not written: the audit does not read them.

What a leader writes
--------------------
The attempts reach each partition's leader in arrival order; the leader assigns offsets contiguously from 0 to
the batches it appends and stores each batch as sent, with only its base offset and partition leader epoch set.
A leader holding the producer's state (docs/rules.md §2) appends none of the planted per-batch anomalies: it
answers a retry within the five-batch window with the original offsets and refuses the others. So a per-batch
anomaly is in a real log only where the leader did not hold the producer's state when the batch came: Kafka
drops a producer's entry once it has been idle ``producer.id.expiration.ms`` (or retention / DeleteRecords
removed its records), and a producer it does not know may then write any sequence at any epoch
(``ProducerAppendInfo.checkSequence``: "accept writes with any sequence number"). Such a write is what each kind
in :data:`KAFKA_ANOMALIES` plants (the synthetic timestamps do not show the idle time; the audit does not read
it). Once the leader has appended it, the anomaly *is* the producer's state there: the producer's later attempts
on that partition, behind it (a gap, an old retry, an overlapping range), are refused
(OUT_OF_ORDER_SEQUENCE_NUMBER) and are not in the log (:func:`leader_writes`). A hanging transaction needs no
lost state at all: a transaction nobody ends stays open in any log. The kinds a leader cannot write, whatever
it lost, are :data:`KAFKA_CANNOT_OCCUR`, each with its reason.

Speed: a batch is a 61-byte header packed with NumPy (one structured array per chunk of batches) followed by
one of a few hundred record sections built once with :func:`idemcore.record.v2.encode_batch`; the CRC-32C is
computed per batch in C; markers are :func:`idemcore.record.v2.encode_end_txn_marker` batches, byte for byte.
"""

from __future__ import annotations

import base64
import bisect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from idemcore.protocol.codes import ControlType
from idemcore.record.crc import crc32c
from idemcore.record.kafka_files.names import LEADER_EPOCH_CHECKPOINT
from idemcore.record.kafka_files.writers import encode_leader_epoch_checkpoint, encode_txn_index
from idemcore.record.v2 import BATCH_HEADER_SIZE, Record, encode_batch, encode_end_txn_marker
from idemcore.synth.streams import ANOMALIES, is_retry_copy

LOGS_DIR = "logs"
#: Kafka's defaults: ``segment.bytes`` (1 GiB) and ``index.interval.bytes`` (4 KiB).
DEFAULT_SEGMENT_BYTES = 1 << 30
INDEX_INTERVAL_BYTES = 4096
#: The partition leader epoch every batch is written with (one leader, epoch 0, for the whole log).
LEADER_EPOCH = 0
#: Record values: this many bytes, drawn uniformly (keys are null); the record sections of
#: :data:`SECTION_VARIANTS` draws per record count are reused across batches.
VALUE_BYTES = (16, 100)
SECTION_VARIANTS = 32
#: Batches encoded per NumPy pass.
CHUNK_BATCHES = 8192

#: The planted kinds a leader can write (module docstring): by the finding each yields in the log's audit.
KAFKA_ANOMALIES = ("duplicate_beyond_window", "sequence_gap", "out_of_order", "epoch_regression", "fenced",
                   "hanging_transaction")
KAFKA_DEFAULT_MIX = dict.fromkeys(KAFKA_ANOMALIES, 3)
#: Why each of the other findings cannot be in a log a leader wrote (``duplicate``: the stream's retries are
#: attempts, not writes).
KAFKA_CANNOT_OCCUR = {
    "duplicate": "a retry within the five-batch window is deduplicated: the leader answers it with the original "
                 "offsets and writes nothing (a retry follows its batch within delivery.timeout.ms, long before "
                 "the producer's state could expire)",
    "invalid_record": "Kafka's LogValidator refuses such a batch before any producer state is read (a record count "
                      "below 1 or unlike the offset span, a producer id without a sequence), and a v2 batch has no "
                      "field for a last sequence other than base sequence + last offset delta",
    "invalid_txn_state": "a non-transactional write inside an open transaction is refused at every append "
                         "origin, replication included, and a producer with an open transaction never expires, so "
                         "no leader lacks the state that refuses it",
    "offset_overflow": "the leader assigns each partition's offsets from 0, and a batch would have to reach offset "
                       "2**63 - 2",
}
#: How each planted kind got into the log (for truth.json).
KAFKA_HOW_WRITTEN = {
    "sequence_gap": "sequences lost before the batch; a leader without the producer's state accepted it",
    "duplicate_beyond_window": "a retry older than the window, accepted by a leader without the producer's state",
    "out_of_order": "a range straddling the last written sequence, accepted by a leader without the producer's "
                    "state",
    "epoch_regression": "an idempotent zombie's old epoch, accepted by a leader without the producer's state",
    "fenced": "a fenced transactional producer's late write, accepted by a leader without the producer's state "
              "(before KIP-890's verification of transactional writes)",
    "hanging_transaction": "a transaction nobody ended",
}
#: Kinds after which the leader refuses the producer's later attempts on the partition (module docstring).
_REFUSES_AFTER = ("sequence_gap", "duplicate_beyond_window", "out_of_order")

#: The 61-byte v2 header (record/v2/codec.py's layout) as a NumPy record, big-endian, unpadded.
HEADER_DTYPE = np.dtype([
    ("base_offset", ">i8"), ("batch_length", ">i4"), ("partition_leader_epoch", ">i4"), ("magic", "i1"),
    ("crc", ">u4"), ("attributes", ">i2"), ("last_offset_delta", ">i4"), ("base_timestamp", ">i8"),
    ("max_timestamp", ">i8"), ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"),
    ("record_count", ">i4"),
])
assert HEADER_DTYPE.itemsize == BATCH_HEADER_SIZE
_CRC_AT, _CRC_FROM = 17, 21  # the crc field; what it covers starts at the attributes
_TRANSACTIONAL = 0x10
_INDEX_ENTRY = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
_TIME_INDEX_ENTRY = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


def kafka_mix(mix: dict[str, int] | None) -> dict[str, int]:
    """The anomalies to plant in a Kafka log: ``mix`` (None: :data:`KAFKA_DEFAULT_MIX`), refusing a kind a leader
    cannot write (with the reason) and filling the others with 0."""
    chosen = {**dict.fromkeys(ANOMALIES, 0), **(KAFKA_DEFAULT_MIX if mix is None else mix)}
    refused = [name for name, count in chosen.items() if count and name not in KAFKA_ANOMALIES]
    if refused:
        name = refused[0]
        why = KAFKA_CANNOT_OCCUR.get(name, "the generator does not plant it")
        raise ValueError(f"{name} cannot be planted in a Kafka log: {why}; plant some of "
                         f"{', '.join(KAFKA_ANOMALIES)}")
    return chosen


def leader_writes(columns: dict[str, np.ndarray], planted: Sequence[dict[str, Any]]) -> tuple[np.ndarray,
                                                                                                   dict[str, int]]:
    """Which attempts a leader appends (a bool per row of ``columns``) and how many of the others, by why not.

    Not written: the retries within the window (``duplicate``: deduplicated), and the producer's attempts on a
    partition after a planted gap, old retry or overlapping range there (``refused_after_anomaly``: the leader
    that accepted the anomaly holds it as the producer's state and refuses what comes behind it)."""
    n = len(columns["partition"])
    copies = is_retry_copy(columns)
    written = ~copies
    rows = np.arange(n)
    refused = np.zeros(n, bool)
    for item in planted:
        if item["finding"] in _REFUSES_AFTER:
            refused |= ((columns["producer_id"] == item["producer_id"]) & (columns["partition"] == item["partition"])
                        & (rows > item["position"]))
    written &= ~refused
    return written, {"duplicate": int(np.count_nonzero(copies)),
                     "refused_after_anomaly": int(np.count_nonzero(refused & ~copies))}


@dataclass
class LogLayout:
    """Where the log writer put each attempt (arrays over the rows of ``columns``; -1 where not written) and
    what it wrote."""

    base_offset: np.ndarray
    segment_base: np.ndarray
    position: np.ndarray
    partition_dirs: list[str] = field(default_factory=list)  # relative to the log directory, every partition's
    segments: int = 0
    bytes: int = 0
    aborted_txns: int = 0

    def file_of(self, row: int, partition_dir: str) -> str:
        """The segment file holding ``row``, relative to the log directory."""
        return f"{partition_dir}/{int(self.segment_base[row]):020d}.log"


class _Sections:
    """The record sections batches reuse: per record count, :data:`SECTION_VARIANTS` sections of null-keyed
    records with values of :data:`VALUE_BYTES` random bytes, timestamp delta 0, offset deltas 0..count-1."""

    def __init__(self, seed: int):
        self._rng = np.random.default_rng([seed, 4])
        self._pool = self._rng.bytes(1 << 16)
        self.by_id: list[bytes] = []
        self._first_id: dict[int, int] = {}

    def ids(self, counts: np.ndarray, variants: np.ndarray) -> np.ndarray:
        """The section id of each (record count, variant), building the sections of new counts."""
        for count in np.unique(counts).tolist():
            if count not in self._first_id:
                self._first_id[count] = len(self.by_id)
                self.by_id += [self._build(count) for _ in range(SECTION_VARIANTS)]
        first = np.zeros(int(counts.max(initial=0)) + 1, np.int64)
        for count, at in self._first_id.items():
            if count < len(first):
                first[count] = at
        return first[counts] + variants

    def _build(self, count: int) -> bytes:
        low, high = VALUE_BYTES
        sizes = self._rng.integers(low, high + 1, count).tolist()
        starts = self._rng.integers(0, len(self._pool) - high, count).tolist()
        records = [Record(k, 0, None, self._pool[start:start + size])
                   for k, (start, size) in enumerate(zip(starts, sizes, strict=True))]
        return encode_batch(records, base_timestamp=0)[BATCH_HEADER_SIZE:]

    def lengths(self) -> np.ndarray:
        return np.array([len(section) for section in self.by_id], np.int64)


def write_log_dir(root: str | os.PathLike[str], columns: dict[str, np.ndarray], written: np.ndarray, *,
                  topics: Sequence[str], partitions: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                  index_interval_bytes: int = INDEX_INTERVAL_BYTES, seed: int = 1,
                  progress: Callable[[], None] | None = None) -> LogLayout:
    """Write the ``written`` rows of ``columns`` (produce attempts, global partition ``topic * partitions +
    partition``, in arrival order) as Kafka's log directory ``root`` (created; must not exist): every partition of
    every topic, its batches in arrival order from offset 0. ``progress`` is called once per partition."""
    if index_interval_bytes < 0:
        raise ValueError(f"index_interval_bytes must be at least 0, got {index_interval_bytes}")
    root = Path(root)
    n = len(columns["partition"])
    streams = len(topics) * partitions
    counts = columns["record_count"].astype(np.int64)
    variants = np.random.default_rng([seed, 3]).integers(0, SECTION_VARIANTS, n)
    sections = _Sections(seed)
    data_rows = written & ~columns["is_control"].astype(bool)
    section = np.full(n, -1, np.int64)
    section[data_rows] = sections.ids(counts[data_rows], variants[data_rows])
    section_lengths = sections.lengths()
    largest = BATCH_HEADER_SIZE + int(section_lengths.max(initial=64))  # (a marker batch is 61 + 17 bytes)
    if segment_bytes < largest:
        raise ValueError(f"segment_bytes must be at least the largest batch, {largest} bytes, got {segment_bytes}")

    root.mkdir(parents=True)
    layout = LogLayout(np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64))
    rows = np.flatnonzero(written)
    rows = rows[np.argsort(columns["partition"][rows], kind="stable")]  # per partition, in arrival order
    bounds = np.searchsorted(columns["partition"][rows], np.arange(streams + 1))
    topic_ids = _topic_ids(len(topics), seed)
    for stream in range(streams):
        topic, partition = divmod(stream, partitions)
        name = f"{topics[topic]}-{partition}"
        layout.partition_dirs.append(name)
        part = _PartitionWriter(root / name, columns, rows[bounds[stream]:bounds[stream + 1]], sections.by_id,
                                section, section_lengths, segment_bytes, index_interval_bytes, layout)
        part.write()
        (root / name / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_ids[topic]}\n")
        if progress is not None:
            progress()
    return layout


def _topic_ids(count: int, seed: int) -> list[str]:
    """Kafka's topic ids: random UUIDs, written base64 (URL-safe, unpadded) as ``Uuid.toString`` does."""
    raw = np.random.default_rng([seed, 5]).bytes(16 * count)
    return [base64.urlsafe_b64encode(raw[16 * k:16 * k + 16]).decode().rstrip("=") for k in range(count)]


class _PartitionWriter:
    """One partition: its batches (``rows`` of ``columns``, in log order) laid out in segments and written with
    their indexes, as Kafka's ``LogSegment.append`` and ``UnifiedLog.roll`` do."""

    def __init__(self, path: Path, columns: dict[str, np.ndarray], rows: np.ndarray, sections: list[bytes],
                 section: np.ndarray, section_lengths: np.ndarray, segment_bytes: int, index_interval_bytes: int,
                 layout: LogLayout):
        self.path = path
        self.rows = rows
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.layout = layout
        self.sections = sections
        m = len(rows)
        self.pid = columns["producer_id"][rows].astype(np.int64)
        self.epoch = columns["producer_epoch"][rows].astype(np.int64)
        self.sequence = columns["base_sequence"][rows].astype(np.int64)
        self.count = columns["record_count"][rows].astype(np.int64)
        self.timestamp = columns["max_timestamp"][rows].astype(np.int64)
        self.transactional = columns["is_transactional"][rows].astype(bool)
        self.control = columns["is_control"][rows].astype(bool)
        self.control_type = columns["control_type"][rows].astype(np.int64)
        self.coordinator_epoch = columns["coordinator_epoch"][rows].astype(np.int64)
        self.count[self.control] = 1  # a marker holds one control record
        self.base = np.cumsum(self.count) - self.count
        self.last = self.base + self.count - 1
        self.section = section[rows]
        self.markers: dict[int, bytes] = {}
        for k in np.flatnonzero(self.control).tolist():
            self.markers[k] = encode_end_txn_marker(
                int(self.control_type[k]), int(self.coordinator_epoch[k]), producer_id=int(self.pid[k]),
                producer_epoch=int(self.epoch[k]), timestamp=int(self.timestamp[k]), base_offset=int(self.base[k]),
                partition_leader_epoch=LEADER_EPOCH)
        self.size = np.zeros(m, np.int64)
        data = ~self.control
        self.size[data] = BATCH_HEADER_SIZE + section_lengths[self.section[data]]
        for k, marker in self.markers.items():
            self.size[k] = len(marker)

    def write(self) -> None:
        self.path.mkdir()
        m = len(self.rows)
        ends = np.cumsum(self.size)
        starts = ends - self.size
        aborted = self._aborted_txns()
        first = 0
        while True:  # a segment at least; Kafka rolls before a batch that would take it past segment.bytes
            stop = int(np.searchsorted(ends, starts[first] + self.segment_bytes, side="right")) if first < m else m
            stop = max(stop, first + 1) if first < m else m
            self._write_segment(first, stop, starts[first:stop] - (starts[first] if first < m else 0), aborted)
            first = stop
            if first >= m:
                break
        # One leader from offset 0 (no entry for an empty log).
        (self.path / LEADER_EPOCH_CHECKPOINT).write_bytes(encode_leader_epoch_checkpoint([(LEADER_EPOCH, 0)] if m
                                                                                          else []))

    def _write_segment(self, first: int, stop: int, positions: np.ndarray,
                       aborted: list[tuple[int, int, int, int]]) -> None:
        base = int(self.base[first]) if first < stop else (int(self.last[-1]) + 1 if len(self.last) else 0)
        name = f"{base:020d}"
        self.layout.segments += 1
        with (self.path / f"{name}.log").open("wb") as log:
            for start in range(first, stop, CHUNK_BATCHES):
                end = min(stop, start + CHUNK_BATCHES)
                chunk = self._encode(start, end)
                log.write(chunk)
                self.layout.bytes += len(chunk)
        rows = self.rows[first:stop]
        self.layout.base_offset[rows] = self.base[first:stop]
        self.layout.segment_base[rows] = base
        self.layout.position[rows] = positions
        index, times = self._indexes(first, stop, positions, base)
        (self.path / f"{name}.index").write_bytes(index.tobytes())
        (self.path / f"{name}.timeindex").write_bytes(times.tobytes())
        mine = [entry for entry in aborted if first < stop and base <= entry[2] <= int(self.last[stop - 1])]
        if mine:
            (self.path / f"{name}.txnindex").write_bytes(encode_txn_index(*np.array(mine, np.int64).T))
            self.layout.aborted_txns += len(mine)

    def _encode(self, start: int, end: int) -> bytearray:
        """Batches ``start..end-1``, back to back: headers from one structured array, sections joined, CRCs."""
        m = end - start
        header = np.zeros(m, HEADER_DTYPE)
        count = self.count[start:end]
        header["base_offset"] = self.base[start:end]
        header["batch_length"] = self.size[start:end] - 12
        header["partition_leader_epoch"] = LEADER_EPOCH
        header["magic"] = 2
        header["attributes"] = np.where(self.transactional[start:end], _TRANSACTIONAL, 0)
        header["last_offset_delta"] = count - 1
        header["base_timestamp"] = header["max_timestamp"] = self.timestamp[start:end]
        header["producer_id"] = self.pid[start:end]
        header["producer_epoch"] = self.epoch[start:end]
        header["base_sequence"] = self.sequence[start:end]
        header["record_count"] = count
        # Per batch, only C-level iteration (map) from here: no bytecode runs per batch.
        bodies = list(map(self.sections.__getitem__, self.section[start:end].tolist()))
        for k in [k for k in self.markers if start <= k < end]:  # the marker batch itself, header and record
            header[k - start] = np.frombuffer(self.markers[k], HEADER_DTYPE, count=1)[0]
            bodies[k - start] = self.markers[k][BATCH_HEADER_SIZE:]
        raw = header.tobytes()
        size = BATCH_HEADER_SIZE
        pieces: list[bytes] = [b""] * (2 * m)
        pieces[0::2] = map(raw.__getitem__, map(slice, range(0, size * m, size), range(size, size * m + 1, size)))
        pieces[1::2] = bodies
        out = bytearray(b"".join(pieces))
        ends = np.cumsum(self.size[start:end])
        starts = ends - self.size[start:end]
        with memoryview(out) as view:
            crcs = np.fromiter(map(crc32c, map(view.__getitem__, map(slice, (starts + _CRC_FROM).tolist(),
                                                                           ends.tolist()))), np.uint32, m)
        flat = np.frombuffer(out, np.uint8)
        flat[(starts + _CRC_AT)[:, None] + np.arange(4)] = crcs.astype(">u4").view(np.uint8).reshape(-1, 4)
        del flat
        return out

    def _indexes(self, first: int, stop: int, positions: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
        """The segment's ``.index`` and ``.timeindex`` entries, as ``LogSegment.append`` adds them: before a batch,
        when more than ``index.interval.bytes`` were appended since the last entry, an offset entry (the batch's
        last offset, its position) and a time entry (the largest timestamp so far and the last offset of the batch
        that has it) if that timestamp is larger than the last entry's; one more time entry when the segment rolls
        or the log closes."""
        if first >= stop:
            return np.zeros(0, _INDEX_ENTRY), np.zeros(0, _TIME_INDEX_ENTRY)
        stamps = self.timestamp[first:stop]
        running = np.maximum.accumulate(stamps)
        rises = np.r_[True, stamps[1:] > running[:-1]]  # Kafka moves its max only on a strictly larger timestamp
        holder = np.maximum.accumulate(np.where(rises, np.arange(len(stamps)), 0))
        last = self.last[first:stop]
        at: list[int] = []
        starts = positions.tolist()
        since_from = 0  # the position the byte count since the last entry starts from
        while (k := bisect.bisect_right(starts, since_from + self.index_interval_bytes)) < len(starts):
            at.append(k)
            since_from = starts[k]
        entries = np.array(at, np.int64)
        index = np.zeros(len(entries), _INDEX_ENTRY)
        index["relative_offset"] = last[entries] - base
        index["position"] = positions[entries]
        times: list[tuple[int, int]] = []
        for k in [*at, len(stamps) - 1]:  # the entries' batches, then the roll or close
            stamp = int(running[k])
            if not times or stamp > times[-1][0]:
                times.append((stamp, int(last[holder[k]]) - base))
        return index, np.array(times, _TIME_INDEX_ENTRY)

    def _aborted_txns(self) -> list[tuple[int, int, int, int]]:
        """(producer id, first offset, ABORT marker's offset, last stable offset) per transaction an ABORT ended,
        as the leader's ``ProducerStateManager`` records them: the last stable offset is the first offset of the
        earliest other transaction still open, else the marker's offset + 1. Every transactional write the leader
        appended opens a transaction, planted ones too."""
        open_txns: dict[int, int] = {}
        out = []
        for k in np.flatnonzero(self.transactional).tolist():
            pid = int(self.pid[k])
            if not self.control[k]:
                open_txns.setdefault(pid, int(self.base[k]))
                continue
            first = open_txns.pop(pid, None)
            if first is not None and int(self.control_type[k]) == ControlType.ABORT:
                others = [offset for other, offset in open_txns.items() if other != pid]
                out.append((pid, first, int(self.base[k]), min(others) if others else int(self.base[k]) + 1))
        return out
