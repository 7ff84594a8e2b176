"""Hostile request frames: the bad inputs every request path (brokers and controllers) must survive.

What is here:
- `METADATA_V12_HUGE_TOPICS`: the 24-byte frame of FINDINGS that aborted any broker or controller
  (a Metadata v12 topic array claiming 2^32-2 elements).
- `FUZZ_FOUND_KEYS`: the API keys a fuzzer found to abort the same way.
- `request_schemas()`: every (api key, version, request class) Odradek can decode (kio's classes
  and the inter-broker ones of common/messages.py).
- `encode_body(cls, ...)`: a request body of `cls` with one element in every array and every tagged
  field present, written here from the schema (independently of the code under test); with
  `huge_at=k` the k-th array (depth first) claims a huge element count instead.
- `huge_count_frames(cls)`: one frame per array of `cls` whose count is a lie.
- `fuzz_frames(rng, per_schema)`: mutated frames (bit flips, inserted huge varints, overwritten
  lengths, truncation) for every API key and version, seeded.
- `send_frames(port, frames)`: writes frames to a server, one connection each, and waits
  (bounded) for an answer or a close.

Every frame is a whole Kafka request frame: int32 size, request header (v1, or v2 for flexible
versions), body.
"""

from __future__ import annotations

import dataclasses
import random
import socket
import struct
from collections.abc import Iterable, Iterator

from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from odradek.common.messages import INTER_BROKER_REQUESTS

METADATA_V12_HUGE_TOPICS = bytes.fromhex("000000140003000c00000001000466757a7a00ffffffff0f")
"""Metadata v12, client id "fuzz", topics: a compact array length varint of 2^32-1."""

FUZZ_FOUND_KEYS = (23, 24, 41, 44, 45, 50, 55, 59, 65, 69)
"""API keys whose requests a fuzzer found to abort the process the same way (issue 11)."""

HUGE_COMPACT = bytes.fromhex("ffffffff0f")
"""uvarint 2^32-1: a compact array of 2^32-2 elements."""
HUGE_LEGACY = struct.pack(">i", 2**31 - 1)

_FIXED = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16,
}


def request_schemas() -> list[tuple[int, int, type]]:
    """Every (api_key, version, class) a broker or controller could be sent and decode."""
    out = []
    for key in range(100):
        own = INTER_BROKER_REQUESTS.get(key)
        if own is not None:
            out.append((key, int(own.__version__), own))
            continue
        for version in range(30):
            try:
                out.append((key, version, load_request_schema(key, version)))
            except Exception:  # kio's index errors: no such key or version
                continue
    return out


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Encoder:
    """Writes one value of a class: one element per array, every tagged field present."""

    def __init__(self, huge_at: int | None):
        self.huge_at = huge_at
        self.arrays = 0
        """Arrays written so far (depth first), to find the `huge_at`-th."""

    def entity(self, cls: type) -> bytes:
        flexible = bool(cls.__flexible__)
        out = bytearray()
        tagged = []
        for f in dataclasses.fields(cls):
            tag = get_field_tag(f)
            if tag is None:
                out += self.field(f, flexible, tagged=False)
            else:
                tagged.append((int(tag), self.field(f, flexible, tagged=True)))
        if flexible:
            out += _uvarint(len(tagged))
            for tag, data in sorted(tagged):
                out += _uvarint(tag) + _uvarint(len(data)) + data
        return bytes(out)

    def field(self, f: dataclasses.Field, flexible: bool, tagged: bool) -> bytes:
        nullable = not tagged and is_optional(f)
        kind = classify_field(f)
        if isinstance(kind, PrimitiveField):
            return self.primitive(f.metadata["kafka_type"], flexible)
        if isinstance(kind, EntityField):
            body = self.entity(kind.type_)
            return (b"\x01" + body) if nullable else body
        if isinstance(kind, PrimitiveTupleField):
            element = self.primitive(f.metadata["kafka_type"], flexible)
        elif isinstance(kind, EntityTupleField):
            element = None
        else:
            raise TypeError(kind)
        index = self.arrays
        self.arrays += 1
        if flexible:
            length = HUGE_COMPACT if index == self.huge_at else _uvarint(2)
        else:
            length = HUGE_LEGACY if index == self.huge_at else struct.pack(">i", 1)
        return length + (element if element is not None else self.entity(kind.type_))

    @staticmethod
    def primitive(kafka_type: str, flexible: bool) -> bytes:
        size = _FIXED.get(kafka_type)
        if size is not None:
            return b"\0" * size
        value = b"x" if kafka_type == "string" else b""
        if flexible:
            return _uvarint(len(value) + 1) + value
        width = ">h" if kafka_type == "string" else ">i"
        return struct.pack(width, len(value)) + value


