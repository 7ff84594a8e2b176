"""Produce pipelining in the socket server, against a real SocketServer on loopback with a handler
whose completion each test controls: answers in request order, non-Produce requests as barriers,
the in-flight bound, and what happens to requests in flight when the connection ends."""

import asyncio
import struct

import pytest
from virtual_time import turns

from odradek.common.api_key import ApiKey
from odradek.common.network import socket_server
from odradek.common.network.socket_server import CloseConnection, SocketServer

STEP_S = 5.0
"""Bound on every single wait in these tests."""


def request(api_key: int, correlation_id: int) -> bytes:
    body = struct.pack(">hhi", api_key, 0, correlation_id)
    return struct.pack(">i", len(body)) + body


class ControlledHandler:
    """Records which requests started, in order; each finishes when the test releases it."""

    def __init__(self):
        self.started: list[int] = []
        self.cancelled: list[int] = []
        self.release: dict[int, asyncio.Future] = {}
        self.changed = asyncio.Event()

    def gate(self, correlation_id: int) -> asyncio.Future:
        if correlation_id not in self.release:
            self.release[correlation_id] = asyncio.get_running_loop().create_future()
        return self.release[correlation_id]

    def finish(self, correlation_id: int, outcome="answer") -> None:
        self.gate(correlation_id).set_result(outcome)

    async def __call__(self, frame, conn):
        _api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 0)
        self.started.append(correlation_id)
        self.changed.set()
        try:
            outcome = await self.gate(correlation_id)
        except asyncio.CancelledError:
            self.cancelled.append(correlation_id)
            self.changed.set()
            raise
        if outcome == "close":
            raise CloseConnection()
        if outcome == "silent":
            return None
        return [struct.pack(">i", 4), struct.pack(">i", correlation_id)]

    async def wait_started(self, n: int) -> None:
        """Until at least n requests started (bounded), then a few loop turns to let more start."""
        await self.wait_until(lambda: len(self.started) >= n)
        await turns()

    async def wait_until(self, predicate) -> None:
        """Until `predicate` holds, woken by each start and cancellation (bounded)."""
        async with asyncio.timeout(STEP_S):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


async def read_answer(reader: asyncio.StreamReader) -> int:
    async with asyncio.timeout(STEP_S):
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        assert size == 4
        (correlation_id,) = struct.unpack(">i", await reader.readexactly(4))
        return correlation_id


def run(test_fn):
    """Runs `test_fn(handler, reader, writer)` against a fresh server; stops it afterwards."""

    async def main():
        handler = ControlledHandler()
        server = SocketServer("127.0.0.1", 0, handler, 1024)
        port = await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            async with asyncio.timeout(30):
                await test_fn(handler, reader, writer)
        finally:
            writer.close()
            await server.stop()
            for gate in handler.release.values():
                if not gate.done():
                    gate.cancel()

    asyncio.run(main())


def test_produce_requests_run_together_and_are_answered_in_request_order():
    async def scenario(h, reader, writer):
        writer.write(b"".join(request(ApiKey.PRODUCE, c) for c in (1, 2, 3)))
        await h.wait_started(3)
        assert h.started == [1, 2, 3]  # all three waiting at once, started in arrival order
        h.finish(3)
        h.finish(2)
        await turns()  # whatever can happen now happens
        h.finish(1)
        assert [await read_answer(reader) for _ in range(3)] == [1, 2, 3]
        # a silent (acks=0) request in the middle leaves no gap and no answer
        writer.write(b"".join(request(ApiKey.PRODUCE, c) for c in (4, 5, 6)))
        await h.wait_started(6)
        h.finish(6)
        h.finish(5, "silent")
        h.finish(4)
        assert [await read_answer(reader) for _ in range(2)] == [4, 6]

    run(scenario)


def test_a_non_produce_request_waits_for_earlier_answers_and_blocks_later_requests():
    async def scenario(h, reader, writer):
        writer.write(request(ApiKey.PRODUCE, 1) + request(ApiKey.PRODUCE, 2) + request(ApiKey.METADATA, 3)
                     + request(ApiKey.PRODUCE, 4))
        await h.wait_started(2)
        assert h.started == [1, 2]
        h.finish(2)
        await turns()  # whatever can happen now happens
        assert h.started == [1, 2]  # 1 is still unanswered: the metadata request waits
        h.finish(1)
        assert [await read_answer(reader) for _ in range(2)] == [1, 2]
        await h.wait_started(3)
        assert h.started == [1, 2, 3]  # and the produce after it does not start meanwhile
        await turns()  # whatever can happen now happens
        assert h.started == [1, 2, 3]
        h.finish(3)
        assert await read_answer(reader) == 3
        await h.wait_started(4)
        h.finish(4)
        assert await read_answer(reader) == 4

    run(scenario)


