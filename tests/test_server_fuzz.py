"""Malformed frames over a real socket against idemcore's Kafka-protocol server: bad sizes, truncated
frames, unknown API keys and versions, ApiVersions at a version the server lacks, garbage bodies behind valid
headers, unknown tagged fields, and FUZZ_FRAMES seeded random mutations of valid Produce, Fetch, Metadata and
InitProducerId frames. Each frame is either answered or its connection closed; the server never raises
(``broker_errors`` stays 0 and nothing is logged at ERROR), and a fresh connection is always served.

A fuzzed frame is sent with an ApiVersions "probe" behind it on the same connection: the probe's answer says
the frame before it was read and handled (answered or not: acks=0), so many frames go over one connection, and
a connection is opened again only when the server closes one.

The server is conftest's ``kafka_server`` (a ``Server`` over a fresh ``Broker``) run in a forked child process
(:class:`ForkedServer`: its stats over a pipe, its ERROR log records in a file), not in pytest's own process:
kio's native reader aborts the whole process on a length it cannot allocate (a Rust allocation failure is not an
exception; ``net/wire/guard.py`` now bounds every length first, see
test_a_compact_array_length_of_2_to_the_32_does_not_kill_the_server), and a regression must fail a test, not end
the run. The fuzz runs go on past such a death (a new server) and fail at the end with :class:`KnownBugs`."""

from __future__ import annotations

import datetime
import logging
import multiprocessing
import os
import random
import re
import socket
import struct
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_writer

from idemcore.broker import Broker
from idemcore.broker.server import Server
from idemcore.net.wire.api import topic_id_of
from idemcore.net.wire.apis import APIS
from idemcore.net.wire.frames import Chunks, make, nested, read_response, request_frame
from idemcore.net.wire.schema import load_request_schema  # kio's, and the schemas kio lacks
from idemcore.record.v2.codec import Record, encode_batch

#: Random mutated frames of the fuzz run (IDEMCORE_FUZZ_FRAMES overrides it: 100_000 for the full run). The
#: server reads 550 to 1150 of them a second on a 2-core machine (most close their connection): 25k in 22-45 s.
FUZZ_FRAMES = int(os.environ.get("IDEMCORE_FUZZ_FRAMES", "25000"))
SEED = 20_261_122
#: How long one frame may go unanswered (neither an answer, the probe's answer, nor a close) before the
#: connection is given up.
FRAME_TIMEOUT_S = 1.0
#: Every this many fuzzed frames, a well-formed Metadata on a fresh connection must be answered.
HEALTH_EVERY = 2000
TOPIC = "fz"
PARTITIONS = 2
SIZE = struct.Struct(">i")


# ---------------------------------------------------------------- frames


def frame(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    return request_frame(api_key, version, correlation_id, "fuzz", make(load_request_schema(api_key, version),
                                                                          **fields))


def entity(api_key: int, version: int, entity_name: str, /, **fields: Any) -> Any:
    return make(nested(load_request_schema(api_key, version), entity_name), **fields)


RECORDS = encode_batch([Record(offset_delta=i, timestamp_delta=0, key=b"k%d" % i, value=b"value-%d" % i)
                        for i in range(3)], base_timestamp=1_700_000_000_000)


def produce_frame(version: int, correlation_id: int) -> bytes:
    data = entity(0, version, "PartitionProduceData", index=0, records=RECORDS)
    topic = entity(0, version, "TopicProduceData", name=TOPIC, topic_id=topic_id_of(TOPIC), partition_data=(data,))
    return frame(0, version, correlation_id, acks=1, timeout=datetime.timedelta(seconds=1), topic_data=(topic,))


def fetch_frame(version: int, correlation_id: int) -> bytes:
    partition = entity(1, version, "FetchPartition", partition=1, fetch_offset=0, partition_max_bytes=1024,
                       current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)
    topic = entity(1, version, "FetchTopic", topic=TOPIC, topic_id=topic_id_of(TOPIC), partitions=(partition,))
    return frame(1, version, correlation_id, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
                 max_bytes=4096, isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,),
                 forgotten_topics_data=(), rack_id="")


def metadata_frame(version: int, correlation_id: int) -> bytes:
    topic = entity(3, version, "MetadataRequestTopic", name=TOPIC, topic_id=None)
    return frame(3, version, correlation_id, topics=(topic,), allow_auto_topic_creation=False)


