"""Acceptance for replication (issue 3): 3 brokers, a topic with RF=3 and min.insync.replicas=2,
a confluent-kafka producer (acks=all, no idempotence) writing continuously with a unique id per
record, while brokers (and the controller) are killed, paused, stopped and restarted. Afterwards a
consumer must find every acknowledged record at its acknowledged offset, in send order per
partition.

Cases: leader SIGKILL (with and without the controller), two of three down, a diverged follower,
a paused follower leaving and rejoining the ISR (leader-side AlterPartition shrink and expand), and
a rolling restart (SIGTERM → controlled shutdown) under load."""

import signal
import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import NewTopic

from odradek.dev.waiting import wait_until

from .kafka_helpers import (
    ContinuousProducer,
    admin,
    cluster_report,
    create_topic,
    leader_of,
    verify_acknowledged,
    wait_for_partitions,
    wait_isr_full,
)

PARTITIONS = 3
TOPIC_CONFIG = {"min.insync.replicas": "2"}
BROKER_OVERRIDES = {
    "replica.lag.time.max.ms": 3000,
    "replica.high.watermark.checkpoint.interval.ms": 1000,
}


def replicated_cluster(cluster_factory, topic, controllers=1, broker_overrides=None):
    cluster = cluster_factory(brokers=3, controllers=controllers,
                              broker_overrides={**BROKER_OVERRIDES, **(broker_overrides or {})})
    create_topic(cluster.bootstrap, topic, PARTITIONS, TOPIC_CONFIG, timeout=60, replication_factor=3)
    wait_isr_full(cluster.bootstrap, topic, PARTITIONS)
    return cluster


def active_controller(cluster):
    zk = cluster.zk_client()
    try:
        return cluster.active_controller(zk)
    finally:
        zk.stop()
        zk.close()


def kill_leader_and_restart(cluster_factory, topic, kill_controller):
    cluster = replicated_cluster(cluster_factory, topic, controllers=2 if kill_controller else 1)
    bootstrap = cluster.bootstrap
    producer = ContinuousProducer(bootstrap, topic, PARTITIONS).start()
    try:
        producer.wait_acked(3000)
        victim = leader_of(bootstrap, topic, 0)
        cluster.broker(victim).kill(signal.SIGKILL)
        controller = None
        if kill_controller:
            controller = cluster.controller_by_id(active_controller(cluster))
            controller.kill(signal.SIGKILL)
        # A new leader from the ISR takes over and acknowledged writes continue.
        wait_for_partitions(bootstrap, topic, lambda v: all(x.leader not in (-1, victim) for x in v.values()),
                            f"leaders other than the killed broker {victim}", timeout=60)
        producer.wait_acked(3000)
        cluster.wait_broker_gone(victim)
        cluster.broker(victim).start()
        if controller is not None:
            controller.start()
        cluster.wait_ready(timeout=60)
        producer.wait_acked(2000)
    finally:
        producer.stop()
    assert not producer.errors, f"{len(producer.errors)} failed deliveries, first: {producer.errors[:3]}"
    for p in range(PARTITIONS):  # the restarted broker dropped its unreplicated tail and caught up
        cluster.wait_logs_identical(topic, p, timeout=60)
    verify_acknowledged(bootstrap, producer)


def test_leader_sigkill_then_restart(cluster_factory):
    kill_leader_and_restart(cluster_factory, "kill-leader", kill_controller=False)


def test_leader_and_controller_sigkill_then_restart(cluster_factory):
    kill_leader_and_restart(cluster_factory, "kill-leader-controller", kill_controller=True)


