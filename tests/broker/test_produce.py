"""broker/produce.py: the hand-written Produce response encoding (read back with kio's reader),
the hand-written v3-v11 request decoder (against kio's) and the legacy (v0-v2) request parser."""

import datetime
import random
import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import i16, i32, i32Timedelta

from odradek.broker import produce as produce_codec
from odradek.broker.error_response import error_response
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


def _produce_request(version, transactional_id="tx", topics=(("a", ((0, b"batch-0"), (3, None))), ("bb", ()))):
    schema = wire.request_schema(0, version)
    mod = __import__(schema.__module__, fromlist=["x"])
    payload = schema(
        transactional_id=transactional_id, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=tuple(mod.TopicProduceData(name=name, partition_data=tuple(
            mod.PartitionProduceData(index=i32(index), records=records) for index, records in parts))
            for name, parts in topics))
    return wire.encode_request(payload, 77, "client-1")[4:]


@pytest.mark.parametrize("version", list(produce_codec.DECODED_VERSIONS))
@pytest.mark.parametrize("transactional_id", [None, "tx-ü"])
def test_hand_decoded_produce_request_matches_kio(version, transactional_id):
    body = _produce_request(version, transactional_id)
    header, request, schema = produce_codec.decode_request(body)
    kio_header, kio_request, kio_schema = wire.decode_request(body)
    assert (header, schema) == (kio_header, kio_schema)
    assert (request.transactional_id, request.acks, request.timeout) == (transactional_id, -1, 30_000)
    got = [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
           for t in request.topic_data]
    want = [(t.name, [(int(p.index), p.records) for p in t.partition_data]) for t in kio_request.topic_data]
    assert got == want == [("a", [(0, b"batch-0"), (3, None)]), ("bb", [])]


def test_hand_decoded_records_are_views_of_the_frame_writable_when_it_is():
    body = bytearray(_produce_request(9))
    _, request, _ = produce_codec.decode_request(memoryview(body))
    records = request.topic_data[0].partition_data[0].records
    assert not records.readonly
    records[0:5] = b"BATCH"
    assert b"BATCH-0" in body
    _, request, _ = produce_codec.decode_request(bytes(body))
    assert request.topic_data[0].partition_data[0].records.readonly


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_hand_decoder_refuses_every_truncation_and_trailing_bytes(version):
    body = _produce_request(version)
    for cut in range(len(body)):
        with pytest.raises(ValueError):
            produce_codec.decode_request(body[:cut])
    with pytest.raises(ValueError):
        produce_codec.decode_request(body + b"\0")


def test_hand_decoder_refuses_absurd_counts_before_looping():
    body = bytearray(_produce_request(8, None, topics=()))
    struct.pack_into(">i", body, len(body) - 4, 2**31 - 1)  # the topic count
    with pytest.raises(ValueError, match="array length"):
        produce_codec.decode_request(bytes(body))


def test_hand_decoder_skips_unknown_tagged_fields():
    body = _produce_request(9, None, topics=(("a", ((1, b"r"),)),))
    # the last byte is the request's (empty) tagged-field section: give it one unknown field
    tagged = body[:-1] + bytes([1, 5, 2]) + b"zz"
    _, request, _ = produce_codec.decode_request(tagged)
    assert bytes(request.topic_data[0].partition_data[0].records) == b"r"


def test_error_response_mirrors_a_hand_decoded_request():
    _, request, _ = produce_codec.decode_request(_produce_request(9))
    resp = error_response(request, ErrorCode.not_leader_or_follower)
    assert [(t.name, [(int(p.index), p.error_code) for p in t.partition_responses]) for t in resp.responses] == [
        ("a", [(0, ErrorCode.not_leader_or_follower), (3, ErrorCode.not_leader_or_follower)]), ("bb", [])]


@pytest.mark.parametrize("version", [3, 9])
def test_hand_decoder_meets_random_corruption_with_value_error_only(version):
    """Bad input is refused (ValueError: the connection is closed), never a crash of another kind."""
    rng = random.Random(version)
    body = _produce_request(version)
    for _ in range(2000):
        mutated = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        try:
            produce_codec.decode_request(bytes(mutated))
        except ValueError:
            pass
