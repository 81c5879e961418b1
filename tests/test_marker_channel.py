"""Markers through the partitions' leaders (ClusterMarkerWriter, Kafka's TransactionMarkerChannelManager): local
partitions through the broker's own path, the others to their leader over a channel, answered REQUEST_TIMED_OUT
while in flight and recorded for the coordinator's next round, retried to a new leader after a lost connection or
NOT_LEADER_OR_FOLLOWER; and a transaction finished that way by the real coordinator. The channel and the metadata
are fakes."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from idemcore.broker.coordinator import TransactionCoordinator, partition_for
from idemcore.broker.coordinator.marker_channel import ClusterMarkerWriter
from idemcore.net.messages import (
    PartitionResponse,
    Pending,
    TxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.net.replication import BrokerEndpoint
from idemcore.protocol.codes import ErrorCode

E = ErrorCode
B1, B2, B3 = (BrokerEndpoint(n, "127.0.0.1", 9000 + n) for n in (1, 2, 3))


def _answer(request: WriteTxnMarkersRequest, code: int = E.NONE) -> WriteTxnMarkersResponse:
    (marker,) = request.markers
    return WriteTxnMarkersResponse(request.request_id, (TxnMarkerResult(marker.producer_id, tuple(
        PartitionResponse(topic, partition, code, 0 if code == E.NONE else -1)
        for topic, partition in marker.partitions)),))


class Metadata:
    def __init__(self, leaders: dict[tuple[str, int], BrokerEndpoint | None]) -> None:
        self.leaders = leaders

    def leader(self, topic: str, partition: int) -> BrokerEndpoint | None:
        return self.leaders.get((topic, partition))


class Channel:
    """A fake BrokerChannel: each call waits until the test answers it (``replies``: a code, or an exception)."""

    def __init__(self, endpoint: BrokerEndpoint, log: list[tuple[int, WriteTxnMarkersRequest]]) -> None:
        self.endpoint = endpoint
        self.log = log
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = False

    async def call(self, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        self.log.append((self.endpoint.broker_id, request))
        reply = await self.replies.get()
        if isinstance(reply, BaseException):
            raise reply
        return _answer(request, reply)

    async def close(self) -> None:
        self.closed = True


class Cluster:
    """Broker 1's view: it leads ``local``; the channels it opened; what its own path was asked."""

    def __init__(self, leaders: dict[tuple[str, int], BrokerEndpoint | None], local: set[tuple[str, int]]) -> None:
        self.metadata = Metadata(leaders)
        self.local = local
        self.sent: list[tuple[int, WriteTxnMarkersRequest]] = []
        self.channels: dict[int, Channel] = {}
        self.handled: list[WriteTxnMarkersRequest] = []
        self.hold_local: list[Pending] | None = None
        self.answered = 0
        self.writer = ClusterMarkerWriter(1, self.handle, lambda t, p: (t, p) in self.local, self.metadata,
                                          self.channel, loop=asyncio.get_running_loop, on_answer=self.on_answer)

    def handle(self, request: Any) -> WriteTxnMarkersResponse | Pending:
        self.handled.append(request)
        if self.hold_local is not None:
            pending = Pending()
            self.hold_local.append(pending)
            return pending
        return _answer(request)

    def channel(self, endpoint: BrokerEndpoint) -> Channel:
        self.channels[endpoint.broker_id] = Channel(endpoint, self.sent)
        return self.channels[endpoint.broker_id]

    def on_answer(self) -> None:
        self.answered += 1


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_local_partitions_go_through_the_broker_and_the_others_to_their_leaders() -> None:
    async def run() -> None:
        cluster = Cluster({("a", 0): B1, ("a", 1): B2, ("b", 0): B2, ("b", 1): B3}, {("a", 0)})
        writer = cluster.writer
        partitions = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
        first = writer.write_markers(7, 2, 5, True, partitions)
        assert first == {("a", 0): E.NONE, ("a", 1): E.REQUEST_TIMED_OUT, ("b", 0): E.REQUEST_TIMED_OUT,
                         ("b", 1): E.REQUEST_TIMED_OUT}
        assert [m.partitions for r in cluster.handled for m in r.markers] == [(("a", 0),)]
        await _settle()
        # One request per leader, with the marker's fields as given.
        assert sorted((b, r.markers[0].partitions) for b, r in cluster.sent) == [
            (2, (("a", 1), ("b", 0))), (3, (("b", 1),))]
        assert all((m.producer_id, m.producer_epoch, m.coordinator_epoch, m.committed) == (7, 2, 5, True)
                   for _, r in cluster.sent for m in r.markers)
        assert writer.in_flight == 3
        # Still in flight: answered REQUEST_TIMED_OUT again, nothing sent twice.
        again = writer.write_markers(7, 2, 5, True, [("a", 1), ("b", 0), ("b", 1)])
        assert set(again.values()) == {E.REQUEST_TIMED_OUT} and len(cluster.sent) == 2
        cluster.channels[2].replies.put_nowait(E.NONE)
        cluster.channels[3].replies.put_nowait(E.INVALID_PRODUCER_EPOCH)
        await _settle()
        assert cluster.answered == 2 and writer.in_flight == 0
        recorded = writer.write_markers(7, 2, 5, True, [("a", 1), ("b", 0), ("b", 1)])
        assert recorded == {("a", 1): E.NONE, ("b", 0): E.NONE, ("b", 1): E.INVALID_PRODUCER_EPOCH}
        assert len(cluster.sent) == 2  # the recorded answers, not new sends
        await writer.close()
        assert cluster.channels[2].closed and cluster.channels[3].closed
    asyncio.run(run())


