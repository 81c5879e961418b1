"""Reading a live cluster's partitions as a consumer does, for the audit: raw batches, never decoded.

:class:`ClusterReader` holds one :class:`~idemcore.net.broker_channel.BlockingBrokerChannel` per broker (TLS and
SASL from Kafka's client settings, :class:`~idemcore.net.client_security.ClientSecurity`), learns each partition's
leader from Metadata, resolves where to start and stop by ListOffsets (earliest, latest, a timestamp), and fetches
each partition from its leader with ``isolation_level=read_uncommitted`` (the audit must see aborted data and the
markers). A leader that moved (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, a lost connection, ...) means new
metadata and the same fetch again, at most :data:`ATTEMPTS` times and :data:`API_TIMEOUT_MS`, as Kafka's consumer
does.

:func:`fetch_batches` walks one partition's offsets: each Fetch answer's ``records`` are the leader's stored
batches back to back, exactly a segment's bytes, so the native header scan (:func:`scan_buffer`) reads them as it
reads a segment file; the last batch of an answer may be cut short by the byte limit, and the next fetch starts
where the last whole batch ended.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from idemcore.errors import IdemcoreError
from idemcore.kernels import Backend
from idemcore.net.broker_channel import BrokerChannels
from idemcore.net.client_security import ClientSecurity
from idemcore.net.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
)
from idemcore.protocol.codes import ErrorCode, error_name
from idemcore.protocol.constants import READ_UNCOMMITTED
from idemcore.record.kafka_files import STOP_END, STOP_TORN_TAIL, STOP_ZERO_PADDING, SegmentScan
from idemcore.record.kafka_files.segment import scan_buffer

#: The scheme of a cluster's bootstrap address: ``kafka://HOST:PORT[,HOST:PORT...]``.
SCHEME = "kafka://"
#: Errors that mean "ask the metadata again and retry": the leader moved, or is being elected.
RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE,
                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR,
                       ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT,
                       # a new leader's ListOffsets before its high watermark reaches its epoch (Kafka: retriable)
                       ErrorCode.OFFSET_NOT_AVAILABLE})
#: Tries of one request before the audit gives up on it (each after new metadata and a pause doubling from
#: BACKOFF_MS up to MAX_BACKOFF_MS: about 16 s in all, longer than a leader election after a broker's death), and
#: none begun after API_TIMEOUT_MS (Kafka's default.api.timeout.ms): a broker that takes each request and never
#: answers costs that long, not ATTEMPTS request timeouts.
ATTEMPTS = 20
API_TIMEOUT_MS = 60_000
BACKOFF_MS = 100
MAX_BACKOFF_MS = 1000
#: Bytes asked per partition and fetch; doubled (up to :data:`MAX_FETCH_BYTES`) when a batch is larger.
FETCH_BYTES = 8 << 20
MAX_FETCH_BYTES = 1 << 30
#: How long a leader may hold a Fetch for data: a broker answers at once when it has some, so this is what a fetch
#: at a partition's end costs. Not 0: tansu answers nothing at all to a Fetch that may not wait (measured: data at
#: 1 ms and more).
FETCH_WAIT_MS = 10
#: Partitions of one Fetch asking only for high watermarks (:meth:`ClusterReader.high_watermarks`).
PROBE_PARTITIONS = 1000
#: Empty answers below the high watermark asked again before the offsets are said unserved (pauses growing from
#: BACKOFF_MS: about 4 s in all).
EMPTY_TRIES = 8
#: Fetch errors that refuse the principal (its settings or rights to fix): the audit stops, one line. Any other
#: error of a partition is a problem of that partition; the others are read on.
REFUSALS = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED})


def is_cluster_url(source: str) -> bool:
    return source.startswith(SCHEME)


def parse_bootstrap(url: str) -> list[tuple[str, int]]:
    """``kafka://HOST:PORT[,HOST:PORT...]`` as ``(host, port)`` pairs (IPv6 hosts in brackets)."""
    if not is_cluster_url(url):
        raise IdemcoreError(f"{url!r} is not a cluster address: kafka://HOST:PORT[,HOST:PORT...]")
    rest = url[len(SCHEME):].rstrip("/")
    pairs = []
    for item in filter(None, (part.strip() for part in rest.split(","))):
        match = re.fullmatch(r"\[?([^\[\]]+?)\]?:(\d{1,5})", item)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise IdemcoreError(f"{item!r} in {url!r} is not HOST:PORT")
        pairs.append((match.group(1), int(match.group(2))))
    if not pairs:
        raise IdemcoreError(f"{url!r} names no broker: kafka://HOST:PORT[,HOST:PORT...]")
    return pairs


