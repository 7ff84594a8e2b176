"""broker/produce.py: the hand-written Produce response encoding (read back with kio's reader)
and the legacy (v0-v2) request parser."""

import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from odradek.broker import produce as produce_codec
from odradek.broker.replica_manager import ProduceResult
from odradek.common import wire


@pytest.mark.parametrize("version", [0, 1, 2, 3, 5, 7, 8, 9])
def test_produce_response_encoding_reads_back(version):
    ok = ProduceResult(base_offset=1234, log_append_time=-1, log_start_offset=7)
    bad = ProduceResult(error=ErrorCode.not_leader_or_follower)
    chunks, size = produce_codec.encode_produce_response(version, [("t", [(0, ok), (1, bad)])])
    body = b"".join(chunks)
    assert len(body) == size
    if version < 3:
        # kio has no classes before v3: check the v0 prefix by hand.
        (n,) = struct.unpack_from(">i", body, 0)
        assert n == 1
        return
    resp, used = entity_reader(wire.response_schema(0, version))(body, 0)
    assert used == len(body)
    parts = resp.responses[0].partition_responses
    assert (parts[0].index, parts[0].error_code, parts[0].base_offset) == (0, ErrorCode.none, 1234)
    assert parts[1].error_code == ErrorCode.not_leader_or_follower
    if version >= 5:
        assert parts[0].log_start_offset == 7


def test_legacy_produce_request_is_parsed_for_its_partitions():
    body = struct.pack(">hhih", 0, 2, 9, 3) + b"cli" + struct.pack(">hii", 1, 1000, 2)
    body += struct.pack(">h", 1) + b"a" + struct.pack(">i", 2) + struct.pack(">ii", 0, 3) + b"xyz"
    body += struct.pack(">ii", 5, -1)
    body += struct.pack(">h", 2) + b"bb" + struct.pack(">i", 0)
    acks, timeout, topics = produce_codec.parse_legacy_request(body)
    assert (acks, timeout) == (1, 1000)
    assert topics == [("a", [(0, b"xyz"), (5, b"")]), ("bb", [])]
    with pytest.raises(ValueError):
        produce_codec.parse_legacy_request(body[:-3])
    with pytest.raises(ValueError):
        produce_codec.parse_legacy_request(struct.pack(">hhih", 0, 2, 9, -1) + struct.pack(">hii", 1, 1, 2**30))


@pytest.mark.parametrize("version", [10, 11])
def test_produce_v10_carries_kip951_leader_hints_as_tagged_fields(version):
    ok = ProduceResult(base_offset=5)
    moved = ProduceResult(error=ErrorCode.not_leader_or_follower)
    chunks, size = produce_codec.encode_produce_response(
        version, [("t", [(0, ok), (1, moved)])], leaders={("t", 1): (3, 7)}, endpoints=[(3, "b3.local", 9093, "r1")])
    body = b"".join(chunks)
    assert len(body) == size
    resp, used = entity_reader(wire.response_schema(0, version))(body, 0)
    assert used == len(body)
    first, second = resp.responses[0].partition_responses
    assert (first.current_leader.leader_id, first.current_leader.leader_epoch) == (-1, -1)  # absent: defaults
    assert (second.current_leader.leader_id, second.current_leader.leader_epoch) == (3, 7)
    (node,) = resp.node_endpoints
    assert (node.node_id, node.host, node.port, node.rack) == (3, "b3.local", 9093, "r1")
