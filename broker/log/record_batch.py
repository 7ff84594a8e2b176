"""The v2 record batch as bytes: header layout, validation, in-place offset assignment.

The hot path only ever touches the 61-byte header and runs one CRC32C per batch; records are
never decoded there. `build_batch` / `decode_records` (pure Python) exist for tests, tools and the
one timestamp lookup that has to look inside a single uncompressed batch.
"""

import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from crc32c import crc32c

from odradek.common.clock import Clock, now_ms

from .compression import CODEC_NAMES, compress, decompress
from .errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
Buffer = bytes | bytearray | memoryview
"""What the batch functions read: a request's frame, a file read, or a view into either."""

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC = 2

BASE_OFFSET_POS = 0
LENGTH_POS = 8
LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21  # the CRC covers attributes .. end of batch
MAX_TIMESTAMP_POS = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 1 = LogAppendTime
CONTROL_MASK = 0x20
COMPRESSION_CODECS = CODEC_NAMES

NO_TIMESTAMP = -1

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class BatchInfo(NamedTuple):
    """A batch's header fields and where it sits in its buffer or file."""

    position: int
    size: int  # whole batch, LOG_OVERHEAD included
    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    records_count: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1

    @property
    def last_sequence(self) -> int:
        """The sequence of the batch's last record; sequences wrap at 2^31-1 (Kafka's rule)."""
        if self.base_sequence < 0:
            return self.base_sequence
        if self.base_sequence > 2**31 - 1 - self.last_offset_delta:
            return self.last_offset_delta - (2**31 - 1 - self.base_sequence) - 1
        return self.base_sequence + self.last_offset_delta

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)


def check_batch(buf: Buffer, pos: int, end: int, *, verify_crc: bool = True) -> BatchInfo | None:
    """Parse and check the batch at `pos` in `buf[:end]`.

    Returns None when the bytes end before the batch does (a partial tail); raises
    CorruptRecordError / InvalidRecordError for a batch that is whole but wrong.
    """
    if end - pos < LOG_OVERHEAD:
        return None
    batch_length = _I32.unpack_from(buf, pos + LENGTH_POS)[0]
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch length {batch_length} at position {pos} is below the minimum {MIN_BATCH_LENGTH}"
        )
    size = batch_length + LOG_OVERHEAD
    if size > end - pos:
        return None
    (base_offset, _, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid, p_epoch, seq, count) = (
        HEADER.unpack_from(buf, pos)
    )
    check_header(pos, magic, last_delta, count)
    if verify_crc and crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : pos + size]) != crc:
        raise CorruptRecordError(f"record batch at position {pos} (base offset {base_offset}) fails its CRC32C")
    return BatchInfo(pos, size, base_offset, epoch, attributes, last_delta, base_ts, max_ts, count, pid, p_epoch, seq)


def check_header(pos: int, magic: int, last_delta: int, count: int) -> None:
    """A stored or replicated batch may hold fewer records than its offset range (compaction keeps
    lastOffsetDelta and may empty a producer's last batch); a client's must fill it
    (log_validator)."""
    if magic != MAGIC:
        raise InvalidRecordError(f"record batch at position {pos} has magic {magic}, only v2 (magic 2) is supported")
    if last_delta < 0 or not 0 <= count <= last_delta + 1:
        raise InvalidRecordError(
            f"record batch at position {pos} has {count} records but lastOffsetDelta {last_delta}"
        )


def read_header(buf: Buffer, pos: int, file_position: int) -> BatchInfo:
    """The header at `buf[pos:]` (61 bytes needed), checked but without CRC; positioned at `file_position`."""
    (base_offset, length, epoch, magic, _, attributes, last_delta, base_ts, max_ts, pid, p_epoch, seq, count) = (
        HEADER.unpack_from(buf, pos)
    )
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {length} at position {file_position} is below the minimum")
    check_header(file_position, magic, last_delta, count)
    return BatchInfo(
        file_position, length + LOG_OVERHEAD, base_offset, epoch, attributes, last_delta, base_ts, max_ts, count,
        pid, p_epoch, seq,
    )


def validate_batches(
    buf: Buffer,
    *,
    max_batch_bytes: int | None = None,
    allow_partial_tail: bool = False,
) -> list[BatchInfo]:
    """Check every batch's framing, header and CRC in `buf` (a leader then checks a client's
    records too: log_validator). Clients must send whole batches; a replica fetch may end in a partial batch, which is dropped
    (`allow_partial_tail`). Raises on the first bad batch, so an append is all or nothing.
    """
    end = len(buf)
    pos = 0
    batches: list[BatchInfo] = []
    while pos < end:
        info = check_batch(buf, pos, end)
        if info is None:
            if allow_partial_tail:
                break
            raise CorruptRecordError(f"record batch at position {pos} is truncated ({end - pos} bytes left)")
        if max_batch_bytes is not None and info.size > max_batch_bytes:
            raise RecordTooLargeError(
                f"record batch of {info.size} bytes exceeds max.message.bytes {max_batch_bytes}"
            )
        if info.attributes & COMPRESSION_MASK > 4:
            raise InvalidRecordError(f"record batch at position {pos} has unknown compression type")
        batches.append(info)
        pos += info.size
    return batches