def init_producer_id_frame(version: int, correlation_id: int) -> bytes:
    return frame(22, version, correlation_id, transactional_id=None,
                 transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1)


def api_versions_frame(version: int, correlation_id: int) -> bytes:
    return frame(18, version, correlation_id, client_software_name="fuzz", client_software_version="1")


#: (api key, builder, versions) of the frames the fuzzer mutates: every version the server serves.
TEMPLATES = [(0, produce_frame, range(APIS[0].min_version, APIS[0].max_version + 1)),
             (1, fetch_frame, range(APIS[1].min_version, APIS[1].max_version + 1)),
             (3, metadata_frame, range(APIS[3].min_version, APIS[3].max_version + 1)),
             (22, init_producer_id_frame, range(APIS[22].min_version, APIS[22].max_version + 1))]


def mutate(rng: random.Random, data: bytes) -> tuple[bytes, bool]:
    """A mutation of ``data`` (a frame with its size) and whether its size prefix still matches its length.
    Mostly the size is kept right, so the body's parsing is what is tested; sometimes it is not (the server then
    reads a truncated frame, or the start of the next one)."""
    body = bytearray(data[4:])
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        kind = rng.random()
        if kind < 0.45 and body:  # flip a byte (header or body)
            body[rng.randrange(len(body))] ^= rng.randrange(1, 256)
        elif kind < 0.55 and body:  # set a byte to a boundary value
            body[rng.randrange(len(body))] = rng.choice((0x00, 0x7F, 0x80, 0xFF))
        elif kind < 0.70 and len(body) > 8:  # truncate
            del body[rng.randrange(8, len(body)):]
        elif kind < 0.80:  # extend with random bytes
            body += rng.randbytes(rng.randrange(1, 32))
        elif kind < 0.90 and len(body) > 12:  # overwrite a 4-byte run with a boundary int (lengths, counts)
            at = rng.randrange(8, len(body) - 3)
            body[at:at + 4] = SIZE.pack(rng.choice((-1, 0, 1, 0x7FFFFFFF, -0x80000000, 0xFFFF, 1 << 20)))
        elif body:  # duplicate a slice
            at = rng.randrange(len(body))
            body[at:at] = body[at:at + rng.randrange(1, 16)]
    if rng.random() < 0.04:
        size = rng.choice((len(body) + rng.randrange(1, 64), max(0, len(body) - rng.randrange(1, 8)),
                           rng.randrange(-8, 8)))
        return SIZE.pack(size) + bytes(body), size == len(body)
    return SIZE.pack(len(body)) + bytes(body), True


# ---------------------------------------------------------------- a raw client


class Closed(Exception):
    pass


class RawClient:
    """One socket to the server; reads response frames."""

    def __init__(self, address: tuple[str, int], timeout: float = FRAME_TIMEOUT_S) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()

    def send(self, data: bytes) -> bool:
        """False when the server closed the connection already."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def _fill(self, n: int) -> None:
        while len(self.buffer) < n:
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed
            self.buffer += chunk

    def read_frame(self) -> bytes:
        """The next response frame (without its size); Closed at a clean or reset close; TimeoutError."""
        self._fill(4)
        size = SIZE.unpack_from(self.buffer)[0]
        assert 4 <= size <= 64 << 20, f"a response frame of {size} bytes"
        self._fill(4 + size)
        out = bytes(self.buffer[4:4 + size])
        del self.buffer[:4 + size]
        return out

    def read_until_closed(self) -> list[bytes]:
        frames = []
        try:
            while True:
                frames.append(self.read_frame())
        except Closed:
            return frames

    def close(self) -> None:
        self.sock.close()


def exchange(address: tuple[str, int], data: bytes) -> tuple[list[bytes], bool]:
    """Send ``data`` on a new connection, half-close it, and read until the server closes: (frames, closed)."""
    client = RawClient(address)
    try:
        client.send(data)
        try:
            client.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        return client.read_until_closed(), True
    finally:
        client.close()


def correlation_of(response: bytes) -> int:
    return SIZE.unpack_from(response)[0]


def assert_served(server: Any) -> None:
    """A well-formed Metadata v1 and v12 on fresh connections get a correct answer."""
    for version in (1, 12):
        client = RawClient(server.address)
        try:
            client.send(metadata_frame(version, 4242))
            correlation_id, body = read_response(3, version, client.read_frame())
        finally:
            client.close()
        assert correlation_id == 4242
        assert [(str(t.name), int(t.error_code), len(t.partitions)) for t in body.topics] == [(TOPIC, 0, PARTITIONS)]
        assert [(b.host, b.port) for b in body.brokers] == [server.address]


#: Between two ERROR records in a forked server's error file.
_RECORD_END = "\n\x1e\n"


class _Errors(logging.Handler):
    """ERROR records of the server's loggers (a broker exception is logged with logging.exception), appended to
    a file at once: what a server wrote before a frame killed it is kept."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.ERROR)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        trace = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        with open(self.path, "a") as out:
            out.write(f"{record.name}: {record.getMessage()}\n{trace}"[-3000:] + _RECORD_END)


