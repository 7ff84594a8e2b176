"""Acceptance of the log cleaner (issue 16) with real brokers and librdkafka: compacted topics
keep each key's latest value, on every replica; tombstones go after delete.retention.ms; a broker
killed while cleaning comes back serving every latest value once, and its idempotent producer
goes on; __consumer_offsets is compacted."""

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from odradek.broker.log.checkpoint import read_offsets
from odradek.broker.log.log_cleaner import CLEANER_OFFSET_CHECKPOINT
from odradek.broker.log.record_batch import decode_records, iter_batches

from .conftest import new_cluster
from .kafka_helpers import Record, confluent_produce, create_topic, wait_isr_full

KEYS, VERSIONS = 1000, 100
CLEANER = {"log.cleaner.backoff.ms": 200}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "32768", "min.cleanable.dirty.ratio": "0.01"}


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    cluster = new_cluster(zookeeper, tmp_path_factory.mktemp("compaction"), brokers=2,
                          broker_overrides={**CLEANER, "offsets.topic.segment.bytes": 8192,
                                            "offsets.topic.num.partitions": 1})
    cluster.start()
    yield cluster
    cluster.stop()


def versions(keys: int, count: int, tombstones: range = range(0)) -> list[Record]:
    """`count` versions of each key, version after version; the last version of the keys in
    `tombstones` is a tombstone."""
    out = []
    for v in range(count):
        for k in range(keys):
            value = None if v == count - 1 and k in tombstones else b"value-%d-%d" % (k, v)
            out.append(Record(b"key-%04d" % k, value, ()))
    return out


def consume_all(bootstrap: str, topic: str, timeout: float = 60.0) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record of partition 0, from the beginning to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    raise AssertionError(f"consume error: {msg.error()}")
                out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"did not reach the end of {topic} in {timeout}s ({len(out)} records)")
    finally:
        consumer.close()


def partition_dir(cluster, broker: int, topic: str) -> Path:
    return cluster.data_dir / f"broker-{broker}" / f"{topic}-0"


def active_base(directory: Path) -> int:
    return max(int(p.name[:-4]) for p in directory.glob("*.log"))


def cleaned_to(cluster, broker: int, topic: str) -> int | None:
    path = cluster.data_dir / f"broker-{broker}" / CLEANER_OFFSET_CHECKPOINT
    try:
        return read_offsets(path).get((topic, 0))
    except (OSError, ValueError):
        return None


def wait_cleaned(cluster, brokers: list[int], topic: str, timeout: float = 120.0) -> None:
    """Until each broker's cleaner has cleaned `topic` up to its active segment."""
    deadline = time.monotonic() + timeout
    pending = list(brokers)
    while pending:
        assert time.monotonic() < deadline, f"brokers {pending} did not clean {topic} in {timeout}s"
        pending = [b for b in pending
                   if cleaned_to(cluster, b, topic) != active_base(partition_dir(cluster, b, topic))]
        if pending:
            time.sleep(0.2)


def on_disk(directory: Path, below: int) -> list[tuple[int, bytes, bytes | None]]:
    """The records a replica holds below `below`, read from its segment files."""
    out = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for info in iter_batches(data):
            for r in decode_records(data[info.position : info.position + info.size]):
                if r.offset < below:
                    out.append((r.offset, r.key, r.value))
    return out


def check_compacted(rows, expected: dict[bytes, bytes | None], active: int) -> None:
    offsets = [o for o, _, _ in rows]
    assert offsets == sorted(set(offsets)), "offsets out of order or repeated"
    cleaned = [(k, v) for o, k, v in rows if o < active]
    assert len(cleaned) == len({k for k, _ in cleaned}), "a key twice below the active segment"
    latest = {}
    for _, k, v in rows:
        latest[k] = v
    assert {k: v for k, v in latest.items() if v is not None} == {k: v for k, v in expected.items() if v is not None}


