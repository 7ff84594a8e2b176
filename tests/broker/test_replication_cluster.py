"""Replication through real processes: 3 brokers + a controller (LocalCluster), confluent-kafka.

Followers truncate by OffsetForLeaderEpoch and fetch from their leader; acks=all waits for the ISR;
every replica ends byte-identical to the leader; high watermarks are checkpointed and a restarted
follower catches up."""

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.log.checkpoint import read_checkpoint
from odradek.broker.replica_manager import HIGH_WATERMARK_CHECKPOINT
from odradek.dev.cluster import LocalCluster
from odradek.dev.waiting import wait_until
from odradek.dev.zookeeper import free_ports

BROKERS = 3


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("replication"),
        brokers=BROKERS,
        broker_ports=free_ports(BROKERS),
        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
        broker_overrides={
            "zookeeper.session.timeout.ms": 6000,
            "replica.high.watermark.checkpoint.interval.ms": 200,
            "replica.fetch.backoff.ms": 200,
        },
        controller_overrides={"zookeeper.session.timeout.ms": 6000},
    )
    c.start()
    yield c
    c.stop()


def create_topic(cluster, topic: str, partitions: int, rf: int, config: dict | None = None) -> None:
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=rf, config=config or {})],
        operation_timeout=30, request_timeout=30,
    )
    futures[topic].result(timeout=35)


def produce(cluster, topic: str, n: int, acks: str = "all") -> dict[int, int]:
    """Produce `n` records (keys spread over partitions); returns partition → records acknowledged."""
    producer = Producer({
        "bootstrap.servers": cluster.bootstrap, "acks": acks, "enable.idempotence": False, "linger.ms": 5,
        "message.timeout.ms": 60000,
    })
    acked: dict[int, int] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[msg.partition()] = acked.get(msg.partition(), 0) + 1

    for i in range(n):
        producer.produce(topic, key=b"k%d" % i, value=b"v-%06d-" % i + b"x" * 90, on_delivery=on_delivery)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return acked


def checkpointed_hws(cluster, topic: str, partition: int) -> list[int | None]:
    """Each broker's `replication-offset-checkpoint` entry for the partition."""
    out = []
    for i in range(BROKERS):
        log_dir = cluster.partition_dir(i, topic, partition).parent
        rows = read_checkpoint(log_dir / HIGH_WATERMARK_CHECKPOINT) or []
        out.append(next((int(o) for t, p, o in rows if t == topic and int(p) == partition), None))
    return out


def epoch_checkpoint(cluster, broker: int, topic: str, partition: int) -> list[str] | None:
    """The words of a replica's leader-epoch checkpoint; None while it is not written."""
    try:
        return (cluster.partition_dir(broker, topic, partition) / "leader-epoch-checkpoint").read_text().split()
    except FileNotFoundError:
        return None


def wait_logs_identical(cluster, topic: str, partition: int, timeout: float = 30.0) -> None:
    """Every broker holds the same log for the partition, and it is not empty."""
    assert cluster.wait_logs_identical(topic, partition, timeout=timeout), f"{topic}-{partition} is empty"


def test_acks_all_to_rf3_leaves_byte_identical_replicas_and_checkpointed_hws(cluster):
    topic = f"rf3-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, partitions=2, rf=3, config={"min.insync.replicas": "2"})
    acked = produce(cluster, topic, 3000)
    assert sum(acked.values()) == 3000
    for p in range(2):
        wait_logs_identical(cluster, topic, p)
        # Every replica learns the HW (the leader's own, followers' from fetch responses).
        wait_until(lambda p=p: checkpointed_hws(cluster, topic, p) == [acked.get(p, 0)] * BROKERS,
                   f"{topic}-{p} HW {acked.get(p, 0)} checkpointed everywhere")
        # ... and every replica's leader-epoch checkpoint comes to say where the records' epoch
        # starts (written by the log manager's background pass, after the change in memory):
        # version 0, one entry, epoch 0 from offset 0.
        wait_until(lambda p=p: all(epoch_checkpoint(cluster, i, topic, p) == ["0", "1", "0", "0"]
                                   for i in range(BROKERS)),
                   f"{topic}-{p} leader-epoch checkpoint written everywhere")


def test_restarted_follower_catches_up_byte_identical(cluster):
    topic = f"restart-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, partitions=1, rf=3)
    first = produce(cluster, topic, 500)[0]
    state = wait_until(lambda: cluster.partition_state(topic, 0), "partition state")
    follower = next(r for r in (0, 1, 2) if r != state.leader)
    cluster.broker(follower).stop()
    # acks=1 while the follower is away (acks=all would wait for the ISR to shrink first).
    second = produce(cluster, topic, 500, acks="1")[0]
    cluster.broker(follower).start()
    cluster.wait_ready(brokers=[follower])
    wait_logs_identical(cluster, topic, 0, timeout=60)
    wait_until(lambda: checkpointed_hws(cluster, topic, 0)[follower] == first + second,
               "the restarted follower's HW", timeout=60)
