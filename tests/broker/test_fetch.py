"""broker/fetch.py: the hand-written Fetch response encoding, read back with kio's reader."""

import os

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from odradek.broker import fetch as fetch_codec
from odradek.broker.log.local_log import FileRegion
from odradek.broker.replica_manager import FetchResult
from odradek.common import wire


def _join(chunks) -> bytes:
    out = bytearray()
    for c in chunks:
        if isinstance(c, (bytes, bytearray)):
            out += c
        else:
            out += os.pread(c.file.fileno(), c.size, c.position)
    return bytes(out)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5, 7, 10, 11, 12])
def test_fetch_response_encoding_reads_back_with_kio(version, tmp_path):
    data = b"".join(bytes([i]) * 100 for i in range(7))
    path = tmp_path / "seg"
    path.write_bytes(b"junk" + data + b"tail")
    with open(path, "rb") as f:
        regions = [FileRegion(f, 4, 300), FileRegion(f, 304, 400)]
        ok = FetchResult(high_watermark=42, last_stable_offset=42, log_start_offset=3, regions=regions, size=700)
        err = FetchResult(error=ErrorCode.offset_out_of_range, high_watermark=5, last_stable_offset=5, log_start_offset=0)
        chunks, size = fetch_codec.encode_fetch_response(version, [("topic-a", [(0, ok), (3, err)]), ("b", [])])
        body = _join(chunks)
    assert len(body) == size
    cls = wire.response_schema(1, version)
    resp, used = entity_reader(cls)(body, 0)
    assert used == len(body)
    assert [t.topic for t in resp.responses] == ["topic-a", "b"]
    p0, p3 = resp.responses[0].partitions
    assert (p0.partition_index, p0.error_code, p0.high_watermark) == (0, ErrorCode.none, 42)
    assert p0.records == data
    assert (p3.partition_index, p3.error_code) == (3, ErrorCode.offset_out_of_range)
    assert not p3.records
    if version >= 5:
        assert p0.log_start_offset == 3
    if version >= 7:
        assert resp.session_id == 0 and resp.error_code == ErrorCode.none


@pytest.mark.parametrize("version", [13, 15, 16, 17])
def test_fetch_v13_names_topics_by_id_and_v16_hints_the_leader(version):
    import uuid

    tid = uuid.uuid4()
    moved = FetchResult(error=ErrorCode.not_leader_or_follower)
    ok = FetchResult(high_watermark=1, last_stable_offset=1, log_start_offset=0)
    chunks, size = fetch_codec.encode_fetch_response(
        version, [("t", [(0, ok), (1, moved)])], topic_ids={"t": tid}, leaders={("t", 1): (2, 9)},
        endpoints=[(2, "b2", 9092, None)])
    body = _join(chunks)
    assert len(body) == size
    resp, used = entity_reader(wire.response_schema(1, version))(body, 0)
    assert used == len(body)
    (topic,) = resp.responses
    assert topic.topic_id == tid
    first, second = topic.partitions
    if version >= 16:
        assert (second.current_leader.leader_id, second.current_leader.leader_epoch) == (2, 9)
        assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [(2, "b2", 9092)]
    assert first.current_leader.leader_id == -1
