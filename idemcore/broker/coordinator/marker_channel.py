"""Transaction markers through the partitions' leaders, for a broker in a cluster (Kafka's
``TransactionMarkerChannelManager`` with its ``TransactionMarkerRequestCompletionHandler``).

A partition led here gets its marker through the broker's own request path (a WriteTxnMarkersRequest to
``handle``); a partition led elsewhere gets one from its leader as the metadata cache names it, over an inter-broker
channel (``BrokerChannel``: asyncio), one request per leader. The coordinator is synchronous and the answers come
later, so a marker still in flight is answered REQUEST_TIMED_OUT (a code the coordinator retries) and its real
answer is recorded when it arrives: the coordinator's next round (``retry_pending_markers``, which ``on_answer``
asks for at once) gets it without sending the marker again. NOT_LEADER_OR_FOLLOWER and a lost connection are
answers the coordinator retries too, and each round looks the leader up again, so the marker follows the
partition to its new leader, as Kafka re-enqueues markers whose broker disconnected.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from idemcore.broker.coordinator.collaborators import TopicPartition
from idemcore.net.messages import Pending, Request, Response, TxnMarker, WriteTxnMarkersRequest, WriteTxnMarkersResponse
from idemcore.protocol.codes import ErrorCode

if TYPE_CHECKING:
    from idemcore.net.client_security import ClientSecurity
    from idemcore.net.replication import BrokerEndpoint

log = logging.getLogger(__name__)

#: How many recorded answers are kept for rounds that never come (a completion abandoned or unloaded meanwhile).
MAX_RECORDED_ANSWERS = 100_000

#: ``Broker.handle``.
Handle = Callable[[Request], Response | Pending | None]
#: (producer id, producer epoch, coordinator epoch, committed, topic, partition): one marker on one partition.
MarkerKey = tuple[int, int, int, bool, str, int]


class Channel(Protocol):
    """What is used of ``idemcore.net.broker_channel.BrokerChannel``."""

    async def call(self, request: Any) -> Any: ...

    async def close(self) -> None: ...


class LeaderLookup(Protocol):
    """What is used of the metadata cache: a partition's leader (None while it has none, or is unknown)."""

    def leader(self, topic: str, partition: int) -> BrokerEndpoint | None: ...


def broker_channel(client_id: str, security: ClientSecurity | None = None) -> Callable[[BrokerEndpoint], Channel]:
    """The default channel factory: a ``BrokerChannel`` to the endpoint (authenticating with ``security``)."""
    # The wire's inter-broker client (its own branch until merged).
    from idemcore.net.broker_channel import BrokerChannel  # type: ignore[import-not-found, unused-ignore]

    def make(endpoint: BrokerEndpoint) -> Channel:
        channel: Channel = BrokerChannel(endpoint.host, endpoint.port, client_id, security=security)
        return channel
    return make


