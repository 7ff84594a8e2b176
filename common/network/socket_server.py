"""The broker's socket server: Kafka framing over asyncio.BufferedProtocol, answers in request order.

Framing is common/network/framing's FrameDecoder (sans I/O, shared with the client): bytes are received
straight into its buffers and memory follows the bytes that arrived, never a claimed size. A large
frame has a buffer of its own; with `writable_frames` the handler gets it writable, so the broker
assigns a 1 MiB produce request's offsets in place and its records are copied only into the page
cache.

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

A client over its quota (broker/quota) gets its answer with a throttle time, then the connection
is muted for that long (KIP-219, Kafka's muted channel): nothing is read from it and no request
of it starts, while answers to requests already in flight still go out.

Resources are bounded (issue 11, finding 6), with Kafka's keys: `connections.max.idle.ms` closes a
connection with nothing to do for that long; `max.connections` and `max.connections.per.ip` close
new connections beyond them; bytes received and not yet handled are bounded per connection
(MAX_QUEUED_BYTES) and for the whole listener (`queued.max.request.bytes`): reading pauses beyond
either and resumes as requests are handled.

A response is a list of chunks: bytes, written as they are, and file regions (`.file`,
`.position`, `.size`), sent with sendfile so record data never enters Python. Writes bypass the
transport while it has nothing buffered (one writev per run of bytes, os.sendfile per large
region): loop.sendfile pauses reading, waits for a drain and resumes around every call.

TLS (listeners whose security protocol is SSL or SASL_SSL, common/security): the connection is
accepted in plain TCP and wrapped with `loop.start_tls`, using the listener's SSLContext of the
moment (a reloaded certificate serves new connections; open ones keep theirs), the handshake
bounded by a timeout. A handshake that fails (a plaintext client, garbage, an untrusted or expired
client certificate) closes the connection with one rate-limited log line. The connection's
principal is then the mapped subject of the client's certificate (ANONYMOUS without one); SASL
replaces it after authentication (`principal` is settable). On TLS nothing bypasses the transport:
file regions are read in bounded chunks (TLS_CHUNK) and written through it, never a whole segment
in memory; plaintext keeps sendfile.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import IO, Any, TypeVar, cast

from odradek.common.api_key import ApiKey
from odradek.common.network.framing import FrameDecoder, FrameSizeError
from odradek.common.security.channel import PLAINTEXT_LISTENER, ListenerSecurity
from odradek.common.security.principal import ANONYMOUS, KafkaPrincipal, NoMatchingRule, principal_from_certificate

from .pipeline import RequestPipeline

log = logging.getLogger(__name__)

T = TypeVar("T")

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
TLS_CHUNK = 256 * 1024
"""On TLS, file regions are read and written in pieces of this size (the transport's write
buffer bounds how many wait)."""
TLS_SHUTDOWN_TIMEOUT_S = 5.0
"""A closed TLS connection waits this long at most for the peer's close_notify (asyncio's default: 30 s)."""
_TLS_RECORD = 0x16
"""A TLS handshake record's first byte: a size prefix starting with it is a TLS client on a plaintext listener."""


class CloseConnection(Exception):
    """Raised by a handler: close this connection without answering (Kafka's answer to some input)."""


Handler = Callable[[Any, "KafkaConnection"], Awaitable[list[Any] | None]]
"""(frame body, connection) → the response's chunks, or None for no answer."""



