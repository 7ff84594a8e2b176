"""Acceptance for topic configuration (issue 12): a topic's overrides hold for the topic's whole
life. Real ZooKeeper, controller and brokers as processes; confluent-kafka and kafka-python.

The overrides are set at creation (CreateTopics) or changed later (AlterConfigs,
IncrementalAlterConfigs); after every broker restarts, each one is still enforced:
min.insync.replicas (acks=all refused with NOT_ENOUGH_REPLICAS), max.message.bytes (a record the
topic allows but the broker default does not), retention.ms (records expire) and segment.bytes
(segments roll on every replica)."""

import asyncio
import signal
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from odradek.common.network.client import NetworkClient
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


# --- changes while running: AlterConfigs and IncrementalAlterConfigs ------------------------------


def confluent_set(bootstrap: str, resource_type, name: str, configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs from confluent-kafka: SET each key (DELETE where the value is None)."""
    ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET)
           for k, v in configs.items()]
    resource = ConfigResource(resource_type, name, incremental_configs=ops)
    client = AdminClient({"bootstrap.servers": bootstrap})
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def produce_each_partition(bootstrap: str, topic: str, partitions: int, value: bytes, **config) -> list[int | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "retries": 0,
                         "message.timeout.ms": 30_000, **config})
    reports: dict[int, int | None] = {}
    for p in range(partitions):
        producer.produce(topic, value=value, partition=p,
                         on_delivery=lambda err, msg, p=p: reports.__setitem__(p, None if err is None else err.code()))
    assert producer.flush(60) == 0
    return [reports[p] for p in range(partitions)]


def wait_applied(check, what: str) -> float:
    """Seconds until `check()` holds (bounded); the acceptance asks for well under a second."""
    started = time.monotonic()
    wait_until(check, what, timeout=10, interval=0.05)
    elapsed = time.monotonic() - started
    print(f"{what}: applied after {elapsed:.2f} s")
    return elapsed


def test_config_changes_apply_live_on_every_broker_and_survive_restarts(cluster_factory):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType

    cluster = cluster_factory(brokers=3, broker_overrides=BROKER_OVERRIDES)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "live", 3, replication_factor=3, timeout=60)
    create_topic(bootstrap, "expire", 1, replication_factor=3, timeout=60)
    views = wait_isr_full(bootstrap, "live", 3)
    assert {v.leader for v in views.values()} == {0, 1, 2}, "each broker leads a partition of 'live'"
    big = b"x" * (5 * MIB)
    assert produce_each_partition(bootstrap, "live", 3, big, **{"message.max.bytes": 10 * MIB}) == \
        [KafkaError.MSG_SIZE_TOO_LARGE] * 3

    # confluent-kafka, IncrementalAlterConfigs: every leader takes the bigger record, no restart.
    confluent_set(bootstrap, ConfigResource.Type.TOPIC, "live", {"max.message.bytes": str(8 * MIB)})
    wait_applied(lambda: produce_each_partition(bootstrap, "live", 3, big, **{"message.max.bytes": 10 * MIB})
                 == [None] * 3, "max.message.bytes on every leader")
    # (A batch larger than segment.bytes is refused, as Kafka refuses it: small segments come second.)
    confluent_set(bootstrap, ConfigResource.Type.TOPIC, "live", {"segment.bytes": "100000"})
    wait_applied(lambda: produce(bootstrap, "live", [b"s" * 1000] * 300, **{"batch.size": 16384}) == [None] * 300
                 and all(segment_files(cluster, b, "live") >= 3 for b in range(3)),
                 "segment.bytes on the leader and both followers")

    # kafka-python: AlterConfigs (the whole set; the client keeps the keys it does not name) and
    # IncrementalAlterConfigs.
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = kp.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, "live", configs={
            "max.message.bytes": str(8 * MIB), "segment.bytes": str(1 << 30), "min.insync.replicas": "3"})],
            incremental=False)
        assert all(err is None or getattr(err, "errno", 0) == 0 for err in _leaves(result)), result
        assert produce(bootstrap, "expire", [b"e-%d" % i for i in range(50)]) == [None] * 50
        result = kp.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, "expire",
                                                    configs={"retention.ms": "1000"})], incremental=True)
        assert all(err is None or getattr(err, "errno", 0) == 0 for err in _leaves(result)), result
    finally:
        kp.close()
    wait_applied(lambda: (lambda lo, hi: hi >= 50 and lo == hi)(*watermarks(bootstrap, "expire")),
                 "retention.ms=1000 on 'expire'")

    restart_all_brokers(cluster)
    wait_isr_full(bootstrap, "live", 3)
    assert produce_each_partition(bootstrap, "live", 3, big, **{"message.max.bytes": 10 * MIB}) == [None] * 3
    assert produce(bootstrap, "expire", [b"again-%d" % i for i in range(10)]) == [None] * 10
    wait_until(lambda: (lambda lo, hi: hi >= 60 and lo == hi)(*watermarks(bootstrap, "expire")),
               "retention.ms=1000 after the restart", timeout=30)
    leader = wait_for_partitions(bootstrap, "live", lambda v: v[0].leader >= 0, "a leader")[0].leader
    stopped = next(b for b in range(3) if b != leader)
    cluster.broker(stopped).stop(30)
    wait_for_partitions(bootstrap, "live", lambda v: len(v[0].isr) == 2 and v[0].leader >= 0,
                        f"the ISR without broker {stopped}", timeout=60)
    assert produce(bootstrap, "live", [b"two replicas"]) == [KafkaError.NOT_ENOUGH_REPLICAS]


def _leaves(result):
    """The per-resource results of kafka-python's alter_configs, however nested."""
    if isinstance(result, dict):
        for value in result.values():
            yield from _leaves(value)
    elif isinstance(result, (list, tuple)):
        for value in result:
            yield from _leaves(value)
    else:
        yield result


def set_cluster_default(bootstrap: str, configs: dict) -> None:
    """IncrementalAlterConfigs of the cluster-wide default broker resource ("", what
    `kafka-configs.sh --entity-default` sends). Both Python clients refuse an empty resource name,
    so the request goes through the project's own client; a None value deletes the key."""
    from kio.schema.incremental_alter_configs.v1 import request as iac

    resource = iac.AlterConfigsResource(resource_type=4, resource_name="", configs=tuple(
        iac.AlterableConfig(name=k, config_operation=1 if v is None else 0, value=v) for k, v in configs.items()))

    async def send():
        host, port = bootstrap.split(",")[0].split(":")
        client = NetworkClient(host, int(port))
        try:
            return await client.send(iac.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False),
                                     timeout=30)
        finally:
            await client.close()

    response = asyncio.run(send())
    assert [r.error_code for r in response.responses] == [0], response


