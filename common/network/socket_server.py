"""The broker's socket server: Kafka framing over asyncio.BufferedProtocol, answers in request order.

Framing is common/network/framing's FrameDecoder (sans I/O, shared with the client): bytes are received
straight into its buffers, so a 1 MiB produce request is copied once, by kio, and no more, and
memory follows the bytes that arrived, never a claimed size.

Like Kafka's "muted channel", a connection handles its requests in order and answers them in
order; reading continues meanwhile into a bounded queue (reading pauses when it is full). One
departure from Kafka, for acks=all throughput: Produce requests are pipelined (the policy is
common/network/pipeline.RequestPipeline). A Produce request is started while earlier Produce
requests of the connection still wait in the purgatory for replication (up to MAX_IN_FLIGHT of
them), so a client with many requests in flight gets one replication round trip per window of
requests rather than per request. Appends still happen in arrival order, because the handler
appends before its first await and tasks start in creation order. Every other request is a
barrier: it starts once everything before it has been answered, and nothing after it starts until
it has been answered.

Resources are bounded (issue 11, finding 6), with Kafka's keys: `connections.max.idle.ms` closes a
connection with nothing to do for that long; `max.connections` and `max.connections.per.ip` close
new connections beyond them; bytes received and not yet handled are bounded per connection
(MAX_QUEUED_BYTES) and for the whole listener (`queued.max.request.bytes`): reading pauses beyond
either and resumes as requests are handled.

A response is a list of chunks: bytes, written as they are, and file regions (`.file`,
`.position`, `.size`), sent with sendfile so record data never enters Python. Writes bypass the
transport while it has nothing buffered (one writev per run of bytes, os.sendfile per large
region): loop.sendfile pauses reading, waits for a drain and resumes around every call.
"""

import asyncio
import collections
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from odradek.common.api_key import ApiKey
from odradek.common.network.framing import FrameDecoder, FrameSizeError

from .pipeline import RequestPipeline

log = logging.getLogger(__name__)

MAX_QUEUED_BYTES = 32 * 1024 * 1024
"""Read-ahead bound per connection: reading pauses while this much is waiting to be handled."""
SENDFILE_MIN = 64 * 1024
"""Smaller file regions are read with pread and written with the bytes around them (one writev);
larger ones go by sendfile. With direct sendfile, 16 KiB and 256 KiB cost the same server CPU as
64 KiB (a server and a client process, 5,000 fetch-shaped responses, 2026-11-22)."""
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
MAX_IN_FLIGHT = 32
"""Pipelined requests started and not yet answered, per connection. librdkafka allows 1M in flight
(5 with idempotence): with acks=all each request waits a replication round trip, so a deeper
pipeline carries more batches per round trip. bench/replication.py-style runs, RF=3 acks=all:
4 → 0.54M rec/s, 16 → 0.74M, 32 → 0.89M, 64 → 0.81M (2M records, alternated on one machine)."""
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16
"""Most buffers one writev takes; a longer gather is joined first."""


class CloseConnection(Exception):
    """Raised by a handler: close this connection without answering (Kafka's answer to some input)."""


Handler = Callable[[memoryview, "KafkaConnection"], Awaitable[list | None]]


