"""Acceptance: with two controllers, SIGKILL of the active one elects the standby within the
ZooKeeper session timeout (plus ZooKeeper's tick and scheduling slack), and topic creation keeps
working through the new controller."""

import json
import signal
import time

from odradek.common import zk_data

from .kafka_helpers import Record, confluent_consume, confluent_produce, create_topic

SESSION_TIMEOUT_MS = 6000
SLACK_S = 4.0  # ZooKeeper expires a session up to one tick late; the machine is shared and small


def controller_state(zk) -> tuple[int | None, int]:
    try:
        data, _ = zk.get(zk_data.CONTROLLER)
        active = json.loads(data)["brokerid"]
    except Exception:  # NoNodeError while there is none
        active = None
    epoch, _ = zk.get(zk_data.CONTROLLER_EPOCH)
    return active, int(epoch)


def round_trip(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 2, timeout=30)
    records = [Record(b"k%d" % i, b"v%d" % i, (("h", b"x"),)) for i in range(50)]
    confluent_produce(bootstrap, topic, records, timeout=30)
    consumed = confluent_consume(bootstrap, topic, 2, len(records), timeout=30)
    assert sorted(c.record.value for cs in consumed.values() for c in cs) == sorted(r.value for r in records)


def test_standby_controller_takes_over(cluster_factory):
    cluster = cluster_factory(
        brokers=1, controllers=2,
        controller_overrides={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS},
    )
    round_trip(cluster.bootstrap, "before-failover")

    zk = cluster.zk_client()
    try:
        active, epoch = controller_state(zk)
        assert active in (1000, 1001)
        victim = cluster.controller_by_id(active)
        victim.kill(signal.SIGKILL)
        killed = time.monotonic()

        deadline = killed + SESSION_TIMEOUT_MS / 1000 + SLACK_S
        while True:
            new_active, new_epoch = controller_state(zk)
            if new_active is not None and new_active != active:
                break
            assert time.monotonic() < deadline, (
                f"no new controller {SESSION_TIMEOUT_MS / 1000 + SLACK_S:.0f}s after killing {active}; "
                f"read {cluster.controller_by_id(2001 - active).log_path}"
            )
            time.sleep(0.05)
        assert new_epoch > epoch, "the new controller must bump /controller_epoch"
    finally:
        zk.stop()
        zk.close()

    # Brokers accept the new controller's (higher) epoch: topic creation keeps working.
    round_trip(cluster.bootstrap, "after-failover")

    # The old controller comes back as a standby and the cluster keeps working.
    victim.start()
    time.sleep(1.0)
    assert victim.alive, f"restarted controller exited; read {victim.log_path}"
    round_trip(cluster.bootstrap, "after-rejoin")
    zk = cluster.zk_client()
    try:
        assert controller_state(zk)[0] == new_active
    finally:
        zk.stop()
        zk.close()