def read_errors(path: Path) -> list[str]:
    return [r for r in path.read_text().split(_RECORD_END) if r.strip()] if path.exists() else []


def _serve_child(data_dir: Path, server_kwargs: dict[str, Any], conn: Any) -> None:
    logging.getLogger().addHandler(_Errors(data_dir.parent / f"{data_dir.name}.errors"))
    broker = Broker({}, data_dir=data_dir, fsync=False)
    server = Server(broker, **server_kwargs).start()
    conn.send(server.address)
    while True:
        command = conn.recv()
        alive = server._thread is not None and server._thread.is_alive()
        if command == "stop":
            server.stop()
            broker.close()
        conn.send((dict(server.stats), alive))
        if command == "stop":
            conn.close()
            os._exit(0)


class ForkedServer:
    """``Server(Broker({}, data_dir), **server_kwargs)`` (as conftest's ``kafka_server`` makes it) in a forked child
    process; :meth:`report` is its ``(stats, thread alive, ERROR log records)``; a child that died is a failure
    naming its exit code."""

    def __init__(self, data_dir: Path, **server_kwargs: Any) -> None:
        context = multiprocessing.get_context("fork")
        self._conn, child = context.Pipe()
        self.process = context.Process(target=_serve_child, args=(data_dir, server_kwargs, child), daemon=True)
        self.process.start()
        child.close()
        if not self._conn.poll(30):
            raise RuntimeError("the forked server did not start in 30 s")
        self.address: tuple[str, int] = self._conn.recv()
        self.stats: dict[str, int] = {}
        self.errors_path = data_dir.parent / f"{data_dir.name}.errors"

    def _ask(self, command: str) -> tuple[dict[str, int], bool, list[str]]:
        try:
            self._conn.send(command)
            if not self._conn.poll(60):
                raise AssertionError("the server process does not answer")
            self.stats, alive = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self.process.join(5)
            raise AssertionError(f"the server process died (exit code {self.process.exitcode})") from None
        return self.stats, alive, read_errors(self.errors_path)

    def check(self) -> dict[str, int]:
        """The server's stats, after asserting it lives, its thread too, and it never failed."""
        stats, alive, errors = self._ask("stats")
        assert alive, "the server thread died"
        assert_no_errors(errors)
        assert stats["broker_errors"] == 0, stats
        return stats

    def stop(self) -> None:
        if self.process.is_alive():
            with _suppress():
                self._ask("stop")
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


def assert_no_errors(errors: list[str]) -> None:
    if errors:
        kinds = Counter(re.sub(r"-?\d+", "N", error.strip().splitlines()[-1]) for error in errors)
        raise AssertionError(f"the server logged {len(errors)} errors, of {len(kinds)} kinds: {dict(kinds)}; "
                             f"the first:\n{errors[0]}")


class _suppress:
    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: Any, *rest: Any) -> bool:
        return kind is not None and issubclass(kind, AssertionError)


def _prepare(server: ForkedServer) -> None:
    """TOPIC made by CreateTopics, and records in its partition 1 (a fuzzed Fetch of it is answered at once
    instead of waiting for its max_wait)."""
    client = RawClient(server.address)
    try:
        topic = entity(19, 5, "CreatableTopic", name=TOPIC, num_partitions=PARTITIONS, replication_factor=1,
                       assignments=(), configs=())
        client.send(frame(19, 5, 1, topics=(topic,), timeout=datetime.timedelta(seconds=5)))
        _, created = read_response(19, 5, client.read_frame())
        assert [int(t.error_code) for t in created.topics] == [0], created
        for n in range(3):
            data = entity(0, 9, "PartitionProduceData", index=1, records=RECORDS)
            topic = entity(0, 9, "TopicProduceData", name=TOPIC, partition_data=(data,))
            client.send(frame(0, 9, 2 + n, acks=-1, timeout=datetime.timedelta(seconds=1), topic_data=(topic,)))
            _, produced = read_response(0, 9, client.read_frame())
            assert int(produced.responses[0].partition_responses[0].error_code) == 0, produced
    finally:
        client.close()