class RateLimitedLog:
    """Logs a given kind of event at most once per `interval_s`, counting the ones it skipped."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0):
        self._log = logger
        self._interval = interval_s
        self._last: dict[str, float] = {}
        self._skipped: collections.Counter = collections.Counter()

    def warning(self, kind: str, msg: str, *args, exc_info=None) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval:
            self._skipped[kind] += 1
            return
        self._last[kind] = now
        skipped = self._skipped.pop(kind, 0)
        suffix = f" ({skipped} more like this not logged)" if skipped else ""
        self._log.warning(msg + suffix, *args, exc_info=exc_info)


class _PositionalFile:
    """A file descriptor seen as a file whose position is private to one send.

    loop.sendfile seeks the file object it is given (and its fallback reads through the
    position); the log's segment files are shared with appenders and other readers, so they are
    wrapped here and read only with pread.
    """

    mode = "rb"

    def __init__(self, fd: int):
        self._fd = fd
        self._pos = 0

    def fileno(self) -> int:
        return self._fd

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence != 0:
            raise OSError("only absolute seeks")
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buf) -> int:
        n = os.preadv(self._fd, [buf], self._pos)
        self._pos += n
        return n


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: "SocketServer"):
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self._fd = -1
        """The socket's descriptor, for writes that bypass the transport while it is idle."""
        self._decoder = FrameDecoder(server.max_request_bytes)
        self._frames: collections.deque = collections.deque()
        self._queued = 0
        self._held = 0
        """Bytes this connection holds (queued frames + the frame being received), as counted
        in the server's total."""
        self._reading_paused = False
        self._closed = False
        self._wake: asyncio.Future | None = None
        self._can_write: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._pipeline: RequestPipeline[asyncio.Task] = RequestPipeline(MAX_IN_FLIGHT)
        self._pipelined = server.pipelined_apis
        self._busy = False
        """A barrier request is being handled (the connection is not idle)."""
        self.last_active = time.monotonic()

    # --- asyncio callbacks --------------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        refusal = self.server.admit(self)
        if refusal is not None:
            self.server.bad_input.warning("limit", "closing connection from %s: %s", self.peer, refusal)
            self._closed = True
            transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=SOCKET_BUFFER_BYTES)
        self.server.add(self)
        self._task = self.loop.create_task(self._run())

    def get_buffer(self, sizehint: int):
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self._decoder.buffer_updated(nbytes)
        except FrameSizeError as e:
            self.server.bad_input.warning(
                "size", "closing connection from %s: request size %d outside [0, %d] (socket.request.max.bytes)",
                self.peer, e.size, self.server.max_request_bytes,
            )
            self.close()
            return
        for frame in frames:
            self._frames.append(frame if isinstance(frame, bytes) else frame.toreadonly())
            self._queued += len(frame)
        if frames:
            self._wakeup()
        self._account()

    def _account(self) -> None:
        """Brings the server's count of held bytes up to date; pauses or resumes reading."""
        held = 0 if self._closed else self._queued + self._decoder.buffered
        self.server.held_bytes += held - self._held
        self._held = held
        if self._closed:
            return
        over = self._queued > MAX_QUEUED_BYTES or self.server.over_limit()
        if over and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
            self.server.paused.add(self)
        elif not over and self._reading_paused and self._queued <= MAX_QUEUED_BYTES // 2:
            self._reading_paused = False
            self.server.paused.discard(self)
            self.transport.resume_reading()

    def idle(self, now: float, idle_s: float) -> bool:
        """Nothing to do for `idle_s`: no bytes arrived, nothing queued or in progress."""
        return (now - self.last_active > idle_s and not self._frames and not len(self._pipeline)
                and not self._busy)

    def connection_lost(self, exc):
        self._closed = True
        self.server.discard(self)
        self._account()
        self._wakeup()
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def pause_writing(self):
        if self._can_write is None or self._can_write.done():
            self._can_write = self.loop.create_future()

    def resume_writing(self):
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # --- request processing -------------------------------------------------------------------

    def _is_pipelined(self, frame) -> bool:
        return len(frame) >= 2 and (frame[0] << 8 | frame[1]) in self._pipelined

    def _on_inflight_done(self, task: asyncio.Task) -> None:
        self._pipeline.finish(task)
        self._wakeup()

    async def _run(self) -> None:
        pipeline = self._pipeline
        try:
            while True:
                # answer the finished pipelined requests at the head, in request order, together
                done = pipeline.answerable()
                if done:
                    await self._send_done(done)
                if self._closed:
                    return
                frame = self._frames[0] if self._frames else None
                if frame is None or not pipeline.may_start(self._is_pipelined(frame)):
                    # nothing to start yet: wait for a frame or for an in-flight request to finish
                    self._wake = self.loop.create_future()
                    await self._wake
                    self._wake = None
                    continue
                self._frames.popleft()
                self._queued -= len(frame)
                self._account()
                self.server.resume_paused()
                if self._is_pipelined(frame):
                    task = self.loop.create_task(self.server.handler(frame, self))
                    pipeline.start(task, pipelined=True)
                    task.add_done_callback(self._on_inflight_done)
                    continue
                # a barrier: nothing else is in flight, and nothing starts until it is answered
                self._busy = True
                try:
                    response = await self.server.handler(frame, self)
                    if response:
                        await self._send(response)
                finally:
                    self._busy = False
                    self.last_active = time.monotonic()
        except CloseConnection:
            self.close()
        except asyncio.CancelledError:
            pass
        except (ConnectionError, RuntimeError) as e:
            # The peer went away mid-response (reset, or the transport closing under sendfile).
            log.debug("connection from %s lost while answering: %s", self.peer, e)
            self.close()
        except Exception:
            log.exception("connection from %s failed; closing it", self.peer)
            self.close()
        finally:
            # requests in flight are abandoned with the connection, as a one-at-a-time one was
            for task in pipeline.abandon():
                if not task.done():
                    task.cancel()
                elif not task.cancelled():
                    task.exception()  # retrieved: an abandoned request's failure is not news

    async def _send_done(self, done: list[asyncio.Task]) -> None:
        """Answers finished requests (in request order) with one write.

        Pipelined Produce requests finish together (one high-watermark move releases many), and a
        send per answer would cost a syscall here and a wakeup of the client each. A request that
        failed (CloseConnection, ...) ends the batch: the answers before it still go out first.
        """
        chunks: list = []
        failure = None
        for task in done:
            try:
                response = task.result()
            except BaseException as e:
                failure = e
                break
            if response:
                chunks += response
        if chunks:
            await self._send(chunks)
            self.last_active = time.monotonic()
        if failure is not None:
            raise failure

    async def _send(self, chunks: list) -> None:
        """Writes one or more whole responses, in order, before anything else is written.

        Consecutive bytes (and small file regions, read with pread) are gathered into one writev;
        a large region is sent with os.sendfile straight from the segment file. Both go straight to
        the socket while the transport has nothing buffered (the usual case); whatever the socket
        does not take then goes through the transport, which preserves order and applies
        back-pressure. (TCP_CORK around a response's pieces was tried: two more syscalls per
        response, no saving at the reader.)
        """
        out: list = []
        for chunk in chunks:
            if self._closed:
                return
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                out.append(chunk)
                continue
            size = chunk.size
            if size <= 0:
                continue
            fd = chunk.file.fileno()
            if size < SENDFILE_MIN:
                data = os.pread(fd, size, chunk.position)
                if len(data) != size:
                    raise OSError(f"short read of a log segment: {len(data)} of {size} bytes")
                out.append(data)
                continue
            if out:
                self._write(out)
                out = []
            await self._sendfile(fd, chunk.position, size)
        if out and not self._closed:
            self._write(out)
        if self._can_write is not None and not self._can_write.done():
            await self._can_write

    def _direct(self) -> bool:
        """True if bytes may go straight to the socket: the transport holds none still to send."""
        transport = self.transport
        return self._fd >= 0 and not transport.get_write_buffer_size() and not transport.is_closing()

    def _write(self, out: list) -> None:
        """Writes bytes-like `out` in order: one writev when the socket takes it all."""
        sent = 0
        if self._direct():
            try:
                if len(out) <= _IOV_MAX:
                    sent = os.writev(self._fd, out)
                else:
                    out = [b"".join(out)]
                    sent = os.write(self._fd, out[0])
            except (BlockingIOError, InterruptedError):
                pass
            if sent == sum(map(len, out)):
                return
        rest = b"".join(out)
        self.transport.write(memoryview(rest)[sent:] if sent else rest)

    async def _sendfile(self, fd: int, position: int, size: int) -> None:
        """Sends a file region: os.sendfile while the socket takes it, loop.sendfile for the rest."""
        sent = 0
        if self._direct():
            while sent < size:
                try:
                    n = os.sendfile(self._fd, fd, position + sent, size - sent)
                except (BlockingIOError, InterruptedError):
                    break
                if n == 0:
                    raise OSError(f"sendfile sent {sent} of {size} bytes: the segment ends early")
                sent += n
        if sent < size:
            n = await self.loop.sendfile(
                self.transport, _PositionalFile(fd), position + sent, size - sent, fallback=True
            )
            if n != size - sent:
                raise OSError(f"sendfile sent {sent + n} of {size} bytes")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._wakeup()
            if self.transport is not None:
                self.transport.close()


