"""common/legacy_schemas: message versions kio lacks, derived from kio's nearest and read/written
by kio's own reader and writer."""

import datetime
import io
import sys

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from odradek.common import legacy_schemas, message_bounds, wire


def roundtrip(value):
    buf = io.BytesIO()
    entity_writer(type(value))(buf, value)
    data = buf.getvalue()
    assert message_bounds.check(type(value), data, 0) == len(data)
    decoded, used = entity_reader(type(value))(data, 0)
    assert used == len(data)
    return decoded, data


@pytest.mark.parametrize(("api", "version"), sorted(legacy_schemas.LEGACY))
def test_every_legacy_version_has_classes_kio_reads_and_writes(api, version):
    for cls in (wire.request_schema(api, version), wire.response_schema(api, version)):
        assert int(cls.__version__) == version and int(cls.__api_key__) == api
        entity_reader(cls)
        entity_writer(cls)


def test_list_offsets_v0_has_its_own_fields():
    mod = wire.response_module(2, 0)
    response = mod.ListOffsetsResponse(topics=(mod.ListOffsetsTopicResponse(name="t", partitions=(
        mod.ListOffsetsPartitionResponse(partition_index=i32(0), error_code=ErrorCode.none,
                                         old_style_offsets=(i64(5), i64(0))),)),))
    decoded, data = roundtrip(response)
    assert decoded == response
    # Kafka's v0 layout: topics[name, partitions[index, error_code, [offsets]]]
    assert data == bytes.fromhex("00000001" "0001" "74" "00000001" "00000000" "0000" "00000002"
                                 "0000000000000005" "0000000000000000")


def test_a_translated_request_is_upgraded_and_its_answer_downgraded():
    old = wire.request_schema(19, 0)
    mod = sys.modules[old.__module__]
    request = old(topics=(mod.CreatableTopic(name="t", num_partitions=i32(1), replication_factor=i16(1),
                                             assignments=(), configs=()),),
                  timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)))
    upgraded = legacy_schemas.upgrade(request)
    assert int(upgraded.__version__) == 2 and upgraded.validate_only is False
    v2 = wire.response_module(19, 2)
    answer = v2.CreateTopicsResponse(throttle_time=wire.NO_THROTTLE, topics=(v2.CreatableTopicResult(
        name="t", error_code=ErrorCode.topic_already_exists, error_message="exists"),))
    down = legacy_schemas.downgrade(answer, 19, 0)
    assert not hasattr(down, "throttle_time") and not hasattr(down.topics[0], "error_message")
    assert down.topics[0].error_code == ErrorCode.topic_already_exists


def test_describe_configs_v0_says_is_default_where_v1_says_the_source():
    v1 = wire.response_module(32, 1)
    answer = v1.DescribeConfigsResponse(throttle_time=wire.NO_THROTTLE, results=(v1.DescribeConfigsResult(
        error_code=ErrorCode.none, error_message=None, resource_type=i8(2), resource_name="t", configs=(
            v1.DescribeConfigsResourceResult(name="a", value="1", read_only=False, config_source=i8(5),
                                             is_sensitive=False, synonyms=()),
            v1.DescribeConfigsResourceResult(name="b", value="2", read_only=False, config_source=i8(1),
                                             is_sensitive=False, synonyms=()))),))
    down = legacy_schemas.downgrade(answer, 32, 0)
    assert [(c.name, c.is_default) for c in down.results[0].configs] == [("a", True), ("b", False)]
    roundtrip(down)
