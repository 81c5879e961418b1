"""Kafka's framing over kio (docs/research/kio-evaluation.md): read a request frame into kio's entities, write a
response into a list of chunks, and build kio entities of any version by field name.

kio's classes are generated from Kafka's JSON schemas, one per API, version and entity; its readers are native,
and its entities are written by :mod:`idemcore.net.wire.encoder` (kio's bytes, without kio's per-value checks).
Everything kio-specific stays in this package: the rest of idemcore speaks :mod:`idemcore.net.messages`."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import struct
import sys
import types
import typing
import uuid
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any, TypeVar

from kio.serial import entity_reader
from kio.serial.errors import SerialError

from idemcore.net.wire.encoder import entity_encoder
from idemcore.net.wire.errors import MalformedFrameError, UnsupportedApiError
from idemcore.net.wire.guard import Edits, check_lengths, header_end, response_header_end, without
from idemcore.net.wire.schema import load_request_schema, load_response_schema

#: size, api_key, api_version, correlation_id: the same offsets in every request header version.
REQUEST_HEAD = struct.Struct(">hhi")
SIZE = struct.Struct(">i")
_CORRELATION_ID = struct.Struct(">i")


@cache
def request_codec(api_key: int, version: int) -> tuple[type, Callable, Callable]:
    """The request class of ``api_key`` at ``version``, and readers of its header and body."""
    try:
        cls = load_request_schema(api_key, version)
    except Exception as error:  # kio raises its own UnknownAPIKey / UnknownEntity
        raise UnsupportedApiError(f"no request schema for api key {api_key} version {version}") from error
    return cls, entity_reader(cls.__header_schema__), entity_reader(cls)


@cache
def response_codec(api_key: int, version: int) -> tuple[type, Callable[[int], bytes], Callable]:
    """The response class of ``api_key`` at ``version``, the bytes of its header for a correlation id, and the
    writer of its body."""
    try:
        cls = load_response_schema(api_key, version)
    except Exception as error:
        raise UnsupportedApiError(f"no response schema for api key {api_key} version {version}") from error
    header = cls.__header_schema__
    if [f.name for f in dataclasses.fields(header)] != ["correlation_id"]:  # Kafka's v0 and v1 response headers
        raise UnsupportedApiError(f"response header {header.__module__} has fields beyond the correlation id")
    # v1 (flexible) ends with its tagged fields, of which the schema has none.
    tail = b"\x00" if header.__flexible__ else b""
    return cls, lambda correlation_id: _CORRELATION_ID.pack(correlation_id) + tail, entity_encoder(cls)


def response_class(request: Any) -> type:
    """The response class answering ``request`` (a kio request entity): same API key and version."""
    return response_codec(int(request.__api_key__), int(request.__version__))[0]


def peek_request(frame: bytes | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a request frame (the bytes after its size)."""
    if len(frame) < REQUEST_HEAD.size:
        raise MalformedFrameError(f"a request frame of {len(frame)} bytes is shorter than a request header")
    return REQUEST_HEAD.unpack_from(frame, 0)


def read_request(frame: bytes | memoryview) -> tuple[Any, Any]:
    """``(header, body)`` of a request frame; MalformedFrameError or UnsupportedApiError naming what is wrong."""
    api_key, version, _ = peek_request(frame)
    cls, read_header, read_body = request_codec(api_key, version)
    return _read(cls, version, read_header, read_body, frame, header_end)


def _read(cls: Any, version: int, read_header: Callable, read_body: Callable, frame: bytes | memoryview,
          end_of_header: Callable[[bytes | memoryview, bool, Edits], int]) -> tuple[Any, Any]:
    """Header and body of a request or response frame of ``cls``: every length bounded first (kio's native reader
    reserves what a length declares), then kio's readers; MalformedFrameError naming what is wrong."""
    edits: Edits = []
    check_lengths(cls, frame, end_of_header(frame, bool(getattr(cls.__header_schema__, "__flexible__", False)), edits),
                  edits)
    frame = without(frame, edits)
    try:
        header, used = read_header(frame, 0)
        body, _ = read_body(frame, used)
    except (SerialError, KeyError, ValueError, UnicodeDecodeError, OverflowError) as error:
        raise MalformedFrameError(f"{cls.__name__} v{version}: {type(error).__name__}: {error}"[:300]) from None
    # Bytes after the body are ignored, as Kafka's parser ignores them: librdkafka 2.16 sends Metadata v13 with
    # three (list_topics), and Kafka answers it.
    return header, body


class Chunks(list):
    """A frame as the list of its parts: kio's writers append to it, and big ``records`` are never copied."""

    write = list.append