def encode_body(cls: type, huge_at: int | None = None) -> bytes:
    """A body of `cls`: one element per array, every tagged field present; with `huge_at=k` the
    k-th array (depth first, from 0) claims 2^32-2 (compact) or 2^31-1 (legacy) elements."""
    return _Encoder(huge_at).entity(cls)


def array_count(cls: type) -> int:
    """How many arrays `encode_body(cls)` writes (the range of `huge_at`)."""
    encoder = _Encoder(None)
    encoder.entity(cls)
    return encoder.arrays


def frame(cls: type, body: bytes, correlation_id: int = 1, client_id: str = "hostile") -> bytes:
    """Size prefix + request header (v2 if `cls` is flexible, else v1) + `body`."""
    cid = client_id.encode()
    header = struct.pack(">hhih", int(cls.__api_key__), int(cls.__version__), correlation_id, len(cid)) + cid
    if cls.__flexible__:
        header += b"\0"  # no tagged fields in the header
    return struct.pack(">i", len(header) + len(body)) + header + body


def header_size(cls: type, client_id: str = "hostile") -> int:
    return 10 + len(client_id.encode()) + (1 if cls.__flexible__ else 0)


def huge_count_frames(cls: type) -> list[bytes]:
    """One frame per array of `cls`, that array claiming a huge element count."""
    return [frame(cls, encode_body(cls, huge_at=k)) for k in range(array_count(cls))]


def fuzz_frame(rng: random.Random, cls: type) -> bytes:
    """One mutation of a well-formed `cls` request (the header stays valid, so the body reaches
    the decoder of that API and version)."""
    body = bytearray(encode_body(cls))
    choice = rng.randrange(7)
    if choice == 0 and body:  # bit flips
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
    elif choice == 1:  # a huge varint inserted somewhere
        at = rng.randint(0, len(body))
        body[at:at] = HUGE_COMPACT
    elif choice == 2 and body:  # bytes overwritten with 0xff (negative or huge lengths)
        at = rng.randrange(len(body))
        body[at : at + rng.randint(1, 5)] = b"\xff" * rng.randint(1, 5)
    elif choice == 3 and len(body) >= 4:  # a legacy length made huge
        at = rng.randrange(len(body) - 3)
        body[at : at + 4] = HUGE_LEGACY
    elif choice == 4:  # truncated
        del body[rng.randint(0, len(body)) :]
    elif choice == 5:  # the array of a random position made huge
        n = array_count(cls)
        body = bytearray(encode_body(cls, huge_at=rng.randrange(n))) if n else body
    else:  # garbage
        body = bytearray(rng.randbytes(rng.randint(0, 64)))
    return frame(cls, bytes(body), correlation_id=rng.randint(0, 2**31 - 1))


def fuzz_frames(rng: random.Random, per_schema: int = 3,
                schemas: Iterable[tuple[int, int, type]] | None = None) -> Iterator[tuple[int, int, bytes]]:
    """(api_key, version, frame) for every request schema, `per_schema` mutations each."""
    for key, version, cls in schemas if schemas is not None else request_schemas():
        for _ in range(per_schema):
            yield key, version, fuzz_frame(rng, cls)