def test_two_of_three_down_not_enough_replicas(cluster_factory):
    topic = "two-down"
    cluster = replicated_cluster(cluster_factory, topic)
    bootstrap = cluster.bootstrap
    producer = ContinuousProducer(bootstrap, topic, PARTITIONS).start()
    try:
        producer.wait_acked(3000)
    finally:
        producer.stop()
    assert not producer.errors

    survivor = leader_of(bootstrap, topic, 0)
    down = [b for b in range(3) if b != survivor]
    for b in down:
        cluster.broker(b).kill(signal.SIGKILL)
    for b in down:
        cluster.wait_broker_gone(b)
    wait_for_partitions(bootstrap, topic,
                        lambda v: all(x.leader == survivor and x.isr == (survivor,) for x in v.values()),
                        f"every partition led by {survivor} with the ISR shrunk to it", timeout=60)

    # Without retries the broker's answer reaches the delivery report as it is.
    refused = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                        "retries": 0, "message.timeout.ms": 20_000})
    reports = []
    for i in range(30):
        refused.produce(topic, value=b"refused-%d" % i, partition=i % PARTITIONS,
                        on_delivery=lambda err, msg: reports.append(err))
    assert refused.flush(30) == 0
    codes = {err.code() if err is not None else None for err in reports}
    assert codes == {KafkaError.NOT_ENOUGH_REPLICAS}, f"delivery results: {codes}"

    for b in down:
        cluster.broker(b).start()
    cluster.wait_ready(timeout=60)
    for p in range(PARTITIONS):  # the returning brokers caught up with the survivor
        cluster.wait_logs_identical(topic, p, timeout=60)
    consumed = verify_acknowledged(bootstrap, producer)
    assert not any(c.record.value.startswith(b"refused-") for p in consumed for c in consumed[p]), \
        "a record refused with NOT_ENOUGH_REPLICAS was stored"


def test_diverged_follower_truncates_to_leader_epoch(cluster_factory):
    """The leader takes acks=1 writes its followers never fetch (they are paused), then dies; a
    follower becomes leader and takes new writes at the same offsets. The old leader, restarted,
    must drop its diverged tail (OffsetForLeaderEpoch) and end byte-identical to the new leader."""
    topic = "diverge"
    # Pauses stay far below the lag limit and the session timeout: the followers stay in the ISR.
    cluster = replicated_cluster(cluster_factory, topic,
                                 broker_overrides={"replica.lag.time.max.ms": 30000, "replica.fetch.wait.max.ms": 200})
    bootstrap = cluster.bootstrap
    base = ContinuousProducer(bootstrap, topic, PARTITIONS, tag="base").start()
    try:
        base.wait_acked(1000)
    finally:
        base.stop()
    assert not base.errors
    for p in range(PARTITIONS):
        cluster.wait_logs_identical(topic, p)

    old_leader = leader_of(bootstrap, topic, 0)
    followers = [b for b in range(3) if b != old_leader]
    lone = Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False, "linger.ms": 0,
                     "message.timeout.ms": 5000})
    lone.list_topics(topic, timeout=10)  # metadata (and the leader connection) before the pause
    diverged = {}
    for b in followers:
        cluster.broker(b).pause()
    try:
        # Fetches the followers sent before the pause are long polls at the leader: let them
        # expire empty, or the leader would answer them with the new records, and a resumed
        # follower would read that answer from its socket.
        time.sleep(1.0)
        for i in range(200):
            lone.produce(topic, value=b"diverged-%d" % i, partition=0,
                         on_delivery=lambda err, msg: err is None and diverged.setdefault(msg.offset(), msg.value()))
        assert lone.flush(5) == 0
        cluster.broker(old_leader).kill(signal.SIGKILL)
    finally:
        for b in followers:
            cluster.broker(b).resume()
    assert len(diverged) == 200, "the old leader did not take the acks=1 writes"
    old_leader_log = cluster.log_bytes(old_leader, topic, 0)

    new_leader = wait_for_partitions(bootstrap, topic, lambda v: v[0].leader in followers,
                                     "a new leader for partition 0", timeout=60)[0].leader
    after = ContinuousProducer(bootstrap, topic, PARTITIONS, tag="after").start()
    try:
        after.wait_acked(600)
    finally:
        after.stop()
    assert not after.errors
    # The new leader's log is shorter than the diverged tail or differs where it overlaps.
    assert cluster.log_bytes(new_leader, topic, 0)[: len(old_leader_log)] != old_leader_log

    cluster.wait_broker_gone(old_leader)
    cluster.broker(old_leader).start()
    cluster.wait_ready(timeout=60)
    for p in range(PARTITIONS):
        cluster.wait_logs_identical(topic, p, timeout=60)
    consumed = verify_acknowledged(bootstrap, after)
    values = {c.record.value for c in consumed[0]}
    assert not values & set(diverged.values()), "records of the diverged tail survived"


# --- ISR shrink and expansion by the leader (AlterPartition), controlled shutdown -----------------




def isrs(cluster, topic) -> dict[int, tuple[int, ...]]:
    """The ISR of every partition as the controller wrote it in ZooKeeper (no broker is asked:
    one of them may be paused)."""
    states = {p: cluster.partition_state(topic, p) for p in range(PARTITIONS)}
    return {p: tuple(sorted(s.isr)) if s is not None else () for p, s in states.items()}


