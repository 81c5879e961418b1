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

import cramjam

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


def decompress(codec: Compression | int, data: bytes | bytearray | memoryview) -> bytes:
    """The records section ``data`` decompressed. Raises CorruptRecordError (one line) when it does not."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return _snappy_decode(memoryview(data))
        if codec == Compression.LZ4:
            _check_lz4_frame(memoryview(data))
            return bytes(cramjam.lz4.decompress(data))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        reason = " ".join(str(exc).split())  # one line
        raise CorruptRecordError(f"{Compression(codec).name.lower()} data does not decompress: {reason}") from None
    raise CorruptRecordError(f"unknown compression codec {codec} (attributes bits 0-2 allow 0-4)")


def _xerial_snappy(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE])
        out += _BLOCK_LENGTH.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decode(view: memoryview) -> bytes:
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))  # plain snappy, as SnappyInputStream accepts it
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
        out += cramjam.snappy.decompress_raw(view[pos:pos + length])
        pos += length
    return bytes(out)


def _check_lz4_frame(view: memoryview) -> None:
    if len(view) >= 5 and bytes(view[:4]) == LZ4_MAGIC and not view[4] & _LZ4_BLOCK_INDEPENDENCE:
        raise CorruptRecordError(f"lz4 frame flags {view[4]:#04x} link its blocks, which Kafka does not read "
                                 "(block independence bit 0x20 clear)")
