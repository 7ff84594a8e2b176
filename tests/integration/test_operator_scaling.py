"""The operator's data movement (operator/data_movement.py) with its broker orchestration
(rolling.reconcile_brokers) driving real local broker processes, as one reconcile pass does:
scale 3 → 5 spreads existing partitions onto the new brokers; a drain blocked by a topic with
replication factor 5 removes nothing; 5 → 3 under acks=all load drains brokers 4 then 3, then
removes them, with no acknowledged record lost."""

import asyncio
import time
from collections import Counter
from math import ceil

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from odradek.operator.data_movement import move_data
from odradek.operator.rolling import reconcile_brokers

from .kafka_helpers import (
    ContinuousProducer,
    admin,
    cluster_report,
    partition_views,
    verify_acknowledged,
    wait_for_partitions,
    wait_isr_full,
)
from .test_operator_roll import BROKER_OVERRIDES, LocalBrokerOrchestrator, registered

STEP_INTERVAL = 0.5


def drive(orchestrator, desired: int, until, max_steps: int, timeout: float, topic: str = "data"):
    """One reconcile pass at a time (data movement, then the broker step, both deciding from one
    fresh view, as operator/reconciler.py does), until `until(movement, step)`; bounded by steps
    and time."""
    bootstrap = [("127.0.0.1", p) for p in orchestrator.cluster.broker_ports]

    async def loop():
        deadline = time.monotonic() + timeout
        passes = []
        for _ in range(max_steps):
            view = await orchestrator.view()
            movement = await move_data(bootstrap, view, len(orchestrator.cluster.brokers), desired, timeout=5.0)
            step = await reconcile_brokers(orchestrator, orchestrator.desired_hash, desired, view)
            passes.append((movement, step))
            if until(movement, step):
                return passes
            if time.monotonic() >= deadline:
                raise AssertionError(f"not reached within {timeout}s; last passes: {passes[-3:]}\n{report()}")
            await asyncio.sleep(STEP_INTERVAL)
        raise AssertionError(f"not reached within {max_steps} passes; last: {passes[-3:]}\n{report()}")

    def report() -> str:  # what a stalled movement needs to be understood from the CI log
        return cluster_report(orchestrator.cluster, topic)

    return asyncio.run(loop())


def replicas_per_broker(bootstrap: str, topic: str) -> Counter:
    return Counter(b for v in partition_views(bootstrap, topic).values() for b in v.replicas)


def test_scale_up_spreads_then_drain_blocked_then_scale_down_under_load(cluster_factory):
    overrides = {**BROKER_OVERRIDES, "zookeeper.session.timeout.ms": 15000}
    cluster = cluster_factory(brokers=3, controllers=1, broker_overrides=overrides)
    orchestrator = LocalBrokerOrchestrator(cluster, overrides)
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        topic = "data"
        kadmin.create_topics([NewTopic(topic, 6, 2)])
        wait_isr_full(cluster.bootstrap, topic, 6)
        producer = ContinuousProducer(cluster.bootstrap, topic, 6, rate=300).start()
        try:
            producer.wait_acked(300)
            # 3 → 5: new brokers, then existing partitions moved onto them
            drive(orchestrator, 5, lambda m, s: s.done and not m.targets and m.waiting is None,
                  max_steps=200, timeout=150)
            assert registered(cluster) == {0, 1, 2, 3, 4}
            counts = replicas_per_broker(cluster.bootstrap, topic)
            assert set(counts) == {0, 1, 2, 3, 4} and max(counts.values()) <= ceil(12 / 5) + 1, counts
            # and leaders spread by the preferred leader election that follows
            wait_for_partitions(cluster.bootstrap, topic,
                                lambda v: (all(x.leader == x.replicas[0] for x in v.values())
                                           and max(Counter(x.leader for x in v.values()).values()) <= ceil(6 / 5)
                                           and {x.leader for x in v.values()} & {3, 4}),
                                "preferred leaders, spread onto the new brokers too", 30)
            producer.wait_acked(300)

            # a topic with replication factor 5 blocks the drain, and nothing is removed
            kadmin.create_topics([NewTopic("wide", 1, 5)])
            wait_isr_full(cluster.bootstrap, "wide", 1)
            blocked = drive(orchestrator, 3, lambda m, s: m.blocked is not None, max_steps=10, timeout=30)
            movement, _ = blocked[-1]
            assert "wide" in movement.blocked and not movement.targets
            for _ in range(2):
                movement, step = drive(orchestrator, 3, lambda m, s: True, max_steps=1, timeout=10)[0]
                assert movement.blocked and step.count is None
            assert len(cluster.brokers) == 5 and all(b.alive for b in cluster.brokers)
            client = admin(cluster.bootstrap)
            client.delete_topics(["wide"], operation_timeout=30)["wide"].result(timeout=40)

            # 5 → 3 under load: 4 drained, then 3, then both removed
            passes = drive(orchestrator, 3, lambda m, s: s.done, max_steps=300, timeout=240)
            drained = [m.draining for m, _ in passes if m.targets]
            assert drained and drained == sorted(drained, reverse=True) and set(drained) <= {3, 4}
            assert orchestrator.counts[-1] == 3 and len(cluster.brokers) == 3
            assert all(set(v.replicas) <= {0, 1, 2} for v in partition_views(cluster.bootstrap, topic).values())
            producer.wait_acked(300)
        finally:
            producer.stop()
        assert not producer.errors, producer.errors[:3]
        verify_acknowledged(cluster.bootstrap, producer)
    finally:
        kadmin.close()
        orchestrator.close()
