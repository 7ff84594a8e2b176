"""Kafka framing without I/O: bytes in, whole frames out (an int32 size prefix, then the body).

One implementation for both ends (the socket server and common/network/client.py), in the style of
h11's `receive_data` and kafka-python's KafkaProtocol: the decoder never touches a socket, so it is
tested by feeding it bytes. Two ways in:
- `receive_data(data)`: for transports that hand over bytes (and tests);
- `get_buffer()` / `buffer_updated(n)`: for asyncio.BufferedProtocol, which receives straight
  into the decoder's memory, so a frame's bytes are copied once at most.

Memory follows the bytes that arrived, never a claimed size: frames that fit the receive buffer
are sliced out of it; a larger frame keeps filling that buffer until it is full, then moves to a
buffer of its own that grows (by GROWTH) as more of it arrives, up to its size. A peer that sends
a 100 MiB size prefix and nothing else costs the receive buffer, not 100 MiB (issue 11,
finding 6). A reused buffer (`recycle`) that already fits the frame is used at once: the client
receives replica fetches of megabytes into the same buffer round after round.
"""

from __future__ import annotations

import struct
import sys

_SIZE = struct.Struct(">i")

Frame = bytes | bytearray | memoryview
"""One frame's body: bytes (bytearray if `writable`), or a view of a buffer of its own."""

RECV_BUFFER = 256 * 1024
GROWTH = 4
"""A large frame's own buffer grows by this factor as its bytes arrive (copies stay under a third
of the frame's size in total)."""
STEP = 1 << 20
"""A large frame's final buffer is its size rounded up to this, so a recycled one fits the next
few frames of about the same size."""
RECLAIM_MAX = 2 * STEP
"""A `reclaim` decoder takes back buffers up to this size only: what a connection keeps between
frames stays small (a producer's requests are about 1 MB at most with librdkafka's defaults)."""


class FrameSizeError(ValueError):
    """A size prefix outside [min_size, max_size]: the stream cannot be trusted any further."""

    def __init__(self, size: int, min_size: int, max_size: int):
        super().__init__(f"frame size {size} outside [{min_size}, {max_size}]")
        self.size = size


class FrameDecoder:
    """Splits a byte stream into frames. Small frames come out as bytes (bytearrays if
    `writable`); a frame that needed a buffer of its own comes out as a memoryview of exactly its
    size over that buffer."""

    def __init__(self, max_size: int, min_size: int = 0, recv_buffer: int = RECV_BUFFER, *,
                 trust_sizes: bool = False, writable: bool = False, reclaim: bool = False):
        self.max_size = max_size
        self.min_size = min_size
        self.trust_sizes = trust_sizes
        """Allocate a large frame's buffer from its size prefix at once (a client, whose peer is
        a broker it chose): no copies while it grows. A server never trusts a peer this way."""
        self._reclaim = reclaim and hasattr(sys, "getrefcount")
        """Take the last large frame's buffer back as the spare once nothing refers to it any more
        (its reference count says so: every view of it holds a reference), instead of allocating
        and zeroing a new one per large frame; for readers that never call `recycle` (a server)."""
        self._lent: bytearray | None = None
        self._small = bytearray if writable else bytes
        """Small frames come out as bytearrays (`writable`, for a reader that rewrites parts in
        place, as the broker does a produce request's batch headers) or as bytes."""
        self._buf = bytearray(recv_buffer)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None
        """The own buffer of the frame being received, its body from index 0."""
        self._big_fill = 0
        self._big_size = 0
        self._spare: bytearray | None = None

    # --- state --------------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes received and held for frames not yet complete."""
        return (self._end - self._start) + self._big_fill

    @property
    def pending_size(self) -> int:
        """The size of the frame being received (0 between frames)."""
        if self._big is not None:
            return self._big_size
        if self._end - self._start >= 4:
            size: int = _SIZE.unpack_from(self._buf, self._start)[0]
            return size
        return 0

    def recycle(self, buffer: object) -> None:
        """Offer a large frame's buffer back, once its reader is done with it; the larger one is
        kept for the next large frame."""
        if isinstance(buffer, bytearray) and (self._spare is None or len(buffer) > len(self._spare)):
            self._spare = buffer

    # --- input --------------------------------------------------------------------------------

    def get_buffer(self) -> memoryview:
        """Where the transport writes the next bytes (never empty)."""
        if self._big is not None:
            if self._big_fill == len(self._big):
                self._grow()
            return memoryview(self._big)[self._big_fill : min(len(self._big), self._big_size)]
        if self._end == len(self._buf):
            self._compact()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        """`nbytes` were written into the last `get_buffer()`; returns the frames completed."""
        if self._big is not None:
            self._big_fill += nbytes
            if self._big_fill < self._big_size:
                return []
            frame = memoryview(self._big)[: self._big_size]
            if self._reclaim and len(self._big) <= RECLAIM_MAX:
                self._lent = self._big
            self._big = None
            self._big_fill = self._big_size = 0
            return [frame]
        self._end += nbytes
        return self._parse()

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Feeds bytes that arrived; returns the frames completed."""
        frames: list[Frame] = []
        view = memoryview(data)
        while view:
            target = self.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            view = view[n:]
            frames += self.buffer_updated(n)
        return frames

    # --- internals ----------------------------------------------------------------------------

    def _compact(self) -> None:
        n = self._end - self._start
        if self._start:
            self._buf[0:n] = self._buf[self._start : self._end]
        self._start, self._end = 0, n

    def _parse(self) -> list[Frame]:
        frames: list[Frame] = []
        buf = self._buf
        while True:
            avail = self._end - self._start
            if avail < 4:
                break
            (size,) = _SIZE.unpack_from(buf, self._start)
            if size < self.min_size or size > self.max_size:
                raise FrameSizeError(size, self.min_size, self.max_size)
            body = self._start + 4
            if avail - 4 >= size:
                frames.append(self._small(self._view[body : body + size]))
                self._start = body + size
                continue
            if 4 + size <= len(buf):
                if self._start + 4 + size > len(buf):
                    self._compact()  # the rest of the frame fits once it starts at 0
                break
            if self._start:
                self._compact()
            if self._lent is not None:
                self._take_back()
            if self._end == len(buf) or self._fits_spare(size) or self.trust_sizes:
                self._own_buffer(size)
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def _take_back(self) -> None:
        lent = self._lent
        if sys.getrefcount(lent) <= 3:  # self._lent, `lent` and getrefcount's argument: no view is left
            self._lent = None
            self.recycle(lent)

    def _fits_spare(self, size: int) -> bool:
        return self._spare is not None and len(self._spare) >= size

    def _own_buffer(self, size: int) -> None:
        """Moves the frame being received (at the start of the receive buffer) to a buffer of its
        own: the spare if it fits, else one sized by what has arrived (GROWTH times), not by
        `size`."""
        have = self._end - 4
        spare = self._spare
        if spare is not None and len(spare) >= size:
            big, self._spare = spare, None
        elif self.trust_sizes:
            big = bytearray(_rounded(size))
        else:
            big = bytearray(min(_rounded(size), max(have, 1) * GROWTH))
        big[0:have] = self._buf[4 : self._end]
        self._big, self._big_fill, self._big_size = big, have, size
        self._start = self._end = 0

    def _grow(self) -> None:
        old = self._big
        assert old is not None
        big = bytearray(min(_rounded(self._big_size), len(old) * GROWTH))
        big[0 : self._big_fill] = old[0 : self._big_fill]
        self._big = big


def _rounded(size: int) -> int:
    return -(-size // STEP) * STEP