def response_frame(correlation_id: int, response: Any) -> Chunks:
    """The frame of ``response`` (a kio entity) answering ``correlation_id``: its size first, then its parts."""
    _, header, write_body = response_codec(response.__api_key__, response.__version__)
    out = Chunks([b"", header(correlation_id)])
    write_body(out, response)
    out[0] = SIZE.pack(sum(map(len, out)))
    return out


def request_frame(api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """The frame of a request ``body`` (a kio entity), with its size, as a client sends it."""
    cls, _, _ = request_codec(api_key, version)
    header_cls: Any = cls.__header_schema__  # type: ignore[attr-defined]
    header = make(header_cls, request_api_key=api_key, request_api_version=version,
                  correlation_id=correlation_id, client_id=client_id)
    out: Any = Chunks([b""])
    entity_encoder(header_cls)(out, header)
    entity_encoder(cls)(out, body)
    out[0] = SIZE.pack(sum(map(len, out)))
    return b"".join(out)


def read_response(api_key: int, version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """``(correlation_id, body)`` of a response frame to a request of ``api_key`` at ``version`` (a broker's answer
    is bounded as a client's request is)."""
    cls, read_header, read_body = _response_readers(api_key, version)
    header, body = _read(cls, version, read_header, read_body, frame, response_header_end)
    return header.correlation_id, body


@cache
def _response_readers(api_key: int, version: int) -> tuple[Any, Callable, Callable]:
    cls: Any = load_response_schema(api_key, version)
    return cls, entity_reader(cls.__header_schema__), entity_reader(cls)


# ---------------------------------------------------------------- building entities by field name


@cache
def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """Each field's name, type, and whether it has a default."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default is not dataclasses.MISSING
                  or f.default_factory is not dataclasses.MISSING) for f in dataclasses.fields(cls))


def _zero(kind: Any) -> Any:
    """The value a required field gets when a caller leaves it out: 0, empty, none, or None when nullable."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return None
    if origin is tuple:
        return ()
    if isinstance(kind, type):
        if issubclass(kind, enum.Enum):
            return kind(0)
        if issubclass(kind, datetime.timedelta):
            return kind(datetime.timedelta(0))  # type: ignore[arg-type]  # kio's phantom timedelta types
        if issubclass(kind, bool):
            return False
        if issubclass(kind, int):
            return kind(0)
        if issubclass(kind, str):
            return kind("")
        if issubclass(kind, bytes):
            return kind(b"")
        if issubclass(kind, uuid.UUID):
            return None
        if dataclasses.is_dataclass(kind):
            return make(kind)
    raise TypeError(f"no zero value for a field of type {kind!r}")


def make(cls: type, **values: Any) -> Any:
    """An entity of ``cls`` (one kio class: an API, version and entity) from ``values`` by field name. Names
    this version lacks are ignored, so one call builds every version; required fields left out get their zero
    (:func:`_zero`); an int for a duration (kio's timedelta fields) counts milliseconds."""
    kwargs = {}
    for name, duration, required in _make_plan(cls):
        if name in values:
            value = values[name]
            if duration is not None and type(value) is int:
                value = duration(datetime.timedelta(milliseconds=value))
            kwargs[name] = value
        elif required:
            kwargs[name] = _zero_of(cls, name)
    return cls(**kwargs)


@cache
def _make_plan(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """Each field's name, its duration type (kio's timedelta phantoms) or None, and whether it is required."""
    return tuple((name, kind if isinstance(kind, type) and issubclass(kind, datetime.timedelta) else None,
                  not has_default) for name, kind, has_default in _fields(cls))


@cache
def _zero_of(cls: type, name: str) -> Any:
    """The zero of a required field (kio's entities are frozen: one value serves every entity)."""
    (kind,) = (kind for field_name, kind, _ in _fields(cls) if field_name == name)
    return _zero(kind)


def nested(cls: type, name: str) -> type:
    """The entity class ``name`` next to ``cls`` (e.g. ``PartitionProduceResponse`` of a ProduceResponse)."""
    return getattr(sys.modules[cls.__module__], name)


def optional_str(value: Any) -> str | None:
    """A kio nullable string as a ``str`` (None stays None)."""
    return None if value is None else str(value)


def millis(value: datetime.timedelta | int | None) -> int:
    """A kio duration (``timedelta``) as milliseconds."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value / _ONE_MS)
    return int(value)


_ONE_MS = datetime.timedelta(milliseconds=1)


_Item = TypeVar("_Item")


def group_by_topic(pairs: Iterable[tuple[str, _Item]]) -> dict[str, list[_Item]]:
    """``(topic, item)`` pairs grouped by topic, in first-seen order (Kafka's messages nest partitions in topics)."""
    out: dict[str, list[_Item]] = {}
    for topic, item in pairs:
        out.setdefault(topic, []).append(item)
    return out
