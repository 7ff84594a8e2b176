"""Produce (api 0) wire pieces written by hand: the response, and the pre-v3 request.

The response is small but frequent, and kio's writer is slow; it is written field by field here
(Kafka's ProduceResponse.json: responses[name, partition_responses[index, error_code, base_offset,
v2+ log_append_time_ms, v5+ log_start_offset, v8+ record_errors, error_message, v10+ tagged
current_leader]], v1+ throttle_time_ms, v10+ tagged node_endpoints; v9+ flexible). KIP-951 (v10):
a partition answered NOT_LEADER_OR_FOLLOWER names the leader the broker knows, and the response
carries that leader's endpoint, so the client skips a Metadata round trip. v11 only adds the
TRANSACTION_ABORTABLE error (transaction version 2), which this broker never sends.

Produce v0–v2 carry message sets of format v0/v1, which kio cannot read: `parse_legacy_request`
reads the request, and broker/log/legacy_records up-converts each set to a v2 batch (as Kafka
3.x does), so they are served like v3 requests (librdkafka also wants Produce 0 advertised to
enable compression).

Produce v3–v11 requests are read by hand too (`decode_request`, the shape of Kafka's
ProduceRequest.json): kio copies every partition's records into a new bytes object and builds a
dataclass per field; here each partition's records are a view of the request frame. When the
frame is writable (the socket server's own buffer of a large request), the log assigns offsets in
that buffer and writes it out: the records are copied once, into the page cache.
"""

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.broker.replica_manager import ProduceResult
from odradek.common import message_bounds, wire
from odradek.common.api_key import ApiKey
from odradek.common.network.encoding import BodyWriter, Chunk, node_endpoints

