"""The operator's broker orchestration (operator/rolling.py `reconcile_brokers`) driving real local
broker processes: a rolling restart under continuous acks=all load, and scaling 3 → 4 → 3.

`LocalBrokerOrchestrator` stands in for the StatefulSet: a broker's config hash is the hash of
the shared overrides its process was started with; restart = SIGTERM, bounded wait for the exit,
start with the desired overrides; set count = start or stop the highest-id brokers. The view the
decisions use comes from `rolling.fetch_view` (Kafka Metadata through the brokers' listeners).
The test checks each restart on its own, through ZooKeeper and a client's Metadata."""

import asyncio
import hashlib
import itertools
import json
import time

from odradek.common import zk_data
from odradek.operator.rolling import BrokerReconcile, BrokerState, fetch_view, reconcile_brokers

from .kafka_helpers import (
    ContinuousProducer,
    Record,
    admin,
    confluent_produce,
    create_topic,
    kafka_python_consume,
    partition_views,
    verify_acknowledged,
    wait_for_partitions,
    wait_isr_full,
)

PARTITIONS = 4
TOPIC_CONFIG = {"min.insync.replicas": "2"}
BROKER_OVERRIDES = {
    "replica.lag.time.max.ms": 3000,
    "replica.high.watermark.checkpoint.interval.ms": 1000,
}
STEP_INTERVAL = 0.5


def config_hash(shared: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(shared.items())).encode()).hexdigest()[:16]


class LocalBrokerOrchestrator:
    """`BrokerOrchestrator` over a LocalCluster's broker processes.

    A broker counts as running once its process is alive and it holds a registration made by
    that process (a czxid other than the one before the restart), like a pod that is Ready only
    when its broker is registered: a stale Metadata answer still listing the old registration
    must not let the next restart through."""

    def __init__(self, cluster, shared: dict[str, str], before_restart=None):
        self.cluster = cluster
        self.desired = {k: str(v) for k, v in shared.items()}
        self.started_with = {i: config_hash(self.desired) for i in range(len(cluster.brokers))}
        self.stale_czxid: dict[int, int | None] = {}
        self.before_restart = before_restart
        self.restarts: list[int] = []
        self.counts: list[int] = []
        self.zk = cluster.zk_client()

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    @property
    def desired_hash(self) -> str:
        return config_hash(self.desired)

    def _czxid(self, broker_id: int) -> int | None:
        stat = self.zk.exists(zk_data.broker_path(broker_id))
        return stat.czxid if stat else None

    def _running(self, broker_id: int) -> bool:
        if not self.cluster.brokers[broker_id].alive:
            return False
        czxid = self._czxid(broker_id)
        return czxid is not None and czxid != self.stale_czxid.get(broker_id)

    async def brokers(self) -> list[BrokerState]:
        return [BrokerState(i, self.started_with[i], await asyncio.to_thread(self._running, i))
                for i in range(len(self.cluster.brokers))]

    def _start(self, broker_id: int) -> None:
        process = self.cluster.brokers[broker_id]
        process.overrides.update(self.desired)
        process.start()
        self.started_with[broker_id] = self.desired_hash

    def _restart(self, broker_id: int) -> None:
        if self.before_restart is not None:
            self.before_restart(broker_id)
        self.restarts.append(broker_id)
        self.stale_czxid[broker_id] = self._czxid(broker_id)
        process = self.cluster.brokers[broker_id]
        code = process.stop(timeout=30)
        assert code == 0, f"broker {broker_id} exited with {code} on SIGTERM; read {process.log_path}"
        self._start(broker_id)

    # Processes are started on the test's own thread, blocking the loop (nothing else runs on it):
    # ManagedProcess children die with the thread that spawned them (PR_SET_PDEATHSIG), and a
    # worker thread of asyncio.to_thread ends with the loop.
    async def restart_broker(self, broker_id: int) -> None:
        self._restart(broker_id)

    def _set_count(self, count: int) -> None:
        self.counts.append(count)
        while len(self.cluster.brokers) < count:
            self.cluster.add_broker()
            self._start(len(self.cluster.brokers) - 1)
        while len(self.cluster.brokers) > count:
            removed = len(self.cluster.brokers) - 1
            self.cluster.remove_broker(timeout=30)
            self.started_with.pop(removed, None)

    async def set_broker_count(self, count: int) -> None:
        self._set_count(count)

    async def view(self):
        return await fetch_view([("127.0.0.1", p) for p in self.cluster.broker_ports], timeout=5.0)


