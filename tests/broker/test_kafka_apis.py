"""broker/kafka_apis.py: the generic error response mirrors each request's partitions."""

import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta, i64

from odradek.broker.error_response import error_response
from odradek.common import wire


def _produce_request(version):
    mod = __import__(f"kio.schema.produce.v{version}.request", fromlist=["x"])
    return mod.ProduceRequest(
        acks=i16(1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
        topic_data=(
            mod.TopicProduceData(
                name="t", partition_data=(mod.PartitionProduceData(index=i32(4), records=b"x"),)
            ),
        ),
    )


@pytest.mark.parametrize("version", [3, 9])
def test_error_response_mirrors_produce_partitions(version):
    resp = error_response(_produce_request(version), ErrorCode.unknown_server_error)
    (topic,) = resp.responses
    assert topic.name == "t"
    (part,) = topic.partition_responses
    assert part.index == 4 and part.error_code == ErrorCode.unknown_server_error
    wire.encode_response(resp, 1, flexible_header=version >= 9)


def test_error_response_for_fetch_list_offsets_and_admin():
    from kio.schema.fetch.v12 import request as f12
    from kio.schema.list_offsets.v6 import request as l6

    fetch = f12.FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=5)),
        min_bytes=i32(1),
        topics=(f12.FetchTopic(topic="t", partitions=(
            f12.FetchPartition(partition=i32(2), fetch_offset=i64(0), partition_max_bytes=i32(10)),)),),
        forgotten_topics_data=(),
    )
    resp = error_response(fetch, ErrorCode.kafka_storage_error)
    assert resp.responses[0].topic == "t"
    assert resp.responses[0].partitions[0].partition_index == 2
    assert resp.responses[0].partitions[0].error_code == ErrorCode.kafka_storage_error
    wire.encode_response(resp, 1, flexible_header=True)

    lo = l6.ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=0,
        topics=(l6.ListOffsetsTopic(name="x", partitions=(l6.ListOffsetsPartition(partition_index=i32(1), timestamp=i64(-1)),)),),
    )
    resp = error_response(lo, ErrorCode.unknown_server_error)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.unknown_server_error
    wire.encode_response(resp, 1, flexible_header=True)

    from kio.schema.create_topics.v7 import request as c7

    ct = c7.CreateTopicsRequest(
        topics=(c7.CreatableTopic(name="n", num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=()),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
    )
    resp = error_response(ct, ErrorCode.unknown_server_error)
    assert resp.topics[0].name == "n" and resp.topics[0].error_code == ErrorCode.unknown_server_error
    wire.encode_response(resp, 1, flexible_header=True)
