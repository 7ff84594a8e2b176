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
    zombie.produce("tx-zombie", value=b"late", partition=0)
    with pytest.raises(KafkaException) as err:
        zombie.commit_transaction(30)
    assert err.value.args[0].fatal() or "fenced" in str(err.value).lower()
    assert read_all(bootstrap, "tx-zombie", 1, "read_committed") == {0: [b"successor"]}


def test_a_transaction_commits_across_a_coordinator_crash(cluster):
    """SIGKILL of the coordinator mid-transaction: another broker leads the id's partition,
    loads the state from `__transaction_state`, and the commit goes through there."""
    import asyncio
    import signal

    from odradek.transactions import Tool

    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "tx-failover", 2, replication_factor=3)
    wait_for_leaders(bootstrap, "tx-failover", 2)
    producer = txn_producer(bootstrap, "app-failover", **{"transaction.timeout.ms": 60_000,
                                                          "message.timeout.ms": 60_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(20):
        producer.produce("tx-failover", value=f"v{i}".encode(), partition=i % 2)
    producer.flush(30)

    async def coordinator():
        tool = Tool(bootstrap, 5.0)
        try:
            return await tool.describe("app-failover")
        finally:
            await tool.close()

    before = asyncio.run(coordinator())
    assert before["state"] == "Ongoing" and sorted(before["partitions"]) == ["tx-failover-0", "tx-failover-1"]
    cluster.broker(before["coordinator"]).kill(signal.SIGKILL)
    producer.commit_transaction(90)
    deadline = time.monotonic() + 60
    while (after := asyncio.run(coordinator()))["state"] != "CompleteCommit":  # markers, then complete
        assert after["state"] == "PrepareCommit" and time.monotonic() < deadline, after
        time.sleep(0.2)
    assert after["coordinator"] != before["coordinator"]
    assert after["producer_epoch"] == before["producer_epoch"]
    committed = read_all(bootstrap, "tx-failover", 2, "read_committed")
    assert sorted(v for vs in committed.values() for v in vs) == sorted(f"v{i}".encode() for i in range(20))


def test_the_transactions_tool_lists_describes_and_aborts(cluster):
    import json
    import subprocess
    import sys

    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "tx-tool", 1, replication_factor=3)
    wait_for_leaders(bootstrap, "tx-tool", 1)
    producer = txn_producer(bootstrap, "app-tool", **{"transaction.timeout.ms": 60_000,
                                                      "message.timeout.ms": 60_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("tx-tool", value=b"hanging", partition=0)
    producer.flush(30)

    def tool(*args):
        out = subprocess.run([sys.executable, "-m", "odradek.cli", "transactions", "--bootstrap-server", bootstrap,
                              *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    listed = tool("--list", "--state", "Ongoing")
    assert [(t["transactional_id"], t["state"]) for t in listed] == [("app-tool", "Ongoing")]
    described = tool("--describe", "app-tool")
    assert described["partitions"] == ["tx-tool-0"] and described["timeout_ms"] == 60_000
    (p,) = tool("--describe-producers", "--topic", "tx-tool", "--partition", "0")
    assert p["current_txn_start_offset"] == 0 and p["producer_id"] == described["producer_id"]
    aborted = tool("--abort", "--topic", "tx-tool", "--partition", "0", "--start-offset", "0")
    assert aborted["aborted"]["producer_id"] == described["producer_id"]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "isolation.level": "read_committed"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("tx-tool", 0), timeout=10)[1] == 2  # LSO moved
    finally:
        consumer.close()
    assert read_all(bootstrap, "tx-tool", 1, "read_committed") == {0: []}
    missing = subprocess.run([sys.executable, "-m", "odradek.cli", "transactions", "--bootstrap-server", bootstrap,
                              "--describe", "nobody"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
    producer.abort_transaction(30)
