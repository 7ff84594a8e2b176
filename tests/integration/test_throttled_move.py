"""A rebalance moved by operator/data_movement.move_data with Kafka's reassignment throttle, on
real brokers: while partitions move, the involved brokers carry leader/follower.replication.
throttled.rate and the topic names the moving replicas; the move completes, and the next pass
removes every throttle (what kafka-reassign-partitions --verify does)."""

import asyncio
import time
from collections import Counter

from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

from odradek.operator.data_movement import move_data
from odradek.operator.rolling import fetch_view

from .kafka_helpers import admin, partition_views, wait_isr_full

RATE = 512 * 1024  # bytes/s per broker
THROTTLE_KEYS = {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
TOPIC_KEYS = {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}


def configs(bootstrap: str, resource: ConfigResource) -> dict[str, str]:
    client = admin(bootstrap)
    found = client.describe_configs([resource])[resource].result(timeout=10)
    dynamic = {ConfigSource.DYNAMIC_BROKER_CONFIG.value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return {k: v.value for k, v in found.items() if v.value and v.source in dynamic}


def test_a_throttled_rebalance_completes_and_its_throttle_is_removed(cluster_factory):
    cluster = cluster_factory(brokers=3, controllers=1)
    bootstrap = [("127.0.0.1", p) for p in cluster.broker_ports]
    topic = "heavy"
    # everything on brokers 0 and 1: the balance moves a third of the replicas onto broker 2
    client = admin(cluster.bootstrap)
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=6, replica_assignment=[[0, 1], [1, 0]] * 3)], operation_timeout=10)
    futures[topic].result(timeout=15)
    wait_isr_full(cluster.bootstrap, topic, 6)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "acks": "all"})
    value = b"x" * 1000
    for i in range(3000):  # ~3 MB, ~0.5 MB per partition
        producer.produce(topic, value, partition=i % 6)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0

    async def passes():
        previous = None
        seen_throttled: dict[str, str] = {}
        started = done = None
        steps = []
        deadline = time.monotonic() + 90
        for _ in range(200):
            view = await fetch_view(bootstrap, timeout=5.0)
            step = await move_data(bootstrap, view, 3, 3, timeout=5.0, throttle=RATE, previous=previous)
            steps.append(step)
            if step.targets and started is None:
                started = time.monotonic()
                seen_throttled = await asyncio.to_thread(configs, cluster.bootstrap, ConfigResource("BROKER", "2"))
                topic_configs = await asyncio.to_thread(configs, cluster.bootstrap, ConfigResource("TOPIC", topic))
                assert set(topic_configs) >= TOPIC_KEYS, topic_configs
                assert step.progress is not None and step.progress.throttle == RATE
            if started is not None and done is None and not step.targets and step.waiting is None:
                done = time.monotonic()
            if done is not None and step.progress is None and step.clear is None:
                return started, done, seen_throttled, steps
            previous = step.progress
            assert time.monotonic() < deadline, steps[-3:]
            await asyncio.sleep(0.3)
        raise AssertionError(steps[-3:])

    started, done, seen, steps = asyncio.run(passes())
    assert {k: seen.get(k) for k in THROTTLE_KEYS} == dict.fromkeys(THROTTLE_KEYS, str(RATE))
    # the move completed: broker 2 holds a third of the replicas
    counts = Counter(b for v in partition_views(cluster.bootstrap, topic).values() for b in v.replicas)
    assert counts == {0: 4, 1: 4, 2: 4}, counts
    # progress went through the status record: partitions done counted up
    moving = [s.progress for s in steps if s.progress is not None]
    assert moving[0].partitions == 4 and moving[-1].remaining <= moving[0].remaining
    # and the throttle is gone from every broker and the topic
    for b in range(3):
        left = configs(cluster.bootstrap, ConfigResource("BROKER", str(b)))
        assert not THROTTLE_KEYS & set(left), (b, left)
    assert not TOPIC_KEYS & set(configs(cluster.bootstrap, ConfigResource("TOPIC", topic)))
    copied = 4 * 500 * 1000
    print(f"throttled move: {copied / 1e6:.1f} MB onto broker 2 in {done - started:.1f}s at {RATE} B/s per broker")
    assert done - started >= 0.5 * copied / RATE  # broker 2 fetched it all under its follower throttle


def test_on_demand_rebalance_plan_then_approve_evens_replicas_and_leaders(cluster_factory):
    """Twelve one-partition topics all on brokers 0 and 1 (each balanced on its own, so the
    automatic spread leaves them): `plan` shows the moves and changes nothing, `approve` runs them
    throttled, and the preferred leader election evens the leaders."""
    cluster = cluster_factory(brokers=3, controllers=1)
    bootstrap = [("127.0.0.1", p) for p in cluster.broker_ports]
    client = admin(cluster.bootstrap)
    topics = [f"r{i}" for i in range(12)]
    futures = client.create_topics([NewTopic(t, num_partitions=1, replica_assignment=[[i % 2, 1 - i % 2]])
                                    for i, t in enumerate(topics)], operation_timeout=10)
    for f in futures.values():
        f.result(timeout=15)
    for t in topics:
        wait_isr_full(cluster.bootstrap, t, 1)

    async def passes():
        status = None
        progress = None
        # plan: a dry run
        view = await fetch_view(bootstrap, timeout=5.0)
        step = await move_data(bootstrap, view, 3, 3, timeout=5.0, throttle=RATE, rebalance_action="plan")
        assert not step.targets and step.rebalance["state"] == "ProposalReady", step
        status = step.rebalance
        assert await fetch_view(bootstrap, timeout=5.0) == view  # nothing moved
        action = "approve"
        deadline = time.monotonic() + 90
        for _ in range(200):
            view = await fetch_view(bootstrap, timeout=5.0)
            step = await move_data(bootstrap, view, 3, 3, timeout=5.0, throttle=RATE, previous=progress,
                                   rebalance_action=action, rebalance_status=status)
            if step.annotation is not None:
                action = step.annotation or None
            status, progress = step.rebalance, step.progress
            if status and status["state"] == "Ready" and progress is None and step.clear is None:
                return status
            assert time.monotonic() < deadline, step
            await asyncio.sleep(0.3)
        raise AssertionError(step)

    shown = asyncio.run(passes())
    assert [r["replicasAfter"] for r in shown["brokers"]] == [8, 8, 8]
    views = {t: partition_views(cluster.bootstrap, t)[0] for t in topics}
    assert Counter(b for v in views.values() for b in v.replicas) == {0: 8, 1: 8, 2: 8}
    deadline = time.monotonic() + 30
    while Counter(v.leader for v in views.values()) != {0: 4, 1: 4, 2: 4}:  # the election follows the move
        assert time.monotonic() < deadline, Counter(v.leader for v in views.values())
        time.sleep(0.5)
        views = {t: partition_views(cluster.bootstrap, t)[0] for t in topics}
    for b in range(3):
        assert not THROTTLE_KEYS & set(configs(cluster.bootstrap, ConfigResource("BROKER", str(b))))
