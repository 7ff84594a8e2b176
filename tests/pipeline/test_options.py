"""Option parsing and Spark's refusals, without a cluster."""

import pytest

from odradek.pipeline.options import read_options, write_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}


def test_keys_are_case_insensitive_and_kafka_options_reach_the_client():
    o = read_options({"Kafka.Bootstrap.Servers": "h:1", "SUBSCRIBE": "a, b,", "kafka.isolation.level": "read_committed",
                      "kafka.fetch.min.bytes": "5"}, streaming=False)
    assert o.topics == ("a", "b")
    assert o.read_committed
    conf = o.consumer_config()
    assert conf["bootstrap.servers"] == "h:1" and conf["fetch.min.bytes"] == "5"
    assert conf["enable.auto.commit"] is False and conf["auto.offset.reset"] == "error"
    assert conf["group.id"].startswith("spark-kafka-relation-")


def test_group_id_is_allowed_with_sparks_warning():
    o = read_options({**BASE, "kafka.group.id": "mine", "groupIdPrefix": "x"}, streaming=True)
    assert o.consumer_config()["group.id"] == "mine"
    assert any("not recommended" in w for w in o.warnings)
    assert any("groupIdPrefix will be ignored" in w for w in o.warnings)


def test_defaults_differ_between_batch_and_stream():
    assert read_options(BASE, streaming=False).starting.kind == "earliest"
    assert read_options(BASE, streaming=True).starting.kind == "latest"
    assert read_options(BASE, streaming=False).ending.kind == "latest"


@pytest.mark.parametrize(("extra", "streaming", "message"), [
    ({"kafka.key.deserializer": "x"}, False, "key.deserializer' is not supported"),
    ({"kafka.value.deserializer": "x"}, False, "value.deserializer' is not supported"),
    ({"kafka.interceptor.classes": "x"}, False, "interceptor.classes' is not supported"),
    ({"kafka.isolation.level": "dirty"}, False, "isolation.level"),
    ({"startingOffsets": '{"t":{"0":-1}}'}, False, "can't be latest for batch queries"),
    ({"endingOffsets": '{"t":{"0":-2}}'}, False, "can't be earliest for batch queries"),
    ({"startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"t":{"0":4}}'}, False, "greater than the ending"),
    ({"startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"t":{"1":9}}'}, False, "different topic partitions"),
    ({"startingTimestamp": "soon"}, False, "Expected a single long value"),
    ({"endingTimestamp": "5"}, True, "ending timestamp not valid in streaming queries"),
    ({"failOnDataLoss": "maybe"}, False, "failondataloss must be true or false"),
    ({"maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger must be positive"),
])
def test_refusals(extra, streaming, message):
    with pytest.raises(ValueError, match=message):
        read_options({**BASE, **extra}, streaming=streaming)


def test_missing_bootstrap_and_bad_strategies():
    with pytest.raises(ValueError, match=r"kafka\.bootstrap\.servers' must be specified"):
        read_options({"subscribe": "t"}, streaming=False)
    with pytest.raises(ValueError, match="No topics to subscribe"):
        read_options({**BASE, "subscribe": " , "}, streaming=False)
    with pytest.raises(ValueError, match="No topicpartitions to assign"):
        read_options({"kafka.bootstrap.servers": "h:1", "assign": "t"}, streaming=False)
    with pytest.raises(ValueError, match="not a valid pattern"):
        read_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, streaming=False)


def test_timestamp_limits():
    o = read_options({**BASE, "startingTimestamp": "1000", "endingOffsetsByTimestamp": '{"t":{"0":2000}}',
                      "startingOffsetsByTimestampStrategy": "latest"}, streaming=False)
    assert (o.starting.kind, o.starting.timestamp, o.starting.no_match_latest) == ("timestamp", 1000, True)
    assert (o.ending.kind, o.ending.offsets, o.ending.no_match_latest) == ("timestamps", {("t", 0): 2000}, True)


def test_write_options():
    w = write_options({"kafka.bootstrap.servers": "h:1", "Topic": " out ", "kafka.acks": "1"})
    assert w.topic == "out"
    assert w.producer_config()["enable.idempotence"] is True and w.producer_config()["acks"] == "1"
    assert w.producer_config()["partitioner"] == "murmur2_random"  # the Java producer's placement of keys
    assert write_options({"kafka.bootstrap.servers": "h:1", "kafka.partitioner": "random"}).producer_config()[
        "partitioner"] == "random"
    for bad, message in [({"kafka.key.serializer": "x"}, "key.serializer"),
                         ({"kafka.value.serializer": "x"}, "value.serializer"),
                         ({"kafka.transactional.id": "x"}, "transactional.id"),
                         ({"deliveryGuarantee": "twice"}, "deliveryGuarantee")]:
        with pytest.raises(ValueError, match=message):
            write_options({"kafka.bootstrap.servers": "h:1", **bad})


def test_a_zero_retry_interval_is_kept_not_replaced_by_the_default():
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders"}
    assert read_options(base, streaming=False).fetch_offset_retry_interval_ms == 1000
    zero = read_options({**base, "fetchoffset.retryintervalms": "0"}, streaming=False)
    assert zero.fetch_offset_retry_interval_ms == 0
