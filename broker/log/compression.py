"""The record batch codecs (attributes bits 0-2), all through cramjam: gzip, snappy, lz4, zstd.

Every codec the broker reads is a runtime dependency, so a snappy batch is read like any other.
Snappy comes in two framings: librdkafka sends raw snappy, Java clients xerial's (a magic, two
int32 versions, then blocks of int32 length + raw snappy); both are read. lz4 is the frame format
(Kafka's KafkaLZ4BlockOutputStream writes frames).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Protocol

import cramjam

from .errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: None, GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_I32 = struct.Struct(">i")
Payload = bytes | bytearray | memoryview
"""A batch's compressed records (record_batch.Buffer, which imports this module)."""


class _StreamCodec(Protocol):
    """The part of a cramjam codec module used here (gzip, lz4 frames, zstd)."""

    def compress(self, data: Payload, level: int | None = None, output_len: int | None = None) -> cramjam.Buffer: ...
    def decompress(self, data: Payload, output_len: int | None = None) -> cramjam.Buffer: ...
    def decompress_into(self, input: Payload, output: memoryview) -> int: ...


_STREAMS: dict[int, _StreamCodec] = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}


def compress(codec: int, data: bytes) -> bytes:
    """`data` compressed as a client would (snappy: raw, as librdkafka sends it)."""
    if codec == NONE:
        return bytes(data)
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    return bytes(_stream(codec).compress(data))


def decompress(codec: int, payload: Payload) -> bytes:
    """The inflated payload, unbounded: for batches already validated (stored ones, tools).
    CorruptRecordError when it does not inflate."""
    if codec == NONE:
        return bytes(payload)
    try:
        if codec == SNAPPY:
            if bytes(payload[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
                return bytes(cramjam.snappy.decompress_raw(payload))
            return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in _xerial_blocks(payload))
        return bytes(_stream(codec).decompress(payload))
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"record batch does not decompress: {e}") from e


def decompress_into(codec: int, payload: Payload, out: memoryview) -> int:
    """Inflates `payload` into `out`; returns the size. CorruptRecordError when it does not
    inflate, RecordTooLargeError when it would not fit `out` (a decompression bomb)."""
    try:
        if codec == SNAPPY:
            if bytes(payload[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
                return _raw_snappy_into(payload, out)
            filled = 0
            for block in _xerial_blocks(payload):
                filled += _raw_snappy_into(block, out[filled:])
            return filled
        return _stream(codec).decompress_into(payload, out)
    except cramjam.DecompressionError as e:
        if "whole buffer" in str(e):
            raise RecordTooLargeError(f"record batch inflates beyond {len(out)} bytes") from e
        raise CorruptRecordError(f"record batch does not decompress: {e}") from e


def _stream(codec: int) -> _StreamCodec:
    module = _STREAMS.get(codec)
    if module is None:
        raise InvalidRecordError(f"unknown compression type {codec}")
    return module


def _xerial_blocks(payload: Payload) -> Iterator[Payload]:
    pos, end = _XERIAL_HEADER, len(payload)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (size,) = _I32.unpack_from(payload, pos)
        pos += 4
        if size < 0 or size > end - pos:
            raise CorruptRecordError(f"xerial snappy block of {size} bytes runs past the batch")
        yield payload[pos : pos + size]
        pos += size


def _raw_snappy_into(block: Payload, out: memoryview) -> int:
    if cramjam.snappy.decompress_raw_len(block) > len(out):
        raise RecordTooLargeError(f"record batch inflates beyond {len(out)} bytes")
    return cramjam.snappy.decompress_raw_into(block, out)
