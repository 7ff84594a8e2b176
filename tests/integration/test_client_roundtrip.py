"""Acceptance: confluent-kafka and kafka-python each produce and consume 100,000 keyed records
with headers across 6 partitions, with every compression codec, and read back exactly what was
written, in order per partition."""

import struct
from pathlib import Path

import pytest

from .kafka_helpers import (
    CODECS,
    confluent_consume,
    confluent_produce,
    create_topic,
    expected_by_partition,
    kafka_python_consume,
    kafka_python_produce,
    make_records,
    without_timestamp,
)

RECORDS = 100_000
PARTITIONS = 6
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_codecs(cluster, topic: str) -> set[int]:
    """Compression codec of every batch in the topic's first segments, read from Kafka's on-disk
    format (attributes at byte 21 of a v2 batch), to prove the client really compressed. Clients
    send a batch uncompressed when compressing would not shrink it (a one-record tail batch), so
    codec 0 may appear too: see `assert_compressed`."""
    codecs = set()
    for broker in cluster.brokers:
        for part_dir in Path(broker.overrides["log.dirs"]).glob(f"{topic}-*"):
            data = (part_dir / "00000000000000000000.log").read_bytes()
            pos = 0
            while pos + 23 <= len(data):
                length, = struct.unpack_from(">i", data, pos + 8)
                attributes, = struct.unpack_from(">h", data, pos + 21)
                codecs.add(attributes & 7)
                pos += 12 + length
    return codecs


def assert_compressed(cluster, topic: str, codec: str) -> None:
    codecs = stored_codecs(cluster, topic)
    assert CODEC_IDS[codec] in codecs and codecs <= {0, CODEC_IDS[codec]}, codecs


def check_round_trip(records, delivered, consumed):
    expected = expected_by_partition(records, delivered)
    assert len(expected) > 1, "records should spread over several partitions"
    assert sum(len(v) for v in consumed.values()) == len(records)
    for partition, produced in expected.items():
        offsets = [offset for offset, _ in produced]
        # Acknowledged in produce order, offsets dense from 0 on a fresh topic.
        assert offsets == list(range(len(produced))), f"partition {partition}: offsets not 0..n-1 in produce order"
        got = consumed[partition]
        assert [c.offset for c in got] == offsets, f"partition {partition}: consumed offsets differ"
        got_records = [without_timestamp(c.record) for c in got]
        want_records = [r for _, r in produced]
        if got_records != want_records:
            first = next(i for i, (a, b) in enumerate(zip(got_records, want_records)) if a != b)
            raise AssertionError(f"partition {partition} offset {first}: read {got_records[first]}, wrote {want_records[first]}")


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(shared_cluster, codec):
    topic = f"roundtrip-confluent-{codec}"
    create_topic(shared_cluster.bootstrap, topic, PARTITIONS)
    records = make_records(RECORDS, f"ck-{codec}")
    delivered = confluent_produce(shared_cluster.bootstrap, topic, records, {"compression.type": codec, "acks": "all"})
    consumed = confluent_consume(shared_cluster.bootstrap, topic, PARTITIONS, RECORDS)
    check_round_trip(records, delivered, consumed)
    assert_compressed(shared_cluster, topic, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(shared_cluster, codec):
    topic = f"roundtrip-kafka-python-{codec}"
    create_topic(shared_cluster.bootstrap, topic, PARTITIONS)
    records = make_records(RECORDS, f"kp-{codec}")
    delivered = kafka_python_produce(shared_cluster.bootstrap, topic, records, codec)
    consumed = kafka_python_consume(shared_cluster.bootstrap, topic, PARTITIONS, RECORDS)
    check_round_trip(records, delivered, consumed)
    assert_compressed(shared_cluster, topic, codec)


def test_each_client_reads_what_the_other_wrote(shared_cluster):
    """Batches written by librdkafka are readable by kafka-python and the other way round."""
    for writer, _reader in (("confluent", "kafka-python"), ("kafka-python", "confluent")):
        topic = f"cross-{writer}"
        create_topic(shared_cluster.bootstrap, topic, 3)
        records = make_records(5_000, f"cross-{writer}")
        if writer == "confluent":
            delivered = confluent_produce(shared_cluster.bootstrap, topic, records, {"compression.type": "lz4"})
            consumed = kafka_python_consume(shared_cluster.bootstrap, topic, 3, len(records))
        else:
            delivered = kafka_python_produce(shared_cluster.bootstrap, topic, records, "zstd")
            consumed = confluent_consume(shared_cluster.bootstrap, topic, 3, len(records))
        check_round_trip(records, delivered, consumed)
