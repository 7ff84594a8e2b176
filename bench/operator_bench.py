"""The operator benches' shared set-up (bench/topics.py, bench/users.py): a real cluster, the tests'
emulated Kubernetes API served from this process, the operator as its own process (so its peak
memory is its own), N resources POSTed at once and polled until every one is Ready.

A bench gives its resource's plural, the bodies and which tuning of `odradek.operator.main.run` its
controller takes; it checks the cluster afterwards itself.
"""

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from procfs import vm_hwm_mb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "operator"))  # the emulated API server of the tests

NS = "bench"
CLUSTER = "bench"


def operator_main(url: str, ports: list[int], workers: int, tuning: str) -> None:
    """The operator process: the resources and KafkaClusters of namespace NS, the brokers on
    `ports`; `tuning` names the run() argument of the benched controller (topic_tuning, user_tuning)."""
    import logging

    import kopf

    from odradek.operator.main import run
    from odradek.operator.resource_controller import Tuning
    from odradek.operator.rolling import fetch_view

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bootstrap = [("127.0.0.1", p) for p in ports]

    async def view(body: Any) -> Any:
        return await fetch_view(bootstrap, timeout=10.0)

    run([NS], False, connection=kopf.ConnectionInfo(server=url, insecure=True), view_source=view, interval=30.0,
        topic_bootstrap=lambda cluster: bootstrap, **{tuning: Tuning(workers=workers, resync=600.0)})


def add_operator_command(sub: Any) -> None:
    """The (internal) `operator` subcommand a bench runs itself with in the operator process."""
    o = sub.add_parser("operator", help="(internal) the operator process")
    o.add_argument("--url", required=True)
    o.add_argument("--ports", required=True)
    o.add_argument("--workers", type=int, required=True)


def run_operator_command(args: argparse.Namespace, tuning: str) -> None:
    operator_main(args.url, [int(x) for x in args.ports.split(",")], args.workers, tuning)


def start_operator(script: str, url: str, ports: list[int], workers: int, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, script, "operator", "--url", url, "--workers", str(workers),
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


def ready_count(server: Any, resource: str) -> tuple[int, int]:
    """(Ready resources, resources) as the emulated API holds them."""
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
def started_cluster(data_dir: Path, brokers: int, overrides: dict[str, str]) -> Iterator[Any]:
    """A fresh LocalCluster, started on this thread outside any loop (its processes die with the
    thread that spawned them), stopped at the end."""
    from odradek.dev.cluster import LocalCluster
    from odradek.dev.zookeeper import free_ports

    cluster = LocalCluster(data_dir, brokers=brokers, controllers=1, broker_ports=free_ports(brokers),
                           broker_overrides=overrides)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@dataclass
class Measured:
    applied_s: float  # until the API server took the last resource
    all_ready_s: float  # until every one was Ready
    operator_peak_mb: float
    requests_to_api: int
    server: Any  # the emulated API server, its objects as the run left them


async def apply_until_ready(script: str, cluster: Any, data_dir: Path, workers: int, timeout: float,
                            plural: str, resource: str, noun: str, body: Callable[[int], dict], n: int) -> Measured:
    """Start the operator (`script operator ...`), POST the KafkaCluster, then the n bodies of
    `plural`, 32 at a time (the clock starts at the first), and poll until all are Ready; the
    operator is stopped before the emulated API server goes away."""
    import aiohttp
    import kmock
    from operator_harness import new_server

    operator = None
    try:
        server = new_server()
        server.objects[kmock.resource("v1/namespaces"), None, NS] = {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "uid": "ns-" + NS}}
        async with server, kmock.Server(server) as http:
            url = str(http.url).rstrip("/")
            log = data_dir / "operator.log"
            operator = await asyncio.to_thread(start_operator, script, url, cluster.broker_ports, workers, log)
            async with aiohttp.ClientSession() as session:
                async def post(path: str, body: dict) -> None:
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
                path = f"/apis/odradek.io/v1alpha1/namespaces/{NS}/{plural}"

                async def apply(i: int) -> None:
                    async with limit:
                        await post(path, body(i))

                await asyncio.gather(*(apply(i) for i in range(n)))
                applied = time.monotonic() - started
                print(f"  {n} {noun} applied in {applied:.1f}s", flush=True)
                last_print = 0.0
                deadline = started + timeout
                while True:
                    ready, _total = ready_count(server, resource)
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
            return Measured(applied, wall, peak, len(list(server)), server)
    finally:
        stop(operator)