def drive(orchestrator: LocalBrokerOrchestrator, desired_count: int, until, max_steps: int, timeout: float,
          ) -> list[BrokerReconcile]:
    """Call reconcile_brokers (a fresh view each time) until `until(result)`; bounded by steps and
    time. After an action the next step follows at once, otherwise after STEP_INTERVAL."""

    async def loop():
        results = []
        deadline = time.monotonic() + timeout
        for _ in range(max_steps):
            result = await reconcile_brokers(orchestrator, orchestrator.desired_hash, desired_count,
                                             await orchestrator.view())
            results.append(result)
            if until(result):
                return results
            assert time.monotonic() < deadline, f"not reached within {timeout}s; last steps: {results[-3:]}"
            if result.restarted is None and result.count is None:
                await asyncio.sleep(STEP_INTERVAL)
        raise AssertionError(f"not reached within {max_steps} steps; last steps: {results[-3:]}")

    return asyncio.run(loop())


def registered(cluster) -> set[int]:
    zk = cluster.zk_client()
    try:
        return cluster.registered_brokers(zk)
    finally:
        zk.stop()
        zk.close()


def test_rolling_restart_under_acks_all_load(cluster_factory):
    cluster = cluster_factory(brokers=3, broker_overrides=BROKER_OVERRIDES)
    topic = "rolled"
    create_topic(cluster.bootstrap, topic, PARTITIONS, TOPIC_CONFIG, timeout=60, replication_factor=3)
    wait_isr_full(cluster.bootstrap, topic, PARTITIONS)
    # The roll's min.insync.replicas gate reads the topic's own value (DescribeConfigs).
    view = asyncio.run(fetch_view([("127.0.0.1", p) for p in cluster.broker_ports], timeout=5.0))
    assert view.min_insync[topic] == 2 and len(view.partitions) >= PARTITIONS
    checked: list[int] = []

    def before_restart(broker_id: int) -> None:
        # Independent of the orchestrator's view: ZooKeeper registrations, the controller's
        # partition states, and a client's own Metadata answer.
        assert registered(cluster) == {0, 1, 2}, f"restarting {broker_id} while not all brokers are registered"
        for p in range(PARTITIONS):
            state = cluster.partition_state(topic, p)
            assert sorted(state.isr) == [0, 1, 2], f"restarting {broker_id} while {topic}-{p} has ISR {state.isr}"
        # ZooKeeper is ahead of every broker's MetadataCache (UpdateMetadata follows its writes), so
        # the client's answer gets a second to agree; a premature restart fails above regardless.
        deadline = time.monotonic() + 1.0
        while True:
            brokers = set(admin(cluster.bootstrap).list_topics(topic, timeout=5).brokers)
            views = partition_views(cluster.bootstrap, topic)
            if brokers == {0, 1, 2} and all(set(v.isr) == set(v.replicas) == {0, 1, 2} for v in views.values()):
                break
            assert time.monotonic() < deadline, f"restarting {broker_id}: Metadata says brokers {brokers}, {views}"
            time.sleep(0.1)
        checked.append(broker_id)

    orchestrator = LocalBrokerOrchestrator(cluster, BROKER_OVERRIDES, before_restart)
    producer = ContinuousProducer(cluster.bootstrap, topic, PARTITIONS, rate=500).start()
    try:
        producer.wait_acked(500)
        drive(orchestrator, 3, lambda r: r.done, max_steps=10, timeout=30)
        # nothing to roll yet: every broker runs the desired config, none restarted or added
        assert orchestrator.restarts == [] and orchestrator.counts == []
        assert set(orchestrator.started_with.values()) == {orchestrator.desired_hash}
        # A broker config change that needs a restart.
        orchestrator.desired["log.segment.bytes"] = str(1 << 20)
        results = drive(orchestrator, 3, lambda r: r.done, max_steps=300, timeout=75)
        producer.wait_acked(500)
    finally:
        producer.stop()
        orchestrator.close()

    assert orchestrator.restarts == [0, 1, 2] and checked == [0, 1, 2]
    assert orchestrator.counts == []
    assert all(b.overrides["log.segment.bytes"] == str(1 << 20) for b in cluster.brokers)
    # Between two restarts the loop waited (for the restarted broker's registration, then for
    # catch-up where its partitions were under-replicated); it never restarted back to back.
    restart_steps = [i for i, r in enumerate(results) if r.restarted is not None]
    for a, b in itertools.pairwise(restart_steps):
        assert any(r.waiting for r in results[a + 1:b]), results[a:b + 1]
    assert not producer.errors, f"{len(producer.errors)} failed deliveries, first: {producer.errors[:3]}"
    fatal = [e for e in producer.client_errors if e.fatal()]
    assert not fatal, fatal
    waits = sorted({r.waiting.split(" (")[0] for r in results if r.waiting})
    print("reconcile waited for:", waits)
    wait_isr_full(cluster.bootstrap, topic, PARTITIONS)
    verify_acknowledged(cluster.bootstrap, producer)


