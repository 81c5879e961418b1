"""kio glue: parse a request frame, serialise a response frame (sketch of idemcore/net/wire.py)."""
from __future__ import annotations

import io
import struct
from functools import cache

from kio.index import load_request_schema, load_response_schema, UnknownAPIKey, UnknownEntity
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

_HDR = struct.Struct(">hhi")  # api_key, api_version, correlation_id (common prefix of header v1/v2)


class UnsupportedRequest(Exception):
    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"api_key {api_key} version {api_version} (correlation {correlation_id})")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


@cache
def request_codec(api_key: int, version: int):
    cls = load_request_schema(api_key, version)
    return cls, entity_reader(cls.__header_schema__), entity_reader(cls)


@cache
def response_codec(api_key: int, version: int):
    cls = load_response_schema(api_key, version)
    return cls, entity_writer(cls.__header_schema__), entity_writer(cls)


def parse_request(frame: bytes | memoryview):
    """frame: the bytes after the 4-byte size prefix. Returns (header, request)."""
    api_key, api_version, correlation_id = _HDR.unpack_from(frame, 0)
    try:
        cls, read_header, read_body = request_codec(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedRequest(api_key, api_version, correlation_id) from None
    header, n = read_header(frame, 0)          # v1 (legacy client_id) or v2 (+ tagged fields)
    body, m = read_body(frame, n)
    if n + m != len(frame):
        raise ValueError(f"{cls.__name__}: {len(frame) - n - m} trailing bytes")
    return header, body


def encode_response(correlation_id: int, response) -> bytes:
    """Size-prefixed frame: response header (v0, or v1 with tagged fields for flexible versions) + body."""
    _, write_header, write_body = response_codec(response.__api_key__, response.__version__)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, response.__header_schema__(correlation_id=i32(correlation_id)))
    write_body(buf, response)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def encode_request(correlation_id: int, request, client_id: str | None = "kio") -> bytes:
    """Client side (for tests): size-prefixed request frame."""
    cls = type(request)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(cls.__header_schema__)(buf, cls.__header_schema__(
        request_api_key=cls.__api_key__, request_api_version=cls.__version__,
        correlation_id=i32(correlation_id), client_id=client_id))
    entity_writer(cls)(buf, request)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)
