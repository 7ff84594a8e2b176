"""Unit tests of the broker's data path pieces: hand-written encodings (checked against kio's
reader), the generic error response, the purgatory, and the socket server's framing over real
loopback sockets."""

import asyncio
import datetime
import os
import socket
import struct
from dataclasses import dataclass

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import i16, i32, i32Timedelta, i64

from odradek.broker import fetch as fetch_codec
from odradek.broker import produce as produce_codec
from odradek.broker.delayed_operation import DelayedOperation, DelayedOperationPurgatory
from odradek.broker.kafka_apis import error_response
from odradek.broker.replica_manager import FetchResult, ProduceResult
from odradek.common import wire
from odradek.common.network import encoding
from odradek.common.network.socket_server import CloseConnection, SocketServer


@dataclass
class Region:
    file: object
    position: int
    size: int


def _join(chunks) -> bytes:
    out = bytearray()
    for c in chunks:
        if isinstance(c, (bytes, bytearray)):
            out += c
        else:
            out += os.pread(c.file.fileno(), c.size, c.position)
    return bytes(out)


@pytest.mark.parametrize("version", [4, 5, 7, 10, 11, 12])
def test_fetch_response_encoding_reads_back_with_kio(version, tmp_path):
    data = b"".join(bytes([i]) * 100 for i in range(7))
    path = tmp_path / "seg"
    path.write_bytes(b"junk" + data + b"tail")
    with open(path, "rb") as f:
        regions = [Region(f, 4, 300), Region(f, 304, 400)]
        ok = FetchResult(high_watermark=42, last_stable_offset=42, log_start_offset=3, regions=regions, size=700)
        err = FetchResult(error=ErrorCode.offset_out_of_range, high_watermark=5, last_stable_offset=5, log_start_offset=0)
        chunks, size = fetch_codec.encode_fetch_response(version, [("topic-a", [(0, ok), (3, err)]), ("b", [])])
        body = _join(chunks)
    assert len(body) == size
    cls = wire.response_schema(1, version)
    resp, used = entity_reader(cls)(body, 0)
    assert used == len(body)
    assert [t.topic for t in resp.responses] == ["topic-a", "b"]
    p0, p3 = resp.responses[0].partitions
    assert (p0.partition_index, p0.error_code, p0.high_watermark) == (0, ErrorCode.none, 42)
    assert p0.records == data
    assert (p3.partition_index, p3.error_code) == (3, ErrorCode.offset_out_of_range)
    assert not p3.records
    if version >= 5:
        assert p0.log_start_offset == 3
    if version >= 7:
        assert resp.session_id == 0 and resp.error_code == ErrorCode.none


@pytest.mark.parametrize("version", [0, 1, 2, 3, 5, 7, 8, 9])
def test_produce_response_encoding_reads_back(version):
    ok = ProduceResult(base_offset=1234, log_append_time=-1, log_start_offset=7)
    bad = ProduceResult(error=ErrorCode.not_leader_or_follower)
    chunks, size = produce_codec.encode_produce_response(version, [("t", [(0, ok), (1, bad)])])
    body = b"".join(chunks)
    assert len(body) == size
    if version < 3:
        # kio has no classes before v3: check the v0 prefix by hand.
        (n,) = struct.unpack_from(">i", body, 0)
        assert n == 1
        return
    resp, used = entity_reader(wire.response_schema(0, version))(body, 0)
    assert used == len(body)
    parts = resp.responses[0].partition_responses
    assert (parts[0].index, parts[0].error_code, parts[0].base_offset) == (0, ErrorCode.none, 1234)
    assert parts[1].error_code == ErrorCode.not_leader_or_follower
    if version >= 5:
        assert parts[0].log_start_offset == 7


