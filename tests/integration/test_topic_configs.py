"""Acceptance for topic configuration (issue 12): a topic's overrides hold for the topic's whole
life. Real ZooKeeper, controller and brokers as processes; confluent-kafka and kafka-python.

The overrides are set at creation (CreateTopics) or changed later (AlterConfigs,
IncrementalAlterConfigs); after every broker restarts, each one is still enforced:
min.insync.replicas (acks=all refused with NOT_ENOUGH_REPLICAS), max.message.bytes (a record the
topic allows but the broker default does not), retention.ms (records expire) and segment.bytes
(segments roll on every replica)."""

import signal
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.dev.waiting import wait_until

from .kafka_helpers import create_topic, wait_for_partitions, wait_isr_full

MIB = 1 << 20
BROKER_OVERRIDES = {
    "log.retention.check.interval.ms": 500,
    "controlled.shutdown.retry.backoff.ms": 500,
    "replica.lag.time.max.ms": 3000,
}


def restart_all_brokers(cluster) -> None:
    """Stop every broker (SIGTERM, all at once), then start them all again."""
    for b in cluster.brokers:
        if b.alive:
            b.popen.send_signal(signal.SIGTERM)
    for b in cluster.brokers:
        b.stop(30)
    for i in range(len(cluster.brokers)):
        cluster.wait_broker_gone(i)
    for b in cluster.brokers:
        b.start()
    cluster.wait_ready(timeout=60)


def produce(bootstrap: str, topic: str, values: list[bytes], **config) -> list[int | None]:
    """Produce `values` to partition 0 with retries off; the delivery error code (or None) of each."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "retries": 0,
            "linger.ms": 5, "message.timeout.ms": 30_000, **config}
    producer = Producer(conf)
    reports: list = [None] * len(values)
    done = [False] * len(values)

    def report(i):
        def cb(err, _msg):
            reports[i], done[i] = None if err is None else err.code(), True
        return cb

    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=0, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(60) == 0, "delivery reports missing"
    assert all(done)
    return reports


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex[:8]}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def segment_files(cluster, broker: int, topic: str, partition: int = 0) -> int:
    return len(list(cluster.partition_dir(broker, topic, partition).glob("*.log")))


def test_creation_overrides_hold_after_every_broker_restarts(cluster_factory):
    cluster = cluster_factory(brokers=3, broker_overrides=BROKER_OVERRIDES)
    bootstrap = cluster.bootstrap
    topics = {
        "mir": {"min.insync.replicas": "3"},
        "big": {"max.message.bytes": str(8 * MIB)},
        "short": {"retention.ms": "1000"},
        "small-segments": {"segment.bytes": "100000"},
    }
    for topic, config in topics.items():
        create_topic(bootstrap, topic, 1, config, replication_factor=3, timeout=60)
    for topic in topics:
        wait_isr_full(bootstrap, topic, 1)
    assert produce(bootstrap, "short", [b"old-%d" % i for i in range(100)]) == [None] * 100

    restart_all_brokers(cluster)
    for topic in topics:
        wait_isr_full(bootstrap, topic, 1)

    # max.message.bytes: 5 MiB fits the topic's 8 MiB, not the broker's default of 1 MiB.
    assert produce(bootstrap, "big", [b"x" * (5 * MIB)], **{"message.max.bytes": 10 * MIB}) == [None]

    # segment.bytes: 600 KB of records roll segments of 100 KB on every replica.
    assert produce(bootstrap, "small-segments", [b"s" * 1000] * 600, **{"batch.size": 16384}) == [None] * 600
    for b in range(3):
        wait_until(lambda b=b: segment_files(cluster, b, "small-segments") >= 5,
                   f"broker {b} rolled small-segments at 100 KB", timeout=30)

    # retention.ms: everything written before the restart expires within a few checks.
    wait_until(lambda: (lambda lo, hi: hi >= 100 and lo == hi)(*watermarks(bootstrap, "short")),
               "records of 'short' expired after retention.ms=1000", timeout=30)

    # min.insync.replicas=3: with one replica stopped (its controlled shutdown shrinks the ISR),
    # acks=all is refused.
    assert produce(bootstrap, "mir", [b"three replicas"]) == [None]
    leader = wait_for_partitions(bootstrap, "mir", lambda v: v[0].leader >= 0, "a leader")[0].leader
    stopped = next(b for b in range(3) if b != leader)
    cluster.broker(stopped).stop(30)
    wait_for_partitions(bootstrap, "mir", lambda v: len(v[0].isr) == 2 and v[0].leader >= 0,
                        f"the ISR without broker {stopped}", timeout=60)
    errors = produce(bootstrap, "mir", [b"two replicas"])
    assert errors == [KafkaError.NOT_ENOUGH_REPLICAS]