class RateLimitedLog:
    """Logs a given kind of event at most once per `interval_s`, counting the ones it skipped."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0):
        self._log = logger
        self._interval = interval_s
        self._last: dict[str, float] = {}
        self._skipped: collections.Counter[str] = collections.Counter()

    def warning(self, kind: str, msg: str, *args: object, exc_info: Any = None) -> None:
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

    def readinto(self, buf: Any) -> int:
        n = os.preadv(self._fd, [buf], self._pos)
        self._pos += n
        return n


def start_eagerly(awaitable: Awaitable[T], loop: asyncio.AbstractEventLoop) -> asyncio.Future[T]:
    """Runs a coroutine up to its first suspension now, in the caller's turn of the loop (what
    Python 3.12's eager tasks do): a handler that finishes without waiting (a Produce with acks=0
    or 1) costs no task, no scheduling and no done callback; one that waits goes on in a task.
    Returns a future with its outcome (other awaitables simply get a task)."""
    if not isinstance(awaitable, Coroutine):
        return asyncio.ensure_future(awaitable, loop=loop)
    coro = awaitable
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        done: asyncio.Future[T] = loop.create_future()
        done.set_result(stop.value)
        return done
    except BaseException as e:  # the outcome, CancelledError included, is the future's
        failed: asyncio.Future[T] = loop.create_future()
        failed.set_exception(e)
        return failed
    return loop.create_task(_resume(coro, yielded))


async def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> T:
    """The rest of a coroutine that `start_eagerly` began: waits for what it yielded (a future, or
    None for a bare yield), then hands it the outcome as a task would, a failure or a
    cancellation thrown in at its suspension point."""
    while True:
        try:
            if yielded is None:
                await asyncio.sleep(0)
            elif asyncio.isfuture(yielded):
                yielded._asyncio_future_blocking = False  # as a task takes it (else it refuses a second await)
                await yielded
            else:
                raise RuntimeError(f"coroutine yielded {yielded!r}, not a future")
        except BaseException as e:  # handed to the coroutine, as a task hands it
            try:
                yielded = coro.throw(e)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            continue
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: SocketServer):
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: Any = None
        """The connection's transport (asyncio.Transport; the TLS one once the handshake is done)."""
        self.peer: Any = None
        self.listener = server.listener
        self.security_protocol = server.security.security_protocol
        self.principal: KafkaPrincipal = ANONYMOUS
        """Who the peer is: ANONYMOUS, the mapped certificate subject (mTLS), or the SASL user (set
        by the authenticator once it succeeds)."""
        self._fd = -1
        """The socket's descriptor, for writes that bypass the transport while it is idle (plaintext only)."""
        first_limit = getattr(server.handler, "max_request_bytes_unauthenticated", None)
        self._decoder = FrameDecoder(min(first_limit, server.max_request_bytes) if first_limit else
                                     server.max_request_bytes, writable=server.writable_frames, reclaim=True)
        """Until a SASL listener's handler says the peer authenticated (`authenticated`), frames are
        bounded by its `max_request_bytes_unauthenticated` (sasl.server.max.receive.size)."""
        self._frames: collections.deque[bytes | bytearray | memoryview] = collections.deque()
        self._queued = 0
        self._held = 0
        """Bytes this connection holds (queued frames + the frame being received), as counted
        in the server's total."""
        self._reading_paused = False
        self._muted_until = 0.0
        """KIP-219: after a throttled answer, nothing more is read or started until this
        (time.monotonic()); `mute_for` sets it, `_run` honours it."""
        self._muted = False
        self._closed = False
        self._wake: asyncio.Future[None] | None = None
        self._can_write: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._pipeline: RequestPipeline[asyncio.Future[list[Any] | None]] = RequestPipeline(MAX_IN_FLIGHT)
        self._pipelined = server.pipelined_apis
        self._busy = False
        """A barrier request is being handled (the connection is not idle)."""
        self.last_active = time.monotonic()

    # --- asyncio callbacks --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is not None:
            return  # the TLS transport after start_tls: set by _handshake
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        refusal = self.server.admit(self)
        if refusal is not None:
            self.server.bad_input.warning("limit", "closing connection from %s: %s", self.peer, refusal)
            self._closed = True
            cast(asyncio.Transport, transport).abort()
            return
        throttle_ms = self.server.connection_throttle_ms(self.peer)
        if throttle_ms > 0:
            # KIP-612: over its IP's connection rate; held unread, then closed (Kafka's Acceptor
            # delays the close so the client does not reconnect at once)
            self.server.bad_input.warning("ip-rate", "closing connection from %s in %d ms: connection_creation_rate",
                                          self.peer, throttle_ms)
            self._closed = True
            cast(asyncio.ReadTransport, transport).pause_reading()
            self.loop.call_later(throttle_ms / 1000.0, cast(asyncio.Transport, transport).abort)
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
            except OSError:
                pass
        self.server.add(self)
        if self.server.security.tls:
            assert isinstance(transport, asyncio.ReadTransport)
            transport.pause_reading()  # nothing is read until the TLS layer takes the socket
            self._task = self.loop.create_task(self._handshake(transport))
            return
        if sock is not None:
            self._fd = sock.fileno()
        self.transport.set_write_buffer_limits(high=SOCKET_BUFFER_BYTES)
        self._task = self.loop.create_task(self._run())

    async def _handshake(self, transport: asyncio.BaseTransport) -> None:
        """Wraps the connection in TLS, then serves it; a failed handshake closes it."""
        security = self.server.security
        assert security.ssl_context is not None
        try:
            tls_transport = await self.loop.start_tls(
                transport, self, security.ssl_context(), server_side=True,  # type: ignore[arg-type]
                ssl_handshake_timeout=security.handshake_timeout_s, ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT_S,
            )
            if tls_transport is None:
                raise ConnectionError("closed during the TLS handshake")
        except asyncio.CancelledError:
            self._abandon(transport)
            raise
        except (OSError, ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
            self.server.bad_input.warning(
                "tls-handshake", "closing connection from %s on %s listener %s: TLS handshake failed: %s",
                self.peer, self.security_protocol, self.listener, _handshake_failure(e))
            self._abandon(transport)
            return
        self.transport = tls_transport
        tls_transport.set_write_buffer_limits(high=SOCKET_BUFFER_BYTES)
        if self._closed:  # closed (server stopping) while the handshake ran
            tls_transport.abort()
            return
        ssl_object = tls_transport.get_extra_info("ssl_object")
        mapper = security.principal_mapper
        if ssl_object is not None and mapper is not None:
            try:
                self.principal = principal_from_certificate(ssl_object.getpeercert(binary_form=True), mapper)
            except (NoMatchingRule, ValueError) as e:
                self.server.bad_input.warning(
                    "tls-principal", "closing connection from %s on listener %s: no principal for its certificate: %s",
                    self.peer, self.listener, e)
                self.close()
                return
        self.last_active = time.monotonic()
        await self._run()

    def _abandon(self, transport: asyncio.BaseTransport) -> None:
        """A connection that never got past its handshake: gone, and no longer counted."""
        self._closed = True
        cast(asyncio.Transport, transport).abort()
        self.server.discard(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def authenticated(self) -> None:
        """The peer authenticated (SASL): its requests may be up to socket.request.max.bytes now."""
        self._decoder.max_size = self.server.max_request_bytes

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self._decoder.buffer_updated(nbytes)
        except FrameSizeError as e:
            hint = (" (a TLS client on a plaintext listener?)"
                    if (e.size >> 24) == _TLS_RECORD and not self.server.security.tls else "")
            key = ("socket.request.max.bytes" if self._decoder.max_size == self.server.max_request_bytes
                   else "sasl.server.max.receive.size, before authentication")
            self.server.bad_input.warning(
                "size", "closing connection from %s: request size %d outside [0, %d] (%s)%s",
                self.peer, e.size, self._decoder.max_size, key, hint,
            )
            self.close()
            return
        writable = self.server.writable_frames
        for frame in frames:
            self._frames.append(frame if writable or not isinstance(frame, memoryview) else frame.toreadonly())
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
            if not self._muted:
                self.transport.resume_reading()

    def mute_for(self, seconds: float) -> None:
        """A client quota throttled this connection (KIP-219): once its answer is sent, stop reading
        and starting requests for `seconds` (Kafka's muted channel during a throttle)."""
        self._muted_until = max(self._muted_until, time.monotonic() + seconds)

    async def _wait_unmuted(self) -> None:
        """Muted: reading paused; returns at the end of the mute, or earlier when a request in
        flight finished (its answer still goes out: answers are never held back by a mute)."""
        delay = self._muted_until - time.monotonic()
        if delay <= 0 or self._closed:
            self._muted_until = 0.0
            if self._muted:
                self._muted = False
                if not self._closed and not self._reading_paused:
                    self.transport.resume_reading()
            return
        if not self._muted:
            self._muted = True
            self.transport.pause_reading()
        self._wake = self.loop.create_future()
        timer = self.loop.call_later(delay, self._wakeup)
        try:
            await self._wake
        finally:
            timer.cancel()
            self._wake = None

    def idle(self, now: float, idle_s: float) -> bool:
        """Nothing to do for `idle_s`: no bytes arrived, nothing queued or in progress."""
        return (now - self.last_active > idle_s and not self._frames and not len(self._pipeline)
                and not self._busy)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.server.discard(self)
        self._account()
        self._wakeup()
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def pause_writing(self) -> None:
        if self._can_write is None or self._can_write.done():
            self._can_write = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # --- request processing -------------------------------------------------------------------

    def _is_pipelined(self, frame: bytes | bytearray | memoryview) -> bool:
        return len(frame) >= 2 and (frame[0] << 8 | frame[1]) in self._pipelined

    def _on_inflight_done(self, task: asyncio.Future[list[Any] | None]) -> None:
        self._pipeline.finish(task)
        self._wakeup()

    def _starts_now(self) -> bool:
        """The next frame is a pipelined request that may start at once."""
        frame = self._frames[0] if self._frames else None
        return (frame is not None and not self._closed and not self._muted_until and self._is_pipelined(frame)
                and self._pipeline.may_start(True))

    async def _run(self) -> None:
        pipeline = self._pipeline
        try:
            while True:
                # answer the finished pipelined requests at the head, in request order, together
                # (after starting every queued one that may start: eagerly run, most finish at once)
                done = [] if self._starts_now() else pipeline.answerable()
                if done:
                    await self._send_done(done)
                if self._closed:
                    return
                if self._muted_until:
                    await self._wait_unmuted()
                    continue
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
                    task = start_eagerly(self.server.handler(frame, self), self.loop)
                    pipeline.start(task, pipelined=True)
                    if task.done():
                        pipeline.finish(task)
                    else:
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

    async def _send_done(self, done: list[asyncio.Future[list[Any] | None]]) -> None:
        """Answers finished requests (in request order) with one write.

        Pipelined Produce requests finish together (one high-watermark move releases many), and a
        send per answer would cost a syscall here and a wakeup of the client each. A request that
        failed (CloseConnection, ...) ends the batch: the answers before it still go out first.
        """
        chunks: list[Any] = []
        failure: BaseException | None = None
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

    async def _send(self, chunks: Sequence[Any]) -> None:
        """Writes one or more whole responses, in order, before anything else is written.

        Consecutive bytes (and small file regions, read with pread) are gathered into one writev;
        a large region is sent with os.sendfile straight from the segment file. Both go straight to
        the socket while the transport has nothing buffered (the usual case); whatever the socket
        does not take then goes through the transport, which preserves order and applies
        back-pressure. (TCP_CORK around a response's pieces was tried: two more syscalls per
        response, no saving at the reader.)
        """
        out: list[bytes | bytearray | memoryview] = []
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
            if self._fd < 0:  # TLS: through the transport, in bounded pieces
                await self._stream(fd, chunk.position, size)
            else:
                await self._sendfile(fd, chunk.position, size)
        if out and not self._closed:
            self._write(out)
        if self._can_write is not None and not self._can_write.done():
            await self._can_write

    async def _stream(self, fd: int, position: int, size: int) -> None:
        """Sends a file region through the transport (TLS): TLS_CHUNK bytes at a time, waiting
        while the transport's buffer is full, so at most a few chunks are in memory."""
        sent = 0
        while sent < size and not self._closed:
            data = os.pread(fd, min(TLS_CHUNK, size - sent), position + sent)
            if not data:
                raise OSError(f"short read of a log segment: {sent} of {size} bytes")
            self.transport.write(data)
            sent += len(data)
            if self._can_write is not None and not self._can_write.done():
                await self._can_write

    def _direct(self) -> bool:
        """True if bytes may go straight to the socket: the transport holds none still to send."""
        transport = self.transport
        return self._fd >= 0 and not transport.get_write_buffer_size() and not transport.is_closing()

    def _write(self, out: list[bytes | bytearray | memoryview]) -> None:
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
        if not sent and self._fd < 0 and len(out) > 1:
            self.transport.writelines(out)
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
                self.transport, cast(IO[bytes], _PositionalFile(fd)), position + sent, size - sent, fallback=True
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
                 limits: ConnectionLimits = ConnectionLimits(), security: ListenerSecurity = PLAINTEXT_LISTENER,
                 writable_frames: bool = False):
        if security.tls and security.ssl_context is None:
            raise ValueError(f"listener {listener} ({security.security_protocol}) needs a TLS context")
        self.security = security
        """The listener's security protocol and, on TLS, its context (see ListenerSecurity)."""
        self.writable_frames = writable_frames
        """Hand frames to the handler writable (small ones as bytearrays, large ones as views of
        their own buffer; else bytes and read-only views): the broker's Produce handler assigns
        offsets in place."""
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
        self._per_ip: collections.Counter[str] = collections.Counter()
        self.held_bytes = 0
        """Bytes received and not yet handled, over every connection."""
        self.paused: set[KafkaConnection] = set()
        self.bad_input = RateLimitedLog(log)
        self._server: asyncio.Server | None = None
        self._reaper: asyncio.Task[None] | None = None
        self.connection_rate: Callable[[str], int] | None = None
        """A new connection's IP → how long to hold it before closing it (IP connection-rate
        quotas, KIP-612), 0 to serve it; None: no such quotas on this listener."""

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

    def connection_throttle_ms(self, peer: object) -> int:
        return 0 if self.connection_rate is None else self.connection_rate(_ip(peer))

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

    async def start(self, serving: bool = True) -> int:
        """Binds and, if `serving`, listens; returns the bound port (useful when configured as 0).
        Bound but not serving, the port is the server's and a connection to it is refused, until
        `start_serving` (a broker's client listeners before it is ready: KafkaServer)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), self.host, self.port, reuse_address=True, backlog=128,
            start_serving=serving,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.limits.connections_max_idle_ms >= 0:
            self._reaper = loop.create_task(self._reap_idle(), name=f"idle-reaper-{self.port}")
        return self.port

    async def start_serving(self) -> None:
        """Listens and accepts (after `start(serving=False)`)."""
        if self._server is not None:
            await self._server.start_serving()

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

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


def _ip(peer: object) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)


def _handshake_failure(e: BaseException) -> str:
    """Why a handshake failed, in a few words (OpenSSL's reason: WRONG_VERSION_NUMBER for a
    plaintext client, CERTIFICATE_VERIFY_FAILED, ...; a timeout; a peer that left)."""
    if isinstance(e, ssl.SSLError):
        return str(e.reason or e.__class__.__name__)
    if isinstance(e, ConnectionAbortedError):
        return "not completed in time" if "taking longer" in str(e) else "aborted"
    if isinstance(e, TimeoutError):
        return "not completed in time"
    return f"{e.__class__.__name__}: {e}" if str(e) else e.__class__.__name__
