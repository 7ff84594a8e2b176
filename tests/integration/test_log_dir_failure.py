"""Acceptance: a full disk is Kafka's log-dir failure (issue 11, finding 7).

Broker 0 has two log directories, one of them a tmpfs of a few MiB. Filling it makes writes there
fail with ENOSPC: that directory goes offline, its partitions answer KAFKA_STORAGE_ERROR, the
broker tells the controller through `/log_dir_event_notification`, and the controller moves their
leaderships to other ISR members and takes broker 0 out of their ISRs, while broker 0 keeps
serving the partitions of its healthy directory. A LeaderAndIsr that fails on the full disk is
answered KAFKA_STORAGE_ERROR for its partition, and the controller acts on that answer too.

Mounting a tmpfs needs root (these machines run the tests as root).
"""

from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from odradek.dev.cluster import LocalCluster
from odradek.dev.small_disk import SmallDisk, can_mount
from odradek.dev.waiting import wait_until

from .conftest import new_cluster
from .kafka_helpers import (
    ContinuousProducer,
    admin,
    create_topic,
    produce_error,
    verify_acknowledged,
    wait_for_leaders,
    wait_isr_full,
)

pytestmark = pytest.mark.skipif(not can_mount(), reason="mounting a small tmpfs as a log directory needs root")

PARTITIONS = 6
BROKER_OVERRIDES = {"min.insync.replicas": 2, "replica.lag.time.max.ms": 3000}
PROBE = b"probe-999999999"
"""A value the producer's checker reads as an id it never sent (so never as a lost record)."""


@pytest.fixture
def small_disk(tmp_path):
    disk = SmallDisk(tmp_path / "small-disk").mount()
    yield disk
    disk.unmount()


def start_with_small_disk(zookeeper, tmp_path, disk: SmallDisk, small_first: bool) -> LocalCluster:
    """Three brokers; broker 0's log.dirs are a healthy directory and the small disk."""
    cluster = new_cluster(zookeeper, tmp_path / "cluster", brokers=3, broker_overrides=BROKER_OVERRIDES)
    healthy = str(tmp_path / "cluster" / "broker-0")
    dirs = [str(disk.path), healthy] if small_first else [healthy, str(disk.path)]
    cluster.brokers[0].overrides["log.dirs"] = ",".join(dirs)
    return cluster.start()


def partitions_in(directory: Path, topic: str) -> set[int]:
    return {int(p.name.rsplit("-", 1)[1]) for p in directory.glob(f"{topic}-*") if p.is_dir()}


def test_full_disk_takes_its_directory_offline_and_moves_leadership(zookeeper, tmp_path, small_disk):
    cluster = start_with_small_disk(zookeeper, tmp_path, small_disk, small_first=False)
    try:
        create_topic(cluster.bootstrap, "disk", PARTITIONS, replication_factor=3)
        wait_isr_full(cluster.bootstrap, "disk", PARTITIONS)
        on_small = partitions_in(small_disk.path, "disk")
        on_healthy = set(range(PARTITIONS)) - on_small
        assert on_small and on_healthy, f"broker 0's partitions all in one directory: {on_small}"
        led_by_0_healthy = {p for p in on_healthy if cluster.partition_state("disk", p).leader == 0}

        producer = ContinuousProducer(cluster.bootstrap, "disk", PARTITIONS, tag="disk", rate=400).start()
        try:
            producer.wait_acked(400)
            small_disk.fill()

            def moved_off_broker_0():
                states = {p: cluster.partition_state("disk", p) for p in on_small}
                return states if all(s.leader not in (0, -1) and 0 not in s.isr for s in states.values()) else None

            wait_until(moved_off_broker_0, "partitions on the full disk led elsewhere, broker 0 out of their ISRs",
                       timeout=45)
            # The broker answers for the failed directory's partitions with Kafka's error ...
            for p in on_small:
                assert produce_error(cluster.broker_ports[0], "disk", p, PROBE) == ErrorCode.kafka_storage_error
            # ... and keeps leading and following on its healthy directory.
            for p in on_healthy:
                state = cluster.partition_state("disk", p)
                assert 0 in state.isr, f"disk-{p} (healthy directory) lost broker 0 from its ISR: {state}"
                if p in led_by_0_healthy:
                    assert state.leader == 0
                    assert produce_error(cluster.broker_ports[0], "disk", p, PROBE) == ErrorCode.none
            producer.wait_acked(400, timeout=60)  # every partition takes acks=all writes again
        finally:
            producer.stop()
        verify_acknowledged(cluster.bootstrap, producer)
        assert not cluster.dead_processes()

        # An operator frees the disk and restarts the broker: it catches up and rejoins every ISR.
        small_disk.free()
        cluster.broker(0).restart()
        wait_isr_full(cluster.bootstrap, "disk", PARTITIONS, timeout=60)
    finally:
        cluster.stop()


def test_leader_and_isr_failing_on_the_full_disk_is_answered_and_acted_on(zookeeper, tmp_path, small_disk):
    cluster = start_with_small_disk(zookeeper, tmp_path, small_disk, small_first=True)
    try:
        small_disk.fill()
        # broker 0 is asked to lead the new partition; its first new log goes to the small disk
        client = admin(cluster.bootstrap)
        futures = client.create_topics([NewTopic("late", num_partitions=1, replica_assignment=[[0, 1, 2]])], operation_timeout=30)
        futures["late"].result(timeout=35)

        def led_elsewhere():
            state = cluster.partition_state("late", 0)
            return state if state is not None and state.leader in (1, 2) and 0 not in state.isr else None

        wait_until(led_elsewhere, "late-0 led by another replica without broker 0 in its ISR", timeout=45)
        assert produce_error(cluster.broker_ports[0], "late", 0, PROBE) == ErrorCode.kafka_storage_error
        assert "broker 0: replicas on failed log directories: ['late-0']" in cluster.controller(0).log_path.read_text()
        # New partitions now go to the healthy directory, where broker 0 serves as usual.
        create_topic(cluster.bootstrap, "later", 1, replication_factor=3)
        wait_for_leaders(cluster.bootstrap, "later", 1)
        wait_until(lambda: set(cluster.partition_state("later", 0).isr) == {0, 1, 2}, "later-0 with a full ISR",
                   timeout=30)
        assert not partitions_in(small_disk.path, "later")
        assert not cluster.dead_processes()
    finally:
        cluster.stop()
