"""IP connection-rate quotas (KIP-612) against a real broker: `connection_creation_rate` of
`/config/ips/<ip>` (or `<default>`) set through AlterClientQuotas is enforced at accept; a
connection over the rate is held unread and closed, the others are served."""

import socket
import time

import pytest
from kazoo.client import KazooClient

from odradek.common import wire
from odradek.common.api_key import ApiKey

from .conftest import new_cluster
from .kafka_helpers import wait_quotas_loaded
from .test_client_quotas import alter_request, ask

pytestmark = pytest.mark.integration


def api_versions_frame() -> bytes:
    schema = wire.request_schema(ApiKey.API_VERSIONS, 0)
    return wire.encode_request(schema(), 1, "probe")


def served(port: int) -> bool:
    """Whether a new connection gets an answer to ApiVersions within 3 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        try:
            sock.sendall(api_versions_frame())
            return len(sock.recv(4)) == 4
        except OSError:  # closed (reset) or timed out: not served
            return False


def test_connection_creation_rate_per_ip(cluster_factory):
    cluster = cluster_factory(brokers=1, broker_overrides={"quota.window.num": 2, "quota.window.size.seconds": 1})
    port = cluster.broker_ports[0]
    (answer,) = ask(port, [alter_request([([("ip", "127.0.0.1")], [("connection_creation_rate", 3, False)])])])
    assert answer.entries[0].error_code == 0
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=10)
    try:
        assert b'"connection_creation_rate": "3"' in zk.get("/config/ips/127.0.0.1")[0].replace(b'":"', b'": "')
    finally:
        zk.stop()
        zk.close()
    wait_quotas_loaded(cluster.broker(0), "1 ip")
    time.sleep(1.5)  # the alter's own connection out of the rate
    start = time.monotonic()
    results = [served(port) for _ in range(8)]
    elapsed = time.monotonic() - start
    print(f"8 connections in {elapsed:.1f} s: {results.count(True)} served")
    assert results[0] and results.count(False) >= 3
    time.sleep(2.5)  # the window passes: served again
    assert served(port)
    # a removed quota stops applying (the default entity has none)
    (answer,) = ask(port, [alter_request([([("ip", "127.0.0.1")], [("connection_creation_rate", 0, True)])])])
    assert answer.entries[0].error_code == 0
    wait_quotas_loaded(cluster.broker(0), "0 ip")
    assert all(served(port) for _ in range(8))


@pytest.fixture(scope="module")
def plain_cluster(zookeeper, tmp_path_factory):
    """One broker for the refused quotas: each must store nothing, so they cannot disturb one
    another (one that did would fail the cases after it too)."""
    c = new_cluster(zookeeper, tmp_path_factory.mktemp("ip-quotas"), brokers=1)
    c.start()
    yield c
    c.stop()


@pytest.mark.parametrize(("entity", "op", "message"), [
    ([("ip", "not-an-ip")], ("connection_creation_rate", 5, False), "not-an-ip is not a valid IP or resolvable host."),
    ([("ip", None)], ("connection_creation_rate", -2, False), "Quota connection_creation_rate must be greater than 0"),
    ([("ip", None)], ("connection_creation_rate", 1.5, False), "Configuration connection_creation_rate must be a INT value"),
    ([("ip", None)], ("producer_byte_rate", 5, False), "Invalid configuration key producer_byte_rate"),
])
def test_bad_ip_quotas_store_nothing(plain_cluster, entity, op, message):
    cluster = plain_cluster
    port = cluster.broker_ports[0]
    (answer,) = ask(port, [alter_request([(entity, [op])])])
    assert (answer.entries[0].error_code, answer.entries[0].error_message) == (42, message)
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(timeout=10)
    try:
        assert not zk.exists("/config/ips") or not zk.get_children("/config/ips")
    finally:
        zk.stop()
        zk.close()
    assert served(port)
