"""The broker's socket server: Kafka framing over asyncio.BufferedProtocol, answers in request order.

Bytes are received straight into the frame's own buffer where possible (small frames share one
receive buffer and are sliced out once; a large frame gets a bytearray of its exact size that the
socket fills directly), so a 1 MiB produce request is copied once, by kio, and no more.

Like Kafka's "muted channel", a connection handles its requests in order and answers them in
order; reading continues meanwhile into a bounded queue (reading pauses when it is full). One
departure from Kafka, for acks=all throughput: Produce requests are pipelined. A Produce request
is started while earlier Produce requests of the connection still wait in the purgatory for
replication (up to MAX_IN_FLIGHT of them), so a client with many requests in flight gets one
replication round trip per window of requests rather than per request. Appends still happen in
arrival order, because the handler appends before its first await and tasks start in creation
order. Every other request is a barrier, as before: it starts once everything before it has been
answered, and nothing after it starts until it has been answered.

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
import struct
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
RECV_BUFFER = 256 * 1024
"""Shared receive buffer; frames larger than half of it get a buffer of their own."""
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
PRODUCE = 0
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
        self._buf = bytearray(RECV_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None
        self._big_fill = 0
        self._frames: collections.deque = collections.deque()
        self._queued = 0
        self._reading_paused = False
        self._closed = False
        self._wake: asyncio.Future | None = None
        self._can_write: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._inflight: collections.deque[asyncio.Task] = collections.deque()
        self._pipelined = server.pipelined_apis

    # --- asyncio callbacks --------------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
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
        self.server.connections.add(self)
        self._task = self.loop.create_task(self._run())

    def get_buffer(self, sizehint: int):
        if self._big is not None:
            return memoryview(self._big)[self._big_fill :]
        if self._end == len(self._buf):
            self._compact()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_fill += nbytes
            if self._big_fill == len(self._big):
                self._enqueue(memoryview(self._big).toreadonly())
                self._big = None
            return
        self._end += nbytes
        self._parse()

    def connection_lost(self, exc):
        self._closed = True
        self.server.connections.discard(self)
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

    # --- framing ------------------------------------------------------------------------------

    def _compact(self) -> None:
        n = self._end - self._start
        if self._start:
            self._buf[0:n] = self._buf[self._start : self._end]
        self._start, self._end = 0, n

    def _parse(self) -> None:
        buf = self._buf
        while not self._closed:
            avail = self._end - self._start
            if avail < 4:
                break
            (size,) = _SIZE.unpack_from(buf, self._start)
            if size < 0 or size > self.server.max_request_bytes:
                self.server.bad_input.warning(
                    "size",
                    "closing connection from %s: request size %d outside [0, %d] (socket.request.max.bytes)",
                    self.peer,
                    size,
                    self.server.max_request_bytes,
                )
                self.close()
                return
            body_start = self._start + 4
            if avail - 4 >= size:
                self._enqueue(bytes(self._view[body_start : body_start + size]))
                self._start = body_start + size
                continue
            if size > len(buf) // 2:
                # A large frame: give it a buffer of its own that the socket fills directly.
                big = bytearray(size)
                have = self._end - body_start
                big[0:have] = buf[body_start : self._end]
                self._big, self._big_fill = big, have
                self._start = self._end = 0
            elif size + 4 > len(buf) - self._start:
                self._compact()
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _enqueue(self, frame) -> None:
        self._frames.append(frame)
        self._queued += len(frame)
        if self._queued > MAX_QUEUED_BYTES and not self._reading_paused and not self._closed:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # --- request processing -------------------------------------------------------------------

    def _is_pipelined(self, frame) -> bool:
        return len(frame) >= 2 and (frame[0] << 8 | frame[1]) in self._pipelined

    def _on_inflight_done(self, task: asyncio.Task) -> None:
        self._wakeup()

    async def _run(self) -> None:
        inflight = self._inflight
        try:
            while True:
                # answer the finished pipelined requests at the head, in request order, together
                while inflight and inflight[0].done():
                    await self._send_done(inflight)
                if self._closed:
                    return
                frame = self._frames[0] if self._frames else None
                if frame is None or (inflight and (len(inflight) >= MAX_IN_FLIGHT or not self._is_pipelined(frame))):
                    # nothing to start yet: wait for a frame or for an in-flight request to finish
                    self._wake = self.loop.create_future()
                    await self._wake
                    self._wake = None
                    continue
                self._frames.popleft()
                self._queued -= len(frame)
                if self._reading_paused and self._queued <= MAX_QUEUED_BYTES // 2:
                    self._reading_paused = False
                    self.transport.resume_reading()
                if self._is_pipelined(frame):
                    task = self.loop.create_task(self.server.handler(frame, self))
                    task.add_done_callback(self._on_inflight_done)
                    inflight.append(task)
                    continue
                response = await self.server.handler(frame, self)
                if response:
                    await self._send(response)
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
            while inflight:
                task = inflight.popleft()
                if not task.done():
                    task.cancel()
                elif not task.cancelled():
                    task.exception()  # retrieved: an abandoned request's failure is not news

    async def _send_done(self, inflight: collections.deque) -> None:
        """Answers the finished requests at the head of `inflight` with one write.

        Pipelined Produce requests finish together (one high-watermark move releases many), and a
        send per answer would cost a syscall here and a wakeup of the client each. A request that
        failed (CloseConnection, ...) ends the batch: the answers before it still go out first.
        """
        chunks: list = []
        failure = None
        while inflight and inflight[0].done():
            try:
                response = inflight.popleft().result()
            except BaseException as e:
                failure = e
                break
            if response:
                chunks += response
        if chunks:
            await self._send(chunks)
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


class SocketServer:
    """Listens on one (host, port) and feeds each connection's frames to `handler`."""

    def __init__(self, host: str, port: int, handler: Handler, max_request_bytes: int,
                 pipelined_apis: frozenset[int] = frozenset({PRODUCE}), *, listener: str = "PLAINTEXT"):
        self.pipelined_apis = pipelined_apis
        """API keys whose handlers may run while earlier ones of the same kind wait (see above):
        their handler must do its ordered work before its first await."""
        self.host = host
        self.port = port
        self.listener = listener
        """The listener's name (`listeners`): handlers may serve some APIs on some listeners only."""
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.connections: set[KafkaConnection] = set()
        self.bad_input = RateLimitedLog(log)
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        """Starts listening; returns the bound port (useful when configured as 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), self.host, self.port, reuse_address=True, backlog=128
        )
        self.port = self._server.sockets[0].getsockname()[1]
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
        self.close_connections()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except TimeoutError:
                log.warning("socket server did not close within 5 s")
