"""BrokerChannel and BlockingBrokerChannel against a tiny Kafka-protocol server on a free loopback port that answers
ApiVersions and OffsetForLeaderEpoch, and can cut an answer short or keep silent."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from idemcore.net.broker_channel import BlockingBrokerChannel, BrokerChannel
from idemcore.net.messages import ProduceRequest, ProduceResponse
from idemcore.net.replication import (
    EpochEndOffset,
    EpochQuery,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from idemcore.net.wire.api import WireContext
from idemcore.net.wire.apis import api_versions_response
from idemcore.net.wire.client import WireProtocolError
from idemcore.net.wire.frames import SIZE, peek_request, read_request, response_frame
from idemcore.net.wire.interbroker import OFFSET_FOR_LEADER_EPOCH
from idemcore.protocol.codes import ErrorCode

CTX = WireContext(1, "127.0.0.1", 0, "cluster", lambda: {"t": 2})
ASK = OffsetForLeaderEpochRequest(2, (EpochQuery("t", 0, 5, 4), EpochQuery("t", 1, -1, 3)), request_id=9)


def answer_of(request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    """The server's answer: each epoch ends at 1000 * epoch + partition."""
    return OffsetForLeaderEpochResponse(tuple(EpochEndOffset(q.topic, q.partition, ErrorCode.NONE, q.leader_epoch,
                                                             1000 * q.leader_epoch + q.partition)
                                              for q in request.partitions), request.request_id)


