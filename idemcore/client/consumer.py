"""Consumer: Kafka's consumer read path over a transport (a Broker used directly, a simulated network, TCP).

Partitions are either assigned by the caller (Kafka's ``assign``) or by the consumer group ``group_id`` after
``subscribe`` (topics or a pattern): the consumer then joins the group through the classic protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup; :mod:`idemcore.client.group_member`), with Kafka's assignors, a rebalance
listener, ``enable_auto_commit`` (positions committed every ``auto_commit_interval_ms`` from ``poll``, and before
partitions are revoked; with ``assign`` only ``commit`` commits) and ``max_poll_interval_ms``. The two ways are
exclusive. A ``group_id`` gives committed offsets (OffsetCommit, OffsetFetch) a home. ``poll`` and the blocking
calls (``position``, ``commit``, ``committed``) send requests and let the transport's time pass (``tick``) while
they wait, as the producer does; a group member's heartbeats go from them too, or from a daemon heartbeat thread
when the transport is ``thread_safe`` (TCP).

Reading follows Kafka's ``FetchCollector`` and ``CompletedFetch``:

- A fetch answer is used only if its fetch offset is still the partition's position (a seek in between makes
  it stale), and a request unanswered within ``request_timeout_ms`` is given up (the connection is dropped, so
  its late answer never arrives) and sent again from the same position: a lost or duplicated answer never makes
  the consumer skip or repeat a record.
- read_committed: the answer's aborted transactions ``(producer id, first offset)`` are taken in first-offset
  order; a transactional batch of a producer whose aborted transaction began at or before the batch's last
  offset is dropped, until that producer's ABORT marker. Nothing at or past the answer's last stable offset is
  used.
- Control batches (markers), dropped batches and records before the position (the first batch of an answer may
  start before it; compaction leaves gaps) are never returned but move the position past them, so a consumer
  after an aborted tail or a marker keeps moving.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from idemcore.checks import bool_setting, int_at_least, str_or_none_setting
from idemcore.client.connecting import own_transport
from idemcore.client.group_member import ConsumerGroupMetadata, ConsumerRebalanceListener, GroupMember
from idemcore.errors import IdemcoreError
from idemcore.net.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetEntry,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
    Response,
)
from idemcore.net.transport import RequestHandler, Transport, connection_broke
from idemcore.protocol.codes import RETRIABLE_ERRORS, ControlType, ErrorCode, error_name
from idemcore.protocol.constants import READ_COMMITTED, READ_UNCOMMITTED, TopicPartition

if TYPE_CHECKING:
    from idemcore.net.client_security import ClientSecurity
from idemcore.record.stored import StoredBatch
from idemcore.record.v2 import CorruptRecordError, decode_stored_batches

log = logging.getLogger(__name__)

_client_ids = itertools.count()
_ISOLATION_LEVELS = {"read_committed": READ_COMMITTED, "read_uncommitted": READ_UNCOMMITTED}
_RESET_POLICIES = ("earliest", "latest", "none")
#: How a missing position is found: the group's committed offset (then ``auto_offset_reset``), or a ListOffsets.
_COMMITTED = "committed"
_TIMESTAMPS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}
#: Rounds one ``poll`` may run while answers arrive at once and move positions without giving records (a guard
#: against a broker that never lets a position settle; far above what any real log needs).
_MAX_ROUNDS = 100_000
#: How a message names an answer's error code (None: the answer left the partition out).
_name = functools.partial(error_name, absent="no answer for it", unknown="error ")


class ConsumerError(IdemcoreError):
    """A request failed in a way retrying cannot fix; the message names the partition and the error."""


class OffsetOutOfRangeError(ConsumerError):
    """The position is outside the partition's log and ``auto_offset_reset`` is "none"."""


class NoOffsetForPartitionError(ConsumerError):
    """A partition has no position, no committed offset, and ``auto_offset_reset`` is "none"."""


class CommitFailedError(ConsumerError):
    """The group coordinator refused an offset commit (for a group member: the group rebalanced, the partitions
    may belong to another member now)."""


class IllegalStateError(ConsumerError):
    """A call that does not fit how partitions are assigned (``assign`` and ``subscribe`` are exclusive)."""


class ConsumerTimeoutError(ConsumerError, TimeoutError):
    """A blocking call did not complete within ``default_api_timeout_ms``."""


class ConsumerClosedError(ConsumerError):
    """A call on a closed consumer."""


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as ``poll`` returns it; ``timestamp`` is its own (CREATE_TIME: as its producer set it), or
    its batch's max timestamp under LOG_APPEND_TIME."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


#: One step through a fetched answer: the position after it, and the record it returns (None: a skip).
_Step = tuple[int, ConsumerRecord | None]


