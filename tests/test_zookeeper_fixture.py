import socket
from pathlib import Path

from kazoo.client import KazooClient

from odradek.dev.zookeeper import free_port, free_ports


def test_zookeeper_serves_a_chroot(zk_connect):
    zk = KazooClient(hosts=zk_connect.split("/", 1)[0], timeout=5)
    zk.start(timeout=10)
    try:
        chroot = "/" + zk_connect.split("/", 1)[1]
        zk.ensure_path(chroot + "/brokers/ids")
        assert zk.get_children(chroot + "/brokers") == ["ids"]
    finally:
        zk.stop()
        zk.close()


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    """A child binds these later: a port inside the ephemeral range could meanwhile become the
    local port of any outgoing connection (EADDRINUSE in CI)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(64) + [free_port() for _ in range(64)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < low for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))
