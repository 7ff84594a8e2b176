"""An asyncio Kafka request client for one destination, like Kafka's NetworkClient for one node.

The controller's channels, the replica fetchers and tests all talk to a broker the same way:
size-prefixed frames (common/wire.py), correlation ids to match responses, several requests in
flight on one connection (Kafka answers in order per connection). A request that times out closes
the connection, as in Kafka: a late answer must never be taken for a newer request's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from odradek.common import wire
from odradek.common.network.framing import Frame, FrameDecoder, FrameSizeError
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
RECV_BUFFER = 64 * 1024
"""Frames up to this size are parsed out of one reused buffer; larger ones get their own."""


class _RequestTimeout(TimeoutError):
    """A request's answer did not come within its timeout (set by `_expire`)."""


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(_RequestTimeout())


class _Pending:
    __slots__ = ("future", "schema")

    def __init__(self, schema: type | None, future: asyncio.Future[Any]):
        self.schema = schema
        """The request's kio class, whose response is decoded; None: the caller decodes (`send_frame`)."""
        self.future = future


class _ClientProtocol(asyncio.BufferedProtocol):
    """Splits the byte stream into frames (common/network/framing's FrameDecoder, shared with the
    server) and completes the matching pending request.

    A large response (a replica fetch of megabytes) is received straight into a buffer of its
    own. That buffer is reused (`NetworkClient.recycle`) once its reader is done with it: a fresh
    one of megabytes per response costs page faults and zeroing on every round trip."""

    def __init__(self, owner: NetworkClient):
        self.owner = owner
        self.transport: Any = None
        """asyncio.Transport (the TLS one on SSL and SASL_SSL)."""
        self.decoder = FrameDecoder(MAX_RESPONSE_BYTES, min_size=4, recv_buffer=RECV_BUFFER, trust_sizes=True)
        self.pending: dict[int, _Pending] = {}
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except FrameSizeError as e:
            self._abort(ConnectionError(f"bad response frame size {e.size}"))
            return
        for frame in frames:
            self._complete(frame)

    def keep_spare(self, buffer: Any) -> None:
        """Keep a large frame's buffer for the next one (the larger of it and the current spare)."""
        self.decoder.recycle(buffer)

    def _complete(self, frame: Frame) -> None:
        """`frame` is bytes, or a view of a large buffer that goes back to `spare` unless the
        caller decodes it itself (`send_frame`) and recycles it when done."""
        (correlation_id,) = wire.SIZE.unpack_from(frame, 0)
        pending = self.pending.pop(correlation_id, None)
        if pending is None:
            self._abort(ConnectionError(f"response with unknown correlation id {correlation_id}"))
            return
        if pending.future.done():
            return
        if pending.schema is None:
            pending.future.set_result(frame)
            return
        if not isinstance(frame, bytes):
            # kio's values may keep views of what they read: they get immutable bytes of their own
            if isinstance(frame, memoryview):
                self.keep_spare(frame.obj)
            frame = bytes(frame)
        try:
            _, payload = wire.decode_response(pending.schema, frame)
        except Exception as e:  # a malformed answer fails this request, not the process
            pending.future.set_exception(ValueError(f"malformed {pending.schema.__name__} response: {e}"))
            return
        pending.future.set_result(payload)

    def _abort(self, exc: Exception) -> None:
        self._fail_all(exc)
        if self.transport is not None:
            self.transport.abort()

    def _fail_all(self, exc: Exception) -> None:
        pending, self.pending = self.pending, {}
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(ConnectionError(f"connection lost: {exc or 'closed'}"))
        if not self.closed.done():
            self.closed.set_result(None)