@dataclass
class Server:
    """Answers ApiVersions, and OffsetForLeaderEpoch as ``modes`` say, one per request (then "ok"): "ok", "cut"
    (half the answer, then the connection closes), "silent" (no answer)."""

    modes: list[str] = field(default_factory=list)
    connections: int = 0
    versions_asked: int = 0
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                size = SIZE.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                key, version, correlation_id = peek_request(frame)
                if key == 18:
                    self.versions_asked += 1
                    writer.write(b"".join(response_frame(correlation_id, api_versions_response(version))))
                    continue
                if key == 0:  # a Produce with acks=0: never answered
                    continue
                _, body = read_request(frame)
                message, carry = OFFSET_FOR_LEADER_EPOCH.to_message(CTX, version, correlation_id, body)
                wire = OFFSET_FOR_LEADER_EPOCH.to_wire(CTX, version, body, answer_of(message), carry)
                out = b"".join(response_frame(correlation_id, wire))
                mode = self.modes.pop(0) if self.modes else "ok"
                if mode == "cut":
                    writer.write(out[:len(out) // 2])
                    await writer.drain()
                    writer.close()
                    return
                if mode == "ok":
                    writer.write(out)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture
def server() -> Iterator[Server]:
    """The server on its own loop in a thread (so a blocking channel can call it from the test's thread)."""
    state = Server()
    started = threading.Event()
    stop: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def main() -> None:
        srv = await asyncio.start_server(state.serve, "127.0.0.1", 0)
        state.port = srv.sockets[0].getsockname()[1]
        stop.append((asyncio.get_running_loop(), asyncio.Event()))
        started.set()
        async with srv:
            await stop[0][1].wait()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield state
    finally:
        loop, event = stop[0]
        loop.call_soon_threadsafe(event.set)
        thread.join(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- asyncio


def test_async_channel_calls_negotiates_once_and_reuses_its_connection(server):
    async def run() -> None:
        channel = BrokerChannel("127.0.0.1", server.port, "replica-2")
        try:
            assert await channel.call(ASK) == answer_of(ASK)
            again = OffsetForLeaderEpochRequest(2, (EpochQuery("t", 1, 6, 6),), request_id=10)
            assert await channel.call(again) == answer_of(again)
        finally:
            await channel.close()
        assert not channel.connected

    asyncio.run(run())
    assert (server.connections, server.versions_asked) == (1, 1)


def test_async_channel_raises_connection_error_on_an_answer_cut_short_and_reconnects(server):
    server.modes = ["cut"]

    async def run() -> None:
        channel = BrokerChannel("127.0.0.1", server.port, "replica-2")
        try:
            with pytest.raises(ConnectionError, match=f"127.0.0.1:{server.port}.*closed after"):
                await channel.call(ASK)
            assert not channel.connected
            assert await channel.call(ASK) == answer_of(ASK)
        finally:
            await channel.close()

    asyncio.run(run())
    assert (server.connections, server.versions_asked) == (2, 2)


def test_async_channel_times_out_drops_the_connection_and_the_next_call_reconnects(server):
    server.modes = ["silent"]

    async def run() -> None:
        channel = BrokerChannel("127.0.0.1", server.port, "replica-2", request_timeout_ms=200)
        try:
            with pytest.raises(TimeoutError, match="request_timeout_ms=200"):
                await channel.call(ASK)
            assert not channel.connected
            assert await channel.call(ASK) == answer_of(ASK)
        finally:
            await channel.close()

    asyncio.run(run())
    assert server.connections == 2


def test_async_channel_to_no_listener_raises_connection_error():
    port = free_port()

    async def run() -> None:
        channel = BrokerChannel("127.0.0.1", port, "replica-2", connect_timeout_ms=2000)
        with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}: cannot connect"):
            await channel.call(ASK)

    asyncio.run(run())


def test_a_produce_with_acks_0_gets_no_answer_and_returns_an_empty_one(server):
    async def run() -> None:
        channel = BrokerChannel("127.0.0.1", server.port, "replica-2")
        try:
            assert await channel.call(ProduceRequest((), acks=0, request_id=5)) == ProduceResponse(5, ())
            assert await channel.call(ASK) == answer_of(ASK)  # the connection still pairs answers right
        finally:
            await channel.close()

    asyncio.run(run())


# ---------------------------------------------------------------- blocking


def test_blocking_channel_calls_negotiates_once_and_reuses_its_connection(server):
    channel = BlockingBrokerChannel("127.0.0.1", server.port, "controller-3")
    try:
        for _ in range(3):
            assert channel.call(ASK) == answer_of(ASK)
    finally:
        channel.close()
    assert (server.connections, server.versions_asked) == (1, 1)


def test_blocking_channel_raises_connection_error_on_an_answer_cut_short_and_reconnects(server):
    server.modes = ["ok", "cut"]
    channel = BlockingBrokerChannel("127.0.0.1", server.port, "controller-3")
    try:
        assert channel.call(ASK) == answer_of(ASK)
        with pytest.raises(ConnectionError, match="closed in the answer to OffsetForLeaderEpoch"):
            channel.call(ASK)
        assert not channel.connected
        assert channel.call(ASK) == answer_of(ASK)
    finally:
        channel.close()
    assert (server.connections, server.versions_asked) == (2, 2)


def test_blocking_channel_times_out_and_the_next_call_reconnects(server):
    server.modes = ["silent"]
    channel = BlockingBrokerChannel("127.0.0.1", server.port, "controller-3", request_timeout_ms=200)
    try:
        with pytest.raises(TimeoutError, match="request_timeout_ms=200"):
            channel.call(ASK)
        assert channel.call(ASK) == answer_of(ASK)
    finally:
        channel.close()
    assert server.connections == 2


def test_blocking_channel_to_no_listener_raises_connection_error():
    port = free_port()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}: cannot connect"):
        BlockingBrokerChannel("127.0.0.1", port, "controller-3", connect_timeout_ms=2000).call(ASK)


def test_an_api_the_broker_lacks_is_refused_by_name(server, monkeypatch):
    import idemcore.net.wire.apis as apis
    served = apis.advertised()
    monkeypatch.setattr(apis, "advertised", lambda: [entry for entry in served if entry[0] != 23])
    channel = BlockingBrokerChannel("127.0.0.1", server.port, "controller-3")
    try:
        with pytest.raises(WireProtocolError, match="OffsetForLeaderEpoch at no version"):
            channel.call(ASK)
    finally:
        channel.close()
