"""Followers fetching from their leaders (Kafka's ``ReplicaFetcherManager`` and ``ReplicaFetcherThread`` over
``AbstractFetcherThread``), as asyncio tasks on the broker's loop: one fetcher per leader broker, fetching every
partition this broker follows there in one Fetch request with ``replica_id`` = this broker's id.

Each round asks, per partition, from its log end, with the leader epoch the controller gave this broker (a leader
that moved on answers FENCED_LEADER_EPOCH) and the epoch of its last batch (Fetch v12+). The leader answers with
the batches as it stored them, which are appended unchanged and applied to the producer state
(:meth:`ReplicaManager.append_as_follower`), or with where this log left its history (DivergingEpoch), where it is
truncated (KIP-101, KIP-279) before the next round. A partition whose leader answers an error other than an empty
answer waits ``replica.fetch.backoff.ms`` before it is asked again, as does the whole fetcher after a connection
failure; the controller's next LeaderAndIsr moves it to another fetcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from idemcore.broker.cluster_config import FetcherSettings
from idemcore.broker.partition import Partition
from idemcore.broker.replica_manager import ReplicaManager
from idemcore.net.messages import FetchedPartition, FetchPartition, FetchRequest, FetchResponse
from idemcore.net.replication import BrokerEndpoint
from idemcore.protocol.codes import ErrorCode, error_name

log = logging.getLogger(__name__)

Key = tuple[str, int]


class Channel(Protocol):
    """A connection to the leader (:class:`~idemcore.net.broker_channel.BrokerChannel`): one request at a time."""

    async def call(self, request: Any) -> Any: ...

    async def close(self) -> None: ...


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader (``channel_factory`` connects to a broker); ``on_progress`` is
    called with a partition after each round that changed it (appended, truncated or moved its high watermark)."""

    def __init__(self, settings: FetcherSettings, replicas: ReplicaManager,
                 channel_factory: Callable[[BrokerEndpoint], Channel],
                 on_progress: Callable[[Partition], None] | None = None) -> None:
        self.settings = settings
        self.replicas = replicas
        self._channel_factory = channel_factory
        self.on_progress = on_progress
        self._fetchers: dict[int, ReplicaFetcher] = {}

    def add(self, partitions: list[Partition], leaders: dict[int, BrokerEndpoint]) -> None:
        """Fetch ``partitions`` from their leaders (each removed from any fetcher it was in first); a partition
        whose leader's endpoint is not known waits for the next LeaderAndIsr."""
        self.remove(partitions)
        for partition in partitions:
            endpoint = leaders.get(partition.leader_id)
            if endpoint is None:
                log.warning("%s: leader %d has no known endpoint; not fetching", partition.name, partition.leader_id)
                continue
            fetcher = self._fetchers.get(endpoint.broker_id)
            if fetcher is not None and (fetcher.leader.host, fetcher.leader.port) != (endpoint.host, endpoint.port):
                fetcher.stop()  # the leader came back on another address
                del self._fetchers[endpoint.broker_id]
                fetcher = None
            if fetcher is None:
                fetcher = ReplicaFetcher(endpoint, self)
                self._fetchers[endpoint.broker_id] = fetcher
            fetcher.add(partition)

    def remove(self, partitions: list[Partition]) -> None:
        for partition in partitions:
            for fetcher in self._fetchers.values():
                fetcher.remove(partition)
        for broker_id in [b for b, f in self._fetchers.items() if f.idle]:
            self._fetchers.pop(broker_id).stop()

    async def close(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            await fetcher.wait_stopped()


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader (module docstring)."""

    def __init__(self, leader: BrokerEndpoint, manager: ReplicaFetcherManager) -> None:
        self.leader = leader
        self.manager = manager
        self.partitions: dict[Key, Partition] = {}
        self._delayed_until: dict[Key, float] = {}
        self._wake = asyncio.Event()
        self._channel = manager._channel_factory(leader)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{leader.broker_id}")

    @property
    def idle(self) -> bool:
        return not self.partitions

    def add(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.partition)] = partition
        self._delayed_until.pop((partition.topic, partition.partition), None)
        self._wake.set()

    def remove(self, partition: Partition) -> None:
        self.partitions.pop((partition.topic, partition.partition), None)

    def stop(self) -> None:
        self._task.cancel()

    async def wait_stopped(self) -> None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        with contextlib.suppress(Exception):
            await self._channel.close()

    async def _run(self) -> None:
        settings = self.manager.settings
        backoff = settings.backoff_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            ready = [p for key, p in self.partitions.items() if self._delayed_until.get(key, 0.0) <= now]
            if not ready:
                self._wake.clear()
                soonest = min(self._delayed_until.values(), default=now + backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.01, soonest - now))
                continue
            asked = {(p.topic, p.partition): (p.leader_epoch, p.log.log_end_offset) for p in ready}
            request = FetchRequest(
                tuple(fetch_partition(p, settings.max_bytes) for p in ready),
                max_bytes=settings.response_max_bytes, min_bytes=settings.min_bytes,
                max_wait_ms=settings.max_wait_ms, replica_id=settings.broker_id)
            try:
                response: FetchResponse = await self._channel.call(request)
            except asyncio.CancelledError:
                raise
            except (ConnectionError, TimeoutError, OSError) as exc:
                log.warning("fetching from broker %d (%s:%d) failed: %s; again in %d ms", self.leader.broker_id,
                            self.leader.host, self.leader.port, exc, settings.backoff_ms)
                await asyncio.sleep(backoff)
                continue
            if response.error_code != ErrorCode.NONE:
                log.warning("broker %d answered the fetch with %s", self.leader.broker_id,
                            error_name(response.error_code))
                await asyncio.sleep(backoff)
                continue
            for answer in response.partitions:
                key = (answer.topic, answer.partition)
                partition = self.partitions.get(key)
                # Answers for a partition that moved or changed since the request are dropped (Kafka compares the
                # fetch state it asked with).
                if partition is None or asked.get(key) != (partition.leader_epoch, partition.log.log_end_offset):
                    continue
                try:
                    self._process(partition, answer, loop.time() + backoff)
                except Exception:  # one partition's failure must not stop the others' replication
                    log.exception("%s: processing the fetched data from broker %d failed", partition.name,
                                  self.leader.broker_id)
                    self._delayed_until[key] = loop.time() + backoff

    def _process(self, partition: Partition, answer: FetchedPartition, retry_at: float) -> None:
        outcome = process_fetched(self.manager.replicas, partition, answer, self.leader.broker_id)
        if outcome.back_off:
            self._delayed_until[(partition.topic, partition.partition)] = retry_at
        if outcome.changed and self.manager.on_progress is not None:
            self.manager.on_progress(partition)


# --- the follower's rules, shared by the fetcher above and the simulation (idemcore/sim/cluster.py) ---------------


class FetchOutcome(NamedTuple):
    #: The partition changed: appended, truncated or moved its high watermark.
    changed: bool
    #: The leader answered an error: ask again only after ``replica.fetch.backoff.ms``.
    back_off: bool


def fetch_partition(partition: Partition, max_bytes: int) -> FetchPartition:
    """What a follower asks of its leader for ``partition`` (Fetch v12+): from its log end, with the leader epoch
    the controller gave it (a leader that moved on answers FENCED_LEADER_EPOCH) and the epoch of its last batch."""
    partition_log = partition.log
    return FetchPartition(partition.topic, partition.partition, partition_log.log_end_offset, max_bytes,
                          current_leader_epoch=partition.leader_epoch,
                          last_fetched_epoch=partition_log.epochs.latest_epoch,
                          log_start_offset=partition_log.log_start_offset)


def process_fetched(replicas: ReplicaManager, partition: Partition, answer: FetchedPartition,
                    leader_id: int) -> FetchOutcome:
    """Apply the leader's answer for one partition (Kafka's ``AbstractFetcherThread.processFetchRequest``):
    batches appended as the leader stored them, a divergence truncated, an out-of-range offset handled, the
    leader's high watermark taken."""
    code = answer.error_code
    changed = False
    if code == ErrorCode.NONE:
        if answer.diverging_epoch is not None:
            changed = truncate_diverging(replicas, partition, *answer.diverging_epoch, leader_id=leader_id)
        elif answer.records:
            changed = replicas.append_as_follower(partition, answer.records) > 0
        before = partition.high_watermark
        partition.follower_high_watermark(answer.high_watermark)
        return FetchOutcome(changed or partition.high_watermark != before, False)
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        out_of_range(replicas, partition, answer, leader_id)
        return FetchOutcome(True, False)
    # NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, ...: the
    # controller's word is on its way; ask again after the backoff.
    log.info("%s: broker %d answered %s; fetching again after the backoff", partition.name, leader_id,
             error_name(code))
    return FetchOutcome(False, True)