@pytest.fixture
def server(tmp_path):
    """A server (conftest's ``kafka_server``, forked: module docstring) with TOPIC; on the way out, asserts it is
    alive, serving, and that the broker never raised."""
    forked = ForkedServer(tmp_path / "kafka-logs")
    try:
        _prepare(forked)
        yield forked
        forked.check()
        assert_served(forked)
        forked.check()
    finally:
        forked.stop()


# ---------------------------------------------------------------- scripted cases


@pytest.mark.parametrize("size", [-1, -(1 << 31), 0, 1, 4, 7, 1025, 1 << 30])
def test_a_frame_size_out_of_bounds_closes_the_connection(tmp_path, size):
    server = ForkedServer(tmp_path / "kafka-logs", max_request_bytes=1024)
    try:
        _prepare(server)
        frames, closed = exchange(server.address, SIZE.pack(size) + b"\0" * min(max(size, 0), 2048))
        assert closed and frames == []
        assert server.check()["malformed"] == 1
        assert_served(server)
        # a frame of exactly max_request_bytes is read and answered (the bytes after its body ignored, as Kafka's
        # parser ignores them)
        big = metadata_frame(1, 9)
        padded = SIZE.pack(1024) + big[4:] + b"\0" * (1024 - len(big) + 4)
        frames, _ = exchange(server.address, padded)
        assert len(frames) == 1
        stats = server.check()
        assert stats["malformed"] == 1 and stats["requests"] == 4 + 2 + 1, stats  # _prepare, assert_served, this
    finally:
        server.stop()


@pytest.mark.parametrize("cut", [1, 2, 3, 4, 6, 10, -1])
def test_a_truncated_frame_then_close_is_dropped(server, cut):
    whole = produce_frame(9, 5)
    frames, closed = exchange(server.address, whole[:cut])
    assert closed and frames == []
    assert_served(server)


def test_a_truncated_frame_keeps_the_connection_waiting_then_the_rest_is_answered(server):
    whole = metadata_frame(12, 5)
    client = RawClient(server.address)
    try:
        for at in range(0, len(whole), 7):  # byte by byte, in small pieces
            client.send(whole[at:at + 7])
            time.sleep(0.001)
        assert read_response(3, 12, client.read_frame())[0] == 5
    finally:
        client.close()


@pytest.mark.parametrize(("api_key", "version"), [(9999, 0), (-1, 0), (-32768, 3), (1000, 1), (74, 0),
                                                  (0, 0), (0, 2), (0, 12), (0, 99), (1, 3), (1, 99), (3, 14),
                                                  (3, -1), (22, 6), (22, 32767)])
def test_an_unknown_api_or_version_is_refused(server, api_key, version):
    body = b"\0" * 16
    head = struct.pack(">hhih", api_key, version, 77, 4) + b"fuzz"
    frames, closed = exchange(server.address, SIZE.pack(len(head) + len(body)) + head + body)
    # Kafka closes the connection for an API it does not serve (a v0 ApiVersions answer is only for ApiVersions)
    assert closed
    for response in frames:
        assert correlation_of(response) == 77
    assert_served(server)


@pytest.mark.parametrize("version", [5, 6, 99, 32767, -1])
def test_api_versions_at_an_unknown_version_is_answered_at_v0(server, version):
    head = struct.pack(">hhih", 18, version, 31, 4) + b"fuzz"
    for body in (b"", b"\x05fuzz\x021\x00", os.urandom(8)):  # what a newer client might send: not read
        client = RawClient(server.address)
        try:
            client.send(SIZE.pack(len(head) + len(body)) + head + body)
            correlation_id, answer = read_response(18, 0, client.read_frame())
            assert correlation_id == 31
            assert int(answer.error_code) == 35  # UNSUPPORTED_VERSION
            served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
            assert served[18] == (0, 4)
            for key, api in APIS.items():
                assert served[key] == (api.min_version, api.max_version)
            # the connection stays open: the client asks again at a version it found
            client.send(api_versions_frame(3, 32))
            assert read_response(18, 3, client.read_frame())[1].error_code == 0
        finally:
            client.close()