class NetworkClient:
    """Requests to one (host, port). `send()` connects on demand; `close()` fails what is in flight.

    Connecting retries `connect_attempts` times with exponential backoff (bounded), then raises
    ConnectionError; callers decide whether to try again later.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = "odradek",
        connect_timeout: float = 5.0,
        connect_attempts: int = 3,
        backoff_ms: int = 50,
        backoff_max_ms: int = 1000,
        security: ClientSecurity = PLAINTEXT,
    ):
        self.security = security
        """The security protocol and its TLS context and SASL step (common/security/channel)."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.connect_attempts = max(1, connect_attempts)
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self._protocol: _ClientProtocol | None = None
        self._connect_lock = asyncio.Lock()
        self._correlation = itertools.count(1)
        self._closed = False

    def __repr__(self) -> str:
        return f"NetworkClient({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        p = self._protocol
        return p is not None and p.transport is not None and not p.transport.is_closing()

    async def connect(self) -> None:
        async with self._connect_lock:
            if self.connected:
                return
            if self._closed:
                raise ConnectionError(f"{self} is closed")
            loop = asyncio.get_running_loop()
            delay = self.backoff_ms / 1000
            last: Exception | None = None
            for attempt in range(self.connect_attempts):
                if attempt:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.backoff_max_ms / 1000)
                context = self.security.ssl_context()
                tls: dict[str, Any] = {} if context is None else {
                    "ssl": context, "server_hostname": self.host,
                    "ssl_handshake_timeout": self.connect_timeout}
                try:
                    _, protocol = await asyncio.wait_for(
                        loop.create_connection(lambda: _ClientProtocol(self), self.host, self.port, **tls),
                        self.connect_timeout,
                    )
                except (TimeoutError, OSError) as e:  # ssl.SSLError (an untrusted server) is an OSError
                    last = e
                    continue
                if self._closed:  # closed while connecting: nothing may start on this connection
                    protocol._abort(ConnectionError("client closed"))
                    raise ConnectionError(f"{self} is closed")
                self._protocol = protocol
                if self.security.authenticate is not None:
                    try:
                        await self.security.authenticate(self)
                    except BaseException:
                        self._protocol = None
                        protocol._abort(ConnectionError("authentication failed"))
                        raise
                return
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {last}")

    def _next_correlation_id(self) -> int:
        cid = next(self._correlation)
        if cid >= 2**31 - 1:
            self._correlation = itertools.count(1)
        return cid

    async def send(self, payload: object, timeout: float = 30.0, *, expect_response: bool = True) -> Any:
        """Send one request and return its decoded response payload.

        Raises ConnectionError when the connection fails or closes, TimeoutError after `timeout`
        seconds (the connection is closed then, failing every request in flight on it, as Kafka's
        client does). With `expect_response=False` (Produce acks=0) it returns None once written.
        """
        return await self._send(
            lambda correlation_id: wire.encode_request(payload, correlation_id, self.client_id),
            type(payload), timeout, expect_response,
        )

    async def send_encoded(self, frame: bytes, schema: type, timeout: float = 30.0) -> Any:
        """`send` of a request encoded ahead of time (`wire.encode_request`, any correlation id):
        the frame goes out with this connection's next correlation id."""
        return await self._send(lambda correlation_id: wire.with_correlation_id(frame, correlation_id),
                                schema, timeout, True)

    async def send_frame(self, encode: Callable[[int], bytes], what: str, timeout: float = 30.0) -> Any:
        """Send a request frame the caller encodes (`encode(correlation_id) -> bytes`, size
        prefix included) and return the response frame body undecoded, from its correlation id
        on. A memoryview answer is a view of a reused buffer: pass it to `recycle` when done."""
        return await self._send(encode, None, timeout, True, what)

    def recycle(self, frame: memoryview | bytes) -> None:
        """Hand a `send_frame` answer's buffer back for the next large response."""
        protocol = self._protocol
        if isinstance(frame, memoryview) and protocol is not None:
            buffer = frame.obj
            frame.release()
            protocol.keep_spare(buffer)

    async def _send(self, encode: Callable[[int], bytes], schema: type | None, timeout: float,
                    expect_response: bool, what: str = "") -> Any:
        what = what or (schema.__name__ if schema is not None else "request")
        if not self.connected:
            await self.connect()
        protocol = self._protocol
        if protocol is None:
            raise ConnectionError(f"{self}: not connected")
        correlation_id = self._next_correlation_id()
        frame = encode(correlation_id)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if expect_response:
            protocol.pending[correlation_id] = _Pending(schema, future)
        protocol.transport.write(frame)
        if not expect_response:
            return None
        # The answer completes `future` and wakes this task in one step; a timer fails it at the
        # timeout. (wait_for(shield(...)) took three more futures and three more turns of the
        # loop per answer: 12 us of each replica fetch's round trip.)
        timer = loop.call_later(timeout, _expire, future)
        try:
            return await future
        except _RequestTimeout:
            log.warning("%s: request %s timed out after %.1fs; disconnecting", self, what, timeout)
            protocol.pending.pop(correlation_id, None)
            protocol._abort(ConnectionError("disconnected after a request timeout"))
            raise TimeoutError(f"{what} to {self.host}:{self.port} timed out") from None
        finally:
            timer.cancel()
            if not future.done():
                future.cancel()  # this task was cancelled: a late answer is dropped
            protocol.pending.pop(correlation_id, None)

    def disconnect(self) -> None:
        """Drop the current connection (in-flight requests fail); the next send reconnects."""
        p, self._protocol = self._protocol, None
        if p is not None and p.transport is not None:
            p._abort(ConnectionError("disconnected"))

    async def close(self) -> None:
        self._closed = True
        p, self._protocol = self._protocol, None
        if p is not None and p.transport is not None:
            p._fail_all(ConnectionError("client closed"))
            p.transport.close()
            try:
                await asyncio.wait_for(asyncio.shield(p.closed), 1.0)
            except TimeoutError:
                p.transport.abort()