# --- Where to start and stop -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    """``--from`` / ``--to``: ``earliest``, ``latest``, ``latest-N`` (N offsets before the end), ``offset:N`` (that
    offset in every partition), or a time (epoch ms, or ISO 8601: the first offset whose timestamp is at least it,
    by ListOffsets)."""

    kind: str  # "earliest", "latest", "offset", "timestamp"
    value: int = 0

    @classmethod
    def parse(cls, text: str) -> Position:
        word = text.strip().lower()
        if word in ("earliest", "beginning"):
            return cls("earliest")
        if word in ("latest", "end"):
            return cls("latest")
        match = re.fullmatch(r"latest-(\d+)", word)
        if match:
            return cls("latest", int(match.group(1)))
        match = re.fullmatch(r"offset:(\d+)", word)
        if match:
            return cls("offset", int(match.group(1)))
        if re.fullmatch(r"\d+", word):
            return cls("timestamp", int(word))
        try:
            stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise IdemcoreError(f"{text!r} is not earliest, latest, latest-N, offset:N, epoch ms or an ISO 8601 "
                                "time") from None
        if stamp.tzinfo is None:
            raise IdemcoreError(f"{text!r}: give the time zone (e.g. {text.strip()}Z) so the time is not a guess")
        return cls("timestamp", int(stamp.timestamp() * 1000))

    def check_before(self, end: Position) -> None:
        """Refuse (one line) a start that comes after ``end`` in every partition: offsets or times in the wrong
        order, ``latest-N`` after ``latest-M``, any start but earliest before an end of earliest."""
        wrong = ((self.kind == end.kind and self.kind in ("offset", "timestamp") and self.value > end.value)
                 or (self.kind == end.kind == "latest" and self.value < end.value)
                 or (end.kind == "earliest" and self.kind != "earliest"))
        if wrong:
            raise IdemcoreError(f"--from {self} comes after --to {end}: nothing to audit")

    def __str__(self) -> str:
        if self.kind == "latest" and self.value:
            return f"latest-{self.value}"
        return {"earliest": "earliest", "latest": "latest", "offset": f"offset:{self.value}",
                "timestamp": f"{self.value}"}[self.kind]


@dataclass(frozen=True)
class PartitionRange:
    """One partition's offsets to audit: the batches from the one holding ``start`` (``from_batch_start``: from
    ``start``) up to those starting before ``end``; ``log_start``/``log_end``: the partition's log start and end
    offsets when planned."""

    topic: str
    partition: int
    start: int
    end: int
    log_start: int
    log_end: int
    #: ``end`` is the log end when planned (``--to latest``): the first answer's high watermark is taken if higher
    #: (a broker whose ListOffsets answers less than its log end, as tansu's does, is read to its end all the same).
    to_log_end: bool = False
    #: The batches from ``start`` on only, not the one holding it: a later piece of a partition split into offset
    #: ranges (the batch across the boundary is the earlier piece's).
    from_batch_start: bool = False


# --- The cluster ------------------------------------------------------------------------------------------------


class ClusterReader(BrokerChannels):
    """Metadata, ListOffsets and Fetch of a cluster reached at ``bootstrap`` (module docstring). One request at a
    time per broker; :meth:`close` closes every connection."""

    def __init__(self, bootstrap: Sequence[tuple[str, int]], *, security: ClientSecurity | None = None,
                 client_id: str = "idemcore-audit", request_timeout_ms: int = 30_000,
                 connect_timeout_ms: int = 10_000, api_timeout_ms: int | None = None):
        self.bootstrap = list(bootstrap)
        super().__init__(client_id, security=security, request_timeout_ms=request_timeout_ms,
                         connect_timeout_ms=connect_timeout_ms)
        self.api_timeout_ms = API_TIMEOUT_MS if api_timeout_ms is None else api_timeout_ms
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.leader_epochs: dict[tuple[str, int], int] = {}
        self.internal: set[str] = set()
        self.topics: dict[str, int] = {}
        self.fetches = 0
        self.fetched_bytes = 0

    def broker_address(self, broker_id: int) -> tuple[str, int]:
        return self.brokers.get(broker_id, self.bootstrap[0])

    def any_broker(self, request: object) -> object:
        """``request`` answered by the first broker that answers: the known brokers, then the bootstrap ones."""
        errors = []
        for address in [*self.brokers.values(), *self.bootstrap]:
            try:
                return self.channel(address).call(request)  # type: ignore[arg-type]
            except (ConnectionError, TimeoutError, OSError) as error:
                errors.append(str(error))
        raise IdemcoreError(f"no broker of {self.describe()} answered: {'; '.join(errors[-3:])}")

    def describe(self) -> str:
        return SCHEME + ",".join(f"{host}:{port}" for host, port in self.bootstrap)

    def refresh(self, topics: Sequence[str] | None = None) -> MetadataResponse:
        """New metadata: the brokers, every partition's leader (of ``topics``; None: every topic)."""
        answer = self.any_broker(MetadataRequest(None if topics is None else tuple(topics),
                                                 allow_auto_topic_creation=False))
        assert isinstance(answer, MetadataResponse)
        for broker in answer.brokers:
            self.brokers[broker.broker_id] = (broker.host, broker.port)
        for topic in answer.topics:
            if topic.is_internal:
                self.internal.add(topic.name)
            if topic.error_code != ErrorCode.NONE:
                continue
            self.topics[topic.name] = topic.partitions
            for state in topic.partition_states or ():
                self.leaders[(topic.name, state.partition)] = state.leader
                self.leader_epochs[(topic.name, state.partition)] = state.leader_epoch
        return answer

    def partitions(self, topics: Sequence[str] | None) -> list[tuple[str, int]]:
        """The partitions of ``topics`` (None: every topic but the internal ones), sorted; a topic the cluster
        does not have (or does not show this principal) is an error naming it."""
        answer = self.refresh(topics)
        found = {topic.name: topic for topic in answer.topics}
        if topics is not None:
            for name in topics:
                topic = found.get(name)
                if topic is None or topic.error_code != ErrorCode.NONE:
                    code = topic.error_code if topic is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    raise IdemcoreError(f"topic {name!r} of {self.describe()}: {error_name(code)}")
        names = sorted(set(topics)) if topics is not None else sorted(  # a topic named twice is read once
            t.name for t in answer.topics if not t.is_internal and not t.name.startswith("__")
            and t.error_code == ErrorCode.NONE)
        return [(name, partition) for name in names for partition in range(self.topics[name])]

    def _leader(self, topic: str, partition: int) -> tuple[str, int]:
        return self.broker_address(self.leaders.get((topic, partition), -1))

    def list_offsets(self, pairs: Sequence[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """Per partition, the offset ListOffsets answers for ``timestamp`` (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
        or a time: -1 when no record is that late), asked of each partition's leader."""
        out: dict[tuple[str, int], int] = {}
        left = list(pairs)
        tries = _Tries(self.api_timeout_ms)
        for attempt in tries:
            by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
            for pair in left:
                by_leader.setdefault(self._leader(*pair), []).append(pair)
            retry: list[tuple[str, int]] = []
            for address, mine in by_leader.items():
                try:
                    answer = self.channel(address).call(ListOffsetsRequest(
                        tuple((t, p, timestamp) for t, p in mine), isolation_level=READ_UNCOMMITTED))
                except (ConnectionError, TimeoutError) as error:
                    if tries.last:
                        raise IdemcoreError(f"ListOffsets of {len(mine)} partition(s) at {address[0]}:{address[1]}:"
                                            f" {error}") from None
                    retry += mine
                    continue
                assert isinstance(answer, ListOffsetsResponse)
                for result in answer.results:
                    pair = (result.topic, result.partition)
                    if result.error_code == ErrorCode.NONE:
                        out[pair] = result.offset
                    elif result.error_code in RETRIABLE and not tries.last:
                        retry.append(pair)
                    else:
                        raise IdemcoreError(f"ListOffsets of {result.topic}-{result.partition}: "
                                            f"{error_name(result.error_code)}{self._offline(pair, tries)}")
            if not retry:
                return out
            left = retry
            self._pause(attempt)
        return out

    def _offline(self, pair: tuple[str, int], tries: _Tries) -> str:
        """What to add to the last error of ``pair``: that the metadata gives it no leader, and how long the audit
        waited for one."""
        if self.leaders.get(pair, 0) >= 0:
            return ""
        return f" (the partition has no leader, it is offline: none was elected in {tries.waited():.1f} s)"

    def _pause(self, attempt: int) -> None:
        time.sleep(min(BACKOFF_MS << min(attempt, 10), MAX_BACKOFF_MS) / 1000)
        try:
            self.refresh()
        except IdemcoreError:  # no broker answers yet: the next try says so if it lasts
            pass

    def high_watermarks(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Each partition's high watermark, by one Fetch per leader of all its partitions (a byte each: the answer
        waits at most FETCH_WAIT_MS once, not once per partition), so partitions with nothing beyond ``offsets``
        need no fetch of their own. Best effort: a partition answered with an error, or whose leader did not
        answer, is left out (its own fetch says what is wrong)."""
        by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for pair in offsets:
            by_leader.setdefault(self._leader(*pair), []).append(pair)
        out: dict[tuple[str, int], int] = {}
        for address, pairs in by_leader.items():
            for first in range(0, len(pairs), PROBE_PARTITIONS):
                chunk = pairs[first:first + PROBE_PARTITIONS]
                request = FetchRequest(tuple(FetchPartition(t, p, offsets[(t, p)], 1) for t, p in chunk),
                                       isolation_level=READ_UNCOMMITTED, max_bytes=1, min_bytes=1,
                                       max_wait_ms=FETCH_WAIT_MS)
                try:
                    answer = self.channel(address).call(request)
                except (ConnectionError, TimeoutError):
                    continue
                if not isinstance(answer, FetchResponse):
                    continue
                asked = set(chunk)
                for mine in answer.partitions:
                    if mine.error_code == ErrorCode.NONE and (mine.topic, mine.partition) in asked:
                        out[(mine.topic, mine.partition)] = mine.high_watermark
        return out

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = FETCH_BYTES,
              max_wait_ms: int = FETCH_WAIT_MS) -> FetchedPartition:
        """One Fetch of ``topic``-``partition`` from ``offset`` at its leader, read_uncommitted; a moved leader or
        a lost connection: new metadata and again (at most :data:`ATTEMPTS` times). Any other error is the
        partition's answer (the caller decides)."""
        tries = _Tries(self.api_timeout_ms)
        for attempt in tries:
            address = self._leader(topic, partition)
            request = FetchRequest((FetchPartition(topic, partition, offset, max_bytes),),
                                   isolation_level=READ_UNCOMMITTED, max_bytes=max_bytes, min_bytes=1,
                                   max_wait_ms=max_wait_ms)
            try:
                answer = self.channel(address).call(request)
            except (ConnectionError, TimeoutError) as error:
                if tries.last:
                    raise IdemcoreError(f"Fetch of {topic}-{partition} at {address[0]}:{address[1]}: {error}") \
                        from None
                self._pause(attempt)
                continue
            assert isinstance(answer, FetchResponse)
            mine = next((p for p in answer.partitions if (p.topic, p.partition) == (topic, partition)), None)
            code = mine.error_code if mine is not None else answer.error_code
            if mine is not None and code == ErrorCode.NONE:
                self.fetches += 1
                self.fetched_bytes += len(mine.records)
                return mine
            # An answer without this partition (another one, or none) is a confused leader: asked again, as a
            # moved leader is; never taken for an empty partition.
            if (code in RETRIABLE or mine is None) and not tries.last:
                self._pause(attempt)
                continue
            if mine is None:
                named = ", ".join(f"{p.topic}-{p.partition}" for p in answer.partitions[:3]) or "no partition"
                return FetchedPartition(topic, partition, code if code != ErrorCode.NONE
                                        else ErrorCode.UNKNOWN_SERVER_ERROR,
                                        error_message=f"the answer named {named}, not this partition")
            return mine
        raise AssertionError("unreachable")


class _Tries:
    """The tries of one request: at most :data:`ATTEMPTS`, the last one that ends after ``api_timeout_ms``."""

    def __init__(self, api_timeout_ms: int):
        self.started = time.monotonic()
        self.deadline = self.started + api_timeout_ms / 1000
        self.attempt = 0

    def __iter__(self) -> Iterator[int]:
        for self.attempt in range(ATTEMPTS):
            yield self.attempt

    @property
    def last(self) -> bool:
        """Whether the try under way is the last: no more after it."""
        return self.attempt >= ATTEMPTS - 1 or time.monotonic() >= self.deadline

    def waited(self) -> float:
        return time.monotonic() - self.started


# --- Walking a partition ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchedBatches:
    """The whole batches of one Fetch answer (``scan``: their header columns, in log order), the partition's
    ``high_watermark`` and ``log_start_offset`` as the leader answered, and what was wrong (``problem``: a kind and
    a line, where the answer's bytes could not be read as batches)."""

    scan: SegmentScan
    high_watermark: int
    log_start_offset: int
    problem: tuple[str, int, str] | None = None  # (kind, offset, message)


def fetch_batches(reader: ClusterReader, part: PartitionRange, *, backend: str | Backend | None = None,
                  max_bytes: int = FETCH_BYTES, follow_end: bool = False) -> Iterator[FetchedBatches]:
    """The batches of ``part``, one Fetch answer at a time, each with at least one whole batch; from the batch
    holding ``part.start`` on, up to the batches starting before ``part.end`` (``follow_end``: up to the high
    watermark of the first answer instead: a follow's round reads what was there when it began, so a log written
    faster than it is read still ends the round). Stops at an answer it cannot use, yielding it with
    its ``problem``: bytes that are not batches (no later batch can be found in them), an error answered for the
    partition (``fetch_error``), a log cut back below the offset (``truncated``: ``high_watermark`` holds its new
    end), offsets below the high watermark never served (``unserved``), only batches behind the offset asked
    (``stale``: asking again would loop). Offsets deleted before they were read
    (``deleted``) are said and skipped. An authorization error raises: the principal's to fix."""
    offset = part.start
    limit = max_bytes
    end = part.end
    first = True
    empty = 0
    moves = 0  # the times the log start moved past the audit
    while True:
        answer = reader.fetch(part.topic, part.partition, offset, limit)
        if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            pair = (part.topic, part.partition)
            new_start = reader.list_offsets([pair], EARLIEST_TIMESTAMP).get(pair, offset)
            if new_start <= offset:  # beyond the end: the log was cut back under the audit
                log_end = reader.list_offsets([pair], LATEST_TIMESTAMP).get(pair, -1)
                yield FetchedBatches(scan_buffer(b""), log_end, new_start, (
                    "truncated", offset, f"offset {offset} is beyond the log end {log_end}: the log was truncated "
                                         "(an unclean leader election, or the topic deleted and made again); "
                                         "what is beyond it was not read"))
                return
            moves += 1
            if moves > ATTEMPTS:  # the log start outran the audit this often: a bound, not a chase
                yield FetchedBatches(scan_buffer(b""), -1, new_start, (
                    "deleted", offset, f"offsets from {offset} on were deleted faster than they were read "
                                       f"({ATTEMPTS} times): what follows was not read"))
                return
            yield FetchedBatches(scan_buffer(b""), -1, new_start,
                                 ("deleted", offset, f"offsets {offset}..{new_start - 1} were deleted (retention or "
                                                     "DeleteRecords) before they were read; a producer's next "
                                                     "batch after them may be a sequence_gap of the audit's own"))
            offset = new_start
            continue
        if answer.error_code != ErrorCode.NONE:
            why = (f"{error_name(answer.error_code)}"
                   + (f" ({answer.error_message})" if answer.error_message else ""))
            if answer.error_code in REFUSALS:  # the principal's rights: the user's to fix, not the partition's
                raise IdemcoreError(f"Fetch of {part.topic}-{part.partition} at offset {offset}: {why}")
            # This partition's answer (e.g. the topic deleted mid-audit): a problem here, the others read on.
            yield FetchedBatches(scan_buffer(b""), -1, -1, (
                "fetch_error", offset, f"Fetch at offset {offset} answered {why}: what follows was not read"))
            return
        if first and (part.to_log_end or follow_end):  # the end as the first answer has it: not chased on
            end = max(end, answer.high_watermark)
        first = False
        stop = min(end, answer.high_watermark)
        records = answer.records
        if not records:
            if offset < stop and empty < EMPTY_TRIES:  # below the high watermark: data is there, ask again
                empty += 1
                time.sleep(BACKOFF_MS * empty / 1000)
                continue
            if offset < stop:  # never served: said, not taken for the log's end
                yield FetchedBatches(scan_buffer(b""), answer.high_watermark, answer.log_start_offset, (
                    "unserved", offset, f"the leader served no batch at offset {offset}, below its high watermark "
                                        f"{answer.high_watermark}, in {EMPTY_TRIES + 1} tries: what follows was "
                                        "not read"))
            return  # nothing at or after offset: the end of the log
        empty = 0
        scan = scan_buffer(records, stream=part.partition, backend=backend, verify_crc=True)
        count = len(scan)
        if not count:
            if scan.stop == STOP_TORN_TAIL and limit < MAX_FETCH_BYTES:  # one batch larger than asked for
                limit = min(2 * limit, MAX_FETCH_BYTES)
                continue
            yield FetchedBatches(scan, answer.high_watermark, answer.log_start_offset,
                                 (scan.stop.replace(" ", "_"), offset, scan.stop_detail))
            return
        reached = int(scan["last_offset"].max())
        if reached < offset:  # only batches already behind: asking again would get them again, forever
            yield FetchedBatches(scan_buffer(b""), answer.high_watermark, answer.log_start_offset, (
                "stale", offset, f"asked for offset {offset}, the leader served only batches ending before it (at "
                                 f"{reached}): what follows was not read"))
            return
        after = reached + 1  # where the next fetch starts
        problem = None
        if scan.stop not in (STOP_END, STOP_TORN_TAIL, STOP_ZERO_PADDING):  # a torn tail: the byte limit cut it
            problem = (scan.stop.replace(" ", "_"), int(scan["last_offset"][-1]) + 1, scan.stop_detail)
        keep = scan["base_offset"] < stop
        if part.from_batch_start:
            keep &= scan["base_offset"] >= part.start
        if not keep.all():
            scan = _rows(scan, np.flatnonzero(keep))
        if len(scan) or problem is not None:
            yield FetchedBatches(scan, answer.high_watermark, answer.log_start_offset, problem)
        if problem is not None:
            return
        offset = after
        if offset >= stop:
            return


def _rows(scan: SegmentScan, rows: np.ndarray) -> SegmentScan:
    return SegmentScan(scan.path, scan.base_offset, scan.size, {name: column[rows] for name, column in
                                                                 scan.columns.items()},
                       scan.stop, scan.stop_position, scan.stop_detail, scan.backend, scan.verified_crc)
