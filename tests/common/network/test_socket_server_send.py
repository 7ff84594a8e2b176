"""Response sending in the socket server, against a real SocketServer on loopback: responses made of
bytes and log-file regions (both below and above SENDFILE_MIN) arrive byte-identical and whole, a
reader that does not read bounds what the server buffers, and a peer that goes away mid-response,
or a server that stops mid-sendfile, ends the connection cleanly."""

import asyncio
import logging
import random
import socket
import struct

import pytest
from virtual_time import quiescent, until

from odradek.broker.log import FileRegion
from odradek.common.network import socket_server
from odradek.common.network.socket_server import SocketServer

STEP_S = 10.0
"""Bound on every single wait in these tests."""
FILE_BYTES = 24 * 1024 * 1024


@pytest.fixture(scope="module")
def segment(tmp_path_factory):
    """A file of random bytes standing in for a log segment, opened as the log opens one."""
    path = tmp_path_factory.mktemp("send") / "00000000000000000000.log"
    rnd = random.Random(7)
    path.write_bytes(rnd.randbytes(FILE_BYTES))
    f = open(path, "rb", buffering=0)
    yield f
    f.close()


def request(correlation_id: int, kind: int) -> bytes:
    body = struct.pack(">hhi", kind, 0, correlation_id)
    return struct.pack(">i", len(body)) + body


def fetch_like(f, correlation_id: int, sizes: list[int], seed: int) -> tuple[list, bytes]:
    """A response shaped like a Fetch: header bytes, then per partition a few bytes and a region.

    Returns (chunks, the bytes the peer must receive), the size prefix included."""
    rnd = random.Random(seed)
    chunks: list = [struct.pack(">i", correlation_id) + b"H" * 17]
    for i, size in enumerate(sizes):
        chunks.append(struct.pack(">ii", i, size))
        position = rnd.randrange(0, FILE_BYTES - size)
        chunks.append(FileRegion(f, position, size))
    chunks.append(b"T" * 3)
    total = sum(c.size if isinstance(c, FileRegion) else len(c) for c in chunks)
    chunks[0] = struct.pack(">i", total) + chunks[0]
    return chunks, b"".join(c.read_bytes() if isinstance(c, FileRegion) else c for c in chunks)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(STEP_S):
        head = await reader.readexactly(4)
        (size,) = struct.unpack(">i", head)
        return head + await reader.readexactly(size)


class Server:
    """A SocketServer whose handler answers request `kind` k with the response `responses[k](cid)`."""

    def __init__(self, responses):
        self.responses = responses
        self.calls = 0
        self.server = SocketServer("127.0.0.1", 0, self.handle, 1024)

    async def handle(self, frame, conn):
        kind, _, correlation_id = struct.unpack_from(">hhi", frame, 0)
        self.calls += 1
        return self.responses[kind](correlation_id)

    async def __aenter__(self):
        self.port = await self.server.start()
        return self

    async def __aexit__(self, *exc):
        await self.server.stop()

    def connection(self) -> socket_server.KafkaConnection:
        (conn,) = self.server.connections
        return conn


SMALL = socket_server.SENDFILE_MIN // 3
LARGE = socket_server.SENDFILE_MIN * 5


def test_multi_partition_responses_arrive_byte_identical_and_in_order(segment):
    f = segment
    sizes = [[SMALL, LARGE, 0, 1, SMALL, socket_server.SENDFILE_MIN], [LARGE] * 12, [SMALL] * 40, [], [7]]
    expected = {}

    def respond(correlation_id):
        chunks, data = fetch_like(f, correlation_id, sizes[correlation_id % len(sizes)], correlation_id)
        expected[correlation_id] = data
        return chunks

    async def main():
        async with Server({1: respond, 0: respond}) as s:
            reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
            try:
                # Fetch-like (one at a time) and Produce-like (pipelined, answered together) requests
                writer.write(b"".join(request(c, c % 2) for c in range(40)))
                for c in range(40):
                    got = await read_frame(reader)
                    assert got == expected[c], f"response {c} differs"
            finally:
                writer.close()

    asyncio.run(main())


