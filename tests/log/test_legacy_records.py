"""broker/log/legacy_records: message formats v0/v1 up-converted for Produce v0-v2 and the log's
v2 batches down-converted for Fetch v0-v3."""

import struct
import zlib

import pytest

from odradek.broker.log import compression
from odradek.broker.log import legacy_records as lr
from odradek.broker.log.control_batch import build_marker
from odradek.broker.log.errors import CorruptRecordError, InvalidRecordError
from odradek.broker.log.record_batch import build_batch, decode_records


def message(offset: int, magic: int, timestamp: int, key, value, codec: int = 0) -> bytes:
    body = struct.pack(">Bb", magic, codec) + (struct.pack(">q", timestamp) if magic == 1 else b"")
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    m = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(m)) + m


@pytest.mark.parametrize("magic", [0, 1])
def test_a_message_set_becomes_one_v2_batch(magic):
    batch = lr.up_convert(message(0, magic, 1000, b"k", b"a") + message(1, magic, 1001, None, b"b"))
    got = [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(batch)]
    ts = (1000, 1001) if magic == 1 else (-1, -1)
    assert got == [(0, ts[0], b"k", b"a"), (1, ts[1], None, b"b")]


def test_a_compressed_wrapper_is_inflated_and_its_codec_kept():
    inner = message(0, 1, 1000, b"a", b"x") + message(1, 1, 1002, b"b", b"y")
    wrapper = message(1, 1, 1002, None, compression.compress(compression.GZIP, inner), codec=compression.GZIP)
    batch = lr.up_convert(wrapper)
    assert batch[21 + 1] & 0x07 == compression.GZIP  # attributes' codec bits
    assert [(r.offset, r.key, r.value) for r in decode_records(batch)] == [(0, b"a", b"x"), (1, b"b", b"y")]


def test_bad_messages_are_refused():
    good = message(0, 1, 1000, b"k", b"v")
    with pytest.raises(CorruptRecordError, match="CRC"):
        lr.up_convert(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(CorruptRecordError):
        lr.up_convert(good[:-3])
    with pytest.raises(InvalidRecordError):
        lr.up_convert(b"")
    bad = bytearray(good)
    bad[16] = 2
    bad[12:16] = struct.pack(">I", zlib.crc32(bytes(bad[16:])))
    with pytest.raises(InvalidRecordError, match="magic"):
        lr.up_convert(bytes(bad))


def test_v2_batches_are_down_converted_from_the_fetch_offset_without_markers():
    data = build_batch([(b"k1", b"v1"), (None, b"v2")], base_offset=10, base_timestamp=5000)
    marker = bytearray(build_marker(1, 0, 0, True, 5500))
    marker[0:8] = struct.pack(">q", 12)  # the CRC does not cover the base offset
    data += bytes(marker)
    data += build_batch([b"v3"], base_offset=13, base_timestamp=6000, compression="gzip")
    data += data[:20]  # a partial batch at the end is dropped
    v1 = list(lr._messages(lr.down_convert(data, 1, 11)))
    assert [(m, ts, k, v) for m, _, ts, k, v in v1] == [(1, 5000, None, b"v2"), (1, 6000, None, b"v3")]
    v0 = list(lr._messages(lr.down_convert(data, 0)))
    assert [(m, ts, k, v) for m, _, ts, k, v in v0] == [(0, -1, b"k1", b"v1"), (0, -1, None, b"v2"),
                                                         (0, -1, None, b"v3")]
