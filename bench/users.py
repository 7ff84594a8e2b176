"""KafkaUser resources at scale (issue 29): N KafkaUsers applied at once, wall time until every
one is Ready, and the operator's peak memory.

Built as bench/topics.py is: a real cluster (ZooKeeper, one controller, brokers as processes) with
the ACL authorizer on (User:ANONYMOUS, the operator's PLAINTEXT connection, is the super user),
the tests' emulated Kubernetes API served from this process, the operator as its own process.
Each user is scram-sha-512 (a generated password), two ACLs (READ on its topic, READ on its
group prefix) and a consumer quota: per user one SCRAM upsert, two ACLs, one quota entity and a
Secret. Ready means its Ready condition is True for its generation; at the end the cluster is
checked with librdkafka (SCRAM credentials and ACLs of every user).

The peer, on a cluster of its own: librdkafka's AdminClient upserting the same credentials
(AlterUserScramCredentials) and creating the same ACLs (CreateAcls), 1,000 users per request, no
operator, no Kubernetes (librdkafka has no client-quota call). Its time is what the cluster itself
needs; the ratio says what the operator adds.

Run: .venv/bin/python bench/users.py [--users 1000]   (target: all Ready within 60 s)
"""

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "operator"))  # the emulated API server of the tests
sys.path.insert(0, str(ROOT / "bench"))

from topics import ready_count, stop, vm_hwm_mb  # noqa: E402  (bench/topics.py, beside this file)

NS = "bench"
CLUSTER = "bench"
TARGET_S = 60.0
BROKER_OVERRIDES = {"auto.create.topics.enable": "false",
                    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                    "super.users": "User:ANONYMOUS"}


def operator_main(url: str, ports: list[int], workers: int) -> None:
    import logging

    import kopf

    from odradek.operator.main import run
    from odradek.operator.rolling import fetch_view
    from odradek.operator.topics import Tuning

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bootstrap = [("127.0.0.1", p) for p in ports]

    async def view(body):
        return await fetch_view(bootstrap, timeout=10.0)

    run([NS], False, connection=kopf.ConnectionInfo(server=url, insecure=True), view_source=view, interval=30.0,
        topic_bootstrap=lambda cluster: bootstrap, user_tuning=Tuning(workers=workers, resync=600.0))


def start_operator(url: str, ports: list[int], workers: int, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, __file__, "operator", "--url", url, "--workers", str(workers),
             "--ports", ",".join(map(str, ports))],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def user_name(i: int) -> str:
    return f"bench-{i:05d}"


def user_body(i: int) -> dict:
    name = user_name(i)
    return {"apiVersion": "odradek.io/v1alpha1", "kind": "KafkaUser",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterRef": CLUSTER, "authentication": {"type": "scram-sha-512"},
                     "authorization": {"type": "simple", "acls": [
                         {"resource": {"type": "topic", "name": name}, "operations": ["Read"]},
                         {"resource": {"type": "group", "name": f"{name}-", "patternType": "prefix"},
                          "operations": ["Read"]}]},
                     "quotas": {"consumerByteRate": 1048576}}}


@contextlib.contextmanager
def started_cluster(data_dir: Path, brokers: int):
    from odradek.dev.cluster import LocalCluster
    from odradek.dev.zookeeper import free_ports

    cluster = LocalCluster(data_dir, brokers=brokers, controllers=1, broker_ports=free_ports(brokers),
                           broker_overrides=BROKER_OVERRIDES)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _acls(name: str) -> list:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return [AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, f"User:{name}", "*",
                       AclOperation.READ, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, f"{name}-", ResourcePatternType.PREFIXED, f"User:{name}", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)]