class ClusterMarkerWriter:
    """A :class:`~idemcore.broker.coordinator.MarkerWriter` for a broker in a cluster (module docstring).

    ``leads_here(topic, partition)``: whether this broker leads the partition now; ``metadata``: the leaders of the
    others; ``channel_factory(endpoint)``: a channel to a broker; ``loop()``: the event loop remote sends run on
    (None: none runs, and remote partitions are answered REQUEST_TIMED_OUT); ``on_answer()``: called on the loop
    when answers were recorded (the broker asks the coordinator to retry then)."""

    def __init__(self, broker_id: int, handle: Handle, leads_here: Callable[[str, int], bool],
                 metadata: LeaderLookup, channel_factory: Callable[[BrokerEndpoint], Channel], *,
                 loop: Callable[[], asyncio.AbstractEventLoop | None],
                 on_answer: Callable[[], None] | None = None) -> None:
        self.broker_id = broker_id
        self._handle = handle
        self._leads_here = leads_here
        self._metadata = metadata
        self._channel_factory = channel_factory
        self._loop = loop
        self.on_answer = on_answer
        self._in_flight: set[MarkerKey] = set()
        self._answers: dict[MarkerKey, int] = {}
        self._channels: dict[int, tuple[BrokerEndpoint, Channel]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        """Markers sent and not answered yet (one per partition)."""
        return len(self._in_flight)

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]:
        answers: dict[TopicPartition, int] = {}
        local: list[TopicPartition] = []
        remote: dict[int, tuple[BrokerEndpoint, list[TopicPartition]]] = {}
        for tp in partitions:
            key = (producer_id, producer_epoch, coordinator_epoch, committed, *tp)
            if key in self._answers:  # the answer to an earlier round's send
                answers[tp] = self._answers.pop(key)
            elif key in self._in_flight:
                answers[tp] = ErrorCode.REQUEST_TIMED_OUT
            elif self._leads_here(*tp):
                local.append(tp)
            else:
                leader = self._metadata.leader(*tp)
                if leader is None:  # Kafka keeps it queued until the partition has a leader
                    answers[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif leader.broker_id == self.broker_id:  # the cache is ahead of the replica: its own answer
                    local.append(tp)
                else:
                    remote.setdefault(leader.broker_id, (leader, []))[1].append(tp)
        if local:
            answers.update(self._write_here(TxnMarker(producer_id, producer_epoch, committed, coordinator_epoch,
                                                      tuple(local))))
        for leader, tps in remote.values():
            answers.update(self._send(leader, TxnMarker(producer_id, producer_epoch, committed, coordinator_epoch,
                                                        tuple(tps))))
        return answers

    def _write_here(self, marker: TxnMarker) -> dict[TopicPartition, int]:
        response = self._handle(WriteTxnMarkersRequest((marker,)))
        if isinstance(response, Pending):  # waits for the followers to copy it
            keys = self._sent(marker)
            response.add_done_callback(lambda answer: self._record(keys, _codes(marker, answer)))
            return dict.fromkeys(marker.partitions, ErrorCode.REQUEST_TIMED_OUT)
        return _codes(marker, response)

    def _send(self, leader: BrokerEndpoint, marker: TxnMarker) -> dict[TopicPartition, int]:
        loop = self._loop()
        if loop is None:
            log.warning("markers for producer %d to broker %d not sent: no event loop runs", marker.producer_id,
                        leader.broker_id)
            return dict.fromkeys(marker.partitions, ErrorCode.REQUEST_TIMED_OUT)
        channel = self._channel(leader)
        keys = self._sent(marker)
        task = loop.create_task(self._call(channel, leader, marker, keys))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return dict.fromkeys(marker.partitions, ErrorCode.REQUEST_TIMED_OUT)

    def _channel(self, leader: BrokerEndpoint) -> Channel:
        known = self._channels.get(leader.broker_id)
        if known is not None and known[0] == leader:
            return known[1]
        if known is not None:  # the broker came back at another address
            self._close_later(known[1])
        channel = self._channel_factory(leader)
        self._channels[leader.broker_id] = (leader, channel)
        return channel

    def _close_later(self, channel: Channel) -> None:
        loop = self._loop()
        if loop is not None:
            task = loop.create_task(channel.close())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _call(self, channel: Channel, leader: BrokerEndpoint, marker: TxnMarker,
                    keys: list[MarkerKey]) -> None:
        try:
            response = await channel.call(WriteTxnMarkersRequest((marker,)))
            codes = _codes(marker, response)
        except TimeoutError as exc:
            log.info("markers for producer %d to broker %d timed out: %s", marker.producer_id, leader.broker_id, exc)
            codes = dict.fromkeys(marker.partitions, int(ErrorCode.REQUEST_TIMED_OUT))
        except (ConnectionError, OSError) as exc:  # retried, to whichever broker leads then
            log.info("markers for producer %d to broker %d not delivered: %s", marker.producer_id, leader.broker_id,
                     exc)
            codes = dict.fromkeys(marker.partitions, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        except Exception:  # a bug must not leave the markers in flight for ever
            log.exception("markers for producer %d to broker %d failed", marker.producer_id, leader.broker_id)
            codes = dict.fromkeys(marker.partitions, int(ErrorCode.UNKNOWN_SERVER_ERROR))
        self._record(keys, codes)

    def _sent(self, marker: TxnMarker) -> list[MarkerKey]:
        keys = [_key(marker, tp) for tp in marker.partitions]
        self._in_flight.update(keys)
        return keys

    def _record(self, keys: list[MarkerKey], codes: Mapping[TopicPartition, int]) -> None:
        for key in keys:
            if key not in self._in_flight:
                continue
            self._in_flight.discard(key)
            self._answers[key] = codes.get((key[4], key[5]), ErrorCode.REQUEST_TIMED_OUT)
        while len(self._answers) > MAX_RECORDED_ANSWERS:
            del self._answers[next(iter(self._answers))]
        if self.on_answer is not None:
            self.on_answer()

    async def close(self) -> None:
        """Close the channels; markers in flight are dropped (the coordinator's next leader sends them again)."""
        for task in list(self._tasks):
            task.cancel()
        channels = [channel for _, channel in self._channels.values()]
        self._channels.clear()
        for channel in channels:
            try:
                await channel.close()
            except Exception as exc:  # closing is best effort
                log.debug("closing a marker channel: %s", exc)


def _key(marker: TxnMarker, tp: TopicPartition) -> MarkerKey:
    return (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.committed, *tp)


def _codes(marker: TxnMarker, response: object) -> dict[TopicPartition, int]:
    """Each partition's error code in a WriteTxnMarkers answer (a partition it does not name: REQUEST_TIMED_OUT,
    retried)."""
    codes = dict.fromkeys(marker.partitions, int(ErrorCode.REQUEST_TIMED_OUT))
    if isinstance(response, WriteTxnMarkersResponse):
        for result in response.markers:
            if result.producer_id == marker.producer_id:
                for answer in result.responses:
                    if (answer.topic, answer.partition) in codes:
                        codes[(answer.topic, answer.partition)] = int(answer.error_code)
    else:
        log.error("a WriteTxnMarkers request was answered %r", type(response).__name__)
    return codes