def test_in_flight_produce_requests_are_bounded():
    bound = socket_server.MAX_IN_FLIGHT
    total = bound + 4

    async def scenario(h, reader, writer):
        writer.write(b"".join(request(ApiKey.PRODUCE, c) for c in range(total)))
        await h.wait_started(bound)
        await turns()  # whatever can happen now happens
        assert h.started == list(range(bound))
        h.finish(1)  # not the oldest: the window does not move
        await turns()  # whatever can happen now happens
        assert len(h.started) == bound
        h.finish(0)
        assert [await read_answer(reader) for _ in range(2)] == [0, 1]
        await h.wait_started(bound + 2)
        assert h.started == list(range(bound + 2))
        for c in range(2, total):
            h.finish(c)
        assert [await read_answer(reader) for _ in range(2, total)] == list(range(2, total))

    run(scenario)


def test_close_from_a_pipelined_request_answers_earlier_ones_then_abandons_the_rest():
    async def scenario(h, reader, writer):
        writer.write(b"".join(request(ApiKey.PRODUCE, c) for c in (1, 2, 3)))
        await h.wait_started(3)
        h.finish(2, "close")
        await turns()  # whatever can happen now happens
        assert h.cancelled == []  # 1 is still owed an answer: nothing closes yet
        h.finish(1)
        assert await read_answer(reader) == 1
        async with asyncio.timeout(STEP_S):
            assert await reader.read() == b""  # closed without answering 2 or 3
            await h.wait_until(lambda: 3 in h.cancelled)

    run(scenario)


def test_a_peer_going_away_cancels_its_requests_in_flight():
    async def scenario(h, reader, writer):
        writer.write(b"".join(request(ApiKey.PRODUCE, c) for c in (1, 2)))
        await h.wait_started(2)
        writer.close()
        await h.wait_until(lambda: sorted(h.cancelled) == [1, 2])

    run(scenario)


@pytest.mark.parametrize("api_key", [ApiKey.METADATA, ApiKey.PRODUCE])
def test_server_without_pipelining_or_with_it_handles_quick_requests_in_order(api_key):
    """Requests that finish at once (acks=1 produce, metadata) stream through in order."""

    async def main():
        async def handler(frame, conn):
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            return [struct.pack(">i", 4), struct.pack(">i", correlation_id)]

        server = SocketServer("127.0.0.1", 0, handler, 1024, pipelined_apis=frozenset())
        pipelined = SocketServer("127.0.0.1", 0, handler, 1024)
        try:
            for s in (server, pipelined):
                reader, writer = await asyncio.open_connection("127.0.0.1", await s.start())
                writer.write(b"".join(request(api_key, c) for c in range(200)))
                assert [await read_answer(reader) for _ in range(200)] == list(range(200))
                writer.close()
        finally:
            await server.stop()
            await pipelined.stop()

    asyncio.run(main())


def test_start_eagerly_runs_to_the_first_wait_and_hands_over_like_a_task():
    """socket_server.start_eagerly: a handler that never waits is done at once (no task); one
    that waits goes on in a task that passes it results, failures and cancellation as a task
    would."""

    async def main():
        loop = asyncio.get_running_loop()

        async def at_once():
            return "now"

        async def boom():
            raise ValueError("bad")

        done = socket_server.start_eagerly(at_once(), loop)
        assert done.done() and done.result() == "now" and not isinstance(done, asyncio.Task)
        failed = socket_server.start_eagerly(boom(), loop)
        assert isinstance(failed.exception(), ValueError)

        gate = loop.create_future()
        steps = []

        async def waits():
            steps.append("started")
            value = await gate
            await asyncio.sleep(0)  # a bare yield
            try:
                await loop.create_future()  # never done: cancelled below
            finally:
                steps.append(f"cleaned up after {value}")

        task = socket_server.start_eagerly(waits(), loop)
        assert steps == ["started"] and not task.done()
        gate.set_result(7)
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(STEP_S):
                await task
        assert steps == ["started", "cleaned up after 7"]

        failing_gate = loop.create_future()

        async def sees_failure():
            try:
                await failing_gate
            except KeyError:
                return "caught"

        caught = socket_server.start_eagerly(sees_failure(), loop)
        failing_gate.set_exception(KeyError("k"))
        async with asyncio.timeout(STEP_S):
            assert await caught == "caught"

    asyncio.run(main())
