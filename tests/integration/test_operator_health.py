"""The pod probes' health endpoint on real broker and controller processes (issue 28): /readyz says
registered and caught up (a broker) or connected, active or standby (a controller); a paused
process (SIGSTOP: a hung event loop, as far as the kubelet can tell) fails /healthz within the
probe's timeout, where the TCP connect the old liveness probe made still succeeded."""

import json
import socket
import time
import urllib.error
import urllib.request
import uuid

from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import free_ports

from .conftest import BROKER_DEFAULTS, CONTROLLER_DEFAULTS


def get(url: str, timeout: float = 5.0) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.2)


def test_health_endpoints_of_a_broker_and_controllers(zookeeper, tmp_path):
    cluster = LocalCluster(tmp_path / "c", brokers=1, controllers=2, broker_ports=free_ports(1),
                           zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
                           broker_overrides=dict(BROKER_DEFAULTS), controller_overrides=dict(CONTROLLER_DEFAULTS),
                           metrics=True)
    cluster.start()
    try:
        base = {name: url.rsplit("/", 1)[0] for name, url in cluster.metrics_urls.items()}
        def ready(name: str) -> dict:
            return wait_for(lambda: (r := get(base[name] + "/readyz"))[0] == 200 and r, 30, f"{name} ready")[1]

        assert ready("broker-0") == {"status": "ready", "brokerId": 0, "registered": True, "caughtUp": True,
                                     "serving": True}
        roles = sorted(ready(f"controller-{j}")["role"] for j in range(2))
        assert roles == ["active", "standby"]

        broker = cluster.brokers[0]
        broker.pause()
        try:
            host, port = base["broker-0"].removeprefix("http://").rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=2):
                pass  # what a tcpSocket probe sees: the kernel still accepts
            begun = time.monotonic()
            try:
                get(base["broker-0"] + "/healthz", timeout=2.0)
                raise AssertionError("a paused broker answered its liveness probe")
            except (TimeoutError, urllib.error.URLError):
                pass
            assert time.monotonic() - begun < 3.0
        finally:
            broker.resume()
        assert get(base["broker-0"] + "/healthz", timeout=10.0) == (200, {"status": "alive"})
    finally:
        cluster.stop()
