"""common/network/socket_server.py: framing over real loopback sockets (in order, small, large,
fragmented, sendfile) and the size limit."""

import asyncio
import os
import socket
import struct
import threading

import pytest

from odradek.broker.log.local_log import FileRegion
from odradek.common.network.socket_server import CloseConnection, SocketServer


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
    queued = threading.Event()  # the client has sent the frames after "file"

    async def handler(frame, conn):
        body = bytes(frame)
        seen.append(len(body))
        if body.startswith(b"file"):
            # later frames queue up meanwhile: order must hold
            assert await asyncio.to_thread(queued.wait, 10)
            return [struct.pack(">i", 3 + 100_000 + 10), b"hdr", FileRegion(f, 5, 100_000), FileRegion(f, 200, 10)]
        if body == b"silent":
            return None
        return [struct.pack(">i", len(body)), body]

    def client(port):
        c = _Client(port)
        c.send_frame(b"file")
        c.send_frame(b"silent")
        queued.set()
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


def test_a_bound_server_refuses_connections_until_it_serves():
    """A broker's client listener before it is ready: the port is taken (and advertised) but a
    client's connection is refused, so it goes to another broker; then it serves."""

    async def handler(frame, conn):
        return [struct.pack(">i", len(frame)), bytes(frame)]

    def refused(port) -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        except ConnectionRefusedError:
            return True
        return False

    async def main():
        server = SocketServer("127.0.0.1", 0, handler, 1024)
        port = await server.start(serving=False)
        try:
            assert port > 0 and not server.serving
            assert await asyncio.to_thread(refused, port)
            await server.start_serving()
            assert server.serving

            def echo(port):
                client = _Client(port)
                client.send_frame(b"served")
                return client.recv_frame()

            assert await asyncio.wait_for(asyncio.to_thread(echo, port), 30) == b"served"
        finally:
            await server.stop()

    asyncio.run(main())