def test_scale_up_then_down_refused_while_the_removed_broker_holds_replicas(cluster_factory):
    cluster = cluster_factory(brokers=3, broker_overrides=BROKER_OVERRIDES)
    orchestrator = LocalBrokerOrchestrator(cluster, BROKER_OVERRIDES)
    try:
        results = drive(orchestrator, 4, lambda r: r.done, max_steps=120, timeout=60)
        assert orchestrator.counts == [4] and results[0].count == 4 and orchestrator.restarts == []
        assert registered(cluster) == {0, 1, 2, 3}

        # A new topic uses the new broker: one partition per broker with RF=1.
        topic = "spread"
        create_topic(cluster.bootstrap, topic, 4, timeout=60, replication_factor=1)
        views = wait_for_partitions(cluster.bootstrap, topic, lambda v: len(v) == 4 and all(x.leader >= 0 for x in v.values()),
                                    "leaders for every partition")
        on_new = [p for p, v in views.items() if v.replicas == (3,)]
        assert on_new, f"no partition on broker 3: {views}"
        records = [Record(b"key-%d" % i, b"v-%d" % i, ()) for i in range(40)]  # keys spread over partitions
        delivered = confluent_produce(cluster.bootstrap, topic, records, {"acks": "all"}, timeout=30)
        assert any(d.partition in on_new for d in delivered)
        consumed = kafka_python_consume(cluster.bootstrap, topic, 4, len(records), timeout=30)
        assert sorted(c.record.value for p in consumed for c in consumed[p]) == sorted(r.value for r in records)

        # 4 → 3 refused while broker 3 holds a replica; the cluster keeps four brokers.
        held = drive(orchestrator, 3, lambda r: r.refused is not None, max_steps=10, timeout=20)
        for _ in range(2):
            held += drive(orchestrator, 3, lambda r: True, max_steps=1, timeout=10)
        assert all(r.refused and "[3]" in r.refused and not r.done and r.count is None for r in held[-3:])
        assert orchestrator.counts == [4] and len(cluster.brokers) == 4 and cluster.brokers[3].alive

        # Once the topic is gone, broker 3 holds nothing and the scale-down goes through.
        client = admin(cluster.bootstrap)  # must outlive the future
        client.delete_topics([topic], operation_timeout=30)[topic].result(timeout=40)
        results = drive(orchestrator, 3, lambda r: r.done, max_steps=120, timeout=60)
        assert orchestrator.counts == [4, 3] and orchestrator.restarts == []
        assert len(cluster.brokers) == 3
        cluster.wait_broker_gone(3, timeout=30)
    finally:
        orchestrator.close()


class PausableOrchestrator(LocalBrokerOrchestrator):
    """A paused (SIGSTOP) broker is a pod that runs but fails its readiness probe: not running,
    yet nothing says it cannot be serving (it may still be in an ISR)."""

    def _running(self, broker_id: int) -> bool:
        return not self.cluster.brokers[broker_id].paused and super()._running(broker_id)

    async def view(self):  # a paused broker accepts connections and never answers: skip it
        return await fetch_view([("127.0.0.1", port) for b, port in zip(self.cluster.brokers, self.cluster.broker_ports)
                                 if not b.paused], timeout=5.0)


def test_an_unready_broker_that_is_the_last_in_sync_follower_is_not_restarted(cluster_factory):
    """Issue 28: a stale broker merely not Ready (here a paused process) was deleted at once; it
    may be the last in-sync follower of a partition, so every such restart waits (only pods that
    cannot be serving skip the availability check)."""
    cluster = cluster_factory(brokers=3, broker_overrides=BROKER_OVERRIDES)
    topic = "lastisr"
    create_topic(cluster.bootstrap, topic, 1, TOPIC_CONFIG, timeout=60, replication_factor=3)
    view = wait_isr_full(cluster.bootstrap, topic, 1)[0]
    leader = view.leader
    follower, lagging = [r for r in view.replicas if r != leader]
    orchestrator = PausableOrchestrator(cluster, BROKER_OVERRIDES)
    orchestrator.desired["log.segment.bytes"] = str(1 << 20)  # every broker is stale
    try:
        cluster.brokers[lagging].pause()
        deadline = time.monotonic() + 20
        while lagging in cluster.partition_state(topic, 0).isr:  # the leader shrinks the ISR
            assert time.monotonic() < deadline, "the paused follower never left the ISR"
            time.sleep(0.2)
        cluster.brokers[follower].pause()  # now the last in-sync follower (min.insync.replicas 2)
        held: list[BrokerReconcile] = []
        started = time.monotonic()
        while time.monotonic() - started < 4:
            held += drive(orchestrator, 3, lambda r: True, max_steps=1, timeout=10)
            time.sleep(STEP_INTERVAL)
        assert orchestrator.restarts == [], f"restarted {orchestrator.restarts}: {held[-3:]}"
        assert all(r.waiting and r.restarted is None for r in held), held[-3:]
        assert follower in cluster.partition_state(topic, 0).isr, "the paused follower was still in sync"
    finally:
        for b in cluster.brokers:
            if b.paused:
                b.resume()
    try:
        wait_isr_full(cluster.bootstrap, topic, 1)
        drive(orchestrator, 3, lambda r: r.done, max_steps=300, timeout=90)
        assert sorted(orchestrator.restarts) == [0, 1, 2]
    finally:
        orchestrator.close()