@dataclass(frozen=True)
class ConnectionLimits:
    """Kafka's connection and request-memory keys (the broker's BrokerConfig carries them)."""

    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    queued_max_request_bytes: int = -1
    """Bytes received and not yet handled, across the listener's connections; -1: unbounded."""


class SocketServer:
    """Listens on one (host, port) and feeds each connection's frames to `handler`."""

    def __init__(self, host: str, port: int, handler: Handler, max_request_bytes: int,
                 pipelined_apis: frozenset[int] = frozenset({ApiKey.PRODUCE}), *, listener: str = "PLAINTEXT",
                 limits: ConnectionLimits = ConnectionLimits()):
        self.pipelined_apis = pipelined_apis
        """API keys whose handlers may run while earlier ones of the same kind wait (see above):
        their handler must do its ordered work before its first await."""
        self.host = host
        self.port = port
        self.listener = listener
        """The listener's name (`listeners`): handlers may serve some APIs on some listeners only."""
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.limits = limits
        self.connections: set[KafkaConnection] = set()
        self._per_ip: collections.Counter = collections.Counter()
        self.held_bytes = 0
        """Bytes received and not yet handled, over every connection."""
        self.paused: set[KafkaConnection] = set()
        self.bad_input = RateLimitedLog(log)
        self._server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task | None = None

    # --- limits ---------------------------------------------------------------------------------

    def admit(self, conn: KafkaConnection) -> str | None:
        """Why a new connection is refused (max.connections, max.connections.per.ip), or None."""
        limits = self.limits
        if len(self.connections) >= limits.max_connections:
            return f"{len(self.connections)} connections (max.connections)"
        ip = _ip(conn.peer)
        if self._per_ip[ip] >= limits.max_connections_per_ip:
            return f"{self._per_ip[ip]} connections from {ip} (max.connections.per.ip)"
        return None

    def add(self, conn: KafkaConnection) -> None:
        self.connections.add(conn)
        self._per_ip[_ip(conn.peer)] += 1

    def discard(self, conn: KafkaConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            ip = _ip(conn.peer)
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]
        self.paused.discard(conn)

    def over_limit(self) -> bool:
        bound = self.limits.queued_max_request_bytes
        return 0 <= bound < self.held_bytes

    def resume_paused(self) -> None:
        """Connections paused for the listener-wide bound read again once below half of it."""
        bound = self.limits.queued_max_request_bytes
        if self.paused and (bound < 0 or self.held_bytes <= bound // 2):
            for conn in list(self.paused):
                conn._account()

    async def _reap_idle(self) -> None:
        """Closes connections idle longer than connections.max.idle.ms (Kafka's Selector does it
        on every poll; a sweep a few times per idle period is enough here)."""
        idle_s = self.limits.connections_max_idle_ms / 1000
        interval = min(max(idle_s / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.idle(now, idle_s):
                    log.debug("closing connection from %s: idle for more than %.0f ms", conn.peer,
                              self.limits.connections_max_idle_ms)
                    conn.close()

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> int:
        """Starts listening; returns the bound port (useful when configured as 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), self.host, self.port, reuse_address=True, backlog=128
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.limits.connections_max_idle_ms >= 0:
            self._reaper = loop.create_task(self._reap_idle(), name=f"idle-reaper-{self.port}")
        return self.port

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    def close_connections(self) -> int:
        """Closes every connection, keeps listening; requests in flight are abandoned (their
        clients see the connection fail and retry on a new one). Returns how many were closed."""
        conns = list(self.connections)
        for conn in conns:
            conn.close()
        return len(conns)

    async def stop(self) -> None:
        """Stops accepting, closes every connection (requests in flight are abandoned)."""
        self.stop_accepting()
        if self._reaper is not None:
            self._reaper.cancel()
        self.close_connections()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except TimeoutError:
                log.warning("socket server did not close within 5 s")


def _ip(peer) -> str:
    return peer[0] if isinstance(peer, tuple) and peer else str(peer)
