"""The records section's compression, as Kafka writes and reads it, through ``cramjam`` (no codec here).

What Kafka (``org.apache.kafka.common.compress``) writes, and what it accepts:

- gzip: a gzip stream (``GZIPOutputStream``); reading accepts concatenated members.
- snappy: xerial snappy-java's ``SnappyOutputStream`` framing: the 16-byte header ``0x82 "SNAPPY" 0x00``,
  version 1, compatible version 1 (int32 big-endian each), then blocks of ``int32 big-endian length`` +
  raw snappy, each block at most 32 KiB uncompressed. ``SnappyInputStream`` also reads a plain raw snappy
  stream (what sarama writes) when the header is absent; idemcore does too. Kafka ignores the version
  fields beyond "at least 1" and so does idemcore (some writers put them little-endian).
- lz4: the LZ4 frame format with independent blocks (Kafka refuses frames with linked blocks: "Dependent
  block stream is unsupported"), 64 KiB blocks when Kafka writes, no content checksum written; block
  checksums, a content size and a content checksum are read.
- zstd: a zstd frame (zstd-jni streams); reading accepts concatenated frames.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Any

import cramjam
import numpy as np

from idemcore.record.v2.errors import CorruptRecordError


class Compression(enum.IntEnum):
    """Bits 0-2 of a batch's attributes (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


#: Levels as Kafka's defaults (KIP-390): gzip 6 (Deflater's default), lz4 9, zstd 3.
GZIP_LEVEL = 6
LZ4_LEVEL = 9
ZSTD_LEVEL = 3

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default block size
_BLOCK_LENGTH = struct.Struct(">i")
LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_INDEPENDENCE = 0x20


def compress(codec: Compression | int, data: bytes | bytearray | memoryview) -> bytes:
    """The records section ``data`` compressed as Kafka's producer does with ``codec``."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL))
    if codec == Compression.SNAPPY:
        return _xerial_snappy(data)
    if codec == Compression.LZ4:
        # The module-level cramjam.lz4.compress links blocks, which Kafka refuses: use a frame compressor.
        compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False, block_linked=False)
        compressor.compress(bytes(data))  # the frame compressor takes bytes only
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise ValueError(f"unknown compression codec {codec!r}; expected one of 0-4 (none, gzip, snappy, lz4, zstd)")


#: The most bytes one batch's records may decompress to. A few KB of zeros compress 1 GiB (a compression bomb):
#: without a bound one small produce request makes the reader allocate gigabytes. Kafka streams records one by
#: one; here the whole section is decompressed into a buffer of this size at most (reserved, only touched as
#: written), and a batch needing more is refused as corrupt.
MAX_DECOMPRESSED_BYTES = 1 << 28


def decompress(codec: Compression | int, data: bytes | bytearray | memoryview, limit: int | None = None) -> bytes:
    """The records section ``data`` decompressed, at most ``limit`` bytes (default MAX_DECOMPRESSED_BYTES).
    Raises CorruptRecordError (one line) when it does not decompress or would take more."""
    if limit is None:
        limit = MAX_DECOMPRESSED_BYTES
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return _bounded(cramjam.gzip.decompress_into, data, limit)
        if codec == Compression.SNAPPY:
            return _snappy_decode(memoryview(data), limit)
        if codec == Compression.LZ4:
            _check_lz4_frame(memoryview(data))
            return _bounded(cramjam.lz4.decompress_into, data, limit)
        if codec == Compression.ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, limit)
    except cramjam.DecompressionError as exc:
        reason = " ".join(str(exc).split())  # one line
        if "failed to write whole buffer" in reason:
            reason = f"it takes more than the {limit:,} bytes a batch may decompress to"
        raise CorruptRecordError(f"{Compression(codec).name.lower()} data does not decompress: {reason}") from None
    raise CorruptRecordError(f"unknown compression codec {codec} (attributes bits 0-2 allow 0-4)")


def _bounded(decompress_into: Callable[[Any, Any], int], data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """Decompress into buffers growing 8x from 8x the input, up to ``limit``: a normal batch takes one try, a
    bomb stops at the limit (numpy's uninitialised buffers: nothing is written but the output)."""
    size = min(limit + 1, max(1 << 16, 8 * len(data)))
    while True:
        out = np.empty(size, dtype=np.uint8)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "failed to write whole buffer" not in str(exc) or size > limit:
                raise
            size = min(limit + 1, size * 8)
            continue
        if written < size:  # filled exactly: it may have been cut, so try a larger buffer
            return out[:written].tobytes()
        if size > limit:
            raise cramjam.DecompressionError("failed to write whole buffer")
        size = min(limit + 1, size * 8)


def _raw_snappy_length(view: memoryview) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    value = shift = 0
    for pos in range(min(5, len(view))):
        value |= (view[pos] & 0x7F) << shift
        if view[pos] < 0x80:
            return value
        shift += 7
    raise CorruptRecordError("a snappy block's length varint is cut off or longer than 5 bytes")


def _xerial_snappy(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE])
        out += _BLOCK_LENGTH.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decode(view: memoryview, limit: int) -> bytes:
    if bytes(view[:8]) != XERIAL_MAGIC:  # plain snappy, as SnappyInputStream accepts it
        if _raw_snappy_length(view) > limit:
            raise cramjam.DecompressionError("failed to write whole buffer")
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError(f"snappy data ends inside its {len(XERIAL_HEADER)}-byte xerial header "
                                 f"({len(view)} bytes)")
    out = bytearray()
    pos = len(XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"snappy block length cut off at byte {pos} of {end}")
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(f"snappy block length {length} at byte {pos - 4} runs past the end ({end} bytes)")
        if len(out) + _raw_snappy_length(view[pos:pos + length]) > limit:  # declared before it is allocated
            raise cramjam.DecompressionError("failed to write whole buffer")
        out += cramjam.snappy.decompress_raw(view[pos:pos + length])
        pos += length
    return bytes(out)


def _check_lz4_frame(view: memoryview) -> None:
    if len(view) >= 5 and bytes(view[:4]) == LZ4_MAGIC and not view[4] & _LZ4_BLOCK_INDEPENDENCE:
        raise CorruptRecordError(f"lz4 frame flags {view[4]:#04x} link its blocks, which Kafka does not read "
                                 "(block independence bit 0x20 clear)")