KIO_ABORT = ("kio 0.6.5's native reader aborts the process on a compact array length of 2**32-1 or more "
             "(test_a_compact_array_length_of_2_to_the_32_does_not_kill_the_server)")


class KnownBugs(AssertionError):
    """Frames killed the server process (kio's allocation abort; each time a server was started again and the run
    went on), or the broker raised on a Produce's acks: both fixed, and failures if they come back."""


#: The last line of a broker failure that test_produce_with_invalid_acks_is_answered_invalid_required_acks shows.
KNOWN_ERRORS = re.compile(r"ValueError: acks must be one of")


class Servers:
    """The forked server of a fuzz run, started again (on a fresh directory) each time a frame kills it; the
    frames that did are kept, to be reported at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        #: per death, the last frames sent before it (a frame's connection may close before its server dies: the
        #: killer is one of these, most likely the first)
        self.killers: list[tuple[bytes, ...]] = []
        self.recent: deque[bytes] = deque(maxlen=3)
        self.dead_errors: list[str] = []
        self.current = self._start()

    def _start(self) -> ForkedServer:
        server = ForkedServer(self.tmp_path / f"kafka-logs-{len(self.killers)}")
        _prepare(server)
        return server

    @property
    def address(self) -> tuple[str, int]:
        return self.current.address

    def died(self) -> bool:
        """Whether the server died (then the last frames sent are kept and a new server started)."""
        if self.current.process.is_alive():
            return False
        self.killers.append(tuple(reversed(self.recent)))
        self.dead_errors += read_errors(self.current.errors_path)
        self.current.stop()
        self.current = self._start()
        return True

    def connect(self) -> RawClient:
        """A connection to the server, started again first if it is dying."""
        try:
            return RawClient(self.address)
        except (ConnectionRefusedError, ConnectionResetError):  # reset: it died with this one in its backlog
            self.current.process.join(10)  # refused: the process is going; a Rust abort prints a backtrace first
            assert self.died(), "the server refuses connections but lives"
            return RawClient(self.address)

    def exchange(self, data: bytes) -> list[bytes]:
        """:func:`exchange` on a fresh connection (to a new server if the old one is dying)."""
        try:
            frames = exchange(self.address, data)[0]
        except (ConnectionRefusedError, ConnectionResetError):  # the previous frame killed it
            self.current.process.join(10)
            assert self.died(), "the server refuses connections but lives"
            frames = exchange(self.address, data)[0]
        self.recent.append(data)
        return frames

    def finish(self) -> dict[str, int]:
        """The last server's stats after the usual checks (alive, serving, no broker failure but the known one);
        KnownBugs if frames killed a server or the broker failed on a Produce's acks."""
        try:
            assert self.current.process.is_alive(), "the server process died"
            errors = self.dead_errors + read_errors(self.current.errors_path)
            assert_no_errors([error for error in errors if not KNOWN_ERRORS.search(error.strip().splitlines()[-1])])
            stats, alive, _ = self.current._ask("stats")
            assert alive, "the server thread died"
            assert_served(self.current)
        finally:
            self.current.stop()
        known = [f"frames killed the server process {len(self.killers)} times; the last frames sent before the "
                 f"first death: {[frame.hex() for frame in self.killers[0]]}"] if self.killers else []
        if errors:
            known.append(f"{len(errors)} broker failures: {errors[0].strip().splitlines()[-1]}")
        if known:
            raise KnownBugs("; ".join(known))
        return stats