def assign_offset(buf: Buffer, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch in place (outside the CRC range)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)
    _I32.pack_into(buf, pos + LEADER_EPOCH_POS, leader_epoch)


def set_log_append_time(buf: Buffer, pos: int, size: int, now_ms: int) -> None:
    """Mark a batch LogAppendTime with maxTimestamp = now, then recompute its CRC."""
    attributes = _I16.unpack_from(buf, pos + ATTRIBUTES_POS)[0] | TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + ATTRIBUTES_POS, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_POS, now_ms)
    _U32.pack_into(buf, pos + CRC_POS, crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : pos + size]))


def iter_batches(buf: Buffer, *, verify_crc: bool = True) -> Iterator[BatchInfo]:
    """Whole batches in `buf`, stopping at a partial tail."""
    pos, end = 0, len(buf)
    while True:
        info = check_batch(buf, pos, end, verify_crc=verify_crc)
        if info is None:
            return
        yield info
        pos += info.size


# --- records (pure Python; never on the hot path) -------------------------------------------


def _write_varint(out: bytearray, value: int) -> None:
    value = (value << 1) ^ (value >> 63)  # zigzag
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def build_batch(
    records: Sequence[bytes | tuple[Any, ...]],
    base_offset: int = 0,
    *,
    compression: str | None = None,
    base_timestamp: int | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    clock: Clock = now_ms,
) -> bytes:
    """Encode one v2 batch. `records`: values (bytes) or tuples (key, value[, headers[, timestamp_ms]]).
    Without `base_timestamp`, the batch is stamped with `clock`'s time.

    For tests and tools, and the coordinators' own records (which pass their clock's time).
    """
    if base_timestamp is None:
        base_timestamp = clock()
    body = bytearray()
    max_ts = base_timestamp
    for delta, item in enumerate(records):
        if not isinstance(item, tuple):
            item = (None, item)
        key, value = item[0], item[1]
        headers = item[2] if len(item) > 2 else ()
        ts = item[3] if len(item) > 3 and item[3] is not None else base_timestamp
        max_ts = max(max_ts, ts)
        rec = bytearray(b"\x00")
        _write_varint(rec, ts - base_timestamp)
        _write_varint(rec, delta)
        _write_bytes(rec, key)
        _write_bytes(rec, value)
        _write_varint(rec, len(headers))
        for hkey, hvalue in headers:
            _write_bytes(rec, hkey.encode() if isinstance(hkey, str) else hkey)
            _write_bytes(rec, hvalue)
        _write_varint(body, len(rec))
        body += rec
    count = len(records)
    if count == 0:
        raise ValueError("a record batch holds at least one record")
    codec = {v: k for k, v in COMPRESSION_CODECS.items()}[compression]
    payload = compress(codec, bytes(body))
    attributes = (attributes & ~COMPRESSION_MASK) | codec
    out = bytearray(HEADER_SIZE) + payload
    HEADER.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0, attributes,
        count - 1, base_timestamp, max_ts, producer_id, producer_epoch, base_sequence, count,
    )
    _U32.pack_into(out, CRC_POS, crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return bytes(out)


def decode_records(batch: Buffer) -> list[Record]:
    """All records of one batch, whatever its codec. For tests, tools and timestamp lookups."""
    info = check_batch(batch, 0, len(batch))
    if info is None:
        raise CorruptRecordError("partial batch")
    data = decompress(info.compression, memoryview(batch)[HEADER_SIZE : info.size])
    out, pos = [], 0
    for _ in range(info.records_count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        pos += 1  # attributes
        ts_delta, pos = _read_varint(data, pos)
        offset_delta, pos = _read_varint(data, pos)
        fields = []
        for _field in range(2):
            n, pos = _read_varint(data, pos)
            fields.append(None if n < 0 else bytes(data[pos : pos + n]))
            pos += max(n, 0)
        n_headers, pos = _read_varint(data, pos)
        headers = []
        for _h in range(n_headers):
            n, pos = _read_varint(data, pos)
            hkey = bytes(data[pos : pos + n]).decode()
            pos += n
            n, pos = _read_varint(data, pos)
            headers.append((hkey, None if n < 0 else bytes(data[pos : pos + n])))
            pos += max(n, 0)
        if pos != end:
            raise CorruptRecordError("record length does not match its fields")
        ts = info.max_timestamp if info.is_log_append_time else info.base_timestamp + ts_delta
        out.append(Record(info.base_offset + offset_delta, ts, fields[0], fields[1], headers))
    return out


def record_timestamps(batch: Buffer) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of one uncompressed batch, reading only the record prefixes."""
    info = check_batch(batch, 0, len(batch), verify_crc=False)
    if info is None or info.compression:
        raise ValueError("record_timestamps needs one whole uncompressed batch")
    out, pos = [], HEADER_SIZE
    for _ in range(info.records_count):
        length, body = _read_varint(batch, pos)
        ts_delta, p = _read_varint(batch, body + 1)
        offset_delta, _ = _read_varint(batch, p)
        out.append((info.base_offset + offset_delta, info.base_timestamp + ts_delta))
        pos = body + length
    return out
