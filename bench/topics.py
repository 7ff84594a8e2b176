"""Topic resources at scale: N Topics applied at once, wall time until every one is Ready, and
the operator's peak memory.

The cluster is real (ZooKeeper, one controller, brokers as processes on this machine); the
Kubernetes API is the tests' emulated one (kmock plus tests/operator/kube_emulator.py), served
from this process; the operator runs as its own process (`odradek.operator.main.run`, pointed
at the emulated API and the local brokers), so its peak resident memory (VmHWM) is its own.
Every Topic is POSTed as fast as the API takes them (the clock starts at the first); Ready means
its Ready condition is True for its generation; at the end the topics are checked in the cluster
with librdkafka (count, partitions, replication factor).

The peer, measured first on a cluster of its own (same size, fresh, stopped before the operator's
starts): the same number of topics created by librdkafka's AdminClient in CreateTopics requests
of 1,000 topics, no operator, no Kubernetes. Its time is what the cluster itself needs; the ratio
says what the operator adds.

Cases (issue 12): `small` 1,000 topics × 3 partitions, RF 3, 3 brokers (target under 60 s);
`large` 10,000 topics × 1 partition, 1 broker (target under 10 minutes, operator under 500 MB).
Run: .venv/bin/python bench/topics.py small|large [--topics N]
"""

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "operator"))  # the emulated API server of the tests

NS = "bench"
CLUSTER = "bench"
CASES = {"small": dict(topics=1000, partitions=3, replicas=3, brokers=3, target=60.0),
         "large": dict(topics=10000, partitions=1, replicas=1, brokers=1, target=600.0)}


def operator_main(url: str, ports: list[int], workers: int) -> None:
    """The operator process: Topics and KafkaClusters of namespace NS, the brokers on `ports`."""
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
        topic_bootstrap=lambda cluster: bootstrap, topic_tuning=Tuning(workers=workers, resync=600.0))


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def start_operator(url: str, ports: list[int], workers: int, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, __file__, "operator", "--url", url, "--workers", str(workers),
             "--ports", ",".join(map(str, ports))],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(operator: subprocess.Popen | None) -> None:
    """SIGTERM (kopf stops cleanly), SIGKILL after 30 s."""
    if operator is None or operator.poll() is not None:
        return
    os.killpg(operator.pid, signal.SIGTERM)
    try:
        operator.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(operator.pid, signal.SIGKILL)
        operator.wait(timeout=10)


def topic_body(i: int, partitions: int, replicas: int) -> dict:
    return {"apiVersion": "odradek.io/v1alpha1", "kind": "Topic",
            "metadata": {"name": f"bench-{i:05d}", "namespace": NS},
            "spec": {"clusterRef": CLUSTER, "partitions": partitions, "replicas": replicas,
                     "config": {"retention.ms": 3600000}}}


def ready_count(server, resource: str) -> tuple[int, int]:
    """(Ready Topics, Topics) as the emulated API holds them."""
    import kmock

    res = kmock.resource(resource)
    ready = total = 0
    for key, obj in list(server.objects.items()):
        if key[0] != res or obj.deleted:
            continue
        total += 1
        raw = obj.raw
        gen = raw["metadata"].get("generation")
        for c in (raw.get("status") or {}).get("conditions") or ():
            if c.get("type") == "Ready" and c.get("status") == "True" and c.get("observedGeneration") == gen:
                ready += 1
    return ready, total


