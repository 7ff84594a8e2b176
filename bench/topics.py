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
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from operator_bench import (  # bench/operator_bench.py, beside this file
    CLUSTER,
    NS,
    add_operator_command,
    apply_until_ready,
    run_operator_command,
    started_cluster,
)

CASES = {"small": dict(topics=1000, partitions=3, replicas=3, brokers=3, target=60.0),
         "large": dict(topics=10000, partitions=1, replicas=1, brokers=1, target=600.0)}
BROKER_OVERRIDES = {"auto.create.topics.enable": "false"}


def topic_body(i: int, partitions: int, replicas: int) -> dict:
    return {"apiVersion": "odradek.io/v1alpha1", "kind": "Topic",
            "metadata": {"name": f"bench-{i:05d}", "namespace": NS},
            "spec": {"clusterRef": CLUSTER, "partitions": partitions, "replicas": replicas,
                     "config": {"retention.ms": 3600000}}}


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
    from operator_harness import TOPICS

    n, partitions, replicas, brokers = case["topics"], case["partitions"], case["replicas"], case["brokers"]
    m = await apply_until_ready(__file__, cluster, data_dir, workers, timeout, "topics", TOPICS, "Topics",
                                lambda i: topic_body(i, partitions, replicas), n)
    checked = await asyncio.to_thread(verify, cluster.bootstrap, n, partitions, replicas)
    return {"topics": n, "partitions": partitions, "replicas": replicas, "brokers": brokers,
            "apply_s": round(m.applied_s, 1), "all_ready_s": round(m.all_ready_s, 1),
            "operator_peak_mb": round(m.operator_peak_mb), "target_s": case["target"], "checked": checked,
            "peer_librdkafka_s": None if peer_s is None else round(peer_s, 1),
            "ratio_to_peer": None if peer_s is None else round(m.all_ready_s / peer_s, 2),
            "requests_to_api": m.requests_to_api}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    for name in CASES:
        c = sub.add_parser(name)
        c.add_argument("--topics", type=int, default=CASES[name]["topics"])
        c.add_argument("--workers", type=int, default=256, help="the operator's concurrent reconciles")
        c.add_argument("--timeout", type=float, default=1800.0)
        c.add_argument("--no-peer", action="store_true", help="skip the librdkafka peer run")
    add_operator_command(sub)
    args = p.parse_args(argv)
    if args.what == "operator":
        run_operator_command(args, "topic_tuning")
        return 0
    case = {**CASES[args.what], "topics": args.topics}
    print(f"{args.what}: {case['topics']} Topics x {case['partitions']} partitions, RF {case['replicas']}, "
          f"{case['brokers']} brokers", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-topics-"))
    peer_s = None
    if not args.no_peer:
        with started_cluster(tmp / "peer-cluster", case["brokers"], BROKER_OVERRIDES) as cluster:
            peer_s = peer(cluster.bootstrap, case["topics"], case["partitions"], case["replicas"], args.timeout)
        print(f"  peer: librdkafka created {case['topics']} topics in {peer_s:.1f}s", flush=True)
    with started_cluster(tmp / "cluster", case["brokers"], BROKER_OVERRIDES) as cluster:
        result = asyncio.run(bench(case, cluster, tmp, args.workers, args.timeout, peer_s))
    shutil.rmtree(tmp, ignore_errors=True)  # kept (with the logs) when the run failed
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
