"""KIP-511 on the client side: a broker that lacks the asked ApiVersions version answers UNSUPPORTED_VERSION at v0
with the versions it has, and the client asks again lower. Read at a flexible version such a v0 answer parses with a
null ``api_keys`` (no exception), which once made both idemcore's TCP transport and the broker channels fail with a
TypeError instead of asking again (``read_api_versions`` is the one reader both use now)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from idemcore.net.messages import MetadataRequest
from idemcore.net.tcp import TcpTransport, TransportTimeoutError
from idemcore.net.wire.apis import api_versions_response
from idemcore.net.wire.client import API_VERSIONS_KEY, API_VERSIONS_RANGE, read_api_versions
from idemcore.net.wire.frames import read_request, response_frame
from idemcore.protocol.codes import ErrorCode

TOP = API_VERSIONS_RANGE[1]


def _answer(correlation_id: int, response: object) -> bytes:
    return b"".join(response_frame(correlation_id, response))[4:]  # as a client reads it: after the size


def test_an_unsupported_version_answer_read_at_the_asked_version_gives_the_brokers_ranges():
    assert TOP > 0
    correlation_id, body = read_api_versions(TOP, _answer(9, api_versions_response(0, ErrorCode.UNSUPPORTED_VERSION)))
    assert correlation_id == 9
    assert int(body.error_code) == ErrorCode.UNSUPPORTED_VERSION
    assert API_VERSIONS_KEY in {int(entry.api_key) for entry in body.api_keys}
    # an answer at the asked version reads as itself
    _, body = read_api_versions(TOP, _answer(3, api_versions_response(TOP)))
    assert int(body.error_code) == ErrorCode.NONE and len(body.api_keys) > 1


def _read_frame(conn: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = conn.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    frame = b""
    while len(frame) < size:
        chunk = conn.recv(size - len(frame))
        if not chunk:
            return None
        frame += chunk
    return frame


def test_the_tcp_transport_asks_again_lower_after_an_unsupported_version_answer():
    """A fake broker answers the first ApiVersions with UNSUPPORTED_VERSION at v0, the second at the version asked;
    the transport must ask again one lower and then go on to its Metadata request."""
    asked: list[tuple[int, int]] = []  # (api key, version) of each request the fake broker read
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(30)
            for _ in range(3):  # bounded: two ApiVersions, then the request the transport was ready to send
                frame = _read_frame(conn)
                if frame is None:
                    return
                header, _ = read_request(frame)
                asked.append((int(header.request_api_key), int(header.request_api_version)))
                if header.request_api_key != API_VERSIONS_KEY:
                    return
                if len(asked) == 1:
                    response = api_versions_response(0, ErrorCode.UNSUPPORTED_VERSION)
                else:
                    response = api_versions_response(int(header.request_api_version))
                conn.sendall(b"".join(response_frame(int(header.correlation_id), response)))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    transport = TcpTransport(f"127.0.0.1:{port}", request_timeout_ms=3_000, metadata_timeout_ms=3_000)
    try:
        with pytest.raises((TransportTimeoutError, ConnectionError, OSError)):
            transport.call(MetadataRequest(topics=None), timeout_ms=3_000)  # the fake never answers Metadata
    finally:
        transport.close()
        server.join(timeout=30)
        listener.close()
    assert asked[:2] == [(API_VERSIONS_KEY, TOP), (API_VERSIONS_KEY, TOP - 1)]
    assert len(asked) == 3 and asked[2][0] != API_VERSIONS_KEY  # ready: it went on past ApiVersions