def peer(bootstrap: str, n: int, timeout: float) -> float:
    """Seconds for librdkafka to upsert n SCRAM credentials and create 2n ACLs, 1,000 users per request."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(min(timeout, 300) * 1000)})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    started = time.monotonic()
    for first in range(0, n, 1000):
        names = [f"peer-{i:05d}" for i in range(first, min(n, first + 1000))]
        upserts = [UserScramCredentialUpsertion(u, info, b"peer-password-" + u.encode()) for u in names]
        for f in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
            f.result()
        for f in admin.create_acls([b for u in names for b in _acls(u)], request_timeout=timeout).values():
            f.result()
    return time.monotonic() - started


def verify(bootstrap: str, n: int) -> str:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_user_scram_credentials(request_timeout=60).result()
    users = [u for u in described if u.startswith("bench-")]
    acls = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY), request_timeout=60).result()
    ours = [a for a in acls if a.principal.startswith("User:bench-")]
    if len(users) != n or len(ours) != 2 * n:
        raise RuntimeError(f"the cluster holds {len(users)} of {n} credentials and {len(ours)} of {2 * n} ACLs")
    return f"{len(users)} SCRAM-SHA-512 credentials, {len(ours)} ACLs"


async def bench(n: int, cluster, data_dir: Path, workers: int, timeout: float, peer_s: float | None) -> dict:
    import aiohttp
    import kmock
    from operator_harness import USERS, new_server

    operator = None
    try:
        server = new_server()
        server.objects[kmock.resource("v1/namespaces"), None, NS] = {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "uid": "ns-" + NS}}
        async with server, kmock.Server(server) as http:
            url = str(http.url).rstrip("/")
            log = data_dir / "operator.log"
            operator = await asyncio.to_thread(start_operator, url, cluster.broker_ports, workers, log)
            async with aiohttp.ClientSession() as session:
                async def post(path, body):
                    async with session.post(url + path, json=body) as r:
                        if r.status not in (200, 201):
                            raise RuntimeError(f"POST {path}: {r.status} {await r.text()}")

                await post(f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkaclusters", {
                    "apiVersion": "odradek.io/v1alpha1", "kind": "KafkaCluster",
                    "metadata": {"name": CLUSTER, "namespace": NS},
                    "spec": {"zookeeper": {"connect": cluster.zookeeper_connect}}})
                await asyncio.sleep(3.0)  # the operator is up and watching (its startup is not timed)
                if operator.poll() is not None:
                    raise RuntimeError(f"the operator exited with {operator.returncode}; see {log}")
                started = time.monotonic()
                limit = asyncio.Semaphore(32)
                path = f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkausers"

                async def apply(i):
                    async with limit:
                        await post(path, user_body(i))

                await asyncio.gather(*(apply(i) for i in range(n)))
                applied = time.monotonic() - started
                print(f"  {n} KafkaUsers applied in {applied:.1f}s", flush=True)
                last_print = 0.0
                deadline = started + timeout
                while True:
                    ready, _total = ready_count(server, USERS)
                    now = time.monotonic()
                    if ready == n:
                        break
                    if operator.poll() is not None:
                        raise RuntimeError(f"the operator exited with {operator.returncode}; see {log}")
                    if now > deadline:
                        raise RuntimeError(f"only {ready}/{n} Ready after {timeout:.0f}s; see {log}")
                    if now - last_print >= 10:
                        print(f"  {now - started:6.1f}s: {ready}/{n} Ready, operator VmHWM "
                              f"{vm_hwm_mb(operator.pid):.0f} MB", flush=True)
                        last_print = now
                    await asyncio.sleep(0.25)
                wall = time.monotonic() - started
                peak = vm_hwm_mb(operator.pid)
            stop(operator)
            secrets = sum(1 for key, obj in list(server.objects.items())
                          if key[0] == kmock.resource("v1/secrets") and not obj.deleted)
            checked = await asyncio.to_thread(verify, cluster.bootstrap, n)
            return {"users": n, "apply_s": round(applied, 1), "all_ready_s": round(wall, 1),
                    "operator_peak_mb": round(peak), "target_s": TARGET_S, "secrets": secrets, "checked": checked,
                    "peer_librdkafka_s": None if peer_s is None else round(peer_s, 1),
                    "ratio_to_peer": None if peer_s is None else round(wall / peer_s, 2),
                    "requests_to_api": len(list(server))}
    finally:
        stop(operator)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what")
    o = sub.add_parser("operator", help="(internal) the operator process")
    o.add_argument("--url", required=True)
    o.add_argument("--ports", required=True)
    o.add_argument("--workers", type=int, required=True)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--brokers", type=int, default=1)
    p.add_argument("--workers", type=int, default=256, help="the operator's concurrent reconciles")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--no-peer", action="store_true", help="skip the librdkafka peer run")
    args = p.parse_args(argv)
    if args.what == "operator":
        operator_main(args.url, [int(x) for x in args.ports.split(",")], args.workers)
        return 0
    print(f"{args.users} KafkaUsers (scram-sha-512, 2 ACLs, 1 quota each), {args.brokers} broker(s)", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-users-"))
    peer_s = None
    if not args.no_peer:
        with started_cluster(tmp / "peer-cluster", args.brokers) as cluster:
            peer_s = peer(cluster.bootstrap, args.users, args.timeout)
        print(f"  peer: librdkafka made {args.users} users in {peer_s:.1f}s", flush=True)
    with started_cluster(tmp / "cluster", args.brokers) as cluster:
        result = asyncio.run(bench(args.users, cluster, tmp, args.workers, args.timeout, peer_s))
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
