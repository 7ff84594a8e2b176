"""Acceptance: batch reads through `format("odradek")` from a real cluster, in real PySpark.

ODRADEK_SPARK_RECORDS sets the size of the main read (the issue's acceptance run uses 100000; CI
reads fewer to keep its time small)."""

import json
import os
import time
import uuid

import pyarrow as pa
import pytest

from .kafka_helpers import Record, confluent_produce, create_topic, make_records

RECORDS = int(os.environ.get("ODRADEK_SPARK_RECORDS", "3000"))
BASE_TS = 1_700_000_000_000


def _load(spark, bootstrap, **options):
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _rows(df) -> list[dict]:
    return df.toArrow().to_pylist()


@pytest.fixture(scope="module")
def topic3(shared_cluster):
    """A 3-partition topic holding RECORDS keyed records with headers and timestamps BASE_TS + i."""
    topic = f"spark-read-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 3)
    records = [Record(r.key, r.value, r.headers, BASE_TS + i) for i, r in enumerate(make_records(RECORDS, "read"))]
    delivered = confluent_produce(shared_cluster.bootstrap, topic, records)
    return topic, records, delivered


def test_batch_read_returns_every_record_exactly(spark, shared_cluster, topic3):
    topic, records, delivered = topic3
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    table = df.toArrow()
    assert table.num_rows == RECORDS
    got = {(r["partition"], r["offset"]): r for r in table.to_pylist()}
    assert len(got) == RECORDS
    for record, d in zip(records, delivered):
        row = got[(d.partition, d.offset)]
        assert row["key"] == record.key
        assert row["value"] == record.value
        assert row["topic"] == topic
        assert [(h["key"], h["value"]) for h in row["headers"]] == list(record.headers)
        assert int(row["timestamp"].timestamp() * 1000) == record.timestamp
        assert row["timestampType"] == 0  # CreateTime
    assert {d.partition for d in delivered} == {0, 1, 2}


def test_without_headers_the_schema_is_sparks(spark, shared_cluster, topic3):
    topic, _records, _ = topic3
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    assert df.count() == RECORDS


def test_offsets_json_bounds_the_read(spark, shared_cluster, topic3):
    topic, _records, delivered = topic3
    starting = {topic: {"0": 5, "1": -2, "2": 10}}
    ending = {topic: {"0": 20, "1": 7, "2": -1}}
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic,
               startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending))
    got = sorted((r["partition"], r["offset"]) for r in _rows(df.select("partition", "offset")))
    end_of_2 = sum(1 for d in delivered if d.partition == 2)
    want = [(0, o) for o in range(5, 20)] + [(1, o) for o in range(7)] + [(2, o) for o in range(10, end_of_2)]
    assert got == want


def test_timestamps_bound_the_read(spark, shared_cluster, topic3):
    topic, records, delivered = topic3
    lo, hi = BASE_TS + RECORDS // 4, BASE_TS + RECORDS // 2
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic,
               startingTimestamp=str(lo), endingTimestamp=str(hi))
    got = sorted(r["value"] for r in _rows(df.select("value")))
    # per partition: from the first record at or after lo to before the first at or after hi
    want = sorted(r.value for r in records if lo <= r.timestamp < hi)
    assert got == want

    by_partition = {topic: {"0": lo, "1": BASE_TS, "2": hi}}
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic, startingOffsetsByTimestamp=json.dumps(by_partition))
    got = sorted((r["partition"], r["offset"]) for r in _rows(df.select("partition", "offset")))
    want = sorted((d.partition, d.offset) for r, d in zip(records, delivered)
                  if r.timestamp >= {0: lo, 1: BASE_TS, 2: hi}[d.partition])
    assert got == want


def test_a_timestamp_after_every_record_is_refused_or_latest(spark, shared_cluster, topic3):
    topic, _, _ = topic3
    late = str(BASE_TS + 10 * RECORDS)
    with pytest.raises(Exception, match="No offset matched"):
        _load(spark, shared_cluster.bootstrap, subscribe=topic, startingTimestamp=late).count()
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic, startingTimestamp=late,
               startingOffsetsByTimestampStrategy="latest")
    assert df.count() == 0


def test_min_partitions_splits_ranges_into_tasks(spark, shared_cluster, topic3):
    topic, _, _ = topic3
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic, minPartitions="7")
    assert df.rdd.getNumPartitions() >= 6
    rows = _rows(df.select("partition", "offset"))
    assert len(rows) == RECORDS
    assert len({(r["partition"], r["offset"]) for r in rows}) == RECORDS


def test_assign_and_pattern(spark, shared_cluster, topic3):
    topic, _, delivered = topic3
    df = _load(spark, shared_cluster.bootstrap, assign=json.dumps({topic: [1]}))
    assert df.count() == sum(1 for d in delivered if d.partition == 1)
    df = _load(spark, shared_cluster.bootstrap, subscribePattern=topic[:-3] + "...")
    assert df.select("topic").distinct().collect()[0]["topic"] == topic


@pytest.mark.parametrize(("options", "message"), [
    ({}, "One of the following options must be specified"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "auto.offset.reset' is not supported"),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "enable.auto.commit' is not supported"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be positive"),
])
def test_spark_refusals(spark, shared_cluster, options, message):
    with pytest.raises(Exception, match=message):
        _load(spark, shared_cluster.bootstrap, **options).count()


def test_read_committed_is_honoured_for_an_idempotent_topic(spark, shared_cluster):
    """kafka.isolation.level reaches the client: read_committed reads committed (here: all
    non-transactional) records and plans up to the last stable offset."""
    topic = f"spark-rc-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 1)
    confluent_produce(shared_cluster.bootstrap, topic, make_records(50, "rc"))
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    assert sorted(r["offset"] for r in _rows(df.select("offset"))) == list(range(50))


def test_records_deleted_by_retention_are_data_loss(spark, cluster_factory):
    """A start below the log start (records deleted by retention): Spark's failOnDataLoss error,
    or with failOnDataLoss=false the records that are left. Retention by size, so that the log
    start stays where it is once the old segments are gone (retention by a short time would go
    on deleting, the active segment too, while Spark reads)."""
    cluster = cluster_factory(brokers=1, broker_overrides={"log.retention.check.interval.ms": 300})
    topic = f"spark-loss-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 1, config={"segment.bytes": "4096", "retention.bytes": "1"})
    # small batches, so that the records span many segments; all but the active one are deleted
    confluent_produce(cluster.bootstrap, topic, make_records(100, "loss"), config={"linger.ms": 0, "batch.num.messages": 5})
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "watermarks"})
    try:
        deadline = time.monotonic() + 60
        low = 0
        while low <= 10:
            assert time.monotonic() < deadline, f"retention never moved the log start (at {low})"
            time.sleep(0.3)
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert 10 < low < high == 100
    offsets = json.dumps({topic: {"0": 10}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        _load(spark, cluster.bootstrap, subscribe=topic, startingOffsets=offsets).count()
    df = _load(spark, cluster.bootstrap, subscribe=topic, startingOffsets=offsets, failOnDataLoss="false")
    assert sorted(r["offset"] for r in _rows(df.select("offset"))) == list(range(low, 100))


def test_arrow_batches_cross_to_the_jvm(spark, shared_cluster, topic3):
    """read() yields Arrow record batches; a projection of them lands intact."""
    topic, records, _ = topic3
    df = _load(spark, shared_cluster.bootstrap, subscribe=topic)
    values = df.selectExpr("cast(value as string) as v").toArrow()
    assert values.schema.field("v").type == pa.string()
    assert sorted(values.column("v").to_pylist()) == sorted(r.value.decode() for r in records)
