"""The short, deterministic nemesis set that `make test` runs (the long randomised soak is
`make nemesis`). Each run is a fresh 3-broker, 2-controller cluster (each process and ZooKeeper on
a network namespace of its own where the machine allows) under an acks=all workload with and
without idempotence, and a fixed schedule of faults, alone and overlapping. It passes when no
acknowledged record is lost, duplicated or out of order (with idempotence), no record a reader saw
changed, every ISR is full again within the bound, every replica holds the same bytes after a
clean stop, and no process crashed; with the liveness check (issue 32's scenario), also when every
record held at healing is acknowledged within 15 s and none expired."""

import pytest

from odradek.dev.netns import unavailable_reason
from odradek.dev.small_disk import can_mount

from .runner import RESTART_REGISTERED, SCENARIOS, Scheduled, run_once

pytestmark = pytest.mark.integration  # each run starts ZooKeeper, brokers and controllers itself

PROCESS_FAULTS = [
    Scheduled(0, "kill-broker", 5, 0),          # the leader of partition 0
    Scheduled(7, "stop-controller", 8, 1),      # the active controller hangs ...
    Scheduled(10, "kill-zookeeper", 8, 2),      # ... while ZooKeeper is down
    Scheduled(22, "term-broker", 3, 3),
    Scheduled(27, "stop-broker", 9, 4),         # past the session timeout
    Scheduled(30, "term-controller", 2, 5),
    Scheduled(38, "kill-controller", 3, 6),
]
NETWORK_FAULTS = [
    Scheduled(0, "partition-leader-zookeeper", 10, 0),
    Scheduled(12, "partition-follower-leader", 8, 1),
    Scheduled(14, "partition-controller-zookeeper", 9, 2),
    Scheduled(26, "partition-controller-brokers", 8, 3),
    Scheduled(36, "partition-leader-all-but-clients", 10, 4),
]
DISK_AND_INPUT_FAULTS = [
    Scheduled(0, "disk-full", 10, 1),
    Scheduled(2, "bad-input", 0, 2),
    Scheduled(4, "fuzz", 0, 3),
    Scheduled(12, "stop-zookeeper", 6, 4),
    Scheduled(22, "term-zookeeper", 5, 5),
]


RESTARTED_WHILE_REGISTERED = [
    Scheduled(0, "kill-controllers-leader", 2, 0),    # the leader of partition 0, back after 2 s
    Scheduled(30, "kill-controllers-leader", 1, 4),   # of partition 4, back after 1 s
]
"""Issue 32, short: `make nemesis-restart-registered` plays it 20 times with drawn timings."""


def _run(tmp_path, schedule, seed, **options):
    result = run_once(0, seed, schedule, tmp_path / "run", **options)
    assert result.ok, result.report()
    assert len(result.applied) == len(schedule), result.report()
    assert result.acknowledged > 0
    return result


def test_controllers_and_leader_restarted_while_registered(tmp_path):
    """Every controller and a leader killed, restarted while their ZooKeeper sessions live: once
    healed, every record the producers hold is acknowledged within 15 s, none expires."""
    result = _run(tmp_path, RESTARTED_WHILE_REGISTERED, 4, rate=300.0, **SCENARIOS[RESTART_REGISTERED])
    assert result.expired == 0, result.report()


def test_process_faults(tmp_path):
    _run(tmp_path, PROCESS_FAULTS, 1)


def test_process_faults_with_tls_on_every_path(tmp_path):
    """Issue 25: the process faults again with TLS on every path (clients, replication, controller
    traffic; mTLS between the processes): no acknowledged record lost."""
    _run(tmp_path, PROCESS_FAULTS, 5, tls=True)


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"namespace faults skipped: {unavailable_reason()}")
def test_network_partitions(tmp_path):
    _run(tmp_path, NETWORK_FAULTS, 2)


@pytest.mark.skipif(not can_mount(), reason="full-disk fault skipped: mounting a tmpfs needs root")
def test_full_disk_and_bad_input(tmp_path):
    _run(tmp_path, DISK_AND_INPUT_FAULTS, 3)
