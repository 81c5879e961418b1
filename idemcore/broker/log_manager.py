"""A broker's log directory (Kafka's ``LogManager``): its lock, the partition logs in it, Kafka's checkpoint files
(``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``,
``replication-offset-checkpoint``: the high watermarks), the
clean-shutdown marker, the ends written in this boot (``written-log-ends``), and retention and compaction over
the logs. Without a directory the logs live in memory and none of the files exist."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from idemcore.broker.log import LogCorruptionError, PartitionLog
from idemcore.broker.log.cleaner import clean_log
from idemcore.broker.producer_ids import (
    SQLITE_STORE_NAME,
    BlockStore,
    BlockStoreError,
    IdFloorFile,
    ProducerIdManager,
    SqliteBlockStore,
)
from idemcore.broker.topic_config import TopicConfig
from idemcore.broker.written_ends import WrittenEnds, WrittenEndsError, read_written_ends
from idemcore.errors import IdemcoreError
from idemcore.record.kafka_files import (
    encode_offset_checkpoint,
    parse_partition_dir,
    read_offset_checkpoint,
    write_file_atomically,
)

log = logging.getLogger(__name__)

#: Each partition's recovery point, the log end when the broker last started or closed cleanly (Kafka's file and
#: format); after a clean shutdown every log ends there and no segment is read whole.
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
#: Written once every log is closed and checkpointed, removed at the next start (Kafka's marker).
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
#: The recovery points as idemcore wrote them before it wrote Kafka's checkpoint (read once, then replaced).
OLD_LOG_END_CHECKPOINT = "log-end-offsets.json"
#: Where each log starts once retention deleted its oldest segments (Kafka's file and format).
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
#: How far each compacted log was cleaned (Kafka's file and format): gaps below it are compaction's.
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
#: Each partition's high watermark (Kafka's ``ReplicaManager`` writes it; Kafka's file and format).
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"

Key = tuple[str, int]


class LogManager:
    """The logs of ``data_dir`` (None: in memory), each opened by :meth:`open_log`. Reads the checkpoints and
    takes the directory's lock at once; :meth:`started` records the recovery points once every log is open and
    recovered; :meth:`close` (clean) or :meth:`kill` (as a dying process) end it."""

    def __init__(self, data_dir: Path | None, fsync: bool, clock: Callable[[], int]) -> None:
        self.data_dir = data_dir
        self.fsync = fsync
        self.clock = clock
        self.logs: list[PartitionLog] = []
        self._lock_descriptor = None if data_dir is None else _lock_data_dir(data_dir)
        self._started = False
        #: Why the directory failed (an append, sync or flush of a log in it raised), or None while it works. Kafka's
        #: log directory failure: from then on nothing is appended or acknowledged in it, and a stop leaves no
        #: clean-shutdown marker and no recovery point past what was fsync'd, so the next start scans the tails.
        self.offline: str | None = None
        #: Called in order, once, when the directory fails: the broker's delayed operations stop waiting on it, and
        #: ``idemcore serve`` halts, as a Kafka broker whose last live log directory failed halts
        #: (``LogManager.handleLogDirFailure``).
        self.on_offline: list[Callable[[str], None]] = []
        self._written_ends: WrittenEnds | None = None
        self._unserved_ends: dict[str, int] = {}
        try:
            self._recovery_points = self._read_recovery_points()
            # Without a checkpoint this broker never started here: tails it finds are not its torn writes.
            self.wrote_here = data_dir is not None and (
                os.path.lexists(data_dir / RECOVERY_POINT_CHECKPOINT)
                or os.path.lexists(data_dir / OLD_LOG_END_CHECKPOINT))
            marker = None if data_dir is None else data_dir / CLEAN_SHUTDOWN_FILE
            self.clean_shutdown = marker is not None and os.path.lexists(marker)
            if marker is not None and self.clean_shutdown and not os.path.isfile(marker):
                raise LogCorruptionError(f"{marker} is not a file; the broker writes one at a clean shutdown. "
                                         "Remove it (the logs are then scanned as after a crash)")
            self._log_starts = self._offsets_file(
                LOG_START_CHECKPOINT, "where each log starts since retention deleted its oldest segments: restore "
                "it, or write it again from the first segment of each partition")
            self._cleaned = self._offsets_file(
                CLEANER_CHECKPOINT, "how far each compacted log was cleaned: restore it, or write it again with each "
                "partition's last segment base offset")
            self._written_this_boot = self._ends_written_in_this_boot()
        except BaseException:
            self.release()
            raise

    # --- opening ---------------------------------------------------------------------------------------------

    def open_log(self, topic: str, partition: int, config: TopicConfig, *, new: bool = False) -> PartitionLog:
        """Open (load or create) one partition's log with its topic's settings; ``new``: a partition of a topic
        created now, which no checkpoint speaks for."""
        return self.adopt(self.new_log(topic, partition, config, new=new))

    def has_log(self, topic: str, partition: int) -> bool:
        """Whether the data directory holds a log of this partition (a replica this broker had before)."""
        return self.data_dir is not None and os.path.lexists(self.data_dir / f"{topic}-{partition}")

    def new_log(self, topic: str, partition: int, config: TopicConfig, *, new: bool = True) -> PartitionLog:
        """One partition's log, loaded or created, not yet managed (a new topic's logs may be made on the flusher
        thread, then :meth:`adopt` ed on the loop). OSError while the directory is offline."""
        self.check_online()
        key = (topic, partition)
        directory = None if self.data_dir is None else self.data_dir / f"{topic}-{partition}"
        return PartitionLog(
            topic, partition, directory, self.fsync, 0 if new else self._recovery_points.get(key, 0),
            clock=self.clock, log_start_offset=0 if new else self._log_starts.get(key, 0),
            cleaned_offset=0 if new else self._cleaned.get(key, 0), cut_torn_tail=self.wrote_here,
            clean_shutdown=not new and self.clean_shutdown and key in self._recovery_points,
            written_end=0 if new else self._written_this_boot.get(f"{topic}-{partition}", 0),
            **config.log_settings())

    def adopt(self, partition_log: PartitionLog) -> PartitionLog:
        """Manage ``partition_log`` from now on (checkpoints, retention, close, truncations)."""
        self.logs.append(partition_log)
        partition_log.on_truncate.append(self._truncating)
        return partition_log

    def _truncating(self, partition_log: PartitionLog, floor: int, start: int) -> None:
        """``partition_log`` is about to be truncated, holding at least ``floor`` throughout, and to start at
        ``start``: its recovery point and written end come down to ``floor`` and its recorded log start moves to
        ``start``, durably, before anything is cut (else the next start would take the shorter log for damage,
        or wipe it for ending below its recorded start)."""
        if self.data_dir is None:
            return
        self.check_online()
        key = (partition_log.topic, partition_log.partition)
        if self._recovery_points.get(key, 0) > floor:
            self._recovery_points[key] = floor
            self._write_offsets_file(RECOVERY_POINT_CHECKPOINT, self._recovery_points)
        if self._log_starts.get(key, 0) != start:
            self._log_starts[key] = start
            self._write_offsets_file(LOG_START_CHECKPOINT, self._log_starts)
        if self._written_ends is not None:
            self._written_ends.update(partition_log.name, floor)

    # --- high watermarks -------------------------------------------------------------------------------------

    def high_watermarks(self) -> dict[Key, int]:
        """The high watermarks in ``replication-offset-checkpoint`` ({} when there is none, or in memory)."""
        return self._offsets_file(REPLICATION_CHECKPOINT, "each partition's high watermark: remove it to start "
                                  "every high watermark at 0 (the followers bring them up again)")

    def write_high_watermarks(self, offsets: Mapping[Key, int]) -> None:
        """Record ``offsets`` (``(topic, partition) -> high watermark``) in ``replication-offset-checkpoint``,
        whole (Kafka's ``ReplicaManager.checkpointHighWatermarks``); nothing in memory."""
        if self.data_dir is None:
            return
        self.check_online()
        self._write_offsets_file(REPLICATION_CHECKPOINT, offsets)

    def recovery_points(self) -> dict[Key, int]:
        """The recovery points as last written."""
        return dict(self._recovery_points)

    def forget(self, logs: Iterable[PartitionLog]) -> None:
        """Take back logs just opened (a topic whose creation failed): discarded, no longer managed."""
        for partition_log in list(logs):
            partition_log.discard()
            self.logs.remove(partition_log)

    def started(self) -> None:
        """Every log is open and recovered: record the recovery points (the floor from now on), remove the
        clean-shutdown marker (from the first append on a crash must scan), keep the written ends of partitions
        this broker does not serve, and start recording this boot's ends."""
        self._started = True
        if self.data_dir is None:
            return
        self.write_recovery_points()
        if os.path.lexists(self.data_dir / CLEAN_SHUTDOWN_FILE):
            os.unlink(self.data_dir / CLEAN_SHUTDOWN_FILE)
        served = {p.name for p in self.logs}
        self._unserved_ends = {name: end for name, end in self._written_this_boot.items() if name not in served}
        self._written_ends = WrittenEnds(self.data_dir, self._all_written_ends())

    def partitions_added(self) -> None:
        """New partitions exist (a topic was created): give each a slot in the written ends."""
        if self._written_ends is not None:
            self._written_ends.close()
            self._written_ends = WrittenEnds(self.data_dir, self._all_written_ends())  # type: ignore[arg-type]

    def wrote(self, partition_log: PartitionLog) -> None:
        """``partition_log`` was written to (after the append: a kill in between leaves the log longer, never
        shorter than its recorded end)."""
        if self._written_ends is not None:
            self._written_ends.update(partition_log.name, partition_log.log_end_offset)

    def _all_written_ends(self) -> dict[str, int]:
        return {**self._unserved_ends, **{p.name: p.log_end_offset for p in self.logs}}

    def warn_unserved(self) -> None:
        """Say which partition directories with data no log here serves (a topic missing from the broker's topics
        and from topics.json): their records are not lost, but no client can read them."""
        if self.data_dir is None:
            return
        served = {(p.topic, p.partition) for p in self.logs}
        unserved = sorted(entry.name for entry in self.data_dir.iterdir()
                          if (parsed := parse_partition_dir(entry.name)) is not None and parsed not in served
                          and entry.is_dir() and any(f.stat().st_size for f in entry.glob("*.log")))
        if unserved:
            log.warning("%s holds partitions this broker does not serve, with data: %s (give their topics to the "
                        "broker, e.g. idemcore serve --topics NAME:PARTITIONS, or restore topics.json, to serve them "
                        "again; an internal topic's only by topics.json)", self.data_dir,
                        ", ".join(unserved[:10]) + (f" and {len(unserved) - 10} more" if len(unserved) > 10 else ""))

    # --- checkpoints -----------------------------------------------------------------------------------------

    def _read_recovery_points(self) -> dict[Key, int]:
        """Each partition's log end when the broker last started or closed cleanly (none: all 0), from Kafka's
        ``recovery-point-offset-checkpoint``, or once from the JSON file earlier versions of idemcore wrote."""
        if self.data_dir is None:
            return {}
        if os.path.lexists(self.data_dir / RECOVERY_POINT_CHECKPOINT) or not os.path.lexists(
                self.data_dir / OLD_LOG_END_CHECKPOINT):
            return self._offsets_file(RECOVERY_POINT_CHECKPOINT, "where each log ended when the broker last started "
                                      "or stopped: remove it to scan every log")
        path = self.data_dir / OLD_LOG_END_CHECKPOINT
        try:
            ends = json.loads(path.read_text())
            points = {}
            for name, end in ends.items():
                parsed = parse_partition_dir(str(name))
                if parsed is None:
                    raise ValueError(f"{name!r} is not a topic-partition name")
                points[parsed] = int(end)
            return points
        except OSError as exc:
            raise LogCorruptionError(f"{path} cannot be read ({exc.strerror}); remove it to start anyway") from None
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            raise LogCorruptionError(f"{path} is not a log-end checkpoint ({exc}); remove it to start anyway") \
                from None

    def _offsets_file(self, name: str, what: str) -> dict[Key, int]:
        """The ``topic partition offset`` entries of one of Kafka's offset checkpoints in data_dir ({} when
        there is none); ``what`` says what it records, for the message when it is damaged."""
        if self.data_dir is None or not os.path.lexists(self.data_dir / name):
            return {}
        path = self.data_dir / name
        try:
            read = read_offset_checkpoint(path)
        except OSError as exc:
            raise LogCorruptionError(f"{path} cannot be read ({exc.strerror})") from None
        if read.problems:
            raise LogCorruptionError(f"{path} is damaged ({read.problems[0]}); it says {what}")
        return {(entry.topic, entry.partition): entry.offset for entry in read.entries}

    def _write_offsets_file(self, name: str, offsets: Mapping[Key, int]) -> None:
        assert self.data_dir is not None
        write_file_atomically(self.data_dir / name, encode_offset_checkpoint(
            (topic, partition, offset) for (topic, partition), offset in sorted(offsets.items())))

    def _ends_written_in_this_boot(self) -> dict[str, int]:
        """What the last broker here had written to each log, if it ran in this boot (else {})."""
        if self.data_dir is None:
            return {}
        try:
            return read_written_ends(self.data_dir)
        except WrittenEndsError as exc:
            raise LogCorruptionError(str(exc)) from None

    def write_recovery_points(self) -> None:
        """Record every log's end as its recovery point, after making the logs durable (whatever ``fsync`` says,
        as Kafka flushes before moving a recovery point): the checkpoint never counts data a power loss could
        take back. Partitions this broker does not serve keep their entries. The JSON file of earlier versions
        goes once this one is written."""
        assert self.data_dir is not None
        self.check_online()  # offline: nothing it holds is known durable past the last checkpoint
        for partition_log in self.logs:
            self._synced(partition_log.flush, partition_log)
        self._recovery_points.update({(p.topic, p.partition): p.log_end_offset for p in self.logs})
        self._write_offsets_file(RECOVERY_POINT_CHECKPOINT, self._recovery_points)
        if os.path.lexists(self.data_dir / OLD_LOG_END_CHECKPOINT):
            os.unlink(self.data_dir / OLD_LOG_END_CHECKPOINT)

    # --- retention and compaction ----------------------------------------------------------------------------

    def delete_old_segments(self, configs: Mapping[str, TopicConfig], now: int) -> int:
        """Apply each topic's retention at ``now``: delete the whole segments that are due and advance the log
        start offsets (through :meth:`increment_log_start_offsets`, Kafka's ``deleteOldSegments``); in every
        partition, whatever its policy, delete the segments whose successor starts at or below its log start (one
        a roll left below a start DeleteRecords moved). Producer state is kept (producers whose batches are gone
        still have their sequence until they expire). Returns how many partitions moved their start; nothing is
        done while the directory is offline. An OSError takes the directory offline
        (Kafka's retention and log cleaner do so)."""
        try:
            return self._delete_old_segments(configs, now)
        except OSError as exc:  # Kafka's retention takes the directory offline on it
            self.dir_failed(f"deleting old segments failed: {exc}")
            raise

    def _delete_old_segments(self, configs: Mapping[str, TopicConfig], now: int) -> int:
        if self.offline is not None:
            return 0
        moves = {}
        for partition_log in self.logs:
            config = configs[partition_log.topic]
            if config.deletes:
                start = partition_log.retention_start(now, config.retention_ms, config.retention_bytes)
                if start is not None:
                    moves[(partition_log.topic, partition_log.partition)] = start
        self.increment_log_start_offsets(moves)
        for partition_log in self.logs:  # whatever the policy (Kafka's deleteLogStartOffsetBreachedSegments)
            partition_log.delete_start_breached_segments()
        return len(moves)

    def increment_log_start_offsets(self, starts: Mapping[Key, int]) -> None:
        """Raise each partition's log start offset to the one given (never lower, never past its log end:
        ValueError before anything changes), record the starts in ``log-start-offset-checkpoint`` (after an fsync
        of those logs' active segments, so no start lies past what a power loss keeps; a segment rolled moments
        before may still wait for its fsync on the flusher, and a power loss then damages it, which the next start
        refuses, naming it), and only then delete the segments whose
        successor starts at or below the new start (Kafka's ``maybeIncrementLogStartOffset`` then
        ``deleteLogStartOffsetBreachedSegments``; Kafka deletes at its next retention check). Retention and
        DeleteRecords both move the start through here. An OSError writing the checkpoint leaves every start as
        it was."""
        by_key = {(p.topic, p.partition): p for p in self.logs}
        moves = []
        for key, start in starts.items():
            partition_log = by_key[key]
            if partition_log.moves_log_start_to(start):
                moves.append((partition_log, start))
        if not moves:
            return
        if self.data_dir is not None:
            self.check_online()
            for partition_log, _ in moves:
                self._synced(partition_log.flush, partition_log)
            # Partitions this broker does not serve keep their entries, as in the other checkpoints.
            recorded = {**self._log_starts, **{(p.topic, p.partition): start for p, start in moves}}
            self._write_offsets_file(LOG_START_CHECKPOINT, recorded)
            self._log_starts = recorded
        for partition_log, start in moves:
            partition_log.maybe_increment_log_start_offset(start)
            partition_log.delete_start_breached_segments()

    def clean_logs(self, configs: Mapping[str, TopicConfig], now: int) -> int:
        """Compact the logs of topics whose ``cleanup.policy`` includes ``compact`` (Kafka's log cleaner), after
        recording in ``cleaner-offset-checkpoint`` how far each will be cleaned. Returns the bytes removed; nothing
        is done while the directory is offline. An OSError takes the directory offline
        (Kafka's retention and log cleaner do so)."""
        try:
            return self._clean_logs(configs, now)
        except OSError as exc:  # Kafka's log cleaner takes the directory offline on it
            self.dir_failed(f"compacting failed: {exc}")
            raise

    def _clean_logs(self, configs: Mapping[str, TopicConfig], now: int) -> int:
        if self.offline is not None:
            return 0
        due = [(partition_log, stop) for partition_log in self.logs
               if configs[partition_log.topic].compacted and (stop := partition_log.cleanable_offset()) is not None]
        if not due:
            return 0
        self._cleaned.update({(p.topic, p.partition): stop for p, stop in due})
        self._write_offsets_file(CLEANER_CHECKPOINT, self._cleaned)  # before a segment changes: gaps allowed there
        return sum(clean_log(partition_log, now, configs[partition_log.topic].delete_retention_ms)
                   for partition_log, _ in due)

    # --- producer ids ----------------------------------------------------------------------------------------

    def own_producer_ids(self, broker_id: int, store: BlockStore | None = None) -> ProducerIdManager:
        """The id allocator over this directory's SQLite store, with its floor file (in memory: neither);
        ``store``: the cluster's shared block store instead (ZooKeeper: every broker claims its blocks there, so
        no two brokers hand out one id), still with this directory's floor file."""
        if self.data_dir is None:
            return ProducerIdManager(broker_id, store if store is not None else SqliteBlockStore(":memory:"))
        floor_file = IdFloorFile(self.data_dir)
        floor = floor_file.read()
        if store is not None:
            shared = ProducerIdManager(broker_id, store, on_claim=floor_file.record)
            if floor is not None:
                shared.skip_through(floor)
            return shared
        store_path = self.data_dir / SQLITE_STORE_NAME
        if floor is None and not os.path.lexists(store_path) and self.wrote_here:
            # Both records of the ids handed out are gone: a producer that got an id and has not written yet
            # would share it. Checked before opening the store creates it, so a second start is refused too.
            raise BlockStoreError(
                f"{store_path} and {floor_file.path} are both missing, but {self.data_dir} was used before: "
                "producer ids already handed out could be handed out again. Restore one of them")
        manager = ProducerIdManager(broker_id, SqliteBlockStore(store_path), on_claim=floor_file.record)
        if floor is not None:
            manager.skip_through(floor)
        return manager

    # --- failing and stopping --------------------------------------------------------------------------------

    def _synced(self, sync: Callable[[], None], partition_log: PartitionLog) -> None:
        """Run ``sync`` (a flush or close of ``partition_log``); an OSError takes the directory offline (a failed
        fsync is reported once per open file: a second one, on the flusher, would succeed over dropped pages)."""
        try:
            sync()
        except OSError as exc:
            self.dir_failed(f"syncing {partition_log.name} failed: {exc}")
            raise

    def check_online(self) -> None:
        """OSError naming why, when the directory failed (:attr:`offline`)."""
        if self.offline is not None:
            raise OSError(f"the log directory {self.data_dir} is offline: {self.offline}")

    def dir_failed(self, why: str) -> None:
        """A write or fsync in the directory raised: the directory is offline (:attr:`offline`) from now on."""
        if self.offline is not None:
            return
        self.offline = why
        log.critical("log directory %s is offline: %s. Nothing more is appended or acknowledged; restart the broker "
                     "(its logs are then recovered as after a crash)", self.data_dir, why)
        for listener in self.on_offline:
            listener(why)

    def close(self, snapshot: Callable[[PartitionLog, int], None]) -> None:
        """A clean stop: every log synced and closed, a producer-state snapshot at each log's end (``snapshot``,
        Kafka snapshots at shutdown so the next start replays nothing), the recovery points and the
        clean-shutdown marker written. The lock stays until :meth:`release`. A directory that failed is closed as
        by :meth:`kill`: what its failed fsync may have dropped must be found by the next start's scan."""
        if self.offline is None:
            try:
                for partition_log in self.logs:
                    self._synced(partition_log.close, partition_log)
            except OSError:
                pass  # the directory is offline now: closed below as by kill
        if self.offline is not None:
            self.kill()
            return
        if self._lock_descriptor is None or not self._started:
            return
        try:
            for partition_log in self.logs:
                if partition_log.log_end_offset not in partition_log.snapshot_offsets():
                    snapshot(partition_log, partition_log.log_end_offset)
            self.write_recovery_points()  # every log is synced and closed
        except OSError as exc:  # e.g. a partition's directory removed under the broker: no clean shutdown
            self.dir_failed(f"the clean shutdown failed: {exc}")
            return
        # Kafka 3.x's content (CleanShutdownFileHandler); only the file's presence is read back.
        assert self.data_dir is not None
        write_file_atomically(self.data_dir / CLEAN_SHUTDOWN_FILE, b'{"version":0,"brokerEpoch":-1}')

    def kill(self) -> None:
        """Close the files as a dying process does: no flush, no checkpoint."""
        for partition_log in self.logs:
            partition_log.abandon()

    def release(self) -> None:
        """Close the written-ends file and release the directory's lock."""
        if self._written_ends is not None:
            self._written_ends.close()
            self._written_ends = None
        if self._lock_descriptor is not None:
            os.close(self._lock_descriptor)  # releases the lock
            self._lock_descriptor = None


def _lock_data_dir(data_dir: Path) -> int:
    """Hold an exclusive lock on ``data_dir`` itself for this broker's lifetime (released when it closes or its
    process dies): two brokers on one directory would hand out the same offsets. Locking the directory, not a
    file in it, means no file can be deleted to get round it. ``.lock`` names the holder, for messages. A
    directory inside a running broker's is refused before anything is made: its files would land in that
    broker's partitions, or take the name of one it has yet to make."""
    _refuse_inside_a_locked_dir(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # the directory or one above it is a file
        raise IdemcoreError(f"the data directory {data_dir} cannot be made: it or a directory above it is a "
                            "file; name a directory") from None
    descriptor = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise IdemcoreError(f"{data_dir} is in use by another broker (process {_lock_holder(data_dir)}); "
                            "one directory serves one broker at a time") from None
    named = data_dir / f".lock.{os.getpid()}"
    try:  # renamed over .lock: never written through a symlink, whatever mode the old one had
        holder = os.open(named, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        os.write(holder, str(os.getpid()).encode())
        os.close(holder)
        os.replace(named, data_dir / ".lock")
    except OSError:  # only a name for messages; a stale one would name a dead process
        with contextlib.suppress(OSError):
            os.unlink(named)
        with contextlib.suppress(OSError):
            os.unlink(data_dir / ".lock")
    return descriptor


def _refuse_inside_a_locked_dir(data_dir: Path) -> None:
    """Raise IdemcoreError when a directory above ``data_dir`` (symlinks resolved) is a data directory whose lock
    a broker holds (a shared lock is refused while another holds the exclusive one; dropped at once)."""
    for above in Path(os.path.realpath(data_dir)).parents:
        if not os.path.lexists(above / ".lock"):  # a broker's data directory keeps one
            continue
        try:
            descriptor = os.open(above, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue  # unreadable: no broker of ours can hold it either
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IdemcoreError(f"{data_dir}: inside {above}, the data directory in use by another broker (process "
                                f"{_lock_holder(above)}); name a directory of its own") from None
        finally:
            os.close(descriptor)  # (releases the shared lock, if taken)


def _lock_holder(data_dir: Path) -> str:
    try:
        descriptor = os.open(data_dir / ".lock", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return "unknown"
    try:
        return os.read(descriptor, 32).decode(errors="replace").strip() or "unknown"
    except OSError:  # a directory, say
        return "unknown"
    finally:
        os.close(descriptor)
