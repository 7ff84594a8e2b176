"""max.connections.per.ip applied live (Kafka's DynamicConnectionQuota, issue 28 item 10): set as a
cluster-wide dynamic default by IncrementalAlterConfigs (the operator's admin client: librdkafka
refuses the default BROKER resource, named ""), a running broker refuses
connections past it at once, and serves them all again once the key is deleted; no restart."""

import asyncio
import socket
import struct
import time

from odradek.operator.kafka_admin import KafkaAdmin

CONNECTIONS = 10
LIMIT = 5


def api_versions_answered(port: int) -> int:
    """Opens CONNECTIONS connections at once, asks ApiVersions v0 on each; how many answered."""
    request = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    frame = struct.pack(">i", len(request)) + request
    sockets = []
    answered = 0
    try:
        for _ in range(CONNECTIONS):
            sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        for s in sockets:
            try:
                s.sendall(frame)
                if len(s.recv(4)) == 4:
                    answered += 1
            except OSError:
                pass  # refused: closed by the broker
    finally:
        for s in sockets:
            s.close()
    return answered


def alter_default(port: int, value: str | None) -> None:
    """SET max.connections.per.ip at the cluster-wide default, or DELETE it (None)."""
    async def alter() -> str | None:
        client = KafkaAdmin([("127.0.0.1", port)], request_timeout=20)
        try:
            if value is None:
                return await client.alter_broker_defaults({}, ["max.connections.per.ip"])
            return await client.alter_broker_defaults({"max.connections.per.ip": value}, [])
        finally:
            await client.close()

    assert asyncio.run(alter()) is None


def wait_answered(port: int, check, what: str, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        got = api_versions_answered(port)
        if check(got):
            return got
        assert time.monotonic() < deadline, f"{what}: {got} of {CONNECTIONS} connections answered"
        time.sleep(0.3)


def test_max_connections_per_ip_changes_without_a_restart(cluster_factory):
    cluster = cluster_factory(brokers=1)
    port = cluster.broker_ports[0]
    pid = cluster.brokers[0].pid
    assert api_versions_answered(port) == CONNECTIONS
    alter_default(port, str(LIMIT))
    got = wait_answered(port, lambda n: n <= LIMIT, "the new limit applied")
    assert got < CONNECTIONS
    alter_default(port, None)
    wait_answered(port, lambda n: n == CONNECTIONS, "the limit removed")
    assert cluster.brokers[0].pid == pid and cluster.brokers[0].alive