def test_broker_default_configs_apply_live_and_survive_restarts(cluster_factory):
    cluster = cluster_factory(brokers=2, broker_overrides=BROKER_OVERRIDES)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "plain", 1, replication_factor=2, timeout=60)
    wait_isr_full(bootstrap, "plain", 1)
    assert produce(bootstrap, "plain", [b"p-%d" % i for i in range(20)]) == [None] * 20
    set_cluster_default(bootstrap, {"log.retention.ms": "1000"})
    wait_applied(lambda: (lambda lo, hi: hi >= 20 and lo == hi)(*watermarks(bootstrap, "plain")),
                 "the cluster default log.retention.ms")
    client = AdminClient({"bootstrap.servers": bootstrap})
    described = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "plain")])
    (entries,) = [f.result(timeout=30) for f in described.values()]
    assert entries["retention.ms"].value == "1000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value

    restart_all_brokers(cluster)
    assert produce(bootstrap, "plain", [b"q-%d" % i for i in range(20)]) == [None] * 20
    wait_until(lambda: (lambda lo, hi: hi >= 40 and lo == hi)(*watermarks(bootstrap, "plain")),
               "the cluster default log.retention.ms after the restart", timeout=30)
    set_cluster_default(bootstrap, {"log.retention.ms": None})

    def retention_described() -> str:
        client = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
        described = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "plain")])
        (entries,) = [f.result(timeout=30) for f in described.values()]
        return entries["retention.ms"].value

    wait_applied(lambda: retention_described() == str(7 * 24 * 3600 * 1000), "the default removed")
