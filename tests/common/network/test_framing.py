"""common/network/framing: frames out of a byte stream in any split, sizes checked, memory by arrival."""

import random
import struct

import pytest

from odradek.common.network.framing import GROWTH, FrameDecoder, FrameSizeError


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def feed_buffered(decoder: FrameDecoder, data: bytes, max_chunk: int, rng: random.Random) -> list:
    """Feeds `data` the BufferedProtocol way (into get_buffer), in random pieces."""
    frames = []
    pos = 0
    while pos < len(data):
        target = decoder.get_buffer()
        assert len(target) > 0
        n = min(len(target), len(data) - pos, rng.randint(1, max_chunk))
        target[:n] = data[pos : pos + n]
        pos += n
        frames += [bytes(f) for f in decoder.buffer_updated(n)]
    return frames


@pytest.mark.parametrize(("max_chunk", "sizes"), [
    (1, [0, 1, 10, 200]),
    (7, [0, 1, 10, 1000, 5000]),
    (4096, [0, 10, 1000, 70_000, 300_000]),
    (1 << 20, [0, 10, 1000, 70_000, 300_000, 2_000_000]),
])
def test_any_split_yields_the_same_frames(max_chunk, sizes):
    rng = random.Random(max_chunk)
    bodies = [rng.randbytes(rng.choice(sizes)) for _ in range(30)]
    stream = b"".join(framed(b) for b in bodies)
    decoder = FrameDecoder(max_size=4 << 20, recv_buffer=max(64, min(sizes[-1] // 4, 64 * 1024)))
    assert feed_buffered(decoder, stream, max_chunk, rng) == bodies
    assert decoder.buffered == 0 and decoder.pending_size == 0


def test_receive_data_splits_like_the_buffered_path():
    bodies = [b"a" * n for n in (0, 5, 100_000, 3)]
    stream = b"".join(framed(b) for b in bodies)
    decoder = FrameDecoder(max_size=1 << 20, recv_buffer=1024)
    out = []
    for i in range(0, len(stream), 333):
        out += [bytes(f) for f in decoder.receive_data(stream[i : i + 333])]
    assert out == bodies


@pytest.mark.parametrize("size", [-1, -(2**31), (1 << 20) + 1, 2**31 - 1])
def test_a_size_outside_the_limits_is_refused(size):
    decoder = FrameDecoder(max_size=1 << 20)
    with pytest.raises(FrameSizeError):
        decoder.receive_data(struct.pack(">i", size) + b"x")


def test_min_size():
    decoder = FrameDecoder(max_size=100, min_size=4)
    with pytest.raises(FrameSizeError):
        decoder.receive_data(struct.pack(">i", 3) + b"abc")


def test_a_bare_size_prefix_allocates_nothing_of_the_claimed_size():
    """A 100 MiB claim with only a few bytes behind it holds the receive buffer and nothing more;
    the frame's own buffer grows with what arrives (GROWTH at a time), up to its size."""
    decoder = FrameDecoder(max_size=200 << 20, recv_buffer=64 * 1024)
    assert decoder.receive_data(struct.pack(">i", 100 << 20) + b"x" * 10) == []
    assert decoder.pending_size == 100 << 20
    assert decoder._big is None  # still in the receive buffer
    decoder.receive_data(b"y" * (64 * 1024))  # the receive buffer is full: the frame moves out
    assert decoder._big is not None
    assert len(decoder._big) <= 64 * 1024 * GROWTH
    assert decoder.buffered == 64 * 1024 + 10


def test_a_recycled_buffer_takes_the_next_large_frame_without_copying_it_again():
    decoder = FrameDecoder(max_size=8 << 20, recv_buffer=4096)
    body = bytes(range(256)) * 8192  # 2 MiB
    (frame,) = decoder.receive_data(framed(body))
    assert bytes(frame) == body
    buffer = frame.obj
    frame.release()
    decoder.recycle(buffer)
    (again,) = decoder.receive_data(framed(body[::-1]))
    assert again.obj is buffer and bytes(again) == body[::-1]


def test_a_client_trusting_its_peer_allocates_by_the_size_prefix_at_once():
    decoder = FrameDecoder(max_size=64 << 20, recv_buffer=4096, trust_sizes=True)
    assert decoder.receive_data(struct.pack(">i", 5 << 20) + b"x" * 100) == []
    assert decoder._big is not None and len(decoder._big) >= 5 << 20


def test_writable_frames_can_be_rewritten_in_place():
    """The broker's decoder (writable=True): small frames are bytearrays, large ones writable views
    of their own buffer; the default keeps small frames as bytes."""
    small, large = b"s" * 10, b"L" * 5000
    decoder = FrameDecoder(max_size=1 << 20, recv_buffer=1024, writable=True)
    frames = decoder.receive_data(framed(small) + framed(large))
    assert [bytes(f) for f in frames] == [small, large]
    assert isinstance(frames[0], bytearray)
    assert isinstance(frames[1], memoryview) and not frames[1].readonly
    frames[1][0:1] = b"x"
    assert type(FrameDecoder(max_size=100).receive_data(framed(small))[0]) is bytes


def test_a_reclaiming_decoder_reuses_a_large_frames_buffer_only_once_no_view_is_left():
    body = bytes(range(256)) * 1024  # 256 KiB: a buffer of its own
    decoder = FrameDecoder(max_size=8 << 20, recv_buffer=4096, writable=True, reclaim=True)
    (first,) = decoder.receive_data(framed(body))
    held = first[10:20]  # a slice keeps the buffer alive as surely as the frame does
    first_id = id(first.obj)
    del first
    (second,) = decoder.receive_data(framed(body[::-1]))
    assert id(second.obj) != first_id and bytes(held) == body[10:20]  # still referenced: not reused
    second_id = id(second.obj)
    del held, second
    (third,) = decoder.receive_data(framed(body))
    assert id(third.obj) == second_id and bytes(third) == body  # nothing referred to it: reused
    big = FrameDecoder(max_size=64 << 20, recv_buffer=4096, reclaim=True)
    (huge,) = big.receive_data(framed(b"h" * (3 << 20)))
    del huge
    assert big._lent is None  # larger than RECLAIM_MAX: never kept