def test_a_lost_connection_or_a_moved_leader_is_retried_to_the_new_leader() -> None:
    async def run() -> None:
        cluster = Cluster({("a", 0): B2, ("a", 1): B2}, set())
        writer = cluster.writer
        writer.write_markers(7, 0, 1, False, [("a", 0), ("a", 1)])
        await _settle()
        cluster.channels[2].replies.put_nowait(ConnectionError("reset by peer"))
        await _settle()
        assert writer.write_markers(7, 0, 1, False, [("a", 0), ("a", 1)]) == dict.fromkeys(
            [("a", 0), ("a", 1)], E.NOT_LEADER_OR_FOLLOWER)
        # Broker 3 leads now (a-1 has no leader for the moment).
        cluster.metadata.leaders = {("a", 0): B3, ("a", 1): None}
        answers = writer.write_markers(7, 0, 1, False, [("a", 0), ("a", 1)])
        assert answers == {("a", 0): E.REQUEST_TIMED_OUT, ("a", 1): E.NOT_LEADER_OR_FOLLOWER}
        await _settle()
        assert [(b, r.markers[0].partitions) for b, r in cluster.sent] == [
            (2, (("a", 0), ("a", 1))), (3, (("a", 0),))]
        cluster.channels[3].replies.put_nowait(E.NOT_LEADER_OR_FOLLOWER)  # moved again before it was written
        await _settle()
        cluster.metadata.leaders = {("a", 0): B2, ("a", 1): B2}
        assert writer.write_markers(7, 0, 1, False, [("a", 0)]) == {("a", 0): E.NOT_LEADER_OR_FOLLOWER}
        writer.write_markers(7, 0, 1, False, [("a", 0), ("a", 1)])
        await _settle()
        assert cluster.sent[-1][0] == 2 and cluster.sent[-1][1].markers[0].partitions == (("a", 0), ("a", 1))
        cluster.channels[2].replies.put_nowait(TimeoutError("no answer in 30000 ms"))
        await _settle()
        assert set(writer.write_markers(7, 0, 1, False, [("a", 0), ("a", 1)]).values()) == {E.REQUEST_TIMED_OUT}
        await writer.close()
    asyncio.run(run())


def test_a_local_marker_held_for_replication_is_in_flight_until_its_answer() -> None:
    async def run() -> None:
        cluster = Cluster({("a", 0): B1}, {("a", 0)})
        cluster.hold_local = []
        writer = cluster.writer
        assert writer.write_markers(9, 0, 2, True, [("a", 0)]) == {("a", 0): E.REQUEST_TIMED_OUT}
        assert writer.write_markers(9, 0, 2, True, [("a", 0)]) == {("a", 0): E.REQUEST_TIMED_OUT}
        assert len(cluster.handled) == 1
        cluster.hold_local[0].complete(_answer(cluster.handled[0]))
        assert cluster.answered == 1
        assert writer.write_markers(9, 0, 2, True, [("a", 0)]) == {("a", 0): E.NONE}
    asyncio.run(run())


class Log:
    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []

    def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        self.records.append((partition, key, value))
        return E.NONE


def test_the_coordinator_finishes_a_transaction_once_the_leaders_answer() -> None:
    async def run() -> None:
        cluster = Cluster({("a", 0): B2, ("a", 1): B1}, {("a", 1)})
        ids = itertools.count(500)
        coordinator = TransactionCoordinator(Log(), cluster.writer, lambda: next(ids), lambda: 1_000)

        def retry() -> None:  # what the broker schedules when answers arrive
            coordinator.retry_pending_markers()
        cluster.writer.on_answer = retry
        coordinator.load_partition(partition_for("t1"), [], 4)
        init = coordinator.init_producer_id("t1", 60_000)
        coordinator.add_partitions_to_txn("t1", init.producer_id, init.producer_epoch, [("a", 0), ("a", 1)])
        assert coordinator.end_txn("t1", init.producer_id, init.producer_epoch, True) is E.NONE
        assert coordinator.pending_completions == ("t1",)  # a-0's marker is on its way to broker 2
        assert coordinator.metadata("t1").topic_partitions == {("a", 0)}  # type: ignore[union-attr]
        await _settle()
        cluster.channels[2].replies.put_nowait(E.NONE)
        await _settle()
        assert coordinator.pending_completions == ()
        assert coordinator.metadata("t1").state.kafka_name == "CompleteCommit"  # type: ignore[union-attr]
        assert [r.markers[0].coordinator_epoch for _, r in cluster.sent] == [4]
        await cluster.writer.close()
    asyncio.run(run())
