"""Transactions end to end with real clients on a real cluster (ZooKeeper, controller and brokers
as processes): commits and aborts from confluent-kafka and kafka-python, read back with
read_committed and read_uncommitted; zombie fencing; a producer dying inside a transaction; the
coordinator moving to another broker."""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from .kafka_helpers import create_topic, wait_for_leaders

TXN_BROKER = {
    "transaction.state.log.num.partitions": 3,
    "offsets.topic.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
    "group.initial.rebalance.delay.ms": 0,
}


def txn_producer(bootstrap, txn_id, **extra):
    config = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
              "transaction.timeout.ms": 20_000, "message.timeout.ms": 20_000}
    config.update(extra)
    return Producer(config)


def read_all(bootstrap, topic, partitions, isolation, timeout=60.0):
    """Every record of `topic` up to its end for this isolation level: {partition: [values]}."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        consumer.assign(tps)
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high  # the LSO under read_committed
        out = {p: [] for p in range(partitions)}
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"read of {topic} did not finish: {ends}, done {done}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # partition EOF
                    pos = consumer.position([TopicPartition(topic, msg.partition())])[0].offset
                    if pos >= ends[msg.partition()]:
                        done.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            out[msg.partition()].append(msg.value())
        return out
    finally:
        consumer.close()


@pytest.fixture
def cluster(cluster_factory):
    return cluster_factory(brokers=3, broker_overrides=TXN_BROKER)


def test_commits_and_aborts_from_librdkafka_are_read_as_kafka_does(cluster):
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "tx-out", 2, replication_factor=3)
    wait_for_leaders(bootstrap, "tx-out", 2)
    producer = txn_producer(bootstrap, "app-1")
    producer.init_transactions(60)
    for round_ in range(4):
        producer.begin_transaction()
        for i in range(10):
            producer.produce("tx-out", value=f"{round_}-{i}".encode(), partition=i % 2)
        if round_ % 2:
            producer.flush(30)  # sent before the abort (librdkafka drops what it still holds)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    producer.begin_transaction()  # an empty transaction commits
    producer.commit_transaction(30)
    committed = read_all(bootstrap, "tx-out", 2, "read_committed")
    uncommitted = read_all(bootstrap, "tx-out", 2, "read_uncommitted")
    want = {p: [f"{r}-{i}".encode() for r in (0, 2) for i in range(10) if i % 2 == p] for p in range(2)}
    assert committed == want
    assert {p: len(v) for p, v in uncommitted.items()} == {0: 20, 1: 20}


def test_a_zombie_is_fenced_and_its_open_transaction_aborted(cluster):
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "tx-zombie", 1, replication_factor=3)
    wait_for_leaders(bootstrap, "tx-zombie", 1)
    zombie = txn_producer(bootstrap, "app-z")
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce("tx-zombie", value=b"zombie", partition=0)
    zombie.flush(30)
    successor = txn_producer(bootstrap, "app-z")
    successor.init_transactions(60)  # fences the zombie, aborts its transaction
    successor.begin_transaction()
    successor.produce("tx-zombie", value=b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as err:
        zombie.produce("tx-zombie", value=b"late", partition=0)
        zombie.commit_transaction(30)
    assert err.value.args[0].fatal() or "fenced" in str(err.value).lower()
    assert read_all(bootstrap, "tx-zombie", 1, "read_committed") == {0: [b"successor"]}