def fetched_steps(answer: FetchedPartition, batches: Sequence[StoredBatch], fetch_offset: int,
                  read_committed: bool) -> list[_Step]:
    """Walk one partition's fetched ``batches`` (``answer.records`` decoded) from ``fetch_offset`` as Kafka's
    ``CompletedFetch`` does: the records
    to return, each with the position after it, and the skips (markers, aborted batches, the end of the last
    batch, which compaction may have emptied) that move the position without a record."""
    aborted = deque(sorted(answer.aborted_transactions or (), key=lambda txn: txn.first_offset))
    aborted_producers: set[int] = set()
    stable = answer.last_stable_offset
    steps: list[_Step] = []
    position = fetch_offset
    last_end = None
    for stored in batches:
        if read_committed and 0 <= stable < stored.next_offset:
            break  # never past the last stable offset, even if a broker sent it
        batch = stored.batch
        last_end = stored.next_offset
        if read_committed and batch.producer_id >= 0:
            # Every aborted transaction begun by this batch's end marks its producer, until its ABORT marker.
            while aborted and aborted[0].first_offset < stored.next_offset:
                aborted_producers.add(aborted.popleft().producer_id)
            if stored.control is not None and stored.control[0] == ControlType.ABORT:
                aborted_producers.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in aborted_producers:
                position = max(position, stored.next_offset)
                steps.append((position, None))
                continue
        if stored.control is not None:  # one control record, at the batch's base offset
            if stored.base_offset >= position:
                position = stored.base_offset + 1
                steps.append((position, None))
            continue
        keys = batch.keys if batch.keys is not None else (None,) * batch.record_count
        headers = batch.headers if batch.headers is not None else ((),) * batch.record_count
        # Each record's own (base timestamp + its delta), or the batch's max for all (LOG_APPEND_TIME, one time).
        timestamps = batch.timestamps if batch.timestamps is not None else (batch.max_timestamp,) * batch.record_count
        for offset, key, value, record_headers, timestamp in zip(stored.offsets(), keys, batch.values, headers,
                                                                 timestamps, strict=True):
            if offset < position:
                continue  # before the fetch offset: the batch started earlier
            position = offset + 1
            steps.append((position, ConsumerRecord(answer.topic, answer.partition, offset, key, value,
                                                   tuple((k, v) for k, v in record_headers), timestamp)))
    if last_end is not None and last_end > position:
        steps.append((last_end, None))  # the batch's last offset survives compaction: never fetch it again
    return steps


@dataclass(slots=True)
class _Partition:
    """An assigned partition: its position, or how to find it, and what is fetched for it."""

    position: int | None = None
    #: How to find a missing position: _COMMITTED, "earliest" or "latest".
    reset: str = _COMMITTED
    #: Bumped when the position is set from outside (seek, reset): answers to requests sent before are stale.
    epoch: int = 0
    fetching: int | None = None  # request id of the fetch in flight
    resetting: int | None = None  # request id of the OffsetFetch/ListOffsets in flight for its position
    steps: list[_Step] = field(default_factory=list)  # fetched, not yet returned
    next_step: int = 0
    not_before: int = 0  # after a retriable error: no new request before this time
    #: By ``pause``: not fetched, and what was fetched before is held until ``resume``.
    paused: bool = False


@dataclass(slots=True)
class _Pending:
    request: Request
    sent_ms: int
    on_answer: Callable[[Request, Response, int], None]
    on_lost: Callable[[], None]


class _Retry(Exception):
    """A blocking call's answer says: try again (a retriable error), with why."""