def send_frames(port: int, frames: Iterable[bytes], host: str = "127.0.0.1", answer_timeout: float = 2.0) -> int:
    """Sends each frame on a connection of its own and waits up to `answer_timeout` for an answer
    or a close; returns how many connections the server closed. Raises ConnectionRefusedError when
    the server stops listening."""
    closed = 0
    for data in frames:
        with socket.create_connection((host, port), timeout=5) as s:
            try:
                s.sendall(data)
                s.settimeout(answer_timeout)
                if not s.recv(65536):
                    closed += 1
            except TimeoutError:
                pass
            except (ConnectionResetError, BrokenPipeError):
                closed += 1
    return closed


# --- record batches that lie (issue 11, finding 3) ------------------------------------------------


def _zigzag_varint(n: int) -> bytes:
    return _uvarint((n << 1) ^ (n >> 63))


def record(delta: int, key: bytes | None = b"k", value: bytes | None = b"v", headers=()) -> bytes:
    """One v2 record (Kafka's DefaultRecord) with offset delta `delta` and timestamp delta 0."""
    body = b"\0" + _zigzag_varint(0) + _zigzag_varint(delta)
    for field in (key, value):
        body += _zigzag_varint(-1) if field is None else _zigzag_varint(len(field)) + field
    body += _zigzag_varint(len(headers))
    for hk, hv in headers:
        body += _zigzag_varint(len(hk)) + hk + (_zigzag_varint(-1) if hv is None else _zigzag_varint(len(hv)) + hv)
    return _zigzag_varint(len(body)) + body


def records(n: int, tag: bytes = b"value") -> bytes:
    """`n` well-formed records with deltas 0..n-1 (every other one with a header)."""
    return b"".join(record(i, value=b"%s-%d" % (tag, i), headers=[(b"h", b"x")] if i % 2 else ()) for i in range(n))


def batch(payload: bytes, count: int, *, compression: int = 0, attributes: int = 0, producer_id: int = -1,
          base_timestamp: int = 1_700_000_000_000) -> bytearray:
    """A v2 batch around `payload` (records, compressed already if `compression`) claiming `count`
    records (lastOffsetDelta = count - 1), with a valid CRC32C: only the contents lie."""
    from crc32c import crc32c

    header = struct.Struct(">qiibIhiqqqhii")
    out = bytearray(header.size) + payload
    has_pid = producer_id >= 0
    header.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, attributes | compression, count - 1, base_timestamp,
                     base_timestamp, producer_id, 0 if has_pid else -1, 0 if has_pid else -1, count)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return out


BROKER_ANSWERS = {"transactional without producer id": "transactional_id_authorization_failed"}
"""Where a broker answers a Produce of the lying batch otherwise than the batch validator: Kafka
refuses transactional records in a request without a transactional id before it reads the batch
(KafkaApis.handleProduceRequest)."""


def lying_batches() -> dict[str, tuple[bytes, str]]:
    """name → (batch, Kafka error name) for every lie issue 11 found stored."""
    import cramjam

    out = {
        "claims 10 holds 3": (batch(records(3), 10), "invalid_record"),
        "claims 1 holds 3": (batch(records(3), 1), "invalid_record"),
        "claims 2^31-1": (batch(records(3), 2**31 - 1), "invalid_record"),
        "duplicate offset deltas": (batch(record(0) + record(0) + record(2), 3), "invalid_record"),
        "garbage record bodies": (batch(random.Random(3).randbytes(200), 4), "invalid_record"),
        "transactional without producer id": (batch(records(2), 2, attributes=0x10), "invalid_record"),
        "control batch": (batch(records(1), 1, attributes=0x20), "invalid_record"),
        "compressed, claims 10 holds 3": (batch(bytes(cramjam.zstd.compress(records(3))), 10, compression=4),
                                          "invalid_record"),
    }
    for codec, name in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")):
        out[f"corrupt {name}"] = (batch(b"\xa5" * 64, 3, compression=codec), "corrupt_message")
    return out


def exchange(port: int, payload, host: str = "127.0.0.1", timeout: float = 30.0):
    """Sends one kio request on a fresh connection and returns the decoded response."""
    from odradek.common import wire

    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(wire.encode_request(payload, 1, "hostile"))
        head = _recv_exact(s, 4)
        (size,) = struct.unpack(">i", head)
        _, response = wire.decode_response(type(payload), _recv_exact(s, size))
        return response


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)
