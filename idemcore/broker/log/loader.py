"""Opening a partition directory as Kafka's ``LogLoader`` does.

After a clean shutdown nothing is scanned: the recovery point (``recovery-point-offset-checkpoint``) is the log
end, each segment's size is its file's, and the active segment's index bookkeeping comes from its time index's
last entry. After a crash, the segments from the one holding the recovery point on are scanned with the native
header scan (every CRC checked), their offset and time indexes rebuilt when they differ from what the batches
imply, their ``.txnindex`` cut to the log end, and a torn tail of the last segment cut; the segments below are
trusted as Kafka trusts flushed ones. A batch's partition leader epoch (outside its CRC) must be at least 0 and at
least the one before it (leaders stamp their epoch, and epochs only rise along a log); the epochs of the scanned
batches are assigned in the log's leader epoch cache, as Kafka's ``LogSegment.recover`` does.

``floor``: the log held at least that much when the broker last started, closed or wrote it (the recovery point,
or the end it last wrote in this boot: ``written-log-ends``). Damage below it, a segment missing below it, a
rolled segment that is damaged (it was fsync'd before the next one started), or offsets that skip or repeat raise
:class:`LogCorruptionError` naming the file and the byte position. A data directory in idemcore's earlier frame
format (a file named ``log``) is refused with a message saying so.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from idemcore.broker.log.leader_epochs import LeaderEpochCache
from idemcore.broker.log.segment import LogSegment
from idemcore.broker.log.store import FileStore
from idemcore.errors import IdemcoreError
from idemcore.kernels import header_scan_reference as scan_codes
from idemcore.record.kafka_files.names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_file_name,
    parse_offset_file,
)
from idemcore.record.kafka_files.segment import SegmentScan, scan_segment
from idemcore.record.kafka_files.writers import TEMPORARY_SUFFIX, encode_txn_index_entry, write_file_atomically
from idemcore.record.v2 import CorruptRecordError, iter_batches

log = logging.getLogger(__name__)

#: Where the broker keeps the recovery points (named in messages).
CHECKPOINT_HINT = "<data_dir>/recovery-point-offset-checkpoint and <data_dir>/written-log-ends"
#: The partition leader epoch of a log that never had another leader (a broker without replication writes it).
LEADER_EPOCH = 0


class LogCorruptionError(IdemcoreError):
    """A log file holds something that is neither a valid batch nor a torn tail."""


@dataclass
class LoadedLog:
    segments: list[LogSegment]
    #: Bytes of a torn tail cut from the last segment.
    truncated_bytes: int
    #: Bytes of segment files read (0 after a clean shutdown).
    scanned_bytes: int


def segment_files(directory: Path, base: int, index_interval_bytes: int, *, create: bool = False) -> LogSegment:
    """The segment of ``directory`` at ``base`` over its four files (``create``: make the log and index files)."""
    def store(suffix: str, make: bool) -> FileStore:
        return FileStore(directory / offset_file_name(base, suffix), create=make)
    return LogSegment(base, store(LOG_SUFFIX, create), store(INDEX_SUFFIX, create), store(TIME_INDEX_SUFFIX, create),
                      store(TXN_INDEX_SUFFIX, False), index_interval_bytes)


def delete_segment_files(name: str, directory: Path, base: int, why: str) -> None:
    log.info("%s: deleting the segment %s (%s)", name, directory / offset_file_name(base, LOG_SUFFIX), why)
    # The .log last: a crash midway leaves a segment whose missing indexes loading rebuilds, never index files
    # that a segment made later at the same offset would take for its own.
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):
        (directory / offset_file_name(base, suffix)).unlink(missing_ok=True)


def load_segments(name: str, directory: Path, *, recovery_point: int, floor: int, log_start_offset: int,
                  cleaned_offset: int,
                  index_interval_bytes: int, fsync: bool, clean: bool, cut_torn_tail: bool,
                  epochs: LeaderEpochCache | None = None) -> LoadedLog:
    """The segments of ``directory`` (module docstring), the active one last, open for appends. The leader
    epochs of the batches scanned are assigned in ``epochs`` (those above its latest, as Kafka's
    ``LogSegment.recover``: a checkpoint a crash left behind the log gets them back)."""
    if (directory / "log").exists():
        raise LogCorruptionError(f"{name}: {directory / 'log'} is in idemcore's earlier frame format, which this "
                                 "broker no longer reads (it stores Kafka segments): start from an empty data_dir, "
                                 "or read this one with an earlier idemcore")
    names = os.listdir(directory)
    for file_name in names:
        if file_name.endswith(TEMPORARY_SUFFIX):  # written, not yet renamed into place: never in use
            log.info("%s: removing %s, left by a write cut short", name, directory / file_name)
            os.unlink(directory / file_name)
    bases = sorted(parsed[0] for parsed in map(parse_offset_file, names)
                   if parsed is not None and parsed[1] == LOG_SUFFIX)
    while len(bases) > 1 and bases[1] <= log_start_offset:  # a retention cut short, finished here
        delete_segment_files(name, directory, bases.pop(0), "below the log start offset")
    if not bases:
        if floor > log_start_offset:
            raise LogCorruptionError(
                f"{name}: {directory / offset_file_name(log_start_offset, LOG_SUFFIX)} is missing (the directory "
                f"holds no segment), but held offsets up to {floor - 1} when the broker last started, "
                f"closed or wrote it. Restore it, or remove {CHECKPOINT_HINT} to accept the loss")
        segment = segment_files(directory, log_start_offset, index_interval_bytes, create=True)
        return LoadedLog([segment], 0, 0)
    if bases[0] > log_start_offset and bases[0] > 0 and floor > log_start_offset:
        raise LogCorruptionError(
            f"{name}: {directory / offset_file_name(bases[0], LOG_SUFFIX)} starts at offset {bases[0]} where offset "
            f"{log_start_offset} belongs: {directory / offset_file_name(log_start_offset, LOG_SUFFIX)} is missing "
            f"(deleted or copied outside the broker). Restore it, or remove {CHECKPOINT_HINT} and the partition to "
            "start over")
    segments = [segment_files(directory, base, index_interval_bytes, create=k == len(bases) - 1)
                for k, base in enumerate(bases)]
    for segment, after in itertools.pairwise(segments):
        segment.next_offset = after.base_offset
        segment.close()
    active = segments[-1]
    # After a crash the segments from the one holding the recovery point on are scanned (all without one);
    # after a clean shutdown none, but any segment whose index files fail Kafka's sanity check is, whatever the
    # recovery point (as Kafka's loadSegmentFiles rebuilds a missing or corrupt index).
    first = len(segments) if clean and recovery_point >= active.base_offset else max(
        (k for k, segment in enumerate(segments) if segment.base_offset <= recovery_point), default=0)
    for segment in segments:  # something else where a .txnindex belongs: refused, naming it
        if os.path.isdir(segment.txn_index.name):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), segment.txn_index.name)
    suspect = {k for k, segment in enumerate(segments) if not _indexes_sane(segment)}
    if first == len(segments):
        # Each segment's tail, as Kafka's readNextOffset reads the active one's: whole, CRC-valid batches ending
        # where the next segment starts (the active one: at the recovery point). A segment failing it is scanned,
        # and its damage named.
        for k, segment in enumerate(segments):
            end = recovery_point if k == len(segments) - 1 else segments[k + 1].base_offset
            if k not in suspect and not _tail_ends_at(segment, end):
                log.warning("%s: %s does not end whole at offset %d: scanning it", name, segment.log.name, end)
                suspect.add(k)
        if len(segments) - 1 in suspect:
            first = len(segments) - 1
    to_scan = sorted(suspect | set(range(first, len(segments))))
    if not to_scan or to_scan[-1] != len(segments) - 1:
        active.next_offset = max(recovery_point, active.base_offset)
        active.load_index_state()
    truncated = scanned = 0
    expected = 0
    prior_epoch = -1
    for k in to_scan:
        segment = segments[k]
        last = k == len(segments) - 1
        if k == 0 or k - 1 not in to_scan:
            expected = segment.base_offset
            prior_epoch = -1
        if segment.base_offset != expected and not expected < segment.base_offset <= cleaned_offset:
            what = (f"{directory / offset_file_name(expected, LOG_SUFFIX)} is missing" if segment.base_offset > expected
                    else "segments overlap")
            raise LogCorruptionError(
                f"{name}: {segment.log.name} starts at offset {segment.base_offset} where offset {expected} belongs: "
                f"{what} (deleted or copied outside the broker). Restore it, or remove {CHECKPOINT_HINT} and the "
                "partition to start over")
        scan = scan_segment(Path(segment.log.name))
        scanned += scan.size
        valid, expected, bad, prior_epoch = _check_scan(name, scan, segment.base_offset, cleaned_offset,
                                                        prior_epoch)
        if bad is not None and (not last or expected < floor):
            why = ("a rolled segment (fsync'd before the next one started) is damaged" if not last else
                   f"the log ends at offset {expected}, but held {floor} when the broker last started, "
                   "closed or wrote it (damaged outside the broker)")
            # Without the checkpoints the damage still stops the start (a torn tail only is cut), so the way to
            # accept the loss is to cut there too; a rolled segment has later ones that would then not follow.
            advice = (f"Restore it, or accept losing what follows: truncate it to {valid} bytes and remove "
                      f"{CHECKPOINT_HINT}" if last else
                      f"Restore it, or remove {CHECKPOINT_HINT} and the partition to start over")
            raise LogCorruptionError(f"{name}: {segment.log.name} is corrupt at byte {valid}: {bad}; {why}. {advice}")
        if not last and expected < segments[k + 1].base_offset:
            raise LogCorruptionError(
                f"{name}: {segment.log.name} ends at offset {expected}, but the next segment starts at offset "
                f"{segments[k + 1].base_offset}: {directory / offset_file_name(expected, LOG_SUFFIX)} is missing or "
                f"{segment.log.name} is shorter (deleted or cut outside the broker). Restore it, or remove "
                f"{CHECKPOINT_HINT} and the partition to start over")
        if last and expected < floor:
            raise LogCorruptionError(
                f"{name}: {segment.log.name} is shorter, or {directory / offset_file_name(expected, LOG_SUFFIX)} is "
                f"missing: the log ends at offset {expected}, but held {floor} when the broker last "
                "started, closed or wrote it (deleted, cut or damaged outside the broker). "
                f"Restore it, or remove {CHECKPOINT_HINT} to accept the loss")
        if last and valid != segment.size:
            if not cut_torn_tail:
                raise LogCorruptionError(
                    f"{name}: {segment.log.name} holds {segment.size - valid} bytes after byte {valid} that are not a "
                    f"valid batch, and nothing says this broker wrote them (no {CHECKPOINT_HINT}): not cut. Move the "
                    f"file aside, or truncate it to {valid} bytes to drop them")
            truncated = segment.size - valid
            log.warning("%s: dropping a torn tail of %d bytes of %s after offset %d (a write cut short by a crash)",
                        name, truncated, segment.log.name, expected - 1)
            segment.log.truncate(valid)
        rows = np.flatnonzero(scan["position"] < valid)
        if epochs is not None and len(rows):
            epochs.assign_all(epoch_starts(scan["leader_epoch"][rows], scan["base_offset"][rows],
                                           epochs.latest_epoch))
        rebuild_indexes(name, segment, scan, rows, closed=not last, fsync=fsync)
        trim_txn_index(name, segment, expected, fsync)
        if last:
            segment.next_offset = max(expected, segment.base_offset)
            segment.first_timestamp = int(scan["max_timestamp"][0]) if len(rows) else -1
        else:
            segment.close()
    if segments[-1].next_offset < log_start_offset:
        # Every offset the log lost lay below its start, so no reader loses a record: start it over there, as
        # Kafka's LogLoader does when the log ends below log-start-offset-checkpoint's offset.
        log.warning("%s: the log ends at offset %d, below its log start offset %d: deleting its segments and "
                    "starting it empty at %d", name, segments[-1].next_offset, log_start_offset, log_start_offset)
        for segment in segments:
            segment.close()
            delete_segment_files(name, directory, segment.base_offset, "below the log start offset")
        segments = [segment_files(directory, log_start_offset, index_interval_bytes, create=True)]
    return LoadedLog(segments, truncated, scanned)


def _tail_ends_at(segment: LogSegment, end: int) -> bool:
    """Whether the batches after the segment's last offset index entry are whole, CRC-valid, written by this
    broker, contiguous, and end exactly at the file's end and at offset ``end`` (Kafka's ``readNextOffset`` at a
    clean load reads the same bytes: at most about index.interval.bytes and one batch)."""
    if segment.size == 0:
        return end == segment.base_offset
    expected: int | None = segment.base_offset
    position = 0
    if segment.index.size:
        _, position = struct.unpack(">ii", segment.index.read(segment.index.size - 8, 8))
        expected = None  # the entry names the batch's last offset: its base is read from the file
    data = segment.log.read(position, segment.size - position)
    epoch = 0
    try:
        for _, header in iter_batches(data, check_crc=True):
            if (expected is not None and header.base_offset != expected) or header.partition_leader_epoch < epoch:
                return False  # leader epochs never fall along a log (nor below 0)
            expected, epoch = header.next_offset, header.partition_leader_epoch
    except CorruptRecordError:
        return False
    return expected == end


def _indexes_sane(segment: LogSegment) -> bool:
    """Kafka's ``LogSegment.sanityCheck``: both index files are there, whole entries, and the offset index's
    last entry lies within the segment (read from the index files, not the segment)."""
    index, time_index = segment.index, segment.time_index
    if not (isinstance(index, FileStore) and isinstance(time_index, FileStore)):
        return True
    if not (index.exists and time_index.exists) or index.size % 8 or time_index.size % 12:
        return False
    if index.size:
        relative, position = struct.unpack(">ii", index.read(index.size - 8, 8))
        return relative >= 0 and 0 <= position < segment.size
    return True


def epoch_starts(leader_epochs: np.ndarray, base_offsets: np.ndarray, latest: int) -> list[tuple[int, int]]:
    """``(epoch, base offset)`` of each batch whose leader epoch is above every one before it (and ``latest``):
    where each new epoch begins in these batches."""
    found = []
    for epoch, base in zip(leader_epochs.tolist(), base_offsets.tolist(), strict=True):
        if epoch > latest:
            found.append((epoch, base))
            latest = epoch
    return found


def _check_scan(name: str, scan: SegmentScan, base: int, cleaned_offset: int, prior_epoch: int
                ) -> tuple[int, int, str | None, int]:
    """Where the valid batches of a scanned segment end, the offset after them, what is wrong at that byte
    (None: nothing), and the leader epoch of the last valid batch (``prior_epoch``: the one before the segment;
    -1 none). Offsets that skip or repeat (outside what compaction removed) raise: never a torn write."""
    bases, lasts = scan["base_offset"], scan["last_offset"]
    crc = scan["crc_ok"]
    epochs, control, types = scan["leader_epoch"], scan["is_control"], scan["control_type"]
    positions, lengths = scan["position"], scan["batch_length"]
    expected = base
    for row in range(len(scan)):
        position = int(positions[row])
        if crc[row] != scan_codes.CRC_OK:
            return position, expected, "CRC mismatch (the batch is corrupt)", prior_epoch
        epoch = int(epochs[row])
        if epoch < max(prior_epoch, 0):  # outside the CRC: a leader stamps its epoch, and epochs only rise
            return position, expected, (f"partition leader epoch {epoch}, below "
                                        f"{'0' if epoch < 0 else f'{prior_epoch}, the epoch of the batch before'}"
                                        ), prior_epoch
        prior_epoch = epoch
        first = int(bases[row])
        if first != expected and not expected < first <= cleaned_offset:
            raise LogCorruptionError(f"{name}: {scan.path} is corrupt at byte {position}: it holds offset {first} "
                                     f"where offset {expected} belongs (batches missing or repeated, or a damaged "
                                     "base offset)")
        if control[row] and int(types[row]) not in (0, 1):
            raise LogCorruptionError(f"{name}: {scan.path} holds a control batch at byte {position} (offset {first}) "
                                     "that is not one transaction marker")
        expected = int(lasts[row]) + 1
    end = int(positions[-1]) + int(lengths[-1]) + 12 if len(scan) else 0
    if scan.clean:
        return end, expected, None, prior_epoch
    return end, expected, f"{scan.stop}: {scan.stop_detail}", prior_epoch


def rebuild_indexes(name: str, segment: LogSegment, scan: SegmentScan | Mapping[str, np.ndarray], rows: np.ndarray,
                    *, closed: bool, fsync: bool, warn: bool = True) -> None:
    """Replay the index rule over the scanned batches (the segment's bookkeeping for appends is left as the rule
    leaves it), and rewrite the offset and time indexes when they are not what the batches imply."""
    offset_index = bytearray()
    time_index = bytearray()
    base = segment.base_offset
    segment.bytes_since = 0
    segment.max_timestamp, segment.max_timestamp_offset, segment.last_time_timestamp = -1, base, None
    positions, lengths = scan["position"], scan["batch_length"]
    lasts, stamps = scan["last_offset"], scan["max_timestamp"]
    for row in rows.tolist():
        entries = segment.index_entries(int(positions[row]), int(lengths[row]) + 12, int(lasts[row]),
                                        int(stamps[row]))
        offset_index += entries[0]
        time_index += entries[1]
    if closed:
        time_index += segment.final_time_entry()
    elif segment.final_time_entry_due() and segment.time_index.read(0, segment.time_index.size) == (
            bytes(time_index) + segment.peek_final_time_entry()):
        time_index += segment.final_time_entry()  # the active segment was closed cleanly: its entry stays
    for store, wanted, what in ((segment.index, offset_index, "offset index"),
                                (segment.time_index, time_index, "time index")):
        found = store.read(0, store.size)
        if found != wanted:
            (log.warning if warn else log.debug)("%s: rebuilding the %s %s from its segment (%d bytes, %d "
                                                 "expected)", name, what, store.name, len(found), len(wanted))
            if isinstance(store, FileStore):
                store.close()
                write_file_atomically(store.name, bytes(wanted), fsync)
                store.size = len(wanted)
            else:
                store.truncate(0)
                store.append(wanted)


def trim_txn_index(name: str, segment: LogSegment, end: int, fsync: bool, warn: bool = True) -> None:
    """Drop ``.txnindex`` entries of markers at or past ``end`` (cut with a torn tail) and a partial entry."""
    entries = segment.aborted()
    kept = [entry for entry in entries if entry.last_offset < end]
    wanted = b"".join(encode_txn_index_entry(*entry[:4]) for entry in kept)
    if segment.txn_index.size == len(wanted):
        return
    store = segment.txn_index
    if not isinstance(store, FileStore):
        store.truncate(len(wanted))
        return
    store.close()
    say = log.warning if warn else log.debug
    if not wanted:
        say("%s: removing the transaction index %s: its entries lie past the log end", name, store.name)
        Path(store.name).unlink(missing_ok=True)
    else:
        say("%s: cutting the transaction index %s to the log end", name, store.name)
        write_file_atomically(store.name, wanted, fsync)
    store.size = len(wanted)
