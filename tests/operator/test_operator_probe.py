"""Pod probes against a real ZooKeeper: a broker is ready only when registered and serving; a
controller pod is ready as the active controller or as a healthy standby."""

import json
import socket

from kazoo.client import KazooClient

from odradek.operator import probe


def test_controller_id_is_stable_and_outside_broker_ids():
    a = probe.controller_id_for("demo-controller-7f9c-abcde")
    assert a == probe.controller_id_for("demo-controller-7f9c-abcde") and a >= 1000
    assert a != probe.controller_id_for("demo-controller-7f9c-fghij")
    assert probe.ordinal("demo-broker-12") == 12


def test_broker_ready_needs_registration_and_listener(zk_connect):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    port = server.getsockname()[1]
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        ok, message = probe.broker_ready(zk_connect, 3, port)
        assert not ok and "not serving" in message
        server.listen()
        ok, message = probe.broker_ready(zk_connect, 3, port)
        assert not ok and "not registered" in message
        zk.create("/brokers/ids/3", b"{}", makepath=True, ephemeral=True)
        ok, message = probe.broker_ready(zk_connect, 3, port)
        assert ok, message
        # ZooKeeper down: a serving broker stays in the bootstrap Service
        ok, message = probe.broker_ready("127.0.0.1:1/none", 3, port, timeout=1.0)
        assert ok and "ZooKeeper unreachable" in message
    finally:
        server.close()
        zk.stop()
        zk.close()


def test_controller_role(zk_connect):
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        zk.ensure_path("/")
        assert probe.controller_role(zk_connect, 1001) == (True, "standby (no active controller yet)")
        zk.create("/controller", json.dumps({"version": 1, "brokerid": 1001, "timestamp": "0"}).encode(),
                  ephemeral=True)
        assert probe.controller_role(zk_connect, 1001) == (True, "active")
        assert probe.controller_role(zk_connect, 1002) == (True, "standby (active: 1001)")
        ok, message = probe.controller_role("127.0.0.1:1/none", 1001, timeout=1.0)
        assert not ok and "unreachable" in message
    finally:
        zk.stop()
        zk.close()