MIN_VERSION = 0
LEGACY_VERSIONS = (0, 1, 2)
"""Message format v0/v1 (see above)."""
MAX_VERSION = 11
"""Kafka 3.9's."""
DECODED_VERSIONS = range(3, MAX_VERSION + 1)
"""The versions `decode_request` reads (v9+ flexible)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_INDEX_SIZE = struct.Struct(">ii")
_ATTRIBUTES_POS = 21
_TRANSACTIONAL = 0x10


def is_transactional(records: bytes | None) -> bool:
    """Whether the first batch of a partition's records has the transactional bit (Kafka looks at
    the first batch too: a v3+ produce carries one batch per partition)."""
    return records is not None and len(records) > _ATTRIBUTES_POS + 1 and bool(
        _I16.unpack_from(records, _ATTRIBUTES_POS)[0] & _TRANSACTIONAL)


def encode_produce_response(
    version: int, topics: Sequence[tuple[str, Sequence[tuple[int, ProduceResult]]]],
    leaders: Mapping[tuple[str, int], tuple[int, int]] | None = None,
    endpoints: Sequence[tuple[int, str, int, str | None]] = (), throttle_ms: int = 0,
) -> tuple[list[Chunk], int]:
    """(chunks, size) of a ProduceResponse body; `topics` = [(name, [(index, ProduceResult)])].

    v10+: `leaders` = {(topic, index): (leader id, leader epoch)} of the partitions answered
    NOT_LEADER_OR_FOLLOWER, `endpoints` = [(node id, host, port, rack)] of those leaders."""
    w = BodyWriter(flexible=version >= 9)
    leaders = leaders if version >= 10 and leaders else {}
    w.array(len(topics))
    for name, partitions in topics:
        w.string(name)
        w.array(len(partitions))
        for index, r in partitions:
            w.int32(index)
            w.int16(int(r.error))
            w.int64(r.base_offset)
            if version >= 2:
                w.int64(r.log_append_time)
            if version >= 5:
                w.int64(r.log_start_offset)
            if version >= 8:
                w.array(len(r.record_errors))
                for batch_index, message in r.record_errors:
                    w.int32(batch_index)
                    w.string(message)
                    w.tags()
                w.string(r.error_message)
            leader = leaders.get((name, index))
            if leader is None:
                w.tags()
            else:
                hint = BodyWriter(flexible=True)
                hint.int32(leader[0])
                hint.int32(leader[1])
                hint.tags()
                w.tagged([(0, hint.take())])  # current_leader
        w.tags()
    if version >= 1:
        w.int32(throttle_ms)  # throttle_time_ms (a client quota, KIP-219)
    if version >= 10 and endpoints:
        w.tagged([(0, node_endpoints(endpoints))])
    else:
        w.tags()
    return w.chunks(), w.size


def parse_legacy_request(frame: bytes | bytearray | memoryview) -> tuple[int, int, list[tuple[str, list[tuple[int, bytes]]]]]:
    """(acks, timeout ms, [(topic, [(partition, message set)])]) of a Produce v0–v2 request frame
    (header v1 included; the message sets are magic 0/1, still to be converted).

    Raises ValueError when the frame is not a well-formed request.
    """
    try:
        pos = 8
        (client_len,) = _I16.unpack_from(frame, pos)
        pos += 2 + max(0, client_len)
        (acks,) = _I16.unpack_from(frame, pos)
        (timeout,) = _I32.unpack_from(frame, pos + 2)
        pos += 2 + 4  # acks, timeout
        (n_topics,) = _I32.unpack_from(frame, pos)
        pos += 4
        if n_topics < 0 or n_topics > len(frame):
            raise ValueError("bad topic count")
        topics = []
        for _ in range(n_topics):
            (name_len,) = _I16.unpack_from(frame, pos)
            pos += 2
            if name_len < 0 or pos + name_len > len(frame):
                raise ValueError("bad topic name")
            name = bytes(frame[pos : pos + name_len]).decode()
            pos += name_len
            (n_parts,) = _I32.unpack_from(frame, pos)
            pos += 4
            if n_parts < 0 or n_parts > len(frame):
                raise ValueError("bad partition count")
            parts = []
            for _ in range(n_parts):
                (index,) = _I32.unpack_from(frame, pos)
                (size,) = _I32.unpack_from(frame, pos + 4)
                pos += 8
                if pos + max(0, size) > len(frame):
                    raise ValueError("records run past the frame")
                parts.append((index, bytes(frame[pos : pos + max(0, size)])))
                pos += max(0, size)
            topics.append((name, parts))
        if pos != len(frame):
            raise ValueError("trailing bytes after the request")
        return acks, timeout, topics
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"malformed produce request: {e}") from e


# --- Produce v3–v11 requests, read by hand -------------------------------------------------------


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None
    """A view of the request frame (writable if the frame is)."""


@dataclass(slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(slots=True)
class ProduceRequest:
    """What handle_produce reads of a request, under kio's field names (error_response mirrors
    them into a kio response the same way)."""

    version: int
    transactional_id: str | None
    acks: int
    timeout: int
    """timeout_ms."""
    topic_data: tuple[TopicProduceData, ...]

    __api_key__ = ApiKey.PRODUCE

    @property
    def __version__(self) -> int:
        return self.version


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[Any, ProduceRequest, Any]:
    """(header, request, kio's schema) of a Produce v3–v11 frame body (without its size prefix).

    Raises ValueError when the frame is not a well-formed request (the connection is closed, as
    for a request kio cannot read). Unknown tagged fields are skipped, as Kafka skips them.
    """
    version = _I16.unpack_from(frame, 2)[0] if len(frame) >= 4 else -1
    if version not in DECODED_VERSIONS:
        raise ValueError(f"Produce v{version} is not read here")
    schema = wire.request_schema(ApiKey.PRODUCE, version)
    flexible = version >= 9
    try:
        header, pos = wire.read_request_header(frame, flexible)
        request, end = _read_body(memoryview(frame), pos, version, flexible)
    except (struct.error, IndexError, UnicodeDecodeError, message_bounds.MalformedMessage) as e:
        raise ValueError(f"malformed ProduceRequest v{version}: {e}") from e
    if end != len(frame):
        raise ValueError(f"malformed ProduceRequest v{version}: {len(frame) - end} bytes after the request")
    return header, request, schema


def _read_body(view: memoryview, pos: int, version: int, flexible: bool) -> tuple[ProduceRequest, int]:
    end = len(view)
    n, pos = _length(view, pos, flexible, False)
    transactional_id = None if n < 0 else _text(view, pos, n)
    pos += max(0, n)
    acks, timeout = _ACKS_TIMEOUT.unpack_from(view, pos)
    pos += 6
    n_topics, pos = _count(view, pos, flexible)
    topics = []
    for _ in range(n_topics):
        n, pos = _length(view, pos, flexible, False)
        if n < 0:
            raise message_bounds.MalformedMessage("null topic name")
        name = _text(view, pos, n)
        pos += n
        n_parts, pos = _count(view, pos, flexible)
        parts = []
        for _ in range(n_parts):
            if flexible:
                index = _I32.unpack_from(view, pos)[0]
                size, pos = _length(view, pos + 4, True, True)
            else:  # index and records size in one read: this loop is the hot part of a produce
                index, size = _INDEX_SIZE.unpack_from(view, pos)
                pos += 8
            if size < 0:
                records = None
            else:
                if pos + size > end:
                    raise message_bounds.MalformedMessage("records run past the frame")
                records = view[pos : pos + size]
                pos += size
            if flexible:
                pos = _skip_tags(view, pos)
            parts.append(PartitionProduceData(index, records))
        if flexible:
            pos = _skip_tags(view, pos)
        topics.append(TopicProduceData(name, tuple(parts)))
    if flexible:
        pos = _skip_tags(view, pos)
    return ProduceRequest(version, transactional_id, acks, timeout, tuple(topics)), pos


def _text(view: memoryview, pos: int, n: int) -> str:
    if n < 0 or pos + n > len(view):
        raise message_bounds.MalformedMessage("string runs past the frame")
    return str(view[pos : pos + n], "utf-8")


def _length(view: memoryview, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length as the Produce schema writes it, -1 or less for null: compact (unsigned varint of
    length + 1) when flexible, else int32 when `wide` (records, arrays), else int16 (strings)."""
    if flexible:
        byte = view[pos]
        if byte < 0x80:  # one byte, no second call: names, array lengths, small records
            return byte - 1, pos + 1
        n, pos = _uvarint(view, pos)
        return n - 1, pos
    if wide:
        return _I32.unpack_from(view, pos)[0], pos + 4
    return _I16.unpack_from(view, pos)[0], pos + 2


def _count(view: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length: not null, and no more elements than bytes left (each takes at least one)."""
    n, pos = _length(view, pos, flexible, True)
    if n < 0 or n > len(view) - pos:
        raise message_bounds.MalformedMessage(f"array length {n} at {pos}")
    return n, pos


def _uvarint(view: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes: a 32-bit length)."""
    value = shift = 0
    while True:
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise message_bounds.MalformedMessage("varint too long")


def _skip_tags(view: memoryview, pos: int) -> int:
    """Skips a tagged-field section (ProduceRequest defines no tagged fields)."""
    if view[pos] == 0:  # empty, as every client sends it: one per partition, so no varint call
        return pos + 1
    n, pos = _uvarint(view, pos)
    for _ in range(n):
        _tag, pos = _uvarint(view, pos)
        size, pos = _uvarint(view, pos)
        pos += size
        if pos > len(view):
            raise message_bounds.MalformedMessage("tagged field runs past the frame")
    return pos