class Consumer:
    """A Kafka consumer: partitions from ``assign``, or from its group after ``subscribe``. ``transport``: a
    :class:`~idemcore.broker.Broker` (used directly), any :class:`~idemcore.net.transport.Transport`, or bootstrap
    servers (``"host:port[,...]"``): the consumer then connects with a :class:`~idemcore.net.tcp.TcpTransport` of
    its own (closed by :meth:`close`), authenticating as ``security`` says (a
    :class:`~idemcore.net.client_security.ClientSecurity`, or Kafka's client properties such as
    ``{"security.protocol": "SSL", "ssl.ca.location": ..., "ssl.certificate.location": ...,
    "ssl.key.location": ...}``; a broker's refusal raises :class:`~idemcore.net.tcp.AuthenticationError`). Settings
    are Kafka's, in snake_case; ``default_api_timeout_ms`` bounds the blocking calls, ``request_timeout_ms`` each
    request (a JoinGroup may wait ``max_poll_interval_ms``, the rebalance timeout, more)."""

    def __init__(self, transport: Transport | RequestHandler | str, group_id: str | None = None,
                 isolation_level: str = "read_committed", *, auto_offset_reset: str = "earliest",
                 max_poll_records: int = 500, fetch_max_bytes: int = 52_428_800,
                 max_partition_fetch_bytes: int = 1_048_576, request_timeout_ms: int = 30_000,
                 default_api_timeout_ms: int = 60_000, retry_backoff_ms: int = 100,
                 client_id: str | None = None,
                 partition_assignment_strategy: Sequence[str] = ("range", "cooperative-sticky"),
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300000, group_instance_id: str | None = None,
                 metadata_max_age_ms: int = 300_000,
                 security: ClientSecurity | Mapping[str, str] | None = None) -> None:
        str_or_none_setting("group_id", group_id)
        if type(isolation_level) is not str or isolation_level not in _ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be 'read_committed' or 'read_uncommitted', got {isolation_level!r}")
        if auto_offset_reset not in _RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be one of {', '.join(_RESET_POLICIES)}, got "
                             f"{auto_offset_reset!r}")
        for name, value, low in (("max_poll_records", max_poll_records, 1), ("fetch_max_bytes", fetch_max_bytes, 0),
                                 ("max_partition_fetch_bytes", max_partition_fetch_bytes, 0),
                                 ("request_timeout_ms", request_timeout_ms, 1),
                                 ("default_api_timeout_ms", default_api_timeout_ms, 1),
                                 ("retry_backoff_ms", retry_backoff_ms, 0),
                                 ("auto_commit_interval_ms", auto_commit_interval_ms, 1),
                                 ("session_timeout_ms", session_timeout_ms, 1),
                                 ("heartbeat_interval_ms", heartbeat_interval_ms, 1),
                                 ("max_poll_interval_ms", max_poll_interval_ms, 1),
                                 ("metadata_max_age_ms", metadata_max_age_ms, 0)):
            _check_int(name, value, low)
        if client_id is not None and type(client_id) is not str:
            raise TypeError(f"client_id must be a string or None, got {client_id!r}")
        client_id = client_id or f"consumer-{next(_client_ids)}"
        bool_setting("enable_auto_commit", enable_auto_commit)
        str_or_none_setting("group_instance_id", group_instance_id)
        if isinstance(partition_assignment_strategy, str) or not isinstance(partition_assignment_strategy, Iterable):
            raise TypeError("partition_assignment_strategy must be a list of assignor names, got "
                            f"{partition_assignment_strategy!r}")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be below session_timeout_ms "
                             f"({session_timeout_ms})")
        self.transport: Transport
        self.transport, self._owns_transport = own_transport(transport, client_id, security, "consumer")
        transport = self.transport
        self.group_id = group_id
        self.isolation_level = isolation_level
        self.read_committed = isolation_level == "read_committed"
        self.auto_offset_reset = auto_offset_reset
        self.max_poll_records = max_poll_records
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.request_timeout_ms = request_timeout_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.client_id = client_id
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._ready: deque[TopicPartition] = deque()  # partitions with fetched steps, in the order they arrived
        self._inflight: dict[int, _Pending] = {}
        self._answers: dict[int, Response] = {}  # answers to the blocking calls' requests
        self._request_ids = itertools.count(1)
        # Found while handling answers, raised at the end of a round by the calls they concern: poll raises the
        # fetch errors; poll and position the errors finding a position.
        self._fetch_errors: list[ConsumerError] = []
        self._position_errors: list[ConsumerError] = []
        self._closed = False
        self.partition_assignment_strategy = tuple(partition_assignment_strategy)
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.group_instance_id = group_instance_id
        self.metadata_max_age_ms = metadata_max_age_ms
        self._manual = False  # partitions given by assign()
        self._group: GroupMember | None = None  # made at the first subscribe
        self._next_auto_commit_ms = transport.now_ms() + auto_commit_interval_ms  # Kafka's first: an interval on
        if not self.partition_assignment_strategy or not all(
                type(name) is str for name in self.partition_assignment_strategy):
            raise ValueError("partition_assignment_strategy must name at least one assignor (by its protocol name), "
                             f"got {self.partition_assignment_strategy!r}")

    # ------------------------------------------------------------ assignment and positions

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions`` from now on; those assigned before keep their positions. Not while
        subscribed (Kafka's rule)."""
        self._check_open()
        if self._group is not None and self._group.subscribed:
            raise IllegalStateError(f"consumer {self.client_id} is subscribed to "
                                    f"{self._subscription_text()}: assign() and subscribe() are exclusive "
                                    "(unsubscribe() first)")
        wanted = _partition_list("partitions", partitions)
        for topic, partition in wanted:
            count = self.transport.partition_count(topic)
            if not partition < count:
                raise ValueError(f"partition {topic}-{partition} does not exist: {topic!r} has {count} partitions")
        self._set_assignment(wanted)
        self._manual = bool(wanted)

    def _set_assignment(self, wanted: Iterable[TopicPartition]) -> None:
        old = self._partitions
        self._partitions = {tp: old.get(tp) or _Partition() for tp in wanted}
        self._ready = deque(tp for tp in self._ready if tp in self._partitions)

    def _assign_from_group(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment (the member calls it): kept partitions keep their positions, new ones start
        from the committed offset, else ``auto_offset_reset``."""
        self._set_assignment(sorted(partitions))

    # ------------------------------------------------------------ group subscription

    def subscribe(self, topics: Iterable[str] | re.Pattern[str] | str,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join group ``group_id`` reading ``topics`` (a list), or every topic a pattern (a ``re.Pattern``, or a
        string: Kafka's regex subscription) matches whole, rechecked at each metadata refresh; the group's
        assignor decides the partitions. ``listener`` hears of revoked, assigned and lost partitions in
        ``poll``. Replaces an earlier subscription; not with partitions from ``assign``."""
        self._check_open()
        if self.group_id is None:
            raise ConsumerError(f"subscribe() needs a group_id: consumer {self.client_id} has none")
        if self._manual:
            raise IllegalStateError(f"consumer {self.client_id} has partitions from assign(): assign() and "
                                    "subscribe() are exclusive (assign([]) first)")
        pattern: re.Pattern[str] | None = None
        names: frozenset[str] = frozenset()
        if isinstance(topics, re.Pattern):
            if not isinstance(topics.pattern, str):
                raise TypeError(f"a subscription pattern must be a str pattern, got {topics.pattern!r:.80}")
            pattern = topics
        elif isinstance(topics, str):
            try:
                pattern = re.compile(topics)
            except re.error as error:
                raise ValueError(f"subscription pattern {topics!r:.80} is not a regular expression: {error}") from None
        elif isinstance(topics, Iterable) and not isinstance(topics, bytes | Mapping):
            listed = list(topics)
            for topic in listed:
                if type(topic) is not str or not topic:
                    raise ValueError(f"a subscribed topic must be a non-empty string, got {topic!r:.80}")
            names = frozenset(listed)
        else:
            raise TypeError(f"subscribe() takes a list of topics or a pattern, got {topics!r:.80}")
        if pattern is None and not names:
            self.unsubscribe()
            return
        for method in ("on_partitions_revoked", "on_partitions_assigned"):
            if listener is not None and not callable(getattr(listener, method, None)):
                raise TypeError(f"listener must have {method}(partitions), got {listener!r:.80}")
        lost = getattr(listener, "on_partitions_lost", None)  # optional (Kafka's default: revoked), not junk
        if lost is not None and not callable(lost):
            raise TypeError(f"listener's on_partitions_lost must be callable or absent, got {lost!r:.80}")
        self._member().subscribe(names, pattern, listener)

    def unsubscribe(self) -> None:
        """Leave the group (revoking the partitions it gave) and drop a manual assignment."""
        self._check_open()
        if self._group is not None and self._group.subscribed:
            self._group.unsubscribe()
        self._set_assignment(())
        self._manual = False

    def subscription(self) -> set[str]:
        """The topics subscribed to (a pattern's current matches)."""
        self._check_open()
        return self._group.subscription() if self._group is not None else set()

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """Who this consumer is in its group (for a transactional producer's ``send_offsets_to_transaction``)."""
        group = self._group_of("consumer_group_metadata")
        return self._member().metadata() if self._group is not None else ConsumerGroupMetadata(group)

    def _member(self) -> GroupMember:
        if self._group is None:
            assert self.group_id is not None
            self._group = GroupMember(
                self, self.group_id, assignors=self.partition_assignment_strategy,
                session_timeout_ms=self.session_timeout_ms, heartbeat_interval_ms=self.heartbeat_interval_ms,
                max_poll_interval_ms=self.max_poll_interval_ms, group_instance_id=self.group_instance_id,
                metadata_max_age_ms=self.metadata_max_age_ms, retry_backoff_ms=self.retry_backoff_ms,
                request_timeout_ms=self.request_timeout_ms)
        return self._group

    def _subscription_text(self) -> str:
        group = self._group
        if group is None:
            return "nothing"
        return f"pattern {group.pattern.pattern!r}" if group.pattern is not None else f"{sorted(group.topics)}"

    def _subscribed(self) -> GroupMember | None:
        group = self._group
        return group if group is not None and group.subscribed else None

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop returning records of ``partitions`` (each assigned, else ValueError naming it) and stop fetching
        them, keeping their positions: Kafka's flow control. Records fetched before are held for ``resume``. A
        partition the group takes away is forgotten with its paused state; the group is not told (heartbeats go
        on)."""
        for topic, partition in _partition_list("partitions", partitions):
            self._state(topic, partition).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch and return ``partitions`` (each assigned, else ValueError) again from their positions."""
        for topic, partition in _partition_list("partitions", partitions):
            self._state(topic, partition).paused = False

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions ``pause`` stopped."""
        return {tp for tp, state in self._partitions.items() if state.paused}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read ``topic``-``partition`` from ``offset`` at the next poll."""
        state = self._state(topic, partition)
        _check_int("offset", offset, 0)
        self._set_position(state, (topic, partition), offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read ``partitions`` (None: every assigned one) from their log start, looked up at the next poll."""
        self._seek_to("earliest", partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read ``partitions`` (None: every assigned one) from their end (read_committed: the last stable offset),
        looked up at the next poll."""
        self._seek_to("latest", partitions)

    def position(self, topic: str, partition: int) -> int:
        """The offset of the next record ``poll`` returns for the partition. A missing one is looked up now: the
        group's committed offset, else ``auto_offset_reset`` (ListOffsets)."""
        state = self._state(topic, partition)
        self._block(lambda: state.position is not None, f"the position of {topic}-{partition}",
                    self.transport.now_ms() + self.default_api_timeout_ms, positions=True)
        assert state.position is not None
        return state.position

    def _seek_to(self, reset: str, partitions: Iterable[TopicPartition] | None) -> None:
        self._check_open()
        chosen = list(self._partitions) if partitions is None else _partition_list("partitions", partitions)
        for tp in chosen:
            state = self._state(*tp)
            self._set_position(state, tp, None)
            state.reset = reset

    def _set_position(self, state: _Partition, tp: TopicPartition, offset: int | None) -> None:
        """Set the position from outside the fetch path: anything fetched or asked for the old one is dropped."""
        state.position = offset
        state.reset = _COMMITTED
        state.epoch += 1
        state.steps, state.next_step = [], 0
        state.fetching = state.resetting = None  # their answers no longer match: ignored when they come
        state.not_before = 0
        if tp in self._ready:
            self._ready.remove(tp)

    def _state(self, topic: object, partition: object) -> _Partition:
        self._check_open()
        if type(topic) is not str or type(partition) is not int:
            raise TypeError(f"a partition is a (str, int) pair, got {(topic, partition)!r}")
        state = self._partitions.get((topic, partition))
        if state is None:
            raise ValueError(f"partition {topic}-{partition} is not assigned to this consumer "
                             f"(assigned: {sorted(self._partitions)})")
        return state

    # ------------------------------------------------------------ polling

    def poll(self, max_records: int | None = None, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Records from the assigned partitions, at most ``max_records`` (None: ``max_poll_records``), waiting up
        to ``timeout_ms`` for some (0: without waiting, what the transport answers at once). A subscribed consumer
        also runs its group membership here: joining and rebalancing (the listener is called from here), heartbeats,
        and auto commits; GroupMemberError when the group refuses it for good."""
        self._check_open()
        limit = self.max_poll_records if max_records is None else _check_int("max_records", max_records, 1)
        _check_int("timeout_ms", timeout_ms, 0)
        deadline = self.transport.now_ms() + timeout_ms
        while True:
            group = self._subscribed()
            if group is not None:
                group.poll()
                self._maybe_auto_commit()
            records = self._poll_once(limit)
            if records or self.transport.now_ms() >= deadline:
                return records
            self.transport.tick()

    def _maybe_auto_commit(self) -> None:
        """Every ``auto_commit_interval_ms``: commit the positions without waiting (Kafka's
        ``maybeAutoCommitOffsetsAsync``); a failure is logged, the next interval commits again."""
        now = self.transport.now_ms()
        if not self.enable_auto_commit or now < self._next_auto_commit_ms:
            return
        self._next_auto_commit_ms = now + self.auto_commit_interval_ms
        request = self._commit_request(None, next(self._request_ids))
        if request is None:
            return

        def answered(_: Request, response: Response, __: int) -> None:
            failed = [r for r in getattr(response, "results", ()) if r.error_code != ErrorCode.NONE]
            if failed or not isinstance(response, OffsetCommitResponse):
                log.warning("%s: auto commit for group %s failed: %s", self.client_id, self.group_id,
                            ", ".join(f"{r.topic}-{r.partition}: {_name(r.error_code)}" for r in failed)
                            or type(response).__name__)
                self._on_commit_errors([r.error_code for r in failed])

        self._send(request, answered, _nothing)

    def _commit_request(self, offsets: Mapping[TopicPartition, int] | None,
                        request_id: int) -> OffsetCommitRequest | None:
        assert self.group_id is not None
        chosen = offsets if offsets is not None else self._positions()
        if not chosen:
            return None
        group = self._subscribed()
        # A member's commit carries its generation, member id and instance id (-1 and "" while it has none).
        member = group.metadata() if group is not None else ConsumerGroupMetadata(self.group_id)
        entries = tuple(OffsetEntry(topic, partition, offset) for (topic, partition), offset in chosen.items())
        return OffsetCommitRequest(self.group_id, entries, member.generation_id, member.member_id, request_id,
                                   member.group_instance_id)

    def _on_commit_errors(self, codes: Iterable[int]) -> None:
        """A commit refused for the member's generation: the generation is gone (Kafka's ``resetGeneration``)."""
        group = self._subscribed()
        if group is not None:
            group.commit_refused(codes)

    def _commit_positions_sync(self, partitions: set[TopicPartition] | None = None) -> None:
        """Commit the positions (of ``partitions``; None: every assigned one) now: before a revocation, on close."""
        chosen = self._positions(partitions)
        if chosen:
            self.commit(chosen)

    def _positions(self, partitions: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The positions of the assigned partitions that have one (of ``partitions``; None: every one)."""
        return {tp: state.position for tp, state in self._partitions.items()
                if state.position is not None and (partitions is None or tp in partitions)}

    def _poll_once(self, limit: int) -> list[ConsumerRecord]:
        """Rounds while answers arrive at once and move positions without giving records (an aborted or
        compacted stretch, markers), so an answer of skips alone does not end the poll empty-handed."""
        records: list[ConsumerRecord] = []
        for _ in range(_MAX_ROUNDS):
            before = self._progress()
            self._round(positions=True, fetch=True)
            self._drain(records, limit)
            if records or self._progress() == before:
                break
        return records

    def _progress(self) -> list[tuple[int | None, str]]:
        """What a round that moves things forward changes: positions, and how missing ones are looked up."""
        return [(state.position, state.reset) for state in self._partitions.values()]

    def _drain(self, records: list[ConsumerRecord], limit: int) -> None:
        """Move fetched steps to ``records`` in arrival order, partition by partition, as Kafka's FetchCollector:
        positions advance with them; the steps after the ``limit``-th record wait for the next poll."""
        held: list[TopicPartition] = []
        while self._ready and len(records) < limit:
            tp = self._ready[0]
            state = self._partitions[tp]
            if state.paused:  # kept, in arrival order, for after resume (Kafka's pausedCompletedFetches)
                held.append(self._ready.popleft())
                continue
            steps = state.steps
            while state.next_step < len(steps) and len(records) < limit:
                position, record = steps[state.next_step]
                state.next_step += 1
                if record is not None:
                    records.append(record)
                assert state.position is not None  # steps are kept only while the position they start at holds
                state.position = max(state.position, position)
            if state.next_step == len(steps):
                state.steps, state.next_step = [], 0
                self._ready.popleft()
        self._ready.extendleft(reversed(held))

    # ------------------------------------------------------------ offsets of the group

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) for the group; None: the positions of the
        assigned partitions that have one. A subscribed consumer's commit carries its generation, member id and
        instance id. Blocks until the group coordinator has them; retriable errors are retried, others raise
        :class:`CommitFailedError` naming the group and the partition (for a member whose generation is gone: the
        group rebalanced, and the member rejoins at its next poll)."""
        group = self._group_of("commit")
        if offsets is None:
            chosen = self._positions()
        else:
            if not isinstance(offsets, Mapping):
                raise TypeError(f"offsets must map (topic, partition) to an offset, got {type(offsets).__name__}")
            chosen = {}
            for tp, offset in offsets.items():
                (topic, partition), = _partition_list("offsets", [tp])
                chosen[(topic, partition)] = _check_int(f"the offset of {topic}-{partition}", offset, 0)
        if not chosen:
            return

        def accept(response: Response) -> None:
            if not isinstance(response, OffsetCommitResponse):
                raise ConsumerError(f"group {group}: OffsetCommit answered with a {type(response).__name__}")
            answered = {(r.topic, r.partition): r.error_code for r in response.results}
            for (topic, partition), offset in chosen.items():
                code = answered.get((topic, partition))
                if code == ErrorCode.NONE:
                    continue
                if code is None or code in RETRIABLE_ERRORS:
                    raise _Retry(f"group {group} partition {topic}-{partition}: {_name(code)}")
                self._on_commit_errors([code])
                why = " (the group rebalanced: the partition may belong to another member now)" if code in (
                    ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS,
                    ErrorCode.FENCED_INSTANCE_ID) and self._subscribed() is not None else ""
                raise CommitFailedError(f"committing offset {offset} for group {group} partition {topic}-{partition} "
                                        f"failed: {_name(code)}{why}")

        def build(request_id: int) -> OffsetCommitRequest:
            request = self._commit_request(chosen, request_id)
            assert request is not None
            return request

        self._call(build, accept, f"committing offsets for group {group}")

    def committed(self, partitions: Iterable[TopicPartition],
                  require_stable: bool = True) -> dict[TopicPartition, int | None]:
        """The group's committed offsets for ``partitions`` (None where it has none). ``require_stable``: wait while
        a transaction's offset commit for a partition is pending (UNSTABLE_OFFSET_COMMIT is retried)."""
        group = self._group_of("committed")
        wanted = _partition_list("partitions", partitions)
        bool_setting("require_stable", require_stable)

        def accept(response: Response) -> dict[TopicPartition, int | None]:
            return _committed_offsets(group, wanted, response)

        return self._call(lambda request_id: OffsetFetchRequest(group, tuple(wanted), require_stable, request_id),
                          accept, f"the committed offsets of group {group}")

    def _group_of(self, call: str) -> str:
        self._check_open()
        if self.group_id is None:
            raise ConsumerError(f"{call}() needs a group_id: consumer {self.client_id} has none")
        return self.group_id

    # ------------------------------------------------------------ closing

    def close(self) -> None:
        """Leave the group (a subscribed consumer: auto commit first, revoke, LeaveGroup unless static), drop what
        is in flight and fetched; every later call raises :class:`ConsumerClosedError`."""
        if self._closed:
            return
        try:
            if self._group is not None:
                self._group.close()
        finally:
            self._group = None
            self._closed = True
            self.transport.disconnect(self.client_id)
            if self._owns_transport:
                self.transport.close()  # type: ignore[attr-defined]  # a TcpTransport
            self._inflight.clear()
            self._answers.clear()
            self._partitions.clear()
            self._ready.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError(f"consumer {self.client_id} is closed")

    # ------------------------------------------------------------ one round

    def _round(self, positions: bool = False, fetch: bool = False) -> None:
        """Handle the answers that arrived, give up requests unanswered for ``request_timeout_ms``; ``positions``:
        ask for missing positions, ``fetch``: fetch; then take the answers a direct transport gave at once. Raises
        the first error found for what the round was for, once every answer is handled (none is lost)."""
        self._receive()
        self._expire()
        group = self._subscribed()
        if group is not None:
            group.drive()
        if positions or fetch:
            if positions:
                self._request_positions()
            if fetch:
                self._send_fetch()
            self._receive()
        for wanted, errors in ((positions, self._position_errors), (fetch, self._fetch_errors)):
            if wanted and errors:
                error = errors[0]
                errors.clear()
                raise error

    def _receive(self) -> None:
        now = self.transport.now_ms()
        for request, response in self.transport.poll(self.client_id):
            pending = self._inflight.get(request.request_id)
            if pending is None or pending.request is not request:
                continue  # an answer to a request given up, or a second copy of one already handled
            del self._inflight[request.request_id]
            pending.on_answer(request, response, now)

    def _expire(self) -> None:
        """A request unanswered for ``request_timeout_ms`` breaks the connection, as in Kafka's NetworkClient:
        everything in flight is lost and asked again (a late answer to it can no longer arrive)."""
        now = self.transport.now_ms()
        broke = connection_broke(self.transport, self.client_id)
        if broke or any(now - pending.sent_ms >= self.request_timeout_ms for pending in self._inflight.values()):
            log.info("%s: %s; reconnecting", self.client_id, "the connection broke" if broke else
                     f"no answer within request_timeout_ms={self.request_timeout_ms}")
            self.transport.disconnect(self.client_id)
            lost = list(self._inflight.values())
            self._inflight.clear()
            for pending in lost:
                pending.on_lost()

    def _send(self, request: Request, on_answer: Callable[[Request, Response, int], None],
              on_lost: Callable[[], None]) -> None:
        self._inflight[request.request_id] = _Pending(request, self.transport.now_ms(), on_answer, on_lost)
        try:
            self.transport.send(self.client_id, request)
        except BaseException:  # a broker used directly raised: nothing is in flight
            del self._inflight[request.request_id]
            on_lost()
            raise

    def _block(self, done: Callable[[], bool], what: str, deadline: int, positions: bool = False) -> None:
        """Run rounds, letting time pass, until ``done()``; ConsumerTimeoutError at ``deadline``."""
        while True:
            self._round(positions=positions)
            if done():
                return
            if self.transport.now_ms() >= deadline:
                raise ConsumerTimeoutError(f"{what}: not done within default_api_timeout_ms="
                                           f"{self.default_api_timeout_ms}")
            self.transport.tick()

    def _call(self, build: Callable[[int], Request], accept: Callable[[Response], Any], what: str) -> Any:
        """A blocking request: sent again when its answer is lost or says to retry (after ``retry_backoff_ms``),
        until ``accept`` takes an answer or ``default_api_timeout_ms`` passes."""
        self._check_open()
        deadline = self.transport.now_ms() + self.default_api_timeout_ms
        why = "no answer"
        while True:
            request = build(next(self._request_ids))
            self._send(request, self._keep_answer, _nothing)
            request_id = request.request_id

            def answered_or_lost(request_id: int = request_id) -> bool:
                return request_id in self._answers or request_id not in self._inflight

            self._block(answered_or_lost, what, deadline)
            response = self._answers.pop(request_id, None)
            if response is not None:
                try:
                    return accept(response)
                except _Retry as retry:
                    why = str(retry)
                    retry_at = min(self.transport.now_ms() + self.retry_backoff_ms, deadline)
                    while self.transport.now_ms() < retry_at:
                        self.transport.tick()
                        self._round()
            if self.transport.now_ms() >= deadline:
                raise ConsumerTimeoutError(f"{what}: not done within default_api_timeout_ms="
                                           f"{self.default_api_timeout_ms} (last: {why})")

    def _keep_answer(self, request: Request, response: Response, now: int) -> None:
        self._answers[request.request_id] = response

    # ------------------------------------------------------------ finding positions

    def _request_positions(self) -> None:
        """Ask for the missing positions: the group's committed offsets first, then ListOffsets per policy."""
        now = self.transport.now_ms()
        waiting = [(tp, state) for tp, state in self._partitions.items()
                   if state.position is None and state.resetting is None and now >= state.not_before]
        for _, state in waiting:
            if state.reset == _COMMITTED and self.group_id is None:
                state.reset = self.auto_offset_reset
        group = self.group_id
        committed = [(tp, state) for tp, state in waiting if state.reset == _COMMITTED]
        if committed and group is not None:
            # KIP-447: a read_committed consumer waits for a transaction's pending offsets (UNSTABLE_OFFSET_COMMIT).
            self._ask(committed, lambda request_id, tps: OffsetFetchRequest(group, tps, self.read_committed,
                                                                             request_id), self._on_committed)
        for reset, timestamp in _TIMESTAMPS.items():
            chosen = [(tp, state) for tp, state in waiting if state.reset == reset]
            if chosen:
                self._ask(chosen, functools.partial(self._list_offsets, timestamp), self._on_listed)
        for (topic, partition), state in waiting:
            if state.reset == "none":
                self._position_errors.append(NoOffsetForPartitionError(
                    f"partition {topic}-{partition} has no position and no committed offset"
                    f"{'' if group is None else f' in group {group}'}, and auto_offset_reset is 'none': seek() it "
                    "first"))

    def _list_offsets(self, timestamp: int, request_id: int, tps: tuple[TopicPartition, ...]) -> ListOffsetsRequest:
        return ListOffsetsRequest(tuple((topic, partition, timestamp) for topic, partition in tps),
                                  _ISOLATION_LEVELS[self.isolation_level], request_id)

    def _ask(self, chosen: list[tuple[TopicPartition, _Partition]],
             build: Callable[[int, tuple[TopicPartition, ...]], Request],
             handle: Callable[[dict[TopicPartition, int], Response, int], None]) -> None:
        """Send the request ``build`` makes for the missing positions of ``chosen``; ``handle`` gets its answer with
        the partitions' epochs when it was sent (an answer applies only to an unchanged partition)."""
        request_id = next(self._request_ids)
        for _, state in chosen:
            state.resetting = request_id
        epochs = {tp: state.epoch for tp, state in chosen}
        self._send(build(request_id, tuple(epochs)), lambda _, response, now: handle(epochs, response, now),
                   lambda: self._unmark_resetting(epochs, request_id))

    def _unmark_resetting(self, epochs: dict[TopicPartition, int], request_id: int) -> None:
        for tp in epochs:
            state = self._partitions.get(tp)
            if state is not None and state.resetting == request_id:
                state.resetting = None

    def _resetting(self, tp: TopicPartition, epoch: int) -> _Partition | None:
        """The partition's state if an answer about its missing position still applies (not reassigned, sought or
        reset since it was asked), its request marked answered."""
        state = self._partitions.get(tp)
        if state is None or state.epoch != epoch or state.position is not None:
            return None
        state.resetting = None
        return state

    def _on_committed(self, epochs: dict[TopicPartition, int], response: Response, now: int) -> None:
        if not isinstance(response, OffsetFetchResponse):
            self._position_errors.append(ConsumerError(f"OffsetFetch answered with a {type(response).__name__}"))
            return
        answered = {(o.topic, o.partition): o for o in response.offsets}
        for tp, epoch in epochs.items():
            state = self._resetting(tp, epoch)
            if state is None:
                continue
            found = answered.get(tp)
            code = response.error_code or (ErrorCode.UNKNOWN_SERVER_ERROR if found is None else found.error_code)
            if code == ErrorCode.NONE:
                assert found is not None
                if found.offset >= 0:
                    state.position = found.offset
                else:
                    state.reset = self.auto_offset_reset  # the group has none: the policy decides
            elif code in RETRIABLE_ERRORS:
                state.not_before = now + self.retry_backoff_ms
            else:
                self._position_errors.append(ConsumerError(f"the committed offset of group {self.group_id} partition "
                                                  f"{tp[0]}-{tp[1]}: {_name(code)}"))

    def _on_listed(self, epochs: dict[TopicPartition, int], response: Response, now: int) -> None:
        if not isinstance(response, ListOffsetsResponse):
            self._position_errors.append(ConsumerError(f"ListOffsets answered with a {type(response).__name__}"))
            return
        answered = {(r.topic, r.partition): r for r in response.results}
        for tp, epoch in epochs.items():
            state = self._resetting(tp, epoch)
            if state is None:
                continue
            found = answered.get(tp)
            if found is not None and found.error_code == ErrorCode.NONE and found.offset >= 0:
                state.position = found.offset
                state.reset = _COMMITTED
            elif found is None or found.error_code in RETRIABLE_ERRORS or found.error_code == ErrorCode.NONE:
                state.not_before = now + self.retry_backoff_ms
            else:
                self._position_errors.append(ConsumerError(f"the {state.reset} offset of partition {tp[0]}-{tp[1]}: "
                                                  f"{_name(found.error_code)}"))

    # ------------------------------------------------------------ fetching

    def _send_fetch(self) -> None:
        """One fetch for every partition with a position, nothing fetched left to return and none in flight."""
        now = self.transport.now_ms()
        wanted = [(tp, state) for tp, state in self._partitions.items()
                  if state.position is not None and state.fetching is None and not state.steps
                  and now >= state.not_before and not state.paused]
        if not wanted:
            return
        request_id = next(self._request_ids)
        partitions = []
        for (topic, partition), state in wanted:
            assert state.position is not None
            state.fetching = request_id
            partitions.append(FetchPartition(topic, partition, state.position, self.max_partition_fetch_bytes))
        request = FetchRequest(tuple(partitions), _ISOLATION_LEVELS[self.isolation_level], self.fetch_max_bytes,
                               request_id=request_id)
        self._send(request, self._on_fetch, lambda: self._fetch_done(request))

    def _fetch_done(self, request: FetchRequest) -> None:
        for wanted in request.partitions:
            state = self._partitions.get((wanted.topic, wanted.partition))
            if state is not None and state.fetching == request.request_id:
                state.fetching = None

    def _on_fetch(self, request: Request, response: Response, now: int) -> None:
        assert isinstance(request, FetchRequest)
        self._fetch_done(request)
        if not isinstance(response, FetchResponse) or response.error_code != ErrorCode.NONE:
            code = getattr(response, "error_code", None)
            self._fetch_errors.append(ConsumerError(f"fetch answered {type(response).__name__}"
                                              f"{'' if code is None else f' with {_name(code)}'}"))
            return
        asked = {(p.topic, p.partition): p.fetch_offset for p in request.partitions}
        for answer in response.partitions:
            tp = (answer.topic, answer.partition)
            state = self._partitions.get(tp)
            if state is None or tp not in asked or state.position != asked[tp] or state.steps:
                continue  # reassigned or sought since, or an answer for a partition not asked: stale
            self._on_fetched(tp, state, answer, asked[tp], now)

    def _on_fetched(self, tp: TopicPartition, state: _Partition, answer: FetchedPartition, offset: int,
                    now: int) -> None:
        code, message = answer.error_code, answer.error_message
        topic, partition = tp
        batches: tuple[StoredBatch, ...] = ()
        if code == ErrorCode.NONE:
            try:  # decoded here, not by the broker or the transport (Kafka's consumer checks each batch's CRC)
                batches = decode_stored_batches(topic, partition, answer.records)
            except CorruptRecordError as error:
                code, message = ErrorCode.CORRUPT_MESSAGE, f"{topic}-{partition}: {error}"
        if code == ErrorCode.NONE:
            steps = fetched_steps(answer, batches, offset, self.read_committed)
            if steps:
                state.steps, state.next_step = steps, 0
                self._ready.append(tp)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            where = (f"fetch position {offset} is out of range for partition {topic}-{partition} (log start "
                     f"{answer.log_start_offset}, end {answer.high_watermark})")
            if self.auto_offset_reset == "none":
                self._fetch_errors.append(OffsetOutOfRangeError(f"{where}, and auto_offset_reset is 'none'"))
                state.not_before = now + self.retry_backoff_ms
            else:
                log.info("%s: %s; resetting to %s", self.client_id, where, self.auto_offset_reset)
                self._set_position(state, tp, None)
                state.reset = self.auto_offset_reset
        elif code in RETRIABLE_ERRORS:
            state.not_before = now + self.retry_backoff_ms
        else:
            why = f" ({message})" if message else ""
            self._fetch_errors.append(ConsumerError(f"fetching partition {topic}-{partition} at offset {offset} "
                                                    f"failed: {_name(code)}{why}"))
            state.not_before = now + self.retry_backoff_ms


def _committed_offsets(group: str, wanted: list[TopicPartition],
                       response: Response) -> dict[TopicPartition, int | None]:
    """An OffsetFetch answer as ``committed`` returns it; _Retry for a retriable error (a pending transactional
    offset: UNSTABLE_OFFSET_COMMIT), ConsumerError for others."""
    if not isinstance(response, OffsetFetchResponse):
        raise ConsumerError(f"group {group}: OffsetFetch answered with a {type(response).__name__}")
    if response.error_code != ErrorCode.NONE:
        if response.error_code in RETRIABLE_ERRORS:
            raise _Retry(f"group {group}: {_name(response.error_code)}")
        raise ConsumerError(f"the committed offsets of group {group}: {_name(response.error_code)}")
    answered = {(o.topic, o.partition): o for o in response.offsets}
    result: dict[TopicPartition, int | None] = {}
    for topic, partition in wanted:
        found = answered.get((topic, partition))
        if found is None:
            result[(topic, partition)] = None
            continue
        if found.error_code in RETRIABLE_ERRORS:
            raise _Retry(f"group {group} partition {topic}-{partition}: {_name(found.error_code)}")
        if found.error_code != ErrorCode.NONE:
            raise ConsumerError(f"the committed offset of group {group} partition {topic}-{partition}: "
                                f"{_name(found.error_code)}")
        result[(topic, partition)] = found.offset if found.offset >= 0 else None
    return result


def _nothing() -> None:
    pass


def _check_int(name: str, value: object, low: int) -> int:
    return int_at_least(name, value, low, _INT64_MAX)  # Kafka's offsets, timeouts and counts are int64


_INT64_MAX = 2**63 - 1


def _partition_list(name: str, partitions: object) -> list[TopicPartition]:
    """``partitions`` as a list of distinct ``(topic, partition)`` pairs, in order; TypeError/ValueError naming
    the first bad one."""
    if isinstance(partitions, str | bytes | Mapping) or not isinstance(partitions, Iterable):
        raise TypeError(f"{name} must be a list of (topic, partition) pairs, got {partitions!r:.80}")
    chosen: dict[TopicPartition, None] = {}
    for item in partitions:
        if not isinstance(item, tuple) or len(item) != 2 or type(item[0]) is not str or type(item[1]) is not int:
            raise TypeError(f"{name}: a partition is a (str, int) pair, got {item!r:.80}")
        if not item[0] or item[1] < 0:
            raise ValueError(f"{name}: no such partition {item!r:.80} (empty topic or negative number)")
        chosen[(item[0], item[1])] = None
    return list(chosen)


__all__ = ["CommitFailedError", "Consumer", "ConsumerClosedError", "ConsumerError", "ConsumerGroupMetadata",
           "ConsumerRebalanceListener", "ConsumerRecord", "ConsumerTimeoutError", "IllegalStateError",
           "NoOffsetForPartitionError", "OffsetOutOfRangeError"]
