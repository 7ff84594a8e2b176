"""Hand encoding of response bodies into chunks: bytes for the fields, file regions for records.

kio's writer is pure Python and builds the whole body in memory; the hot responses (Produce, Fetch)
are written here field by field instead, so record data never passes through Python: a `Records`
field becomes its length prefix followed by the log's FileRegion, which the socket layer sends with
sendfile.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Protocol


class FileRegion(Protocol):
    """A part of a file to send (a log segment's record batches)."""

    @property
    def file(self) -> Any: ...
    @property
    def position(self) -> int: ...
    @property
    def size(self) -> int: ...


Chunk = bytes | bytearray | memoryview | FileRegion
"""A piece of a response: bytes, or a file region (sent with sendfile on plaintext)."""


class Body:
    """A response body already encoded by hand: chunks (bytes and file regions) and their size."""

    __slots__ = ("chunks", "size", "throttle_ms")

    def __init__(self, chunks: list[Chunk], size: int, throttle_ms: int = 0):
        self.chunks = chunks
        self.size = size
        self.throttle_ms = throttle_ms
        """A client quota's throttle time the body answers: the connection is muted that long after
        the answer is sent (KIP-219)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def uvarint(value: int) -> bytes:
    """Unsigned varint (protobuf style), used by flexible versions for lengths and tag counts."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class BodyWriter:
    """Writes one response body; `chunks()` returns bytes and region objects in wire order.

    `flexible` selects the compact encodings (varint lengths, tagged-field sections) of KIP-482.
    """

    __slots__ = ("_buf", "_chunks", "flexible", "size")

    def __init__(self, flexible: bool):
        self.flexible = flexible
        self._buf = bytearray()
        self._chunks: list[Chunk] = []
        self.size = 0
        """Bytes handed over to chunks so far (chunks() adds the buffer's remainder)."""

    def int16(self, v: int) -> None:
        self._buf += _I16.pack(v)

    def int32(self, v: int) -> None:
        self._buf += _I32.pack(v)

    def int64(self, v: int) -> None:
        self._buf += _I64.pack(v)

    def string(self, s: str | None) -> None:
        if s is None:
            self._buf += b"\0" if self.flexible else b"\xff\xff"
            return
        data = s.encode()
        if self.flexible:
            self._buf += uvarint(len(data) + 1)
        else:
            self._buf += _I16.pack(len(data))
        self._buf += data

    def array(self, n: int | None) -> None:
        """The length of an array whose elements the caller writes next (None: a null array)."""
        if n is None:
            self._buf += b"\0" if self.flexible else b"\xff\xff\xff\xff"
        elif self.flexible:
            self._buf += uvarint(n + 1)
        else:
            self._buf += _I32.pack(n)

    def tags(self) -> None:
        """An empty tagged-field section (flexible versions end every struct with one)."""
        if self.flexible:
            self._buf.append(0)

    def uuid(self, value: bytes) -> None:
        """A uuid field: its 16 bytes (`uuid.UUID.bytes`)."""
        self._buf += value

    def tagged(self, fields: list[tuple[int, bytes]]) -> None:
        """A tagged-field section holding `fields` ((tag, encoded value), tags ascending)."""
        if not fields:
            self.tags()
            return
        self._buf += uvarint(len(fields))
        for tag, data in fields:
            self._buf += uvarint(tag) + uvarint(len(data)) + data

    def take(self) -> bytes:
        """The bytes written so far (a writer used to encode one tagged field's value)."""
        return bytes(self._buf)

    def records(self, regions: Sequence[bytes | bytearray | FileRegion], size: int) -> None:
        """A `records` field: the length, then the regions as they are (no copy)."""
        if self.flexible:
            self._buf += uvarint(size + 1)
        else:
            self._buf += _I32.pack(size)
        for region in regions:
            if isinstance(region, (bytes, bytearray)):  # records converted in memory (Fetch v0-v3)
                self._buf += region
                continue
            if self._buf:
                self._chunks.append(bytes(self._buf))
                self.size += len(self._buf)
                self._buf = bytearray()
            self._chunks.append(region)
            self.size += region.size

    def chunks(self) -> list[Chunk]:
        if self._buf:
            self._chunks.append(bytes(self._buf))
            self.size += len(self._buf)
            self._buf = bytearray()
        return self._chunks


def frame(header: bytes, body_chunks: list[Chunk], body_size: int) -> list[Chunk]:
    """Size prefix + response header + body, the header merged into the first bytes chunk."""
    head = _I32.pack(len(header) + body_size) + header
    if body_chunks and isinstance(body_chunks[0], (bytes, bytearray)):
        return [head + body_chunks[0], *body_chunks[1:]]
    return [head, *body_chunks]


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (correlation id) or v1 (plus an empty tagged-field section)."""
    return _I32.pack(correlation_id) + (b"\0" if flexible else b"")


def node_endpoints(endpoints: Sequence[tuple[int, str, int, str | None]]) -> bytes:
    """The KIP-951 `node_endpoints` tagged field of Produce (v10+) and Fetch (v16+) answers:
    (node id, host, port, rack) of the leaders the answer names."""
    nodes = BodyWriter(flexible=True)
    nodes.array(len(endpoints))
    for node_id, host, port, rack in endpoints:
        nodes.int32(node_id)
        nodes.string(host)
        nodes.int32(port)
        nodes.string(rack)
        nodes.tags()
    return nodes.take()
