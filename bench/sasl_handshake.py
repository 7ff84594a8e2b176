"""Handshake rate: new authenticated connections per second on one broker (issue 25).

Each case opens connections one after another from `--clients` concurrent loops in a separate
process for `--seconds`, and counts those that completed: connect, ApiVersions, then (SASL cases)
SaslHandshake v1 + SCRAM-SHA-512 in SaslAuthenticate, then close. Cases, on one broker in the same
run, taking turns round by round:
- plaintext: connect + ApiVersions (the baseline: what a new connection costs without security);
- sasl-scram: SASL_PLAINTEXT with SCRAM-SHA-512 (4096 iterations);
- tls-scram: SASL_SSL with SCRAM-SHA-512, when the broker supports TLS listeners (`--tls`).
The client keeps the salted password of the (fixed) salt, as a long-lived client could: PBKDF2 is
the client's cost, and this measures the broker's.

Run: .venv/bin/python bench/sasl_handshake.py [--seconds 5] [--clients 8] [--rounds 3] [--tls]
"""

import argparse
import asyncio
import functools
import multiprocessing
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from procfs import cpu_seconds  # bench/procfs.py, beside this file

USER, PASSWORD = "bench", "bench-secret"


def median(values):
    s = sorted(values)
    return s[len(s) // 2]


async def _one(port: int, sasl: bool, ctx: ssl.SSLContext | None) -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from odradek.common import wire
    from odradek.common.security.sasl_client import ScramClient

    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                   server_hostname="localhost" if ctx else None)
    cid = 0

    async def call(request):
        nonlocal cid
        cid += 1
        writer.write(wire.encode_request(request, cid, "bench"))
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return wire.decode_response(type(request), await reader.readexactly(size))[1]

    try:
        await call(ApiVersionsRequest(client_software_name="bench", client_software_version="1"))
        if sasl:
            assert int((await call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))).error_code) == 0
            client = ScramClient("SCRAM-SHA-512", USER, PASSWORD)
            r = await call(SaslAuthenticateRequest(auth_bytes=client.first()))
            r = await call(SaslAuthenticateRequest(auth_bytes=client.evaluate(bytes(r.auth_bytes))))
            assert int(r.error_code) == 0, r.error_message
            client.evaluate(bytes(r.auth_bytes))
    finally:
        writer.close()


def _client_process(port: int, sasl: bool, cafile: str | None, clients: int, seconds: float, out) -> None:
    from odradek.common.security import scram

    for mech in scram.MECHANISMS.values():  # the salted password of the one salt, computed once
        object.__setattr__(mech, "salted_password", functools.lru_cache(maxsize=4)(mech.salted_password))
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None

    async def loop(deadline: float) -> int:
        done = 0
        while time.monotonic() < deadline:
            await _one(port, sasl, ctx)
            done += 1
        return done

    async def main() -> int:
        await _one(port, sasl, ctx)  # warm-up (and fills the cache)
        deadline = time.monotonic() + seconds
        return sum(await asyncio.gather(*(loop(deadline) for _ in range(clients))))

    out.put(asyncio.run(main()))


def rate(port: int, sasl: bool, cafile: str | None, clients: int, seconds: float, broker_pid: int) -> tuple[float, float]:
    """(connections/s, broker CPU milliseconds per connection)."""
    queue = multiprocessing.Queue()
    p = multiprocessing.Process(target=_client_process, args=(port, sasl, cafile, clients, seconds, queue))
    before = cpu_seconds(broker_pid)
    p.start()
    count = queue.get(timeout=seconds + 60)
    p.join(30)
    cpu = cpu_seconds(broker_pid) - before
    return count / seconds, 1000 * cpu / max(count, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tls", action="store_true", help="also SASL_SSL (needs TLS listeners)")
    args = parser.parse_args()

    from odradek.common.zk_connect import ensure_chroot
    from odradek.dev.cluster import LocalCluster, secure_cluster
    from odradek.dev.zookeeper import free_ports

    data = Path(tempfile.mkdtemp(prefix="bench-sasl-"))
    client, plain, sasl_port = free_ports(3)
    protocols = "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT"
    overrides = {"sasl.enabled.mechanisms": "SCRAM-SHA-512", "connection.failed.authentication.delay.ms": 0}
    security = None
    cafile = None
    if args.tls:  # odradek dev --security: CLIENT is SASL_SSL with SCRAM-SHA-512, INTERNAL/CONTROLLER mTLS
        security = secure_cluster(data / "security", 1, 1)
        security.scram_users[USER] = PASSWORD
        security.broker_overrides_extra["listener.security.protocol.map"] = (
            f"CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL,{protocols}")
        cafile = str(security.ca_path)
    else:
        overrides["listener.security.protocol.map"] = f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,{protocols}"
    cluster = LocalCluster(data, brokers=1, broker_ports=[client], broker_overrides=overrides, security=security)
    cluster.brokers[0].overrides["listeners"] += f",PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl_port}"
    try:
        if security is None:
            cluster.zookeeper.start()
            ensure_chroot(cluster.zookeeper_connect, timeout=15)
            subprocess.run([sys.executable, "-m", "odradek.cli", "users", "--zookeeper", cluster.zookeeper_connect,
                            "--entity-name", USER, "--add-scram", "SCRAM-SHA-512=[iterations=4096]",
                            "--password-file", "-"], input=PASSWORD + "\n", text=True, check=True,
                           capture_output=True)
        cluster.start(60)
        cases = {"plaintext": (plain, False, None), "sasl-scram": (sasl_port, True, None)}
        if args.tls:
            cases["tls-scram"] = (client, True, cafile)
        results: dict[str, list[float]] = {name: [] for name in cases}
        costs: dict[str, list[float]] = {name: [] for name in cases}
        pid = cluster.brokers[0].pid
        for r in range(args.rounds):
            for name, (port, sasl, ca) in cases.items():
                per_s, cpu_ms = rate(port, sasl, ca, args.clients, args.seconds, pid)
                results[name].append(per_s)
                costs[name].append(cpu_ms)
                print(f"round {r + 1}: {name:11} {per_s:8.0f} connections/s, broker {cpu_ms:.2f} CPU-ms each",
                      flush=True)
        base = median(results["plaintext"])
        print(f"\nmedian of {args.rounds} rounds, {args.clients} client loops, {args.seconds:.0f} s each:")
        for name, values in results.items():
            print(f"  {name:11} {median(values):8.0f} connections/s  ({median(values) / base:.2f}x plaintext), "
                  f"broker {median(costs[name]):.2f} CPU-ms per connection")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