def test_garbage_bodies_behind_valid_headers(tmp_path):
    servers = Servers(tmp_path)
    rng = random.Random(SEED + 1)
    outcomes: Counter[str] = Counter()
    for key, api in sorted(APIS.items()):
        for version in range(api.min_version, api.max_version + 1):
            for _ in range(8):
                garbage = rng.randbytes(rng.choice((0, 1, 3, 8, 40, 300)))
                head = struct.pack(">hhih", key, version, 99, 4) + b"fuzz"
                if version >= _first_flexible(key):
                    head += b"\0"  # the header's (empty) tagged fields; the body is garbage
                frames = servers.exchange(SIZE.pack(len(head) + len(garbage)) + head + garbage)
                if servers.died():
                    continue
                assert len(frames) <= 1
                for response in frames:
                    assert correlation_of(response) == 99
                    read_response(key, version, response)  # an answer is a well-formed one
                outcomes["answered" if frames else "closed"] += 1
    print(f"\ngarbage bodies: {dict(outcomes)}; the server died {len(servers.killers)} times")
    assert outcomes["closed"] > 0
    servers.finish()


def _first_flexible(api_key: int) -> int:
    return next((v for v in range(0, 40) if _flexible(api_key, v)), 1 << 15)


def _flexible(api_key: int, version: int) -> bool:
    try:
        return bool(load_request_schema(api_key, version).__flexible__)
    except Exception:
        return False


def _with_unknown_tags(version: int, *, in_header: bool, in_body: bool) -> bytes:
    """Metadata at a flexible ``version`` whose header and/or body carries a tagged field no schema defines
    (tag 90, 3 bytes): KIP-482 says a reader skips it."""
    cls = load_request_schema(3, version)
    tags = b"\x01" + b"\x5a" + b"\x03" + b"abc"  # one field: tag 90, size 3
    head = struct.pack(">hhih", 3, version, 55, 4) + b"fuzz" + (tags if in_header else b"\0")
    out = Chunks()
    entity_writer(cls)(out, make(cls, topics=(entity(3, version, "MetadataRequestTopic", name=TOPIC),),
                                 allow_auto_topic_creation=False))
    body = b"".join(out)
    assert body.endswith(b"\0")
    if in_body:
        body = body[:-1] + tags
    return SIZE.pack(len(head) + len(body)) + head + body


@pytest.mark.parametrize(("in_header", "in_body"), [(True, False), (False, True), (True, True)])
def test_unknown_tagged_fields_are_answered_or_closed(server, in_header, in_body):
    frames, closed = exchange(server.address, _with_unknown_tags(12, in_header=in_header, in_body=in_body))
    assert closed
    for response in frames:
        assert correlation_of(response) == 55
        read_response(3, 12, response)
    assert_served(server)


@pytest.mark.parametrize(("in_header", "in_body"), [(True, False), (False, True)])
def test_unknown_tagged_fields_are_skipped_as_kip_482_says(server, in_header, in_body):
    frames, _ = exchange(server.address, _with_unknown_tags(12, in_header=in_header, in_body=in_body))
    assert len(frames) == 1
    correlation_id, body = read_response(3, 12, frames[0])
    assert correlation_id == 55 and [str(t.name) for t in body.topics] == [TOPIC]


@pytest.mark.parametrize("length", ["ffffffff0f", "8080808010", "a4c48b964f"])
def test_a_compact_array_length_of_2_to_the_32_does_not_kill_the_server(server, length):
    # Metadata v12 (flexible): header, its empty tagged fields, then the topics' compact array length alone
    head = struct.pack(">hhih", 3, 12, 66, 4) + b"fuzz" + b"\0"
    body = bytes.fromhex(length)
    frames, closed = exchange(server.address, SIZE.pack(len(head) + len(body)) + head + body)
    assert closed and frames == []
    assert server.process.is_alive(), f"one 24-byte frame killed the server (exit code {server.process.exitcode})"
    assert_served(server)


@pytest.mark.parametrize("acks", [2, -2, 127, 32767, -32768])
def test_produce_with_invalid_acks_is_answered_invalid_required_acks(server, acks):
    data = entity(0, 9, "PartitionProduceData", index=0, records=RECORDS)
    topic = entity(0, 9, "TopicProduceData", name=TOPIC, partition_data=(data,))
    client = RawClient(server.address)
    try:
        client.send(frame(0, 9, 12, acks=acks, timeout=datetime.timedelta(seconds=1), topic_data=(topic,)))
        correlation_id, answer = read_response(0, 9, client.read_frame())
    finally:
        client.close()
    assert correlation_id == 12
    assert [(str(t.name), int(p.index), int(p.error_code)) for t in answer.responses
            for p in t.partition_responses] == [(TOPIC, 0, 21)]