def test_legacy_produce_request_is_parsed_for_its_partitions():
    body = struct.pack(">hhih", 0, 2, 9, 3) + b"cli" + struct.pack(">hii", 1, 1000, 2)
    body += struct.pack(">h", 1) + b"a" + struct.pack(">i", 2) + struct.pack(">ii", 0, 3) + b"xyz"
    body += struct.pack(">ii", 5, -1)
    body += struct.pack(">h", 2) + b"bb" + struct.pack(">i", 0)
    acks, topics = produce_codec.parse_legacy_request(body)
    assert acks == 1
    assert topics == [("a", [0, 5]), ("bb", [])]
    with pytest.raises(ValueError):
        produce_codec.parse_legacy_request(body[:-3])
    with pytest.raises(ValueError):
        produce_codec.parse_legacy_request(struct.pack(">hhih", 0, 2, 9, -1) + struct.pack(">hii", 1, 1, 2**30))


def _produce_request(version):
    mod = __import__(f"kio.schema.produce.v{version}.request", fromlist=["x"])
    return mod.ProduceRequest(
        acks=i16(1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
        topic_data=(
            mod.TopicProduceData(
                name="t", partition_data=(mod.PartitionProduceData(index=i32(4), records=b"x"),)
            ),
        ),
    )


@pytest.mark.parametrize("version", [3, 9])
def test_error_response_mirrors_produce_partitions(version):
    resp = error_response(_produce_request(version), ErrorCode.unknown_server_error)
    (topic,) = resp.responses
    assert topic.name == "t"
    (part,) = topic.partition_responses
    assert part.index == 4 and part.error_code == ErrorCode.unknown_server_error
    wire.encode_response(resp, 1, flexible_header=version >= 9)


def test_error_response_for_fetch_list_offsets_and_admin():
    from kio.schema.fetch.v12 import request as f12
    from kio.schema.list_offsets.v6 import request as l6

    fetch = f12.FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=5)),
        min_bytes=i32(1),
        topics=(f12.FetchTopic(topic="t", partitions=(
            f12.FetchPartition(partition=i32(2), fetch_offset=i64(0), partition_max_bytes=i32(10)),)),),
        forgotten_topics_data=(),
    )
    resp = error_response(fetch, ErrorCode.kafka_storage_error)
    assert resp.responses[0].topic == "t"
    assert resp.responses[0].partitions[0].partition_index == 2
    assert resp.responses[0].partitions[0].error_code == ErrorCode.kafka_storage_error
    wire.encode_response(resp, 1, flexible_header=True)

    lo = l6.ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=0,
        topics=(l6.ListOffsetsTopic(name="x", partitions=(l6.ListOffsetsPartition(partition_index=i32(1), timestamp=i64(-1)),)),),
    )
    resp = error_response(lo, ErrorCode.unknown_server_error)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.unknown_server_error
    wire.encode_response(resp, 1, flexible_header=True)

    from kio.schema.create_topics.v7 import request as c7

    ct = c7.CreateTopicsRequest(
        topics=(c7.CreatableTopic(name="n", num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=()),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
    )
    resp = error_response(ct, ErrorCode.unknown_server_error)
    assert resp.topics[0].name == "n" and resp.topics[0].error_code == ErrorCode.unknown_server_error
    wire.encode_response(resp, 1, flexible_header=True)


# --- purgatory -------------------------------------------------------------------------------------


class _Counter(DelayedOperation):
    def __init__(self, delay_ms, state, target):
        super().__init__(delay_ms)
        self.state, self.target = state, target
        self.completions = 0

    def try_complete(self):
        if self.state["n"] >= self.target:
            return self.force_complete()
        return False

    def on_complete(self):
        self.completions += 1


def test_purgatory_completes_on_check_or_expires():
    async def scenario():
        purgatory = DelayedOperationPurgatory("test")
        state = {"n": 0}
        now = _Counter(1000, {"n": 5}, 1)
        assert purgatory.try_complete_else_watch(now, ["k"]) is True
        waiting = _Counter(10_000, state, 2)
        expiring = _Counter(50, state, 100)
        assert purgatory.try_complete_else_watch(waiting, ["k", "j"]) is False
        assert purgatory.try_complete_else_watch(expiring, ["k"]) is False
        state["n"] = 1
        assert purgatory.check_and_complete("k") == 0
        state["n"] = 2
        assert purgatory.check_and_complete("j") == 1
        await asyncio.wait_for(waiting.wait(), 1)
        assert purgatory.check_and_complete("k") == 0  # already complete: counted once only
        await asyncio.wait_for(expiring.wait(), 2)
        assert expiring.expired and not waiting.expired
        assert waiting.completions == 1 and expiring.completions == 1
        assert purgatory.watched() == 0

    asyncio.run(scenario())


# --- socket server ---------------------------------------------------------------------------------


class _Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)

    def send_frame(self, body: bytes):
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def recv_exact(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (n,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(n)

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (TimeoutError, ConnectionResetError):
            return True


def _run_server(handler, max_bytes, client_fn):
    """Runs a SocketServer in this thread's loop while `client_fn(port)` runs in a worker thread."""

    async def main():
        server = SocketServer("127.0.0.1", 0, handler, max_bytes)
        port = await server.start()
        try:
            return await asyncio.wait_for(asyncio.to_thread(client_fn, port), 30)
        finally:
            await server.stop()

    return asyncio.run(main())


def test_socket_server_frames_in_order_small_large_fragmented_and_sendfile(tmp_path):
    payload = os.urandom(3 * 1024 * 1024)
    path = tmp_path / "blob"
    path.write_bytes(payload)
    f = open(path, "rb")
    seen = []

    async def handler(frame, conn):
        body = bytes(frame)
        seen.append(len(body))
        if body.startswith(b"file"):
            await asyncio.sleep(0.01)  # later frames queue up meanwhile: order must hold
            return [struct.pack(">i", 3 + 100_000 + 10), b"hdr", Region(f, 5, 100_000), Region(f, 200, 10)]
        if body == b"silent":
            return None
        return [struct.pack(">i", len(body)), body]

    def client(port):
        c = _Client(port)
        c.send_frame(b"file")
        c.send_frame(b"silent")
        big = os.urandom(1_500_000)
        c.send_frame(big)
        # one frame in many small pieces
        msg = struct.pack(">i", 5000) + os.urandom(5000)
        for i in range(0, len(msg), 7):
            c.sock.sendall(msg[i : i + 7])
        # many small frames in one write
        c.sock.sendall(b"".join(struct.pack(">i", 3) + b"%03d" % i for i in range(200)))
        first = c.recv_frame()
        assert first == b"hdr" + payload[5:100_005] + payload[200:210]
        assert c.recv_frame() == big
        assert c.recv_frame() == msg[4:]
        for i in range(200):
            assert c.recv_frame() == b"%03d" % i
        c.sock.close()

    try:
        _run_server(handler, 10 * 1024 * 1024, client)
    finally:
        f.close()
    assert seen[:4] == [4, 6, 1_500_000, 5000]


@pytest.mark.parametrize("prefix", [struct.pack(">i", 2048), struct.pack(">i", -5), b"\xff\xff\xff\xff"])
def test_socket_server_closes_on_oversized_or_negative_size_and_keeps_serving(prefix):
    async def handler(frame, conn):
        if bytes(frame) == b"close-me":
            raise CloseConnection()
        return [struct.pack(">i", len(frame)), bytes(frame)]

    def client(port):
        bad = _Client(port)
        bad.sock.sendall(prefix + b"x" * 100)
        assert bad.closed()
        closer = _Client(port)
        closer.send_frame(b"close-me")
        assert closer.closed()
        good = _Client(port)
        good.send_frame(b"still here")
        assert good.recv_frame() == b"still here"

    _run_server(handler, 1024, client)


def test_encoding_primitives():
    assert encoding.uvarint(0) == b"\0"
    assert encoding.uvarint(300) == b"\xac\x02"
    w = encoding.BodyWriter(flexible=True)
    w.string(None)
    w.string("ab")
    w.array(None)
    w.array(2)
    assert b"".join(w.chunks()) == b"\0\x03ab\0\x03"
    w = encoding.BodyWriter(flexible=False)
    w.string(None)
    w.array(None)
    assert b"".join(w.chunks()) == b"\xff\xff\xff\xff\xff\xff"