def test_a_compacted_topic_keeps_the_latest_value_of_each_key_on_every_replica(cluster):
    topic = "compacted"
    create_topic(cluster.bootstrap, topic, 1, {**TOPIC_CONFIG, "delete.retention.ms": "1000"}, replication_factor=2)
    wait_isr_full(cluster.bootstrap, topic, 1)
    records = versions(KEYS, VERSIONS, tombstones=range(50))
    confluent_produce(cluster.bootstrap, topic, records, {"compression.type": "lz4", "acks": "all", "batch.size": 16000})
    expected = {r.key: r.value for r in records}
    wait_cleaned(cluster, [0, 1], topic)

    rows = consume_all(cluster.bootstrap, topic)
    leader_dir = partition_dir(cluster, 0, topic)
    check_compacted(rows, expected, active_base(leader_dir))
    assert len(rows) < KEYS * VERSIONS / 10
    for b in (0, 1):  # each replica cleans on its own, as in Kafka: each holds the same latest values
        replica = partition_dir(cluster, b, topic)
        check_compacted(on_disk(replica, 2**63 - 1), expected, active_base(replica))

    # Tombstones go once they have been clean for delete.retention.ms: more writes roll and clean again.
    filler = [Record(b"filler-%d" % (i % 20), b"x" * 100, ()) for i in range(2000)]
    deadline = time.monotonic() + 90
    for _ in range(60):
        confluent_produce(cluster.bootstrap, topic, filler, {"acks": "all", "batch.size": 16000})
        wait_cleaned(cluster, [0], topic)
        rows = consume_all(cluster.bootstrap, topic)
        if not [k for _, k, _ in rows if k.startswith(b"key-") and k < b"key-0050"]:
            break
        assert time.monotonic() < deadline, "tombstones were never removed"
        time.sleep(1.0)
    check_compacted([r for r in rows if not r[1].startswith(b"filler")], expected, active_base(leader_dir))


def test_keyless_records_are_refused_with_invalid_record(cluster):
    topic = "compacted-keyless"
    create_topic(cluster.bootstrap, topic, 1, TOPIC_CONFIG)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 20000, "retries": 0})
    errors = []
    producer.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors


def test_consumer_offsets_is_compacted(cluster):
    topic = "offsets-source"
    create_topic(cluster.bootstrap, topic, 1)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "committer",
                         "enable.auto.commit": False})
    try:
        for i in range(600):
            consumer.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
        dirs = [partition_dir(cluster, b, "__consumer_offsets") for b in (0, 1)]
        hosting = [b for b, d in zip((0, 1), dirs) if d.exists()]
        wait_cleaned(cluster, hosting, "__consumer_offsets")
        for b in hosting:
            size = sum(p.stat().st_size for p in partition_dir(cluster, b, "__consumer_offsets").glob("*.log"))
            assert size < 3 * 8192, f"broker {b}: __consumer_offsets holds {size} bytes after 600 commits"
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 599
    finally:
        consumer.close()
    # The coordinator loads the group from the compacted log after a restart of each replica.
    for b in hosting:
        cluster.broker(b).restart()
        cluster.wait_ready(timeout=60)
    again = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "committer", "enable.auto.commit": False})
    try:
        assert again.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 599
    finally:
        again.close()


def test_sigkill_while_cleaning_then_every_latest_value_once(zookeeper, tmp_path):
    cluster = new_cluster(zookeeper, tmp_path / "killed", brokers=1, broker_overrides={
        **CLEANER, "log.cleaner.io.max.bytes.per.second": 300_000})
    cluster.start()
    try:
        topic = "compacted-killed"
        create_topic(cluster.bootstrap, topic, 1, TOPIC_CONFIG)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                             "linger.ms": 20, "batch.size": 16000,
                             "message.timeout.ms": 120000})
        records = versions(300, 60)
        for r in records:
            producer.produce(topic, key=r.key, value=r.value)
            producer.poll(0)
        assert producer.flush(60) == 0
        directory = partition_dir(cluster, 0, topic)
        deadline = time.monotonic() + 60
        while not list(directory.glob("*.cleaned")):
            assert time.monotonic() < deadline, "the cleaner never started"
            time.sleep(0.05)
        cluster.broker(0).kill(signal.SIGKILL)
        cluster.wait_broker_gone(0, timeout=30)
        cluster.broker(0).start()
        cluster.wait_ready(timeout=60)
        expected = {r.key: r.value for r in records}
        check_compacted(consume_all(cluster.bootstrap, topic), expected, 0)  # nothing lost, nothing twice
        wait_cleaned(cluster, [0], topic)
        check_compacted(consume_all(cluster.bootstrap, topic), expected, active_base(directory))
        # The idempotent producer goes on after the restart and the cleaning.
        errors = []
        more = versions(300, 1)
        for r in more:
            producer.produce(topic, key=r.key, value=b"after-" + r.value,
                             on_delivery=lambda err, msg: err and errors.append(err))
        assert producer.flush(60) == 0
        assert not errors, errors[:3]
        latest = {k: v for _, k, v in consume_all(cluster.bootstrap, topic)}
        assert latest == {r.key: b"after-" + r.value for r in more}
        assert not [p for p in os.listdir(directory) if p.endswith((".cleaned", ".swap", ".swapend"))]
    finally:
        cluster.stop()
