"""Acceptance: DataFrames written through `format("odradek")` are read back identically by
confluent-kafka; batch and streaming writes; Spark's sink schema and its refusals."""

import logging
import time
import uuid

import pytest
from kafka.partitioner.default import murmur2
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from odradek.pipeline.transactions import transactions_supported

from .kafka_helpers import confluent_consume, create_topic

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("partition", IntegerType()),
    StructField("headers", HEADERS),
])


def _write(df, bootstrap, **options):
    w = df.write.format("odradek").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_a_dataframe_written_is_read_back_identically(spark, shared_cluster):
    topic = f"spark-out-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 3)
    rows = [(b"k%d" % i if i % 7 else None, b"value-%d" % i, i % 3,
             [("h", b"%d" % i), ("n", None)] if i % 2 else []) for i in range(2000)]
    df = spark.createDataFrame(rows, SCHEMA).repartition(4)
    _write(df, shared_cluster.bootstrap, topic=topic, deliveryGuarantee="at-least-once")
    got = confluent_consume(shared_cluster.bootstrap, topic, 3, len(rows))
    for p in range(3):
        read = sorted(((c.record.key, c.record.value, tuple(c.record.headers)) for c in got[p]), key=repr)
        want = sorted(((k, v, tuple(h)) for k, v, part, h in rows if part == p), key=repr)
        assert read == want
    assert sum(len(v) for v in got.values()) == len(rows)


def test_string_columns_and_a_topic_column_route_rows(spark, shared_cluster):
    a, b = (f"spark-route-{x}-{uuid.uuid4().hex[:6]}" for x in "ab")
    for t in (a, b):
        create_topic(shared_cluster.bootstrap, t, 1)
    df = spark.createDataFrame([(a if i % 2 else b, f"k{i}", f"v{i}") for i in range(100)],
                               "topic string, key string, value string")
    _write(df, shared_cluster.bootstrap, deliveryGuarantee="at-least-once")
    for t, parity in ((a, 1), (b, 0)):
        got = confluent_consume(shared_cluster.bootstrap, t, 1, 50)[0]
        assert sorted(c.record.value for c in got) == sorted(b"v%d" % i for i in range(100) if i % 2 == parity)
        assert all(c.record.key == b"k" + c.record.value[1:] for c in got)


def test_the_topic_option_overrides_the_topic_column(spark, shared_cluster):
    topic = f"spark-override-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 1)
    df = spark.createDataFrame([("elsewhere", f"v{i}") for i in range(10)], "topic string, value string")
    _write(df, shared_cluster.bootstrap, topic=topic, deliveryGuarantee="at-least-once")
    assert len(confluent_consume(shared_cluster.bootstrap, topic, 1, 10)[0]) == 10


def test_keys_land_on_the_java_producers_partitions(spark, shared_cluster):
    """Spark's Kafka sink (the Java producer) puts a key at murmur2(key) % partitions; so must this
    one, or two writers of one topic would split a key's records over two partitions."""
    topic = f"spark-keys-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 4)
    df = spark.createDataFrame([(f"key-{i}", f"v{i}") for i in range(200)], "key string, value string").repartition(3)
    _write(df, shared_cluster.bootstrap, topic=topic, deliveryGuarantee="at-least-once")
    got = confluent_consume(shared_cluster.bootstrap, topic, 4, 200)
    placed = {c.record.key: p for p, consumed in got.items() for c in consumed}
    assert placed == {b"key-%d" % i: (murmur2(b"key-%d" % i) & 0x7FFFFFFF) % 4 for i in range(200)}


@pytest.mark.parametrize(("ddl", "options", "message"), [
    ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
    ("value string", {}, "topic option required"),
    ("value int", {"topic": "t"}, "Value attribute type must be a string or binary"),
    ("key int, value string", {"topic": "t"}, "Key attribute type must be a string or binary"),
    ("value string, partition string", {"topic": "t"}, "Partition type must be an int"),
    ("value string", {"topic": "t", "kafka.key.serializer": "x"}, "key.serializer' is not supported"),
])
def test_sink_refusals(spark, shared_cluster, ddl, options, message):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        _write(df, shared_cluster.bootstrap, **options)


def test_overwrite_mode_is_refused(spark, shared_cluster):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="Overwrite not allowed"):
        (df.write.format("odradek").mode("overwrite").option("kafka.bootstrap.servers", shared_cluster.bootstrap)
         .option("topic", "t").save())


def _read_committed(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[bytes]:
    """The values of partition 0 a read_committed consumer sees, up to the last stable offset."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    out.append(m.value())
                elif m.error().code() == KafkaError._PARTITION_EOF and len(out) >= count:
                    return out
        raise AssertionError(f"read {len(out)} of {count} committed records within {timeout}s")
    finally:
        consumer.close()


def test_the_sink_guarantee_follows_the_cluster(spark, shared_cluster, caplog):
    """With a transaction coordinator, exactly-once is the default and read_committed readers see
    every row once; without one, exactly-once asked for is refused with a clear error and the
    default falls back to at-least-once with a warning."""
    from odradek.pipeline.options import write_options
    from odradek.pipeline.sink import choose_guarantee

    topic = f"spark-eos-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 1)
    df = spark.createDataFrame([(f"v{i}",) for i in range(20)], "value string")
    with caplog.at_level(logging.WARNING, logger="odradek.pipeline.sink"):
        guarantee = choose_guarantee(write_options({"kafka.bootstrap.servers": shared_cluster.bootstrap}))
    if transactions_supported(shared_cluster.bootstrap):
        assert guarantee == "exactly-once"
        _write(df, shared_cluster.bootstrap, topic=topic, deliveryGuarantee="exactly-once")
        assert sorted(_read_committed(shared_cluster.bootstrap, topic, 20)) == sorted(b"v%d" % i for i in range(20))
    else:
        assert guarantee == "at-least-once"
        assert "has no transaction coordinator" in caplog.text
        with pytest.raises(Exception, match="exactly-once needs Kafka transactions"):
            _write(df, shared_cluster.bootstrap, topic=topic, deliveryGuarantee="exactly-once")
        _write(df, shared_cluster.bootstrap, topic=topic)
        assert len(confluent_consume(shared_cluster.bootstrap, topic, 1, 20)[0]) == 20
