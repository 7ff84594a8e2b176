"""Produce throughput with the authorizer on (1,000 ACLs in its cache) against off, in one run (issue 26).

Two 1-broker clusters (LocalCluster, what `odradek dev` runs), identical but for
`authorizer.class.name`: one without an authorizer, one with Kafka's AclAuthorizer and 1,000 ACLs
written to ZooKeeper before it starts (literal and prefixed topics and groups of other principals,
the CLUSTER_ACTION its controller needs, and `bench-` topics for User:ANONYMOUS, the PLAINTEXT
client). kcat produces the same pre-generated record file to a fresh topic on each, taking turns;
the report is the median of each and the ratio on/off (target: at least 0.95). First it times one
WRITE check alone (the decision core, and the broker's cached path), the figure a shared machine
disturbs least.

Run: .venv/bin/python bench/authorizer.py [--records 1000000] [--size 100] [--partitions 4] [--repeat 3] [--acls 1000]
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from throughput import PRODUCE_OPTS, Result, median, write_records
from tls import produce


def seed_acls(cluster, count: int) -> int:
    """`count` ACLs in the cluster's ZooKeeper, in Kafka's layout; returns how many were written."""
    from odradek.broker.authorizer import zk_acl_store as store
    from odradek.broker.authorizer.acl import (
        AccessControlEntry,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )
    from odradek.common.zk_calls import BoundedCalls
    from odradek.common.zk_connect import ensure_chroot

    allow = AclPermissionType.ALLOW
    anonymous = "User:ANONYMOUS"
    acls = [
        (ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
         AccessControlEntry(anonymous, "*", AclOperation.CLUSTER_ACTION, allow)),
        (ResourcePattern(ResourceType.TOPIC, "bench-", PatternType.PREFIXED),
         AccessControlEntry(anonymous, "*", AclOperation.ALL, allow)),
    ]
    kinds = [(ResourceType.TOPIC, PatternType.LITERAL), (ResourceType.TOPIC, PatternType.PREFIXED),
             (ResourceType.GROUP, PatternType.LITERAL), (ResourceType.TRANSACTIONAL_ID, PatternType.PREFIXED)]
    ops = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE]
    for i in range(count - len(acls)):
        rt, pt = kinds[i % len(kinds)]
        acls.append((ResourcePattern(rt, f"app{i % 97}-{i}", pt),
                     AccessControlEntry(f"User:user{i % 50}", "*", ops[i % len(ops)], allow)))
    ensure_chroot(cluster.zookeeper_connect, timeout=15)
    zk = cluster.zk_client()
    try:
        calls = BoundedCalls(zk, 10)
        store.ensure_paths(calls)
        for pattern, entry in acls:
            store.update_resource(calls, pattern, lambda cur, entry=entry: cur | {entry})
    finally:
        zk.stop()
        zk.close()
    return len(acls)


def decision_costs(count: int, calls: int = 100_000) -> tuple[float, float]:
    """(µs per decision of the core, µs per cached AclAuthorizer.authorize) with `count` ACLs: the
    work a Produce adds per topic, measured alone (a shared machine blurs the throughput)."""
    from types import SimpleNamespace

    from odradek.broker.authorizer.acl import (
        AccessControlEntry,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )
    from odradek.broker.authorizer.acl_authorizer import AclAuthorizer
    from odradek.broker.authorizer.decision import AclSnapshot, Settings, authorize
    from odradek.common.network.request_context import RequestContext

    kinds = [(ResourceType.TOPIC, PatternType.LITERAL), (ResourceType.TOPIC, PatternType.PREFIXED),
             (ResourceType.GROUP, PatternType.LITERAL), (ResourceType.TRANSACTIONAL_ID, PatternType.PREFIXED)]
    acls: dict = {ResourcePattern(ResourceType.TOPIC, "bench-", PatternType.PREFIXED): {
        AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALL, AclPermissionType.ALLOW)}}
    for i in range(count - 1):
        rt, pt = kinds[i % len(kinds)]
        acls.setdefault(ResourcePattern(rt, f"app{i % 97}-{i}", pt), set()).add(
            AccessControlEntry(f"User:user{i % 50}", "*", AclOperation.READ, AclPermissionType.ALLOW))
    snapshot, settings = AclSnapshot.of(acls), Settings()
    start = time.perf_counter()
    for _ in range(calls):
        authorize(snapshot, settings, "User:ANONYMOUS", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "bench-0")
    core = (time.perf_counter() - start) / calls * 1e6
    authorizer = AclAuthorizer(settings, lambda: None)  # type: ignore[arg-type,return-value]
    authorizer.snapshot = snapshot
    context = RequestContext(SimpleNamespace(request_api_version=0, client_id=""), "/127.0.0.1",
                             principal="User:ANONYMOUS")
    start = time.perf_counter()
    for _ in range(calls):
        authorizer.authorize(context, AclOperation.WRITE, ResourceType.TOPIC, "bench-0")
    return core, (time.perf_counter() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--acls", type=int, default=1000)
    args = parser.parse_args(argv)
    if shutil.which("kcat") is None:
        print("kcat not found: run `make setup`", file=sys.stderr)
        return 1

    core, cached = decision_costs(args.acls)
    print(f"one WRITE check with {args.acls} ACLs: {core:.2f} µs in the decision core, {cached:.2f} µs cached",
          flush=True)

    from confluent_kafka.admin import AdminClient, NewTopic

    from odradek.dev.cluster import LocalCluster
    from odradek.dev.zookeeper import free_port

    with tempfile.TemporaryDirectory(prefix="odradek-bench-authz-") as tmp:
        d = Path(tmp)
        data = d / "records.txt"
        write_records(data, args.records, args.size)
        off = LocalCluster(d / "off", brokers=1, controllers=1, broker_ports=[free_port()])
        on = LocalCluster(d / "on", brokers=1, controllers=1, broker_ports=[free_port()],
                          broker_overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
        try:
            off.zookeeper.start()
            on.zookeeper.start()
            written = seed_acls(on, args.acls)
            off.start()
            on.start()
            targets = {"off": off, "on": on}
            results: dict[str, list[Result]] = {t: [] for t in targets}
            print(f"{args.records} records of {args.size} B, {args.partitions} partitions, 1 broker each; "
                  f"{written} ACLs on 'on'; kcat -P {' '.join(PRODUCE_OPTS)}; median of {args.repeat}", flush=True)
            for round_ in range(args.repeat):
                for name, cluster in targets.items():
                    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
                    topic = f"bench-{round_}"
                    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(60)
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline:
                        t = admin.list_topics(topic, timeout=10).topics.get(topic)
                        if t and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
                            break
                        time.sleep(0.2)
                    p = produce(cluster.bootstrap, None, topic, data, args.records, args.size)
                    results[name].append(p)
                    print(f"  round {round_ + 1} authorizer {name:3} produce {p.mbps:7.1f} MB/s "
                          f"({p.rps / 1e6:.2f}M rec/s)", flush=True)
            print()
            print("| | off MB/s | on MB/s | on / off |")
            print("|---|---|---|---|")
            a, b = median(results["off"]), median(results["on"])
            print(f"| produce | {a.mbps:.1f} | {b.mbps:.1f} | {b.mbps / a.mbps:.2f} |")
        finally:
            on.stop()
            off.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