def test_a_reader_that_does_not_read_bounds_what_the_server_buffers(segment):
    """Each response is 6 MiB of small regions (written through the transport once the socket is
    full) and 6 MiB sent by sendfile. While the peer does not read, the server answers no more
    requests than its buffers hold, then everything arrives intact once the peer reads."""
    f = segment
    n, expected = 12, {}

    def respond(correlation_id):
        sizes = [SMALL] * ((6 << 20) // SMALL) + [LARGE] * ((6 << 20) // LARGE)
        random.Random(correlation_id).shuffle(sizes)
        chunks, data = fetch_like(f, correlation_id, sizes, correlation_id)
        expected[correlation_id] = data
        return chunks

    async def main():
        async with Server({1: respond}) as s:
            reader, writer = await asyncio.open_connection("127.0.0.1", s.port, limit=1 << 20)
            try:
                writer.write(b"".join(request(c, 1) for c in range(n)))
                peak = 0

                def buffered():
                    nonlocal peak
                    if s.server.connections:
                        peak = max(peak, s.connection().transport.get_write_buffer_size())
                    return s.calls, peak

                await quiescent(buffered)  # without reading, until the server can do no more
                response_bytes = len(expected[0])
                assert s.calls < n / 2  # the server stopped answering: the peer is not reading
                assert peak <= response_bytes + socket_server.SOCKET_BUFFER_BYTES
                for c in range(n):
                    assert await read_frame(reader) == expected[c], f"response {c} differs"
                assert s.calls == n
            finally:
                writer.close()

    asyncio.run(main())


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_peer_going_away_mid_response_ends_the_connection_cleanly(segment, caplog, how):
    f = segment

    def respond(correlation_id):
        return fetch_like(f, correlation_id, [LARGE, SMALL] * 60 + [FILE_BYTES // 2], correlation_id)[0]

    async def main():
        async with Server({1: respond}) as s:
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.sendall(request(1, 1) + request(2, 1))
            await quiescent(lambda: (s.calls, s.server.connections and s.connection().transport.get_write_buffer_size()))
            sock.setblocking(False)
            got = await asyncio.get_running_loop().sock_recv(sock, 4096)
            assert len(got) > 4
            conn = s.connection()
            if how == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            async with asyncio.timeout(STEP_S):
                await asyncio.wait({conn._task})
            await until(lambda: not s.server.connections, "the connection's removal")
            assert s.calls <= 2
            # the server still answers a new connection
            reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
            writer.write(request(3, 1))
            assert len(await read_frame(reader)) > FILE_BYTES // 2
            writer.close()

    with caplog.at_level(logging.WARNING, logger=socket_server.__name__):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.name == socket_server.__name__ and r.levelno >= logging.WARNING]


def test_server_stopping_while_a_response_waits_for_the_peer_ends_cleanly(segment, caplog):
    """The transport closing under a sendfile (the peer does not read; the server stops).

    asyncio 3.11 itself logs an InvalidStateError from the transport's connection_lost here (its
    sendfile waiter is already done); only this module's own log is checked."""
    f = segment

    def respond(correlation_id):
        return fetch_like(f, correlation_id, [LARGE] * 50 + [FILE_BYTES - 1], correlation_id)[0]

    async def main():
        s = Server({1: respond})
        await s.server.start()
        _reader, writer = await asyncio.open_connection("127.0.0.1", s.server.port)
        try:
            writer.write(request(1, 1))
            await quiescent(lambda: (s.calls, s.server.connections and s.connection().transport.get_write_buffer_size()))
            conn = s.connection()
            assert not conn._task.done()  # still sending: the peer has not read
            await asyncio.wait_for(s.server.stop(), STEP_S)
            async with asyncio.timeout(STEP_S):
                await asyncio.wait({conn._task})
            assert not s.server.connections
        finally:
            writer.close()

    with caplog.at_level(logging.WARNING, logger=socket_server.__name__):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.name == socket_server.__name__ and r.levelno >= logging.WARNING]