def truncate_diverging(replicas: ReplicaManager, partition: Partition, leader_epoch: int, leader_end: int, *,
                       leader_id: int) -> bool:
    """Truncate where this log leaves the leader's history (Kafka's ``getOffsetTruncationState``): to the
    leader's end of that epoch when this log has the epoch too; to this log's end of its own largest epoch
    below when it lacks it (KIP-279: the next round asks again with that epoch)."""
    partition_log = partition.log
    epoch, own_end = partition_log.epochs.end_offset_for(leader_epoch, partition_log.log_end_offset)
    if epoch < 0:
        target = min(leader_end, partition_log.log_end_offset)
    elif epoch != leader_epoch:
        target = min(own_end, partition_log.log_end_offset)
    else:
        target = min(leader_end, own_end, partition_log.log_end_offset)
    log.info("%s: diverges from broker %d at epoch %d end %d; truncating to %d", partition.name, leader_id,
             leader_epoch, leader_end, target)
    return replicas.truncate(partition, target)


def out_of_range(replicas: ReplicaManager, partition: Partition, answer: FetchedPartition, leader_id: int) -> None:
    """Kafka's ``handleOutOfRangeError``: behind the leader's log start, start over there; ahead of the leader's
    log (possible only after an unclean election), go back to the leader's high watermark."""
    partition_log = partition.log
    if answer.log_start_offset >= 0 and partition_log.log_end_offset < answer.log_start_offset:
        log.warning("%s: behind broker %d's log start %d; starting over there", partition.name, leader_id,
                    answer.log_start_offset)
        replicas.start_at(partition, answer.log_start_offset)
    elif answer.high_watermark >= 0:
        log.warning("%s: ahead of broker %d's log; truncating to its high watermark %d", partition.name, leader_id,
                    answer.high_watermark)
        replicas.truncate(partition, answer.high_watermark)