def test_a_fetch_of_unknown_topic_ids_is_answered_at_once(server):
    topic = entity(1, 13, "FetchTopic", topic_id=topic_id_of("no-such-topic"), partitions=(
        entity(1, 13, "FetchPartition", partition=0, fetch_offset=0, partition_max_bytes=1024,
               current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1),))
    data = frame(1, 13, 21, replica_id=-1, max_wait=datetime.timedelta(seconds=3), min_bytes=1, max_bytes=4096,
                 isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,), forgotten_topics_data=(),
                 rack_id="")
    client = RawClient(server.address, timeout=10)
    try:
        started = time.monotonic()
        client.send(data)
        correlation_id, answer = read_response(1, 13, client.read_frame())
        waited = time.monotonic() - started
    finally:
        client.close()
    assert correlation_id == 21
    assert [int(p.error_code) for t in answer.responses for p in t.partitions] == [100]  # UNKNOWN_TOPIC_ID
    assert waited < 1.0, f"an answer holding only errors waited {waited:.1f} s (its max_wait)"


# ---------------------------------------------------------------- random mutations


def test_fuzzed_frames_are_answered_or_closed_and_the_server_keeps_serving(tmp_path):
    servers = Servers(tmp_path)
    rng = random.Random(SEED)
    templates = [build(version, 0) for _, build, versions in TEMPLATES for version in versions]
    outcomes: Counter[str] = Counter()
    timed_out: list[bytes] = []
    started = time.monotonic()
    client: RawClient | None = None
    probe_id = 1 << 30
    try:
        for n in range(FUZZ_FRAMES):
            if n and n % HEALTH_EVERY == 0:
                assert_served(servers.current)
            data, size_right = mutate(rng, rng.choice(templates))
            if not size_right:  # the server reads a frame that ends elsewhere: send it alone and half-close
                frames = servers.exchange(data)
                outcomes["wrong size: answered" if frames else "wrong size: closed"] += 1
            else:
                if client is None:
                    client = servers.connect()
                servers.recent.append(data)
                probe_id += 1
                outcome = _send_with_probe(client, data, probe_id)
                outcomes[outcome] += 1
                if outcome == "timed out":
                    timed_out.append(data)
                if outcome not in ("answered", "read, no answer (acks=0)"):
                    client.close()
                    client = None
            if client is None:
                servers.died()
    finally:
        if client is not None:
            client.close()
    elapsed = time.monotonic() - started
    print(f"\nfuzzed {FUZZ_FRAMES} frames in {elapsed:.1f} s ({FUZZ_FRAMES / elapsed:.0f}/s): {dict(outcomes)}; "
          f"the server died {len(servers.killers)} times")
    if timed_out:
        print(f"{len(timed_out)} frames neither answered nor closed in {FRAME_TIMEOUT_S} s: "
              f"{[t.hex() for t in timed_out[:5]]}")
    stats = servers.finish()  # KnownBugs when the known bugs showed (once they are fixed: the checks below)
    print(f"server {stats}")
    assert stats["broker_errors"] == 0, stats
    assert len(timed_out) <= FUZZ_FRAMES // 1000, f"{len(timed_out)} frames neither answered nor closed in " \
        f"{FRAME_TIMEOUT_S} s, e.g. {[t.hex() for t in timed_out[:3]]}"
    assert outcomes["answered"] > FUZZ_FRAMES // 10, outcomes
    assert outcomes["closed"] > FUZZ_FRAMES // 10, outcomes
    # every frame read was counted; each closed connection was counted as malformed or unsupported
    assert stats["requests"] >= FUZZ_FRAMES - outcomes["closed before sent"] - outcomes["wrong size: closed"]
    assert stats["malformed"] + stats["unsupported"] >= outcomes["closed"]
    assert stats["connections"] >= outcomes["closed"]


def _send_with_probe(client: RawClient, data: bytes, probe_id: int) -> str:
    """Send ``data`` and an ApiVersions probe behind it; what became of ``data``."""
    if not client.send(data + api_versions_frame(2, probe_id)):
        return "closed before sent"
    answered = 0
    try:
        while True:
            response = client.read_frame()
            if correlation_of(response) == probe_id:
                return "answered" if answered else "read, no answer (acks=0)"
            answered += 1
            assert answered == 1, "two answers to one request frame"
    except Closed:
        return "answered, then closed" if answered else "closed"
    except TimeoutError:
        return "timed out"
