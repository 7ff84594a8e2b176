"""Message formats v0 and v1 (Kafka's LegacyRecord), for the clients of Produce v0-v2 and Fetch v0-v3.

The log holds v2 batches only, as Kafka 3.x's does. Produce v0-v2 carry message sets of magic 0 or
1: each message is checked (CRC32, lengths) and the set is up-converted to one v2 batch (Kafka's
LogValidator.convertAndAssignOffsets*), compressed with the set's codec. Fetch v0-v3 readers get
the v2 batches down-converted (Kafka's down-conversion): magic 0 for Fetch v0-v1, magic 1 for
v2-v3, one uncompressed message per record, control batches left out; headers, which the old
formats cannot carry, are dropped.

A message set: [offset int64, size int32, crc uint32, magic int8, attributes int8, v1: timestamp
int64, key bytes, value bytes]...; a compressed message's value is a nested message set.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from . import compression
from .errors import CorruptRecordError, InvalidRecordError
from .record_batch import HEADER, LOG_OVERHEAD, Buffer, build_batch, decode_records

_ENTRY = struct.Struct(">qi")  # offset, message size
_MESSAGE_HEAD = struct.Struct(">IBb")  # crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
NO_TIMESTAMP = -1
TIMESTAMP_TYPE_MASK = 0x08
MAX_NESTED_BYTES = 64 * 1024 * 1024
"""An inflated wrapper may be at most this large (a decompression bomb otherwise)."""


def _bytes_field(data: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    view = memoryview(data)
    if pos + 4 > end:
        raise CorruptRecordError("message field runs past the message")
    (n,) = _I32.unpack_from(view, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError("message field runs past the message")
    return bytes(view[pos : pos + n]), pos + n


def _messages(data: Buffer, depth: int = 0) -> Iterator[tuple[int, int, int, bytes | None, bytes | None]]:
    """(magic, attributes, timestamp, key, value) of each message of a set, wrappers inflated."""
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        if pos + _ENTRY.size > end:
            raise CorruptRecordError("message set ends inside a message header")
        _offset, size = _ENTRY.unpack_from(view, pos)
        pos += _ENTRY.size
        if size < _MESSAGE_HEAD.size + 8 or pos + size > end:
            raise CorruptRecordError("message size runs past the message set")
        body_end = pos + size
        crc, magic, attributes = _MESSAGE_HEAD.unpack_from(view, pos)
        if zlib.crc32(view[pos + 4 : body_end]) != crc:
            raise CorruptRecordError("message CRC mismatch")
        if magic not in (0, 1):
            raise InvalidRecordError(f"message magic {magic} in a v0/v1 message set")
        p = pos + _MESSAGE_HEAD.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            if p + 8 > body_end:
                raise CorruptRecordError("message too short for its timestamp")
            (timestamp,) = _I64.unpack_from(view, p)
            p += 8
        key, p = _bytes_field(view, p, body_end)
        value, p = _bytes_field(view, p, body_end)
        if p != body_end:
            raise CorruptRecordError("message fields do not fill the message")
        codec = attributes & 0x07
        if codec:
            if depth or value is None:
                raise InvalidRecordError("a compressed message must wrap a message set")
            if codec not in compression.CODEC_NAMES or codec == compression.ZSTD:
                raise InvalidRecordError(f"unknown compression codec {codec} for magic {magic}")
            inner = compression.decompress(codec, value)
            if len(inner) > MAX_NESTED_BYTES:
                raise InvalidRecordError("a compressed message inflates too far")
            for m, a, ts, k, v in _messages(inner, depth + 1):
                # v1 wrappers with LogAppendTime stamp their messages; v0 ones have no time
                yield m, a | (attributes & TIMESTAMP_TYPE_MASK), timestamp if attributes & TIMESTAMP_TYPE_MASK else ts, k, v
        else:
            yield magic, attributes, timestamp, key, value
        pos = body_end


def up_convert(message_set: Buffer) -> bytes:
    """One v2 batch holding the messages of a magic 0/1 message set, in order, compressed with the
    set's (first wrapper's) codec. CorruptRecordError for a bad CRC or length, InvalidRecordError
    for anything else a v2 batch could not say; ValueError for an empty set."""
    records: list[tuple[bytes | None, bytes | None, tuple[()], int]] = []
    codec = compression.NONE
    view = memoryview(message_set)
    if len(view) >= _ENTRY.size + _MESSAGE_HEAD.size:
        codec = view[_ENTRY.size + 5] & 0x07
    for _magic, _attributes, timestamp, key, value in _messages(message_set):
        records.append((key, value, (), timestamp))
    if not records:
        raise InvalidRecordError("an empty message set")
    base = min((r[3] for r in records if r[3] >= 0), default=NO_TIMESTAMP)
    codec_name = compression.CODEC_NAMES.get(codec)
    return build_batch(records, compression=codec_name, base_timestamp=base)


def _message(offset: int, magic: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(struct.pack(">Bb", magic, 0))
    if magic == 1:
        body += _I64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(field)) + field
    crc = zlib.crc32(body)
    message = struct.pack(">I", crc) + bytes(body)
    return _ENTRY.pack(offset, len(message)) + message


def down_convert(batches: Buffer, magic: int, fetch_offset: int = 0) -> bytes:
    """The records of whole v2 batches as a magic 0/1 message set (records below `fetch_offset`
    and control batches left out; a partial batch at the end is dropped, as a reader would)."""
    view = memoryview(batches)
    out = bytearray()
    pos = 0
    while pos + LOG_OVERHEAD <= len(view):
        (length,) = _I32.unpack_from(view, pos + 8)
        size = LOG_OVERHEAD + length
        if length <= 0 or pos + size > len(view):
            break
        header = HEADER.unpack_from(view, pos)
        attributes = header[5]
        if not attributes & 0x20:  # control batches (transaction markers) are not messages
            for r in decode_records(view[pos : pos + size]):
                if r.offset >= fetch_offset:
                    out += _message(r.offset, magic, r.timestamp if magic == 1 else NO_TIMESTAMP, r.key, r.value)
        pos += size
    return bytes(out)