def test_paused_follower_leaves_the_isr_and_rejoins_after_resume(cluster_factory):
    """Broker 2 only follows (manual assignment, preferred leaders 0 and 1). Paused beyond
    replica.lag.time.max.ms, the leaders drop it from the ISR, so acks=all completes without it;
    resumed (its ZooKeeper session outlives the pause), it catches up and the leaders add it back."""
    topic = "paused-follower"
    cluster = cluster_factory(brokers=3, broker_overrides={**BROKER_OVERRIDES, "zookeeper.session.timeout.ms": 60000})
    client = admin(cluster.bootstrap)
    futures = client.create_topics([NewTopic(topic, PARTITIONS, replica_assignment=[[0, 1, 2], [1, 0, 2], [0, 2, 1]],
                                             config=TOPIC_CONFIG)], operation_timeout=60, request_timeout=60)
    futures[topic].result(timeout=65)
    wait_isr_full(cluster.bootstrap, topic, PARTITIONS)
    bootstrap = f"127.0.0.1:{cluster.broker_ports[0]},127.0.0.1:{cluster.broker_ports[1]}"
    producer = ContinuousProducer(bootstrap, topic, PARTITIONS, rate=500).start()
    paused = cluster.broker(2)
    try:
        producer.wait_acked(500)
        paused.pause()
        try:
            wait_until(lambda: all(isr == (0, 1) for isr in isrs(cluster, topic).values()),
                       "broker 2 out of every ISR", timeout=30)
            producer.wait_acked(1000, timeout=30)  # acks=all completes with the ISR {0, 1}
        finally:
            paused.resume()
        wait_until(lambda: all(isr == (0, 1, 2) for isr in isrs(cluster, topic).values()),
                   "broker 2 back in every ISR", timeout=60)
        producer.wait_acked(500)
    finally:
        producer.stop()
    assert paused.alive, "the paused broker died"
    assert not producer.errors, f"{len(producer.errors)} failed deliveries, first: {producer.errors[:3]}"
    wait_isr_full(cluster.bootstrap, topic, PARTITIONS)  # the brokers' Metadata agrees with ZooKeeper
    for p in range(PARTITIONS):
        cluster.wait_logs_identical(topic, p, timeout=60)
    verify_acknowledged(cluster.bootstrap, producer)


def test_rolling_restart_under_load_loses_nothing(cluster_factory):
    """SIGTERM one broker at a time: each asks the controller to move its leaderships first
    (controlled shutdown), exits by itself, restarts, catches up and rejoins every ISR before the
    next one goes. The producer sees no failed delivery; every acknowledged record is kept."""
    topic = "rolling"
    cluster = replicated_cluster(cluster_factory, topic, broker_overrides={"controlled.shutdown.retry.backoff.ms": 500})
    bootstrap = cluster.bootstrap
    producer = ContinuousProducer(bootstrap, topic, PARTITIONS, rate=500).start()

    def report() -> str:
        return cluster_report(cluster, topic)

    try:
        producer.wait_acked(500)
        for b in range(3):
            broker = cluster.broker(b)
            broker.popen.send_signal(signal.SIGTERM)
            broker.popen.wait(40)  # bounded by the broker's own controlled-shutdown limit (25 s)
            assert broker.returncode == 0, f"broker {b} exited with {broker.returncode}"
            assert "controlled shutdown succeeded" in broker.log_path.read_text(errors="replace"), \
                f"broker {b} stopped without a controlled shutdown:\n{broker.log_tail(30)}"
            producer.wait_acked(300, diagnose=report)  # the others carry the load meanwhile
            cluster.wait_broker_gone(b)
            broker.start()
            cluster.wait_ready(timeout=60)
            wait_until(lambda: all(isr == (0, 1, 2) for isr in isrs(cluster, topic).values()),
                       f"broker {b} back in every ISR", timeout=60)
            producer.wait_acked(300, diagnose=report)
    finally:
        producer.stop()
    assert not producer.errors, f"{len(producer.errors)} failed deliveries, first: {producer.errors[:3]}"
    assert not [e for e in producer.client_errors if e.fatal()], producer.client_errors
    for p in range(PARTITIONS):
        cluster.wait_logs_identical(topic, p, timeout=60)
    verify_acknowledged(bootstrap, producer)
