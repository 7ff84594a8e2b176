"""Issue 11, finding 6: connections cannot make a broker allocate what they only claim.

One connection made the broker allocate `socket.request.max.bytes` (100 MiB, zero-filled) per
4-byte size prefix, and 15 such connections got it OOM-killed. Now memory follows the bytes that
arrive, idle connections are closed (`connections.max.idle.ms`), and connections beyond
`max.connections.per.ip` are closed at once.
"""

import socket
import struct
import time
from pathlib import Path

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from .hostile import exchange

HOSTILE_CONNECTIONS = 20
PER_IP_LIMIT = HOSTILE_CONNECTIONS + 5
RSS_GROWTH_BOUND = 64 << 20
"""20 connections x 100 MiB claimed: the old broker grew by 2 GiB; receive buffers are 256 KiB each."""
IDLE_MS = 2000


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def closed_by_peer(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_size_prefixes_cost_no_memory_and_idle_and_excess_connections_are_closed(cluster_factory):
    cluster = cluster_factory(brokers=1, controllers=1, broker_overrides={
        "connections.max.idle.ms": IDLE_MS, "max.connections.per.ip": PER_IP_LIMIT,
    })
    cluster.wait_ready()
    broker = cluster.broker(0)
    port = cluster.broker_ports[0]
    before = rss(broker.pid)
    hostile = []
    try:
        for _ in range(HOSTILE_CONNECTIONS):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(struct.pack(">i", 100 << 20) + b"\0" * 64)
            hostile.append(s)
        # The broker reads what arrived at once; watch its memory for a while (bounded).
        peak = before
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            peak = max(peak, rss(broker.pid))
            time.sleep(0.1)
        assert peak - before < RSS_GROWTH_BOUND, f"RSS grew by {(peak - before) >> 20} MiB"
        assert exchange(port, ApiVersionsRequest()).error_code == ErrorCode.none

        # Up to max.connections.per.ip from one address; the next is closed at once.
        extra = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(PER_IP_LIMIT - HOSTILE_CONNECTIONS)]
        hostile += extra
        one_too_many = socket.create_connection(("127.0.0.1", port), timeout=5)
        hostile.append(one_too_many)
        assert closed_by_peer(one_too_many, timeout=5)

        # Idle connections (a claimed frame that never comes counts as idle) are closed.
        started = time.monotonic()
        for s in hostile[:HOSTILE_CONNECTIONS]:
            assert closed_by_peer(s, timeout=max(0.1, IDLE_MS / 1000 * 4 - (time.monotonic() - started)))
        assert exchange(port, ApiVersionsRequest()).error_code == ErrorCode.none
        assert broker.alive
    finally:
        for s in hostile:
            s.close()
