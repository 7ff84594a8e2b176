"""A rebalance moved by operator/data_movement.move_data with Kafka's reassignment throttle, on
real brokers: while partitions move, the involved brokers carry leader/follower.replication.
throttled.rate and the topic names the moving replicas; the move completes, and the next pass
removes every throttle (what kafka-reassign-partitions --verify does)."""

import asyncio
import time
from collections import Counter

from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

from odradek.broker.replication_quota import SAMPLE_S, SAMPLES
from odradek.operator.data_movement import move_data
from odradek.operator.rolling import fetch_view

from .kafka_helpers import admin, partition_views, wait_isr_full

RATE = 512 * 1024  # bytes/s per broker
MOVE_RATE = 64 * 1024
"""The heavy move's throttle: low enough that what the quota lets through at once (one window's
worth, up to SAMPLES x SAMPLE_S seconds of it, as Kafka's) is well under what is copied."""
FETCH_MAX = 32 * 1024
"""replica.fetch.max.bytes: a fetch sent while the quota still passes overshoots by at most this
per partition (the producer's batches are smaller: a fetch returns at least one whole batch)."""
THROTTLE_KEYS = {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
TOPIC_KEYS = {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}


def configs(bootstrap: str, resource: ConfigResource) -> dict[str, str]:
    client = admin(bootstrap)
    found = client.describe_configs([resource])[resource].result(timeout=10)
    dynamic = {ConfigSource.DYNAMIC_BROKER_CONFIG.value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return {k: v.value for k, v in found.items() if v.value and v.source in dynamic}


def test_a_throttled_rebalance_completes_and_its_throttle_is_removed(cluster_factory):
    cluster = cluster_factory(brokers=3, controllers=1, broker_overrides={"replica.fetch.max.bytes": FETCH_MAX})
    bootstrap = [("127.0.0.1", p) for p in cluster.broker_ports]
    topic = "heavy"
    # everything on brokers 0 and 1: the balance moves a third of the replicas onto broker 2
    client = admin(cluster.bootstrap)
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=6, replica_assignment=[[0, 1], [1, 0]] * 3)], operation_timeout=10)
    futures[topic].result(timeout=15)
    wait_isr_full(cluster.bootstrap, topic, 6)
    # small batches: a fetch returns at least one whole batch, so a batch's size is the overshoot
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "acks": "all",
                         "batch.size": FETCH_MAX // 2})
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
        deadline = time.monotonic() + 120
        for _ in range(300):
            began = time.monotonic()  # the pass that starts the move: copying starts within it
            view = await fetch_view(bootstrap, timeout=5.0)
            step = await move_data(bootstrap, view, 3, 3, timeout=5.0, throttle=MOVE_RATE, previous=previous)
            steps.append(step)
            if step.targets and started is None:
                started = began
                seen_throttled = await asyncio.to_thread(configs, cluster.bootstrap, ConfigResource("BROKER", "2"))
                topic_configs = await asyncio.to_thread(configs, cluster.bootstrap, ConfigResource("TOPIC", topic))
                assert set(topic_configs) >= TOPIC_KEYS, topic_configs
                assert step.progress is not None and step.progress.throttle == MOVE_RATE
            if started is not None and done is None and not step.targets and step.waiting is None:
                done = time.monotonic()
            if done is not None and step.progress is None and step.clear is None:
                return started, done, seen_throttled, steps
            previous = step.progress
            assert time.monotonic() < deadline, steps[-3:]
            await asyncio.sleep(0.3)
        raise AssertionError(steps[-3:])

    started, done, seen, steps = asyncio.run(passes())
    assert {k: seen.get(k) for k in THROTTLE_KEYS} == dict.fromkeys(THROTTLE_KEYS, str(MOVE_RATE))
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
    took = done - started
    print(f"throttled move: {copied / 1e6:.1f} MB onto broker 2 in {took:.1f}s at {MOVE_RATE} B/s per broker")
    # What broker 2's follower quota guarantees (Kafka's): each fetch is sent while the bytes of the
    # last window (up to SAMPLES x SAMPLE_S s, younger when the broker checked first only lately)
    # stay under MOVE_RATE x its length, so at most one window's worth goes at once, then MOVE_RATE
    # on average (a dropped sample still held up to SAMPLE_S of the span: the 1.1), plus one fetch
    # of FETCH_MAX per partition over. An unthrottled copy of the same takes about a second.
    burst = MOVE_RATE * SAMPLES * SAMPLE_S + 4 * FETCH_MAX
    floor = (copied - burst) / (MOVE_RATE * (1 + SAMPLE_S / (SAMPLES - 1)))
    assert floor > 10
    assert took >= floor, f"{copied} B moved in {took:.2f}s; the throttle lets through at most {burst} B at once"


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
