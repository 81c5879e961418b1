"""A seeded fault-injecting TCP proxy for Kafka's protocol, between clients and one server on loopback.

It reads Kafka's framing (a 4-byte size, then the frame) both ways: a request's header tells it the API key,
version and correlation id, and a response is matched to its request by correlation id. For each request it
decides, with a seeded RNG of its own connection (``seed``, connection number), one of:

- ``drop_request``: close the connection instead of forwarding it (the server never sees the request);
- ``cut_request``: forward part of the frame, then close (the server reads a truncated frame);
- ``lose_response``: forward it, and when its response comes (the request was processed), drop that response
  and close the connection: Kafka's "lost response", the case idempotence exists for;
- ``cut_response``: forward it, and forward only part of its response frame, then close;
- otherwise forward it, possibly after a delay (``delay``, up to ``max_delay_ms``), and its response too.

``FaultProxy(...).start()`` serves from a background thread (an asyncio loop); ``stop()`` closes everything.
``counts`` says what was injected. ``enabled = False`` turns the faults off (everything is forwarded).
``max_faults`` bounds the number of connection-ending faults, so a test always makes progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
import threading
from dataclasses import dataclass

_SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")
#: The largest frame the proxy forwards (a bigger size closes the connection, as the server would).
MAX_FRAME = 64 << 20


async def _read_frame(reader: asyncio.StreamReader, min_size: int) -> tuple[bytes, bytes] | None:
    """The next frame's 4-byte size and its bytes; None for a size outside ``min_size``..MAX_FRAME (close)."""
    head = await reader.readexactly(4)
    size = _SIZE.unpack(head)[0]
    if not min_size <= size <= MAX_FRAME:
        return None
    return head, await reader.readexactly(size)


@dataclass(frozen=True)
class FaultPlan:
    """Per-request probabilities (each request gets at most one fault)."""

    drop_request: float = 0.0
    cut_request: float = 0.0
    lose_response: float = 0.0
    cut_response: float = 0.0
    delay: float = 0.0
    max_delay_ms: float = 50.0
    #: API keys never faulted (e.g. ``{18}``: ApiVersions); empty: every request may be.
    spare_api_keys: frozenset[int] = frozenset()
    #: At most this many connection-ending faults in all (None: no bound).
    max_faults: int | None = None


COUNTERS = ("connections", "requests", "responses", "drop_request", "cut_request", "lose_response",
            "cut_response", "delay", "upstream_refused")


class FaultProxy:
    """Listen on ``listen_host``:``listen_port`` (0: a free port) and forward to ``target_host``:``target_port``."""

    def __init__(self, target_host: str, target_port: int, plan: FaultPlan, *, seed: int,
                 listen_host: str = "127.0.0.1", listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.plan = plan
        self.seed = seed
        self.listen_host, self.listen_port = listen_host, listen_port
        self.enabled = True
        self.counts = dict.fromkeys(COUNTERS, 0)
        #: (api_key, fault) for every connection-ending fault, in order: to tell which APIs were hit.
        self.fault_log: list[tuple[int, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    # ------------------------------------------------------------ life cycle

    @property
    def port(self) -> int:
        assert self._server is not None, "start the proxy first"
        return self._server.sockets[0].getsockname()[1]

    @property
    def bootstrap(self) -> str:
        return f"{self.listen_host}:{self.port}"

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start within 10 s")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                self._server = await asyncio.start_server(self._accept, self.listen_host, self.listen_port)
            except BaseException as error:
                self._error = error
                self._ready.set()
                return
            self._ready.set()
            await self._stop.wait()
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run(main())

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def faults(self) -> int:
        """Connection-ending faults injected so far."""
        return sum(self.counts[name] for name in ("drop_request", "cut_request", "lose_response", "cut_response"))

    # ------------------------------------------------------------ forwarding

    def _choose(self, rng: random.Random, api_key: int) -> str | None:
        plan = self.plan
        roll = rng.random()  # always drawn: the sequence of choices depends only on the seed and the requests
        delay_roll = rng.random()
        if not self.enabled or api_key in plan.spare_api_keys:
            return None
        if plan.max_faults is None or self.faults < plan.max_faults:
            for name in ("drop_request", "cut_request", "lose_response", "cut_response"):
                p = getattr(plan, name)
                if roll < p:
                    return name
                roll -= p
        if delay_roll < plan.delay:
            return "delay"
        return None

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        number = self.counts["connections"]
        self.counts["connections"] += 1
        rng = random.Random(self.seed * 1_000_003 + number)
        server_writer: asyncio.StreamWriter | None = None
        try:
            try:
                server_reader, server_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), 10)
            except (OSError, TimeoutError):
                self.counts["upstream_refused"] += 1
                return
            #: correlation id -> the fault its response gets ("lose_response" / "cut_response")
            response_faults: dict[int, tuple[int, str]] = {}
            closed = asyncio.Event()
            upstream = asyncio.ensure_future(self._requests(rng, client_reader, server_writer, response_faults,
                                                            closed))
            downstream = asyncio.ensure_future(self._responses(rng, server_reader, client_writer, response_faults,
                                                               closed))
            try:
                await closed.wait()
            finally:
                for pump in (upstream, downstream):
                    pump.cancel()
                await asyncio.gather(upstream, downstream, return_exceptions=True)
        finally:
            for writer in (client_writer, server_writer):
                if writer is not None:
                    writer.close()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(writer.wait_closed(), 2)
            self._tasks.discard(task)

    async def _requests(self, rng: random.Random, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        response_faults: dict[int, tuple[int, str]], closed: asyncio.Event) -> None:
        try:
            while (read := await _read_frame(reader, 0)) is not None:
                head, frame = read
                size = len(frame)
                self.counts["requests"] += 1
                api_key, _, correlation_id = _REQUEST_HEAD.unpack_from(frame) if size >= 8 else (-1, -1, -1)
                fault = self._choose(rng, api_key)
                if fault == "drop_request":
                    self._note(api_key, fault)
                    return
                if fault == "cut_request":
                    self._note(api_key, fault)
                    writer.write(head + frame[: rng.randrange(0, max(1, size))])
                    await writer.drain()
                    return
                if fault == "delay":
                    self.counts["delay"] += 1
                    await asyncio.sleep(rng.uniform(0, self.plan.max_delay_ms) / 1000)
                elif fault is not None:  # the response's fault
                    response_faults[correlation_id] = (api_key, fault)
                writer.write(head + frame)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            closed.set()

    async def _responses(self, rng: random.Random, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         response_faults: dict[int, tuple[int, str]], closed: asyncio.Event) -> None:
        try:
            while (read := await _read_frame(reader, 4)) is not None:
                head, frame = read
                size = len(frame)
                self.counts["responses"] += 1
                correlation_id = _SIZE.unpack_from(frame)[0]
                api_key, fault = response_faults.pop(correlation_id, (-1, None))
                if fault == "lose_response":
                    self._note(api_key, fault)
                    return
                if fault == "cut_response":
                    self._note(api_key, fault)
                    writer.write((head + frame)[: rng.randrange(1, 4 + size)])
                    await writer.drain()
                    return
                writer.write(head + frame)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            closed.set()

    def _note(self, api_key: int, fault: str) -> None:
        self.counts[fault] += 1
        self.fault_log.append((api_key, fault))