@contextlib.contextmanager
def started_cluster(data_dir: Path, brokers: int):
    """A fresh LocalCluster, started on this thread outside any loop (its processes die with the
    thread that spawned them), stopped at the end."""
    from odradek.dev.cluster import LocalCluster
    from odradek.dev.zookeeper import free_ports

    cluster = LocalCluster(data_dir, brokers=brokers, controllers=1, broker_ports=free_ports(brokers),
                           broker_overrides={"auto.create.topics.enable": "false"})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def peer(bootstrap: str, n: int, partitions: int, replicas: int, timeout: float) -> float:
    """Seconds for librdkafka to create n topics (1,000 per CreateTopics) until the broker says
    every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    # socket.timeout.ms caps how long librdkafka waits for any answer (60 s by default); a
    # CreateTopics of 1,000 topics with RF 3 takes longer on this machine (300 s is its maximum).
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(min(timeout, 300) * 1000)})
    started = time.monotonic()
    for first in range(0, n, 1000):
        topics = [NewTopic(f"peer-{i:05d}", partitions, replicas, config={"retention.ms": "3600000"})
                  for i in range(first, min(n, first + 1000))]
        futures = admin.create_topics(topics, operation_timeout=timeout, request_timeout=timeout)
        for f in futures.values():
            f.result(timeout=timeout + 30)
    return time.monotonic() - started


def verify(bootstrap: str, n: int, partitions: int, replicas: int, timeout: float = 120.0) -> str:
    """Every bench topic as specified in a broker's Metadata; polled, as the broker librdkafka asks
    may apply the controller's UpdateMetadata later than the one the operator asked."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=60)
        ours = [t for name, t in md.topics.items() if name.startswith("bench-")]
        good = [t for t in ours if t.error is None and len(t.partitions) == partitions
                and all(len(p.replicas) == replicas for p in t.partitions.values())]
        if len(good) == n:
            return f"{len(good)} topics x {partitions} partitions, RF {replicas}"
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster holds {len(good)} of {n} topics as specified ({len(ours)} named bench-*)")
        time.sleep(1.0)


async def bench(case: dict, cluster, data_dir: Path, workers: int, timeout: float, peer_s: float | None) -> dict:
    import aiohttp
    import kmock
    from kube_emulator import KubernetesServer
    from operator_harness import TOPICS, new_server

    n, partitions, replicas, brokers = case["topics"], case["partitions"], case["replicas"], case["brokers"]
    operator = None
    try:
        server: KubernetesServer = new_server()
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
                path = f"/apis/odradek.io/v1alpha1/namespaces/{NS}/topics"

                async def apply(i):
                    async with limit:
                        await post(path, topic_body(i, partitions, replicas))

                await asyncio.gather(*(apply(i) for i in range(n)))
                applied = time.monotonic() - started
                print(f"  {n} Topics applied in {applied:.1f}s", flush=True)
                last_print = 0.0
                deadline = started + timeout
                while True:
                    ready, _total = ready_count(server, TOPICS)
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
            stop(operator)  # before its API server goes away
            checked = await asyncio.to_thread(verify, cluster.bootstrap, n, partitions, replicas)
            return {"topics": n, "partitions": partitions, "replicas": replicas, "brokers": brokers,
                    "apply_s": round(applied, 1), "all_ready_s": round(wall, 1),
                    "operator_peak_mb": round(peak), "target_s": case["target"], "checked": checked,
                    "peer_librdkafka_s": None if peer_s is None else round(peer_s, 1),
                    "ratio_to_peer": None if peer_s is None else round(wall / peer_s, 2),
                    "requests_to_api": len(list(server))}
    finally:
        stop(operator)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    for name in CASES:
        c = sub.add_parser(name)
        c.add_argument("--topics", type=int, default=CASES[name]["topics"])
        c.add_argument("--workers", type=int, default=256, help="the operator's concurrent reconciles")
        c.add_argument("--timeout", type=float, default=1800.0)
        c.add_argument("--no-peer", action="store_true", help="skip the librdkafka peer run")
    o = sub.add_parser("operator", help="(internal) the operator process")
    o.add_argument("--url", required=True)
    o.add_argument("--ports", required=True)
    o.add_argument("--workers", type=int, required=True)
    args = p.parse_args(argv)
    if args.what == "operator":
        operator_main(args.url, [int(x) for x in args.ports.split(",")], args.workers)
        return 0
    case = {**CASES[args.what], "topics": args.topics}
    print(f"{args.what}: {case['topics']} Topics x {case['partitions']} partitions, RF {case['replicas']}, "
          f"{case['brokers']} brokers", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-topics-"))
    peer_s = None
    if not args.no_peer:
        with started_cluster(tmp / "peer-cluster", case["brokers"]) as cluster:
            peer_s = peer(cluster.bootstrap, case["topics"], case["partitions"], case["replicas"], args.timeout)
        print(f"  peer: librdkafka created {case['topics']} topics in {peer_s:.1f}s", flush=True)
    with started_cluster(tmp / "cluster", case["brokers"]) as cluster:
        result = asyncio.run(bench(case, cluster, tmp, args.workers, args.timeout, peer_s))
    shutil.rmtree(tmp, ignore_errors=True)  # kept (with the logs) when the run failed
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
