import struct

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from odradek.broker.log.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from odradek.broker.log.record_batch import (
    CONTROL_MASK,
    HEADER,
    build_batch,
    check_batch,
    decode_records,
    record_timestamps,
    set_log_append_time,
    validate_batches,
)


def test_build_and_decode_round_trip_with_keys_headers_and_timestamps():
    records = [(b"k1", b"v1", [("h", b"x")], 1005), (None, b"v2", (), 1001), (b"k3", None)]
    data = build_batch(records, base_offset=40, base_timestamp=1000, compression=None)
    out = decode_records(data)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in out] == [
        (40, 1005, b"k1", b"v1", [("h", b"x")]),
        (41, 1001, None, b"v2", []),
        (42, 1000, b"k3", None, []),
    ]
    assert HEADER.unpack_from(data)[8] == 1005  # maxTimestamp
    assert record_timestamps(data) == [(40, 1005), (41, 1001), (42, 1000)]


def test_gzip_batch_round_trip():
    data = build_batch([b"a" * 100] * 10, compression="gzip")
    assert len(data) < 200
    assert [r.value for r in decode_records(data)] == [b"a" * 100] * 10


def test_several_batches_validate():
    data = build_batch([b"a"]) + build_batch([b"b", b"c"])
    infos = validate_batches(data)
    assert [(i.position, i.records_count, i.last_offset_delta) for i in infos] == [(0, 1, 0), (len(data) - infos[1].size, 2, 1)]


def _rewrite(data: bytes, pos: int, fmt: str, value, fix_crc: bool = True) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, pos, value)
    if fix_crc:
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_corrupt_crc_is_corrupt_message():
    data = bytearray(build_batch([b"hello"]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as err:
        validate_batches(data)
    assert err.value.error_code == ErrorCode.corrupt_message


def test_batch_length_below_minimum_is_corrupt():
    data = _rewrite(build_batch([b"x"]), 8, ">i", 10, fix_crc=False)
    with pytest.raises(CorruptRecordError):
        validate_batches(data)


def test_truncated_batch_is_corrupt_for_clients_and_dropped_for_followers():
    whole = build_batch([b"x"])
    data = whole + build_batch([b"y" * 50])[:30]
    with pytest.raises(CorruptRecordError):
        validate_batches(data)
    assert len(validate_batches(data, allow_partial_tail=True)) == 1


def test_wrong_magic_is_invalid_record():
    data = _rewrite(build_batch([b"x"]), 16, ">b", 1, fix_crc=False)
    with pytest.raises(InvalidRecordError) as err:
        validate_batches(data)
    assert err.value.error_code == ErrorCode.invalid_record


def test_count_mismatch_is_invalid_record():
    data = _rewrite(build_batch([b"x", b"y"]), 57, ">i", 3)
    with pytest.raises(InvalidRecordError):
        validate_batches(data)
    data = _rewrite(build_batch([b"x"]), 23, ">i", -1)
    with pytest.raises(InvalidRecordError):
        validate_batches(data)


def test_too_large_batch():
    data = build_batch([b"x" * 1000])
    with pytest.raises(RecordTooLargeError) as err:
        validate_batches(data, max_batch_bytes=len(data) - 1)
    assert err.value.error_code == ErrorCode.message_too_large
    assert validate_batches(data, max_batch_bytes=len(data))


def test_control_batches_pass_the_framing_checks():
    """A follower appends the leader's control batches; clients' are refused by log_validator."""
    data = build_batch([b"x"], attributes=CONTROL_MASK)
    assert validate_batches(data)


def test_unknown_compression_is_invalid():
    data = _rewrite(build_batch([b"x"]), 21, ">h", 6)
    with pytest.raises(InvalidRecordError):
        validate_batches(data)


def test_log_append_time_rewrite_keeps_crc_valid():
    buf = bytearray(build_batch([b"x"], base_timestamp=5))
    set_log_append_time(buf, 0, len(buf), 123456)
    info = check_batch(buf, 0, len(buf))
    assert info.is_log_append_time and info.max_timestamp == 123456
    assert decode_records(bytes(buf))[0].timestamp == 123456
