"""The follower's hand-made Fetch v11 against the references: kio reads its requests the way the
broker does, and it reads what the broker's own response encoder writes."""

import os

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker import fetch as fetch_codec
from odradek.broker.log import FileRegion
from odradek.broker.replica_fetch_codec import PartitionFetch, decode_fetch_response, encode_fetch_request
from odradek.broker.replica_manager import FetchResult
from odradek.common import wire


def test_request_reads_back_with_kio():
    frame = encode_fetch_request(
        7, "replica-fetcher-1-0", replica_id=1, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20,
        session_id=42, session_epoch=3,
        topics={"a": [PartitionFetch(0, 5, 100, 10, 1 << 20), PartitionFetch(2, 5, 7, 0, 1 << 20)],
                "bé": [PartitionFetch(1, 0, 0, 0, 4096)]},
        forgotten={"old": [3, 4]},
    )
    (size,) = wire.SIZE.unpack_from(frame, 0)
    assert size == len(frame) - 4
    header, request, _ = wire.decode_request(frame[4:])
    assert (int(header.request_api_key), int(header.request_api_version), int(header.correlation_id)) == (1, 11, 7)
    assert header.client_id == "replica-fetcher-1-0"
    assert (int(request.replica_id), int(request.min_bytes), int(request.max_bytes)) == (1, 1, 10 << 20)
    assert wire.ms(request.max_wait) == 500
    assert (int(request.session_id), int(request.session_epoch), int(request.isolation_level)) == (42, 3, 0)
    got = {(t.topic, int(p.partition)): (int(p.current_leader_epoch), int(p.fetch_offset), int(p.log_start_offset),
                                         int(p.partition_max_bytes))
           for t in request.topics for p in t.partitions}
    assert got == {("a", 0): (5, 100, 10, 1 << 20), ("a", 2): (5, 7, 0, 1 << 20), ("bé", 1): (0, 0, 0, 4096)}
    assert [(t.topic, [int(i) for i in t.partitions]) for t in request.forgotten_topics_data] == [("old", [3, 4])]
    assert request.rack_id == ""


def test_response_written_by_the_broker_reads_back(tmp_path):
    data = os.urandom(3000)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    with open(path, "rb") as f:
        results = {
            ("t", 0): FetchResult(high_watermark=50, last_stable_offset=50, log_start_offset=3,
                                  regions=[FileRegion(f, 100, 1000), FileRegion(f, 1100, 500)], size=1500),
            ("t", 1): FetchResult(high_watermark=9, last_stable_offset=9, log_start_offset=0),
            ("u", 4): FetchResult(error=ErrorCode.not_leader_or_follower),
        }
        topics = [("t", [(0, results[("t", 0)]), (1, results[("t", 1)])]), ("u", [(4, results[("u", 4)])])]
        chunks, size = fetch_codec.encode_fetch_response(11, topics, session_id=77)
        body = b"".join(c.read_bytes() if isinstance(c, FileRegion) else bytes(c) for c in chunks)
    assert len(body) == size
    frame = memoryview(wire.SIZE.pack(123) + body)  # header v0: the correlation id
    response = decode_fetch_response(frame)
    assert (response.error_code, response.session_id) == (0, 77)
    by_key = {(p.topic, p.partition): p for p in response.partitions}
    assert list(by_key) == [("t", 0), ("t", 1), ("u", 4)]
    p0 = by_key[("t", 0)]
    assert (p0.error_code, p0.high_watermark, p0.log_start_offset) == (0, 50, 3)
    assert bytes(p0.records) == data[100:1600]
    assert bytes(by_key[("t", 1)].records) == b""
    assert by_key[("u", 4)].error_code == ErrorCode.not_leader_or_follower


def test_truncated_response_is_an_error():
    full = wire.SIZE.pack(1) + b"\0\0\0\0" + b"\0\0" + b"\0\0\0\0" + b"\0\0\0\1" + b"\0\1t" + b"\0\0\0\1" + b"\0" * 10
    with pytest.raises(ValueError):
        decode_fetch_response(memoryview(full))
