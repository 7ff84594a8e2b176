"""NetworkClient against a small real TCP server on loopback."""

import asyncio

import pytest
from kio.schema.errors import ErrorCode
from virtual_time import run_virtual, turns, until

from odradek.common import messages as m
from odradek.common import wire
from odradek.common.network.client import NetworkClient
from odradek.dev.zookeeper import free_port


def update_metadata(epoch: int) -> m.UpdateMetadataRequest:
    return m.UpdateMetadataRequest(controller_id=1000, controller_epoch=epoch, broker_epoch=1, topic_states=(), live_brokers=())


class EchoServer:
    """Answers UpdateMetadata with error_code = the request's controller_epoch (to tell answers
    apart); epochs listed in `silent` get no answer; `delay` holds each answer back that many loop
    turns; `received` counts the requests read."""

    def __init__(self, silent=(), delay=0, close_on=()):
        self.silent = set(silent)
        self.delay = delay
        self.received = 0
        self.close_on = set(close_on)
        self.connections = 0

    async def start(self, port=0):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                size = wire.SIZE.unpack(await reader.readexactly(4))[0]
                header, payload, _ = wire.decode_request(await reader.readexactly(size))
                self.received += 1
                if payload.controller_epoch in self.close_on:
                    break
                if payload.controller_epoch in self.silent:
                    continue
                await turns(self.delay)
                response = m.UpdateMetadataResponse(error_code=ErrorCode(payload.controller_epoch))
                writer.write(wire.encode_response(response, header.correlation_id, flexible_header=False))
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    async def stop(self):
        self.server.close()
        await self.server.wait_closed()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_pipelined_requests_get_their_own_answers():
    async def main():
        server = await EchoServer(delay=20).start()
        client = NetworkClient("127.0.0.1", server.port)
        try:
            answers = await asyncio.gather(*(client.send(update_metadata(e), timeout=5) for e in range(1, 21)))
            assert [int(a.error_code) for a in answers] == list(range(1, 21))
            assert server.connections == 1
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_timeout_disconnects_and_the_next_send_reconnects():
    async def main():
        server = await EchoServer(silent={7}).start()
        client = NetworkClient("127.0.0.1", server.port)
        try:
            with pytest.raises(TimeoutError):
                await client.send(update_metadata(7), timeout=0.3)
            assert not client.connected
            answer = await client.send(update_metadata(8), timeout=5)
            assert int(answer.error_code) == 8 and server.connections == 2
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_an_answer_wakes_its_request_on_the_next_turn():
    """The answer completes the request's own future, so the waiting task resumes on the loop's
    next turn (wait_for(shield()) took three more: a replica fetch per follower per produce)."""
    async def main():
        server = await EchoServer(silent={9}).start()
        client = NetworkClient("127.0.0.1", server.port)
        try:
            await client.connect()
            request = asyncio.ensure_future(client.send(update_metadata(9), timeout=5))
            await until(lambda: server.received == 1, "the request read")
            protocol = client._protocol
            (correlation_id,) = protocol.pending
            answer = wire.encode_response(m.UpdateMetadataResponse(error_code=ErrorCode(9)), correlation_id,
                                          flexible_header=False)
            protocol.get_buffer(len(answer))[: len(answer)] = answer  # as the socket would fill it
            protocol.buffer_updated(len(answer))
            await asyncio.sleep(0)
            assert request.done() and int(request.result().error_code) == 9
            assert not protocol.pending
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_connection_closed_by_peer_fails_the_request():
    async def main():
        server = await EchoServer(close_on={3}).start()
        client = NetworkClient("127.0.0.1", server.port)
        try:
            with pytest.raises(ConnectionError):
                await client.send(update_metadata(3), timeout=5)
            assert int((await client.send(update_metadata(4), timeout=5)).error_code) == 4
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_connect_retries_with_backoff_then_gives_up():
    async def main():
        port = free_port()
        client = NetworkClient("127.0.0.1", port, connect_attempts=3, backoff_ms=20)
        with pytest.raises(ConnectionError):
            await client.send(update_metadata(1), timeout=1)
        # a server that appears during the backoff is found
        client = NetworkClient("127.0.0.1", port, connect_attempts=20, backoff_ms=50, backoff_max_ms=100)
        send = asyncio.ensure_future(client.send(update_metadata(2), timeout=5))
        await asyncio.sleep(0.2)  # virtual: a few refused attempts meanwhile
        assert not send.done()
        server = await EchoServer().start(port)
        try:
            assert int((await send).error_code) == 2
        finally:
            await client.close()
            await server.stop()

    run_virtual(main)


def test_closed_client_fails_in_flight_requests():
    async def main():
        server = await EchoServer(silent={5}).start()
        client = NetworkClient("127.0.0.1", server.port)
        try:
            pending = asyncio.ensure_future(client.send(update_metadata(5), timeout=10))
            await until(lambda: server.received == 1, "the request at the server")
            await client.close()
            with pytest.raises(ConnectionError):
                await pending
            with pytest.raises(ConnectionError):
                await client.send(update_metadata(6), timeout=1)
        finally:
            await server.stop()

    run(main())


def test_frames_split_and_joined_any_way_are_answered():
    """Responses arrive however TCP cuts them: two frames in one write, a frame a byte at a time,
    and frames larger than the client's receive buffer in uneven chunks."""
    import struct

    from kio.schema.api_versions.v0.request import ApiVersionsRequest

    def answer(correlation_id: int, entries: int) -> bytes:
        # ApiVersions v0 response: header v0 (correlation id), error_code, api_keys[key, min, max]
        body = struct.pack(">ihi", correlation_id, 0, entries) + b"".join(
            struct.pack(">hhh", i % 30000, 0, i % 7) for i in range(entries))
        return struct.pack(">i", len(body)) + body

    sizes = [1, 3, 50_000, 2, 200_000, 5]  # entries: 6 bytes each, so up to 1.2 MB

    async def serve(reader, writer):
        ids = []
        for _ in sizes:
            size = wire.SIZE.unpack(await reader.readexactly(4))[0]
            header, _, _ = wire.decode_request(await reader.readexactly(size))
            ids.append(int(header.correlation_id))
        frames = [answer(cid, n) for cid, n in zip(ids, sizes)]
        writer.write(frames[0] + frames[1])  # two in one write
        for i in range(len(frames[2])):  # a large one a byte at a time at first, then in lumps
            if i < 100:
                writer.write(frames[2][i:i + 1])
                await writer.drain()
        writer.write(frames[2][100:])
        stream = b"".join(frames[3:])
        for start in range(0, len(stream), 70_001):  # uneven chunks across frame boundaries
            writer.write(stream[start:start + 70_001])
            await writer.drain()
        await reader.read()  # until the client closes

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        client = NetworkClient("127.0.0.1", server.sockets[0].getsockname()[1])
        try:
            sends = [client.send(ApiVersionsRequest(), timeout=20) for _ in sizes]
            return await asyncio.gather(*sends)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    responses = asyncio.run(asyncio.wait_for(main(), 30))
    assert [len(r.api_keys) for r in responses] == sizes
    big = responses[4].api_keys
    assert (int(big[-1].api_key), int(big[-1].max_version)) == ((200_000 - 1) % 30000, (200_000 - 1) % 7)
